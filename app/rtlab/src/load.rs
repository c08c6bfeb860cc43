//! `rtcat load`: a bounded, self-cleaning load generator for latency measurements.
//!
//! Kinds of load (any combination):
//! - **CPU hogs**: `N` busy threads (integer arithmetic, no syscalls);
//! - **tmpfs write churn**: one thread writing, truncating and deleting files in a private directory
//!   under a tmpfs (default `/dev/shm`), never more than `--tmpfs-mb` MiB at a time; the directory is
//!   removed at the end, also on SIGINT/SIGTERM;
//! - **anonymous memory churn**: one thread that maps `--anon-mb` MiB, writes every page, unmaps, and
//!   starts again (page faults, zeroing, TLB shootdowns);
//! - **fork/exec churn**: `--fork-workers` threads that each run `--exec` (default `/bin/true`) in a
//!   loop and reap it;
//! - **loopback traffic**: a rate-bounded TCP stream or UDP datagram flow on 127.0.0.1 only.
//!
//! Every worker (and every process the fork churn starts) runs only on the chosen CPUs, which by
//! default exclude the RT CPU. The load ends by itself when `--duration` has elapsed.
//! `--stress-ng` runs stress-ng with equivalent options instead (where it is installed).

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

use crate::cpus::{format_cpu_list, parse_cpu_list, pin_current_thread, usable_cpus};
use crate::outfile::say;

/// Longest allowed `--duration` (7 days).
pub const MAX_DURATION_S: f64 = 7.0 * 24.0 * 3600.0;
/// Default config file that names the RT CPU.
pub const DEFAULT_CONFIG: &str = "/etc/rtcat/rtcat.toml";
/// Largest config file read for the RT CPU (a real one is a few KiB).
pub const CONFIG_LIMIT: u64 = 1 << 20;
/// Prefix of the private tmpfs directories (`<prefix><pid>-<seq>`).
pub const TMPFS_PREFIX: &str = "rtcat-load-";
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Memory churn kinds of `--mem`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemKind {
    /// Write churn on files in a tmpfs (`--tmpfs-dir`).
    Tmpfs,
    /// Map, touch and unmap anonymous memory.
    Anon,
}

/// Loopback traffic protocol of `--net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetProto {
    Tcp,
    Udp,
}

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

/// Which generator runs the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    Builtin,
    StressNg,
}

/// tmpfs write churn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TmpfsLoad {
    pub dir: PathBuf,
    pub mib: u64,
}

/// Fork/exec churn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkLoad {
    pub workers: usize,
    pub program: PathBuf,
}

/// Loopback traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetLoad {
    pub proto: NetProto,
    pub mbit_per_s: u32,
}

/// A fully resolved load: what runs, where, for how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSpec {
    /// Upper bound of the run time; the load ends by itself after it.
    pub duration: Duration,
    /// CPUs every worker (and every child process) is confined to. Never empty.
    pub cpus: Vec<usize>,
    pub cpu_hogs: usize,
    pub tmpfs: Option<TmpfsLoad>,
    pub anon_mib: Option<u64>,
    pub fork_churn: Option<ForkLoad>,
    pub net: Option<NetLoad>,
    pub backend: Backend,
}

impl LoadSpec {
    /// The reference load mix (docs/NOTES.md §1) (one CPU hog per CPU + tmpfs churn + anon churn + fork churn) on `cpus`.
    pub fn reference_mix(cpus: Vec<usize>, duration: Duration) -> Self {
        Self {
            duration,
            cpu_hogs: cpus.len(),
            cpus,
            tmpfs: Some(TmpfsLoad {
                dir: PathBuf::from("/dev/shm"),
                mib: 32,
            }),
            anon_mib: Some(64),
            fork_churn: Some(ForkLoad {
                workers: 1,
                program: PathBuf::from("/bin/true"),
            }),
            net: None,
            backend: Backend::Builtin,
        }
    }

