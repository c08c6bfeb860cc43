//! Reading the state of the machine (through [`SysRoot`]) into plain data shared by doctor and tune.

use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;

pub const PF_KTHREAD: u64 = 0x0020_0000;
pub const PF_NO_SETAFFINITY: u64 = 0x0400_0000;

pub const P_IRQ_DEFAULT: &str = "/proc/irq/default_smp_affinity";
pub const P_WQ_MASK: &str = "/sys/devices/virtual/workqueue/cpumask";
pub const P_TIMER_MIGRATION: &str = "/proc/sys/kernel/timer_migration";
pub const P_CPU: &str = "/sys/devices/system/cpu";

/// One interrupt line.
#[derive(Clone, Debug, Default)]
pub struct Irq {
    pub num: u32,
    /// Action (handler) names; empty = no handler requested.
    pub names: Vec<String>,
    pub chip: String,
    pub hwirq: Option<u64>,
    /// Raw `smp_affinity` (kept to write masks back in the same shape).
    pub affinity_raw: Option<String>,
    pub affinity: Option<CpuSet>,
    pub effective: Option<CpuSet>,
    /// From debugfs when mounted: kernel-managed affinity.
    pub managed: Option<bool>,
    /// Per-CPU interrupt (PPI / percpu_devid): affinity cannot be changed.
    pub per_cpu: bool,
}

impl Irq {
    pub fn smp_path(&self) -> String {
        format!("/proc/irq/{}/smp_affinity", self.num)
    }
    pub fn label(&self) -> String {
        if self.names.is_empty() {
            format!("{}", self.num)
        } else {
            format!("{}({})", self.num, self.names.join(","))
        }
    }
    /// True when one of its actions belongs to network interface `iface`.
    pub fn belongs_to(&self, iface: &str) -> bool {
        self.names.iter().any(|n| name_matches_iface(n, iface))
    }
}

/// IRQs of network interface `iface`: actions named after it (`eth1`, `eth1-rx-0`, stmmac and
/// r8169 style), actions named after its device (`virtio2-input.0`), and the MSI vectors of its
/// PCI function (`device/msi_irqs`, or the parent's for virtio).
pub fn nic_irqs(root: &SysRoot, irqs: &[Irq], iface: &str) -> std::collections::BTreeSet<u32> {
    let base = format!("/sys/class/net/{iface}/device");
    let dev = root
        .read_link(&base)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let mut s: std::collections::BTreeSet<u32> = irqs
        .iter()
        .filter(|q| {
            q.belongs_to(iface)
                || dev
                    .as_deref()
                    .is_some_and(|d| q.names.iter().any(|n| name_matches_iface(n, d)))
        })
        .map(|q| q.num)
        .collect();
    let msi = root
        .list_numeric(&format!("{base}/msi_irqs"))
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| {
            dev.as_deref()
                .filter(|d| d.starts_with("virtio"))
                .and_then(|_| root.list_numeric(&format!("{base}/../msi_irqs")).ok())
        })
        .unwrap_or_default();
    s.extend(msi);
    s
}

/// `eth1`, `eth1-rx-0`, `eth1:mac`, `eth1_tx` match `eth1`; `eth10` does not.
pub fn name_matches_iface(name: &str, iface: &str) -> bool {
    match name.strip_prefix(iface) {
        Some("") => true,
        Some(rest) => rest.starts_with(['-', ':', '_', '.', '@']),
        None => false,
    }
}

fn parse_proc_interrupts(root: &SysRoot) -> HashMap<u32, Vec<String>> {
    let mut m = HashMap::new();
    let Ok(text) = root.read_raw("/proc/interrupts") else {
        return m;
    };
    let mut lines = text.lines();
    let ncpu = lines
        .next()
        .map(|h| h.split_whitespace().count())
        .unwrap_or(0);
    for l in lines {
        let Some((num, rest)) = l.trim_start().split_once(':') else {
            continue;
        };
        let Ok(num) = num.parse::<u32>() else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // counts, then chip, hwirq-type..., then actions (comma+space separated)
        if fields.len() <= ncpu + 2 {
            continue;
        }
        let tail = &fields[ncpu..];
        // chip name, "hwirq-type" token(s), then actions; actions are the last token(s)
        let actions = tail.last().copied().unwrap_or("");
        let names: Vec<String> = actions
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        m.insert(num, names);
    }
    m
}

