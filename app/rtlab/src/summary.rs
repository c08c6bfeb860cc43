//! The canonical result types of rtcat: `summary.json` (schema `rtcat.summary/1`), the ladder
//! `manifest.json` (schema `rtcat.ladder/1`), the `ladder.csv` row format and the `.hdr` histogram
//! files (HdrHistogram V2, uncompressed, values in ns). See `docs/results-schema.md`.
//!
//! Writers (`rtcat bench`, `rtcat run`, `rtcat ladder`) and the reader (`rtcat report`) share these
//! types, so a field added here is added for both.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{DeserializeError, Deserializer, Serializer, V2Serializer};
use safefs::Dir;
use serde::{Deserialize, Serialize};

/// `schema` value of a `summary.json`.
pub const SUMMARY_SCHEMA: &str = "rtcat.summary/1";
/// `schema` value of a ladder `manifest.json`.
pub const LADDER_SCHEMA: &str = "rtcat.ladder/1";
/// Header line of `ladder.csv` (without the line end).
pub const LADDER_CSV_HEADER: &str = "stage,run,cycles,wake_mean_ns,wake_p99_ns,wake_p999_ns,wake_max_ns,exec_mean_ns,exec_max_ns,missed_deadlines,wkc_mismatches,recoveries";
/// File names inside a bench output directory.
pub const SUMMARY_FILE: &str = "summary.json";
pub const WAKE_HDR_FILE: &str = "wake_lateness_ns.hdr";
pub const EXEC_HDR_FILE: &str = "exec_ns.hdr";
pub const RTT_HDR_FILE: &str = "rtt_ns.hdr";
/// File names inside a ladder directory.
pub const MANIFEST_FILE: &str = "manifest.json";
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

/// Run mode of a bench/run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    #[serde(rename = "sim")]
    Sim,
    #[serde(rename = "iface")]
    Iface,
    #[serde(rename = "timer-only")]
    TimerOnly,
}

/// Scheduling policy of the cycle thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Policy {
    #[serde(rename = "SCHED_FIFO")]
    Fifo,
    #[serde(rename = "SCHED_OTHER")]
    Other,
}

/// Statistics of one latency distribution, in ns (`mean` is a float).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyStats {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl LatencyStats {
    /// Statistics of a histogram (percentiles as HdrHistogram reports them).
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self {
                count: 0,
                min: 0,
                mean: 0.0,
                p50: 0,
                p99: 0,
                p999: 0,
                max: 0,
            };
        }
        Self {
            count: h.len(),
            min: h.min(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }

    /// Checks internal consistency; `field` names the object in the message (e.g. `wake_lateness_ns`).
    pub fn validate(&self, field: &str) -> Result<()> {
        if !self.mean.is_finite() || self.mean < 0.0 {
            bail!(
                "{field}.mean: {} is not a finite non-negative number",
                self.mean
            );
        }
        if self.count == 0 {
            if self.min != 0 || self.max != 0 || self.p50 != 0 || self.p99 != 0 || self.p999 != 0 {
                bail!("{field}: count is 0 but the statistics are not all 0");
            }
            return Ok(());
        }
        let order = [
            ("min", self.min),
            ("p50", self.p50),
            ("p99", self.p99),
            ("p999", self.p999),
            ("max", self.max),
        ];
        for w in order.windows(2) {
            if w[0].1 > w[1].1 {
                bail!(
                    "{field}: {} ({}) is greater than {} ({})",
                    w[0].0,
                    w[0].1,
                    w[1].0,
                    w[1].1
                );
            }
        }
        // The mean of a histogram lies within [min, max] up to the histogram's resolution.
        let slack = (self.max as f64) * 1e-3 + 1.0;
        if self.mean + slack < self.min as f64 || self.mean > self.max as f64 + slack {
            bail!(
                "{field}.mean: {} lies outside [min {}, max {}]",
                self.mean,
                self.min,
                self.max
            );
        }
        Ok(())
    }
}

/// Working-counter result of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wkc {
    /// Expected WKC per cycle; `null` when there is no bus (timer-only mode).
    pub expected: Option<u32>,
    /// Cycles whose WKC differed from the expected one.
    pub mismatches: u64,
}

/// The system a run was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemInfo {
    pub hostname: String,
    /// `uname -r`
    pub kernel_release: String,
    /// `uname -v`
    pub kernel_version: String,
    pub preempt_rt: bool,
    /// `/proc/cmdline`
    pub cmdline: String,
    /// CPU of the cycle thread, `null` when not pinned.
    pub cpu: Option<u32>,
    /// CPU of the TX/RX thread, `null` when not pinned.
    pub txrx_cpu: Option<u32>,
    pub policy: Policy,
    /// SCHED_FIFO priority, 0 for SCHED_OTHER.
    pub priority: u32,
    /// Run with `--no-rt`.
    pub no_rt: bool,
    pub timer_slack_ns: u64,
    /// Governor of the cycle CPU's cpufreq policy, `null` without cpufreq.
    pub governor: Option<String>,
}

/// `summary.json` of one bench/run (schema `rtcat.summary/1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Always [`SUMMARY_SCHEMA`].
    pub schema: String,
    pub rtcat_version: String,
    pub mode: Mode,
    /// Interface name in `iface` mode.
    pub interface: Option<String>,
    /// Ladder stage id (`s0`..`s4`) or `null`.
    pub stage: Option<String>,
    pub started_at_unix_ns: u64,
    pub duration_s: f64,
    pub cycles: u64,
    pub period_ns: u64,
    pub wake_lateness_ns: LatencyStats,
    pub exec_ns: LatencyStats,
    /// `null` in timer-only mode.
    pub rtt_ns: Option<LatencyStats>,
    /// Cycles that ended after the next deadline.
    pub missed_deadlines: u64,
    /// Periods skipped by the catch-up policy.
    pub skipped_periods: u64,
    pub wkc: Wkc,
    pub frames_lost: u64,
    pub recoveries: u64,
    pub subdevices: u32,
    pub pdi_bytes: u32,
    pub system: SystemInfo,
    /// Why the run ended (or that it is still running, in a checkpoint). Absent in files written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// Frames the master refused as replies or failed to send; absent in timer-only mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<BusStats>,
    /// Problems writing `events.log` / `samples.csv` (a full disk, a closed stderr); absent when
    /// there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<LoggingHealth>,
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The requested duration was reached.
    Duration,
    /// A signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) asked it to stop.
    Signal,
    /// The segment failed and could not be recovered.
    Fatal,
    /// Not stopped: this is a checkpoint written while the run goes on.
    Running,
}

