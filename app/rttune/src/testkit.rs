//! Fake kernel trees and a fake [`Host`] for tests and benchmarks (public so that the rtcat
//! binary's and the ladder's tests can use them too).
//!
//! [`FakeTree::rk3588`] writes an RK3588-like tree: 8 CPUs (cpufreq policy0/4/6), GMAC IRQs named
//! `eth1`, PCIe NVMe IRQs that are kernel-managed, irqbalance running; untuned or tuned.

use crate::cpuset::CpuSet;
use crate::facts;
use crate::host::{Coalesce, FileCaps, Host, ServiceStart, ServiceStop};
use crate::sysroot::SysRoot;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Options of a fake tree.
#[derive(Clone, Debug)]
pub struct TreeSpec {
    /// Runtime shield + performance governor + C-states off + boot isolation + rtcat running.
    pub tuned: bool,
    /// No `/sys/devices/system/cpu/cpufreq` (e.g. rockchip_rt.config).
    pub cpufreq: bool,
    /// cpuidle present.
    pub cpuidle: bool,
    /// Extra unused IRQ descriptors and extra user tasks (benchmark size).
    pub extra_irqs: u32,
    pub extra_tasks: u32,
}

impl Default for TreeSpec {
    fn default() -> Self {
        TreeSpec {
            tuned: false,
            cpufreq: true,
            cpuidle: true,
            extra_irqs: 0,
            extra_tasks: 0,
        }
    }
}

pub struct FakeTree {
    pub root: PathBuf,
}

fn put(root: &Path, p: &str, content: &str) {
    let path = root.join(p.trim_start_matches('/'));
    if let Some(d) = path.parent() {
        fs::create_dir_all(d).expect("create fake dir");
    }
    fs::write(&path, content).expect("write fake file");
}

struct IrqSpec<'a> {
    num: u32,
    name: &'a str,
    chip: &'a str,
    hwirq: u32,
    managed: bool,
    per_cpu: bool,
}

const CPUS: usize = 8;
const ALL: &str = "ff";

