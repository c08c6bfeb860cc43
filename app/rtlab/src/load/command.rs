//! `rtcat load` on the command line: [`LoadArgs`], their resolution into a [`LoadSpec`] (the CPU
//! set, the RT CPU from the config), and [`run_load`], which runs a load until its duration or a
//! signal.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use serde::Deserialize;

use super::{
    Backend, ForkLoad, LoadHandle, LoadReport, LoadSpec, MAX_DURATION_S, MemKind, NetLoad,
    NetProto, TmpfsLoad,
};
use crate::cpus::{format_cpu_list, parse_cpu_list, usable_cpus};
use crate::error::is_usage;
use crate::interrupt::{Interrupt, signal_name};
use crate::outfile::say;

/// Default config file that names the RT CPU.
pub const DEFAULT_CONFIG: &str = "/etc/rtcat/rtcat.toml";
/// Largest config file read for the RT CPU (a real one is a few KiB).
pub const CONFIG_LIMIT: u64 = 1 << 20;

/// Options of `rtcat load` ([`Default`]: the command line's defaults).
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// How long the load runs, in seconds (it always ends by itself).
    pub duration: f64,
    /// Number of CPU hog threads (`None` with no other kind chosen: the reference load mix).
    pub cpu_hogs: Option<usize>,
    /// Memory churn kinds.
    pub mem: Vec<MemKind>,
    /// Short-lived process churn: fork, exec `exec`, exit, reap, in a loop.
    pub fork_churn: bool,
    /// Threads doing fork churn.
    pub fork_workers: usize,
    /// Program the fork churn executes (no arguments).
    pub exec: PathBuf,
    /// Loopback traffic on 127.0.0.1.
    pub net: Option<NetProto>,
    /// Bound of the loopback traffic in Mbit/s.
    pub net_mbit: u32,
    /// tmpfs directory for the write churn (a private subdirectory is created and removed).
    pub tmpfs_dir: PathBuf,
    /// Most MiB the tmpfs churn holds at any time.
    pub tmpfs_mb: u64,
    /// MiB of anonymous memory churned per pass.
    pub anon_mb: u64,
    /// CPUs the load may use (a kernel CPU list, or `all`); default: all but `exclude_cpu`.
    pub cpus: Option<String>,
    /// CPUs the load must not use (the RT CPU); default: `[cycle].cpu` and `txrx_cpu` of `config`.
    pub exclude_cpu: Option<String>,
    /// rtcat config naming the RT CPU when neither `cpus` nor `exclude_cpu` is given.
    pub config: Option<PathBuf>,
    /// Use stress-ng with equivalent options instead of the built-in load.
    pub stress_ng: bool,
    /// Write the load report as JSON to this file (`-`: stdout).
    pub json: Option<String>,
    /// Print nothing but errors (and the JSON report when asked for).
    pub quiet: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            duration: 60.0,
            cpu_hogs: None,
            mem: Vec::new(),
            fork_churn: false,
            fork_workers: 1,
            exec: PathBuf::from("/bin/true"),
            net: None,
            net_mbit: 100,
            tmpfs_dir: PathBuf::from("/dev/shm"),
            tmpfs_mb: 32,
            anon_mb: 64,
            cpus: None,
            exclude_cpu: None,
            config: None,
            stress_ng: false,
            json: None,
            quiet: false,
        }
    }
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

impl LoadOptions {
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

/// `rtcat load`: runs the load until `--duration` has elapsed or `stop` reports a signal (the
/// caller's handlers: `rtcat` installs them for SIGINT, SIGTERM, SIGHUP and SIGQUIT, a second one
/// ending the process), then stops every worker, reaps every child and removes the tmpfs files.
/// Returns the exit code: 0 after a clean end (duration or signal), 1 when a worker failed, 2 for
/// invalid arguments (the message, printed on stderr, names the option).
pub fn run_load(args: &LoadOptions, stop: &dyn Interrupt) -> Result<i32> {
    let spec = match args.to_spec() {
        Ok(s) => s,
        Err(e) => {
            say!("rtcat load: error: {e:#}");
            return Ok(2);
        }
    };
    if !args.quiet {
        say!("rtcat load: {} (Ctrl-C stops)", spec.describe());
    }
    let mut handle = match LoadHandle::start(&spec) {
        Ok(h) => h,
        Err(e) => {
            if is_usage(&e) {
                say!("rtcat load: error: {e:#}");
                return Ok(2);
            }
            return Err(e);
        }
    };
    let deadline = Instant::now() + spec.duration;
    let reason = loop {
        if stop.count() > 0 {
            break signal_name(stop.last().unwrap_or(libc::SIGINT));
        }
        if Instant::now() >= deadline || handle.is_finished() {
            break "duration".to_string();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let rep = handle.stop_with_reason(&reason)?;
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
mod tests {
    use super::*;
    use std::fs;

    fn on(cpus: &str) -> LoadOptions {
        LoadOptions {
            cpus: Some(cpus.into()),
            ..LoadOptions::default()
        }
    }

    #[test]
    fn default_is_reference_mix_without_rt_cpu() {
        let usable = usable_cpus().unwrap();
        let last = *usable.last().unwrap();
        let a = LoadOptions {
            exclude_cpu: Some(last.to_string()),
            ..LoadOptions::default()
        };
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
        let e = |o: LoadOptions| format!("{:#}", o.to_spec().unwrap_err());
        let d = LoadOptions::default();
        let on0 = || on("0");
        assert!(
            e(LoadOptions {
                duration: 0.0,
                ..on0()
            })
            .starts_with("--duration:")
        );
        assert!(
            e(LoadOptions {
                duration: 1e9,
                ..on0()
            })
            .starts_with("--duration:")
        );
        assert!(e(on("4095")).starts_with("--cpus: CPU 4095 is not online"));
        assert!(e(on("x")).starts_with("--cpus:"));
        let both = LoadOptions {
            exclude_cpu: Some("1".into()),
            ..on0()
        };
        assert!(e(both).starts_with("--cpus and --exclude-cpu"));
        assert!(
            e(LoadOptions {
                cpu_hogs: Some(0),
                ..on0()
            })
            .starts_with("--cpu-hogs:")
        );
        let anon0 = LoadOptions {
            mem: vec![MemKind::Anon],
            anon_mb: 0,
            ..on0()
        };
        assert!(e(anon0).starts_with("--anon-mb:"));
        let fork0 = LoadOptions {
            fork_churn: true,
            fork_workers: 0,
            ..on0()
        };
        assert!(e(fork0).starts_with("--fork-workers:"));
        let net0 = LoadOptions {
            net: Some(NetProto::Tcp),
            net_mbit: 0,
            ..on0()
        };
        assert!(e(net0).starts_with("--net-mbit:"));
        let all = usable_cpus().unwrap();
        let excl_all = LoadOptions {
            exclude_cpu: Some(format_cpu_list(&all)),
            ..d.clone()
        };
        assert!(e(excl_all).starts_with("--exclude-cpu:"));
        let e2 = e(LoadOptions {
            config: Some("/nonexistent/rtcat.toml".into()),
            ..d
        });
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
