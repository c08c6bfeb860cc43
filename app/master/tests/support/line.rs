//! A simulated line watched cycle by cycle: what the tests of per-subdevice recovery,
//! hot-connect groups and firmware updates record (each subdevice's valid data and OP per
//! cycle, the per-subdevice events), the segments they run, and a run with its event channel.

use ecsim::{Faults, SegmentSpec};
use rtcat_master::stats::EventKind;
use rtcat_master::{
    Application, Channels, Config, CycleStatus, Outcome, Recovery, RunSpec, Stop, SubdeviceCause,
    SubdeviceChange, SubdeviceEvent, Target,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The machine's verdict on a run of the watched line: a frame lost to the test machine's
/// scheduling invalidates every subdevice's data for its cycle, so a run that lost one is
/// retried (`ecsim::noise`) rather than judged.
pub fn no_frame_lost(out: &Outcome) -> Result<(), String> {
    let lost = out.rec.frames_lost;
    if lost > 0 {
        return Err(format!("{lost} frames lost to the machine"));
    }
    Ok(())
}

/// A file of the repository's `examples/`.
pub fn example(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(rel)
}

/// The drives of `examples/cia402`, drive 1 (axis y) with the "Error settings" object 0x10F1
/// of ETG.1020 and a sync error counter limit of 16 in 0x10F1:02 (drive 0 has no such object).
pub fn cia402_with_sync_error_limit() -> SegmentSpec {
    let text = std::fs::read_to_string(example("cia402/segment.toml")).unwrap();
    let anchor = "serial = 2\nprofile = \"cia402\"\ndc = true\n";
    assert!(text.contains(anchor));
    let text = text.replace(
        anchor,
        &format!(
            "{anchor}[[device.object]]\nindex = 0x10F1\nname = \"Error settings\"\n\
             type = \"RECORD\"\n[[device.object.entry]]\nsub = 1\n\
             name = \"Local error reaction\"\ntype = \"UINT32\"\naccess = \"rw\"\n\
             default = 1\n[[device.object.entry]]\nsub = 2\n\
             name = \"Sync error counter limit\"\ntype = \"UINT16\"\naccess = \"rw\"\n\
             default = 16\n"
        ),
    );
    SegmentSpec::from_toml(&text).expect("segment")
}

/// `examples/cia402/segment.toml` split at its two drives: the text before them and each
/// `[[device]]` block (without the header), for tests that wire the drives otherwise.
pub fn cia402_parts() -> (String, String, String) {
    let text = std::fs::read_to_string(example("cia402/segment.toml"))
        .expect("examples/cia402/segment.toml");
    let mut parts = text.splitn(3, "[[device]]");
    (
        parts.next().unwrap_or_default().to_string(),
        parts.next().expect("the first drive").to_string(),
        parts.next().expect("the second drive").to_string(),
    )
}

/// The I/O segment of `examples/segment-io.toml` (three devices).
pub fn segment_io() -> SegmentSpec {
    SegmentSpec::load(&example("segment-io.toml")).expect("examples/segment-io.toml")
}

/// A run of `spec` simulated in process with `faults`, without real-time settings (a test's
/// thread is not SCHED_FIFO unless root), stopped by `stop` or after `duration`.
pub fn sim_run(
    cfg: Config,
    spec: SegmentSpec,
    faults: Faults,
    stop: Stop,
    duration: Duration,
) -> RunSpec {
    let mut run = RunSpec::new(cfg, Target::Sim { spec, faults }, stop);
    run.no_rt = true;
    run.duration = Some(duration);
    run
}

/// One cycle of the first `N` subdevices as the application saw it.
#[derive(Debug, Clone, Copy)]
pub struct Seen<const N: usize> {
    pub cycle: u64,
    pub wake_ns: u64,
    pub valid: [bool; N],
    pub in_op: [bool; N],
}

impl<const N: usize> Seen<N> {
    pub fn of(st: &CycleStatus<'_>) -> Self {
        let mut s = Seen {
            cycle: st.cycle,
            wake_ns: st.wake_ns,
            valid: [false; N],
            in_op: [false; N],
        };
        for (i, d) in st.subdevices.iter().enumerate().take(N) {
            s.valid[i] = d.data_valid;
            s.in_op[i] = d.in_op();
        }
        s
    }

    /// Every one of the `N` valid and in OP.
    pub fn all_well(&self) -> bool {
        self.valid.iter().chain(&self.in_op).all(|&b| b)
    }
}

/// What an application watching the line recorded: every cycle (up to the capacity, allocated
/// before the run), the per-subdevice events and the whole-segment recoveries.
pub struct Watch<const N: usize> {
    pub log: Vec<Seen<N>>,
    pub events: Vec<SubdeviceEvent>,
    pub recoveries: Vec<Recovery>,
}

impl<const N: usize> Watch<N> {
    pub fn new(cycles: usize) -> Self {
        Watch {
            log: Vec::with_capacity(cycles),
            events: Vec::with_capacity(100),
            recoveries: Vec::with_capacity(10),
        }
    }

    /// Record a cycle ([`Application::cycle`]).
    pub fn cycle(&mut self, st: &CycleStatus<'_>) {
        if self.log.len() < self.log.capacity() {
            self.log.push(Seen::of(st));
        }
    }

    pub fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        if self.events.len() < self.events.capacity() {
            self.events.push(*e);
        }
    }

    pub fn on_recovery(&mut self, r: &Recovery) {
        if self.recoveries.len() < self.recoveries.capacity() {
            self.recoveries.push(*r);
        }
    }

    /// Cycles in which subdevice `i` had invalid data (frames lost included).
    pub fn invalid(&self, i: usize) -> usize {
        self.log.iter().filter(|s| !s.valid[i]).count()
    }

    /// Back from an outage: a cycle from log entry `from` on was not well, and the last `n`
    /// cycles, all after it, were.
    pub fn back_since(&self, from: usize, n: usize) -> bool {
        let Some(start) = self.log.len().checked_sub(n) else {
            return false;
        };
        let out = self.log[from.min(start)..start]
            .iter()
            .any(|s| !s.all_well());
        out && self.log[start..].iter().all(Seen::all_well)
    }

    /// `position`'s first outage as the application was told it: (cause, outage ns, attempts).
    pub fn back_of(&self, position: u16) -> Option<(SubdeviceCause, u64, u32)> {
        self.events.iter().find_map(|e| match e.change {
            SubdeviceChange::Back {
                cause,
                outage_ns,
                attempts,
                ..
            } if e.position == position => Some((cause, outage_ns, attempts)),
            _ => None,
        })
    }
}

