//! As root on the real machine: doctor against `/`, and apply/restore of the knobs a VM allows
//! (default_smp_affinity, unbound workqueue cpumask, cpuidle state disable, timer_migration),
//! checking that each value really changed and really came back. Skips (and says why) otherwise.

use rttune::config::TuneSection;
use rttune::cpuset::CpuSet;
use rttune::doctor::{self, Doctor, Verdict};
use rttune::facts;
use rttune::journal::Change;
use rttune::tune::{self, KnobGroup, TuneCtx};
use rttune::{RealHost, SysRoot};
use std::path::PathBuf;

/// `RTTUNE_REQUIRE_LIVE=1` (set by CI, which runs as root) turns a skip into a failure.
fn skip_reason() -> Option<String> {
    let why = skip_reason_inner();
    if let Some(w) = &why
        && std::env::var_os("RTTUNE_REQUIRE_LIVE").is_some()
    {
        panic!("live test required (RTTUNE_REQUIRE_LIVE) but cannot run: {w}");
    }
    why
}

fn skip_reason_inner() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    let online = facts::online_cpus(&SysRoot::live());
    if online.len() < 2 {
        return Some(format!("need 2+ online CPUs, have {online}"));
    }
    None
}

fn rt_cpu() -> CpuSet {
    let online = facts::online_cpus(&SysRoot::live());
    CpuSet::single(online.max().unwrap_or(0))
}

fn up_iface(root: &SysRoot) -> Option<String> {
    root.list("/sys/class/net").ok()?.into_iter().find(|i| {
        i != "lo"
            && root
                .read_opt(&format!("/sys/class/net/{i}/operstate"))
                .as_deref()
                == Some("up")
    })
}

#[test]
fn live_doctor_runs_against_root() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP live_doctor_runs_against_root: {why}");
        return;
    }
    let root = SysRoot::live();
    let t0 = std::time::Instant::now();
    let r = doctor::run(&Doctor {
        root: &root,
        host: &RealHost,
        rt: rt_cpu(),
        iface: up_iface(&root),
        tune: TuneSection::default(),
        journal: None,
        wait: None,
        priority: None,
    })
    .unwrap();
    let el = t0.elapsed();
    eprintln!("{}", r.to_text());
    eprintln!("doctor on / took {el:?}");
    assert_eq!(r.checks.len(), 32);
    for c in &r.checks {
        assert!(
            !c.observed.is_empty() && !c.expected.is_empty() && !c.why.is_empty(),
            "{}",
            c.id
        );
        if matches!(c.verdict, Verdict::Fail | Verdict::Warn) && c.id != "boot.isolated" {
            assert!(
                !c.fix.is_empty() || c.id == "irq.nic" || c.id == "nic.link",
                "{} has no fix",
                c.id
            );
        }
    }
    // the verdicts match this machine: a PREEMPT_RT kernel or not, cpufreq or not
    let rt = root
        .read_opt("/proc/sys/kernel/version")
        .unwrap_or_default()
        .contains("PREEMPT_RT");
    assert_eq!(
        r.get("kernel.preempt_rt").unwrap().verdict == Verdict::Pass,
        rt
    );
    if !root.exists("/sys/devices/system/cpu/cpufreq/policy0") {
        assert_eq!(r.get("power.governor").unwrap().verdict, Verdict::NA);
    }
}

struct Guard {
    state: PathBuf,
    done: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.done {
            let out = tune::restore(&SysRoot::live(), &RealHost, None, &self.state);
            eprintln!("guard restore: {out:?}");
        }
    }
}

