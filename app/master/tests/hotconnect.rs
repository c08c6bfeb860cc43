//! Hot-connect groups (`[[group]]`, issue 28 item 2) on a simulated line: the I/O segment of
//! `examples/segment-io.toml` (three mandatory devices) followed by a three-device optional
//! group. The group's first cable is pulled during OP at a 1 ms cycle (`unplug 3`, which takes
//! all three away) and plugged back: the mandatory devices must see no cycle of invalid data and
//! never leave OP, the group must be back in OP, and the time from the plug to the group's valid
//! data is printed. Without `optional = true` the same unplug escalates to the segment (the
//! control: the test can fail).
//!
//! Timing-dependent: the plug-to-OP time depends on the machine's load (the recovery worker is
//! a normal thread), and a frame lost to the machine re-initialises the segment
//! (`bad_cycles_before_recovery = 1`); such an attempt is retried as `ecsim::noise` does. The
//! mandatory devices' invalid cycles do not depend on timing and are asserted exactly.

use ecsim::{FaultCommand, Faults, SegmentSpec};
use rtcat_master::stats::EventKind;
use rtcat_master::{
    Application, Config, Cycle, RunSpec, Stop, SubdeviceCause, SubdeviceChange, Target,
};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static SERIAL: Mutex<()> = Mutex::new(());

/// Devices on the line: 0..3 mandatory, 3..6 the optional group.
const N: usize = 6;
/// The group's first position.
const G0: usize = 3;
const UNPLUG_AT: u64 = 300;
const PLUG_AT: u64 = 900;

/// The I/O segment twice: the second copy (serials 11..13, aliases 0x10..0x12) is the group.
fn line() -> SegmentSpec {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/segment-io.toml");
    let text = std::fs::read_to_string(p).expect("examples/segment-io.toml");
    let devices = &text[text.find("[[device]]").expect("devices")..];
    let mut tail = devices.to_string();
    for n in 1..=3 {
        tail = tail.replace(
            &format!("serial = {n}\n"),
            &format!("serial = {}\nalias = {}\n", 10 + n, 0x0f + n),
        );
    }
    SegmentSpec::from_toml(&format!("{text}\n{tail}")).expect("the line")
}

fn config(optional: bool) -> Config {
    let text = format!(
        "[cycle]\nperiod_us = 1000\n\
         [health]\nrecovery = \"subdevice\"\nrecovery_backoff_ms = 50\n\
         bad_cycles_before_recovery = 1\nsubdevice_attempts = 2\n\
         [[group]]\nname = \"tool\"\noptional = {optional}\n\
         members = [{{ alias = 0x10 }}, {{ alias = 0x11 }}, {{ position = 5 }}]\n"
    );
    Config::parse(&text, "hotconnect test").expect("config")
}

#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    valid: [bool; N],
    in_op: [bool; N],
    wake_ns: u64,
}

struct Probe {
    faults: Faults,
    /// Set when the cable was pulled.
    unplugged: Arc<AtomicBool>,
    /// The group's first device is powered off and on instead (its station address is lost:
    /// found again by position).
    power: bool,
    log: Vec<Seen>,
}

impl Application for Probe {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let st = cx.status;
        let at = self.log.len() as u64;
        if at == UNPLUG_AT {
            self.unplugged.store(true, Ordering::Release);
        }
        if at == UNPLUG_AT || at == PLUG_AT {
            self.faults.apply(if self.power {
                FaultCommand::Power {
                    position: G0,
                    on: at == PLUG_AT,
                }
            } else {
                FaultCommand::Cable {
                    position: G0,
                    plugged: at == PLUG_AT,
                }
            });
        }
        let mut s = Seen {
            wake_ns: st.wake_ns,
            ..Seen::default()
        };
        for (i, d) in st.subdevices.iter().enumerate().take(N) {
            s.valid[i] = d.data_valid;
            s.in_op[i] = d.in_op();
        }
        if self.log.len() < self.log.capacity() {
            self.log.push(s);
        }
    }
}

fn run(optional: bool, power: bool, secs: f64) -> (rtcat_master::Outcome, Probe, Vec<EventKind>) {
    let faults = Faults::new();
    let unplugged = Arc::new(AtomicBool::new(false));
    let mut p = Probe {
        faults: faults.clone(),
        unplugged: unplugged.clone(),
        power,
        log: Vec::with_capacity(100_000),
    };
    // Plugged back at cycle PLUG_AT; a segment that stops cycling (not optional) never gets
    // there: plugged back by time, 1 s after the unplug.
    let f2 = faults.clone();
    let plug = std::thread::spawn(move || {
        if optional {
            return;
        }
        while !unplugged.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(1000));
        f2.apply(FaultCommand::Cable {
            position: G0,
            plugged: true,
        });
    });
    let mut run = RunSpec::new(
        config(optional),
        Target::Sim {
            spec: line(),
            faults,
        },
        Stop::new(),
    );
    run.no_rt = true;
    run.duration = Some(Duration::from_secs_f64(secs));
    let (tx, mut rx) = rtrb::RingBuffer::new(1 << 14);
    let mut ch = rtcat_master::Channels {
        live: Default::default(),
        events: tx,
        samples: None,
    };
    let out = rtcat_master::run(run, &mut p, &mut ch).expect("run");
    plug.join().expect("plug");
    let mut events = Vec::new();
    while let Ok(e) = rx.pop() {
        events.push(e.kind);
    }
    (out, p, events)
}

fn told(events: &[EventKind], position: u16, f: impl Fn(&SubdeviceChange) -> bool) -> bool {
    events.iter().any(|k| {
        matches!(k, EventKind::Subdevice { position: p, change } if *p == position && f(change))
    })
}

