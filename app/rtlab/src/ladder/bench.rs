//! The child `rtcat bench` of one run: its command line, starting it, waiting for it (with the
//! signal forwarding and the overrun guard), and its error message.

use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use safefs::Dir;

use super::StageId;
use super::plan::{Bus, Plan};
use super::progress::Progress;
use crate::interrupt::Interrupt;

impl Plan {
    /// The flags that make a bench run the stage's scheduling.
    pub(super) fn bench_flags(&self, stage: StageId) -> Vec<String> {
        if stage.rt() {
            vec![
                "--cpu".into(),
                self.rt_cpu.to_string(),
                "--priority".into(),
                self.priority.to_string(),
            ]
        } else {
            vec!["--no-rt".into()]
        }
    }

    /// `exe bench ...` writing its results into `dir`.
    pub(super) fn bench_command(&self, exe: &Path, stage: StageId, dir: &Path) -> Command {
        let mut args: Vec<OsString> = vec!["bench".into()];
        match &self.bus {
            Bus::Sim => args.push("--sim".into()),
            Bus::Iface(i) => args.extend(["--iface".into(), i.into()]),
        }
        if let Some(c) = &self.config {
            args.extend(["--config".into(), c.into()]);
        }
        args.extend([
            "--duration".into(),
            format!("{}", self.duration).into(),
            "--stage".into(),
            stage.id().into(),
            "--json".into(),
            dir.join(rtcat_results::SUMMARY_FILE).into(),
            "--out".into(),
            dir.into(),
        ]);
        args.extend(self.bench_flags(stage).into_iter().map(OsString::from));
        let mut cmd = Command::new(exe);
        cmd.args(args);
        cmd
    }
}

/// Starts `cmd` in its own process group (a terminal's Ctrl-C reaches only the ladder, which
/// forwards it) with stdout and stderr into `log`; the child gets SIGTERM if the ladder dies.
pub(super) fn spawn(cmd: &mut Command, log: fs::File) -> Result<Child> {
    let log2 = log.try_clone()?;
    crate::child::spawn_in_group(cmd, Stdio::from(log), Stdio::from(log2))
        .context("cannot start rtcat bench")
}

pub(super) fn kill_group(child: &Child, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), sig);
}

/// The bench child's end.
pub(super) struct BenchEnd {
    pub exit: Option<i32>,
    pub signal_seen: bool,
    pub killed: bool,
}

/// Waits for the bench child, forwarding the first SIGINT/SIGTERM as SIGINT (the bench writes its
/// results and exits) and killing it on the second one, or when it overruns by far.
pub(super) fn wait(
    child: &mut Child,
    plan: &Plan,
    stop: &dyn Interrupt,
    prog: &Progress,
    stage: StageId,
    run: u32,
) -> Result<BenchEnd> {
    let t0 = Instant::now();
    let limit = Duration::from_secs_f64(plan.duration + 60.0 + plan.duration * 0.5);
    let mut forwarded = false;
    let mut killed = false;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(BenchEnd {
                exit: st.code(),
                signal_seen: stop.count() > 0,
                killed,
            });
        }
        let n = stop.count();
        if n >= 1 && !forwarded {
            kill_group(child, nix::sys::signal::Signal::SIGINT);
            forwarded = true;
        }
        if (n >= 2 || t0.elapsed() > limit + Duration::from_secs(10)) && !killed {
            kill_group(child, nix::sys::signal::Signal::SIGKILL);
            killed = true;
        } else if t0.elapsed() > limit && !forwarded {
            // hung (e.g. a stuck bus): ask it to stop and write what it has
            kill_group(child, nix::sys::signal::Signal::SIGTERM);
            forwarded = true;
        }
        prog.tick(stage, run, plan.runs, t0.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last `rtcat: ...` line of a bench log (its error message).
pub(super) fn last_error(run: &Dir) -> Option<String> {
    let bytes = run.read_bounded("bench.log", 16 << 20).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .rev()
        .find(|l| l.starts_with("rtcat:"))
        .map(|l| l.trim_start_matches("rtcat:").trim().to_string())
}
