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

/// Machine-dependent (`ecsim::noise`): the bring-up may time out, and without real-time
/// settings a loaded machine misses periods, which the loop skips (seen: 1026 cycles in the 3 s
/// with one CPU held busy). The run has to get past the fault at cycle 1000 with room for the
/// re-arm and the parts; what the controller did with the cycles it got is asserted once.
#[test]
fn the_controller_counts_parts_and_stops_on_bad_cycles() {
    let (line, stderr) = ecsim::noise::within_machine_noise("the controller example", |_| {
        let out = Command::new(example())
            .args(["--sim", "--no-rt", "--seconds", "3", "--segment"])
            .arg(segment())
            .args(["--fault-at", "1000", "--fault", "drop-next 5"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        ecsim::noise::exited_ok("controller", out.status, &format!("{stdout}{stderr}"))?;
        let line = stdout
            .lines()
            .find(|l| l.starts_with("controller: cycles="))
            .unwrap_or_else(|| panic!("no summary line in {stdout}"))
            .to_string();
        // 1000 before the fault, 5 bad, 99 to re-arm and 200 running for more than 100 parts
        // (1304), with room for a few frames the machine loses (each stops the motor for 100
        // cycles, so they decide the parts too).
        ecsim::noise::ensure(
            field(&line, "cycles") > 1500 && field(&line, "parts") > 100,
            || format!("too few cycles or parts to judge: {line}"),
        )?;
        Ok((line, stderr))
    });
    let line = line.as_str();
    let (cycles, parts, bad, stopped) = (
        field(line, "cycles"),
        field(line, "parts"),
        field(line, "bad_cycles"),
        field(line, "stopped_cycles"),
    );
    // The simulated EL1008's channel 1 is bit 0 of its cycle counter: it toggles every cycle,
    // so a part passes every other good cycle.
    assert!(parts * 2 + 10 >= cycles - bad - stopped, "{line}");
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