/// How and why the run ended (`stop` in `summary.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stop {
    pub reason: StopReason,
    /// The signal's name (`SIGTERM`) when `reason` is `signal`.
    #[serde(default)]
    pub signal: Option<String>,
    /// The duration asked for (`--duration`); `null` for `rtcat run`, which runs until stopped.
    #[serde(default)]
    pub requested_duration_s: Option<f64>,
    /// The unrecoverable error when `reason` is `fatal`.
    #[serde(default)]
    pub detail: Option<String>,
}

/// Frames the bus refused as replies, by reason, and frames it could not send.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusStats {
    /// Received frames that were not taken as replies, in total.
    pub rx_rejected: u64,
    /// The same, by reason (`not_ethercat`, `foreign_source`, `bad_length`, `not_awaited`, …).
    #[serde(default)]
    pub rx_rejected_by_reason: std::collections::BTreeMap<String, u64>,
    /// Frames the link failed to send.
    pub send_errors: u64,
}

/// Problems the status thread had with the log files; the run went on regardless.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggingHealth {
    /// Failed writes (to events.log, samples.csv or stderr).
    pub write_errors: u64,
    /// Events not written to events.log (after a write error, or with the disk nearly full).
    pub events_dropped: u64,
    /// Samples not written to samples.csv.
    pub samples_dropped: u64,
    /// The first error, as text.
    #[serde(default)]
    pub first_error: Option<String>,
}

impl Stop {
    /// Checks the fields against the reason; the error names the field.
    pub fn validate(&self) -> Result<()> {
        if let Some(d) = self.requested_duration_s
            && !(d.is_finite() && d > 0.0)
        {
            bail!("stop.requested_duration_s: {d} is not a finite positive number");
        }
        match (&self.signal, self.reason) {
            (None, StopReason::Signal) => {
                bail!("stop.signal: must be set when stop.reason is \"signal\"")
            }
            (Some(sig), StopReason::Signal) => {
                // SIGTERM, SIGRTMIN+3: shown verbatim in tables
                let ok = sig.len() <= 16
                    && sig.strip_prefix("SIG").is_some_and(|n| {
                        !n.is_empty()
                            && n.chars()
                                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '+')
                    });
                if !ok {
                    bail!("stop.signal: \"{sig}\" is not a signal name such as \"SIGTERM\"");
                }
            }
            (Some(_), r) => bail!(
                "stop.signal: set, but stop.reason is \"{}\" (only \"signal\" has one)",
                r.as_str()
            ),
            (None, _) => {}
        }
        if let Some(d) = &self.detail {
            check_text("stop.detail", d, 4096, true)?;
        }
        Ok(())
    }
}

impl StopReason {
    /// The name used in `summary.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Duration => "duration",
            StopReason::Signal => "signal",
            StopReason::Fatal => "fatal",
            StopReason::Running => "running",
        }
    }
}

impl BusStats {
    /// The reasons must be short identifiers and add up to `rx_rejected`.
    pub fn validate(&self) -> Result<()> {
        if self.rx_rejected_by_reason.len() > 32 {
            bail!(
                "bus.rx_rejected_by_reason: {} reasons (at most 32)",
                self.rx_rejected_by_reason.len()
            );
        }
        let mut sum: u64 = 0;
        for (k, v) in &self.rx_rejected_by_reason {
            let ok = !k.is_empty()
                && k.len() <= 32
                && k.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !ok {
                bail!(
                    "bus.rx_rejected_by_reason: key \"{}\" is not 1..=32 characters of [a-z0-9_]",
                    k.escape_debug()
                );
            }
            sum = sum.checked_add(*v).ok_or_else(|| {
                anyhow!("bus.rx_rejected_by_reason: the counts overflow a 64-bit sum")
            })?;
        }
        if !self.rx_rejected_by_reason.is_empty() && sum != self.rx_rejected {
            bail!(
                "bus.rx_rejected ({}) is not the sum of bus.rx_rejected_by_reason ({sum})",
                self.rx_rejected
            );
        }
        Ok(())
    }
}

/// A text field of at most `max` bytes; control characters (line breaks included) only where
/// `multiline` (they would break the report's tables otherwise).
fn check_text(field: &str, s: &str, max: usize, multiline: bool) -> Result<()> {
    if s.len() > max {
        bail!("{field}: {} bytes (at most {max})", s.len());
    }
    if !multiline && let Some(c) = s.chars().find(|c| c.is_control()) {
        bail!(
            "{field}: contains the control character {:?}",
            c.escape_debug().to_string()
        );
    }
    Ok(())
}

/// The directory (opened as the user named it) and the file name of `path`.
fn split_path(path: &Path) -> Result<(Dir, &str)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("{}: not a file name", path.display()))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((Dir::open_named(parent)?, name))
}

/// Reads `name` in `dir` (a regular file of at most `limit` bytes, not a link) as UTF-8.
fn read_text_in(dir: &Dir, name: &str, limit: u64) -> Result<(String, PathBuf)> {
    let path = dir.path().join(name);
    let bytes = dir.read_bounded(name, limit)?;
    let text =
        String::from_utf8(bytes).map_err(|_| anyhow!("{}: not UTF-8 text", path.display()))?;
    Ok((text, path))
}

