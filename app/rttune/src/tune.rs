//! `rtcat tune`: plan, apply, restore and show the runtime shield, knob group by knob group.

use crate::config::TuneSection;
use crate::cpuset::CpuSet;
use crate::facts;
use crate::host::{self, Coalesce, Host, ServiceStart};
use crate::journal::{AsStateFile, Boot, Change, Entry, EntryState, Journal};
use crate::sysroot::SysRoot;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Groups of knobs; `Shield` stands for the seven runtime-shield groups.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
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

fn file_change(
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

fn skip(plan: &mut Plan, group: KnobGroup, id: impl Into<String>, reason: impl Into<String>) {
    plan.skipped.push(Skipped {
        group,
        id: id.into(),
        reason: reason.into(),
    });
}

fn mask_knob(root: &SysRoot, tc: &TuneCtx, g: KnobGroup, path: &str, what: &str, plan: &mut Plan) {
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
                if !tc.tune.stop_irqbalance {
                    skip(
                        &mut plan,
                        g,
                        "service:irqbalance",
                        "tune.stop_irqbalance = false",
                    );
                    continue;
                }
                for pid in facts::pids_named(&procs, "irqbalance") {
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
                        Err(e) => skip(&mut plan, g, "service:irqbalance", e.to_string()),
                    }
                }
            }
            KnobGroup::DefaultIrqAffinity => mask_knob(
                root,
                tc,
                g,
                facts::P_IRQ_DEFAULT,
                "default IRQ affinity",
                &mut plan,
            ),
            KnobGroup::WorkqueueMask => mask_knob(
                root,
                tc,
                g,
                facts::P_WQ_MASK,
                "unbound workqueue cpumask",
                &mut plan,
            ),
            KnobGroup::IrqAffinity | KnobGroup::NicIrqs => {
                if g == KnobGroup::NicIrqs && tc.iface.is_none() {
                    skip(
                        &mut plan,
                        g,
                        "nic-irqs",
                        "no interface (--iface or [bus].interface)",
                    );
                    continue;
                }
                if g == KnobGroup::NicIrqs && nic.is_empty() {
                    skip(
                        &mut plan,
                        g,
                        "nic-irqs",
                        format!("no IRQ named after {}", tc.iface.as_deref().unwrap_or("")),
                    );
                    continue;
                }
                for irq in &irqs {
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
                            &mut plan,
                            g,
                            format!("file:{path}"),
                            format!("IRQ {} is per-CPU, cannot move", irq.label()),
                        );
                        continue;
                    }
                    if irq.managed == Some(true) || journal.is_some_and(|j| j.refused(&path)) {
                        skip(
                            &mut plan,
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
                        &mut plan,
                    );
                }
            }
            KnobGroup::Tasks => {
                if !tc.tune.move_tasks {
                    skip(&mut plan, g, "tasks", "tune.move_tasks = false");
                    continue;
                }
                let me = std::process::id();
                let rtcat: Vec<u32> = facts::pids_named(&procs, "rtcat");
                for t in facts::read_tasks(root, &procs) {
                    if !t.allowed.intersects(&tc.rt)
                        || rtcat.contains(&t.pid)
                        || stopping.contains(&t.pid)
                        || (root.is_live() && t.pid == me)
                        || t.is_irq_thread()
                        || t.no_setaffinity()
                        || t.allowed.is_subset(&tc.rt)
                    {
                        continue;
                    }
                    let target = match &tc.housekeeping {
                        Some(h) => {
                            let i = t.allowed.intersection(h);
                            if i.is_empty() {
                                tc.narrow(&t.allowed)
                            } else {
                                i
                            }
                        }
                        None => t.allowed.difference(&tc.rt),
                    };
                    plan.changes.push(Planned {
                        group: g,
                        id: format!("task:{}:{}", t.tid, t.starttime),
                        what: format!("task {}[{}]: {} -> {}", t.comm, t.tid, t.allowed, target),
                        current: t.allowed.to_list(),
                        target: target.to_list(),
                        change: Change::Affinity {
                            pid: t.pid,
                            tid: t.tid,
                            starttime: t.starttime,
                            comm: t.comm.clone(),
                            original: t.allowed.to_list(),
                            target: target.to_list(),
                        },
                    });
                }
            }
            KnobGroup::TimerMigration => {
                if !tc.tune.disable_timer_migration {
                    skip(
                        &mut plan,
                        g,
                        "timer_migration",
                        "tune.disable_timer_migration = false",
                    );
                    continue;
                }
                match root.read_opt(facts::P_TIMER_MIGRATION) {
                    None => skip(
                        &mut plan,
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
                        &mut plan,
                    ),
                }
            }
            KnobGroup::Governor => {
                let pols: Vec<_> = facts::read_policies(root)
                    .into_iter()
                    .filter(|p| p.related.intersects(&tc.rt))
                    .collect();
                if pols.is_empty() {
                    skip(
                        &mut plan,
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
                            &mut plan,
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
                        &mut plan,
                    );
                }
            }
            KnobGroup::CStates => {
                if !tc.tune.disable_cstates {
                    skip(&mut plan, g, "c-states", "tune.disable_cstates = false");
                    continue;
                }
                for cpu in tc.rt.iter() {
                    let Some(states) = facts::read_idle_states(root, cpu) else {
                        skip(&mut plan, g, format!("cpuidle:cpu{cpu}"), "no cpuidle");
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
                            &mut plan,
                        );
                    }
                }
            }
            KnobGroup::Coalesce => {
                if tc.tune.coalesce.is_empty() {
                    skip(
                        &mut plan,
                        g,
                        "coalesce",
                        "no [tune.coalesce] values configured",
                    );
                    continue;
                }
                let Some(i) = &tc.iface else {
                    skip(
                        &mut plan,
                        g,
                        "coalesce",
                        "no interface (--iface or [bus].interface)",
                    );
                    continue;
                };
                match host.get_coalesce(i) {
                    Err(e) => skip(
                        &mut plan,
                        g,
                        format!("coalesce:{i}"),
                        format!("cannot read coalescing of {i}: {e}"),
                    ),
                    Ok(cur) => {
                        let target = cur.with(&tc.tune.coalesce);
                        if target != cur {
                            plan.changes.push(Planned {
                                group: g,
                                id: format!("coalesce:{i}"),
                                what: format!("{i} coalescing"),
                                current: cur.describe(),
                                target: target.describe(),
                                change: Change::Coalesce {
                                    iface: i.clone(),
                                    original: cur,
                                    target,
                                },
                            });
                        }
                    }
                }
            }
        }
    }
    plan
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

