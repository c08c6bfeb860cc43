//! `rtcat report`: the A/B table in the reference study's style (markdown, CSV or JSON) and plots from ladder
//! directories, single bench output directories and cyclictest histogram files.
//!
//! Inputs (any mix, compared side by side):
//! - a ladder directory (`manifest.json`, `ladder.csv`, `<stage>/run<k>/summary.json` + `.hdr`);
//! - a bench output directory (`summary.json`, `wake_lateness_ns.hdr`, `exec_ns.hdr`);
//! - a cyclictest histogram file (`cyclictest -h N` output or `--histfile`).
//!
//! Every table cell with several runs is `mean ± SD` over the runs (sample standard deviation);
//! "worst max" is the largest max of all runs; the counters (missed deadlines, WKC mismatches,
//! recoveries) are totals over all runs. Latencies are shown in µs with 3 decimals.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use hdrhistogram::Histogram;
use safefs::Dir;
use serde::Serialize;

use crate::cyclictest;
use crate::error::{is_usage, usage};
use crate::outfile::say;
use rtcat_results::{
    AxisSummary, BusStats, DcSummary, EXEC_HDR_FILE, LADDER_CSV_FILE, LadderManifest, LadderRow,
    LoggingHealth, MANIFEST_FILE, SUMMARY_FILE, Stop, StopReason, Summary, WAKE_HDR_FILE,
    new_histogram, read_hdr_in, read_ladder_csv_in,
};

/// Output format of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Md,
    Csv,
    Json,
}

/// Options of `rtcat report`.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Ladder directories, bench output directories or cyclictest histogram files (at least one).
    pub inputs: Vec<PathBuf>,
    /// Table format.
    pub format: Format,
    /// Write plots (SVG and PNG) into this directory (created if missing).
    pub plots: Option<PathBuf>,
    /// Label of each input in order (default: the input's file name); one per input.
    pub label: Vec<String>,
    /// Size of each plot in pixels, `WxH`.
    pub plot_size: String,
    /// Write the table to this file instead of stdout.
    pub out: Option<PathBuf>,
    /// Report an interrupted ladder: runs that were never measured are left out and listed;
    /// anything malformed still fails.
    pub allow_partial: bool,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            inputs: Vec::new(),
            format: Format::Md,
            plots: None,
            label: Vec::new(),
            plot_size: "1000x600".into(),
            out: None,
            allow_partial: false,
        }
    }
}

/// What an input was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Ladder,
    Bench,
    Cyclictest,
}

/// Figures of one run, in ns. `None` where the source has no such figure (cyclictest).
#[derive(Debug, Clone, PartialEq)]
pub struct RunStats {
    pub cycles: u64,
    pub wake_mean: f64,
    pub wake_p99: u64,
    pub wake_p999: u64,
    pub wake_max: u64,
    /// P99 / P99.9 are upper bounds (they fall among cyclictest samples above the histogram range).
    pub wake_p99_bounded: bool,
    pub wake_p999_bounded: bool,
    pub exec_mean: Option<f64>,
    pub exec_max: Option<u64>,
    pub missed: Option<u64>,
    pub wkc_mismatches: Option<u64>,
    pub recoveries: Option<u64>,
}

/// How a run ended and what went wrong around the measurement, from its `summary.json`
/// (all `None` for cyclictest and for summaries written before these were recorded).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunHealth {
    /// Run number within a ladder stage (1-based); `None` for a single bench run.
    pub run: Option<u32>,
    pub duration_s: Option<f64>,
    pub stop: Option<Stop>,
    pub bus: Option<BusStats>,
    pub logging: Option<LoggingHealth>,
    /// Distributed clocks of the run (`[dc] enabled`).
    pub dc: Option<DcSummary>,
    /// The CiA 402 axes of the run.
    pub axes: Option<Vec<AxisSummary>>,
}

impl RunHealth {
    fn of(s: &Summary) -> Self {
        Self {
            run: None,
            duration_s: Some(s.duration_s),
            stop: s.stop.clone(),
            bus: s.bus.clone(),
            logging: s.logging.clone(),
            dc: s.dc.clone(),
            axes: s.axes.clone(),
        }
    }

    /// "interrupted", "fatal" or "checkpoint" for a run that did not end by its duration.
    pub fn status(&self) -> Option<&'static str> {
        match self.stop.as_ref()?.reason {
            StopReason::Duration => None,
            StopReason::Signal => Some("interrupted"),
            StopReason::Fatal => Some("fatal"),
            StopReason::Running => Some("checkpoint"),
        }
    }
}

/// One run: its figures and its histograms (values in ns).
#[derive(Debug, Clone)]
pub struct Run {
    pub stats: RunStats,
    /// How the cycle thread ran (policy, priority, CPU, governor, timer slack), when known.
    pub setup: Option<String>,
    pub wake: Histogram<u64>,
    pub exec: Option<Histogram<u64>>,
    pub health: RunHealth,
}

/// The figures of one run of a stage (its histograms are merged into the stage's).
#[derive(Debug, Clone)]
pub struct RunFigures {
    pub stats: RunStats,
    /// How the cycle thread ran (policy, priority, CPU, governor, timer slack), when known.
    pub setup: Option<String>,
    pub health: RunHealth,
}

/// One stage (a row of the table).
#[derive(Debug, Clone)]
pub struct Stage {
    pub name: String,
    pub runs: Vec<RunFigures>,
    /// All runs' wake-lateness samples merged: a stage of many runs holds two histograms
    /// (216 KiB each), not two per run.
    pub wake: Histogram<u64>,
    /// All runs' execution-time samples merged (None when no run has them).
    pub exec: Option<Histogram<u64>>,
}

impl Stage {
    /// A stage without runs yet.
    pub fn new(name: String) -> Self {
        Self {
            name,
            runs: Vec::new(),
            wake: new_histogram(),
            exec: None,
        }
    }

