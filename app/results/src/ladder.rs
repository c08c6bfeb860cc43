//! A ladder directory: `manifest.json` (schema `rtcat.ladder/1`), the stage ids and `ladder.csv`
//! (one [`LadderRow`] per run, through [`crate::table`]).

use std::path::Path;

use safefs::Dir;
use serde::{Deserialize, Deserializer, Serialize};

use crate::error::invalid;
use crate::files::read_text_in;
use crate::files::{
    JsonFile, parse_json, read_json, read_json_in, to_json, write_json, write_json_to,
};
use crate::table::{non_negative, ordinal, shortest, uint};
use crate::{
    Error, LADDER_CSV_FILE, LADDER_CSV_LIMIT, LADDER_SCHEMA, MANIFEST_FILE, MANIFEST_LIMIT,
    MAX_RUNS, MAX_STAGES, Result, Summary, SystemInfo,
};

/// A ladder's `manifest.json` (schema `rtcat.ladder/1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LadderManifest {
    /// Always [`LADDER_SCHEMA`].
    pub schema: String,
    /// When the ladder started (ns since the Unix epoch).
    pub created_unix_ns: u64,
    /// The system the ladder ran on; every run's summary must agree on host and kernel.
    pub system: SystemInfo,
    /// Stage ids in ladder order; each has `runs` run directories `<stage>/run<k>`, k = 1..=runs.
    pub stages: Vec<String>,
    /// Runs per stage.
    pub runs: u32,
    /// Requested duration of each run in seconds.
    pub duration_s: f64,
    /// Whether a load ran during the runs (`--load`).
    pub loaded: bool,
}

impl LadderManifest {
    /// Checks the schema id, the stage ids and the counts; the error names the field.
    pub fn validate(&self) -> Result<()> {
        if self.schema != LADDER_SCHEMA {
            invalid!(
                "schema",
                "schema: expected \"{LADDER_SCHEMA}\", found \"{}\"",
                self.schema
            );
        }
        if self.stages.is_empty() {
            invalid!("stages", "stages: empty");
        }
        if self.stages.len() > MAX_STAGES {
            invalid!(
                "stages",
                "stages: {} stages (at most {MAX_STAGES})",
                self.stages.len()
            );
        }
        for (i, s) in self.stages.iter().enumerate() {
            let field = format!("stages[{i}]");
            if let Err(e) = validate_stage_id(s) {
                invalid!(field, "{field}: {e}");
            }
            if self.stages[..i].contains(s) {
                invalid!(field, "{field}: \"{s}\" listed twice");
            }
        }
        if self.runs == 0 || self.runs > MAX_RUNS {
            invalid!("runs", "runs: {} is not in 1..={MAX_RUNS}", self.runs);
        }
        if !self.duration_s.is_finite() || self.duration_s <= 0.0 {
            invalid!(
                "duration_s",
                "duration_s: {} is not a positive number",
                self.duration_s
            );
        }
        Ok(())
    }

    /// Parses and validates the text of a `manifest.json`; errors name `path` and the field.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        parse_json(text, path)
    }

    /// Reads a `manifest.json` named by the caller (a regular file of at most
    /// [`MANIFEST_LIMIT`] bytes).
    pub fn read(path: &Path) -> Result<Self> {
        read_json(path)
    }

    /// Reads `manifest.json` in `dir` without following a link.
    pub fn read_in(dir: &Dir) -> Result<Self> {
        read_json_in(dir)
    }

    /// The manifest as pretty JSON with a final newline.
    pub fn to_json(&self) -> Result<String> {
        to_json(self)
    }

    /// Writes `manifest.json` into `dir` atomically, never following a link.
    pub fn write_to(&self, dir: &Dir) -> Result<()> {
        write_json_to(self, dir)
    }

    /// Writes the manifest to `path` atomically through its directory (see [`Summary::write`]).
    pub fn write(&self, path: &Path) -> Result<()> {
        write_json(self, path)
    }
}

/// A stage id: 1..=32 characters of `[A-Za-z0-9_.+-]` (safe in CSV, file names and tables).
pub fn validate_stage_id(s: &str) -> Result<()> {
    let bad = |reason: String| {
        Err(Error::StageId {
            id: s.to_string(),
            reason,
        })
    };
    if s.is_empty() || s.len() > 32 {
        return bad("must have 1..=32 characters".into());
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_.+-".contains(*c)))
    {
        return bad(format!(
            "contains '{c}' (allowed: letters, digits, _ . + -)"
        ));
    }
    Ok(())
}

/// `deserialize_with` for the stage column.
fn stage_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = <&str>::deserialize(d)?;
    validate_stage_id(s).map_err(serde::de::Error::custom)?;
    Ok(s.to_string())
}

