//! `rtcat ladder`: the reference A/B ladder (docs/NOTES.md §1) with one command.
//!
//! Every stage adds exactly one change on top of the previous one (docs/NOTES.md §1):
//!
//! | stage | change | how |
//! |---|---|---|
//! | s0 | plain: SCHED_OTHER, unpinned, governor and timer slack as found | `rtcat bench --no-rt` |
//! | s1 | + cycle thread pinned to the RT CPU, SCHED_FIFO | `--cpu N --priority P` |
//! | s2 | + `performance` governor on the RT CPU's cpufreq policy | tune group `governor` |
//! | s3 | + NIC interrupt coalescing off (`[tune.coalesce]`) | tune group `coalesce` |
//! | s4 | + runtime CPU shield of the RT CPU | tune group `shield` |
//!
//! Each run of a stage: apply the stage's knobs through rttune (journal `tune-state.json` inside the
//! ladder directory, see below), start the optional load (`--loaded`), run `rtcat bench` as a child process
//! (its own memory locking and RT setup, so a crashing run cannot lose the ladder), stop the load,
//! restore every knob. Restore also runs on error, on a panic and on SIGINT/SIGTERM (the first
//! signal stops the running bench gracefully, a second one kills it; the knobs are restored either
//! way). A knob that cannot change here (no cpufreq, no NIC with `--sim`, EPERM) is recorded in
//! `ladder-log.json` and the run goes on.
//!
//! Results (one directory, the layout `rtcat report` reads, see `rtlab::summary`):
//! `manifest.json`, `ladder.csv` (one row per completed run), `<stage>/run<k>/` (the bench output:
//! `summary.json`, `*.hdr`, `summary.txt`, `events.log`, plus `bench.log` and `tune.json`),
//! `ladder-log.json` (what every run changed, refused or found N/A, and how it ended),
//! `report.md` and `plots/`. A run stopped by a signal is kept as `run<k>.interrupted`, a failed
//! one as `run<k>.failed`; neither enters `ladder.csv`.
//!
//! The ladder creates its directory itself (an existing one, even empty, is refused: another
//! user could have made it) and opens it once: the journal, which the ladder reads back as root
//! after every run, and every file the ladder writes there go through that directory handle
//! ([`safefs::Dir`]), never following a link. A user who can rename the directory (it lies in
//! their own) can swap the path but not what the handle refers to, so they cannot hand root a
//! journal. After a killed ladder, `rtcat tune restore --state DIR/tune-state.json` goes by the
//! path and so trusts the journal only if DIR and every directory above it are root's.

use std::ffi::OsString;
use std::fs;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow};
use clap::{Args, ValueEnum};
use rtlab::summary::{
    LADDER_CSV_FILE, LADDER_CSV_HEADER, LADDER_SCHEMA, LadderManifest, MANIFEST_FILE, Policy,
    SystemInfo, ladder_csv_row,
};
use rttune::tune::{self, KnobGroup, Outcome, TuneCtx};
use rttune::{CpuSet, Host, SysRoot};
use serde::Serialize;

use crate::config::Config;
use rttune::journal::StateFile;
use safefs::Dir;
use std::sync::Arc;

/// One line on stderr. A closed stderr must not stop a ladder before every knob is restored
/// (SIGPIPE is ignored), so a failed write is dropped.
fn say(line: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{line}");
}

/// The report table on stdout; a closed pipe (`| head`) is not an error.
fn print_out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes()).and_then(|()| o.flush());
}

/// Longest `--duration` of one run (1 day).
pub const MAX_RUN_S: f64 = 86_400.0;
/// Most `--runs` per stage.
pub const MAX_RUNS: u32 = 1000;
/// The tune journal inside a ladder directory.
pub const JOURNAL_FILE: &str = "tune-state.json";
/// What every run did, inside a ladder directory (schema [`LOG_SCHEMA`]).
pub const LOG_FILE: &str = "ladder-log.json";
pub const LOG_SCHEMA: &str = "rtcat.ladder-log/1";
/// The report table written after the ladder.
pub const REPORT_FILE: &str = "report.md";
/// Coalescing of stage s3 when `[tune.coalesce]` is empty: the reference study's values (docs/NOTES.md §3).
pub const SEED_COALESCE: rttune::CoalesceConfig = rttune::CoalesceConfig {
    tx_usecs: Some(0),
    tx_frames: Some(25),
    rx_usecs: None,
    rx_frames: Some(1),
};

const STAGES_HELP: &str = "\
Stages (each adds exactly one change to the one before; any subset, in the order given):
  s0  plain: SCHED_OTHER, not pinned, governor and timer slack as found (recorded)
  s1  + cycle thread pinned to the RT CPU (--cpu / [cycle].cpu) at SCHED_FIFO [cycle].priority
  s2  + 'performance' governor ([tune].governor) on the RT CPU's cpufreq policy
  s3  + NIC interrupt coalescing off ([tune.coalesce]; default tx-usecs 0 tx-frames 25
        rx-frames 1); N/A with --sim (no NIC): the stage still runs and the log says so
  s4  + runtime CPU shield of the RT CPU (rtcat tune group 'shield': irqbalance stopped, default
        and movable IRQ affinity, NIC IRQs, unbound workqueues, tasks, timer_migration)
The kernel (PREEMPT_RT or not) is recorded in manifest.json: ladders on two kernels compare with
`rtcat report DIR1 DIR2`.

Every run applies its stage with rtcat tune (journal DIR/tune-state.json), runs `rtcat bench` in
a child process and restores every knob afterwards, also on error and on Ctrl-C (a second Ctrl-C
kills the running bench; the knobs are restored all the same). If the ladder itself is killed,
`rtcat tune restore --state DIR/tune-state.json` puts the knobs back (it trusts the journal
only when DIR and every directory above it belong to root and nobody else can write them).
DIR must not exist: the ladder creates it.

