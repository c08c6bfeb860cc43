//! `[health] recovery = "subdevice"` on the simulated I/O segment of `examples/segment-io.toml`:
//! one subdevice that leaves OP (AL error, power cycle) is brought back alone while the others
//! keep cycling with valid data; one swapped for another identity is refused, never driven.
//!
//! Timing-dependent: how long the faulted subdevice takes to come back depends on the load of the
//! machine (the worker is a normal thread). A run lasts until its story is told (the fault, the
//! return, some cycles after), however slowly; the time bound is judged when the machine gave
//! the run its CPU (`support::Machine`), and an attempt that misses it is retried as
//! `ecsim::noise` does. The counts of invalid cycles of the healthy subdevices do not depend on
//! timing and are asserted exactly.

mod support;

use ecsim::noise::{ensure, within_machine_noise};
use ecsim::{FaultCommand, Faults, SegmentSpec};
use rtcat_master::config::{BringUp, RecoveryPolicy, TxRxMode};
use rtcat_master::{
    Application, Config, Cycle, Recovery, Stop, SubdeviceCause, SubdeviceChange, SubdeviceEvent,
};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::line::{Watch, example, no_frame_lost, segment_io, sim_run};

/// The tests share the machine's two CPUs: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const N: usize = 3;

/// Applies a fault at the first cycle from `fault_at` (numbers skip periods a loaded machine
/// missed), records the line, and once the fault is applied and `done` holds for the first
/// time raises `done_flag`, runs `tail` more cycles, raises `ready` and (with
/// `stop_when_ready`) stops the run: a run lasts as many cycles as its story needs, however
/// long a loaded machine takes to tell it.
struct Probe {
    faults: Faults,
    fault_at: u64,
    fault: Option<FaultCommand>,
    /// Raised when the fault is applied; its log entry.
    applied: Arc<AtomicBool>,
    applied_at: usize,
    w: Watch<N>,
    done: fn(&Probe) -> bool,
    tail: usize,
    done_at: Option<usize>,
    done_flag: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
    stop_when_ready: bool,
    stop: Stop,
}

impl Probe {
    fn new(faults: Faults, fault_at: u64, fault: FaultCommand) -> Self {
        Probe {
            faults,
            fault_at,
            fault: Some(fault),
            applied: Default::default(),
            applied_at: 0,
            w: Watch::new(200_000),
            done: |_| true,
            tail: 100,
            done_at: None,
            done_flag: Default::default(),
            ready: Default::default(),
            stop_when_ready: true,
            stop: Stop::new(),
        }
    }

    /// Cycles in which subdevice `i` had invalid data (frames lost included).
    fn invalid(&self, i: usize) -> usize {
        self.w.invalid(i)
    }

    /// The line back from the fault's outage for 100 cycles.
    fn back(&self) -> bool {
        self.fault.is_none() && self.w.back_since(self.applied_at, 100)
    }

    /// A thread that runs `then` `delay` after the fault was applied (not at all if the run
    /// stops first without it): the second act of a story told in time, not in cycles.
    fn after_fault(
        &self,
        delay: Duration,
        then: impl FnOnce() + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let (applied, stop) = (self.applied.clone(), self.stop.clone());
        std::thread::spawn(move || {
            while !applied.load(Ordering::Acquire) && !stop.is_requested() {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(delay);
            then();
        })
    }
}

impl Application for Probe {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let st = cx.status;
        if st.cycle >= self.fault_at
            && let Some(f) = self.fault.take()
        {
            self.faults.apply(f);
            self.applied_at = self.w.log.len();
            self.applied.store(true, Ordering::Release);
        }
        self.w.cycle(st);
        if self.fault.is_none() && self.done_at.is_none() && (self.done)(self) {
            self.done_at = Some(self.w.log.len());
            self.done_flag.store(true, Ordering::Release);
        }
        if self
            .done_at
            .is_some_and(|d| self.w.log.len() >= d + self.tail)
        {
            self.ready.store(true, Ordering::Release);
            if self.stop_when_ready {
                self.stop.request();
            }
        }
    }

    fn on_recovery(&mut self, r: &Recovery) {
        self.w.on_recovery(r);
    }

    fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        self.w.on_subdevice(e);
    }
}

/// The wall time a run may take to tell its story (1-4 s on an idle machine).
const CAP: Duration = Duration::from_secs(60);

/// A run of `cfg` on `spec` until the probe stops it: an attempt's reason when it timed out or
/// reached [`CAP`] first (`support::run_attempt`).
fn run_story(
    cfg: Config,
    spec: SegmentSpec,
    faults: Faults,
    p: &mut Probe,
    sdo: Option<rtcat_master::SdoService>,
) -> Result<rtcat_master::Outcome, String> {
    // The TX/RX thread's hand-offs need SCHED_FIFO not to lose frames on a loaded machine: as
    // root (CI) it gets it.
    let no_rt = !(cfg.cycle.txrx == TxRxMode::Thread && nix::unistd::geteuid().is_root());
    let mut run = sim_run(cfg, spec, faults, p.stop.clone(), CAP);
    run.no_rt = no_rt;
    run.sdo = sdo;
    let out = support::run_attempt(run, p)?;
    ensure(p.stop.is_requested(), || {
        format!(
            "{} s passed before the run's story was told ({} cycles, fault {})",
            CAP.as_secs(),
            p.w.log.len(),
            if p.fault.is_none() {
                "applied"
            } else {
                "not yet"
            }
        )
    })?;
    Ok(out)
}

/// The configuration of the I/O segment's tests (`txrx`: how the frames are moved).
fn io_config(txrx: TxRxMode) -> Config {
    let mut cfg = Config::default();
    support::patient(&mut cfg);
    cfg.cycle.txrx = txrx;
    cfg.cycle.period_us = 1000;
    cfg.health.recovery = RecoveryPolicy::Subdevice;
    cfg.health.recovery_backoff_ms = 50;
    // A subdevice out of OP must not count towards a segment recovery at all. With a TX/RX
    // thread a frame lost to this VM's cross-CPU hand-offs (SCHED_FIFO or not, seen in CI in
    // three attempts in a row) must not end the run in a segment recovery either: a few bad
    // cycles in a row are tolerated there, and `recovered_alone_in` allows the healthy ones as
    // many invalid cycles as frames were lost.
    cfg.health.bad_cycles_before_recovery = if txrx == TxRxMode::Thread { 5 } else { 1 };
    cfg
}

/// The configuration of an example (`examples/<dir>/rtcat.toml`) and its segment, recovered per
/// subdevice.
fn example_setup(dir: &str) -> (Config, SegmentSpec) {
    let spec = SegmentSpec::load(&example(&format!("{dir}/segment.toml"))).expect("segment");
    let mut cfg = Config::load(&example(&format!("{dir}/rtcat.toml"))).expect("config");
    support::patient(&mut cfg);
    cfg.health.recovery = RecoveryPolicy::Subdevice;
    cfg.health.recovery_backoff_ms = 50;
    (cfg, spec)
}

/// Bound for a non-DC subdevice back in OP, generous for a loaded CI machine (measured on an
/// idle one: see docs/NOTES.md); not judged when the machine kept the run waiting for a CPU
/// (`support::Machine`).
const BACK_WITHIN_NS: u64 = 500_000_000;

/// Run a fault on position 1 and check that it came back alone; returns its outage (ns).
fn recovered_alone(fault: FaultCommand, cause: SubdeviceCause) -> Result<u64, String> {
    recovered_alone_in(fault, cause, TxRxMode::Inline)
}

