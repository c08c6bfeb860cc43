//! doctor and tune against fake RK3588 trees: golden verdicts, exact restore, idempotence,
//! crash recovery, refused knobs.

use rttune::config::{CoalesceConfig, CycleWait, TuneSection};
use rttune::cpuset::CpuSet;
use rttune::doctor::{self, Doctor, Report, Verdict};
use rttune::journal::{EntryState, Journal};
use rttune::testkit::{FakeHost, FakeTask, FakeTree, TreeSpec, snapshot};
use rttune::tune::{self, KnobGroup, TuneCtx};
use rttune::{Host, SysRoot};
use std::path::{Path, PathBuf};

fn tune_section() -> TuneSection {
    TuneSection {
        housekeeping_cpus: Some("0-5,7".into()),
        nic_irq_cpu: Some(5),
        coalesce: CoalesceConfig {
            tx_usecs: Some(0),
            tx_frames: Some(25),
            rx_usecs: None,
            rx_frames: Some(1),
        },
        ..TuneSection::default()
    }
}

fn tree(spec: TreeSpec) -> (tempfile::TempDir, FakeTree) {
    let dir = tempfile::tempdir().unwrap();
    let t = FakeTree::rk3588(dir.path(), &spec);
    (dir, t)
}

/// The usual setup: a default fake RK3588 tree, its root, a host over it, and where tune keeps
/// its journal. The temporary directories live as long as the first element is bound.
fn rig() -> (
    (tempfile::TempDir, tempfile::TempDir),
    FakeTree,
    SysRoot,
    FakeHost,
    PathBuf,
) {
    let (d, t) = tree(TreeSpec::default());
    let root = t.sysroot();
    let host = FakeHost::new(&root);
    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("s.json");
    ((d, sd), t, root, host, state)
}

fn doctor(root: &SysRoot, host: &dyn Host, state: Option<&Path>) -> Report {
    doctor_waiting(root, host, state, Some(CycleWait::Hybrid))
}

fn doctor_waiting(
    root: &SysRoot,
    host: &dyn Host,
    state: Option<&Path>,
    wait: Option<CycleWait>,
) -> Report {
    doctor_at(
        root,
        host,
        state,
        wait,
        wait.map(|_| rttune::DEFAULT_CYCLE_PRIORITY),
    )
}

/// [`doctor_waiting`] with the cyclic thread at SCHED_FIFO `priority`.
fn doctor_at(
    root: &SysRoot,
    host: &dyn Host,
    state: Option<&Path>,
    wait: Option<CycleWait>,
    priority: Option<u8>,
) -> Report {
    let journal = state.and_then(|s| Journal::load(s).unwrap());
    doctor::run(&Doctor {
        root,
        host,
        rt: CpuSet::single(6),
        iface: Some("eth1".into()),
        tune: tune_section(),
        journal,
        wait,
        priority,
    })
    .unwrap()
}

fn ctx(root: &SysRoot) -> TuneCtx {
    let t = tune_section();
    TuneCtx::new(
        root,
        CpuSet::single(6),
        t.housekeeping().unwrap(),
        Some("eth1".into()),
        t,
    )
    .unwrap()
}

fn golden(name: &str, actual: &str) {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, actual).unwrap();
    }
    let want = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", p.display()));
    assert_eq!(actual, want, "golden {name} differs; actual:\n{actual}");
}

#[test]
fn golden_untuned_rk3588() {
    let (_d, t) = tree(TreeSpec::default());
    let root = t.sysroot();
    let r = doctor(&root, &FakeHost::new(&root), None);
    golden("untuned", &r.verdict_lines());
    assert_eq!(r.exit_code(), 1);
    // specific observations a reader relies on
    let g = r.get("power.governor").unwrap();
    assert!(
        g.observed.contains("policy6 (CPUs 6-7; CPU 7 share it)"),
        "{}",
        g.observed
    );
    let irq = r.get("irq.affinity").unwrap();
    assert!(
        irq.details
            .iter()
            .any(|d| d.starts_with("wrong: 18(rockchip_thermal)")),
        "{:?}",
        irq.details
    );
    assert!(
        irq.details
            .iter()
            .any(|d| d.contains("102(nvme0q2) kernel-managed")),
        "{:?}",
        irq.details
    );
    assert!(
        !irq.details.iter().any(|d| d.contains("101(nvme0q1)")),
        "managed IRQ off the RT CPU is fine"
    );
    assert!(
        irq.details
            .iter()
            .any(|d| d == "11(arch_timer) per-CPU (expected)"),
        "{:?}",
        irq.details
    );
    let nic = r.get("irq.nic").unwrap();
    assert!(
        nic.details
            .iter()
            .any(|d| d.starts_with("60(eth1)") && d.ends_with("wrong")),
        "{:?}",
        nic.details
    );
    let tasks = r.get("tasks.rt_cpu").unwrap();
    assert!(
        tasks
            .details
            .iter()
            .any(|d| d.starts_with("pinned: stress[700]")),
        "{:?}",
        tasks.details
    );
    assert!(
        tasks.observed.contains("4 per-CPU kthreads"),
        "{}",
        tasks.observed
    );
    let co = r.get("nic.coalesce").unwrap();
    assert!(
        co.observed
            .contains("rx-usecs 2048 rx-frames 0 tx-usecs 1000 tx-frames 25"),
        "{}",
        co.observed
    );
    // every line of the text form carries the fields the issue asks for
    let text = r.to_text();
    for c in &r.checks {
        let line = text
            .lines()
            .find(|l| l.contains(&format!(" {} ", c.id)))
            .unwrap();
        for f in ["observed:", "expected:", "why:", "fix:", "reboot:"] {
            assert!(line.contains(f), "{line}");
        }
    }
}

