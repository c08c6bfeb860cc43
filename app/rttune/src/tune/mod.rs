//! `rtcat tune`: plan, apply, restore and show the runtime shield, knob group by knob group.
//!
//! Split by phase: [`plan()`] (what would change; each knob group's planner lives with its knob
//! in the crate's `knobs` module), [`apply()`] (journal every original, then change), [`restore()`]
//! (put back newest first) with the tasks created under the shield in `inherited`, and
//! [`status()`]. What one change does in each phase depends only on its kind and is a method of
//! [`crate::journal::Change`].

mod apply;
mod inherited;
pub(crate) mod plan;
mod restore;
mod status;

pub use apply::apply;
pub use plan::plan;
pub use restore::restore;
pub use status::status;

use crate::config::TuneSection;
use crate::cpuset::CpuSet;
use crate::facts;
use crate::journal::Change;
use crate::sysroot::SysRoot;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Groups of knobs; `Shield` stands for the seven runtime-shield groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KnobGroup {
    /// irqbalance, default IRQ affinity, movable IRQs, NIC IRQs, workqueue mask, tasks, timer_migration
    Shield,
    /// Stop irqbalance.
    Irqbalance,
    /// /proc/irq/default_smp_affinity off the RT CPU.
    DefaultIrqAffinity,
    /// Every movable IRQ off the RT CPU.
    IrqAffinity,
    /// The NIC's IRQs to `[tune].nic_irq_cpu`.
    NicIrqs,
    /// Unbound workqueue cpumask off the RT CPU.
    WorkqueueMask,
    /// Movable tasks and kthreads off the RT CPU.
    Tasks,
    /// kernel.timer_migration = 0.
    TimerMigration,
    /// cpufreq governor of the RT CPU's policy.
    Governor,
    /// Deep idle states of the RT CPU disabled.
    CStates,
    /// NIC interrupt coalescing.
    Coalesce,
}

impl KnobGroup {
    pub const SHIELD: [KnobGroup; 7] = [
        KnobGroup::Irqbalance,
        KnobGroup::DefaultIrqAffinity,
        KnobGroup::IrqAffinity,
        KnobGroup::NicIrqs,
        KnobGroup::WorkqueueMask,
        KnobGroup::Tasks,
        KnobGroup::TimerMigration,
    ];

    /// Every leaf group, in apply order.
    pub fn all() -> Vec<KnobGroup> {
        let mut v = Self::SHIELD.to_vec();
        v.extend([KnobGroup::Governor, KnobGroup::CStates, KnobGroup::Coalesce]);
        v
    }

    /// Leaf groups of a selection, in apply order, without duplicates.
    pub fn expand(sel: &[KnobGroup]) -> Vec<KnobGroup> {
        let mut want = std::collections::BTreeSet::new();
        for g in sel {
            if *g == KnobGroup::Shield {
                want.extend(Self::SHIELD);
            } else {
                want.insert(*g);
            }
        }
        Self::all()
            .into_iter()
            .filter(|g| want.contains(g))
            .collect()
    }

    pub fn name(&self) -> &'static str {
        match self {
            KnobGroup::Shield => "shield",
            KnobGroup::Irqbalance => "irqbalance",
            KnobGroup::DefaultIrqAffinity => "default-irq-affinity",
            KnobGroup::IrqAffinity => "irq-affinity",
            KnobGroup::NicIrqs => "nic-irqs",
            KnobGroup::WorkqueueMask => "workqueue-mask",
            KnobGroup::Tasks => "tasks",
            KnobGroup::TimerMigration => "timer-migration",
            KnobGroup::Governor => "governor",
            KnobGroup::CStates => "c-states",
            KnobGroup::Coalesce => "coalesce",
        }
    }
}

/// Resolved inputs of a tune run.
#[derive(Clone, Debug)]
pub struct TuneCtx {
    pub rt: CpuSet,
    /// Explicit housekeeping CPUs; None = "online minus RT", narrowing existing masks only.
    pub housekeeping: Option<CpuSet>,
    pub online: CpuSet,
    pub iface: Option<String>,
    pub tune: TuneSection,
}

