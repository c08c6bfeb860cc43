//! Bring-up and recovery time to OP on the in-process simulated segment
//! (`cargo bench -p rtcat-master --features sim --bench bringup`). Prints a table; asserts
//! nothing about times.
//!
//! For 3 and 64 CoE subdevices (the `examples/coe` devices, repeated), each with the default
//! static DC synchronisation (`[dc] static_sync_iterations`, 10 000 FRMW round trips, as
//! ethercrab's) and a small one, with the default bring-up (rtcat's own), over
//! `RTCAT_BENCH_REPS` repetitions (default 5):
//! - bring-up: from `run()` to the segment in OP with the `[[device]]` configuration applied
//!   (the run's `on_ready`), scan, SII reads, PDO configuration, startup SDOs and layout read
//!   included;
//! - recovery: a power cycle of the whole simulated segment (every device back to INIT with
//!   its object dictionary reset) injected from the cycle, then from the master's
//!   `RecoveryStarted` event to `RecoveryDone` (the re-initialisation to OP, everything
//!   re-applied), and from the injection to the first good cycle after it (adds the
//!   `bad_cycles_before_recovery` detection at 1 ms).

use ecsim::{FaultCommand, Faults, SegmentSpec};
use rtcat_master::stats::EventKind;
use rtcat_master::{Application, Channels, Config, Cycle, RunSpec, Setup, Stop, Target};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The example configuration: identity matchers for the AI4s, the servo by position 2, so that
/// the 64-device segment configures every device of a kind with one entry.
const CONFIG: &str = include_str!("../../../examples/coe/rtcat.toml");
const SEGMENT: &str = include_str!("../../../examples/coe/segment.toml");

/// The example segment's devices repeated to `n` (positions 0, 1, 2 = DIO8, AI4, SERVO, ...).
fn segment(n: usize) -> SegmentSpec {
    let base = SegmentSpec::from_toml(SEGMENT).expect("examples/coe/segment.toml");
    let mut s = base.clone();
    s.devices = (0..n)
        .map(|i| {
            let mut d = base.devices[i % base.devices.len()].clone();
            d.serial = 1000 + i as u32;
            d
        })
        .collect();
    s.name = format!("{n} CoE devices");
    s.with_dc(true)
}

/// The example configuration for `n` devices: the servo entry by identity instead of position 2
/// (every third device is one), the segment checks dropped.
fn config(n: usize, sync: u32) -> Config {
    let mut c = Config::parse(CONFIG, "examples/coe/rtcat.toml").expect("example config");
    c.segment = Default::default();
    if n != 3 {
        for d in &mut c.device {
            if d.position == Some(2) {
                d.position = None;
                d.vendor_id = Some(ecsim::spec::REFERENCE_VENDOR);
                d.product_id = Some(0x0003_0003);
            }
        }
    }
    c.dc.static_sync_iterations = sync;
    // The machine is shared while benches run: a PDU timeout is a failed repetition, not a
    // slower one, so give the scan room (it does not change what a good bring-up costs).
    c.bus.init_pdu_timeout_ms = 1000;
    c.bus.init_eeprom_timeout_ms = 1000;
    c.cycle.period_us = 1000;
    c
}

/// Injects a power cycle at cycle 100 of the first bring-up and stops at the first good cycle
/// of the next one.
struct PowerCycle {
    faults: Faults,
    stop: Stop,
    configured: u32,
    injected_ns: Arc<AtomicU64>,
    back_ns: Arc<AtomicU64>,
    start_cycle: u64,
}

impl Application for PowerCycle {
    fn configure(&mut self, _setup: &mut Setup<'_>) -> Result<(), rtcat_master::AppError> {
        self.configured += 1;
        self.start_cycle = u64::MAX;
        Ok(())
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        if self.start_cycle == u64::MAX {
            self.start_cycle = cx.status.cycle;
        }
        if self.configured == 1 && cx.status.cycle == self.start_cycle + 100 {
            self.injected_ns.store(now_ns(), Ordering::Relaxed);
            self.faults.apply(FaultCommand::PowerCycle);
        }
        if self.configured == 2 && cx.status.is_good() && self.back_ns.load(Ordering::Relaxed) == 0
        {
            self.back_ns.store(now_ns(), Ordering::Relaxed);
            self.stop.request();
        }
    }
}

