//! `rtcat doctor`: one verdict per real-time knob.
//!
//! This module gathers the facts every check needs once ([`run`] builds a `Ctx`) and lists the
//! checks in report order; the checks themselves live with their knobs, one file per area, in
//! the crate's `knobs` module (kernel, boot arguments, scheduler, power, IRQs, workqueues,
//! memory, tasks, NIC, capabilities). The report type is in `report.rs`.

mod report;

pub use report::{Check, MAX_DETAILS, Report, SCHEMA, Summary, Verdict};

use crate::config::{CycleWait, TuneSection};
use crate::cpuset::CpuSet;
use crate::facts::{self, Irq, Task};
use crate::host::Host;
use crate::journal::Journal;
use crate::sysroot::SysRoot;
use std::collections::BTreeMap;

/// Inputs of one doctor run.
pub struct Doctor<'a> {
    pub root: &'a SysRoot,
    pub host: &'a dyn Host,
    pub rt: CpuSet,
    pub iface: Option<String>,
    pub tune: TuneSection,
    /// The tune journal, if any (IRQs that refused a write are known to be kernel-managed).
    pub journal: Option<Journal>,
    /// How the cycle waits for its replies (from the rtcat config); `None`: not known.
    pub wait: Option<CycleWait>,
    /// The cyclic thread's SCHED_FIFO priority (from the rtcat config); `None`: not known.
    pub priority: Option<u8>,
}

/// What every check reads, gathered once per run.
pub(crate) struct Ctx<'a> {
    pub(crate) d: &'a Doctor<'a>,
    pub(crate) rt: CpuSet,
    pub(crate) rtl: String,
    pub(crate) hk: CpuSet,
    pub(crate) cmdline: Vec<(String, Option<String>)>,
    pub(crate) kconfig: Option<(String, std::collections::HashMap<String, String>)>,
    pub(crate) procs: BTreeMap<u32, String>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) irqs: Vec<Irq>,
    pub(crate) isolated: CpuSet,
    pub(crate) is_rt: bool,
    pub(crate) tune_cmd: String,
    /// Kernel-managed IRQ state exists but this user may not read it (debugfs without root):
    /// an IRQ allowed on the RT CPU is then of unknown kind, not known wrong.
    pub(crate) managed_hidden: bool,
}

pub(crate) fn chk(id: &'static str, verdict: Verdict) -> Check {
    Check {
        id,
        verdict,
        observed: String::new(),
        expected: String::new(),
        why: String::new(),
        fix: String::new(),
        reboot: false,
        details: Vec::new(),
    }
}

impl Check {
    pub(crate) fn obs(mut self, s: impl Into<String>) -> Self {
        self.observed = s.into();
        self
    }
    pub(crate) fn exp(mut self, s: impl Into<String>) -> Self {
        self.expected = s.into();
        self
    }
    pub(crate) fn why(mut self, s: impl Into<String>) -> Self {
        self.why = s.into();
        self
    }
    pub(crate) fn fix(mut self, s: impl Into<String>) -> Self {
        self.fix = s.into();
        self
    }
    /// The fix, recorded only when `needed`: a check that holds has nothing to fix.
    pub(crate) fn fix_if(self, needed: bool, s: impl Into<String>) -> Self {
        if needed { self.fix(s) } else { self }
    }
    /// The fix takes effect only after a reboot (nothing to say when there is no fix).
    pub(crate) fn reboot(mut self) -> Self {
        self.reboot = !self.fix.is_empty();
        self
    }
    pub(crate) fn details(mut self, v: Vec<String>) -> Self {
        let n = v.len();
        self.details = v.into_iter().take(MAX_DETAILS).collect();
        if n > MAX_DETAILS {
            self.details.push(format!("… and {} more", n - MAX_DETAILS));
        }
        self
    }
}

