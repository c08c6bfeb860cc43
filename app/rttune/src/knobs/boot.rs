//! Boot arguments: `isolcpus=`, `nohz_full=`, `rcu_nocbs=`, `irqaffinity=`, and what the kernel
//! isolated.

use crate::cpuset::CpuSet;
use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;
use std::collections::BTreeSet;

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
    pub(crate) fn isolcpus(&self) -> Check {
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

    pub(crate) fn boot_cpu_arg(&self, id: &'static str, key: &str, why: &str) -> Check {
        self.boot_cpu_list(
            id,
            key,
            format!("{key}={}", self.rtl),
            why,
            |s| self.rt.is_subset(s),
            &format!("does not cover RT CPU {}", self.rtl),
        )
    }

    pub(crate) fn irqaffinity(&self) -> Check {
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
    pub(crate) fn boot_cpu_list(
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

    pub(crate) fn isolated_sysfs(&self) -> Check {
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
}
