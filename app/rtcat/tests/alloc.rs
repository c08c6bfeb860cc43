//! Steady state of the cyclic thread: zero heap allocations and zero page faults per cycle.
//!
//! A counting global allocator counts per thread; the application hook (which runs in the cyclic
//! thread) switches counting on after a warm-up and samples the thread's minor faults.

use ecsim::{Faults, SegmentSpec};
use rtcat::config::{Config, TxRxMode};
use rtcat::runner::{Job, execute};
use rtcat_master::WaitMode;
use rtcat_master::echo::EchoCheck;
use rtcat_master::master::Target;
use rtcat_master::{AppError, Application, Cycle, Setup};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{ALLOCS, TRACK};

const WARMUP: u64 = 200;

/// Wraps the echo check; turns allocation tracking on in the cyclic thread after the warm-up.
struct Probe {
    inner: EchoCheck,
    faults_at_warmup: Arc<AtomicU64>,
    faults_at_end: Arc<AtomicU64>,
    cycles_tracked: Arc<AtomicU64>,
    /// Typed accessors read every cycle: the named-entry path must not allocate either.
    typed: Option<(rtcat_master::Input<u32>, rtcat_master::Input<u16>)>,
    sum: u64,
}

impl Application for Probe {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let cycle = cx.status.cycle;
        {
            if cycle == WARMUP {
                TRACK.with(|t| t.set(true));
                self.faults_at_warmup
                    .store(rtcat_master::rt::thread_minor_faults(), Ordering::Relaxed);
            } else if cycle > WARMUP {
                self.faults_at_end
                    .store(rtcat_master::rt::thread_minor_faults(), Ordering::Relaxed);
                self.cycles_tracked.store(cycle - WARMUP, Ordering::Relaxed);
            }
        }
        if let Some((a, b)) = self.typed {
            self.sum = self
                .sum
                .wrapping_add(u64::from(cx.get(&a)) + u64::from(cx.get(&b)));
        }
        self.inner.cycle(cx)
    }
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.typed = Some((
            setup.input_of(0, "Inputs.Input 1")?,
            setup.input_at(2, 0x6000, 6)?,
        ));
        self.inner.configure(setup)
    }
}

