//! `rtcat tune` / `rtcat doctor` as root runs them: forged journals are refused with exit 2 and
//! change nothing, nothing from a journal is ever executed, `config check` refuses a journal
//! where others can write, a closed stdout never panics, flags are validated the same way.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rttune::testkit::{FakeTree, TreeSpec, snapshot};
use serde_json::{Value, json};

fn rtcat() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rtcat"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

const GROUPS: [&str; 8] = [
    "--group",
    "default-irq-affinity",
    "--group",
    "workqueue-mask",
    "--group",
    "timer-migration",
    "--group",
    "governor",
];

struct Rig {
    _d: tempfile::TempDir,
    _sd: tempfile::TempDir,
    tree: FakeTree,
    state: PathBuf,
}

impl Rig {
    fn root(&self) -> &str {
        self.tree.root.to_str().unwrap()
    }

    fn tune(&self, action: &str) -> Command {
        let mut c = rtcat();
        c.args(["tune", action, "--root", self.root()])
            .arg("--state")
            .arg(&self.state);
        c
    }
}

/// A fake tree with a secret, and a journal of some applied groups next to it.
fn applied() -> (Rig, BTreeMap<PathBuf, Vec<u8>>) {
    let d = tempfile::tempdir().unwrap();
    let tree = FakeTree::rk3588(d.path(), &TreeSpec::default());
    std::fs::create_dir_all(tree.root.join("etc")).unwrap();
    std::fs::write(tree.root.join("etc/shadow"), "root:$6$secret:19000::::::\n").unwrap();
    let pristine = snapshot(&tree.root);
    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("tune-state.json");
    let r = Rig {
        _d: d,
        _sd: sd,
        tree,
        state,
    };
    let o = r
        .tune("apply")
        .args(["--cpu", "6", "--housekeeping", "0-5,7"])
        .args(GROUPS)
        .output()
        .unwrap();
    assert!(o.status.success(), "apply: {}", text(&o.stderr));
    assert!(r.state.is_file());
    (r, pristine)
}

fn forge(state: &Path, f: impl FnOnce(&mut Value)) {
    let mut j: Value = serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    f(&mut j);
    std::fs::write(state, serde_json::to_vec_pretty(&j).unwrap()).unwrap();
}

/// `tune restore` must exit 2 naming `want` and change nothing at all.
fn refused(r: &Rig, want: &str) {
    let before = snapshot(&r.tree.root);
    let journal = std::fs::read(&r.state).unwrap();
    let o = r.tune("restore").output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{want}: {err}{}", text(&o.stdout));
    assert!(err.contains(want), "{want:?} not in {err}");
    assert!(snapshot(&r.tree.root) == before, "{want}: the tree changed");
    assert_eq!(std::fs::read(&r.state).unwrap(), journal);
}

#[test]
fn forged_journals_are_refused_with_exit_2_and_change_nothing() {
    let (r, pristine) = applied();
    let good = std::fs::read(&r.state).unwrap();
    let reset = || std::fs::write(&r.state, &good).unwrap();

    let n = serde_json::from_slice::<Value>(&good).unwrap()["entries"]
        .as_array()
        .unwrap()
        .len();
    forge(&r.state, |j| {
        j["entries"].as_array_mut().unwrap().push(json!({
            "id": "file:/etc/shadow", "group": "default-irq-affinity",
            "change": {"kind": "file", "path": "/etc/shadow", "original": "root::0:0:::::\n",
                       "target": "bf"},
            "state": "applied"}));
    });
    refused(
        &r,
        &format!(
            "entry {n} (\"file:/etc/shadow\"): \"/etc/shadow\" is not a file rtcat tune writes"
        ),
    );
    reset();

    // a planted link where the journal's (legitimate) path points
    let knob = r.tree.root.join("proc/irq/default_smp_affinity");
    let saved = std::fs::read(&knob).unwrap();
    std::fs::remove_file(&knob).unwrap();
    std::os::unix::fs::symlink("../../etc/shadow", &knob).unwrap();
    refused(&r, "(\"file:/proc/irq/default_smp_affinity\")");
    std::fs::remove_file(&knob).unwrap();
    std::fs::write(&knob, saved).unwrap();

    let mode = |m: u32| std::fs::set_permissions(&r.state, std::fs::Permissions::from_mode(m));
    mode(0o666).unwrap();
    refused(&r, "writable by group or others (mode 0666)");
    mode(0o644).unwrap();
    let dir = r.state.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o770)).unwrap();
    refused(&r, "writable by group or others (mode 0770)");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&r.state, Some(1234), None).unwrap();
        refused(&r, "owned by uid 1234");
        std::os::unix::fs::chown(&r.state, Some(0), None).unwrap();
    }

    forge(&r.state, |j| j["boot_id"] = json!(""));
    refused(&r, "records no boot id");
    reset();
    forge(&r.state, |j| {
        j["boot_id"] = json!("0a8f77e2-0000-4000-8000-000000000000")
    });
    refused(&r, "written during another boot");
    reset();

    // the journal as written restores exactly
    let o = r.tune("restore").output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(snapshot(&r.tree.root) == pristine, "not restored exactly");
    assert!(!r.state.exists());
}

