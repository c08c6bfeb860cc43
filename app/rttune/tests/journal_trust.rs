//! The journal is data, never code: forged journals (entries outside the knobs tune writes,
//! planted links, commands, foreign owners and modes, missing or foreign boot ids, oversize or
//! mangled files) are refused as a whole and change nothing on the fake tree; a legitimate one,
//! also a half-applied one, still restores exactly.

use proptest::prelude::*;
use rttune::SysRoot;
use rttune::config::TuneSection;
use rttune::cpuset::CpuSet;
use rttune::testkit::{FakeHost, FakeTree, TreeSpec, snapshot};
use rttune::tune::{self, KnobGroup, TuneCtx};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The file-based groups (cheap to apply, all restored by writing files).
const GROUPS: [KnobGroup; 6] = [
    KnobGroup::DefaultIrqAffinity,
    KnobGroup::IrqAffinity,
    KnobGroup::WorkqueueMask,
    KnobGroup::TimerMigration,
    KnobGroup::Governor,
    KnobGroup::CStates,
];

struct Rig {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    tree: FakeTree,
    root: SysRoot,
    host: FakeHost,
    state: PathBuf,
}

fn ctx(root: &SysRoot) -> TuneCtx {
    let t = TuneSection {
        housekeeping_cpus: Some("0-5,7".into()),
        ..TuneSection::default()
    };
    TuneCtx::new(root, CpuSet::single(6), t.housekeeping().unwrap(), None, t).unwrap()
}

