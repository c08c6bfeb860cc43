//! The master's life: bring the segment to OP, run cyclic phases on a real-time thread, recover
//! from faults by re-initialising (without restarting the process), and shut down cleanly
//! (outputs to zero, SAFE-OP, INIT).
//!
//! Per docs/NOTES.md §5: initialisation runs on a normal thread (ethercrab's timer thread inherits the
//! scheduling of the first thread that needs it) with a TX/RX thread moving frames; only the
//! cyclic phase runs SCHED_FIFO.

use crate::application::{Application, Recovery, Setup, ShutdownReason};
use crate::bus::{Bus, Link, SocketLink, ThreadRt, TxRxThread};
use crate::config::{Config, TxRxMode};
use crate::cycle::{self, CycleGroup, DcGroup, Exchanger, Exit, Group, OpGroup, Params, Sinks};
use crate::devices;
use crate::error::{Error, Result};
use crate::layout::{Layout, LayoutError};
use crate::rt;
use crate::stats::{Event, EventKind, Live, Recorder, Sample};
use crate::stop::Stop;
use ethercrab::std::ethercat_now;
use ethercrab::{MainDevice, PduLoop, PduRx, PduTx, Timeouts};
use futures_lite::future::block_on;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::limits::{FRAME_DATA, LRW_CHUNK, MAX_FRAMES, MAX_PDI_BYTES, MAX_SUBDEVICES};
use crate::limits::{SETUP_STACK, Storage};

/// Run `f` on a thread named `name` with the stack a bring-up needs (ethercrab's groups for
/// [`MAX_SUBDEVICES`] and its init futures are large, in debug builds above all), and wait for it.
pub(crate) fn on_setup_thread<R: Send>(
    name: &'static str,
    f: impl FnOnce() -> R + Send,
) -> Result<R> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(SETUP_STACK)
            .spawn_scoped(s, f)
            .map_err(Error::io("spawn the setup thread"))?
            .join()
            .map_err(|_| Error::Panicked(name))
    })
}
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
}

/// Real-time settings actually applied (for the results).
#[derive(Debug, Clone, Default)]
pub struct RtApplied {
    /// `--no-rt`: nothing applied.
    pub no_rt: bool,
    /// CPU of the cyclic thread.
    pub cpu: Option<usize>,
    /// CPU of the frames' TX/RX (the cyclic CPU in inline mode).
    pub txrx_cpu: Option<usize>,
    /// Scheduling policy of the cyclic thread.
    pub policy: String,
    /// Its priority.
    pub priority: u32,
    /// Its timer slack.
    pub timer_slack_ns: u64,
    /// Minor page faults of the cyclic thread during its cycles (should be 0).
    pub cycle_minor_faults: u64,
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

fn init_timeouts(cfg: &Config) -> Timeouts {
    Timeouts {
        pdu: Duration::from_millis(cfg.bus.init_pdu_timeout_ms.into()),
        eeprom: Duration::from_millis(cfg.bus.init_eeprom_timeout_ms.into()),
        state_transition: Duration::from_millis(cfg.bus.state_timeout_ms.into()),
        ..Timeouts::default()
    }
}

/// The segment in OP: with or without distributed clocks.
enum AnyGroup {
    /// No DC: plain `tx_rx`, deadlines on CLOCK_MONOTONIC.
    Plain(OpGroup),
    /// SYNC0 configured: `tx_rx_dc` and the phase lock.
    Dc(DcGroup),
}

/// A segment in OP.
struct Up {
    group: AnyGroup,
    layout: Layout,
    expected_wkc: u16,
    /// Each subdevice's share of the working counter (inputs, outputs).
    wkc_shares: Vec<(u32, u32)>,
    /// Positions of the DC subdevices whose system time difference is sampled: all but the
    /// reference clock, whose 0x092C never changes (it is read, never compared; empty without
    /// `[dc]`).
    dc_positions: Vec<u16>,
}

/// Register access of `configure`, through the MainDevice (configured station addresses).
struct Registers<'a> {
    md: &'a MainDevice<'static>,
    addresses: Vec<u16>,
}

