//! Every knob a run changed goes back: the guard around one run's tune, and the final restore
//! of the ladder's journal whatever happened.

use anyhow::{Result, anyhow};
use rttune::journal::StateFile;
use rttune::tune::{self, Outcome};
use rttune::{Host, SysRoot};

use super::plan::Plan;
use crate::outfile::say;

pub(super) fn host_for(root: &SysRoot) -> &'static dyn Host {
    if root.is_live() {
        &rttune::RealHost
    } else {
        &rttune::command::NoHost
    }
}

/// Restores the journal when dropped unless `restore` was called: knobs go back on every path out.
pub(super) struct Tuned<'a> {
    pub root: &'a SysRoot,
    pub journal: StateFile,
    pub armed: bool,
}

impl Tuned<'_> {
    pub fn restore(mut self) -> Result<Outcome> {
        self.armed = false;
        tune::restore(self.root, host_for(self.root), None, &self.journal)
    }
}

impl Drop for Tuned<'_> {
    fn drop(&mut self) {
        if self.armed {
            match tune::restore(self.root, host_for(self.root), None, &self.journal) {
                Ok(o) if o.failed == 0 => {}
                Ok(o) => say!("rtcat ladder: restore incomplete:\n{}", o.to_text()),
                Err(e) => say!(
                    "rtcat ladder: restore failed: {e:#}; run `rtcat tune restore --state {}`",
                    self.journal.path().display()
                ),
            }
        }
    }
}

/// After the last run: whatever happened, no knob may stay changed. Returns the error that
/// ends the ladder, if the restore is incomplete.
pub(super) fn restore_all(plan: &Plan) -> Option<anyhow::Error> {
    if !plan.journal().exists() {
        return None;
    }
    match tune::restore(&plan.root, host_for(&plan.root), None, &plan.journal()) {
        Ok(o) if o.failed == 0 => None,
        Ok(o) => Some(anyhow!(
            "{} knob(s) could not be restored; run `rtcat tune restore --state {}`",
            o.failed,
            plan.journal().path().display()
        )),
        Err(e) => Some(anyhow!("final restore: {e:#}")),
    }
}