    /// Checks bounds; errors name the command-line option.
    pub fn validate(&self) -> Result<()> {
        let d = self.duration.as_secs_f64();
        if !(d > 0.0 && d <= MAX_DURATION_S) {
            bail!("--duration: {d} s is not in (0, {MAX_DURATION_S}]");
        }
        if self.cpus.is_empty() {
            bail!("--cpus: no CPU left for the load");
        }
        if self.cpu_hogs > 4096 {
            bail!("--cpu-hogs: {} is more than 4096", self.cpu_hogs);
        }
        if self.cpu_hogs == 0
            && self.tmpfs.is_none()
            && self.anon_mib.is_none()
            && self.fork_churn.is_none()
            && self.net.is_none()
        {
            bail!("--cpu-hogs: 0 and no other load selected: nothing to run");
        }
        if let Some(t) = &self.tmpfs
            && (t.mib == 0 || t.mib > 1 << 20)
        {
            bail!("--tmpfs-mb: {} is not in 1..=1048576", t.mib);
        }
        if let Some(a) = self.anon_mib
            && (a == 0 || a > 1 << 20)
        {
            bail!("--anon-mb: {a} is not in 1..=1048576");
        }
        if let Some(f) = &self.fork_churn
            && (f.workers == 0 || f.workers > 256)
        {
            bail!("--fork-workers: {} is not in 1..=256", f.workers);
        }
        if let Some(n) = &self.net
            && (n.mbit_per_s == 0 || n.mbit_per_s > 100_000)
        {
            bail!("--net-mbit: {} is not in 1..=100000", n.mbit_per_s);
        }
        Ok(())
    }

    /// Command-line arguments of `load` that reproduce this spec (for running it in a child process).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--duration".to_string(),
            format!("{}", self.duration.as_secs_f64()),
            "--cpus".to_string(),
            format_cpu_list(&self.cpus),
            "--cpu-hogs".to_string(),
            self.cpu_hogs.to_string(),
        ];
        if let Some(t) = &self.tmpfs {
            a.extend(["--mem".into(), "tmpfs".into(), "--tmpfs-dir".into()]);
            a.push(t.dir.display().to_string());
            a.extend(["--tmpfs-mb".into(), t.mib.to_string()]);
        }
        if let Some(m) = self.anon_mib {
            a.extend([
                "--mem".into(),
                "anon".into(),
                "--anon-mb".into(),
                m.to_string(),
            ]);
        }
        if let Some(f) = &self.fork_churn {
            a.extend([
                "--fork-churn".into(),
                "--fork-workers".into(),
                f.workers.to_string(),
                "--exec".into(),
            ]);
            a.push(f.program.display().to_string());
        }
        if let Some(n) = &self.net {
            let p = match n.proto {
                NetProto::Tcp => "tcp",
                NetProto::Udp => "udp",
            };
            a.extend([
                "--net".into(),
                p.into(),
                "--net-mbit".into(),
                n.mbit_per_s.to_string(),
            ]);
        }
        if self.backend == Backend::StressNg {
            a.push("--stress-ng".into());
        }
        a
    }

    /// One-line human description.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.cpu_hogs > 0 {
            parts.push(format!("{} CPU hog(s)", self.cpu_hogs));
        }
        if let Some(t) = &self.tmpfs {
            parts.push(format!(
                "tmpfs write churn {} MiB in {}",
                t.mib,
                t.dir.display()
            ));
        }
        if let Some(m) = self.anon_mib {
            parts.push(format!("anon memory churn {m} MiB"));
        }
        if let Some(f) = &self.fork_churn {
            parts.push(format!(
                "fork/exec churn x{} ({})",
                f.workers,
                f.program.display()
            ));
        }
        if let Some(n) = &self.net {
            parts.push(
                format!("loopback {:?} traffic <= {} Mbit/s", n.proto, n.mbit_per_s).to_lowercase(),
            );
        }
        let backend = match self.backend {
            Backend::Builtin => "built-in",
            Backend::StressNg => "stress-ng",
        };
        format!(
            "{} on CPUs {} for {} s ({backend})",
            parts.join(", "),
            format_cpu_list(&self.cpus),
            self.duration.as_secs_f64()
        )
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

