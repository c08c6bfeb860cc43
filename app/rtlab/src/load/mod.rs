//! `rtcat load`: a bounded, self-cleaning load generator for latency measurements.
//!
//! Kinds of load (any combination):
//! - **CPU hogs**: `N` busy threads (integer arithmetic, no syscalls);
//! - **tmpfs write churn**: one thread writing, truncating and deleting files in a private directory
//!   under a tmpfs (default `/dev/shm`), never more than `--tmpfs-mb` MiB at a time; the directory is
//!   removed at the end, also on SIGINT/SIGTERM;
//! - **anonymous memory churn**: one thread that maps `--anon-mb` MiB, writes every page, unmaps, and
//!   starts again (page faults, zeroing, TLB shootdowns);
//! - **fork/exec churn**: `--fork-workers` threads that each run `--exec` (default `/bin/true`) in a
//!   loop and reap it;
//! - **loopback traffic**: a rate-bounded TCP stream or UDP datagram flow on 127.0.0.1 only.
//!
//! Every worker (and every process the fork churn starts) runs only on the chosen CPUs, which by
//! default exclude the RT CPU. The load ends by itself when `--duration` has elapsed.
//! `--stress-ng` runs stress-ng with equivalent options instead (where it is installed).

mod anon;
mod command;
mod fork;
mod handle;
mod hog;
mod net;
mod spec;
mod stress_ng;
mod tmpfs;

pub use command::{CONFIG_LIMIT, DEFAULT_CONFIG, LoadOptions, rt_cpus_from_config, run_load};
pub use handle::{LoadHandle, LoadReport};
pub use spec::{
    Backend, ForkLoad, LoadSpec, MAX_DURATION_S, MemKind, NetLoad, NetProto, TmpfsLoad,
};
pub use stress_ng::stress_ng_args;
pub use tmpfs::TMPFS_PREFIX;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Instant;

// The control block every in-process worker polls, and the counters it reports through.

/// What the workers did, for the [`LoadReport`].
#[derive(Default)]
struct Counters {
    hog_loops: AtomicU64,
    tmpfs_bytes: AtomicU64,
    tmpfs_files: AtomicU64,
    anon_bytes: AtomicU64,
    anon_passes: AtomicU64,
    forks: AtomicU64,
    fork_failures: AtomicU64,
    net_sent: AtomicU64,
    net_received: AtomicU64,
}

/// Shared by the workers of one load: when to stop, the counters, the errors.
struct Ctl {
    stop: AtomicBool,
    deadline: Instant,
    counters: Counters,
    errors: Mutex<Vec<String>>,
    /// pids of running fork-churn children (0 = none), one slot per worker
    children: Vec<AtomicI32>,
}

impl Ctl {
    fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }
    fn error(&self, e: String) {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e);
    }
}

fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}
