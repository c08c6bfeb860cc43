//! rtcat's own region (the members of an optional group absent at bring-up, exchanged by
//! rtcat's LRWs beside ethercrab's, `src/region.rs`) allocates nothing on the cyclic thread:
//! the group is plugged in after the bring-up, joins, and once every subdevice's data has been
//! valid for 100 cycles the counting allocator counts the cyclic thread's allocations for 1200
//! more, inline (the simulator's own allocations counted apart) and with a TX/RX thread. The
//! 1.2 s hold at least one count of the devices by the recovery worker (every second while the
//! line is settled, `src/topology_watch.rs`) in a frame of rtcat's own (`src/own_frames.rs`),
//! which an inline bus sends and answers on the cyclic thread.
#![cfg(feature = "sim")]

mod support;

use ecsim::noise::{ensure, within_machine_noise};
use ecsim::{FaultCommand, Faults};
use rtcat_master::config::TxRxMode;
use rtcat_master::{Application, Config, Cycle, Stop};
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::counting::{ALLOCS, Counting, FIRST, SIM_ALLOCS, SPLIT_SIM, TRACK};
use support::tool_group::{G0, config, group_devices, line};

#[global_allocator]
static A: Counting = Counting;

/// Cycles counted once the whole line is well.
const COUNTED: u64 = 1200;

struct Probe {
    faults: Faults,
    cycles: u64,
    /// Cycles in a row with every subdevice's data valid.
    well: u64,
    counted: u64,
    stop: Stop,
}

impl Application for Probe {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        self.cycles += 1;
        if self.cycles == 50 {
            self.faults.apply(FaultCommand::Cable {
                position: G0,
                plugged: true,
            });
        }
        let all = cx.status.subdevices.iter().all(|s| s.data_valid);
        self.well = if all { self.well + 1 } else { 0 };
        // Counted only while the whole line, the joined group with it, is exchanged.
        let on = self.well > 100 && self.counted < COUNTED;
        self.counted += u64::from(on);
        TRACK.with(|t| t.set(on));
        if self.counted >= COUNTED {
            TRACK.with(|t| t.set(false));
            self.stop.request();
        }
    }
}

fn counted(mode: TxRxMode) -> Result<(u64, u64), String> {
    let faults = Faults::new();
    faults.apply(FaultCommand::Cable {
        position: G0,
        plugged: false,
    });
    let mut cfg: Config = config(true);
    cfg.cycle.txrx = mode;
    cfg.device = Config::parse(&group_devices(), "region alloc test")
        .expect("devices")
        .device;
    let mut p = Probe {
        faults: faults.clone(),
        cycles: 0,
        well: 0,
        counted: 0,
        stop: Stop::new(),
    };
    ALLOCS.store(0, Ordering::Relaxed);
    SIM_ALLOCS.store(0, Ordering::Relaxed);
    *FIRST.lock().unwrap_or_else(|e| e.into_inner()) = None;
    SPLIT_SIM.store(mode == TxRxMode::Inline, Ordering::Relaxed);
    let run = support::line::sim_run(cfg, line(), faults, p.stop.clone(), Duration::from_secs(30));
    let out = support::run_attempt(run, &mut p)?;
    TRACK.with(|t| t.set(false));
    ensure(p.counted >= COUNTED, || {
        format!(
            "{mode:?}: the joined line was well for {} counted cycles only ({} cycles, {} lost \
             frames)",
            p.counted, p.cycles, out.rec.frames_lost
        )
    })?;
    Ok((
        ALLOCS.load(Ordering::Relaxed),
        SIM_ALLOCS.load(Ordering::Relaxed),
    ))
}

#[test]
fn the_region_of_a_joined_group_allocates_nothing_on_the_cyclic_thread() {
    // One test: the tracking flag and counters are process-wide.
    for mode in [TxRxMode::Inline, TxRxMode::Thread] {
        let (allocs, sim) = within_machine_noise("region alloc", |_| counted(mode));
        let first = FIRST
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        assert_eq!(
            allocs, 0,
            "{mode:?}: {allocs} allocations on the cyclic thread in {COUNTED} cycles of a \
             joined group; the first at\n{first}"
        );
        eprintln!(
            "{mode:?}: 0 allocations by the master in {COUNTED} cycles with 3 members in rtcat's \
             region; {sim} in the simulator"
        );
    }
}