impl FakeTree {
    /// Write an RK3588-like tree under `root` (which must exist and be empty).
    pub fn rk3588(root: &Path, spec: &TreeSpec) -> FakeTree {
        let t = spec.tuned;
        let w = |p: &str, c: &str| put(root, p, c);
        // --- kernel identity, command line, config
        if t {
            w(
                "/proc/sys/kernel/version",
                "#1 SMP PREEMPT_RT Fri Jun 6 10:00:00 CST 2025\n",
            );
            w("/proc/sys/kernel/osrelease", "5.10.160-rt89\n");
            w("/sys/kernel/realtime", "1\n");
            w(
                "/proc/cmdline",
                "storagemedia=emmc console=ttyFIQ0 root=PARTUUID=614e0000-0000 rw rootwait isolcpus=nohz,domain,managed_irq,6 nohz_full=6 rcu_nocbs=6 irqaffinity=0-5,7 cpufreq.default_governor=performance\n",
            );
            w("/sys/devices/system/cpu/isolated", "6\n");
            w("/sys/devices/system/cpu/nohz_full", "6\n");
            w(
                "/boot/config-5.10.160-rt89",
                "CONFIG_PREEMPT_RT=y\nCONFIG_HZ_1000=y\nCONFIG_HZ=1000\nCONFIG_NO_HZ_FULL=y\nCONFIG_RCU_NOCB_CPU=y\nCONFIG_CPU_FREQ=y\n",
            );
        } else {
            w(
                "/proc/sys/kernel/version",
                "#1 SMP PREEMPT Fri Jun 6 10:00:00 CST 2025\n",
            );
            w("/proc/sys/kernel/osrelease", "5.10.160\n");
            w(
                "/proc/cmdline",
                "storagemedia=emmc console=ttyFIQ0 root=PARTUUID=614e0000-0000 rw rootwait\n",
            );
            w("/sys/devices/system/cpu/isolated", "\n");
            w(
                "/boot/config-5.10.160",
                "# CONFIG_PREEMPT_RT is not set\nCONFIG_PREEMPT=y\nCONFIG_HZ_300=y\nCONFIG_HZ=300\n# CONFIG_NO_HZ_FULL is not set\n# CONFIG_RCU_NOCB_CPU is not set\n",
            );
        }
        w(
            "/proc/sys/kernel/random/boot_id",
            "3f1c2a9e-7d4b-4f59-9a51-1e2b3c4d5e6f\n",
        );
        // an hour after boot: every task below started long before (starttime in clock ticks)
        w("/proc/uptime", "3600.00 20000.00\n");
        w("/proc/sys/kernel/sched_rt_runtime_us", "950000\n");
        w("/proc/sys/kernel/sched_rt_period_us", "1000000\n");
        w(
            "/proc/sys/kernel/timer_migration",
            if t { "0\n" } else { "1\n" },
        );
        // --- CPUs, cpufreq, cpuidle
        w("/sys/devices/system/cpu/online", "0-7\n");
        w("/sys/devices/system/cpu/possible", "0-7\n");
        if spec.cpufreq {
            for (pol, cpus, max) in [
                (0, "0 1 2 3", 1_800_000),
                (4, "4 5", 2_256_000),
                (6, "6 7", 2_256_000),
            ] {
                let d = format!("/sys/devices/system/cpu/cpufreq/policy{pol}");
                w(&format!("{d}/related_cpus"), &format!("{cpus}\n"));
                w(&format!("{d}/affected_cpus"), &format!("{cpus}\n"));
                let gov = if t && pol == 6 {
                    "performance"
                } else {
                    "schedutil"
                };
                w(&format!("{d}/scaling_governor"), &format!("{gov}\n"));
                w(
                    &format!("{d}/scaling_available_governors"),
                    "conservative ondemand userspace powersave interactive performance schedutil \n",
                );
                w(&format!("{d}/cpuinfo_min_freq"), "408000\n");
                w(&format!("{d}/cpuinfo_max_freq"), &format!("{max}\n"));
                w(&format!("{d}/scaling_min_freq"), "408000\n");
                w(&format!("{d}/scaling_max_freq"), &format!("{max}\n"));
                // cpuN/cpufreq -> ../cpufreq/policyP, as the kernel links them
                for cpu in cpus.split(' ') {
                    let link = root.join(format!("sys/devices/system/cpu/cpu{cpu}/cpufreq"));
                    fs::create_dir_all(link.parent().expect("parent")).expect("mkdir");
                    std::os::unix::fs::symlink(format!("../cpufreq/policy{pol}"), &link)
                        .expect("symlink");
                }
            }
        }
        if spec.cpuidle {
            w(
                "/sys/devices/system/cpu/cpuidle/current_driver",
                "psci_idle\n",
            );
            for cpu in 0..CPUS {
                for (i, name, lat) in [
                    (0, "WFI", 1),
                    (1, "cpu-sleep", 250),
                    (2, "cluster-sleep", 1500),
                ] {
                    let d = format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state{i}");
                    w(&format!("{d}/name"), &format!("{name}\n"));
                    w(&format!("{d}/latency"), &format!("{lat}\n"));
                    let off = t && cpu == 6 && i > 0;
                    w(&format!("{d}/disable"), if off { "1\n" } else { "0\n" });
                }
            }
        }
        // --- IRQs
        let hk = "bf"; // 0-5,7
        w(
            "/proc/irq/default_smp_affinity",
            if t { "bf\n" } else { "ff\n" },
        );
        let mut irqs = vec![
            IrqSpec {
                num: 11,
                name: "arch_timer",
                chip: "GICv3",
                hwirq: 30,
                managed: false,
                per_cpu: true,
            },
            IrqSpec {
                num: 13,
                name: "arm-pmu",
                chip: "GICv3",
                hwirq: 23,
                managed: false,
                per_cpu: true,
            },
            IrqSpec {
                num: 18,
                name: "rockchip_thermal",
                chip: "GICv3",
                hwirq: 429,
                managed: false,
                per_cpu: false,
            },
            IrqSpec {
                num: 22,
                name: "ttyFIQ0",
                chip: "GICv3",
                hwirq: 455,
                managed: false,
                per_cpu: false,
            },
            IrqSpec {
                num: 35,
                name: "dw-mci",
                chip: "GICv3",
                hwirq: 236,
                managed: false,
                per_cpu: false,
            },
            IrqSpec {
                num: 36,
                name: "mmc0",
                chip: "GICv3",
                hwirq: 237,
                managed: false,
                per_cpu: false,
            },
            IrqSpec {
                num: 60,
                name: "eth1",
                chip: "GICv3",
                hwirq: 266,
                managed: false,
                per_cpu: false,
            },
            IrqSpec {
                num: 61,
                name: "eth0",
                chip: "GICv3",
                hwirq: 259,
                managed: false,
                per_cpu: false,
            },
            IrqSpec {
                num: 70,
                name: "xhci-hcd:usb1",
                chip: "GICv3",
                hwirq: 252,
                managed: false,
                per_cpu: false,
            },
            IrqSpec {
                num: 80,
                name: "rockchip_usb2phy",
                chip: "GICv3",
                hwirq: 425,
                managed: false,
                per_cpu: false,
            },
            IrqSpec {
                num: 100,
                name: "nvme0q0",
                chip: "ITS-MSI",
                hwirq: 524288,
                managed: false,
                per_cpu: false,
            },
            IrqSpec {
                num: 101,
                name: "nvme0q1",
                chip: "ITS-MSI",
                hwirq: 524289,
                managed: true,
                per_cpu: false,
            },
            IrqSpec {
                num: 102,
                name: "nvme0q2",
                chip: "ITS-MSI",
                hwirq: 524290,
                managed: true,
                per_cpu: false,
            },
            IrqSpec {
                num: 110,
                name: "",
                chip: "GICv3",
                hwirq: 300,
                managed: false,
                per_cpu: false,
            },
        ];
        let extra: Vec<(u32, String)> = (0..spec.extra_irqs)
            .map(|i| (200 + i, format!("dev{i}")))
            .collect();
        for (n, name) in &extra {
            irqs.push(IrqSpec {
                num: *n,
                name: name.as_str(),
                chip: "GICv3",
                hwirq: 500 + n,
                managed: false,
                per_cpu: false,
            });
        }
        let mut interrupts = String::from(
            "           CPU0       CPU1       CPU2       CPU3       CPU4       CPU5       CPU6       CPU7       \n",
        );
        for q in &irqs {
            let d = format!("/proc/irq/{}", q.num);
            // placement
            let (aff, eff) = if q.per_cpu {
                (ALL.to_string(), "0-7".to_string())
            } else if q.managed {
                // nvme0q1 -> CPU 0-3, nvme0q2 -> CPU 4-7 (spread by the kernel, cannot move)
                if q.num == 101 {
                    ("0f".into(), "0".into())
                } else if t {
                    // isolcpus=managed_irq keeps the effective CPU off the isolated one
                    ("f0".into(), "4".into())
                } else {
                    ("f0".into(), "6".into())
                }
            } else if q.name == "eth1" {
                if t {
                    ("20".into(), "5".into())
                } else {
                    (ALL.into(), "6".into())
                }
            } else if t {
                (
                    hk.into(),
                    if q.num % 2 == 0 {
                        "0".into()
                    } else {
                        "7".into()
                    },
                )
            } else {
                (
                    ALL.into(),
                    if q.num % 3 == 0 {
                        "6".into()
                    } else {
                        "0".into()
                    },
                )
            };
            w(&format!("{d}/smp_affinity"), &format!("{aff}\n"));
            let set = CpuSet::parse_mask(&aff).unwrap_or_default();
            w(
                &format!("{d}/smp_affinity_list"),
                &format!("{}\n", set.to_list()),
            );
            w(&format!("{d}/effective_affinity_list"), &format!("{eff}\n"));
            w(&format!("{d}/node"), "0\n");
            let s = format!("/sys/kernel/irq/{}", q.num);
            w(&format!("{s}/actions"), &format!("{}\n", q.name));
            w(&format!("{s}/chip_name"), &format!("{}\n", q.chip));
            w(&format!("{s}/hwirq"), &format!("{}\n", q.hwirq));
            let mut st = format!(
                "handler:  handle_fasteoi_irq\ndevice:   (null)\nstatus:   0x00000104\nistate:   0x00000000\nddepth:   0\nwdepth:   0\ndstate:   0x{}\n",
                if q.managed { "13600202" } else { "13400202" }
            );
            if q.managed {
                st.push_str("            IRQD_AFFINITY_MANAGED\n");
            }
            if q.per_cpu {
                st.push_str("            IRQD_PER_CPU\n");
            }
            w(&format!("/sys/kernel/debug/irq/irqs/{}", q.num), &st);
            interrupts.push_str(&format!(
                "{:>4}: {} {:>8} {:>5} Level     {}\n",
                q.num,
                "         0".repeat(CPUS),
                q.chip,
                q.hwirq,
                q.name
            ));
        }
        w("/proc/interrupts", &interrupts);
        // --- workqueues
        let wq = if t { "bf\n" } else { "ff\n" };
        w("/sys/devices/virtual/workqueue/cpumask", wq);
        w("/sys/devices/virtual/workqueue/writeback/cpumask", "ff\n");
        w(
            "/sys/devices/virtual/workqueue/blkcg_punt_bio/cpumask",
            "ff\n",
        );
        // --- memory
        w(
            "/sys/kernel/mm/transparent_hugepage/enabled",
            if t {
                "always madvise [never]\n"
            } else {
                "[always] madvise never\n"
            },
        );
        w(
            "/proc/swaps",
            if t {
                "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
            } else {
                "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/zram0                              partition\t4046844\t\t0\t\t100\n"
            },
        );
        // --- NICs
        for (i, up) in [("eth0", false), ("eth1", true)] {
            let d = format!("/sys/class/net/{i}");
            w(
                &format!("{d}/operstate"),
                if up { "up\n" } else { "down\n" },
            );
            w(&format!("{d}/speed"), if up { "100\n" } else { "-1\n" });
            w(
                &format!("{d}/duplex"),
                if up { "full\n" } else { "unknown\n" },
            );
        }
        // --- systemd, service unit
        fs::create_dir_all(root.join("run/systemd/system")).expect("mkdir");
        w(
            "/lib/systemd/system/irqbalance.service",
            "[Unit]\nDescription=irqbalance daemon\n[Service]\nExecStart=/usr/sbin/irqbalance --foreground\n",
        );
        w(
            "/etc/systemd/system/rtcat.service",
            if t {
                "[Unit]\nDescription=rtcat EtherCAT master\n[Service]\nType=notify\nUser=rtcat\nExecStart=/usr/bin/rtcat run\nAmbientCapabilities=CAP_SYS_NICE CAP_IPC_LOCK CAP_NET_RAW\nLimitMEMLOCK=infinity\nWatchdogSec=2\n"
            } else {
                "[Unit]\nDescription=rtcat EtherCAT master\n[Service]\nType=notify\nUser=rtcat\nExecStart=/usr/bin/rtcat run\n"
            },
        );
        // --- tasks
        let mut b = TaskBuilder { root, start: 100 };
        let all = CpuSet::parse_list("0-7").unwrap_or_default();
        let hkset = CpuSet::parse_list("0-5,7").unwrap_or_default();
        let user_aff = if t { &hkset } else { &all };
        b.process(
            1,
            "systemd",
            &[("systemd", 0, 0, 0)],
            user_aff,
            "/sbin/init",
        );
        b.process(
            2,
            "kthreadd",
            &[("kthreadd", facts::PF_KTHREAD, 0, 0)],
            user_aff,
            "",
        );
        let mut pid = 10;
        for cpu in 0..CPUS {
            let one = CpuSet::single(cpu);
            for name in ["cpuhp", "migration", "ksoftirqd", "kworker"] {
                let comm = if name == "kworker" {
                    format!("kworker/{cpu}:0")
                } else {
                    format!("{name}/{cpu}")
                };
                let pol = if name == "migration" { 1 } else { 0 };
                let prio = if name == "migration" { 99 } else { 0 };
                b.process(
                    pid,
                    &comm,
                    &[(
                        &comm,
                        facts::PF_KTHREAD | facts::PF_NO_SETAFFINITY,
                        pol,
                        prio,
                    )],
                    &one,
                    "",
                );
                pid += 1;
            }
        }
        b.process(
            60,
            "rcu_preempt",
            &[("rcu_preempt", facts::PF_KTHREAD, 0, 0)],
            user_aff,
            "",
        );
        b.process(
            61,
            "kworker/u16:1",
            &[(
                "kworker/u16:1",
                facts::PF_KTHREAD | facts::PF_NO_SETAFFINITY,
                0,
                0,
            )],
            &hkset,
            "",
        );
        let eth_irq_aff = if t { CpuSet::single(5) } else { all.clone() };
        b.process(
            62,
            "irq/60-eth1",
            &[("irq/60-eth1", facts::PF_KTHREAD, 1, 50)],
            &eth_irq_aff,
            "",
        );
        b.process(
            300,
            "systemd-journal",
            &[("systemd-journal", 0, 0, 0)],
            user_aff,
            "/lib/systemd/systemd-journald",
        );
        b.process(
            400,
            "sshd",
            &[("sshd", 0, 0, 0)],
            user_aff,
            "/usr/sbin/sshd -D",
        );
        b.process(410, "bash", &[("bash", 0, 0, 0)], user_aff, "-bash");
        if !t {
            b.process(
                600,
                "irqbalance",
                &[("irqbalance", 0, 0, 0), ("gmain", 0, 0, 0)],
                &all,
                "/usr/sbin/irqbalance --foreground",
            );
            b.process(
                700,
                "stress",
                &[("stress", 0, 0, 0)],
                &CpuSet::single(6),
                "stress --cpu 1",
            );
        } else {
            b.process(
                900,
                "rtcat",
                &[
                    ("rtcat", 0, 0, 0),
                    ("rtcat-cycle", 0, 1, 80),
                    ("rtcat-txrx", 0, 1, 81),
                    ("rtcat-status", 0, 0, 0),
                ],
                &hkset,
                "/usr/bin/rtcat run",
            );
            // thread affinities per contract
            b.set_thread_affinity(900, 901, &CpuSet::single(6));
            b.set_thread_affinity(900, 902, &CpuSet::single(6));
            fs::create_dir_all(root.join("proc/900/fd")).expect("mkdir");
            std::os::unix::fs::symlink("/dev/cpu_dma_latency", root.join("proc/900/fd/5"))
                .expect("symlink");
            put(
                root,
                "/proc/900/limits",
                "Limit                     Soft Limit           Hard Limit           Units     \nMax locked memory         unlimited            unlimited            bytes     \n",
            );
        }
        for i in 0..spec.extra_tasks {
            let p = 2000 + i * 2;
            let name = format!("worker{i}");
            b.process(
                p,
                &name,
                &[(&name, 0, 0, 0), ("helper", 0, 0, 0)],
                user_aff,
                &format!("/usr/bin/worker {i}"),
            );
        }
        FakeTree {
            root: root.to_path_buf(),
        }
    }

