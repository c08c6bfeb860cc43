//! CPU lists in the kernel's cpulist syntax (`0-5,7`, parsed by `rttune::cpuset`), the CPUs
//! this process may use, and pinning.

use anyhow::{Result, bail};
use std::fs;

/// Parses a CPU list that must name at least one CPU (`0-5,7`, `3`, `0,2-3`) into a sorted,
/// de-duplicated list. The syntax is [`rttune::CpuSet::parse_list`]'s (the kernel's rule, where an
/// empty list is the empty set); every list here names CPUs to use or to keep free, so empty is
/// refused.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>> {
    let set = rttune::CpuSet::parse_list(s)?;
    if set.is_empty() {
        bail!("empty CPU list");
    }
    Ok(set.iter().collect())
}

/// Formats CPUs in cpulist syntax (`0-5,7`).
pub fn format_cpu_list(cpus: &[usize]) -> String {
    cpus.iter().copied().collect::<rttune::CpuSet>().to_list()
}

/// The CPUs this process may run on and that are online.
pub fn usable_cpus() -> Result<Vec<usize>> {
    let online = match fs::read_to_string("/sys/devices/system/cpu/online") {
        Ok(s) => parse_cpu_list(&s)?,
        Err(_) => (0..std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1))
            .collect(),
    };
    let aff = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))?;
    Ok(online
        .into_iter()
        .filter(|&c| aff.is_set(c).unwrap_or(false))
        .collect())
}

/// Pins the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c)?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format() {
        assert_eq!(parse_cpu_list("0-5,7").unwrap(), vec![0, 1, 2, 3, 4, 5, 7]);
        assert_eq!(parse_cpu_list(" 3 ").unwrap(), vec![3]);
        assert_eq!(parse_cpu_list("2,0-1,1").unwrap(), vec![0, 1, 2]);
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 4, 5, 7]), "0-5,7");
        assert_eq!(format_cpu_list(&[1, 3]), "1,3");
        assert!(parse_cpu_list("5-3").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("1,,2").is_err());
    }
}
