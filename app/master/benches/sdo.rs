//! What SDO traffic during OP costs the cycle, measured side by side in one run
//! (`cargo bench -p rtcat-master --features sim --bench sdo`; as root for SCHED_FIFO and locked
//! memory, otherwise the figures are noisier). Prints ratios; asserts nothing about times.
//!
//! Two runs per round on the in-process simulated CoE segment of `examples/coe` (3 devices),
//! 1 ms, interleaved: `none` (no SDO traffic) and `sdo` (another thread reads an object of the
//! servo 100 times a second through the master's SDO queue, served in the budget after each
//! cycle). Wake lateness and execution time P50/P99/max per run; the ratios sdo/none of the
//! medians over the rounds.

use ecsim::{Faults, SegmentSpec};
use rtcat_master::acyclic::sdo_queue;
use rtcat_master::{Config, RunSpec, Stop, Target, ZeroOutputs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ROUNDS: usize = 5;
const SECS: f64 = 4.0;
const SDO_PER_S: u64 = 100;

struct Figures {
    wake: [u64; 3],
    exec: [u64; 3],
    cycles: u64,
    lost: u64,
    sdo_ok: u64,
    sdo_failed: u64,
}

fn run(with_sdo: bool, root: bool) -> Figures {
    let mut cfg = Config::default();
    cfg.cycle.period_us = 1000;
    cfg.rt.hold_cpu_dma_latency = false;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    cfg.cycle.cpu = Some(ncpu - 1);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/coe/segment.toml"
    );
    let segment = SegmentSpec::load(std::path::Path::new(path)).expect("examples/coe/segment.toml");
    let mut spec = RunSpec::new(
        cfg,
        Target::Sim {
            spec: segment,
            faults: Faults::new(),
        },
        Stop::new(),
    );
    spec.no_rt = !root;
    spec.duration = Some(Duration::from_secs_f64(SECS));
    let done = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let worker = with_sdo.then(|| {
        let (client, service) = sdo_queue(8, Duration::from_micros(300));
        spec.sdo = Some(service);
        let (done, ok, failed) = (done.clone(), ok.clone(), failed.clone());
        std::thread::spawn(move || {
            let period = Duration::from_micros(1_000_000 / SDO_PER_S);
            let mut next = Instant::now() + Duration::from_millis(500);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                next += period;
                match client.read(2, 0x6064, 0, Duration::from_millis(100)) {
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    });
    let out = rtcat_master::run_simple(spec, &mut ZeroOutputs).expect("run");
    done.store(true, Ordering::Relaxed);
    if let Some(w) = worker {
        w.join().expect("SDO thread");
    }
    let q = |h: &hdrhistogram::Histogram<u64>| {
        [h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max()]
    };
    Figures {
        wake: q(&out.rec.wake),
        exec: q(&out.rec.exec),
        cycles: out.rec.cycles,
        lost: out.rec.frames_lost,
        sdo_ok: ok.load(Ordering::Relaxed),
        sdo_failed: failed.load(Ordering::Relaxed),
    }
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    let root = nix::unistd::geteuid().is_root();
    println!(
        "SDO traffic during OP: {SDO_PER_S} reads/s vs none, simulated CoE segment, 1 ms, {SECS} s \
         per run, {ROUNDS} interleaved rounds{}",
        if root {
            ""
        } else {
            " (not root: no SCHED_FIFO, no locked memory)"
        }
    );
    println!(
        "   {:>5} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>5} {:>7} {:>7}",
        "round",
        "run",
        "wake p50",
        "wake p99",
        "wake max",
        "exec p50",
        "exec p99",
        "exec max",
        "cycles",
        "lost",
        "sdo ok",
        "sdo err"
    );
    let (mut nw, mut ne, mut sw, mut se) = (vec![], vec![], vec![], vec![]);
    let us = |ns: u64| ns as f64 / 1e3;
    for round in 1..=ROUNDS {
        for with_sdo in [false, true] {
            let f = run(with_sdo, root);
            println!(
                "   {round:>5} {:>5} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>5} {:>7} {:>7}",
                if with_sdo { "sdo" } else { "none" },
                us(f.wake[0]),
                us(f.wake[1]),
                us(f.wake[2]),
                us(f.exec[0]),
                us(f.exec[1]),
                us(f.exec[2]),
                f.cycles,
                f.lost,
                f.sdo_ok,
                f.sdo_failed
            );
            if with_sdo {
                sw.push(f.wake[1]);
                se.push(f.exec[1]);
            } else {
                nw.push(f.wake[1]);
                ne.push(f.exec[1]);
            }
        }
    }
    let (nw, ne, sw, se) = (median(nw), median(ne), median(sw), median(se));
    println!(
        "   median of rounds: sdo/none wake p99 {:.3} ({:.1} / {:.1} µs), exec p99 {:.3} ({:.1} / {:.1} µs)",
        sw as f64 / nw.max(1) as f64,
        us(sw),
        us(nw),
        se as f64 / ne.max(1) as f64,
        us(se),
        us(ne)
    );
}