fn affinity_of(root: &SysRoot, pid: u32, tid: u32, starttime: u64) -> Option<CpuSet> {
    let base = format!("/proc/{pid}/task/{tid}");
    let stat = root.read_raw(&format!("{base}/stat")).ok()?;
    let (_, f) = facts::parse_stat(&stat)?;
    if f.get(19).and_then(|v| v.parse::<u64>().ok()) != Some(starttime) {
        return None;
    }
    let status = root.read_raw(&format!("{base}/status")).ok()?;
    facts::status_field(&status, "Cpus_allowed_list").and_then(|s| CpuSet::parse_list(s).ok())
}

fn same_value(path: &str, a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    if a == b {
        return true;
    }
    if (path.ends_with("smp_affinity") || path.ends_with("cpumask"))
        && let (Ok(x), Ok(y)) = (CpuSet::parse_mask(a), CpuSet::parse_mask(b))
    {
        return x == y;
    }
    false
}

fn do_change(root: &SysRoot, host: &dyn Host, c: &Change) -> Result<(), String> {
    match c {
        Change::File { path, target, .. } => {
            root.write(path, &format!("{target}\n"))
                .map_err(|e| e.to_string())?;
            let back = root
                .read_knob(path)
                .map_err(|e| format!("read-back: {e}"))?;
            if !same_value(path, &back, target) {
                return Err(format!(
                    "read back {:?} after writing {target:?}",
                    back.trim()
                ));
            }
            Ok(())
        }
        Change::Service { how, .. } => host.stop_service(root, how).map_err(|e| e.to_string()),
        Change::Coalesce { iface, target, .. } => {
            host.set_coalesce(iface, target)
                .map_err(|e| e.to_string())?;
            let back = host
                .get_coalesce(iface)
                .map_err(|e| format!("read-back: {e}"))?;
            if &back != target {
                return Err(format!(
                    "driver reads back {} after setting {}",
                    back.describe(),
                    target.describe()
                ));
            }
            Ok(())
        }
        Change::Affinity {
            pid,
            tid,
            starttime,
            target,
            ..
        } => {
            if affinity_of(root, *pid, *tid, *starttime).is_none() {
                return Err("task exited".into());
            }
            let t = CpuSet::parse_list(target).map_err(|e| e.to_string())?;
            host.set_affinity(*tid, &t).map_err(|e| e.to_string())
        }
    }
}

