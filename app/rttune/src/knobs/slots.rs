//! A/B updates (issue 30 item 4): which root filesystem slot this system booted, the state of
//! the other one, and whether this boot has been proved and marked good.
//!
//! Not a real-time knob, but the first thing a technician asks of a controller that was updated
//! in the field: "which image is this, and can it roll back?". Three sources, each read once:
//! - `rauc.slot=` on the kernel command line (the boot script sets it; RAUC's U-Boot
//!   integration, docs/NOTES.md §16), which says whether this is an A/B boot at all;
//! - `rauc status --detailed --output-format=json` through [`crate::Host::rauc_status`]: each
//!   slot's state, its boot status (U-Boot's `BOOT_<x>_LEFT` > 0 is "good") and the bundle
//!   installed in it, and the primary slot (the one U-Boot starts next). Keys as RAUC 1.8's
//!   `r_status_formatter_json` writes them;
//! - the verdicts of `rtcat-health-gate` (rootfs-overlay), one line per decision in
//!   `STATE_DIR/verdicts.log` with the boot id it was made in: RAUC's "good" only says the boot
//!   counter is not exhausted, the gate's line says this very boot proved itself.

use crate::doctor::{Check, Ctx, Verdict, chk};
use crate::facts;
use serde::Deserialize;
use std::collections::BTreeMap;

const ID: &str = "update.slots";
const WHY: &str = "an update that cannot prove itself must roll back to a slot that can; the gate marks a slot good only after rtcat held OP (docs/NOTES.md §16)";
/// The gate's configuration and its default state directory (rootfs-overlay).
const GATE_CONF: &str = "/etc/rtcat/health-gate.conf";
const GATE_STATE_DIR: &str = "/var/lib/rtcat-health-gate";
/// The tail of the verdict log that is read: one line per boot, so this is years of boots.
const LOG_TAIL: usize = 64 * 1024;

