//! Workqueues: the unbound cpumask and each WQ_SYSFS workqueue (tune group `workqueue-mask`).

use crate::cpuset::CpuSet;
use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;
use crate::sysroot::SysRoot;
use crate::tune::plan::mask_knob;
use crate::tune::{KnobGroup, Plan, TuneCtx};

impl Ctx<'_> {
    pub(crate) fn wq_unbound(&self) -> Check {
        self.mask_excludes_rt(
            "wq.unbound_cpumask",
            facts::P_WQ_MASK,
            "unbound kworkers (writeback, crypto, fs work) run wherever this mask allows",
            false,
        )
    }

    pub(crate) fn wq_each(&self) -> Check {
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
}

/// Tune group `workqueue-mask`: the unbound workqueue cpumask off the RT CPU.
pub(crate) fn plan_workqueue_mask(root: &SysRoot, tc: &TuneCtx, plan: &mut Plan) {
    mask_knob(
        root,
        tc,
        KnobGroup::WorkqueueMask,
        facts::P_WQ_MASK,
        "unbound workqueue cpumask",
        plan,
    )
}
