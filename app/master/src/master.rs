//! The master's life: bring the segment to OP, run cyclic phases on a real-time thread, recover
//! from faults by re-initialising (without restarting the process), and shut down cleanly
//! (outputs to zero, SAFE-OP, INIT).
//!
//! Per docs/NOTES.md §5: initialisation runs on a normal thread (ethercrab's timer thread inherits the
//! scheduling of the first thread that needs it) with a TX/RX thread moving frames; only the
//! cyclic phase runs SCHED_FIFO.

use crate::application::{Application, Recovery, RecoveryCause, ShutdownReason};
use crate::bus::{Bus, ThreadRt, TxRxThread};
use crate::config::{Config, TxRxMode};
use crate::cycle::{self, Exchanger, Exit, Params, Sinks};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::rt;
use crate::stats::{Event, EventKind, Live, Recorder, Sample};
use crate::stop::Stop;
use ethercrab::MainDevice;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::bringup::{
    AnyGroup, Attempts, Up, bring_up, bring_up_retrying, init_timeouts, setup_txrx,
};
pub use crate::limits::{FRAME_DATA, LRW_CHUNK, MAX_FRAMES, MAX_PDI_BYTES, MAX_SUBDEVICES};
pub use crate::rt::{RtApplied, setup_cycle_thread, setup_process};
pub use crate::session::Session;
pub use crate::target::{Target, open_link};
use crate::target::{give_back, open_bus};

/// The result of a whole run.
pub struct Outcome {
    /// Everything measured.
    pub rec: Recorder,
    /// Subdevices of the last bring-up.
    pub subdevices: usize,
    /// Process image bytes (inputs + outputs).
    pub pdi_bytes: usize,
    /// Expected working counter.
    pub expected_wkc: u16,
    /// Real-time settings applied.
    pub rt: RtApplied,
    /// Why it ended, in words.
    pub stop_reason: String,
    /// An unrecoverable fault ended the run (service mode exits non-zero).
    pub fatal: Option<String>,
    /// Frames refused as replies (by reason) and frames the link could not send.
    pub bus: rtcat_results::BusStats,
    /// The layout of the last bring-up.
    pub layout: Option<Layout>,
}

/// Where the loop's events and samples go; drained by the status thread.
pub struct Channels {
    /// Live counters.
    pub live: Arc<Live>,
    /// Health events.
    pub events: rtrb::Producer<Event>,
    /// Per-cycle samples.
    pub samples: Option<rtrb::Producer<Sample>>,
}

/// Everything a run needs.
pub struct RunSpec {
    /// The configuration.
    pub cfg: Config,
    /// What to talk to.
    pub target: Target,
    /// Run for this long (None: until stopped).
    pub duration: Option<Duration>,
    /// Apply no real-time setting (tests, development machines).
    pub no_rt: bool,
    /// Called once the segment is in OP and cycling is about to start (sd_notify READY).
    pub on_ready: Option<Box<dyn FnMut() + Send>>,
    /// Keep retrying the first bring-up (service mode) instead of failing at once (bench).
    pub retry_start: bool,
    /// Stop request handle.
    pub stop: Stop,
    /// SDO requests of other threads while cycling ([`crate::acyclic::sdo_queue`]).
    pub sdo: Option<crate::acyclic::SdoService>,
}

/// Run the master until stopped, the duration elapsed, or an unrecoverable fault. The bring-up
/// and recovery run on a thread of the master's own (with the stack they need), the cycles on
/// the real-time thread; this call waits for both.
pub fn run(spec: RunSpec, app: &mut dyn Application, ch: &mut Channels) -> Result<Outcome> {
    rt::on_setup_thread("rtcat-master", move || run_here(spec, app, ch))?
}

