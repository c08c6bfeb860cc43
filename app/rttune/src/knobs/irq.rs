//! IRQs: irqbalance, the default affinity, every movable IRQ, the NIC's IRQs (tune groups
//! `irqbalance`, `default-irq-affinity`, `irq-affinity`, `nic-irqs`).

use crate::cpuset::CpuSet;
use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;
use crate::facts::Irq;
use crate::host;
use crate::journal::{Change, Journal};
use crate::sysroot::SysRoot;
use crate::tune::plan::{file_change, mask_knob, skip};
use crate::tune::{KnobGroup, Plan, Planned, TuneCtx};
use std::collections::BTreeMap;
use std::collections::BTreeSet;

/// The advice when debugfs hid which IRQs are kernel-managed.
const AS_ROOT: &str = "run the doctor as root (sudo rtcat doctor) to tell kernel-managed IRQs from ones tune must move";

impl Ctx<'_> {
    pub(crate) fn irqbalance(&self) -> Check {
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

    pub(crate) fn default_affinity(&self) -> Check {
        self.mask_excludes_rt(
            "irq.default_affinity",
            facts::P_IRQ_DEFAULT,
            "IRQs requested later (hot-plug, interface up) start on these CPUs",
            true,
        )
    }

    pub(crate) fn nic_irq_nums(&self) -> BTreeSet<u32> {
        match &self.d.iface {
            Some(i) => facts::nic_irqs(self.root(), &self.irqs, i),
            None => BTreeSet::new(),
        }
    }

    pub(crate) fn known_managed(&self, irq: &Irq) -> bool {
        irq.managed == Some(true)
            || self
                .d
                .journal
                .as_ref()
                .map(|j| j.refused(&irq.smp_path()))
                .unwrap_or(false)
    }

    pub(crate) fn irq_affinity(&self) -> Check {
        let id = "irq.affinity";
        let why = "an interrupt handled on the RT CPU delays the cycle by its handler time (loaded stock kernel: exec max 106 us)";
        let nic = self.nic_irq_nums();
        let mut wrong = Vec::new();
        let mut pending = Vec::new();
        let mut managed = Vec::new();
        let mut percpu = Vec::new();
        let mut unknown = Vec::new();
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
            } else if self.managed_hidden && irq.managed.is_none() {
                // kernel-managed or left behind: only debugfs (root) or tune's journal tells
                unknown.push(format!(
                    "{} affinity {} effective {}",
                    irq.label(),
                    aff,
                    eff
                ));
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
        } else if !pending.is_empty() || !managed.is_empty() || !unknown.is_empty() {
            Verdict::Warn
        } else {
            Verdict::Pass
        };
        let mut obs = format!(
            "{} IRQs (NIC excluded): {} wrong, {} pending, {} kernel-managed on CPU {}, {} per-CPU",
            total,
            wrong.len(),
            pending.len(),
            managed.len(),
            self.rtl,
            percpu.len()
        );
        if !unknown.is_empty() {
            obs.push_str(&format!(
                ", {} on CPU {} unknown without root (kernel-managed or not moved: debugfs is root's)",
                unknown.len(),
                self.rtl
            ));
        }
        let mut det: Vec<String> = wrong.iter().map(|s| format!("wrong: {s}")).collect();
        det.extend(pending.iter().map(|s| format!("pending: {s}")));
        det.extend(managed.iter().map(|s| format!("cannot move: {s}")));
        det.extend(unknown.iter().map(|s| format!("unknown without root: {s}")));
        det.extend(percpu);
        let c = chk(id, v)
            .obs(obs)
            .exp(format!("no movable IRQ allowed on CPU {}", self.rtl))
            .why(why)
            .details(det);
        match v {
            Verdict::Fail if !unknown.is_empty() => c.fix(format!("{}; {AS_ROOT}", self.tune_cmd)),
            Verdict::Fail => c.fix(self.tune_cmd.clone()),
            Verdict::Warn if !unknown.is_empty() => c.fix(AS_ROOT),
            Verdict::Warn if !managed.is_empty() => c
                .fix(format!(
                    "managed IRQs follow isolcpus=managed_irq,{} at boot",
                    self.rtl
                ))
                .reboot(),
            _ => c,
        }
    }

    pub(crate) fn nic_irqs(&self) -> Check {
        let id = "irq.nic";
        let why = "the EtherCAT frame's receive interrupt must not preempt the cycle thread and should land on a fixed, quiet housekeeping CPU (docs/NOTES.md §1)";
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
}

