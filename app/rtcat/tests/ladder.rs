//! `rtcat ladder` as a user runs it: every artefact, every knob restored (fake sysfs trees and, as
//! root, the live system), Ctrl-C in the middle, bad arguments.
//!
//! The tests share one lock: the live test moves tasks off the RT CPU for a moment, which must not
//! overlap the other ladders (they read the CPUs they may use).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rtcat_results::{LadderManifest, LadderRow, Summary, parse_ladder_csv};
use rttune::testkit::{FakeTree, TreeSpec, snapshot};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn rtcat() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rtcat"))
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The RT CPU for the tests: the last CPU this process may use (as the ladder picks it).
fn rt_cpu() -> usize {
    *rtlab::cpus::usable_cpus().unwrap().last().unwrap()
}

fn fake_tree() -> (tempfile::TempDir, FakeTree) {
    let d = tempfile::tempdir().unwrap();
    let t = FakeTree::rk3588(d.path(), &TreeSpec::default());
    (d, t)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    );
}

fn diff(a: &BTreeMap<PathBuf, Vec<u8>>, b: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<String> {
    let mut d = Vec::new();
    for (k, v) in a {
        match b.get(k) {
            None => d.push(format!("{}: gone", k.display())),
            Some(w) if w != v => d.push(format!(
                "{}: {:?} -> {:?}",
                k.display(),
                text(v).trim(),
                text(w).trim()
            )),
            _ => {}
        }
    }
    for k in b.keys().filter(|k| !a.contains_key(*k)) {
        d.push(format!("{}: new", k.display()));
    }
    d
}

fn log_of(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("ladder-log.json")).unwrap()).unwrap()
}

/// Results of every item of `action` ("tune_apply" / "tune_restore") of `stage`'s runs.
fn results(log: &serde_json::Value, stage: &str, action: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for r in log["runs"].as_array().unwrap() {
        if r["stage"] != stage || r[action].is_null() {
            continue;
        }
        for i in r[action]["items"].as_array().unwrap() {
            v.push((
                i["id"].as_str().unwrap().to_string(),
                i["result"].as_str().unwrap().to_string(),
            ));
        }
    }
    v
}

