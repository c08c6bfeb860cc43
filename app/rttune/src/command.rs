//! The `rtcat doctor` / `rtcat tune` commands: their options ([`DoctorOptions`],
//! [`TuneOptions`], plain structs: the command-line flags are the `rtcat` binary's), running them,
//! and what their errors mean for the exit code.

use crate::config::{DEFAULT_STATE_FILE, RtContext};
use crate::cpuset::CpuSet;
use crate::doctor::{self, Doctor};
use crate::host::{Coalesce, FileCaps, Host, RealHost, ServiceStart, ServiceStop};
use crate::journal::{JournalError, StateFile};
use crate::sysroot::SysRoot;
use crate::tune::{self, KnobGroup, TuneCtx};
use std::io;
use std::path::{Path, PathBuf};

/// `rtcat doctor [--cpu N] [--iface IF] [--config FILE] [--json]`
#[derive(Clone, Debug)]
pub struct DoctorOptions {
    /// RT CPU (default: `[cycle].cpu`, else the isolated CPUs)
    pub cpu: Option<usize>,
    /// EtherCAT NIC (default: `[bus].interface`)
    pub iface: Option<String>,
    /// rtcat config file (`[cycle].cpu`, `[bus].interface`, `[tune]`)
    pub config: Option<PathBuf>,
    /// Print the report as JSON (schema rttune.doctor/1)
    pub json: bool,
    /// Root of the tree to inspect (`/`, or a fake tree in tests)
    pub root: PathBuf,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        Self {
            cpu: None,
            iface: None,
            config: None,
            json: false,
            root: PathBuf::from("/"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub action: TuneAction,
    /// RT CPU (default: `[cycle].cpu`)
    pub cpu: Option<usize>,
    /// Housekeeping CPUs, e.g. 0-5,7 (default: `[tune].housekeeping_cpus`, else all but the RT CPU)
    pub housekeeping: Option<String>,
    /// EtherCAT NIC (default: `[bus].interface`)
    pub iface: Option<String>,
    /// rtcat config file
    pub config: Option<PathBuf>,
    /// Knob groups to act on (repeatable; default: all)
    pub groups: Vec<KnobGroup>,
    /// Tune state journal (default: `[tune].state_file`, else /var/lib/rtcat-tune/tune-state.json)
    pub state: Option<PathBuf>,
    /// Print the result as JSON
    pub json: bool,
    /// Root of the tree to tune (`/`, or a fake tree in tests)
    pub root: PathBuf,
}

impl TuneOptions {
    /// `action` with every option at its default (the root `/`).
    pub fn new(action: TuneAction) -> Self {
        Self {
            action,
            cpu: None,
            housekeeping: None,
            iface: None,
            config: None,
            groups: Vec::new(),
            state: None,
            json: false,
            root: PathBuf::from("/"),
        }
    }
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
    fn start_service(&self, _: &SysRoot, _: &ServiceStart) -> io::Result<()> {
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
    fn rauc_status(&self) -> io::Result<Option<String>> {
        Err(not_live())
    }
}

/// stdout could not be written (other than a closed pipe): a runtime failure, exit 1.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the report to stdout")]
pub struct OutputError(#[source] pub io::Error);

/// Why `rtcat doctor` / `rtcat tune` ended without a report, by kind; the exit code follows the
/// kind ([`CommandError::exit_code`]). Knob failures are not errors: they are in the report.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Bad input: a flag or its value, the configuration, the tree (`--root`, an offline CPU), a
    /// journal refused for what it is or where it lies. Exit 2.
    #[error("{0:#}")]
    Usage(anyhow::Error),
    /// A runtime failure: a journal that cannot be read or written, stdout. Exit 1.
    #[error("{0:#}")]
    Failed(anyhow::Error),
}

impl CommandError {
    /// Bad input rather than a runtime failure.
    pub fn is_usage(&self) -> bool {
        matches!(self, CommandError::Usage(_))
    }

    /// 2 for bad input, 1 for a runtime failure.
    pub fn exit_code(&self) -> u8 {
        if self.is_usage() { 2 } else { 1 }
    }

    /// An error out of the tune phases (plan, apply, restore, status): a journal error by its
    /// kind ([`JournalError::is_refusal`]), stdout a runtime failure; what else they refuse (a
    /// tree without a boot id, a CPU that is not online) is the input's fault.
    pub fn classify(e: anyhow::Error) -> Self {
        if is_runtime(&e) {
            CommandError::Failed(e)
        } else {
            CommandError::Usage(e)
        }
    }
}

impl From<JournalError> for CommandError {
    fn from(e: JournalError) -> Self {
        Self::classify(e.into())
    }
}

impl From<OutputError> for CommandError {
    fn from(e: OutputError) -> Self {
        CommandError::Failed(e.into())
    }
}

impl From<serde_json::Error> for CommandError {
    fn from(e: serde_json::Error) -> Self {
        CommandError::Failed(anyhow::Error::new(e).context("cannot encode the JSON report"))
    }
}

/// Exit code for an error out of the tune phases (see [`CommandError::classify`]).
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    if is_runtime(e) { 1 } else { 2 }
}

fn is_runtime(e: &anyhow::Error) -> bool {
    match e.downcast_ref::<JournalError>() {
        Some(j) => !j.is_refusal(),
        None => e.downcast_ref::<OutputError>().is_some(),
    }
}

fn input(e: impl Into<anyhow::Error>) -> CommandError {
    CommandError::Usage(e.into())
}

/// Write a report to stdout. A closed pipe (`| head`) is not an error: the reader took what it
/// wanted, and apply/restore (which keep SIGPIPE ignored) have done their work by now.
pub fn emit(text: &str) -> Result<(), OutputError> {
    use std::io::Write;
    let mut o = io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(OutputError(e)),
    }
}

fn check_iface(iface: Option<&String>) -> anyhow::Result<()> {
    if let Some(i) = iface {
        crate::netif::check_name(i).map_err(|m| anyhow::anyhow!("--iface/[bus].interface: {m}"))?;
    }
    Ok(())
}

/// `--cpu N` must be an online CPU whatever the command does with it.
fn check_cpu_flag(root: &SysRoot, cpu: Option<usize>) -> anyhow::Result<()> {
    let Some(c) = cpu else { return Ok(()) };
    let online = crate::facts::online_cpus(root);
    if c >= crate::cpuset::MAX_CPUS || (!online.is_empty() && !online.contains(c)) {
        anyhow::bail!("--cpu: RT CPU {c} is not online (online: {online})");
    }
    Ok(())
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
pub fn run_doctor(args: &DoctorOptions, ctx: &RtContext) -> Result<i32, CommandError> {
    ctx.tune.validate().map_err(input)?;
    let root = open_root(&args.root).map_err(input)?;
    check_cpu_flag(&root, args.cpu).map_err(input)?;
    let rt = resolve_rt(&root, args.cpu, ctx, true).map_err(input)?;
    let iface = args.iface.clone().or_else(|| ctx.iface.clone());
    check_iface(iface.as_ref()).map_err(input)?;
    // only used to tell refused (kernel-managed) IRQs; a journal that is not trusted or is of
    // another boot tells nothing
    let journal = StateFile::at(state_path(&root, None, ctx))
        .load(&root)
        .ok()
        .flatten()
        .filter(|j| j.same_boot(&root));
    let d = Doctor {
        root: &root,
        host: host_for(&root),
        rt,
        iface,
        tune: ctx.tune.clone(),
        journal,
        wait: ctx.wait,
        priority: ctx.priority,
    };
    // it refuses only what it was given (no RT CPU, an offline one)
    let r = doctor::run(&d).map_err(input)?;
    if args.json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&r)?))?;
    } else {
        emit(&r.to_text())?;
    }
    Ok(r.exit_code())
}

