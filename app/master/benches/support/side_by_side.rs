//! The harness the mailbox benchmarks share (`sdo`, `foe`, `eoe`): runs of the in-process
//! simulated segment at 1 ms, interleaved round by round between no mailbox traffic and each
//! load (another thread that uses the master's queue, 300 µs budget, for the whole run), the
//! wake lateness and execution time P50/P99/max of every run, and the ratios load/none of the
//! medians over the rounds. Prints; asserts nothing about times. As root the cyclic thread gets
//! SCHED_FIFO and locked memory; otherwise the figures are noisier and the title says so.

#[path = "exec_run.rs"]
mod exec_run;

use ecsim::SegmentSpec;
use exec_run::{median, not_root_note};
use rtcat_master::ZeroOutputs;
use rtcat_master::acyclic::{SdoClient, sdo_queue};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Rounds of interleaved runs.
pub const ROUNDS: usize = 5;
/// Seconds per run.
pub const SECS: f64 = 4.0;
/// Time per cycle the cyclic thread may spend on the queue.
pub const BUDGET: Duration = Duration::from_micros(300);

/// Traffic another thread puts on the master's queue during a run.
pub trait Load: Sync {
    /// Its name in the table (a few letters).
    fn name(&self) -> &'static str;
    /// Use `q` until `done`; the values of the bench's own columns.
    fn run(&self, q: &SdoClient, done: &AtomicBool) -> Vec<f64>;
}

/// What one run measured.
pub struct Figures {
    pub wake: [u64; 3],
    pub exec: [u64; 3],
    pub cycles: u64,
    pub lost: u64,
    /// The load's columns (empty without load).
    pub extra: Vec<f64>,
}

/// `examples/<name>/segment.toml`, with `more` appended (a file, an EoE endpoint on its last
/// device).
pub fn example_segment(name: &str, more: &str) -> SegmentSpec {
    let path = format!(
        "{}/../../examples/{name}/segment.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.push_str(more);
    SegmentSpec::from_toml(&text).unwrap_or_else(|e| panic!("{path} + {more:?}: {e}"))
}

/// One run of `segment`, with `load` on the queue (None: no queue at all).
pub fn run(segment: SegmentSpec, load: Option<&dyn Load>, root: bool) -> Figures {
    let mut spec = exec_run::spec(exec_run::config(1000), segment, SECS, root);
    let done = AtomicBool::new(false);
    let client = load.map(|_| {
        let (client, service) = sdo_queue(8, BUDGET);
        spec.sdo = Some(service);
        client
    });
    let (out, extra) = std::thread::scope(|s| {
        let worker = load
            .zip(client.as_ref())
            .map(|(l, q)| s.spawn(|| l.run(q, &done)));
        let out = rtcat_master::run_simple(spec, &mut ZeroOutputs).expect("run");
        done.store(true, Ordering::Relaxed);
        let extra = worker.map_or_else(Vec::new, |w| w.join().expect("load thread"));
        (out, extra)
    });
    let q = |h: &hdrhistogram::Histogram<u64>| {
        [h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max()]
    };
    Figures {
        wake: q(&out.rec.wake),
        exec: q(&out.rec.exec),
        cycles: out.rec.cycles,
        lost: out.rec.frames_lost,
        extra,
    }
}

/// Run `none` and every load interleaved for [`ROUNDS`] rounds on the segment `segment` makes,
/// print every run (`columns`: the loads' own columns) and the ratios of the medians.
pub fn compare(title: &str, segment: fn() -> SegmentSpec, loads: &[&dyn Load], columns: &[&str]) {
    let root = exec_run::root();
    println!(
        "{title}, 1 ms, {} µs budget, {SECS} s per run, {ROUNDS} interleaved rounds{}",
        BUDGET.as_micros(),
        not_root_note(root)
    );
    let mut head = format!(
        "   {:>5} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>5}",
        "round",
        "run",
        "wake p50",
        "wake p99",
        "wake max",
        "exec p50",
        "exec p99",
        "exec max",
        "cycles",
        "lost"
    );
    for c in columns {
        head.push_str(&format!(" {c:>9}"));
    }
    println!("{head}");
    let us = |ns: u64| ns as f64 / 1e3;
    // Per run kind (none first): wake p99, exec p99, the load's columns, over the rounds.
    let kinds = loads.len() + 1;
    let mut wake = vec![Vec::new(); kinds];
    let mut exec = vec![Vec::new(); kinds];
    let mut extra: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); columns.len()]; kinds];
    for round in 1..=ROUNDS {
        for k in 0..kinds {
            let load = k.checked_sub(1).map(|i| loads[i]);
            let f = run(segment(), load, root);
            let mut line = format!(
                "   {round:>5} {:>5} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>5}",
                load.map_or("none", |l| l.name()),
                us(f.wake[0]),
                us(f.wake[1]),
                us(f.wake[2]),
                us(f.exec[0]),
                us(f.exec[1]),
                us(f.exec[2]),
                f.cycles,
                f.lost,
            );
            for (i, v) in f.extra.iter().enumerate().take(columns.len()) {
                line.push_str(&format!(" {v:>9.1}"));
                extra[k][i].push(*v);
            }
            println!("{line}");
            wake[k].push(f.wake[1] as f64);
            exec[k].push(f.exec[1] as f64);
        }
    }
    let (nw, ne) = (median(wake[0].clone()), median(exec[0].clone()));
    for (i, l) in loads.iter().enumerate() {
        let (lw, le) = (median(wake[i + 1].clone()), median(exec[i + 1].clone()));
        let mut line = format!(
            "   median of rounds: {}/none wake p99 {:.3} ({:.1} / {:.1} µs), exec p99 {:.3} \
             ({:.1} / {:.1} µs)",
            l.name(),
            lw / nw.max(1.0),
            lw / 1e3,
            nw / 1e3,
            le / ne.max(1.0),
            le / 1e3,
            ne / 1e3
        );
        for (c, v) in columns.iter().zip(&extra[i + 1]) {
            if !v.is_empty() {
                line.push_str(&format!("; {c} {:.1}", median(v.clone())));
            }
        }
        println!("{line}");
    }
}
