//! The master's errors, one enum with a variant per way a run can fail, so that the binary maps
//! them to exit codes by kind ([`Error::is_usage`]) and an application matches on them.

use thiserror::Error;

/// Everything that can go wrong in the master.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration was refused (a key, its value and the allowed range are named).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A real-time setting could not be applied: what was asked, why, and the fix.
    #[error("{what}: {why}")]
    RealTime {
        /// The setting (`mlockall`, `SCHED_FIFO priority 80`, `cycle.cpu`, ...).
        what: String,
        /// The reason and how to get the permission or limit it needs.
        why: String,
    },
    /// The network interface could not be opened.
    #[error("open EtherCAT interface {iface}: {source}")]
    Interface {
        /// The interface name.
        iface: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// Another program already has an EtherCAT socket on the interface.
    #[error("{0}")]
    InterfaceBusy(String),
    /// A system call outside the cyclic path failed (thread, eventfd, ...).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// No subdevice answered the scan.
    #[error(
        "no subdevices answered: check the cable, the interface and that the segment is powered"
    )]
    NoSubdevices,
    /// The segment differs from what the configuration expects.
    #[error("{0}")]
    SegmentMismatch(String),
    /// A re-initialisation found another topology than the run started with (a device
    /// inserted, removed or swapped): the segment is not driven until it is back.
    #[error(
        "topology changed at position {position}: found {}{}, the run started with {}{}; a \
         device inserted, removed or swapped is not driven (retried until the topology is back)",
        show_identity(*found),
        alias.map_or(String::new(), |(a, _)| format!(" with station alias {a:#06x}")),
        show_identity(*expected),
        alias.map_or(String::new(), |(_, e)| format!(" with station alias {e:#06x}"))
    )]
    TopologyChanged {
        /// First position that differs.
        position: u16,
        /// Vendor, product, revision there now (None: no device).
        found: Option<(u32, u32, u32)>,
        /// What the run started with (None: no device).
        expected: Option<(u32, u32, u32)>,
        /// The same identity with another station alias (0x0012): found, started with.
        alias: Option<(u16, u16)>,
    },
    /// The segment is larger than the master runs.
    #[error("{0}")]
    Capacity(String),
    /// ethercrab failed while scanning, configuring or moving the segment between states.
    #[error("{stage}: {source}")]
    Bus {
        /// What the master was doing (`segment scan/configuration`, `transition to OP`, ...).
        stage: String,
        /// ethercrab's error.
        source: ethercrab::error::Error,
    },
    /// The process-data layout could not be read or does not match the image.
    #[error(transparent)]
    Layout(#[from] crate::layout::LayoutError),
    /// A `[[device]]` configuration could not be applied, or the subdevice does not run with
    /// it: the subdevice, the object, the value and the abort code's text are named.
    #[error(transparent)]
    Device(Box<crate::devices::DeviceError>),
    /// The application refused the segment in `configure`.
    #[error("application: {0}")]
    Application(String),
    /// The application asked in `configure` for an entry the layout does not have (or not with
    /// that type): the entry names come from the user, so this is a usage error.
    #[error("application: {0}")]
    Entry(crate::layout::LayoutError),
    /// A bring-up failed `attempts` times in a row (`[health] max_failed_recoveries`).
    #[error("{last} (gave up after {attempts} failed attempts in a row)")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: Box<Error>,
    },
    /// A stop was requested (or the duration ended) while the segment was being brought up.
    #[error("stopped while bringing the segment up: {0}")]
    Stopped(Box<Error>),
    /// A thread of the master panicked.
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
}

impl From<crate::devices::DeviceError> for Error {
    fn from(e: crate::devices::DeviceError) -> Self {
        Error::Device(Box::new(e))
    }
}

fn show_identity(id: Option<(u32, u32, u32)>) -> String {
    match id {
        Some((v, p, r)) => format!("vendor {v:#010x} product {p:#010x} revision {r:#010x}"),
        None => "no device".into(),
    }
}

impl Error {
    /// Whether the error is the user's input (configuration, arguments): exit 2, not 1.
    pub fn is_usage(&self) -> bool {
        matches!(self, Error::Config(_) | Error::Entry(_))
    }

    pub(crate) fn bus(stage: impl Into<String>, source: ethercrab::error::Error) -> Self {
        Error::Bus {
            stage: stage.into(),
            source,
        }
    }

    pub(crate) fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        move |source| Error::Io { what, source }
    }
}

/// `Result` with the master's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;
