//! `ladder-log.json`: what every run changed, refused or found N/A, and how it ended.

use anyhow::{Context, Result};
use rttune::tune::Outcome;
use safefs::Dir;
use serde::Serialize;

use super::LOG_FILE;
use super::plan::Bus;

#[derive(Debug, Clone, Serialize)]
pub(super) struct StageLog {
    pub id: &'static str,
    pub change: &'static str,
    pub bench_flags: Vec<String>,
    pub tune_groups: Vec<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RunStatus {
    Ok,
    Failed,
    Interrupted,
}

#[derive(Debug, Clone, Serialize)]
pub(super) struct RunLog {
    pub stage: &'static str,
    pub run: u32,
    pub status: RunStatus,
    /// Directory of the run, relative to the ladder directory.
    pub dir: String,
    pub started_unix_ns: u64,
    pub wall_s: f64,
    pub bench_exit: Option<i32>,
    pub error: Option<String>,
    pub tune_apply: Option<Outcome>,
    pub tune_restore: Option<Outcome>,
    pub load: Option<crate::LoadReport>,
}

#[derive(Debug, Clone, Serialize)]
pub(super) struct LadderLog {
    pub schema: &'static str,
    pub rtcat_version: &'static str,
    pub bus: Bus,
    pub config: Option<String>,
    pub rt_cpu: usize,
    pub priority: u8,
    pub duration_s: f64,
    pub runs_per_stage: u32,
    pub load: Option<String>,
    pub tune_journal: &'static str,
    pub stages: Vec<StageLog>,
    pub runs: Vec<RunLog>,
    pub notes: Vec<String>,
    pub finished: bool,
    pub stopped_by: Option<String>,
}

impl LadderLog {
    pub fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }
    pub fn save(&self, dir: &Dir) -> Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        dir.write_atomic(LOG_FILE, text.as_bytes(), 0o644)
            .with_context(|| format!("{LOG_FILE}: cannot write"))
    }
}
