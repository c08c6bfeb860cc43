//! `rtcat doctor`: one verdict per real-time knob.

use crate::config::TuneSection;
use crate::cpuset::CpuSet;
use crate::facts::{self, Irq, Task};
use crate::host::Host;
use crate::journal::Journal;
use crate::sysroot::SysRoot;
use caps::Capability;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// JSON schema identifier of [`Report`].
pub const SCHEMA: &str = "rttune.doctor/1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "N/A")]
    NA,
    #[serde(rename = "WARN")]
    Warn,
    #[serde(rename = "FAIL")]
    Fail,
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::NA => "N/A",
        }
    }
}

/// One check's result.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub id: &'static str,
    pub verdict: Verdict,
    pub observed: String,
    pub expected: String,
    pub why: String,
    /// Command that fixes it ("" when nothing to fix).
    pub fix: String,
    /// True when the fix takes effect only after a reboot.
    pub reboot: bool,
    /// Offending items (IRQs, tasks, …), at most [`MAX_DETAILS`].
    pub details: Vec<String>,
}

pub const MAX_DETAILS: usize = 40;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub na: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub root: String,
    pub rt_cpus: String,
    pub housekeeping_cpus: String,
    pub iface: Option<String>,
    pub kernel: String,
    pub checks: Vec<Check>,
    pub summary: Summary,
}

impl Report {
    pub fn exit_code(&self) -> i32 {
        if self.summary.fail > 0 { 1 } else { 0 }
    }

    pub fn get(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }

    /// `ID VERDICT` lines, used by golden tests.
    pub fn verdict_lines(&self) -> String {
        self.checks
            .iter()
            .map(|c| format!("{:<26} {}\n", c.id, c.verdict.as_str()))
            .collect()
    }

    pub fn to_text(&self) -> String {
        let mut s = format!(
            "rtcat doctor: RT CPU {} · housekeeping {} · NIC {} · kernel {}\n",
            self.rt_cpus,
            self.housekeeping_cpus,
            self.iface.as_deref().unwrap_or("(none)"),
            self.kernel
        );
        for c in &self.checks {
            s.push_str(&format!(
                "{:<4} {:<24} observed: {} | expected: {} | why: {} | fix: {} | reboot: {}\n",
                c.verdict.as_str(),
                c.id,
                c.observed,
                c.expected,
                c.why,
                if c.fix.is_empty() { "-" } else { &c.fix },
                if c.reboot { "yes" } else { "no" }
            ));
            for d in &c.details {
                s.push_str(&format!("       - {d}\n"));
            }
        }
        s.push_str(&format!(
            "summary: {} PASS, {} WARN, {} FAIL, {} N/A\n",
            self.summary.pass, self.summary.warn, self.summary.fail, self.summary.na
        ));
        s
    }
}

/// Inputs of one doctor run.
pub struct Doctor<'a> {
    pub root: &'a SysRoot,
    pub host: &'a dyn Host,
    pub rt: CpuSet,
    pub iface: Option<String>,
    pub tune: TuneSection,
    /// The tune journal, if any (IRQs that refused a write are known to be kernel-managed).
    pub journal: Option<Journal>,
}

struct Ctx<'a> {
    d: &'a Doctor<'a>,
    rt: CpuSet,
    rtl: String,
    hk: CpuSet,
    cmdline: Vec<(String, Option<String>)>,
    kconfig: Option<(String, std::collections::HashMap<String, String>)>,
    procs: BTreeMap<u32, String>,
    tasks: Vec<Task>,
    irqs: Vec<Irq>,
    isolated: CpuSet,
    is_rt: bool,
    tune_cmd: String,
}

