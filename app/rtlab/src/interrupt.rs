//! Stop signals as the lab's long-running commands (`rtcat load`, `rtcat ladder`) see them. The
//! handlers belong to the program (the `rtcat` binary installs them, with its rule for a second
//! signal); the commands only poll what they have received through [`Interrupt`].

/// The stop signals (SIGINT, SIGTERM, ...) the process has received.
pub trait Interrupt {
    /// How many so far (0: none).
    fn count(&self) -> u32;
    /// The last one's number, if any.
    fn last(&self) -> Option<i32>;
}

/// No signal ever: for callers without handlers (tests, a load run from a library).
#[derive(Debug, Default, Clone, Copy)]
pub struct Never;

impl Interrupt for Never {
    fn count(&self) -> u32 {
        0
    }
    fn last(&self) -> Option<i32> {
        None
    }
}

/// The name of a signal number (`SIGTERM`), or `signal N`.
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// The exit code a shell reports for a process ended by `sig` (128 + N), which a command stopped
/// by that signal exits with after writing its results.
pub fn exit_code(sig: i32) -> u8 {
    (128 + sig).clamp(0, 255) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes() {
        assert_eq!(signal_name(libc::SIGINT), "SIGINT");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(1000), "signal 1000");
        assert_eq!(exit_code(libc::SIGINT), 130);
        assert_eq!(exit_code(libc::SIGTERM), 143);
    }
}