#[test]
fn ladder_on_a_fake_root_writes_every_artefact_and_restores_every_knob() {
    let _g = serial();
    if !is_root() {
        eprintln!("skipped: stages s1..s4 run SCHED_FIFO, which needs root");
        return;
    }
    let (_td, tree) = fake_tree();
    let before = snapshot(&tree.root);
    let out_td = tempfile::tempdir().unwrap();
    let out = out_td.path().join("ladder");
    // Bring-up timeouts a busy shared machine cannot break (a 100 ms PDU timeout did once, with
    // four builds beside the test: "transition to SAFE-OP: timeout: PDU"); what the ladder
    // measures is the cycle, not the bring-up.
    let cfg = out_td.path().join("rtcat.toml");
    std::fs::write(
        &cfg,
        "[bus]\ninit_pdu_timeout_ms = 2000\ninit_eeprom_timeout_ms = 2000\n",
    )
    .unwrap();
    let o = rtcat()
        .args(["ladder", "--sim", "--stages", "s0,s2,s4", "--runs", "2"])
        .args(["--duration", "0.5", "--cpu", &rt_cpu().to_string()])
        .arg("--config")
        .arg(&cfg)
        .arg("--root")
        .arg(&tree.root)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    ok(&o, "rtcat ladder");
    // every knob is back, byte for byte, and the journal is gone
    let after = snapshot(&tree.root);
    assert!(
        after == before,
        "fake tree differs after the ladder: {:?}",
        diff(&before, &after)
    );
    assert!(!out.join("tune-state.json").exists());

    // the table on stdout, also in report.md
    let table = text(&o.stdout);
    for s in ["| s0 |", "| s2 |", "| s4 |"] {
        assert!(table.contains(s), "{s} missing from\n{table}");
    }
    assert_eq!(
        std::fs::read_to_string(out.join("report.md")).unwrap(),
        table
    );

    // manifest, csv, runs
    let m = LadderManifest::read(&out.join("manifest.json")).unwrap();
    assert_eq!(m.stages, ["s0", "s2", "s4"]);
    assert_eq!((m.runs, m.duration_s, m.loaded), (2, 0.5, false));
    let rows = parse_ladder_csv(&std::fs::read_to_string(out.join("ladder.csv")).unwrap()).unwrap();
    assert_eq!(rows.len(), 6);
    for (i, (st, k)) in [
        ("s0", 1),
        ("s0", 2),
        ("s2", 1),
        ("s2", 2),
        ("s4", 1),
        ("s4", 2),
    ]
    .iter()
    .enumerate()
    {
        let rd = out.join(st).join(format!("run{k}"));
        for f in [
            "summary.json",
            "wake_lateness_ns.hdr",
            "exec_ns.hdr",
            "bench.log",
            "tune.json",
        ] {
            assert!(rd.join(f).is_file(), "{}/{f} missing", rd.display());
        }
        let s = Summary::read(&rd.join("summary.json")).unwrap();
        assert_eq!(s.stage.as_deref(), Some(*st));
        assert!(
            s.cycles >= 300,
            "{st} run {k}: {} cycles in 0.5 s",
            s.cycles
        );
        assert!(rows[i].matches(&LadderRow::from_summary(st, *k, &s)));
        // s0 plain, s2/s4 pinned SCHED_FIFO on the RT CPU
        let sys = &s.system;
        if *st == "s0" {
            assert!(sys.no_rt && sys.cpu.is_none(), "{st}: {sys:?}");
        } else {
            assert_eq!(sys.cpu, Some(rt_cpu() as u32), "{st}");
            assert_eq!(sys.priority, 80, "{st}");
        }
    }

    // what the stages changed on the fake tree, and that each change was put back
    let log = log_of(&out);
    assert_eq!(log["finished"], true);
    assert_eq!(log["runs"].as_array().unwrap().len(), 6);
    let gov = "file:/sys/devices/system/cpu/cpufreq/policy".to_string();
    for st in ["s2", "s4"] {
        let applied = results(&log, st, "tune_apply");
        assert!(
            applied
                .iter()
                .any(|(id, r)| id.starts_with(&gov) && r == "applied"),
            "{st}: governor not applied: {applied:?}"
        );
        let restored = results(&log, st, "tune_restore");
        assert!(
            restored.iter().all(|(_, r)| !r.starts_with("FAILED")),
            "{st}: {restored:?}"
        );
        assert!(
            restored
                .iter()
                .any(|(id, r)| id.starts_with(&gov) && r == "restored")
        );
    }
    let s4 = results(&log, "s4", "tune_apply");
    for id in [
        "file:/proc/irq/default_smp_affinity",
        "file:/sys/devices/virtual/workqueue/cpumask",
        "file:/proc/sys/kernel/timer_migration",
    ] {
        assert!(
            s4.iter().any(|(i, r)| i == id && r == "applied"),
            "s4: {id} not applied: {s4:?}"
        );
    }
    // s0 touches nothing; s2 only the governor
    assert!(results(&log, "s0", "tune_apply").is_empty());
    assert!(
        results(&log, "s2", "tune_apply")
            .iter()
            .all(|(id, _)| id.starts_with(&gov))
    );
    // --sim has no NIC: coalescing is recorded as N/A, not fatal
    let notes = log["notes"].to_string();
    assert!(notes.contains("coalesce N/A here"), "{notes}");

    // rtcat report reads the directory; the plots are there
    let r = rtcat().arg("report").arg(&out).output().unwrap();
    ok(&r, "rtcat report");
    assert!(text(&r.stdout).contains("| s4 |"));
    let plots: Vec<String> = std::fs::read_dir(out.join("plots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for p in [
        "wake-histogram-ladder.png",
        "wake-percentiles.svg",
        "wake-bars-ladder.png",
    ] {
        assert!(plots.iter().any(|f| f == p), "{p} not in {plots:?}");
    }
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a child of process `parent` has a SIGINT handler installed (`SigCgt` in its status).
fn bench_catches_sigint(parent: u32) -> bool {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return false;
    };
    rd.flatten().any(|e| {
        let Ok(st) = std::fs::read_to_string(e.path().join("status")) else {
            return false;
        };
        let field = |k: &str| {
            st.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
        };
        field("PPid:").is_some_and(|p| p == parent.to_string())
            && field("SigCgt:")
                .and_then(|m| u64::from_str_radix(&m, 16).ok())
                .is_some_and(|m| m & (1 << (libc_sigint() - 1)) != 0)
    })
}

fn libc_sigint() -> u32 {
    nix::sys::signal::Signal::SIGINT as u32
}

/// Starts a fake-root ladder s0,s4 (1 run each, `secs` s) and returns once s4's knobs are applied
/// and its bench is running.
fn ladder_in_s4(tree: &FakeTree, out: &Path, secs: &str) -> std::process::Child {
    let before = snapshot(&tree.root);
    let child = rtcat()
        .args(["ladder", "--sim", "--stages", "s0,s4", "--runs", "1"])
        .args(["--duration", secs, "--cpu", &rt_cpu().to_string()])
        .arg("--root")
        .arg(&tree.root)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bench_log = out.join("s4/run1/bench.log");
    wait_for("s4's bench to start", Duration::from_secs(60), || {
        bench_log.exists()
    });
    // and to be ready for a signal (on a loaded machine it may take a while to get there)
    let ladder = child.id();
    wait_for(
        "s4's bench to catch SIGINT",
        Duration::from_secs(60),
        || bench_catches_sigint(ladder),
    );
    // the shield is in effect on the fake tree right now
    let during = snapshot(&tree.root);
    assert!(
        during != before,
        "s4 is running but nothing on the fake tree changed"
    );
    std::thread::sleep(Duration::from_millis(300));
    child
}

fn partial_ladder_checks(tree_before: &BTreeMap<PathBuf, Vec<u8>>, tree: &FakeTree, out: &Path) {
    let after = snapshot(&tree.root);
    assert!(
        &after == tree_before,
        "fake tree not restored after the signal: {:?}",
        diff(tree_before, &after)
    );
    assert!(!out.join("tune-state.json").exists());
    // s0 completed, s4 interrupted and kept aside
    let rows = parse_ladder_csv(&std::fs::read_to_string(out.join("ladder.csv")).unwrap()).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].stage, "s0");
    assert!(out.join("s4/run1.interrupted/tune.json").is_file());
    assert!(!out.join("s4/run1").exists());
    let log = log_of(out);
    assert_eq!(log["finished"], false);
    let runs = log["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["status"], "interrupted");
    assert!(
        results(&log, "s4", "tune_restore")
            .iter()
            .all(|(_, r)| !r.starts_with("FAILED"))
    );
    // valid as a partial ladder only
    let r = rtcat().arg("report").arg(out).output().unwrap();
    assert_eq!(r.status.code(), Some(1), "{}", text(&r.stderr));
    assert!(
        text(&r.stderr).contains("s4/run1: missing"),
        "{}",
        text(&r.stderr)
    );
    let r = rtcat()
        .args(["report", "--allow-partial"])
        .arg(out)
        .output()
        .unwrap();
    ok(&r, "rtcat report --allow-partial");
    let t = text(&r.stdout);
    assert!(t.contains("| s0 |") && !t.contains("| s4 |"), "{t}");
    assert!(t.contains("s4 run 1: not measured"), "{t}");
}