impl crate::application::RegisterAccess for Registers<'_> {
    fn read(&mut self, position: u16, register: u16, buf: &mut [u8]) -> Result<()> {
        let addr = self.address(position)?;
        let len = u16::try_from(buf.len())
            .map_err(|_| Error::SegmentMismatch(format!("register read of {} bytes", buf.len())))?;
        let r = block_on(ethercrab::Command::fprd(addr, register).receive_slice(self.md, len))
            .map_err(|e| {
                Error::bus(
                    format!("read register {register:#06x} of position {position}"),
                    e,
                )
            })?;
        buf.copy_from_slice(&r[..buf.len()]);
        Ok(())
    }

    fn write(&mut self, position: u16, register: u16, data: &[u8]) -> Result<()> {
        let addr = self.address(position)?;
        block_on(ethercrab::Command::fpwr(addr, register).send(self.md, data)).map_err(|e| {
            Error::bus(
                format!("write register {register:#06x} of position {position}"),
                e,
            )
        })
    }
}

impl Registers<'_> {
    fn address(&self, position: u16) -> Result<u16> {
        self.addresses
            .get(usize::from(position))
            .copied()
            .ok_or_else(|| {
                Error::SegmentMismatch(format!(
                    "position {position}: the segment has {} subdevices",
                    self.addresses.len()
                ))
            })
    }
}

/// The segment scanned and configured by ethercrab, in PRE-OP (a segment larger than the master
/// runs is a [`Error::Capacity`] naming both sizes).
pub(crate) fn scan_to_pre_op(md: &MainDevice<'static>) -> Result<PreOpGroup> {
    block_on(md.init_single_group::<MAX_SUBDEVICES, MAX_PDI_BYTES>(ethercat_now)).map_err(|e| {
        match e {
            ethercrab::error::Error::Capacity(ethercrab::error::Item::SubDevice) => {
                Error::Capacity(format!(
                    "the segment has {} subdevices; rtcat runs at most {MAX_SUBDEVICES}",
                    md.num_subdevices()
                ))
            }
            e => Error::bus("segment scan/configuration", e),
        }
    })
}

/// The segment in PRE-OP, as ethercrab holds it.
pub(crate) type PreOpGroup = ethercrab::SubDeviceGroup<
    MAX_SUBDEVICES,
    MAX_PDI_BYTES,
    ethercrab::DefaultLock,
    ethercrab::subdevice_group::PreOp,
>;