/// Without root, debugfs (mode 0700) hides which IRQs are kernel-managed: an IRQ allowed on the
/// RT CPU is then unknown, a WARN that says so, never a FAIL the root report would not give.
/// `cycle.wait`: a busy cycle above the NIC's interrupt thread on a PREEMPT_RT CPU fails, on a
/// CPU that is not isolated warns, on an isolated one without the NIC's interrupt passes; the
/// hybrid default only warns where the NIC's interrupt shares its CPU; no config, no verdict.
#[test]
fn cycle_wait_is_judged_against_the_rt_cpu() {
    // `nic_on_rt`: eth1's IRQ (60) delivered on CPU 6 of the tuned (PREEMPT_RT, isolated) tree
    let judged = |tuned: bool, nic_on_rt: bool, wait: Option<CycleWait>| {
        let (_d, t) = tree(TreeSpec {
            tuned,
            ..TreeSpec::default()
        });
        if nic_on_rt {
            let irq = t.root.join("proc/irq/60");
            std::fs::write(irq.join("smp_affinity"), "40\n").unwrap();
            std::fs::write(irq.join("smp_affinity_list"), "6\n").unwrap();
            std::fs::write(irq.join("effective_affinity_list"), "6\n").unwrap();
        }
        let root = t.sysroot();
        let r = doctor_waiting(&root, &FakeHost::new(&root), None, wait);
        let c = r.get("cycle.wait").unwrap().clone();
        (c.verdict, c.observed, c.fix)
    };
    // PREEMPT_RT with eth1's interrupt thread below a polling cycle on CPU 6
    let (v, obs, fix) = judged(true, true, Some(CycleWait::Busy));
    assert_eq!(v, Verdict::Fail, "{obs}");
    assert!(obs.contains("IRQ 60(eth1)"), "{obs}");
    assert!(fix.contains("hybrid"), "{fix}");
    let (v, obs, _) = judged(true, true, Some(CycleWait::Hybrid));
    assert_eq!(v, Verdict::Warn, "{obs}");
    assert!(
        obs.contains("at FIFO 80") && obs.contains("its thread at FIFO 50"),
        "{obs}"
    );
    for w in [CycleWait::Sleep, CycleWait::Thread] {
        assert_eq!(judged(true, true, Some(w)).0, Verdict::Pass, "{w:?}");
    }
    // tuned: CPU 6 isolated, the NIC's IRQs on the housekeeping CPUs
    let (v, obs, _) = judged(true, false, Some(CycleWait::Busy));
    assert_eq!(v, Verdict::Pass, "{obs}");
    assert!(obs.contains("isolated CPU 6"), "{obs}");
    assert_eq!(
        judged(true, false, Some(CycleWait::Hybrid)).0,
        Verdict::Pass
    );
    // untuned (no PREEMPT_RT, CPU 6 not isolated): busy only warns
    let (v, obs, fix) = judged(false, false, Some(CycleWait::Busy));
    assert_eq!(v, Verdict::Warn, "{obs}");
    assert!(
        obs.contains("not isolated") && fix.contains("hybrid"),
        "{obs} {fix}"
    );
    assert_eq!(
        judged(false, false, Some(CycleWait::Hybrid)).0,
        Verdict::Pass
    );
    assert_eq!(judged(false, false, None).0, Verdict::NA);
}

/// `cycle.wait` reads `[cycle] priority`: a cycle polling below the NIC's interrupt thread is
/// preempted by it, so the reply is delivered; at its priority (FIFO does not preempt an equal)
/// or above, it is not. The thread's priority is the one it runs at (`tune` may have moved it).
#[test]
fn cycle_wait_compares_the_cycle_s_priority_with_the_interrupt_thread_s() {
    let judged = |priority: u8| {
        let (_d, t) = tree(TreeSpec {
            tuned: true,
            ..TreeSpec::default()
        });
        let irq = t.root.join("proc/irq/60");
        std::fs::write(irq.join("smp_affinity"), "40\n").unwrap();
        std::fs::write(irq.join("smp_affinity_list"), "6\n").unwrap();
        std::fs::write(irq.join("effective_affinity_list"), "6\n").unwrap();
        let root = t.sysroot();
        let r = doctor_at(
            &root,
            &FakeHost::new(&root),
            None,
            Some(CycleWait::Busy),
            Some(priority),
        );
        let c = r.get("cycle.wait").unwrap().clone();
        (c.verdict, c.observed)
    };
    // eth1's interrupt thread runs at FIFO 50 in the fake tree
    for p in [50, 51, 80] {
        let (v, obs) = judged(p);
        assert_eq!(v, Verdict::Fail, "{p}: {obs}");
        assert!(obs.contains(&format!("busy at FIFO {p}")), "{obs}");
    }
    // below it: the interrupt thread preempts the poll; CPU 6 is isolated
    let (v, obs) = judged(49);
    assert_eq!(v, Verdict::Pass, "{obs}");
    assert!(obs.contains("isolated CPU 6"), "{obs}");
}

#[test]
fn irq_affinity_without_root_is_unknown_not_wrong() {
    for tuned in [false, true] {
        let (_d, t) = tree(TreeSpec {
            tuned,
            ..TreeSpec::default()
        });
        let root = t.sysroot();
        let host = FakeHost::new(&root);
        let as_root = doctor(&root, &host, None);
        let root_v = as_root.get("irq.affinity").unwrap().verdict;
        assert_eq!(root_v, if tuned { Verdict::Pass } else { Verdict::Fail });
        root.inject_lookup_error("/sys/kernel/debug", libc_eacces());
        let r = doctor(&root, &host, None);
        let irq = r.get("irq.affinity").unwrap();
        // untuned, IRQ 110 (no handler) is still wrong: tune moves it whatever it is
        let want = if tuned { Verdict::Warn } else { Verdict::Fail };
        assert_eq!(irq.verdict, want, "tuned {tuned}: {:?}", irq);
        assert!(
            irq.observed.contains("unknown without root"),
            "{}",
            irq.observed
        );
        assert!(
            irq.details
                .iter()
                .any(|d| d.starts_with("unknown without root: 102(nvme0q2)")),
            "{:?}",
            irq.details
        );
        assert!(irq.fix.contains("as root"), "{}", irq.fix);
        // only an IRQ without a handler is judged wrong without debugfs
        assert!(
            irq.details
                .iter()
                .filter(|d| d.starts_with("wrong: "))
                .all(|d| d.contains("(unused)")),
            "{:?}",
            irq.details
        );
        assert_eq!(
            irq.details
                .iter()
                .any(|d| d == "wrong: 110 (unused) affinity 0-7"),
            !tuned
        );
        assert!(
            irq.details
                .iter()
                .any(|d| d.starts_with("unknown without root: 18(rockchip_thermal)"))
                != tuned,
            "{:?}",
            irq.details
        );
    }
}

fn libc_eacces() -> i32 {
    13
}

#[test]
fn golden_tuned_rk3588() {
    let (_d, t) = tree(TreeSpec {
        tuned: true,
        ..TreeSpec::default()
    });
    let root = t.sysroot();
    let host = FakeHost::new(&root);
    *host.coalesce.lock().unwrap().get_mut("eth1").unwrap() = {
        let mut c = host.get_coalesce("eth1").unwrap();
        c.rx_coalesce_usecs = 2048;
        c.rx_max_coalesced_frames = 1;
        c.tx_coalesce_usecs = 0;
        c.tx_max_coalesced_frames = 25;
        c
    };
    let r = doctor(&root, &host, None);
    golden("tuned", &r.verdict_lines());
    assert_eq!(r.exit_code(), 0, "{}", r.to_text());
    assert_eq!(r.summary.fail, 0);
    let th = r.get("tasks.rtcat").unwrap();
    assert_eq!(th.verdict, Verdict::Pass, "{:?}", th.details);
    // txrx = "inline" (rtcat's default): no TX/RX thread while cycling is still a PASS; no
    // cyclic thread (initialising / recovering) is a WARN.
    std::fs::remove_dir_all(t.root.join("proc/900/task/902")).unwrap();
    let r2 = doctor(&root, &host, None);
    let th = r2.get("tasks.rtcat").unwrap();
    assert_eq!(th.verdict, Verdict::Pass, "{:?}", th.details);
    assert!(
        th.details.iter().any(|d| d.contains("rtcat-txrx: absent")),
        "{:?}",
        th.details
    );
    std::fs::remove_dir_all(t.root.join("proc/900/task/901")).unwrap();
    let r3 = doctor(&root, &host, None);
    assert_eq!(r3.get("tasks.rtcat").unwrap().verdict, Verdict::Warn);
    assert!(
        r.get("power.cpu_dma_latency")
            .unwrap()
            .observed
            .contains("rtcat[900]")
    );
}

