//! The control socket of a running rtcat master.
//!
//! Other programs (the `rtcat` bus commands with `--control`, `rtcat exporter`, an HMI) ask a
//! running master for its status, the bus scan, the error counters, the process-data layout,
//! SDO reads and writes and AL state changes without opening the NIC a second time. The
//! protocol is JSON lines over a Unix stream socket ([`protocol`]); [`server`] serves it on a
//! thread of its own from data a [`server::Provider`] gives (the binary implements it over the
//! master's live view and its acyclic queue); [`client`] is the blocking client.
//!
//! Nothing here runs on the real-time path, and nothing here depends on ethercrab: scan,
//! layout and counter data pass through as JSON values the provider builds.
#![deny(missing_docs)]

pub mod client;
pub mod protocol;
pub mod server;

pub use client::{Client, ClientError};
pub use protocol::{Failure, FailureKind, Reply, Request, Status};
pub use server::{Outcome, Peer, Provider, Server, ServerConfig, Writers};
