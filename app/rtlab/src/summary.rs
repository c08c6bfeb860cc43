//! The canonical result types of rtcat: `summary.json` (schema `rtcat.summary/1`), the ladder
//! `manifest.json` (schema `rtcat.ladder/1`), the `ladder.csv` row format and the `.hdr` histogram
//! files (HdrHistogram V2, uncompressed, values in ns). See `docs/results-schema.md`.
//!
//! Writers (`rtcat bench`, `rtcat run`, `rtcat ladder`) and the reader (`rtcat report`) share these
//! types, so a field added here is added for both.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
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
            if let Some(d) = stop.requested_duration_s
                && !(d.is_finite() && d > 0.0)
            {
                bail!("stop.requested_duration_s: {d} is not a finite positive number");
            }
            if stop.reason == StopReason::Signal && stop.signal.is_none() {
                bail!("stop.signal: must be set when stop.reason is \"signal\"");
            }
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

    /// Reads and validates a `summary.json`; errors name the file and the field.
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        let s: Summary = serde_json::from_str(&text).map_err(|e| {
            anyhow!(
                "{}: not a valid {SUMMARY_SCHEMA} summary: {e}",
                path.display()
            )
        })?;
        s.validate()
            .map_err(|e| anyhow!("{}: {e:#}", path.display()))?;
        Ok(s)
    }

    /// Writes the summary as pretty JSON (with a final newline).
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        fs::write(path, text).with_context(|| format!("{}: cannot write", path.display()))
    }
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
        for (i, s) in self.stages.iter().enumerate() {
            validate_stage_id(s).with_context(|| format!("stages[{i}]"))?;
            if self.stages[..i].contains(s) {
                bail!("stages[{i}]: \"{s}\" listed twice");
            }
        }
        if self.runs == 0 {
            bail!("runs: must be >= 1");
        }
        if !self.duration_s.is_finite() || self.duration_s <= 0.0 {
            bail!("duration_s: {} is not a positive number", self.duration_s);
        }
        Ok(())
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text =
            fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        let m: LadderManifest = serde_json::from_str(&text).map_err(|e| {
            anyhow!(
                "{}: not a valid {LADDER_SCHEMA} manifest: {e}",
                path.display()
            )
        })?;
        m.validate()
            .map_err(|e| anyhow!("{}: {e:#}", path.display()))?;
        Ok(m)
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        fs::write(path, text).with_context(|| format!("{}: cannot write", path.display()))
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
    let mut rows = Vec::new();
    for (i, line) in lines {
        let lno = i + 1;
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != names.len() {
            bail!("line {lno}: {} fields, expected {}", f.len(), names.len());
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

/// A new histogram with rtcat's bounds (1 ns .. 60 s, 3 significant figures).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HDR_HIGHEST_NS, HDR_SIGFIG)
        .expect("static histogram bounds are valid")
}

/// Writes a histogram in the V2 (uncompressed) serialisation.
pub fn write_hdr(path: &Path, h: &Histogram<u64>) -> Result<()> {
    let mut buf = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut buf)
        .map_err(|e| anyhow!("{}: cannot serialise histogram: {e:?}", path.display()))?;
    fs::write(path, buf).with_context(|| format!("{}: cannot write", path.display()))
}

/// Reads a V2 (or V2+DEFLATE) histogram file; the error names the file.
pub fn read_hdr(path: &Path) -> Result<Histogram<u64>> {
    let bytes = fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let mut cursor = std::io::Cursor::new(&bytes);
    let h: Histogram<u64> = Deserializer::new().deserialize(&mut cursor).map_err(|e| {
        anyhow!(
            "{}: not a valid HdrHistogram V2 file: {e:?}",
            path.display()
        )
    })?;
    if (cursor.position() as usize) != bytes.len() {
        bail!(
            "{}: {} trailing bytes after the histogram",
            path.display(),
            bytes.len() - cursor.position() as usize
        );
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn stage_ids() {
        validate_stage_id("s0").unwrap();
        validate_stage_id("rt+shield").unwrap();
        assert!(validate_stage_id("a,b").is_err());
        assert!(validate_stage_id("").is_err());
    }
}
