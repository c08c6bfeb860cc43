//! `rtcat bench` and `rtcat run`: their flags, the configuration they make of them and the
//! files they name, checked before anything starts, then one [`Job`] for the runner.

use crate::config::{Config, TxRxMode};
use crate::outcome::{Failure, Kind, Outcome};
use crate::output;
use crate::runner::{Job, JobResult, JsonDest, execute};
use crate::sdnotify::Notifier;
use clap::{Args, ValueEnum};
use ecsim::{Faults, SegmentSpec};
use rtcat_master::axes::AxesApp;
use rtcat_master::config::{LinkKind, WaitMode};
use rtcat_master::echo::EchoCheck;
use rtcat_master::master::Target;
use rtcat_master::stats::Live;
use rtcat_master::{Application, ZeroOutputs};
use safefs::Dir;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Configuration file
    #[arg(long, value_name = "FILE", default_value = crate::config::DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// Results directory (default: [output].dir)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run unprivileged on purpose: SCHED_OTHER, unpinned, no locked memory (said in the results)
    #[arg(long)]
    pub no_rt: bool,
    /// Use the in-process simulated segment instead of [bus].interface (testing)
    #[arg(long)]
    pub sim: bool,
    /// Serve the control socket here (JSON lines; see `rtcat scan --control`); overrides
    /// [control] socket
    #[arg(long, value_name = "SOCK")]
    pub control: Option<PathBuf>,
    /// Share the process image, labelled NAME, handed out over the control socket (needs
    /// --control or [control] socket; overrides [shm].name)
    #[arg(long, value_name = "NAME")]
    pub shm: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TxRxArg {
    Inline,
    Thread,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WaitArg {
    Sleep,
    Busy,
    Hybrid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LinkArg {
    Packet,
    Xdp,
    XdpNative,
    XdpGeneric,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Use the in-process simulated segment (no root, no NIC)
    #[arg(long, conflicts_with_all = ["timer_only", "iface"])]
    pub sim: bool,
    /// Segment description for --sim (default: the reference segment, 3 subdevices, WKC 9)
    #[arg(long, value_name = "FILE", requires = "sim")]
    pub segment: Option<PathBuf>,
    /// The loop without a bus (comparable with cyclictest)
    #[arg(long, conflicts_with = "iface")]
    pub timer_only: bool,
    /// EtherCAT interface (default: [bus].interface)
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// Configuration file (default: built-in defaults)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How long to run, in seconds
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub duration: f64,
    /// Write the summary JSON here ("-" for stdout)
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Directory for all artefacts (summary.json, histograms, events.log, samples.csv)
    #[arg(long, value_name = "DIR", default_value = "rtcat-bench")]
    pub out: PathBuf,
    /// Run unprivileged on purpose: SCHED_OTHER, unpinned, no locked memory (said in the results)
    #[arg(long)]
    pub no_rt: bool,
    /// Cycle period in µs (overrides [cycle].period_us)
    #[arg(long, value_name = "US")]
    pub period_us: Option<u32>,
    /// CPU of the cyclic thread (overrides [cycle].cpu)
    #[arg(long, value_name = "N")]
    pub cpu: Option<usize>,
    /// SCHED_FIFO priority (overrides [cycle].priority)
    #[arg(long, value_name = "P")]
    pub priority: Option<u8>,
    /// Who moves frames (overrides [cycle].txrx)
    #[arg(long, value_enum)]
    pub txrx: Option<TxRxArg>,
    /// How the inline cycle waits for its replies: sleep in ppoll, busy-poll the socket, or
    /// sleep until shortly before the learned round trip and poll then (overrides [cycle].wait)
    #[arg(long, value_enum, value_name = "MODE")]
    pub wait: Option<WaitArg>,
    /// The socket for the frames: AF_PACKET, or AF_XDP (native XDP where the driver has it,
    /// else generic; or forced) (overrides [bus].link)
    #[arg(long, value_enum, value_name = "SOCKET", conflicts_with_all = ["sim", "timer_only"])]
    pub link: Option<LinkArg>,
    /// Write samples.csv (one row per cycle)
    #[arg(long)]
    pub samples: bool,
    /// Ladder stage id recorded in the results
    #[arg(long, value_name = "ID", hide = true)]
    pub stage: Option<String>,
    /// Check that inputs echo outputs (the simulated segment's behaviour; default with --sim)
    #[arg(long)]
    pub check_echo: bool,
    /// Print health events to stderr as they happen
    #[arg(long)]
    pub verbose: bool,
    /// Serve the control socket here (JSON lines; see `rtcat scan --control`); overrides
    /// [control] socket
    #[arg(long, value_name = "SOCK", conflicts_with = "timer_only")]
    pub control: Option<PathBuf>,
    /// With --sim: accept the simulator's fault commands (`rtcat sim-ctl`) on this socket
    #[arg(long, value_name = "PATH", requires = "sim", hide = true)]
    pub sim_control: Option<PathBuf>,
    /// With --sim: the cable into this device (position 1 or later) is pulled before the run
    /// starts, as `rtcat sim-ctl unplug POS` would (a device to plug in later); repeatable
    #[arg(long, value_name = "POS", requires = "sim", hide = true)]
    pub sim_unplug: Vec<usize>,
    /// Share the process image, labelled NAME, handed out over the control socket (needs
    /// --control or [control] socket; overrides [shm].name)
    #[arg(long, value_name = "NAME", conflicts_with = "timer_only")]
    pub shm: Option<String>,
    /// Also measure the floor: every cycle, at mid-period, a bare ping of the cyclic frame's size
    /// on the same thread, answered by `rtcat sim --floor-echo`; prints both round trips and
    /// their ratio (docs/NOTES.md §1.1). Needs an interface (not --sim or --timer-only)
    #[arg(long, conflicts_with_all = ["sim", "timer_only"])]
    pub floor: bool,
}

fn usage(msg: impl std::fmt::Display) -> Failure {
    Failure::usage(msg)
}

fn config_or_exit(path: Option<&std::path::Path>) -> Result<Config, Failure> {
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
fn open_out(path: &std::path::Path, keep_runs: u32) -> Result<Arc<Dir>, Failure> {
    output::prepare_dir(path, keep_runs)
        .map(Arc::new)
        .map_err(|e| Failure::Runtime(format!("{}: {e:#}", path.display())))
}

/// Exit code of a finished job. `signal_codes`: a run stopped by a signal exits 128 + N, as a
/// shell reports it (bench); the service (`run`) exits 0 when stopped.
fn finish(r: anyhow::Result<JobResult>, signal_codes: bool) -> Outcome {
    match r {
        Ok(res) => match res.fatal {
            Some(f) => Err(Failure::Runtime(format!("unrecoverable: {f}"))),
            None => match crate::signals::signal() {
                Some(sig) if signal_codes => Err(Failure::Signalled(sig)),
                _ => Ok(()),
            },
        },
        Err(e) => {
            // A control socket path that cannot be used as given is the user's input.
            let usage = e
                .downcast_ref::<rtcat_control::server::Error>()
                .is_some_and(rtcat_control::server::Error::is_usage)
                || e.downcast_ref::<crate::config::GroupError>().is_some();
            let kind = if usage { Kind::Usage } else { Kind::Runtime };
            Err(Failure::of(kind, format_args!("{e:#}")))
        }
    }
}

/// `--control SOCK` into `cfg` (exit 2 naming the flag when the path cannot be a socket).
fn set_control(cfg: &mut Config, sock: Option<&std::path::Path>) -> Result<(), Failure> {
    if let Some(p) = sock {
        if let Err(m) = crate::config::ControlConfig::check_socket(p) {
            return Err(usage(format_args!("--control {}: {m}", p.display())));
        }
        cfg.control.socket = Some(p.to_path_buf());
    }
    Ok(())
}

/// The job's application, and the handout of the shared image (format v3).
type WithShm = (Box<dyn Application>, Option<rtcat_master::shm::Hub>);

/// Wrap the job's application in the shared image when `[shm] name` / `--shm` is set. The
/// image is handed out over the control socket only (nothing in /dev/shm): without one it is
/// a usage error.
fn with_shm(app: Box<dyn Application>, cfg: &Config) -> Result<WithShm, Failure> {
    if cfg.shm.name.is_none() {
        return Ok((app, None));
    }
    if cfg.control.socket.is_none() {
        return Err(usage(
            "--shm / shm.name: the shared image is handed out over the control socket (format \
             v3, nothing is created in /dev/shm): set --control SOCK or [control] socket",
        ));
    }
    let period_ns = cfg.master.cycle.period().as_nanos();
    let hub = rtcat_master::shm::Hub::new();
    match rtcat_master::shm::SharedImage::new(app, &cfg.shm, hub.clone(), period_ns) {
        // The axes' drives are commanded by the master only (limits, enable policy).
        Ok(s) => Ok((Box::new(s.with_axes(&cfg.master.axis)), Some(hub))),
        Err(e) => Err(usage(format_args!("--shm / shm.name: {e}"))),
    }
}

/// `rtcat bench`.
pub fn bench(a: BenchArgs) -> Outcome {
    let mut cfg = config_or_exit(a.config.as_deref())?;
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
    if let Some(w) = a.wait {
        cfg.master.cycle.wait = Some(match w {
            WaitArg::Sleep => WaitMode::Sleep,
            WaitArg::Busy => WaitMode::Busy,
            WaitArg::Hybrid => WaitMode::Hybrid,
        });
    }
    if let Some(l) = a.link {
        cfg.master.bus.link = match l {
            LinkArg::Packet => LinkKind::Packet,
            LinkArg::Xdp => LinkKind::Xdp,
            LinkArg::XdpNative => LinkKind::XdpNative,
            LinkArg::XdpGeneric => LinkKind::XdpGeneric,
        };
    }
    if let Some(i) = &a.iface {
        if let Err(why) = rttune::netif::check_name(i) {
            return Err(usage(format_args!("--iface: {why}")));
        }
        cfg.master.bus.interface = i.clone();
    }
    set_control(&mut cfg, a.control.as_deref())?;
    if let Some(n) = &a.shm {
        cfg.shm.name = Some(n.clone());
    }
    cfg.validate("command line").map_err(usage)?;
    check_cpus(&cfg, "--cpu / [cycle]").map_err(usage)?;
    if !(a.duration > 0.0 && a.duration <= 31.0 * 86400.0) {
        return Err(usage(format_args!(
            "--duration {}: must be > 0 and at most 31 days (in seconds)",
            a.duration
        )));
    }
    if let Some(s) = &a.stage
        && let Err(e) = rtcat_results::validate_stage_id(s)
    {
        return Err(usage(format_args!("--stage: {e}")));
    }
    // Kept until the run ends (dropping it removes the socket).
    let mut sim_control = None;
    if a.timer_only && cfg.control.socket.is_some() {
        return Err(usage(
            "--control / control.socket: a timer-only run has no segment to control",
        ));
    }
    let target = if a.timer_only {
        None
    } else if a.sim {
        let spec = match &a.segment {
            Some(p) => match SegmentSpec::load(p) {
                Ok(s) => s,
                Err(e) => return Err(usage(e)),
            },
            None => SegmentSpec::reference(),
        };
        let faults = Faults::new();
        for &position in &a.sim_unplug {
            if position == 0 || position >= spec.devices.len() {
                return Err(usage(format_args!(
                    "--sim-unplug {position}: not a position of the segment after the first \
                     (1..={}; position 0's cable is the link)",
                    spec.devices.len().saturating_sub(1)
                )));
            }
            faults.apply(ecsim::FaultCommand::Cable {
                position,
                plugged: false,
            });
        }
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
                Err(e) => return Err(usage(format_args!("--sim-control: {e}"))),
            }
        }
        Some(Target::Sim { spec, faults })
    } else {
        if let Err(why) =
            rttune::netif::check_exists(&rttune::SysRoot::live(), &cfg.master.bus.interface)
        {
            return Err(usage(format_args!("--iface / bus.interface: {why}")));
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
    let (app, shm) = with_shm(app, &cfg)?;
    let live = Arc::new(Live::default());
    let (app, floor) = if a.floor {
        // Opened here, before the run: a missing CAP_NET_RAW is said before the segment is
        // brought up.
        let pinger = match rtcat_master::floor::Pinger::open(&cfg.master.bus.interface) {
            Ok(p) => p,
            Err(e) => {
                return Err(Failure::Runtime(format!(
                    "--floor: the ping socket on {}: {e}",
                    cfg.master.bus.interface
                )));
            }
        };
        let report = Arc::new(rtcat_master::floor::FloorReport::default());
        let period_ns = cfg.master.cycle.period().as_nanos();
        let app: Box<dyn Application> = Box::new(rtcat_master::floor::FloorPing::new(
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
    let dir = open_out(&a.out, cfg.output.keep_runs)?;
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
            shm,
        }),
        true,
    );
    drop(sim_control);
    r
}

/// `rtcat run`.
pub fn run(a: RunArgs) -> Outcome {
    let mut cfg = match Config::load(&a.config) {
        Ok(c) => c,
        Err(e) => return Err(usage(e)),
    };
    set_control(&mut cfg, a.control.as_deref())?;
    if let Some(n) = &a.shm {
        cfg.shm.name = Some(n.clone());
        cfg.shm.validate("--shm").map_err(usage)?;
    }
    check_cpus(&cfg, &a.config.display().to_string()).map_err(usage)?;
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
    let dir = open_out(&out_dir, cfg.output.keep_runs)?;
    let samples = cfg.output.samples_csv;
    let axes = (!cfg.master.axis.is_empty()).then(rtcat_master::axes::AxesReport::default);
    let app: Box<dyn Application> = if let Some(r) = &axes {
        Box::new(AxesApp::from_config(&cfg.master, r.clone()))
    } else if a.sim {
        Box::new(EchoCheck::default())
    } else {
        Box::new(ZeroOutputs)
    };
    let (app, shm) = with_shm(app, &cfg)?;
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
        shm,
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
