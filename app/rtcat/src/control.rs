//! The control socket of `rtcat run` / `rtcat bench` (`--control SOCK`, `[control] socket`):
//! the [`Provider`] of [`rtcat_control`] over the running master, and the poller.
//!
//! Nothing here runs on the real-time thread. Status comes from the master's live view
//! ([`Live`], relaxed atomics) and the status thread's histograms ([`HistShare`]); the layout
//! from the last bring-up ([`LayoutHook`]); everything that touches the bus goes through the
//! acyclic queue ([`SdoClient`]), which the cyclic thread serves in its budget after each
//! cycle's own work: a control request never delays the cyclic frame. Requests of the socket
//! and of the poller share the queue; the client serialises them, one transfer at a time.
//!
//! **The poller** (one thread, started with the queue): about once a second it reads, for each
//! subdevice, AL status and code (0x0130..0x0135) and the error counters (0x0300..0x0313, the
//! port descriptor 0x0007 once per layout generation), and reads the send mailbox (SM1) of each
//! subdevice with one once. CoE emergencies reach the master only when it reads SM1 (a device
//! cannot send on its own, ETG.1000.4 §5.6), so without an SDO transfer an emergency waits in
//! SM1 for at most one poll round (≈ 1 s plus the round's length: about three queue requests
//! per subdevice, one per cycle). Each emergency is logged, written to events.log with its
//! error code's text (CiA 301 §7.2.7.1 classes, [`rtcat_master::cia402::error_text`]),
//! and counted, in total and per position.

use rtcat_control::protocol::AlTarget;
use rtcat_control::protocol::{
    AxisStatus, Counters, DcStatus, Failure, Histo, Histograms, Request, Status, SubdeviceState,
    TimeDifference, VERSION, to_hex,
};
use rtcat_control::{Outcome, Peer, Provider, Server, ServerConfig, Writers};
use rtcat_master::acyclic::{MAX_SDO_BYTES, SdoClient, SdoFailure};
use rtcat_master::application::{Application, Layer, Setup};
use rtcat_master::config::Config;
use rtcat_master::diag::{self, ErrorCounters, Probe, Registers};
use rtcat_master::layout::Layout;
use rtcat_master::stats::{Event, EventKind, Live};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The SDO queue of a run: capacity and the cyclic thread's budget per cycle (the contract of
/// every user of the queue in run/bench).
pub const QUEUE_CAPACITY: usize = 64;
/// Time per cycle the cyclic thread may spend on queued requests after its own work.
pub const QUEUE_BUDGET: Duration = Duration::from_micros(200);

/// How long one SDO request of the socket may wait for its reply.
const SDO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one register read may wait (the queue serves about one request per cycle).
const REGISTER_TIMEOUT: Duration = Duration::from_secs(2);
/// A poll round starts at most this often.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The status thread's histograms, shared with the server (exact sums from the samples).
#[derive(Default)]
pub struct HistShare(Mutex<(Histograms, Option<Histo>)>);

impl HistShare {
    /// Replace the published histograms: the cycle's, and the |DC phase error| of DC runs.
    pub fn publish(&self, h: Histograms, phase_abs: Option<Histo>) {
        *lock(&self.0) = (h, phase_abs);
    }

    fn get(&self) -> (Histograms, Option<Histo>) {
        lock(&self.0).clone()
    }
}

/// The layout of the last bring-up, stored by [`LayoutHook`].
pub type LayoutShare = Arc<Mutex<Option<Layout>>>;

/// An application wrapper that keeps the layout of every bring-up (at `configure`) for the
/// `pdos` command and the poller, then hands on to the wrapped application.
pub struct LayoutHook {
    inner: Box<dyn Application>,
    layout: LayoutShare,
}

impl LayoutHook {
    /// Wrap `inner`; the layouts go to `layout`.
    pub fn new(inner: Box<dyn Application>, layout: LayoutShare) -> Self {
        LayoutHook { inner, layout }
    }
}

// A layer: cycle, on_recovery and shutdown go to the inner application unchanged.
impl Layer for LayoutHook {
    fn inner(&mut self) -> &mut dyn Application {
        self.inner.as_mut()
    }
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), rtcat_master::AppError> {
        // Off the real-time thread (PRE-OP, the setup thread): the clone may allocate.
        *lock(&self.layout) = Some(setup.layout().clone());
        self.inner.configure(setup)
    }
}

/// What the poller last read.
#[derive(Default)]
struct Polled {
    unix_ns: u64,
    /// Per position: AL status byte and code, counters.
    states: Vec<SubdeviceState>,
    counters: Vec<ErrorCounters>,
    emergencies_total: u64,
    emergencies: Vec<u64>,
}