fn run_here(mut spec: RunSpec, app: &mut dyn Application, ch: &mut Channels) -> Result<Outcome> {
    let cfg = spec.cfg.clone();
    let stop = spec.stop.clone();
    let (mut bus, pdu_loop) = open_bus(&spec.target, &spec.cfg.bus)?;
    let counters = bus.counters.clone();
    let init_rt = setup_txrx(&cfg, spec.no_rt);

    let md = MainDevice::new(pdu_loop, init_timeouts(&cfg), cfg.maindevice_config());
    let mut run = Running {
        md: Some(md),
        bus: None,
        attempts: Attempts::default(),
    };
    let result = (|| {
        // rtcat's own frames go out through the TX/RX thread during the bring-up too.
        let own_frames = bus.own_frames();
        let own = crate::bringup::own_bus(&own_frames, &cfg);
        let thread = TxRxThread::spawn(bus, init_rt)?;
        let md = run.md.take().expect("set above");
        let (md, first) = if spec.retry_start {
            // Service mode: a segment that is not there yet (powered later, cable plugged later)
            // is waited for, like a recovery.
            ch.live.recovering.store(1, Ordering::Relaxed);
            let r = bring_up_retrying(
                (md, bring_up_of(&cfg), own),
                &cfg,
                app,
                &stop,
                None,
                &mut run.attempts,
                |n, e| {
                    counters.publish(&ch.live);
                    push(ch, 0, EventKind::StartFailed { attempt: n });
                    log::warn!("bringing the segment up, attempt {n} failed: {e}");
                },
            );
            ch.live.recovering.store(0, Ordering::Relaxed);
            (r.0, r.1.map(|(up, _)| up))
        } else {
            run.attempts.generation = 1;
            run.attempts.load_sii(&cfg);
            let r = bring_up_of(&cfg)(
                &md,
                &cfg,
                app,
                run.attempts.generation,
                None,
                &run.attempts.sii,
                own,
            );
            if r.is_ok() {
                run.attempts.save_sii(&cfg);
            }
            (md, r)
        };
        run.md = Some(md);
        bus = thread.stop();
        counters.publish(&ch.live);
        let up = match first {
            Ok(up) => up,
            Err(e) => {
                run.bus = Some(bus);
                return Err(e);
            }
        };
        cycle_until_done(&mut run, bus, up, &mut spec, app, ch, &stop)
    })();
    // Give the storage back whatever happened (every group is dropped by now).
    if let (Some(md), Some(bus)) = (run.md.take(), run.bus.take()) {
        give_back(md, bus);
    }
    result
}

/// The MainDevice and the bus while a run owns them (given back to the pool at the end), and
/// how far its bring-ups got.
struct Running {
    md: Option<MainDevice<'static>>,
    bus: Option<Bus>,
    attempts: Attempts,
}

