//! What the exec-time benchmarks share (`api`, `bookkeeping`, `dc`, `shm` and the mailbox
//! benches' `side_by_side`): a timed run of an in-process simulated segment with the cyclic
//! thread on the last CPU, SCHED_FIFO and locked memory only as root, and the median of rounds.

// Each bench uses the part it needs.
#![allow(dead_code)]

use ecsim::{Faults, SegmentSpec};
use rtcat_master::{Config, RunSpec, Stop, Target};
use std::time::Duration;

/// Whether the bench runs as root (the cyclic thread then gets SCHED_FIFO and locked memory).
pub fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// What the title says when not root.
pub fn not_root_note(root: bool) -> &'static str {
    if root {
        ""
    } else {
        " (not root: no SCHED_FIFO, no locked memory)"
    }
}

/// A configuration cycling every `period_us` on the machine's last CPU, without holding the
/// CPU DMA latency (a bench does not own the machine's power states).
pub fn config(period_us: u32) -> Config {
    let mut cfg = Config::default();
    cfg.cycle.period_us = period_us;
    cfg.rt.hold_cpu_dma_latency = false;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    cfg.cycle.cpu = Some(ncpu - 1);
    cfg
}

/// A run of `cfg` on `segment` for `secs` seconds (real-time settings only as root).
pub fn spec(cfg: Config, segment: SegmentSpec, secs: f64, root: bool) -> RunSpec {
    let mut spec = RunSpec::new(
        cfg,
        Target::Sim {
            spec: segment,
            faults: Faults::new(),
        },
        Stop::new(),
    );
    spec.no_rt = !root;
    spec.duration = Some(Duration::from_secs_f64(secs));
    spec
}

/// The median of the rounds' values.
pub fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}