/// The first steps of every bring-up, on the segment in PRE-OP: check it against `[segment]`,
/// write each `[[device]]` entry's PDO configuration and PS startup SDOs, and read the layout it
/// will run with. Returns the layout and which `[[device]]` entry configures each position.
pub(crate) fn configure_pre_op(
    md: &MainDevice<'static>,
    group: &PreOpGroup,
    cfg: &Config,
    generation: u32,
) -> Result<(Layout, Vec<Option<usize>>)> {
    let n = group.len();
    if n == 0 {
        return Err(Error::NoSubdevices);
    }
    if let Some(want) = cfg.segment.subdevices
        && usize::from(want) != n
    {
        return Err(Error::SegmentMismatch(format!(
            "segment.subdevices = {want}, but {n} subdevices answered"
        )));
    }
    for d in &cfg.segment.device {
        let sd = group.subdevice(md, usize::from(d.position)).map_err(|_| {
            Error::SegmentMismatch(format!(
                "segment.device position {}: the segment has {n} subdevices",
                d.position
            ))
        })?;
        let id = sd.identity();
        for (what, got, want) in [
            ("vendor_id", id.vendor_id, d.vendor_id),
            ("product_id", id.product_id, d.product_id),
        ] {
            if let Some(w) = want
                && w != got
            {
                return Err(Error::SegmentMismatch(format!(
                    "subdevice at position {}: {what} {got:#010x}, configured {w:#010x}",
                    d.position
                )));
            }
        }
    }
    // [[device]]: which entry applies to which subdevice, then its PDO configuration and PS
    // startup SDOs, written now in PRE-OP so that everything read below follows them.
    let found: Vec<devices::Found> = group
        .iter(md)
        .enumerate()
        .map(|(p, sd)| {
            let id = sd.identity();
            devices::Found {
                position: u16::try_from(p).unwrap_or(u16::MAX),
                alias: sd.alias_address(),
                identity: (id.vendor_id, id.product_id, id.revision),
            }
        })
        .collect();
    let chosen = devices::resolve(&cfg.device, &found)?;
    let configured = |pos: usize, name: &str| {
        chosen[pos].map(|i| {
            let d = &cfg.device[i];
            (d, devices::who(pos as u16, name, i, d))
        })
    };
    // The SII (read once per identity, kept for the layout below) says whether a subdevice
    // has CoE: without it nothing is written and the configuration is compared with the SII.
    let mut cache = crate::mapping::SiiCache::default();
    for (pos, sd) in group.iter(md).enumerate() {
        if let Some((d, who)) = configured(pos, sd.name()) {
            let sii = crate::mapping::sii_of(md, &sd, pos as u16, &mut cache)?;
            let coe = crate::mapping::has_coe(&sii);
            devices::apply_pre_op(md, &sd, pos as u16, &who, d, coe)?;
        }
    }
    // The mapping in effect, read in PRE-OP from the sources ethercrab sizes the SMs from, and
    // compared with what was configured (a subdevice may ignore a write without aborting it).
    let mut sources = Vec::with_capacity(n);
    for (pos, sd) in group.iter(md).enumerate() {
        let mut src = crate::mapping::read_subdevice(md, &sd, pos as u16, &mut cache)?;
        if let Some((d, who)) = configured(pos, sd.name()) {
            devices::check_and_name(&sd, &who, d, &mut src)?;
        }
        sources.push(src);
    }
    Ok((Layout::build(generation, &sources)?, chosen))
}