/// `rauc status --output-format=json` (the fields this check reads).
#[derive(Debug, Deserialize)]
pub(crate) struct RaucStatus {
    pub(crate) booted: Option<String>,
    pub(crate) boot_primary: Option<String>,
    #[serde(default)]
    pub(crate) slots: Vec<BTreeMap<String, RaucSlot>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RaucSlot {
    pub(crate) class: Option<String>,
    pub(crate) bootname: Option<String>,
    pub(crate) state: Option<String>,
    pub(crate) boot_status: Option<String>,
    pub(crate) slot_status: Option<SlotStatus>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SlotStatus {
    pub(crate) bundle: Option<Bundle>,
    pub(crate) checksum: Option<Checksum>,
    pub(crate) installed: Option<Stamp>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Bundle {
    pub(crate) version: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Checksum {
    pub(crate) sha256: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Stamp {
    pub(crate) timestamp: Option<String>,
}

/// One line of the gate's verdict log.
#[derive(Debug, PartialEq)]
pub(crate) struct GateVerdict {
    pub(crate) when: String,
    pub(crate) good: bool,
    pub(crate) slot: String,
    pub(crate) boot: Option<String>,
    pub(crate) reason: String,
}

/// `TIMESTAMP good|bad slot=X [boot=ID] REASON…`; older lines have no `boot=`.
pub(crate) fn parse_verdict(line: &str) -> Option<GateVerdict> {
    let mut it = line.splitn(3, ' ');
    let when = it.next()?.to_string();
    let good = match it.next()? {
        "good" => true,
        "bad" => false,
        _ => return None,
    };
    let rest = it.next()?;
    let (slot, rest) = rest.split_once(' ').unwrap_or((rest, ""));
    let slot = slot.strip_prefix("slot=")?.to_string();
    let (boot, reason) = match rest.strip_prefix("boot=") {
        Some(r) => {
            let (b, reason) = r.split_once(' ').unwrap_or((r, ""));
            (Some(b.to_string()), reason)
        }
        None => (None, rest),
    };
    Some(GateVerdict {
        when,
        good,
        slot,
        boot,
        reason: reason.trim_start_matches(": ").to_string(),
    })
}

impl RaucSlot {
    fn describe(&self, name: &str) -> String {
        let mut s = format!(
            "{name} ({}): {}, boot {}",
            self.bootname.as_deref().unwrap_or("?"),
            self.state.as_deref().unwrap_or("state unknown"),
            self.boot_status.as_deref().unwrap_or("unknown"),
        );
        let st = self.slot_status.as_ref();
        match st
            .and_then(|s| s.bundle.as_ref())
            .and_then(|b| b.version.as_deref())
        {
            Some(v) => s.push_str(&format!(", bundle {v}")),
            None => s.push_str(", no install record (the image it was flashed with)"),
        }
        if let Some(h) = st
            .and_then(|s| s.checksum.as_ref())
            .and_then(|c| c.sha256.as_deref())
        {
            s.push_str(&format!(" sha256 {}", &h[..h.len().min(12)]));
        }
        if let Some(t) = st
            .and_then(|s| s.installed.as_ref())
            .and_then(|i| i.timestamp.as_deref())
        {
            s.push_str(&format!(", installed {t}"));
        }
        s
    }
}

impl Ctx<'_> {
    /// The gate's verdict of this boot (the last line carrying this boot's id), if any.
    fn gate_verdict(&self) -> Option<GateVerdict> {
        let dir = self
            .root()
            .read_opt(GATE_CONF)
            .and_then(|c| {
                c.lines()
                    .filter_map(|l| l.trim().strip_prefix("STATE_DIR="))
                    .map(|v| v.trim_matches('"').to_string())
                    .next_back()
            })
            .filter(|d| d.starts_with('/'))
            .unwrap_or_else(|| GATE_STATE_DIR.to_string());
        let boot_id = self.root().read_opt("/proc/sys/kernel/random/boot_id")?;
        let log = self
            .root()
            .read_bytes(&format!("{dir}/verdicts.log"))
            .ok()?;
        let tail = String::from_utf8_lossy(&log[log.len().saturating_sub(LOG_TAIL)..]).into_owned();
        tail.lines()
            .rev()
            .filter_map(parse_verdict)
            .find(|v| v.boot.as_deref() == Some(boot_id.as_str()))
    }

    pub(crate) fn ab_slots(&self) -> Check {
        let exp = "booted slot marked good by the health gate this boot; the other slot good (a fallback)";
        let Some(booted) = facts::cmdline_get(&self.cmdline, "rauc.slot") else {
            return chk(ID, Verdict::NA)
                .obs("no rauc.slot= on the kernel command line: not an A/B image")
                .exp(exp)
                .why(WHY);
        };
        let json = match self.d.host.rauc_status() {
            Ok(Some(j)) => j,
            Ok(None) => {
                return chk(ID, Verdict::Fail)
                    .obs(format!("booted slot {booted}, but rauc is not installed"))
                    .exp(exp)
                    .why(WHY)
                    .fix("install RAUC (the image's kas fragment kas/rauc.yml adds it)");
            }
            Err(e) => {
                return chk(ID, Verdict::Warn)
                    .obs(format!("booted slot {booted}; rauc status failed: {e}"))
                    .exp(exp)
                    .why(WHY)
                    .fix("systemctl status rauc; journalctl -u rauc");
            }
        };
        let st: RaucStatus = match serde_json::from_str(&json) {
            Ok(s) => s,
            Err(e) => {
                return chk(ID, Verdict::Warn)
                    .obs(format!(
                        "booted slot {booted}; rauc status printed what this rtcat cannot read ({e})"
                    ))
                    .exp(exp)
                    .why(WHY);
            }
        };
        let slots: Vec<(&String, &RaucSlot)> = st.slots.iter().flat_map(|m| m.iter()).collect();
        let mine = slots
            .iter()
            .find(|(_, s)| s.bootname.as_deref() == Some(booted.as_str()));
        let Some((mine_name, mine)) = mine else {
            return chk(ID, Verdict::Fail)
                .obs(format!(
                    "booted slot {booted}, which no slot of RAUC's system.conf has as bootname"
                ))
                .exp(exp)
                .why(WHY)
                .fix("the boot script's rauc.slot= and system.conf's bootname= must agree");
        };
        let others: Vec<&(&String, &RaucSlot)> = slots
            .iter()
            .filter(|(n, s)| n != mine_name && s.bootname.is_some() && s.class == mine.class)
            .collect();
        let gate = self.gate_verdict();

        let mut problems: Vec<(Verdict, String)> = Vec::new();
        if st.booted.as_deref().is_some_and(|b| b != booted) {
            problems.push((
                Verdict::Warn,
                format!(
                    "RAUC says slot {} is booted, the command line says {booted}",
                    st.booted.as_deref().unwrap_or("?")
                ),
            ));
        }
        match &gate {
            Some(v) if v.good => {}
            Some(v) => problems.push((
                Verdict::Fail,
                format!("the health gate failed this boot: {}", v.reason),
            )),
            None => problems.push((
                Verdict::Warn,
                "the health gate has not decided this boot yet (or did not run)".into(),
            )),
        }
        if mine.boot_status.as_deref() == Some("bad") {
            problems.push((
                Verdict::Fail,
                format!("U-Boot counts slot {booted} as bad: the next reboot leaves it"),
            ));
        }
        if others.is_empty() {
            problems.push((Verdict::Warn, "no other slot to fall back to".into()));
        }
        for (n, s) in &others {
            if s.boot_status.as_deref() != Some("good") {
                problems.push((
                    Verdict::Warn,
                    format!(
                        "the other slot {n} ({}) is not bootable (boot {}): an update that fails now cannot roll back",
                        s.bootname.as_deref().unwrap_or("?"),
                        s.boot_status.as_deref().unwrap_or("unknown")
                    ),
                ));
            }
        }
        if let Some(p) = st.boot_primary.as_deref()
            && p != mine_name.as_str()
        {
            problems.push((
                Verdict::Warn,
                format!("the next boot starts slot {p}, not this one (an installed update waits for a reboot)"),
            ));
        }

        let verdict = problems
            .iter()
            .map(|(v, _)| *v)
            .fold(Verdict::Pass, |a, v| match (a, v) {
                (Verdict::Fail, _) | (_, Verdict::Fail) => Verdict::Fail,
                (Verdict::Warn, _) | (_, Verdict::Warn) => Verdict::Warn,
                _ => Verdict::Pass,
            });
        let marked = match &gate {
            Some(v) if v.good => format!("marked good {}", v.when),
            Some(v) => format!("refused {}", v.when),
            None => "not marked yet".into(),
        };
        let other = others
            .first()
            .map(|(n, s)| {
                format!(
                    "{} ({n}) boot {}",
                    s.bootname.as_deref().unwrap_or("?"),
                    s.boot_status.as_deref().unwrap_or("unknown")
                )
            })
            .unwrap_or_else(|| "none".into());
        let mut details: Vec<String> = problems.iter().map(|(_, p)| p.clone()).collect();
        details.extend(slots.iter().map(|(n, s)| s.describe(n)));
        if let Some(v) = &gate {
            details.push(format!(
                "gate: {} at {} slot={}: {}",
                if v.good { "good" } else { "bad" },
                v.when,
                v.slot,
                v.reason
            ));
        }
        chk(ID, verdict)
            .obs(format!(
                "booted {booted} ({mine_name}), {marked}; other {other}"
            ))
            .exp(exp)
            .why(WHY)
            .fix_if(
                !problems.is_empty(),
                "journalctl -u rtcat-health-gate (the gate's reason); `rauc status --detailed`; install a good bundle to restore the fallback",
            )
            .details(details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_lines_old_and_new() {
        let v = parse_verdict(
            "2026-12-04T10:00:00Z good slot=B boot=1b2c-3d rtcat held OP for 60s (3 subdevices)",
        )
        .unwrap();
        assert!(v.good);
        assert_eq!(v.slot, "B");
        assert_eq!(v.boot.as_deref(), Some("1b2c-3d"));
        assert_eq!(v.reason, "rtcat held OP for 60s (3 subdevices)");
        let old = parse_verdict("2026-12-03T10:00:00Z bad slot=A not proved within 300s").unwrap();
        assert!(!old.good);
        assert_eq!(old.boot, None);
        assert_eq!(old.reason, "not proved within 300s");
        assert_eq!(parse_verdict("2026 maybe slot=A x"), None);
        assert_eq!(parse_verdict("garbage"), None);
        assert_eq!(parse_verdict("t good A reason"), None);
    }
}