/// Everything the server and the poller share.
pub struct Shared {
    live: Arc<Live>,
    hist: Arc<HistShare>,
    layout: LayoutShare,
    sdo: Arc<SdoClient>,
    polled: Mutex<Polled>,
    cfg: Config,
    started: Instant,
    axes: Option<rtcat_master::axes::AxesReport>,
    stopped: AtomicBool,
    /// Where the records of state-changing requests go (the status thread writes them to
    /// events.log and the journal); None: nowhere to put them (set by [`Control::start`]).
    records: Mutex<Option<mpsc::SyncSender<Record>>>,
    /// The shared image's handout (`[shm]`; None: no image on this run).
    shm: Option<rtcat_master::shm::Hub>,
}

/// One line for events.log and the journal raised off the cyclic thread: the record of a
/// state-changing control request.
#[derive(Debug, Clone)]
pub struct Record {
    /// Wall-clock time (ns since the epoch).
    pub unix_ns: u64,
    /// Cycle number then.
    pub cycle: u64,
    /// The line after `cycle=N `, starting with its kind (`control`).
    pub text: String,
}

/// The text of the record of `request` by `peer`: who (uid, pid), what (command, target,
/// value), and what became of it. Messages are quoted with `{:?}` (one line whatever they hold).
pub fn record_text(peer: &Peer, request: &Request, outcome: &Outcome<'_>) -> String {
    let what = match request {
        Request::SdoWrite {
            position,
            index,
            sub,
            data,
            timeout_ms,
        } => format!(
            "position={position} index={index:#06x} sub={sub} data={}{}",
            to_hex(data),
            timeout_ms.map_or(String::new(), |t| format!(" timeout_ms={t}"))
        ),
        Request::AlState { position, state } => {
            format!("position={position} state={}", AlTarget::name(*state))
        }
        // The writer's name is the client's text: quoted, one line whatever it holds.
        Request::ShmWriter { name } => format!("name={name:?}"),
        Request::ShmClaim { slot, row } | Request::ShmRelease { slot, row } => {
            format!("slot={slot} row={row}")
        }
        // The client's text: quoted, one line whatever it holds.
        Request::Note { text } => format!("text={text:?}"),
        // The password stays off the record; the name is the client's text, quoted.
        Request::FoeWrite {
            position,
            name,
            boot,
            ..
        } => format!("position={position} name={name:?} boot={boot}"),
        other => other.to_line(),
    };
    let result = match outcome {
        Outcome::Done => "result=ok".to_string(),
        Outcome::Failed(f) => format!(
            "result=failed kind={} error={:?}",
            match f.kind {
                rtcat_control::FailureKind::Usage => "usage",
                rtcat_control::FailureKind::Runtime => "runtime",
            },
            f.message
        ),
        Outcome::Refused(why) => format!("result=refused error={why:?}"),
    };
    format!(
        "control {} uid={} pid={} {what} {result}",
        request.name(),
        peer.uid,
        peer.pid
    )
}

fn failure(e: SdoFailure) -> Failure {
    match e {
        SdoFailure::NoSubdevice(_) | SdoFailure::TooLong { .. } | SdoFailure::Invalid(_) => {
            Failure::usage(e.to_string())
        }
        _ => Failure::runtime(e.to_string()),
    }
}

/// [`diag::Registers`] over the acyclic queue: the same decoding as the bus commands, the
/// bytes read by the running master (FPRD/FPWR in the budget, at most [`MAX_SDO_BYTES`] each).
struct QueueRegisters<'a>(&'a SdoClient);

impl Registers for QueueRegisters<'_> {
    fn read(&self, position: u16, addr: u16, buf: &mut [u8]) -> diag::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(MAX_SDO_BYTES);
            let a = addr.wrapping_add(done as u16);
            let d = self
                .0
                .read_register(position, a, n as u8, REGISTER_TIMEOUT)
                .map_err(|e| diag::Error::Remote {
                    what: format!("position {position}: read {a:#06x}, {n} bytes"),
                    why: e.to_string(),
                })?;
            buf[done..done + n].copy_from_slice(d.as_slice());
            done += n;
        }
        Ok(())
    }

    fn write(&self, position: u16, addr: u16, data: &[u8]) -> diag::Result<()> {
        self.0
            .write_register(position, addr, data, REGISTER_TIMEOUT)
            .map_err(|e| diag::Error::Remote {
                what: format!(
                    "position {position}: write {addr:#06x}, {} bytes",
                    data.len()
                ),
                why: e.to_string(),
            })
    }
}

