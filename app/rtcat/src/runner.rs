//! `rtcat bench` and `rtcat run`: set up, run the master (or the timer-only loop), and always
//! write the results — on normal end, on SIGINT/SIGTERM, and after an unrecoverable fault.

use crate::app::{Application, EchoCheck, ZeroOutputs};
use crate::cli::{BenchArgs, RunArgs, TxRxArg};
use crate::clock::{now_ns, unix_ns};
use crate::config::{Config, TxRxMode};
use crate::cycle::{self, Exit};
use crate::master::{self, Channels, RtApplied, RunSpec, Target};
use crate::output::{self, RunFacts};
use crate::sdnotify::Notifier;
use crate::stats::{Live, Recorder};
use crate::status::{StatusConfig, StatusThread};
use anyhow::{Context, Result, anyhow};
use ecsim::{Faults, SegmentSpec};
use rtlab::summary::Mode;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
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
    pub out_dir: PathBuf,
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
    let _dma = if !job.no_rt && cfg.rt.hold_cpu_dma_latency {
        Some(crate::rt::DmaLatencyGuard::hold_zero()?)
    } else {
        None
    };
    if !job.no_rt && cfg.rt.lock_memory {
        crate::rt::lock_memory()?;
    }
    let period = u64::from(cfg.cycle.period_us) * 1000;
    let end = job.duration.map(|d| now_ns() + d.as_nanos() as u64);
    let no_rt = job.no_rt;
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("rtcat-cycle".into())
            .spawn_scoped(s, move || -> Result<(Recorder, RtApplied)> {
                crate::rt::name_thread("rtcat-cycle");
                if !no_rt {
                    if let Some(cpu) = cfg.cycle.cpu {
                        crate::rt::pin_to(cpu).context("cycle.cpu")?;
                    }
                    crate::rt::set_timer_slack(cfg.rt.timer_slack_ns)?;
                    crate::rt::set_fifo(cfg.cycle.priority).context("cycle.priority")?;
                    crate::rt::prefault_stack(cfg.rt.prefault_stack_kib);
                }
                let (policy, priority) = crate::rt::current_policy();
                let mut rec = Recorder::new();
                let stop = crate::signals::stop_requested;
                let f0 = crate::rt::thread_minor_faults();
                let _ = cycle::run_timer_only(&mut rec, live, period, end, &stop) == Exit::Stopped;
                Ok((
                    rec,
                    RtApplied {
                        no_rt,
                        cpu: if no_rt { None } else { cfg.cycle.cpu },
                        txrx_cpu: None,
                        policy,
                        priority,
                        timer_slack_ns: crate::rt::timer_slack(),
                        cycle_minor_faults: crate::rt::thread_minor_faults() - f0,
                    },
                ))
            })?
            .join()
            .map_err(|_| anyhow!("cyclic thread panicked"))?
    })
}

/// Run a job to its end and write every result file.
pub fn execute(mut job: Job) -> Result<JobResult> {
    crate::signals::install()?;
    let started = unix_ns();
    let t0 = now_ns();
    let (ev_tx, ev_rx) = rtrb::RingBuffer::new(4096);
    let (samples_tx, samples_rx) = if job.samples {
        let (p, c) = rtrb::RingBuffer::new(1 << 16);
        (Some(p), Some(c))
    } else {
        (None, None)
    };
    let live = Arc::new(Live::default());
    let status = StatusThread::spawn(
        StatusConfig {
            out_dir: job.out_dir.clone(),
            interval: match job.cfg.output.status_interval_ms {
                0 => None,
                ms => Some(Duration::from_millis(ms.into())),
            },
            notifier: job.notifier.clone(),
            echo_events: job.echo_events,
        },
        live.clone(),
        ev_rx,
        samples_rx,
    )
    .with_context(|| format!("results directory {}", job.out_dir.display()))?;

    let mut ch = Channels {
        live: live.clone(),
        events: ev_tx,
        samples: samples_tx,
    };
    let (mode, interface) = match &job.target {
        None => (Mode::TimerOnly, None),
        Some(Target::Sim { .. }) => (Mode::Sim, None),
        Some(Target::Iface(i)) => (Mode::Iface, Some(i.clone())),
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
        }),
        Some(target) => {
            let spec = RunSpec {
                cfg: job.cfg.clone(),
                target,
                duration: job.duration,
                no_rt: job.no_rt,
                on_ready: Some(Box::new(move || {
                    if let Some(n) = &notify {
                        n.notify("READY=1");
                    }
                })),
                retry_start: job.retry_start,
            };
            // ethercrab's groups for 256 subdevices and its init futures are large: give the
            // setup thread a stack that fits them in debug builds too.
            let app = job.app.as_mut();
            let chr = &mut ch;
            std::thread::scope(|s| {
                std::thread::Builder::new()
                    .name("rtcat-master".into())
                    .stack_size(64 << 20)
                    .spawn_scoped(s, move || master::run(spec, app, chr))
                    .map_err(anyhow::Error::from)?
                    .join()
                    .map_err(|_| anyhow!("master thread panicked"))?
            })
        }
    };
    drop(ch);
    let status_result = status.finish();
    let outcome = run?;
    status_result.context("status thread (events.log / samples.csv)")?;

    let cpu = outcome.rt.cpu;
    let facts = RunFacts {
        mode,
        interface,
        stage: job.stage.clone(),
        started_at_unix_ns: started,
        duration_s: (now_ns() - t0) as f64 / 1e9,
        period_ns: u64::from(job.cfg.cycle.period_us) * 1000,
        expected_wkc: (mode != Mode::TimerOnly).then_some(u32::from(outcome.expected_wkc)),
        subdevices: outcome.subdevices as u32,
        pdi_bytes: outcome.pdi_bytes as u32,
        system: crate::sysinfo::snapshot(&rttune::SysRoot::live(), cpu),
        rt: outcome.rt.clone(),
    };
    let summary = output::build_summary(&outcome.rec, &facts);
    output::write_results(&job.out_dir, &summary, &outcome.rec)?;
    let json = serde_json::to_string_pretty(&summary)?;
    match &job.json {
        Some(JsonDest::Stdout) => println!("{json}"),
        Some(JsonDest::File(p)) => std::fs::write(p, format!("{json}\n"))
            .with_context(|| format!("write {}", p.display()))?,
        None => {}
    }
    if job.print_table {
        eprint!("{}", output::human_table(&summary, &outcome.rec));
        eprintln!(
            "stopped: {}; results in {}",
            outcome.stop_reason,
            job.out_dir.display()
        );
    }
    Ok(JobResult {
        summary,
        rec: outcome.rec,
        fatal: outcome.fatal,
        stop_reason: outcome.stop_reason,
        cycle_minor_faults: outcome.rt.cycle_minor_faults,
    })
}

