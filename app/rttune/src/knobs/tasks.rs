//! Tasks: what else may run on the RT CPU, and rtcat's own threads (tune group `tasks`).

use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;
use crate::journal::Change;
use crate::sysroot::SysRoot;
use crate::tune::plan::skip;
use crate::tune::{KnobGroup, Plan, Planned, TuneCtx};
use std::collections::BTreeMap;

impl Ctx<'_> {
    pub(crate) fn tasks_on_rt(&self) -> Check {
        let id = "tasks.rt_cpu";
        let why = "every other runnable task or kthread on the RT CPU competes with the cycle (loaded PREEMPT_RT: max 9.5 us, with the CPU6 shield 3.7 us)";
        let rtcat = self.rtcat_pid();
        let me = std::process::id();
        let mut pinned = Vec::new();
        let mut movable = Vec::new();
        let mut percpu = 0;
        let mut irqthreads = 0;
        for t in &self.tasks {
            if Some(t.pid) == rtcat
                || (self.root().is_live() && t.pid == me)
                || !t.allowed.intersects(&self.rt)
            {
                continue;
            }
            if t.is_irq_thread() {
                irqthreads += 1;
            } else if t.is_kthread() && (t.no_setaffinity() || t.allowed.is_subset(&self.rt)) {
                percpu += 1;
            } else if t.allowed.is_subset(&self.rt) {
                pinned.push(format!(
                    "{}[{}] {} pinned to {}",
                    t.comm,
                    t.tid,
                    t.policy_name(),
                    t.allowed
                ));
            } else {
                movable.push(format!(
                    "{}{}[{}] allowed {}",
                    t.comm,
                    if t.is_kthread() { " (kthread)" } else { "" },
                    t.tid,
                    t.allowed
                ));
            }
        }
        let isolated = self.rt.is_subset(&self.isolated);
        let v = if !pinned.is_empty() || (!movable.is_empty() && !isolated) {
            Verdict::Fail
        } else {
            Verdict::Pass
        };
        let obs = format!(
            "{} movable{}, {} pinned there, {} per-CPU kthreads (expected), {} IRQ threads (follow their IRQ)",
            movable.len(),
            if isolated && !movable.is_empty() {
                " (kept away by isolcpus)"
            } else {
                ""
            },
            pinned.len(),
            percpu,
            irqthreads
        );
        let mut det: Vec<String> = pinned.iter().map(|s| format!("pinned: {s}")).collect();
        if v == Verdict::Fail {
            det.extend(movable.iter().map(|s| format!("movable: {s}")));
        }
        let c = chk(id, v)
            .obs(obs)
            .exp(format!(
                "no task other than rtcat and per-CPU kthreads may run on CPU {}",
                self.rtl
            ))
            .why(why)
            .details(det);
        c.fix_if(
            v == Verdict::Fail,
            if pinned.is_empty() {
                self.tune_cmd.clone()
            } else {
                format!(
                    "re-pin the listed tasks (taskset -pc {} PID); {}",
                    self.hk.to_list(),
                    self.tune_cmd
                )
            },
        )
    }

    pub(crate) fn rtcat_threads(&self) -> Check {
        let id = "tasks.rtcat";
        let why = "the cycle and TX/RX threads must be SCHED_FIFO, the cycle thread pinned to the RT CPU, with 1 ns timer slack";
        let Some(pid) = self.rtcat_pid() else {
            return chk(id, Verdict::NA)
                .obs("rtcat not running")
                .exp("rtcat-cycle FIFO on the RT CPU, rtcat-txrx FIFO, rtcat-status normal")
                .why(why);
        };
        let mut v = Verdict::Pass;
        let mut det = Vec::new();
        for name in ["rtcat-cycle", "rtcat-txrx", "rtcat-status"] {
            let Some(t) = self.tasks.iter().find(|t| t.pid == pid && t.comm == name) else {
                match name {
                    // With [cycle] txrx = "inline" (the default) the cyclic thread moves its own
                    // frames: no TX/RX thread exists while cycling.
                    "rtcat-txrx" => det.push(format!("{name}: absent (txrx = inline)")),
                    // No cyclic thread: rtcat is initialising or re-initialising the segment.
                    "rtcat-cycle" => {
                        if v == Verdict::Pass {
                            v = Verdict::Warn;
                        }
                        det.push(format!("{name}: absent (initialising or recovering)"));
                    }
                    _ => {
                        v = Verdict::Fail;
                        det.push(format!("{name}: missing"));
                    }
                }
                continue;
            };
            // timerslack_ns is a per-process file in /proc/TID (not under task/)
            let slack = self
                .root()
                .read_opt(&format!("/proc/{}/timerslack_ns", t.tid))
                .or_else(|| {
                    self.root()
                        .read_opt(&format!("/proc/{pid}/task/{}/timerslack_ns", t.tid))
                })
                .and_then(|s| s.parse::<u64>().ok());
            let rt_policy = t.policy == 1 || t.policy == 2;
            let mut problems = Vec::new();
            match name {
                "rtcat-cycle" => {
                    if !rt_policy {
                        problems.push("not SCHED_FIFO");
                    }
                    if !t.allowed.is_subset(&self.rt) {
                        problems.push("not pinned to the RT CPU");
                    }
                    if slack.is_some_and(|s| s > 1000) {
                        problems.push("timer slack > 1 us");
                    }
                }
                "rtcat-txrx" => {
                    if !rt_policy {
                        problems.push("not SCHED_FIFO");
                    }
                }
                _ => {
                    if rt_policy {
                        problems.push("real-time policy on the status thread");
                    }
                    if t.allowed.is_subset(&self.rt) {
                        problems.push("status thread confined to the RT CPU");
                    }
                }
            }
            if !problems.is_empty() {
                v = Verdict::Fail;
            }
            det.push(format!(
                "{name}[{}]: {} prio {} CPUs {} slack {} ns{}",
                t.tid,
                t.policy_name(),
                t.rt_priority,
                t.allowed,
                slack.map(|s| s.to_string()).unwrap_or("?".into()),
                if problems.is_empty() {
                    String::new()
                } else {
                    format!(" — {}", problems.join(", "))
                }
            ));
        }
        let c = chk(id, v)
            .obs(format!("rtcat[{pid}] running"))
            .exp("rtcat-cycle FIFO on the RT CPU, slack <= 1 us; rtcat-txrx (txrx = thread only) FIFO; rtcat-status SCHED_OTHER")
            .why(why)
            .details(det);
        c.fix_if(
            v == Verdict::Fail,
            "check [cycle] and [rt] in /etc/rtcat/rtcat.toml and the service's CAP_SYS_NICE; see rtcat's log",
        )
    }
}