/// Apply `groups`, journalling every original value first. Idempotent; safe after a crash.
pub fn apply(
    root: &SysRoot,
    tc: &TuneCtx,
    host: &dyn Host,
    groups: &[KnobGroup],
    state: &(impl AsStateFile + ?Sized),
) -> anyhow::Result<Outcome> {
    let state = state.as_state_file();
    let mut out = Outcome {
        action: "apply".into(),
        state_file: state.path().display().to_string(),
        ..Default::default()
    };
    if crate::journal::boot_id(root).is_empty() {
        anyhow::bail!(
            "cannot read /proc/sys/kernel/random/boot_id under {}: the journal must record the \
             boot it belongs to, nothing applied",
            root.root().display()
        );
    }
    // a journal that is not trusted is refused here too: apply would keep its originals
    let mut j = match state.load(root)? {
        Some(j) if j.boot(root) != Boot::Same => {
            out.notes.push(
                "journal from a previous boot discarded (runtime knobs were reset by the reboot)"
                    .into(),
            );
            Journal::new(root, &tc.rt.to_list())
        }
        Some(j) => j,
        None => Journal::new(root, &tc.rt.to_list()),
    };
    if let Ok(prev) = CpuSet::parse_list(&j.rt_cpus) {
        j.rt_cpus = prev.union(&tc.rt).to_list();
    }
    // read before the task list: every task started later was created while the shield was up
    let now = facts::uptime_ticks(root);
    let p = plan(root, tc, host, groups, Some(&j));
    if j.tasks_since.is_none() && p.changes.iter().any(|c| c.group == KnobGroup::Tasks) {
        // with affinities journalled by an older rtcat (no time recorded) the later time is the
        // safe one: it can only leave inherited masks alone, never widen a pre-existing task
        j.tasks_since = now;
    }
    out.skipped = p.skipped.clone();
    // 1. journal every original before touching anything
    let mut idx = Vec::new();
    for ch in &p.changes {
        let i = match j.find(&ch.id) {
            Some(i) => {
                // keep the first-recorded original; take the new target
                let e = &mut j.entries[i];
                e.change = merge_keep_original(&e.change, &ch.change);
                if matches!(e.state, EntryState::Refused { .. }) {
                    e.state = EntryState::Pending;
                }
                i
            }
            None => {
                j.entries.push(Entry {
                    id: ch.id.clone(),
                    group: ch.group,
                    change: ch.change.clone(),
                    state: EntryState::Pending,
                });
                j.entries.len() - 1
            }
        };
        idx.push(i);
    }
    if !p.changes.is_empty() {
        state.save(&j)?;
    }
    // 2. change
    for (ch, i) in p.changes.iter().zip(idx) {
        let res = do_change(root, host, &ch.change);
        let e = &mut j.entries[i];
        let result = match res {
            Ok(()) => {
                e.state = EntryState::Applied;
                "applied".to_string()
            }
            Err(err) => {
                // the write either happened completely or not at all; a refused knob keeps no
                // restore duty unless an earlier apply changed it
                if e.state == EntryState::Pending {
                    e.state = EntryState::Refused { error: err.clone() };
                }
                format!("refused: {err}")
            }
        };
        out.items.push(OutcomeItem {
            group: ch.group,
            id: ch.id.clone(),
            what: ch.what.clone(),
            result,
        });
    }
    if !p.changes.is_empty() {
        state.save(&j)?;
    }
    if p.changes.is_empty() {
        out.notes.push("nothing to change: already applied".into());
    }
    Ok(out)
}

