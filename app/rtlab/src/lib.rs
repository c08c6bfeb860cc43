//! rtlab: the `rtcat load` load generator, the `rtcat report` tables and plots, and the
//! `rtcat ladder` that drives both around child benches and the tuner. The result
//! types they read and write are the `rtcat-results` crate.
//!
//! Interface for the `rtcat` binary:
//! - [`LoadOptions`] / [`run_load`] for `rtcat load`, [`ReportOptions`] / [`run_report`] for
//!   `rtcat report` (both return the process exit code: 0 ok, 1 failure, 2 invalid arguments),
//!   [`ladder::LadderOptions`] / [`ladder::run`] for `rtcat ladder`; the command-line flags are
//!   the binary's, these are plain option structs;
//! - [`LoadHandle`] to run a load in the background during a ladder run;
//! - [`rtcat_results::Summary`], [`rtcat_results::LadderManifest`], [`rtcat_results::ladder_csv_row`] and the `.hdr`
//!   helpers for writing results.

mod child;
pub mod cpus;
pub mod cyclictest;
pub mod error;
pub mod interrupt;
pub mod ladder;
pub mod load;
pub mod outfile;
#[cfg(feature = "plots")]
pub mod plot;
#[cfg(not(feature = "plots"))]
#[path = "plot_absent.rs"]
pub mod plot;
pub mod report;

pub use load::{LoadHandle, LoadOptions, LoadReport, LoadSpec, run_load};
pub use report::{ReportOptions, run_report};