impl Shared {
    /// The state shared by the server and the poller of one run.
    pub fn new(
        cfg: &Config,
        live: Arc<Live>,
        hist: Arc<HistShare>,
        layout: LayoutShare,
        sdo: Arc<SdoClient>,
        axes: Option<rtcat_master::axes::AxesReport>,
        shm: Option<rtcat_master::shm::Hub>,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            live,
            hist,
            layout,
            sdo,
            polled: Mutex::new(Polled::default()),
            cfg: cfg.clone(),
            started: Instant::now(),
            axes,
            stopped: AtomicBool::new(false),
            records: Mutex::new(None),
            shm,
        })
    }

    /// The run ended (status says `"stopped"`).
    pub fn set_stopped(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    fn subdevices(&self) -> u16 {
        self.live
            .subdevices
            .load(Ordering::Relaxed)
            .min(u64::from(u16::MAX)) as u16
    }

    fn check_position(&self, position: u16) -> Result<(), Failure> {
        let n = self.subdevices();
        if position >= n {
            return Err(Failure::usage(format!(
                "position = {position}: the segment has {n} subdevice{}",
                if n == 1 { "" } else { "s" }
            )));
        }
        Ok(())
    }

    fn cycling(&self) -> Result<(), Failure> {
        if self.live.cycles.load(Ordering::Relaxed) == 0
            || self.live.recovering.load(Ordering::Relaxed) == 1
        {
            return Err(Failure::runtime(
                "the master is not cycling (starting or recovering): bus requests wait for OP",
            ));
        }
        Ok(())
    }

    fn status(&self) -> Status {
        let l = &self.live;
        let r = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let polled = lock(&self.polled);
        let generation = lock(&self.layout).as_ref().map_or(0, |x| x.generation);
        let state = if self.stopped.load(Ordering::Acquire) {
            "stopped"
        } else if r(&l.recovering) == 1 {
            "recovering"
        } else if r(&l.cycles) == 0 {
            "starting"
        } else {
            "op"
        };
        // What the cyclic thread last published. The following-error distribution stays
        // with the cyclic thread (summary.json has its percentiles at the end): the histogram
        // here is empty rather than a count without buckets or sum.
        let axes = self.axes.as_ref().map(|rep| {
            rep.live()
                .into_iter()
                .map(|a| AxisStatus {
                    position: a.position.unwrap_or(0),
                    state: a
                        .state
                        .map_or_else(|| "unknown".to_string(), |s| s.name().to_string()),
                    faults: u64::from(a.faults),
                    following_error: i64::from(a.following_error),
                    drive_following_error: a.drive_following_error.map(i64::from),
                    quick_stops: u64::from(a.quick_stops),
                    held_cycles: a.held_cycles,
                    following_error_abs: Histo::default(),
                    actual: a.actual,
                    manual: a.manual.map(str::to_string),
                    min_position: a.min_position.is_finite().then_some(a.min_position),
                    max_position: a.max_position.is_finite().then_some(a.max_position),
                    max_velocity: a.max_velocity,
                    name: a.name,
                })
                .collect()
        });
        let (histograms, phase) = self.hist.get();
        Status {
            version: VERSION,
            state: state.into(),
            generation,
            period_ns: self.cfg.cycle.period().as_nanos(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            subdevices: r(&l.subdevices) as u32,
            pdi_bytes: r(&l.pdi_bytes) as u32,
            expected_wkc: r(&l.expected_wkc) as u32,
            counters: Counters {
                cycles: r(&l.cycles),
                missed_deadlines: r(&l.missed),
                skipped_periods: r(&l.skipped),
                frames_lost: r(&l.frames_lost),
                wkc_mismatches: r(&l.wkc_mismatches),
                not_op_cycles: r(&l.not_op_cycles),
                rx_rejected: r(&l.rx_rejected),
                send_errors: r(&l.send_errors),
                recoveries: r(&l.recoveries),
                failed_recoveries: r(&l.failed_recoveries),
                emergencies: polled.emergencies_total,
            },
            histograms,
            subdevice_states: polled.states.clone(),
            dc: (r(&l.dc.enabled) == 1).then(|| DcStatus {
                locked: l.dc.lock_state() == rtcat_master::dc::LockState::Locked,
                drift_ppm: l.dc.drift_ppb.load(Ordering::Relaxed) as f64 / 1000.0,
                phase_error_abs_ns: phase.unwrap_or_default(),
                sync_window_violations: r(&l.dc.sync_window_violations),
                system_time_difference_ns: l
                    .dc
                    .subdevices()
                    .iter()
                    .filter_map(|d| {
                        d.last_ns.map(|ns| TimeDifference {
                            position: d.position,
                            ns: i64::from(ns),
                        })
                    })
                    .collect(),
            }),
            axes,
            availability: (r(&l.cycles) > 0).then(|| availability(l)),
            unexpected_devices: (r(&l.cycles) > 0).then(|| {
                let u = l.unexpected();
                rtcat_control::protocol::UnexpectedDevices {
                    count: u.now,
                    first_position: (u.now > 0).then_some(u.first),
                    max: u.max,
                }
            }),
        }
    }
}

impl Shared {
    /// An `axis` request: onto the axes application's command board (the cycle takes it).
    fn axis(
        &self,
        name: &str,
        action: rtcat_control::protocol::AxisAction,
        lease_ms: u64,
    ) -> Result<Value, Failure> {
        use rtcat_control::protocol::AxisAction as A;
        use rtcat_master::axes::{Command, CommandError};
        let Some(report) = &self.axes else {
            return Err(Failure::usage(
                "no axes on this master (no [[axis]] in its configuration)",
            ));
        };
        if action.is_motion() {
            self.cycling()?;
        }
        let lease_ns = lease_ms.saturating_mul(1_000_000);
        let command = match action {
            A::Renew => None,
            A::Enable => Some(Command::Enable),
            A::Disable => Some(Command::Disable),
            A::Reset => Some(Command::ResetFault),
            A::Stop => Some(Command::Stop),
            A::Release => Some(Command::Release),
            A::Jog { velocity } => Some(Command::Jog { velocity }),
            A::MoveTo { position } => Some(Command::MoveTo { position }),
        };
        let r = match command {
            None => report.renew(name, lease_ns),
            Some(c) => report.command(name, c, lease_ns),
        };
        r.map(|()| json!({})).map_err(|e| match e {
            CommandError::NoAxes | CommandError::NotNow { .. } => Failure::runtime(e.to_string()),
            CommandError::NoSuchAxis(_) | CommandError::OutOfLimits { .. } => {
                Failure::usage(e.to_string())
            }
        })
    }
}

/// [`Status::availability`] from the live figures (the segment as last brought up).
fn availability(l: &Live) -> rtcat_control::protocol::AvailabilityStatus {
    use rtcat_control::protocol::{Availability, AvailabilityStatus};
    let of = |position, f: &rtcat_master::availability::Figures| Availability {
        position,
        time_in_op_s: f.op_ns as f64 / 1e9,
        invalid_cycles: f.invalid_cycles,
        outages: f.outages,
        outage_total_ms: f.outage_ns as f64 / 1e6,
        outage_max_ms: f.outage_max_ns as f64 / 1e6,
        out_now: f.out_now,
    };
    let n = l.subdevices.load(Ordering::Relaxed) as usize;
    let (subs, seg) = l.availability.figures(n, rtcat_master::clock::now_ns());
    AvailabilityStatus {
        segment: of(None, &seg),
        subdevices: subs
            .iter()
            .enumerate()
            .map(|(i, f)| of(Some(i as u16), f))
            .collect(),
    }
}

impl Provider for Shared {
    fn handle_peer(
        &self,
        request: &Request,
        peer: &Peer,
    ) -> Result<(Value, Vec<std::os::fd::OwnedFd>), Failure> {
        use rtcat_master::shm::{Ask, Refusal};
        let ask = match request {
            Request::ShmImage => Ask::Image,
            Request::ShmWriter { name } => Ask::Writer(name),
            Request::ShmClaim { slot, row } => Ask::Claim {
                slot: *slot,
                row: *row,
            },
            Request::ShmRelease { slot, row } => Ask::Release {
                slot: *slot,
                row: *row,
            },
            other => return self.handle(other).map(|v| (v, Vec::new())),
        };
        let Some(hub) = &self.shm else {
            return Err(Failure::usage(
                "no shared image on this master ([shm] name / --shm not set)",
            ));
        };
        match hub.answer(&ask, peer.pid.max(0) as u32, peer.uid) {
            Ok((v, fd)) => Ok((v, fd.into_iter().collect())),
            Err(Refusal::Usage(m)) => Err(Failure::usage(m)),
            Err(Refusal::Runtime(m)) => Err(Failure::runtime(m)),
        }
    }

    fn handle(&self, request: &Request) -> Result<Value, Failure> {
        let js = |v: &dyn erased::Ser| v.to_value();
        match request {
            Request::Status => Ok(serde_json::to_value(self.status()).expect("plain data")),
            Request::Pdos => match lock(&self.layout).as_ref() {
                Some(l) => Ok(js(l)),
                None => Err(Failure::runtime(
                    "no layout yet: the segment has not been brought up",
                )),
            },
            Request::Counters => {
                let p = lock(&self.polled);
                if p.unix_ns == 0 {
                    return Err(Failure::runtime(
                        "no reading yet: the poller reads the counters once the master cycles",
                    ));
                }
                Ok(json!({"polled_unix_ns": p.unix_ns, "subdevices": js(&p.counters)}))
            }
            Request::Scan => {
                self.cycling()?;
                let regs = QueueRegisters(&self.sdo);
                let n = self.subdevices();
                let probe = Probe::with_registers(&regs, n, &self.cfg);
                Ok(js(&probe.scan()))
            }
            Request::SdoRead {
                position,
                index,
                sub,
            } => {
                self.check_position(*position)?;
                self.cycling()?;
                let d = self
                    .sdo
                    .read(*position, *index, *sub, SDO_TIMEOUT)
                    .map_err(failure)?;
                Ok(json!({"position": position, "index": index, "sub": sub,
                          "data": to_hex(d.as_slice())}))
            }
            Request::SdoWrite {
                position,
                index,
                sub,
                data,
                timeout_ms,
            } => {
                self.check_position(*position)?;
                self.cycling()?;
                // The device's time to answer on top of the socket's own wait.
                let response = timeout_ms.map(|t| Duration::from_millis(t.into()));
                self.sdo
                    .write_within(
                        *position,
                        (*index, *sub),
                        data,
                        response,
                        SDO_TIMEOUT + response.unwrap_or_default(),
                    )
                    .map_err(failure)?;
                Ok(json!({"position": position, "index": index, "sub": sub,
                          "written": data.len()}))
            }
            // Its record is the point (put there by the server as for every write).
            Request::Note { .. } => Ok(json!({})),
            Request::ShmImage
            | Request::ShmWriter { .. }
            | Request::ShmClaim { .. }
            | Request::ShmRelease { .. } => Err(Failure::runtime(
                "the shared image is handed out with descriptors (handle_peer)",
            )),
            Request::EoeGetIp { position } => {
                self.check_position(*position)?;
                self.cycling()?;
                eoe_ip(&self.sdo, *position, None)
            }
            Request::EoeSetIp { position, settings } => {
                self.check_position(*position)?;
                self.cycling()?;
                eoe_ip(&self.sdo, *position, Some(settings))
            }
            Request::FoeRead { .. } | Request::FoeWrite { .. } => Err(Failure::usage(
                "FoE through the control socket takes the file's descriptor (handle_with_fds)",
            )),
            Request::Axis {
                name,
                action,
                lease_ms,
            } => self.axis(name, *action, *lease_ms),
            Request::OdList { position } => {
                self.check_position(*position)?;
                self.cycling()?;
                od_list(&self.sdo, *position)
            }
            Request::OdObject { position, index } => {
                self.check_position(*position)?;
                self.cycling()?;
                od_object(&self.sdo, *position, *index)
            }
            Request::AlState { position, state } => {
                self.check_position(*position)?;
                self.cycling()?;
                // AL control 0x0120 (ETG.1000.4 §6.4.1, ESC datasheet section II): the state in
                // bits 0..3, bit 4 acknowledges an error indication.
                self.sdo
                    .write_register(*position, 0x0120, &[state.code() | 0x10, 0], SDO_TIMEOUT)
                    .map_err(failure)?;
                Ok(json!({"position": position, "requested": state.name()}))
            }
        }
    }

    fn handle_with_fds(
        &self,
        request: &Request,
        _peer: &Peer,
        mut fds: Vec<std::os::fd::OwnedFd>,
    ) -> Result<(Value, Vec<std::os::fd::OwnedFd>), Failure> {
        let (position, name, password, write, boot) = match request {
            Request::FoeRead {
                position,
                name,
                password,
            } => (*position, name, *password, false, false),
            Request::FoeWrite {
                position,
                name,
                password,
                boot,
            } => (*position, name, *password, true, *boot),
            other => {
                return Err(Failure::usage(format!(
                    "{}: takes no descriptor",
                    other.name()
                )));
            }
        };
        let file = std::fs::File::from(fds.swap_remove(0));
        drop(fds);
        self.check_position(position)?;
        self.cycling()?;
        let v = if boot {
            firmware_update(&self.sdo, &self.cfg, position, name, password, file)?
        } else {
            foe_transfer(&self.sdo, position, name, password, write, file)?
        };
        Ok((v, Vec::new()))
    }

    fn record(&self, peer: &Peer, request: &Request, outcome: &Outcome<'_>) {
        // A hold-to-run renewal that went through changes nothing but how long the motion
        // holds (10 a second while a button is held): the command it renews is on the record.
        if let (
            Request::Axis {
                action: rtcat_control::protocol::AxisAction::Renew,
                ..
            },
            Outcome::Done,
        ) = (request, outcome)
        {
            return;
        }
        let r = Record {
            unix_ns: rtcat_master::clock::unix_ns(),
            cycle: self.live.cycles.load(Ordering::Relaxed),
            text: record_text(peer, request, outcome),
        };
        let tx = lock(&self.records).clone();
        match tx {
            // Blocks while the status thread catches up: a client that floods state changes
            // is slowed to what can be put on the record, rather than leaving none.
            Some(tx) if tx.send(r.clone()).is_ok() => {}
            // No status thread (any more): the journal still gets it.
            _ => crate::say!("rtcat: {}", r.text),
        }
    }
}

/// How long one SDO information exchange may take through the queue (all its fragments).
const INFO_TIMEOUT: Duration = Duration::from_secs(2);

fn info_failure(position: u16) -> impl Fn(rtcat_master::coe::Error) -> Failure {
    move |e| Failure::runtime(format!("position {position}: {e}"))
}

/// The object dictionary of the device at `position` (SDO information through the queue):
/// every index, the first [`rtcat_control::protocol::MAX_OD_DESCRIBED`] described.
fn od_list(sdo: &SdoClient, position: u16) -> Result<Value, Failure> {
    use rtcat_master::coe::{ListType, info};
    let mut mbx = sdo
        .queue_mailbox(position, INFO_TIMEOUT)
        .map_err(|e| Failure::runtime(format!("position {position}: {e}")))?;
    let list =
        info::od_list(&mut mbx, ListType::All, INFO_TIMEOUT).map_err(info_failure(position))?;
    let mut described = 0;
    let objects: Vec<Value> = list
        .iter()
        .map(|&index| {
            if described >= rtcat_control::protocol::MAX_OD_DESCRIBED {
                return json!({"index": index});
            }
            described += 1;
            match info::object_description(&mut mbx, index, INFO_TIMEOUT) {
                Ok(d) => json!({"index": index, "name": d.name, "object_code": d.object_code,
                                "max_sub": d.max_sub, "data_type": d.data_type}),
                Err(e) => json!({"index": index, "error": e.to_string()}),
            }
        })
        .collect();
    Ok(json!({"position": position, "objects": objects, "described": described}))
}

/// One object's description and its entries'.
fn od_object(sdo: &SdoClient, position: u16, index: u16) -> Result<Value, Failure> {
    use rtcat_master::coe::{SdoType, info};
    let mut mbx = sdo
        .queue_mailbox(position, INFO_TIMEOUT)
        .map_err(|e| Failure::runtime(format!("position {position}: {e}")))?;
    let d =
        info::object_description(&mut mbx, index, INFO_TIMEOUT).map_err(info_failure(position))?;
    // A VAR has its value at subindex 0; ARRAY and RECORD have entries 0..=max_sub.
    let subs = if d.object_code == 7 {
        0..=0
    } else {
        0..=d.max_sub
    };
    let entries: Vec<Value> = subs
        .map(
            |sub| match info::entry_description(&mut mbx, index, sub, INFO_TIMEOUT) {
                Ok(e) => json!({"sub": sub, "name": e.name, "data_type": e.data_type,
                            "type": SdoType::from_coe(e.data_type).map(|t| t.to_string()),
                            "bits": e.bits, "access": e.access_text()}),
                Err(e) => json!({"sub": sub, "error": e.to_string()}),
            },
        )
        .collect();
    Ok(json!({"position": position, "index": index, "name": d.name,
              "object_code": d.object_code, "max_sub": d.max_sub, "data_type": d.data_type,
              "entries": entries}))
}

/// Largest file a client may have written to a device through the control socket.
const MAX_FOE_WRITE: u64 = 256 << 20;
/// How long each FoE request may wait for the device through the queue.
const FOE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long each EoE request may wait for the device through the queue.
const EOE_TIMEOUT: Duration = Duration::from_secs(5);

/// EoE get (`set` None) or set IP parameter of a running master for a control client, through
/// the cycle's mailbox queue; the settings are the text of `rtcat eoe set-ip`'s options, parsed
/// as it parses them.
fn eoe_ip(
    sdo: &SdoClient,
    position: u16,
    set: Option<&rtcat_control::protocol::EoeSettings>,
) -> Result<Value, Failure> {
    use crate::outcome::Failure as Cli;
    use rtcat_master::eoe;
    let params = set
        .map(|s| {
            crate::cmd::eoe::IpArgs {
                ip: s.ip.clone(),
                gateway: s.gateway.clone(),
                dns: s.dns.clone(),
                dns_name: s.dns_name.clone(),
                mac: s.mac.clone(),
            }
            .params()
        })
        .transpose()
        .map_err(|e| match e {
            Cli::Usage(m) => Failure::usage(m),
            other => Failure::runtime(format!("{other:?}")),
        })?;
    let mut mbx = sdo
        .queue_mailbox(position, EOE_TIMEOUT)
        .map_err(|e| Failure::runtime(format!("position {position}: {e}")))?;
    let mut client = eoe::Client::new(&mut mbx);
    match params {
        Some(p) => {
            client
                .set_ip(&p)
                .map_err(|e| Failure::runtime(e.to_string()))?;
            Ok(json!({"position": position, "set": p.to_string()}))
        }
        None => {
            let p = client
                .get_ip()
                .map_err(|e| Failure::runtime(e.to_string()))?;
            Ok(crate::cmd::eoe::ip_json(u32::from(position), &p))
        }
    }
}

/// The content of the client's descriptor `file` for a write: a regular file of at most
/// [`MAX_FOE_WRITE`] bytes.
fn file_to_write(mut file: std::fs::File) -> Result<Vec<u8>, Failure> {
    use std::io::Read;
    let meta = file
        .metadata()
        .map_err(|e| Failure::usage(format!("the file passed: {e}")))?;
    if !meta.is_file() {
        return Err(Failure::usage("the file passed is not a regular file"));
    }
    if meta.len() > MAX_FOE_WRITE {
        return Err(Failure::usage(format!(
            "the file passed has {} bytes; at most {MAX_FOE_WRITE} go through the control socket",
            meta.len()
        )));
    }
    let mut data = Vec::new();
    (&mut file)
        .take(MAX_FOE_WRITE + 1)
        .read_to_end(&mut data)
        .map_err(|e| Failure::usage(format!("the file passed cannot be read: {e}")))?;
    Ok(data)
}

/// A firmware update of one device of the running segment (`foe_write` with `"boot": true`,
/// [`rtcat_master::foe::update`]): parked, written in BOOT, handed back to its recovery.
fn firmware_update(
    sdo: &SdoClient,
    cfg: &Config,
    position: u16,
    name: &str,
    password: u32,
    file: std::fs::File,
) -> Result<Value, Failure> {
    use rtcat_master::foe::update;
    // One update at a time: two on one device would interleave their BOOT and FoE sessions
    // (parking a parked device is allowed, for starting over), and the queue serves one
    // transfer at a time anyway.
    static UNDER_WAY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            UNDER_WAY.store(false, Ordering::Release);
        }
    }
    if UNDER_WAY.swap(true, Ordering::AcqRel) {
        return Err(Failure::runtime(
            "another firmware update is under way on this master: one at a time",
        ));
    }
    let _release = Release;
    let data = file_to_write(file)?;
    let job = update::Job {
        position,
        name,
        password,
        data: &data,
    };
    let u = update::update(sdo, cfg, job, &update::Options::default(), &mut |_| {}).map_err(
        |e| match e {
            e @ update::UpdateError::Park { .. } => Failure::runtime(e.to_string()),
            e if e.is_request() => Failure::usage(e.to_string()),
            e => Failure::runtime(e.to_string()),
        },
    )?;
    let id = |(v, p, r): (u32, u32, u32)| format!("{v:#010x}:{p:#010x}:{r:#010x}");
    Ok(json!({"position": position, "name": name, "bytes": u.bytes,
              "seconds": u.transfer.as_secs_f64(), "boot": true,
              "back_in_op": u.back_in_op, "before": id(u.before),
              "after": u.after.map(id)}))
}