fn now_ns() -> u64 {
    rtcat_master::clock::now_ns()
}

struct Rep {
    bring_up_ms: f64,
    recovery_ms: f64,
    fault_to_op_ms: f64,
}

fn one(n: usize, sync: u32) -> Result<Rep, String> {
    let faults = Faults::new();
    let stop = Stop::new();
    let spec = segment(n);
    let ready_ns = Arc::new(AtomicU64::new(0));
    let r2 = ready_ns.clone();
    let mut run = RunSpec::new(
        config(n, sync),
        Target::Sim {
            spec,
            faults: faults.clone(),
        },
        stop.clone(),
    );
    run.no_rt = true;
    run.duration = Some(std::time::Duration::from_secs(120));
    run.on_ready = Some(Box::new(move || r2.store(now_ns(), Ordering::Relaxed)));
    let mut app = PowerCycle {
        faults,
        stop,
        configured: 0,
        injected_ns: Arc::new(AtomicU64::new(0)),
        back_ns: Arc::new(AtomicU64::new(0)),
        start_cycle: u64::MAX,
    };
    let (events, mut ev_rx) = rtrb::RingBuffer::new(1 << 16);
    let mut ch = Channels {
        live: Arc::new(rtcat_master::stats::Live::default()),
        events,
        samples: None,
    };
    let t0 = now_ns();
    let out = rtcat_master::run(run, &mut app, &mut ch).map_err(|e| e.to_string())?;
    if let Some(f) = out.fatal {
        return Err(f);
    }
    if out.rec.recoveries != 1 {
        return Err(format!("{} recoveries, not 1", out.rec.recoveries));
    }
    let (mut started, mut done) = (None, None);
    while let Ok(e) = ev_rx.pop() {
        match e.kind {
            EventKind::RecoveryStarted { .. } => started = Some(e.unix_ns),
            EventKind::RecoveryDone { .. } => done = Some(e.unix_ns),
            _ => {}
        }
    }
    let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
    let (Some(started), Some(done)) = (started, done) else {
        return Err("no RecoveryStarted/RecoveryDone event".into());
    };
    Ok(Rep {
        bring_up_ms: ms(t0, ready_ns.load(Ordering::Relaxed)),
        recovery_ms: ms(started, done),
        fault_to_op_ms: ms(
            app.injected_ns.load(Ordering::Relaxed),
            app.back_ns.load(Ordering::Relaxed),
        ),
    })
}

fn p50_max(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() - 1])
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported (it is one table).
    let reps: usize = std::env::var("RTCAT_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(5);
    let small = 100;
    println!(
        "bring-up and recovery to OP, in-process simulated CoE segment, {reps} repetitions \
         (P50 / max, ms)"
    );
    println!(
        "{:>8} {:>10} {:>20} {:>20} {:>20}",
        "devices", "dc sync", "bring-up", "recovery", "fault -> OP"
    );
    for n in [3usize, 64] {
        for sync in [10_000u32, small] {
            let t = Instant::now();
            let mut failed = Vec::new();
            let reps: Vec<Rep> = (0..reps)
                .filter_map(|_| one(n, sync).map_err(|e| failed.push(e)).ok())
                .collect();
            if reps.is_empty() {
                println!("{n:>8} {sync:>10}   every repetition failed: {}", failed[0]);
                continue;
            }
            let (b50, bmax) = p50_max(reps.iter().map(|r| r.bring_up_ms).collect());
            let (r50, rmax) = p50_max(reps.iter().map(|r| r.recovery_ms).collect());
            let (f50, fmax) = p50_max(reps.iter().map(|r| r.fault_to_op_ms).collect());
            println!(
                "{n:>8} {sync:>10} {:>20} {:>20} {:>20}   ({:.1} s{})",
                format!("{b50:.1} / {bmax:.1}"),
                format!("{r50:.1} / {rmax:.1}"),
                format!("{f50:.1} / {fmax:.1}"),
                t.elapsed().as_secs_f64(),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!(", {} failed: {}", failed.len(), failed[0])
                }
            );
        }
    }
}
