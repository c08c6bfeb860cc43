//! Power: the cpufreq governor and frequency limits, idle states, `/dev/cpu_dma_latency` (tune
//! groups `governor` and `c-states`).
//!
//! The governor, end to end: [`read_policies`] reads the cpufreq policies; `power.governor`
//! (`Ctx::governor`) judges the policy owning the RT CPU against `[tune].governor`;
//! [`plan_governor`] plans writing it to that policy's `scaling_governor` (when the policy offers
//! it); the write, read-back, status and restore are those of every file knob
//! ([`crate::journal::Change::File`]); the tests fake policy0/4/6 in `testkit::FakeTree`.

use crate::cpuset::CpuSet;
use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;
use crate::sysroot::SysRoot;
use crate::tune::plan::{file_change, skip};
use crate::tune::{KnobGroup, Plan, TuneCtx};
use std::collections::BTreeMap;

/// Processes holding `/dev/cpu_dma_latency` open: (pid, comm).
pub fn dma_latency_holders(root: &SysRoot, procs: &BTreeMap<u32, String>) -> Vec<(u32, String)> {
    let mut v = Vec::new();
    for (pid, comm) in procs {
        let dir = format!("/proc/{pid}/fd");
        let Ok(fds) = root.list(&dir) else { continue };
        if fds.iter().any(|fd| {
            root.read_link(&format!("{dir}/{fd}"))
                .map(|t| t == std::path::Path::new("/dev/cpu_dma_latency"))
                .unwrap_or(false)
        }) {
            v.push((*pid, comm.clone()));
        }
    }
    v
}

/// cpufreq policy.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub name: String,
    pub related: CpuSet,
    pub governor: Option<String>,
    pub available: Vec<String>,
    pub min: Option<u64>,
    pub max: Option<u64>,
    pub hw_min: Option<u64>,
    pub hw_max: Option<u64>,
}

impl Policy {
    pub fn dir(&self) -> String {
        format!("{}/cpufreq/{}", facts::P_CPU, self.name)
    }
}

