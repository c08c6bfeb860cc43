//! The SDO service allocates nothing on the cyclic thread: a counting global allocator counts
//! per thread, the application hook (which runs in the cyclic thread) switches counting on
//! after a warm-up, and another thread has reads and writes served meanwhile (expedited,
//! normal and segmented transfers, an abort, a register read).
//!
//! With the TX/RX thread the in-process simulator runs on that thread, and every allocation
//! on the cyclic thread counts. Inline, the simulator runs inside the cyclic thread's frame
//! send (its CoE server allocates, as a device's firmware may: it is not the master): there
//! an allocation counts unless its stack passes through `ecsim::` (the stack is captured with
//! counting off, so the capture itself is not counted).
#![cfg(feature = "sim")]

use ecsim::{Faults, SegmentSpec};
use rtcat_master::acyclic::{SdoFailure, sdo_queue};
use rtcat_master::config::TxRxMode;
use rtcat_master::{Application, Config, Cycle, RunSpec, Stop, Target};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

mod support;

use support::counting::{ALLOCS, Counting, FIRST, SIM_ALLOCS, SPLIT_SIM, TRACK};

#[global_allocator]
static A: Counting = Counting;

/// Switches counting on in the cyclic thread once `start` is set (by the client thread, after
/// the bring-up and a first served request), and off again at `stop`.
struct Probe {
    start: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    tracked: Arc<AtomicU64>,
}

impl Application for Probe {
    fn cycle(&mut self, _cx: &mut Cycle<'_>) {
        let on = self.start.load(Ordering::Acquire) && !self.stop.load(Ordering::Acquire);
        TRACK.with(|t| t.set(on));
        if on {
            self.tracked.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn served_without_allocation(mode: TxRxMode) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/coe/segment.toml"
    );
    let seg = SegmentSpec::load(std::path::Path::new(path)).expect("examples/coe/segment.toml");
    let mut cfg = Config::default();
    cfg.cycle.period_us = 1000;
    cfg.cycle.txrx = mode;
    let (client, service) = sdo_queue(8, Duration::from_micros(300));
    let stop = Stop::new();
    let mut spec = RunSpec::new(
        cfg,
        Target::Sim {
            spec: seg,
            faults: Faults::new(),
        },
        stop.clone(),
    );
    spec.no_rt = true;
    spec.sdo = Some(service);
    let (start, end, tracked) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut probe = Probe {
        start: start.clone(),
        stop: end.clone(),
        tracked: tracked.clone(),
    };
    ALLOCS.store(0, Ordering::Relaxed);
    SIM_ALLOCS.store(0, Ordering::Relaxed);
    *FIRST.lock().unwrap() = None;
    SPLIT_SIM.store(mode == TxRxMode::Inline, Ordering::Relaxed);
    let worker = std::thread::spawn(move || {
        let t = Duration::from_millis(1000);
        // The first request after the bring-up (geometry read, counter resync) is served
        // before counting starts: it waits for OP here.
        let mut first = Err(SdoFailure::NotCycling);
        for _ in 0..50 {
            first = client.read(2, 0x1000, 0, t);
            if first.is_ok() {
                break;
            }
        }
        first.expect("a first read once in OP");
        start.store(true, Ordering::Release);
        // Let the cyclic thread see the flag before the counted requests go.
        std::thread::sleep(Duration::from_millis(5));
        let mut outcomes = Vec::new();
        for i in 0..25u32 {
            outcomes.push(client.read(2, 0x1018, 1, t).map(drop));
            outcomes.push(client.read(2, 0x1008, 0, t).map(drop));
            outcomes.push(client.write(2, 0x6085, 0, &(1000 + i).to_le_bytes(), t));
            outcomes.push(client.read(1, 0x1018, 2, t).map(drop));
        }
        let missing = client.read(2, 0x5fff, 0, t);
        let register = client.read_register(2, 0x0130, 2, t).map(drop);
        std::thread::sleep(Duration::from_millis(5));
        end.store(true, Ordering::Release);
        stop.request();
        (outcomes, missing, register)
    });
    let out = rtcat_master::run_simple(spec, &mut probe).expect("run");
    let (outcomes, missing, register) = worker.join().expect("client thread");
    assert_eq!(outcomes.len(), 100);
    for (i, o) in outcomes.iter().enumerate() {
        assert_eq!(*o, Ok(()), "{mode:?}: request {i}");
    }
    assert!(
        matches!(
            missing,
            Err(SdoFailure::Aborted {
                code: 0x0602_0000,
                ..
            })
        ),
        "{missing:?}"
    );
    register.expect("register read");
    let tracked = tracked.load(Ordering::Relaxed);
    assert!(tracked > 50, "{mode:?}: only {tracked} cycles tracked");
    let allocs = ALLOCS.load(Ordering::Relaxed);
    let first = FIRST.lock().unwrap().take().unwrap_or_default();
    assert_eq!(
        allocs, 0,
        "{mode:?}: {allocs} allocations on the cyclic thread in {tracked} cycles serving 102 \
         requests; the first at\n{first}"
    );
    eprintln!(
        "{mode:?}: 0 allocations by the master in {tracked} cycles; {} in the simulator",
        SIM_ALLOCS.load(Ordering::Relaxed)
    );
    assert_eq!(out.rec.wkc_mismatches, 0);
}

#[test]
fn sdo_traffic_while_cycling_allocates_nothing_on_the_cyclic_thread() {
    // One test: the tracking flag and counter are process-wide.
    served_without_allocation(TxRxMode::Inline);
    served_without_allocation(TxRxMode::Thread);
}