impl Summary {
    /// Checks the schema id and the internal consistency of the figures; the error names the field.
    pub fn validate(&self) -> Result<()> {
        if self.schema != SUMMARY_SCHEMA {
            bail!(
                "schema: expected \"{SUMMARY_SCHEMA}\", found \"{}\"",
                self.schema
            );
        }
        if !self.duration_s.is_finite() || self.duration_s < 0.0 {
            bail!(
                "duration_s: {} is not a finite non-negative number",
                self.duration_s
            );
        }
        if self.period_ns == 0 {
            bail!("period_ns: must be > 0");
        }
        if let Some(stage) = &self.stage {
            validate_stage_id(stage).context("stage")?;
        }
        self.wake_lateness_ns.validate("wake_lateness_ns")?;
        self.exec_ns.validate("exec_ns")?;
        if let Some(rtt) = &self.rtt_ns {
            rtt.validate("rtt_ns")?;
        }
        if self.mode == Mode::TimerOnly && self.rtt_ns.is_some() {
            bail!("rtt_ns: must be null in timer-only mode");
        }
        if self.mode == Mode::Iface && self.interface.is_none() {
            bail!("interface: must be set in iface mode");
        }
        if self.wake_lateness_ns.count > self.cycles {
            bail!(
                "wake_lateness_ns.count ({}) exceeds cycles ({})",
                self.wake_lateness_ns.count,
                self.cycles
            );
        }
        if let Some(stop) = &self.stop {
            stop.validate()?;
        }
        if let Some(bus) = &self.bus {
            if self.mode == Mode::TimerOnly {
                bail!("bus: must be null in timer-only mode (there is no bus)");
            }
            bus.validate()?;
        }
        if let Some(l) = &self.logging
            && let Some(e) = &l.first_error
        {
            check_text("logging.first_error", e, 4096, true)?;
        }
        check_text("rtcat_version", &self.rtcat_version, 64, false)?;
        if let Some(i) = &self.interface {
            // IFNAMSIZ (16) including the terminating NUL
            check_text("interface", i, 15, false)?;
        }
        let sys = &self.system;
        // __NEW_UTS_LEN (64) for the uname fields, CPUFREQ_NAME_LEN (16 with the NUL) for the
        // governor; the command line is at most COMMAND_LINE_SIZE (2048 on arm64 and x86).
        check_text("system.hostname", &sys.hostname, 64, false)?;
        check_text("system.kernel_release", &sys.kernel_release, 64, false)?;
        check_text("system.kernel_version", &sys.kernel_version, 64, false)?;
        check_text("system.cmdline", &sys.cmdline, 4096, true)?;
        if let Some(g) = &sys.governor {
            check_text("system.governor", g, 15, false)?;
        }
        if self.missed_deadlines > self.cycles {
            bail!(
                "missed_deadlines ({}) exceeds cycles ({})",
                self.missed_deadlines,
                self.cycles
            );
        }
        Ok(())
    }

    /// Parses and validates the text of a `summary.json`; errors name `path` and the field.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let s: Summary = serde_json::from_str(text).map_err(|e| {
            anyhow!(
                "{}: not a valid {SUMMARY_SCHEMA} summary: {e}",
                path.display()
            )
        })?;
        s.validate()
            .map_err(|e| anyhow!("{}: {e:#}", path.display()))?;
        Ok(s)
    }

    /// Reads and validates a `summary.json` named by the caller (links in `path` are followed;
    /// it must be a regular file of at most [`SUMMARY_LIMIT`] bytes); errors name the file.
    pub fn read(path: &Path) -> Result<Self> {
        let text = safefs::read_to_string_bounded(path, SUMMARY_LIMIT)?;
        Self::parse(&text, path)
    }

    /// Reads and validates `summary.json` in `dir` without following a link.
    pub fn read_in(dir: &Dir) -> Result<Self> {
        let (text, path) = read_text_in(dir, SUMMARY_FILE, SUMMARY_LIMIT)?;
        Self::parse(&text, &path)
    }

    /// The summary as pretty JSON with a final newline.
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }

    /// Writes `summary.json` into `dir` atomically (temporary file, fsync, rename, directory
    /// fsync); a link planted at the name is replaced, never followed.
    pub fn write_to(&self, dir: &Dir) -> Result<()> {
        dir.write_atomic(SUMMARY_FILE, self.to_json()?.as_bytes(), RESULT_FILE_MODE)?;
        Ok(())
    }

    /// Writes the summary to `path` atomically through its directory, like [`Summary::write_to`]
    /// (the directory is opened as named, following links in it; the file name is not followed).
    pub fn write(&self, path: &Path) -> Result<()> {
        let (dir, name) = split_path(path)?;
        dir.write_atomic(name, self.to_json()?.as_bytes(), RESULT_FILE_MODE)?;
        Ok(())
    }
}

/// Writes the histograms (`wake_lateness_ns.hdr`, `exec_ns.hdr`, and `rtt_ns.hdr` when given),
/// then `summary.json`, each atomically into `dir`. The summary comes last so that a summary on
/// disk never describes histograms that are not there yet; a crash between the files leaves the
/// new histograms next to the previous summary, which `rtcat report` refuses as inconsistent
/// rather than mixing them.
pub fn write_results(
    dir: &Dir,
    s: &Summary,
    wake: &Histogram<u64>,
    exec: &Histogram<u64>,
    rtt: Option<&Histogram<u64>>,
) -> Result<()> {
    write_hdr_to(dir, WAKE_HDR_FILE, wake)?;
    write_hdr_to(dir, EXEC_HDR_FILE, exec)?;
    if let Some(r) = rtt {
        write_hdr_to(dir, RTT_HDR_FILE, r)?;
    }
    s.write_to(dir)
}

/// A ladder's `manifest.json` (schema `rtcat.ladder/1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LadderManifest {
    /// Always [`LADDER_SCHEMA`].
    pub schema: String,
    pub created_unix_ns: u64,
    pub system: SystemInfo,
    /// Stage ids in ladder order; each has `runs` run directories `<stage>/run<k>`, k = 1..=runs.
    pub stages: Vec<String>,
    pub runs: u32,
    pub duration_s: f64,
    pub loaded: bool,
}

impl LadderManifest {
    pub fn validate(&self) -> Result<()> {
        if self.schema != LADDER_SCHEMA {
            bail!(
                "schema: expected \"{LADDER_SCHEMA}\", found \"{}\"",
                self.schema
            );
        }
        if self.stages.is_empty() {
            bail!("stages: empty");
        }
        if self.stages.len() > MAX_STAGES {
            bail!(
                "stages: {} stages (at most {MAX_STAGES})",
                self.stages.len()
            );
        }
        for (i, s) in self.stages.iter().enumerate() {
            validate_stage_id(s).with_context(|| format!("stages[{i}]"))?;
            if self.stages[..i].contains(s) {
                bail!("stages[{i}]: \"{s}\" listed twice");
            }
        }
        if self.runs == 0 || self.runs > MAX_RUNS {
            bail!("runs: {} is not in 1..={MAX_RUNS}", self.runs);
        }
        if !self.duration_s.is_finite() || self.duration_s <= 0.0 {
            bail!("duration_s: {} is not a positive number", self.duration_s);
        }
        Ok(())
    }