fn recovered_alone_in(
    fault: FaultCommand,
    cause: SubdeviceCause,
    txrx: TxRxMode,
) -> Result<u64, String> {
    let faults = Faults::new();
    let mut p = Probe::new(faults.clone(), 300, fault);
    p.done = Probe::back;
    let machine = support::Machine::watch();
    let out = run_story(io_config(txrx), segment_io(), faults, &mut p, None)?;
    // A frame lost to the machine's scheduling invalidates everyone's data for that cycle.
    // Inline, with bad_cycles_before_recovery = 1, it re-initialises the segment: the
    // machine's verdict, not the recovery's, so the attempt is retried. With a TX/RX thread a
    // lost frame is tolerated (see `io_config`) and only its own cycle may be invalid.
    let lost = out.rec.frames_lost;
    let tolerated = if txrx == TxRxMode::Thread { lost } else { 0 };
    if lost > tolerated || out.rec.recoveries > 0 && lost > 0 {
        return Err(format!("{lost} frames lost to the machine"));
    }
    // No whole-segment recovery, and the healthy ones lost no cycle of data but the lost
    // frames' own.
    assert_eq!(out.rec.recoveries, 0, "{:?}", p.w.recoveries);
    assert!(p.w.recoveries.is_empty());
    let tolerated = usize::try_from(tolerated).unwrap_or(usize::MAX);
    assert!(
        p.invalid(0) <= tolerated && p.invalid(2) <= tolerated,
        "healthy ones' data: {} and {} invalid cycles, {lost} frames lost",
        p.invalid(0),
        p.invalid(2)
    );
    let out_cycles = p.invalid(1);
    assert!(out_cycles > 0, "position 1 was seen out");
    assert!(matches!(
        p.w.events.first().map(|e| (e.position, e.change)),
        Some((1, SubdeviceChange::Lost { .. }))
    ));
    let (got, outage, attempts) = p.w.back_of(1).expect("position 1 back");
    assert_eq!(got, cause);
    assert_eq!(attempts, 1);
    // Back in OP with valid data for the rest of the run.
    let last = p.w.log.last().expect("cycles");
    assert!(last.all_well(), "{last:?}");
    machine.within("position 1's recovery", outage, BACK_WITHIN_NS)?;
    Ok(outage)
}

#[test]
fn an_al_error_is_recovered_alone_and_the_others_lose_no_cycle() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = within_machine_noise("subdevice recovery", |_| {
        recovered_alone(
            FaultCommand::SubdeviceError {
                position: 1,
                code: 0x001b,
            },
            SubdeviceCause::AlError(0x001b),
        )
    });
    eprintln!(
        "AL error: position 1 back in OP after {:.1} ms",
        ns as f64 / 1e6
    );
}

/// The same with a TX/RX thread moving the frames (the worker's frames go with it, not in the
/// cycle's budget).
#[test]
fn an_al_error_is_recovered_alone_with_a_txrx_thread() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = within_machine_noise("subdevice recovery", |_| {
        recovered_alone_in(
            FaultCommand::SubdeviceError {
                position: 1,
                code: 0x001b,
            },
            SubdeviceCause::AlError(0x001b),
            TxRxMode::Thread,
        )
    });
    eprintln!(
        "AL error, TX/RX thread: position 1 back in OP after {:.1} ms",
        ns as f64 / 1e6
    );
}

#[test]
fn a_power_cycled_subdevice_gets_its_address_back_and_is_recovered_alone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = within_machine_noise("subdevice recovery", |_| {
        recovered_alone(
            FaultCommand::PowerCycleOne { position: 1 },
            SubdeviceCause::PowerCycled,
        )
    });
    eprintln!(
        "power cycle: position 1 back in OP after {:.1} ms",
        ns as f64 / 1e6
    );
}

/// Position 1 replaced by a device like `like` of `seg` (`replace 1 LIKE`) with the
/// per-subdevice recovery: refused, never driven — no segment recovery, the others 0 invalid
/// cycles, never back, out of OP with its data invalid to the end. The refusal: found and
/// expected identities, and the aliases when it was refused for its alias.
fn swapped_and_refused(seg: SegmentSpec, like: usize) -> (Ids, Ids, Option<(u16, u16)>) {
    let (out, p) = within_machine_noise("a swapped device", |_| {
        let faults = Faults::new();
        let mut p = Probe::new(
            faults.clone(),
            300,
            FaultCommand::Replace { position: 1, like },
        );
        // The refusal, then 500 cycles in which it must not be driven.
        p.done = |p| refused(&p.w.events).is_some();
        p.tail = 500;
        let out = run_story(
            io_config(TxRxMode::Inline),
            seg.clone(),
            faults,
            &mut p,
            None,
        )?;
        no_frame_lost(&out)?;
        Ok((out, p))
    });
    assert_eq!(out.rec.recoveries, 0, "no segment recovery remaps it");
    assert_eq!((p.invalid(0), p.invalid(2)), (0, 0));
    let (found, expected) = refused(&p.w.events).expect("a refusal event");
    // Never back, never driven: out of OP (INIT) to the end, its data invalid.
    assert!(p.w.back_of(1).is_none());
    let last = p.w.log.last().expect("cycles");
    assert!(!last.valid[1] && !last.in_op[1], "{last:?}");
    let alias = p.w.events.iter().find_map(|e| match e.change {
        SubdeviceChange::Refused { alias, .. } if e.position == 1 => alias,
        _ => None,
    });
    (found, expected, alias)
}