#[test]
fn sigint_in_the_middle_restores_and_leaves_a_valid_partial_ladder() {
    let _g = serial();
    if !is_root() {
        eprintln!("skipped: stage s4 runs SCHED_FIFO, which needs root");
        return;
    }
    let (_td, tree) = fake_tree();
    let before = snapshot(&tree.root);
    let out_td = tempfile::tempdir().unwrap();
    let out = out_td.path().join("ladder");
    let child = ladder_in_s4(&tree, &out, "3");
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    let el = t0.elapsed();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o.stderr));
    assert!(el < Duration::from_secs(15), "ladder took {el:?} to stop");
    let err = text(&o.stderr);
    assert!(err.contains("stopped by SIGINT"), "{err}");
    // the interrupted bench wrote its (partial) results before exiting
    assert!(out.join("s4/run1.interrupted/summary.json").is_file());
    // the completed stage is still reported
    assert!(text(&o.stdout).contains("| s0 |"), "{}", text(&o.stdout));
    partial_ladder_checks(&before, &tree, &out);
}

#[test]
fn a_second_signal_kills_the_bench_and_still_restores() {
    let _g = serial();
    if !is_root() {
        eprintln!("skipped: stage s4 runs SCHED_FIFO, which needs root");
        return;
    }
    let (_td, tree) = fake_tree();
    let before = snapshot(&tree.root);
    let out_td = tempfile::tempdir().unwrap();
    let out = out_td.path().join("ladder");
    let child = ladder_in_s4(&tree, &out, "3");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(143), "{}", text(&o.stderr));
    partial_ladder_checks(&before, &tree, &out);
}

