//! Stopping a run from outside: a handle the caller keeps and the master polls, instead of a
//! process-global flag, so that one process can run (and stop) several masters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The flags behind a [`Stop`]. A program that stops from a signal handler keeps them in a
/// `static` ([`Stop::from_static`]): the handler then touches only these atomics.
#[derive(Debug, Default)]
pub struct StopFlags {
    requested: AtomicBool,
    signal: AtomicI32,
}

impl StopFlags {
    /// Flags nobody has raised.
    pub const fn new() -> Self {
        StopFlags {
            requested: AtomicBool::new(false),
            signal: AtomicI32::new(0),
        }
    }

    /// Raise: a stop is requested (async-signal-safe).
    pub fn request(&self) {
        self.requested.store(true, Ordering::Release);
    }

    /// Raise because of signal `sig` (async-signal-safe).
    pub fn signalled(&self, sig: i32) {
        self.signal.store(sig, Ordering::Relaxed);
        self.request();
    }

    /// Lower again (between runs of one process).
    pub fn clear(&self) {
        self.requested.store(false, Ordering::Release);
        self.signal.store(0, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone)]
enum Flags {
    Owned(Arc<StopFlags>),
    Static(&'static StopFlags),
}

/// A stop request shared between the caller and the master. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Stop(Flags);

impl Default for Stop {
    fn default() -> Self {
        Self::new()
    }
}

impl Stop {
    /// A handle nobody has asked to stop yet.
    pub fn new() -> Self {
        Stop(Flags::Owned(Arc::new(StopFlags::new())))
    }

    /// A handle on flags in a `static`, which a signal handler raises.
    pub fn from_static(flags: &'static StopFlags) -> Self {
        Stop(Flags::Static(flags))
    }

    #[inline]
    fn flags(&self) -> &StopFlags {
        match &self.0 {
            Flags::Owned(f) => f,
            Flags::Static(f) => f,
        }
    }

    /// Ask the run to stop: the cyclic loop ends before its next exchange, the segment is shut
    /// down (outputs zero, SAFE-OP, INIT) and the results are complete.
    pub fn request(&self) {
        self.flags().request();
    }

    /// Ask the run to stop because of signal `sig`.
    pub fn signalled(&self, sig: i32) {
        self.flags().signalled(sig);
    }

    /// Whether a stop was requested.
    #[inline]
    pub fn is_requested(&self) -> bool {
        self.flags().requested.load(Ordering::Acquire)
    }

    /// The signal that requested the stop, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.flags().signal.load(Ordering::Relaxed) {
            0 => None,
            s => Some(s),
        }
    }
}