#[test]
fn a_swapped_identity_is_refused_and_never_driven() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (found, expected, alias) = swapped_and_refused(segment_io(), 0);
    assert_ne!(found, expected);
    assert_eq!(found.1, 0x0001_0008, "the EL1008-SIM's identity was found");
    assert_eq!(alias, None);
}

/// Another unit of the same identity swapped in with another station alias (0x0012: what tells
/// identical units apart, and what a configuration may select by) is another device: refused,
/// never driven in the place of the one brought up. The I/O segment with a fourth device, a
/// copy of the output terminal at position 1 with alias 0x0021; position 1 swapped for one like
/// it.
#[test]
fn a_unit_with_another_station_alias_is_refused_and_never_driven() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (found, expected, alias) = swapped_and_refused(segment_with_twin(), 3);
    assert_eq!(found, expected, "the same identity");
    assert_eq!(alias, Some((0x0021, 0x0000)), "refused for its alias");
}

/// The same swap under `[health] recovery = "segment"`: the whole segment's re-initialisation
/// finds the identities of the first bring-up but another station alias at position 1, and
/// refuses it as a changed topology (retried) instead of driving the other unit there.
#[test]
fn a_re_initialisation_refuses_a_unit_with_another_station_alias() {
    use rtcat_master::stats::EventKind;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, events) = within_machine_noise("another station alias, segment policy", |_| {
        let faults = Faults::new();
        let mut p = Probe::new(
            faults.clone(),
            300,
            FaultCommand::Replace {
                position: 1,
                like: 3,
            },
        );
        p.done = |_| false;
        let stop = p.stop.clone();
        let stopper = p.after_fault(Duration::from_millis(1500), move || stop.request());
        let mut cfg = io_config(TxRxMode::Inline);
        cfg.health.recovery = RecoveryPolicy::Segment;
        let run = sim_run(cfg, segment_with_twin(), faults, p.stop.clone(), CAP);
        let ran = support::line::run_with_events(run, &mut p, |_| {});
        p.stop.request();
        stopper.join().expect("stopper");
        let (out, events) = ran?;
        Ok((out, events))
    });
    let refused = events.iter().any(|k| {
        matches!(
            k,
            EventKind::TopologyChanged {
                position: 1,
                alias: Some((0x0021, 0x0000)),
                ..
            }
        )
    });
    assert!(refused, "{events:?}");
    assert_eq!(out.rec.recoveries, 0, "the other unit driven: {events:?}");
}

/// The I/O segment with a fourth device: a copy of the output terminal at position 1 with
/// station alias 0x0021 (the same identity, another unit).
fn segment_with_twin() -> SegmentSpec {
    let mut seg = segment_io();
    let mut twin = seg.devices[1].clone();
    twin.alias = 0x0021;
    twin.serial += 100;
    seg.devices.push(twin);
    seg
}

/// Position 1's refusal: (found, expected) identities.
type Ids = (u32, u32, u32);
fn refused(events: &[SubdeviceEvent]) -> Option<(Ids, Ids)> {
    events.iter().find_map(|e| match e.change {
        SubdeviceChange::Refused {
            found, expected, ..
        } if e.position == 1 => Some((found, expected)),
        _ => None,
    })
}