fn merge_keep_original(old: &Change, new: &Change) -> Change {
    match (old, new) {
        (Change::File { path, original, .. }, Change::File { target, .. }) => Change::File {
            path: path.clone(),
            original: original.clone(),
            target: target.clone(),
        },
        (
            Change::Coalesce {
                iface, original, ..
            },
            Change::Coalesce { target, .. },
        ) => Change::Coalesce {
            iface: iface.clone(),
            original: *original,
            target: *target,
        },
        (
            Change::Affinity {
                pid,
                tid,
                starttime,
                comm,
                original,
                ..
            },
            Change::Affinity { target, .. },
        ) => Change::Affinity {
            pid: *pid,
            tid: *tid,
            starttime: *starttime,
            comm: comm.clone(),
            original: original.clone(),
            target: target.clone(),
        },
        (_, n) => n.clone(),
    }
}

fn describe(c: &Change) -> String {
    match c {
        Change::File {
            path,
            original,
            target,
        } => {
            format!("{path}: {} (tuned {})", original.trim(), target.trim())
        }
        Change::Service { name, .. } => format!("service {name}"),
        Change::Coalesce {
            iface, original, ..
        } => format!("{iface} coalescing {}", original.describe()),
        Change::Affinity {
            comm,
            tid,
            original,
            ..
        } => format!("task {comm}[{tid}] affinity {original}"),
    }
}

fn undo(root: &SysRoot, host: &dyn Host, e: &Entry) -> Result<String, String> {
    match &e.change {
        Change::File {
            path,
            original,
            target,
        } => {
            let cur = match root.read_knob(path) {
                Ok(c) => c,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(format!("gone ({path} no longer exists)"));
                }
                Err(err) => return Err(format!("cannot read {path}: {err}")),
            };
            if cur == *original {
                return Ok("already original".into());
            }
            let drift = !same_value(path, &cur, target) && !same_value(path, &cur, original);
            root.write(path, original)
                .map_err(|err| format!("write {path}: {err}"))?;
            let back = root
                .read_knob(path)
                .map_err(|err| format!("read-back {path}: {err}"))?;
            if !same_value(path, &back, original) {
                return Err(format!(
                    "{path} reads {:?} after restoring {:?}",
                    back.trim(),
                    original.trim()
                ));
            }
            Ok(if drift {
                format!(
                    "restored (it had been changed to {:?} since apply)",
                    cur.trim()
                )
            } else {
                "restored".into()
            })
        }
        Change::Service { name, how } => {
            let running = !facts::pids_named(&facts::read_processes(root), name).is_empty();
            if running {
                return Ok("already running".into());
            }
            // how to start it is decided here, from its name and the machine: a journalled
            // command line is never run
            let start = host::plan_service_start(root, name, how).map_err(|err| err.to_string())?;
            host.start_service(root, &start)
                .map_err(|err| err.to_string())?;
            Ok(match start {
                ServiceStart::Systemd { unit } => format!("started ({unit})"),
                ServiceStart::Exec { program } => format!(
                    "started ({} with its default options; the journalled command line is not used)",
                    program.display()
                ),
            })
        }
        Change::Coalesce {
            iface, original, ..
        } => {
            let cur: Coalesce = host.get_coalesce(iface).map_err(|err| err.to_string())?;
            if cur == *original {
                return Ok("already original".into());
            }
            host.set_coalesce(iface, original)
                .map_err(|err| err.to_string())?;
            let back = host.get_coalesce(iface).map_err(|err| err.to_string())?;
            if back != *original {
                return Err(format!(
                    "driver reads back {} after restoring {}",
                    back.describe(),
                    original.describe()
                ));
            }
            Ok("restored".into())
        }
        Change::Affinity {
            pid,
            tid,
            starttime,
            original,
            ..
        } => {
            let Some(cur) = affinity_of(root, *pid, *tid, *starttime) else {
                return Ok("gone (task exited)".into());
            };
            let orig = CpuSet::parse_list(original).map_err(|err| err.to_string())?;
            if cur == orig {
                return Ok("already original".into());
            }
            host.set_affinity(*tid, &orig)
                .map_err(|err| err.to_string())?;
            Ok("restored".into())
        }
    }
}