/// Tune group `irqbalance`: stop every running irqbalance (its pids go to `stopping`: their
/// threads are not moved).
pub(crate) fn plan_irqbalance(
    root: &SysRoot,
    tc: &TuneCtx,
    procs: &BTreeMap<u32, String>,
    stopping: &mut Vec<u32>,
    plan: &mut Plan,
) {
    let g = KnobGroup::Irqbalance;
    if !tc.tune.stop_irqbalance {
        skip(
            plan,
            g,
            "service:irqbalance",
            "tune.stop_irqbalance = false",
        );
        return;
    }
    for pid in facts::pids_named(procs, "irqbalance") {
        stopping.push(pid);
        match host::plan_service_stop(root, "irqbalance", pid) {
            Ok(how) => plan.changes.push(Planned {
                group: g,
                id: "service:irqbalance".into(),
                what: format!("stop irqbalance (pid {pid})"),
                current: "running".into(),
                target: "stopped".into(),
                change: Change::Service {
                    name: "irqbalance".into(),
                    how,
                },
            }),
            Err(e) => skip(plan, g, "service:irqbalance", e.to_string()),
        }
    }
}

/// Tune group `default-irq-affinity`: `/proc/irq/default_smp_affinity` off the RT CPU.
pub(crate) fn plan_default_irq_affinity(root: &SysRoot, tc: &TuneCtx, plan: &mut Plan) {
    mask_knob(
        root,
        tc,
        KnobGroup::DefaultIrqAffinity,
        facts::P_IRQ_DEFAULT,
        "default IRQ affinity",
        plan,
    )
}

/// Tune groups `irq-affinity` (every movable IRQ but the NIC's off the RT CPU) and `nic-irqs`
/// (the NIC's IRQs, `nic`, to `[tune].nic_irq_cpu` or off the RT CPU). Per-CPU and known
/// kernel-managed IRQs are skipped.
pub(crate) fn plan_irqs(
    root: &SysRoot,
    tc: &TuneCtx,
    g: KnobGroup,
    irqs: &[Irq],
    nic: &BTreeSet<u32>,
    journal: Option<&Journal>,
    plan: &mut Plan,
) {
    if g == KnobGroup::NicIrqs && tc.iface.is_none() {
        skip(
            plan,
            g,
            "nic-irqs",
            "no interface (--iface or [bus].interface)",
        );
        return;
    }
    if g == KnobGroup::NicIrqs && nic.is_empty() {
        skip(
            plan,
            g,
            "nic-irqs",
            format!("no IRQ named after {}", tc.iface.as_deref().unwrap_or("")),
        );
        return;
    }
    for irq in irqs {
        let is_nic = nic.contains(&irq.num);
        if (g == KnobGroup::NicIrqs) != is_nic {
            continue;
        }
        let (Some(aff), Some(raw)) = (&irq.affinity, &irq.affinity_raw) else {
            continue;
        };
        let target = match (g, tc.tune.nic_irq_cpu) {
            (KnobGroup::NicIrqs, Some(c)) => CpuSet::single(c),
            _ => {
                if !aff.intersects(&tc.rt) {
                    continue;
                }
                tc.narrow(aff)
            }
        };
        if &target == aff {
            continue;
        }
        let path = irq.smp_path();
        if irq.per_cpu {
            skip(
                plan,
                g,
                format!("file:{path}"),
                format!("IRQ {} is per-CPU, cannot move", irq.label()),
            );
            continue;
        }
        if irq.managed == Some(true) || journal.is_some_and(|j| j.refused(&path)) {
            skip(
                plan,
                g,
                format!("file:{path}"),
                format!("IRQ {} is kernel-managed, cannot move", irq.label()),
            );
            continue;
        }
        file_change(
            root,
            g,
            &path,
            format!("IRQ {}: {aff} -> {target}", irq.label()),
            target.to_mask_like(raw),
            plan,
        );
    }
}
