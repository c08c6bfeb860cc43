//! `rtcat bench` and `rtcat run`: set up, run the master (or the timer-only loop), and always
//! write the results — on normal end, on SIGINT/SIGTERM, and after an unrecoverable fault.

use crate::config::Config;
use crate::output::{self, RunFacts};
use crate::sdnotify::Notifier;
use crate::status::{CheckpointFn, StatusConfig, StatusThread};
use anyhow::{Context, Result, anyhow};
use rtcat_master::clock::{now_ns, unix_ns};
use rtcat_master::cycle::{self, Exit};
use rtcat_master::master::{self, Channels, RtApplied, RunSpec, Target};
use rtcat_master::stats::{Live, Recorder};
use rtcat_master::{Application, ZeroOutputs};
use rtcat_results as summary;
use rtcat_results::Mode;
use safefs::Dir;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Where the summary JSON goes besides the output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonDest {
    Stdout,
    File(PathBuf),
}

/// One complete run, as the commands (and the tests) describe it.
pub struct Job {
    pub cfg: Config,
    /// None: timer-only.
    pub target: Option<Target>,
    pub duration: Option<Duration>,
    pub no_rt: bool,
    pub stage: Option<String>,
    /// The prepared output directory ([`output::prepare_dir`]).
    pub dir: Arc<Dir>,
    pub json: Option<JsonDest>,
    pub samples: bool,
    pub app: Box<dyn Application>,
    /// systemd notifications (READY, WATCHDOG from the status thread); `run` keeps a clone for
    /// STOPPING. One socket for all of them.
    pub notifier: Option<Arc<Notifier>>,
    pub echo_events: bool,
    /// Print the human table to stderr at the end.
    pub print_table: bool,
    /// Keep retrying the first bring-up (service mode).
    pub retry_start: bool,
    /// The live view of the cyclic thread (shared with the status thread and checkpoints).
    pub live: Arc<Live>,
    /// Where the axes application leaves its per-axis summaries (`app` is an [`AxesApp`]).
    pub axes: Option<rtcat_master::axes::AxesReport>,
    /// Where the floor benchmark leaves its results (`app` is a [`rtcat_master::floor::FloorPing`]).
    pub floor: Option<Arc<rtcat_master::floor::FloorReport>>,
    /// The shared image's handout (`[shm]`): the control socket serves it.
    pub shm: Option<rtcat_master::shm::Hub>,
}

/// What a finished job reports.
pub struct JobResult {
    pub summary: rtcat_results::Summary,
    pub rec: Recorder,
    pub fatal: Option<String>,
    pub stop_reason: String,
    pub cycle_minor_faults: u64,
}

fn timer_only(job: &Job, live: &Live) -> Result<(Recorder, RtApplied)> {
    let cfg = &job.cfg;
    let _dma = master::setup_process(&cfg.master, job.no_rt)?;
    let period = cfg.master.cycle.period().as_nanos();
    let end = job.duration.map(|d| now_ns() + d.as_nanos() as u64);
    let no_rt = job.no_rt;
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("rtcat-cycle".into())
            .spawn_scoped(s, move || -> Result<(Recorder, RtApplied)> {
                let mut applied = master::setup_cycle_thread(&cfg.master, no_rt)?;
                let mut rec = Recorder::new();
                let stop = crate::signals::handle();
                let f0 = rtcat_master::rt::thread_minor_faults();
                let _ = cycle::run_timer_only(&mut rec, live, period, end, &stop) == Exit::Stopped;
                applied.cycle_minor_faults = rtcat_master::rt::thread_minor_faults() - f0;
                Ok((rec, applied))
            })?
            .join()
            .map_err(|_| anyhow!("cyclic thread panicked"))?
    })
}

/// Why the run ended, for summary.json.
fn stop_info(job: &Job, fatal: Option<&str>) -> summary::Stop {
    let signal = crate::signals::signal().map(crate::signals::name);
    summary::Stop {
        reason: if fatal.is_some() {
            summary::StopReason::Fatal
        } else if signal.is_some() {
            summary::StopReason::Signal
        } else {
            summary::StopReason::Duration
        },
        signal,
        requested_duration_s: job.duration.map(|d| d.as_secs_f64()),
        detail: fatal.map(str::to_string),
    }
}

/// What is known of a run when it starts, from which every summary of it is made: each
/// checkpoint's and the final one ([`FactsBase::facts`]).
#[derive(Clone)]
struct FactsBase {
    mode: Mode,
    interface: Option<String>,
    stage: Option<String>,
    started_at_unix_ns: u64,
    /// `now_ns()` at the start.
    t0: u64,
    period: rtcat_master::Period,
    requested_duration_s: Option<f64>,
    dc: rtcat_master::dc::DcConfig,
    live: Arc<Live>,
}

