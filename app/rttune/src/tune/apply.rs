//! `rtcat tune apply`: journal every original value, then change each knob and read it back.

use super::{KnobGroup, Outcome, OutcomeItem, TuneCtx};
use crate::cpuset::CpuSet;
use crate::facts;
use crate::host::Host;
use crate::journal::{AsStateFile, Boot, Entry, EntryState, Journal};
use crate::sysroot::SysRoot;

/// Apply `groups`, journalling every original value first. Idempotent; safe after a crash.
pub fn apply(
    root: &SysRoot,
    tc: &TuneCtx,
    host: &dyn Host,
    groups: &[KnobGroup],
    state: &(impl AsStateFile + ?Sized),
) -> anyhow::Result<Outcome> {
    let state = state.as_state_file();
    let mut out = Outcome::new("apply", state.path());
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
    let p = super::plan(root, tc, host, groups, Some(&j));
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
                e.change = e.change.keep_original(&ch.change);
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
        let res = ch.change.apply(root, host);
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
