//! The cost of publishing the shared-memory process image in the cycle, measured side by side
//! in one run (`cargo bench -p rtcat-master --features sim --bench shm`; as root for SCHED_FIFO
//! and locked memory, otherwise the figures are noisier). Prints ratios; asserts nothing about
//! times.
//!
//! On the in-process simulated segment, 1 ms (2 ms for 256 subdevices), interleaved rounds:
//! - `plain`: an application writing a pattern into every output byte;
//! - `shm`: the same application wrapped in [`rtcat_master::shm::SharedImage`] (a seqlock
//!   publication of inputs, outputs and status every cycle, the writers' merge with no writer
//!   attached);
//! - `shm+w`: as `shm`, with one client writer owning every output entry and rewriting them
//!   from another thread every millisecond (the merge of all entries every cycle).
//!
//! For the reference segment (3 subdevices, 132 bytes) and for 256 subdevices (16 + 16 bytes
//! each, 8 KiB of process data). Execution time is wake to end of cycle (the master's own work
//! included); the ratios show what publishing adds.

#[path = "support/exec_run.rs"]
mod exec_run;

use ecsim::SegmentSpec;
use exec_run::{median, not_root_note};
use rtcat_master::shm::{SharedImage, ShmConfig};
use rtcat_master::{Application, Cycle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const ROUNDS: usize = 3;
const SECS: f64 = 3.0;

struct Pattern;

impl Application for Pattern {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let c = cx.status.cycle as u8;
        for (k, b) in cx.image.outputs_mut().iter_mut().enumerate() {
            *b = c.wrapping_add(k as u8);
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Plain,
    Shm,
    ShmWriter,
}

fn exec(seg: &SegmentSpec, period_us: u32, v: Variant, root: bool) -> (u64, u64, u64) {
    let mut cfg = exec_run::config(period_us);
    cfg.bus.response_timeout_us = Some(period_us);
    // 256 simulated devices' SII reads on a shared machine: generous bring-up timeouts.
    cfg.bus.init_pdu_timeout_ms = 1000;
    cfg.bus.init_eeprom_timeout_ms = 1000;
    cfg.bus.state_timeout_ms = 30_000;
    let name = format!("rtcat-bench-{}", std::process::id());
    // The image is handed out over a socket (format v3); a minimal server of it stands in for
    // the control socket of `rtcat run`.
    let sock = std::env::temp_dir().join(format!("{name}.sock"));
    let hub = rtcat_master::shm::Hub::new();
    let _serve = rtcat_shm::testkit::Serve::start(&sock, hub.clone()).expect("serve");
    let spec = exec_run::spec(cfg, seg.clone(), SECS, root);
    let mut app: Box<dyn Application> = if v == Variant::Plain {
        Box::new(Pattern)
    } else {
        let c = ShmConfig {
            name: Some(name.clone()),
            writer_timeout_cycles: 1_000_000,
            ..ShmConfig::default()
        };
        Box::new(
            SharedImage::new(
                Box::new(Pattern),
                &c,
                hub,
                rtcat_master::Period::from_micros(period_us).as_nanos(),
            )
            .unwrap(),
        )
    };
    let done = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        if v == Variant::ShmWriter {
            s.spawn(|| {
                let client = loop {
                    if done.load(Ordering::Relaxed) {
                        return;
                    }
                    match rtcat_shm::Client::attach(&sock) {
                        Ok(c) if c.snapshot().is_ok() => break c,
                        _ => std::thread::sleep(Duration::from_millis(20)),
                    }
                };
                let mut w = client.attach_writer("bench").unwrap();
                let outs: Vec<_> = client
                    .entries()
                    .iter()
                    .filter(|e| e.row.is_some())
                    .cloned()
                    .collect();
                for e in &outs {
                    w.claim(e).unwrap();
                }
                let mut k = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let vals: Vec<_> = outs
                        .iter()
                        .map(|e| (e, rtcat_shm::Value::Unsigned(k & 0xffff)))
                        .collect();
                    w.write(&vals).unwrap();
                    k += 1;
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
        let r = rtcat_master::run_simple(spec, app.as_mut()).expect("run");
        done.store(true, Ordering::Relaxed);
        r
    });
    let e = &out.rec.exec;
    (
        e.value_at_quantile(0.5),
        e.value_at_quantile(0.99),
        out.rec.cycles,
    )
}

fn main() {
    let root = exec_run::root();
    println!(
        "shared-memory image: exec time (µs) on the simulated segment, {SECS} s per run, \
         {ROUNDS} interleaved rounds{}",
        not_root_note(root)
    );
    for (label, seg, period) in [
        (
            "reference, 3 subdevices, 132 B",
            SegmentSpec::reference(),
            1000,
        ),
        (
            "256 subdevices, 8192 B",
            SegmentSpec::uniform(256, 16, 16),
            2000,
        ),
    ] {
        println!("  {label}, {period} µs");
        println!(
            "   {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "round", "plain p50", "plain p99", "shm p50", "shm p99", "shm+w p50", "shm+w p99"
        );
        let mut all: [Vec<(u64, u64)>; 3] = Default::default();
        for round in 1..=ROUNDS {
            let r: Vec<_> = [Variant::Plain, Variant::Shm, Variant::ShmWriter]
                .iter()
                .map(|&v| exec(&seg, period, v, root))
                .collect();
            println!(
                "   {round:>5} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                r[0].0 as f64 / 1e3,
                r[0].1 as f64 / 1e3,
                r[1].0 as f64 / 1e3,
                r[1].1 as f64 / 1e3,
                r[2].0 as f64 / 1e3,
                r[2].1 as f64 / 1e3
            );
            for (i, x) in r.iter().enumerate() {
                all[i].push((x.0, x.1));
            }
        }
        let m = |i: usize, p99: bool| {
            median(all[i].iter().map(|x| if p99 { x.1 } else { x.0 }).collect())
        };
        println!(
            "   median of rounds: shm/plain p50 {:.3}, p99 {:.3}; shm+w/plain p50 {:.3}, p99 {:.3}",
            m(1, false) as f64 / m(0, false) as f64,
            m(1, true) as f64 / m(0, true) as f64,
            m(2, false) as f64 / m(0, false) as f64,
            m(2, true) as f64 / m(0, true) as f64
        );
    }
}