impl FactsBase {
    fn new(job: &Job, mode: Mode, interface: Option<String>) -> FactsBase {
        FactsBase {
            mode,
            interface,
            stage: job.stage.clone(),
            started_at_unix_ns: unix_ns(),
            t0: now_ns(),
            period: job.cfg.master.cycle.period(),
            requested_duration_s: job.duration.map(|d| d.as_secs_f64()),
            dc: job.cfg.master.dc.clone(),
            live: job.live.clone(),
        }
    }

    /// The facts of the run so far as the live view shows them, still running. The final
    /// summary replaces what the run's end knows better (its outcome, its stop).
    fn facts(
        &self,
        rec: &Recorder,
        system: crate::sysinfo::SystemSnapshot,
        rt: RtApplied,
        logging: &summary::LoggingHealth,
    ) -> RunFacts {
        let live = &self.live;
        let on_bus = self.mode != Mode::TimerOnly;
        RunFacts {
            mode: self.mode,
            interface: self.interface.clone(),
            stage: self.stage.clone(),
            started_at_unix_ns: self.started_at_unix_ns,
            duration_s: (now_ns() - self.t0) as f64 / 1e9,
            period_ns: self.period.as_nanos(),
            expected_wkc: on_bus.then(|| live.expected_wkc.load(Ordering::Relaxed) as u32),
            subdevices: live.subdevices.load(Ordering::Relaxed) as u32,
            pdi_bytes: live.pdi_bytes.load(Ordering::Relaxed) as u32,
            system,
            rt,
            stop: Some(summary::Stop {
                reason: summary::StopReason::Running,
                signal: None,
                requested_duration_s: self.requested_duration_s,
                detail: None,
            }),
            axes: None,
            dc: output::dc_summary(rec, live, &self.dc, self.period),
            bus: on_bus.then(|| summary::BusStats {
                rx_rejected: live.rx_rejected.load(Ordering::Relaxed),
                send_errors: live.send_errors.load(Ordering::Relaxed),
                ..summary::BusStats::default()
            }),
            logging: (logging.write_errors + logging.events_dropped + logging.samples_dropped > 0)
                .then(|| logging.clone()),
        }
    }
}

/// The summary of a checkpoint: the run so far, as the status thread saw it.
fn checkpoint_fn(job: &Job, base: FactsBase) -> CheckpointFn {
    let cfg = &job.cfg;
    let no_rt = job.no_rt;
    let cpu = if no_rt { None } else { cfg.master.cycle.cpu };
    let rt = RtApplied {
        no_rt,
        cpu,
        txrx_cpu: if no_rt {
            None
        } else {
            cfg.master.cycle.txrx_cpu.or(cfg.master.cycle.cpu)
        },
        policy: if no_rt { "SCHED_OTHER" } else { "SCHED_FIFO" }.into(),
        priority: if no_rt {
            0
        } else {
            u32::from(cfg.master.cycle.priority)
        },
        timer_slack_ns: cfg.master.rt.timer_slack_ns,
        cycle_minor_faults: 0,
    };
    let system = crate::sysinfo::snapshot(&rttune::SysRoot::live(), cpu);
    let dir = job.dir.clone();
    Box::new(move |rec: &Recorder, logging: &summary::LoggingHealth| {
        let facts = base.facts(rec, system.clone(), rt.clone(), logging);
        output::write_results(&dir, &output::build_summary(rec, &facts), rec)
    })
}