impl TuneCtx {
    /// Validate and resolve against the machine under `root`.
    pub fn new(
        root: &SysRoot,
        rt: CpuSet,
        housekeeping: Option<CpuSet>,
        iface: Option<String>,
        tune: TuneSection,
    ) -> anyhow::Result<TuneCtx> {
        tune.validate()?;
        let online = facts::online_cpus(root);
        if rt.is_empty() {
            anyhow::bail!("no RT CPU: pass --cpu N or set [cycle].cpu");
        }
        if !online.is_empty() && !rt.is_subset(&online) {
            anyhow::bail!("--cpu/[cycle].cpu: CPU {rt} is not online (online: {online})");
        }
        if let Some(h) = &housekeeping {
            if h.intersects(&rt) {
                anyhow::bail!(
                    "tune.housekeeping_cpus / --housekeeping: {h} overlaps the RT CPU {rt}"
                );
            }
            if !online.is_empty() && !h.intersects(&online) {
                anyhow::bail!(
                    "tune.housekeeping_cpus / --housekeeping: none of {h} is online (online: {online})"
                );
            }
        }
        if let Some(c) = tune.nic_irq_cpu {
            if rt.contains(c) {
                anyhow::bail!("tune.nic_irq_cpu: {c} is the RT CPU; pick a housekeeping CPU");
            }
            if !online.is_empty() && !online.contains(c) {
                anyhow::bail!("tune.nic_irq_cpu: CPU {c} is not online (online: {online})");
            }
        }
        if let Some(i) = &iface {
            crate::netif::check_name(i)
                .map_err(|m| anyhow::anyhow!("--iface/[bus].interface: {m}"))?;
        }
        Ok(TuneCtx {
            rt,
            housekeeping,
            online,
            iface,
            tune,
        })
    }

    /// `cur` with the RT CPUs taken out: the housekeeping set when explicit, else `cur` minus RT
    /// (falling back to online minus RT when nothing would be left).
    pub fn narrow(&self, cur: &CpuSet) -> CpuSet {
        if let Some(h) = &self.housekeeping {
            let on = if self.online.is_empty() {
                h.clone()
            } else {
                h.intersection(&self.online)
            };
            return on;
        }
        let n = cur.difference(&self.rt);
        if n.is_empty() {
            self.online.difference(&self.rt)
        } else {
            n
        }
    }
}

/// One change apply would make.
#[derive(Clone, Debug, Serialize)]
pub struct Planned {
    pub group: KnobGroup,
    pub id: String,
    pub what: String,
    pub current: String,
    pub target: String,
    #[serde(skip)]
    pub change: Change,
}

/// A knob left alone, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub group: KnobGroup,
    pub id: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Plan {
    pub changes: Vec<Planned>,
    pub skipped: Vec<Skipped>,
}

/// Result of apply / restore / status.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    pub action: String,
    pub state_file: String,
    /// Per knob: "applied", "refused: …", "restored", "gone: …", "in effect", …
    pub items: Vec<OutcomeItem>,
    pub skipped: Vec<Skipped>,
    pub notes: Vec<String>,
    /// Knobs that could not be put back (restore) — non-empty makes the exit code 1.
    pub failed: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct OutcomeItem {
    pub group: KnobGroup,
    pub id: String,
    pub what: String,
    pub result: String,
}

impl Outcome {
    /// An empty outcome of `action` on the journal at `state`.
    pub fn new(action: &str, state: &Path) -> Outcome {
        Outcome {
            action: action.into(),
            state_file: state.display().to_string(),
            ..Default::default()
        }
    }

    pub fn to_text(&self) -> String {
        let mut s = format!("rtcat tune {} (state {})\n", self.action, self.state_file);
        for i in &self.items {
            s.push_str(&format!(
                "  [{}] {}: {}\n",
                i.group.name(),
                i.what,
                i.result
            ));
        }
        for k in &self.skipped {
            s.push_str(&format!(
                "  [{}] skipped {}: {}\n",
                k.group.name(),
                k.id,
                k.reason
            ));
        }
        for n in &self.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        s
    }
    pub fn exit_code(&self) -> i32 {
        if self.failed > 0 { 1 } else { 0 }
    }
}

impl Plan {
    pub fn to_outcome(&self, state: &Path) -> Outcome {
        Outcome {
            action: "plan".into(),
            state_file: state.display().to_string(),
            items: self
                .changes
                .iter()
                .map(|c| OutcomeItem {
                    group: c.group,
                    id: c.id.clone(),
                    what: c.what.clone(),
                    result: format!("would change {:?} -> {:?}", c.current, c.target),
                })
                .collect(),
            skipped: self.skipped.clone(),
            notes: if self.changes.is_empty() {
                vec!["nothing to change".into()]
            } else {
                vec![format!(
                    "{} change(s); nothing was written",
                    self.changes.len()
                )]
            },
            failed: 0,
        }
    }
}