    pub fn sysroot(&self) -> SysRoot {
        SysRoot::new(&self.root)
    }

    /// Remove cpufreq entirely (as with rockchip_rt.config).
    pub fn remove_cpufreq(&self) {
        let _ = fs::remove_dir_all(self.root.join("sys/devices/system/cpu/cpufreq"));
    }

    /// Set `/proc/uptime` (seconds since boot).
    pub fn set_uptime(&self, secs: u64) {
        put(
            &self.root,
            "/proc/uptime",
            &format!("{secs}.00 {}.00\n", secs * 6),
        );
    }

    /// Add one task (a process's main thread when `tid == pid`, which also creates the process)
    /// as the kernel would show it; an existing task with that tid is replaced.
    pub fn add_task(&self, t: &FakeTask) {
        let pid = t.pid;
        if t.tid == pid {
            let _ = fs::remove_dir_all(self.root.join(format!("proc/{pid}")));
            put(
                &self.root,
                &format!("/proc/{pid}/comm"),
                &format!("{}\n", t.comm),
            );
            put(&self.root, &format!("/proc/{pid}/cmdline"), &t.comm);
            put(
                &self.root,
                &format!("/proc/{pid}/status"),
                &format!("Name:\t{}\nTgid:\t{pid}\nPid:\t{pid}\n", t.comm),
            );
            fs::create_dir_all(self.root.join(format!("proc/{pid}/fd"))).expect("mkdir fd");
        }
        let tid = t.tid;
        put(
            &self.root,
            &format!("/proc/{pid}/task/{tid}/stat"),
            &stat_text(
                tid,
                &t.comm,
                &stat_fields(t.ppid, pid, t.flags, 0, 0, t.starttime),
            ),
        );
        put(
            &self.root,
            &format!("/proc/{pid}/task/{tid}/status"),
            &task_status(&t.comm, pid, tid, &t.cpus),
        );
    }

