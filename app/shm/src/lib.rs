//! rtcat's shared-memory process image (format v3, `FORMAT.md` beside this crate).
//!
//! - [`Publisher`]: the master side. Creates the image as a sealed memfd (nothing in /dev/shm),
//!   publishes one consistent snapshot per cycle (a seqlock: readers never block the cycle,
//!   the cycle never waits for readers) and merges the outputs client programs own into the
//!   output image, bit-exactly, with heartbeats and safe values.
//! - [`Broker`]: what the master's control socket hands out: the image (read-only), a writer
//!   object per writer, and the master's own record of claimed entries.
//! - [`Client`]: the client side, usable by any program: attach through the master's control
//!   socket (its uid checked), consistent [`Snapshot`]s, entries by name, typed values, and a
//!   [`Writer`] that owns output entries.
//!
//! Everything another process can write in the object is treated as untrusted input by both
//! sides: offsets and sizes are checked against the object before use, values are clamped, and
//! nothing read from the mapping can make either side panic or access memory out of bounds.

#![deny(missing_docs)]

mod bits;
mod broker;
mod client;
mod format;
mod handout;
mod map;
mod publisher;
pub mod testkit;

pub use bits::{copy_bits, read_bits, write_bits};
pub use broker::{Ask, Broker, Hub, Refusal, WriterGrant, image_seals, writer_seals};
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
    /// The process at the other end of the control socket does not run as the master's uid:
    /// nothing was asked of it, nothing it could pass is used.
    #[error(
        "control socket {name}: its peer runs as uid {uid}, not as the master's uid \
         {master_uid}: refused, it is not the master"
    )]
    NotMaster {
        /// The control socket.
        name: String,
        /// Its owner.
        uid: u32,
        /// The uid the master runs as.
        master_uid: u32,
    },
    /// A system call failed.
    #[error("shm image {name}: {op}: {errno}")]
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
    #[error("shm image {name}: {field} = {value}: {why}")]
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
    #[error("shm image {name}: layout JSON: {why}")]
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
    #[error("shm image {name}: no consistent snapshot after {retries} retries")]
    Busy {
        /// The object name.
        name: String,
        /// Retries made.
        retries: u32,
    },
    /// Nothing has been published yet (the object is INIT or no cycle ran).
    #[error("shm image {name}: no snapshot published yet (state {state})")]
    NotPublished {
        /// The object name.
        name: String,
        /// The object's state.
        state: State,
    },
    /// The object was replaced or the master stopped: call [`Client::reattach`].
    #[error("shm image {name}: {state}; re-attach")]
    Gone {
        /// The object name.
        name: String,
        /// Its state.
        state: State,
    },
    /// The master refused a request (its message).
    #[error("control socket {name}: {request}: {why}")]
    Refused {
        /// The control socket.
        name: String,
        /// The request's command.
        request: String,
        /// The master's message.
        why: String,
    },
    /// Writer slots: none free, the declared one taken, or the object mapped read-only.
    #[error("shm image {name}: writer {writer:?}: {why}")]
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
