//! Real-time setup of the process and its threads: locked memory, SCHED_FIFO, CPU affinity,
//! timer slack, /dev/cpu_dma_latency. Every failure names the capability or limit and the fix.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::limits::SETUP_STACK;
use std::fs::OpenOptions;
use std::io::Write;

fn rt_err(what: impl Into<String>, why: impl Into<String>) -> Error {
    Error::RealTime {
        what: what.into(),
        why: why.into(),
    }
}

/// mlockall(MCL_CURRENT | MCL_FUTURE): no page of the process is ever paged out or faulted in.
pub fn lock_memory() -> Result<()> {
    use nix::sys::mman::{MlockAllFlags, mlockall};
    mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE).map_err(|e| {
        rt_err(
            "mlockall",
            format!(
                "{e}; needs CAP_IPC_LOCK or a large enough RLIMIT_MEMLOCK (run as root, \
                 `setcap cap_ipc_lock,cap_sys_nice,cap_net_raw+ep rtcat`, or \
                 LimitMEMLOCK=infinity in the unit); or run with --no-rt"
            ),
        )
    })
}

/// Make the calling thread SCHED_FIFO at `priority`.
pub fn set_fifo(priority: u8) -> Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // nix has no pthread_setschedparam (sched_setscheduler would change the whole process's
    // main thread semantics under glibc): libc it is.
    // SAFETY: pthread_self is always valid; param is a valid pointer.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc != 0 {
        let e = std::io::Error::from_raw_os_error(rc);
        return Err(rt_err(
            format!("SCHED_FIFO priority {priority}"),
            format!(
                "{e}; needs CAP_SYS_NICE or RLIMIT_RTPRIO >= {priority} (run as root, setcap \
                 cap_sys_nice+ep, or LimitRTPRIO={priority} in the unit); or run with --no-rt"
            ),
        ));
    }
    Ok(())
}

/// Pin the calling thread to one CPU.
pub fn pin_to(cpu: usize) -> Result<()> {
    let what = || format!("pin to CPU {cpu}");
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)
        .map_err(|_| rt_err(what(), "beyond the CPU set size"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(|e| {
        rt_err(
            what(),
            format!(
                "{e}: the CPU is not online or not allowed here (online: {})",
                online_cpus().unwrap_or_else(|| "unknown".into())
            ),
        )
    })
}

/// Keep the calling thread off `cpus` (the cyclic thread's and the TX/RX thread's): its
/// allowed CPUs without them. A normal thread that wakes often (the recovery worker polls its
/// board every millisecond) does not belong on the cycle's CPU, where each wake-up that finds
/// the cycle running waits and each that precedes it leaves its cache behind; an isolated CPU
/// (isolcpus) keeps it away anyway, a machine without isolation does not (docs/NOTES.md §17,
/// "The cycle's cost"). Nothing is changed when no CPU would be left (a one-CPU machine).
pub fn keep_off(cpus: &[usize]) -> Result<()> {
    let me = nix::unistd::Pid::from_raw(0);
    let mut set = nix::sched::sched_getaffinity(me)
        .map_err(|e| rt_err("read the CPU affinity", e.to_string()))?;
    for &c in cpus {
        let _ = set.unset(c);
    }
    let left = (0..nix::sched::CpuSet::count()).any(|c| set.is_set(c).unwrap_or(false));
    if !left {
        return Ok(());
    }
    nix::sched::sched_setaffinity(me, &set).map_err(|e| {
        rt_err(
            format!("keep off CPUs {cpus:?}"),
            format!(
                "{e} (online: {})",
                online_cpus().unwrap_or_else(|| "unknown".into())
            ),
        )
    })
}

/// The online CPUs as the kernel lists them (`0-3`), for messages.
pub fn online_cpus() -> Option<String> {
    safefs::SysRoot::live()
        .read_opt("/sys/devices/system/cpu/online")
        .map(|s| s.trim().to_string())
}

/// Timer slack of the calling thread (1 ns: no coalescing of our wakeups).
pub fn set_timer_slack(ns: u64) -> Result<()> {
    nix::sys::prctl::set_timerslack(ns)
        .map_err(|e| rt_err(format!("PR_SET_TIMERSLACK {ns}"), e.to_string()))
}

/// Timer slack of the calling thread, in ns.
pub fn timer_slack() -> u64 {
    nix::sys::prctl::get_timerslack().map_or(0, |v| v.max(0) as u64)
}

/// Touch `kib` KiB of stack so that the cyclic path never faults a stack page in.
pub fn prefault_stack(kib: u32) {
    prefault_depth(kib as usize * 1024);
}

#[inline(never)]
fn prefault_depth(bytes: usize) {
    let mut chunk = [0u8; 16 * 1024];
    for i in (0..chunk.len()).step_by(4096) {
        chunk[i] = 1;
    }
    std::hint::black_box(&mut chunk);
    if bytes > chunk.len() {
        prefault_depth(bytes - chunk.len());
    }
    // Use the frame after the recursive call so it cannot become a tail call reusing the frame.
    std::hint::black_box(chunk[0]);
}

/// Keeps /dev/cpu_dma_latency at 0 µs while alive (closing the fd releases the request).
pub struct DmaLatencyGuard {
    _file: std::fs::File,
}

impl DmaLatencyGuard {
    /// Open /dev/cpu_dma_latency and ask for 0 µs.
    pub fn hold_zero() -> Result<Self> {
        let mut f = OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .map_err(|e| {
                rt_err(
                    "open /dev/cpu_dma_latency",
                    format!(
                        "{e} (needs root or a udev rule granting write access; or set \
                         rt.hold_cpu_dma_latency = false)"
                    ),
                )
            })?;
        f.write_all(&0i32.to_ne_bytes())
            .map_err(|e| rt_err("write 0 to /dev/cpu_dma_latency", e.to_string()))?;
        Ok(Self { _file: f })
    }
}

/// Policy and priority of the calling thread, for the results.
pub fn current_policy() -> (String, u32) {
    let mut policy = 0;
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: valid out-pointers.
    unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut policy, &mut param) };
    let name = match policy {
        libc::SCHED_FIFO => "SCHED_FIFO",
        libc::SCHED_RR => "SCHED_RR",
        _ => "SCHED_OTHER",
    };
    (name.to_string(), param.sched_priority.max(0) as u32)
}