/// What a load did. Counters are 0 for kinds that did not run (and for stress-ng, which reports its
/// own metrics in `stress_ng_output`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    pub backend: String,
    pub description: String,
    pub cpus: String,
    pub duration_requested_s: f64,
    pub elapsed_s: f64,
    /// `"duration"`, `"stop"` (LoadHandle::stop), or the signal name (`"SIGINT"`, `"SIGTERM"`).
    pub stopped_by: String,
    pub hog_loops: u64,
    pub tmpfs_bytes_written: u64,
    pub tmpfs_files_written: u64,
    pub anon_bytes_touched: u64,
    pub anon_passes: u64,
    pub forks: u64,
    pub fork_failures: u64,
    pub net_bytes_sent: u64,
    pub net_bytes_received: u64,
    /// Last lines of stress-ng's output (stress-ng backend only).
    pub stress_ng_output: Option<String>,
    /// Worker errors (the load kept running the other kinds).
    pub errors: Vec<String>,
}

#[derive(Default)]
struct Counters {
    hog_loops: AtomicU64,
    tmpfs_bytes: AtomicU64,
    tmpfs_files: AtomicU64,
    anon_bytes: AtomicU64,
    anon_passes: AtomicU64,
    forks: AtomicU64,
    fork_failures: AtomicU64,
    net_sent: AtomicU64,
    net_received: AtomicU64,
}

struct Ctl {
    stop: AtomicBool,
    deadline: Instant,
    counters: Counters,
    errors: Mutex<Vec<String>>,
    /// pids of running fork-churn children (0 = none), one slot per worker
    children: Vec<AtomicI32>,
}

impl Ctl {
    fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }
    fn error(&self, e: String) {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e);
    }
}

struct StopOnDrop(Option<Arc<Ctl>>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.stop.store(true, Ordering::SeqCst);
        }
    }
}

