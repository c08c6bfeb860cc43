//! [`LoadHandle`]: a running load, as threads of this process, as a child `rtcat load` process or
//! as stress-ng; stopping it (every thread joined, every child reaped, the tmpfs files removed)
//! and its [`LoadReport`].

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::anon::anon_worker;
use super::fork::fork_worker;
use super::hog::hog_worker;
use super::net::{tcp_rx_worker, tcp_tx_worker, udp_rx_worker, udp_tx_worker};
use super::tmpfs::{DirGuard, prepare_tmpfs_dir, tmpfs_worker};
use super::{Backend, Counters, Ctl, LoadSpec, NetProto, gettid};
pub(super) use crate::child::spawn_in_group;
use crate::cpus::{format_cpu_list, pin_current_thread};

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

struct StopOnDrop(Option<Arc<Ctl>>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.stop.store(true, Ordering::SeqCst);
        }
    }
}

pub(super) enum Inner {
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
    pub(super) inner: Inner,
    pub(super) spec: LoadSpec,
    pub(super) started: Instant,
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
        let child = spawn_in_group(&mut cmd, Stdio::piped(), Stdio::piped())
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