/// A run with its events channel read while it runs: `seen` is called with each event as it
/// comes (on a thread of its own), and the outcome is returned with all of them; a timeout is
/// an attempt's reason, any other error panics ([`super::timed_out`]).
pub fn run_with_events(
    spec: RunSpec,
    app: &mut dyn Application,
    seen: impl FnMut(&EventKind) + Send + 'static,
) -> Result<(Outcome, Vec<EventKind>), String> {
    run_with_live(spec, app, Default::default(), seen)
}

/// [`run_with_events`] with the run's live counters `live` (for a status-side reader such as
/// the 0x092C sampler).
pub fn run_with_live(
    spec: RunSpec,
    app: &mut dyn Application,
    live: Arc<rtcat_master::stats::Live>,
    mut seen: impl FnMut(&EventKind) + Send + 'static,
) -> Result<(Outcome, Vec<EventKind>), String> {
    let (tx, mut rx) = rtrb::RingBuffer::new(1 << 14);
    let mut ch = Channels {
        live,
        events: tx,
        samples: None,
    };
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let reader = std::thread::spawn(move || {
        let mut events = Vec::new();
        loop {
            let last = d2.load(Ordering::Acquire);
            while let Ok(e) = rx.pop() {
                seen(&e.kind);
                events.push(e.kind);
            }
            if last {
                return events;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let out = rtcat_master::run(spec, app, &mut ch);
    done.store(true, Ordering::Release);
    let events = reader.join().expect("events reader");
    match out {
        Ok(out) => Ok((out, events)),
        Err(e) if super::timed_out(&e) => Err(format!("run: {e}")),
        Err(e) => panic!("run: {e}"),
    }
}