/// Removes the private tmpfs directory when dropped.
struct DirGuard(PathBuf);
impl Drop for DirGuard {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

enum Inner {
    Threads {
        ctl: Arc<Ctl>,
        workers: Vec<JoinHandle<()>>,
        tids: Vec<i32>,
        tmpfs_dir: Option<DirGuard>,
    },
    Process {
        child: Child,
        stress_ng: bool,
    },
    Finished,
}

/// A running load. It ends by itself at the end of the spec's duration; `stop` ends it earlier.
/// Dropping the handle stops the load too.
pub struct LoadHandle {
    inner: Inner,
    spec: LoadSpec,
    started: Instant,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}

impl LoadHandle {
    /// Starts the load in this process (threads; fork churn children are separate processes), or
    /// stress-ng as a child process for `Backend::StressNg`.
    ///
    /// Note: in-process anon churn unmaps memory, which sends TLB-shootdown IPIs to every CPU this
    /// process runs on. Do not run it inside the process that hosts the real-time threads: use
    /// [`LoadHandle::spawn`] there.
    pub fn start(spec: &LoadSpec) -> Result<Self> {
        spec.validate()?;
        if spec.backend == Backend::StressNg {
            return Self::start_stress_ng(spec);
        }
        let started = Instant::now();
        let nfork = spec.fork_churn.as_ref().map_or(0, |f| f.workers);
        let ctl = Arc::new(Ctl {
            stop: AtomicBool::new(false),
            deadline: started + spec.duration,
            counters: Counters::default(),
            errors: Mutex::new(Vec::new()),
            children: (0..nfork).map(|_| AtomicI32::new(0)).collect(),
        });
        let tmpfs_dir = match &spec.tmpfs {
            Some(t) => Some(prepare_tmpfs_dir(t)?),
            None => None,
        };
        // until the handle exists, an early return stops the workers already started
        let guard = StopOnDrop(Some(ctl.clone()));
        let (tid_tx, tid_rx) = mpsc::channel::<Result<i32, String>>();
        let mut workers = Vec::new();
        let mut spawn = |name: String, f: Box<dyn FnOnce(&Ctl) + Send>| -> Result<()> {
            let ctl = ctl.clone();
            let cpus = spec.cpus.clone();
            let tid_tx = tid_tx.clone();
            let tname = name.clone();
            let h = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    if let Err(e) = pin_current_thread(&cpus) {
                        let _ = tid_tx.send(Err(format!(
                            "{tname}: cannot pin to CPUs {}: {e}",
                            format_cpu_list(&cpus)
                        )));
                        return;
                    }
                    let _ = tid_tx.send(Ok(gettid()));
                    drop(tid_tx);
                    f(&ctl);
                })
                .with_context(|| format!("cannot start thread {name}"))?;
            workers.push(h);
            Ok(())
        };
        for i in 0..spec.cpu_hogs {
            spawn(format!("load-hog{i}"), Box::new(hog_worker))?;
        }
        if let (Some(t), Some(g)) = (&spec.tmpfs, &tmpfs_dir) {
            let dir = g.0.clone();
            let bytes = t.mib << 20;
            spawn(
                "load-tmpfs".into(),
                Box::new(move |c| tmpfs_worker(c, &dir, bytes)),
            )?;
        }
        if let Some(m) = spec.anon_mib {
            spawn(
                "load-anon".into(),
                Box::new(move |c| anon_worker(c, (m << 20) as usize)),
            )?;
        }
        if let Some(f) = &spec.fork_churn {
            for i in 0..f.workers {
                let prog = f.program.clone();
                spawn(
                    format!("load-fork{i}"),
                    Box::new(move |c| fork_worker(c, i, &prog)),
                )?;
            }
        }
        if let Some(n) = spec.net {
            let rate = f64::from(n.mbit_per_s) * 1e6 / 8.0;
            match n.proto {
                NetProto::Tcp => {
                    let listener =
                        TcpListener::bind("127.0.0.1:0").context("--net tcp: bind 127.0.0.1")?;
                    let addr = listener.local_addr()?;
                    spawn(
                        "load-net-rx".into(),
                        Box::new(move |c| tcp_rx_worker(c, listener)),
                    )?;
                    spawn(
                        "load-net-tx".into(),
                        Box::new(move |c| tcp_tx_worker(c, addr, rate)),
                    )?;
                }
                NetProto::Udp => {
                    let rx = UdpSocket::bind("127.0.0.1:0").context("--net udp: bind 127.0.0.1")?;
                    let addr = rx.local_addr()?;
                    spawn(
                        "load-net-rx".into(),
                        Box::new(move |c| udp_rx_worker(c, rx)),
                    )?;
                    spawn(
                        "load-net-tx".into(),
                        Box::new(move |c| udp_tx_worker(c, addr, rate)),
                    )?;
                }
            }
        }
        drop(tid_tx);
        let mut tids = Vec::new();
        let mut first_err = None;
        for r in tid_rx.iter().take(workers.len()) {
            match r {
                Ok(t) => tids.push(t),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        let mut guard = guard;
        guard.0 = None;
        let mut h = Self {
            inner: Inner::Threads {
                ctl,
                workers,
                tids,
                tmpfs_dir,
            },
            spec: spec.clone(),
            started,
        };
        if let Some(e) = first_err {
            let _ = h.finish("error");
            bail!(e);
        }
        Ok(h)
    }

    /// Runs the load in a child process `<exe> load <spec.to_args()> --json - --quiet` (`exe` is the
    /// `rtcat` binary, e.g. `/proc/self/exe`). The child gets SIGTERM if the calling thread exits.
    pub fn spawn(exe: &Path, spec: &LoadSpec) -> Result<Self> {
        spec.validate()?;
        let mut cmd = Command::new(exe);
        cmd.arg("load")
            .args(spec.to_args())
            .args(["--json", "-", "--quiet"]);
        let child = spawn_in_group(&mut cmd)
            .with_context(|| format!("cannot run {} load", exe.display()))?;
        Ok(Self {
            inner: Inner::Process {
                child,
                stress_ng: false,
            },
            spec: spec.clone(),
            started: Instant::now(),
        })
    }

    fn start_stress_ng(spec: &LoadSpec) -> Result<Self> {
        let exe = find_in_path("stress-ng").ok_or_else(|| {
            anyhow!("--stress-ng: stress-ng is not installed (not in PATH); drop --stress-ng to use the built-in load")
        })?;
        let mut cmd = Command::new(exe);
        cmd.args(stress_ng_args(spec));
        let child = spawn_in_group(&mut cmd).context("--stress-ng: cannot run stress-ng")?;
        Ok(Self {
            inner: Inner::Process {
                child,
                stress_ng: true,
            },
            spec: spec.clone(),
            started: Instant::now(),
        })
    }

    /// Thread ids of the in-process workers (empty for a child-process load).
    pub fn worker_tids(&self) -> Vec<i32> {
        match &self.inner {
            Inner::Threads { tids, .. } => tids.clone(),
            _ => Vec::new(),
        }
    }

    /// pid of the child process running the load (stress-ng or `rtcat load`), if any.
    pub fn child_pid(&self) -> Option<u32> {
        match &self.inner {
            Inner::Process { child, .. } => Some(child.id()),
            _ => None,
        }
    }

    /// Private tmpfs directory of the write churn (in-process loads only).
    pub fn tmpfs_dir(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Threads {
                tmpfs_dir: Some(g), ..
            } => Some(&g.0),
            _ => None,
        }
    }