pub fn read_policies(root: &SysRoot) -> Vec<Policy> {
    let dir = format!("{}/cpufreq", facts::P_CPU);
    let mut v = Vec::new();
    for name in root.list(&dir).unwrap_or_default() {
        if !name.starts_with("policy") {
            continue;
        }
        let d = format!("{dir}/{name}");
        let rd = |f: &str| root.read_opt(&format!("{d}/{f}"));
        let num = |f: &str| rd(f).and_then(|s| s.parse().ok());
        let related = rd("related_cpus")
            .or_else(|| rd("affected_cpus"))
            .map(|s| {
                s.split_whitespace()
                    .filter_map(|c| c.parse().ok())
                    .collect::<CpuSet>()
            })
            .unwrap_or_default();
        v.push(Policy {
            name: name.clone(),
            related,
            governor: rd("scaling_governor"),
            available: rd("scaling_available_governors")
                .map(|s| s.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
            min: num("scaling_min_freq"),
            max: num("scaling_max_freq"),
            hw_min: num("cpuinfo_min_freq"),
            hw_max: num("cpuinfo_max_freq"),
        });
    }
    v
}

/// One cpuidle state of one CPU.
#[derive(Clone, Debug)]
pub struct IdleState {
    pub cpu: usize,
    pub index: usize,
    pub name: String,
    pub latency_us: u64,
    pub disabled: bool,
}

impl IdleState {
    pub fn disable_path(&self) -> String {
        format!(
            "{}/cpu{}/cpuidle/state{}/disable",
            facts::P_CPU,
            self.cpu,
            self.index
        )
    }
}

/// Idle states of `cpu`; None when cpuidle is absent for it.
pub fn read_idle_states(root: &SysRoot, cpu: usize) -> Option<Vec<IdleState>> {
    let dir = format!("{}/cpu{cpu}/cpuidle", facts::P_CPU);
    let entries = root.list(&dir).ok()?;
    let mut v = Vec::new();
    for e in entries {
        let Some(idx) = e
            .strip_prefix("state")
            .and_then(|s| s.parse::<usize>().ok())
        else {
            continue;
        };
        let d = format!("{dir}/{e}");
        v.push(IdleState {
            cpu,
            index: idx,
            name: root.read_opt(&format!("{d}/name")).unwrap_or_default(),
            latency_us: root
                .read_opt(&format!("{d}/latency"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            disabled: root.read_opt(&format!("{d}/disable")).as_deref() == Some("1"),
        });
    }
    v.sort_by_key(|s| s.index);
    Some(v)
}

impl Ctx<'_> {
    pub(crate) fn rt_policies(&self) -> Vec<Policy> {
        read_policies(self.root())
            .into_iter()
            .filter(|p| p.related.intersects(&self.rt))
            .collect()
    }

    pub(crate) fn governor(&self) -> Check {
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

    pub(crate) fn frequency(&self) -> Check {
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

    pub(crate) fn deep_states(&self) -> Option<Vec<IdleState>> {
        let mut any = false;
        let mut deep = Vec::new();
        for cpu in self.rt.iter() {
            if let Some(states) = read_idle_states(self.root(), cpu) {
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

    pub(crate) fn cpuidle(&self) -> Check {
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

    pub(crate) fn dma_latency(&self) -> Check {
        let id = "power.cpu_dma_latency";
        let why = "a process holding /dev/cpu_dma_latency at 0 keeps every CPU out of deep idle states (rtcat does with [rt].hold_cpu_dma_latency)";
        let holders = dma_latency_holders(self.root(), &self.procs);
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
}

/// Tune group `governor`: `[tune].governor` on every cpufreq policy owning an RT CPU, when the
/// policy offers it.
pub(crate) fn plan_governor(root: &SysRoot, tc: &TuneCtx, plan: &mut Plan) {
    let g = KnobGroup::Governor;
    let pols: Vec<_> = read_policies(root)
        .into_iter()
        .filter(|p| p.related.intersects(&tc.rt))
        .collect();
    if pols.is_empty() {
        skip(
            plan,
            g,
            "governor",
            format!("no cpufreq policy for CPU {}", tc.rt),
        );
    }
    let want = &tc.tune.governor;
    for p in pols {
        let path = format!("{}/scaling_governor", p.dir());
        if p.governor.as_deref() == Some(want.as_str()) {
            continue;
        }
        if !p.available.is_empty() && !p.available.iter().any(|a| a == want) {
            skip(
                plan,
                g,
                format!("file:{path}"),
                format!(
                    "governor {want} not available on {} ({})",
                    p.name,
                    p.available.join(" ")
                ),
            );
            continue;
        }
        file_change(
            root,
            g,
            &path,
            format!(
                "{} (CPUs {}) governor: {} -> {want}",
                p.name,
                p.related,
                p.governor.as_deref().unwrap_or("?")
            ),
            want.clone(),
            plan,
        );
    }
}

/// Tune group `c-states`: disable the RT CPU's idle states deeper than
/// `[tune].cstate_max_latency_us` (state0 never).
pub(crate) fn plan_cstates(root: &SysRoot, tc: &TuneCtx, plan: &mut Plan) {
    let g = KnobGroup::CStates;
    if !tc.tune.disable_cstates {
        skip(plan, g, "c-states", "tune.disable_cstates = false");
        return;
    }
    for cpu in tc.rt.iter() {
        let Some(states) = read_idle_states(root, cpu) else {
            skip(plan, g, format!("cpuidle:cpu{cpu}"), "no cpuidle");
            continue;
        };
        for s in states {
            if s.index == 0
                || s.disabled
                || s.latency_us <= u64::from(tc.tune.cstate_max_latency_us)
            {
                continue;
            }
            file_change(
                root,
                g,
                &s.disable_path(),
                format!(
                    "cpu{cpu} idle state{} {} ({} us): disable",
                    s.index, s.name, s.latency_us
                ),
                "1".into(),
                plan,
            );
        }
    }
}