    /// Remove a process and its threads (it exited).
    pub fn remove_process(&self, pid: u32) {
        let _ = fs::remove_dir_all(self.root.join(format!("proc/{pid}")));
    }
}

/// One task for [`FakeTree::add_task`].
#[derive(Clone, Debug, Default)]
pub struct FakeTask {
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    pub comm: String,
    /// `PF_*` flags.
    pub flags: u64,
    /// Clock ticks since boot (`/proc/uptime` × 100).
    pub starttime: u64,
    pub cpus: CpuSet,
}

/// The fields of `/proc/PID/task/TID/stat` after `(comm)`, from the state (index 0 = field 3).
fn stat_fields(
    ppid: u32,
    pgrp: u32,
    flags: u64,
    policy: u32,
    prio: u32,
    start: u64,
) -> Vec<String> {
    let mut f: Vec<String> = vec!["0".to_string(); 50];
    f[0] = "S".into();
    f[1] = ppid.to_string();
    f[2] = pgrp.to_string();
    f[3] = pgrp.to_string();
    f[4] = "0".into();
    f[5] = "-1".into();
    f[6] = flags.to_string();
    f[15] = if policy == 0 {
        "20".into()
    } else {
        format!("-{}", prio + 1)
    };
    f[17] = "1".into();
    f[19] = start.to_string();
    f[36] = "0".into();
    f[37] = prio.to_string();
    f[38] = policy.to_string();
    f
}

