//! A complete controller on rtcat-master: a conveyor that runs while its part sensor is clear,
//! counts the parts that pass, and stops the motor on any bad cycle until the segment has been
//! healthy again for a while.
//!
//! ```text
//! cargo run -p rtcat-master --features sim --example controller -- \
//!     --sim --segment examples/segment-io.toml --seconds 5
//! sudo target/debug/examples/controller --iface ecat0 --config examples/coe/rtcat.toml
//! ```
//!
//! Options: `--iface IF` or `--sim [--segment FILE]` (needs the `sim` feature), `--config FILE`
//! (the master's sections of an rtcat.toml: cycle period, CPU, priority…; the `rtcat` binary's
//! own sections, such as `[output]` or `[control]`, are not the library's and are refused),
//! `--seconds N` (default: until SIGINT/SIGTERM),
//! `--sensor ENTRY` / `--motor ENTRY` (entry names, default `Channel 1.Input` and
//! `Channel 1.Output`, as an EL1008 and an EL2008 name them), `--no-rt`, and for the simulator
//! `--fault-at CYCLE --fault "drop-next 5"` to see the reaction to bad cycles.
//!
//! It prints one line at the end: `controller: cycles=… parts=… bad_cycles=… stopped_cycles=…
//! recoveries=… exec_p99_us=…`.

use rtcat_master::{
    AppError, Application, Config, Cycle, Input, Output, Recovery, RunSpec, Setup, ShutdownReason,
    Stop, StopFlags, Target,
};
use std::process::ExitCode;
use std::time::Duration;

/// Good cycles the segment must have in a row before the motor may run again after a bad one.
const REARM_CYCLES: u32 = 100;

/// The machine's logic. Everything the cycle touches is resolved and allocated in `configure`.
struct Conveyor {
    sensor_name: String,
    motor_name: String,
    io: Option<(Input<bool>, Output<bool>)>,
    last_sensor: bool,
    parts: u64,
    bad_cycles: u64,
    stopped_cycles: u64,
    good_in_a_row: u32,
    #[cfg(feature = "sim")]
    fault: Option<(u64, ecsim::FaultCommand, ecsim::Faults)>,
}

impl Application for Conveyor {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        // At every (re)initialisation: the layout may differ after a recovery (a replaced
        // terminal), so the entries are resolved again. A missing or ambiguous name refuses the
        // segment with the names it has.
        self.io = Some((
            setup.input(&self.sensor_name)?,
            setup.output(&self.motor_name)?,
        ));
        self.good_in_a_row = 0;
        Ok(())
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let Some((sensor, motor)) = self.io else {
            return;
        };
        #[cfg(feature = "sim")]
        if let Some((at, _, _)) = &self.fault
            // `>=`: cycle numbers skip the periods a late cycle missed, the fault's among them.
            && cx.status.cycle >= *at
            && let Some((_, cmd, faults)) = self.fault.take()
        {
            faults.apply(cmd);
        }
        if !cx.status.is_good() {
            // Inputs may be stale and the outputs may not have arrived: stop the motor now and
            // only restart after the segment has been healthy for REARM_CYCLES.
            self.bad_cycles += 1;
            self.good_in_a_row = 0;
        } else {
            self.good_in_a_row = self.good_in_a_row.saturating_add(1);
            let part = cx.get(&sensor);
            if part && !self.last_sensor {
                self.parts += 1;
            }
            self.last_sensor = part;
        }
        let run = self.good_in_a_row >= REARM_CYCLES && !self.last_sensor;
        if self.good_in_a_row < REARM_CYCLES {
            self.stopped_cycles += 1;
        }
        cx.set(&motor, run);
    }

    fn on_recovery(&mut self, r: &Recovery) {
        // Off the real-time thread: printing is fine here.
        eprintln!(
            "controller: segment re-initialised after {} bad cycles ({:?})",
            r.bad_cycles, r.cause
        );
    }

    fn shutdown(&mut self, reason: &ShutdownReason) {
        eprintln!("controller: stopping ({reason:?}); the master zeroes every output");
    }
}

static STOP: StopFlags = StopFlags::new();

