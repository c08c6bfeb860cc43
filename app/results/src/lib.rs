//! The canonical result types of rtcat: `summary.json` (schema `rtcat.summary/1`), the ladder
//! `manifest.json` (schema `rtcat.ladder/1`), the `ladder.csv` row format and the `.hdr` histogram
//! files (HdrHistogram V2, uncompressed, values in ns). See `docs/results-schema.md`.
//!
//! Writers (`rtcat bench`, `rtcat run`, `rtcat ladder`) and the reader (`rtcat report`) share these
//! types, so a field added here is added for both. The crate holds only what the formats need
//! (serde, serde_json, csv, hdrhistogram, safefs), so that the master can write its results
//! without pulling in the report's plotting.
//!
//! - [`Summary`] and its parts: one bench/run; [`write_results`] writes a run directory.
//! - [`LadderManifest`], [`LadderRow`] (`ladder.csv`, read and written through serde and the `csv`
//!   crate, see [`table`]): a ladder directory.
//! - [`new_histogram`], [`write_hdr_to`], [`read_hdr_in`], [`parse_hdr`]: the `.hdr` files.
//! - [`Error`]: every error names the file, the field, or the line and column.
//!
//! Readers are meant for untrusted inputs (`rtcat report` often runs as root on directories other
//! users can write): every file is read through `safefs` below a size limit, and a reader given
//! a [`safefs::Dir`] follows no symbolic link.

#![deny(missing_docs)]

mod error;
mod files;
mod hdr;
mod ladder;
mod summary;
pub mod table;
#[cfg(test)]
mod testutil;

pub use error::{Error, Result};
pub use hdr::{
    hdr_bytes, new_histogram, parse_hdr, read_hdr, read_hdr_in, write_hdr, write_hdr_to,
};
pub use ladder::{
    LadderManifest, LadderRow, ladder_csv_row, parse_ladder_csv, read_ladder_csv_in,
    validate_stage_id,
};
pub use summary::{
    Availability, AvailabilitySummary, AxisSummary, BusStats, DcSubdeviceSummary, DcSummary,
    FloorSummary, LatencyStats, LoggingHealth, Mode, Policy, Stop, StopReason, Summary, SystemInfo,
    UnexpectedDevices, WaitStats, Wkc, write_results,
};

/// `schema` value of a `summary.json`.
pub const SUMMARY_SCHEMA: &str = "rtcat.summary/1";
/// `schema` value of a ladder `manifest.json`.
pub const LADDER_SCHEMA: &str = "rtcat.ladder/1";
/// Header line of `ladder.csv` (without the line end): the field names of [`LadderRow`] in order
/// (the reader and writer take them from the struct; a test checks that this constant agrees).
pub const LADDER_CSV_HEADER: &str = "stage,run,cycles,wake_mean_ns,wake_p99_ns,wake_p999_ns,wake_max_ns,exec_mean_ns,exec_max_ns,missed_deadlines,wkc_mismatches,recoveries";
/// File name of the summary inside a bench output (or ladder run) directory.
pub const SUMMARY_FILE: &str = "summary.json";
/// File name of the wake-lateness histogram next to the summary.
pub const WAKE_HDR_FILE: &str = "wake_lateness_ns.hdr";
/// File name of the execution-time histogram next to the summary.
pub const EXEC_HDR_FILE: &str = "exec_ns.hdr";
/// File name of the frame round-trip histogram next to the summary (not in timer-only mode).
pub const RTT_HDR_FILE: &str = "rtt_ns.hdr";
/// File name of the manifest inside a ladder directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// File name of the per-run table inside a ladder directory.
pub const LADDER_CSV_FILE: &str = "ladder.csv";

/// Highest value the histograms hold: 60 s in ns (values above saturate).
pub const HDR_HIGHEST_NS: u64 = 60_000_000_000;
/// Significant figures of the histograms.
pub const HDR_SIGFIG: u8 = 3;

// Size limits of the files `rtcat report` (often run as root) reads. Each is far above what a
// writer of this version produces, and bounds what a crafted file can make the reader allocate.

/// Largest `summary.json` read. A real one is about 2 KiB; its longest field, the kernel command
/// line, is at most 4 KiB.
pub const SUMMARY_LIMIT: u64 = 1 << 20;
/// Largest `manifest.json` read (a real one is about 1 KiB).
pub const MANIFEST_LIMIT: u64 = 1 << 20;
/// Largest `ladder.csv` read: [`MAX_STAGES`] × [`MAX_RUNS`] rows of at most ~300 bytes fit.
pub const LADDER_CSV_LIMIT: u64 = 32 << 20;
/// Largest `.hdr` file read. rtcat's histograms (1 ns .. 60 s, 3 significant figures) have 27 648
/// counts of at most 9 bytes each (LEB128), so their files stay below 250 KiB.
pub const HDR_FILE_LIMIT: u64 = 4 << 20;
/// Most significant figures a `.hdr` file may declare (HdrHistogram's own maximum). With
/// [`HDR_MAX_HIGHEST_NS`] this bounds the counts array the decoder allocates to 3.1 M counts
/// (24 MiB), whatever the file claims.
pub const HDR_MAX_SIGFIG: u8 = 5;
/// Highest trackable value a `.hdr` file may declare: 16 × rtcat's 60 s. Histograms written with
/// other bounds are accepted up to this and converted to rtcat's; their values must lie in 1 ns .. 60 s.
pub const HDR_MAX_HIGHEST_NS: u64 = 16 * HDR_HIGHEST_NS;
/// Most runs per ladder stage (`rtcat ladder --runs` allows 1000).
pub const MAX_RUNS: u32 = 1000;
/// Most stages a ladder manifest may list (rtcat's ladder has five).
pub const MAX_STAGES: usize = 64;
/// Mode of the result files (summary, histograms, manifest): results are not secret.
pub const RESULT_FILE_MODE: u32 = 0o644;