/// Run every check.
pub fn run(d: &Doctor) -> anyhow::Result<Report> {
    let root = d.root;
    let online = facts::online_cpus(root);
    let rt = d.rt.clone();
    if rt.is_empty() {
        anyhow::bail!("no RT CPU given");
    }
    if !online.is_empty() && !rt.is_subset(&online) {
        anyhow::bail!("RT CPU {} is not online (online: {})", rt, online);
    }
    let hk = match d.tune.housekeeping()? {
        Some(h) => h,
        None => online.difference(&rt),
    };
    let procs = facts::read_processes(root);
    let tasks = facts::read_tasks(root, &procs);
    let irqs = facts::read_irqs(root).unwrap_or_default();
    let kconfig = facts::kernel_config(root);
    let version = root
        .read_opt("/proc/sys/kernel/version")
        .unwrap_or_default();
    let is_rt = version.contains("PREEMPT_RT")
        || root.read_opt("/sys/kernel/realtime").as_deref() == Some("1")
        || kconfig
            .as_ref()
            .and_then(|(_, m)| m.get("CONFIG_PREEMPT_RT"))
            .map(|v| v == "y")
            .unwrap_or(false);
    let isolated = root
        .read_opt(&format!("{}/isolated", facts::P_CPU))
        .and_then(|s| CpuSet::parse_list(&s).ok())
        .unwrap_or_default();
    let mut tune_cmd = format!("rtcat tune apply --cpu {}", rt.to_list());
    if let Some(i) = &d.iface {
        tune_cmd.push_str(&format!(" --iface {i}"));
    }
    let c = Ctx {
        d,
        rtl: rt.to_list(),
        rt,
        hk,
        cmdline: facts::cmdline(root),
        kconfig,
        procs,
        tasks,
        irqs,
        isolated,
        is_rt,
        tune_cmd,
        managed_hidden: root.access_denied(facts::P_IRQ_DEBUGFS),
    };
    let checks = vec![
        c.preempt_rt(&version),
        c.preempt_mode(&version),
        c.kconfig_check(
            "kernel.hz",
            "CONFIG_HZ",
            "stmmac's 5.10 TX-cleanup timer and every jiffies timeout round up to 1/HZ; at 100/250 Hz a 1 ms timer becomes 10/4 ms",
        ),
        c.kconfig_check(
            "kernel.nohz_full",
            "CONFIG_NO_HZ_FULL",
            "without it the scheduler tick keeps interrupting the RT CPU and nohz_full= is ignored",
        ),
        c.kconfig_check(
            "kernel.rcu_nocb",
            "CONFIG_RCU_NOCB_CPU",
            "without it RCU callbacks run on the RT CPU and rcu_nocbs= is ignored",
        ),
        c.isolcpus(),
        c.boot_cpu_arg(
            "boot.nohz_full",
            "nohz_full",
            "stops the periodic tick on the RT CPU while one task runs",
        ),
        c.boot_cpu_arg(
            "boot.rcu_nocbs",
            "rcu_nocbs",
            "offloads RCU callback processing from the RT CPU",
        ),
        c.irqaffinity(),
        c.isolated_sysfs(),
        c.rt_runtime(),
        c.timer_migration(),
        c.governor(),
        c.frequency(),
        c.cpuidle(),
        c.dma_latency(),
        c.irqbalance(),
        c.default_affinity(),
        c.irq_affinity(),
        c.nic_irqs(),
        c.wq_unbound(),
        c.wq_each(),
        c.thp(),
        c.swap(),
        c.memlock(),
        c.tasks_on_rt(),
        c.rtcat_threads(),
        c.cycle_wait(),
        c.nic_link(),
        c.nic_coalesce(),
        c.caps(),
        c.ab_slots(),
    ];
    let mut summary = Summary::default();
    for ch in &checks {
        match ch.verdict {
            Verdict::Pass => summary.pass += 1,
            Verdict::Warn => summary.warn += 1,
            Verdict::Fail => summary.fail += 1,
            Verdict::NA => summary.na += 1,
        }
    }
    Ok(Report {
        schema: SCHEMA,
        root: root.root().display().to_string(),
        rt_cpus: c.rtl.clone(),
        housekeeping_cpus: c.hk.to_list(),
        iface: d.iface.clone(),
        kernel: format!(
            "{} {}",
            root.read_opt("/proc/sys/kernel/osrelease")
                .unwrap_or_default(),
            version
        ),
        checks,
        summary,
    })
}

impl Ctx<'_> {
    pub(crate) fn root(&self) -> &SysRoot {
        self.d.root
    }

    pub(crate) fn kcfg(&self, key: &str) -> Option<String> {
        self.kconfig.as_ref().and_then(|(_, m)| m.get(key).cloned())
    }

    pub(crate) fn rtcat_pid(&self) -> Option<u32> {
        facts::pids_named(&self.procs, "rtcat")
            .into_iter()
            .find(|p| {
                self.tasks
                    .iter()
                    .any(|t| t.pid == *p && t.comm.starts_with("rtcat-"))
            })
    }

    /// rtcat.service with its drop-ins, if installed.
    pub(crate) fn unit(&self) -> Option<(String, BTreeMap<String, String>)> {
        crate::unitfile::read(self.root(), "rtcat.service").map(|u| (u.path, u.keys))
    }

    /// A CPU-mask file that must exclude the RT CPU (tune narrows it): N/A when absent, FAIL
    /// when unparsable or when it includes the RT CPU. `example`: name the mask to write in the
    /// expectation too.
    pub(crate) fn mask_excludes_rt(
        &self,
        id: &'static str,
        path: &str,
        why: &str,
        example: bool,
    ) -> Check {
        match self
            .root()
            .read_opt(path)
            .map(|s| (CpuSet::parse_mask(&s), s))
        {
            None => chk(id, Verdict::NA)
                .obs(format!("{path} absent"))
                .exp(format!("excludes {}", self.rtl))
                .why(why),
            Some((Err(e), s)) => chk(id, Verdict::Fail)
                .obs(format!("{s}: {e}"))
                .exp(format!("excludes {}", self.rtl))
                .why(why),
            Some((Ok(m), s)) => {
                let bad = m.intersects(&self.rt);
                let exp = if example {
                    format!(
                        "excludes CPU {} (e.g. mask {})",
                        self.rtl,
                        self.hk.to_mask_like(&s)
                    )
                } else {
                    format!("excludes CPU {}", self.rtl)
                };
                let c = chk(id, if bad { Verdict::Fail } else { Verdict::Pass })
                    .obs(format!("{s} (CPUs {m})"))
                    .exp(exp)
                    .why(why);
                c.fix_if(
                    bad,
                    format!(
                        "{} (or: echo {} > {path})",
                        self.tune_cmd,
                        self.hk.to_mask_like(&s)
                    ),
                )
            }
        }
    }
}
