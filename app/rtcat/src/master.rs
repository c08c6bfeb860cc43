//! The master's life: bring the segment to OP, run cyclic phases on a real-time thread, recover
//! from faults by re-initialising (without restarting the process), and shut down cleanly
//! (outputs to zero, SAFE-OP, INIT).
//!
//! Per docs/NOTES.md §5: initialisation runs on a normal thread (ethercrab's timer thread inherits the
//! scheduling of the first thread that needs it) with a TX/RX thread moving frames; only the
//! cyclic phase runs SCHED_FIFO.

use crate::app::Application;
use crate::bus::{Bus, Link, SimLink, SocketLink, ThreadRt, TxRxThread};
use crate::config::{Config, TxRxMode};
use crate::cycle::{self, Exchanger, Exit, OpGroup, Params, Sinks};
use crate::rt;
use crate::stats::{Event, EventKind, Live, Recorder, Sample};
use anyhow::{Context, Result, anyhow, bail};
use ecsim::{Faults, SegmentSpec, SimPort};
use ethercrab::std::ethercat_now;
use ethercrab::{MainDevice, MainDeviceConfig, PduStorage, Timeouts};
use futures_lite::future::block_on;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Largest segment the master runs: the capacity of ethercrab's subdevice group (the const
/// generic of `init_single_group`; one more and the scan fails with `Capacity(SubDevice)`).
/// A power of two, as ethercrab's group index map needs. 1024 costs ~250 KiB per group, and the
/// bring-up (ethercrab's state transitions move the group by value) about 20 MiB of the
/// master thread's 64 MiB stack in a debug build; 4096 overflows it.
pub const MAX_SUBDEVICES: usize = 1024;
/// Largest process image, inputs plus outputs of all subdevices: the group's PDI storage (one
/// byte more and the transition to SAFE-OP fails with `PdiTooLong`). Sent as LRWs of at most
/// [`LRW_CHUNK`] bytes, one after the other: 15 frames per cycle at the limit.
pub const MAX_PDI_BYTES: usize = 16384;
/// Frames ethercrab may have in flight (it sends a cycle's frames one after the other and at most
/// two at once during the bring-up).
pub const MAX_FRAMES: usize = 32;
/// Largest datagram payload per frame: ethercrab splits the process image into LRWs of this size.
pub const LRW_CHUNK: usize = 1100;
pub const FRAME_DATA: usize = PduStorage::element_size(LRW_CHUNK);
type Storage = PduStorage<MAX_FRAMES, FRAME_DATA>;

/// What the master talks to.
#[derive(Debug, Clone)]
pub enum Target {
    /// The in-process simulated segment (no root, no NIC).
    Sim { spec: SegmentSpec, faults: Faults },
    /// A network interface (AF_PACKET, needs CAP_NET_RAW).
    Iface(String),
}

/// Real-time settings actually applied (for the results).
#[derive(Debug, Clone, Default)]
pub struct RtApplied {
    pub no_rt: bool,
    pub cpu: Option<usize>,
    pub txrx_cpu: Option<usize>,
    pub policy: String,
    pub priority: u32,
    pub timer_slack_ns: u64,
    /// Minor page faults of the cyclic thread during its cycles (should be 0).
    pub cycle_minor_faults: u64,
}

/// The result of a whole run.
pub struct Outcome {
    pub rec: Recorder,
    pub subdevices: usize,
    pub pdi_bytes: usize,
    pub expected_wkc: u16,
    pub rt: RtApplied,
    pub stop_reason: String,
    /// An unrecoverable fault ended the run (service mode exits non-zero).
    pub fatal: Option<String>,
    /// Frames refused as replies (by reason) and frames the link could not send.
    pub bus: rtlab::summary::BusStats,
}

/// Where the loop's events and samples go; drained by the status thread.
pub struct Channels {
    pub live: Arc<Live>,
    pub events: rtrb::Producer<Event>,
    pub samples: Option<rtrb::Producer<Sample>>,
}