/// Bound of the issue (docs/NOTES.md §17.2 has what was measured).
const BACK_WITHIN_NS: u64 = 300_000_000;

/// One unplug and plug of the optional group; the time from the plug to the group's valid data.
fn unplugged_and_back(power: bool) -> Result<u64, String> {
    let (out, p, events) = run(true, power, 2.0);
    if out.rec.frames_lost > 0 {
        return Err(format!(
            "{} frames lost to the machine",
            out.rec.frames_lost
        ));
    }
    // The rest never noticed: no re-initialisation, every cycle valid and in OP.
    assert_eq!(out.rec.recoveries, 0, "{events:?}");
    assert!(
        p.log.len() > PLUG_AT as usize + 100,
        "{} cycles",
        p.log.len()
    );
    for i in 0..G0 {
        let bad = p.log.iter().filter(|s| !s.valid[i] || !s.in_op[i]).count();
        assert_eq!(
            bad, 0,
            "mandatory position {i}: {bad} cycles invalid or out of OP"
        );
    }
    // The group was away (its data invalid) and is told so: lost, absent, back reconnected.
    for i in G0..N {
        let away = p.log[UNPLUG_AT as usize + 5..PLUG_AT as usize]
            .iter()
            .all(|s| !s.valid[i]);
        assert!(away, "position {i} valid while unplugged");
        let pos = i as u16;
        assert!(
            told(&events, pos, |c| matches!(c, SubdeviceChange::Lost { .. })),
            "{events:?}"
        );
        assert!(
            told(&events, pos, |c| matches!(
                c,
                SubdeviceChange::Back {
                    cause: SubdeviceCause::Reconnected,
                    ..
                }
            )),
            "position {i} not back reconnected: {events:?}"
        );
        assert!(!told(&events, pos, |c| *c == SubdeviceChange::GaveUp));
    }
    assert!(told(&events, G0 as u16, |c| *c == SubdeviceChange::Absent));
    // From the plug to the first cycle with the whole group valid and in OP, for the rest of
    // the run.
    let plug = &p.log[PLUG_AT as usize];
    let back = p.log[PLUG_AT as usize..]
        .iter()
        .position(|s| (G0..N).all(|i| s.valid[i] && s.in_op[i]))
        .ok_or("the group never came back")?;
    let rest = &p.log[PLUG_AT as usize + back..];
    assert!(
        rest.iter().all(|s| s.valid.iter().all(|&v| v)),
        "the group left again"
    );
    let ns = p.log[PLUG_AT as usize + back].wake_ns - plug.wake_ns;
    if ns > BACK_WITHIN_NS {
        return Err(format!(
            "the group back {} ms after the plug",
            ns / 1_000_000
        ));
    }
    Ok(ns)
}

#[test]
fn an_optional_group_leaves_and_rejoins_and_the_rest_loses_no_cycle() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = ecsim::noise::within_machine_noise("hot-connect group", |_| unplugged_and_back(false));
    eprintln!(
        "hot-connect: 3-device group in OP {:.1} ms after the plug (1 ms cycle, the other 3 \
         devices: 0 invalid cycles)",
        ns as f64 / 1e6
    );
}

/// The group's first device powered off (the line ends before it) and on again (reset: INIT,
/// no station address): found by position, the group rejoins.
#[test]
fn an_optional_group_behind_a_power_cycled_device_rejoins() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = ecsim::noise::within_machine_noise("hot-connect power", |_| unplugged_and_back(true));
    eprintln!(
        "hot-connect: group in OP {:.1} ms after its first device was powered on",
        ns as f64 / 1e6
    );
}

/// An optional group absent at the first bring-up is refused, naming the group (this version
/// cannot give it a place in the process image later).
#[test]
fn an_optional_group_absent_at_bring_up_is_refused_naming_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cfg = config(true);
    cfg.group[0].members[0].alias = Some(0x30);
    let mut run = RunSpec::new(
        cfg,
        Target::Sim {
            spec: line(),
            faults: Faults::new(),
        },
        Stop::new(),
    );
    run.no_rt = true;
    run.duration = Some(Duration::from_millis(100));
    let mut p = Probe {
        faults: Faults::new(),
        unplugged: Default::default(),
        power: false,
        log: Vec::new(),
    };
    let Err(e) = rtcat_master::run_simple(run, &mut p) else {
        panic!("an absent optional group was brought up");
    };
    let e = e.to_string();
    assert!(
        e.contains("group \"tool\"")
            && e.contains("alias 0x0030")
            && e.contains("present at bring-up"),
        "{e}"
    );
}

/// The control: the same group without `optional = true` is three mandatory devices; unplugged,
/// their recovery gives up and the segment is re-initialised (it waits for the line to be whole
/// again), so the mandatory devices lose cycles too.
#[test]
fn the_same_unplug_without_optional_escalates_to_the_segment() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, p, events) = run(false, false, 2.0);
    // Whichever member's recovery gives up first escalates.
    assert!(
        (G0..N).any(|i| told(&events, i as u16, |c| *c == SubdeviceChange::GaveUp)),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|k| matches!(k, EventKind::TopologyChanged { found: None, .. })),
        "{events:?}"
    );
    assert!(out.rec.recoveries >= 1, "{events:?}");
    // The mandatory devices went down with the segment: no cycle ran while it waited for the
    // line (the application is not called during a re-initialisation).
    let gap = p
        .log
        .windows(2)
        .map(|w| w[1].wake_ns - w[0].wake_ns)
        .max()
        .unwrap_or(0);
    assert!(gap > 500_000_000, "longest gap between cycles {gap} ns");
}
