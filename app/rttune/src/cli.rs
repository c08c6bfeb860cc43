//! The `rtcat doctor` / `rtcat tune` command-line interface (wired into the rtcat binary).

use crate::config::{DEFAULT_STATE_FILE, RtContext};
use crate::cpuset::CpuSet;
use crate::doctor::{self, Doctor};
use crate::host::{Coalesce, FileCaps, Host, RealHost, ServiceStop};
use crate::journal::Journal;
use crate::sysroot::SysRoot;
use crate::tune::{self, KnobGroup, TuneCtx};
use std::io;
use std::path::{Path, PathBuf};

/// `rtcat doctor [--cpu N] [--iface IF] [--config FILE] [--json]`
#[derive(Clone, Debug, Default, clap::Args)]
pub struct DoctorArgs {
    /// RT CPU (default: [cycle].cpu, else the isolated CPUs)
    #[arg(long, value_name = "N")]
    pub cpu: Option<usize>,
    /// EtherCAT NIC (default: [bus].interface)
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// rtcat config file ([cycle].cpu, [bus].interface, [tune])
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the report as JSON (schema rttune.doctor/1)
    #[arg(long)]
    pub json: bool,
    /// Root of the tree to inspect (fake trees in tests)
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TuneAction {
    /// Apply the runtime shield (journalled)
    Apply,
    /// Put back exactly what apply changed
    Restore,
    /// Show what is applied
    Status,
    /// Show what apply would change, change nothing
    Plan,
}

/// `rtcat tune apply|restore|status|plan [--cpu N] [--housekeeping CPUS] [--iface IF] [--config FILE]`
#[derive(Clone, Debug, clap::Args)]
pub struct TuneArgs {
    #[arg(value_enum)]
    pub action: TuneAction,
    /// RT CPU (default: [cycle].cpu)
    #[arg(long, value_name = "N")]
    pub cpu: Option<usize>,
    /// Housekeeping CPUs, e.g. 0-5,7 (default: [tune].housekeeping_cpus, else all but the RT CPU)
    #[arg(long, value_name = "CPUS")]
    pub housekeeping: Option<String>,
    /// EtherCAT NIC (default: [bus].interface)
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// rtcat config file
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Knob groups to act on (repeatable; default: all)
    #[arg(long = "group", value_enum, value_name = "GROUP")]
    pub groups: Vec<KnobGroup>,
    /// Tune state journal (default: [tune].state_file, else /var/lib/rtcat-tune/tune-state.json)
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
    /// Root of the tree to tune (fake trees in tests)
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// Stand-in for a fake `--root`: non-file operations are not available there.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHost;

fn not_live() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "not available on a fake --root")
}

impl Host for NoHost {
    fn stop_service(&self, _: &SysRoot, _: &ServiceStop) -> io::Result<()> {
        Err(not_live())
    }
    fn start_service(&self, _: &SysRoot, _: &ServiceStop) -> io::Result<()> {
        Err(not_live())
    }
    fn get_coalesce(&self, _: &str) -> io::Result<Coalesce> {
        Err(not_live())
    }
    fn set_coalesce(&self, _: &str, _: &Coalesce) -> io::Result<()> {
        Err(not_live())
    }
    fn set_affinity(&self, _: u32, _: &CpuSet) -> io::Result<()> {
        Err(not_live())
    }
    fn file_caps(&self, _: &SysRoot, _: &str) -> io::Result<Option<FileCaps>> {
        Err(not_live())
    }
}

fn open_root(p: &Path) -> anyhow::Result<SysRoot> {
    if !p.is_dir() {
        anyhow::bail!("--root: {} is not a directory", p.display());
    }
    Ok(SysRoot::new(p))
}

fn host_for(root: &SysRoot) -> &'static dyn Host {
    if root.is_live() { &RealHost } else { &NoHost }
}

