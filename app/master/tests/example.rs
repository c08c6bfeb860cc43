//! The controller example (`examples/controller.rs`) runs against the simulated I/O segment:
//! it counts parts, and a fault injected into the segment makes it stop its motor for the bad
//! cycles and the re-arm delay after them. `cargo test` builds the examples before it runs the
//! tests; this one runs the binary it built.

use std::path::{Path, PathBuf};
use std::process::Command;

fn example() -> PathBuf {
    // target/<profile>/deps/example-HASH -> target/<profile>/examples/controller
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).unwrap();
    let p = profile.join("examples").join("controller");
    assert!(
        p.is_file(),
        "{} not built (cargo test builds examples)",
        p.display()
    );
    p
}

fn segment() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/segment-io.toml")
}

fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} missing in {line:?}"))
        .parse()
        .unwrap()
}

#[test]
fn the_controller_counts_parts_and_stops_on_bad_cycles() {
    let out = Command::new(example())
        .args(["--sim", "--no-rt", "--seconds", "3", "--segment"])
        .arg(segment())
        .args(["--fault-at", "1000", "--fault", "drop-next 5"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}{stderr}", out.status);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("controller: cycles="))
        .unwrap_or_else(|| panic!("no summary line in {stdout}"));
    let (cycles, parts, bad, stopped) = (
        field(line, "cycles"),
        field(line, "parts"),
        field(line, "bad_cycles"),
        field(line, "stopped_cycles"),
    );
    assert!(cycles > 1500, "{line}");
    // The simulated EL1008's channel 1 is bit 0 of its cycle counter: it toggles every cycle,
    // so a part passes every other good cycle.
    assert!(parts * 2 + 10 >= cycles - bad - stopped, "{line}");
    assert!(parts > 100, "{line}");
    // Five dropped frames: five bad cycles; the motor stays stopped for them and until 100 good
    // cycles in a row have passed after them (99 more), and for the first 99 cycles of the run.
    assert!(bad >= 5, "{line}");
    assert!(stopped >= bad + 2 * 99, "{line}");
    assert!(stderr.contains("stopping (Duration)"), "{stderr}");
}

#[test]
fn a_wrong_entry_name_exits_2_naming_it() {
    let out = Command::new(example())
        .args([
            "--sim",
            "--no-rt",
            "--seconds",
            "1",
            "--sensor",
            "Channel 9.Input",
            "--segment",
        ])
        .arg(segment())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"Channel 9.Input\""), "{stderr}");
}