extern "C" fn on_signal(sig: i32) {
    STOP.signalled(sig);
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("controller: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut iface = None;
    let mut sim = false;
    let mut segment = None;
    let mut config = None;
    let mut seconds = None;
    let mut no_rt = false;
    let mut sensor = "Channel 1.Input".to_string();
    let mut motor = "Channel 1.Output".to_string();
    let mut fault_at: Option<u64> = None;
    let mut fault: Option<String> = None;
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        let r: Result<(), String> = (|| {
            match a.as_str() {
                "--iface" => iface = Some(value("--iface")?),
                "--sim" => sim = true,
                "--segment" => segment = Some(value("--segment")?),
                "--config" => config = Some(value("--config")?),
                "--seconds" => {
                    let v = value("--seconds")?;
                    seconds = Some(
                        v.parse::<f64>()
                            .ok()
                            .filter(|s| *s > 0.0 && *s < 1e7)
                            .ok_or(format!("--seconds {v}: not a positive number"))?,
                    );
                }
                "--no-rt" => no_rt = true,
                "--sensor" => sensor = value("--sensor")?,
                "--motor" => motor = value("--motor")?,
                "--fault-at" => {
                    let v = value("--fault-at")?;
                    fault_at = Some(
                        v.parse()
                            .map_err(|_| format!("--fault-at {v}: not a cycle number"))?,
                    );
                }
                "--fault" => fault = Some(value("--fault")?),
                other => return Err(format!("unknown argument {other:?}")),
            }
            Ok(())
        })();
        if let Err(e) = r {
            return usage(&e);
        }
    }
    let cfg = match &config {
        Some(p) => match Config::load(std::path::Path::new(p)) {
            Ok(c) => c,
            Err(e) => return usage(&e.to_string()),
        },
        None => Config::default(),
    };
    let mut app = Conveyor {
        sensor_name: sensor,
        motor_name: motor,
        io: None,
        last_sensor: false,
        parts: 0,
        bad_cycles: 0,
        stopped_cycles: 0,
        good_in_a_row: 0,
        #[cfg(feature = "sim")]
        fault: None,
    };
    let target = match (iface, sim) {
        (Some(i), false) => Target::Iface(i),
        #[cfg(feature = "sim")]
        (None, true) => {
            let spec = match &segment {
                Some(p) => match ecsim::SegmentSpec::load(std::path::Path::new(p)) {
                    Ok(s) => s,
                    Err(e) => return usage(&format!("--segment {p}: {e}")),
                },
                None => ecsim::SegmentSpec::reference(),
            };
            let faults = ecsim::Faults::new();
            if let (Some(at), Some(f)) = (fault_at, &fault) {
                match ecsim::FaultCommand::parse_for(f, spec.devices.len()) {
                    Ok(cmd) => app.fault = Some((at, cmd, faults.clone())),
                    Err(e) => return usage(&format!("--fault {f:?}: {e}")),
                }
            }
            Target::Sim { spec, faults }
        }
        #[cfg(not(feature = "sim"))]
        (None, true) => return usage("--sim needs the example built with --features sim"),
        _ => return usage("give --iface IF or --sim"),
    };
    #[cfg(not(feature = "sim"))]
    let _ = (segment, fault_at, fault);

    let handler = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_signal),
        nix::sys::signal::SaFlags::empty(),
        nix::sys::signal::SigSet::empty(),
    );
    for s in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        // SAFETY: the handler only stores to atomics.
        let _ = unsafe { nix::sys::signal::sigaction(s, &handler) };
    }
    let mut spec = RunSpec::new(cfg, target, Stop::from_static(&STOP));
    spec.no_rt = no_rt;
    spec.duration = seconds.map(Duration::from_secs_f64);
    match rtcat_master::run_simple(spec, &mut app) {
        Ok(out) => {
            println!(
                "controller: cycles={} parts={} bad_cycles={} stopped_cycles={} recoveries={} \
                 missed_deadlines={} exec_p99_us={:.1}",
                out.rec.cycles,
                app.parts,
                app.bad_cycles,
                app.stopped_cycles,
                out.rec.recoveries,
                out.rec.missed_deadlines,
                out.rec.exec.value_at_quantile(0.99) as f64 / 1e3
            );
            match out.fatal {
                Some(f) => {
                    eprintln!("controller: {f}");
                    ExitCode::from(1)
                }
                None => ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            eprintln!("controller: {e}");
            ExitCode::from(if e.is_usage() { 2 } else { 1 })
        }
    }
}