    /// Parses and validates the text of a `manifest.json`; errors name `path` and the field.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let m: LadderManifest = serde_json::from_str(text).map_err(|e| {
            anyhow!(
                "{}: not a valid {LADDER_SCHEMA} manifest: {e}",
                path.display()
            )
        })?;
        m.validate()
            .map_err(|e| anyhow!("{}: {e:#}", path.display()))?;
        Ok(m)
    }

    /// Reads a `manifest.json` named by the caller (a regular file of at most
    /// [`MANIFEST_LIMIT`] bytes).
    pub fn read(path: &Path) -> Result<Self> {
        let text = safefs::read_to_string_bounded(path, MANIFEST_LIMIT)?;
        Self::parse(&text, path)
    }

    /// Reads `manifest.json` in `dir` without following a link.
    pub fn read_in(dir: &Dir) -> Result<Self> {
        let (text, path) = read_text_in(dir, MANIFEST_FILE, MANIFEST_LIMIT)?;
        Self::parse(&text, &path)
    }

    /// The manifest as pretty JSON with a final newline.
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }

    /// Writes `manifest.json` into `dir` atomically, never following a link.
    pub fn write_to(&self, dir: &Dir) -> Result<()> {
        dir.write_atomic(MANIFEST_FILE, self.to_json()?.as_bytes(), RESULT_FILE_MODE)?;
        Ok(())
    }

    /// Writes the manifest to `path` atomically through its directory (see [`Summary::write`]).
    pub fn write(&self, path: &Path) -> Result<()> {
        let (dir, name) = split_path(path)?;
        dir.write_atomic(name, self.to_json()?.as_bytes(), RESULT_FILE_MODE)?;
        Ok(())
    }
}

/// A stage id: 1..=32 characters of `[A-Za-z0-9_.+-]` (safe in CSV, file names and tables).
pub fn validate_stage_id(s: &str) -> Result<()> {
    if s.is_empty() || s.len() > 32 {
        bail!("stage id \"{s}\" must have 1..=32 characters");
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_.+-".contains(*c)))
    {
        bail!("stage id \"{s}\" contains '{c}' (allowed: letters, digits, _ . + -)");
    }
    Ok(())
}

/// One `ladder.csv` row (without line end) for run `run` (1-based) of `stage`.
/// Means are written in Rust's shortest round-trip float form, all other figures as integers.
pub fn ladder_csv_row(stage: &str, run: u32, s: &Summary) -> String {
    let mut row = String::new();
    let _ = write!(
        row,
        "{stage},{run},{},{},{},{},{},{},{},{},{},{}",
        s.cycles,
        s.wake_lateness_ns.mean,
        s.wake_lateness_ns.p99,
        s.wake_lateness_ns.p999,
        s.wake_lateness_ns.max,
        s.exec_ns.mean,
        s.exec_ns.max,
        s.missed_deadlines,
        s.wkc.mismatches,
        s.recoveries
    );
    row
}

/// One parsed `ladder.csv` row.
#[derive(Debug, Clone, PartialEq)]
pub struct LadderRow {
    pub stage: String,
    pub run: u32,
    pub cycles: u64,
    pub wake_mean_ns: f64,
    pub wake_p99_ns: u64,
    pub wake_p999_ns: u64,
    pub wake_max_ns: u64,
    pub exec_mean_ns: f64,
    pub exec_max_ns: u64,
    pub missed_deadlines: u64,
    pub wkc_mismatches: u64,
    pub recoveries: u64,
}

impl LadderRow {
    /// The row `ladder_csv_row` writes for this summary.
    pub fn from_summary(stage: &str, run: u32, s: &Summary) -> Self {
        Self {
            stage: stage.to_string(),
            run,
            cycles: s.cycles,
            wake_mean_ns: s.wake_lateness_ns.mean,
            wake_p99_ns: s.wake_lateness_ns.p99,
            wake_p999_ns: s.wake_lateness_ns.p999,
            wake_max_ns: s.wake_lateness_ns.max,
            exec_mean_ns: s.exec_ns.mean,
            exec_max_ns: s.exec_ns.max,
            missed_deadlines: s.missed_deadlines,
            wkc_mismatches: s.wkc.mismatches,
            recoveries: s.recoveries,
        }
    }

    /// Same figures (means equal to 1e-9 relative, i.e. up to float formatting).
    pub fn matches(&self, other: &LadderRow) -> bool {
        let feq = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
        self.stage == other.stage
            && self.run == other.run
            && self.cycles == other.cycles
            && feq(self.wake_mean_ns, other.wake_mean_ns)
            && self.wake_p99_ns == other.wake_p99_ns
            && self.wake_p999_ns == other.wake_p999_ns
            && self.wake_max_ns == other.wake_max_ns
            && feq(self.exec_mean_ns, other.exec_mean_ns)
            && self.exec_max_ns == other.exec_max_ns
            && self.missed_deadlines == other.missed_deadlines
            && self.wkc_mismatches == other.wkc_mismatches
            && self.recoveries == other.recoveries
    }
}

/// Parses a whole `ladder.csv` (header line required); errors name the line and column.
pub fn parse_ladder_csv(text: &str) -> Result<Vec<LadderRow>> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim_end() == LADDER_CSV_HEADER => {}
        Some((_, h)) => bail!("line 1: header is \"{h}\", expected \"{LADDER_CSV_HEADER}\""),
        None => bail!("empty file (expected the header \"{LADDER_CSV_HEADER}\")"),
    }
    let names: Vec<&str> = LADDER_CSV_HEADER.split(',').collect();
    let max_rows = MAX_STAGES * MAX_RUNS as usize;
    let mut rows = Vec::new();
    for (i, line) in lines {
        let lno = i + 1;
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        if rows.len() == max_rows {
            bail!("line {lno}: more than {max_rows} rows ({MAX_STAGES} stages × {MAX_RUNS} runs)");
        }
        // at most one field more than expected is collected, whatever the line holds
        let f: Vec<&str> = line.splitn(names.len() + 1, ',').collect();
        if f.len() != names.len() {
            let n = line.split(',').count();
            bail!("line {lno}: {n} fields, expected {}", names.len());
        }
        let int = |k: usize| -> Result<u64> {
            f[k].parse::<u64>().map_err(|_| {
                anyhow!(
                    "line {lno}: column {}: \"{}\" is not a non-negative integer",
                    names[k],
                    f[k]
                )
            })
        };
        let float = |k: usize| -> Result<f64> {
            match f[k].parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                _ => bail!(
                    "line {lno}: column {}: \"{}\" is not a non-negative number",
                    names[k],
                    f[k]
                ),
            }
        };
        validate_stage_id(f[0]).map_err(|e| anyhow!("line {lno}: column stage: {e}"))?;
        let run = int(1)?;
        let run = u32::try_from(run)
            .ok()
            .filter(|r| *r >= 1)
            .ok_or_else(|| anyhow!("line {lno}: column run: {run} is not in 1..=4294967295"))?;
        rows.push(LadderRow {
            stage: f[0].to_string(),
            run,
            cycles: int(2)?,
            wake_mean_ns: float(3)?,
            wake_p99_ns: int(4)?,
            wake_p999_ns: int(5)?,
            wake_max_ns: int(6)?,
            exec_mean_ns: float(7)?,
            exec_max_ns: int(8)?,
            missed_deadlines: int(9)?,
            wkc_mismatches: int(10)?,
            recoveries: int(11)?,
        });
    }
    Ok(rows)
}