#[test]
fn golden_missing_cpufreq() {
    let (_d, t) = tree(TreeSpec {
        cpufreq: false,
        cpuidle: false,
        ..TreeSpec::default()
    });
    let root = t.sysroot();
    let host = FakeHost::new(&root);
    let r = doctor(&root, &host, None);
    golden("no_cpufreq", &r.verdict_lines());
    for id in ["power.governor", "power.frequency", "power.cpuidle"] {
        assert_eq!(r.get(id).unwrap().verdict, Verdict::NA, "{id}");
    }
    // tune skips them cleanly and still round-trips
    // the journal in a directory of its own: /tmp itself (anyone may create files there) is
    // not a place restore trusts
    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("state-nocpufreq.json");
    let before = snapshot(&t.root);
    let out = tune::apply(&root, &ctx(&root), &host, &KnobGroup::all(), &state).unwrap();
    assert!(
        out.skipped
            .iter()
            .any(|s| s.group == KnobGroup::Governor && s.reason.contains("no cpufreq policy"))
    );
    assert!(
        out.skipped
            .iter()
            .any(|s| s.group == KnobGroup::CStates && s.reason.contains("no cpuidle"))
    );
    tune::restore(&root, &host, None, &state).unwrap();
    assert_eq!(snapshot(&t.root), before);
}

#[test]
fn unwritable_files_are_reported_skipped_and_restored() {
    let (_d, t) = tree(TreeSpec::default());
    let root = t.sysroot();
    let gov = "/sys/devices/system/cpu/cpufreq/policy6/scaling_governor";
    root.inject_write_error(gov, libc::EPERM);
    root.inject_write_error("/sys/devices/virtual/workqueue/cpumask", libc::EACCES);
    root.inject_write_error("/proc/irq/18/smp_affinity", libc::EIO);
    let host = FakeHost::new(&root);
    host.coalesce_errno
        .lock()
        .unwrap()
        .insert("eth1".into(), libc::EINVAL);
    let sd = tempfile::tempdir().unwrap();
    let state = sd.path().join("tune-state.json");
    let before = snapshot(&t.root);
    let out = tune::apply(&root, &ctx(&root), &host, &KnobGroup::all(), &state).unwrap();
    assert_eq!(out.exit_code(), 0, "refused knobs are not fatal");
    let refused: Vec<&str> = out
        .items
        .iter()
        .filter(|i| i.result.starts_with("refused"))
        .map(|i| i.id.as_str())
        .collect();
    assert_eq!(
        refused,
        vec![
            "file:/proc/irq/18/smp_affinity",
            "file:/sys/devices/virtual/workqueue/cpumask",
            &format!("file:{gov}"),
            "coalesce:eth1"
        ]
    );
    // the refused files are untouched, the others changed
    assert_eq!(root.read(gov).unwrap(), "schedutil");
    assert_eq!(root.read("/proc/irq/default_smp_affinity").unwrap(), "bf");
    let r = doctor(&root, &host, Some(&state));
    golden("unwritable", &r.verdict_lines());
    // a refused IRQ is then known as "cannot move" rather than "wrong"
    let j = Journal::load(&state).unwrap().unwrap();
    assert!(matches!(
        j.entries[j.find("file:/proc/irq/18/smp_affinity").unwrap()].state,
        EntryState::Refused { .. }
    ));
    let irq = r.get("irq.affinity").unwrap();
    assert!(
        irq.details
            .iter()
            .any(|d| d.starts_with("cannot move: 18(rockchip_thermal)")),
        "{:?}",
        irq.details
    );
    let out = tune::restore(&root, &host, None, &state).unwrap();
    assert_eq!(out.exit_code(), 0, "{}", out.to_text());
    assert!(!state.exists());
    assert_eq!(snapshot(&t.root), before);
}

#[test]
fn apply_restore_is_byte_identical_and_doctor_sees_the_shield() {
    let (_dirs, t, root, host, state) = rig();
    let before = snapshot(&t.root);
    let coalesce_before = host.get_coalesce("eth1").unwrap();

    // plan changes nothing
    let p = tune::plan(&root, &ctx(&root), &host, &KnobGroup::all(), None);
    assert_eq!(snapshot(&t.root), before);
    assert!(!state.exists());
    let groups: std::collections::BTreeSet<KnobGroup> = p.changes.iter().map(|c| c.group).collect();
    assert_eq!(
        groups.len(),
        10,
        "every leaf group has a change on the untuned tree: {groups:?}"
    );

    let out = tune::apply(&root, &ctx(&root), &host, &KnobGroup::all(), &state).unwrap();
    assert!(
        out.items.iter().all(|i| i.result == "applied"),
        "{}",
        out.to_text()
    );
    assert_eq!(out.items.len(), p.changes.len());
    assert_ne!(snapshot(&t.root), before);
    assert_eq!(
        root.read("/sys/devices/system/cpu/cpufreq/policy6/scaling_governor")
            .unwrap(),
        "performance"
    );
    assert_eq!(root.read("/proc/irq/60/smp_affinity").unwrap(), "20");
    assert_eq!(root.read("/proc/irq/18/smp_affinity").unwrap(), "bf");
    assert_eq!(
        root.read("/proc/irq/102/smp_affinity").unwrap(),
        "f0",
        "managed IRQ untouched"
    );
    assert_eq!(
        root.read("/sys/devices/system/cpu/cpu6/cpuidle/state0/disable")
            .unwrap(),
        "0"
    );
    assert_eq!(
        root.read("/sys/devices/system/cpu/cpu6/cpuidle/state2/disable")
            .unwrap(),
        "1"
    );
    let c = host.get_coalesce("eth1").unwrap();
    assert_eq!(
        (c.tx_usecs(), c.tx_frames(), c.rx_frames(), c.rx_usecs()),
        (0, 25, 1, 2048)
    );

    let r = doctor(&root, &host, Some(&state));
    for id in [
        "irq.irqbalance",
        "irq.default_affinity",
        "wq.unbound_cpumask",
        "sched.timer_migration",
        "power.governor",
        "power.cpuidle",
        "nic.coalesce",
    ] {
        assert_eq!(
            r.get(id).unwrap().verdict,
            Verdict::Pass,
            "{id}: {}",
            r.to_text()
        );
    }
    // the kernel moves an IRQ's effective CPU at its next interrupt: the fake tree has none yet
    let nic = r.get("irq.nic").unwrap();
    assert_eq!(nic.verdict, Verdict::Warn);
    assert_eq!(
        nic.details,
        vec!["60(eth1) affinity 5 effective 6: pending".to_string()]
    );
    // stress is pinned to CPU6 by its user: tune must not move it, doctor keeps failing it
    let tasks = r.get("tasks.rt_cpu").unwrap();
    assert_eq!(tasks.verdict, Verdict::Fail);
    assert!(
        tasks.observed.starts_with("0 movable"),
        "{}",
        tasks.observed
    );

    // status reports everything in effect
    let st = tune::status(&root, &ctx(&root), &host, &KnobGroup::all(), &state).unwrap();
    assert!(
        st.items.iter().all(|i| i.result.starts_with("in effect")),
        "{}",
        st.to_text()
    );

    let out = tune::restore(&root, &host, None, &state).unwrap();
    assert_eq!(out.exit_code(), 0, "{}", out.to_text());
    assert!(!state.exists(), "journal removed after a full restore");
    assert_eq!(
        snapshot(&t.root),
        before,
        "fake tree byte-identical after restore"
    );
    assert_eq!(host.get_coalesce("eth1").unwrap(), coalesce_before);
}