/// Journal path: `--state` as given; `[tune].state_file` / the default resolved under the root.
pub fn state_path(root: &SysRoot, explicit: Option<&Path>, ctx: &RtContext) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    let p = ctx
        .tune
        .state_file
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_FILE));
    root.path(&p.to_string_lossy())
}

/// RT CPU set from the flag, the config, or (doctor only) what the kernel isolated.
fn resolve_rt(
    root: &SysRoot,
    cpu: Option<usize>,
    ctx: &RtContext,
    infer: bool,
) -> anyhow::Result<CpuSet> {
    if let Some(c) = cpu.or(ctx.rt_cpu) {
        return Ok(CpuSet::single(c));
    }
    if infer
        && let Some(iso) = root
            .read_opt("/sys/devices/system/cpu/isolated")
            .and_then(|s| CpuSet::parse_list(&s).ok())
            .filter(|s| !s.is_empty())
    {
        return Ok(iso);
    }
    anyhow::bail!("no RT CPU: pass --cpu N or set [cycle].cpu in the config")
}

/// Run `rtcat doctor`; returns the exit code (1 when any check FAILs).
pub fn run_doctor(args: &DoctorArgs, ctx: &RtContext) -> anyhow::Result<i32> {
    ctx.tune.validate()?;
    let root = open_root(&args.root)?;
    let rt = resolve_rt(&root, args.cpu, ctx, true)?;
    let iface = args.iface.clone().or_else(|| ctx.iface.clone());
    if let Some(i) = &iface
        && !crate::netif::valid_name(i)
    {
        anyhow::bail!("--iface: {i:?} is not an interface name");
    }
    let journal = Journal::load(&state_path(&root, None, ctx)).ok().flatten();
    let d = Doctor {
        root: &root,
        host: host_for(&root),
        rt,
        iface,
        tune: ctx.tune.clone(),
        journal,
    };
    let r = doctor::run(&d)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", r.to_text());
    }
    Ok(r.exit_code())
}

/// Run `rtcat tune ACTION`; returns the exit code.
pub fn run_tune(args: &TuneArgs, ctx: &RtContext) -> anyhow::Result<i32> {
    ctx.tune.validate()?;
    let root = open_root(&args.root)?;
    let host = host_for(&root);
    let state = state_path(&root, args.state.as_deref(), ctx);
    let groups = if args.groups.is_empty() {
        KnobGroup::all()
    } else {
        args.groups.clone()
    };
    let out = if args.action == TuneAction::Restore {
        let sel = (!args.groups.is_empty()).then_some(groups.as_slice());
        tune::restore(&root, host, sel, &state)?
    } else {
        let rt = match resolve_rt(&root, args.cpu, ctx, false) {
            Ok(rt) => rt,
            // status of an applied state works without --cpu: the journal knows the RT CPU
            Err(e) => match (args.action, Journal::load(&state).ok().flatten()) {
                (TuneAction::Status, Some(j)) => CpuSet::parse_list(&j.rt_cpus).map_err(|_| e)?,
                _ => return Err(e),
            },
        };
        let hk = match &args.housekeeping {
            Some(s) => {
                Some(CpuSet::parse_list(s).map_err(|e| anyhow::anyhow!("--housekeeping: {e}"))?)
            }
            None => ctx.tune.housekeeping()?,
        };
        let iface = args.iface.clone().or_else(|| ctx.iface.clone());
        let tc = TuneCtx::new(&root, rt, hk, iface, ctx.tune.clone())?;
        match args.action {
            TuneAction::Apply => tune::apply(&root, &tc, host, &groups, &state)?,
            TuneAction::Status => tune::status(&root, &tc, host, &groups, &state)?,
            _ => {
                let j = Journal::load(&state).ok().flatten();
                tune::plan(&root, &tc, host, &groups, j.as_ref()).to_outcome(&state)
            }
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", out.to_text());
    }
    Ok(out.exit_code())
}