/// Scan, check against the configuration, read the mapping, let the application configure,
/// and walk the segment to OP.
fn bring_up(
    md: &MainDevice<'static>,
    cfg: &Config,
    app: &mut dyn Application,
    generation: u32,
) -> Result<Up> {
    let group = scan_to_pre_op(md)?;
    let n = group.len();
    let (layout, chosen) = configure_pre_op(md, &group, cfg, generation)?;
    let configured = |pos: usize, name: &str| {
        chosen[pos].map(|i| {
            let d = &cfg.device[i];
            (d, devices::who(pos as u16, name, i, d))
        })
    };
    let mut regs = Registers {
        md,
        addresses: layout.subdevices.iter().map(|s| s.address).collect(),
    };
    app.configure(&mut Setup {
        layout: &layout,
        registers: &mut regs,
    })
    .map_err(|e| match e.downcast::<LayoutError>() {
        Ok(l) => Error::Entry(*l),
        Err(e) => Error::Application(e.to_string()),
    })?;

    let pdi_too_long = |stage: &'static str| {
        move |e| match e {
            ethercrab::error::Error::PdiTooLong { desired_length, .. } => Error::Capacity(format!(
                "the segment's process image is {desired_length} bytes (inputs + outputs); \
                     rtcat runs at most {MAX_PDI_BYTES}"
            )),
            e => Error::bus(stage, e),
        }
    };
    let group = if cfg.dc.enabled {
        let mut group = group;
        let dc_positions = configure_dc_pre_op(md, cfg, &mut group, &layout)?;
        let group = block_on(group.into_pre_op_pdi(md))
            .map_err(pdi_too_long("PRE-OP with process data"))?;
        let group =
            block_on(group.configure_dc_sync(md, cfg.dc.dc_configuration(cfg.cycle.period())))
                .map_err(|e| Error::bus("DC SYNC0 configuration (configure_dc_sync)", e))?;
        let group =
            block_on(group.into_safe_op(md)).map_err(|e| Error::bus("transition to SAFE-OP", e))?;
        write_startup_so(md, &group, &configured)?;
        let group = dc_into_op(md, cfg, group)?;
        check_image(md, &group, &layout, &configured)?;
        // The reference (the first) is what the others are compared with.
        (AnyGroup::Dc(group), dc_positions[1..].to_vec())
    } else {
        let group =
            block_on(group.into_safe_op(md)).map_err(pdi_too_long("transition to SAFE-OP"))?;
        write_startup_so(md, &group, &configured)?;
        let group = block_on(group.into_op(md)).map_err(|e| Error::bus("transition to OP", e))?;
        check_image(md, &group, &layout, &configured)?;
        (AnyGroup::Plain(group), Vec::new())
    };
    let (group, dc_positions) = group;
    let (derived, wkc_shares) = layout.wkc(LRW_CHUNK);
    let expected = match cfg.segment.expected_wkc {
        Some(w) if w != derived => {
            return Err(Error::SegmentMismatch(format!(
                "segment.expected_wkc = {w}, but the mapping found gives {derived} \
                 ({n} subdevices, {} bytes of process data)",
                layout.pdi_bytes()
            )));
        }
        Some(w) => w,
        None => derived,
    };
    let expected_wkc = u16::try_from(expected)
        .map_err(|_| Error::Capacity(format!("expected WKC {expected} is above 65535")))?;
    Ok(Up {
        group,
        layout,
        expected_wkc,
        wkc_shares,
        dc_positions,
    })
}

/// Which `[[device]]` entry configures the subdevice at a position (and how it is named).
type Configured<'c> = dyn Fn(usize, &str) -> Option<(&'c devices::DeviceConfig, String)> + 'c;

/// The SAFE-OP startup SDOs of the configured devices.
fn write_startup_so<S, DC>(
    md: &MainDevice<'static>,
    group: &ethercrab::SubDeviceGroup<MAX_SUBDEVICES, MAX_PDI_BYTES, ethercrab::DefaultLock, S, DC>,
    configured: &Configured<'_>,
) -> Result<()>
where
    S: ethercrab::subdevice_group::HasPdi,
{
    for (pos, sd) in group.iter(md).enumerate() {
        if let Some((d, who)) = configured(pos, sd.name()) {
            devices::write_startup(md, &sd, pos as u16, &who, d, devices::Transition::SO)?;
        }
    }
    Ok(())
}

/// The process image in OP against the layout read in PRE-OP.
fn check_image<DC>(
    md: &MainDevice<'static>,
    group: &Group<DC>,
    layout: &Layout,
    configured: &Configured<'_>,
) -> Result<()> {
    for (pos, (sd, s)) in group.iter(md).zip(&layout.subdevices).enumerate() {
        let io = sd.io_raw();
        let (i, o) = (io.inputs().len(), io.outputs().len());
        if let Some((d, who)) = configured(pos, sd.name()) {
            devices::check_sizes(&who, d, i, o)?;
        }
        if i != s.input_bytes as usize || o != s.output_bytes as usize {
            return Err(LayoutError::SizeMismatch {
                position: s.position,
                name: s.name.clone(),
                layout_in: s.input_bytes,
                layout_out: s.output_bytes,
                image_in: i,
                image_out: o,
            }
            .into());
        }
    }
    Ok(())
}