#[test]
fn second_apply_is_idempotent_and_keeps_first_originals() {
    let (_dirs, t, root, host, state) = rig();
    let before = snapshot(&t.root);
    tune::apply(&root, &ctx(&root), &host, &[KnobGroup::Shield], &state).unwrap();
    let j1 = Journal::load(&state).unwrap().unwrap();
    let out = tune::apply(&root, &ctx(&root), &host, &[KnobGroup::Shield], &state).unwrap();
    assert!(out.items.is_empty(), "{}", out.to_text());
    assert_eq!(Journal::load(&state).unwrap().unwrap(), j1);
    // a later group on top (as the ladder does), then restore only that group
    let mid = snapshot(&t.root);
    tune::apply(&root, &ctx(&root), &host, &[KnobGroup::Governor], &state).unwrap();
    tune::restore(&root, &host, Some(&[KnobGroup::Governor]), &state).unwrap();
    assert_eq!(snapshot(&t.root), mid);
    assert!(state.exists(), "shield entries remain");
    tune::restore(&root, &host, None, &state).unwrap();
    assert_eq!(snapshot(&t.root), before);
}

/// A host that panics after `n` affinity changes: apply dies half-way, like a crash.
struct Crashing<'a> {
    inner: &'a FakeHost,
    left: std::sync::Mutex<u32>,
}

impl Host for Crashing<'_> {
    fn stop_service(&self, r: &SysRoot, h: &rttune::host::ServiceStop) -> std::io::Result<()> {
        self.inner.stop_service(r, h)
    }
    fn start_service(&self, r: &SysRoot, h: &rttune::host::ServiceStart) -> std::io::Result<()> {
        self.inner.start_service(r, h)
    }
    fn get_coalesce(&self, i: &str) -> std::io::Result<rttune::host::Coalesce> {
        self.inner.get_coalesce(i)
    }
    fn set_coalesce(&self, i: &str, c: &rttune::host::Coalesce) -> std::io::Result<()> {
        self.inner.set_coalesce(i, c)
    }
    fn set_affinity(&self, tid: u32, c: &CpuSet) -> std::io::Result<()> {
        let mut l = self.left.lock().unwrap();
        if *l == 0 {
            panic!("simulated crash");
        }
        *l -= 1;
        drop(l);
        self.inner.set_affinity(tid, c)
    }
    fn file_caps(&self, r: &SysRoot, p: &str) -> std::io::Result<Option<rttune::host::FileCaps>> {
        self.inner.file_caps(r, p)
    }
    fn rauc_status(&self) -> std::io::Result<Option<String>> {
        self.inner.rauc_status()
    }
}

#[test]
fn restore_after_crash_half_way() {
    let (_dirs, t, root, fake, state) = rig();
    let before = snapshot(&t.root);
    let crashing = Crashing {
        inner: &fake,
        left: std::sync::Mutex::new(2),
    };
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tune::apply(&root, &ctx(&root), &crashing, &KnobGroup::all(), &state)
    }));
    assert!(res.is_err(), "apply crashed");
    assert_ne!(
        snapshot(&t.root),
        before,
        "some knobs were changed before the crash"
    );
    let j = Journal::load(&state)
        .unwrap()
        .expect("journal written before any change");
    assert!(j.entries.iter().all(|e| e.state == EntryState::Pending));
    // a second apply after the crash completes the job and keeps the true originals
    tune::apply(&root, &ctx(&root), &fake, &KnobGroup::all(), &state).unwrap();
    let out = tune::restore(&root, &fake, None, &state).unwrap();
    assert_eq!(out.exit_code(), 0, "{}", out.to_text());
    assert_eq!(snapshot(&t.root), before);
}

#[test]
fn restore_directly_after_crash() {
    let (_dirs, t, root, fake, state) = rig();
    let before = snapshot(&t.root);
    let crashing = Crashing {
        inner: &fake,
        left: std::sync::Mutex::new(3),
    };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tune::apply(&root, &ctx(&root), &crashing, &KnobGroup::all(), &state)
    }));
    let out = tune::restore(&root, &fake, None, &state).unwrap();
    assert_eq!(out.exit_code(), 0, "{}", out.to_text());
    assert_eq!(snapshot(&t.root), before);
}

#[test]
fn restore_reports_drift_and_failures() {
    let (_dirs, _t, root, host, state) = rig();
    tune::apply(
        &root,
        &ctx(&root),
        &host,
        &[KnobGroup::TimerMigration, KnobGroup::WorkqueueMask],
        &state,
    )
    .unwrap();
    root.write("/sys/devices/virtual/workqueue/cpumask", "0f\n")
        .unwrap();
    root.inject_write_error("/proc/sys/kernel/timer_migration", libc::EPERM);
    let out = tune::restore(&root, &host, None, &state).unwrap();
    assert_eq!(out.exit_code(), 1);
    assert!(
        out.items
            .iter()
            .any(|i| i.result.starts_with("restored (it had been changed")),
        "{}",
        out.to_text()
    );
    assert!(
        out.items.iter().any(|i| i.result.starts_with("FAILED")),
        "{}",
        out.to_text()
    );
    let j = Journal::load(&state).unwrap().unwrap();
    assert_eq!(j.entries.len(), 1, "only the failed knob stays journalled");
    assert_eq!(
        root.read("/sys/devices/virtual/workqueue/cpumask").unwrap(),
        "ff"
    );
}

