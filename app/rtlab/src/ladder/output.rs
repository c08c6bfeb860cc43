//! The ladder directory's result files, in the format `rtcat report` reads (`rtcat_results`):
//! `manifest.json`, `ladder.csv` (a row per completed run, synced as it is written), and the
//! report table and plots at the end.

use std::fs;
use std::io::Write;

use anyhow::{Context, Result};

use super::REPORT_FILE;
use super::plan::Plan;
use crate::outfile::say;
use rtcat_results::{
    LADDER_CSV_FILE, LADDER_CSV_HEADER, LADDER_SCHEMA, LadderManifest, MANIFEST_FILE, Summary,
    ladder_csv_row,
};

pub(super) fn write_manifest(plan: &Plan, system: rtcat_results::SystemInfo) -> Result<()> {
    let manifest = LadderManifest {
        schema: LADDER_SCHEMA.into(),
        created_unix_ns: super::unix_now().as_nanos() as u64,
        system,
        stages: plan.stages.iter().map(|s| s.id().to_string()).collect(),
        runs: plan.runs,
        duration_s: plan.duration,
        loaded: plan.load_cpus.is_some(),
    };
    manifest.validate()?;
    manifest
        .write_to(&plan.dir)
        .with_context(|| format!("{MANIFEST_FILE}: cannot write"))
}

/// `ladder.csv` with its header, open for the rows.
pub(super) fn create_csv(plan: &Plan) -> Result<fs::File> {
    let mut csv = plan
        .dir
        .create(LADDER_CSV_FILE, 0o644)
        .with_context(|| format!("{LADDER_CSV_FILE}: cannot create"))?;
    writeln!(csv, "{LADDER_CSV_HEADER}")?;
    csv.sync_data()?;
    Ok(csv)
}

/// One completed run's row, on disk before the next run starts.
pub(super) fn append_row(csv: &mut fs::File, stage: &str, run: u32, s: &Summary) -> Result<()> {
    let row = ladder_csv_row(stage, run, s);
    writeln!(csv, "{row}")
        .and_then(|_| csv.sync_data())
        .with_context(|| format!("{LADDER_CSV_FILE}: cannot append"))
}

/// The answer: the reference-style table of what was measured on stdout and in `report.md`, and
/// the plots. A report that cannot be built is said, not fatal: the runs are on disk.
pub(super) fn write_report(plan: &Plan, partial: bool) -> Result<()> {
    match crate::report::load_sources(std::slice::from_ref(&plan.out), &[], partial) {
        Ok(src) => {
            let table = crate::report::render_markdown(&src);
            // a closed pipe (`| head`) is not an error
            let _ = crate::outfile::write_stdout(table.as_bytes());
            plan.dir
                .write_atomic(REPORT_FILE, table.as_bytes(), 0o644)
                .with_context(|| format!("{REPORT_FILE}: cannot write"))?;
            if plan.plots {
                let pdir = plan.out.join("plots");
                let r = plan
                    .dir
                    .subdir("plots", true)
                    .map_err(anyhow::Error::from)
                    .and_then(|_| crate::plot::write_plots(&src, &pdir, (1000, 600)));
                if let Err(e) = r {
                    say!("rtcat ladder: plots not written: {e:#}");
                }
            }
        }
        Err(e) => say!("rtcat ladder: report of {}: {e:#}", plan.out.display()),
    }
    Ok(())
}