/// Subdevice layout found at initialisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

impl Layout {
    /// Expected WKC of one cycle. ethercrab lays the image out as all inputs (in position order)
    /// then all outputs, and sends it as LRWs of at most [`LRW_CHUNK`] bytes; a device counts in
    /// every LRW that touches its area (+2 outputs, +1 inputs), so a device whose area straddles
    /// two frames counts twice.
    pub fn derived_wkc(&self) -> u32 {
        let total = self.pdi_bytes();
        let mut areas = Vec::with_capacity(2 * self.inputs.len());
        let mut off = 0;
        for &n in &self.inputs {
            areas.push((off..off + n, 1u32));
            off += n;
        }
        for &n in &self.outputs {
            areas.push((off..off + n, 2u32));
            off += n;
        }
        debug_assert_eq!(off, total);
        let mut wkc = 0;
        let mut start = 0;
        while start < total {
            let end = (start + LRW_CHUNK).min(total);
            wkc += areas
                .iter()
                .filter(|(r, _)| !r.is_empty() && r.start < end && start < r.end)
                .map(|(_, w)| w)
                .sum::<u32>();
            start = end;
        }
        wkc
    }
    pub fn pdi_bytes(&self) -> usize {
        self.inputs.iter().sum::<usize>() + self.outputs.iter().sum::<usize>()
    }
}

fn init_timeouts(cfg: &Config) -> Timeouts {
    Timeouts {
        pdu: Duration::from_millis(cfg.bus.init_pdu_timeout_ms.into()),
        eeprom: Duration::from_millis(cfg.bus.init_eeprom_timeout_ms.into()),
        state_transition: Duration::from_millis(cfg.bus.state_timeout_ms.into()),
        ..Timeouts::default()
    }
}

/// Scan, check against the configuration, and walk the segment to OP.
fn bring_up(md: &MainDevice<'static>, cfg: &Config) -> Result<(OpGroup, Layout, u16)> {
    let group = block_on(md.init_single_group::<MAX_SUBDEVICES, MAX_PDI_BYTES>(ethercat_now))
        .map_err(|e| match e {
            ethercrab::error::Error::Capacity(ethercrab::error::Item::SubDevice) => anyhow!(
                "the segment has {} subdevices; rtcat runs at most {MAX_SUBDEVICES}",
                md.num_subdevices()
            ),
            e => anyhow!("segment scan/configuration failed: {e}"),
        })?;
    let n = group.len();
    if n == 0 {
        bail!(
            "no subdevices answered: check the cable, the interface and that the segment is powered"
        );
    }
    if let Some(want) = cfg.segment.subdevices
        && usize::from(want) != n
    {
        bail!("segment.subdevices = {want}, but {n} subdevices answered");
    }
    for d in &cfg.segment.device {
        let sd = group
            .subdevice(md, usize::from(d.position))
            .map_err(|e| anyhow!("segment.device position {}: {e}", d.position))?;
        let id = sd.identity();
        if let Some(v) = d.vendor_id
            && v != id.vendor_id
        {
            bail!(
                "subdevice at position {}: vendor_id {:#010x}, configured {v:#010x}",
                d.position,
                id.vendor_id
            );
        }
        if let Some(p) = d.product_id
            && p != id.product_id
        {
            bail!(
                "subdevice at position {}: product_id {:#010x}, configured {p:#010x}",
                d.position,
                id.product_id
            );
        }
    }
    let group = block_on(group.into_op(md)).map_err(|e| match e {
        ethercrab::error::Error::PdiTooLong { desired_length, .. } => anyhow!(
            "the segment's process image is {desired_length} bytes (inputs + outputs); rtcat \
             runs at most {MAX_PDI_BYTES}"
        ),
        e => anyhow!("transition to OP failed: {e}"),
    })?;
    let mut layout = Layout {
        inputs: Vec::with_capacity(n),
        outputs: Vec::with_capacity(n),
    };
    for sd in group.iter(md) {
        let io = sd.io_raw();
        layout.inputs.push(io.inputs().len());
        layout.outputs.push(io.outputs().len());
    }
    let derived = layout.derived_wkc();
    let expected = match cfg.segment.expected_wkc {
        Some(w) if w != derived => bail!(
            "segment.expected_wkc = {w}, but the mapping found gives {derived} \
             ({n} subdevices, {} bytes of process data)",
            layout.pdi_bytes()
        ),
        Some(w) => w,
        None => derived,
    };
    let expected = u16::try_from(expected).context("expected WKC above 65535")?;
    Ok((group, layout, expected))
}

