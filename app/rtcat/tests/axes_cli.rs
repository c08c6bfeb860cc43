//! `rtcat bench` with `[[axis]]`: the demo of examples/cia402 runs, enables and moves both axes,
//! and reports them in summary.json and the human table.

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
    }
    assert!(
        stderr.contains("state reached") && stderr.contains("operation enabled"),
        "{stderr}"
    );
}