#[test]
fn stale_journal_from_previous_boot_is_discarded() {
    let (_dirs, _t, root, host, state) = rig();
    tune::apply(
        &root,
        &ctx(&root),
        &host,
        &[KnobGroup::TimerMigration],
        &state,
    )
    .unwrap();
    root.write("/proc/sys/kernel/random/boot_id", "00000000-new-boot\n")
        .unwrap();
    // restore refuses a journal of another boot (exit 2) and writes nothing; it stays for the
    // operator to see
    let e = tune::restore(&root, &host, None, &state).unwrap_err();
    assert_eq!(rttune::command::exit_code_of(&e), 2);
    assert!(e.to_string().contains("another boot"), "{e}");
    assert!(state.exists());
    assert_eq!(
        root.read("/proc/sys/kernel/timer_migration").unwrap(),
        "0",
        "nothing written"
    );
    // apply (rtcat-tune.service at the next boot) discards it and starts a new journal
    let out = tune::apply(
        &root,
        &ctx(&root),
        &host,
        &[KnobGroup::DefaultIrqAffinity],
        &state,
    )
    .unwrap();
    assert!(out.notes[0].contains("previous boot"), "{}", out.to_text());
    let j = Journal::load(&state).unwrap().unwrap();
    assert_eq!(j.boot_id, "00000000-new-boot");
    assert!(j.find("file:/proc/sys/kernel/timer_migration").is_none());
    tune::restore(&root, &host, None, &state).unwrap();
    assert!(!state.exists());
    assert_eq!(root.read("/proc/sys/kernel/timer_migration").unwrap(), "0");
}

#[test]
fn json_report_has_the_same_ids_as_text() {
    let (_d, t) = tree(TreeSpec::default());
    let root = t.sysroot();
    let r = doctor(&root, &FakeHost::new(&root), None);
    let v: serde_json::Value = serde_json::to_value(&r).unwrap();
    assert_eq!(v["schema"], "rttune.doctor/1");
    let ids: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let text = r.to_text();
    assert_eq!(ids.len(), 32);
    for c in v["checks"].as_array().unwrap() {
        let id = c["id"].as_str().unwrap();
        assert!(text.contains(&format!(" {id} ")), "{id}");
        assert!(["PASS", "WARN", "FAIL", "N/A"].contains(&c["verdict"].as_str().unwrap()));
        for k in ["observed", "expected", "why", "fix"] {
            assert!(c[k].is_string(), "{id}.{k}");
        }
        assert!(c["reboot"].is_boolean() && c["details"].is_array());
    }
    assert_eq!(
        v["summary"]["fail"].as_u64().unwrap() as usize,
        r.summary.fail
    );
}

#[test]
fn commands_run_on_a_fake_root() {
    use rttune::{DoctorOptions, TuneAction, TuneOptions};
    let (_d, t) = tree(TreeSpec::default());
    let r = t.root.clone();
    let doctor = |cpu: Option<usize>, json: bool| DoctorOptions {
        cpu,
        json,
        root: r.clone(),
        ..DoctorOptions::default()
    };
    let tune = |action: TuneAction| TuneOptions {
        root: r.clone(),
        ..TuneOptions::new(action)
    };
    let ctx = rttune::RtContext {
        rt_cpu: Some(6),
        iface: Some("eth1".into()),
        tune: tune_section(),
        wait: None,
        priority: None,
    };
    assert_eq!(rttune::run_doctor(&doctor(None, true), &ctx).unwrap(), 1);
    // explicit flag beats the context; a bad CPU is a clear error
    let e = rttune::run_doctor(&doctor(Some(9), false), &ctx)
        .unwrap_err()
        .to_string();
    assert!(e.contains("RT CPU 9 is not online"), "{e}");
    let before = snapshot(&t.root);
    assert_eq!(rttune::run_tune(&tune(TuneAction::Plan), &ctx).unwrap(), 0);
    assert_eq!(snapshot(&t.root), before);
    let a = TuneOptions {
        groups: vec![KnobGroup::Shield],
        housekeeping: Some("0-6".into()),
        ..tune(TuneAction::Apply)
    };
    let e = rttune::run_tune(&a, &ctx).unwrap_err().to_string();
    assert!(e.contains("overlaps the RT CPU"), "{e}");
    // default state file lives under the root; restore via CLI round-trips the files
    let a = TuneOptions {
        groups: vec![KnobGroup::DefaultIrqAffinity, KnobGroup::CStates],
        ..tune(TuneAction::Apply)
    };
    assert_eq!(rttune::run_tune(&a, &ctx).unwrap(), 0);
    assert!(t.root.join("var/lib/rtcat-tune/tune-state.json").exists());
    let no_cpu = rttune::RtContext::default();
    let st = tune(TuneAction::Status);
    assert_eq!(
        rttune::run_tune(&st, &no_cpu).unwrap(),
        0,
        "status needs no --cpu after apply"
    );
    assert_eq!(
        rttune::run_tune(&tune(TuneAction::Restore), &no_cpu).unwrap(),
        0,
        "restore needs no --cpu"
    );
    let e = rttune::run_tune(&st, &no_cpu).unwrap_err().to_string();
    assert!(e.contains("no RT CPU"), "{e}");
    assert!(!t.root.join("var/lib/rtcat-tune/tune-state.json").exists());
    let mut after = snapshot(&t.root);
    after.retain(|k, _| !k.starts_with("var"));
    assert_eq!(after, before);
}

#[test]
fn doctor_is_fast_on_a_big_tree() {
    let (_d, t) = tree(TreeSpec {
        extra_irqs: 286,
        extra_tasks: 250,
        ..TreeSpec::default()
    });
    let root = t.sysroot();
    let host = FakeHost::new(&root);
    let t0 = std::time::Instant::now();
    let r = doctor(&root, &host, None);
    let el = t0.elapsed();
    eprintln!("doctor on the big fake tree (unoptimised build): {el:?}");
    assert!(
        r.get("irq.affinity")
            .unwrap()
            .observed
            .starts_with("299 IRQs"),
        "{}",
        r.get("irq.affinity").unwrap().observed
    );
    // generous bound for an unoptimised build on a shared 2-vCPU machine; the release figure
    // is measured by `cargo run --release -p rttune --example bench_doctor`
    assert!(el < std::time::Duration::from_secs(5), "doctor took {el:?}");
}

