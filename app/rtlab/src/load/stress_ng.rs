//! The stress-ng backend (`--stress-ng`): the equivalent stress-ng options, and starting it as a
//! child process group.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};

use super::handle::{Inner, spawn_in_group};
use super::{LoadHandle, LoadSpec, NetProto};
use crate::cpus::format_cpu_list;
use crate::error::usage;

impl LoadHandle {
    pub(super) fn start_stress_ng(spec: &LoadSpec) -> Result<Self> {
        let exe = find_in_path("stress-ng").ok_or_else(|| {
            usage("--stress-ng: stress-ng is not installed (not in PATH); drop --stress-ng to use the built-in load")
        })?;
        let mut cmd = Command::new(exe);
        cmd.args(stress_ng_args(spec));
        let child = spawn_in_group(&mut cmd, Stdio::piped(), Stdio::piped())
            .context("--stress-ng: cannot run stress-ng")?;
        Ok(Self {
            inner: Inner::Process {
                child,
                stress_ng: true,
            },
            spec: spec.clone(),
            started: Instant::now(),
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{LoadOptions, MemKind};

    #[test]
    fn stress_ng_args_are_equivalent() {
        let spec = LoadOptions {
            cpus: Some("0".into()),
            cpu_hogs: Some(2),
            mem: vec![MemKind::Tmpfs, MemKind::Anon],
            fork_churn: true,
            duration: 1.5,
            ..LoadOptions::default()
        }
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