/// The run once the segment is first in OP: cyclic phases, each ended by a stop, the duration
/// or a recovery, until a stop, the duration or a fault ends the run. Steps: [`Cycling::phase`],
/// [`Cycling::shut_down`], [`Cycling::recover`], then the [`Outcome`].
fn cycle_until_done(
    run: &mut Running,
    bus: Bus,
    up: Up,
    spec: &mut RunSpec,
    app: &mut dyn Application,
    ch: &mut Channels,
    stop: &Stop,
) -> Result<Outcome> {
    let cfg = spec.cfg.clone();
    let counters = bus.counters.clone();
    run.bus = Some(bus);
    // The segment in OP: replaced by each recovery, handed back at the end.
    let mut seg = up;
    run.attempts.topology = Some((seg.identities.clone(), seg.aliases.clone()));
    run.attempts.hot = seg.hot.clone();
    seg.publish(&ch.live);
    // Process-wide real-time settings, once the segment is up.
    let _dma = setup_process(&cfg, spec.no_rt)?;
    let end_ns = spec
        .duration
        .map(|d| crate::clock::now_ns() + d.as_nanos() as u64);
    if let Some(f) = spec.on_ready.as_mut() {
        f();
    }
    let mut c = Cycling {
        run,
        cfg: &cfg,
        no_rt: spec.no_rt,
        sdo: spec.sdo.as_mut(),
        app,
        ch,
        stop,
        end_ns,
        init_rt: setup_txrx(&cfg, spec.no_rt),
        applied: RtApplied {
            no_rt: spec.no_rt,
            ..RtApplied::default()
        },
    };
    let mut rec = Recorder::new();
    let end = loop {
        let exit;
        (rec, exit) = c.phase(&seg, rec)?;
        match exit {
            Exit::Stopped | Exit::DurationReached => {
                break c.shut_down((seg.group, &seg.late), exit, rec.cycles)?;
            }
            Exit::Recover { bad_cycles, cause } => {
                // The old group is dropped before its MainDevice is released (see `recover`).
                drop(seg.group);
                match c.recover(bad_cycles, cause, &mut rec)? {
                    ControlFlow::Continue(up) => seg = up,
                    ControlFlow::Break(end) => break end,
                }
            }
        }
    };
    counters.publish(&c.ch.live);
    Ok(Outcome {
        rec,
        subdevices: seg.layout.subdevices.len(),
        pdi_bytes: seg.layout.pdi_bytes(),
        expected_wkc: seg.expected_wkc,
        rt: c.applied,
        stop_reason: end.reason,
        fatal: end.fatal,
        bus: counters.bus_stats(),
        layout: Some(seg.layout),
    })
}

/// How a run ended: in words, and the fault when one ended it.
struct End {
    reason: String,
    fatal: Option<String>,
}

/// A run between its first bring-up and its end: what every cyclic phase and recovery runs
/// with. The bus is in `run.bus` between phases.
struct Cycling<'a> {
    run: &'a mut Running,
    cfg: &'a Config,
    no_rt: bool,
    sdo: Option<&'a mut crate::acyclic::SdoService>,
    app: &'a mut dyn Application,
    ch: &'a mut Channels,
    stop: &'a Stop,
    end_ns: Option<u64>,
    init_rt: ThreadRt,
    /// The real-time settings, with the minor faults of every phase's cyclic thread summed.
    applied: RtApplied,
}

