//! SIGINT/SIGTERM set a stop flag; every loop polls it, so results are always written.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::Relaxed);
    STOP.store(true, Ordering::Release);
}

/// Install the handlers (without SA_RESTART: blocking waits return so loops see the flag).
pub fn install() -> anyhow::Result<()> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to atomics, which is async-signal-safe.
        unsafe { sigaction(sig, &action) }?;
    }
    Ok(())
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Acquire)
}

/// Ask every loop to stop (same effect as a signal).
pub fn request_stop() {
    STOP.store(true, Ordering::Release);
}

/// The signal that requested the stop, if any.
pub fn signal() -> Option<i32> {
    match SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

/// Tests run several masters in one process: reset between runs.
pub fn reset() {
    STOP.store(false, Ordering::Release);
    SIGNAL.store(0, Ordering::Relaxed);
}
