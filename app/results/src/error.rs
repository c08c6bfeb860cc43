//! The error type of the crate: every variant names the file, the field or the line and column it
//! concerns, so that `rtcat report` can say what is wrong with an input without further context.

use std::fmt;
use std::path::PathBuf;

/// What is wrong with a result file or value.
///
/// The `Display` text is the complete message (it includes the inner error of [`Error::InFile`]),
/// and no variant but [`Error::Fs`] has a `source()`, so a chain printed with `{:#}` does not repeat
/// itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A field breaks its rule; `message` names it (e.g. `runs: 1001 is not in 1..=1000`).
    #[error("{message}")]
    Field {
        /// The field's path in the document (`wake_lateness_ns.p99`, `stages[2]`, `stop.signal`).
        field: String,
        /// The whole message, starting with or naming the field.
        message: String,
    },
    /// A stage id breaks the rule of [`crate::validate_stage_id`].
    #[error("stage id \"{id}\" {reason}")]
    StageId {
        /// The id as found.
        id: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A JSON document does not parse as the schema's type (syntax, unknown or missing field).
    #[error("{}: not a valid {what}: {reason}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What it should be, e.g. `rtcat.summary/1 summary`.
        what: &'static str,
        /// serde_json's message (it names the field and the line and column).
        reason: String,
    },
    /// A `.hdr` file is not a histogram this crate reads.
    #[error("{}: not a valid HdrHistogram V2 file: {reason}", path.display())]
    Hdr {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A line of a CSV file is malformed.
    #[error("{}", csv_message(*.line, column.as_deref(), reason))]
    Csv {
        /// 1-based line number; `None` for an empty file.
        line: Option<u64>,
        /// The column's name in the header, when one column is at fault.
        column: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// Any of the above, found in `path`.
    #[error("{}: {error}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        error: Box<Error>,
    },
    /// The file is not UTF-8 text.
    #[error("{}: not UTF-8 text", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// The path does not end in a file name (e.g. `/` or `..`).
    #[error("{}: not a file name", path.display())]
    NotAFileName {
        /// The path as given.
        path: PathBuf,
    },
    /// A value could not be serialised (does not happen with the types of this crate).
    #[error("cannot serialise {what}: {reason}")]
    Encode {
        /// What was being written.
        what: String,
        /// The serialiser's message.
        reason: String,
    },
    /// Opening, reading or writing a file failed, or the file is refused (a FIFO, a device, a
    /// symbolic link inside a result directory, larger than its limit).
    #[error(transparent)]
    Fs(#[from] safefs::Error),
}

fn csv_message(line: Option<u64>, column: Option<&str>, reason: &str) -> String {
    let mut s = String::new();
    if let Some(l) = line {
        s.push_str(&format!("line {l}: "));
    }
    if let Some(c) = column {
        s.push_str(&format!("column {c}: "));
    }
    s.push_str(reason);
    s
}

/// Returns an [`Error::Field`] from the enclosing function: `invalid!(field, "format", args…)`.
macro_rules! invalid {
    ($field:expr, $($fmt:tt)+) => {
        {
            let message = format!($($fmt)+);
            return Err($crate::Error::field($field, message));
        }
    };
}
pub(crate) use invalid;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A [`Error::Field`] error; `message` is the whole text and should start with the field.
    pub(crate) fn field(field: impl Into<String>, message: impl fmt::Display) -> Self {
        Error::Field {
            field: field.into(),
            message: message.to_string(),
        }
    }

    /// This error, found in the file `path`.
    pub(crate) fn in_file(self, path: impl Into<PathBuf>) -> Self {
        Error::InFile {
            path: path.into(),
            error: Box::new(self),
        }
    }

    /// True when the input is at fault (malformed, inconsistent, refused), false for a failure to
    /// read or write that may succeed another time (an I/O error).
    pub fn is_input(&self) -> bool {
        match self {
            Error::Fs(e) => e.is_input(),
            Error::InFile { error, .. } => error.is_input(),
            Error::Encode { .. } => false,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binary maps errors to exit codes by kind: a bad input is not a failed read.
    #[test]
    fn input_errors_are_told_from_io_failures() {
        let d = tempfile::tempdir().unwrap();
        let missing = crate::Summary::read(&d.path().join("summary.json")).unwrap_err();
        assert!(!missing.is_input(), "{missing}");
        std::fs::write(d.path().join("summary.json"), "{}").unwrap();
        let bad = crate::Summary::read(&d.path().join("summary.json")).unwrap_err();
        assert!(matches!(bad, Error::Json { .. }) && bad.is_input(), "{bad}");
        let e = Error::field("runs", "runs: 0 is not in 1..=1000").in_file("m.json");
        assert!(e.is_input());
        // the whole message, and no source: a chain printer ({:#} of anyhow) does not repeat it
        assert_eq!(e.to_string(), "m.json: runs: 0 is not in 1..=1000");
        assert!(std::error::Error::source(&e).is_none());
    }
}
