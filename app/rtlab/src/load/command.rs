//! `rtcat load` on the command line: [`LoadArgs`], their resolution into a [`LoadSpec`] (the CPU
//! set, the RT CPU from the config), and [`run_load`], which runs a load until its duration or a
//! signal.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use clap::Args;
use serde::Deserialize;

use super::{
    Backend, ForkLoad, LoadHandle, LoadReport, LoadSpec, MAX_DURATION_S, MemKind, NetLoad,
    NetProto, TmpfsLoad,
};
use crate::cpus::{format_cpu_list, parse_cpu_list, usable_cpus};
use crate::outfile::say;

/// Default config file that names the RT CPU.
pub const DEFAULT_CONFIG: &str = "/etc/rtcat/rtcat.toml";
/// Largest config file read for the RT CPU (a real one is a few KiB).
pub const CONFIG_LIMIT: u64 = 1 << 20;

/// Arguments of `rtcat load`.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// How long the load runs, in seconds (it always ends by itself)
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub duration: f64,
    /// Number of CPU hog threads (default without any load option: one per chosen CPU, plus
    /// tmpfs and anon churn and fork churn, i.e. the reference load mix)
    #[arg(long, value_name = "N")]
    pub cpu_hogs: Option<usize>,
    /// Memory churn: tmpfs, anon, or both (comma-separated or repeated)
    #[arg(long, value_enum, value_delimiter = ',', value_name = "KIND")]
    pub mem: Vec<MemKind>,
    /// Short-lived process churn: fork, exec `--exec`, exit, reap, in a loop
    #[arg(long)]
    pub fork_churn: bool,
    /// Threads doing fork churn
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub fork_workers: usize,
    /// Program the fork churn executes (no arguments)
    #[arg(long, value_name = "PATH", default_value = "/bin/true")]
    pub exec: PathBuf,
    /// Loopback traffic on 127.0.0.1 (tcp or udp)
    #[arg(long, value_enum, value_name = "PROTO")]
    pub net: Option<NetProto>,
    /// Bound of the loopback traffic in Mbit/s
    #[arg(long, value_name = "MBIT", default_value_t = 100)]
    pub net_mbit: u32,
    /// tmpfs directory for the write churn (a private subdirectory is created and removed)
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub tmpfs_dir: PathBuf,
    /// Most MiB the tmpfs churn holds at any time (at most half of the free space)
    #[arg(long, value_name = "MIB", default_value_t = 32)]
    pub tmpfs_mb: u64,
    /// MiB of anonymous memory churned per pass
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub anon_mb: u64,
    /// CPUs the load may use (cpulist like 0-5,7, or "all"); default: all but --exclude-cpu
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// CPUs the load must not use (the RT CPU); default: [cycle].cpu and txrx_cpu of --config
    #[arg(long, value_name = "LIST")]
    pub exclude_cpu: Option<String>,
    /// rtcat config naming the RT CPU when neither --cpus nor --exclude-cpu is given
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Use stress-ng (if installed) with equivalent options instead of the built-in load
    #[arg(long)]
    pub stress_ng: bool,
    /// Write the load report as JSON to FILE ("-" for stdout)
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<String>,
    /// Print nothing but errors (and the JSON report when asked for)
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Deserialize)]
struct CfgFile {
    cycle: Option<CfgCycle>,
}
#[derive(Deserialize)]
struct CfgCycle {
    cpu: Option<usize>,
    txrx_cpu: Option<usize>,
}