    /// Adds a run: its figures, and its samples to the stage's histograms.
    pub fn push(&mut self, run: Run) -> Result<()> {
        let merge = |into: &mut Histogram<u64>, h: &Histogram<u64>| {
            into.add(h)
                .map_err(|e| anyhow!("stage {}: cannot merge the histograms: {e:?}", self.name))
        };
        merge(&mut self.wake, &run.wake)?;
        if let Some(e) = &run.exec {
            let mut pooled = self.exec.take().unwrap_or_else(new_histogram);
            merge(&mut pooled, e)?;
            self.exec = Some(pooled);
        }
        self.runs.push(RunFigures {
            stats: run.stats,
            setup: run.setup,
            health: run.health,
        });
        Ok(())
    }

    /// All runs' wake-lateness samples merged.
    pub fn pooled_wake(&self) -> Histogram<u64> {
        self.wake.clone()
    }

    /// All runs' execution-time samples merged (None when no run has them).
    pub fn pooled_exec(&self) -> Option<Histogram<u64>> {
        self.exec.clone()
    }
}

/// One input.
#[derive(Debug, Clone)]
pub struct Source {
    pub label: String,
    pub kind: SourceKind,
    pub kernel_release: Option<String>,
    pub preempt_rt: Option<bool>,
    pub loaded: Option<bool>,
    pub duration_s: Option<f64>,
    pub stages: Vec<Stage>,
    /// What an incomplete input lacks (with --allow-partial).
    pub notes: Vec<String>,
}

fn check_hdr(file: &Path, h: &Histogram<u64>, count: u64, max: u64, field: &str) -> Result<()> {
    if h.len() != count {
        bail!(
            "{}: holds {} samples but summary.json {field}.count is {count}",
            file.display(),
            h.len()
        );
    }
    if count > 0 && !h.equivalent(h.max(), max) {
        bail!(
            "{}: max is {} ns but summary.json {field}.max is {max} ns",
            file.display(),
            h.max()
        );
    }
    Ok(())
}

/// The cycle thread's setup as recorded in a summary, e.g. `FIFO 80, CPU 6, performance, slack 1 ns`.
pub fn setup_of(sys: &rtcat_results::SystemInfo) -> String {
    let policy = match sys.policy {
        rtcat_results::Policy::Fifo => format!("FIFO {}", sys.priority),
        rtcat_results::Policy::Other => "OTHER".to_string(),
    };
    let cpu = sys
        .cpu
        .map_or_else(|| "unpinned".to_string(), |c| format!("CPU {c}"));
    let gov = sys
        .governor
        .clone()
        .unwrap_or_else(|| "no cpufreq".to_string());
    format!("{policy}, {cpu}, {gov}, slack {} ns", sys.timer_slack_ns)
}

/// Reads a bench output directory (summary.json + wake/exec histograms) named by the caller.
pub fn read_bench_dir(dir: &Path) -> Result<(Summary, Run)> {
    read_bench_in(&Dir::open_named(dir)?)
}

/// Reads a bench output directory through its handle: every file a regular file below its size
/// limit, no link followed.
pub fn read_bench_in(dir: &Dir) -> Result<(Summary, Run)> {
    if !dir.exists(SUMMARY_FILE) {
        bail!("{}: missing", dir.path().join(SUMMARY_FILE).display());
    }
    let s = Summary::read_in(dir)?;
    for name in [WAKE_HDR_FILE, EXEC_HDR_FILE] {
        if !dir.exists(name) {
            bail!(
                "{}: missing (written next to every summary.json)",
                dir.path().join(name).display()
            );
        }
    }
    let wp = dir.path().join(WAKE_HDR_FILE);
    let ep = dir.path().join(EXEC_HDR_FILE);
    let wake = read_hdr_in(dir, WAKE_HDR_FILE)?;
    check_hdr(
        &wp,
        &wake,
        s.wake_lateness_ns.count,
        s.wake_lateness_ns.max,
        "wake_lateness_ns",
    )?;
    let exec = read_hdr_in(dir, EXEC_HDR_FILE)?;
    check_hdr(&ep, &exec, s.exec_ns.count, s.exec_ns.max, "exec_ns")?;
    let stats = RunStats {
        cycles: s.cycles,
        wake_mean: s.wake_lateness_ns.mean,
        wake_p99: s.wake_lateness_ns.p99,
        wake_p999: s.wake_lateness_ns.p999,
        wake_max: s.wake_lateness_ns.max,
        wake_p99_bounded: false,
        wake_p999_bounded: false,
        exec_mean: Some(s.exec_ns.mean),
        exec_max: Some(s.exec_ns.max),
        missed: Some(s.missed_deadlines),
        wkc_mismatches: Some(s.wkc.mismatches),
        recoveries: Some(s.recoveries),
    };
    let setup = Some(setup_of(&s.system));
    let health = RunHealth::of(&s);
    Ok((
        s,
        Run {
            stats,
            setup,
            wake,
            exec: Some(exec),
            health,
        },
    ))
}