/// Per-IRQ state in debugfs (kernel-managed affinity, per-CPU); debugfs is mode 0700 (root only).
pub const P_IRQ_DEBUGFS: &str = "/sys/kernel/debug/irq/irqs";

pub fn read_irqs(root: &SysRoot) -> std::io::Result<Vec<Irq>> {
    let nums = root.list_numeric("/proc/irq")?;
    let mut fallback: Option<HashMap<u32, Vec<String>>> = None;
    let debugfs = root.exists(P_IRQ_DEBUGFS);
    let mut out = Vec::with_capacity(nums.len());
    for n in nums {
        let sys = format!("/sys/kernel/irq/{n}");
        let names = match root.read_opt(&format!("{sys}/actions")) {
            Some(a) => a
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            None => fallback
                .get_or_insert_with(|| parse_proc_interrupts(root))
                .get(&n)
                .cloned()
                .unwrap_or_default(),
        };
        let chip = root
            .read_opt(&format!("{sys}/chip_name"))
            .unwrap_or_default();
        let hwirq = root
            .read_opt(&format!("{sys}/hwirq"))
            .and_then(|s| s.parse().ok());
        let affinity_raw = root.read_opt(&format!("/proc/irq/{n}/smp_affinity"));
        let affinity = affinity_raw
            .as_deref()
            .and_then(|s| CpuSet::parse_mask(s).ok());
        let effective = root
            .read_opt(&format!("/proc/irq/{n}/effective_affinity_list"))
            .and_then(|s| CpuSet::parse_list(&s).ok());
        let (managed, dbg_percpu) = if debugfs {
            match root.read_opt(&format!("{P_IRQ_DEBUGFS}/{n}")) {
                Some(t) => (
                    Some(t.contains("AFFINITY_MANAGED")),
                    t.contains("IRQD_PER_CPU") || t.contains("PER_CPU_DEVID"),
                ),
                None => (None, false),
            }
        } else {
            (None, false)
        };
        let ppi = chip.starts_with("GIC") && matches!(hwirq, Some(16..=31));
        out.push(Irq {
            num: n,
            names,
            chip,
            hwirq,
            affinity_raw,
            affinity,
            effective,
            managed,
            per_cpu: dbg_percpu || ppi,
        });
    }
    Ok(out)
}

/// One thread.
#[derive(Clone, Debug, Default)]
pub struct Task {
    pub pid: u32,
    pub tid: u32,
    /// Parent process (`/proc/PID/task/TID/stat` field 4; 0 for init and kthreadd).
    pub ppid: u32,
    pub comm: String,
    pub process_comm: String,
    pub flags: u64,
    pub policy: u32,
    pub rt_priority: u32,
    pub starttime: u64,
    pub allowed: CpuSet,
}

impl Task {
    pub fn is_kthread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
    pub fn no_setaffinity(&self) -> bool {
        self.flags & PF_NO_SETAFFINITY != 0
    }
    pub fn is_irq_thread(&self) -> bool {
        self.is_kthread() && self.comm.starts_with("irq/")
    }
    pub fn policy_name(&self) -> &'static str {
        match self.policy {
            0 => "SCHED_OTHER",
            1 => "SCHED_FIFO",
            2 => "SCHED_RR",
            3 => "SCHED_BATCH",
            5 => "SCHED_IDLE",
            6 => "SCHED_DEADLINE",
            _ => "SCHED_?",
        }
    }
}

