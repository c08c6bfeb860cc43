//! The lab's commands (`ladder`, `load`, `report`) wired to this binary: its signal handlers,
//! its configuration file and its system snapshot, and their exit codes.

use std::path::Path;
use std::process::ExitCode;

use rtlab::ladder::{Env, LadderConfig, LadderError};
use rtlab::summary::{Policy, SystemInfo};
use rttune::SysRoot;

use crate::cli::lab::LoadArgs;
use crate::cli::ladder::LadderArgs;
use crate::config::Config;
use crate::signals;

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
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `rtcat ladder`: a second signal only kills the running bench (the ladder restores first).
pub fn ladder(a: &LadderArgs) -> ExitCode {
    let r = signals::install(signals::Second::Counts)
        .map_err(LadderError::Failed)
        .and_then(|()| rtlab::ladder::run(&a.options(now_unix_s()), &Rtcat, &signals::Process));
    match r {
        Ok(c) => ExitCode::from(c),
        Err(e) => {
            crate::say!("rtcat ladder: {e}");
            ExitCode::from(if e.is_usage() { 2 } else { 1 })
        }
    }
}

/// `rtcat load`: the first stop signal ends the load cleanly (workers joined, tmpfs files
/// removed, the report written), a second one kills the process (an impatient Ctrl-C Ctrl-C).
pub fn load(a: &LoadArgs) -> ExitCode {
    let r = signals::install(signals::Second::Kills)
        .and_then(|()| rtlab::run_load(&a.options(), &signals::Process));
    match r {
        Ok(c) => ExitCode::from(c.clamp(0, 255) as u8),
        Err(e) => {
            crate::say!("rtcat: {e:#}");
            ExitCode::from(1)
        }
    }
}