/// What [`bring_up_retrying`] returns: the (possibly re-created) MainDevice, and the segment with
/// the number of attempts it took, or the last error.
type Retried = (MainDevice<'static>, Result<((OpGroup, Layout, u16), u32)>);

/// Bring the segment up, retrying after `[health] recovery_backoff_ms` until it works, a stop is
/// requested, `deadline_ns` passes, or `[health] max_failed_recoveries` attempts failed in a row
/// (0 = never give up). Each failure goes to `on_failure(attempt, error)`.
fn bring_up_retrying(
    mut md: MainDevice<'static>,
    cfg: &Config,
    deadline_ns: Option<u64>,
    failed_in_a_row: &mut u32,
    mut on_failure: impl FnMut(u32, &anyhow::Error),
) -> Retried {
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let e = match bring_up(&md, cfg) {
            Ok(up) => {
                *failed_in_a_row = 0;
                return (md, Ok((up, attempts)));
            }
            Err(e) => e,
        };
        *failed_in_a_row += 1;
        on_failure(attempts, &e);
        let max = cfg.health.max_failed_recoveries;
        if max > 0 && *failed_in_a_row >= max {
            return (
                md,
                Err(e.context(format!("gave up after {max} failed attempts in a row"))),
            );
        }
        if crate::signals::stop_requested()
            || deadline_ns.is_some_and(|d| crate::clock::now_ns() >= d)
        {
            return (
                md,
                Err(anyhow!("stopped while bringing the segment up: {e:#}")),
            );
        }
        std::thread::sleep(Duration::from_millis(cfg.health.recovery_backoff_ms.into()));
        // Start over from a clean PDU loop for the next attempt.
        // SAFETY: bring_up failed, so no group of this MainDevice exists.
        let pl = unsafe { md.release() };
        md = MainDevice::new(pl, init_timeouts(cfg), MainDeviceConfig::default());
    }
}

/// Outputs to zero, then SAFE-OP, then INIT. Errors are reported, not fatal: results still get
/// written.
fn shut_down(md: &MainDevice<'static>, group: OpGroup) -> Result<()> {
    for sd in group.iter(md) {
        sd.outputs_raw_mut().fill(0);
    }
    block_on(group.tx_rx(md)).map_err(|e| anyhow!("last cycle with zero outputs: {e}"))?;
    let g = block_on(group.into_safe_op(md)).map_err(|e| anyhow!("OP -> SAFE-OP: {e}"))?;
    let g = block_on(g.into_pre_op(md)).map_err(|e| anyhow!("SAFE-OP -> PRE-OP: {e}"))?;
    block_on(g.into_init(md)).map_err(|e| anyhow!("PRE-OP -> INIT: {e}"))?;
    Ok(())
}

/// Everything a run needs.
pub struct RunSpec {
    pub cfg: Config,
    pub target: Target,
    pub duration: Option<Duration>,
    pub no_rt: bool,
    /// Called once the segment is in OP and cycling is about to start (sd_notify READY).
    pub on_ready: Option<Box<dyn FnMut() + Send>>,
    /// Keep retrying the first bring-up (service mode) instead of failing at once (bench).
    pub retry_start: bool,
}