#[test]
fn the_segment_policy_still_reinitialises_everything() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, p) = within_machine_noise("the segment policy", |_| {
        let faults = Faults::new();
        let mut p = Probe::new(
            faults.clone(),
            300,
            FaultCommand::SubdeviceError {
                position: 1,
                code: 0x001b,
            },
        );
        p.done = Probe::back;
        let mut cfg = io_config(TxRxMode::Inline);
        cfg.health.recovery = RecoveryPolicy::Segment;
        cfg.health.bad_cycles_before_recovery = Config::default().health.bad_cycles_before_recovery;
        let out = run_story(cfg, segment_io(), faults, &mut p, None)?;
        no_frame_lost(&out)?;
        Ok((out, p))
    });
    assert_eq!(out.rec.recoveries, 1);
    assert!(
        p.w.events.is_empty(),
        "no per-subdevice events: {:?}",
        p.w.events
    );
    // Position 1 was out until the whole segment was re-initialised (the others went down with
    // it: the application is not called while the segment is brought up again).
    assert!(p.invalid(1) >= 10, "{}", p.invalid(1));
}

/// The CoE example (`examples/coe`): its servo (position 2) is power-cycled, which resets its
/// dictionary; brought back alone, it has its `[[device]]` configuration again (PDO mapping and
/// assignment, startup SDOs), read back by SDO while the segment cycles.
#[test]
fn a_power_cycled_coe_device_gets_its_device_configuration_back() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    type Read = Vec<Result<Vec<u8>, rtcat_master::acyclic::SdoFailure>>;
    let want: Read = vec![
        Ok(50_000u32.to_le_bytes().to_vec()),
        Ok(vec![4]),
        Ok(0x607a_0020u32.to_le_bytes().to_vec()),
        Ok(vec![1]),
    ];
    let (out, p, read) = within_machine_noise("a CoE device's configuration", |_| {
        let (mut cfg, spec) = example_setup("coe");
        cfg.health.bad_cycles_before_recovery = 1;
        let faults = Faults::new();
        let (client, service) = rtcat_master::acyclic::sdo_queue(8, Duration::from_micros(300));
        let mut p = Probe::new(
            faults.clone(),
            300,
            FaultCommand::PowerCycleOne { position: 2 },
        );
        // The reader stops the run: once it read the configured values, or 3000 cycles after
        // position 2 was back, whatever it read.
        p.done = |p| p.w.back_of(2).is_some();
        p.tail = 3000;
        p.stop_when_ready = false;
        let (stop, back, ready) = (p.stop.clone(), p.done_flag.clone(), p.ready.clone());
        let wanted = want.clone();
        let reader = std::thread::spawn(move || {
            // From position 2's return on (requests to it while it is being recovered made the
            // worker's attempt fail), until the configured values are read back.
            let t = Duration::from_millis(500);
            let mut read: Read = Vec::new();
            while !stop.is_requested() && !ready.load(Ordering::Acquire) {
                if back.load(Ordering::Acquire) {
                    read = [(0x6085u16, 0u8), (0x1600, 0), (0x1600, 2), (0x1c13, 0)]
                        .iter()
                        .map(|&(i, s)| client.read(2, i, s, t).map(|d| d.as_slice().to_vec()))
                        .collect();
                    if read == wanted {
                        break;
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            stop.request();
            read
        });
        let out = run_story(cfg, spec, faults, &mut p, Some(service));
        p.stop.request();
        let read = reader.join().expect("reader");
        let out = out?;
        no_frame_lost(&out)?;
        // One outage of position 2 (the power cycle) and one attempt that brought it back,
        // else the machine's verdict: a CoE device's recovery writes its configuration by
        // mailbox, whose timeouts (100 ms for the mailbox to be free, not configurable) a
        // loaded machine outlasts (seen beside a CI build: position 2 given up in PRE-OP and
        // the segment re-initialised).
        let of_2: Vec<_> = p.w.events.iter().filter(|e| e.position == 2).collect();
        ensure(of_2.len() == 2 && p.w.recoveries.is_empty(), || {
            format!(
                "position 2's outages and attempts: {of_2:?}, {:?}",
                p.w.recoveries
            )
        })?;
        Ok((out, p, read))
    });
    assert_eq!(out.rec.recoveries, 0, "{:?}", p.w.recoveries);
    assert_eq!((p.invalid(0), p.invalid(1)), (0, 0), "healthy ones' data");
    let (cause, _, _) = p.w.back_of(2).expect("position 2 back");
    assert_eq!(cause, SubdeviceCause::PowerCycled, "{:?}", p.w.events);
    assert_eq!(read, want);
}

/// The built-in axes application on the two DC drives of `examples/cia402`, with a fault
/// injected and every cycle's validity and every per-subdevice event recorded.
struct DcProbe {
    app: rtcat_master::axes::AxesApp,
    inner: Probe,
}

impl rtcat_master::Layer for DcProbe {
    fn inner(&mut self) -> &mut dyn Application {
        &mut self.app
    }
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        self.app.cycle(cx);
        self.inner.cycle(cx);
    }
    fn on_recovery(&mut self, r: &Recovery) {
        self.inner.on_recovery(r);
        self.app.on_recovery(r);
    }
    fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        self.inner.on_subdevice(e);
        self.app.on_subdevice(e);
    }
}