/// Name the calling thread (visible in /proc/PID/task/TID/comm, used by `rtcat doctor`).
pub fn name_thread(name: &str) {
    if let Ok(c) = std::ffi::CString::new(name) {
        // The kernel truncates to 15 bytes + NUL.
        let _ = nix::sys::prctl::set_name(&c);
    }
}

/// Minor page faults of the calling thread so far.
pub fn thread_minor_faults() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_THREAD).map_or(0, |u| u.minor_page_faults().max(0) as u64)
}

/// Run `f` on a thread named `name` with the stack a bring-up needs (ethercrab's groups for
/// [`crate::limits::MAX_SUBDEVICES`] and its init futures are large, in debug builds above all), and wait for it.
pub(crate) fn on_setup_thread<R: Send>(
    name: &'static str,
    f: impl FnOnce() -> R + Send,
) -> Result<R> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(SETUP_STACK)
            .spawn_scoped(s, f)
            .map_err(Error::io("spawn the setup thread"))?
            .join()
            .map_err(|_| Error::Panicked(name))
    })
}

/// Real-time settings actually applied (for the results).
#[derive(Debug, Clone, Default)]
pub struct RtApplied {
    /// `--no-rt`: nothing applied.
    pub no_rt: bool,
    /// CPU of the cyclic thread.
    pub cpu: Option<usize>,
    /// CPU of the frames' TX/RX (the cyclic CPU in inline mode).
    pub txrx_cpu: Option<usize>,
    /// Scheduling policy of the cyclic thread.
    pub policy: String,
    /// Its priority.
    pub priority: u32,
    /// Its timer slack.
    pub timer_slack_ns: u64,
    /// Minor page faults of the cyclic thread during its cycles (should be 0).
    pub cycle_minor_faults: u64,
}

/// Process-wide real-time settings (`[rt]`), applied once the segment is up: /dev/cpu_dma_latency
/// held at 0 for as long as the returned guard lives, and locked memory.
pub fn setup_process(cfg: &Config, no_rt: bool) -> Result<Option<DmaLatencyGuard>> {
    let dma = if !no_rt && cfg.rt.hold_cpu_dma_latency {
        Some(DmaLatencyGuard::hold_zero()?)
    } else {
        None
    };
    if !no_rt && cfg.rt.lock_memory {
        lock_memory()?;
    }
    Ok(dma)
}

/// Real-time setup of the calling (cyclic) thread.
pub fn setup_cycle_thread(cfg: &Config, no_rt: bool) -> Result<RtApplied> {
    name_thread("rtcat-cycle");
    if !no_rt {
        if let Some(cpu) = cfg.cycle.cpu {
            pin_to(cpu)?;
        }
        set_timer_slack(cfg.rt.timer_slack_ns)?;
        set_fifo(cfg.cycle.priority)?;
        prefault_stack(cfg.rt.prefault_stack_kib);
    }
    let (policy, priority) = current_policy();
    Ok(RtApplied {
        no_rt,
        cpu: if no_rt { None } else { cfg.cycle.cpu },
        txrx_cpu: None,
        policy,
        priority,
        timer_slack_ns: timer_slack(),
        cycle_minor_faults: 0,
    })
}