Output: DIR/manifest.json, DIR/ladder.csv, DIR/<stage>/run<k>/ (summary.json, histograms,
bench.log, tune.json), DIR/ladder-log.json, DIR/report.md, DIR/plots/.
Exit codes: 0 every run completed, 1 a run failed or a knob could not be restored, 2 bad usage,
130/143 stopped by SIGINT/SIGTERM (completed runs are kept: `rtcat report --allow-partial DIR`).";

/// One rung of the ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StageId {
    /// plain: SCHED_OTHER, not pinned, governor and timer slack as found
    S0,
    /// + pinned to the RT CPU, SCHED_FIFO
    S1,
    /// + performance governor
    S2,
    /// + NIC coalescing off
    S3,
    /// + runtime CPU shield
    S4,
}

impl StageId {
    pub const ALL: [StageId; 5] = [
        StageId::S0,
        StageId::S1,
        StageId::S2,
        StageId::S3,
        StageId::S4,
    ];

    pub fn id(self) -> &'static str {
        match self {
            StageId::S0 => "s0",
            StageId::S1 => "s1",
            StageId::S2 => "s2",
            StageId::S3 => "s3",
            StageId::S4 => "s4",
        }
    }

    /// The one change this stage adds.
    pub fn change(self) -> &'static str {
        match self {
            StageId::S0 => "plain: SCHED_OTHER, not pinned, governor and timer slack as found",
            StageId::S1 => "+ pinned to the RT CPU, SCHED_FIFO",
            StageId::S2 => "+ performance governor on the RT CPU",
            StageId::S3 => "+ NIC interrupt coalescing off",
            StageId::S4 => "+ runtime CPU shield",
        }
    }

    /// Knob groups this stage adds itself.
    pub fn own_groups(self) -> Vec<KnobGroup> {
        match self {
            StageId::S0 | StageId::S1 => vec![],
            StageId::S2 => vec![KnobGroup::Governor],
            StageId::S3 => vec![KnobGroup::Coalesce],
            StageId::S4 => vec![KnobGroup::Shield],
        }
    }

    /// Knob groups in effect during this stage (its own and those of every stage below).
    pub fn groups(self) -> Vec<KnobGroup> {
        Self::ALL
            .iter()
            .filter(|s| **s <= self)
            .flat_map(|s| s.own_groups())
            .collect()
    }

    /// Does the cycle thread run pinned at SCHED_FIFO?
    pub fn rt(self) -> bool {
        self != StageId::S0
    }
}

fn parse_duration(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("\"{s}\" is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= MAX_RUN_S) {
        return Err(format!("{s} s: must be > 0 and at most {MAX_RUN_S} s"));
    }
    Ok(v)
}

/// `rtcat ladder`
#[derive(Args, Debug, Clone)]
#[command(after_long_help = STAGES_HELP)]
pub struct LadderArgs {
    /// Stages to run, comma-separated, in this order (see below)
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "LIST",
        default_value = "s0,s1,s2,s3,s4"
    )]
    pub stages: Vec<StageId>,
    /// Run the reference load mix (CPU hogs, tmpfs and anon memory churn, fork churn) on every CPU but
    /// the RT CPU during each run
    #[arg(long)]
    pub loaded: bool,
    /// Runs per stage
    #[arg(long, value_name = "R", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_RUNS)))]
    pub runs: u32,
    /// Seconds of measurement per run
    #[arg(long, value_name = "S", default_value = "60", value_parser = parse_duration)]
    pub duration: f64,
    /// Measure on the in-process simulated segment (no NIC; stage s3 is N/A)
    #[arg(long, conflicts_with = "iface")]
    pub sim: bool,
    /// EtherCAT interface (default: [bus].interface)
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// Configuration file ([cycle], [rt], [tune]; default: built-in defaults)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Results directory, created by the ladder; must not exist (default: rtcat-ladder-<UTC time>)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// RT CPU (default: [cycle].cpu, else the last CPU this process may use)
    #[arg(long, value_name = "N")]
    pub cpu: Option<usize>,
    /// Do not write DIR/plots
    #[arg(long)]
    pub no_plots: bool,
    /// Root of the tree to tune (fake trees in tests)
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// Bad usage (exit 2); the message names the option and the value.
#[derive(Debug)]
struct Usage(String);

fn usage<T>(msg: impl Into<String>) -> Result<T, Usage> {
    Err(Usage(msg.into()))
}

/// Bus of the runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "mode", content = "interface")]
pub enum Bus {
    Sim,
    Iface(String),
}

/// Everything a ladder needs, resolved and validated before anything is touched.
struct Plan {
    stages: Vec<StageId>,
    runs: u32,
    duration: f64,
    bus: Bus,
    config: Option<PathBuf>,
    out: PathBuf,
    /// `out`, created by `resolve` and opened once: everything the ladder writes or reads there.
    dir: Arc<Dir>,
    rt_cpu: usize,
    priority: u8,
    load_cpus: Option<Vec<usize>>,
    root: SysRoot,
    tune: Option<TuneCtx>,
    notes: Vec<String>,
    plots: bool,
}