/// An FoE transfer of a running master for a control client, through the cycle's mailbox
/// queue: `file` is the client's descriptor (read from for a write, written to for a read), so
/// the master opens no path a client names and reads no more than the file holds.
fn foe_transfer(
    sdo: &SdoClient,
    position: u16,
    name: &str,
    password: u32,
    write: bool,
    mut file: std::fs::File,
) -> Result<Value, Failure> {
    use rtcat_master::foe;
    use std::io::Write;
    let mut mbx = sdo
        .queue_mailbox(position, FOE_TIMEOUT)
        .map_err(|e| Failure::runtime(format!("position {position}: {e}")))?;
    let mut client = foe::Client::new(&mut mbx);
    let refuse = |e: foe::Error| match e {
        foe::Error::Request(m) => Failure::usage(m),
        e => Failure::runtime(e.to_string()),
    };
    let t = std::time::Instant::now();
    let bytes = if write {
        let data = file_to_write(file)?;
        client
            .write(name, password, &data, &mut |_| {})
            .map_err(refuse)?;
        data.len()
    } else {
        let data = client.read(name, password, &mut |_| {}).map_err(refuse)?;
        file.write_all(&data)
            .map_err(|e| Failure::runtime(format!("the file passed cannot be written: {e}")))?;
        data.len()
    };
    Ok(json!({"position": position, "name": name, "bytes": bytes,
              "seconds": t.elapsed().as_secs_f64()}))
}