/// Parse `/proc/PID/task/TID/stat` (comm may contain spaces and parentheses).
pub fn parse_stat(s: &str) -> Option<(String, Vec<&str>)> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = s.get(close + 1..)?.split_whitespace().collect();
    Some((comm, rest))
}

pub fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        l.strip_prefix(key)
            .and_then(|r| r.strip_prefix(':'))
            .map(|v| v.trim())
    })
}

fn read_task(root: &SysRoot, pid: u32, tid: u32, process_comm: &str) -> Option<Task> {
    let base = format!("/proc/{pid}/task/{tid}");
    let stat = root.read_raw(&format!("{base}/stat")).ok()?;
    let (comm, f) = parse_stat(&stat)?;
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let status = root.read_raw(&format!("{base}/status")).ok()?;
    let allowed = status_field(&status, "Cpus_allowed_list")
        .and_then(|s| CpuSet::parse_list(s).ok())
        .or_else(|| {
            status_field(&status, "Cpus_allowed").and_then(|s| CpuSet::parse_mask(s).ok())
        })?;
    Some(Task {
        pid,
        tid,
        ppid: num(1) as u32,
        comm,
        process_comm: process_comm.to_string(),
        flags: num(6),
        starttime: num(19),
        rt_priority: num(37) as u32,
        policy: num(38) as u32,
        allowed,
    })
}

/// Parent pid and start time of process `pid`, from its main thread's stat (a zombie group
/// leader still has one); None when the process is gone.
pub fn read_proc_ids(root: &SysRoot, pid: u32) -> Option<(u32, u64)> {
    let stat = root
        .read_raw(&format!("/proc/{pid}/task/{pid}/stat"))
        .or_else(|_| root.read_raw(&format!("/proc/{pid}/stat")))
        .ok()?;
    let (_, f) = parse_stat(&stat)?;
    Some((f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// Clock ticks per second of `/proc/PID/stat` times (`USER_HZ`, 100 on Linux).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as u64 } else { 100 }
}

/// Time since boot (`/proc/uptime`) in clock ticks: the clock and unit of a task's `starttime`.
pub fn uptime_ticks(root: &SysRoot) -> Option<u64> {
    let s = root.read_opt("/proc/uptime")?;
    parse_uptime_ticks(s.split_whitespace().next()?, clock_ticks_per_sec())
}

/// `"12345.67"` seconds → clock ticks at `hz` (truncated, like the kernel's `starttime`).
pub fn parse_uptime_ticks(secs: &str, hz: u64) -> Option<u64> {
    let (whole, frac) = secs.split_once('.').unwrap_or((secs, ""));
    let whole: u64 = whole.parse().ok()?;
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // centiseconds from the first two fraction digits
    let cs: u64 = format!("{frac:0<2}")[..2].parse().ok()?;
    whole.checked_mul(hz)?.checked_add(cs * hz / 100)
}

/// Processes: pid → comm.
pub fn read_processes(root: &SysRoot) -> BTreeMap<u32, String> {
    let mut m = BTreeMap::new();
    for pid in root.list_numeric("/proc").unwrap_or_default() {
        if let Some(c) = root.read_opt(&format!("/proc/{pid}/comm")) {
            m.insert(pid, c);
        }
    }
    m
}

/// Every thread of every process (threads that vanish while reading are skipped).
pub fn read_tasks(root: &SysRoot, procs: &BTreeMap<u32, String>) -> Vec<Task> {
    let mut out = Vec::new();
    for (pid, pcomm) in procs {
        let tids = root
            .list_numeric(&format!("/proc/{pid}/task"))
            .unwrap_or_default();
        for tid in tids {
            if let Some(t) = read_task(root, *pid, tid, pcomm) {
                out.push(t);
            }
        }
    }
    out
}

pub fn pids_named(procs: &BTreeMap<u32, String>, name: &str) -> Vec<u32> {
    procs
        .iter()
        .filter(|(_, c)| c.as_str() == name)
        .map(|(p, _)| *p)
        .collect()
}

/// The cpufreq, cpuidle and `/dev/cpu_dma_latency` readers live with the power knobs.
pub use crate::knobs::power::{
    IdleState, Policy, dma_latency_holders, read_idle_states, read_policies,
};

pub fn online_cpus(root: &SysRoot) -> CpuSet {
    root.read_opt(&format!("{P_CPU}/online"))
        .and_then(|s| CpuSet::parse_list(&s).ok())
        .unwrap_or_default()
}

/// Kernel command line split into (key, value) pairs (value None for bare flags).
pub fn cmdline(root: &SysRoot) -> Vec<(String, Option<String>)> {
    let s = root.read_opt("/proc/cmdline").unwrap_or_default();
    let s = s.split(" -- ").next().unwrap_or("");
    s.split_whitespace()
        .map(|t| match t.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.trim_matches('"').to_string())),
            None => (t.to_string(), None),
        })
        .collect()
}

