//! `rtcat bench` and `rtcat run`: set up, run the master (or the timer-only loop), and always
//! write the results — on normal end, on SIGINT/SIGTERM, and after an unrecoverable fault.

use crate::cli::{BenchArgs, RunArgs, TxRxArg};
use crate::clock::{now_ns, unix_ns};
use crate::config::{Config, TxRxMode};
use crate::cycle::{self, Exit};
use crate::echo::EchoCheck;
use crate::master::{self, Channels, RtApplied, RunSpec, Target};
use crate::output::{self, RunFacts};
use crate::sdnotify::Notifier;
use crate::stats::{Live, Recorder};
use crate::status::{CheckpointFn, StatusConfig, StatusThread};
use anyhow::{Context, Result, anyhow};
use ecsim::{Faults, SegmentSpec};
use rtcat_master::axes::AxesApp;
use rtcat_master::{Application, ZeroOutputs};
use rtlab::summary;
use rtlab::summary::Mode;
use safefs::Dir;
use std::path::PathBuf;
use std::process::ExitCode;
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
    /// Where the floor benchmark leaves its results (`app` is a [`crate::floor::FloorPing`]).
    pub floor: Option<Arc<crate::floor::FloorReport>>,
}

/// What a finished job reports.
pub struct JobResult {
    pub summary: rtlab::summary::Summary,
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
                let f0 = crate::rt::thread_minor_faults();
                let _ = cycle::run_timer_only(&mut rec, live, period, end, &stop) == Exit::Stopped;
                applied.cycle_minor_faults = crate::rt::thread_minor_faults() - f0;
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

/// The summary of a checkpoint: the run so far, as the status thread saw it.
fn checkpoint_fn(
    job: &Job,
    mode: Mode,
    interface: Option<String>,
    started: u64,
    t0: u64,
) -> CheckpointFn {
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
    let stage = job.stage.clone();
    let period_ns = cfg.master.cycle.period().as_nanos();
    let requested = job.duration.map(|d| d.as_secs_f64());
    let dir = job.dir.clone();
    let live = job.live.clone();
    let (dc_cfg, period) = (cfg.master.dc.clone(), cfg.master.cycle.period());
    Box::new(move |rec: &Recorder, logging: &summary::LoggingHealth| {
        let facts = RunFacts {
            mode,
            interface: interface.clone(),
            stage: stage.clone(),
            started_at_unix_ns: started,
            duration_s: (now_ns() - t0) as f64 / 1e9,
            period_ns,
            expected_wkc: (mode != Mode::TimerOnly)
                .then(|| live.expected_wkc.load(Ordering::Relaxed) as u32),
            subdevices: live.subdevices.load(Ordering::Relaxed) as u32,
            pdi_bytes: live.pdi_bytes.load(Ordering::Relaxed) as u32,
            system: system.clone(),
            rt: rt.clone(),
            stop: Some(summary::Stop {
                reason: summary::StopReason::Running,
                signal: None,
                requested_duration_s: requested,
                detail: None,
            }),
            axes: None,
            dc: output::dc_summary(rec, &live, &dc_cfg, period),
            bus: (mode != Mode::TimerOnly).then(|| summary::BusStats {
                rx_rejected: live.rx_rejected.load(Ordering::Relaxed),
                send_errors: live.send_errors.load(Ordering::Relaxed),
                ..summary::BusStats::default()
            }),
            logging: (logging.write_errors + logging.events_dropped + logging.samples_dropped > 0)
                .then(|| logging.clone()),
        };
        output::write_results(&dir, &output::build_summary(rec, &facts), rec)
    })
}

/// Run a job to its end and write every result file.
pub fn execute(mut job: Job) -> Result<JobResult> {
    crate::signals::install(crate::signals::Second::Kills)?;
    // Before anything writes into the directory: the final results' room.
    let reserve = output::Reserve::take(&job.dir, output::FINAL_RESERVE);
    let started = unix_ns();
    let t0 = now_ns();
    let (ev_tx, ev_rx) = rtrb::RingBuffer::new(4096);
    // Always on: the status thread builds the checkpoints' histograms from it (and writes
    // samples.csv when asked). 64 Ki samples = 65 s at 1 ms between two drains of 50 ms.
    let (samples_tx, samples_rx) = rtrb::RingBuffer::new(1 << 16);
    let (mode, interface) = match &job.target {
        None => (Mode::TimerOnly, None),
        Some(Target::Sim { .. }) => (Mode::Sim, None),
        Some(Target::Iface(i)) => (Mode::Iface, Some(i.clone())),
    };
    let checkpoint = match job.cfg.output.checkpoint_s {
        0 => None,
        s => Some((
            Duration::from_secs(s.into()),
            checkpoint_fn(&job, mode, interface.clone(), started, t0),
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
            ),
            job.cfg.master.control.socket.as_deref(),
            more_tx,
            records_tx,
        )?),
        None => None,
    };
    // The DC sampler (0x092C through the same queue) while DC is on; its events reach
    // events.log through the same channel as the poller's.
    let sampler = match (&queue, dc_events) {
        (Some((client, _)), Some(dc_events)) => Some(
            rtcat_master::dc::Sampler::spawn(
                client.clone(),
                live.clone(),
                job.cfg.master.dc.sync_window_ns,
                dc_events,
            )
            .context("start the DC sampler thread")?,
        ),
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
    // The poller's last emergencies still reach the status thread.
    if let Some(c) = control {
        c.stop();
    }
    drop(ch);
    let logging = status.finish();
    let outcome = run?;

    let cpu = outcome.rt.cpu;
    let facts = RunFacts {
        mode,
        interface,
        stage: job.stage.clone(),
        started_at_unix_ns: started,
        duration_s: (now_ns() - t0) as f64 / 1e9,
        period_ns: job.cfg.master.cycle.period().as_nanos(),
        expected_wkc: (mode != Mode::TimerOnly).then_some(u32::from(outcome.expected_wkc)),
        subdevices: outcome.subdevices as u32,
        pdi_bytes: outcome.pdi_bytes as u32,
        system: crate::sysinfo::snapshot(&rttune::SysRoot::live(), cpu),
        rt: outcome.rt.clone(),
        stop: Some(stop_info(&job, outcome.fatal.as_deref())),
        bus: (mode != Mode::TimerOnly).then_some(outcome.bus.clone()),
        logging: (logging.write_errors + logging.events_dropped + logging.samples_dropped > 0)
            .then_some(logging),
        axes: job
            .axes
            .as_ref()
            .map(rtcat_master::axes::AxesReport::summaries),
        dc: output::dc_summary(
            &outcome.rec,
            &job.live,
            &job.cfg.master.dc,
            job.cfg.master.cycle.period(),
        ),
    };
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

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    crate::say!("rtcat: {msg}");
    ExitCode::from(2)
}

fn config_or_exit(path: Option<&std::path::Path>) -> Result<Config, ExitCode> {
    match path {
        None => Ok(Config::default()),
        Some(p) => Config::load(p).map_err(usage),
    }
}

/// The CPUs a run pins to must be online — checked in every mode, also under `--no-rt` (which
/// does not pin), so a typo is an error before the run, not later. Not the affinity the process
/// inherited: with `isolcpus=domain,...` the kernel starts init, and so every service, on the
/// housekeeping CPUs only, and the cycle thread widens its own affinity to the isolated CPU
/// (`rt::pin_to`, which reports a CPU the cpuset does not allow).
fn check_cpus(cfg: &Config, from: &str) -> Result<(), String> {
    let usable = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map_err(|e| format!("cannot read the online CPUs: {e}"))
        .and_then(|s| {
            rtlab::cpus::parse_cpu_list(&s)
                .map_err(|e| format!("/sys/devices/system/cpu/online: {e:#}"))
        })?;
    for (key, cpu) in [
        ("cycle.cpu", cfg.master.cycle.cpu),
        ("cycle.txrx_cpu", cfg.master.cycle.txrx_cpu),
    ] {
        if let Some(c) = cpu
            && !usable.contains(&c)
        {
            return Err(format!(
                "{from}: {key} = {c}: CPU {c} is not online (online: {})",
                rtlab::cpus::format_cpu_list(&usable)
            ));
        }
    }
    Ok(())
}

/// Open the output directory and move a previous run's files aside (exit 1 on failure: the
/// directory exists as given but cannot be used).
fn open_out(path: &std::path::Path, keep_runs: u32) -> Result<Arc<Dir>, ExitCode> {
    output::prepare_dir(path, keep_runs)
        .map(Arc::new)
        .map_err(|e| {
            crate::say!("rtcat: {}: {e:#}", path.display());
            ExitCode::from(1)
        })
}

/// Exit code of a finished job. `signal_codes`: a run stopped by a signal exits 128 + N, as a
/// shell reports it (bench); the service (`run`) exits 0 when stopped.
fn finish(r: Result<JobResult>, signal_codes: bool) -> ExitCode {
    match r {
        Ok(res) => match res.fatal {
            Some(f) => {
                crate::say!("rtcat: unrecoverable: {f}");
                ExitCode::from(1)
            }
            None => match crate::signals::signal() {
                Some(sig) if signal_codes => ExitCode::from(crate::signals::exit_code(sig)),
                _ => ExitCode::SUCCESS,
            },
        },
        Err(e) => {
            crate::say!("rtcat: {e:#}");
            // A control socket path that cannot be used as given is the user's input.
            let usage = e
                .downcast_ref::<rtcat_control::server::Error>()
                .is_some_and(rtcat_control::server::Error::is_usage)
                || e.downcast_ref::<rtcat_master::config::GroupError>()
                    .is_some();
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}

/// `--control SOCK` into `cfg` (exit 2 naming the flag when the path cannot be a socket).
fn set_control(cfg: &mut Config, sock: Option<&std::path::Path>) -> Result<(), ExitCode> {
    if let Some(p) = sock {
        if let Err(m) = rtcat_master::config::ControlConfig::check_socket(p) {
            return Err(usage(format_args!("--control {}: {m}", p.display())));
        }
        cfg.master.control.socket = Some(p.to_path_buf());
    }
    Ok(())
}

/// Wrap the job's application in the shared-memory image when `[shm] name` / `--shm` is set.
fn with_shm(app: Box<dyn Application>, cfg: &Config) -> Result<Box<dyn Application>, ExitCode> {
    if cfg.master.shm.name.is_none() {
        return Ok(app);
    }
    let gid = cfg.master.ipc.gid().map_err(usage)?.map(|g| g.as_raw());
    let period_ns = cfg.master.cycle.period().as_nanos();
    match rtcat_master::shm::SharedImage::new(app, &cfg.master.shm, gid, period_ns) {
        // The axes' drives are commanded by the master only (limits, enable policy).
        Ok(s) => Ok(Box::new(s.with_axes(&cfg.master.axis))),
        Err(e) => Err(usage(format_args!("--shm / shm.name: {e}"))),
    }
}

pub fn bench_command(a: BenchArgs) -> ExitCode {
    let mut cfg = match config_or_exit(a.config.as_deref()) {
        Ok(c) => c,
        Err(c) => return c,
    };
    if let Some(p) = a.period_us {
        cfg.master.cycle.period_us = p;
    }
    if a.cpu.is_some() {
        cfg.master.cycle.cpu = a.cpu;
    }
    if let Some(p) = a.priority {
        cfg.master.cycle.priority = p;
    }
    if let Some(t) = a.txrx {
        cfg.master.cycle.txrx = match t {
            TxRxArg::Inline => TxRxMode::Inline,
            TxRxArg::Thread => TxRxMode::Thread,
        };
    }
    if let Some(i) = &a.iface {
        if let Err(why) = rttune::netif::check_name(i) {
            return usage(format_args!("--iface: {why}"));
        }
        cfg.master.bus.interface = i.clone();
    }
    if let Err(c) = set_control(&mut cfg, a.control.as_deref()) {
        return c;
    }
    if let Some(n) = &a.shm {
        cfg.master.shm.name = Some(n.clone());
    }
    if let Err(e) = cfg.validate("command line") {
        return usage(e);
    }
    if let Err(e) = check_cpus(&cfg, "--cpu / [cycle]") {
        return usage(e);
    }
    if !(a.duration > 0.0 && a.duration <= 31.0 * 86400.0) {
        return usage(format_args!(
            "--duration {}: must be > 0 and at most 31 days (in seconds)",
            a.duration
        ));
    }
    if let Some(s) = &a.stage
        && let Err(e) = rtlab::summary::validate_stage_id(s)
    {
        return usage(format_args!("--stage: {e}"));
    }
    // Kept until the run ends (dropping it removes the socket).
    let mut sim_control = None;
    if a.timer_only && cfg.master.control.socket.is_some() {
        return usage("--control / control.socket: a timer-only run has no segment to control");
    }
    let target = if a.timer_only {
        None
    } else if a.sim {
        let spec = match &a.segment {
            Some(p) => match SegmentSpec::load(p) {
                Ok(s) => s,
                Err(e) => return usage(e),
            },
            None => SegmentSpec::reference(),
        };
        let faults = Faults::new();
        if let Some(p) = &a.sim_control {
            // The simulator's fault socket (`rtcat sim-ctl`), on the in-process segment.
            let h = ecsim::control::Handler::new(
                faults.clone(),
                Arc::new(std::sync::Mutex::new(
                    "in-process segment of rtcat bench".into(),
                )),
                spec.devices.len(),
            );
            match ecsim::control::serve(
                p,
                ecsim::control::Access::Owner,
                h,
                Arc::new(std::sync::atomic::AtomicBool::new(false)),
            ) {
                Ok(c) => sim_control = Some(c),
                Err(e) => return usage(format_args!("--sim-control: {e}")),
            }
        }
        Some(Target::Sim { spec, faults })
    } else {
        if let Err(why) =
            rttune::netif::check_exists(&rttune::SysRoot::live(), &cfg.master.bus.interface)
        {
            return usage(format_args!("--iface / bus.interface: {why}"));
        }
        Some(Target::Iface(cfg.master.bus.interface.clone()))
    };
    // With [[axis]] the axes application drives the drives (their inputs follow the drive,
    // not the simulator's echo rule, so no echo check).
    let axes = (!cfg.master.axis.is_empty()).then(rtcat_master::axes::AxesReport::default);
    let app: Box<dyn Application> = if let Some(r) = &axes {
        Box::new(AxesApp::from_config(&cfg.master, r.clone()))
    } else if a.sim || a.check_echo {
        Box::new(EchoCheck::default())
    } else {
        Box::new(ZeroOutputs)
    };
    let app = match with_shm(app, &cfg) {
        Ok(a) => a,
        Err(c) => return c,
    };
    let live = Arc::new(Live::default());
    let (app, floor) = if a.floor {
        // Opened here, before the run: a missing CAP_NET_RAW is said before the segment is
        // brought up.
        let pinger = match crate::floor::Pinger::open(&cfg.master.bus.interface) {
            Ok(p) => p,
            Err(e) => {
                crate::say!(
                    "rtcat: --floor: the ping socket on {}: {e}",
                    cfg.master.bus.interface
                );
                return ExitCode::from(1);
            }
        };
        let report = Arc::new(crate::floor::FloorReport::default());
        let period_ns = cfg.master.cycle.period().as_nanos();
        let app: Box<dyn Application> = Box::new(crate::floor::FloorPing::new(
            app,
            pinger,
            live.clone(),
            period_ns,
            report.clone(),
        ));
        (app, Some(report))
    } else {
        (app, None)
    };
    let json = a.json.as_deref().map(|j| {
        if j == "-" {
            JsonDest::Stdout
        } else {
            JsonDest::File(PathBuf::from(j))
        }
    });
    let dir = match open_out(&a.out, cfg.output.keep_runs) {
        Ok(d) => d,
        Err(c) => return c,
    };
    let r = finish(
        execute(Job {
            cfg,
            target,
            duration: Some(Duration::from_secs_f64(a.duration)),
            no_rt: a.no_rt,
            stage: a.stage,
            dir,
            json,
            samples: a.samples,
            app,
            notifier: None,
            echo_events: a.verbose,
            print_table: true,
            retry_start: false,
            live,
            axes,
            floor,
        }),
        true,
    );
    drop(sim_control);
    r
}

pub fn run_command(a: RunArgs) -> ExitCode {
    let mut cfg = match Config::load(&a.config) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    if let Err(c) = set_control(&mut cfg, a.control.as_deref()) {
        return c;
    }
    if let Some(n) = &a.shm {
        cfg.master.shm.name = Some(n.clone());
        if let Err(e) = cfg.master.shm.validate("--shm") {
            return usage(e);
        }
    }
    if let Err(e) = check_cpus(&cfg, &a.config.display().to_string()) {
        return usage(e);
    }
    let target = if a.sim {
        Target::Sim {
            spec: SegmentSpec::reference(),
            faults: Faults::new(),
        }
    } else {
        // The service waits for a NIC that is not there yet (udev renames it, a USB adapter is
        // plugged later), but says at once what this machine has.
        if let Err(why) =
            rttune::netif::check_exists(&rttune::SysRoot::live(), &cfg.master.bus.interface)
        {
            crate::say!("rtcat: bus.interface: {why}; waiting for it");
        }
        Target::Iface(cfg.master.bus.interface.clone())
    };
    let notifier = Arc::new(Notifier::from_env());
    let out_dir = a.out.clone().unwrap_or_else(|| cfg.output.dir.clone());
    let dir = match open_out(&out_dir, cfg.output.keep_runs) {
        Ok(d) => d,
        Err(c) => return c,
    };
    let samples = cfg.output.samples_csv;
    let axes = (!cfg.master.axis.is_empty()).then(rtcat_master::axes::AxesReport::default);
    let app: Box<dyn Application> = if let Some(r) = &axes {
        Box::new(AxesApp::from_config(&cfg.master, r.clone()))
    } else if a.sim {
        Box::new(EchoCheck::default())
    } else {
        Box::new(ZeroOutputs)
    };
    let app = match with_shm(app, &cfg) {
        Ok(a) => a,
        Err(c) => return c,
    };
    let r = execute(Job {
        cfg,
        target: Some(target),
        duration: None,
        no_rt: a.no_rt,
        stage: None,
        dir,
        json: None,
        samples,
        app,
        notifier: Some(notifier.clone()),
        echo_events: true,
        print_table: true,
        retry_start: true,
        live: Arc::new(Live::default()),
        axes,
        floor: None,
    });
    notifier.notify("STOPPING=1");
    finish(r, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service under `isolcpus=domain` inherits the housekeeping CPUs only; the isolated CPU
    /// it is configured for is still online and must pass (it failed every start in the QEMU
    /// system test: "CPU 3 is not online or not allowed for this process (usable: 0-2)").
    #[test]
    fn cpu_outside_the_inherited_affinity_is_accepted() {
        let online = rtlab::cpus::parse_cpu_list(
            &std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap(),
        )
        .unwrap();
        let (&first, &last) = (online.first().unwrap(), online.last().unwrap());
        if first == last {
            eprintln!("one online CPU: nothing outside a one-CPU affinity to try");
            return;
        }
        std::thread::spawn(move || {
            rtlab::cpus::pin_current_thread(&[first]).unwrap();
            let mut cfg = Config::default();
            cfg.master.cycle.cpu = Some(last);
            cfg.master.cycle.txrx_cpu = Some(last);
            check_cpus(&cfg, "test").unwrap();
            cfg.master.cycle.cpu = Some(4095);
            let e = check_cpus(&cfg, "test").unwrap_err();
            assert!(
                e.contains("cycle.cpu = 4095: CPU 4095 is not online"),
                "{e}"
            );
        })
        .join()
        .unwrap();
    }
}