/// Run `rtcat tune ACTION`; returns the exit code.
pub fn run_tune(args: &TuneOptions, ctx: &RtContext) -> Result<i32, CommandError> {
    ctx.tune.validate().map_err(input)?;
    let root = open_root(&args.root).map_err(input)?;
    check_cpu_flag(&root, args.cpu).map_err(input)?;
    check_iface(args.iface.as_ref()).map_err(input)?;
    let host = host_for(&root);
    let state = StateFile::at(state_path(&root, args.state.as_deref(), ctx));
    let groups = if args.groups.is_empty() {
        KnobGroup::all()
    } else {
        args.groups.clone()
    };
    let out = if args.action == TuneAction::Restore {
        let sel = (!args.groups.is_empty()).then_some(groups.as_slice());
        tune::restore(&root, host, sel, &state).map_err(CommandError::classify)?
    } else {
        let rt = match resolve_rt(&root, args.cpu, ctx, false) {
            Ok(rt) => rt,
            // status of an applied state works without --cpu: the journal knows the RT CPU
            Err(e) => match (args.action, state.load(&root)?) {
                (TuneAction::Status, Some(j)) => {
                    CpuSet::parse_list(&j.rt_cpus).map_err(|_| input(e))?
                }
                _ => return Err(input(e)),
            },
        };
        let hk = match &args.housekeeping {
            Some(s) => Some(
                CpuSet::parse_list(s).map_err(|e| input(anyhow::anyhow!("--housekeeping: {e}")))?,
            ),
            None => ctx.tune.housekeeping().map_err(input)?,
        };
        let iface = args.iface.clone().or_else(|| ctx.iface.clone());
        let tc = TuneCtx::new(&root, rt, hk, iface, ctx.tune.clone()).map_err(input)?;
        match args.action {
            TuneAction::Apply => {
                tune::apply(&root, &tc, host, &groups, &state).map_err(CommandError::classify)?
            }
            TuneAction::Status => {
                tune::status(&root, &tc, host, &groups, &state).map_err(CommandError::classify)?
            }
            _ => {
                let j = state.load(&root)?.filter(|j| j.same_boot(&root));
                tune::plan(&root, &tc, host, &groups, j.as_ref()).to_outcome(state.path())
            }
        }
    };
    if args.json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&out)?))?;
    } else {
        emit(&out.to_text())?;
    }
    Ok(out.exit_code())
}
