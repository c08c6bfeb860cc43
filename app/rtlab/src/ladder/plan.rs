//! What the user asked for ([`LadderOptions`]), checked and resolved into a plan before
//! anything is touched: the stages, the RT CPU, the load CPUs, the tune context and the results
//! directory (created last, and opened once).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rttune::journal::StateFile;
use rttune::tune::TuneCtx;
use rttune::{CpuSet, RtContext, SysRoot};
use safefs::Dir;
use serde::Serialize;

use super::{JOURNAL_FILE, LadderError, MAX_RUN_S, MAX_RUNS, StageId};
use crate::cpus::{format_cpu_list, usable_cpus};

/// Coalescing of stage s3 when `[tune.coalesce]` is empty: the reference study's values (docs/NOTES.md §3).
pub const SEED_COALESCE: rttune::CoalesceConfig = rttune::CoalesceConfig {
    tx_usecs: Some(0),
    tx_frames: Some(25),
    rx_usecs: None,
    rx_frames: Some(1),
};

/// `rtcat ladder`'s options (the command line's, or any caller's).
#[derive(Debug, Clone)]
pub struct LadderOptions {
    /// Stages to run, in this order (none twice).
    pub stages: Vec<StageId>,
    /// Run the reference load mix on every usable CPU but the RT CPU during each run.
    pub loaded: bool,
    /// Runs per stage, 1..=[`MAX_RUNS`].
    pub runs: u32,
    /// Seconds of measurement per run, in (0, [`MAX_RUN_S`]].
    pub duration: f64,
    /// Measure on the in-process simulated segment (no NIC; stage s3 is N/A).
    pub sim: bool,
    /// EtherCAT interface (default: `[bus].interface`).
    pub iface: Option<String>,
    /// rtcat configuration file, also handed to every bench run.
    pub config: Option<PathBuf>,
    /// Results directory; must not exist (the ladder creates it).
    pub out: PathBuf,
    /// RT CPU (default: `[cycle].cpu`, else the last CPU this process may use).
    pub cpu: Option<usize>,
    /// Write `plots/`.
    pub plots: bool,
    /// Root of the tree to tune (`/`, or a fake tree in tests).
    pub root: PathBuf,
}

/// What the ladder takes from an rtcat configuration file.
#[derive(Debug, Clone, Default)]
pub struct LadderConfig {
    /// `[cycle].cpu`, `[bus].interface` and `[tune]`.
    pub rt: RtContext,
    /// `[cycle].txrx_cpu`: not loaded either.
    pub txrx_cpu: Option<usize>,
    /// `[cycle].priority` of the pinned stages.
    pub priority: u8,
}

/// What the ladder needs from the program it runs in (the `rtcat` binary, which owns the
/// configuration format and the system snapshot `rtcat bench` records).
pub trait Env {
    /// The configuration in `path` (`None`: the built-in defaults); the error names the key.
    fn config(&self, path: Option<&Path>) -> Result<LadderConfig, String>;
    /// The system as found, read the way `rtcat bench` reads it, for `manifest.json`.
    fn system(&self, rt_cpu: usize) -> rtcat_results::SystemInfo;
}

/// Bus of the runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "mode", content = "interface")]
pub enum Bus {
    Sim,
    Iface(String),
}

/// Everything a ladder needs, resolved and validated before anything is touched.
pub(super) struct Plan {
    pub stages: Vec<StageId>,
    pub runs: u32,
    pub duration: f64,
    pub bus: Bus,
    pub config: Option<PathBuf>,
    pub out: PathBuf,
    /// `out`, created by `resolve` and opened once: everything the ladder writes or reads there.
    pub dir: Arc<Dir>,
    pub rt_cpu: usize,
    pub priority: u8,
    pub load_cpus: Option<Vec<usize>>,
    pub root: SysRoot,
    pub tune: Option<TuneCtx>,
    pub notes: Vec<String>,
    pub plots: bool,
}

impl Plan {
    /// The tune journal, through the directory handle.
    pub fn journal(&self) -> StateFile {
        StateFile::in_dir(self.dir.clone(), JOURNAL_FILE)
    }
}

fn usage<T>(msg: impl Into<String>) -> Result<T, LadderError> {
    Err(LadderError::Usage(msg.into()))
}

