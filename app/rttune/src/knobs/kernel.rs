//! Kernel build: PREEMPT_RT, the preemption model, HZ, NO_HZ_FULL, RCU_NOCB_CPU.

use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;

impl Ctx<'_> {
    pub(crate) fn preempt_rt(&self, version: &str) -> Check {
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

    pub(crate) fn preempt_mode(&self, version: &str) -> Check {
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

    pub(crate) fn kconfig_check(&self, id: &'static str, key: &str, why: &str) -> Check {
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
}
