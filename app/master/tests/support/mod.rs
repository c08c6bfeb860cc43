//! Test support shared by the master's integration tests.

// Each test binary includes this module and uses a part of it.
#![allow(dead_code)]

/// Whether a run failed on a timeout: a bring-up PDU, an EEPROM read, a mailbox or a state
/// change that did not come back in time. The in-process segment answers inside the send, so
/// on this target a timeout is the test machine's scheduling (a starved setup thread), a
/// verdict retried as `ecsim::noise` says; any other error is a defect of the code.
pub fn timed_out(e: &rtcat_master::Error) -> bool {
    use rtcat_master::Error;
    match e {
        Error::Bus { source, .. } => matches!(source, ethercrab::error::Error::Timeout(_)),
        Error::GaveUp { last, .. } => timed_out(last),
        Error::Stopped(inner) => timed_out(inner),
        // An SDO's mailbox timeout: the error names it in its text (rtcat's CoE client says
        // "no answer within N ms").
        Error::Device(d) => {
            let m = d.to_string().to_ascii_lowercase();
            m.contains("timeout") || m.contains("no answer within")
        }
        _ => false,
    }
}

/// Bring-up timeouts for a segment simulated in process, on a loaded machine. The simulator
/// answers inside the send, so a bring-up PDU or EEPROM read that times out says only that the
/// setup thread waited for a CPU longer than the timeout: a nice-19 thread beside a nice-0 hog
/// on each CPU of the test machine (`stress-ng --cpu 2`) waited up to 200 ms between two slices
/// (measured), twice the defaults of 100 ms, and a bring-up failed on them in about one attempt
/// in two. 500 ms: not more, because a frame the simulator drops on purpose during a bring-up
/// (`DropNext` running into a recovery) is waited for that long (2 s made the DC test's
/// recovery outlast its run).
pub fn patient(cfg: &mut rtcat_master::Config) {
    cfg.bus.init_pdu_timeout_ms = 500;
    cfg.bus.init_eeprom_timeout_ms = 500;
}

/// A run inside an attempt (`ecsim::noise::within_machine_noise`): `Err` naming the timeout
/// when it failed on one ([`timed_out`]), a panic on any other error.
pub fn run_attempt(
    spec: rtcat_master::RunSpec,
    app: &mut dyn rtcat_master::Application,
) -> Result<rtcat_master::Outcome, String> {
    match rtcat_master::run_simple(spec, app) {
        Ok(out) => Ok(out),
        Err(e) if timed_out(&e) => Err(format!("run: {e}")),
        Err(e) => panic!("run: {e}"),
    }
}

use rtcat_master::Setup;
use rtcat_master::coe::Port;

/// The ESC registers of `configure` as a CoE client's port: SDOs from inside the bring-up.
pub struct SetupPort<'s, 'a> {
    pub setup: &'s mut Setup<'a>,
    pub position: u16,
}

impl Port for SetupPort<'_, '_> {
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error> {
        self.setup
            .read_register(self.position, register, buf)
            .map_err(|_| ethercrab::error::Error::Internal)
    }

    fn write(&mut self, register: u16, data: &[u8]) -> Result<(), ethercrab::error::Error> {
        self.setup
            .write_register(self.position, register, data)
            .map_err(|_| ethercrab::error::Error::Internal)
    }
}

pub mod aprds;
pub mod coe_example;
pub mod counting;
pub mod line;
pub mod observed;
pub mod readback;
pub mod tool_group;

/// How long this process's threads waited for a CPU while they were runnable, summed (ns): the
/// second field of each `/proc/self/task/*/schedstat` (`run_delay`, the kernel's
/// Documentation/scheduler/sched-stats.rst). None where the kernel does not keep it. Threads
/// that have ended no longer count, so it can only say too little.
pub fn cpu_wait_ns() -> Option<u64> {
    let mut sum = 0u64;
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let Ok(t) = t else { continue };
        let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) else {
            continue;
        };
        sum += s.split_whitespace().nth(1)?.parse::<u64>().ok()?;
    }
    Some(sum)
}

/// What the machine gave a run: the share of its wall time the process's threads spent
/// waiting for a CPU ([`cpu_wait_ns`]), from [`Machine::watch`] on.
pub struct Machine {
    wait0: Option<u64>,
    t0: std::time::Instant,
}

impl Machine {
    /// A share above which the machine, not the code, decided a time bound: a tenth of the run
    /// spent waiting for a CPU (an idle machine: well under 1 %; beside `stress-ng --cpu 2` at
    /// nice 19: several times the run's length, its threads waiting at once).
    pub const BUSY: f64 = 0.1;

    pub fn watch() -> Self {
        Machine {
            wait0: cpu_wait_ns(),
            t0: std::time::Instant::now(),
        }
    }

    /// The share so far; None where it is not known.
    pub fn waited(&self) -> Option<f64> {
        let w = cpu_wait_ns()?.checked_sub(self.wait0?)?;
        Some(w as f64 / self.t0.elapsed().as_nanos().max(1) as f64)
    }

    /// A time bound inside an attempt: `took_ns` within `bound_ns`; when it is not, the
    /// attempt's reason, unless the run waited for a CPU more than [`Self::BUSY`] of its time:
    /// then the machine decided it and it is printed, not judged. Where the waiting is not
    /// known, the bound is judged.
    pub fn within(&self, what: &str, took_ns: u64, bound_ns: u64) -> Result<(), String> {
        if took_ns <= bound_ns {
            return Ok(());
        }
        let why = format!(
            "{what} took {} ms (bound {} ms)",
            took_ns / 1_000_000,
            bound_ns / 1_000_000
        );
        match self.waited() {
            Some(w) if w > Self::BUSY => {
                eprintln!(
                    "{why}: not judged, the run's threads waited for a CPU {:.0} % of its time",
                    w * 100.0
                );
                Ok(())
            }
            w => Err(format!(
                "{why}; the run's threads waited for a CPU {:.1} % of its time",
                w.unwrap_or(f64::NAN) * 100.0
            )),
        }
    }
}