fn stat_text(tid: u32, comm: &str, f: &[String]) -> String {
    format!("{tid} ({comm}) {}\n", f.join(" "))
}

struct TaskBuilder<'a> {
    root: &'a Path,
    start: u64,
}

impl TaskBuilder<'_> {
    /// threads: (comm, flags, policy, rt_priority); the first is the main thread (tid = pid).
    fn process(
        &mut self,
        pid: u32,
        comm: &str,
        threads: &[(&str, u64, u32, u32)],
        aff: &CpuSet,
        cmdline: &str,
    ) {
        put(
            self.root,
            &format!("/proc/{pid}/comm"),
            &format!("{comm}\n"),
        );
        put(
            self.root,
            &format!("/proc/{pid}/cmdline"),
            &cmdline.replace(' ', "\0"),
        );
        let kthread = threads
            .first()
            .map(|t| t.1 & facts::PF_KTHREAD != 0)
            .unwrap_or(false);
        let vm = if kthread {
            String::new()
        } else if comm == "rtcat" {
            "VmLck:\t   10240 kB\nVmRSS:\t   10304 kB\n".to_string()
        } else {
            "VmLck:\t       0 kB\nVmRSS:\t    4096 kB\n".to_string()
        };
        let cap = if comm == "rtcat" {
            "0000000000806000"
        } else {
            "0000000000000000"
        };
        put(
            self.root,
            &format!("/proc/{pid}/status"),
            &format!("Name:\t{comm}\nTgid:\t{pid}\nPid:\t{pid}\n{vm}CapEff:\t{cap}\n"),
        );
        fs::create_dir_all(self.root.join(format!("proc/{pid}/fd"))).expect("mkdir fd");
        // init and kthreadd have no parent, kthreads are kthreadd's, the rest init's
        let ppid = match pid {
            1 | 2 => 0,
            _ if kthread => 2,
            _ => 1,
        };
        for (i, (tcomm, flags, policy, prio)) in threads.iter().enumerate() {
            let tid = pid + i as u32;
            self.start += 7;
            let mut f = stat_fields(ppid, pid, *flags, *policy, *prio, self.start);
            f[17] = threads.len().to_string();
            put(
                self.root,
                &format!("/proc/{pid}/task/{tid}/stat"),
                &stat_text(tid, tcomm, &f),
            );
            put(
                self.root,
                &format!("/proc/{pid}/task/{tid}/status"),
                &task_status(tcomm, pid, tid, aff),
            );
            if comm == "rtcat" {
                put(
                    self.root,
                    &format!("/proc/{pid}/task/{tid}/timerslack_ns"),
                    if tcomm.ends_with("cycle") {
                        "1\n"
                    } else {
                        "50000\n"
                    },
                );
            }
        }
    }

    fn set_thread_affinity(&mut self, pid: u32, tid: u32, aff: &CpuSet) {
        let p = format!("/proc/{pid}/task/{tid}/stat");
        let stat = fs::read_to_string(self.root.join(p.trim_start_matches('/'))).expect("stat");
        let comm = facts::parse_stat(&stat).map(|(c, _)| c).unwrap_or_default();
        put(
            self.root,
            &format!("/proc/{pid}/task/{tid}/status"),
            &task_status(&comm, pid, tid, aff),
        );
    }
}