pub(super) fn resolve(a: &LadderOptions, env: &dyn Env) -> Result<Plan, LadderError> {
    let mut notes = Vec::new();
    if a.stages.is_empty() {
        return usage("--stages: empty list");
    }
    for (i, s) in a.stages.iter().enumerate() {
        if a.stages[..i].contains(s) {
            return usage(format!("--stages: {} listed twice", s.id()));
        }
    }
    if !(1..=MAX_RUNS).contains(&a.runs) {
        return usage(format!("--runs: {} is not in 1..={MAX_RUNS}", a.runs));
    }
    if !(a.duration.is_finite() && a.duration > 0.0 && a.duration <= MAX_RUN_S) {
        return usage(format!(
            "--duration: {} s: must be > 0 and at most {MAX_RUN_S} s",
            a.duration
        ));
    }
    let cfg = env
        .config(a.config.as_deref())
        .map_err(LadderError::Usage)?;
    let bus = match (&a.iface, a.sim) {
        (_, true) => Bus::Sim,
        (Some(i), false) => Bus::Iface(i.clone()),
        (None, false) => Bus::Iface(cfg.rt.iface.clone().unwrap_or_default()),
    };
    if let Bus::Iface(i) = &bus
        && let Err(m) = rttune::netif::check_name(i)
    {
        let from = if a.iface.is_some() {
            "--iface"
        } else {
            "[bus].interface"
        };
        return usage(format!("{from}: {m}"));
    }
    let usable = usable_cpus().map_err(|e| {
        LadderError::Usage(format!("cannot read the CPUs this process may use: {e:#}"))
    })?;
    let rt_cpu = match a.cpu.or(cfg.rt.rt_cpu) {
        Some(c) => c,
        None => *usable
            .last()
            .ok_or_else(|| LadderError::Usage("no usable CPU found".into()))?,
    };
    if !usable.contains(&rt_cpu) {
        let from = if a.cpu.is_some() {
            "--cpu"
        } else {
            "[cycle].cpu"
        };
        return usage(format!(
            "{from}: CPU {rt_cpu} is not online or not allowed for this process (usable: {})",
            format_cpu_list(&usable)
        ));
    }
    let load_cpus = if a.loaded {
        let cpus: Vec<usize> = usable
            .iter()
            .copied()
            .filter(|c| *c != rt_cpu && Some(*c) != cfg.txrx_cpu)
            .collect();
        if cpus.is_empty() {
            return usage(format!(
                "--loaded: no CPU left for the load besides the RT CPU {rt_cpu} (usable: {})",
                format_cpu_list(&usable)
            ));
        }
        Some(cpus)
    } else {
        None
    };
    if !a.root.is_dir() {
        return usage(format!("--root: {} is not a directory", a.root.display()));
    }
    let root = SysRoot::new(&a.root);
    let needs_tune = a.stages.iter().any(|s| !s.groups().is_empty());
    let tune = if needs_tune {
        let mut section = cfg.rt.tune.clone();
        if a.stages.iter().any(|s| *s >= StageId::S3) && section.coalesce.is_empty() {
            section.coalesce = SEED_COALESCE;
            notes.push(
                "[tune.coalesce] is not configured: stage s3 uses the reference study's values \
                 (tx-usecs 0, tx-frames 25, rx-frames 1)"
                    .into(),
            );
        }
        let hk = section
            .housekeeping()
            .map_err(|e| LadderError::Usage(e.to_string()))?;
        let iface = match &bus {
            Bus::Sim => None,
            Bus::Iface(i) => Some(i.clone()),
        };
        Some(
            TuneCtx::new(&root, CpuSet::single(rt_cpu), hk, iface, section)
                .map_err(|e| LadderError::Usage(format!("{e:#}")))?,
        )
    } else {
        None
    };
    // a shield applied outside the ladder would make every stage "tuned"
    let sys_state = rttune::command::state_path(&root, None, &cfg.rt);
    match StateFile::at(&sys_state).load(&root) {
        Ok(Some(j))
            if j.same_boot(&root)
                && j.entries
                    .iter()
                    .any(|e| !matches!(e.state, rttune::journal::EntryState::Refused { .. })) =>
        {
            notes.push(format!(
                "WARNING: `rtcat tune apply` is in effect on this system ({} knob(s) in {}): the \
                 lower stages are not plain; run `rtcat tune restore` first for a true ladder",
                j.entries.len(),
                sys_state.display()
            ));
        }
        Ok(_) => {}
        Err(e) => notes.push(format!(
            "WARNING: cannot tell whether `rtcat tune apply` is in effect on this system: {e}"
        )),
    }
    let out = a.out.clone();
    // never reused, even empty: a directory someone else made could be theirs to swap
    let taken = || {
        let empty = out.is_dir()
            && fs::read_dir(&out)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
        LadderError::Usage(if empty {
            format!(
                "--out: {} already exists; a ladder creates its results directory itself \
                 (it keeps the tune journal there) and never uses an existing one, even empty",
                out.display()
            )
        } else {
            format!(
                "--out: {} exists and is not an empty directory (a ladder never overwrites results)",
                out.display()
            )
        })
    };
    if fs::symlink_metadata(&out).is_ok() {
        return Err(taken());
    }
    // last: nothing is created unless every argument is good
    let dir = match Dir::create_new(&out, 0o755) {
        Ok(d) => Arc::new(d),
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::AlreadyExists) => return Err(taken()),
        Err(e) => return usage(format!("--out: cannot create {}: {e}", out.display())),
    };
    Ok(Plan {
        stages: a.stages.clone(),
        runs: a.runs,
        duration: a.duration,
        bus,
        config: a.config.clone(),
        out,
        dir,
        rt_cpu,
        priority: cfg.priority,
        load_cpus,
        root,
        tune,
        notes,
        plots: a.plots,
    })
}