/// `wait`: how the inline cycle waits; with a mode other than sleep the simulated replies come
/// 50 µs late (`delay-us`), so that the cycle really waits (polls, learns the round trip).
///
/// The count of allocations is a verdict of this machine too, and is retried as
/// `ecsim::noise` retries: ethercrab 0.7.1 registers an `async_io::Timer` per frame, which goes
/// through async-io's reactor queue (1000 operations); when the `async-io` thread (SCHED_OTHER,
/// off the cycle's CPU) gets no CPU for a second — a loaded shared machine — the queue fills
/// and the cyclic thread drains it itself into a map, which allocates (docs/NOTES.md §1.2). A
/// cycle that allocates by itself does so in every attempt.
fn steady_state(mode: TxRxMode, dc: bool, wait: WaitMode) -> Result<(), String> {
    let root = nix::unistd::geteuid().is_root();
    let mut cfg = Config::default();
    // With distributed clocks: SYNC0 on the three devices, tx_rx_dc and the phase lock.
    let mut spec = SegmentSpec::reference();
    if dc {
        for d in &mut spec.devices {
            d.dc = true;
        }
        cfg.master.dc.enabled = true;
        cfg.master.dc.static_sync_iterations = 200;
    }
    cfg.master.cycle.txrx = mode;
    cfg.master.cycle.wait = Some(wait);
    let faults = Faults::new();
    if wait != WaitMode::Sleep {
        faults.apply(ecsim::FaultCommand::DelayUs(50));
    }
    cfg.master.cycle.period_us = 1000;
    cfg.master.bus.response_timeout_us = Some(1000);
    cfg.output.status_interval_ms = 0;
    cfg.master.health.bad_cycles_before_recovery = 1_000_000;
    // Pin to the last CPU; locked memory needs root (without it, page faults are not asserted).
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    cfg.master.cycle.cpu = Some(ncpu - 1);
    cfg.master.cycle.txrx_cpu = Some(0);
    let w = Arc::new(AtomicU64::new(0));
    let e = Arc::new(AtomicU64::new(0));
    let c = Arc::new(AtomicU64::new(0));
    let dir = tempfile::tempdir().unwrap();
    rtcat::signals::reset();
    ALLOCS.store(0, Ordering::Relaxed);
    let migrated_before = pages_migrated();
    let r = execute(Job {
        cfg,
        target: Some(Target::Sim { spec, faults }),
        duration: Some(Duration::from_secs(2)),
        no_rt: !root,
        stage: None,
        dir: std::sync::Arc::new(safefs::Dir::create_all(dir.path()).unwrap()),
        json: None,
        samples: false,
        app: Box::new(Probe {
            inner: EchoCheck::default(),
            faults_at_warmup: w.clone(),
            faults_at_end: e.clone(),
            cycles_tracked: c.clone(),
            typed: None,
            sum: 0,
        }),
        notifier: None,
        echo_events: false,
        print_table: false,
        retry_start: false,
        live: Default::default(),
        axes: None,
        floor: None,
        shm: None,
    })
    .expect("run");
    let tracked = c.load(Ordering::Relaxed);
    assert!(
        tracked > 500,
        "{mode:?}: only {tracked} steady-state cycles"
    );
    let allocs = ALLOCS.load(Ordering::Relaxed);
    if allocs != 0 {
        return Err(format!(
            "{mode:?} dc={dc} wait={wait}: {allocs} allocations in {tracked} steady-state cycles \
             ({} frames lost, {} missed deadlines)",
            r.summary.frames_lost, r.summary.missed_deadlines
        ));
    }
    let waited = r.summary.bus.as_ref().and_then(|b| b.wait.as_ref());
    match mode {
        TxRxMode::Inline => assert_eq!(waited.map(|w| w.mode.as_str()), Some(wait.name())),
        TxRxMode::Thread => assert!(waited.is_none(), "{waited:?}"),
    }
    if dc {
        assert!(
            r.summary
                .dc
                .as_ref()
                .is_some_and(|d| d.phase_error_ns.count > 500),
            "{mode:?}: no DC phase errors recorded"
        );
    }
    let faults = e.load(Ordering::Relaxed) - w.load(Ordering::Relaxed);
    let migrated = pages_migrated().saturating_sub(migrated_before);
    if root && faults != 0 && compaction_moves_locked_pages() && migrated != 0 {
        // Locked memory is not pinned in place: with vm.compact_unevictable_allowed = 1 (the
        // default of non-RT kernels; PREEMPT_RT's is 0) compaction migrates locked pages, and the
        // next touch takes a minor fault. That is this machine's memory pressure (other builds),
        // not the cycle: retried; without migrations a fault is still a defect.
        return Err(format!(
            "{mode:?} dc={dc} wait={wait}: {faults} minor page faults in {tracked} cycles while \
             the kernel migrated {migrated} pages (vm.compact_unevictable_allowed = 1)"
        ));
    }
    if root {
        assert_eq!(
            faults, 0,
            "{mode:?} dc={dc} wait={wait}: {faults} minor page faults in {tracked} cycles"
        );
        assert!(!r.summary.system.no_rt);
        assert_eq!(r.summary.system.policy, rtcat_results::Policy::Fifo);
    } else {
        eprintln!("not root: memory not locked, {faults} page faults not asserted");
        assert!(std::env::var_os("RTCAT_REQUIRE_ROOT_TESTS").is_none());
    }
    Ok(())
}

/// Pages the kernel migrated so far (`pgmigrate_success` of /proc/vmstat; 0 when unreadable).
fn pages_migrated() -> u64 {
    safefs::SysRoot::live()
        .read_opt("/proc/vmstat")
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("pgmigrate_success "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Whether compaction may move locked (unevictable) pages on this kernel.
fn compaction_moves_locked_pages() -> bool {
    safefs::SysRoot::live().read_opt("/proc/sys/vm/compact_unevictable_allowed") == Some("1".into())
}

#[test]
fn no_allocation_and_no_page_fault_per_cycle() {
    // One test: the tracking flag and counter are process-wide.
    for (mode, dc, wait) in [
        (TxRxMode::Inline, false, WaitMode::Sleep),
        (TxRxMode::Thread, false, WaitMode::Sleep),
        (TxRxMode::Inline, true, WaitMode::Sleep),
        (TxRxMode::Thread, true, WaitMode::Sleep),
        (TxRxMode::Inline, false, WaitMode::Busy),
        (TxRxMode::Inline, false, WaitMode::Hybrid),
    ] {
        ecsim::noise::within_machine_noise(
            &format!("steady state {mode:?} dc={dc} wait={wait}"),
            |_| steady_state(mode, dc, wait),
        );
    }
}