use crate::output::utc_stamp;

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn resolve(a: &LadderArgs) -> Result<Plan, Usage> {
    let mut notes = Vec::new();
    if a.stages.is_empty() {
        return usage("--stages: empty list");
    }
    for (i, s) in a.stages.iter().enumerate() {
        if a.stages[..i].contains(s) {
            return usage(format!("--stages: {} listed twice", s.id()));
        }
    }
    let cfg = match &a.config {
        None => Config::default(),
        Some(p) => Config::load(p).map_err(|e| Usage(e.to_string()))?,
    };
    let bus = match (&a.iface, a.sim) {
        (_, true) => Bus::Sim,
        (Some(i), false) => Bus::Iface(i.clone()),
        (None, false) => Bus::Iface(cfg.bus.interface.clone()),
    };
    if let Bus::Iface(i) = &bus
        && let Err(m) = rttune::netif::check_name(i)
    {
        let from = if a.iface.is_some() {
            "--iface"
        } else {
            "[bus].interface"
        };
        return usage(format!("{from}: {m}"));
    }
    let usable = rtlab::cpus::usable_cpus()
        .map_err(|e| Usage(format!("cannot read the CPUs this process may use: {e:#}")))?;
    let rt_cpu = match a.cpu.or(cfg.cycle.cpu) {
        Some(c) => c,
        None => *usable
            .last()
            .ok_or_else(|| Usage("no usable CPU found".into()))?,
    };
    if !usable.contains(&rt_cpu) {
        let from = if a.cpu.is_some() {
            "--cpu"
        } else {
            "[cycle].cpu"
        };
        return usage(format!(
            "{from}: CPU {rt_cpu} is not online or not allowed for this process (usable: {})",
            rtlab::cpus::format_cpu_list(&usable)
        ));
    }
    let load_cpus = if a.loaded {
        let cpus: Vec<usize> = usable
            .iter()
            .copied()
            .filter(|c| *c != rt_cpu && Some(*c) != cfg.cycle.txrx_cpu)
            .collect();
        if cpus.is_empty() {
            return usage(format!(
                "--loaded: no CPU left for the load besides the RT CPU {rt_cpu} (usable: {})",
                rtlab::cpus::format_cpu_list(&usable)
            ));
        }
        Some(cpus)
    } else {
        None
    };
    if !a.root.is_dir() {
        return usage(format!("--root: {} is not a directory", a.root.display()));
    }
    let root = SysRoot::new(&a.root);
    let needs_tune = a.stages.iter().any(|s| !s.groups().is_empty());
    let tune = if needs_tune {
        let mut section = cfg.tune.clone();
        if a.stages.iter().any(|s| *s >= StageId::S3) && section.coalesce.is_empty() {
            section.coalesce = SEED_COALESCE;
            notes.push(
                "[tune.coalesce] is not configured: stage s3 uses the reference study's values \
                 (tx-usecs 0, tx-frames 25, rx-frames 1)"
                    .into(),
            );
        }
        let hk = section.housekeeping().map_err(|e| Usage(e.to_string()))?;
        let iface = match &bus {
            Bus::Sim => None,
            Bus::Iface(i) => Some(i.clone()),
        };
        Some(
            TuneCtx::new(&root, CpuSet::single(rt_cpu), hk, iface, section)
                .map_err(|e| Usage(format!("{e:#}")))?,
        )
    } else {
        None
    };
    // a shield applied outside the ladder would make every stage "tuned"
    let sys_state = rttune::cli::state_path(&root, None, &cfg.rt_context());
    match StateFile::at(&sys_state).load(&root) {
        Ok(Some(j))
            if j.same_boot(&root)
                && j.entries
                    .iter()
                    .any(|e| !matches!(e.state, rttune::journal::EntryState::Refused { .. })) =>
        {
            notes.push(format!(
                "WARNING: `rtcat tune apply` is in effect on this system ({} knob(s) in {}): the \
                 lower stages are not plain; run `rtcat tune restore` first for a true ladder",
                j.entries.len(),
                sys_state.display()
            ));
        }
        Ok(_) => {}
        Err(e) => notes.push(format!(
            "WARNING: cannot tell whether `rtcat tune apply` is in effect on this system: {e}"
        )),
    }
    let out = a.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!("rtcat-ladder-{}", utc_stamp(unix_now().as_secs())))
    });
    // never reused, even empty: a directory someone else made could be theirs to swap
    let taken = || {
        let empty = out.is_dir()
            && fs::read_dir(&out)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
        Usage(if empty {
            format!(
                "--out: {} already exists; a ladder creates its results directory itself \
                 (it keeps the tune journal there) and never uses an existing one, even empty",
                out.display()
            )
        } else {
            format!(
                "--out: {} exists and is not an empty directory (a ladder never overwrites results)",
                out.display()
            )
        })
    };
    if fs::symlink_metadata(&out).is_ok() {
        return Err(taken());
    }
    // last: nothing is created unless every argument is good
    let dir = match Dir::create_new(&out, 0o755) {
        Ok(d) => Arc::new(d),
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::AlreadyExists) => return Err(taken()),
        Err(e) => return usage(format!("--out: cannot create {}: {e}", out.display())),
    };
    Ok(Plan {
        stages: a.stages.clone(),
        runs: a.runs,
        duration: a.duration,
        bus,
        config: a.config.clone(),
        out,
        dir,
        rt_cpu,
        priority: cfg.cycle.priority,
        load_cpus,
        root,
        tune,
        notes,
        plots: !a.no_plots,
    })
}

// ---------------------------------------------------------------- signals

/// Stop signals so far: the first is forwarded to the child bench (which writes its results),
/// a second kills the child; the ladder itself always goes on to restore (`crate::signals`,
/// installed with `Second::Counts`).
fn signals() -> u32 {
    crate::signals::count()
}

fn last_signal_name() -> String {
    crate::signals::signal().map_or_else(|| "signal".into(), crate::signals::name)
}

// ---------------------------------------------------------------- tune guard