/// A subdirectory, or `None` when it does not exist (a link or anything else is an error).
fn subdir_if_any(dir: &Dir, name: &str) -> Result<Option<Dir>> {
    match dir.subdir(name, false) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn read_ladder(dir: &Dir, label: String, allow_partial: bool) -> Result<Source> {
    let m = LadderManifest::read_in(dir)?;
    let csv_path = dir.path().join(LADDER_CSV_FILE);
    if !dir.exists(LADDER_CSV_FILE) {
        bail!("{}: cannot read: missing", csv_path.display());
    }
    let rows = read_ladder_csv_in(dir)?;
    let mut by_run: BTreeMap<(&str, u32), &LadderRow> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        if !m.stages.contains(&r.stage) || r.run > m.runs {
            bail!(
                "{}: row {} ({} run {}) is not in manifest.json (stages {}, {} runs)",
                csv_path.display(),
                i + 2,
                r.stage,
                r.run,
                m.stages.join(","),
                m.runs
            );
        }
        if by_run.insert((r.stage.as_str(), r.run), r).is_some() {
            bail!(
                "{}: row {}: {} run {} appears twice",
                csv_path.display(),
                i + 2,
                r.stage,
                r.run
            );
        }
    }
    let mut stages = Vec::new();
    let mut notes = Vec::new();
    for st in &m.stages {
        let stage_dir = subdir_if_any(dir, st)?;
        let mut stage = Stage::new(st.clone());
        for k in 1..=m.runs {
            let rname = format!("run{k}");
            let rd_path = dir.path().join(st).join(&rname);
            let rd = match &stage_dir {
                Some(sd) => subdir_if_any(sd, &rname)?,
                None => None,
            };
            let row = by_run.get(&(st.as_str(), k)).copied();
            if allow_partial
                && row.is_none()
                && !rd.as_ref().is_some_and(|d| d.exists(SUMMARY_FILE))
            {
                notes.push(format!("{st} run {k}: not measured (partial ladder)"));
                continue;
            }
            let Some(rd) = rd else {
                bail!(
                    "{}: missing (manifest.json lists stage {st} with {} runs)",
                    rd_path.display(),
                    m.runs
                );
            };
            let (s, mut run) = read_bench_in(&rd)?;
            run.health.run = Some(k);
            if s.system.kernel_release != m.system.kernel_release
                || s.system.hostname != m.system.hostname
            {
                bail!(
                    "{}: measured on {} / kernel {}, but manifest.json says {} / kernel {} (mixed result directories?)",
                    rd_path.join(SUMMARY_FILE).display(),
                    s.system.hostname,
                    s.system.kernel_release,
                    m.system.hostname,
                    m.system.kernel_release
                );
            }
            if let Some(ss) = &s.stage
                && ss != st
            {
                bail!(
                    "{}: stage is \"{ss}\" but the run lies under stage {st}",
                    rd_path.join(SUMMARY_FILE).display()
                );
            }
            let want = LadderRow::from_summary(st, k, &s);
            let Some(row) = row else {
                if allow_partial {
                    notes.push(format!(
                        "{st} run {k}: no row in ladder.csv, figures from its summary.json"
                    ));
                    stage.push(run)?;
                    continue;
                }
                bail!(
                    "{}: no row for {st} run {k} (partial ladder? see --allow-partial)",
                    csv_path.display()
                );
            };
            if !row.matches(&want) {
                bail!(
                    "{}: the row for {st} run {k} differs from {}",
                    csv_path.display(),
                    rd_path.join(SUMMARY_FILE).display()
                );
            }
            stage.push(run)?;
        }
        if stage.runs.is_empty() {
            notes.push(format!("{st}: no run measured, left out"));
            continue;
        }
        stages.push(stage);
    }
    if stages.is_empty() {
        bail!("{}: no run of any stage was measured", dir.path().display());
    }
    Ok(Source {
        label,
        notes,
        kind: SourceKind::Ladder,
        kernel_release: Some(m.system.kernel_release.clone()),
        preempt_rt: Some(m.system.preempt_rt),
        loaded: Some(m.loaded),
        duration_s: Some(m.duration_s),
        stages,
    })
}

fn read_cyclictest(path: &Path, label: String) -> Result<Source> {
    let text = safefs::read_to_string_bounded(path, cyclictest::FILE_LIMIT)?;
    let h = cyclictest::parse(path, &text)?;
    drop(text);
    let multi = h.threads.len() > 1;
    let mut stages = Vec::new();
    for (i, t) in h.threads.iter().enumerate() {
        // The parser bounds buckets (< 10^6) and latencies (<= 60 s), so µs × 1000 fits in u64
        // and in the histogram's range.
        let mut wake = new_histogram();
        for (b, c) in t.counts.iter().enumerate() {
            if *c > 0 {
                wake.record_n(b as u64 * 1000, *c)
                    .map_err(|e| anyhow!("{}: thread {i}: {e:?}", path.display()))?;
            }
        }
        if t.overflows > 0 {
            wake.record_n(t.max_us * 1000, t.overflows)
                .map_err(|e| anyhow!("{}: thread {i}: {e:?}", path.display()))?;
        }
        let (p99, e99) = t.quantile_us(0.99);
        let (p999, e999) = t.quantile_us(0.999);
        let stats = RunStats {
            cycles: t.samples(),
            wake_mean: t.avg_us as f64 * 1000.0,
            wake_p99: p99 * 1000,
            wake_p999: p999 * 1000,
            wake_max: t.max_us * 1000,
            wake_p99_bounded: !e99,
            wake_p999_bounded: !e999,
            exec_mean: None,
            exec_max: None,
            missed: None,
            wkc_mismatches: None,
            recoveries: None,
        };
        let name = if multi {
            format!("cyclictest-t{i}")
        } else {
            "cyclictest".to_string()
        };
        let mut stage = Stage::new(name);
        stage.push(Run {
            stats,
            setup: None,
            wake,
            exec: None,
            health: RunHealth::default(),
        })?;
        stages.push(stage);
    }
    Ok(Source {
        label,
        notes: Vec::new(),
        kind: SourceKind::Cyclictest,
        kernel_release: None,
        preempt_rt: None,
        loaded: None,
        duration_s: None,
        stages,
    })
}

fn checked_total(mut v: impl Iterator<Item = u64>) -> Option<u64> {
    v.try_fold(0u64, |a, x| a.checked_add(x))
}

/// The counters of a stage must add up without overflow (the table shows their totals).
fn check_totals(src: &Source) -> Result<()> {
    for st in &src.stages {
        let over = |what: &str| {
            anyhow!(
                "{}: stage {}: the runs' {what} add up to more than {}",
                src.label,
                st.name,
                u64::MAX
            )
        };
        let r = &st.runs;
        let bus = || r.iter().filter_map(|r| r.health.bus.as_ref());
        let log = || r.iter().filter_map(|r| r.health.logging.as_ref());
        checked_total(r.iter().map(|r| r.stats.cycles)).ok_or_else(|| over("cycles"))?;
        checked_total(r.iter().filter_map(|r| r.stats.missed))
            .ok_or_else(|| over("missed deadlines"))?;
        checked_total(r.iter().filter_map(|r| r.stats.wkc_mismatches))
            .ok_or_else(|| over("WKC mismatches"))?;
        checked_total(r.iter().filter_map(|r| r.stats.recoveries))
            .ok_or_else(|| over("recoveries"))?;
        checked_total(bus().map(|b| b.rx_rejected)).ok_or_else(|| over("rejected frames"))?;
        checked_total(bus().map(|b| b.send_errors)).ok_or_else(|| over("send errors"))?;
        checked_total(log().map(|l| l.write_errors)).ok_or_else(|| over("log write errors"))?;
        checked_total(log().map(|l| l.events_dropped)).ok_or_else(|| over("dropped events"))?;
        checked_total(log().map(|l| l.samples_dropped)).ok_or_else(|| over("dropped samples"))?;
    }
    Ok(())
}

