//! What kind of failure an error of the lab's commands is, for the exit code: [`Usage`] marks bad
//! input on the command line (exit 2); every other error is a runtime failure (exit 1).

/// Bad input (a flag, its value, a file it names that cannot serve): the message names the
/// option and the value.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// An error for bad input (see [`Usage`]).
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    Usage(msg.into()).into()
}

/// Whether `e` is (or wraps) bad input rather than a runtime failure.
pub fn is_usage(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Usage>().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn usage_is_told_apart_from_runtime_failures() {
        assert!(is_usage(&usage("--cpus: x")));
        let wrapped = Err::<(), _>(usage("--label: \"\""))
            .context("report")
            .unwrap_err();
        assert!(is_usage(&wrapped));
        // a runtime failure whose message happens to start with an option is not bad usage
        assert!(!is_usage(&anyhow::anyhow!(
            "--net tcp: bind 127.0.0.1: address in use"
        )));
    }
}
