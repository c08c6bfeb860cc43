//! `rtcat report`: the seed-style A/B table (markdown, CSV or JSON) and plots from ladder
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

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::cyclictest;
use crate::summary::{
    EXEC_HDR_FILE, LADDER_CSV_FILE, LadderManifest, LadderRow, MANIFEST_FILE, SUMMARY_FILE,
    Summary, WAKE_HDR_FILE, new_histogram, parse_ladder_csv, read_hdr,
};

/// Output format of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Md,
    Csv,
    Json,
}

/// Arguments of `rtcat report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Ladder directories, bench output directories or cyclictest histogram files
    #[arg(value_name = "DIR", required = true)]
    pub inputs: Vec<PathBuf>,
    /// Table format
    #[arg(long, value_enum, default_value = "md")]
    pub format: Format,
    /// Write plots (SVG and PNG) into DIR (created if missing)
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Label of each input in order (default: the input's file name); give one per input
    #[arg(long, value_name = "NAME")]
    pub label: Vec<String>,
    /// Size of each plot in pixels
    #[arg(long, value_name = "WxH", default_value = "1000x600")]
    pub plot_size: String,
    /// Write the table to FILE instead of stdout
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Report an interrupted ladder: runs that were never measured (no run directory or no
    /// summary.json, and no ladder.csv row) are left out and listed; anything malformed still fails
    #[arg(long)]
    pub allow_partial: bool,
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

/// One run: its figures and its histograms (values in ns).
#[derive(Debug, Clone)]
pub struct Run {
    pub stats: RunStats,
    /// How the cycle thread ran (policy, priority, CPU, governor, timer slack), when known.
    pub setup: Option<String>,
    pub wake: Histogram<u64>,
    pub exec: Option<Histogram<u64>>,
}

/// One stage (a row of the table).
#[derive(Debug, Clone)]
pub struct Stage {
    pub name: String,
    pub runs: Vec<Run>,
}

impl Stage {
    /// All runs' wake-lateness samples merged.
    pub fn pooled_wake(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        for r in &self.runs {
            h.add(&r.wake).expect("same bounds");
        }
        h
    }
    /// All runs' execution-time samples merged (None when no run has them).
    pub fn pooled_exec(&self) -> Option<Histogram<u64>> {
        let mut h = new_histogram();
        let mut any = false;
        for e in self.runs.iter().filter_map(|r| r.exec.as_ref()) {
            h.add(e).expect("same bounds");
            any = true;
        }
        any.then_some(h)
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
pub fn setup_of(sys: &crate::summary::SystemInfo) -> String {
    let policy = match sys.policy {
        crate::summary::Policy::Fifo => format!("FIFO {}", sys.priority),
        crate::summary::Policy::Other => "OTHER".to_string(),
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

/// Reads a bench output directory (summary.json + wake/exec histograms).
pub fn read_bench_dir(dir: &Path) -> Result<(Summary, Run)> {
    let sp = dir.join(SUMMARY_FILE);
    if !sp.is_file() {
        bail!("{}: missing", sp.display());
    }
    let s = Summary::read(&sp)?;
    let wp = dir.join(WAKE_HDR_FILE);
    let ep = dir.join(EXEC_HDR_FILE);
    for p in [&wp, &ep] {
        if !p.is_file() {
            bail!(
                "{}: missing (written next to every summary.json)",
                p.display()
            );
        }
    }
    let wake = read_hdr(&wp)?;
    check_hdr(
        &wp,
        &wake,
        s.wake_lateness_ns.count,
        s.wake_lateness_ns.max,
        "wake_lateness_ns",
    )?;
    let exec = read_hdr(&ep)?;
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
    Ok((
        s,
        Run {
            stats,
            setup,
            wake,
            exec: Some(exec),
        },
    ))
}

fn read_ladder(dir: &Path, label: String, allow_partial: bool) -> Result<Source> {
    let m = LadderManifest::read(&dir.join(MANIFEST_FILE))?;
    let csv_path = dir.join(LADDER_CSV_FILE);
    let text = fs::read_to_string(&csv_path)
        .map_err(|e| anyhow!("{}: cannot read: {e}", csv_path.display()))?;
    let rows = parse_ladder_csv(&text).map_err(|e| anyhow!("{}: {e}", csv_path.display()))?;
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
        if rows[..i]
            .iter()
            .any(|o| o.stage == r.stage && o.run == r.run)
        {
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
        let mut runs = Vec::new();
        for k in 1..=m.runs {
            let rd = dir.join(st).join(format!("run{k}"));
            let row = rows.iter().find(|r| r.stage == *st && r.run == k);
            if allow_partial && row.is_none() && !rd.join(SUMMARY_FILE).exists() {
                notes.push(format!("{st} run {k}: not measured (partial ladder)"));
                continue;
            }
            if !rd.is_dir() {
                bail!(
                    "{}: missing (manifest.json lists stage {st} with {} runs)",
                    rd.display(),
                    m.runs
                );
            }
            let (s, run) = read_bench_dir(&rd)?;
            if s.system.kernel_release != m.system.kernel_release
                || s.system.hostname != m.system.hostname
            {
                bail!(
                    "{}: measured on {} / kernel {}, but manifest.json says {} / kernel {} (mixed result directories?)",
                    rd.join(SUMMARY_FILE).display(),
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
                    rd.join(SUMMARY_FILE).display()
                );
            }
            let want = LadderRow::from_summary(st, k, &s);
            let Some(row) = row else {
                if allow_partial {
                    notes.push(format!(
                        "{st} run {k}: no row in ladder.csv, figures from its summary.json"
                    ));
                    runs.push(run);
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
                    rd.join(SUMMARY_FILE).display()
                );
            }
            runs.push(run);
        }
        if runs.is_empty() {
            notes.push(format!("{st}: no run measured, left out"));
            continue;
        }
        stages.push(Stage {
            name: st.clone(),
            runs,
        });
    }
    if stages.is_empty() {
        bail!("{}: no run of any stage was measured", dir.display());
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
    let bytes = fs::read(path).map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))?;
    let text =
        String::from_utf8(bytes).map_err(|_| anyhow!("{}: not a text file", path.display()))?;
    let h = cyclictest::parse(path, &text)?;
    let multi = h.threads.len() > 1;
    let mut stages = Vec::new();
    for (i, t) in h.threads.iter().enumerate() {
        let mut wake = new_histogram();
        for (b, c) in t.counts.iter().enumerate() {
            if *c > 0 {
                wake.record_n(b as u64 * 1000, *c)
                    .map_err(|e| anyhow!("{}: {e:?}", path.display()))?;
            }
        }
        if t.overflows > 0 {
            wake.record_n(t.max_us * 1000, t.overflows)
                .map_err(|e| anyhow!("{}: {e:?}", path.display()))?;
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
        stages.push(Stage {
            name,
            runs: vec![Run {
                stats,
                setup: None,
                wake,
                exec: None,
            }],
        });
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

/// Reads one input (ladder dir, bench dir or cyclictest file); errors name the file.
pub fn read_source(path: &Path, label: String, allow_partial: bool) -> Result<Source> {
    let md = fs::metadata(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if md.is_file() {
        return read_cyclictest(path, label);
    }
    if path.join(MANIFEST_FILE).exists() {
        return read_ladder(path, label, allow_partial);
    }
    if path.join(SUMMARY_FILE).exists() {
        let (s, run) = read_bench_dir(path)?;
        return Ok(Source {
            label,
            notes: Vec::new(),
            kind: SourceKind::Bench,
            kernel_release: Some(s.system.kernel_release.clone()),
            preempt_rt: Some(s.system.preempt_rt),
            loaded: None,
            duration_s: Some(s.duration_s),
            stages: vec![Stage {
                name: s.stage.clone().unwrap_or_else(|| "bench".into()),
                runs: vec![run],
            }],
        });
    }
    bail!(
        "{}: neither {MANIFEST_FILE} (ladder) nor {SUMMARY_FILE} (bench output) found",
        path.display()
    )
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
}

fn opt_sum(v: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    v.collect::<Option<Vec<u64>>>().map(|x| x.iter().sum())
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
                cycles: s.iter().map(|r| r.cycles).sum(),
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
            }
        })
        .collect()
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
        let _ = write!(d, ", kernel {k}");
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

/// The markdown report: sources, the seed-style table, and (for several sources) side-by-side
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
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {}{m99} | {}{m999} | {} | {} | {} | {} | {} | {} | {} |",
            r.source,
            r.stage,
            kernel_of(r),
            r.setup.as_deref().unwrap_or("–"),
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

/// CSV: one row per source and stage, latencies in µs (3 decimals), empty where not applicable.
pub fn render_csv(sources: &[Source]) -> String {
    let mut o = String::from(
        "source,stage,kind,kernel_release,preempt_rt,setup,runs,cycles,wake_mean_us,wake_mean_sd_us,wake_p99_us,wake_p99_sd_us,wake_p999_us,wake_p999_sd_us,wake_max_us,wake_max_sd_us,wake_max_worst_us,wake_p99_upper_bound,wake_p999_upper_bound,exec_mean_us,exec_mean_sd_us,exec_max_us,exec_max_sd_us,exec_max_worst_us,missed_deadlines,wkc_mismatches,recoveries\n",
    );
    let q = |s: &str| {
        if s.contains([',', '"', '\n']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    };
    for r in sources.iter().flat_map(stage_rows) {
        let kind = match r.kind {
            SourceKind::Ladder => "ladder",
            SourceKind::Bench => "bench",
            SourceKind::Cyclictest => "cyclictest",
        };
        let opt = |s: &Option<Spread>| match s {
            Some(s) => format!("{},{},{}", us(s.mean), us(s.sd), us(s.worst)),
            None => ",,".into(),
        };
        let exec_mean = match &r.exec_mean_ns {
            Some(s) => format!("{},{}", us(s.mean), us(s.sd)),
            None => ",".into(),
        };
        let oc = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
        let _ = writeln!(
            o,
            "{},{},{kind},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{exec_mean},{},{},{},{}",
            q(&r.source),
            q(&r.stage),
            q(r.kernel_release.as_deref().unwrap_or("")),
            r.preempt_rt.map_or(String::new(), |b| b.to_string()),
            q(r.setup.as_deref().unwrap_or("")),
            r.runs,
            r.cycles,
            us(r.wake_mean_ns.mean),
            us(r.wake_mean_ns.sd),
            us(r.wake_p99_ns.mean),
            us(r.wake_p99_ns.sd),
            us(r.wake_p999_ns.mean),
            us(r.wake_p999_ns.sd),
            us(r.wake_max_ns.mean),
            us(r.wake_max_ns.sd),
            us(r.wake_max_ns.worst),
            r.wake_p99_bounded,
            r.wake_p999_bounded,
            opt(&r.exec_max_ns),
            oc(r.missed_deadlines),
            oc(r.wkc_mismatches),
            oc(r.recoveries),
        );
    }
    o
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
    pooled_wake_ns: crate::summary::LatencyStats,
    pooled_exec_ns: Option<crate::summary::LatencyStats>,
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
                    pooled_wake_ns: round_stats(crate::summary::LatencyStats::from_histogram(
                        &st.pooled_wake(),
                    )),
                    pooled_exec_ns: st
                        .pooled_exec()
                        .map(|h| round_stats(crate::summary::LatencyStats::from_histogram(&h))),
                })
                .collect(),
        })
        .collect();
    let v = serde_json::json!({ "schema": "rtcat.report/1", "sources": js });
    Ok(serde_json::to_string_pretty(&v)? + "\n")
}

fn round_stats(mut s: crate::summary::LatencyStats) -> crate::summary::LatencyStats {
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
        bail!(
            "--label: {} label(s) for {} input(s); give one per input",
            labels.len(),
            inputs.len()
        );
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
            bail!("--label: \"{l}\" must be non-empty and contain no '|' or line break");
        }
        names.push(l);
    }
    let mut seen = BTreeSet::new();
    for n in &names {
        if !seen.insert(n) {
            bail!("--label: two inputs are labelled \"{n}\"; give distinct --label values");
        }
    }
    inputs
        .iter()
        .zip(names)
        .map(|(p, l)| read_source(p, l, allow_partial))
        .collect()
}

/// `rtcat report`: prints the table (or writes it to `--out`) and writes the plots. Returns the exit
/// code: 0 on success, 1 when an input is malformed or incomplete, 2 for invalid arguments; the
/// message on stderr names the file or option.
pub fn run_report(args: &ReportArgs) -> Result<i32> {
    let size = match parse_size(&args.plot_size) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rtcat report: error: {e:#}");
            return Ok(2);
        }
    };
    let sources = match load_sources(&args.inputs, &args.label, args.allow_partial) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("{e:#}");
            eprintln!("rtcat report: error: {msg}");
            return Ok(if msg.starts_with("--") { 2 } else { 1 });
        }
    };
    let text = match args.format {
        Format::Md => render_markdown(&sources),
        Format::Csv => render_csv(&sources),
        Format::Json => render_json(&sources)?,
    };
    match &args.out {
        Some(p) => {
            fs::write(p, &text).with_context(|| format!("--out: cannot write {}", p.display()))?
        }
        None => {
            use std::io::Write;
            let mut so = std::io::stdout().lock();
            so.write_all(text.as_bytes())?;
            so.flush()?;
        }
    }
    if let Some(dir) = &args.plots {
        fs::create_dir_all(dir)
            .with_context(|| format!("--plots: cannot create {}", dir.display()))?;
        let files = crate::plot::write_plots(&sources, dir, size)?;
        eprintln!(
            "rtcat report: wrote {} plot files to {}",
            files.len(),
            dir.display()
        );
    }
    Ok(0)
}