#[test]
fn bad_arguments_exit_2_naming_the_value() {
    let _g = serial();
    let td = tempfile::tempdir().unwrap();
    let out = td.path().join("l");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--stages".into(), "s0,s9".into()], "s9"),
        (
            vec!["--stages".into(), "s1,s1".into()],
            "--stages: s1 listed twice",
        ),
        (vec!["--runs".into(), "0".into()], "'0'"),
        (vec!["--duration".into(), "0".into()], "0 s: must be > 0"),
        (
            vec!["--duration".into(), "ten".into()],
            "\"ten\" is not a number",
        ),
        (vec!["--cpu".into(), "4095".into()], "--cpu: CPU 4095"),
        (vec!["--iface".into(), "eth0".into()], "cannot be used with"),
        (
            vec!["--root".into(), "/nonexistent-root".into()],
            "--root: /nonexistent-root",
        ),
    ];
    for (args, want) in cases {
        let o = rtcat()
            .args(["ladder", "--sim"])
            .args(&args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {want:?} not in {err}");
        assert!(!out.exists(), "{args:?} created the output directory");
    }
    // a bad config names its key
    let cfg = td.path().join("bad.toml");
    std::fs::write(&cfg, "[cycle]\npriority = 0\n").unwrap();
    let o = rtcat()
        .args(["ladder", "--sim", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("cycle.priority = 0"),
        "{}",
        text(&o.stderr)
    );
    // results are never overwritten
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("ladder.csv"), "x").unwrap();
    let o = rtcat()
        .args(["ladder", "--sim", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("exists and is not an empty directory"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(out.join("ladder.csv")).unwrap(),
        "x"
    );
}

/// Values of the live knobs the ladder may change, plus the affinity of this process's threads.
fn live_knobs(rt: usize) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |p: String| {
        if let Ok(v) = std::fs::read_to_string(&p) {
            m.insert(p, v);
        }
    };
    put("/proc/irq/default_smp_affinity".into());
    put("/sys/devices/virtual/workqueue/cpumask".into());
    put("/proc/sys/kernel/timer_migration".into());
    for e in std::fs::read_dir("/proc/irq").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_ok() {
            put(format!("{}/smp_affinity", e.path().display()));
        }
    }
    if let Ok(rd) = std::fs::read_dir("/sys/devices/system/cpu/cpufreq") {
        for e in rd.flatten() {
            put(format!("{}/scaling_governor", e.path().display()));
        }
    }
    if let Ok(rd) = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{rt}/cpuidle")) {
        for e in rd.flatten() {
            put(format!("{}/disable", e.path().display()));
        }
    }
    for p in [
        "/proc/1/status".to_string(),
        "/proc/self/status".to_string(),
    ] {
        if let Ok(s) = std::fs::read_to_string(&p)
            && let Some(l) = s.lines().find(|l| l.starts_with("Cpus_allowed_list"))
        {
            m.insert(format!("{p}:Cpus_allowed_list"), l.to_string());
        }
    }
    m
}

#[test]
fn live_ladder_restores_what_this_machine_allows() {
    let _g = serial();
    if !is_root() {
        eprintln!("skipped: the live ladder needs root");
        return;
    }
    let rt = rt_cpu();
    if rt == 0 {
        eprintln!("skipped: a single usable CPU leaves nothing to shield from");
        return;
    }
    let before = live_knobs(rt);
    let td = tempfile::tempdir().unwrap();
    let out = td.path().join("live");
    let o = rtcat()
        .args([
            "ladder",
            "--sim",
            "--stages",
            "s0,s1,s2,s3,s4",
            "--runs",
            "1",
        ])
        .args(["--duration", "0.5", "--no-plots", "--cpu", &rt.to_string()])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    ok(&o, "live rtcat ladder");
    let after = live_knobs(rt);
    let changed: Vec<String> = before
        .iter()
        .filter(|(k, v)| after.get(*k).is_some_and(|w| w != *v))
        .map(|(k, v)| format!("{k}: {:?} -> {:?}", v.trim(), after[k].trim()))
        .collect();
    assert!(changed.is_empty(), "not restored: {changed:?}");
    assert!(!out.join("tune-state.json").exists());
    let log = log_of(&out);
    assert!(
        results(&log, "s4", "tune_restore")
            .iter()
            .all(|(_, r)| !r.starts_with("FAILED"))
    );
    // the shield did change something here (so the comparison above means something)
    if before
        .get("/proc/sys/kernel/timer_migration")
        .is_some_and(|v| v.trim() == "1")
    {
        let s4 = results(&log, "s4", "tune_apply");
        assert!(
            s4.iter()
                .any(|(id, r)| id == "file:/proc/sys/kernel/timer_migration" && r == "applied"),
            "{s4:?}"
        );
    }
    let rows = parse_ladder_csv(&std::fs::read_to_string(out.join("ladder.csv")).unwrap()).unwrap();
    assert_eq!(rows.len(), 5);
}

