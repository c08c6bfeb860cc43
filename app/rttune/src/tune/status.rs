//! `rtcat tune status`: the journal against the live values.

use super::{KnobGroup, Outcome, OutcomeItem, TuneCtx};
use crate::host::Host;
use crate::journal::{AsStateFile, EntryState};
use crate::sysroot::SysRoot;

/// What is applied (journal vs live values), and what apply would still change.
pub fn status(
    root: &SysRoot,
    tc: &TuneCtx,
    host: &dyn Host,
    groups: &[KnobGroup],
    state: &(impl AsStateFile + ?Sized),
) -> anyhow::Result<Outcome> {
    let state = state.as_state_file();
    let mut out = Outcome::new("status", state.path());
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
                let result = match &e.state {
                    EntryState::Refused { error } => format!("refused: {error}"),
                    _ => e.change.status(root, host),
                };
                out.items.push(OutcomeItem {
                    group: e.group,
                    id: e.id.clone(),
                    what: e.change.describe(),
                    result,
                });
            }
        }
    }
    let p = super::plan(root, tc, host, groups, j.as_ref());
    if !p.changes.is_empty() {
        out.notes.push(format!(
            "apply would still change {} knob(s) (see `rtcat tune plan`)",
            p.changes.len()
        ));
    }
    Ok(out)
}