fn host_for(root: &SysRoot) -> &'static dyn Host {
    if root.is_live() {
        &rttune::RealHost
    } else {
        &rttune::cli::NoHost
    }
}

/// Restores the journal when dropped unless `restore` was called: knobs go back on every path out.
struct Tuned<'a> {
    root: &'a SysRoot,
    journal: StateFile,
    armed: bool,
}

impl Tuned<'_> {
    fn restore(mut self) -> Result<Outcome> {
        self.armed = false;
        tune::restore(self.root, host_for(self.root), None, &self.journal)
    }
}

impl Drop for Tuned<'_> {
    fn drop(&mut self) {
        if self.armed {
            match tune::restore(self.root, host_for(self.root), None, &self.journal) {
                Ok(o) if o.failed == 0 => {}
                Ok(o) => say(&format!(
                    "rtcat ladder: restore incomplete:\n{}",
                    o.to_text()
                )),
                Err(e) => say(&format!(
                    "rtcat ladder: restore failed: {e:#}; run `rtcat tune restore --state {}`",
                    self.journal.path().display()
                )),
            }
        }
    }
}

// ---------------------------------------------------------------- log

#[derive(Debug, Clone, Serialize)]
struct StageLog {
    id: &'static str,
    change: &'static str,
    bench_flags: Vec<String>,
    tune_groups: Vec<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum RunStatus {
    Ok,
    Failed,
    Interrupted,
}

#[derive(Debug, Clone, Serialize)]
struct RunLog {
    stage: &'static str,
    run: u32,
    status: RunStatus,
    /// Directory of the run, relative to the ladder directory.
    dir: String,
    started_unix_ns: u64,
    wall_s: f64,
    bench_exit: Option<i32>,
    error: Option<String>,
    tune_apply: Option<Outcome>,
    tune_restore: Option<Outcome>,
    load: Option<rtlab::LoadReport>,
}

#[derive(Debug, Clone, Serialize)]
struct LadderLog {
    schema: &'static str,
    rtcat_version: &'static str,
    bus: Bus,
    config: Option<String>,
    rt_cpu: usize,
    priority: u8,
    duration_s: f64,
    runs_per_stage: u32,
    load: Option<String>,
    tune_journal: &'static str,
    stages: Vec<StageLog>,
    runs: Vec<RunLog>,
    notes: Vec<String>,
    finished: bool,
    stopped_by: Option<String>,
}

impl LadderLog {
    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }
    fn save(&self, dir: &Dir) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        dir.write_atomic(LOG_FILE, text.as_bytes(), 0o644)
            .with_context(|| format!("{LOG_FILE}: cannot write"))
    }
}

// ---------------------------------------------------------------- progress

struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u32,
    done: u32,
    overheads: Vec<f64>,
    duration: f64,
}

fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m{:02}s", s / 3600, (s / 60) % 60, s % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl Progress {
    fn new(total: u32, duration: f64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::with_draw_target(
                Some(u64::from(total)),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(st) = indicatif::ProgressStyle::with_template(
                "ladder [{bar:30.cyan/blue}] {pos}/{len} runs  {msg}",
            ) {
                b.set_style(st.progress_chars("=> "));
            }
            b
        });
        Progress {
            bar,
            total,
            done: 0,
            overheads: Vec::new(),
            duration,
        }
    }

    /// Seconds left: the rest of this run plus every run not started, each with the measured
    /// per-run overhead (tune, load, start-up; 1 s until one run has finished).
    fn left(&self, elapsed_in_run: f64) -> f64 {
        let over = if self.overheads.is_empty() {
            1.0
        } else {
            self.overheads.iter().sum::<f64>() / self.overheads.len() as f64
        };
        let after = f64::from(self.total.saturating_sub(self.done + 1));
        (self.duration + over - elapsed_in_run).max(0.0) + after * (self.duration + over)
    }

    fn tick(&self, stage: StageId, run: u32, runs: u32, elapsed: f64) {
        if let Some(b) = &self.bar {
            b.set_message(format!(
                "{} run {run}/{runs}  {:.0}/{:.0} s  ~{} left",
                stage.id(),
                elapsed.min(self.duration),
                self.duration,
                fmt_secs(self.left(elapsed))
            ));
        }
    }

    fn line(&self, s: String) {
        match &self.bar {
            Some(b) => b.println(s),
            None => say(&s),
        }
    }

    fn finish_run(&mut self, wall: f64) {
        self.overheads.push((wall - self.duration).max(0.0));
        self.done += 1;
        if let Some(b) = &self.bar {
            b.set_position(u64::from(self.done));
        }
    }

    fn clear(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

// ---------------------------------------------------------------- runs

impl Plan {
    fn bench_flags(&self, stage: StageId) -> Vec<String> {
        if stage.rt() {
            vec![
                "--cpu".into(),
                self.rt_cpu.to_string(),
                "--priority".into(),
                self.priority.to_string(),
            ]
        } else {
            vec!["--no-rt".into()]
        }
    }

    fn bench_command(&self, exe: &Path, stage: StageId, dir: &Path) -> Command {
        let mut args: Vec<OsString> = vec!["bench".into()];
        match &self.bus {
            Bus::Sim => args.push("--sim".into()),
            Bus::Iface(i) => args.extend(["--iface".into(), i.into()]),
        }
        if let Some(c) = &self.config {
            args.extend(["--config".into(), c.into()]);
        }
        args.extend([
            "--duration".into(),
            format!("{}", self.duration).into(),
            "--stage".into(),
            stage.id().into(),
            "--json".into(),
            dir.join(rtlab::summary::SUMMARY_FILE).into(),
            "--out".into(),
            dir.into(),
        ]);
        args.extend(self.bench_flags(stage).into_iter().map(OsString::from));
        let mut cmd = Command::new(exe);
        cmd.args(args);
        cmd
    }

    /// The tune journal, through the directory handle.
    fn journal(&self) -> StateFile {
        StateFile::in_dir(self.dir.clone(), JOURNAL_FILE)
    }
}

/// Starts `cmd` in its own process group (a terminal's Ctrl-C reaches only the ladder, which
/// forwards it) with stdout and stderr into `log`; the child gets SIGTERM if the ladder dies.
fn spawn_child(cmd: &mut Command, f: fs::File) -> Result<Child> {
    use std::os::unix::process::CommandExt;
    let f2 = f.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(f))
        .stderr(Stdio::from(f2))
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().context("cannot start rtcat bench")
}

