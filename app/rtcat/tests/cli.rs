//! The binary as a user runs it: exit codes, messages, signals, files.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn rtcat() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rtcat"))
}

#[test]
fn malformed_config_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.toml");
    std::fs::write(&f, "[cycle]\nperiod_us = 50\n").unwrap();
    for args in [
        vec!["config", "check"],
        vec!["bench", "--sim", "--duration", "1", "--config"],
        vec!["run", "--config"],
    ] {
        let out = rtcat().args(&args).arg(&f).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cycle.period_us = 50: must be 125..=100000"),
            "{args:?}: {err}"
        );
    }
    std::fs::write(&f, "[cycle]\nperiod = 1000\n").unwrap();
    let out = rtcat().args(["config", "check"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `period`"));
    let out = rtcat()
        .args(["config", "check", "/nonexistent/rtcat.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/rtcat.toml"));
}

/// The test-only `--sim-unplug POS` (a device of the in-process segment whose cable starts
/// pulled): position 0 (the link) or one the segment does not have is a usage error naming it.
#[test]
fn sim_unplug_outside_the_segment_exits_2_naming_it() {
    for (pos, want) in [
        (
            "0",
            "--sim-unplug 0: not a position of the segment after the first (1..=2",
        ),
        (
            "3",
            "--sim-unplug 3: not a position of the segment after the first (1..=2",
        ),
    ] {
        let out = rtcat()
            .args(["bench", "--sim", "--duration", "1", "--sim-unplug", pos])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{pos}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{pos}: {err}");
    }
}

#[test]
fn shipped_configs_are_valid() {
    let top = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for f in [
        "app/master/rtcat.example.toml",
        "rootfs-overlay/etc/rtcat/rtcat.toml",
    ] {
        let out = rtcat()
            .args(["config", "check"])
            .arg(format!("{top}/{f}"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = rtcat().args(["config", "example"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("[tune.coalesce]"));
}

#[test]
fn bad_segment_file_and_arguments_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join("seg.toml");
    std::fs::write(&seg, "[[device]]\noutputs = 9999\n").unwrap();
    let out = rtcat()
        .args(["bench", "--sim", "--no-rt", "--duration", "1", "--segment"])
        .arg(&seg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("device[0].outputs = 9999"));
    let out = rtcat()
        .args(["bench", "--sim", "--duration", "-3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = rtcat()
        .args(["bench", "--sim", "--period-us", "10", "--no-rt"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cycle.period_us = 10"));
    // A wait mode only the inline cycle has, with a TX/RX thread; a mode that does not exist.
    let out = rtcat()
        .args([
            "bench", "--sim", "--no-rt", "--txrx", "thread", "--wait", "busy",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cycle.wait = \"busy\": needs cycle.txrx = \"inline\""),
        "{err}"
    );
    let out = rtcat()
        .args(["bench", "--sim", "--no-rt", "--wait", "spin"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'spin'"));
    let out = rtcat()
        .args(["sim-ctl", "--control", "/nonexistent", "explode"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown command"));
}

/// The floor pings over an interface: with the in-process segment or without a bus there is
/// no wire to ping over, said before anything runs.
#[test]
fn floor_needs_an_interface() {
    for other in ["--sim", "--timer-only"] {
        let out = rtcat()
            .args(["bench", "--floor", other, "--no-rt", "--duration", "1"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{other}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--floor") && err.contains(other), "{err}");
    }
    let out = rtcat()
        .args(["bench", "--floor", "--iface", "rtcat-none0", "--no-rt"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--iface"));
}

#[test]
fn sigterm_writes_results_and_leaves_the_segment_in_init() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut child = rtcat()
        .args([
            "bench",
            "--sim",
            "--no-rt",
            "--duration",
            "60",
            "--period-us",
            "2000",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let t = Instant::now();
    let status = child.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "stops promptly");
    // Like a shell reports a process ended by SIGTERM: 128 + 15.
    assert_eq!(status.code(), Some(143), "{status:?}");
    let s = rtcat_results::Summary::read(&out.join("summary.json")).expect("summary written");
    assert!(s.cycles > 100, "{}", s.cycles);
    assert!(s.duration_s < 30.0);
    let ev = std::fs::read_to_string(out.join("events.log")).unwrap();
    assert!(ev.contains("shutdown outputs=0 segment=INIT"), "{ev}");
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("stopped: by a signal (SIGTERM)"), "{err}");
    let stop = s.stop.expect("summary.json says why the run stopped");
    assert_eq!(stop.reason, rtcat_results::StopReason::Signal);
    assert_eq!(stop.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(stop.requested_duration_s, Some(60.0));
}

#[test]
fn timer_only_and_json_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let out = rtcat()
        .args([
            "bench",
            "--timer-only",
            "--no-rt",
            "--duration",
            "1",
            "--json",
            "-",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: rtcat_results::Summary = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    s.validate().unwrap();
    assert_eq!(s.mode, rtcat_results::Mode::TimerOnly);
    assert!(s.rtt_ns.is_none());
    assert_eq!(s.wkc.expected, None);
    assert!(s.cycles > 500);
    assert!(!dir.path().join("rtt_ns.hdr").exists());
}

#[test]
fn missing_privileges_name_the_capability() {
    if nix::unistd::geteuid().is_root() {
        eprintln!("skipped: running as root, privileges are not missing");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = rtcat()
        .args(["bench", "--timer-only", "--duration", "1", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CAP_IPC_LOCK")
            || err.contains("CAP_SYS_NICE")
            || err.contains("cpu_dma_latency"),
        "{err}"
    );
}

#[test]
fn config_cpus_normalises_and_names_the_bad_item() {
    let out = rtcat()
        .args(["config", "cpus", "5,0-2,1,3"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0-3,5\n");
    // sysfs lists end in a newline; the JSON form is what the CI scripts read
    let out = rtcat()
        .args(["config", "cpus", "--json", "6-7\n"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"list": "6-7", "count": 2, "cpus": [6, 7]})
    );
    let out = rtcat()
        .args(["config", "cpus", "--members", "3,0-1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0 1 3\n");
    for (bad, named) in [
        ("", "empty CPU list"),
        ("1,,2", "\"\" is not a CPU number"),
        ("7-6", "\"7-6\" runs backwards"),
        ("6,x", "\"x\" is not a CPU number"),
        ("-1", "\"-1\" is not a CPU number"),
        ("4096", "CPU 4096 is out of range"),
    ] {
        let out = rtcat().args(["config", "cpus", bad]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{bad:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(named), "{bad:?}: {err}");
    }
}