    /// The spec this load runs.
    pub fn spec(&self) -> &LoadSpec {
        &self.spec
    }

    /// True once the duration has elapsed and the workers have ended.
    pub fn is_finished(&mut self) -> bool {
        match &mut self.inner {
            Inner::Threads { workers, .. } => workers.iter().all(|w| w.is_finished()),
            Inner::Process { child, .. } => matches!(child.try_wait(), Ok(Some(_))),
            Inner::Finished => true,
        }
    }

    /// Waits until the load ends by itself (its duration) and returns the report.
    pub fn wait(mut self) -> Result<LoadReport> {
        let deadline = self.started + self.spec.duration;
        while !self.is_finished() {
            // a child process gets a grace period past the deadline before it is stopped
            if Instant::now() > deadline + Duration::from_secs(5) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.finish("duration")
    }

    /// Stops the load now (all threads joined, all children reaped, tmpfs files removed).
    pub fn stop(mut self) -> Result<LoadReport> {
        self.finish("stop")
    }

    /// Stops the load, recording `reason` as `stopped_by` unless the duration ran out first.
    pub fn stop_with_reason(mut self, reason: &str) -> Result<LoadReport> {
        self.finish(reason)
    }

    fn finish(&mut self, reason: &str) -> Result<LoadReport> {
        let inner = std::mem::replace(&mut self.inner, Inner::Finished);
        let now = Instant::now();
        let ran_out = now >= self.started + self.spec.duration;
        let stopped_by = if ran_out {
            "duration".to_string()
        } else {
            reason.to_string()
        };
        let mut rep = LoadReport {
            backend: match self.spec.backend {
                Backend::Builtin => "built-in".into(),
                Backend::StressNg => "stress-ng".into(),
            },
            description: self.spec.describe(),
            cpus: format_cpu_list(&self.spec.cpus),
            duration_requested_s: self.spec.duration.as_secs_f64(),
            stopped_by,
            ..Default::default()
        };
        match inner {
            Inner::Threads {
                ctl,
                workers,
                tmpfs_dir,
                ..
            } => {
                ctl.stop.store(true, Ordering::SeqCst);
                let grace = Instant::now() + Duration::from_secs(3);
                while !workers.iter().all(|w| w.is_finished()) {
                    if Instant::now() > grace {
                        // a fork-churn child that does not exit: kill it so its worker can reap it
                        for c in &ctl.children {
                            let pid = c.load(Ordering::SeqCst);
                            if pid > 0 {
                                let _ = nix::sys::signal::kill(
                                    nix::unistd::Pid::from_raw(pid),
                                    nix::sys::signal::Signal::SIGKILL,
                                );
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                for w in workers {
                    if w.join().is_err() {
                        ctl.error("a load worker panicked".into());
                    }
                }
                drop(tmpfs_dir);
                rep.elapsed_s = self.started.elapsed().as_secs_f64();
                let c = &ctl.counters;
                rep.hog_loops = c.hog_loops.load(Ordering::Relaxed);
                rep.tmpfs_bytes_written = c.tmpfs_bytes.load(Ordering::Relaxed);
                rep.tmpfs_files_written = c.tmpfs_files.load(Ordering::Relaxed);
                rep.anon_bytes_touched = c.anon_bytes.load(Ordering::Relaxed);
                rep.anon_passes = c.anon_passes.load(Ordering::Relaxed);
                rep.forks = c.forks.load(Ordering::Relaxed);
                rep.fork_failures = c.fork_failures.load(Ordering::Relaxed);
                rep.net_bytes_sent = c.net_sent.load(Ordering::Relaxed);
                rep.net_bytes_received = c.net_received.load(Ordering::Relaxed);
                rep.errors =
                    std::mem::take(&mut *ctl.errors.lock().unwrap_or_else(|p| p.into_inner()));
            }
            Inner::Process {
                mut child,
                stress_ng,
            } => {
                let status = stop_child(&mut child)?;
                rep.elapsed_s = self.started.elapsed().as_secs_f64();
                let mut out = String::new();
                if let Some(mut o) = child.stdout.take() {
                    let _ = o.read_to_string(&mut out);
                }
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                if stress_ng {
                    let text = format!("{out}{err}");
                    let lines: Vec<&str> = text.lines().collect();
                    rep.stress_ng_output = Some(lines[lines.len().saturating_sub(30)..].join("\n"));
                    if !status.success() && status.code().is_some() {
                        rep.errors.push(format!("stress-ng exited with {status}"));
                    }
                } else {
                    match serde_json::from_str::<LoadReport>(&out) {
                        Ok(mut r) => {
                            r.elapsed_s = rep.elapsed_s;
                            if !ran_out {
                                r.stopped_by = rep.stopped_by.clone();
                            }
                            rep = r;
                        }
                        Err(e) => rep.errors.push(format!(
                            "load child exited with {status} without a valid report ({e}); stderr: {}",
                            err.trim()
                        )),
                    }
                }
            }
            Inner::Finished => bail!("load already stopped"),
        }
        Ok(rep)
    }
}

impl Drop for LoadHandle {
    fn drop(&mut self) {
        if !matches!(self.inner, Inner::Finished) {
            let _ = self.finish("drop");
        }
    }
}

/// Spawns `cmd` in its own process group (so the whole group can be stopped), with captured
/// stdout/stderr and SIGTERM as parent-death signal.
fn spawn_in_group(cmd: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// SIGTERM to the child's process group, up to 10 s to exit, then SIGKILL; reaps the child.
fn stop_child(child: &mut Child) -> Result<std::process::ExitStatus> {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let pgid = Pid::from_raw(child.id() as i32);
    if let Ok(Some(st)) = child.try_wait() {
        let _ = killpg(pgid, Signal::SIGKILL); // stragglers of the group, if any
        return Ok(st);
    }
    let _ = killpg(pgid, Signal::SIGTERM);
    let limit = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = child.try_wait()? {
            let _ = killpg(pgid, Signal::SIGKILL);
            return Ok(st);
        }
        if Instant::now() > limit {
            let _ = killpg(pgid, Signal::SIGKILL);
            return Ok(child.wait()?);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// stress-ng arguments equivalent to `spec`. As root stress-ng skips --exec/--spawn and its --tmpfs
/// stressor fails on some kernels, so process churn is `--fork` (fork+exit, no exec) and tmpfs
/// churn is `--hdd` with `--temp-path` on the tmpfs. Its socket stressors are not rate-bounded.
pub fn stress_ng_args(spec: &LoadSpec) -> Vec<String> {
    let secs = spec.duration.as_secs_f64().ceil().max(1.0) as u64;
    let mut a = vec![
        "--timeout".to_string(),
        format!("{secs}s"),
        "--taskset".into(),
        format_cpu_list(&spec.cpus),
        "--metrics-brief".into(),
    ];
    if spec.cpu_hogs > 0 {
        a.extend(["--cpu".into(), spec.cpu_hogs.to_string()]);
    }
    if let Some(t) = &spec.tmpfs {
        a.extend([
            "--hdd".into(),
            "1".into(),
            "--temp-path".into(),
            t.dir.display().to_string(),
        ]);
        a.extend(["--hdd-bytes".into(), format!("{}M", t.mib)]);
    }
    if let Some(m) = spec.anon_mib {
        a.extend([
            "--vm".into(),
            "1".into(),
            "--vm-bytes".into(),
            format!("{m}M"),
        ]);
    }
    if let Some(f) = &spec.fork_churn {
        a.extend(["--fork".into(), f.workers.to_string()]);
    }
    if let Some(n) = &spec.net {
        match n.proto {
            NetProto::Tcp => a.extend(
                ["--sock", "1", "--sock-domain", "ipv4", "--sock-if", "lo"].map(String::from),
            ),
            NetProto::Udp => {
                a.extend(["--udp", "1", "--udp-domain", "ipv4", "--udp-if", "lo"].map(String::from))
            }
        }
    }
    a
}

/// Creates the private tmpfs directory after checking the filesystem and the space, and removes
/// directories left by load processes that no longer exist.
fn prepare_tmpfs_dir(t: &TmpfsLoad) -> Result<DirGuard> {
    let st = nix::sys::statfs::statfs(&t.dir)
        .map_err(|e| anyhow!("--tmpfs-dir: {}: {e}", t.dir.display()))?;
    #[allow(clippy::unnecessary_cast)]
    if st.filesystem_type().0 as i64 != TMPFS_MAGIC {
        bail!("--tmpfs-dir: {} is not a tmpfs", t.dir.display());
    }
    if let Ok(rd) = fs::read_dir(&t.dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(rest) = name.strip_prefix(TMPFS_PREFIX)
                && let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok())
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let vfs = nix::sys::statvfs::statvfs(&t.dir)
        .map_err(|e| anyhow!("--tmpfs-dir: {}: {e}", t.dir.display()))?;
    let free = vfs.blocks_available() as u64 * vfs.fragment_size() as u64;
    if (t.mib << 20) > free / 2 {
        bail!(
            "--tmpfs-mb: {} MiB is more than half of the free space on {} ({} MiB free)",
            t.mib,
            t.dir.display(),
            free >> 20
        );
    }
    let dir = t.dir.join(format!(
        "{TMPFS_PREFIX}{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    // 0700 whatever the umask: /dev/shm is world-writable, and a link planted in a directory
    // others could write would be opened by the churn (as root in a ladder). A name taken by
    // someone else already (the pid is predictable) is an error, never reused.
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| anyhow!("--tmpfs-dir: cannot create {}: {e}", dir.display()))?;
        let guard = DirGuard(dir);
        fs::set_permissions(&guard.0, fs::Permissions::from_mode(0o700))
            .map_err(|e| anyhow!("--tmpfs-dir: {}: {e}", guard.0.display()))?;
        Ok(guard)
    }
}

fn hog_worker(c: &Ctl) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ gettid() as u64;
    while !c.done() {
        for _ in 0..50_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x ^= x >> 29;
        }
        std::hint::black_box(x);
        c.counters.hog_loops.fetch_add(1, Ordering::Relaxed);
    }
}

fn tmpfs_worker(c: &Ctl, dir: &Path, bytes: u64) {
    const FILE: u64 = 4 << 20;
    const CHUNK: usize = 64 << 10;
    let file_size = bytes.min(FILE);
    let nfiles = (bytes / file_size).max(1);
    let mut buf = vec![0u8; CHUNK];
    let mut pass: u8 = 0;
    let res = (|| -> Result<()> {
        while !c.done() {
            pass = pass.wrapping_add(1);
            buf.fill(pass);
            for i in 0..nfiles {
                let path = dir.join(format!("churn-{i}"));
                let mut f = {
                    use std::os::unix::fs::OpenOptionsExt;
                    fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .mode(0o600)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(&path)
                        .with_context(|| format!("tmpfs churn: {}", path.display()))?
                };
                let mut written = 0u64;
                while written < file_size {
                    if c.done() {
                        return Ok(());
                    }
                    let n = (file_size - written).min(CHUNK as u64) as usize;
                    f.write_all(&buf[..n])
                        .with_context(|| format!("tmpfs churn: {}", path.display()))?;
                    written += n as u64;
                    c.counters
                        .tmpfs_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                }
                c.counters.tmpfs_files.fetch_add(1, Ordering::Relaxed);
            }
            for i in 0..nfiles {
                let _ = fs::remove_file(dir.join(format!("churn-{i}")));
            }
        }
        Ok(())
    })();
    if let Err(e) = res {
        c.error(format!("{e:#}"));
    }
}

fn anon_worker(c: &Ctl, bytes: usize) {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1);
    let mut pass: u8 = 0;
    while !c.done() {
        pass = pass.wrapping_add(1);
        // SAFETY: a fresh private anonymous mapping, written only within its length, unmapped below.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                c.error(format!(
                    "anon churn: mmap of {bytes} bytes failed: {}",
                    std::io::Error::last_os_error()
                ));
                return;
            }
            let base = p.cast::<u8>();
            let mut off = 0;
            let mut counted = 0;
            while off < bytes {
                let n = page.min(bytes - off);
                std::ptr::write_bytes(base.add(off), pass, n);
                off += n;
                if (off / page) % 256 == 0 {
                    c.counters
                        .anon_bytes
                        .fetch_add((off - counted) as u64, Ordering::Relaxed);
                    counted = off;
                    if c.done() {
                        break;
                    }
                }
            }
            c.counters
                .anon_bytes
                .fetch_add((off - counted) as u64, Ordering::Relaxed);
            libc::munmap(p, bytes);
        }
        c.counters.anon_passes.fetch_add(1, Ordering::Relaxed);
    }
}

fn fork_worker(c: &Ctl, slot: usize, program: &Path) {
    while !c.done() {
        let child = Command::new(program)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(mut ch) => {
                c.children[slot].store(ch.id() as i32, Ordering::SeqCst);
                let st = ch.wait();
                c.children[slot].store(0, Ordering::SeqCst);
                c.counters.forks.fetch_add(1, Ordering::Relaxed);
                if !matches!(st, Ok(s) if s.success()) {
                    c.counters.fork_failures.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => {
                c.error(format!("fork churn: cannot run {}: {e}", program.display()));
                return;
            }
        }
    }
}

/// Sleeps until `sent` bytes are allowed at `rate` bytes/s since `t0` (in steps of at most 20 ms).
fn pace(c: &Ctl, t0: Instant, sent: u64, rate: f64) -> bool {
    loop {
        if c.done() {
            return false;
        }
        let due = t0 + Duration::from_secs_f64(sent as f64 / rate);
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(20)));
    }
}

