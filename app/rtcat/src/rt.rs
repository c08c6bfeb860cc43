//! Real-time setup of the process and its threads: locked memory, SCHED_FIFO, CPU affinity,
//! timer slack, /dev/cpu_dma_latency. Every failure names the capability or limit and the fix.

use anyhow::{Context, Result, bail};
use std::fs::OpenOptions;
use std::io::Write;

fn os_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// mlockall(MCL_CURRENT | MCL_FUTURE): no page of the process is ever paged out or faulted in.
pub fn lock_memory() -> Result<()> {
    // SAFETY: plain syscall.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        let e = os_err();
        bail!(
            "mlockall failed: {e}; needs CAP_IPC_LOCK or a large enough RLIMIT_MEMLOCK \
             (run as root, `setcap cap_ipc_lock,cap_sys_nice,cap_net_raw+ep rtcat`, or \
             LimitMEMLOCK=infinity in the unit); or run with --no-rt"
        );
    }
    Ok(())
}

/// Make the calling thread SCHED_FIFO at `priority`.
pub fn set_fifo(priority: u8) -> Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: pthread_self is always valid; param is a valid pointer.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc != 0 {
        let e = std::io::Error::from_raw_os_error(rc);
        bail!(
            "SCHED_FIFO priority {priority} refused: {e}; needs CAP_SYS_NICE or RLIMIT_RTPRIO >= \
             {priority} (run as root, setcap cap_sys_nice+ep, or LimitRTPRIO={priority} in the \
             unit); or run with --no-rt"
        );
    }
    Ok(())
}

/// Pin the calling thread to one CPU.
pub fn pin_to(cpu: usize) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)
        .with_context(|| format!("CPU {cpu} is beyond the CPU set size"))?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).with_context(|| {
        format!(
            "cannot pin to CPU {cpu}: it is not online or not allowed here (online: {})",
            online_cpus().unwrap_or_else(|| "unknown".into())
        )
    })?;
    Ok(())
}

pub fn online_cpus() -> Option<String> {
    rttune::SysRoot::live()
        .read_opt("/sys/devices/system/cpu/online")
        .map(|s| s.trim().to_string())
}

/// Timer slack of the calling thread (1 ns: no coalescing of our wakeups).
pub fn set_timer_slack(ns: u64) -> Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) } != 0 {
        bail!("PR_SET_TIMERSLACK {ns}: {}", os_err());
    }
    Ok(())
}

pub fn timer_slack() -> u64 {
    // SAFETY: prctl with integer arguments.
    let v = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    v.max(0) as u64
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
    pub fn hold_zero() -> Result<Self> {
        let mut f = OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .context(
                "cannot open /dev/cpu_dma_latency (needs root or a udev rule granting write \
                 access; or set rt.hold_cpu_dma_latency = false)",
            )?;
        f.write_all(&0i32.to_ne_bytes())
            .context("write 0 to /dev/cpu_dma_latency")?;
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
        // SAFETY: valid NUL-terminated string of at most 15 bytes + NUL (truncated by the kernel).
        unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
    }
}

/// Minor page faults of the calling thread so far.
pub fn thread_minor_faults() -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_minflt as u64
}
