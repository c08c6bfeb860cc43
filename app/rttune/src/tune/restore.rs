//! `rtcat tune restore`: put back every journalled original, newest first.

use super::{KnobGroup, Outcome, OutcomeItem};
use crate::host::Host;
use crate::journal::{AsStateFile, EntryState};
use crate::sysroot::SysRoot;

/// Put back every journalled original (newest first); removes the journal when all are back.
pub fn restore(
    root: &SysRoot,
    host: &dyn Host,
    groups: Option<&[KnobGroup]>,
    state: &(impl AsStateFile + ?Sized),
) -> anyhow::Result<Outcome> {
    let state = state.as_state_file();
    let mut out = Outcome::new("restore", state.path());
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
        let result = match e.change.undo(root, host) {
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
            what: e.change.describe(),
            result,
        });
    }
    if sel.as_ref().is_none_or(|s| s.contains(&KnobGroup::Tasks)) {
        super::inherited::restore_inherited(root, host, &j, &mut out);
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