fn open_link(target: &Target) -> Result<Box<dyn Link>> {
    Ok(match target {
        Target::Sim { spec, faults } => Box::new(SimLink {
            port: SimPort::with_faults(spec.clone(), faults.clone()),
        }),
        Target::Iface(name) => Box::new(SocketLink {
            sock: ecsim::wire::PacketSocket::open(name)
                .with_context(|| format!("open EtherCAT interface {name}"))?,
        }),
    })
}

/// Run the master until stopped, the duration elapsed, or an unrecoverable fault.
pub fn run(mut spec: RunSpec, app: &mut dyn Application, ch: &mut Channels) -> Result<Outcome> {
    let cfg = spec.cfg.clone();
    let storage: &'static Storage = Box::leak(Box::new(Storage::new()));
    let (tx, rx, pdu_loop) = storage
        .try_split()
        .map_err(|_| anyhow!("PDU storage already split"))?;
    let link = open_link(&spec.target)?;
    let mut bus = Bus::new(tx, rx, link);
    let counters = bus.counters.clone();
    let txrx_cpu = cfg.cycle.txrx_cpu.or(cfg.cycle.cpu);
    let init_rt = ThreadRt {
        cpu: if spec.no_rt { None } else { txrx_cpu },
        fifo_priority: None,
    };

    let md = MainDevice::new(pdu_loop, init_timeouts(&cfg), MainDeviceConfig::default());
    let thread = TxRxThread::spawn(bus, init_rt)?;
    let mut failed_in_a_row: u32 = 0;
    let (mut md, first) = if spec.retry_start {
        // Service mode: a segment that is not there yet (powered later, cable plugged later)
        // is waited for, like a recovery.
        ch.live.recovering.store(1, Ordering::Relaxed);
        let r = bring_up_retrying(md, &cfg, None, &mut failed_in_a_row, |n, e| {
            counters.publish(&ch.live);
            push(ch, 0, EventKind::StartFailed { attempt: n });
            crate::say!("rtcat: bringing the segment up, attempt {n} failed: {e:#}");
        });
        ch.live.recovering.store(0, Ordering::Relaxed);
        (r.0, r.1.map(|(up, _)| up))
    } else {
        let r = bring_up(&md, &cfg);
        (md, r)
    };
    bus = thread.stop();
    counters.publish(&ch.live);
    let (mut group, mut layout, mut expected_wkc) = first?;
    app.reset(&layout.outputs);
    ch.live
        .set_layout(layout.inputs.len(), layout.pdi_bytes(), expected_wkc);

    // Process-wide real-time settings, once the segment is up.
    let _dma = if !spec.no_rt && cfg.rt.hold_cpu_dma_latency {
        Some(rt::DmaLatencyGuard::hold_zero()?)
    } else {
        None
    };
    if !spec.no_rt && cfg.rt.lock_memory {
        rt::lock_memory()?;
    }

    let end_ns = spec
        .duration
        .map(|d| crate::clock::now_ns() + d.as_nanos() as u64);
    let mut rec = Recorder::new();
    let mut applied = RtApplied {
        no_rt: spec.no_rt,
        ..RtApplied::default()
    };
    let mut states = [0u8; MAX_SUBDEVICES];
    let mut scratch = vec![0u8; MAX_PDI_BYTES];
    let mut fatal = None;
    let stop_reason;
    if let Some(f) = spec.on_ready.as_mut() {
        f();
    }

    loop {
        let params = Params {
            period_ns: u64::from(cfg.cycle.period_us) * 1000,
            response_timeout_ns: cfg.response_timeout_ns(),
            expected_wkc,
            bad_cycles_before_recovery: cfg.health.bad_cycles_before_recovery,
            end_ns,
        };
        // One cyclic phase on its own thread; the bus comes back when it ends.
        let (b, r, exit, a) = run_phase(
            &md,
            &group,
            bus,
            &cfg,
            spec.no_rt,
            app,
            rec,
            ch,
            &mut states,
            &mut scratch,
            params,
        )?;
        bus = b;
        rec = r;
        applied = RtApplied {
            cycle_minor_faults: applied.cycle_minor_faults + a.cycle_minor_faults,
            ..a
        };
        match exit {
            Exit::Stopped | Exit::DurationReached => {
                stop_reason = if exit == Exit::Stopped {
                    match crate::signals::signal() {
                        Some(s) => format!("signal {s}"),
                        None => "stop requested".into(),
                    }
                } else {
                    "duration reached".into()
                };
                let t = TxRxThread::spawn(bus, init_rt)?;
                let down = shut_down(&md, group);
                if let Err(e) = &down {
                    crate::say!("rtcat: shutdown: {e:#}");
                }
                push(
                    ch,
                    rec.cycles,
                    EventKind::Shutdown {
                        reached_init: down.is_ok(),
                    },
                );
                let _ = t.stop();
                break;
            }
            Exit::Recover { bad_cycles } => {
                push(ch, rec.cycles, EventKind::RecoveryStarted { bad_cycles });
                ch.live.recovering.store(1, Ordering::Relaxed);
                drop(group);
                // SAFETY: the old group is dropped and never used with the new MainDevice.
                let pdu_loop = unsafe { md.release() };
                md = MainDevice::new(pdu_loop, init_timeouts(&cfg), MainDeviceConfig::default());
                let t = TxRxThread::spawn(bus, init_rt)?;
                let cycles = rec.cycles;
                let mut failures = 0u64;
                let (m, result) =
                    bring_up_retrying(md, &cfg, end_ns, &mut failed_in_a_row, |n, e| {
                        counters.publish(&ch.live);
                        failures += 1;
                        push(ch, cycles, EventKind::RecoveryFailed { attempt: n });
                        crate::say!("rtcat: recovery attempt {n} failed: {e:#}");
                    });
                md = m;
                rec.failed_recoveries += failures;
                bus = t.stop();
                counters.publish(&ch.live);
                ch.live.recovering.store(0, Ordering::Relaxed);
                match result {
                    Ok(((g, l, w), attempts)) => {
                        group = g;
                        layout = l;
                        expected_wkc = w;
                        app.reset(&layout.outputs);
                        ch.live
                            .set_layout(layout.inputs.len(), layout.pdi_bytes(), expected_wkc);
                        states = [0u8; MAX_SUBDEVICES];
                        rec.recoveries += 1;
                        ch.live.recoveries.store(rec.recoveries, Ordering::Relaxed);
                        push(ch, rec.cycles, EventKind::RecoveryDone { attempts });
                    }
                    Err(e) => {
                        let stopped = crate::signals::stop_requested()
                            || end_ns.is_some_and(|e| crate::clock::now_ns() >= e);
                        stop_reason = if stopped {
                            "stopped while recovering".into()
                        } else {
                            fatal = Some(format!("{e:#}"));
                            "unrecoverable fault".into()
                        };
                        break;
                    }
                }
            }
        }
    }
    counters.publish(&ch.live);
    Ok(Outcome {
        rec,
        subdevices: layout.inputs.len(),
        pdi_bytes: layout.pdi_bytes(),
        expected_wkc,
        rt: applied,
        stop_reason,
        fatal,
        bus: counters.bus_stats(),
    })
}