/// A fake tree with a secret file, the file-based groups applied, the journal in a directory of
/// its own.
fn applied() -> Rig {
    let d = tempfile::tempdir().unwrap();
    let tree = FakeTree::rk3588(d.path(), &TreeSpec::default());
    std::fs::create_dir_all(tree.root.join("etc")).unwrap();
    std::fs::write(tree.root.join("etc/shadow"), "root:$6$secret:19000::::::\n").unwrap();
    let root = tree.sysroot();
    let host = FakeHost::new(&root);
    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("tune-state.json");
    let out = tune::apply(&root, &ctx(&root), &host, &GROUPS, &state).unwrap();
    assert!(out.items.len() > 5, "{}", out.to_text());
    Rig {
        _dirs: (d, sd),
        tree,
        root,
        host,
        state,
    }
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Rewrite the journal in place (owner and mode kept).
fn forge(state: &Path, f: impl FnOnce(&mut Value)) {
    let mut j = read_json(state);
    f(&mut j);
    std::fs::write(state, serde_json::to_vec_pretty(&j).unwrap()).unwrap();
}

fn push(state: &Path, entry: Value) {
    forge(state, |j| j["entries"].as_array_mut().unwrap().push(entry));
}

fn host_log(h: &FakeHost) -> Vec<String> {
    h.log.lock().unwrap().clone()
}

/// Restore must fail with a message containing `want`, touch nothing on the tree and nothing
/// through the host, and leave the journal where it is.
fn refused(r: &Rig, want: &str) {
    let before = snapshot(&r.tree.root);
    let log = host_log(&r.host);
    let journal = std::fs::read(&r.state).ok();
    let e = match tune::restore(&r.root, &r.host, None, &r.state) {
        Ok(o) => panic!("forged journal used ({want}):\n{}", o.to_text()),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains(want), "{want:?} not in: {e}");
    assert!(e.contains("nothing was restored"), "{e}");
    let after = snapshot(&r.tree.root);
    assert!(after == before, "tree changed: {:?}", diff(&before, &after));
    assert_eq!(host_log(&r.host), log, "host called");
    assert_eq!(std::fs::read(&r.state).ok(), journal, "journal touched");
    // apply and status refuse it just as well (status would print the files' contents)
    let e = tune::status(&r.root, &ctx(&r.root), &r.host, &GROUPS, &r.state).unwrap_err();
    assert!(format!("{e:#}").contains(want), "status: {e:#}");
    let e = tune::apply(&r.root, &ctx(&r.root), &r.host, &GROUPS, &r.state).unwrap_err();
    assert!(format!("{e:#}").contains(want), "apply: {e:#}");
    let after = snapshot(&r.tree.root);
    assert!(
        after == before,
        "apply changed: {:?}",
        diff(&before, &after)
    );
}

fn diff(a: &BTreeMap<PathBuf, Vec<u8>>, b: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<String> {
    let mut d: Vec<String> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .map(|(k, _)| k.display().to_string())
        .collect();
    d.extend(
        b.keys()
            .filter(|k| !a.contains_key(*k))
            .map(|k| format!("new {}", k.display())),
    );
    d
}

fn file_entry(path: &str, original: &str, group: &str) -> Value {
    json!({"id": format!("file:{path}"), "group": group,
           "change": {"kind": "file", "path": path, "original": original, "target": "bf"},
           "state": "applied"})
}

#[test]
fn legitimate_journal_restores_exactly() {
    let d = tempfile::tempdir().unwrap();
    let tree = FakeTree::rk3588(d.path(), &TreeSpec::default());
    let before = snapshot(&tree.root);
    let root = tree.sysroot();
    let host = FakeHost::new(&root);
    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("tune-state.json");
    tune::apply(&root, &ctx(&root), &host, &GROUPS, &state).unwrap();
    assert_ne!(snapshot(&tree.root), before);
    let out = tune::restore(&root, &host, None, &state).unwrap();
    assert_eq!(out.exit_code(), 0, "{}", out.to_text());
    assert_eq!(snapshot(&tree.root), before);
    assert!(!state.exists());
}

#[test]
fn half_applied_journal_with_pending_entries_still_restores() {
    let d = tempfile::tempdir().unwrap();
    let tree = FakeTree::rk3588(d.path(), &TreeSpec::default());
    let before = snapshot(&tree.root);
    let root = tree.sysroot();
    let host = FakeHost::new(&root);
    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("tune-state.json");
    tune::apply(&root, &ctx(&root), &host, &GROUPS, &state).unwrap();
    // as if apply died after journalling: every entry pending, half of them not yet changed
    let originals: Vec<(String, String)> = read_json(&state)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["change"]["path"].as_str().unwrap().to_string(),
                e["change"]["original"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (p, o) in originals.iter().step_by(2) {
        std::fs::write(tree.root.join(p.trim_start_matches('/')), o).unwrap();
    }
    forge(&state, |j| {
        for e in j["entries"].as_array_mut().unwrap() {
            e["state"] = json!("pending");
        }
    });
    let out = tune::restore(&root, &host, None, &state).unwrap();
    assert_eq!(out.exit_code(), 0, "{}", out.to_text());
    assert_eq!(snapshot(&tree.root), before);
}

#[test]
fn file_entry_outside_the_knobs_is_refused() {
    let r = applied();
    // a valid entry first: nothing of the journal may be restored, not even that
    let n = read_json(&r.state)["entries"].as_array().unwrap().len();
    push(
        &r.state,
        file_entry("/etc/shadow", "root::0:0:::::\n", "default-irq-affinity"),
    );
    refused(&r, &format!("entry {n} (\"file:/etc/shadow\")"));
    assert!(
        std::fs::read_to_string(r.tree.root.join("etc/shadow"))
            .unwrap()
            .contains("secret")
    );
}

#[test]
fn file_entries_that_only_look_like_knobs_are_refused() {
    let r = applied();
    for (path, original, group, want) in [
        (
            "/proc/irq/18/../../../etc/shadow",
            "ff\n",
            "irq-affinity",
            "not a file rtcat tune writes",
        ),
        (
            "/proc/irq/18/smp_affinity",
            "ff\nx",
            "irq-affinity",
            "is not a value of this knob",
        ),
        (
            "/proc/sys/kernel/timer_migration",
            "1\n",
            "tasks",
            "does not change this kind of knob",
        ),
        (
            "/sys/devices/system/cpu/cpufreq/policy64/scaling_governor",
            "schedutil\n",
            "governor",
            "CPU 64 does not exist here",
        ),
    ] {
        let saved = std::fs::read(&r.state).unwrap();
        forge(&r.state, |j| {
            let es = j["entries"].as_array_mut().unwrap();
            es.retain(|e| e["id"] != format!("file:{path}"));
            es.push(file_entry(path, original, group));
        });
        refused(&r, want);
        std::fs::write(&r.state, saved).unwrap();
    }
    // the journal as it was still restores
    tune::restore(&r.root, &r.host, None, &r.state).unwrap();
}

#[test]
fn planted_links_are_not_followed() {
    // the last component a link
    let r = applied();
    let knob = r.tree.root.join("proc/irq/18/smp_affinity");
    std::fs::remove_file(&knob).unwrap();
    std::os::unix::fs::symlink("../../../etc/shadow", &knob).unwrap();
    refused(&r, "(\"file:/proc/irq/18/smp_affinity\")");
    // a directory on the way a link
    let r = applied();
    let irq = r.tree.root.join("proc/irq/35");
    std::fs::rename(&irq, r.tree.root.join("etc/irq35")).unwrap();
    std::os::unix::fs::symlink("../../etc/irq35", &irq).unwrap();
    refused(&r, "(\"file:/proc/irq/35/smp_affinity\")");
}

#[test]
fn a_service_entry_never_runs_its_command_line() {
    let r = applied();
    let marker = r.tree.root.join("marker");
    push(
        &r.state,
        json!({"id": "service:irqbalance", "group": "irqbalance",
               "change": {"kind": "service", "name": "irqbalance", "how": {"how": "signalled",
                 "pid": 600, "cmdline": ["/bin/sh", "-c", format!("touch {}", marker.display())]}},
               "state": "applied"}),
    );
    refused(&r, "(\"service:irqbalance\"): recorded command line");
    assert!(!marker.exists());
    for (entry, want) in [
        (
            json!({"id": "service:sshd", "group": "irqbalance",
                   "change": {"kind": "service", "name": "sshd",
                              "how": {"how": "systemd", "unit": "sshd.service"}},
                   "state": "applied"}),
            "service \"sshd\" is not one rtcat tune stops",
        ),
        (
            json!({"id": "service:irqbalance", "group": "irqbalance",
                   "change": {"kind": "service", "name": "irqbalance",
                              "how": {"how": "systemd", "unit": "evil.service"}},
                   "state": "applied"}),
            "unit \"evil.service\" is not irqbalance.service",
        ),
    ] {
        forge(&r.state, |j| {
            let es = j["entries"].as_array_mut().unwrap();
            es.retain(|e| e["group"] != "irqbalance");
            es.push(entry);
        });
        refused(&r, want);
    }
}

#[test]
fn other_entry_kinds_are_checked_too() {
    let r = applied();
    for (entry, want) in [
        (
            json!({"id": "coalesce:../x", "group": "coalesce",
                   "change": {"kind": "coalesce", "iface": "../x",
                              "original": vec![0u32; 22], "target": vec![0u32; 22]},
                   "state": "applied"}),
            "is not an interface name",
        ),
        (
            json!({"id": "task:0:5", "group": "tasks",
                   "change": {"kind": "affinity", "pid": 1, "tid": 0, "starttime": 5,
                              "comm": "x", "original": "0-7", "target": "0-5"},
                   "state": "applied"}),
            "tid 0 is out of range",
        ),
        (
            json!({"id": "task:410:5", "group": "tasks",
                   "change": {"kind": "affinity", "pid": 410, "tid": 410, "starttime": 6,
                              "comm": "bash", "original": "0-7", "target": "0-5"},
                   "state": "applied"}),
            "id does not match",
        ),
        (
            file_entry(
                "/proc/irq/default_smp_affinity",
                "ff\n",
                "default-irq-affinity",
            ),
            "a second entry for the same knob",
        ),
    ] {
        let saved = std::fs::read(&r.state).unwrap();
        push(&r.state, entry);
        refused(&r, want);
        std::fs::write(&r.state, saved).unwrap();
    }
}

#[test]
fn boot_ids_missing_empty_or_foreign_are_refused() {
    let r = applied();
    let saved = std::fs::read(&r.state).unwrap();
    forge(&r.state, |j| j["boot_id"] = json!(""));
    refused(&r, "records no boot id");
    forge(&r.state, |j| {
        j.as_object_mut().unwrap().remove("boot_id");
    });
    refused(&r, "missing field `boot_id`");
    std::fs::write(&r.state, &saved).unwrap();
    forge(&r.state, |j| {
        j["boot_id"] = json!("0a8f77e2-0000-4000-8000-000000000000")
    });
    // restore refuses; (apply would replace it, see fake_trees)
    let before = snapshot(&r.tree.root);
    let e = tune::restore(&r.root, &r.host, None, &r.state).unwrap_err();
    assert!(
        format!("{e}").contains("written during another boot"),
        "{e}"
    );
    assert_eq!(snapshot(&r.tree.root), before);
    // this boot's id unreadable: no journal can be matched to it
    std::fs::write(&r.state, &saved).unwrap();
    std::fs::remove_file(r.tree.root.join("proc/sys/kernel/random/boot_id")).unwrap();
    let before = snapshot(&r.tree.root);
    let e = tune::restore(&r.root, &r.host, None, &r.state).unwrap_err();
    assert!(format!("{e}").contains("cannot be read"), "{e}");
    assert_eq!(snapshot(&r.tree.root), before);
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn journal_owned_by_another_user_or_writable_by_others_is_refused() {
    let r = applied();
    let dir = r.state.parent().unwrap().to_path_buf();
    let set = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    set(&r.state, 0o666).unwrap();
    refused(&r, "writable by group or others (mode 0666)");
    set(&r.state, 0o620).unwrap();
    refused(&r, "writable by group or others (mode 0620)");
    set(&r.state, 0o644).unwrap();
    set(&dir, 0o770).unwrap();
    refused(&r, "writable by group or others (mode 0770)");
    set(&dir, 0o700).unwrap();
    if is_root() {
        let chown = |p: &Path, uid: u32| std::os::unix::fs::chown(p, Some(uid), None).unwrap();
        chown(&r.state, 1234);
        refused(&r, "owned by uid 1234");
        chown(&r.state, 0);
        chown(&dir, 1234);
        refused(&r, "owned by uid 1234");
        chown(&dir, 0);
    } else {
        eprintln!("not root: foreign owners not tested");
    }
    // the journal as a link to a good journal
    let real = dir.join("real.json");
    std::fs::rename(&r.state, &real).unwrap();
    std::os::unix::fs::symlink(&real, &r.state).unwrap();
    refused(&r, "symbolic link");
    std::fs::remove_file(&r.state).unwrap();
    std::fs::rename(&real, &r.state).unwrap();
    let out = tune::restore(&r.root, &r.host, None, &r.state).unwrap();
    assert_eq!(out.exit_code(), 0, "{}", out.to_text());
}

#[test]
fn oversize_and_special_files_are_refused_without_blocking() {
    let r = applied();
    // valid JSON, but beyond the limit
    let mut big = std::fs::read(&r.state).unwrap();
    big.extend(std::iter::repeat_n(b' ', 9 << 20));
    std::fs::write(&r.state, &big).unwrap();
    refused(&r, "larger than the limit of 8388608 bytes");
    std::fs::remove_file(&r.state).unwrap();
    let c = std::ffi::CString::new(r.state.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let (root, state) = (r.root.clone(), r.state.clone());
    std::thread::spawn(move || {
        let host = FakeHost::new(&root);
        let _ = tx.send(
            tune::restore(&root, &host, None, &state)
                .map(|o| o.to_text())
                .map_err(|e| e.to_string()),
        );
    });
    let res = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("restore blocked on a FIFO");
    let e = res.unwrap_err();
    assert!(e.contains("FIFO"), "{e}");
}

#[test]
fn status_of_a_forged_journal_does_not_show_other_files() {
    let r = applied();
    push(
        &r.state,
        file_entry("/etc/shadow", "x\n", "default-irq-affinity"),
    );
    let e = tune::status(&r.root, &ctx(&r.root), &r.host, &GROUPS, &r.state).unwrap_err();
    assert!(!format!("{e:#}").contains("secret"), "{e:#}");
}

// --- fuzzing -----------------------------------------------------------------------------------

/// Strings an attacker would put into a journal.
const HOSTILE: &[&str] = &[
    "/etc/shadow",
    "/proc/irq/18/../../../etc/shadow",
    "/proc/irq/18/smp_affinity/",
    "/proc/irq/018/smp_affinity",
    "/sys/devices/system/cpu/cpu99/cpuidle/state1/disable",
    "/proc/sys/kernel/timer_migration\u{0}",
    "",
    "..",
    "sh",
    "/bin/sh",
    "ff\nff",
    "0-4095",
    "0-99999",
    "irqbalance",
    "tasks",
    "service",
    "-1",
];

fn mutate_strings(v: &mut Value, k: &mut usize, with: &str) {
    match v {
        Value::String(s) => {
            if *k == 0 {
                *s = with.to_string();
            }
            *k = k.wrapping_sub(1);
        }
        Value::Array(a) => a.iter_mut().for_each(|x| mutate_strings(x, k, with)),
        Value::Object(o) => o.values_mut().for_each(|x| mutate_strings(x, k, with)),
        _ => {}
    }
}

/// Files of the fake tree restore may write (every other file must stay as it is).
fn is_knob_file(p: &Path) -> bool {
    let s = p.to_string_lossy();
    (s.starts_with("proc/irq/") && (s.ends_with("/smp_affinity") || s.ends_with("_list")))
        || s == "proc/irq/default_smp_affinity"
        || s == "sys/devices/virtual/workqueue/cpumask"
        || s == "proc/sys/kernel/timer_migration"
        || (s.starts_with("sys/devices/system/cpu/cpufreq/policy")
            && s.ends_with("/scaling_governor"))
        || (s.starts_with("sys/devices/system/cpu/cpu") && s.ends_with("/disable"))
}

/// One applied tree for every fuzz case (check_restore_of puts it back after each), with the
/// journal as apply wrote it.
fn shared_rig() -> &'static std::sync::Mutex<(Rig, Vec<u8>)> {
    static RIG: std::sync::OnceLock<std::sync::Mutex<(Rig, Vec<u8>)>> = std::sync::OnceLock::new();
    RIG.get_or_init(|| {
        let r = applied();
        let j = std::fs::read(&r.state).unwrap();
        std::sync::Mutex::new((r, j))
    })
}

fn check_restore_of(r: &Rig, bytes: &[u8]) -> Result<(), TestCaseError> {
    std::fs::write(&r.state, bytes).unwrap();
    let before = snapshot(&r.tree.root);
    let res = tune::restore(&r.root, &r.host, None, &r.state);
    let after = snapshot(&r.tree.root);
    match res {
        Err(_) => prop_assert!(
            after == before,
            "refused but changed {:?}",
            diff(&before, &after)
        ),
        Ok(_) => {
            let changed = diff(&before, &after);
            prop_assert!(
                changed.iter().all(|p| is_knob_file(Path::new(p))),
                "restore wrote outside the knobs: {changed:?}"
            );
            // back to the applied state for the next case
            for (k, v) in &before {
                if after.get(k) != Some(v) {
                    std::fs::write(r.tree.root.join(k), v).unwrap();
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    /// Hostile strings in any field of a good journal (a file entry's path in half the cases):
    /// restore never writes anything but the knobs, and a journal it refuses changes nothing.
    #[test]
    fn hostile_values_never_reach_other_files(
        field in any::<usize>(),
        hostile in 0..HOSTILE.len(),
        in_a_path in any::<bool>(),
    ) {
        let g = shared_rig().lock().unwrap_or_else(|e| e.into_inner());
        let (r, journal) = (&g.0, &g.1);
        let mut j: Value = serde_json::from_slice(journal).unwrap();
        if in_a_path {
            let es = j["entries"].as_array_mut().unwrap();
            let n = es.len();
            es[field % n]["change"]["path"] = json!(HOSTILE[hostile]);
        } else {
            let n_strings = j.to_string().matches('"').count() / 2;
            let mut k = field % n_strings.max(1);
            mutate_strings(&mut j, &mut k, HOSTILE[hostile]);
        }
        check_restore_of(r, &serde_json::to_vec_pretty(&j).unwrap())?;
    }

    /// Byte-level damage (flips, cuts): never a panic, and a refused journal changes nothing.
    #[test]
    fn damaged_journals_never_restore_anything_else(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let g = shared_rig().lock().unwrap_or_else(|e| e.into_inner());
        let (r, journal) = (&g.0, &g.1);
        let mut bytes = journal.clone();
        for (pos, b) in &flips {
            let i = pos % bytes.len();
            bytes[i] = *b;
        }
        if let Some(c) = cut {
            bytes.truncate(c % (bytes.len() + 1));
        }
        check_restore_of(r, &bytes)?;
    }

    /// Arbitrary bytes as a journal: never a panic, never used.
    #[test]
    fn random_bytes_are_never_a_journal(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j.json");
        std::fs::write(&p, &bytes).unwrap();
        prop_assert!(rttune::journal::Journal::load(&p).is_err());
    }
}

#[test]
fn a_stopped_service_is_started_by_what_tune_finds_itself() {
    use rttune::host::{ServiceStart, ServiceStop, plan_service_start};
    let d = tempfile::tempdir().unwrap();
    let tree = FakeTree::rk3588(d.path(), &TreeSpec::default());
    let root = tree.sysroot();
    let signalled = ServiceStop::Signalled {
        pid: 600,
        cmdline: vec!["/opt/evil/irqbalance".into(), "--foreground".into()],
    };
    // systemd runs and has the unit: through systemd by name, whatever the journal recorded
    assert_eq!(
        plan_service_start(&root, "irqbalance", &signalled).unwrap(),
        ServiceStart::Systemd {
            unit: "irqbalance.service".into()
        }
    );
    assert!(plan_service_start(&root, "sshd", &signalled).is_err());
    // no unit: only a root-owned, executable binary from the fixed list, never the journal's
    std::fs::remove_file(tree.root.join("lib/systemd/system/irqbalance.service")).unwrap();
    let e = plan_service_start(&root, "irqbalance", &signalled).unwrap_err();
    assert!(e.to_string().contains("start irqbalance by hand"), "{e}");
    let bin = tree.root.join("usr/sbin/irqbalance");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::write(&bin, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o775)).unwrap();
    assert!(
        plan_service_start(&root, "irqbalance", &signalled).is_err(),
        "a group-writable binary is not run"
    );
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    if is_root() {
        assert_eq!(
            plan_service_start(&root, "irqbalance", &signalled).unwrap(),
            ServiceStart::Exec { program: bin }
        );
    }
}