/// Reads one input (ladder dir, bench dir or cyclictest file); errors name the file. Every file
/// must be a regular file below its size limit; inside a directory no link is followed.
pub fn read_source(path: &Path, label: String, allow_partial: bool) -> Result<Source> {
    let md = fs::metadata(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if !md.is_dir() {
        // a cyclictest file; anything but a regular file is refused without reading it
        let src = read_cyclictest(path, label)?;
        check_totals(&src)?;
        return Ok(src);
    }
    let dir = Dir::open_named(path)?;
    let src = if dir.exists(MANIFEST_FILE) {
        read_ladder(&dir, label, allow_partial)?
    } else if dir.exists(SUMMARY_FILE) {
        let (s, run) = read_bench_in(&dir)?;
        let mut stage = Stage::new(s.stage.clone().unwrap_or_else(|| "bench".into()));
        stage.push(run)?;
        Source {
            label,
            notes: Vec::new(),
            kind: SourceKind::Bench,
            kernel_release: Some(s.system.kernel_release.clone()),
            preempt_rt: Some(s.system.preempt_rt),
            loaded: None,
            duration_s: Some(s.duration_s),
            stages: vec![stage],
        }
    } else {
        bail!(
            "{}: neither {MANIFEST_FILE} (ladder) nor {SUMMARY_FILE} (bench output) found",
            path.display()
        )
    };
    check_totals(&src)?;
    Ok(src)
}

/// Mean and sample standard deviation over runs (SD 0 for one run), plus the largest value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub sd: f64,
    pub worst: f64,
}