fn push(ch: &mut Channels, cycle: u64, kind: EventKind) {
    let _ = ch.events.push(Event {
        unix_ns: crate::clock::unix_ns(),
        cycle,
        kind,
    });
}

/// Real-time setup of the calling (cyclic) thread.
fn setup_cycle_thread(cfg: &Config, no_rt: bool) -> Result<RtApplied> {
    rt::name_thread("rtcat-cycle");
    if !no_rt {
        if let Some(cpu) = cfg.cycle.cpu {
            rt::pin_to(cpu).context("cycle.cpu")?;
        }
        rt::set_timer_slack(cfg.rt.timer_slack_ns)?;
        rt::set_fifo(cfg.cycle.priority).context("cycle.priority")?;
        rt::prefault_stack(cfg.rt.prefault_stack_kib);
    }
    let (policy, priority) = rt::current_policy();
    Ok(RtApplied {
        no_rt,
        cpu: if no_rt { None } else { cfg.cycle.cpu },
        txrx_cpu: None,
        policy,
        priority,
        timer_slack_ns: rt::timer_slack(),
        cycle_minor_faults: 0,
    })
}

#[allow(clippy::too_many_arguments)]
fn run_phase(
    md: &MainDevice<'static>,
    group: &OpGroup,
    bus: Bus,
    cfg: &Config,
    no_rt: bool,
    app: &mut dyn Application,
    mut rec: Recorder,
    ch: &mut Channels,
    states: &mut [u8; MAX_SUBDEVICES],
    scratch: &mut Vec<u8>,
    params: Params,
) -> Result<(Bus, Recorder, Exit, RtApplied)> {
    let mode = cfg.cycle.txrx;
    let txrx_cpu = cfg.cycle.txrx_cpu.or(cfg.cycle.cpu);
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("rtcat-cycle".into())
            .spawn_scoped(s, move || -> Result<(Bus, Recorder, Exit, RtApplied)> {
                let mut applied = setup_cycle_thread(cfg, no_rt)?;
                let (mut x, thread) = match mode {
                    TxRxMode::Inline => {
                        bus.tx.replace_waker(std::task::Waker::noop());
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
                        )?;
                        let waker = std::task::Waker::from(Arc::new(crate::bus::ThreadWaker(
                            std::thread::current(),
                        )));
                        (Exchanger::Thread { counters, waker }, Some(t))
                    }
                };
                applied.txrx_cpu = match mode {
                    TxRxMode::Inline => applied.cpu,
                    TxRxMode::Thread if !no_rt => txrx_cpu,
                    TxRxMode::Thread => None,
                };
                let stop = || crate::signals::stop_requested();
                let faults_before = rt::thread_minor_faults();
                let mut sinks = Sinks {
                    live: &ch.live,
                    events: &mut ch.events,
                    samples: ch.samples.as_mut(),
                    scratch,
                    states,
                    stop: &stop,
                };
                let exit = cycle::run(&mut x, md, group, app, &mut rec, &mut sinks, params);
                applied.cycle_minor_faults = rt::thread_minor_faults() - faults_before;
                let bus = match (x, thread) {
                    (Exchanger::Inline(b), _) => b,
                    (Exchanger::Thread { .. }, Some(t)) => t.stop(),
                    (Exchanger::Thread { .. }, None) => unreachable!("thread mode has a thread"),
                };
                Ok((bus, rec, exit, applied))
            })?;
        handle
            .join()
            .map_err(|_| anyhow!("cyclic thread panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wkc_counts_devices_straddling_frames_twice() {
        let l = Layout {
            inputs: vec![22; 3],
            outputs: vec![22; 3],
        };
        assert_eq!(l.derived_wkc(), 9);
        // 64 x 22: chunk boundaries fall between devices (1100 = 50 x 22).
        let l = Layout {
            inputs: vec![22; 64],
            outputs: vec![22; 64],
        };
        assert_eq!(l.derived_wkc(), 192);
        // 64 x 23 in, 64 x 23 out = 2944 bytes: the boundary at 1100 falls inside input 47
        // (1081..1104) and the one at 2200 inside output 31 (2185..2208): +1 and +2.
        let l = Layout {
            inputs: vec![23; 64],
            outputs: vec![23; 64],
        };
        assert_eq!(l.derived_wkc(), 192 + 1 + 2);
        let l = Layout {
            inputs: vec![0, 4],
            outputs: vec![2, 0],
        };
        assert_eq!(l.derived_wkc(), 3);
    }
}