/// A run of the DC segment of `examples/cia402` with `p` until it stops (`p.stop`).
fn run_dc(
    cfg: Config,
    spec: SegmentSpec,
    faults: Faults,
    p: &mut DcProbe,
    sdo: Option<rtcat_master::SdoService>,
) -> Result<rtcat_master::Outcome, String> {
    let stop = p.inner.stop.clone();
    let mut run = sim_run(cfg, spec, faults, stop.clone(), CAP);
    run.sdo = sdo;
    let out = support::run_attempt(run, p)?;
    ensure(stop.is_requested(), || {
        format!(
            "{} s passed before the run's story was told ({} cycles)",
            CAP.as_secs(),
            p.inner.w.log.len()
        )
    })?;
    Ok(out)
}

/// A fault of drive y (position 1) on the DC segment: y is recovered alone (DC SYNC0 set up
/// again on the running grid, re-enabled per its `after_recovery = "re_enable"`), x keeps
/// cycling with valid data and is never quick-stopped. Returns y's outage (ns) and its system
/// time difference (0x092C, ns) read after it is back.
fn dc_drive_recovered_alone(
    fault: FaultCommand,
    cause: SubdeviceCause,
    bring_up: BringUp,
) -> Result<(u64, i64), String> {
    let (mut cfg, spec) = example_setup("cia402");
    cfg.bus.bring_up = bring_up;
    cfg.health.bad_cycles_before_recovery = 1;
    let faults = Faults::new();
    let (client, service) = rtcat_master::acyclic::sdo_queue(8, Duration::from_micros(300));
    let mut p = DcProbe {
        app: rtcat_master::axes::AxesApp::from_config(&cfg, Default::default()),
        inner: Probe::new(faults.clone(), 1500, fault),
    };
    // y back, then 1000 cycles for its clock to settle before 0x092C is read; the reader stops
    // the run.
    p.inner.done = |p| p.w.back_of(1).is_some();
    p.inner.tail = 1000;
    p.inner.stop_when_ready = false;
    let (stop, ready) = (p.inner.stop.clone(), p.inner.ready.clone());
    let reader = std::thread::spawn(move || {
        // y's 0x092C (sign-magnitude, ETG.1000.4 §6.8.2.5) once it has settled.
        while !ready.load(Ordering::Acquire) && !stop.is_requested() {
            std::thread::sleep(Duration::from_millis(20));
        }
        let diff = client
            .read_register(1, 0x092c, 4, Duration::from_millis(200))
            .ok()
            .map(|d| {
                let v = u32::from_le_bytes(d.as_slice().try_into().unwrap_or([0; 4]));
                let m = i64::from(v & 0x7fff_ffff);
                if v & 0x8000_0000 != 0 { -m } else { m }
            });
        stop.request();
        diff
    });
    let machine = support::Machine::watch();
    let out = run_dc(cfg, spec, faults, &mut p, Some(service));
    p.inner.stop.request();
    let diff = reader.join().expect("reader");
    let out = out?;
    no_frame_lost(&out)?;
    assert_eq!(out.rec.recoveries, 0, "{:?}", p.inner.w.recoveries);
    assert_eq!(p.inner.invalid(0), 0, "x's data");
    let (got, outage, _) = p.inner.w.back_of(1).expect("y back");
    assert_eq!(got, cause);
    let x = &p.app.axes.axes()[0];
    assert_eq!(x.stats().quick_stops, 0, "x was quick-stopped");
    let y = &p.app.axes.axes()[1];
    assert!(y.stats().quick_stops >= 1, "y quick-stopped while out");
    let last = p.inner.w.log.last().expect("cycles");
    assert!(last.valid[..2] == [true; 2], "{last:?}");
    assert_eq!(
        p.app.axes.state(1),
        Some(rtcat_master::cia402::State::OperationEnabled),
        "y re-enabled"
    );
    let diff = diff.ok_or("0x092C of y not read")?;
    machine.within("y's recovery", outage, BACK_WITHIN_NS)?;
    Ok((outage, diff))
}