impl Cycling<'_> {
    /// One cyclic phase on the segment `seg`: everything the cycle touches allocated here,
    /// outside the cyclic path, then the phase on its own thread; the measurements come back
    /// with why it ended.
    fn phase(&mut self, seg: &Up, mut rec: Recorder) -> Result<(Recorder, Exit)> {
        let cfg = self.cfg;
        let params = Params {
            period: cfg.cycle.period(),
            response_timeout_ns: cfg.response_timeout_ns(),
            expected_wkc: seg.expected_wkc,
            bad_cycles_before_recovery: cfg.health.bad_cycles_before_recovery,
            end_ns: self.end_ns,
        };
        rec.availability.set_subdevices(seg.layout.subdevices.len());
        rec.unexpected.new_segment();
        let md = self.run.md.as_ref().expect("present while running");
        let bus = self.run.bus.take().expect("the bus is back between phases");
        let frames = crate::own_cycle::OwnCycle::new(&seg.frames, bus.own_frames());
        let mut state = cycle::State::new(&seg.layout, &seg.wkc_shares)
            .with_region(&seg.late, bus.own_frames())
            .with_frames(frames);
        if seg.has_dc() {
            state = state.with_lock(phase_lock(cfg));
        }
        // The per-subdevice recovery's board, shared by the cyclic thread and the worker.
        let board = (!seg.snapshots.is_empty())
            .then(|| crate::subdevice_recovery::Board::new(&seg.snapshots, &seg.hot));
        let result = run_phase(CyclicPhase {
            md,
            addresses: &seg.frames.addresses,
            bus,
            cfg,
            no_rt: self.no_rt,
            app: &mut *self.app,
            rec,
            ch: &mut *self.ch,
            state: &mut state,
            params,
            stop: self.stop,
            sdo: self.sdo.as_deref_mut(),
            recovery: board.as_ref().map(|b| {
                (
                    b,
                    seg.snapshots.as_slice(),
                    crate::subdevice_recovery::Late {
                        members: &seg.late,
                        layout: &seg.layout,
                        order: &seg.order,
                    },
                )
            }),
        });
        let (bus, rec, exit, a) = match result {
            Ok(v) => v,
            Err(b) => {
                let (e, bus) = *b;
                self.run.bus = bus;
                return Err(e);
            }
        };
        self.run.bus = Some(bus);
        // A revision a firmware update brought (its recovery accepted it) is what a
        // re-initialisation of the segment expects from now on.
        if let (Some(b), Some((t, _))) = (&board, self.run.attempts.topology.as_mut()) {
            b.updated_revisions(t);
        }
        self.applied = RtApplied {
            cycle_minor_faults: self.applied.cycle_minor_faults + a.cycle_minor_faults,
            ..a
        };
        Ok((rec, exit))
    }

    /// The end of a run on a stop or the duration: the application told why, the segment
    /// brought down to INIT.
    fn shut_down(
        &mut self,
        (group, late): (AnyGroup, &[crate::region::Member]),
        exit: Exit,
        cycles: u64,
    ) -> Result<End> {
        let reason = if exit == Exit::Stopped {
            ShutdownReason::Stopped {
                signal: self.stop.signal(),
            }
        } else {
            ShutdownReason::Duration
        };
        let end = End {
            reason: match &reason {
                ShutdownReason::Stopped { signal: Some(s) } => format!("signal {s}"),
                ShutdownReason::Stopped { signal: None } => "stop requested".into(),
                _ => "duration reached".into(),
            },
            fatal: None,
        };
        self.app.shutdown(&reason);
        let md = self.run.md.as_ref().expect("present while running");
        let bus = self.run.bus.take().expect("the bus is back between phases");
        let state_timeout = Duration::from_millis(self.cfg.bus.state_timeout_ms.into());
        self.run.bus = Some(shut_down_segment(
            md,
            (group, late, state_timeout),
            bus,
            self.init_rt,
            self.ch,
            cycles,
        )?);
        Ok(end)
    }

    /// A recovery after `bad_cycles` bad cycles (the caller has dropped the group): the
    /// application told, the segment brought up again (Continue with it), or the run's end
    /// when it could not be (stopped meanwhile, or a fault).
    fn recover(
        &mut self,
        bad_cycles: u32,
        cause: RecoveryCause,
        rec: &mut Recorder,
    ) -> Result<ControlFlow<End, Up>> {
        push(
            self.ch,
            rec.cycles,
            EventKind::RecoveryStarted { bad_cycles },
        );
        self.app.on_recovery(&Recovery {
            bad_cycles,
            cause,
            cycle: rec.cycles,
        });
        let during = Recovering {
            cfg: self.cfg,
            stop: self.stop,
            end_ns: self.end_ns,
            init_rt: self.init_rt,
        };
        let bus = self.run.bus.take().expect("the bus is back between phases");
        let (bus, result) = recover(self.run, &during, bus, self.app, self.ch, rec)?;
        self.run.bus = Some(bus);
        match result {
            Ok((up, attempts)) => {
                // Re-synchronised by the bring-up (ethercrab's DC init and static sync, SYNC0
                // configured anew); the lock starts over and reports when it holds.
                up.publish(&self.ch.live);
                rec.recoveries += 1;
                self.ch
                    .live
                    .recoveries
                    .store(rec.recoveries, Ordering::Relaxed);
                push(self.ch, rec.cycles, EventKind::RecoveryDone { attempts });
                Ok(ControlFlow::Continue(up))
            }
            Err(e) => {
                let stopped = self.stop.is_requested()
                    || self.end_ns.is_some_and(|e| crate::clock::now_ns() >= e);
                let (reason, end) = if stopped {
                    let signal = self.stop.signal();
                    (
                        ShutdownReason::Stopped { signal },
                        End {
                            reason: "stopped while recovering".into(),
                            fatal: None,
                        },
                    )
                } else {
                    (
                        ShutdownReason::Fatal(e.to_string()),
                        End {
                            reason: "unrecoverable fault".into(),
                            fatal: Some(e.to_string()),
                        },
                    )
                };
                self.app.shutdown(&reason);
                Ok(ControlFlow::Break(end))
            }
        }
    }
}