fn kill_group(child: &Child, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), sig);
}

/// The bench child's end.
struct BenchEnd {
    exit: Option<i32>,
    signal_seen: bool,
    killed: bool,
}

/// Waits for the bench child, forwarding the first SIGINT/SIGTERM as SIGINT (the bench writes its
/// results and exits) and killing it on the second one, or when it overruns by far.
fn wait_bench(
    child: &mut Child,
    plan: &Plan,
    prog: &Progress,
    stage: StageId,
    run: u32,
) -> Result<BenchEnd> {
    let t0 = Instant::now();
    let limit = Duration::from_secs_f64(plan.duration + 60.0 + plan.duration * 0.5);
    let mut forwarded = false;
    let mut killed = false;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(BenchEnd {
                exit: st.code(),
                signal_seen: signals() > 0,
                killed,
            });
        }
        let n = signals();
        if n >= 1 && !forwarded {
            kill_group(child, nix::sys::signal::Signal::SIGINT);
            forwarded = true;
        }
        if (n >= 2 || t0.elapsed() > limit + Duration::from_secs(10)) && !killed {
            kill_group(child, nix::sys::signal::Signal::SIGKILL);
            killed = true;
        } else if t0.elapsed() > limit && !forwarded {
            // hung (e.g. a stuck bus): ask it to stop and write what it has
            kill_group(child, nix::sys::signal::Signal::SIGTERM);
            forwarded = true;
        }
        prog.tick(stage, run, plan.runs, t0.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Notes on what the stage's knobs did: N/A and refused knobs (attributed to the stage that adds
/// their group, also when that stage is not in the list), and a stage that changed nothing.
fn stage_notes(stage: StageId, apply: &Outcome) -> Vec<String> {
    let owner = |g: KnobGroup| {
        StageId::ALL
            .into_iter()
            .find(|s| KnobGroup::expand(&s.own_groups()).contains(&g))
            .unwrap_or(stage)
    };
    let mut notes = Vec::new();
    for s in &apply.skipped {
        let o = owner(s.group);
        notes.push(format!(
            "{} ({}): {} N/A here: {}",
            o.id(),
            o.change(),
            s.id,
            s.reason
        ));
    }
    for i in apply
        .items
        .iter()
        // a task that exited between plan and apply is not a refusal
        .filter(|i| i.result.starts_with("refused") && i.result != "refused: task exited")
    {
        let o = owner(i.group);
        notes.push(format!(
            "{} ({}): {}: {}",
            o.id(),
            o.change(),
            i.what,
            i.result
        ));
    }
    let own = KnobGroup::expand(&stage.own_groups());
    let applied = apply
        .items
        .iter()
        .any(|i| own.contains(&i.group) && i.result == "applied");
    if !own.is_empty() && !applied {
        notes.push(format!(
            "{} ({}): changed nothing on this system (already in effect, N/A or refused): \
             it measures the same setup as the stage below",
            stage.id(),
            stage.change()
        ));
    }
    notes
}

/// The last `rtcat: ...` line of a bench log (its error message).
fn last_error(run: &Dir) -> Option<String> {
    let bytes = run.read_bounded("bench.log", 16 << 20).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .rev()
        .find(|l| l.starts_with("rtcat:"))
        .map(|l| l.trim_start_matches("rtcat:").trim().to_string())
}

struct RunCtx<'a> {
    plan: &'a Plan,
    exe: &'a Path,
    log: &'a mut LadderLog,
    prog: &'a mut Progress,
    csv: &'a mut fs::File,
}

enum Next {
    Continue,
    /// Stopped by a signal.
    Stop,
    /// The ladder cannot go on (a knob could not be applied or restored).
    Fatal(String),
}