/// `[dc]` in PRE-OP: check the reference clock, give every DC subdevice its SYNC mode
/// (`set_dc_sync`, applied by `configure_dc_sync`) and write the CoE sync modes. Returns the
/// positions of the DC subdevices.
fn configure_dc_pre_op(
    md: &MainDevice<'static>,
    cfg: &Config,
    group: &mut PreOpGroup,
    layout: &Layout,
) -> Result<Vec<u16>> {
    let dc = &cfg.dc;
    let mut capable = Vec::new();
    for (pos, mut sd) in group.iter_mut(md).enumerate() {
        let position = pos as u16;
        if sd.dc_support().any() {
            capable.push(position);
            sd.set_dc_sync(dc.dc_sync(position));
        } else if let Some(i) = dc.device.iter().position(|d| d.position == position)
            && dc.device[i].assign_activate != 0
        {
            return Err(Error::SegmentMismatch(format!(
                "dc.device[{i}].assign_activate = {:#06x}: the subdevice at position {position} \
                 ({}) has no distributed clock",
                dc.device[i].assign_activate,
                sd.name()
            )));
        }
    }
    // ethercrab 0.7.1 takes the first DC-capable subdevice as the reference clock
    // (`dc::configure_dc`) and offers no way to choose another one.
    let Some(&first) = capable.first() else {
        return Err(Error::SegmentMismatch(
            "dc.enabled = true, but no subdevice of the segment has a distributed clock".into(),
        ));
    };
    if let Some(r) = dc.reference
        && r != first
    {
        return Err(Error::SegmentMismatch(format!(
            "dc.reference = {r}: the reference clock is the first subdevice with a distributed \
             clock, position {first}; another one is not supported"
        )));
    }
    let synced: Vec<u16> = capable
        .iter()
        .copied()
        .filter(|&p| dc.assign_activate(p) != 0)
        .collect();
    if dc.coe_sync_mode {
        // 0x1C32:01 / 0x1C33:01 "Synchronization type" (UINT16) = 2: DC SYNC0 (ETG.1020 §21.1.2;
        // the drive then latches its outputs and samples its inputs on SYNC0, not on the frame).
        for &p in &synced {
            let s = &layout.subdevices[usize::from(p)];
            if !s.coe {
                continue;
            }
            let mut client =
                crate::coe::Client::on_bus(md, p, s.address, crate::coe::Timeouts::default())
                    .map_err(|e| sync_mode_error(p, &s.name, 0x1c32, e))?;
            for (object, present) in [(0x1c32u16, s.output_bytes > 0), (0x1c33, s.input_bytes > 0)]
            {
                if present {
                    client
                        .download(object, 1, &2u16.to_le_bytes())
                        .map_err(|e| sync_mode_error(p, &s.name, object, e))?;
                }
            }
        }
    }
    Ok(capable)
}

fn sync_mode_error(position: u16, name: &str, object: u16, e: crate::coe::Error) -> Error {
    Error::Device(Box::new(devices::DeviceError::Sdo {
        who: format!("subdevice at position {position} ({name}), dc.coe_sync_mode"),
        action: "write",
        object: format!("{object:#06x}:01"),
        value: " = 2 (u16, DC SYNC0)".into(),
        source: Box::new(devices::SdoFailure::Coe(e)),
    }))
}

