//! [`LoadSpec`]: what a load runs, where and for how long, resolved and validated; its
//! command-line form ([`LoadSpec::to_args`]) and one-line description.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::cpus::format_cpu_list;

/// Longest allowed `--duration` (7 days).
pub const MAX_DURATION_S: f64 = 7.0 * 24.0 * 3600.0;

/// Memory churn kinds of `--mem`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemKind {
    /// Write churn on files in a tmpfs (`--tmpfs-dir`).
    Tmpfs,
    /// Map, touch and unmap anonymous memory.
    Anon,
}

/// Loopback traffic protocol of `--net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetProto {
    Tcp,
    Udp,
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

    /// Checks every bound; the error ([`crate::error::Usage`]) names the option.
    pub fn validate(&self) -> Result<()> {
        self.check()
            .map_err(|e| crate::error::usage(format!("{e:#}")))
    }

    fn check(&self) -> Result<()> {
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
