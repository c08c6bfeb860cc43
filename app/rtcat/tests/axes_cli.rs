//! `rtcat bench` with `[[axis]]`: the demo of examples/cia402 runs, enables and moves both axes,
//! and reports them in summary.json and the human table; `rtcat config from-bus` followed by
//! the same `[[axis]]` entries runs without hand edits.

use std::path::Path;
use std::process::Command;

#[test]
fn bench_with_axes_reports_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("summary-out.json");
    let r = Command::new(env!("CARGO_BIN_EXE_rtcat"))
        .args(["bench", "--sim", "--no-rt", "--duration", "4", "--segment"])
        .arg(root.join("examples/cia402/segment.toml"))
        .arg("--config")
        .arg(root.join("examples/cia402/rtcat.toml"))
        .arg("--out")
        .arg(out.path().join("runs"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let axes = s["axes"].as_array().expect("an axes list");
    assert_eq!(axes.len(), 2);
    for (a, name) in axes.iter().zip(["x", "y"]) {
        assert_eq!(a["name"], name);
        assert_eq!(a["state_reached"], "operation enabled", "{a}");
        assert_eq!(a["faults"], 0, "{a}");
        let f = &a["following_error_counts"];
        let (p99, max) = (f["p99"].as_u64().unwrap(), f["max"].as_u64().unwrap());
        // A moving axis lags (the drive model's 2 ms), but by less than the drive's window
        // 0x6065 = 10000 counts.
        assert!(p99 > 0 && p99 <= max && max < 10_000, "{a}");
        // The drive's 0x60F4 (the generated mapping has it) beside the master's own; no bad
        // cycle here, the default bound.
        assert!(a["drive_following_error_counts"]["max"].is_u64(), "{a}");
        let (n, from) = if name == "x" {
            (3, "default")
        } else {
            (5, "config")
        };
        assert_eq!(a["hold_bad_cycles"], n, "{a}");
        assert_eq!(a["hold_bad_cycles_from"], from, "{a}");
        assert_eq!(a["held_cycles"], 0, "{a}");
    }
    assert!(
        stderr.contains("state reached") && stderr.contains("operation enabled"),
        "{stderr}"
    );
}

fn rtcat(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rtcat"))
        .args(args)
        .output()
        .unwrap()
}

/// `rtcat config from-bus` on the simulated drives, the `[[axis]]` entries of the example
/// appended as they are: the file checks and the axes run. With a mapping that lacks what an
/// axis needs, the error names the `[[device]]` entry to delete.
#[test]
fn from_bus_then_axes_runs_without_hand_edits() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let segment = root.join("examples/cia402/segment.toml");
    let segment = segment.to_str().unwrap();
    let r = rtcat(&["config", "from-bus", "--sim", "--segment", segment]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let from_bus = String::from_utf8(r.stdout).unwrap();
    assert_eq!(
        from_bus.lines().filter(|l| *l == "[[device]]").count(),
        2,
        "{from_bus}"
    );
    let example = std::fs::read_to_string(root.join("examples/cia402/rtcat.toml")).unwrap();
    let axes = &example[example.find("\n[[axis]]").unwrap()..];
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rtcat.toml");
    let text = format!("{from_bus}\n[cycle]\nperiod_us = 1000\n[dc]\nenabled = true\n\n{axes}");
    std::fs::write(&cfg, &text).unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let r = rtcat(&["config", "check", cfg_s]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let json = dir.path().join("summary.json");
    let runs = dir.path().join("runs");
    let r = rtcat(&[
        "bench",
        "--sim",
        "--no-rt",
        "--duration",
        "3",
        "--segment",
        segment,
        "--config",
        cfg_s,
        "--out",
        runs.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let axes_out = s["axes"].as_array().expect("an axes list");
    assert_eq!(axes_out.len(), 2);
    for a in axes_out {
        assert_eq!(a["state_reached"], "operation enabled", "{a}");
        assert!(a["following_error_counts"]["max"].as_u64() > Some(0), "{a}");
        // from-bus kept the drive's 0x60F4: shown beside.
        assert!(a["drive_following_error_counts"]["max"].is_u64(), "{a}");
    }
    // Drive 0's mapping without the position actual (its size fixed to match): the error names
    // the entry to delete.
    let line = "  { entry = \"0x6064:00:32\", name = \"Position actual value\" },\n";
    assert!(text.contains(line), "{text}");
    std::fs::write(
        &cfg,
        text.replacen(line, "", 1)
            .replacen("input_bytes = 19", "input_bytes = 15", 1),
    )
    .unwrap();
    let r = rtcat(&["config", "check", cfg_s]);
    let e = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{e}");
    assert!(
        e.contains("axis[0]")
            && e.contains("0x6064:00:32")
            && e.contains("device[0], position 0")
            && e.contains("delete that [[device]] entry"),
        "{e}"
    );
}