fn push(ch: &mut Channels, cycle: u64, kind: EventKind) {
    let _ = ch.events.push(Event {
        unix_ns: crate::clock::unix_ns(),
        cycle,
        kind,
    });
}

/// A cyclic phase's end: the bus back with the measurements, or the error with the bus when it
/// could be saved (so the run's storage goes back to the pool).
type PhaseResult = std::result::Result<(Bus, Recorder, Exit, RtApplied), Box<(Error, Option<Bus>)>>;

/// The phase lock of a DC run: the SYNC0 period and shift of `[dc]`, the default gains.
fn phase_lock(cfg: &Config) -> crate::dc::PhaseLock {
    let period = cfg.dc.sync0_period(cfg.cycle.period()).as_nanos();
    crate::dc::PhaseLock::new(
        period,
        cfg.dc.sync0_shift_ns(cfg.cycle.period()),
        crate::dc::PhaseLockParams::for_period(period),
    )
}

/// The last steps of a run: the segment back to INIT (outputs zero first) with a TX/RX thread
/// moving the frames, and the `shutdown` event saying whether it got there.
fn shut_down_segment(
    md: &MainDevice<'static>,
    (group, late, state_timeout): (AnyGroup, &[crate::region::Member], Duration),
    bus: Bus,
    init_rt: ThreadRt,
    ch: &mut Channels,
    cycles: u64,
) -> Result<Bus> {
    let t = TxRxThread::spawn(bus, init_rt)?;
    // The members that joined after the bring-up first: ethercrab's shut-down walks its group.
    let late = crate::subdevice_recovery::shut_down_joined(md, late, state_timeout);
    let down = group.shut_down(md, state_timeout);
    for e in [&late, &down].into_iter().filter_map(|r| r.as_ref().err()) {
        log::warn!("shutdown: {e}");
    }
    push(
        ch,
        cycles,
        EventKind::Shutdown {
            reached_init: down.is_ok() && late.is_ok(),
        },
    );
    Ok(t.stop())
}

/// The bring-up `[bus] bring_up` names: ethercrab's group initialisation or rtcat's own.
fn bring_up_of(cfg: &Config) -> crate::bringup::BringUpFn {
    match cfg.bus.bring_up {
        crate::config::BringUp::Ethercrab => bring_up,
        crate::config::BringUp::Rtcat => crate::own_bringup::bring_up,
    }
}

/// What a recovery runs with besides the run's state.
struct Recovering<'a> {
    cfg: &'a Config,
    stop: &'a Stop,
    end_ns: Option<u64>,
    init_rt: ThreadRt,
}