/// One `ladder.csv` row: the columns are the fields, in this order. Means are written in Rust's
/// shortest round-trip float form, all other figures as integers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LadderRow {
    /// Stage id (see [`validate_stage_id`]).
    #[serde(deserialize_with = "stage_id")]
    pub stage: String,
    /// Run number within the stage, 1-based.
    #[serde(deserialize_with = "ordinal")]
    pub run: u32,
    /// `cycles` of the run's summary.
    #[serde(deserialize_with = "uint")]
    pub cycles: u64,
    /// `wake_lateness_ns.mean`.
    #[serde(serialize_with = "shortest", deserialize_with = "non_negative")]
    pub wake_mean_ns: f64,
    /// `wake_lateness_ns.p99`.
    #[serde(deserialize_with = "uint")]
    pub wake_p99_ns: u64,
    /// `wake_lateness_ns.p999`.
    #[serde(deserialize_with = "uint")]
    pub wake_p999_ns: u64,
    /// `wake_lateness_ns.max`.
    #[serde(deserialize_with = "uint")]
    pub wake_max_ns: u64,
    /// `exec_ns.mean`.
    #[serde(serialize_with = "shortest", deserialize_with = "non_negative")]
    pub exec_mean_ns: f64,
    /// `exec_ns.max`.
    #[serde(deserialize_with = "uint")]
    pub exec_max_ns: u64,
    /// `missed_deadlines`.
    #[serde(deserialize_with = "uint")]
    pub missed_deadlines: u64,
    /// `wkc.mismatches`.
    #[serde(deserialize_with = "uint")]
    pub wkc_mismatches: u64,
    /// `recoveries`.
    #[serde(deserialize_with = "uint")]
    pub recoveries: u64,
}

/// One `ladder.csv` line (without line end) for run `run` (1-based) of `stage`.
pub fn ladder_csv_row(stage: &str, run: u32, s: &Summary) -> String {
    // Into memory, of numbers and a string: the csv writer has no way to fail here.
    crate::table::row_line(&LadderRow::from_summary(stage, run, s))
        .expect("a ladder.csv row serialises into memory")
}

impl LadderRow {
    /// The row [`ladder_csv_row`] writes for this summary.
    pub fn from_summary(stage: &str, run: u32, s: &Summary) -> Self {
        Self {
            stage: stage.to_string(),
            run,
            cycles: s.cycles,
            wake_mean_ns: s.wake_lateness_ns.mean,
            wake_p99_ns: s.wake_lateness_ns.p99,
            wake_p999_ns: s.wake_lateness_ns.p999,
            wake_max_ns: s.wake_lateness_ns.max,
            exec_mean_ns: s.exec_ns.mean,
            exec_max_ns: s.exec_ns.max,
            missed_deadlines: s.missed_deadlines,
            wkc_mismatches: s.wkc.mismatches,
            recoveries: s.recoveries,
        }
    }

    /// Same figures (means equal to 1e-9 relative, i.e. up to float formatting).
    pub fn matches(&self, other: &LadderRow) -> bool {
        let feq = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
        let exact = |r: &LadderRow| LadderRow {
            wake_mean_ns: 0.0,
            exec_mean_ns: 0.0,
            ..r.clone()
        };
        exact(self) == exact(other)
            && feq(self.wake_mean_ns, other.wake_mean_ns)
            && feq(self.exec_mean_ns, other.exec_mean_ns)
    }
}

/// Parses a whole `ladder.csv` (header line required); errors name the line and column.
pub fn parse_ladder_csv(text: &str) -> Result<Vec<LadderRow>> {
    let bound = format!("{MAX_STAGES} stages × {MAX_RUNS} runs");
    crate::table::parse(text, MAX_STAGES * MAX_RUNS as usize, &bound)
}

/// Reads and parses `ladder.csv` in `dir` (a regular file of at most [`LADDER_CSV_LIMIT`] bytes,
/// not a link); errors name the file, the line and the column.
pub fn read_ladder_csv_in(dir: &Dir) -> Result<Vec<LadderRow>> {
    let (text, path) = read_text_in(dir, LADDER_CSV_FILE, LADDER_CSV_LIMIT)?;
    parse_ladder_csv(&text).map_err(|e| e.in_file(path))
}