#[test]
fn irqbalance_is_stopped_through_systemd_only_when_it_has_a_unit() {
    use rttune::host::{ServiceStop, plan_service_stop};
    let (_d, t) = tree(TreeSpec::default());
    let root = t.sysroot();
    assert_eq!(
        plan_service_stop(&root, "irqbalance", 600).unwrap(),
        ServiceStop::Systemd {
            unit: "irqbalance.service".into()
        }
    );
    std::fs::remove_file(t.root.join("lib/systemd/system/irqbalance.service")).unwrap();
    assert_eq!(
        plan_service_stop(&root, "irqbalance", 600).unwrap(),
        ServiceStop::Signalled {
            pid: 600,
            cmdline: vec!["/usr/sbin/irqbalance".into(), "--foreground".into()]
        }
    );
    std::fs::write(t.root.join("proc/600/cmdline"), b"").unwrap();
    let e = plan_service_stop(&root, "irqbalance", 600).unwrap_err();
    assert!(e.to_string().contains("no command line"), "{e}");
}

// --- tasks created while the shield is up ------------------------------------------------------

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse_list(s).unwrap()
}

/// `Cpus_allowed_list` of a task of the fake tree.
fn allowed(root: &SysRoot, pid: u32, tid: u32) -> String {
    let st = root
        .read_raw(&format!("/proc/{pid}/task/{tid}/status"))
        .unwrap();
    rttune::facts::status_field(&st, "Cpus_allowed_list")
        .unwrap()
        .to_string()
}

/// A task started `at` clock ticks after boot (the fake tree's shield goes up at 360000).
fn task(pid: u32, tid: u32, ppid: u32, comm: &str, at: u64, mask: &str) -> FakeTask {
    FakeTask {
        pid,
        tid,
        ppid,
        comm: comm.into(),
        starttime: at,
        cpus: cpus(mask),
        ..FakeTask::default()
    }
}

#[test]
fn restore_gives_tasks_created_under_the_shield_their_inherited_mask() {
    let (_dirs, t, root, host, state) = rig();
    // sshd with a mask of its own, so that what it hands down differs from init's
    host.set_affinity(400, &cpus("1-7")).unwrap();
    // started by its user on the housekeeping CPUs before the shield: not journalled
    t.add_task(&task(800, 800, 410, "pinned", 300_000, "0-5,7"));

    tune::apply(&root, &ctx(&root), &host, &[KnobGroup::Tasks], &state).unwrap();
    let j = Journal::load(&state).unwrap().unwrap();
    assert_eq!(j.tasks_since, Some(360_000), "uptime 3600.00 s at apply");
    let bash = rttune::facts::read_proc_ids(&root, 410).unwrap().1;
    assert!(
        j.find(&format!("task:410:{bash}")).is_some(),
        "bash journalled"
    );
    assert!(
        j.find("task:800:300000").is_none(),
        "already off the RT CPU"
    );
    assert_eq!(allowed(&root, 410, 410), "0-5,7");
    assert_eq!(allowed(&root, 400, 400), "1-5,7");

    // created under the shield, each with the mask it inherited (or was given since)
    t.set_uptime(3700);
    t.add_task(&task(500, 500, 410, "make", 370_000, "0-5,7")); // child of bash
    t.add_task(&task(400, 401, 1, "sshd-worker", 370_100, "1-5,7")); // new thread of sshd
    t.add_task(&task(510, 510, 410, "taskset", 370_200, "0-3")); // mask set deliberately
    t.add_task(&task(520, 520, 700, "stress-child", 370_300, "0-5,7")); // stress: not journalled
    t.add_task(&task(810, 810, 800, "pinned-child", 370_400, "0-5,7")); // of the pre-shield pin
    t.add_task(&FakeTask {
        flags: rttune::facts::PF_KTHREAD,
        ..task(530, 530, 2, "kworker/u16:2", 370_500, "0-5,7")
    });

    // restoring another group leaves the tasks alone
    tune::restore(&root, &host, Some(&[KnobGroup::Governor]), &state).unwrap();
    assert_eq!(allowed(&root, 500, 500), "0-5,7");
    assert_eq!(allowed(&root, 410, 410), "0-5,7");

    let out = tune::restore(&root, &host, Some(&[KnobGroup::Tasks]), &state).unwrap();
    let text = out.to_text();
    assert_eq!(out.exit_code(), 0, "{text}");
    assert!(!state.exists(), "{text}");
    // the journalled ones
    assert_eq!(allowed(&root, 410, 410), "0-7");
    assert_eq!(allowed(&root, 400, 400), "1-7");
    // the inherited ones get what their journalled ancestor had before the shield
    assert_eq!(allowed(&root, 500, 500), "0-7", "{text}");
    assert_eq!(allowed(&root, 400, 401), "1-7", "{text}");
    assert!(
        text.contains(
            "[tasks] task make[500] (started while the shield was up, inherited from parent \
             bash[410]) affinity 0-5,7 -> 0-7: restored"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "[tasks] task sshd-worker[401] (started while the shield was up, inherited from \
             thread sshd[400]) affinity 1-5,7 -> 1-7: restored"
        ),
        "{text}"
    );
    // everything else is left alone
    assert_eq!(allowed(&root, 510, 510), "0-3");
    assert_eq!(allowed(&root, 520, 520), "0-5,7");
    assert_eq!(allowed(&root, 800, 800), "0-5,7");
    assert_eq!(allowed(&root, 810, 810), "0-5,7");
    assert_eq!(allowed(&root, 530, 530), "0-5,7");
    let inherited: Vec<&str> = out
        .items
        .iter()
        .filter(|i| i.what.contains("started while the shield was up"))
        .map(|i| i.id.as_str())
        .collect();
    assert_eq!(inherited, ["task:401:370100", "task:500:370000"]);
    assert!(
        out.notes
            .iter()
            .any(|n| n.starts_with("1 task(s) started while the shield was up have a CPU mask")),
        "{text}"
    );
}

#[test]
fn restore_gives_a_grandchild_its_journalled_grandparents_mask() {
    let (_dirs, t, root, host, state) = rig();
    // bash's own mask, so that its grandchildren are told apart from init's
    host.set_affinity(410, &cpus("2-7")).unwrap();
    tune::apply(&root, &ctx(&root), &host, &KnobGroup::SHIELD, &state).unwrap();
    assert_eq!(allowed(&root, 410, 410), "2-5,7");
    // bash -> "sh -c (x) y" (not journalled, narrowed mask) -> sleep, and a thread of sleep;
    // the intermediate's comm has spaces and parentheses: its ppid comes after the LAST ')'
    t.add_task(&task(500, 500, 410, "sh -c (x) y", 370_000, "2-5,7"));
    t.add_task(&task(505, 505, 500, "sleep", 370_050, "2-5,7"));
    t.add_task(&task(505, 506, 500, "sleep-io", 370_060, "2-5,7"));
    let out = tune::restore(&root, &host, None, &state).unwrap();
    let text = out.to_text();
    assert_eq!(out.exit_code(), 0, "{text}");
    for (pid, tid) in [(410, 410), (500, 500), (505, 505), (505, 506)] {
        assert_eq!(allowed(&root, pid, tid), "2-7", "{pid}/{tid}: {text}");
    }
    assert!(
        text.contains(
            "task sleep[505] (started while the shield was up, inherited from ancestor \
             bash[410]) affinity 2-5,7 -> 2-7: restored"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "task sh -c (x) y[500] (started while the shield was up, inherited from parent \
             bash[410])"
        ),
        "{text}"
    );
}

