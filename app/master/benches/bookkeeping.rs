//! The cycle's cost of issue 28's bookkeeping, measured side by side in one run
//! (`cargo bench -p rtcat-master --features sim --bench bookkeeping`; as root for SCHED_FIFO,
//! otherwise noisier). Prints ratios; asserts nothing about times.
//!
//! 1. Execution time (wake to end of cycle) on the in-process simulated reference segment, 1 ms,
//!    interleaved rounds: `[health] recovery = "subdevice"` (the per-subdevice recovery's board
//!    looked at every cycle) against `"segment"` (no board). The availability accounting runs in
//!    both (it has no switch), so part 2 measures it alone.
//! 2. `Availability::cycle` alone, in a tight loop, for 3, 64 and 256 subdevices: ns per cycle,
//!    with one subdevice changing validity every 1000 cycles.

#[path = "support/exec_run.rs"]
mod exec_run;

use ecsim::SegmentSpec;
use exec_run::median;
use rtcat_master::availability::{Availability, LiveAvailability};
use rtcat_master::config::RecoveryPolicy;
use rtcat_master::{SubdeviceStatus, ZeroOutputs};
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 5;
const SECS: f64 = 3.0;

fn exec(policy: RecoveryPolicy, root: bool) -> (u64, u64) {
    let mut cfg = exec_run::config(1000);
    cfg.health.recovery = policy;
    let spec = exec_run::spec(cfg, SegmentSpec::reference(), SECS, root);
    let out = rtcat_master::run_simple(spec, &mut ZeroOutputs).expect("run");
    let e = &out.rec.exec;
    (e.value_at_quantile(0.5), e.value_at_quantile(0.99))
}

/// ns per `Availability::cycle` with `n` subdevices.
fn availability_ns(n: usize) -> f64 {
    let live = LiveAvailability::default();
    let mut a = Availability::default();
    a.set_subdevices(n);
    let mut status = vec![
        SubdeviceStatus {
            al_state: 8,
            data_valid: true,
        };
        n
    ];
    const CYCLES: u64 = 2_000_000;
    let start = Instant::now();
    for k in 0..CYCLES {
        if k % 1000 == 0 {
            status[0].data_valid = !status[0].data_valid;
        }
        a.cycle(black_box(&status), black_box(k * 1_000_000), &live);
    }
    start.elapsed().as_nanos() as f64 / CYCLES as f64
}

fn main() {
    let root = exec_run::root();
    println!(
        "issue 28 bookkeeping: exec time (µs) on the simulated reference segment, 1 ms, {SECS} s \
         per run, {ROUNDS} interleaved rounds{}",
        if root {
            ""
        } else {
            " (not root: SCHED_OTHER, noisier)"
        }
    );
    println!(
        "{:>6} {:>14} {:>14} {:>14} {:>14}",
        "round", "segment p50", "segment p99", "subdevice p50", "subdevice p99"
    );
    let (mut r50, mut r99) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let s = exec(RecoveryPolicy::Segment, root);
        let d = exec(RecoveryPolicy::Subdevice, root);
        println!(
            "{round:>6} {:>14.1} {:>14.1} {:>14.1} {:>14.1}",
            s.0 as f64 / 1e3,
            s.1 as f64 / 1e3,
            d.0 as f64 / 1e3,
            d.1 as f64 / 1e3
        );
        r50.push(d.0 as f64 / s.0 as f64);
        r99.push(d.1 as f64 / s.1 as f64);
    }
    println!(
        "   median of rounds: subdevice/segment p50 {:.3}, p99 {:.3}",
        median(r50),
        median(r99)
    );
    for n in [3, 64, 256] {
        println!(
            "Availability::cycle, {n:>3} subdevices: {:.1} ns per cycle",
            availability_ns(n)
        );
    }
}
