//! CPU lists in the kernel's cpulist syntax (`0-5,7`).

use anyhow::{Result, bail};
use std::fs;

/// Parses a cpulist (`0-5,7`, `3`, `0,2-3`) into a sorted, de-duplicated list.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>> {
    let s = s.trim();
    if s.is_empty() {
        bail!("empty CPU list");
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: usize = a
            .parse()
            .map_err(|_| anyhow::anyhow!("\"{part}\" is not a CPU number or range"))?;
        let b: usize = b
            .parse()
            .map_err(|_| anyhow::anyhow!("\"{part}\" is not a CPU number or range"))?;
        if a > b {
            bail!("range \"{part}\" runs backwards");
        }
        if b >= 4096 {
            bail!("CPU {b} is out of range (max 4095)");
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Formats a sorted CPU list in cpulist syntax (`0-5,7`).
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
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
