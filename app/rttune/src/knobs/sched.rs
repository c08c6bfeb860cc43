//! Scheduler: RT throttling and timer migration (tune group `timer-migration`).

use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;
use crate::sysroot::SysRoot;
use crate::tune::plan::{file_change, skip};
use crate::tune::{KnobGroup, Plan, TuneCtx};

impl Ctx<'_> {
    pub(crate) fn rt_runtime(&self) -> Check {
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

    pub(crate) fn timer_migration(&self) -> Check {
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
}

/// Tune group `timer-migration`: `kernel.timer_migration` = 0.
pub(crate) fn plan_timer_migration(root: &SysRoot, tc: &TuneCtx, plan: &mut Plan) {
    let g = KnobGroup::TimerMigration;
    if !tc.tune.disable_timer_migration {
        skip(
            plan,
            g,
            "timer_migration",
            "tune.disable_timer_migration = false",
        );
        return;
    }
    match root.read_opt(facts::P_TIMER_MIGRATION) {
        None => skip(
            plan,
            g,
            format!("file:{}", facts::P_TIMER_MIGRATION),
            "missing file",
        ),
        Some(v) if v == "0" => {}
        Some(v) => file_change(
            root,
            g,
            facts::P_TIMER_MIGRATION,
            format!("kernel.timer_migration: {v} -> 0"),
            "0".into(),
            plan,
        ),
    }
}
