//! Snapshot of the system a run is measured on (through the one root-path abstraction).

use rttune::SysRoot;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemSnapshot {
    pub hostname: String,
    pub kernel_release: String,
    pub kernel_version: String,
    pub preempt_rt: bool,
    pub cmdline: String,
    pub governor: Option<String>,
}

/// Read the snapshot; `cpu` selects which cpufreq policy's governor is reported.
pub fn snapshot(root: &SysRoot, cpu: Option<usize>) -> SystemSnapshot {
    let read = |p: &str| {
        root.read_opt(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let kernel_version = read("/proc/sys/kernel/version");
    // /sys/kernel/realtime exists only with the out-of-tree RT patch; mainline 6.12+ says
    // PREEMPT_RT in the version string (docs/NOTES.md §4).
    let preempt_rt = kernel_version.contains("PREEMPT_RT")
        || root
            .read_opt("/sys/kernel/realtime")
            .is_some_and(|s| s.trim() == "1");
    let governor = root
        .read_opt(&format!(
            "/sys/devices/system/cpu/cpu{}/cpufreq/scaling_governor",
            cpu.unwrap_or(0)
        ))
        .map(|s| s.trim().to_string());
    SystemSnapshot {
        hostname: read("/proc/sys/kernel/hostname"),
        kernel_release: read("/proc/sys/kernel/osrelease"),
        kernel_version,
        preempt_rt,
        cmdline: read("/proc/cmdline"),
        governor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_fake_tree() {
        let dir = tempfile::tempdir().unwrap();
        let w = |p: &str, v: &str| {
            let f = dir.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        };
        w("/proc/sys/kernel/version", "#1 SMP PREEMPT_RT Tue\n");
        w("/proc/sys/kernel/osrelease", "6.12.117-rt\n");
        w("/proc/sys/kernel/hostname", "board\n");
        w("/proc/cmdline", "isolcpus=6\n");
        w(
            "/sys/devices/system/cpu/cpu6/cpufreq/scaling_governor",
            "performance\n",
        );
        let s = snapshot(&SysRoot::new(dir.path()), Some(6));
        assert!(s.preempt_rt);
        assert_eq!(s.kernel_release, "6.12.117-rt");
        assert_eq!(s.governor.as_deref(), Some("performance"));
        assert_eq!(s.cmdline, "isolcpus=6");
        let s = snapshot(&SysRoot::new(dir.path()), Some(3));
        assert_eq!(s.governor, None);
    }
}
