//! The master's life: bring the segment to OP, run cyclic phases on a real-time thread, recover
//! from faults by re-initialising (without restarting the process), and shut down cleanly
//! (outputs to zero, SAFE-OP, INIT).
//!
//! Per docs/NOTES.md §5: initialisation runs on a normal thread (ethercrab's timer thread inherits the
//! scheduling of the first thread that needs it) with a TX/RX thread moving frames; only the
//! cyclic phase runs SCHED_FIFO.

use crate::application::{Application, Recovery, ShutdownReason};
use crate::bus::{Bus, Link, LinkFactory, ThreadRt, TxRxThread};
use crate::config::{BusConfig, Config, LinkKind, TxRxMode};
use crate::cycle::{self, CycleGroup, Exchanger, Exit, Group, Params, Sinks};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::rt;
use crate::stats::{Event, EventKind, Live, Recorder, Sample};
use crate::stop::Stop;
use ethercrab::{MainDevice, PduLoop, PduRx, PduTx};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::bringup::{
    AnyGroup, Attempts, Up, bring_up, bring_up_retrying, init_timeouts, setup_txrx,
};
use crate::limits::Storage;
pub use crate::limits::{FRAME_DATA, LRW_CHUNK, MAX_FRAMES, MAX_PDI_BYTES, MAX_SUBDEVICES};
pub use crate::rt::{RtApplied, setup_cycle_thread, setup_process};

/// What the master talks to.
#[derive(Debug, Clone)]
pub enum Target {
    /// The in-process simulated segment (no root, no NIC).
    #[cfg(feature = "sim")]
    Sim {
        /// The segment.
        spec: ecsim::SegmentSpec,
        /// Its fault injection handle.
        faults: ecsim::Faults,
    },
    /// A network interface (AF_PACKET, needs CAP_NET_RAW).
    Iface(String),
    /// A link of the user's own ([`crate::bus::Link`]), opened when the run starts.
    Link(LinkFactory),
}

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