/// Run a job to its end and write every result file.
pub fn execute(mut job: Job) -> Result<JobResult> {
    crate::signals::install(crate::signals::Second::Kills)?;
    // Before anything writes into the directory: the final results' room.
    let reserve = output::Reserve::take(&job.dir, output::FINAL_RESERVE);
    let (ev_tx, ev_rx) = rtrb::RingBuffer::new(4096);
    // Always on: the status thread builds the checkpoints' histograms from it (and writes
    // samples.csv when asked). 64 Ki samples = 65 s at 1 ms between two drains of 50 ms.
    let (samples_tx, samples_rx) = rtrb::RingBuffer::new(1 << 16);
    let (mode, interface) = match &job.target {
        None => (Mode::TimerOnly, None),
        Some(Target::Sim { .. }) => (Mode::Sim, None),
        Some(Target::Iface(i)) => (Mode::Iface, Some(i.clone())),
        // A library user's link (the binary never makes one): reported like an interface.
        Some(Target::Link(f)) => (Mode::Iface, Some(f.name().to_string())),
    };
    let base = FactsBase::new(&job, mode, interface);
    let checkpoint = match job.cfg.output.checkpoint_s {
        0 => None,
        s => Some((
            Duration::from_secs(s.into()),
            checkpoint_fn(&job, base.clone()),
        )),
    };
    let live = job.live.clone();
    // Every run with a target: the acyclic queue (served by the cyclic thread in its budget),
    // the poller on it, and the control socket when asked for.
    let queue = job.target.as_ref().map(|_| {
        let (client, service) = rtcat_master::acyclic::sdo_queue(
            crate::control::QUEUE_CAPACITY,
            crate::control::QUEUE_BUDGET,
        );
        (Arc::new(client), service)
    });
    let hist = Arc::new(crate::control::HistShare::default());
    let layout: crate::control::LayoutShare = Arc::default();
    let (more_tx, more_rx) = std::sync::mpsc::sync_channel(256);
    let (records_tx, records_rx) = std::sync::mpsc::sync_channel(256);
    // Only while DC is on: the sampler's sender must not keep the channel open otherwise.
    let dc_events = job.cfg.master.dc.enabled.then(|| {
        let tx = more_tx.clone();
        move |e| {
            // A full channel drops the event (the sampler's counters still count it).
            let _ = tx.try_send(e);
        }
    });
    let control = match &queue {
        Some((client, _)) => Some(crate::control::Control::start(
            crate::control::Shared::new(
                &job.cfg.master,
                live.clone(),
                hist.clone(),
                layout.clone(),
                client.clone(),
                job.axes.clone(),
                job.shm.clone(),
            ),
            job.cfg.control.socket.as_deref(),
            &job.cfg.ipc,
            more_tx,
            records_tx,
        )?),
        None => None,
    };
    // The DC sampler (0x092C through the same queue) while DC is on; its events reach
    // events.log through the same channel as the poller's.
    let sampler = match (&queue, dc_events) {
        (Some((client, _)), Some(dc_events)) => Some(
            rtcat_master::dc_sampler::Sampler::spawn(
                client.clone(),
                live.clone(),
                job.cfg.master.dc.sync_window_ns,
                dc_events,
            )
            .context("start the DC sampler thread")?,
        ),
        _ => None,
    };
    // The mailbox gateway (`[gateway]`, ETG.8200), through the same queue: a configuration
    // tool on an allowed network reaches the devices' mailboxes during OP.
    let gateway = match (&queue, job.cfg.gateway.checked()) {
        (Some((client, _)), Ok(Some((listen, allow)))) => {
            let g = crate::gateway::Running::start(listen, allow, client.clone())
                .with_context(|| format!("[gateway] listen = {listen}"))?;
            log::info!("mailbox gateway (ETG.8200) listening on {}", g.local);
            crate::say!("rtcat: mailbox gateway listening on {}", g.local);
            Some(g)
        }
        (_, Err(e)) => return Err(anyhow::anyhow!("{e}")),
        _ => None,
    };
    // `[[eoe]]`: each TAP bridged to its device's network through the same queue, rate-limited.
    let eoe = match (&queue, crate::eoe_bridge::checked(&job.cfg.eoe)) {
        (_, Err(e)) => return Err(anyhow::anyhow!("{e}")),
        (Some((client, _)), Ok(links)) if !links.is_empty() => {
            let names: Vec<String> = links
                .iter()
                .map(|l| format!("position {} <-> {}", l.position, l.tap))
                .collect();
            let r = crate::eoe_bridge::Running::start(links, client.clone(), live.clone())?;
            crate::say!("rtcat: EoE bridged: {}", names.join(", "));
            Some(r)
        }
        (None, Ok(links)) if !links.is_empty() => {
            log::warn!("[[eoe]] has no effect without a bus (timer-only run)");
            None
        }
        _ => None,
    };
    let sdo = queue.map(|(_, service)| service);
    let status = StatusThread::spawn(
        StatusConfig {
            dir: job.dir.clone(),
            interval: match job.cfg.output.status_interval_ms {
                0 => None,
                ms => Some(Duration::from_millis(ms.into())),
            },
            notifier: job.notifier.clone(),
            echo_events: job.echo_events,
            samples_csv: job.samples,
            checkpoint,
            histograms: Some(hist),
            more_events: Some(more_rx),
            records: Some(records_rx),
        },
        live.clone(),
        ev_rx,
        samples_rx,
    )
    .with_context(|| format!("results directory {}", job.dir.path().display()))?;

    let mut ch = Channels {
        live: live.clone(),
        events: ev_tx,
        samples: Some(samples_tx),
    };
    let notify = job.notifier.clone();
    let run = match job.target.clone() {
        None => timer_only(&job, &live).map(|(rec, rt)| master::Outcome {
            rec,
            subdevices: 0,
            pdi_bytes: 0,
            expected_wkc: 0,
            rt,
            stop_reason: if crate::signals::stop_requested() {
                "signal".into()
            } else {
                "duration reached".into()
            },
            fatal: None,
            bus: Default::default(),
            layout: None,
        }),
        Some(target) => {
            let spec = RunSpec {
                cfg: job.cfg.master.clone(),
                target,
                duration: job.duration,
                no_rt: job.no_rt,
                on_ready: Some(Box::new(move || {
                    if let Some(n) = &notify {
                        n.notify("READY=1");
                    }
                })),
                retry_start: job.retry_start,
                stop: crate::signals::handle(),
                sdo,
            };
            let inner = std::mem::replace(&mut job.app, Box::new(ZeroOutputs));
            let mut app = crate::control::LayoutHook::new(inner, layout);
            let r = master::run(spec, &mut app, &mut ch).map_err(anyhow::Error::from);
            if let Some(s) = sampler {
                s.finish();
            }
            r
        }
    };
    if let Some(g) = gateway {
        let c = g.stop();
        log::info!(
            "mailbox gateway: {} forwarded, {} answered, {} unanswered, {} error replies, {} peers refused, {} malformed",
            c.forwarded,
            c.answered,
            c.unanswered,
            c.error_replies,
            c.refused_peer,
            c.dropped_malformed
        );
    }
    if let Some(e) = eoe {
        for (l, c) in e.stop() {
            log::info!(
                "eoe: position {} <-> {}: {} frames to the device, {} to this machine, {} dropped \
                 from the device, {} too long, IP parameters set {} times, {} failures",
                l.position,
                l.tap,
                c.to_device,
                c.to_host,
                c.dropped_from_device,
                c.too_long,
                c.ip_set,
                c.failures
            );
        }
    }
    // The poller's last emergencies still reach the status thread.
    if let Some(c) = control {
        c.stop();
    }
    drop(ch);
    let logging = status.finish();
    let outcome = run?;

    let cpu = outcome.rt.cpu;
    let mut facts = base.facts(
        &outcome.rec,
        crate::sysinfo::snapshot(&rttune::SysRoot::live(), cpu),
        outcome.rt.clone(),
        &logging,
    );
    facts.expected_wkc = (mode != Mode::TimerOnly).then_some(u32::from(outcome.expected_wkc));
    facts.subdevices = outcome.subdevices as u32;
    facts.pdi_bytes = outcome.pdi_bytes as u32;
    facts.stop = Some(stop_info(&job, outcome.fatal.as_deref()));
    facts.bus = (mode != Mode::TimerOnly).then_some(outcome.bus.clone());
    facts.axes = job
        .axes
        .as_ref()
        .map(rtcat_master::axes::AxesReport::summaries);
    let mut summary = output::build_summary(&outcome.rec, &facts);
    if let Some(f) = &job.floor {
        summary.floor = Some(f.summary(summary.rtt_ns.as_ref()));
    }
    reserve.release();
    output::write_results(&job.dir, &summary, &outcome.rec)
        .with_context(|| format!("results in {}", job.dir.path().display()))?;
    if let Some(f) = &job.floor {
        f.write_hdr(&job.dir)
            .with_context(|| format!("results in {}", job.dir.path().display()))?;
    }
    let json = serde_json::to_string_pretty(&summary)?;
    match &job.json {
        // A closed stdout loses nothing: everything is in the output directory.
        Some(JsonDest::Stdout) => {
            let _ = crate::console::stdout(&format!("{json}\n"));
        }
        Some(JsonDest::File(p)) => output::write_user_file(p, &format!("{json}\n"))
            .with_context(|| format!("--json {}", p.display()))?,
        None => {}
    }
    if job.print_table {
        crate::console::text(&output::human_table(&summary, &outcome.rec));
        crate::say!("results in {}", job.dir.path().display());
    }
    Ok(JobResult {
        summary,
        rec: outcome.rec,
        fatal: outcome.fatal,
        stop_reason: outcome.stop_reason,
        cycle_minor_faults: outcome.rt.cycle_minor_faults,
    })
}