impl Spread {
    pub fn of(v: &[f64]) -> Option<Self> {
        if v.is_empty() {
            return None;
        }
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let sd = if v.len() > 1 {
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        let worst = v.iter().copied().fold(f64::MIN, f64::max);
        Some(Self {
            mean: round3(mean),
            sd: round3(sd),
            worst: round3(worst),
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Aggregated figures of a stage (ns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageRow {
    pub source: String,
    pub stage: String,
    pub kind: SourceKind,
    pub kernel_release: Option<String>,
    pub preempt_rt: Option<bool>,
    /// Setup of the cycle thread (see [`setup_of`]); runs that differ are joined with " / ".
    pub setup: Option<String>,
    pub runs: usize,
    pub cycles: u64,
    pub wake_mean_ns: Spread,
    pub wake_p99_ns: Spread,
    pub wake_p999_ns: Spread,
    pub wake_max_ns: Spread,
    /// P99 / P99.9 are upper bounds (cyclictest overflows).
    pub wake_p99_bounded: bool,
    pub wake_p999_bounded: bool,
    pub exec_mean_ns: Option<Spread>,
    pub exec_max_ns: Option<Spread>,
    pub missed_deadlines: Option<u64>,
    pub wkc_mismatches: Option<u64>,
    pub recoveries: Option<u64>,
    /// How runs that did not end by their duration ended: "interrupted" (a signal), "fatal" or
    /// "checkpoint" (still running when its summary was written); distinct, in run order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub status: Vec<&'static str>,
    /// Received frames the master refused as replies, total over the runs that recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_rejected: Option<u64>,
    /// Frames the link failed to send, total over the runs that recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_errors: Option<u64>,
    /// Failed writes to events.log/samples.csv/stderr, total over the runs that recorded any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_write_errors: Option<u64>,
}

/// Sum of the known values (saturating: [`read_source`] refuses totals that overflow); `None`
/// when any is unknown.
fn opt_sum(v: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    v.collect::<Option<Vec<u64>>>()
        .map(|x| x.iter().fold(0u64, |a, b| a.saturating_add(*b)))
}

/// Sum of the values that are there; `None` when none is.
fn any_sum(v: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    v.flatten()
        .fold(None, |a, b| Some(a.unwrap_or(0u64).saturating_add(b)))
}

fn opt_spread(v: impl Iterator<Item = Option<f64>>) -> Option<Spread> {
    v.collect::<Option<Vec<f64>>>().and_then(|x| Spread::of(&x))
}

/// The table rows of a source, one per stage.
pub fn stage_rows(src: &Source) -> Vec<StageRow> {
    src.stages
        .iter()
        .map(|st| {
            let s: Vec<&RunStats> = st.runs.iter().map(|r| &r.stats).collect();
            let f = |g: fn(&RunStats) -> f64| {
                Spread::of(&s.iter().map(|r| g(r)).collect::<Vec<_>>()).expect("runs")
            };
            StageRow {
                source: src.label.clone(),
                stage: st.name.clone(),
                kind: src.kind,
                kernel_release: src.kernel_release.clone(),
                preempt_rt: src.preempt_rt,
                setup: {
                    let mut v: Vec<String> = Vec::new();
                    for r in &st.runs {
                        if let Some(x) = &r.setup
                            && !v.contains(x)
                        {
                            v.push(x.clone());
                        }
                    }
                    (!v.is_empty()).then(|| v.join(" / "))
                },
                runs: s.len(),
                cycles: s.iter().fold(0u64, |a, r| a.saturating_add(r.cycles)),
                wake_mean_ns: f(|r| r.wake_mean),
                wake_p99_ns: f(|r| r.wake_p99 as f64),
                wake_p999_ns: f(|r| r.wake_p999 as f64),
                wake_max_ns: f(|r| r.wake_max as f64),
                wake_p99_bounded: s.iter().any(|r| r.wake_p99_bounded),
                wake_p999_bounded: s.iter().any(|r| r.wake_p999_bounded),
                exec_mean_ns: opt_spread(s.iter().map(|r| r.exec_mean)),
                exec_max_ns: opt_spread(s.iter().map(|r| r.exec_max.map(|v| v as f64))),
                missed_deadlines: opt_sum(s.iter().map(|r| r.missed)),
                wkc_mismatches: opt_sum(s.iter().map(|r| r.wkc_mismatches)),
                recoveries: opt_sum(s.iter().map(|r| r.recoveries)),
                status: {
                    let mut v = Vec::new();
                    for x in st.runs.iter().filter_map(|r| r.health.status()) {
                        if !v.contains(&x) {
                            v.push(x);
                        }
                    }
                    v
                },
                rx_rejected: any_sum(
                    st.runs
                        .iter()
                        .map(|r| r.health.bus.as_ref().map(|b| b.rx_rejected)),
                ),
                send_errors: any_sum(
                    st.runs
                        .iter()
                        .map(|r| r.health.bus.as_ref().map(|b| b.send_errors)),
                ),
                log_write_errors: any_sum(
                    st.runs
                        .iter()
                        .map(|r| r.health.logging.as_ref().map(|l| l.write_errors)),
                ),
            }
        })
        .collect()
}

/// Text from a result file, safe in a markdown table cell or list item: control characters
/// become spaces and `|` is escaped.
fn md_text(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .replace('|', "\\|")
}

/// What the report says about runs that did not end normally or had trouble around the
/// measurement: one line per run and kind, e.g. `s1 run 2: interrupted by SIGTERM after 4.2 s
/// of 10 s`. Empty for runs that ended by their duration without rejected frames, send errors
/// or logging errors (and for cyclictest and older summaries, which record none of it).
pub fn run_notes(stage: &Stage) -> Vec<String> {
    let mut out = Vec::new();
    for r in &stage.runs {
        let h = &r.health;
        let who = match h.run {
            Some(k) => format!("{} run {k}", stage.name),
            None => stage.name.clone(),
        };
        let ran = h.duration_s.map(|d| format!("{d:.1} s"));
        if let Some(stop) = &h.stop {
            let of = match stop.requested_duration_s {
                Some(req) => format!(" of {req} s requested"),
                None => String::new(),
            };
            let after = ran.as_deref().unwrap_or("?");
            match stop.reason {
                StopReason::Duration => {}
                StopReason::Signal => out.push(format!(
                    "{who}: interrupted by {} after {after}{of}",
                    md_text(stop.signal.as_deref().unwrap_or("a signal"))
                )),
                StopReason::Fatal => out.push(format!(
                    "{who}: ended by a fatal error after {after}{of}{}",
                    stop.detail
                        .as_deref()
                        .map(|d| format!(": {}", md_text(d)))
                        .unwrap_or_default()
                )),
                StopReason::Running => out.push(format!(
                    "{who}: a checkpoint of a run still going ({after} so far{of})"
                )),
            }
        }
        if let Some(b) = &h.bus
            && (b.rx_rejected > 0 || b.send_errors > 0)
        {
            let mut t = format!(
                "{who}: {} received frame(s) refused as replies",
                b.rx_rejected
            );
            if !b.rx_rejected_by_reason.is_empty() {
                let by: Vec<String> = b
                    .rx_rejected_by_reason
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect();
                let _ = write!(t, " ({})", by.join(", "));
            }
            let _ = write!(t, ", {} send error(s)", b.send_errors);
            out.push(t);
        }
        if let Some(l) = &h.logging
            && (l.write_errors > 0 || l.events_dropped > 0 || l.samples_dropped > 0)
        {
            let mut t = format!(
                "{who}: logging: {} failed write(s), {} event(s) and {} sample(s) not written",
                l.write_errors, l.events_dropped, l.samples_dropped
            );
            if let Some(e) = &l.first_error {
                let _ = write!(t, "; first error: {}", md_text(e));
            }
            out.push(t);
        }
    }
    out
}

fn us(ns: f64) -> String {
    format!("{:.3}", ns / 1000.0)
}

fn cell(s: &Spread, runs: usize) -> String {
    if runs > 1 {
        format!("{} ± {}", us(s.mean), us(s.sd))
    } else {
        us(s.mean)
    }
}

fn ocell(s: &Option<Spread>, runs: usize) -> String {
    s.as_ref()
        .map_or_else(|| "–".to_string(), |s| cell(s, runs))
}

fn ocount(v: Option<u64>) -> String {
    v.map_or_else(|| "–".to_string(), |v| v.to_string())
}

fn kernel_of(r: &StageRow) -> String {
    match (&r.kernel_release, r.preempt_rt) {
        (Some(k), Some(true)) => format!("{k} (RT)"),
        (Some(k), _) => k.clone(),
        (None, _) => "–".into(),
    }
}

fn describe_source(s: &Source) -> String {
    let mut d = match s.kind {
        SourceKind::Ladder => format!(
            "ladder, {} stage(s) × {} run(s)",
            s.stages.len(),
            s.stages.first().map_or(0, |st| st.runs.len())
        ),
        SourceKind::Bench => "bench run".to_string(),
        SourceKind::Cyclictest => format!("cyclictest histogram, {} thread(s)", s.stages.len()),
    };
    if let Some(dur) = s.duration_s {
        let _ = write!(d, " of {dur} s");
    }
    if let Some(k) = &s.kernel_release {
        let _ = write!(d, ", kernel {}", md_text(k));
        if s.preempt_rt == Some(true) {
            d.push_str(" (PREEMPT_RT)");
        }
    }
    match s.loaded {
        Some(true) => d.push_str(", under load"),
        Some(false) => d.push_str(", idle"),
        None => {}
    }
    d
}

/// The markdown report: sources, the reference-style table, and (for several sources) side-by-side
/// comparisons of wake mean, P99 and max per stage.
pub fn render_markdown(sources: &[Source]) -> String {
    let rows: Vec<StageRow> = sources.iter().flat_map(stage_rows).collect();
    let mut o = String::new();
    o.push_str("# rtcat latency report\n\n");
    for s in sources {
        let _ = writeln!(o, "- **{}**: {}", s.label, describe_source(s));
        for n in &s.notes {
            let _ = writeln!(o, "  - incomplete: {n}");
        }
    }
    o.push_str(
        "\nLatencies in µs; with several runs `mean ± SD` over the runs; worst max = largest max of any run; \
         missed, WKC mismatches and recoveries are totals over the runs.\n\n",
    );
    o.push_str(
        "| source | stage | kernel | setup | runs | cycles | wake mean | wake P99 | wake P99.9 | wake max | worst max | exec mean | exec max | missed | WKC mismatches | recoveries |\n",
    );
    o.push_str("|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    let mut bounded = false;
    for r in &rows {
        let m99 = if r.wake_p99_bounded { " ≤" } else { "" };
        let m999 = if r.wake_p999_bounded { " ≤" } else { "" };
        bounded |= r.wake_p99_bounded || r.wake_p999_bounded;
        let stage = if r.status.is_empty() {
            r.stage.clone()
        } else {
            format!("{} ({})", r.stage, r.status.join(", "))
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {}{m99} | {}{m999} | {} | {} | {} | {} | {} | {} | {} |",
            r.source,
            stage,
            md_text(&kernel_of(r)),
            md_text(r.setup.as_deref().unwrap_or("–")),
            r.runs,
            r.cycles,
            cell(&r.wake_mean_ns, r.runs),
            cell(&r.wake_p99_ns, r.runs),
            cell(&r.wake_p999_ns, r.runs),
            cell(&r.wake_max_ns, r.runs),
            us(r.wake_max_ns.worst),
            ocell(&r.exec_mean_ns, r.runs),
            ocell(&r.exec_max_ns, r.runs),
            ocount(r.missed_deadlines),
            ocount(r.wkc_mismatches),
            ocount(r.recoveries),
        );
    }
    if bounded {
        o.push_str(
            "\n≤: the percentile falls among samples above the cyclictest histogram range, which are counted at the reported max: an upper bound.\n",
        );
    }
    let mut noted = false;
    for s in sources {
        for st in &s.stages {
            for n in run_notes(st) {
                if !noted {
                    o.push_str(
                        "\nRuns to note (interrupted, fatal or checkpoint runs did not run their full duration; \
                         refused frames and send errors are counted by the master, logging errors did not stop the run):\n\n",
                    );
                    noted = true;
                }
                let _ = writeln!(o, "- **{}** {n}", s.label);
            }
        }
    }
    motion_sections(&mut o, sources);
    if sources.len() > 1 {
        let mut stages: Vec<String> = Vec::new();
        for r in &rows {
            if !stages.contains(&r.stage) {
                stages.push(r.stage.clone());
            }
        }
        for (title, get) in [
            (
                "wake mean",
                (|r: &StageRow| r.wake_mean_ns) as fn(&StageRow) -> Spread,
            ),
            ("wake P99", |r: &StageRow| r.wake_p99_ns),
            ("wake max", |r: &StageRow| r.wake_max_ns),
        ] {
            let _ = write!(o, "\n## Side by side: {title} (µs)\n\n| stage |");
            for s in sources {
                let _ = write!(o, " {} |", s.label);
            }
            o.push_str("\n|---|");
            o.push_str(&"--:|".repeat(sources.len()));
            o.push('\n');
            for st in &stages {
                let _ = write!(o, "| {st} |");
                for s in sources {
                    match rows.iter().find(|r| r.source == s.label && &r.stage == st) {
                        Some(r) => {
                            let _ = write!(o, " {} |", cell(&get(r), r.runs));
                        }
                        None => o.push_str(" – |"),
                    }
                }
                o.push('\n');
            }
        }
    }
    o
}

/// Distributed clocks and CiA 402 axes of the runs that had them: the phase lock (state, drift,
/// |phase error| P50..max and the signed extremes, sync window violations, the worst 0x092C)
/// and per axis the state reached, the following error (P99, max, in the axis' units) and the
/// faults.
fn motion_sections(o: &mut String, sources: &[Source]) {
    let runs = || {
        sources.iter().flat_map(|s| {
            s.stages.iter().flat_map(move |st| {
                st.runs.iter().map(move |r| {
                    let who = match r.health.run {
                        Some(k) => format!("{} {} run {k}", s.label, st.name),
                        None => format!("{} {}", s.label, st.name),
                    };
                    (md_text(&who), &r.health)
                })
            })
        })
    };
    if runs().any(|(_, h)| h.dc.is_some()) {
        o.push_str(
            "\n## Distributed clocks\n\nPhase error (absolute for the percentiles) = where the frame passed the reference clock \
             against its place on the SYNC0 grid, µs; 0x092C = the largest system time \
             difference of a DC subdevice, ns.\n\n",
        );
        o.push_str(
            "| run | SYNC0 | lock | drift ppm | P50 | P99 | P99.9 | max | signed min | signed max | window violations | worst 0x092C |\n",
        );
        o.push_str("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
        for (who, h) in runs() {
            let Some(d) = &h.dc else { continue };
            let p = &d.phase_error_ns;
            let worst = d
                .subdevices
                .iter()
                .filter_map(|x| x.worst_ns.map(|w| (x.position, w)))
                .max_by_key(|(_, w)| w.unsigned_abs())
                .map_or("–".to_string(), |(pos, w)| format!("{w} (pos {pos})"));
            let _ = writeln!(
                o,
                "| {who} | {} µs | {} | {:+.2} | {} | {} | {} | {} | {} | {} | {} | {} |",
                us(d.sync0_period_ns as f64),
                md_text(&d.lock_state),
                d.drift_ppm,
                us(p.p50 as f64),
                us(p.p99 as f64),
                us(p.p999 as f64),
                us(p.max as f64),
                us(d.phase_error_min_ns as f64),
                us(d.phase_error_max_ns as f64),
                d.sync_window_violations,
                worst
            );
        }
    }
    if runs().any(|(_, h)| h.axes.is_some()) {
        o.push_str(
            "\n## Axes\n\nFollowing error in the axis' units over the good cycles in operation enabled: the master's own (set-point minus position actual), the drive's 0x60F4 beside it when mapped. Held: bad cycles through which the last set-point was kept (in brackets the bound before a quick stop).\n\n",
        );
        o.push_str("| run | axis | mode | state reached | final state | ferr P99 | ferr max | 0x60F4 max | faults | quick stops | held | last fault |\n");
        o.push_str("|---|---|---|---|---|--:|--:|--:|--:|--:|--:|---|\n");
        for (who, h) in runs() {
            for a in h.axes.iter().flatten() {
                let units = |c: u64| format!("{:.6}", c as f64 / a.counts_per_unit);
                let (p99, max) = a
                    .following_error_counts
                    .as_ref()
                    .map_or(("–".to_string(), "–".to_string()), |f| {
                        (units(f.p99), units(f.max))
                    });
                let drive = a
                    .drive_following_error_counts
                    .as_ref()
                    .map_or("–".to_string(), |f| units(f.max));
                let held = match a.hold_bad_cycles {
                    Some(n) => format!("{} ({n})", a.held_cycles),
                    None => format!("{} (–)", a.held_cycles),
                };
                let _ = writeln!(
                    o,
                    "| {who} | {} | {} | {} | {} | {p99} | {max} | {drive} | {} | {} | {held} | {} |",
                    md_text(&a.name),
                    md_text(&a.mode),
                    md_text(a.state_reached.as_deref().unwrap_or("–")),
                    md_text(a.final_state.as_deref().unwrap_or("–")),
                    a.faults,
                    a.quick_stops,
                    match (a.last_error_code, &a.last_error_text) {
                        (Some(c), Some(x)) => format!("{c:#06x} {}", md_text(x)),
                        _ => "–".to_string(),
                    }
                );
            }
        }
    }
}

/// CSV: one row per source and stage, latencies in µs (3 decimals), empty where not applicable.
pub fn render_csv(sources: &[Source]) -> Result<String> {
    let rows: Vec<StageRow> = sources.iter().flat_map(stage_rows).collect();
    let lines: Vec<CsvRow> = rows.iter().map(CsvRow::of).collect();
    Ok(rtcat_results::table::to_csv(&lines)?)
}

/// One line of the CSV table: the columns are the fields, in this order. Latencies in µs with 3
/// decimals; a figure a source does not have (exec times of cyclictest, counters of a source
/// that does not record them) is empty.
#[derive(Serialize, Default)]
struct CsvRow<'a> {
    source: &'a str,
    stage: &'a str,
    kind: &'static str,
    kernel_release: &'a str,
    preempt_rt: Option<bool>,
    setup: &'a str,
    runs: usize,
    cycles: u64,
    wake_mean_us: String,
    wake_mean_sd_us: String,
    wake_p99_us: String,
    wake_p99_sd_us: String,
    wake_p999_us: String,
    wake_p999_sd_us: String,
    wake_max_us: String,
    wake_max_sd_us: String,
    wake_max_worst_us: String,
    wake_p99_upper_bound: bool,
    wake_p999_upper_bound: bool,
    exec_mean_us: Option<String>,
    exec_mean_sd_us: Option<String>,
    exec_max_us: Option<String>,
    exec_max_sd_us: Option<String>,
    exec_max_worst_us: Option<String>,
    missed_deadlines: Option<u64>,
    wkc_mismatches: Option<u64>,
    recoveries: Option<u64>,
    status: String,
    rx_rejected: Option<u64>,
    send_errors: Option<u64>,
    log_write_errors: Option<u64>,
}

impl<'a> CsvRow<'a> {
    fn of(r: &'a StageRow) -> Self {
        let exec_mean = r.exec_mean_ns.as_ref();
        let exec_max = r.exec_max_ns.as_ref();
        CsvRow {
            source: &r.source,
            stage: &r.stage,
            kind: match r.kind {
                SourceKind::Ladder => "ladder",
                SourceKind::Bench => "bench",
                SourceKind::Cyclictest => "cyclictest",
            },
            kernel_release: r.kernel_release.as_deref().unwrap_or(""),
            preempt_rt: r.preempt_rt,
            setup: r.setup.as_deref().unwrap_or(""),
            runs: r.runs,
            cycles: r.cycles,
            wake_mean_us: us(r.wake_mean_ns.mean),
            wake_mean_sd_us: us(r.wake_mean_ns.sd),
            wake_p99_us: us(r.wake_p99_ns.mean),
            wake_p99_sd_us: us(r.wake_p99_ns.sd),
            wake_p999_us: us(r.wake_p999_ns.mean),
            wake_p999_sd_us: us(r.wake_p999_ns.sd),
            wake_max_us: us(r.wake_max_ns.mean),
            wake_max_sd_us: us(r.wake_max_ns.sd),
            wake_max_worst_us: us(r.wake_max_ns.worst),
            wake_p99_upper_bound: r.wake_p99_bounded,
            wake_p999_upper_bound: r.wake_p999_bounded,
            exec_mean_us: exec_mean.map(|s| us(s.mean)),
            exec_mean_sd_us: exec_mean.map(|s| us(s.sd)),
            exec_max_us: exec_max.map(|s| us(s.mean)),
            exec_max_sd_us: exec_max.map(|s| us(s.sd)),
            exec_max_worst_us: exec_max.map(|s| us(s.worst)),
            missed_deadlines: r.missed_deadlines,
            wkc_mismatches: r.wkc_mismatches,
            recoveries: r.recoveries,
            status: r.status.join("/"),
            rx_rejected: r.rx_rejected,
            send_errors: r.send_errors,
            log_write_errors: r.log_write_errors,
        }
    }
}

#[derive(Serialize)]
struct JsonSource<'a> {
    label: &'a str,
    kind: SourceKind,
    kernel_release: &'a Option<String>,
    preempt_rt: Option<bool>,
    loaded: Option<bool>,
    duration_s: Option<f64>,
    notes: &'a [String],
    stages: Vec<JsonStage>,
}

#[derive(Serialize)]
struct JsonStage {
    #[serde(flatten)]
    row: StageRow,
    /// All runs' samples merged (ns).
    pooled_wake_ns: rtcat_results::LatencyStats,
    pooled_exec_ns: Option<rtcat_results::LatencyStats>,
}

/// JSON (schema `rtcat.report/1`): per source and stage the aggregated figures (ns) and the
/// pooled statistics of all runs' histograms.
pub fn render_json(sources: &[Source]) -> Result<String> {
    let js: Vec<JsonSource> = sources
        .iter()
        .map(|s| JsonSource {
            label: &s.label,
            kind: s.kind,
            kernel_release: &s.kernel_release,
            preempt_rt: s.preempt_rt,
            loaded: s.loaded,
            duration_s: s.duration_s,
            notes: &s.notes,
            stages: stage_rows(s)
                .into_iter()
                .zip(&s.stages)
                .map(|(row, st)| JsonStage {
                    row,
                    pooled_wake_ns: round_stats(rtcat_results::LatencyStats::from_histogram(
                        &st.pooled_wake(),
                    )),
                    pooled_exec_ns: st
                        .pooled_exec()
                        .map(|h| round_stats(rtcat_results::LatencyStats::from_histogram(&h))),
                })
                .collect(),
        })
        .collect();
    let v = serde_json::json!({ "schema": "rtcat.report/1", "sources": js });
    Ok(serde_json::to_string_pretty(&v)? + "\n")
}

fn round_stats(mut s: rtcat_results::LatencyStats) -> rtcat_results::LatencyStats {
    s.mean = round3(s.mean);
    s
}

/// Parses `WxH`.
pub fn parse_size(s: &str) -> Result<(u32, u32)> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| anyhow!("--plot-size: \"{s}\" is not WxH"))?;
    let w: u32 = w
        .trim()
        .parse()
        .map_err(|_| anyhow!("--plot-size: width \"{w}\" is not a number"))?;
    let h: u32 = h
        .trim()
        .parse()
        .map_err(|_| anyhow!("--plot-size: height \"{h}\" is not a number"))?;
    if !(320..=8000).contains(&w) || !(240..=8000).contains(&h) {
        bail!("--plot-size: {w}x{h} is outside 320x240 ..= 8000x8000");
    }
    Ok((w, h))
}

/// Reads every input with its label (checks labels first).
pub fn load_sources(
    inputs: &[PathBuf],
    labels: &[String],
    allow_partial: bool,
) -> Result<Vec<Source>> {
    if !labels.is_empty() && labels.len() != inputs.len() {
        return Err(usage(format!(
            "--label: {} label(s) for {} input(s); give one per input",
            labels.len(),
            inputs.len()
        )));
    }
    let mut names = Vec::new();
    for (i, p) in inputs.iter().enumerate() {
        let l = match labels.get(i) {
            Some(l) => l.clone(),
            None => {
                let canon = fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                canon.file_name().map_or_else(
                    || p.display().to_string(),
                    |n| n.to_string_lossy().to_string(),
                )
            }
        };
        if l.is_empty() || l.contains(['|', '\n']) {
            return Err(usage(format!(
                "--label: \"{l}\" must be non-empty and contain no '|' or line break"
            )));
        }
        names.push(l);
    }
    let mut seen = BTreeSet::new();
    for n in &names {
        if !seen.insert(n) {
            return Err(usage(format!(
                "--label: two inputs are labelled \"{n}\"; give distinct --label values"
            )));
        }
    }
    inputs
        .iter()
        .zip(names)
        .map(|(p, l)| read_source(p, l, allow_partial))
        .collect()
}

/// Exit status after stdout was closed under us (the reader went away, e.g. `| head -1`) while
/// SIGPIPE is ignored: what a shell shows for a command killed by SIGPIPE (128 + 13).
pub const EXIT_BROKEN_PIPE: i32 = 141;

/// `rtcat report`: prints the table (or writes it to `--out`) and writes the plots. Returns the exit
/// code: 0 on success, 1 when an input is malformed or incomplete, 2 for invalid arguments,
/// [`EXIT_BROKEN_PIPE`] (quietly) when stdout is a pipe nobody reads any more; the message on
/// stderr names the file or option. Nothing is printed with `println!`/`eprintln!`, so a closed
/// stdout or stderr is never a panic.
pub fn run_report(args: &ReportOptions) -> Result<i32> {
    if args.inputs.is_empty() {
        say!(
            "rtcat report: error: no input: name a ladder directory, a bench directory or a cyclictest file"
        );
        return Ok(2);
    }
    let size = match parse_size(&args.plot_size) {
        Ok(s) => s,
        Err(e) => {
            say!("rtcat report: error: {e:#}");
            return Ok(2);
        }
    };
    #[cfg(not(feature = "plots"))]
    if args.plots.is_some() {
        say!("rtcat report: error: --plots: {}", crate::plot::ABSENT);
        return Ok(2);
    }
    let sources = match load_sources(&args.inputs, &args.label, args.allow_partial) {
        Ok(s) => s,
        Err(e) => {
            say!("rtcat report: error: {e:#}");
            return Ok(if is_usage(&e) { 2 } else { 1 });
        }
    };
    let text = match args.format {
        Format::Md => render_markdown(&sources),
        Format::Csv => render_csv(&sources)?,
        Format::Json => render_json(&sources)?,
    };
    match &args.out {
        Some(p) => {
            if let Err(e) = crate::outfile::write_named(p, text.as_bytes()) {
                say!("rtcat report: error: --out: {e:#}");
                return Ok(1);
            }
        }
        None => match crate::outfile::write_stdout(text.as_bytes()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(EXIT_BROKEN_PIPE),
            Err(e) => {
                say!("rtcat report: error: stdout: {e}");
                return Ok(1);
            }
        },
    }
    if let Some(dir) = &args.plots {
        let written = crate::outfile::open_named_dir(dir)
            .and_then(|d| crate::plot::write_plots_in(&sources, &d, size));
        match written {
            Ok(files) => say!(
                "rtcat report: wrote {} plot files to {}",
                files.len(),
                dir.display()
            ),
            Err(e) => {
                say!("rtcat report: error: --plots: {e:#}");
                return Ok(1);
            }
        }
    }
    Ok(0)
}