/// `serde::Serialize` behind `&dyn` for the one-liner above.
mod erased {
    pub trait Ser {
        fn to_value(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize + ?Sized> Ser for T {
        fn to_value(&self) -> serde_json::Value {
            serde_json::to_value(self).expect("plain data serializes")
        }
    }
}

/// The poller's thread; stopped (and joined) when dropped.
pub struct Poller {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the poller remembers of a layout generation.
#[derive(Default)]
struct Known {
    generation: u32,
    /// Port descriptor (0x0007) per position.
    ports: Vec<Option<u8>>,
    /// Whether the subdevice has a mailbox the queue can poll (None: not tried yet).
    mailbox: Vec<Option<bool>>,
}

impl Poller {
    /// Start polling through `shared`'s queue; events (emergencies) go to `events`.
    pub fn spawn(shared: Arc<Shared>, events: mpsc::SyncSender<Event>) -> std::io::Result<Poller> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rtcat-poller".into())
            .spawn(move || {
                let mut known = Known::default();
                let mut last: Option<Instant> = None;
                while !s.load(Ordering::Acquire) {
                    if last.is_none_or(|t| t.elapsed() >= POLL_EVERY) {
                        last = Some(Instant::now());
                        if shared.cycling().is_ok() {
                            poll_round(&shared, &mut known, &s);
                        }
                        drain_emergencies(&shared, &events);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                drain_emergencies(&shared, &events);
            })?;
        Ok(Poller {
            stop,
            thread: Some(thread),
        })
    }
}

fn poll_round(shared: &Shared, known: &mut Known, stop: &AtomicBool) {
    let n = usize::from(shared.subdevices());
    let generation = lock(&shared.layout).as_ref().map_or(0, |l| l.generation);
    if known.generation != generation || known.ports.len() != n {
        *known = Known {
            generation,
            ports: vec![None; n],
            mailbox: vec![None; n],
        };
    }
    let q = &shared.sdo;
    let regs = QueueRegisters(q);
    let mut states = Vec::with_capacity(n);
    let mut counters = Vec::with_capacity(n);
    for p in 0..n {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let pos = p as u16;
        let mut al = [0u8; 6];
        let mut st = SubdeviceState {
            position: pos,
            ..SubdeviceState::default()
        };
        if regs.read(pos, 0x0130, &mut al).is_ok() {
            st.al_state = al[0];
            st.al_status_code = u16::from_le_bytes([al[4], al[5]]);
        }
        states.push(st);
        if known.ports[p].is_none() {
            let mut d = [0u8; 1];
            if regs.read(pos, diag::scan::PORT_DESCRIPTOR, &mut d).is_ok() {
                known.ports[p] = Some(d[0]);
            }
        }
        if let Some(desc) = known.ports[p] {
            let mut r = [0u8; diag::counters::ERROR_COUNTERS_LEN];
            if regs
                .read(pos, diag::counters::ERROR_COUNTERS, &mut r)
                .is_ok()
            {
                let implemented = std::array::from_fn(|i| (desc >> (2 * i)) & 0x03 != 0);
                counters.push(ErrorCounters::from_registers(pos, &r, implemented));
            }
        }
        if known.mailbox[p] != Some(false) {
            match q.poll_mailbox(pos, REGISTER_TIMEOUT) {
                Ok(_) => known.mailbox[p] = Some(true),
                // No mailbox on SM0/SM1: nothing to poll on this one until the next layout.
                Err(SdoFailure::Mailbox(_)) if known.mailbox[p].is_none() => {
                    known.mailbox[p] = Some(false)
                }
                Err(_) => {}
            }
        }
    }
    let mut polled = lock(&shared.polled);
    polled.unix_ns = rtcat_master::clock::unix_ns();
    let len = n.max(polled.emergencies.len());
    polled.emergencies.resize(len, 0);
    for s in states.iter_mut() {
        s.emergencies = polled.emergencies[usize::from(s.position)];
    }
    polled.states = states;
    polled.counters = counters;
}

fn drain_emergencies(shared: &Shared, events: &mpsc::SyncSender<Event>) {
    while let Some(e) = shared.sdo.take_emergency() {
        let text = rtcat_master::cia402::error_text(e.code);
        log::warn!("{e} ({text})");
        let _ = events.try_send(Event {
            unix_ns: rtcat_master::clock::unix_ns(),
            cycle: shared.live.cycles.load(Ordering::Relaxed),
            kind: EventKind::Emergency {
                position: e.position,
                code: e.code,
                register: e.register,
                data: e.data,
            },
        });
        let mut p = lock(&shared.polled);
        p.emergencies_total += 1;
        let i = usize::from(e.position);
        if p.emergencies.len() <= i {
            p.emergencies.resize(i + 1, 0);
        }
        p.emergencies[i] += 1;
        let c = p.emergencies[i];
        if let Some(s) = p.states.iter_mut().find(|s| s.position == e.position) {
            s.emergencies = c;
        }
    }
}

/// The control socket of a run: the server and the poller; stopped when dropped.
pub struct Control {
    pub shared: Arc<Shared>,
    // Dropped in this order: the server first (no new requests), then the poller.
    server: Option<Server>,
    _poller: Poller,
}

impl Control {
    /// Start the poller, and the server at `socket` when given, for the clients `ipc` names;
    /// the records of state-changing requests go to `records`.
    pub fn start(
        shared: Arc<Shared>,
        socket: Option<&std::path::Path>,
        ipc: &crate::config::IpcConfig,
        events: mpsc::SyncSender<Event>,
        records: mpsc::SyncSender<Record>,
    ) -> anyhow::Result<Control> {
        let gid = ipc.gid()?.map(|g| g.as_raw());
        let writers = match (ipc.writes, ipc.write_gid()?) {
            (false, _) => Writers::Nobody,
            (true, Some(g)) => Writers::Group(g.as_raw()),
            (true, None) => Writers::Owner,
        };
        *lock(&shared.records) = Some(records);
        let server = match socket {
            Some(p) => {
                let mut sc = ServerConfig::new(p, gid);
                sc.writers = writers;
                Some(Server::start(sc, shared.clone())?)
            }
            None => None,
        };
        let poller = Poller::spawn(shared.clone(), events)?;
        Ok(Control {
            shared,
            server,
            _poller: poller,
        })
    }

    /// Stop serving (status `"stopped"` for whoever is still connected until then).
    pub fn stop(mut self) {
        self.shared.set_stopped();
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
}