fn tcp_rx_worker(c: &Ctl, listener: TcpListener) {
    if let Err(e) = listener.set_nonblocking(true) {
        c.error(format!("net: {e}"));
        return;
    }
    let mut conn = loop {
        if c.done() {
            return;
        }
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => {
                c.error(format!("net: accept: {e}"));
                return;
            }
        }
    };
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 64 << 10];
    while !c.done() {
        match conn.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                c.counters
                    .net_received
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                c.error(format!("net: recv: {e}"));
                return;
            }
        }
    }
}

fn tcp_tx_worker(c: &Ctl, addr: std::net::SocketAddr, rate: f64) {
    let mut s = match TcpStream::connect(addr) {
        Ok(s) => s,
        Err(e) => {
            c.error(format!("net: connect {addr}: {e}"));
            return;
        }
    };
    let _ = s.set_write_timeout(Some(Duration::from_millis(50)));
    let buf = vec![0x5Au8; 16 << 10];
    let t0 = Instant::now();
    let mut sent = 0u64;
    while pace(c, t0, sent + buf.len() as u64, rate) {
        match s.write(&buf) {
            Ok(n) => {
                sent += n as u64;
                c.counters.net_sent.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                c.error(format!("net: send: {e}"));
                return;
            }
        }
    }
}