/// SAFE-OP to OP with SYNC0 running: request OP and keep exchanging process data (paced on
/// the DC grid by `next_cycle_wait`) until every subdevice is in OP. A drive in DC mode checks
/// that frames arrive around SYNC0 before it accepts OP (ETG.1020 §21.1, AL status 0x002C/0x001A
/// otherwise); ethercrab's `tx_rx_dc` example does the same.
fn dc_into_op(
    md: &MainDevice<'static>,
    cfg: &Config,
    group: ethercrab::SubDeviceGroup<
        MAX_SUBDEVICES,
        MAX_PDI_BYTES,
        ethercrab::DefaultLock,
        ethercrab::subdevice_group::SafeOp,
        ethercrab::subdevice_group::HasDc,
    >,
) -> Result<DcGroup> {
    let group =
        block_on(group.request_into_op(md)).map_err(|e| Error::bus("transition to OP", e))?;
    let timeout = Duration::from_millis(cfg.bus.state_timeout_ms.into());
    let start = std::time::Instant::now();
    loop {
        let r = block_on(group.tx_rx_dc(md)).map_err(|e| Error::bus("transition to OP", e))?;
        if r.all_op() {
            return Ok(group);
        }
        if start.elapsed() > timeout {
            let not: Vec<String> = r
                .subdevice_states
                .iter()
                .enumerate()
                .filter(|(_, s)| **s != ethercrab::SubDeviceState::Op)
                .map(|(i, s)| format!("{i} ({s})"))
                .collect();
            return Err(Error::SegmentMismatch(format!(
                "transition to OP with distributed clocks: not in OP after {} ms \
                 (bus.state_timeout_ms): position {}",
                timeout.as_millis(),
                not.join(", ")
            )));
        }
        std::thread::sleep(r.extra.next_cycle_wait);
    }
}

/// The TX/RX thread of bring-ups, recoveries and the shutdown: on the frames' CPU (the cycle's
/// unless `[cycle] txrx_cpu` says otherwise), not real-time.
fn setup_txrx(cfg: &Config, no_rt: bool) -> ThreadRt {
    ThreadRt {
        cpu: if no_rt {
            None
        } else {
            cfg.cycle.txrx_cpu.or(cfg.cycle.cpu)
        },
        fifo_priority: None,
    }
}

/// What [`bring_up_retrying`] returns: the (possibly re-created) MainDevice, and the segment with
/// the number of attempts it took, or the last error.
type Retried = (MainDevice<'static>, Result<(Up, u32)>);

/// Bring the segment up, retrying after `[health] recovery_backoff_ms` until it works, a stop is
/// requested, `deadline_ns` passes, or `[health] max_failed_recoveries` attempts failed in a row
/// (0 = never give up). Each failure goes to `on_failure(attempt, error)`.
fn bring_up_retrying(
    mut md: MainDevice<'static>,
    cfg: &Config,
    app: &mut dyn Application,
    stop: &Stop,
    deadline_ns: Option<u64>,
    tries: &mut Attempts,
    mut on_failure: impl FnMut(u32, &Error),
) -> Retried {
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        tries.generation = tries.generation.wrapping_add(1);
        let e = match bring_up(&md, cfg, app, tries.generation) {
            Ok(up) => {
                tries.failed_in_a_row = 0;
                return (md, Ok((up, attempts)));
            }
            Err(e) => e,
        };
        tries.failed_in_a_row += 1;
        on_failure(attempts, &e);
        let max = cfg.health.max_failed_recoveries;
        if max > 0 && tries.failed_in_a_row >= max {
            return (
                md,
                Err(Error::GaveUp {
                    attempts: max,
                    last: Box::new(e),
                }),
            );
        }
        if stop.is_requested() || deadline_ns.is_some_and(|d| crate::clock::now_ns() >= d) {
            return (md, Err(Error::Stopped(Box::new(e))));
        }
        std::thread::sleep(Duration::from_millis(cfg.health.recovery_backoff_ms.into()));
        // Start over from a clean PDU loop for the next attempt.
        // SAFETY: bring_up failed, so no group of this MainDevice exists.
        let pl = unsafe { md.release() };
        md = MainDevice::new(pl, init_timeouts(cfg), cfg.maindevice_config());
    }
}