fn task_status(comm: &str, pid: u32, tid: u32, aff: &CpuSet) -> String {
    format!(
        "Name:\t{comm}\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{tid}\nCpus_allowed:\t{}\nCpus_allowed_list:\t{}\nvoluntary_ctxt_switches:\t12\n",
        aff.to_mask_like(ALL),
        aff.to_list()
    )
}

/// A [`Host`] acting on a fake tree: stopping a service moves its `/proc/PID` aside, affinity
/// changes rewrite `Cpus_allowed*` in the task's status file, coalescing lives in memory.
pub struct FakeHost {
    root: SysRoot,
    pub coalesce: Mutex<HashMap<String, Coalesce>>,
    /// Interfaces whose set_coalesce fails with this errno.
    pub coalesce_errno: Mutex<HashMap<String, i32>>,
    pub log: Mutex<Vec<String>>,
    /// What `rauc status --detailed --output-format=json` prints; `None`: RAUC not installed.
    pub rauc: Mutex<Option<io::Result<String>>>,
}

impl FakeHost {
    pub fn new(root: &SysRoot) -> FakeHost {
        let mut c = HashMap::new();
        // stmmac 5.10 defaults: tx-usecs 1000, tx-frames 25, rx-usecs (RIWT) 0? -> use realistic values
        let v = Coalesce {
            rx_coalesce_usecs: 2048,
            rx_max_coalesced_frames: 0,
            tx_coalesce_usecs: 1000,
            tx_max_coalesced_frames: 25,
            ..Coalesce::default()
        };
        c.insert("eth1".to_string(), v);
        FakeHost {
            root: root.clone(),
            coalesce: Mutex::new(c),
            coalesce_errno: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            rauc: Mutex::new(None),
        }
    }

