//! rttune — `rtcat doctor` (audit every real-time knob) and `rtcat tune` (apply/restore the runtime
//! shield with an exact, journalled restore).
//!
//! Everything that touches sysfs, procfs, the kernel command line or `/dev` goes through
//! [`SysRoot`], which takes a root directory, so the whole crate runs against fake trees.
//! Non-file operations (stopping irqbalance, ethtool coalescing, task affinity, file capabilities)
//! go through the [`Host`] trait.
//!
//! Interface for the `rtcat` binary: [`DoctorOptions`], [`TuneOptions`], [`TuneSection`], [`RtContext`],
//! [`run_doctor`], [`run_tune`]. For the ladder: [`tune::plan()`], [`tune::apply()`],
//! [`tune::restore()`] with [`KnobGroup`]s. See README.md for the JSON schema and check ids.
//!
//! The knobs live in the private `knobs` module, one file per area, each with its doctor checks
//! and tune planners; [`doctor`] and [`tune`] hold what is common to all of them. The fake trees
//! and host of the tests (`testkit`) are compiled only with the cargo feature `testkit`.

pub mod command;
pub mod config;
pub mod cpuset;
pub mod doctor;
pub mod facts;
pub mod host;
pub mod journal;
mod knobs;
// The root-path abstraction and the interface-name rules live in safefs, which the master
// shares without depending on the tuner; their rttune paths stay.
pub use safefs::{netif, sysroot};
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod tune;
pub mod unitfile;

pub use command::{CommandError, DoctorOptions, TuneAction, TuneOptions, run_doctor, run_tune};
pub use config::{CoalesceConfig, CycleWait, DEFAULT_CYCLE_PRIORITY, RtContext, TuneSection};
pub use cpuset::CpuSet;
pub use host::{Host, RealHost};
pub use sysroot::SysRoot;
pub use tune::{KnobGroup, TuneCtx};