#[test]
fn failing_runs_are_kept_aside_and_the_ladder_stops_after_two_in_a_row() {
    let _g = serial();
    let (_td, tree) = fake_tree();
    let before = snapshot(&tree.root);
    let out_td = tempfile::tempdir().unwrap();
    let out = out_td.path().join("ladder");
    // no such interface: every bench fails at start-up
    let o = rtcat()
        .args(["ladder", "--iface", "rtcnoif0", "--stages", "s0,s2,s4"])
        .args(["--runs", "1", "--duration", "1", "--no-plots"])
        .args(["--cpu", &rt_cpu().to_string()])
        .arg("--root")
        .arg(&tree.root)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("two runs in a row failed"), "{err}");
    assert!(
        err.contains("s0/run1 FAILED: rtcat bench exited with 2"),
        "{err}"
    );
    assert!(
        err.contains("rtcnoif0"),
        "the bench's own error is quoted: {err}"
    );
    assert!(out.join("s0/run1.failed/bench.log").is_file());
    assert!(out.join("s2/run1.failed/tune.json").is_file());
    assert!(
        !out.join("s4").exists(),
        "the ladder went on after two failures"
    );
    let after = snapshot(&tree.root);
    assert!(after == before, "not restored: {:?}", diff(&before, &after));
    let log = log_of(&out);
    let st: Vec<&str> = log["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(st, ["failed", "failed"]);
    assert!(
        results(&log, "s2", "tune_apply")
            .iter()
            .any(|(_, r)| r == "applied"),
        "s2 applied its knob before the bench failed"
    );
    let rows = parse_ladder_csv(&std::fs::read_to_string(out.join("ladder.csv")).unwrap()).unwrap();
    assert!(rows.is_empty());
}

#[test]
fn loaded_ladder_runs_the_seed_load_off_the_rt_cpu() {
    let _g = serial();
    let usable = rtlab::cpus::usable_cpus().unwrap();
    if usable.len() < 2 {
        eprintln!("skipped: --loaded needs a CPU besides the RT CPU");
        return;
    }
    let (_td, tree) = fake_tree();
    let out_td = tempfile::tempdir().unwrap();
    let out = out_td.path().join("ladder");
    let rt = rt_cpu();
    let o = rtcat()
        .args([
            "ladder", "--sim", "--loaded", "--stages", "s0", "--runs", "1",
        ])
        .args(["--duration", "1", "--no-plots", "--cpu", &rt.to_string()])
        .arg("--root")
        .arg(&tree.root)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    ok(&o, "rtcat ladder --loaded");
    let m = LadderManifest::read(&out.join("manifest.json")).unwrap();
    assert!(m.loaded);
    let log = log_of(&out);
    let load = &log["runs"][0]["load"];
    let cpus = rtlab::cpus::parse_cpu_list(load["cpus"].as_str().unwrap()).unwrap();
    assert!(
        !cpus.is_empty() && !cpus.contains(&rt),
        "load on {cpus:?}, RT CPU {rt}"
    );
    assert_eq!(load["stopped_by"], "stop");
    for k in ["hog_loops", "tmpfs_files_written", "anon_passes", "forks"] {
        assert!(load[k].as_u64().unwrap() > 0, "{k}: {load}");
    }
    assert!(load["errors"].as_array().unwrap().is_empty(), "{load}");
}

#[test]
fn an_existing_output_directory_is_refused_even_empty() {
    let _g = serial();
    let td = tempfile::tempdir().unwrap();
    let out = td.path().join("premade");
    std::fs::create_dir(&out).unwrap();
    let o = rtcat()
        .args(["ladder", "--sim", "--stages", "s0", "--runs", "1"])
        .args(["--duration", "0.5", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("--out: {} already exists", out.display())),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "wrote into it");
    // a link to a directory is refused the same way
    let link = td.path().join("link");
    std::os::unix::fs::symlink(&out, &link).unwrap();
    let o = rtcat()
        .args(["ladder", "--sim", "--stages", "s0", "--out"])
        .arg(&link)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    // the ladder makes its directory itself: 0755 whatever the umask, owned by whoever runs it
    let fresh = td.path().join("a/fresh");
    let o = rtcat()
        .args(["ladder", "--sim", "--stages", "s0", "--runs", "1"])
        .args([
            "--duration",
            "0.3",
            "--no-plots",
            "--cpu",
            &rt_cpu().to_string(),
        ])
        .arg("--out")
        .arg(&fresh)
        .output()
        .unwrap();
    ok(&o, "ladder into a new directory");
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&fresh).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o755);
    assert_eq!(m.uid(), nix::unistd::geteuid().as_raw());
}

