//! What SDO traffic during OP costs the cycle, measured side by side in one run
//! (`cargo bench -p rtcat-master --features sim --bench sdo`; as root for SCHED_FIFO and locked
//! memory, otherwise the figures are noisier). Prints ratios; asserts nothing about times.
//!
//! Two runs per round on the in-process simulated CoE segment of `examples/coe` (3 devices),
//! interleaved (see `support/side_by_side.rs`): `none` (no SDO traffic) and `sdo` (another
//! thread reads an object of the servo 100 times a second through the master's SDO queue,
//! served in the budget after each cycle).

#[path = "support/side_by_side.rs"]
mod side_by_side;

use rtcat_master::acyclic::SdoClient;
use side_by_side::Load;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SDO_PER_S: u64 = 100;

struct Reads;

impl Load for Reads {
    fn name(&self) -> &'static str {
        "sdo"
    }

    fn run(&self, q: &SdoClient, done: &AtomicBool) -> Vec<f64> {
        let period = Duration::from_micros(1_000_000 / SDO_PER_S);
        let mut next = Instant::now() + Duration::from_millis(500);
        let (mut ok, mut failed) = (0u64, 0u64);
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            next += period;
            match q.read(2, 0x6064, 0, Duration::from_millis(100)) {
                Ok(_) => ok += 1,
                Err(_) => failed += 1,
            }
        }
        vec![ok as f64, failed as f64]
    }
}

fn main() {
    side_by_side::compare(
        &format!("SDO traffic during OP: {SDO_PER_S} reads/s vs none, simulated CoE segment"),
        || side_by_side::example_segment("coe", ""),
        &[&Reads],
        &["sdo ok", "sdo err"],
    );
}