fn one_run(c: &mut RunCtx<'_>, stage: StageId, k: u32) -> Result<(RunLog, Next)> {
    let plan = c.plan;
    let started = unix_now().as_nanos() as u64;
    let t0 = Instant::now();
    let rel = format!("{}/run{k}", stage.id());
    let dir = plan.out.join(&rel);
    let run_name = format!("run{k}");
    let stage_dir = plan
        .dir
        .subdir(stage.id(), true)
        .with_context(|| format!("{}: cannot create", stage.id()))?;
    let run_dir = stage_dir
        .subdir(&run_name, true)
        .with_context(|| format!("{rel}: cannot create"))?;
    let mut rl = RunLog {
        stage: stage.id(),
        run: k,
        status: RunStatus::Failed,
        dir: rel.clone(),
        started_unix_ns: started,
        wall_s: 0.0,
        bench_exit: None,
        error: None,
        tune_apply: None,
        tune_restore: None,
        load: None,
    };
    // 1. the stage's knobs
    let groups = stage.groups();
    let mut guard = None;
    let mut fatal = None;
    let mut bench_err = None;
    if let (false, Some(tc)) = (groups.is_empty(), &plan.tune) {
        guard = Some(Tuned {
            root: &plan.root,
            journal: plan.journal(),
            armed: true,
        });
        match tune::apply(
            &plan.root,
            tc,
            host_for(&plan.root),
            &groups,
            &plan.journal(),
        ) {
            Ok(o) => {
                for n in stage_notes(stage, &o) {
                    c.log.note(n);
                }
                rl.tune_apply = Some(o);
            }
            Err(e) => {
                // restore (below) puts back whatever was journalled before the error
                let m = format!("rtcat tune apply: {e:#}");
                bench_err = Some(m.clone());
                fatal = Some(m);
            }
        }
    }
    // 2. load, 3. bench
    let mut load = None;
    if let (Some(cpus), None) = (&plan.load_cpus, &bench_err) {
        let spec = rtlab::LoadSpec::reference_mix(
            cpus.clone(),
            Duration::from_secs_f64(plan.duration * 1.5 + 30.0),
        );
        match rtlab::LoadHandle::spawn(c.exe, &spec) {
            Ok(h) => {
                load = Some(h);
                // let the load reach its steady state before measuring
                std::thread::sleep(Duration::from_millis(300));
            }
            Err(e) => bench_err = Some(format!("load: {e:#}")),
        }
    }
    let mut end = None;
    if bench_err.is_none() && signals() == 0 {
        let mut cmd = plan.bench_command(c.exe, stage, &dir);
        let log = run_dir
            .create("bench.log", 0o644)
            .with_context(|| format!("{rel}/bench.log: cannot create"));
        match log.and_then(|f| spawn_child(&mut cmd, f)) {
            Ok(mut child) => match wait_bench(&mut child, plan, c.prog, stage, k) {
                Ok(e) => end = Some(e),
                Err(e) => {
                    kill_group(&child, nix::sys::signal::Signal::SIGKILL);
                    let _ = child.wait();
                    bench_err = Some(format!("waiting for rtcat bench: {e:#}"));
                }
            },
            Err(e) => bench_err = Some(format!("{e:#}")),
        }
    }
    if let Some(h) = load {
        match h.stop() {
            Ok(r) => {
                if !r.errors.is_empty() {
                    c.log
                        .note(format!("{rel}: load errors: {}", r.errors.join("; ")));
                }
                rl.load = Some(r);
            }
            Err(e) => c
                .log
                .note(format!("{rel}: load did not stop cleanly: {e:#}")),
        }
    }
    // 4. restore
    if let Some(g) = guard.take() {
        match g.restore() {
            Ok(o) => {
                if o.failed > 0 {
                    fatal = Some(format!(
                        "{} knob(s) could not be restored (still journalled in {}): {}",
                        o.failed,
                        plan.journal().path().display(),
                        o.items
                            .iter()
                            .filter(|i| i.result.starts_with("FAILED"))
                            .map(|i| format!("{}: {}", i.what, i.result))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                }
                rl.tune_restore = Some(o);
            }
            Err(e) => fatal = Some(format!("rtcat tune restore: {e:#}")),
        }
    }
    rl.wall_s = t0.elapsed().as_secs_f64();
    rl.bench_exit = end.as_ref().and_then(|e| e.exit);
    // 5. classify the run: a signal during the measurement interrupts it; one that comes after
    // the bench ended leaves the run complete and stops the ladder after it
    let interrupted = match &end {
        Some(e) => e.signal_seen,
        None => bench_err.is_none(),
    };
    if interrupted {
        rl.status = RunStatus::Interrupted;
        if end.as_ref().is_some_and(|e| e.killed) {
            rl.error = Some("rtcat bench killed by the second signal".into());
        }
    } else if let Some(e) = bench_err {
        rl.error = Some(e);
    } else {
        match end.as_ref().and_then(|e| e.exit) {
            Some(0) => match rtlab::report::read_bench_dir(&dir) {
                Ok((s, _)) if s.stage.as_deref() == Some(stage.id()) => {
                    let row = ladder_csv_row(stage.id(), k, &s);
                    writeln!(c.csv, "{row}")
                        .and_then(|_| c.csv.sync_data())
                        .with_context(|| format!("{LADDER_CSV_FILE}: cannot append"))?;
                    rl.status = RunStatus::Ok;
                    c.prog.line(format!(
                        "ladder: {rel}: wake mean {:.3} µs, P99 {:.3} µs, max {:.3} µs, exec max {:.3} µs, missed {}, WKC mismatches {}",
                        s.wake_lateness_ns.mean / 1e3,
                        s.wake_lateness_ns.p99 as f64 / 1e3,
                        s.wake_lateness_ns.max as f64 / 1e3,
                        s.exec_ns.max as f64 / 1e3,
                        s.missed_deadlines,
                        s.wkc.mismatches
                    ));
                }
                Ok((s, _)) => {
                    rl.error = Some(format!(
                        "summary.json records stage {:?}, expected {}",
                        s.stage,
                        stage.id()
                    ))
                }
                Err(e) => rl.error = Some(format!("results unreadable: {e:#}")),
            },
            Some(code) => {
                rl.error = Some(format!(
                    "rtcat bench exited with {code}{} (see {rel}.failed/bench.log)",
                    last_error(&run_dir)
                        .map(|l| format!(": {l}"))
                        .unwrap_or_default()
                ))
            }
            None => rl.error = Some("rtcat bench was killed by a signal".into()),
        }
    }
    // the run's own record next to its results
    let rec = serde_json::json!({
        "stage": stage.id(), "run": k, "status": rl.status, "bench_exit": rl.bench_exit,
        "error": rl.error, "tune_apply": rl.tune_apply, "tune_restore": rl.tune_restore,
        "load": rl.load,
    });
    let _ = run_dir.write_atomic(
        "tune.json",
        format!("{}\n", serde_json::to_string_pretty(&rec)?).as_bytes(),
        0o644,
    );
    if rl.status != RunStatus::Ok {
        let suffix = if rl.status == RunStatus::Interrupted {
            "interrupted"
        } else {
            "failed"
        };
        let moved = format!("{run_name}.{suffix}");
        stage_dir
            .rename(&run_name, &moved)
            .with_context(|| format!("cannot move {rel} to {}/{moved}", stage.id()))?;
        rl.dir = format!("{rel}.{suffix}");
        if rl.status == RunStatus::Failed {
            c.prog.line(format!(
                "ladder: {rel} FAILED: {}",
                rl.error.as_deref().unwrap_or("?")
            ));
        }
    }
    let next = if let Some(f) = fatal {
        Next::Fatal(format!("{rel}: {f}"))
    } else if interrupted || signals() > 0 {
        Next::Stop
    } else {
        Next::Continue
    };
    Ok((rl, next))
}

fn manifest_system(plan: &Plan) -> SystemInfo {
    // the system as found, read like `rtcat bench` reads it (live), so report can cross-check
    let snap = crate::sysinfo::snapshot(&SysRoot::live(), Some(plan.rt_cpu));
    let (policy, priority) = crate::rt::current_policy();
    SystemInfo {
        hostname: snap.hostname,
        kernel_release: snap.kernel_release,
        kernel_version: snap.kernel_version,
        preempt_rt: snap.preempt_rt,
        cmdline: snap.cmdline,
        cpu: None,
        txrx_cpu: None,
        policy: if policy == "SCHED_FIFO" {
            Policy::Fifo
        } else {
            Policy::Other
        },
        priority,
        no_rt: false,
        timer_slack_ns: crate::rt::timer_slack(),
        governor: snap.governor,
    }
}

fn ladder(plan: Plan) -> Result<u8> {
    crate::signals::install(crate::signals::Second::Counts)?;
    let exe = std::env::current_exe().context("cannot find the rtcat executable")?;
    let manifest = LadderManifest {
        schema: LADDER_SCHEMA.into(),
        created_unix_ns: unix_now().as_nanos() as u64,
        system: manifest_system(&plan),
        stages: plan.stages.iter().map(|s| s.id().to_string()).collect(),
        runs: plan.runs,
        duration_s: plan.duration,
        loaded: plan.load_cpus.is_some(),
    };
    manifest.validate()?;
    let mut text = serde_json::to_string_pretty(&manifest)?;
    text.push('\n');
    plan.dir
        .write_atomic(MANIFEST_FILE, text.as_bytes(), 0o644)
        .with_context(|| format!("{MANIFEST_FILE}: cannot write"))?;
    let mut csv = plan
        .dir
        .create(LADDER_CSV_FILE, 0o644)
        .with_context(|| format!("{LADDER_CSV_FILE}: cannot create"))?;
    writeln!(csv, "{LADDER_CSV_HEADER}")?;
    csv.sync_data()?;
    let mut log = LadderLog {
        schema: LOG_SCHEMA,
        rtcat_version: env!("CARGO_PKG_VERSION"),
        bus: plan.bus.clone(),
        config: plan.config.as_ref().map(|p| p.display().to_string()),
        rt_cpu: plan.rt_cpu,
        priority: plan.priority,
        duration_s: plan.duration,
        runs_per_stage: plan.runs,
        load: plan.load_cpus.as_ref().map(|c| {
            rtlab::LoadSpec::reference_mix(c.clone(), Duration::from_secs_f64(plan.duration))
                .describe()
        }),
        tune_journal: JOURNAL_FILE,
        stages: plan
            .stages
            .iter()
            .map(|s| StageLog {
                id: s.id(),
                change: s.change(),
                bench_flags: plan.bench_flags(*s),
                tune_groups: s.groups().iter().map(|g| g.name()).collect(),
            })
            .collect(),
        runs: Vec::new(),
        notes: plan.notes.clone(),
        finished: false,
        stopped_by: None,
    };
    log.save(&plan.dir)?;
    let mut prog = Progress::new(plan.stages.len() as u32 * plan.runs, plan.duration);
    for n in &plan.notes {
        prog.line(format!("ladder: note: {n}"));
    }
    prog.line(format!(
        "ladder: {} stage(s) x {} run(s) x {} s, RT CPU {}, {}{} -> {}",
        plan.stages.len(),
        plan.runs,
        plan.duration,
        plan.rt_cpu,
        match &plan.bus {
            Bus::Sim => "simulated segment".to_string(),
            Bus::Iface(i) => format!("interface {i}"),
        },
        if plan.load_cpus.is_some() {
            ", loaded"
        } else {
            ""
        },
        plan.out.display()
    ));
    let mut failed = 0u32;
    let mut consecutive_failures = 0u32;
    let mut fatal: Option<anyhow::Error> = None;
    'outer: for &stage in &plan.stages {
        for k in 1..=plan.runs {
            if signals() > 0 {
                break 'outer;
            }
            let mut rc = RunCtx {
                plan: &plan,
                exe: &exe,
                log: &mut log,
                prog: &mut prog,
                csv: &mut csv,
            };
            let res = one_run(&mut rc, stage, k);
            match res {
                Ok((rl, next)) => {
                    prog.finish_run(rl.wall_s);
                    if rl.status == RunStatus::Failed {
                        failed += 1;
                        consecutive_failures += 1;
                    } else {
                        consecutive_failures = 0;
                    }
                    log.runs.push(rl);
                    log.save(&plan.dir)?;
                    match next {
                        Next::Continue => {}
                        Next::Stop => break 'outer,
                        Next::Fatal(m) => {
                            fatal = Some(anyhow!(m));
                            break 'outer;
                        }
                    }
                    if consecutive_failures >= 2 {
                        fatal = Some(anyhow!(
                            "two runs in a row failed; stopping the ladder (see {} and the runs' bench.log)",
                            plan.out.join(LOG_FILE).display()
                        ));
                        break 'outer;
                    }
                }
                Err(e) => {
                    fatal = Some(e);
                    break 'outer;
                }
            }
        }
    }
    prog.clear();
    // whatever happened, no knob may stay changed
    if plan.journal().exists() {
        match tune::restore(&plan.root, host_for(&plan.root), None, &plan.journal()) {
            Ok(o) if o.failed == 0 => {}
            Ok(o) => {
                fatal.get_or_insert_with(|| {
                    anyhow!(
                        "{} knob(s) could not be restored; run `rtcat tune restore --state {}`",
                        o.failed,
                        plan.journal().path().display()
                    )
                });
            }
            Err(e) => {
                fatal.get_or_insert_with(|| anyhow!("final restore: {e:#}"));
            }
        }
    }
    let sig = signals();
    log.stopped_by = if sig > 0 {
        Some(last_signal_name())
    } else {
        fatal.as_ref().map(|e| format!("error: {e:#}"))
    };
    log.finished = sig == 0 && fatal.is_none();
    log.save(&plan.dir)?;
    let ok_runs = log
        .runs
        .iter()
        .filter(|r| r.status == RunStatus::Ok)
        .count();
    // the answer: the reference-style table (and plots) of what was measured
    if ok_runs > 0 {
        let partial = !log.finished || failed > 0;
        match rtlab::report::load_sources(std::slice::from_ref(&plan.out), &[], partial) {
            Ok(src) => {
                let table = rtlab::report::render_markdown(&src);
                print_out(&table);
                plan.dir
                    .write_atomic(REPORT_FILE, table.as_bytes(), 0o644)
                    .with_context(|| format!("{REPORT_FILE}: cannot write"))?;
                if plan.plots {
                    let pdir = plan.out.join("plots");
                    let r = plan
                        .dir
                        .subdir("plots", true)
                        .map_err(anyhow::Error::from)
                        .and_then(|_| rtlab::plot::write_plots(&src, &pdir, (1000, 600)));
                    if let Err(e) = r {
                        say(&format!("rtcat ladder: plots not written: {e:#}"));
                    }
                }
            }
            Err(e) => say(&format!(
                "rtcat ladder: report of {}: {e:#}",
                plan.out.display()
            )),
        }
    }
    for n in &log.notes {
        say(&format!("rtcat ladder: note: {n}"));
    }
    say(&format!(
        "rtcat ladder: {ok_runs} of {} run(s) completed, {failed} failed; results in {}",
        plan.stages.len() as u32 * plan.runs,
        plan.out.display()
    ));
    if let Some(e) = fatal {
        say(&format!("rtcat ladder: {e:#}"));
        return Ok(1);
    }
    if sig > 0 {
        let s = crate::signals::signal().unwrap_or(libc::SIGINT);
        say(&format!(
            "rtcat ladder: stopped by {}; every knob restored; `rtcat report --allow-partial {}` reads the completed runs",
            crate::signals::name(s),
            plan.out.display()
        ));
        return Ok(crate::signals::exit_code(s));
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `rtcat ladder`: returns the process exit code.
pub fn run(a: LadderArgs) -> ExitCode {
    let plan = match resolve(&a) {
        Ok(p) => p,
        Err(Usage(m)) => {
            say(&format!("rtcat ladder: {m}"));
            return ExitCode::from(2);
        }
    };
    match ladder(plan) {
        Ok(c) => ExitCode::from(c),
        Err(e) => {
            say(&format!("rtcat ladder: {e:#}"));
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_cumulative_one_change_each() {
        assert!(StageId::S0.groups().is_empty());
        assert!(StageId::S1.groups().is_empty());
        assert_eq!(StageId::S2.groups(), vec![KnobGroup::Governor]);
        assert_eq!(
            StageId::S4.groups(),
            vec![KnobGroup::Governor, KnobGroup::Coalesce, KnobGroup::Shield]
        );
        for w in StageId::ALL.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            let added = hi.groups().len() - lo.groups().len() + usize::from(hi.rt() != lo.rt());
            assert_eq!(added, 1, "{} -> {}", lo.id(), hi.id());
        }
        for s in StageId::ALL {
            rtlab::summary::validate_stage_id(s.id()).unwrap();
            assert_eq!(s.to_possible_value().unwrap().get_name(), s.id());
        }
    }

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400), "20000229T000000Z");
        assert_eq!(utc_stamp(1_764_460_799), "20251129T235959Z");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1.5"), Ok(1.5));
        assert!(
            parse_duration("0")
                .unwrap_err()
                .contains("0 s: must be > 0")
        );
        assert!(parse_duration("nan").is_err());
        assert!(parse_duration("x").unwrap_err().contains("\"x\""));
        assert!(parse_duration("86401").is_err());
    }

    #[test]
    fn time_left_counts_remaining_runs() {
        let mut p = Progress {
            bar: None,
            total: 4,
            done: 0,
            overheads: vec![],
            duration: 10.0,
        };
        assert_eq!(p.left(0.0), 44.0);
        p.finish_run(12.0);
        assert_eq!(p.left(5.0), 7.0 + 2.0 * 12.0);
        assert_eq!(fmt_secs(3725.0), "1h02m05s");
        assert_eq!(fmt_secs(65.0), "1m05s");
    }
}