fn config_or_exit(path: Option<&std::path::Path>) -> Result<Config, ExitCode> {
    match path {
        None => Ok(Config::default()),
        Some(p) => Config::load(p).map_err(|e| {
            eprintln!("rtcat: {e}");
            ExitCode::from(2)
        }),
    }
}

fn finish(r: Result<JobResult>) -> ExitCode {
    match r {
        Ok(res) => match res.fatal {
            Some(f) => {
                eprintln!("rtcat: unrecoverable: {f}");
                ExitCode::from(1)
            }
            None => ExitCode::SUCCESS,
        },
        Err(e) => {
            eprintln!("rtcat: {e:#}");
            ExitCode::from(1)
        }
    }
}

pub fn bench_command(a: BenchArgs) -> ExitCode {
    let mut cfg = match config_or_exit(a.config.as_deref()) {
        Ok(c) => c,
        Err(c) => return c,
    };
    if let Some(p) = a.period_us {
        cfg.cycle.period_us = p;
    }
    if a.cpu.is_some() {
        cfg.cycle.cpu = a.cpu;
    }
    if let Some(p) = a.priority {
        cfg.cycle.priority = p;
    }
    if let Some(t) = a.txrx {
        cfg.cycle.txrx = match t {
            TxRxArg::Inline => TxRxMode::Inline,
            TxRxArg::Thread => TxRxMode::Thread,
        };
    }
    if let Err(e) = cfg.validate("command line") {
        eprintln!("rtcat: {e}");
        return ExitCode::from(2);
    }
    if !(a.duration > 0.0 && a.duration <= 31.0 * 86400.0) {
        eprintln!(
            "rtcat: --duration {}: must be > 0 and at most 31 days (in seconds)",
            a.duration
        );
        return ExitCode::from(2);
    }
    if let Some(s) = &a.stage
        && let Err(e) = rtlab::summary::validate_stage_id(s)
    {
        eprintln!("rtcat: --stage: {e}");
        return ExitCode::from(2);
    }
    let target = if a.timer_only {
        None
    } else if a.sim {
        let spec = match &a.segment {
            Some(p) => match SegmentSpec::load(p) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("rtcat: {e}");
                    return ExitCode::from(2);
                }
            },
            None => SegmentSpec::reference(),
        };
        Some(Target::Sim {
            spec,
            faults: Faults::new(),
        })
    } else {
        Some(Target::Iface(
            a.iface.clone().unwrap_or_else(|| cfg.bus.interface.clone()),
        ))
    };
    let app: Box<dyn Application> = if a.sim || a.check_echo {
        Box::new(EchoCheck::default())
    } else {
        Box::new(ZeroOutputs)
    };
    let json = a.json.as_deref().map(|j| {
        if j == "-" {
            JsonDest::Stdout
        } else {
            JsonDest::File(PathBuf::from(j))
        }
    });
    finish(execute(Job {
        cfg,
        target,
        duration: Some(Duration::from_secs_f64(a.duration)),
        no_rt: a.no_rt,
        stage: a.stage,
        out_dir: a.out,
        json,
        samples: a.samples,
        app,
        notifier: None,
        echo_events: a.verbose,
        print_table: true,
        retry_start: false,
    }))
}

pub fn run_command(a: RunArgs) -> ExitCode {
    let cfg = match Config::load(&a.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rtcat: {e}");
            return ExitCode::from(2);
        }
    };
    let target = if a.sim {
        Target::Sim {
            spec: SegmentSpec::reference(),
            faults: Faults::new(),
        }
    } else {
        Target::Iface(cfg.bus.interface.clone())
    };
    let notifier = Arc::new(Notifier::from_env());
    let out_dir = a.out.clone().unwrap_or_else(|| cfg.output.dir.clone());
    let samples = cfg.output.samples_csv;
    let r = execute(Job {
        cfg,
        target: Some(target),
        duration: None,
        no_rt: a.no_rt,
        stage: None,
        out_dir,
        json: None,
        samples,
        app: if a.sim {
            Box::new(EchoCheck::default())
        } else {
            Box::new(ZeroOutputs)
        },
        notifier: Some(notifier.clone()),
        echo_events: true,
        print_table: true,
        retry_start: true,
    });
    notifier.notify("STOPPING=1");
    finish(r)
}