#[test]
fn live_apply_restore_round_trip() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP live_apply_restore_round_trip: {why}");
        return;
    }
    let root = SysRoot::live();
    let rt = rt_cpu();
    let groups = [
        KnobGroup::DefaultIrqAffinity,
        KnobGroup::WorkqueueMask,
        KnobGroup::CStates,
        KnobGroup::TimerMigration,
    ];
    let tc = TuneCtx::new(&root, rt.clone(), None, None, TuneSection::default()).unwrap();
    let p = tune::plan(&root, &tc, &RealHost, &groups, None);
    let files: Vec<(String, String, String)> = p
        .changes
        .iter()
        .filter_map(|c| match &c.change {
            Change::File {
                path,
                original,
                target,
            } => Some((path.clone(), original.clone(), target.clone())),
            _ => None,
        })
        .collect();
    eprintln!(
        "plan on / for CPU {rt}: {:#?}",
        p.changes.iter().map(|c| &c.what).collect::<Vec<_>>()
    );
    for s in &p.skipped {
        eprintln!("skipped: {} {}", s.id, s.reason);
    }
    assert!(
        !files.is_empty(),
        "nothing to change on this machine: it already looks tuned for CPU {rt}; cannot prove apply/restore"
    );

    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("tune-state.json");
    let mut guard = Guard {
        state: state.clone(),
        done: false,
    };
    let out = tune::apply(&root, &tc, &RealHost, &groups, &state).unwrap();
    eprintln!("{}", out.to_text());
    let mut changed = 0;
    for (path, original, target) in &files {
        let item = out
            .items
            .iter()
            .find(|i| i.id == format!("file:{path}"))
            .unwrap();
        let now = root.read(path).unwrap();
        if item.result == "applied" {
            let t = target.trim();
            let ok = now == t
                || (CpuSet::parse_mask(&now).ok().is_some()
                    && CpuSet::parse_mask(&now).ok() == CpuSet::parse_mask(t).ok());
            assert!(ok, "{path}: reads {now:?} after apply, wanted {t:?}");
            assert_ne!(now, original.trim(), "{path} did not change");
            changed += 1;
        } else {
            assert_eq!(now, original.trim(), "{path} refused but changed");
        }
    }
    assert!(changed > 0, "no knob could be changed");
    // doctor agrees
    let r = doctor::run(&Doctor {
        root: &root,
        host: &RealHost,
        rt: rt.clone(),
        iface: None,
        tune: TuneSection::default(),
        journal: None,
        wait: None,
        priority: None,
    })
    .unwrap();
    for (id, path) in [
        ("irq.default_affinity", facts::P_IRQ_DEFAULT),
        ("wq.unbound_cpumask", facts::P_WQ_MASK),
        ("sched.timer_migration", facts::P_TIMER_MIGRATION),
    ] {
        if out
            .items
            .iter()
            .any(|i| i.id == format!("file:{path}") && i.result == "applied")
        {
            assert_eq!(
                r.get(id).unwrap().verdict,
                Verdict::Pass,
                "{id}: {}",
                r.get(id).unwrap().observed
            );
        }
    }
    // idempotent
    let again = tune::apply(&root, &tc, &RealHost, &groups, &state).unwrap();
    assert!(again.items.is_empty(), "{}", again.to_text());

    let back = tune::restore(&root, &RealHost, None, &state).unwrap();
    eprintln!("{}", back.to_text());
    guard.done = true;
    assert_eq!(back.exit_code(), 0);
    assert!(!state.exists());
    for (path, original, _) in &files {
        assert_eq!(
            root.read(path).unwrap(),
            original.trim(),
            "{path} not restored"
        );
    }
    eprintln!("live round trip: {changed} knob(s) changed and restored");
}

#[test]
fn ethtool_ioctl_errors_are_reported() {
    use rttune::Host;
    let e = RealHost.get_coalesce("lo").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "lo: {e}");
    let e = RealHost.get_coalesce("rttune-nx0").unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(libc::ENODEV),
        "missing interface: {e}"
    );
    let e = RealHost.get_coalesce("a/b").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    let e = RealHost.get_coalesce("averyveryverylongname").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

/// sched_setaffinity through RealHost, read back through /proc, and a journalled restore of one
/// thread's affinity (plus PID-reuse protection by start time), on a child process of our own.
#[test]
fn live_task_affinity_restore_on_own_child() {
    use rttune::Host;
    use rttune::journal::{Entry, EntryState, Journal};
    let root = SysRoot::live();
    let online = facts::online_cpus(&root);
    if online.len() < 2 {
        eprintln!("SKIP live_task_affinity_restore_on_own_child: need 2+ online CPUs");
        return;
    }
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    let procs: std::collections::BTreeMap<u32, String> =
        [(pid, "sleep".to_string())].into_iter().collect();
    let task = facts::read_tasks(&root, &procs).into_iter().next().unwrap();
    let original = task.allowed.clone();
    assert!(original.len() >= 2, "child allowed on {original}");
    let first = CpuSet::single(original.iter().next().unwrap());
    RealHost.set_affinity(pid, &first).unwrap();
    let now = facts::read_tasks(&root, &procs)
        .into_iter()
        .next()
        .unwrap()
        .allowed;
    assert_eq!(now, first, "sched_setaffinity did not take");

    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("s.json");
    let mut j = Journal::new(&root, &first.to_list());
    let entry = |starttime: u64| Entry {
        id: format!("task:{pid}:{starttime}"),
        group: KnobGroup::Tasks,
        change: Change::Affinity {
            pid,
            tid: pid,
            starttime,
            comm: "sleep".into(),
            original: original.to_list(),
            target: first.to_list(),
        },
        state: EntryState::Applied,
    };
    // a journal entry for another process that had this PID before: must not be touched
    j.entries.push(entry(task.starttime + 1));
    j.save(&state).unwrap();
    let out = tune::restore(&root, &RealHost, None, &state).unwrap();
    assert_eq!(out.items[0].result, "gone (task exited)");
    assert_eq!(facts::read_tasks(&root, &procs)[0].allowed, first);

    let mut j = Journal::new(&root, &first.to_list());
    j.entries.push(entry(task.starttime));
    j.save(&state).unwrap();
    let out = tune::restore(&root, &RealHost, None, &state).unwrap();
    assert_eq!(out.items[0].result, "restored", "{}", out.to_text());
    assert_eq!(facts::read_tasks(&root, &procs)[0].allowed, original);
    assert!(!state.exists());
    child.kill().unwrap();
    child.wait().unwrap();
}