#[test]
fn a_journal_that_cannot_be_written_is_a_runtime_failure() {
    let d = tempfile::tempdir().unwrap();
    let tree = FakeTree::rk3588(d.path(), &TreeSpec::default());
    let before = snapshot(&tree.root);
    // a directory root trusts but where no file can be created (procfs): the write fails
    let o = rtcat()
        .args([
            "tune",
            "apply",
            "--cpu",
            "6",
            "--group",
            "timer-migration",
            "--root",
        ])
        .arg(&tree.root)
        .args(["--state", "/proc/rtcat-tune-state.json"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write tune state"), "{err}");
    assert!(snapshot(&tree.root) == before, "changed without a journal");
}

/// The live test of a command line in a journal: as root on `/`, where a command would really run.
#[test]
fn a_journalled_command_line_is_never_run() {
    if !is_root() {
        eprintln!("skipped: restore on the live system needs root");
        return;
    }
    let procs = std::fs::read_dir("/proc").unwrap();
    let irqbalance_runs = procs.flatten().any(|e| {
        std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "irqbalance")
    });
    if irqbalance_runs {
        eprintln!("skipped: irqbalance runs here (restore would find it running)");
        return;
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let td = tempfile::tempdir().unwrap();
    let state = td.path().join("tune-state.json");
    let marker = td.path().join("marker");
    let journal = |cmdline: Value| {
        json!({"version": 1, "boot_id": boot.trim(), "rt_cpus": "0", "entries": [
            {"id": "service:irqbalance", "group": "irqbalance",
             "change": {"kind": "service", "name": "irqbalance",
                        "how": {"how": "signalled", "pid": 4000000, "cmdline": cmdline}},
             "state": "applied"}]})
    };
    // a command of something else: refused as a whole
    let j = journal(json!([
        "/bin/sh",
        "-c",
        format!("touch {}", marker.display())
    ]));
    std::fs::write(&state, serde_json::to_vec(&j).unwrap()).unwrap();
    let o = rtcat()
        .args(["tune", "restore", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("entry 0 (\"service:irqbalance\"): recorded command line"),
        "{err}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!marker.exists(), "the journal's command ran");

    // irqbalance's name, someone else's program: the journal passes, the program never runs
    let installed = [
        "/usr/sbin/irqbalance",
        "/sbin/irqbalance",
        "/usr/bin/irqbalance",
    ]
    .iter()
    .any(|p| Path::new(p).exists())
        || Path::new("/run/systemd/system").exists();
    if installed {
        eprintln!("skipped the second half: restore would start the real irqbalance here");
        return;
    }
    let fake = td.path().join("irqbalance");
    std::fs::write(&fake, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let j = journal(json!([fake.to_str().unwrap(), "--foreground"]));
    std::fs::write(&state, serde_json::to_vec(&j).unwrap()).unwrap();
    let o = rtcat()
        .args(["tune", "restore", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}{}", text(&o.stderr));
    assert!(out.contains("start irqbalance by hand"), "{out}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!marker.exists(), "the journal's program ran");
}

#[test]
fn config_check_refuses_a_state_file_others_can_write() {
    let td = tempfile::tempdir().unwrap();
    let f = td.path().join("rtcat.toml");
    for p in [
        "/var/lib/rtcat/tune-state.json",
        "/tmp/tune-state.json",
        "/run/rtcat/tune-state.json",
        "/dev/shm/tune-state.json",
    ] {
        std::fs::write(&f, format!("[tune]\nstate_file = \"{p}\"\n")).unwrap();
        let o = rtcat().args(["config", "check"]).arg(&f).output().unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{p}: {err}");
        assert!(err.contains("tune.state_file") && err.contains(p), "{err}");
    }
    std::fs::write(
        &f,
        "[tune]\nstate_file = \"/var/lib/rtcat-tune/tune-state.json\"\n",
    )
    .unwrap();
    let o = rtcat().args(["config", "check"]).arg(&f).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// stdout as `| head` leaves it once head has exited: a pipe with no reader.
fn closed_stdout() -> Stdio {
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    Stdio::from(w)
}

fn no_panic(o: &Output, what: &str) {
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(101), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
}

#[test]
fn a_closed_stdout_never_panics_and_apply_restore_still_finish() {
    let d = tempfile::tempdir().unwrap();
    let tree = FakeTree::rk3588(d.path(), &TreeSpec::default());
    let before = snapshot(&tree.root);
    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("s.json");
    let run = |args: &[&str]| {
        rtcat()
            .args(args)
            .arg("--root")
            .arg(&tree.root)
            .stdout(closed_stdout())
            .output()
            .unwrap()
    };
    let s = state.to_str().unwrap();
    for args in [
        vec!["doctor", "--cpu", "6", "--iface", "eth1"],
        vec!["doctor", "--cpu", "6", "--json"],
        vec!["tune", "plan", "--cpu", "6", "--state", s],
    ] {
        let o = run(&args);
        no_panic(&o, &args.join(" "));
        assert_eq!(snapshot(&tree.root), before);
    }
    let o = run(&[
        "tune",
        "apply",
        "--cpu",
        "6",
        "--group",
        "default-irq-affinity",
        "--group",
        "c-states",
        "--state",
        s,
    ]);
    no_panic(&o, "tune apply");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(state.is_file(), "apply wrote its journal");
    assert_ne!(snapshot(&tree.root), before, "apply changed the knobs");
    let o = run(&["tune", "status", "--state", s]);
    no_panic(&o, "tune status");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = run(&["tune", "restore", "--json", "--state", s]);
    no_panic(&o, "tune restore");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!state.exists());
    assert_eq!(snapshot(&tree.root), before, "restore finished");
}

#[test]
fn flags_are_validated_the_same_way_everywhere() {
    let d = tempfile::tempdir().unwrap();
    let tree = FakeTree::rk3588(d.path(), &TreeSpec::default());
    let before = snapshot(&tree.root);
    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("s.json");
    let s = state.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["doctor", "--cpu", "6"],
        vec!["tune", "plan", "--cpu", "6", "--state", s],
        vec!["tune", "apply", "--cpu", "6", "--state", s],
        vec!["tune", "status", "--cpu", "6", "--state", s],
        vec!["tune", "restore", "--state", s],
    ];
    for bad in ["a:b", "eth0123456789012", "..", "a b"] {
        for c in &commands {
            let o = rtcat()
                .args(c)
                .args(["--iface", bad, "--root"])
                .arg(&tree.root)
                .output()
                .unwrap();
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{c:?} --iface {bad:?}: {err}");
            assert!(err.contains(&format!("{bad:?}")), "{c:?}: {err}");
        }
    }
    for c in &commands {
        let mut c: Vec<&str> = c.iter().copied().filter(|a| *a != "6").collect();
        c.retain(|a| *a != "--cpu");
        let o = rtcat()
            .args(&c)
            .args(["--cpu", "999", "--root"])
            .arg(&tree.root)
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{c:?} --cpu 999: {err}");
        assert!(err.contains("CPU 999 is not online"), "{c:?}: {err}");
    }
    assert_eq!(snapshot(&tree.root), before);
    assert!(!state.exists());
    // doctor names the interfaces there are when the configured one is missing
    let o = rtcat()
        .args([
            "doctor", "--cpu", "6", "--iface", "eth9", "--json", "--root",
        ])
        .arg(&tree.root)
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    for id in ["irq.nic", "nic.link", "nic.coalesce"] {
        let c = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap();
        assert_eq!(
            c["observed"], "interface eth9 does not exist; this machine has eth0, eth1",
            "{id}"
        );
    }
}
