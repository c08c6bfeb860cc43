//! What an FoE transfer during OP costs the cycle, and how fast it goes, measured side by side in
//! one run (`cargo bench -p rtcat-master --features sim --bench foe`; as root for SCHED_FIFO and
//! locked memory, otherwise the figures are noisier). Prints ratios; asserts nothing about times.
//!
//! Two runs per round on the in-process simulated CoE segment of `examples/coe` (3 devices; the
//! servo also serves a writable file over FoE), 1 ms, 300 µs mailbox budget, interleaved: `none`
//! (no mailbox traffic) and `foe` (another thread writes a 1 MiB file to the servo through the
//! master's queue, again and again, for the whole run). Wake lateness and execution time
//! P50/P99/max per run, the FoE throughput; the ratios foe/none of the medians over the rounds.

use ecsim::{Faults, SegmentSpec};
use rtcat_master::acyclic::sdo_queue;
use rtcat_master::{Config, RunSpec, Stop, Target, ZeroOutputs, foe};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ROUNDS: usize = 5;
const SECS: f64 = 4.0;
const FILE: usize = 1 << 20;

struct Figures {
    wake: [u64; 3],
    exec: [u64; 3],
    cycles: u64,
    lost: u64,
    /// Bytes acknowledged by the device, and over how long.
    bytes: u64,
    secs: f64,
}

fn segment() -> SegmentSpec {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/coe/segment.toml"
    );
    let mut text = std::fs::read_to_string(path).expect("examples/coe/segment.toml");
    // The servo is the last device of the file.
    text.push_str("\n[[device.file]]\nname = \"firmware.bin\"\nwritable = true\n");
    SegmentSpec::from_toml(&text).expect("examples/coe with a file")
}

fn run(with_foe: bool, root: bool) -> Figures {
    let mut cfg = Config::default();
    cfg.cycle.period_us = 1000;
    cfg.rt.hold_cpu_dma_latency = false;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    cfg.cycle.cpu = Some(ncpu - 1);
    let mut spec = RunSpec::new(
        cfg,
        Target::Sim {
            spec: segment(),
            faults: Faults::new(),
        },
        Stop::new(),
    );
    spec.no_rt = !root;
    spec.duration = Some(Duration::from_secs_f64(SECS));
    let done = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let micros = Arc::new(AtomicU64::new(0));
    let worker = with_foe.then(|| {
        let (client, service) = sdo_queue(8, Duration::from_micros(300));
        spec.sdo = Some(service);
        let (done, bytes, micros) = (done.clone(), bytes.clone(), micros.clone());
        std::thread::spawn(move || {
            let image: Vec<u8> = (0..FILE).map(|i| (i * 7 % 256) as u8).collect();
            std::thread::sleep(Duration::from_millis(500));
            let Ok(mut m) = client.queue_mailbox(2, Duration::from_secs(2)) else {
                return;
            };
            let start = Instant::now();
            let mut base = 0u64;
            while !done.load(Ordering::Relaxed) {
                let mut c = foe::Client::new(&mut m);
                let r = c.write("firmware.bin", 0, &image, &mut |p| {
                    bytes.store(base + p.done, Ordering::Relaxed);
                    micros.store(start.elapsed().as_micros() as u64, Ordering::Relaxed);
                });
                if r.is_err() {
                    // The run ended under the transfer (or it failed): what was acknowledged
                    // counts.
                    return;
                }
                base += FILE as u64;
            }
        })
    });
    let out = rtcat_master::run_simple(spec, &mut ZeroOutputs).expect("run");
    done.store(true, Ordering::Relaxed);
    if let Some(w) = worker {
        w.join().expect("FoE thread");
    }
    let q = |h: &hdrhistogram::Histogram<u64>| {
        [h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max()]
    };
    Figures {
        wake: q(&out.rec.wake),
        exec: q(&out.rec.exec),
        cycles: out.rec.cycles,
        lost: out.rec.frames_lost,
        bytes: bytes.load(Ordering::Relaxed),
        secs: micros.load(Ordering::Relaxed) as f64 / 1e6,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let root = nix::unistd::geteuid().is_root();
    println!(
        "FoE during OP: a 1 MiB file written over and over vs no mailbox traffic, simulated CoE \
         segment, 1 ms, 300 µs budget, {SECS} s per run, {ROUNDS} interleaved rounds{}",
        if root {
            ""
        } else {
            " (not root: no SCHED_FIFO, no locked memory)"
        }
    );
    println!(
        "   {:>5} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>5} {:>9}",
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
        "KiB/s"
    );
    let (mut nw, mut ne, mut fw, mut fe, mut rate) = (vec![], vec![], vec![], vec![], vec![]);
    let us = |ns: u64| ns as f64 / 1e3;
    for round in 1..=ROUNDS {
        for with_foe in [false, true] {
            let f = run(with_foe, root);
            let kib = if f.secs > 0.0 {
                f.bytes as f64 / 1024.0 / f.secs
            } else {
                0.0
            };
            println!(
                "   {round:>5} {:>5} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>5} {:>9.1}",
                if with_foe { "foe" } else { "none" },
                us(f.wake[0]),
                us(f.wake[1]),
                us(f.wake[2]),
                us(f.exec[0]),
                us(f.exec[1]),
                us(f.exec[2]),
                f.cycles,
                f.lost,
                kib
            );
            if with_foe {
                fw.push(f.wake[1] as f64);
                fe.push(f.exec[1] as f64);
                rate.push(kib);
            } else {
                nw.push(f.wake[1] as f64);
                ne.push(f.exec[1] as f64);
            }
        }
    }
    let (nw, ne, fw, fe) = (median(nw), median(ne), median(fw), median(fe));
    println!(
        "   median of rounds: foe/none wake p99 {:.3} ({:.1} / {:.1} µs), exec p99 {:.3} ({:.1} / \
         {:.1} µs); FoE {:.1} KiB/s",
        fw / nw.max(1.0),
        fw / 1e3,
        nw / 1e3,
        fe / ne.max(1.0),
        fe / 1e3,
        ne / 1e3,
        median(rate)
    );
}