#[test]
fn a_dc_drive_is_recovered_alone_and_the_other_axis_is_not_stopped() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ns, diff) = within_machine_noise("subdevice recovery", |_| {
        dc_drive_recovered_alone(
            FaultCommand::SubdeviceError {
                position: 1,
                code: 0x001b,
            },
            SubdeviceCause::AlError(0x001b),
            BringUp::Ethercrab,
        )
    });
    eprintln!(
        "DC drive, AL error: back in OP after {:.1} ms, 0x092C {diff} ns",
        ns as f64 / 1e6
    );
    assert!(diff.abs() < 1_000, "y's clock off by {diff} ns");
}

/// For both bring-ups: the clock rtcat's own bring-up set up is restored as ethercrab's is.
#[test]
fn a_power_cycled_dc_drive_gets_its_clock_back_and_is_recovered_alone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for b in [BringUp::Ethercrab, BringUp::Rtcat] {
        let (ns, diff) = within_machine_noise(&format!("subdevice recovery, {b:?}"), |_| {
            dc_drive_recovered_alone(
                FaultCommand::PowerCycleOne { position: 1 },
                SubdeviceCause::PowerCycled,
                b,
            )
        });
        eprintln!(
            "{b:?}: DC drive, power cycle: back in OP after {:.1} ms, 0x092C {diff} ns",
            ns as f64 / 1e6
        );
        assert!(diff.abs() < 1_000, "{b:?}: y's clock off by {diff} ns");
    }
}

/// Topology (issue 28 item 3): a whole-segment re-initialisation that finds a device swapped
/// refuses the segment (an event naming the position and both identities) instead of driving
/// it with its outputs remapped, and keeps trying. The application is not called while it
/// tries: the run has a fixed length, longer at each attempt (1.5, 6, 24 s), and a run whose
/// re-initialisation did not try once in it is the machine's verdict.
#[test]
fn a_reinitialisation_refuses_a_changed_topology() {
    use rtcat_master::stats::EventKind;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, p, events) = within_machine_noise("a changed topology", |i| {
        let faults = Faults::new();
        let mut p = Probe::new(
            faults.clone(),
            300,
            FaultCommand::Replace {
                position: 1,
                like: 0,
            },
        );
        let mut cfg = io_config(TxRxMode::Inline);
        cfg.health.recovery = RecoveryPolicy::Segment;
        cfg.health.bad_cycles_before_recovery = Config::default().health.bad_cycles_before_recovery;
        let secs = 1.5 * 4f64.powi(i as i32 - 1);
        let run = sim_run(
            cfg,
            segment_io(),
            faults,
            p.stop.clone(),
            Duration::from_secs_f64(secs),
        );
        let (out, events) = support::line::run_with_events(run, &mut p, |_| {})?;
        ensure(out.rec.failed_recoveries >= 1, || {
            format!("no re-initialisation tried in the run: {events:?}")
        })?;
        Ok((out, p, events))
    });
    assert_eq!(out.rec.recoveries, 0, "{events:?}");
    let changed = events.iter().find_map(|k| match k {
        EventKind::TopologyChanged {
            position,
            found,
            expected,
            ..
        } => Some((*position, *found, *expected)),
        _ => None,
    });
    let (position, found, expected) = changed.expect("a topology_changed event");
    assert_eq!(position, 1);
    assert_eq!(
        found.map(|f| f.1),
        Some(0x0001_0008),
        "the EL1008-SIM now at 1"
    );
    assert_ne!(found, expected);
    // Nothing was driven after the fault: the application saw only the bad cycles that started
    // the re-initialisation.
    let after = p.w.log.len() - p.applied_at;
    assert!(after < 100, "{after} cycles after the fault");
}

