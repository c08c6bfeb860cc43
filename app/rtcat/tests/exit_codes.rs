//! Exit codes by kind of error, for every lab and tuning command: bad usage is 2, a runtime
//! failure 1 (`rtcat --help`: "0 success, 1 runtime failure, 2 bad configuration or usage").
//! Each command gets one of each, through the binary.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use rttune::testkit::{FakeTree, TreeSpec};

fn rtcat() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rtcat"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// `o` ended with `code` and said `says` on stderr.
fn ends(o: &Output, code: i32, says: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(says), "{says:?} not in: {err}");
}

fn dev_full() -> fs::File {
    fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

fn first_cpu() -> String {
    rtlab::cpus::usable_cpus().unwrap()[0].to_string()
}

#[test]
fn load() {
    let cpu = first_cpu();
    ends(
        &run(rtcat().args(["load", "--cpus", &cpu, "--duration", "0"])),
        2,
        "--duration:",
    );
    // the load ran, its report could not be written
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("no-such-dir/load.json");
    let o = run(rtcat()
        .args([
            "load",
            "--cpus",
            &cpu,
            "--cpu-hogs",
            "1",
            "--duration",
            "0.2",
        ])
        .args(["--quiet", "--json"])
        .arg(&json));
    ends(&o, 1, "--json:");
}

/// stress-ng that is found but cannot be started is a runtime failure, not bad usage (the old
/// rule read the message's `--` prefix and said 2).
#[test]
fn load_stress_ng_that_cannot_start_is_a_runtime_failure() {
    let d = tempfile::tempdir().unwrap();
    let fake = d.path().join("stress-ng");
    fs::write(&fake, "#!/nonexistent/interpreter\n").unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let stress_ng_in = |path: &Path| {
        let cpu = first_cpu();
        run(rtcat()
            .args(["load", "--cpus", &cpu, "--cpu-hogs", "1", "--duration", "1"])
            .args(["--stress-ng", "--quiet"])
            .env("PATH", path))
    };
    ends(&stress_ng_in(d.path()), 1, "cannot run stress-ng");
    // not installed at all: the option cannot be honoured, bad usage
    let empty = tempfile::tempdir().unwrap();
    ends(&stress_ng_in(empty.path()), 2, "stress-ng is not installed");
}

#[test]
fn report() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rtlab/tests/fixtures");
    let o = run(rtcat()
        .current_dir(&fixtures)
        .args(["report", "stock", "rt", "--label", "only-one"]));
    ends(&o, 2, "--label:");
    // a malformed input is the input's failure at run time
    let d = tempfile::tempdir().unwrap();
    let bench = d.path().join("bench");
    fs::create_dir(&bench).unwrap();
    fs::write(bench.join("summary.json"), "{ not json").unwrap();
    ends(&run(rtcat().arg("report").arg(&bench)), 1, "summary.json");
}

#[test]
fn ladder() {
    let d = tempfile::tempdir().unwrap();
    // an existing results directory is refused before anything is touched
    let o = run(rtcat()
        .args([
            "ladder",
            "--sim",
            "--stages",
            "s0",
            "--runs",
            "1",
            "--duration",
            "1",
        ])
        .arg("--out")
        .arg(d.path()));
    ends(&o, 2, "--out:");
    // every bench fails (no such interface): the ladder ran and failed
    let t = FakeTree::rk3588(&d.path().join("root"), &TreeSpec::default());
    let o = run(rtcat()
        .args([
            "ladder", "--iface", "rtcnoif0", "--stages", "s0", "--runs", "1",
        ])
        .args(["--duration", "1", "--no-plots", "--cpu", &first_cpu()])
        .arg("--root")
        .arg(&t.root)
        .arg("--out")
        .arg(d.path().join("ladder")));
    ends(&o, 1, "s0/run1 FAILED");
}

#[test]
fn doctor() {
    ends(&run(rtcat().args(["doctor", "--cpu", "4095"])), 2, "--cpu:");
    let d = tempfile::tempdir().unwrap();
    let t = FakeTree::rk3588(d.path(), &TreeSpec::default());
    let o = run(rtcat()
        .args(["doctor", "--cpu", "6", "--root"])
        .arg(&t.root)
        .stdout(dev_full()));
    ends(&o, 1, "cannot write the report to stdout");
}

#[test]
fn tune() {
    ends(
        &run(rtcat().args(["tune", "plan", "--cpu", "6", "--root", "/nonexistent"])),
        2,
        "--root:",
    );
    let d = tempfile::tempdir().unwrap();
    let t = FakeTree::rk3588(&d.path().join("root"), &TreeSpec::default());
    let o = run(rtcat()
        .args([
            "tune",
            "plan",
            "--cpu",
            "6",
            "--group",
            "timer-migration",
            "--root",
        ])
        .arg(&t.root)
        .stdout(dev_full()));
    ends(&o, 1, "cannot write the report to stdout");
    // a journal that cannot be written (a trusted directory that refuses new files: immutable,
    // chattr(1) +i, which binds root too) is a runtime failure, not bad usage; nothing applied
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: the journal write failure is not tested");
        return;
    }
    let sd = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    fs::set_permissions(sd.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let chattr = |flag: &str| {
        Command::new("chattr")
            .arg(flag)
            .arg(sd.path())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !chattr("+i") {
        eprintln!("chattr +i not supported here: the journal write failure is not tested");
        return;
    }
    let before = fs::read(t.root.join("proc/sys/kernel/timer_migration")).unwrap();
    let o = run(rtcat()
        .args([
            "tune",
            "apply",
            "--cpu",
            "6",
            "--group",
            "timer-migration",
            "--root",
        ])
        .arg(&t.root)
        .arg("--state")
        .arg(sd.path().join("tune-state.json")));
    assert!(chattr("-i"));
    ends(&o, 1, "cannot write tune state");
    assert_eq!(
        fs::read(t.root.join("proc/sys/kernel/timer_migration")).unwrap(),
        before
    );
}
