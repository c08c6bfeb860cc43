//! The doctor report: one [`Check`] per knob, its [`Verdict`], and the text and JSON forms.

use serde::Serialize;

/// JSON schema identifier of [`Report`].
pub const SCHEMA: &str = "rttune.doctor/1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "N/A")]
    NA,
    #[serde(rename = "WARN")]
    Warn,
    #[serde(rename = "FAIL")]
    Fail,
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
            Verdict::NA => "N/A",
        }
    }
}

/// One check's result.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub id: &'static str,
    pub verdict: Verdict,
    pub observed: String,
    pub expected: String,
    pub why: String,
    /// Command that fixes it ("" when nothing to fix).
    pub fix: String,
    /// True when the fix takes effect only after a reboot.
    pub reboot: bool,
    /// Offending items (IRQs, tasks, …), at most [`MAX_DETAILS`].
    pub details: Vec<String>,
}

pub const MAX_DETAILS: usize = 40;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub na: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub root: String,
    pub rt_cpus: String,
    pub housekeeping_cpus: String,
    pub iface: Option<String>,
    pub kernel: String,
    pub checks: Vec<Check>,
    pub summary: Summary,
}

impl Report {
    pub fn exit_code(&self) -> i32 {
        if self.summary.fail > 0 { 1 } else { 0 }
    }

    pub fn get(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }

    /// `ID VERDICT` lines, used by golden tests.
    pub fn verdict_lines(&self) -> String {
        self.checks
            .iter()
            .map(|c| format!("{:<26} {}\n", c.id, c.verdict.as_str()))
            .collect()
    }

    pub fn to_text(&self) -> String {
        let mut s = format!(
            "rtcat doctor: RT CPU {} · housekeeping {} · NIC {} · kernel {}\n",
            self.rt_cpus,
            self.housekeeping_cpus,
            self.iface.as_deref().unwrap_or("(none)"),
            self.kernel
        );
        for c in &self.checks {
            s.push_str(&format!(
                "{:<4} {:<24} observed: {} | expected: {} | why: {} | fix: {} | reboot: {}\n",
                c.verdict.as_str(),
                c.id,
                c.observed,
                c.expected,
                c.why,
                if c.fix.is_empty() { "-" } else { &c.fix },
                if c.reboot { "yes" } else { "no" }
            ));
            for d in &c.details {
                s.push_str(&format!("       - {d}\n"));
            }
        }
        s.push_str(&format!(
            "summary: {} PASS, {} WARN, {} FAIL, {} N/A\n",
            self.summary.pass, self.summary.warn, self.summary.fail, self.summary.na
        ));
        s
    }
}
