//! How every command ends, and the one place that turns it into the exit status:
//! 0 success, 1 a runtime failure, 2 bad usage or input, 128 + N when signal N stopped a
//! command before it finished (as a shell reports it). Commands return [`Outcome`]; `main`
//! calls [`exit`], which says the message on stderr and picks the code. No command prints its
//! own failure line or names an exit code.

use std::process::ExitCode;

/// What kind of failure: the user's input (exit 2) or the run itself (exit 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bad usage or input: a flag, a configuration value, a file's content, a position.
    Usage,
    /// The command was right but failed: the bus, the system, a file that cannot be written.
    Runtime,
}

/// Why a command did not succeed.
#[derive(Debug)]
pub enum Failure {
    /// Bad usage or input; the message names the flag, key or value (printed as `rtcat: …`).
    Usage(String),
    /// A runtime failure (printed as `rtcat: …`).
    Runtime(String),
    /// The command has already said why on its own terms (a report's verdicts, doctor's FAIL
    /// lines, the ladder's `rtcat ladder:` lines): only the exit status is left to give.
    Said(Kind),
    /// A stop signal ended the command before it finished (`bench`: 128 + N).
    Signalled(i32),
}

/// The result of one command.
pub type Outcome = Result<(), Failure>;

impl Failure {
    /// A usage failure from anything printable.
    pub fn usage(msg: impl std::fmt::Display) -> Failure {
        Failure::Usage(msg.to_string())
    }

    /// A runtime failure from anything printable.
    pub fn runtime(msg: impl std::fmt::Display) -> Failure {
        Failure::Runtime(msg.to_string())
    }

    /// A failure of `kind` with this message.
    pub fn of(kind: Kind, msg: impl std::fmt::Display) -> Failure {
        match kind {
            Kind::Usage => Failure::usage(msg),
            Kind::Runtime => Failure::runtime(msg),
        }
    }

    /// The outcome of a library command that printed its own findings and returned the
    /// status the project's convention gives them (`rtlab`, `rttune`): 0, 1, 2, or 128 + N
    /// when signal N ended it (`report` into a closed pipe: SIGPIPE, 141).
    pub fn from_status(status: i32) -> Outcome {
        match status {
            0 => Ok(()),
            2 => Err(Failure::Said(Kind::Usage)),
            129..=192 => Err(Failure::Signalled(status - 128)),
            _ => Err(Failure::Said(Kind::Runtime)),
        }
    }

    /// The exit status this failure ends the process with.
    pub fn code(&self) -> u8 {
        match self {
            Failure::Usage(_) | Failure::Said(Kind::Usage) => 2,
            Failure::Runtime(_) | Failure::Said(Kind::Runtime) => 1,
            Failure::Signalled(sig) => crate::signals::exit_code(*sig),
        }
    }
}

/// An `anyhow` error out of a command is a runtime failure with its whole chain of causes.
impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Failure {
        Failure::Runtime(format!("{e:#}"))
    }
}

/// The exit status of `outcome`, its message said on stderr first.
pub fn exit(outcome: Outcome) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if let Failure::Usage(m) | Failure::Runtime(m) = &f {
                crate::say!("rtcat: {m}");
            }
            ExitCode::from(f.code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_has_the_documented_status() {
        assert_eq!(Failure::usage("x").code(), 2);
        assert_eq!(Failure::runtime("x").code(), 1);
        assert_eq!(Failure::Said(Kind::Usage).code(), 2);
        assert_eq!(Failure::Said(Kind::Runtime).code(), 1);
        assert_eq!(Failure::Signalled(15).code(), 143);
        assert_eq!(Failure::Signalled(2).code(), 130);
        assert!(Failure::from_status(0).is_ok());
        assert_eq!(Failure::from_status(1).unwrap_err().code(), 1);
        assert_eq!(Failure::from_status(2).unwrap_err().code(), 2);
        assert_eq!(Failure::from_status(141).unwrap_err().code(), 141);
        let e: Failure = anyhow::anyhow!("inner").context("outer").into();
        assert!(
            matches!(&e, Failure::Runtime(m) if m == "outer: inner"),
            "{e:?}"
        );
    }
}