/// Tune group `tasks`: every movable task and kthread off the RT CPU (not rtcat, IRQ threads,
/// `PF_NO_SETAFFINITY` threads, tasks pinned to the RT CPU only or of processes being stopped).
pub(crate) fn plan_tasks(
    root: &SysRoot,
    tc: &TuneCtx,
    procs: &BTreeMap<u32, String>,
    stopping: &[u32],
    plan: &mut Plan,
) {
    let g = KnobGroup::Tasks;
    if !tc.tune.move_tasks {
        skip(plan, g, "tasks", "tune.move_tasks = false");
        return;
    }
    let me = std::process::id();
    let rtcat: Vec<u32> = facts::pids_named(procs, "rtcat");
    for t in facts::read_tasks(root, procs) {
        if !t.allowed.intersects(&tc.rt)
            || rtcat.contains(&t.pid)
            || stopping.contains(&t.pid)
            || (root.is_live() && t.pid == me)
            || t.is_irq_thread()
            || t.no_setaffinity()
            || t.allowed.is_subset(&tc.rt)
        {
            continue;
        }
        let target = match &tc.housekeeping {
            Some(h) => {
                let i = t.allowed.intersection(h);
                if i.is_empty() {
                    tc.narrow(&t.allowed)
                } else {
                    i
                }
            }
            None => t.allowed.difference(&tc.rt),
        };
        plan.changes.push(Planned {
            group: g,
            id: format!("task:{}:{}", t.tid, t.starttime),
            what: format!("task {}[{}]: {} -> {}", t.comm, t.tid, t.allowed, target),
            current: t.allowed.to_list(),
            target: target.to_list(),
            change: Change::Affinity {
                pid: t.pid,
                tid: t.tid,
                starttime: t.starttime,
                comm: t.comm.clone(),
                original: t.allowed.to_list(),
                target: target.to_list(),
            },
        });
    }
}