/// The split PDU storage of ethercrab: `'static` because the TX/RX thread owns its halves.
/// Runs take one from the pool and give it back, so a process that runs many masters one after
/// another (tests, a supervisor) allocates only as many as run at once.
type Split = (PduTx<'static>, PduRx<'static>, PduLoop<'static>);
static POOL: Mutex<Vec<Split>> = Mutex::new(Vec::new());

fn take_storage() -> Split {
    if let Some(s) = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop() {
        return s;
    }
    let storage: &'static Storage = Box::leak(Box::new(Storage::new()));
    storage
        .try_split()
        .unwrap_or_else(|_| unreachable!("fresh storage splits"))
}

fn give_storage(s: Split) {
    POOL.lock().unwrap_or_else(|p| p.into_inner()).push(s);
}

/// Take a storage from the pool and open `target` on it: the bus and ethercrab's PDU loop, or
/// the error with the storage back in the pool.
fn open_bus(target: &Target, bus: &BusConfig) -> Result<(Bus, PduLoop<'static>)> {
    let (tx, rx, pdu_loop) = take_storage();
    match open_link(target, bus) {
        Ok(link) => Ok((Bus::new(tx, rx, link), pdu_loop)),
        Err(e) => {
            give_storage((tx, rx, pdu_loop));
            Err(e)
        }
    }
}

/// Give a run's storage back to the pool (closing the link).
fn give_back(md: MainDevice<'static>, bus: Bus) {
    // SAFETY: the callers have dropped every group of this MainDevice.
    let pl = unsafe { md.release() };
    let (tx, rx, _) = bus.into_parts();
    give_storage((tx, rx, pl));
}

/// Open the link to a target; an interface with the socket `[bus] link` names.
pub fn open_link(target: &Target, bus: &BusConfig) -> Result<Box<dyn Link>> {
    Ok(match target {
        #[cfg(feature = "sim")]
        Target::Sim { spec, faults } => {
            Box::new(ecsim::SimPort::with_faults(spec.clone(), faults.clone()))
        }
        Target::Iface(name) => {
            crate::netuse::check_free(&safefs::SysRoot::live(), name)?;
            let err = |source| Error::Interface {
                iface: name.clone(),
                source,
            };
            use rtcat_packet::xdp::{XdpMode, XdpOptions, XdpSocket};
            let xdp = |mode| {
                let opt = XdpOptions {
                    mode,
                    queue: bus.xdp_queue,
                };
                XdpSocket::open(name, opt).map_err(err)
            };
            match bus.link {
                LinkKind::Packet => Box::new(rtcat_packet::PacketSocket::open(name).map_err(err)?),
                LinkKind::Xdp => Box::new(xdp(XdpMode::Auto)?),
                LinkKind::XdpNative => Box::new(xdp(XdpMode::Native)?),
                LinkKind::XdpGeneric => Box::new(xdp(XdpMode::Generic)?),
            }
        }
        Target::Link(f) => f.open().map_err(|source| Error::Interface {
            iface: f.name().to_string(),
            source,
        })?,
    })
}

/// A MainDevice on a link with a TX/RX thread moving its frames, for the bus commands (scan,
/// registers, SII): no group, no cycle. Dropping it gives the storage back.
pub struct Session {
    md: Option<MainDevice<'static>>,
    thread: Option<TxRxThread>,
}

impl Session {
    /// Open `target` with the timeouts of `cfg`.
    pub fn open(target: &Target, cfg: &Config) -> Result<Session> {
        let (bus, pdu_loop) = open_bus(target, &cfg.bus)?;
        let md = MainDevice::new(pdu_loop, init_timeouts(cfg), cfg.maindevice_config());
        let thread = TxRxThread::spawn(bus, ThreadRt::default())?;
        Ok(Session {
            md: Some(md),
            thread: Some(thread),
        })
    }

    /// The MainDevice.
    pub fn maindevice(&self) -> &MainDevice<'static> {
        self.md.as_ref().expect("present until drop")
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // No group of this MainDevice outlives the session (they borrow it).
        if let (Some(md), Some(t)) = (self.md.take(), self.thread.take()) {
            give_back(md, t.stop());
        }
    }
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
        let thread = TxRxThread::spawn(bus, init_rt)?;
        let md = run.md.take().expect("set above");
        let (md, first) = if spec.retry_start {
            // Service mode: a segment that is not there yet (powered later, cable plugged later)
            // is waited for, like a recovery.
            ch.live.recovering.store(1, Ordering::Relaxed);
            let r = bring_up_retrying(md, &cfg, app, &stop, None, &mut run.attempts, |n, e| {
                counters.publish(&ch.live);
                push(ch, 0, EventKind::StartFailed { attempt: n });
                log::warn!("bringing the segment up, attempt {n} failed: {e}");
            });
            ch.live.recovering.store(0, Ordering::Relaxed);
            (r.0, r.1.map(|(up, _)| up))
        } else {
            run.attempts.generation = 1;
            run.attempts.load_sii(&cfg);
            let r = bring_up(
                &md,
                &cfg,
                app,
                run.attempts.generation,
                None,
                &run.attempts.sii,
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

fn cycle_until_done(
    run: &mut Running,
    mut bus: Bus,
    up: Up,
    spec: &mut RunSpec,
    app: &mut dyn Application,
    ch: &mut Channels,
    stop: &Stop,
) -> Result<Outcome> {
    let cfg = spec.cfg.clone();
    let counters = bus.counters.clone();
    let init_rt = setup_txrx(&cfg, spec.no_rt);
    // The segment in OP: replaced by each recovery, handed back at the end.
    let mut seg = up;
    run.attempts.topology = Some(seg.identities.clone());
    run.attempts.hot = seg.hot.clone();
    seg.publish(&ch.live);

    // Process-wide real-time settings, once the segment is up.
    let _dma = match setup_process(&cfg, spec.no_rt) {
        Ok(d) => d,
        Err(e) => {
            run.bus = Some(bus);
            return Err(e);
        }
    };

    let end_ns = spec
        .duration
        .map(|d| crate::clock::now_ns() + d.as_nanos() as u64);
    let mut rec = Recorder::new();
    let mut applied = RtApplied {
        no_rt: spec.no_rt,
        ..RtApplied::default()
    };
    let mut fatal = None;
    let stop_reason;
    if let Some(f) = spec.on_ready.as_mut() {
        f();
    }

    loop {
        let params = Params {
            period: cfg.cycle.period(),
            response_timeout_ns: cfg.response_timeout_ns(),
            expected_wkc: seg.expected_wkc,
            bad_cycles_before_recovery: cfg.health.bad_cycles_before_recovery,
            end_ns,
        };
        // Everything the cycle touches, allocated here, outside the cyclic path.
        rec.availability.set_subdevices(seg.layout.subdevices.len());
        let mut state = cycle::State::new(&seg.layout, &seg.wkc_shares);
        if matches!(seg.group, AnyGroup::Dc(_)) {
            state = state.with_lock(phase_lock(&cfg));
        }
        let md = run.md.as_ref().expect("present while running");
        // The per-subdevice recovery's board, shared by the cyclic thread and the worker.
        let board = (!seg.snapshots.is_empty())
            .then(|| crate::subdevice_recovery::Board::new(&seg.snapshots, &seg.hot));
        // One cyclic phase on its own thread; the bus comes back when it ends.
        let result = seg.group.cyclic_phase(CyclicPhase {
            md,
            bus,
            cfg: &cfg,
            no_rt: spec.no_rt,
            app,
            rec,
            ch,
            state: &mut state,
            params,
            stop,
            sdo: spec.sdo.as_mut(),
            recovery: board.as_ref().map(|b| (b, seg.snapshots.as_slice())),
        });
        let (b, r, exit, a) = match result {
            Ok(v) => v,
            Err(b) => {
                let (e, bus) = *b;
                run.bus = bus;
                return Err(e);
            }
        };
        bus = b;
        rec = r;
        // A revision a firmware update brought (its recovery accepted it) is what a
        // re-initialisation of the segment expects from now on.
        if let (Some(b), Some(t)) = (&board, run.attempts.topology.as_mut()) {
            b.updated_revisions(t);
        }
        applied = RtApplied {
            cycle_minor_faults: applied.cycle_minor_faults + a.cycle_minor_faults,
            ..a
        };
        match exit {
            Exit::Stopped | Exit::DurationReached => {
                let reason = if exit == Exit::Stopped {
                    ShutdownReason::Stopped {
                        signal: stop.signal(),
                    }
                } else {
                    ShutdownReason::Duration
                };
                stop_reason = match &reason {
                    ShutdownReason::Stopped { signal: Some(s) } => format!("signal {s}"),
                    ShutdownReason::Stopped { signal: None } => "stop requested".into(),
                    _ => "duration reached".into(),
                };
                app.shutdown(&reason);
                bus = shut_down_segment(md, seg.group, bus, init_rt, ch, rec.cycles)?;
                break;
            }
            Exit::Recover { bad_cycles, cause } => {
                push(ch, rec.cycles, EventKind::RecoveryStarted { bad_cycles });
                app.on_recovery(&Recovery {
                    bad_cycles,
                    cause,
                    cycle: rec.cycles,
                });
                // The old group is dropped before its MainDevice is released (see `recover`).
                drop(seg.group);
                let during = Recovering {
                    cfg: &cfg,
                    stop,
                    end_ns,
                    init_rt,
                };
                let result;
                (bus, result) = recover(run, &during, bus, app, ch, &mut rec)?;
                match result {
                    Ok((up, attempts)) => {
                        // Re-synchronised by the bring-up (ethercrab's DC init and static sync,
                        // SYNC0 configured anew); the lock starts over and reports when it holds.
                        seg = up;
                        seg.publish(&ch.live);
                        rec.recoveries += 1;
                        ch.live.recoveries.store(rec.recoveries, Ordering::Relaxed);
                        push(ch, rec.cycles, EventKind::RecoveryDone { attempts });
                    }
                    Err(e) => {
                        let stopped = stop.is_requested()
                            || end_ns.is_some_and(|e| crate::clock::now_ns() >= e);
                        stop_reason = if stopped {
                            "stopped while recovering".into()
                        } else {
                            fatal = Some(e.to_string());
                            "unrecoverable fault".into()
                        };
                        app.shutdown(&if stopped {
                            ShutdownReason::Stopped {
                                signal: stop.signal(),
                            }
                        } else {
                            ShutdownReason::Fatal(e.to_string())
                        });
                        break;
                    }
                }
            }
        }
    }
    counters.publish(&ch.live);
    run.bus = Some(bus);
    Ok(Outcome {
        rec,
        subdevices: seg.layout.subdevices.len(),
        pdi_bytes: seg.layout.pdi_bytes(),
        expected_wkc: seg.expected_wkc,
        rt: applied,
        stop_reason,
        fatal,
        bus: counters.bus_stats(),
        layout: Some(seg.layout),
    })
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
    group: AnyGroup,
    bus: Bus,
    init_rt: ThreadRt,
    ch: &mut Channels,
    cycles: u64,
) -> Result<Bus> {
    let t = TxRxThread::spawn(bus, init_rt)?;
    let down = group.shut_down(md);
    if let Err(e) = &down {
        log::warn!("shutdown: {e}");
    }
    push(
        ch,
        cycles,
        EventKind::Shutdown {
            reached_init: down.is_ok(),
        },
    );
    Ok(t.stop())
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
    let t = TxRxThread::spawn(bus, init_rt)?;
    let cycles = rec.cycles;
    let mut failures = 0u64;
    let (m, result) = bring_up_retrying(md, cfg, app, stop, end_ns, &mut run.attempts, |n, e| {
        counters.publish(&ch.live);
        failures += 1;
        if let Error::TopologyChanged {
            position,
            found,
            expected,
        } = *e
        {
            push(
                ch,
                cycles,
                EventKind::TopologyChanged {
                    position,
                    found,
                    expected,
                },
            );
        }
        push(ch, cycles, EventKind::RecoveryFailed { attempt: n });
        log::warn!("recovery attempt {n} failed: {e}");
    });
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
    )>,
}

impl AnyGroup {
    /// The one place the two kinds of group are told apart: a cyclic phase on this group.
    fn cyclic_phase(&self, phase: CyclicPhase<'_>) -> PhaseResult {
        match self {
            AnyGroup::Plain(g) => run_phase(g, phase),
            AnyGroup::Dc(g) => run_phase(g, phase),
        }
    }
}

fn run_phase<DC: Sync>(group: &Group<DC>, phase: CyclicPhase<'_>) -> PhaseResult
where
    Group<DC>: CycleGroup,
{
    let CyclicPhase {
        md,
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
    std::thread::scope(|s| {
        // The per-subdevice recovery's worker: a normal thread, for as long as the phase.
        let worker = match recovery {
            Some((board, snapshots)) => Some(
                std::thread::Builder::new()
                    .name("rtcat-recover".into())
                    .spawn_scoped(s, move || {
                        crate::subdevice_recovery::worker(crate::subdevice_recovery::Worker {
                            md,
                            group,
                            cfg,
                            snapshots,
                            board,
                        })
                    })
                    .map_err(|e| Box::new((Error::io("spawn the recovery worker")(e), None)))?,
            ),
            None => None,
        };
        let board = recovery.map(|(b, _)| b);
        let handle = std::thread::Builder::new()
            .name("rtcat-cycle".into())
            .spawn_scoped(s, move || -> PhaseResult {
                // A refused setting hands the bus back, so the run's storage is reused.
                let mut applied = match setup_cycle_thread(cfg, no_rt) {
                    Ok(a) => a,
                    Err(e) => return Err(Box::new((e, Some(bus)))),
                };
                let (mut x, thread) = match mode {
                    TxRxMode::Inline => {
                        let mut bus = bus;
                        bus.tx.replace_waker(std::task::Waker::noop());
                        bus.set_wait(cfg.cycle.wait_mode());
                        (Exchanger::Inline(bus), None)
                    }
                    TxRxMode::Thread => {
                        let counters = bus.counters.clone();
                        let t = TxRxThread::spawn(
                            bus,
                            ThreadRt {
                                cpu: if no_rt { None } else { txrx_cpu },
                                fifo_priority: (!no_rt).then_some(cfg.cycle.txrx_priority),
                            },
                        )
                        .map_err(|e| Box::new((e, None)))?;
                        let waker = std::task::Waker::from(Arc::new(crate::bus::ThreadWaker(
                            std::thread::current(),
                        )));
                        let passes = t.passes();
                        (
                            Exchanger::Thread {
                                counters,
                                waker,
                                passes,
                            },
                            Some(t),
                        )
                    }
                };
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
                    group,
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