#[test]
fn restore_does_not_trace_inheritance_through_a_reused_pid() {
    let (_dirs, t, root, host, state) = rig();
    host.set_affinity(410, &cpus("2-7")).unwrap();
    let bash = rttune::facts::read_proc_ids(&root, 410).unwrap().1;
    tune::apply(&root, &ctx(&root), &host, &[KnobGroup::Tasks], &state).unwrap();
    // bash (journalled: 2-7 narrowed to 2-5,7) exits; init starts another process that gets
    // pid 410 again, with init's narrowed mask; it has two children
    t.remove_process(410);
    t.add_task(&task(410, 410, 1, "bash", 370_000, "0-5,7"));
    t.add_task(&task(420, 420, 410, "vi", 370_100, "0-5,7"));
    // has the old bash's narrowed mask (set by hand): the old bash is not its ancestor
    t.add_task(&task(430, 430, 410, "less", 370_200, "2-5,7"));
    let out = tune::restore(&root, &host, None, &state).unwrap();
    let text = out.to_text();
    assert_eq!(out.exit_code(), 0, "{text}");
    let old = out
        .items
        .iter()
        .find(|i| i.id == format!("task:410:{bash}"))
        .unwrap();
    assert_eq!(old.result, "gone (task exited)");
    assert_eq!(allowed(&root, 410, 410), "0-7", "{text}");
    assert_eq!(allowed(&root, 420, 420), "0-7", "{text}");
    assert!(
        text.contains(
            "task vi[420] (started while the shield was up, inherited from ancestor \
             systemd[1]) affinity 0-5,7 -> 0-7: restored"
        ),
        "{text}"
    );
    assert_eq!(allowed(&root, 430, 430), "2-5,7", "{text}");
}

#[test]
fn journal_without_shield_time_leaves_new_tasks_alone() {
    let (_dirs, t, root, host, state) = rig();
    tune::apply(&root, &ctx(&root), &host, &[KnobGroup::Tasks], &state).unwrap();
    // as written by an rtcat that did not record it
    let mut j = Journal::load(&state).unwrap().unwrap();
    j.tasks_since = None;
    j.save(&state).unwrap();
    t.add_task(&task(500, 500, 410, "make", 370_000, "0-5,7"));
    let out = tune::restore(&root, &host, None, &state).unwrap();
    assert_eq!(out.exit_code(), 0);
    assert_eq!(allowed(&root, 410, 410), "0-7");
    assert_eq!(allowed(&root, 500, 500), "0-5,7");
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("does not say when the tasks group was applied")),
        "{}",
        out.to_text()
    );
}

#[test]
fn wrong_cpu_list_boot_arguments_fail_with_the_reason() {
    let (_d, t) = tree(TreeSpec {
        tuned: true,
        ..TreeSpec::default()
    });
    let root = t.sysroot();
    let host = FakeHost::new(&root);
    std::fs::write(
        t.root.join("proc/cmdline"),
        "root=/dev/mmcblk0p2 isolcpus=nohz,domain,managed_irq,6 nohz_full=5 rcu_nocbs=6-x irqaffinity=0-7\n",
    )
    .unwrap();
    let r = doctor(&root, &host, None);
    let get = |id: &str| r.get(id).unwrap_or_else(|| panic!("no check {id}"));
    let c = get("boot.nohz_full");
    assert_eq!(c.verdict, Verdict::Fail);
    assert_eq!(c.observed, "nohz_full=5 does not cover RT CPU 6");
    assert!(c.reboot && c.fix.contains("nohz_full=6"), "{c:?}");
    let c = get("boot.rcu_nocbs");
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.observed.starts_with("rcu_nocbs=6-x: "), "{c:?}");
    let c = get("boot.irqaffinity");
    assert_eq!(c.verdict, Verdict::Fail);
    assert_eq!(c.observed, "irqaffinity=0-7 includes RT CPU 6");
    assert!(c.fix.contains("irqaffinity=0-5,7"), "{c:?}");
    // absent: a WARN that asks for a reboot with the argument
    std::fs::write(t.root.join("proc/cmdline"), "root=/dev/mmcblk0p2\n").unwrap();
    let r = doctor(&root, &host, None);
    let c = r.get("boot.irqaffinity").unwrap();
    assert_eq!((c.verdict, c.observed.as_str()), (Verdict::Warn, "not set"));
    assert!(c.reboot);
}

#[test]
fn caps_from_the_unit_and_its_drop_ins_when_rtcat_is_not_running() {
    // untuned tree: rtcat not running, rtcat.service runs as User=rtcat without capabilities
    let (_d, t) = tree(TreeSpec::default());
    let root = t.sysroot();
    let host = FakeHost::new(&root);
    let caps = |want: Verdict, observed: &str| {
        let r = doctor(&root, &host, None);
        let c = r.get("caps.service").unwrap();
        assert_eq!(c.verdict, want, "{}", r.to_text());
        assert!(
            c.observed.contains(observed),
            "{observed:?} not in {:?}",
            c.observed
        );
        c.fix.clone()
    };
    let fix = caps(
        Verdict::Fail,
        "User=rtcat: missing CAP_SYS_NICE, CAP_IPC_LOCK, CAP_NET_RAW",
    );
    assert!(fix.contains("AmbientCapabilities=CAP_SYS_NICE CAP_IPC_LOCK CAP_NET_RAW"));
    let dropins = t.root.join("etc/systemd/system/rtcat.service.d");
    std::fs::create_dir_all(&dropins).unwrap();
    std::fs::write(
        dropins.join("10-caps.conf"),
        "[Service]\nAmbientCapabilities=CAP_SYS_NICE CAP_IPC_LOCK\nAmbientCapabilities=CAP_NET_RAW\n",
    )
    .unwrap();
    caps(Verdict::Pass, "User=rtcat: all present");
    // the bounding set is applied on top of the ambient set
    std::fs::write(
        dropins.join("20-bounding.conf"),
        "[Service]\nCapabilityBoundingSet=~CAP_NET_RAW\n",
    )
    .unwrap();
    caps(Verdict::Fail, "User=rtcat: missing CAP_NET_RAW");
    // a file that is not a drop-in is not read
    std::fs::remove_file(dropins.join("20-bounding.conf")).unwrap();
    std::fs::write(
        dropins.join("20-bounding.conf.off"),
        "CapabilityBoundingSet=\n",
    )
    .unwrap();
    caps(Verdict::Pass, "all present");
}

