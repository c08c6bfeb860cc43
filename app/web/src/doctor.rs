//! The `rtcat doctor --json` report of this board, for the Timing view.
//!
//! rtcat-web does not run doctor: its unit hides what doctor inspects on purpose
//! (`ProtectProc=invisible`, `ProcSubset=pid`, `PrivateDevices`), so doctor's verdicts there
//! would be about the sandbox, not the board. Doctor needs no root either (its verdicts as an
//! unprivileged user match root's, docs/NOTES.md §18), so an unprivileged timer (or whoever
//! commissions the board) writes the report to a file, and the page shows that file with its
//! age. Nothing a client sends makes anything run.

use serde_json::{Value, json};
use std::io::Read;
use std::path::Path;
use std::time::SystemTime;

/// Largest report read (doctor's is about 20 kB).
const MAX_BYTES: u64 = 1 << 20;
/// The schema the report must name (`rtcat doctor --json`).
pub const SCHEMA: &str = "rttune.doctor/1";

/// The report at `path` as the page shows it: `{"file", "age_s", "report"}`, or `{"file",
/// "report": null, "why"}` when there is none to show (absent, unreadable, too large, not
/// doctor's JSON), naming what is wrong.
pub fn read(path: &Path) -> Value {
    let file = path.display().to_string();
    let why = |w: String| json!({"file": file, "report": null, "why": w});
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return why(format!(
                "{file} does not exist: `rtcat doctor --json > {file}` (an unprivileged timer on the board) writes it"
            ));
        }
        Err(e) => return why(format!("{file}: {e}")),
    };
    let age_s = f
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map(|d| d.as_secs());
    let mut text = String::new();
    if let Err(e) = f.take(MAX_BYTES + 1).read_to_string(&mut text) {
        return why(format!("{file}: {e}"));
    }
    if text.len() as u64 > MAX_BYTES {
        return why(format!(
            "{file}: larger than {MAX_BYTES} bytes: not doctor's report"
        ));
    }
    let report: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return why(format!("{file}: not JSON: {e}")),
    };
    if report["schema"] != SCHEMA || !report["checks"].is_array() {
        return why(format!(
            "{file}: schema {}, not {SCHEMA} with checks",
            report["schema"]
        ));
    }
    json!({"file": file, "age_s": age_s, "report": report})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_or_why_there_is_none() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("doctor.json");
        let v = read(&p);
        assert!(v["report"].is_null());
        assert!(
            v["why"]
                .as_str()
                .unwrap()
                .contains("does not exist: `rtcat doctor --json"),
            "{v}"
        );
        std::fs::write(&p, "{").unwrap();
        assert!(read(&p)["why"].as_str().unwrap().contains("not JSON"));
        std::fs::write(&p, r#"{"schema":"other/1","checks":[]}"#).unwrap();
        assert!(
            read(&p)["why"]
                .as_str()
                .unwrap()
                .contains("schema \"other/1\", not rttune.doctor/1")
        );
        std::fs::write(&p, vec![b' '; (MAX_BYTES + 2) as usize]).unwrap();
        assert!(read(&p)["why"].as_str().unwrap().contains("larger than"));
        let report = r#"{"schema":"rttune.doctor/1","summary":{"pass":1},"checks":[{"id":"kernel.preempt_rt","verdict":"PASS"}]}"#;
        std::fs::write(&p, report).unwrap();
        let v = read(&p);
        assert_eq!(v["report"]["checks"][0]["verdict"], "PASS", "{v}");
        assert!(v["age_s"].as_u64().is_some_and(|a| a < 60), "{v}");
    }
}