fn udp_rx_worker(c: &Ctl, s: UdpSocket) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 2048];
    while !c.done() {
        if let Ok(n) = s.recv(&mut buf) {
            c.counters
                .net_received
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

fn udp_tx_worker(c: &Ctl, to: std::net::SocketAddr, rate: f64) {
    let s = match UdpSocket::bind("127.0.0.1:0") {
        Ok(s) => s,
        Err(e) => {
            c.error(format!("net: bind: {e}"));
            return;
        }
    };
    let buf = vec![0xA5u8; 1472];
    let t0 = Instant::now();
    let mut sent = 0u64;
    while pace(c, t0, sent + buf.len() as u64, rate) {
        match s.send_to(&buf, to) {
            Ok(n) => {
                sent += n as u64;
                c.counters.net_sent.fetch_add(n as u64, Ordering::Relaxed);
            }
            // a full receive buffer on loopback: count as sent-attempt, keep pacing
            Err(_) => sent += buf.len() as u64,
        }
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
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn parse(args: &[&str]) -> LoadArgs {
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

    #[test]
    fn stress_ng_args_are_equivalent() {
        let spec = parse(&[
            "--cpus",
            "0",
            "--cpu-hogs",
            "2",
            "--mem",
            "tmpfs,anon",
            "--fork-churn",
            "--duration",
            "1.5",
        ])
        .to_spec()
        .unwrap();
        let a = stress_ng_args(&spec).join(" ");
        assert_eq!(
            a,
            "--timeout 2s --taskset 0 --metrics-brief --cpu 2 --hdd 1 --temp-path /dev/shm --hdd-bytes 32M \
             --vm 1 --vm-bytes 64M --fork 1"
        );
    }
}