    fn note(&self, s: String) {
        if let Ok(mut l) = self.log.lock() {
            l.push(s);
        }
    }

    fn stash(&self) -> PathBuf {
        self.root.root().join(".fake-stopped")
    }
}

impl Host for FakeHost {
    fn stop_service(&self, root: &SysRoot, how: &ServiceStop) -> io::Result<()> {
        let name = match how {
            ServiceStop::Systemd { unit } => unit.trim_end_matches(".service").to_string(),
            ServiceStop::Signalled { cmdline, .. } => {
                cmdline[0].rsplit('/').next().unwrap_or("").to_string()
            }
        };
        let pids = facts::pids_named(&facts::read_processes(root), &name);
        if pids.is_empty() {
            return Err(io::Error::other(format!("{name} not running")));
        }
        fs::create_dir_all(self.stash())?;
        for p in pids {
            fs::rename(
                root.path(&format!("/proc/{p}")),
                self.stash().join(p.to_string()),
            )?;
        }
        self.note(format!("stop {name}"));
        Ok(())
    }

    fn start_service(&self, root: &SysRoot, how: &ServiceStart) -> io::Result<()> {
        let name = match how {
            ServiceStart::Systemd { unit } => unit.trim_end_matches(".service").to_string(),
            ServiceStart::Exec { program } => program
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        let stash = self.stash();
        let mut started = false;
        for e in fs::read_dir(&stash)? {
            let e = e?;
            let comm = fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if comm.trim() == name {
                fs::rename(
                    e.path(),
                    root.path(&format!("/proc/{}", e.file_name().to_string_lossy())),
                )?;
                started = true;
            }
        }
        let _ = fs::remove_dir(&stash);
        if !started {
            return Err(io::Error::other(format!("{name}: nothing to start")));
        }
        self.note(format!("start {name}"));
        Ok(())
    }

    fn get_coalesce(&self, iface: &str) -> io::Result<Coalesce> {
        self.coalesce
            .lock()
            .ok()
            .and_then(|m| m.get(iface).copied())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }

    fn set_coalesce(&self, iface: &str, c: &Coalesce) -> io::Result<()> {
        if let Some(e) = self
            .coalesce_errno
            .lock()
            .ok()
            .and_then(|m| m.get(iface).copied())
        {
            return Err(io::Error::from_raw_os_error(e));
        }
        let mut m = self
            .coalesce
            .lock()
            .map_err(|_| io::Error::other("poisoned"))?;
        if !m.contains_key(iface) {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        m.insert(iface.to_string(), *c);
        self.note(format!("coalesce {iface} {}", c.describe()));
        Ok(())
    }

    fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> io::Result<()> {
        for pid in self.root.list_numeric("/proc")? {
            let p = format!("/proc/{pid}/task/{tid}/status");
            if let Ok(st) = self.root.read_raw(&p) {
                let mut out = String::new();
                for l in st.lines() {
                    if let Some(old) = l.strip_prefix("Cpus_allowed:\t") {
                        out.push_str(&format!("Cpus_allowed:\t{}\n", cpus.to_mask_like(old)));
                    } else if l.starts_with("Cpus_allowed_list:") {
                        out.push_str(&format!("Cpus_allowed_list:\t{}\n", cpus.to_list()));
                    } else {
                        out.push_str(l);
                        out.push('\n');
                    }
                }
                fs::write(self.root.path(&p), out)?;
                self.note(format!("affinity {tid} {cpus}"));
                return Ok(());
            }
        }
        Err(io::Error::from_raw_os_error(libc::ESRCH))
    }

    fn rauc_status(&self) -> io::Result<Option<String>> {
        match &*self.rauc.lock().unwrap() {
            None => Ok(None),
            Some(Ok(s)) => Ok(Some(s.clone())),
            Some(Err(e)) => Err(io::Error::new(e.kind(), e.to_string())),
        }
    }

    fn file_caps(&self, _root: &SysRoot, _path: &str) -> io::Result<Option<FileCaps>> {
        Ok(None)
    }
}

/// Every file under `dir` with its bytes (symlinks as their target), for byte-identity checks.
pub fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut m = std::collections::BTreeMap::new();
    fn walk(base: &Path, d: &Path, m: &mut std::collections::BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(rd) = fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap_or(&p).to_path_buf();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_symlink() {
                let t = fs::read_link(&p)
                    .map(|t| t.to_string_lossy().into_owned())
                    .unwrap_or_default();
                m.insert(rel, format!("-> {t}").into_bytes());
            } else if ft.is_dir() {
                m.insert(rel.join(""), b"<dir>".to_vec());
                walk(base, &p, m);
            } else {
                m.insert(rel, fs::read(&p).unwrap_or_default());
            }
        }
    }
    walk(dir, dir, &mut m);
    m
}