fn closed_pipe() -> Stdio {
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    Stdio::from(w)
}

#[test]
fn a_closed_stdout_and_stderr_do_not_stop_the_ladder_before_it_restores() {
    let _g = serial();
    if !is_root() {
        eprintln!("skipped: stage s2 runs SCHED_FIFO, which needs root");
        return;
    }
    let (_td, tree) = fake_tree();
    let before = snapshot(&tree.root);
    let out_td = tempfile::tempdir().unwrap();
    let out = out_td.path().join("ladder");
    let o = rtcat()
        .args(["ladder", "--sim", "--stages", "s0,s2", "--runs", "1"])
        .args([
            "--duration",
            "0.5",
            "--no-plots",
            "--cpu",
            &rt_cpu().to_string(),
        ])
        .arg("--root")
        .arg(&tree.root)
        .arg("--out")
        .arg(&out)
        .stdout(closed_pipe())
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(o.code(), Some(0), "ladder with closed stdout/stderr: {o:?}");
    let after = snapshot(&tree.root);
    assert!(after == before, "not restored: {:?}", diff(&before, &after));
    assert!(out.join("report.md").is_file());
    assert!(!out.join("tune-state.json").exists());
}

#[test]
fn swapping_the_output_directory_cannot_hand_root_a_journal() {
    let _g = serial();
    if !is_root() {
        eprintln!("skipped: stage s4 runs SCHED_FIFO, which needs root");
        return;
    }
    let (_td, tree) = fake_tree();
    let before = snapshot(&tree.root);
    let out_td = tempfile::tempdir().unwrap();
    let out = out_td.path().join("ladder");
    let child = ladder_in_s4(&tree, &out, "2");
    // what a user owning the parent directory can do while s4 runs: move the ladder's directory
    // away and put one of their own, with a plausible journal, in its place
    let moved = out_td.path().join("ladder.orig");
    std::fs::rename(&out, &moved).unwrap();
    std::fs::create_dir(&out).unwrap();
    let boot = std::fs::read_to_string(tree.root.join("proc/sys/kernel/random/boot_id")).unwrap();
    let forged = serde_json::json!({"version": 1, "boot_id": boot.trim(), "rt_cpus": "0",
        "entries": [{"id": "file:/proc/irq/default_smp_affinity", "group": "default-irq-affinity",
                     "change": {"kind": "file", "path": "/proc/irq/default_smp_affinity",
                                "original": "01\n", "target": "bf"},
                     "state": "applied"}]});
    let forged = serde_json::to_vec_pretty(&forged).unwrap();
    std::fs::write(out.join("tune-state.json"), &forged).unwrap();
    let o = child.wait_with_output().unwrap();
    let err = text(&o.stderr);
    // the ladder restored its own journal, through its handle on the moved directory
    let after = snapshot(&tree.root);
    assert!(
        after == before,
        "not restored from the ladder's own journal: {:?}\n{err}",
        diff(&before, &after)
    );
    assert_eq!(
        std::fs::read(out.join("tune-state.json")).unwrap(),
        forged,
        "the planted journal was touched"
    );
    assert!(!moved.join("tune-state.json").exists(), "{err}");
    assert!(moved.join("ladder-log.json").is_file(), "{err}");
}

#[test]
fn interface_names_follow_the_kernels_rules_as_in_tune() {
    let _g = serial();
    let td = tempfile::tempdir().unwrap();
    let out = td.path().join("l");
    for (bad, want) in [
        ("eth0123456789012", "is 16 bytes long"),
        ("a:b", "it contains ':'"),
        ("..", "is not an interface name"),
    ] {
        let o = rtcat()
            .args(["ladder", "--stages", "s0", "--iface", bad, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {err}");
        assert!(
            err.contains(&format!("--iface: {bad:?}")) && err.contains(want),
            "{bad:?}: {err}"
        );
        assert!(!out.exists());
    }
}