/// A recovery: a fresh MainDevice on the same PDU loop (the caller has dropped the old group),
/// the bring-up retried (`[health]`) with a TX/RX thread moving the frames, the failures counted
/// and reported. The bus comes back with the segment (and the attempts it took) or the last
/// error.
fn recover(
    run: &mut Running,
    during: &Recovering<'_>,
    bus: Bus,
    app: &mut dyn Application,
    ch: &mut Channels,
    rec: &mut Recorder,
) -> Result<(Bus, Result<(Up, u32)>)> {
    let Recovering {
        cfg,
        stop,
        end_ns,
        init_rt,
    } = *during;
    let counters = bus.counters.clone();
    ch.live.recovering.store(1, Ordering::Relaxed);
    let old = run.md.take().expect("present while running");
    // SAFETY: the old group is dropped and never used with the new MainDevice.
    let pdu_loop = unsafe { old.release() };
    let md = MainDevice::new(pdu_loop, init_timeouts(cfg), cfg.maindevice_config());
    let own = bus.own_frames();
    let t = TxRxThread::spawn(bus, init_rt)?;
    let cycles = rec.cycles;
    let mut failures = 0u64;
    let (m, result) = bring_up_retrying(
        (md, bring_up_of(cfg), crate::bringup::own_bus(&own, cfg)),
        cfg,
        app,
        stop,
        end_ns,
        &mut run.attempts,
        |n, e| {
            counters.publish(&ch.live);
            failures += 1;
            if let Error::TopologyChanged {
                position,
                found,
                expected,
                alias,
            } = *e
            {
                push(
                    ch,
                    cycles,
                    EventKind::TopologyChanged {
                        position,
                        found,
                        expected,
                        alias,
                    },
                );
            }
            push(ch, cycles, EventKind::RecoveryFailed { attempt: n });
            log::warn!("recovery attempt {n} failed: {e}");
        },
    );
    run.md = Some(m);
    rec.failed_recoveries += failures;
    let bus = t.stop();
    counters.publish(&ch.live);
    ch.live.recovering.store(0, Ordering::Relaxed);
    Ok((bus, result))
}

/// One cyclic phase: what it runs with, moved onto the cyclic thread and handed back (the bus,
/// the measurements) when it ends.
struct CyclicPhase<'a> {
    md: &'a MainDevice<'static>,
    /// The station addresses of the subdevices the bring-up put in OP, by position.
    addresses: &'a [u16],
    bus: Bus,
    cfg: &'a Config,
    no_rt: bool,
    app: &'a mut dyn Application,
    rec: Recorder,
    ch: &'a mut Channels,
    state: &'a mut cycle::State,
    params: Params,
    stop: &'a Stop,
    sdo: Option<&'a mut crate::acyclic::SdoService>,
    /// The per-subdevice recovery: its board and what each subdevice ran with.
    recovery: Option<(
        &'a crate::subdevice_recovery::Board,
        &'a [crate::subdevice_recovery::Snapshot],
        crate::subdevice_recovery::Late<'a>,
    )>,
}

