//! The master against devices that take the time real ones take (`[device.timing]` in the
//! segment file, docs/NOTES.md §7.4): SII reads that stay BUSY, AL state changes that keep the
//! old state for a while, mailbox answers that come late. Bring-up must wait them out and reach
//! OP with every cycle's WKC right — it did before the simulator had time, which is why this
//! test exists.

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Added to each device of the CoE example: an ET1100's SII read time and, for the AL state
/// changes, far more than the master takes without them on this machine (100–300 ms from start
/// to OP), so that the lower bound below tells a waited-for bring-up from one that ignored the
/// devices' time; still inside the master's 5 s state timeout.
const TIMING: &str = "
[device.timing]
sii_read_us = 680
init_preop_us = 10000
preop_safeop_us = 600000
safeop_op_us = 600000
down_us = 2000
mailbox_us = 1000
";

/// No device can be in OP sooner: PRE-OP -> SAFE-OP -> OP of [`TIMING`].
const OP_NOT_BEFORE_MS: f64 = 1210.0;

/// The CoE example (`examples/coe/segment.toml`) with [`TIMING`] after each device.
fn timed_coe_segment() -> String {
    let example = include_str!("../../../examples/coe/segment.toml");
    let mut out = String::new();
    for (k, part) in example.split("\n[[device]]").enumerate() {
        if k > 0 {
            out.push_str("\n[[device]]");
            out.push_str(part.trim_end());
            out.push('\n');
            out.push_str(TIMING);
        } else {
            out.push_str(part);
        }
    }
    out
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn a_segment_of_devices_with_their_own_time_reaches_op_and_exchanges() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join("timed.toml");
    std::fs::write(&seg, timed_coe_segment()).unwrap();
    assert_eq!(
        timed_coe_segment().matches("[device.timing]").count(),
        3,
        "every device of the example is timed"
    );
    let out = dir.path().join("out");
    let started = unix_ns();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtcat"))
        .args(["bench", "--sim", "--no-rt", "--duration", "1", "--segment"])
        .arg(&seg)
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "bench did not end within 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let wkc = &summary["wkc"];
    assert_eq!(wkc["expected"], 7, "{summary:#}");
    assert_eq!(wkc["mismatches"], 0, "{summary:#}");
    assert!(summary["cycles"].as_u64().unwrap() > 100, "{summary:#}");
    // OP came no sooner than the devices allow (a lower bound whatever the machine's speed).
    let events = std::fs::read_to_string(out.join("events.log")).unwrap();
    let op_at: u128 = events
        .lines()
        .find(|l| l.contains("state_change") && l.contains("state=OP"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no state change to OP in events.log:\n{events}"));
    let bring_up_ms = (op_at - started) as f64 / 1e6;
    assert!(
        bring_up_ms >= OP_NOT_BEFORE_MS,
        "OP {bring_up_ms:.1} ms after the start: the devices' time was not waited for"
    );
}
