//! `rtcat ladder`: the reference A/B ladder (docs/NOTES.md §1) with one command. It never touches
//! the master: it drives child `rtcat bench` runs, the tuner and the load, and writes the result
//! format [`crate::report`] reads.
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
//! way: the caller installs handlers under which a second signal does not end the process, and
//! hands them in as an [`Interrupt`]). A knob that cannot change here (no cpufreq, no NIC with `--sim`, EPERM) is recorded in
//! `ladder-log.json` and the run goes on.
//!
//! Results (one directory, the layout `rtcat report` reads, see `rtcat_results`):
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
//!
//! Rooms: [`stage`] (what each rung adds), [`plan`] (the options checked and resolved), `run`
//! (one run of a stage), `bench` (the child bench), `output` (manifest, `ladder.csv`, report),
//! `log` (`ladder-log.json`), `restore` (every knob back), `progress` (the terminal bar).

mod bench;
mod log;
mod output;
pub mod plan;
mod progress;
mod restore;
mod run;
pub mod stage;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow};

use crate::interrupt::{Interrupt, exit_code, signal_name};
use log::{LadderLog, RunStatus, StageLog};
use plan::Plan;
pub use plan::{Bus, Env, LadderConfig, LadderOptions, SEED_COALESCE};
use progress::Progress;
use run::{Next, RunCtx, one_run};
pub use stage::StageId;

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

/// Why a ladder could not run.
#[derive(Debug, thiserror::Error)]
pub enum LadderError {
    /// Bad usage (exit 2): the message names the option or key and the value; nothing was
    /// touched.
    #[error("{0}")]
    Usage(String),
    /// A runtime failure (exit 1) after the directory was created.
    #[error("{0:#}")]
    Failed(#[from] anyhow::Error),
}

impl LadderError {
    /// Bad usage rather than a runtime failure.
    pub fn is_usage(&self) -> bool {
        matches!(self, LadderError::Usage(_))
    }
}

/// One line on stderr. A closed stderr must not stop a ladder before every knob is restored
/// (SIGPIPE is ignored), so a failed write is dropped.
fn say(line: &str) {
    crate::outfile::stderr_line(format_args!("{line}"));
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Runs the ladder `opts` asks for. Returns the exit code when it ran (0 every run completed,
/// 1 a run failed or a knob could not be restored, 128 + N when stopped by signal N; what
/// happened is said on stderr), or why it could not.
pub fn run(opts: &LadderOptions, env: &dyn Env, stop: &dyn Interrupt) -> Result<u8, LadderError> {
    let plan = plan::resolve(opts, env)?;
    Ok(ladder(plan, env, stop)?)
}

fn ladder(plan: Plan, env: &dyn Env, stop: &dyn Interrupt) -> Result<u8> {
    let exe = std::env::current_exe().context("cannot find the rtcat executable")?;
    output::write_manifest(&plan, env.system(plan.rt_cpu))?;
    let mut csv = output::create_csv(&plan)?;
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
            crate::LoadSpec::reference_mix(c.clone(), Duration::from_secs_f64(plan.duration))
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
            if stop.count() > 0 {
                break 'outer;
            }
            let mut rc = RunCtx {
                plan: &plan,
                stop,
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
    if let Some(e) = restore::restore_all(&plan) {
        fatal.get_or_insert(e);
    }
    let sig = stop.count();
    log.stopped_by = if sig > 0 {
        Some(stop.last().map_or_else(|| "signal".into(), signal_name))
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
    if ok_runs > 0 {
        output::write_report(&plan, !log.finished || failed > 0)?;
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
        let s = stop.last().unwrap_or(libc::SIGINT);
        say(&format!(
            "rtcat ladder: stopped by {}; every knob restored; `rtcat report --allow-partial {}` reads the completed runs",
            signal_name(s),
            plan.out.display()
        ));
        return Ok(exit_code(s));
    }
    Ok(if failed > 0 { 1 } else { 0 })
}