fn run_phase(phase: CyclicPhase<'_>) -> PhaseResult {
    let CyclicPhase {
        md,
        addresses,
        bus,
        cfg,
        no_rt,
        app,
        mut rec,
        ch,
        state,
        params,
        stop,
        sdo,
        recovery,
    } = phase;
    let mode = cfg.cycle.txrx;
    let txrx_cpu = cfg.cycle.txrx_cpu.or(cfg.cycle.cpu);
    // The worker adds members joining with DC to the 0x092C sampler's list.
    let live = ch.live.clone();
    // Its own frames go over this bus, with ethercrab's (the worker's PDU timeout).
    let own = bus.own_frames();
    std::thread::scope(|s| {
        // The per-subdevice recovery's worker: a normal thread, for as long as the phase.
        let worker = match recovery {
            Some((board, snapshots, late)) => Some(
                std::thread::Builder::new()
                    .name("rtcat-recover".into())
                    .spawn_scoped(s, move || {
                        // Off the real-time CPUs: it wakes every millisecond.
                        if !no_rt {
                            let rt_cpus: Vec<usize> =
                                cfg.cycle.cpu.into_iter().chain(txrx_cpu).collect();
                            if let Err(e) = crate::rt::keep_off(&rt_cpus) {
                                log::warn!("recovery worker: {e}");
                            }
                        }
                        crate::subdevice_recovery::worker(crate::subdevice_recovery::Worker {
                            md,
                            cfg,
                            snapshots,
                            board,
                            late,
                            dc: &live.dc,
                            own: crate::bringup::own_bus(&own, cfg),
                        })
                    })
                    .map_err(|e| Box::new((Error::io("spawn the recovery worker")(e), None)))?,
            ),
            None => None,
        };
        let board = recovery.map(|(b, _, _)| b);
        let handle = std::thread::Builder::new()
            .name("rtcat-cycle".into())
            .spawn_scoped(s, move || -> PhaseResult {
                // A refused setting hands the bus back, so the run's storage is reused.
                let mut applied = match setup_cycle_thread(cfg, no_rt) {
                    Ok(a) => a,
                    Err(e) => return Err(Box::new((e, Some(bus)))),
                };
                let (mut x, thread) =
                    exchanger(bus, cfg, no_rt).map_err(|e| Box::new((e, None)))?;
                applied.txrx_cpu = match mode {
                    TxRxMode::Inline => applied.cpu,
                    TxRxMode::Thread if !no_rt => txrx_cpu,
                    TxRxMode::Thread => None,
                };
                let faults_before = rt::thread_minor_faults();
                let mut sinks = Sinks {
                    live: &ch.live,
                    events: &mut ch.events,
                    samples: ch.samples.as_mut(),
                    stop,
                    sdo,
                };
                let exit = cycle::run(
                    &mut x,
                    md,
                    addresses,
                    cycle::Phase {
                        app,
                        rec: &mut rec,
                        sinks: &mut sinks,
                        st: state,
                        p: params,
                        board,
                    },
                );
                if let Some(b) = board {
                    b.quit();
                }
                applied.cycle_minor_faults = rt::thread_minor_faults() - faults_before;
                let bus = match (x, thread) {
                    (Exchanger::Inline(b), _) => b,
                    (Exchanger::Thread { .. }, Some(t)) => t.stop(),
                    (Exchanger::Thread { .. }, None) => {
                        unreachable!("thread mode has a thread")
                    }
                };
                Ok((bus, rec, exit, applied))
            })
            .map_err(|e| Box::new((Error::io("spawn the cyclic thread")(e), None)))?;
        let result = handle.join();
        if let Some(b) = board {
            b.quit();
        }
        if let Some(w) = worker {
            w.join()
                .map_err(|_| Box::new((Error::Panicked("recovery worker"), None)))?;
        }
        result.map_err(|_| Box::new((Error::Panicked("cyclic"), None)))?
    })
}

/// Who moves the cyclic thread's frames (`[cycle] txrx`): the thread itself (inline, waiting
/// for its replies as `[cycle] wait` says), or a TX/RX thread of its own that wakes it (then
/// returned too, to be stopped when the phase ends). Called on the cyclic thread.
fn exchanger(bus: Bus, cfg: &Config, no_rt: bool) -> Result<(Exchanger, Option<TxRxThread>)> {
    match cfg.cycle.txrx {
        TxRxMode::Inline => {
            let mut bus = bus;
            bus.tx.replace_waker(std::task::Waker::noop());
            bus.set_wait(cfg.cycle.wait_mode());
            // Without it the recovery's frames still move, one exchange per cycle.
            if let Err(e) = bus.wake_on_others() {
                log::warn!("eventfd for the recovery's frames: {e}");
            }
            Ok((Exchanger::Inline(bus), None))
        }
        TxRxMode::Thread => {
            let counters = bus.counters.clone();
            let t = TxRxThread::spawn(
                bus,
                ThreadRt {
                    cpu: if no_rt {
                        None
                    } else {
                        cfg.cycle.txrx_cpu.or(cfg.cycle.cpu)
                    },
                    fifo_priority: (!no_rt).then_some(cfg.cycle.txrx_priority),
                },
            )?;
            let waker =
                std::task::Waker::from(Arc::new(crate::bus::ThreadWaker(std::thread::current())));
            let passes = t.passes();
            let x = Exchanger::Thread {
                counters,
                waker,
                passes,
            };
            Ok((x, Some(t)))
        }
    }
}