/// Reads and parses `ladder.csv` in `dir` (a regular file of at most [`LADDER_CSV_LIMIT`] bytes,
/// not a link); errors name the file, the line and the column.
pub fn read_ladder_csv_in(dir: &Dir) -> Result<Vec<LadderRow>> {
    let (text, path) = read_text_in(dir, LADDER_CSV_FILE, LADDER_CSV_LIMIT)?;
    parse_ladder_csv(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// A new histogram with rtcat's bounds (1 ns .. 60 s, 3 significant figures).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HDR_HIGHEST_NS, HDR_SIGFIG)
        .expect("static histogram bounds are valid")
}

/// Cookie of an uncompressed V2 histogram (HdrHistogram's `V2_COOKIE`: base 0x1c849303 | 0x10).
const V2_COOKIE: u32 = 0x1c84_9313;
/// Cookie of a DEFLATE-compressed V2 histogram.
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9314;
/// Size of the V2 header: cookie, payload length, normalizing index offset, significant figures
/// (4 bytes each), lowest and highest trackable value (8 each), integer-to-double ratio (f64).
const V2_HEADER_LEN: usize = 40;

/// The histogram in the V2 (uncompressed) serialisation.
pub fn hdr_bytes(h: &Histogram<u64>) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut buf)
        .map_err(|e| anyhow!("cannot serialise histogram: {e:?}"))?;
    Ok(buf)
}

/// Writes a histogram (V2, uncompressed) as `name` in `dir` atomically, never following a link.
pub fn write_hdr_to(dir: &Dir, name: &str, h: &Histogram<u64>) -> Result<()> {
    let buf = hdr_bytes(h).with_context(|| dir.path().join(name).display().to_string())?;
    dir.write_atomic(name, &buf, RESULT_FILE_MODE)?;
    Ok(())
}

/// Writes a histogram to `path` atomically through its directory (see [`write_hdr_to`]).
pub fn write_hdr(path: &Path, h: &Histogram<u64>) -> Result<()> {
    let (dir, name) = split_path(path)?;
    write_hdr_to(&dir, name, h)
}

/// Reads a V2 histogram file named by the caller (a regular file of at most [`HDR_FILE_LIMIT`]
/// bytes); see [`parse_hdr`]. The error names the file.
pub fn read_hdr(path: &Path) -> Result<Histogram<u64>> {
    let bytes = safefs::read_bounded(path, HDR_FILE_LIMIT)?;
    parse_hdr(&bytes, path)
}

/// Reads histogram `name` in `dir` without following a link; see [`parse_hdr`].
pub fn read_hdr_in(dir: &Dir, name: &str) -> Result<Histogram<u64>> {
    let bytes = dir.read_bounded(name, HDR_FILE_LIMIT)?;
    parse_hdr(&bytes, &dir.path().join(name))
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes([
        b[at],
        b[at + 1],
        b[at + 2],
        b[at + 3],
        b[at + 4],
        b[at + 5],
        b[at + 6],
        b[at + 7],
    ])
}

/// Decodes an uncompressed V2 histogram (`path` names it in errors) into one with rtcat's bounds.
///
/// The header is checked before the decoder sees it, because the decoder allocates what the
/// header declares: a payload buffer of the declared length and a counts array for the declared
/// range and precision. So the declared payload length must equal what follows the header in the
/// file (no truncation, no trailing bytes), at most [`HDR_MAX_SIGFIG`] significant figures and a
/// highest trackable value of at most [`HDR_MAX_HIGHEST_NS`]. A histogram with other bounds than
/// rtcat's is converted to rtcat's (its values must fit in 1 ns .. 60 s), so that histograms of
/// several runs can always be merged.
pub fn parse_hdr(bytes: &[u8], path: &Path) -> Result<Histogram<u64>> {
    let bad = |why: String| {
        anyhow!(
            "{}: not a valid HdrHistogram V2 file: {why}",
            path.display()
        )
    };
    if bytes.len() < V2_HEADER_LEN {
        return Err(bad(format!(
            "{} bytes, shorter than the {V2_HEADER_LEN}-byte V2 header",
            bytes.len()
        )));
    }
    let cookie = be_u32(bytes, 0);
    if cookie == V2_DEFLATE_COOKIE {
        return Err(bad(
            "DEFLATE-compressed V2 is not read (rtcat writes uncompressed V2)".into(),
        ));
    }
    if cookie != V2_COOKIE {
        return Err(bad(format!(
            "cookie {cookie:#010x} is not the V2 cookie {V2_COOKIE:#010x}"
        )));
    }
    let payload = u64::from(be_u32(bytes, 4));
    let follows = (bytes.len() - V2_HEADER_LEN) as u64;
    if payload != follows {
        return Err(bad(format!(
            "the header declares a payload of {payload} bytes but {follows} bytes follow the \
             {V2_HEADER_LEN}-byte header ({})",
            if payload > follows {
                "truncated"
            } else {
                "trailing bytes"
            }
        )));
    }
    let offset = be_u32(bytes, 8);
    if offset != 0 {
        return Err(bad(format!(
            "normalizing index offset {offset} is not supported (must be 0)"
        )));
    }
    let sigfig = be_u32(bytes, 12);
    if sigfig > u32::from(HDR_MAX_SIGFIG) {
        return Err(bad(format!(
            "{sigfig} significant figures (at most {HDR_MAX_SIGFIG})"
        )));
    }
    let low = be_u64(bytes, 16);
    let high = be_u64(bytes, 24);
    if low == 0 || high / 2 < low {
        return Err(bad(format!(
            "lowest value {low} and highest trackable value {high} do not form a range \
             (need 1 <= lowest and 2 × lowest <= highest)"
        )));
    }
    if high > HDR_MAX_HIGHEST_NS {
        return Err(bad(format!(
            "highest trackable value {high} ns is above the bound of {HDR_MAX_HIGHEST_NS} ns \
             (16 × rtcat's {HDR_HIGHEST_NS} ns)"
        )));
    }
    let ratio = f64::from_be_bytes(bytes[32..40].try_into().unwrap_or([0; 8]));
    if ratio != 1.0 {
        return Err(bad(format!(
            "integer-to-double conversion ratio {ratio} is not 1 (not an integer histogram)"
        )));
    }
    let mut cursor = std::io::Cursor::new(bytes);
    let h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut cursor)
        .map_err(|e| bad(describe_deserialize_error(&e)))?;
    if cursor.position() != bytes.len() as u64 {
        return Err(bad(format!(
            "{} trailing bytes after the histogram",
            bytes.len() as u64 - cursor.position()
        )));
    }
    if h.low() == 1 && h.high() == HDR_HIGHEST_NS && h.sigfig() == HDR_SIGFIG {
        return Ok(h);
    }
    let mut out = new_histogram();
    out.add(&h).map_err(|_| {
        bad(format!(
            "holds values up to {} ns, above rtcat's range of {HDR_HIGHEST_NS} ns",
            h.max()
        ))
    })?;
    Ok(out)
}

