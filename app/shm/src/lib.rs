//! rtcat's shared-memory process image (format v2, `FORMAT.md` beside this crate).
//!
//! - [`Publisher`]: the master side. Creates the POSIX shared-memory object (or replaces our own
//!   stale one, refuses anyone else's), publishes one consistent snapshot per cycle (a seqlock:
//!   readers never block the cycle, the cycle never waits for readers) and merges the outputs
//!   client programs own into the output image, bit-exactly, with heartbeats and safe values.
//! - [`Client`]: the client side, usable by any program: attach by name, consistent
//!   [`Snapshot`]s, entries by name, typed values, and a [`Writer`] that owns output entries.
//!
//! Everything another process can write in the object is treated as untrusted input by both
//! sides: offsets and sizes are checked against the object before use, values are clamped, and
//! nothing read from the mapping can make either side panic or access memory out of bounds.

#![deny(missing_docs)]

mod bits;
mod client;
mod format;
mod map;
mod publisher;

pub use bits::{copy_bits, read_bits, write_bits};
pub use client::{Client, DataType, Direction, EntryRef, Snapshot, Value, Writer};
pub use format::{
    ABI_VERSION, ENTRY_BYTES, FLAG_DECLARED, FLAG_MASTER, Geometry, HEADER_BYTES, MAGIC,
    MAX_WRITERS, NAME_BYTES, OWNER_MASTER, State, WriterState, fnv1a64, valid_name,
};
pub use publisher::{
    CycleInfo, DeclaredWriter, Hold, OutputEntry, Publisher, PublisherConfig, WriteEvents,
    WriterEvent, WriterEventKind,
};

use thiserror::Error;

/// Why an operation on a shared-memory process image failed.
#[derive(Debug, Error)]
pub enum Error {
    /// The object name does not follow the rules (`[A-Za-z0-9_.-]{1,200}`, not starting with `.`).
    #[error("shm name {name:?}: {why}")]
    Name {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// An object of that name exists and belongs to another user: it is not replaced, since a
    /// pre-created object in the world-writable /dev/shm must not capture the clients.
    #[error(
        "shm object /{name} exists and belongs to uid {uid}, not to this process (uid {ours}): \
         refusing to use or replace it; remove it (rm /dev/shm/{name}) if it is not another \
         program's"
    )]
    Foreign {
        /// The object name.
        name: String,
        /// Its owner.
        uid: u32,
        /// Our uid.
        ours: u32,
    },
    /// A client found an object owned by another uid than the master's: not attached (anyone
    /// can plant an object with a valid header in the world-writable /dev/shm).
    #[error(
        "shm object /{name} belongs to uid {uid}, not to the master's uid {master_uid}: \
         refused, it was not created by the master"
    )]
    NotMaster {
        /// The object name.
        name: String,
        /// Its owner.
        uid: u32,
        /// The uid the master runs as.
        master_uid: u32,
    },
    /// A system call failed.
    #[error("shm object /{name}: {op}: {errno}")]
    Sys {
        /// The object name.
        name: String,
        /// What was attempted (`shm_open`, `mmap`, ...).
        op: &'static str,
        /// The error.
        errno: nix::errno::Errno,
    },
    /// The object is not a valid format v2 image (or is still being created): the field and
    /// its value are named.
    #[error("shm object /{name}: {field} = {value}: {why}")]
    Format {
        /// The object name.
        name: String,
        /// The header field (or area) that is wrong.
        field: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        why: String,
    },
    /// The publisher's parameters are inconsistent (sizes, entries, writers).
    #[error("shm: {field} = {value}: {why}")]
    Config {
        /// The parameter.
        field: String,
        /// Its value.
        value: String,
        /// What is allowed.
        why: String,
    },
    /// The layout JSON could not be read.
    #[error("shm object /{name}: layout JSON: {why}")]
    Layout {
        /// The object name.
        name: String,
        /// The parser's message.
        why: String,
    },
    /// No entry of that name (or more than one).
    #[error("entry {entry:?}: {why}")]
    Entry {
        /// The name asked for.
        entry: String,
        /// Why it cannot be used.
        why: String,
    },
    /// A value does not fit its entry.
    #[error("entry {entry:?}: value {value}: {why}")]
    Value {
        /// The entry.
        entry: String,
        /// The value given.
        value: String,
        /// What is allowed.
        why: String,
    },
    /// The master is writing faster than a consistent copy could be taken (retries exhausted).
    #[error("shm object /{name}: no consistent snapshot after {retries} retries")]
    Busy {
        /// The object name.
        name: String,
        /// Retries made.
        retries: u32,
    },
    /// Nothing has been published yet (the object is INIT or no cycle ran).
    #[error("shm object /{name}: no snapshot published yet (state {state})")]
    NotPublished {
        /// The object name.
        name: String,
        /// The object's state.
        state: State,
    },
    /// The object was replaced or the master stopped: call [`Client::reattach`].
    #[error("shm object /{name}: {state}; re-attach")]
    Gone {
        /// The object name.
        name: String,
        /// Its state.
        state: State,
    },
    /// Writer slots: none free, the declared one taken, or the object mapped read-only.
    #[error("shm object /{name}: writer {writer:?}: {why}")]
    Writer {
        /// The object name.
        name: String,
        /// The writer name.
        writer: String,
        /// Why it cannot attach or write.
        why: String,
    },
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