/// RT CPUs named by an rtcat config (`[cycle].cpu` and `[cycle].txrx_cpu`). Other keys are ignored
/// here; `rtcat config check` validates the whole file.
pub fn rt_cpus_from_config(path: &Path) -> Result<Vec<usize>> {
    let text = safefs::read_to_string_bounded(path, CONFIG_LIMIT).map_err(|e| match e {
        safefs::Error::Io { source, .. } => anyhow!("{}: cannot read: {source}", path.display()),
        e => anyhow!("{e}"),
    })?;
    let cfg: CfgFile = toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let c = cfg.cycle.ok_or_else(|| {
        anyhow!(
            "{}: no [cycle] table, so the RT CPU is unknown",
            path.display()
        )
    })?;
    let mut v: Vec<usize> = c.cpu.into_iter().chain(c.txrx_cpu).collect();
    if v.is_empty() {
        bail!(
            "{}: [cycle].cpu is not set, so the RT CPU is unknown",
            path.display()
        );
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

impl LoadArgs {
    /// Resolves the arguments (CPU set, defaults) into a validated spec; errors name the option.
    pub fn to_spec(&self) -> Result<LoadSpec> {
        let usable = usable_cpus()?;
        let cpus = match (&self.cpus, &self.exclude_cpu) {
            (Some(_), Some(_)) => bail!("--cpus and --exclude-cpu: give one of them, not both"),
            (Some(list), None) if list.trim() == "all" => usable.clone(),
            (Some(list), None) => {
                let l = parse_cpu_list(list).map_err(|e| anyhow!("--cpus: {e}"))?;
                if let Some(c) = l.iter().find(|c| !usable.contains(c)) {
                    bail!(
                        "--cpus: CPU {c} is not online or not allowed (usable: {})",
                        format_cpu_list(&usable)
                    );
                }
                l
            }
            (None, excl) => {
                let excluded = match excl {
                    Some(list) => {
                        parse_cpu_list(list).map_err(|e| anyhow!("--exclude-cpu: {e}"))?
                    }
                    None => {
                        let path = self
                            .config
                            .clone()
                            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
                        if self.config.is_none() && !path.exists() {
                            bail!(
                                "--exclude-cpu: the RT CPU is unknown ({DEFAULT_CONFIG} does not exist); \
                                 pass --exclude-cpu N, --cpus LIST, --cpus all or --config FILE"
                            );
                        }
                        rt_cpus_from_config(&path).map_err(|e| anyhow!("--config: {e:#}"))?
                    }
                };
                let l: Vec<usize> = usable
                    .iter()
                    .copied()
                    .filter(|c| !excluded.contains(c))
                    .collect();
                if l.is_empty() {
                    bail!(
                        "--exclude-cpu: excluding {} leaves no CPU for the load (usable: {})",
                        format_cpu_list(&excluded),
                        format_cpu_list(&usable)
                    );
                }
                l
            }
        };
        if !self.duration.is_finite() || self.duration <= 0.0 || self.duration > MAX_DURATION_S {
            bail!(
                "--duration: {} s is not in (0, {MAX_DURATION_S}]",
                self.duration
            );
        }
        let nothing_chosen = self.cpu_hogs.is_none()
            && self.mem.is_empty()
            && !self.fork_churn
            && self.net.is_none();
        let duration = Duration::from_secs_f64(self.duration);
        let mut spec = if nothing_chosen {
            let mut s = LoadSpec::reference_mix(cpus, duration);
            s.tmpfs = Some(TmpfsLoad {
                dir: self.tmpfs_dir.clone(),
                mib: self.tmpfs_mb,
            });
            s.anon_mib = Some(self.anon_mb);
            s.fork_churn = Some(ForkLoad {
                workers: self.fork_workers,
                program: self.exec.clone(),
            });
            s
        } else {
            LoadSpec {
                duration,
                cpu_hogs: self.cpu_hogs.unwrap_or(0),
                cpus,
                tmpfs: self.mem.contains(&MemKind::Tmpfs).then(|| TmpfsLoad {
                    dir: self.tmpfs_dir.clone(),
                    mib: self.tmpfs_mb,
                }),
                anon_mib: self.mem.contains(&MemKind::Anon).then_some(self.anon_mb),
                fork_churn: self.fork_churn.then(|| ForkLoad {
                    workers: self.fork_workers,
                    program: self.exec.clone(),
                }),
                net: self.net.map(|proto| NetLoad {
                    proto,
                    mbit_per_s: self.net_mbit,
                }),
                backend: Backend::Builtin,
            }
        };
        if self.stress_ng {
            spec.backend = Backend::StressNg;
        }
        spec.validate()?;
        Ok(spec)
    }
}

static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

/// `rtcat load`: runs the load until `--duration` has elapsed or SIGINT/SIGTERM/SIGHUP arrives, then
/// stops every worker, reaps every child and removes the tmpfs files. Returns the exit code: 0 after
/// a clean end (duration or signal), 1 when a worker failed, 2 for invalid arguments (the message,
/// printed on stderr, names the option).
pub fn run_load(args: &LoadArgs) -> Result<i32> {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let spec = match args.to_spec() {
        Ok(s) => s,
        Err(e) => {
            say!("rtcat load: error: {e:#}");
            return Ok(2);
        }
    };
    SIGNALLED.store(0, Ordering::SeqCst);
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    let mut old = Vec::new();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores into an atomic (async-signal-safe).
        old.push((s, unsafe { sigaction(s, &act) }?));
    }
    let restore = || {
        for (s, o) in &old {
            // SAFETY: restores the previous disposition.
            let _ = unsafe { sigaction(*s, o) };
        }
    };
    if !args.quiet {
        say!("rtcat load: {} (Ctrl-C stops)", spec.describe());
    }
    let mut handle = match LoadHandle::start(&spec) {
        Ok(h) => h,
        Err(e) => {
            restore();
            if format!("{e:#}").starts_with("--") {
                say!("rtcat load: error: {e:#}");
                return Ok(2);
            }
            return Err(e);
        }
    };
    let deadline = Instant::now() + spec.duration;
    let reason = loop {
        let sig = SIGNALLED.load(Ordering::SeqCst);
        if sig != 0 {
            break signal_name(sig);
        }
        if Instant::now() >= deadline || handle.is_finished() {
            break "duration".to_string();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let rep = handle.stop_with_reason(&reason);
    restore();
    let rep = rep?;
    if !args.quiet {
        print_report(&rep);
    }
    let mut failed = !rep.errors.is_empty();
    if let Some(j) = &args.json {
        let text = serde_json::to_string_pretty(&rep)? + "\n";
        if j == "-" {
            // A reader that went away (EPIPE) does not want the report; the load itself ended
            // cleanly, so that is not a failure of the load.
            match crate::outfile::write_stdout(text.as_bytes()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => {
                    say!("rtcat load: error: --json -: {e}");
                    failed = true;
                }
            }
        } else if let Err(e) = crate::outfile::write_named(Path::new(j), text.as_bytes()) {
            say!("rtcat load: error: --json: {e:#}");
            failed = true;
        }
    }
    for e in &rep.errors {
        say!("rtcat load: worker error: {e}");
    }
    Ok(if failed { 1 } else { 0 })
}

fn print_report(r: &LoadReport) {
    say!(
        "rtcat load: stopped by {} after {:.2} s ({})",
        r.stopped_by,
        r.elapsed_s,
        r.backend
    );
    if r.backend == "stress-ng" {
        if let Some(o) = &r.stress_ng_output {
            say!("{o}");
        }
        return;
    }
    say!(
        "  hog loops {}, tmpfs {} MiB in {} files, anon {} MiB in {} passes, forks {} ({} failed), net sent {} KiB / received {} KiB",
        r.hog_loops,
        r.tmpfs_bytes_written >> 20,
        r.tmpfs_files_written,
        r.anon_bytes_touched >> 20,
        r.anon_passes,
        r.forks,
        r.fork_failures,
        r.net_bytes_sent >> 10,
        r.net_bytes_received >> 10
    );
}

#[cfg(test)]
pub(super) fn parse_args(args: &[&str]) -> LoadArgs {
    tests::parse(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::fs;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    pub(super) fn parse(args: &[&str]) -> LoadArgs {
        Cli::try_parse_from(std::iter::once("load").chain(args.iter().copied()))
            .unwrap()
            .load
    }

    #[test]
    fn spec_round_trips_through_args() {
        let spec = parse(&[
            "--cpus",
            "0",
            "--cpu-hogs",
            "3",
            "--mem",
            "tmpfs,anon",
            "--tmpfs-mb",
            "8",
            "--fork-churn",
            "--net",
            "udp",
            "--net-mbit",
            "5",
            "--duration",
            "2.5",
        ])
        .to_spec()
        .unwrap();
        assert_eq!(spec.cpu_hogs, 3);
        assert_eq!(spec.tmpfs.as_ref().unwrap().mib, 8);
        let args: Vec<String> = spec.to_args();
        let back = Cli::try_parse_from(std::iter::once("load".to_string()).chain(args))
            .unwrap()
            .load
            .to_spec()
            .unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn default_is_reference_mix_without_rt_cpu() {
        let usable = usable_cpus().unwrap();
        let last = *usable.last().unwrap();
        let a = parse(&["--exclude-cpu", &last.to_string()]);
        if usable.len() == 1 {
            assert!(
                a.to_spec()
                    .unwrap_err()
                    .to_string()
                    .starts_with("--exclude-cpu:")
            );
            return;
        }
        let s = a.to_spec().unwrap();
        assert!(!s.cpus.contains(&last));
        assert_eq!(s.cpu_hogs, s.cpus.len());
        assert!(
            s.tmpfs.is_some() && s.anon_mib.is_some() && s.fork_churn.is_some() && s.net.is_none()
        );
    }

    #[test]
    fn errors_name_the_option() {
        let e = |args: &[&str]| format!("{:#}", parse(args).to_spec().unwrap_err());
        assert!(e(&["--cpus", "0", "--duration", "0"]).starts_with("--duration:"));
        assert!(e(&["--cpus", "0", "--duration", "1e9"]).starts_with("--duration:"));
        assert!(e(&["--cpus", "4095"]).starts_with("--cpus: CPU 4095 is not online"));
        assert!(e(&["--cpus", "x"]).starts_with("--cpus:"));
        assert!(e(&["--cpus", "0", "--exclude-cpu", "1"]).starts_with("--cpus and --exclude-cpu"));
        assert!(e(&["--cpus", "0", "--cpu-hogs", "0"]).starts_with("--cpu-hogs:"));
        assert!(e(&["--cpus", "0", "--mem", "anon", "--anon-mb", "0"]).starts_with("--anon-mb:"));
        assert!(
            e(&["--cpus", "0", "--fork-churn", "--fork-workers", "0"])
                .starts_with("--fork-workers:")
        );
        assert!(e(&["--cpus", "0", "--net", "tcp", "--net-mbit", "0"]).starts_with("--net-mbit:"));
        let all = usable_cpus().unwrap();
        assert!(e(&["--exclude-cpu", &format_cpu_list(&all)]).starts_with("--exclude-cpu:"));
        let e2 = e(&["--config", "/nonexistent/rtcat.toml"]);
        assert!(
            e2.starts_with("--config: /nonexistent/rtcat.toml: cannot read"),
            "{e2}"
        );
    }

    #[test]
    fn rt_cpu_from_config() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("rtcat.toml");
        fs::write(
            &p,
            "[bus]\ninterface = \"eth1\"\n[cycle]\ncpu = 6\ntxrx_cpu = 6\npriority = 80\n",
        )
        .unwrap();
        assert_eq!(rt_cpus_from_config(&p).unwrap(), vec![6]);
        fs::write(&p, "[bus]\ninterface = \"eth1\"\n").unwrap();
        assert!(
            rt_cpus_from_config(&p)
                .unwrap_err()
                .to_string()
                .contains("no [cycle] table")
        );
    }
}
