//! What distributed clocks cost the cycle and how well the phase lock holds, measured side by
//! side in one run (`cargo bench -p rtcat-master --features sim --bench dc`; as root for
//! SCHED_FIFO, otherwise the figures are noisier). Prints figures and ratios; asserts nothing
//! about times.
//!
//! Interleaved rounds on the in-process simulated segment of `examples/cia402` (two CiA 402
//! drives with DC), 1 ms: `plain` (no `[dc]`: ethercrab's `tx_rx`, deadlines on
//! CLOCK_MONOTONIC) and `dc` (`[dc] enabled`: SYNC0, `tx_rx_dc` with the FRMW of the reference
//! clock's system time in the cycle's first frame, and the PI phase lock moving the deadlines),
//! the reference drifting by +50 ppm. Per run: execution time P50/P99/max, and for `dc` the
//! |phase error| P50/P99/P99.9/max and the cycle the lock was first reported; the ratio dc/plain
//! of the execution time medians over the rounds. Over veth, see `app/rtcat/tests/dc_veth.rs`.

#[path = "support/exec_run.rs"]
mod exec_run;

use ecsim::SegmentSpec;
use exec_run::{median, not_root_note};
use rtcat_master::stats::{EventKind, Live};
use rtcat_master::{Channels, ZeroOutputs};
use std::sync::Arc;

const ROUNDS: usize = 3;
const SECS: f64 = 5.0;

struct Figures {
    exec: [u64; 3],
    phase: Option<[u64; 4]>,
    locked_at: Option<u64>,
    cycles: u64,
    missed: u64,
}

fn run(dc: bool, root: bool) -> Figures {
    let mut cfg = exec_run::config(1000);
    cfg.dc.enabled = dc;
    cfg.dc.static_sync_iterations = 1000;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/cia402/segment.toml"
    );
    let mut segment =
        SegmentSpec::load(std::path::Path::new(path)).expect("examples/cia402/segment.toml");
    segment.devices[0].dc_clock.drift_ppb = 50_000;
    let spec = exec_run::spec(cfg, segment, SECS, root);
    let (ev_tx, mut ev_rx) = rtrb::RingBuffer::new(1 << 14);
    let mut ch = Channels {
        live: Arc::new(Live::default()),
        events: ev_tx,
        samples: None,
    };
    let out = rtcat_master::run(spec, &mut ZeroOutputs, &mut ch).expect("run");
    let mut locked_at = None;
    while let Ok(e) = ev_rx.pop() {
        if locked_at.is_none()
            && matches!(
                e.kind,
                EventKind::DcLock {
                    state: rtcat_master::dc::LockState::Locked,
                    ..
                }
            )
        {
            locked_at = Some(e.cycle);
        }
    }
    let q = |h: &hdrhistogram::Histogram<u64>| {
        [h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max()]
    };
    let p = &out.rec.phase;
    Figures {
        exec: q(&out.rec.exec),
        phase: (!p.is_empty()).then(|| {
            [
                p.value_at_quantile(0.5),
                p.value_at_quantile(0.99),
                p.value_at_quantile(0.999),
                p.max(),
            ]
        }),
        locked_at,
        cycles: out.rec.cycles,
        missed: out.rec.missed_deadlines,
    }
}

fn main() {
    let root = exec_run::root();
    println!(
        "DC vs plain: examples/cia402 segment in process, reference +50 ppm, 1 ms, {SECS} s per \
         run, {ROUNDS} interleaved rounds{}",
        not_root_note(root)
    );
    println!(
        "   {:>5} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6}",
        "round",
        "run",
        "exec p50",
        "exec p99",
        "exec max",
        "|e| p50",
        "|e| p99",
        "|e| p99.9",
        "|e| max",
        "locked@",
        "cycles",
        "missed"
    );
    let us = |ns: u64| ns as f64 / 1e3;
    let (mut p50s, mut d50s, mut p99s, mut d99s) = (vec![], vec![], vec![], vec![]);
    let mut phases: Vec<[u64; 4]> = Vec::new();
    for round in 1..=ROUNDS {
        for dc in [false, true] {
            let f = run(dc, root);
            let ph = |i: usize| {
                f.phase
                    .map_or("-".to_string(), |p| format!("{:.1}", us(p[i])))
            };
            println!(
                "   {round:>5} {:>5} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6}",
                if dc { "dc" } else { "plain" },
                us(f.exec[0]),
                us(f.exec[1]),
                us(f.exec[2]),
                ph(0),
                ph(1),
                ph(2),
                ph(3),
                f.locked_at.map_or("-".into(), |c| c.to_string()),
                f.cycles,
                f.missed
            );
            if dc {
                d50s.push(f.exec[0]);
                d99s.push(f.exec[1]);
                phases.extend(f.phase);
            } else {
                p50s.push(f.exec[0]);
                p99s.push(f.exec[1]);
            }
        }
    }
    let (p50, d50, p99, d99) = (median(p50s), median(d50s), median(p99s), median(d99s));
    println!(
        "   median of rounds: dc/plain exec p50 {:.3} ({:.1} / {:.1} µs), exec p99 {:.3} ({:.1} / {:.1} µs)",
        d50 as f64 / p50.max(1) as f64,
        us(d50),
        us(p50),
        d99 as f64 / p99.max(1) as f64,
        us(d99),
        us(p99)
    );
    let m = |i: usize| median(phases.iter().map(|p| p[i]).collect());
    println!(
        "   median of rounds: |phase error| p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
        us(m(0)),
        us(m(1)),
        us(m(2)),
        us(m(3))
    );
}