/// Outputs to zero, then SAFE-OP, then INIT. Errors are reported, not fatal: results still get
/// written.
fn shut_down<DC>(md: &MainDevice<'static>, group: Group<DC>) -> Result<()> {
    for sd in group.iter(md) {
        sd.outputs_raw_mut().fill(0);
    }
    block_on(group.tx_rx(md)).map_err(|e| Error::bus("last cycle with zero outputs", e))?;
    let g = block_on(group.into_safe_op(md)).map_err(|e| Error::bus("OP -> SAFE-OP", e))?;
    let g = block_on(g.into_pre_op(md)).map_err(|e| Error::bus("SAFE-OP -> PRE-OP", e))?;
    block_on(g.into_init(md)).map_err(|e| Error::bus("PRE-OP -> INIT", e))?;
    Ok(())
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
fn open_bus(target: &Target) -> Result<(Bus, PduLoop<'static>)> {
    let (tx, rx, pdu_loop) = take_storage();
    match open_link(target) {
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

/// Open the link to a target.
pub fn open_link(target: &Target) -> Result<Box<dyn Link>> {
    Ok(match target {
        #[cfg(feature = "sim")]
        Target::Sim { spec, faults } => Box::new(crate::bus::SimLink {
            port: ecsim::SimPort::with_faults(spec.clone(), faults.clone()),
        }),
        Target::Iface(name) => {
            crate::netuse::check_free(&safefs::SysRoot::live(), name)?;
            Box::new(SocketLink {
                sock: rtcat_packet::PacketSocket::open(name).map_err(|source| {
                    Error::Interface {
                        iface: name.clone(),
                        source,
                    }
                })?,
            })
        }
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
        let (bus, pdu_loop) = open_bus(target)?;
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
    on_setup_thread("rtcat-master", move || run_here(spec, app, ch))?
}

fn run_here(mut spec: RunSpec, app: &mut dyn Application, ch: &mut Channels) -> Result<Outcome> {
    let cfg = spec.cfg.clone();
    let stop = spec.stop.clone();
    let (mut bus, pdu_loop) = open_bus(&spec.target)?;
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
            let r = bring_up(&md, &cfg, app, run.attempts.generation);
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

/// The bring-ups of a run: the layout generation of the last one, and the failures in a row
/// (`[health] max_failed_recoveries`).
#[derive(Debug, Default)]
struct Attempts {
    generation: u32,
    failed_in_a_row: u32,
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
    let Up {
        mut group,
        mut layout,
        mut expected_wkc,
        mut wkc_shares,
        dc_positions,
    } = up;
    ch.live
        .set_layout(layout.subdevices.len(), layout.pdi_bytes(), expected_wkc);
    ch.live
        .dc
        .set_segment(matches!(group, AnyGroup::Dc(_)), &dc_positions);

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
            expected_wkc,
            bad_cycles_before_recovery: cfg.health.bad_cycles_before_recovery,
            end_ns,
        };
        // Everything the cycle touches, allocated here, outside the cyclic path.
        let mut state = cycle::State::new(&layout, &wkc_shares);
        if matches!(group, AnyGroup::Dc(_)) {
            state = state.with_lock(phase_lock(&cfg));
        }
        let md = run.md.as_ref().expect("present while running");
        // One cyclic phase on its own thread; the bus comes back when it ends.
        let result = group.cyclic_phase(CyclicPhase {
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
                let t = TxRxThread::spawn(bus, init_rt)?;
                let down = group.shut_down(md);
                if let Err(e) = &down {
                    log::warn!("shutdown: {e}");
                }
                push(
                    ch,
                    rec.cycles,
                    EventKind::Shutdown {
                        reached_init: down.is_ok(),
                    },
                );
                bus = t.stop();
                break;
            }
            Exit::Recover { bad_cycles, cause } => {
                push(ch, rec.cycles, EventKind::RecoveryStarted { bad_cycles });
                app.on_recovery(&Recovery {
                    bad_cycles,
                    cause,
                    cycle: rec.cycles,
                });
                ch.live.recovering.store(1, Ordering::Relaxed);
                drop(group);
                let old = run.md.take().expect("present while running");
                // SAFETY: the old group is dropped and never used with the new MainDevice.
                let pdu_loop = unsafe { old.release() };
                let md = MainDevice::new(pdu_loop, init_timeouts(&cfg), cfg.maindevice_config());
                let t = TxRxThread::spawn(bus, init_rt)?;
                let cycles = rec.cycles;
                let mut failures = 0u64;
                let (m, result) =
                    bring_up_retrying(md, &cfg, app, stop, end_ns, &mut run.attempts, |n, e| {
                        counters.publish(&ch.live);
                        failures += 1;
                        push(ch, cycles, EventKind::RecoveryFailed { attempt: n });
                        log::warn!("recovery attempt {n} failed: {e}");
                    });
                run.md = Some(m);
                rec.failed_recoveries += failures;
                bus = t.stop();
                counters.publish(&ch.live);
                ch.live.recovering.store(0, Ordering::Relaxed);
                match result {
                    Ok((up, attempts)) => {
                        group = up.group;
                        layout = up.layout;
                        expected_wkc = up.expected_wkc;
                        wkc_shares = up.wkc_shares;
                        ch.live.set_layout(
                            layout.subdevices.len(),
                            layout.pdi_bytes(),
                            expected_wkc,
                        );
                        // Re-synchronised by the bring-up (ethercrab's DC init and static sync,
                        // SYNC0 configured anew); the lock starts over and reports when it holds.
                        ch.live
                            .dc
                            .set_segment(matches!(group, AnyGroup::Dc(_)), &up.dc_positions);
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
        subdevices: layout.subdevices.len(),
        pdi_bytes: layout.pdi_bytes(),
        expected_wkc,
        rt: applied,
        stop_reason,
        fatal,
        bus: counters.bus_stats(),
        layout: Some(layout),
    })
}

fn push(ch: &mut Channels, cycle: u64, kind: EventKind) {
    let _ = ch.events.push(Event {
        unix_ns: crate::clock::unix_ns(),
        cycle,
        kind,
    });
}

/// Process-wide real-time settings (`[rt]`), applied once the segment is up: /dev/cpu_dma_latency
/// held at 0 for as long as the returned guard lives, and locked memory.
pub fn setup_process(cfg: &Config, no_rt: bool) -> Result<Option<rt::DmaLatencyGuard>> {
    let dma = if !no_rt && cfg.rt.hold_cpu_dma_latency {
        Some(rt::DmaLatencyGuard::hold_zero()?)
    } else {
        None
    };
    if !no_rt && cfg.rt.lock_memory {
        rt::lock_memory()?;
    }
    Ok(dma)
}

/// Real-time setup of the calling (cyclic) thread.
pub fn setup_cycle_thread(cfg: &Config, no_rt: bool) -> Result<RtApplied> {
    rt::name_thread("rtcat-cycle");
    if !no_rt {
        if let Some(cpu) = cfg.cycle.cpu {
            rt::pin_to(cpu)?;
        }
        rt::set_timer_slack(cfg.rt.timer_slack_ns)?;
        rt::set_fifo(cfg.cycle.priority)?;
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
}

impl AnyGroup {
    /// The one place the two kinds of group are told apart: a cyclic phase on this group.
    fn cyclic_phase(&self, phase: CyclicPhase<'_>) -> PhaseResult {
        match self {
            AnyGroup::Plain(g) => run_phase(g, phase),
            AnyGroup::Dc(g) => run_phase(g, phase),
        }
    }

    /// Shut this group down (outputs to zero, SAFE-OP, INIT).
    fn shut_down(self, md: &MainDevice<'static>) -> Result<()> {
        match self {
            AnyGroup::Plain(g) => shut_down(md, g),
            AnyGroup::Dc(g) => shut_down(md, g),
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
    } = phase;
    let mode = cfg.cycle.txrx;
    let txrx_cpu = cfg.cycle.txrx_cpu.or(cfg.cycle.cpu);
    std::thread::scope(|s| {
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
                    },
                );
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
        handle
            .join()
            .map_err(|_| Box::new((Error::Panicked("cyclic"), None)))?
    })
}
