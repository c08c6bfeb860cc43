//! `rtcat ladder`: its flags, converted into [`rtlab::ladder::LadderOptions`], and the ladder
//! wired to this binary: its signal handlers, its configuration file and its system snapshot.

use crate::cli::values::value_enum;
use crate::config::Config;
use crate::outcome::{Failure, Kind, Outcome};
use crate::signals;
use clap::Args;
use rtcat_results::{Policy, SystemInfo};
use rtlab::ladder::{Env, LadderConfig, LadderError};
use rtlab::ladder::{LadderOptions, MAX_RUN_S, MAX_RUNS, StageId};
use rttune::SysRoot;
use std::path::Path;
use std::path::PathBuf;

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

value_enum!(
    /// A stage on the command line (`s0` .. `s4`).
    StageArg(StageId) {
        StageId::S0 => "s0": "plain: SCHED_OTHER, not pinned, governor and timer slack as found",
        StageId::S1 => "s1": "+ pinned to the RT CPU, SCHED_FIFO",
        StageId::S2 => "s2": "+ performance governor",
        StageId::S3 => "s3": "+ NIC coalescing off",
        StageId::S4 => "s4": "+ runtime CPU shield",
    }
);

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
    pub stages: Vec<StageArg>,
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

impl LadderArgs {
    /// The options; `now_unix_s` names the default results directory.
    pub fn options(&self, now_unix_s: u64) -> LadderOptions {
        LadderOptions {
            stages: self.stages.iter().map(|s| s.0).collect(),
            loaded: self.loaded,
            runs: self.runs,
            duration: self.duration,
            sim: self.sim,
            iface: self.iface.clone(),
            config: self.config.clone(),
            out: self.out.clone().unwrap_or_else(|| {
                PathBuf::from(format!(
                    "rtcat-ladder-{}",
                    crate::output::utc_stamp(now_unix_s)
                ))
            }),
            cpu: self.cpu,
            plots: !self.no_plots,
            root: self.root.clone(),
        }
    }
}

/// What the ladder takes from `rtcat`: the configuration and the snapshot `rtcat bench` records.
struct Rtcat;

impl Env for Rtcat {
    fn config(&self, path: Option<&Path>) -> Result<LadderConfig, String> {
        let cfg = match path {
            None => Config::default(),
            Some(p) => Config::load(p).map_err(|e| e.to_string())?,
        };
        Ok(LadderConfig {
            rt: cfg.rt_context(),
            txrx_cpu: cfg.master.cycle.txrx_cpu,
            priority: cfg.master.cycle.priority,
        })
    }

    fn system(&self, rt_cpu: usize) -> SystemInfo {
        // the system as found, read like `rtcat bench` reads it (live), so report can cross-check
        let snap = crate::sysinfo::snapshot(&SysRoot::live(), Some(rt_cpu));
        let (policy, priority) = rtcat_master::rt::current_policy();
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
            timer_slack_ns: rtcat_master::rt::timer_slack(),
            governor: snap.governor,
        }
    }
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `rtcat ladder`: a second signal only kills the running bench (the ladder restores first).
pub fn run(a: &LadderArgs) -> Outcome {
    let r = signals::install(signals::Second::Counts)
        .map_err(LadderError::Failed)
        .and_then(|()| rtlab::ladder::run(&a.options(now_unix_s()), &Rtcat, &signals::Process));
    match r {
        Ok(c) => Failure::from_status(i32::from(c)),
        Err(e) => {
            // The ladder's own lines all start `rtcat ladder:`.
            crate::say!("rtcat ladder: {e}");
            Err(Failure::Said(if e.is_usage() {
                Kind::Usage
            } else {
                Kind::Runtime
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn stage_values_are_the_stage_ids() {
        for s in StageId::ALL {
            assert_eq!(StageArg(s).to_possible_value().unwrap().get_name(), s.id());
        }
        assert_eq!(StageArg::value_variants().len(), StageId::ALL.len());
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
}
