//! The `rtcat` command: the command line, and the wiring of the libraries — the master
//! (`rtcat-master`), the simulator (`ecsim`), the tuner (`rttune`) and the lab (`rtlab`) — into
//! services and tools: results files, status lines, systemd notifications, signals.
//!
//! Data flows one way: configuration -> [`rtcat_master`] (setup, recovery, the real-time cycle,
//! measurements) -> [`output`] / [`status`].

pub mod cli;
pub mod cmd;
pub mod config;
pub mod console;
pub mod control;
pub mod eoe_bridge;
pub mod exporter;
pub mod gateway;
pub mod outcome;
pub mod output;
pub mod runner;
pub mod sdnotify;
pub mod signals;
pub mod status;
pub mod sysinfo;