/// A device powered off: its own recovery cannot reach it, gives up after
/// `subdevice_attempts`, and the segment's re-initialisation refuses the shorter line until it
/// is powered on again (1.2 s after it was powered off); then the segment is back as it was.
#[test]
fn a_powered_off_device_falls_back_to_the_segment_which_waits_for_its_topology() {
    use rtcat_master::stats::EventKind;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, p, events) = within_machine_noise("a powered-off device", |_| {
        let faults = Faults::new();
        let mut p = Probe::new(
            faults.clone(),
            300,
            FaultCommand::Power {
                position: 2,
                on: false,
            },
        );
        p.done = Probe::back;
        let f2 = faults.clone();
        let on = p.after_fault(Duration::from_millis(1200), move || {
            f2.apply(FaultCommand::Power {
                position: 2,
                on: true,
            });
        });
        let mut cfg = io_config(TxRxMode::Inline);
        cfg.health.bad_cycles_before_recovery = Config::default().health.bad_cycles_before_recovery;
        cfg.health.subdevice_attempts = 2;
        let run = sim_run(cfg, segment_io(), faults, p.stop.clone(), CAP);
        let ran = support::line::run_with_events(run, &mut p, |_| {});
        p.stop.request();
        on.join().expect("power on");
        let (out, events) = ran?;
        no_frame_lost(&out)?;
        ensure(p.done_at.is_some(), || {
            format!("not back within {} s: {events:?}", CAP.as_secs())
        })?;
        Ok((out, p, events))
    });
    let gave_up = events.iter().any(|k| {
        matches!(
            k,
            EventKind::Subdevice {
                position: 2,
                change: SubdeviceChange::GaveUp
            }
        )
    });
    assert!(gave_up, "{events:?}");
    assert!(
        events.iter().any(|k| matches!(
            k,
            EventKind::TopologyChanged {
                position: 2,
                found: None,
                ..
            }
        )),
        "{events:?}"
    );
    assert_eq!(out.rec.recoveries, 1, "{events:?}");
    assert_eq!(out.subdevices, 3);
    let last = p.w.log.last().expect("cycles");
    assert!(last.all_well(), "{last:?}");
}

/// The DC reference clock (drive x, position 0) power-cycled: its system time restarted and the
/// others follow it, so only the segment's DC initialisation sets the clocks up again; its own
/// recovery gives up at once and the segment is re-initialised.
/// For both bring-ups (the re-initialisation is the same bring-up again).
#[test]
fn a_power_cycled_dc_reference_re_initialises_the_segment() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for b in [BringUp::Ethercrab, BringUp::Rtcat] {
        dc_reference_power_cycled(b);
    }
}

fn dc_reference_power_cycled(b: BringUp) {
    let (out, p) = within_machine_noise(&format!("a power-cycled DC reference, {b:?}"), |_| {
        let (mut cfg, spec) = example_setup("cia402");
        cfg.bus.bring_up = b;
        let faults = Faults::new();
        let mut p = DcProbe {
            app: rtcat_master::axes::AxesApp::from_config(&cfg, Default::default()),
            inner: Probe::new(
                faults.clone(),
                1000,
                FaultCommand::PowerCycleOne { position: 0 },
            ),
        };
        p.inner.done = |p| !p.w.recoveries.is_empty();
        let out = run_dc(cfg, spec, faults, &mut p, None)?;
        no_frame_lost(&out)?;
        Ok((out, p))
    });
    assert!(
        p.inner
            .w
            .events
            .iter()
            .any(|e| e.position == 0 && e.change == SubdeviceChange::GaveUp),
        "{:?}",
        p.inner.w.events
    );
    assert_eq!(out.rec.recoveries, 1, "{:?}", p.inner.w.recoveries);
    assert!(p.inner.w.back_of(0).is_none());
}
