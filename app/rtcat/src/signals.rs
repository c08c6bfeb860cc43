//! Every signal the `rtcat` commands handle, in one place: the master (`run`, `bench`), the
//! ladder and the load.
//!
//! SIGINT, SIGTERM, SIGHUP and SIGQUIT raise the process's stop flags ([`handle`], the master's
//! [`Stop`]) and count; every loop polls them, so results are always written. SIGHUP (a dropped
//! ssh session) and SIGQUIT are handled like SIGTERM. What a second signal does is the command's
//! choice ([`Second`]): it kills a bench or a load (an impatient Ctrl-C Ctrl-C), while the ladder
//! counts it and kills only its child bench, because it must still restore what it tuned.
//! Installed without SA_RESTART: blocking waits return so loops see the flag at once (std's
//! reads, writes, sleeps and waits retry EINTR by themselves).

use rtcat_master::{Stop, StopFlags};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The process's stop flags: raised by the handlers, polled through [`handle`].
static FLAGS: StopFlags = StopFlags::new();
/// Stop signals received so far.
static COUNT: AtomicU32 = AtomicU32::new(0);
/// Whether a second stop signal ends the process at once ([`Second::Kills`]).
static SECOND_KILLS: AtomicBool = AtomicBool::new(false);

/// The signals that stop a run gracefully.
pub const STOP_SIGNALS: [nix::sys::signal::Signal; 4] = [
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGHUP,
    nix::sys::signal::Signal::SIGQUIT,
];

/// What a second stop signal does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Second {
    /// Ends the process with the signal's default action (the first one asked nicely).
    Kills,
    /// Only counted ([`count`]): the command decides.
    Counts,
}

extern "C" fn on_signal(sig: libc::c_int) {
    let n = COUNT.fetch_add(1, Ordering::AcqRel) + 1;
    FLAGS.signalled(sig);
    if n >= 2 && SECOND_KILLS.load(Ordering::Relaxed) {
        // SAFETY: signal() and raise() are async-signal-safe (signal-safety(7)); the default
        // action of every stop signal ends the process.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
}

/// Install the handlers.
pub fn install(second: Second) -> anyhow::Result<()> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, sigaction};
    SECOND_KILLS.store(second == Second::Kills, Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in STOP_SIGNALS {
        // SAFETY: the handler touches only atomics, signal() and raise(): async-signal-safe.
        unsafe { sigaction(sig, &action) }?;
    }
    Ok(())
}

/// The stop handle the signals raise, for the master and every loop of the process.
pub fn handle() -> Stop {
    Stop::from_static(&FLAGS)
}

/// Whether a signal (or [`request_stop`]) asked the process to stop.
pub fn stop_requested() -> bool {
    handle().is_requested()
}

/// Stop signals received so far.
pub fn count() -> u32 {
    COUNT.load(Ordering::Acquire)
}

/// Ask every loop to stop (same effect as a signal).
pub fn request_stop() {
    FLAGS.request();
}

/// The last signal that requested the stop, if any.
pub fn signal() -> Option<i32> {
    handle().signal()
}

pub use rtlab::interrupt::{exit_code, signal_name as name};

/// The process's stop signals, as the lab's commands (`load`, `ladder`) poll them.
#[derive(Debug, Default, Clone, Copy)]
pub struct Process;

impl rtlab::interrupt::Interrupt for Process {
    fn count(&self) -> u32 {
        count()
    }
    fn last(&self) -> Option<i32> {
        signal()
    }
}

/// Tests run several masters in one process: reset between runs.
pub fn reset() {
    FLAGS.clear();
    COUNT.store(0, Ordering::Release);
}

/// Restore the default action of SIGPIPE: short commands that only print (`config example`,
/// `config check`) then end quietly when their reader goes away (`| head`), as coreutils do.
/// Rust ignores SIGPIPE by default, which turns a closed pipe into a panic in `println!`.
/// Long-running commands keep it ignored and never print with `println!`.
pub fn default_sigpipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_DFL installs no handler code.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}