fn describe_deserialize_error(e: &DeserializeError) -> String {
    match e {
        DeserializeError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the payload ends inside a count".into()
        }
        DeserializeError::IoError(e) => format!("read error: {e}"),
        DeserializeError::InvalidCookie => "unknown cookie".into(),
        DeserializeError::UnsupportedFeature => {
            "uses a feature this reader does not support".into()
        }
        DeserializeError::UnsuitableCounterType => {
            "a count is negative or does not fit in 64 bits".into()
        }
        DeserializeError::InvalidParameters => {
            "the lowest value, highest value and significant figures do not form a histogram".into()
        }
        DeserializeError::UsizeTypeTooSmall => "a run of zero counts is too long".into(),
        DeserializeError::EncodedArrayTooLong => {
            "the counts run past the end of the declared range".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    pub(crate) fn sample_summary() -> Summary {
        let mut h = new_histogram();
        for v in [1000u64, 2000, 2000, 3333, 13514] {
            h.record(v).unwrap();
        }
        let wake = LatencyStats::from_histogram(&h);
        Summary {
            schema: SUMMARY_SCHEMA.into(),
            rtcat_version: "0.1.0".into(),
            mode: Mode::Sim,
            interface: None,
            stage: Some("s2".into()),
            started_at_unix_ns: 1_764_460_800_000_000_000,
            duration_s: 10.0,
            cycles: 5,
            period_ns: 1_000_000,
            wake_lateness_ns: wake,
            exec_ns: wake,
            rtt_ns: Some(wake),
            missed_deadlines: 0,
            skipped_periods: 0,
            wkc: Wkc {
                expected: Some(9),
                mismatches: 1,
            },
            frames_lost: 0,
            recoveries: 0,
            subdevices: 3,
            pdi_bytes: 132,
            system: SystemInfo {
                hostname: "board".into(),
                kernel_release: "5.10.160-rt89".into(),
                kernel_version: "#1 SMP PREEMPT_RT".into(),
                preempt_rt: true,
                cmdline: "console=ttyS2".into(),
                cpu: Some(6),
                txrx_cpu: Some(6),
                policy: Policy::Fifo,
                priority: 80,
                no_rt: false,
                timer_slack_ns: 1,
                governor: Some("performance".into()),
            },
            stop: None,
            bus: None,
            logging: None,
        }
    }

    #[test]
    fn summary_round_trip_and_schema_names() {
        let s = sample_summary();
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["mode"], "sim");
        assert_eq!(json["system"]["policy"], "SCHED_FIFO");
        assert_eq!(json["wkc"]["expected"], 9);
        let back: Summary = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
        s.validate().unwrap();
    }

    #[test]
    fn summary_rejects_unknown_and_missing_fields() {
        let mut json = serde_json::to_value(sample_summary()).unwrap();
        json["bogus"] = 1.into();
        let e = serde_json::from_value::<Summary>(json)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
        let mut json = serde_json::to_value(sample_summary()).unwrap();
        json.as_object_mut().unwrap().remove("recoveries");
        let e = serde_json::from_value::<Summary>(json)
            .unwrap_err()
            .to_string();
        assert!(e.contains("recoveries"), "{e}");
    }

    #[test]
    fn validate_names_the_field() {
        let mut s = sample_summary();
        s.wake_lateness_ns.p99 = s.wake_lateness_ns.max + 1;
        let e = s.validate().unwrap_err().to_string();
        assert!(e.starts_with("wake_lateness_ns: p99"), "{e}");
        let mut s = sample_summary();
        s.schema = "rtcat.summary/2".into();
        assert!(s.validate().unwrap_err().to_string().starts_with("schema:"));
        let mut s = sample_summary();
        s.mode = Mode::TimerOnly;
        assert!(s.validate().unwrap_err().to_string().starts_with("rtt_ns:"));
    }

    #[test]
    fn csv_row_round_trips() {
        let s = sample_summary();
        let row = ladder_csv_row("s2", 3, &s);
        assert_eq!(
            row,
            "s2,3,5,4369.799999999999,13519,13519,13519,4369.799999999999,13519,0,1,0"
        );
        let text = format!("{LADDER_CSV_HEADER}\n{row}\n");
        let rows = parse_ladder_csv(&text).unwrap();
        assert_eq!(rows.len(), 1);
        assert!(rows[0].matches(&LadderRow::from_summary("s2", 3, &s)));
    }

    #[test]
    fn csv_errors_name_line_and_column() {
        let e = parse_ladder_csv("stage,run\n").unwrap_err().to_string();
        assert!(e.starts_with("line 1: header"), "{e}");
        let text = format!("{LADDER_CSV_HEADER}\ns0,1,10,1.5,2,3,x,1,2,0,0,0\n");
        let e = parse_ladder_csv(&text).unwrap_err().to_string();
        assert_eq!(
            e,
            "line 2: column wake_max_ns: \"x\" is not a non-negative integer"
        );
        let text = format!("{LADDER_CSV_HEADER}\ns0,0,10,1.5,2,3,4,1,2,0,0,0\n");
        assert!(
            parse_ladder_csv(&text)
                .unwrap_err()
                .to_string()
                .contains("column run")
        );
        let text = format!("{LADDER_CSV_HEADER}\ns0,1,10\n");
        assert_eq!(
            parse_ladder_csv(&text).unwrap_err().to_string(),
            "line 2: 3 fields, expected 12"
        );
    }

    #[test]
    fn hdr_round_trip_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v * 997).unwrap();
        }
        let p = dir.path().join("x.hdr");
        write_hdr(&p, &h).unwrap();
        let back = read_hdr(&p).unwrap();
        assert_eq!(back, h);
        let bytes = fs::read(&p).unwrap();
        fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
        let e = read_hdr(&p).unwrap_err().to_string();
        assert!(e.contains("x.hdr: not a valid HdrHistogram V2 file"), "{e}");
    }

    fn header(payload_len: u32, sigfig: u32, low: u64, high: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&V2_COOKIE.to_be_bytes());
        b.extend_from_slice(&payload_len.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&sigfig.to_be_bytes());
        b.extend_from_slice(&low.to_be_bytes());
        b.extend_from_slice(&high.to_be_bytes());
        b.extend_from_slice(&1.0f64.to_be_bytes());
        b
    }

    #[test]
    fn hdr_header_is_checked_before_decoding() {
        let p = Path::new("x.hdr");
        let e = |b: &[u8]| format!("{:#}", parse_hdr(b, p).unwrap_err());
        let mut h = new_histogram();
        h.record(1234).unwrap();
        let good = hdr_bytes(&h).unwrap();
        assert_eq!(parse_hdr(&good, p).unwrap(), h);
        assert!(e(&good[..good.len() - 1]).contains("(truncated)"));
        assert!(e(&[good.as_slice(), b"x"].concat()).contains("(trailing bytes)"));
        assert_eq!(
            e(&header(u32::MAX, 3, 1, HDR_HIGHEST_NS)),
            "x.hdr: not a valid HdrHistogram V2 file: the header declares a payload of 4294967295 \
             bytes but 0 bytes follow the 40-byte header (truncated)"
        );
        assert!(e(&header(0, 6, 1, HDR_HIGHEST_NS)).contains("6 significant figures (at most 5)"));
        assert!(e(&header(0, 3, 0, HDR_HIGHEST_NS)).contains("do not form a range"));
        assert!(e(&header(0, 3, 1000, 1999)).contains("do not form a range"));
        assert!(e(&header(0, 3, 1, HDR_MAX_HIGHEST_NS + 1)).contains("is above the bound"));
        let mut b = header(0, 3, 1, HDR_HIGHEST_NS);
        b[8..12].copy_from_slice(&7u32.to_be_bytes());
        assert!(e(&b).contains("normalizing index offset 7"));
        let mut b = header(0, 3, 1, HDR_HIGHEST_NS);
        b[32..40].copy_from_slice(&0.5f64.to_be_bytes());
        assert!(e(&b).contains("ratio 0.5 is not 1"));
        // counts beyond the declared range: the decoder's own check, with a clear message
        let mut b = header(10, 3, 1, HDR_HIGHEST_NS);
        // a run of 2^62 zeros, then a count: past the end of the 27 648 counts
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x02]);
        assert_eq!(
            e(&b),
            "x.hdr: not a valid HdrHistogram V2 file: the counts run past the end of the declared range"
        );
        // a varint cut off at the end of the payload
        let mut b = header(2, 3, 1, HDR_HIGHEST_NS);
        b.extend_from_slice(&[0x02, 0x80]);
        assert!(
            e(&b).ends_with("the payload ends inside a count"),
            "{}",
            e(&b)
        );
    }

    #[test]
    fn hdr_with_other_bounds_is_converted_to_rtcats() {
        let p = Path::new("y.hdr");
        let mut other = Histogram::<u64>::new_with_bounds(1, 2 * HDR_HIGHEST_NS, 2).unwrap();
        other.record_n(5_000, 7).unwrap();
        other.record(1_000_000).unwrap();
        let h = parse_hdr(&hdr_bytes(&other).unwrap(), p).unwrap();
        assert_eq!(
            (h.low(), h.high(), h.sigfig()),
            (1, HDR_HIGHEST_NS, HDR_SIGFIG)
        );
        assert_eq!(h.len(), 8);
        // 2 significant figures: within 1 % of the recorded value
        assert!(
            h.value_at_quantile(0.5).abs_diff(5_000) <= 50,
            "{}",
            h.value_at_quantile(0.5)
        );
        // mergeable with rtcat's own histograms (the report pools runs)
        new_histogram().add(&h).unwrap();
        other.record(100_000_000_000).unwrap(); // 100 s
        let e = format!(
            "{:#}",
            parse_hdr(&hdr_bytes(&other).unwrap(), p).unwrap_err()
        );
        assert!(e.contains("above rtcat's range of 60000000000 ns"), "{e}");
    }

    #[test]
    fn new_fields_are_validated() {
        let e = |f: &dyn Fn(&mut Summary)| {
            let mut s = sample_summary();
            f(&mut s);
            s.validate().unwrap_err().to_string()
        };
        let stop = |reason, signal: Option<&str>| Stop {
            reason,
            signal: signal.map(String::from),
            requested_duration_s: Some(10.0),
            detail: None,
        };
        let mut s = sample_summary();
        s.stop = Some(stop(StopReason::Signal, Some("SIGTERM")));
        s.bus = Some(BusStats {
            rx_rejected: 3,
            rx_rejected_by_reason: [("foreign_source".to_string(), 2), ("bad_length".into(), 1)]
                .into(),
            send_errors: 1,
        });
        s.logging = Some(LoggingHealth {
            write_errors: 1,
            events_dropped: 2,
            samples_dropped: 3,
            first_error: Some("No space left on device (os error 28)".into()),
        });
        s.validate().unwrap();
        let back: Summary = serde_json::from_str(&s.to_json().unwrap()).unwrap();
        assert_eq!(back, s);

        assert!(
            e(&|s| s.stop = Some(stop(StopReason::Signal, None)))
                .starts_with("stop.signal: must be set")
        );
        assert!(
            e(&|s| s.stop = Some(stop(StopReason::Duration, Some("SIGINT"))))
                .contains("set, but stop.reason is \"duration\"")
        );
        assert!(
            e(&|s| s.stop = Some(stop(StopReason::Signal, Some("TERM|x"))))
                .contains("is not a signal name")
        );
        assert!(
            e(&|s| {
                s.stop = Some(Stop {
                    requested_duration_s: Some(f64::NAN),
                    ..stop(StopReason::Duration, None)
                })
            })
            .starts_with("stop.requested_duration_s")
        );
        let bus = |n: u64| BusStats {
            rx_rejected: n,
            rx_rejected_by_reason: [("not_ethercat".to_string(), 2)].into(),
            send_errors: 0,
        };
        assert!(e(&|s| s.bus = Some(bus(3))).contains("is not the sum"));
        assert!(
            e(&|s| {
                s.mode = Mode::TimerOnly;
                s.rtt_ns = None;
                s.bus = Some(bus(2));
            })
            .starts_with("bus: must be null in timer-only mode")
        );
        assert!(
            e(&|s| {
                s.bus = Some(BusStats {
                    rx_rejected: 1,
                    rx_rejected_by_reason: [("Bad Reason".to_string(), 1)].into(),
                    send_errors: 0,
                })
            })
            .contains("key \"Bad Reason\"")
        );
        assert!(
            e(&|s| {
                s.bus = Some(BusStats {
                    rx_rejected: 0,
                    rx_rejected_by_reason: [("a".to_string(), u64::MAX), ("b".into(), 1)].into(),
                    send_errors: 0,
                })
            })
            .contains("overflow")
        );
        assert!(
            e(&|s| s.system.hostname = "a\nb".into())
                .starts_with("system.hostname: contains the control character")
        );
        assert_eq!(
            e(&|s| s.system.kernel_release = "5".repeat(65)),
            "system.kernel_release: 65 bytes (at most 64)"
        );
        assert!(
            e(&|s| {
                s.logging = Some(LoggingHealth {
                    first_error: Some("x".repeat(5000)),
                    ..Default::default()
                })
            })
            .starts_with("logging.first_error: 5000 bytes")
        );
    }

    #[test]
    fn manifest_and_csv_are_bounded() {
        let m = LadderManifest {
            schema: LADDER_SCHEMA.into(),
            created_unix_ns: 1,
            system: sample_summary().system,
            stages: vec!["s0".into()],
            runs: MAX_RUNS + 1,
            duration_s: 1.0,
            loaded: false,
        };
        assert_eq!(
            m.validate().unwrap_err().to_string(),
            "runs: 1001 is not in 1..=1000"
        );
        let mut text = format!("{LADDER_CSV_HEADER}\n");
        let row = "s0,1,10,1.5,2,3,4,1,2,0,0,0\n";
        text.push_str(&row.repeat(MAX_STAGES * MAX_RUNS as usize + 1));
        let e = parse_ladder_csv(&text).unwrap_err().to_string();
        assert_eq!(
            e,
            "line 64002: more than 64000 rows (64 stages × 1000 runs)"
        );
        // a line with a million fields is counted, not collected
        let text = format!("{LADDER_CSV_HEADER}\n{}\n", ",".repeat(1_000_000));
        assert_eq!(
            parse_ladder_csv(&text).unwrap_err().to_string(),
            "line 2: 1000001 fields, expected 12"
        );
    }

    /// The path-based writers of earlier versions, now atomic through the directory: a link
    /// planted at the name is replaced, the file it points to is left alone.
    #[test]
    fn writers_replace_planted_links_instead_of_following_them() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let out = d.path().join("out");
        fs::create_dir(&out).unwrap();
        for name in [SUMMARY_FILE, WAKE_HDR_FILE, MANIFEST_FILE] {
            symlink(&victim, out.join(name)).unwrap();
        }
        let s = sample_summary();
        s.write(&out.join(SUMMARY_FILE)).unwrap();
        write_hdr(&out.join(WAKE_HDR_FILE), &new_histogram()).unwrap();
        let m = LadderManifest {
            schema: LADDER_SCHEMA.into(),
            created_unix_ns: 1,
            system: s.system.clone(),
            stages: vec!["s0".into()],
            runs: 1,
            duration_s: 1.0,
            loaded: false,
        };
        m.write(&out.join(MANIFEST_FILE)).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        for name in [SUMMARY_FILE, WAKE_HDR_FILE, MANIFEST_FILE] {
            assert!(
                fs::symlink_metadata(out.join(name)).unwrap().is_file(),
                "{name}"
            );
        }
        assert_eq!(Summary::read(&out.join(SUMMARY_FILE)).unwrap(), s);
        assert_eq!(LadderManifest::read(&out.join(MANIFEST_FILE)).unwrap(), m);
    }

    #[test]
    fn dir_api_writes_results_and_reads_without_following_links() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let dir = Dir::open(d.path()).unwrap();
        let s = sample_summary();
        let mut w = new_histogram();
        w.record(5).unwrap();
        write_results(&dir, &s, &w, &new_histogram(), Some(&new_histogram())).unwrap();
        let mut names = dir.entries().unwrap();
        names.sort();
        assert_eq!(
            names,
            [EXEC_HDR_FILE, RTT_HDR_FILE, SUMMARY_FILE, WAKE_HDR_FILE]
        );
        assert_eq!(Summary::read_in(&dir).unwrap(), s);
        assert_eq!(read_hdr_in(&dir, WAKE_HDR_FILE).unwrap(), w);
        let mode = fs::metadata(d.path().join(SUMMARY_FILE)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, RESULT_FILE_MODE);
        // reading through the handle does not follow a link, even to a valid summary
        let other = tempfile::tempdir().unwrap();
        fs::rename(d.path().join(SUMMARY_FILE), other.path().join(SUMMARY_FILE)).unwrap();
        symlink(other.path().join(SUMMARY_FILE), d.path().join(SUMMARY_FILE)).unwrap();
        let e = Summary::read_in(&dir).unwrap_err().to_string();
        assert!(
            e.ends_with("summary.json: is a symbolic link (not followed)"),
            "{e}"
        );
        // the path API follows it: the caller named that path
        assert_eq!(Summary::read(&d.path().join(SUMMARY_FILE)).unwrap(), s);
    }

    #[test]
    fn stage_ids() {
        validate_stage_id("s0").unwrap();
        validate_stage_id("rt+shield").unwrap();
        assert!(validate_stage_id("a,b").is_err());
        assert!(validate_stage_id("").is_err());
    }
}