/// How far up the parent chain a task created under the shield is traced.
const MAX_ANCESTRY: usize = 64;

/// A journalled task affinity, parsed.
struct Shielded<'a> {
    pid: u32,
    tid: u32,
    starttime: u64,
    comm: &'a str,
    original: CpuSet,
    target: CpuSet,
}

/// Where a task created under the shield got its mask from.
enum Source<'a> {
    /// The nearest journalled ancestor was narrowed by apply and the task still has exactly the
    /// narrowed mask; `hops` = processes walked up (0: a thread of the same process).
    Inherited(&'a Shielded<'a>, usize),
    /// A journalled ancestor exists, but the task's mask is not the one it was narrowed to.
    Differs,
    /// No journalled ancestor (or the chain leads through a task older than the shield).
    Unrelated,
}

/// Tasks created while the tasks group was applied inherited the narrowed mask from the thread
/// that created them and are not in the journal. Each such task whose mask is still exactly the
/// narrowed mask of its nearest journalled ancestor gets that ancestor's original: the mask it
/// would have inherited without the shield. Everything else is left alone.
fn restore_inherited(root: &SysRoot, host: &dyn Host, j: &Journal, out: &mut Outcome) {
    let shielded: Vec<Shielded> = j
        .entries
        .iter()
        .filter(|e| e.state == EntryState::Applied)
        .filter_map(|e| match &e.change {
            Change::Affinity {
                pid,
                tid,
                starttime,
                comm,
                original,
                target,
            } => Some(Shielded {
                pid: *pid,
                tid: *tid,
                starttime: *starttime,
                comm,
                original: CpuSet::parse_list(original).ok()?,
                target: CpuSet::parse_list(target).ok()?,
            }),
            _ => None,
        })
        .collect();
    if shielded.is_empty() {
        return;
    }
    let Some(since) = j.tasks_since else {
        out.notes.push(
            "the journal does not say when the tasks group was applied (written by an older \
             rtcat): tasks started while the shield was up keep the narrowed CPU mask they \
             inherited"
                .into(),
        );
        return;
    };
    // every journalled task, in any state: these are restored (or not) from their own entries
    let journalled: std::collections::HashSet<(u32, u64)> = j
        .entries
        .iter()
        .filter_map(|e| match &e.change {
            Change::Affinity { tid, starttime, .. } => Some((*tid, *starttime)),
            _ => None,
        })
        .collect();
    // per process, the main thread first, then by tid
    let mut by_pid: std::collections::HashMap<u32, Vec<&Shielded>> = Default::default();
    for s in &shielded {
        by_pid.entry(s.pid).or_default().push(s);
    }
    for v in by_pid.values_mut() {
        v.sort_by_key(|s| (s.tid != s.pid, s.tid));
    }
    let procs = facts::read_processes(root);
    let tasks = facts::read_tasks(root, &procs);
    let mains: std::collections::HashMap<u32, (u32, u64)> = tasks
        .iter()
        .filter(|t| t.tid == t.pid)
        .map(|t| (t.pid, (t.ppid, t.starttime)))
        .collect();
    let ids_of = |pid: u32| {
        mains
            .get(&pid)
            .copied()
            .or_else(|| facts::read_proc_ids(root, pid))
    };
    let source = |t: &facts::Task| -> Source {
        let mut pid = t.pid;
        for hops in 0..MAX_ANCESTRY {
            // (parent, start time) of process `pid`; gone = nothing to trace
            let Some((ppid, start)) = ids_of(pid) else {
                return Source::Unrelated;
            };
            // journalled threads of this very process (not of an earlier one with the same pid):
            // the main thread with its start time, other threads started after it
            let cands: Vec<&Shielded> = by_pid
                .get(&pid)
                .map(|v| {
                    v.iter()
                        .copied()
                        .filter(|s| {
                            if s.tid == pid {
                                s.starttime == start
                            } else {
                                s.starttime >= start
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !cands.is_empty() {
                return match cands.into_iter().find(|s| s.target == t.allowed) {
                    Some(s) => Source::Inherited(s, hops),
                    None => Source::Differs,
                };
            }
            // a process that is older than the shield and not journalled gave its own mask
            if start <= since || ppid == 0 {
                return Source::Unrelated;
            }
            pid = ppid;
        }
        Source::Unrelated
    };
    let me = std::process::id();
    let rtcat = facts::pids_named(&procs, "rtcat");
    let (mut differ, mut failed) = (0usize, 0usize);
    for t in &tasks {
        // only tasks created under the shield; like apply, never rtcat, kthreads (the kernel
        // sets their masks, they do not inherit kthreadd's) or PF_NO_SETAFFINITY threads
        if t.starttime <= since
            || journalled.contains(&(t.tid, t.starttime))
            || t.is_kthread()
            || t.no_setaffinity()
            || rtcat.contains(&t.pid)
            || (root.is_live() && t.pid == me)
        {
            continue;
        }
        let (s, hops) = match source(t) {
            Source::Inherited(s, hops) => (s, hops),
            Source::Differs => {
                differ += 1;
                continue;
            }
            Source::Unrelated => continue,
        };
        let rel = match hops {
            0 => "thread",
            1 => "parent",
            _ => "ancestor",
        };
        let result = match host.set_affinity(t.tid, &s.original) {
            Ok(()) => "restored".to_string(),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => "gone (task exited)".into(),
            Err(e) => {
                failed += 1;
                format!("not restored: {e}")
            }
        };
        out.items.push(OutcomeItem {
            group: KnobGroup::Tasks,
            id: format!("task:{}:{}", t.tid, t.starttime),
            what: format!(
                "task {}[{}] (started while the shield was up, inherited from {rel} {}[{}]) \
                 affinity {} -> {}",
                t.comm, t.tid, s.comm, s.tid, t.allowed, s.original
            ),
            result,
        });
    }
    if differ > 0 {
        out.notes.push(format!(
            "{differ} task(s) started while the shield was up have a CPU mask other than the one \
             the shield gave their journalled ancestor (set since): left as they are"
        ));
    }
    if failed > 0 {
        out.notes.push(format!(
            "{failed} task(s) started while the shield was up could not get their inherited CPU \
             mask back; they were never journalled, so restore will not retry them"
        ));
    }
}

/// Put back every journalled original (newest first); removes the journal when all are back.
pub fn restore(
    root: &SysRoot,
    host: &dyn Host,
    groups: Option<&[KnobGroup]>,
    state: &(impl AsStateFile + ?Sized),
) -> anyhow::Result<Outcome> {
    let state = state.as_state_file();
    let mut out = Outcome {
        action: "restore".into(),
        state_file: state.path().display().to_string(),
        ..Default::default()
    };
    // every entry is checked before the first one is restored: a journal is used whole or not
    let Some(mut j) = state.load_this_boot(root)? else {
        out.notes.push("no tune state: nothing to restore".into());
        return Ok(out);
    };
    let sel = groups.map(KnobGroup::expand);
    let mut keep = Vec::new();
    for e in j.entries.iter().rev() {
        if sel.as_ref().is_some_and(|s| !s.contains(&e.group)) {
            keep.push(e.clone());
            continue;
        }
        if let EntryState::Refused { .. } = e.state {
            continue;
        }
        let result = match undo(root, host, e) {
            Ok(r) => r,
            Err(err) => {
                out.failed += 1;
                keep.push(e.clone());
                format!("FAILED: {err}")
            }
        };
        out.items.push(OutcomeItem {
            group: e.group,
            id: e.id.clone(),
            what: describe(&e.change),
            result,
        });
    }
    if sel.as_ref().is_none_or(|s| s.contains(&KnobGroup::Tasks)) {
        restore_inherited(root, host, &j, &mut out);
    }
    keep.reverse();
    j.entries = keep;
    if !j.has_tasks() {
        j.tasks_since = None;
    }
    if j.entries
        .iter()
        .all(|e| matches!(e.state, EntryState::Refused { .. }))
    {
        state.remove()?;
    } else {
        state.save(&j)?;
        if out.failed > 0 {
            out.notes.push(format!(
                "{} knob(s) could not be restored; they stay in the journal, run restore again",
                out.failed
            ));
        }
    }
    Ok(out)
}

/// What is applied (journal vs live values), and what apply would still change.
pub fn status(
    root: &SysRoot,
    tc: &TuneCtx,
    host: &dyn Host,
    groups: &[KnobGroup],
    state: &(impl AsStateFile + ?Sized),
) -> anyhow::Result<Outcome> {
    let state = state.as_state_file();
    let mut out = Outcome {
        action: "status".into(),
        state_file: state.path().display().to_string(),
        ..Default::default()
    };
    let j = state.load(root)?;
    match &j {
        None => out
            .notes
            .push("no tune state: nothing applied by rtcat tune".into()),
        Some(j) if !j.same_boot(root) => out
            .notes
            .push("journal is from a previous boot: nothing is applied".into()),
        Some(j) => {
            for e in &j.entries {
                let result = match (&e.state, &e.change) {
                    (EntryState::Refused { error }, _) => format!("refused: {error}"),
                    (
                        _,
                        Change::File {
                            path,
                            target,
                            original,
                        },
                    ) => match root.read_knob(path) {
                        Err(_) => "gone".into(),
                        Ok(c) if same_value(path, &c, target) => "in effect".into(),
                        Ok(c) if same_value(path, &c, original) => {
                            "not in effect (original value)".into()
                        }
                        Ok(c) => format!("drifted: now {:?}", c.trim()),
                    },
                    (_, Change::Service { name, .. }) => {
                        if facts::pids_named(&facts::read_processes(root), name).is_empty() {
                            "in effect (stopped)".into()
                        } else {
                            "drifted: running again".into()
                        }
                    }
                    (_, Change::Coalesce { iface, target, .. }) => match host.get_coalesce(iface) {
                        Ok(c) if c == *target => "in effect".into(),
                        Ok(c) => format!("drifted: now {}", c.describe()),
                        Err(err) => format!("unreadable: {err}"),
                    },
                    (
                        _,
                        Change::Affinity {
                            pid,
                            tid,
                            starttime,
                            target,
                            ..
                        },
                    ) => match affinity_of(root, *pid, *tid, *starttime) {
                        None => "gone (task exited)".into(),
                        Some(c) if c.to_list() == *target => "in effect".into(),
                        Some(c) => format!("drifted: now {c}"),
                    },
                };
                out.items.push(OutcomeItem {
                    group: e.group,
                    id: e.id.clone(),
                    what: describe(&e.change),
                    result,
                });
            }
        }
    }
    let p = plan(root, tc, host, groups, j.as_ref());
    if !p.changes.is_empty() {
        out.notes.push(format!(
            "apply would still change {} knob(s) (see `rtcat tune plan`)",
            p.changes.len()
        ));
    }
    Ok(out)
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