fn chk(id: &'static str, verdict: Verdict) -> Check {
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
    fn obs(mut self, s: impl Into<String>) -> Self {
        self.observed = s.into();
        self
    }
    fn exp(mut self, s: impl Into<String>) -> Self {
        self.expected = s.into();
        self
    }
    fn why(mut self, s: impl Into<String>) -> Self {
        self.why = s.into();
        self
    }
    fn fix(mut self, s: impl Into<String>) -> Self {
        self.fix = s.into();
        self
    }
    /// The fix, recorded only when `needed`: a check that holds has nothing to fix.
    fn fix_if(self, needed: bool, s: impl Into<String>) -> Self {
        if needed { self.fix(s) } else { self }
    }
    /// The fix takes effect only after a reboot (nothing to say when there is no fix).
    fn reboot(mut self) -> Self {
        self.reboot = !self.fix.is_empty();
        self
    }
    fn details(mut self, v: Vec<String>) -> Self {
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
        c.nic_link(),
        c.nic_coalesce(),
        c.caps(),
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

const BOOTARGS_FIX: &str =
    "set in kernel/rt-cpus.env and regenerate the boot args (extlinux.conf / DTB chosen/bootargs)";

fn isolcpus_parse(v: &str) -> (BTreeSet<String>, CpuSet, Vec<String>) {
    let mut flags = BTreeSet::new();
    let mut cpus = CpuSet::new();
    let mut bad = Vec::new();
    for tok in v.split(',') {
        match tok {
            "nohz" | "domain" | "managed_irq" => {
                flags.insert(tok.to_string());
            }
            t => match CpuSet::parse_list(t) {
                Ok(s) => cpus = cpus.union(&s),
                Err(_) => bad.push(t.to_string()),
            },
        }
    }
    if flags.is_empty() {
        flags.insert("domain".into());
    }
    (flags, cpus, bad)
}

impl Ctx<'_> {
    fn root(&self) -> &SysRoot {
        self.d.root
    }

    fn kcfg(&self, key: &str) -> Option<String> {
        self.kconfig.as_ref().and_then(|(_, m)| m.get(key).cloned())
    }

    fn preempt_rt(&self, version: &str) -> Check {
        let realtime = self.root().read_opt("/sys/kernel/realtime");
        let cfg = self.kcfg("CONFIG_PREEMPT_RT");
        let obs = format!(
            "uname -v {version:?}; /sys/kernel/realtime {}; CONFIG_PREEMPT_RT {}",
            realtime.as_deref().unwrap_or("absent"),
            match (&self.kconfig, cfg) {
                (None, _) => "(config not readable)".to_string(),
                (Some(_), Some(v)) => v,
                (Some(_), None) => "not set".to_string(),
            }
        );
        let c = chk(
            "kernel.preempt_rt",
            if self.is_rt {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
        )
        .obs(obs)
        .exp("PREEMPT_RT kernel")
        .why("loaded RK3588 1 ms cycle: stock 5.10 wake max 165.6 us, PREEMPT_RT 9.5 us (docs/NOTES.md §1)");
        c.fix_if(
            !self.is_rt,
            "boot a PREEMPT_RT kernel (CONFIG_PREEMPT_RT=y; on 6.12+ with CONFIG_EXPERT=y)",
        )
        .reboot()
    }

    fn preempt_mode(&self, version: &str) -> Check {
        let id = "kernel.preempt_mode";
        let why =
            "preemption model decides how long a kernel path can delay the cycle thread's wake-up";
        if self.is_rt {
            return chk(id, Verdict::Pass)
                .obs("full (PREEMPT_RT)")
                .exp("full or PREEMPT_RT")
                .why(why);
        }
        let mode = match self.root().read("/sys/kernel/debug/sched/preempt") {
            Ok(s) => s
                .split_whitespace()
                .find(|t| t.starts_with('('))
                .map(|t| (t.trim_matches(['(', ')']).to_string(), "debugfs")),
            Err(_) => None,
        }
        .or_else(|| facts::cmdline_get(&self.cmdline, "preempt").map(|v| (v, "preempt= boot arg")))
        .or_else(|| {
            if version.contains("PREEMPT_DYNAMIC") {
                None
            } else if version.contains(" PREEMPT ") || version.ends_with(" PREEMPT") {
                Some(("full".into(), "uname -v"))
            } else {
                Some(("none/voluntary".into(), "uname -v"))
            }
        });
        match mode {
            None => chk(id, Verdict::NA)
                .obs("PREEMPT_DYNAMIC kernel; /sys/kernel/debug/sched/preempt not readable (debugfs not mounted or EPERM)")
                .exp("full")
                .why(why)
                .fix("mount -t debugfs none /sys/kernel/debug to read it; preempt=full on the kernel command line"),
            Some((m, src)) if m == "full" || m == "lazy" => chk(id, Verdict::Warn)
                .obs(format!("{m} (from {src})"))
                .exp("PREEMPT_RT (full is the best non-RT model)")
                .why(why)
                .fix("boot a PREEMPT_RT kernel")
                .reboot(),
            Some((m, src)) => chk(id, Verdict::Fail)
                .obs(format!("{m} (from {src})"))
                .exp("full or PREEMPT_RT")
                .why(why)
                .fix("add preempt=full to the kernel command line, or boot a PREEMPT_RT kernel")
                .reboot(),
        }
    }

    fn kconfig_check(&self, id: &'static str, key: &str, why: &str) -> Check {
        let Some((src, m)) = &self.kconfig else {
            return chk(id, Verdict::NA)
                .obs("kernel config not readable (no /proc/config.gz, no /boot/config-$(uname -r))")
                .exp(if key == "CONFIG_HZ" {
                    "1000".to_string()
                } else {
                    format!("{key}=y")
                })
                .why(why);
        };
        if key == "CONFIG_HZ" {
            let hz: Option<u32> = m.get(key).and_then(|v| v.parse().ok());
            let v = if hz == Some(1000) {
                Verdict::Pass
            } else {
                Verdict::Warn
            };
            let c = chk(id, v)
                .obs(format!(
                    "HZ={} ({src})",
                    hz.map(|h| h.to_string()).unwrap_or("?".into())
                ))
                .exp("1000")
                .why(why);
            return c
                .fix_if(
                    v != Verdict::Pass,
                    "rebuild the kernel with CONFIG_HZ_1000=y",
                )
                .reboot();
        }
        let val = m.get(key).cloned().unwrap_or_else(|| "not set".into());
        let ok = val == "y";
        let c = chk(id, if ok { Verdict::Pass } else { Verdict::Warn })
            .obs(format!("{key}={val} ({src})"))
            .exp(format!("{key}=y"))
            .why(why);
        c.fix_if(!ok, format!("rebuild the kernel with {key}=y"))
            .reboot()
    }

    fn isolcpus(&self) -> Check {
        let id = "boot.isolcpus";
        let exp = format!("isolcpus=nohz,domain,managed_irq,{}", self.rtl);
        let why = "keeps the scheduler (domain) and managed IRQs (managed_irq) off the RT CPU from boot; loaded cyclictest on RK3588: isolated core max 6 us vs 184 us (docs/NOTES.md §1)";
        let fix = format!("boot with {exp} ({BOOTARGS_FIX})");
        match facts::cmdline_get(&self.cmdline, "isolcpus") {
            None => chk(id, Verdict::Warn)
                .obs("not set (runtime shield only)")
                .exp(exp)
                .why(why)
                .fix(fix)
                .reboot(),
            Some(v) => {
                let (flags, cpus, bad) = isolcpus_parse(&v);
                let fl: Vec<&str> = flags.iter().map(|s| s.as_str()).collect();
                let obs = format!("isolcpus={v} (flags {}; CPUs {})", fl.join(","), cpus);
                let verdict = if !bad.is_empty() || !self.rt.is_subset(&cpus) {
                    Verdict::Fail
                } else if !flags.contains("managed_irq") || !flags.contains("domain") {
                    Verdict::Warn
                } else {
                    Verdict::Pass
                };
                let unrecognised = if bad.is_empty() {
                    vec![]
                } else {
                    vec![format!("unrecognised elements: {}", bad.join(","))]
                };
                chk(id, verdict)
                    .obs(obs)
                    .exp(exp)
                    .why(why)
                    .details(unrecognised)
                    .fix_if(verdict != Verdict::Pass, fix)
                    .reboot()
            }
        }
    }

    fn boot_cpu_arg(&self, id: &'static str, key: &str, why: &str) -> Check {
        self.boot_cpu_list(
            id,
            key,
            format!("{key}={}", self.rtl),
            why,
            |s| self.rt.is_subset(s),
            &format!("does not cover RT CPU {}", self.rtl),
        )
    }

    fn irqaffinity(&self) -> Check {
        self.boot_cpu_list(
            "boot.irqaffinity",
            "irqaffinity",
            format!("irqaffinity={}", self.hk.to_list()),
            "default affinity of every IRQ requested during boot; keeps them off the RT CPU before any runtime tuning",
            |s| !s.intersects(&self.rt) && !s.is_empty(),
            &format!("includes RT CPU {}", self.rtl),
        )
    }

    /// A CPU-list boot argument: WARN when absent, PASS when `ok` accepts it, else FAIL with
    /// `wrong` (or the parse error).
    fn boot_cpu_list(
        &self,
        id: &'static str,
        key: &str,
        exp: String,
        why: &str,
        ok: impl Fn(&CpuSet) -> bool,
        wrong: &str,
    ) -> Check {
        let fix = format!("boot with {exp} ({BOOTARGS_FIX})");
        let Some(v) = facts::cmdline_get(&self.cmdline, key) else {
            return chk(id, Verdict::Warn)
                .obs("not set")
                .exp(exp)
                .why(why)
                .fix(fix)
                .reboot();
        };
        let problem = match CpuSet::parse_list(&v) {
            Ok(s) if ok(&s) => {
                return chk(id, Verdict::Pass)
                    .obs(format!("{key}={v}"))
                    .exp(exp)
                    .why(why);
            }
            Ok(_) => format!(" {wrong}"),
            Err(e) => format!(": {e}"),
        };
        chk(id, Verdict::Fail)
            .obs(format!("{key}={v}{problem}"))
            .exp(exp)
            .why(why)
            .fix(fix)
            .reboot()
    }

    fn isolated_sysfs(&self) -> Check {
        let id = "boot.isolated";
        let why = "what the kernel actually isolated: a typo in isolcpus= is silently ignored";
        let exp = format!(
            "{} contains {}",
            "/sys/devices/system/cpu/isolated", self.rtl
        );
        let Some(raw) = self.root().read_opt(&format!("{}/isolated", facts::P_CPU)) else {
            return chk(id, Verdict::NA)
                .obs("/sys/devices/system/cpu/isolated absent")
                .exp(exp)
                .why(why);
        };
        let has_arg = facts::cmdline_get(&self.cmdline, "isolcpus").is_some();
        let v = if self.rt.is_subset(&self.isolated) {
            Verdict::Pass
        } else if has_arg {
            Verdict::Fail
        } else {
            Verdict::Warn
        };
        let obs = if raw.is_empty() {
            "empty".to_string()
        } else {
            raw.clone()
        };
        let c = chk(id, v).obs(format!("isolated: {obs}")).exp(exp).why(why);
        c.fix_if(
            v != Verdict::Pass,
            format!(
                "boot with isolcpus=nohz,domain,managed_irq,{} and check the spelling",
                self.rtl
            ),
        )
        .reboot()
    }

    fn rt_runtime(&self) -> Check {
        let id = "sched.rt_runtime";
        let why = "RT throttling (sched_rt_runtime_us) is the only guard against a runaway SCHED_FIFO thread starving the CPU; -1 needs another protection (stalld or the deadline fair server)";
        let Some(v) = self.root().read_opt("/proc/sys/kernel/sched_rt_runtime_us") else {
            return chk(id, Verdict::NA)
                .obs("/proc/sys/kernel/sched_rt_runtime_us absent")
                .exp("950000 (or -1 with stalld)")
                .why(why);
        };
        let period = self
            .root()
            .read_opt("/proc/sys/kernel/sched_rt_period_us")
            .unwrap_or_else(|| "?".into());
        if v.trim() == "-1" {
            let stalld = !facts::pids_named(&self.procs, "stalld").is_empty();
            let fair = self.root().exists("/sys/kernel/debug/sched/fair_server");
            let prot = match (stalld, fair) {
                (true, _) => "stalld running",
                (false, true) => "deadline fair server present",
                _ => "no stalld, no fair server",
            };
            let c = chk(
                id,
                if stalld || fair {
                    Verdict::Pass
                } else {
                    Verdict::Warn
                },
            )
            .obs(format!("-1 (throttling off); {prot}"))
            .exp("950000, or -1 with starvation protection")
            .why(why);
            c.fix_if(
                !(stalld || fair),
                "sysctl -w kernel.sched_rt_runtime_us=950000, or run stalld",
            )
        } else {
            match v.trim().parse::<i64>() {
                Ok(n) if n > 0 => chk(id, Verdict::Pass)
                    .obs(format!("{n} of {period} us per period"))
                    .exp("950000 (or -1 with stalld)")
                    .why(why),
                _ => chk(id, Verdict::Fail)
                    .obs(format!("{v}: SCHED_FIFO threads get no CPU time"))
                    .exp("950000")
                    .why(why)
                    .fix("sysctl -w kernel.sched_rt_runtime_us=950000"),
            }
        }
    }

    fn timer_migration(&self) -> Check {
        let id = "sched.timer_migration";
        let why = "with 1 the kernel may move timers of idle CPUs onto the busy RT CPU";
        match self.root().read_opt(facts::P_TIMER_MIGRATION) {
            None => chk(id, Verdict::NA)
                .obs("/proc/sys/kernel/timer_migration absent")
                .exp("0")
                .why(why),
            Some(v) if v == "0" => chk(id, Verdict::Pass).obs("0").exp("0").why(why),
            Some(v) => chk(id, Verdict::Warn).obs(v).exp("0").why(why).fix(format!(
                "{} (or: sysctl -w kernel.timer_migration=0)",
                self.tune_cmd
            )),
        }
    }

    fn rt_policies(&self) -> Vec<facts::Policy> {
        facts::read_policies(self.root())
            .into_iter()
            .filter(|p| p.related.intersects(&self.rt))
            .collect()
    }

    fn governor(&self) -> Check {
        let id = "power.governor";
        let want = &self.d.tune.governor;
        let why = "RK3588 idle: ondemand -> performance cut wake mean 10.9 -> 2.3 us, max 151 -> 13.5 us (docs/NOTES.md §1)";
        let pols = self.rt_policies();
        if pols.is_empty() {
            return chk(id, Verdict::NA)
                .obs(format!(
                    "no cpufreq policy for CPU {} (cpufreq absent or disabled)",
                    self.rtl
                ))
                .exp(want.clone())
                .why(why);
        }
        let mut bad = false;
        let obs: Vec<String> = pols
            .iter()
            .map(|p| {
                let g = p.governor.clone().unwrap_or_else(|| "?".into());
                if &g != want {
                    bad = true;
                }
                let also = p.related.difference(&self.rt);
                let share = if also.is_empty() {
                    String::new()
                } else {
                    format!("; CPU {also} share it")
                };
                format!("{g} on {} (CPUs {}{share})", p.name, p.related)
            })
            .collect();
        let c = chk(id, if bad { Verdict::Fail } else { Verdict::Pass })
            .obs(obs.join("; "))
            .exp(want.clone())
            .why(why);
        c.fix_if(
            bad,
            format!(
                "{} (or: echo {want} > {}/scaling_governor)",
                self.tune_cmd,
                pols[0].dir()
            ),
        )
    }

    fn frequency(&self) -> Check {
        let id = "power.frequency";
        let why = "a capped scaling_max_freq or a low floor under a dynamic governor slows and jitters the cycle";
        let pols = self.rt_policies();
        if pols.is_empty() {
            return chk(id, Verdict::NA)
                .obs(format!("no cpufreq policy for CPU {}", self.rtl))
                .exp("scaling_min = scaling_max = cpuinfo_max")
                .why(why);
        }
        let mut v = Verdict::Pass;
        let mut obs = Vec::new();
        for p in &pols {
            let f = |x: Option<u64>| x.map(|k| format!("{} MHz", k / 1000)).unwrap_or("?".into());
            obs.push(format!(
                "{}: min {} max {} (hardware {}..{})",
                p.name,
                f(p.min),
                f(p.max),
                f(p.hw_min),
                f(p.hw_max)
            ));
            if p.max.is_some() && p.max != p.hw_max {
                v = Verdict::Warn;
            }
            if p.governor.as_deref() != Some("performance") && p.min != p.max {
                v = Verdict::Warn;
            }
        }
        let c = chk(id, v)
            .obs(obs.join("; "))
            .exp("max = hardware max, and min = max unless the governor is performance")
            .why(why);
        c.fix_if(
            v != Verdict::Pass,
            format!(
                "{}; or: cat {d}/cpuinfo_max_freq > {d}/scaling_max_freq",
                self.tune_cmd,
                d = pols[0].dir()
            ),
        )
    }

    fn deep_states(&self) -> Option<Vec<facts::IdleState>> {
        let mut any = false;
        let mut deep = Vec::new();
        for cpu in self.rt.iter() {
            if let Some(states) = facts::read_idle_states(self.root(), cpu) {
                any = true;
                deep.extend(states.into_iter().filter(|s| {
                    s.index > 0
                        && !s.disabled
                        && s.latency_us > u64::from(self.d.tune.cstate_max_latency_us)
                }));
            }
        }
        any.then_some(deep)
    }

    fn cpuidle(&self) -> Check {
        let id = "power.cpuidle";
        let why = "waking from a deep idle state adds its exit latency to every cycle's wake-up";
        let exp = format!(
            "states with exit latency > {} us disabled on CPU {}",
            self.d.tune.cstate_max_latency_us, self.rtl
        );
        let driver = self
            .root()
            .read_opt(&format!("{}/cpuidle/current_driver", facts::P_CPU))
            .unwrap_or_else(|| "?".into());
        match self.deep_states() {
            None => chk(id, Verdict::NA)
                .obs(format!("no cpuidle on CPU {}", self.rtl))
                .exp(exp)
                .why(why),
            Some(deep) if deep.is_empty() => chk(id, Verdict::Pass)
                .obs(format!("no deep state enabled (driver {driver})"))
                .exp(exp)
                .why(why),
            Some(deep) => {
                let v = if self.d.tune.disable_cstates {
                    Verdict::Warn
                } else {
                    Verdict::Pass
                };
                let list: Vec<String> = deep
                    .iter()
                    .map(|s| {
                        format!(
                            "cpu{} state{} {} ({} us)",
                            s.cpu, s.index, s.name, s.latency_us
                        )
                    })
                    .collect();
                let c = chk(id, v)
                    .obs(format!("enabled: {} (driver {driver})", list.join(", ")))
                    .exp(if self.d.tune.disable_cstates {
                        exp
                    } else {
                        "left enabled ([tune].disable_cstates = false)".into()
                    })
                    .why(why);
                c.fix_if(
                    v != Verdict::Pass,
                    format!(
                        "{} (or: echo 1 > {})",
                        self.tune_cmd,
                        deep[0].disable_path()
                    ),
                )
            }
        }
    }

    fn dma_latency(&self) -> Check {
        let id = "power.cpu_dma_latency";
        let why = "a process holding /dev/cpu_dma_latency at 0 keeps every CPU out of deep idle states (rtcat does with [rt].hold_cpu_dma_latency)";
        let holders = facts::dma_latency_holders(self.root(), &self.procs);
        let list: Vec<String> = holders.iter().map(|(p, c)| format!("{c}[{p}]")).collect();
        let deep = self.deep_states();
        let v = match (&deep, holders.is_empty()) {
            (_, false) => Verdict::Pass,
            (None, true) => Verdict::Pass,
            (Some(d), true) if d.is_empty() => Verdict::Pass,
            _ => Verdict::Warn,
        };
        let c = chk(id, v)
            .obs(if list.is_empty() {
                "held by nobody".into()
            } else {
                format!("held by {}", list.join(", "))
            })
            .exp("held (by rtcat) while deep idle states are enabled")
            .why(why);
        c.fix_if(
            v == Verdict::Warn,
            "run rtcat with [rt].hold_cpu_dma_latency = true, or disable the idle states (rtcat tune apply)",
        )
    }

    fn irqbalance(&self) -> Check {
        let id = "irq.irqbalance";
        let why = "irqbalance re-spreads IRQs every 10 s, onto the RT CPU too, undoing the shield";
        let pids = facts::pids_named(&self.procs, "irqbalance");
        if pids.is_empty() {
            chk(id, Verdict::Pass)
                .obs("not running")
                .exp("not running")
                .why(why)
        } else {
            chk(id, Verdict::Fail)
                .obs(format!(
                    "running (pid {})",
                    pids.iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ))
                .exp("not running")
                .why(why)
                .fix(format!(
                    "{} (or: systemctl disable --now irqbalance)",
                    self.tune_cmd
                ))
        }
    }

    fn default_affinity(&self) -> Check {
        let id = "irq.default_affinity";
        let why = "IRQs requested later (hot-plug, interface up) start on these CPUs";
        match self
            .root()
            .read_opt(facts::P_IRQ_DEFAULT)
            .map(|s| (CpuSet::parse_mask(&s), s))
        {
            None => chk(id, Verdict::NA)
                .obs("/proc/irq/default_smp_affinity absent")
                .exp(format!("excludes {}", self.rtl))
                .why(why),
            Some((Err(e), s)) => chk(id, Verdict::Fail)
                .obs(format!("{s}: {e}"))
                .exp(format!("excludes {}", self.rtl))
                .why(why),
            Some((Ok(m), s)) => {
                let bad = m.intersects(&self.rt);
                let c = chk(id, if bad { Verdict::Fail } else { Verdict::Pass })
                    .obs(format!("{s} (CPUs {m})"))
                    .exp(format!(
                        "excludes CPU {} (e.g. mask {})",
                        self.rtl,
                        self.hk.to_mask_like(&s)
                    ))
                    .why(why);
                c.fix_if(
                    bad,
                    format!(
                        "{} (or: echo {} > {})",
                        self.tune_cmd,
                        self.hk.to_mask_like(&s),
                        facts::P_IRQ_DEFAULT
                    ),
                )
            }
        }
    }

    fn nic_irq_nums(&self) -> BTreeSet<u32> {
        match &self.d.iface {
            Some(i) => facts::nic_irqs(self.root(), &self.irqs, i),
            None => BTreeSet::new(),
        }
    }

    fn known_managed(&self, irq: &Irq) -> bool {
        irq.managed == Some(true)
            || self
                .d
                .journal
                .as_ref()
                .map(|j| j.refused(&irq.smp_path()))
                .unwrap_or(false)
    }

    fn irq_affinity(&self) -> Check {
        let id = "irq.affinity";
        let why = "an interrupt handled on the RT CPU delays the cycle by its handler time (loaded stock kernel: exec max 106 us)";
        let nic = self.nic_irq_nums();
        let mut wrong = Vec::new();
        let mut pending = Vec::new();
        let mut managed = Vec::new();
        let mut percpu = Vec::new();
        let mut total = 0;
        for irq in &self.irqs {
            if nic.contains(&irq.num) {
                continue;
            }
            let Some(aff) = &irq.affinity else { continue };
            total += 1;
            let eff = irq.effective.clone().unwrap_or_else(|| aff.clone());
            if !aff.intersects(&self.rt) {
                if eff.intersects(&self.rt) && !irq.names.is_empty() {
                    pending.push(format!(
                        "{} effective {} (moves at its next interrupt)",
                        irq.label(),
                        eff
                    ));
                }
                continue;
            }
            if irq.per_cpu {
                percpu.push(format!("{} per-CPU (expected)", irq.label()));
            } else if self.known_managed(irq) {
                if eff.intersects(&self.rt) {
                    managed.push(format!("{} kernel-managed, effective {}", irq.label(), eff));
                }
            } else if irq.names.is_empty() {
                // no handler: harmless until requested, but tune moves it anyway
                wrong.push(format!("{} (unused) affinity {}", irq.label(), aff));
            } else {
                wrong.push(format!(
                    "{} affinity {} effective {}",
                    irq.label(),
                    aff,
                    eff
                ));
            }
        }
        let v = if !wrong.is_empty() {
            Verdict::Fail
        } else if !pending.is_empty() || !managed.is_empty() {
            Verdict::Warn
        } else {
            Verdict::Pass
        };
        let obs = format!(
            "{} IRQs (NIC excluded): {} wrong, {} pending, {} kernel-managed on CPU {}, {} per-CPU",
            total,
            wrong.len(),
            pending.len(),
            managed.len(),
            self.rtl,
            percpu.len()
        );
        let mut det: Vec<String> = wrong.iter().map(|s| format!("wrong: {s}")).collect();
        det.extend(pending.iter().map(|s| format!("pending: {s}")));
        det.extend(managed.iter().map(|s| format!("cannot move: {s}")));
        det.extend(percpu);
        let c = chk(id, v)
            .obs(obs)
            .exp(format!("no movable IRQ allowed on CPU {}", self.rtl))
            .why(why)
            .details(det);
        match v {
            Verdict::Fail => c.fix(self.tune_cmd.clone()),
            Verdict::Warn if !managed.is_empty() => c
                .fix(format!(
                    "managed IRQs follow isolcpus=managed_irq,{} at boot",
                    self.rtl
                ))
                .reboot(),
            _ => c,
        }
    }

    fn nic_irqs(&self) -> Check {
        let id = "irq.nic";
        let why = "the EtherCAT frame's receive interrupt must not preempt the cycle thread and should land on a fixed, quiet CPU (seed: CPU5)";
        let Some(i) = &self.d.iface else {
            return chk(id, Verdict::NA)
                .obs("no interface (--iface or [bus].interface)")
                .exp("NIC IRQs placed")
                .why(why);
        };
        let want = self.d.tune.nic_irq_cpu;
        let exp = match want {
            Some(c) => format!("NIC IRQs on CPU {c}"),
            None => format!("NIC IRQs off CPU {}", self.rtl),
        };
        if let Err(m) = crate::netif::check_exists(self.root(), i) {
            return chk(id, Verdict::Fail)
                .obs(format!("interface {m}"))
                .exp(exp)
                .why(why)
                .fix("check [bus].interface / --iface");
        }
        let nic = self.nic_irq_nums();
        if nic.is_empty() {
            return chk(id, Verdict::Warn)
                .obs(format!("no IRQ named after {i} (virtual or polled NIC?)"))
                .exp(exp)
                .why(why);
        }
        let mut v = Verdict::Pass;
        let mut det = Vec::new();
        for irq in self.irqs.iter().filter(|q| nic.contains(&q.num)) {
            let aff = irq.affinity.clone().unwrap_or_default();
            let eff = irq.effective.clone().unwrap_or_else(|| aff.clone());
            let (ok, ok_eff) = match want {
                Some(c) => (aff == CpuSet::single(c), eff == CpuSet::single(c)),
                None => (!aff.intersects(&self.rt), !eff.intersects(&self.rt)),
            };
            let state = if !ok {
                if self.known_managed(irq) || irq.per_cpu {
                    v = v.max(Verdict::Warn);
                    "kernel-managed, cannot move"
                } else {
                    v = Verdict::Fail;
                    "wrong"
                }
            } else if !ok_eff {
                v = v.max(Verdict::Warn);
                "pending"
            } else {
                "ok"
            };
            det.push(format!(
                "{} affinity {} effective {}: {state}",
                irq.label(),
                aff,
                eff
            ));
        }
        let c = chk(id, v)
            .obs(format!("{} IRQ(s) of {i}", det.len()))
            .exp(exp)
            .why(why)
            .details(det);
        c.fix_if(v == Verdict::Fail, self.tune_cmd.clone())
    }

    fn wq_unbound(&self) -> Check {
        let id = "wq.unbound_cpumask";
        let why = "unbound kworkers (writeback, crypto, fs work) run wherever this mask allows";
        match self
            .root()
            .read_opt(facts::P_WQ_MASK)
            .map(|s| (CpuSet::parse_mask(&s), s))
        {
            None => chk(id, Verdict::NA)
                .obs(format!("{} absent", facts::P_WQ_MASK))
                .exp(format!("excludes {}", self.rtl))
                .why(why),
            Some((Err(e), s)) => chk(id, Verdict::Fail)
                .obs(format!("{s}: {e}"))
                .exp(format!("excludes {}", self.rtl))
                .why(why),
            Some((Ok(m), s)) => {
                let bad = m.intersects(&self.rt);
                let c = chk(id, if bad { Verdict::Fail } else { Verdict::Pass })
                    .obs(format!("{s} (CPUs {m})"))
                    .exp(format!("excludes CPU {}", self.rtl))
                    .why(why);
                c.fix_if(
                    bad,
                    format!(
                        "{} (or: echo {} > {})",
                        self.tune_cmd,
                        self.hk.to_mask_like(&s),
                        facts::P_WQ_MASK
                    ),
                )
            }
        }
    }

    fn wq_each(&self) -> Check {
        let id = "wq.per_workqueue";
        let why = "a WQ_SYSFS workqueue runs on its own cpumask intersected with the unbound mask";
        let global = self
            .root()
            .read_opt(facts::P_WQ_MASK)
            .and_then(|s| CpuSet::parse_mask(&s).ok());
        let dir = "/sys/devices/virtual/workqueue";
        let mut n = 0;
        let mut bad = Vec::new();
        for name in self.root().list(dir).unwrap_or_default() {
            let Some(m) = self.root().read_opt(&format!("{dir}/{name}/cpumask")) else {
                continue;
            };
            let Ok(m) = CpuSet::parse_mask(&m) else {
                continue;
            };
            n += 1;
            let eff = match &global {
                Some(g) if m.intersects(g) => m.intersection(g),
                Some(g) => g.clone(),
                None => m.clone(),
            };
            if eff.intersects(&self.rt) {
                bad.push(format!("{name}: cpumask {m}, effective {eff}"));
            }
        }
        if n == 0 {
            return chk(id, Verdict::NA)
                .obs("no workqueue exposes a cpumask")
                .exp(format!("none runs on {}", self.rtl))
                .why(why);
        }
        let c = chk(
            id,
            if bad.is_empty() {
                Verdict::Pass
            } else {
                Verdict::Warn
            },
        )
        .obs(format!(
            "{n} workqueue(s) with a cpumask, {} reach CPU {}",
            bad.len(),
            self.rtl
        ))
        .exp(format!("none runs on CPU {}", self.rtl))
        .why(why)
        .details(bad.clone());
        c.fix_if(!bad.is_empty(), self.tune_cmd.clone())
    }

    fn thp(&self) -> Check {
        let id = "mem.thp";
        let why = "THP 'always' makes page faults compact memory and khugepaged collapse pages behind the RT task";
        match self
            .root()
            .read_opt("/sys/kernel/mm/transparent_hugepage/enabled")
        {
            None => chk(id, Verdict::NA)
                .obs("THP not built in")
                .exp("never or madvise")
                .why(why),
            Some(s) => {
                let sel = s
                    .split_whitespace()
                    .find(|t| t.starts_with('['))
                    .map(|t| t.trim_matches(['[', ']']).to_string())
                    .unwrap_or(s.clone());
                let bad = sel == "always";
                let c = chk(id, if bad { Verdict::Warn } else { Verdict::Pass })
                    .obs(sel)
                    .exp("never or madvise")
                    .why(why);
                c.fix_if(bad, "echo never > /sys/kernel/mm/transparent_hugepage/enabled (or transparent_hugepage=never on the command line)")
            }
        }
    }

    fn swap(&self) -> Check {
        let id = "mem.swap";
        let why = "swap-out of any page the control path touches (unlocked memory, page cache) costs milliseconds";
        match self.root().read_opt("/proc/swaps") {
            None => chk(id, Verdict::NA)
                .obs("/proc/swaps absent")
                .exp("no swap")
                .why(why),
            Some(s) => {
                let dev: Vec<String> = s
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_whitespace().next())
                    .map(String::from)
                    .collect();
                if dev.is_empty() {
                    chk(id, Verdict::Pass)
                        .obs("no swap")
                        .exp("no swap")
                        .why(why)
                } else {
                    chk(id, Verdict::Warn)
                        .obs(format!("swap on {}", dev.join(", ")))
                        .exp("no swap")
                        .why(why)
                        .fix("swapoff -a and remove swap from /etc/fstab")
                }
            }
        }
    }

    fn rtcat_pid(&self) -> Option<u32> {
        facts::pids_named(&self.procs, "rtcat")
            .into_iter()
            .find(|p| {
                self.tasks
                    .iter()
                    .any(|t| t.pid == *p && t.comm.starts_with("rtcat-"))
            })
    }

    fn unit(&self) -> Option<(String, BTreeMap<String, String>)> {
        let mut found = None;
        for dir in [
            "/etc/systemd/system",
            "/usr/lib/systemd/system",
            "/lib/systemd/system",
        ] {
            let p = format!("{dir}/rtcat.service");
            if let Ok(t) = self.root().read_raw(&p) {
                found = Some((p, t));
                break;
            }
        }
        let (path, text) = found?;
        let mut m = BTreeMap::new();
        let mut texts = vec![text];
        for dir in [
            "/usr/lib/systemd/system/rtcat.service.d",
            "/etc/systemd/system/rtcat.service.d",
        ] {
            for f in self.root().list(dir).unwrap_or_default() {
                if f.ends_with(".conf")
                    && let Ok(t) = self.root().read_raw(&format!("{dir}/{f}"))
                {
                    texts.push(t);
                }
            }
        }
        for t in texts {
            for l in t.lines() {
                if let Some((k, v)) = l.trim().split_once('=') {
                    let (k, v) = (k.trim(), v.trim());
                    if k == "AmbientCapabilities" || k == "CapabilityBoundingSet" {
                        let e = m.entry(k.to_string()).or_insert_with(String::new);
                        if v.is_empty() {
                            e.clear();
                        } else {
                            e.push(' ');
                            e.push_str(v);
                        }
                    } else {
                        m.insert(k.to_string(), v.to_string());
                    }
                }
            }
        }
        Some((path, m))
    }

    fn memlock(&self) -> Check {
        let id = "mem.memlock";
        let why = "rtcat mlockall()s its memory; without CAP_IPC_LOCK the RLIMIT_MEMLOCK limit (often 8 MiB) makes that fail and page faults hit the cycle";
        if let Some(pid) = self.rtcat_pid() {
            let status = self
                .root()
                .read_raw(&format!("/proc/{pid}/status"))
                .unwrap_or_default();
            let lck = facts::status_field(&status, "VmLck")
                .unwrap_or("?")
                .to_string();
            let rss = facts::status_field(&status, "VmRSS")
                .unwrap_or("?")
                .to_string();
            let limit = self
                .root()
                .read_raw(&format!("/proc/{pid}/limits"))
                .ok()
                .and_then(|l| {
                    l.lines()
                        .find(|x| x.starts_with("Max locked memory"))
                        .map(|x| {
                            x.split_whitespace()
                                .skip(3)
                                .take(2)
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                })
                .unwrap_or_else(|| "?".into());
            let locked = lck
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
                > 0;
            let c = chk(id, if locked { Verdict::Pass } else { Verdict::Fail })
                .obs(format!(
                    "rtcat[{pid}] VmLck {lck} of VmRSS {rss}; RLIMIT_MEMLOCK {limit}"
                ))
                .exp("VmLck about VmRSS")
                .why(why);
            return c.fix_if(
                !locked,
                "set [rt].lock_memory = true and LimitMEMLOCK=infinity in rtcat.service",
            );
        }
        match self.unit() {
            None => chk(id, Verdict::NA)
                .obs("rtcat not running; no rtcat.service unit")
                .exp("LimitMEMLOCK=infinity or CAP_IPC_LOCK")
                .why(why),
            Some((path, m)) => {
                let user = m.get("User").cloned().unwrap_or_else(|| "root".into());
                let lim = m.get("LimitMEMLOCK").cloned();
                let amb = m.get("AmbientCapabilities").cloned().unwrap_or_default();
                let ok = lim.as_deref() == Some("infinity")
                    || user == "root"
                    || user == "0"
                    || amb.contains("CAP_IPC_LOCK");
                let c = chk(id, if ok { Verdict::Pass } else { Verdict::Fail })
                    .obs(format!(
                        "{path}: User={user} LimitMEMLOCK={} AmbientCapabilities={}",
                        lim.as_deref().unwrap_or("(default)"),
                        if amb.trim().is_empty() {
                            "(none)"
                        } else {
                            amb.trim()
                        }
                    ))
                    .exp("LimitMEMLOCK=infinity, or root / CAP_IPC_LOCK")
                    .why(why);
                c.fix_if(!ok, format!("add LimitMEMLOCK=infinity to {path}"))
            }
        }
    }

    fn tasks_on_rt(&self) -> Check {
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

    fn rtcat_threads(&self) -> Check {
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

    fn nic_link(&self) -> Check {
        let id = "nic.link";
        let why = "EtherCAT needs the link up at 100 Mbit/s (or more) full duplex";
        let Some(i) = &self.d.iface else {
            return chk(id, Verdict::NA)
                .obs("no interface (--iface or [bus].interface)")
                .exp("up, full duplex")
                .why(why);
        };
        let base = format!("/sys/class/net/{i}");
        if let Err(m) = crate::netif::check_exists(self.root(), i) {
            return chk(id, Verdict::Fail)
                .obs(format!("interface {m}"))
                .exp("up, full duplex")
                .why(why)
                .fix("check [bus].interface / --iface");
        }
        let op = self
            .root()
            .read_opt(&format!("{base}/operstate"))
            .unwrap_or_else(|| "?".into());
        let speed = self
            .root()
            .read_opt(&format!("{base}/speed"))
            .and_then(|s| s.parse::<i64>().ok());
        let duplex = self
            .root()
            .read_opt(&format!("{base}/duplex"))
            .unwrap_or_else(|| "?".into());
        let obs = format!(
            "{i}: {op}, {} Mbit/s, {duplex} duplex",
            speed.map(|s| s.to_string()).unwrap_or("?".into())
        );
        let v = if (op != "up" && op != "unknown")
            || duplex == "half"
            || speed.is_some_and(|s| (0..100).contains(&s))
        {
            Verdict::Fail
        } else if speed.is_none() || speed == Some(-1) || duplex != "full" {
            Verdict::Warn
        } else {
            Verdict::Pass
        };
        let c = chk(id, v)
            .obs(obs)
            .exp("up, >= 100 Mbit/s, full duplex")
            .why(why);
        c.fix_if(
            v != Verdict::Pass,
            format!("ip link set {i} up; check the cable and the first subdevice"),
        )
    }

    fn nic_coalesce(&self) -> Check {
        let id = "nic.coalesce";
        let why = "stmmac defers RX IRQs (RIWT) unless rx-frames 1, and TX completion to a timer; RK3588 S5: tx-usecs 0 tx-frames 25 cut the max from 13.5 to 3.9 us";
        let Some(i) = &self.d.iface else {
            return chk(id, Verdict::NA)
                .obs("no interface")
                .exp("configured coalescing")
                .why(why);
        };
        let want = &self.d.tune.coalesce;
        let exp = if want.is_empty() {
            "rx-frames 1 or rx-usecs 0 (no [tune.coalesce] configured)".to_string()
        } else {
            let mut v = Vec::new();
            if let Some(x) = want.rx_usecs {
                v.push(format!("rx-usecs {x}"));
            }
            if let Some(x) = want.rx_frames {
                v.push(format!("rx-frames {x}"));
            }
            if let Some(x) = want.tx_usecs {
                v.push(format!("tx-usecs {x}"));
            }
            if let Some(x) = want.tx_frames {
                v.push(format!("tx-frames {x}"));
            }
            v.join(" ")
        };
        if let Err(m) = crate::netif::check_exists(self.root(), i) {
            return chk(id, Verdict::NA)
                .obs(format!("interface {m}"))
                .exp(exp)
                .why(why);
        }
        match self.d.host.get_coalesce(i) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => chk(id, Verdict::NA)
                .obs(format!("{i}: driver has no coalescing (EOPNOTSUPP)"))
                .exp(exp)
                .why(why),
            Err(e) => chk(id, Verdict::NA)
                .obs(format!("{i}: cannot read coalescing: {e}"))
                .exp(exp)
                .why(why),
            Ok(cur) => {
                let ok = if want.is_empty() {
                    cur.rx_usecs() == 0 || cur.rx_frames() <= 1
                } else {
                    cur.with(want) == cur
                };
                let v = if ok {
                    Verdict::Pass
                } else if want.is_empty() {
                    Verdict::Warn
                } else {
                    Verdict::Fail
                };
                let c = chk(id, v)
                    .obs(format!("{i}: {}", cur.describe()))
                    .exp(exp.clone())
                    .why(why);
                c.fix_if(!ok, format!("{} (or: ethtool -C {i} {exp})", self.tune_cmd))
            }
        }
    }

    fn caps(&self) -> Check {
        let id = "caps.service";
        let why = "SCHED_FIFO needs CAP_SYS_NICE, mlockall CAP_IPC_LOCK, the raw EtherCAT socket CAP_NET_RAW";
        // names and bits from the caps crate (include/uapi/linux/capability.h)
        const NEED: [Capability; 3] = [
            Capability::CAP_SYS_NICE,
            Capability::CAP_IPC_LOCK,
            Capability::CAP_NET_RAW,
        ];
        let exp = NEED.map(|c| c.to_string()).join(", ");
        let judge = |mask: u64, src: String| {
            let missing: Vec<String> = NEED
                .iter()
                .filter(|c| mask & c.bitmask() == 0)
                .map(|c| c.to_string())
                .collect();
            let c = chk(
                id,
                if missing.is_empty() {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                },
            )
            .obs(if missing.is_empty() {
                format!("{src}: all present")
            } else {
                format!("{src}: missing {}", missing.join(", "))
            })
            .exp(exp.clone())
            .why(why);
            c.fix_if(
                !missing.is_empty(),
                format!("AmbientCapabilities={} in rtcat.service", missing.join(" ")),
            )
        };
        if let Some(pid) = self.rtcat_pid() {
            let st = self
                .root()
                .read_raw(&format!("/proc/{pid}/status"))
                .unwrap_or_default();
            let eff = facts::status_field(&st, "CapEff")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .unwrap_or(0);
            return judge(eff, format!("rtcat[{pid}] CapEff {eff:016x}"));
        }
        if let Some((path, m)) = self.unit() {
            let user = m.get("User").cloned().unwrap_or_else(|| "root".into());
            let names_to_mask = |s: &str| -> u64 {
                let mut mask = 0u64;
                for tok in s.split_whitespace() {
                    if let Some(c) = NEED.iter().find(|c| c.to_string() == tok) {
                        mask |= c.bitmask();
                    }
                }
                mask
            };
            let bounding = m
                .get("CapabilityBoundingSet")
                .map(|s| {
                    let t = s.trim();
                    if let Some(neg) = t.strip_prefix('~') {
                        !names_to_mask(neg)
                    } else {
                        names_to_mask(t)
                    }
                })
                .unwrap_or(u64::MAX);
            let mask = if user == "root" || user == "0" {
                bounding
            } else {
                let amb = names_to_mask(
                    m.get("AmbientCapabilities")
                        .map(|s| s.as_str())
                        .unwrap_or(""),
                );
                let file = self
                    .d
                    .host
                    .file_caps(self.root(), "/usr/bin/rtcat")
                    .ok()
                    .flatten()
                    .filter(|f| f.effective)
                    .map(|f| f.permitted)
                    .unwrap_or(0);
                (amb | file) & bounding
            };
            return judge(mask, format!("{path}: User={user}"));
        }
        chk(id, Verdict::NA)
            .obs("rtcat not running; no rtcat.service unit")
            .exp(exp)
            .why(why)
    }
}