/// `rauc status --detailed --output-format=json` as RAUC 1.8 prints it on the A/B image after
/// an update to slot B (B booted and primary, A the fallback): keys as in RAUC's
/// `r_status_formatter_json`.
fn rauc_json(b_primary: bool, a_boot: &str) -> String {
    format!(
        r#"{{"compatible":"rtcat-rock-5b","variant":"","booted":"B","boot_primary":"{}",
        "slots":[
          {{"rootfs.0":{{"class":"rootfs","device":"/dev/mmcblk0p2","type":"ext4","bootname":"A",
            "state":"inactive","parent":null,"mountpoint":null,"boot_status":"{a_boot}",
            "slot_status":{{"bundle":{{"compatible":"rtcat-rock-5b"}}}}}}}},
          {{"rootfs.1":{{"class":"rootfs","device":"/dev/mmcblk0p3","type":"ext4","bootname":"B",
            "state":"booted","parent":null,"mountpoint":"/","boot_status":"good",
            "slot_status":{{"bundle":{{"compatible":"rtcat-rock-5b","version":"1.4.0"}},
              "checksum":{{"sha256":"0123456789abcdef0123","size":123}},
              "installed":{{"timestamp":"2026-12-04T10:00:00Z","count":1}},"status":"ok"}}}}}}
        ]}}"#,
        if b_primary { "rootfs.1" } else { "rootfs.0" }
    )
}

#[test]
fn doctor_reports_the_booted_slot_the_fallback_and_this_boots_gate_verdict() {
    let (_dirs, t, root, host, _state) = rig();
    let w = |p: &str, s: &str| {
        let p = t.root.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    };
    // not an A/B boot: nothing to say
    let c = doctor(&root, &host, None);
    assert_eq!(c.get("update.slots").unwrap().verdict, Verdict::NA);

    w(
        "proc/cmdline",
        "root=/dev/mmcblk0p3 rauc.slot=B isolcpus=6\n",
    );
    w("proc/sys/kernel/random/boot_id", "b00t-2\n");
    // A/B boot, RAUC missing: updates cannot work
    let r = doctor(&root, &host, None);
    let c = r.get("update.slots").unwrap();
    assert_eq!(c.verdict, Verdict::Fail, "{}", r.to_text());
    assert!(
        c.observed.contains("rauc is not installed"),
        "{}",
        c.observed
    );

    *host.rauc.lock().unwrap() = Some(Ok(rauc_json(true, "good")));
    // The gate decided on an earlier boot only: this boot is not proved yet.
    w(
        "etc/rtcat/health-gate.conf",
        "HOLD_S=60\nSTATE_DIR=/data/gate\n",
    );
    w(
        "data/gate/verdicts.log",
        "2026-12-01T08:00:00Z good slot=A rtcat held OP for 60s\n\
         2026-12-04T10:01:00Z good slot=B boot=b00t-1 rtcat held OP for 60s\n",
    );
    let r = doctor(&root, &host, None);
    let c = r.get("update.slots").unwrap();
    assert_eq!(c.verdict, Verdict::Warn, "{}", r.to_text());
    assert!(
        c.observed
            .starts_with("booted B (rootfs.1), not marked yet; other A (rootfs.0) boot good"),
        "{}",
        c.observed
    );
    assert!(c.details.iter().any(|d| d.contains("bundle 1.4.0 sha256 0123456789ab, installed 2026-12-04T10:00:00Z")), "{:?}", c.details);
    assert!(
        c.details.iter().any(|d| d.contains("no install record")),
        "{:?}",
        c.details
    );

    // This boot proved itself: PASS.
    w(
        "data/gate/verdicts.log",
        "2026-12-04T10:01:00Z good slot=B boot=b00t-1 x\n\
         2026-12-04T11:00:00Z good slot=B boot=b00t-2 rtcat held OP for 60s (3 subdevices)\n",
    );
    let r = doctor(&root, &host, None);
    let c = r.get("update.slots").unwrap();
    assert_eq!(c.verdict, Verdict::Pass, "{}", r.to_text());
    assert_eq!(
        c.observed,
        "booted B (rootfs.1), marked good 2026-12-04T11:00:00Z; other A (rootfs.0) boot good"
    );
    assert!(c.fix.is_empty());

    // No fallback (A was refused by U-Boot) and the next boot would start A: WARN with both.
    *host.rauc.lock().unwrap() = Some(Ok(rauc_json(false, "bad")));
    let r = doctor(&root, &host, None);
    let c = r.get("update.slots").unwrap();
    assert_eq!(c.verdict, Verdict::Warn, "{}", r.to_text());
    assert!(
        c.details.iter().any(|d| d.contains("cannot roll back")),
        "{:?}",
        c.details
    );
    assert!(
        c.details
            .iter()
            .any(|d| d.contains("the next boot starts slot rootfs.0")),
        "{:?}",
        c.details
    );

    // The gate refused this boot: FAIL with its reason.
    *host.rauc.lock().unwrap() = Some(Ok(rauc_json(true, "good")));
    w(
        "data/gate/verdicts.log",
        "2026-12-04T11:05:00Z bad slot=B boot=b00t-2 not proved within 300s: the master is not in OP\n",
    );
    let r = doctor(&root, &host, None);
    let c = r.get("update.slots").unwrap();
    assert_eq!(c.verdict, Verdict::Fail, "{}", r.to_text());
    assert!(
        c.details[0].contains("the master is not in OP"),
        "{:?}",
        c.details
    );

    // RAUC's service unreachable / unreadable output: WARN naming it, never a panic.
    *host.rauc.lock().unwrap() = Some(Err(std::io::Error::other("D-Bus: no rauc service")));
    let c = doctor(&root, &host, None);
    assert!(
        c.get("update.slots")
            .unwrap()
            .observed
            .contains("D-Bus: no rauc service")
    );
    *host.rauc.lock().unwrap() = Some(Ok("{\"slots\": 7}".into()));
    let r = doctor(&root, &host, None);
    let c = r.get("update.slots").unwrap();
    assert_eq!(c.verdict, Verdict::Warn);
    assert!(c.observed.contains("cannot read"), "{}", c.observed);
    // A command line naming a slot RAUC does not know: FAIL.
    *host.rauc.lock().unwrap() = Some(Ok(rauc_json(true, "good")));
    w("proc/cmdline", "root=/dev/mmcblk0p3 rauc.slot=C\n");
    let r = doctor(&root, &host, None);
    assert_eq!(r.get("update.slots").unwrap().verdict, Verdict::Fail);
}
