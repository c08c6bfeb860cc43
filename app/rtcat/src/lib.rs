//! rtcat: a real-time EtherCAT master on ethercrab, its measurements and its tools.
//!
//! Data flows one way: [`config`] -> [`master`] (setup, recovery) -> [`cycle`] (the real-time
//! loop) -> [`stats`] -> [`output`] / [`status`].

pub mod app;
pub mod bus;
pub mod cli;
pub mod clock;
pub mod config;
pub mod console;
pub mod cycle;
pub mod ladder;
pub mod master;
pub mod output;
pub mod rt;
pub mod runner;
pub mod sdnotify;
pub mod signals;
pub mod simcmd;
pub mod stats;
pub mod status;
pub mod sysinfo;
