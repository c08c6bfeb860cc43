//! `rtcat tune plan`: what apply would change, group by group. Each group's planner lives with
//! its knob in the crate's `knobs` module; the helpers here turn a file knob into a [`Planned`]
//! change (or a [`Skipped`] one).

use super::{KnobGroup, Plan, Planned, Skipped, TuneCtx};
use crate::cpuset::CpuSet;
use crate::facts;
use crate::host::Host;
use crate::journal::{Change, Journal};
use crate::knobs::{irq, nic, power, sched, tasks, workqueue};
use crate::sysroot::SysRoot;

pub(crate) fn file_change(
    root: &SysRoot,
    group: KnobGroup,
    path: &str,
    what: String,
    target: String,
    plan: &mut Plan,
) {
    match root.read_knob(path) {
        Ok(original) => {
            let cur = original.trim().to_string();
            plan.changes.push(Planned {
                group,
                id: format!("file:{path}"),
                what,
                current: cur,
                target: target.clone(),
                change: Change::File {
                    path: path.to_string(),
                    original,
                    target,
                },
            });
        }
        Err(e) => plan.skipped.push(Skipped {
            group,
            id: format!("file:{path}"),
            reason: format!("cannot read: {e}"),
        }),
    }
}

pub(crate) fn skip(
    plan: &mut Plan,
    group: KnobGroup,
    id: impl Into<String>,
    reason: impl Into<String>,
) {
    plan.skipped.push(Skipped {
        group,
        id: id.into(),
        reason: reason.into(),
    });
}

pub(crate) fn mask_knob(
    root: &SysRoot,
    tc: &TuneCtx,
    g: KnobGroup,
    path: &str,
    what: &str,
    plan: &mut Plan,
) {
    let Some(raw) = root.read_opt(path) else {
        skip(plan, g, format!("file:{path}"), "missing file");
        return;
    };
    match CpuSet::parse_mask(&raw) {
        Err(e) => skip(plan, g, format!("file:{path}"), e),
        Ok(cur) => {
            let target = tc.narrow(&cur);
            if target != cur {
                file_change(
                    root,
                    g,
                    path,
                    format!("{what}: {cur} -> {target}"),
                    target.to_mask_like(&raw),
                    plan,
                );
            }
        }
    }
}

/// What apply would change for `groups` (expanded), without changing anything.
pub fn plan(
    root: &SysRoot,
    tc: &TuneCtx,
    host: &dyn Host,
    groups: &[KnobGroup],
    journal: Option<&Journal>,
) -> Plan {
    let mut plan = Plan::default();
    let groups = KnobGroup::expand(groups);
    let need_irqs = groups
        .iter()
        .any(|g| matches!(g, KnobGroup::IrqAffinity | KnobGroup::NicIrqs));
    let irqs = if need_irqs {
        facts::read_irqs(root).unwrap_or_default()
    } else {
        Vec::new()
    };
    let nic = tc
        .iface
        .as_deref()
        .map(|i| facts::nic_irqs(root, &irqs, i))
        .unwrap_or_default();
    let procs = facts::read_processes(root);
    // processes this plan stops: their threads are not moved
    let mut stopping: Vec<u32> = Vec::new();
    for g in groups {
        match g {
            KnobGroup::Shield => {}
            KnobGroup::Irqbalance => {
                irq::plan_irqbalance(root, tc, &procs, &mut stopping, &mut plan)
            }
            KnobGroup::DefaultIrqAffinity => irq::plan_default_irq_affinity(root, tc, &mut plan),
            KnobGroup::WorkqueueMask => workqueue::plan_workqueue_mask(root, tc, &mut plan),
            KnobGroup::IrqAffinity | KnobGroup::NicIrqs => {
                irq::plan_irqs(root, tc, g, &irqs, &nic, journal, &mut plan)
            }
            KnobGroup::Tasks => tasks::plan_tasks(root, tc, &procs, &stopping, &mut plan),
            KnobGroup::TimerMigration => sched::plan_timer_migration(root, tc, &mut plan),
            KnobGroup::Governor => power::plan_governor(root, tc, &mut plan),
            KnobGroup::CStates => power::plan_cstates(root, tc, &mut plan),
            KnobGroup::Coalesce => nic::plan_coalesce(tc, host, &mut plan),
        }
    }
    plan
}