impl JsonFile for LadderManifest {
    const FILE: &'static str = MANIFEST_FILE;
    const LIMIT: u64 = MANIFEST_LIMIT;
    const WHAT: &'static str = "rtcat.ladder/1 manifest";
    fn check(&self) -> Result<()> {
        self.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::sample_summary;
    use crate::*;

    #[test]
    fn header_constant_is_the_row_struct() {
        assert_eq!(
            crate::table::header_line::<LadderRow>().unwrap(),
            LADDER_CSV_HEADER
        );
    }

    /// The bytes of the format before it went through serde: floats in shortest round-trip
    /// form without exponent or `.0`, integers plain.
    #[test]
    fn csv_row_bytes_are_unchanged() {
        let mut s = sample_summary();
        s.wake_lateness_ns.mean = 1500.0;
        s.exec_ns.mean = 0.0;
        assert_eq!(
            ladder_csv_row("rt+shield", 1000, &s),
            "rt+shield,1000,5,1500,13519,13519,13519,0,13519,0,1,0"
        );
        s.wake_lateness_ns.mean = 1e-7;
        s.exec_ns.mean = 1.5e20;
        assert_eq!(
            ladder_csv_row("s0", 1, &s),
            "s0,1,5,0.0000001,13519,13519,13519,150000000000000000000,13519,0,1,0"
        );
    }

    #[test]
    fn csv_reader_keeps_the_old_rules() {
        let row = |tail: &str| format!("{LADDER_CSV_HEADER}\n{tail}\n");
        // hexadecimal, signs and quotes are not numbers here (the csv crate's own integer
        // parser takes `0x10`)
        assert_eq!(
            parse_ladder_csv(&row("s0,1,0x10,1.5,2,3,4,1,2,0,0,0"))
                .unwrap_err()
                .to_string(),
            "line 2: column cycles: \"0x10\" is not a non-negative integer"
        );
        assert_eq!(
            parse_ladder_csv(&row("\"s0\",1,10,1.5,2,3,4,1,2,0,0,0"))
                .unwrap_err()
                .to_string(),
            "line 2: column stage: stage id \"\"s0\"\" contains '\"' (allowed: letters, digits, _ . + -)"
        );
        assert_eq!(
            parse_ladder_csv(&row("s0,5000000000,10,1.5,2,3,4,1,2,0,0,0"))
                .unwrap_err()
                .to_string(),
            "line 2: column run: 5000000000 is not in 1..=4294967295"
        );
        assert_eq!(
            parse_ladder_csv(&row("s0,1,10,1.5,2,3,4,inf,2,0,0,0"))
                .unwrap_err()
                .to_string(),
            "line 2: column exec_mean_ns: \"inf\" is not a non-negative number"
        );
        // trailing white space and CR line ends, blank lines: as before
        let text = format!("{LADDER_CSV_HEADER} \r\n\r\ns0,1,10,1.5,2,3,4,1,2,0,0,0 \r\n\n");
        let rows = parse_ladder_csv(&text).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].wake_mean_ns, 1.5);
        assert_eq!(
            parse_ladder_csv("").unwrap_err().to_string(),
            format!("empty file (expected the header \"{LADDER_CSV_HEADER}\")")
        );
    }

    #[test]
    fn csv_row_round_trips() {
        let s = sample_summary();
        let row = ladder_csv_row("s2", 3, &s);
        assert_eq!(
            row,
            "s2,3,5,4369.799999999999,13519,13519,13519,4369.799999999999,13519,0,1,0"
        );
        let text = format!("{LADDER_CSV_HEADER}\n{row}\n");
        let rows = parse_ladder_csv(&text).unwrap();
        assert_eq!(rows.len(), 1);
        assert!(rows[0].matches(&LadderRow::from_summary("s2", 3, &s)));
    }

    #[test]
    fn csv_errors_name_line_and_column() {
        let e = parse_ladder_csv("stage,run\n").unwrap_err().to_string();
        assert!(e.starts_with("line 1: header"), "{e}");
        let text = format!("{LADDER_CSV_HEADER}\ns0,1,10,1.5,2,3,x,1,2,0,0,0\n");
        let e = parse_ladder_csv(&text).unwrap_err().to_string();
        assert_eq!(
            e,
            "line 2: column wake_max_ns: \"x\" is not a non-negative integer"
        );
        let text = format!("{LADDER_CSV_HEADER}\ns0,0,10,1.5,2,3,4,1,2,0,0,0\n");
        assert!(
            parse_ladder_csv(&text)
                .unwrap_err()
                .to_string()
                .contains("column run")
        );
        let text = format!("{LADDER_CSV_HEADER}\ns0,1,10\n");
        assert_eq!(
            parse_ladder_csv(&text).unwrap_err().to_string(),
            "line 2: 3 fields, expected 12"
        );
    }

    #[test]
    fn manifest_and_csv_are_bounded() {
        let m = LadderManifest {
            schema: LADDER_SCHEMA.into(),
            created_unix_ns: 1,
            system: sample_summary().system,
            stages: vec!["s0".into()],
            runs: MAX_RUNS + 1,
            duration_s: 1.0,
            loaded: false,
        };
        assert_eq!(
            m.validate().unwrap_err().to_string(),
            "runs: 1001 is not in 1..=1000"
        );
        let mut text = format!("{LADDER_CSV_HEADER}\n");
        let row = "s0,1,10,1.5,2,3,4,1,2,0,0,0\n";
        text.push_str(&row.repeat(MAX_STAGES * MAX_RUNS as usize + 1));
        let e = parse_ladder_csv(&text).unwrap_err().to_string();
        assert_eq!(
            e,
            "line 64002: more than 64000 rows (64 stages × 1000 runs)"
        );
        // a line with a million fields is counted, not collected
        let text = format!("{LADDER_CSV_HEADER}\n{}\n", ",".repeat(1_000_000));
        assert_eq!(
            parse_ladder_csv(&text).unwrap_err().to_string(),
            "line 2: 1000001 fields, expected 12"
        );
    }

    /// The path-based writers of earlier versions, now atomic through the directory: a link
    /// planted at the name is replaced, the file it points to is left alone.
    #[test]
    fn stage_ids() {
        validate_stage_id("s0").unwrap();
        validate_stage_id("rt+shield").unwrap();
        assert!(validate_stage_id("a,b").is_err());
        assert!(validate_stage_id("").is_err());
    }
}
