//! SIGINT, SIGTERM, SIGHUP and SIGQUIT set a stop flag; every loop polls it, so results are
//! always written. SIGHUP (a dropped ssh session) and SIGQUIT are handled like SIGTERM: a run
//! stopped by any of them keeps what it measured.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The signals that stop a run gracefully.
pub const STOP_SIGNALS: [nix::sys::signal::Signal; 4] = [
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGHUP,
    nix::sys::signal::Signal::SIGQUIT,
];

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::Relaxed);
    STOP.store(true, Ordering::Release);
}

/// Install the handlers (without SA_RESTART: blocking waits return so loops see the flag).
pub fn install() -> anyhow::Result<()> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, sigaction};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in STOP_SIGNALS {
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

/// The name of a signal number (`SIGTERM`), or `signal N`.
pub fn name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// The exit code a shell reports for a process ended by `sig` (128 + N), which a run stopped by
/// that signal exits with after writing its results.
pub fn exit_code(sig: i32) -> u8 {
    (128 + sig).clamp(0, 255) as u8
}

/// Tests run several masters in one process: reset between runs.
pub fn reset() {
    STOP.store(false, Ordering::Release);
    SIGNAL.store(0, Ordering::Relaxed);
}

/// Restore the default action of SIGPIPE: short commands that only print (`config example`,
/// `config check`) then end quietly when their reader goes away (`| head`), as coreutils do. Rust ignores SIGPIPE by default, which turns a closed pipe into a panic in
/// `println!`. Long-running commands keep it ignored and never print with `println!`.
pub fn default_sigpipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_DFL installs no handler code.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}