pub fn cmdline_get(cl: &[(String, Option<String>)], key: &str) -> Option<String> {
    cl.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone().unwrap_or_default())
}

/// Kernel config (`/proc/config.gz` or `/boot/config-$(uname -r)`), and where it came from.
pub fn kernel_config(root: &SysRoot) -> Option<(String, HashMap<String, String>)> {
    let text = if let Ok(gz) = root.read_bytes("/proc/config.gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut s)
            .ok()?;
        ("/proc/config.gz".to_string(), s)
    } else {
        let rel = root.read_opt("/proc/sys/kernel/osrelease")?;
        let p = format!("/boot/config-{rel}");
        let s = root.read_raw(&p).ok()?;
        (p, s)
    };
    let mut m = HashMap::new();
    for l in text.1.lines() {
        if let Some((k, v)) = l.split_once('=')
            && k.starts_with("CONFIG_")
        {
            m.insert(k.to_string(), v.trim_matches('"').to_string());
        } else if let Some(k) = l
            .strip_prefix("# ")
            .and_then(|r| r.strip_suffix(" is not set"))
        {
            m.insert(k.to_string(), "n".to_string());
        }
    }
    Some((text.0, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iface_matching() {
        assert!(name_matches_iface("eth1", "eth1"));
        assert!(name_matches_iface("eth1-rx-0", "eth1"));
        assert!(name_matches_iface("eth1:mac", "eth1"));
        assert!(!name_matches_iface("eth10", "eth1"));
        assert!(!name_matches_iface("xeth1", "eth1"));
    }

    #[test]
    fn stat_with_odd_comm() {
        let (c, f) = parse_stat("42 (a b) c) S 1 1 1 0 -1 2097152 0").unwrap();
        assert_eq!(c, "a b) c");
        assert_eq!(f[6], "2097152");
    }

    #[test]
    fn uptime_in_ticks() {
        assert_eq!(parse_uptime_ticks("12345.67", 100), Some(1_234_567));
        assert_eq!(parse_uptime_ticks("3.5", 100), Some(350));
        assert_eq!(parse_uptime_ticks("7", 250), Some(1750));
        assert_eq!(parse_uptime_ticks("1.999", 1000), Some(1990));
        assert_eq!(parse_uptime_ticks("x.1", 100), None);
        assert_eq!(parse_uptime_ticks("1.-1", 100), None);
    }

    #[test]
    fn ppid_and_starttime_with_odd_comm() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("proc/42/task/42")).unwrap();
        // comm with spaces and ')' : the fields start after the LAST ')'
        let mut f = vec!["0"; 50];
        f[0] = "S";
        f[1] = "17";
        f[19] = "4242";
        std::fs::write(
            dir.join("proc/42/task/42/stat"),
            format!("42 (a) 3 (b) {}\n", f.join(" ")),
        )
        .unwrap();
        let root = SysRoot::new(dir);
        assert_eq!(read_proc_ids(&root, 42), Some((17, 4242)));
        assert_eq!(read_proc_ids(&root, 43), None);
    }
}
