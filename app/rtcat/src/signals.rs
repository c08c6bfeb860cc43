//! SIGINT, SIGTERM, SIGHUP and SIGQUIT set a stop flag; every loop polls it, so results are
//! always written. SIGHUP (a dropped ssh session) and SIGQUIT are handled like SIGTERM: a run
//! stopped by any of them keeps what it measured.

use rtcat_master::{Stop, StopFlags};

/// The process's stop flags: raised by the handlers, polled through [`handle`].
static FLAGS: StopFlags = StopFlags::new();

/// The signals that stop a run gracefully.
pub const STOP_SIGNALS: [nix::sys::signal::Signal; 4] = [
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGHUP,
    nix::sys::signal::Signal::SIGQUIT,
];

extern "C" fn on_signal(sig: libc::c_int) {
    FLAGS.signalled(sig);
}

/// The stop handle the signals raise, for the master and every loop of the process.
pub fn handle() -> Stop {
    Stop::from_static(&FLAGS)
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

/// Whether a signal (or [`request_stop`]) asked the process to stop.
pub fn stop_requested() -> bool {
    handle().is_requested()
}

/// Ask every loop to stop (same effect as a signal).
pub fn request_stop() {
    FLAGS.request();
}

/// The signal that requested the stop, if any.
pub fn signal() -> Option<i32> {
    handle().signal()
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
    FLAGS.clear();
}

/// Restore the default action of SIGPIPE: short commands that only print (`config example`,
/// `config check`) then end quietly when their reader goes away (`| head`), as coreutils do. Rust ignores SIGPIPE by default, which turns a closed pipe into a panic in
/// `println!`. Long-running commands keep it ignored and never print with `println!`.
pub fn default_sigpipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_DFL installs no handler code.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}
