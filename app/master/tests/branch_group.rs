//! A hot-connect group on a junction's first port, before mandatory devices (`[[group]] behind
//! = { position, port }`, issue 28 item 2, docs/NOTES.md §17.2): the 4-port junction of
//! `support::tool_group::junction_first_branch` with the three-device group "tool" on its port 3
//! and the input and output terminals (mandatory) on its ports 1 and 2, which the frame meets
//! after the group. The group's presence moves the terminals on the wire (positions 1 and 2
//! without it, 4 and 5 with it); the layout, ethercrab's image and the working counter must
//! not move, the terminals must lose no cycle when it comes and goes, and every position-
//! addressed step (a member's address, a terminal's after a power cycle) must find the device
//! where it is now.
//!
//! Timing-dependent: the plug-to-OP time depends on the machine's load (the recovery worker is
//! a normal thread), judged only when the machine gave the run its CPU (`support::Machine`); a
//! frame lost to the machine re-initialises the segment (`bad_cycles_before_recovery = 1`):
//! such an attempt is retried as `ecsim::noise` does. The mandatory devices' invalid cycles do
//! not depend on timing and are asserted exactly.

mod support;

use ecsim::noise::{ensure, within_machine_noise};
use ecsim::{FaultCommand, Faults};
use rtcat_master::config::BringUp;
use rtcat_master::stats::EventKind;
use rtcat_master::{Application, Cycle, Stop, SubdeviceCause, SubdeviceChange, SubdeviceEvent};
use std::sync::Arc;
use std::time::Duration;
use support::aprds::Aprds;
use support::line::{Watch, no_frame_lost, run_with_events};
use support::tool_group::{branch_config, junction_first_branch};

/// The layout: the junction and the two terminals, then the group's three members.
const N: usize = 6;
const MEMBERS: std::ops::Range<usize> = 3..6;
/// The simulator's devices (its order of description): the junction, the group, the terminals.
const GROUP_CABLE: usize = 1;
const INPUT_TERMINAL: usize = 4;
const CAP: Duration = Duration::from_secs(60);
const BACK_WITHIN_NS: u64 = 300_000_000;

/// Applies `script`'s fault at its cycle, records every cycle, and stops `settle` cycles after
/// the whole line was well again once the script ran out (or at the cap).
struct Script<const K: usize> {
    faults: Faults,
    script: Vec<(usize, FaultCommand)>,
    settle: usize,
    w: Watch<K>,
    stop: Stop,
    /// The layout entries of each bring-up (name, bit offset, bits).
    layouts: Vec<Vec<(String, u32, u8)>>,
    /// The position reads the master sent, and their count at [`MARK`] and at each step of
    /// the script.
    aprds: Arc<Aprds>,
    marks: Vec<(usize, (u64, u64))>,
}

/// A cycle well after the bring-up at which the position reads are counted.
const MARK: usize = 100;

impl<const K: usize> Application for Script<K> {
    fn configure(
        &mut self,
        setup: &mut rtcat_master::Setup<'_>,
    ) -> Result<(), rtcat_master::AppError> {
        self.layouts
            .push(support::tool_group::entries(setup.layout(), 0..K));
        Ok(())
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let at = self.w.log.len();
        if at == MARK || self.script.iter().any(|(c, _)| *c == at) {
            self.marks.push((at, self.aprds.now()));
        }
        for (_, f) in self.script.iter().filter(|(c, _)| *c == at) {
            self.faults.apply(f.clone());
        }
        self.w.cycle(cx.status);
        let last = self.script.iter().map(|(c, _)| *c).max().unwrap_or(0);
        if at > last + 5 && self.w.back_since(last, self.settle) {
            self.stop.request();
        }
    }

    fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        self.w.on_subdevice(e);
    }

    fn on_recovery(&mut self, r: &rtcat_master::Recovery) {
        self.w.on_recovery(r);
    }
}

struct Ran<const K: usize> {
    p: Script<K>,
    events: Vec<EventKind>,
    out: rtcat_master::Outcome,
}

/// The line of `junction_first_branch` with its position reads counted, the group absent at
/// bring-up or not, brought up by `bring_up`.
fn run(
    bring_up: BringUp,
    absent: bool,
    script: Vec<(usize, FaultCommand)>,
) -> Result<Ran<N>, String> {
    let faults = Faults::new();
    if absent {
        faults.apply(FaultCommand::Cable {
            position: GROUP_CABLE,
            plugged: false,
        });
    }
    let aprds = Arc::default();
    let target = support::aprds::counting(junction_first_branch(), &faults, &aprds);
    let mut cfg = branch_config();
    cfg.bus.bring_up = bring_up;
    run_on(cfg, target, (faults, aprds), script, 100)
}

fn run_on<const K: usize>(
    cfg: rtcat_master::Config,
    target: rtcat_master::Target,
    (faults, aprds): (Faults, Arc<Aprds>),
    script: Vec<(usize, FaultCommand)>,
    settle: usize,
) -> Result<Ran<K>, String> {
    let mut p = Script {
        faults,
        script,
        settle,
        w: Watch::new(100_000),
        stop: Stop::new(),
        layouts: Vec::new(),
        aprds,
        marks: Vec::new(),
    };
    let mut run = rtcat_master::RunSpec::new(cfg, target, p.stop.clone());
    run.no_rt = true;
    run.duration = Some(CAP);
    let (out, events) = run_with_events(run, &mut p, |_| {})?;
    ensure(p.stop.is_requested(), || {
        format!("{} s passed before the line was well again", CAP.as_secs())
    })?;
    assert_eq!(out.subdevices, K, "the layout's subdevices");
    Ok(Ran { p, events, out })
}

/// The first cycle from `from` on with every member valid and in OP.
fn joined(w: &Watch<N>, from: usize) -> Option<usize> {
    (w.log[from..].iter())
        .position(|s| MEMBERS.clone().all(|i| s.valid[i] && s.in_op[i]))
        .map(|k| from + k)
}

/// Positions `who` valid and in OP in every cycle of `w.log[range]`.
fn untouched(w: &Watch<N>, who: &[usize], range: std::ops::Range<usize>) {
    for &i in who {
        let bad = (w.log[range.clone()].iter())
            .filter(|s| !s.valid[i] || !s.in_op[i])
            .count();
        assert_eq!(
            bad, 0,
            "position {i}: {bad} cycles invalid or out of OP in {range:?}"
        );
    }
}

fn told(w: &Watch<N>, position: usize, f: impl Fn(&SubdeviceChange) -> bool) -> bool {
    (w.events.iter()).any(|e| usize::from(e.position) == position && f(&e.change))
}

fn back_with(w: &Watch<N>, position: usize, cause: SubdeviceCause) -> bool {
    told(
        w,
        position,
        |c| matches!(c, SubdeviceChange::Back { cause: c, .. } if *c == cause),
    )
}

/// Absent at bring-up, plugged into the junction's port 3, pulled and plugged again: the group
/// joins there and comes back, the terminals (moved on the wire each time) lose no cycle, and
/// nothing is reported as a device the configuration does not place.
#[test]
fn a_group_on_a_junction_s_first_port_joins_and_leaves_before_mandatory_devices() {
    const PLUG: usize = 900;
    const PULL: usize = 1900;
    const AGAIN: usize = 2900;
    let cable = |plugged| FaultCommand::Cable {
        position: GROUP_CABLE,
        plugged,
    };
    let (r, first, second) = within_machine_noise("group on a junction's port", |_| {
        let machine = support::Machine::watch();
        let script = vec![
            (PLUG, cable(true)),
            (PULL, cable(false)),
            (AGAIN, cable(true)),
        ];
        let r = run(BringUp::Ethercrab, true, script)?;
        no_frame_lost(&r.out)?;
        let w = &r.p.w;
        let first = joined(w, PLUG)
            .filter(|&c| c < PULL)
            .ok_or("not joined before the pull")?;
        let second = joined(w, AGAIN).ok_or("not back after the second plug")?;
        let ns = |from: usize, to: usize| w.log[to].wake_ns - w.log[from].wake_ns;
        let (first, second) = (ns(PLUG, first), ns(AGAIN, second));
        machine.within("the join", first, BACK_WITHIN_NS)?;
        machine.within("the return", second, BACK_WITHIN_NS)?;
        Ok((r, first, second))
    });
    let w = &r.p.w;
    eprintln!(
        "group on a junction's port 3, before the two mandatory terminals: joined {:.1} ms \
         after the plug, back {:.1} ms after the second (1 ms cycle)",
        first as f64 / 1e6,
        second as f64 / 1e6
    );
    // The junction and the terminals: every cycle valid and in OP, the segment never
    // re-initialised.
    untouched(w, &[0, 1, 2], 0..w.log.len());
    assert_eq!(r.out.rec.recoveries, 0, "{:?}", r.events);
    // The members: joined, valid until the pull, away until the second plug, back.
    let (j1, j2) = (joined(w, PLUG).unwrap(), joined(w, AGAIN).unwrap());
    untouched(w, &[3, 4, 5], j1..PULL);
    untouched(w, &[3, 4, 5], j2..w.log.len());
    for i in MEMBERS {
        assert!(
            w.log[PULL + 5..AGAIN].iter().all(|s| !s.valid[i]),
            "position {i} valid while unplugged"
        );
        assert!(back_with(w, i, SubdeviceCause::Joined), "{:?}", w.events);
        assert!(told(w, i, |c| matches!(c, SubdeviceChange::Lost { .. })));
        assert!(
            back_with(w, i, SubdeviceCause::Reconnected),
            "{:?}",
            w.events
        );
    }
    // The group at its configured place is no stray.
    assert_eq!(r.out.rec.unexpected.max, 0, "{:?}", r.events);
    // While it is absent each member's probe is one frame with two position reads (its
    // position and the one before): the terminals found there, where the order expects them
    // without it, tell it is not there, with no reading of every position.
    let mark = |c: usize| r.p.marks.iter().find(|m| m.0 == c).expect("marked").1;
    let ((d0, f0), (d1, f1)) = (mark(MARK), mark(PLUG));
    let (datagrams, frames) = (d1 - d0, f1 - f0);
    eprintln!("absent: {datagrams} position reads in {frames} frames in cycles {MARK}..{PLUG}");
    assert!(frames > 0, "no probe while absent");
    assert!(
        datagrams <= 2 * frames,
        "{datagrams} position reads in {frames} frames while absent"
    );
}

/// Present at bring-up: kept out of ethercrab's group, the members join at once; a terminal
/// behind the group power-cycled (its station address lost) is given it again at its position
/// on the wire with the group there (4, not its layout position 1); the segment re-initialised
/// with the group present keeps its layout, and the group joins again.
#[test]
fn a_group_present_at_bring_up_on_a_junction_s_port_runs_through_recoveries() {
    present_at_bring_up(BringUp::Ethercrab);
}

/// The same with rtcat's own bring-up, which keeps the members out at its scan.
#[test]
fn a_group_present_at_rtcat_s_bring_up_on_a_junction_s_port_runs_through_recoveries() {
    present_at_bring_up(BringUp::Rtcat);
}

fn present_at_bring_up(b: BringUp) {
    const POWER: usize = 600;
    const DROP: usize = 1500;
    let what = format!("group on a junction's port at bring-up, {b:?}");
    let r = within_machine_noise(&what, |_| {
        let script = vec![
            (
                POWER,
                FaultCommand::PowerCycleOne {
                    position: INPUT_TERMINAL,
                },
            ),
            (DROP, FaultCommand::DropNext(3)),
        ];
        let r = run(b, false, script)?;
        let w = &r.p.w;
        let start = joined(w, 0)
            .filter(|&c| c < POWER)
            .ok_or("not joined before the power cycle")?;
        // Only the drop re-initialises: any other lost frame is the machine's.
        ensure(r.p.w.recoveries.len() == 1, || {
            format!("{} re-initialisations", r.p.w.recoveries.len())
        })?;
        ensure(w.log[start..POWER].iter().all(|s| s.all_well()), || {
            "a cycle lost before the power cycle".into()
        })?;
        Ok(r)
    });
    let w = &r.p.w;
    let start = joined(w, 0).unwrap();
    eprintln!("{b:?}: group present at bring-up: all in OP at cycle {start}");
    for i in MEMBERS {
        assert!(back_with(w, i, SubdeviceCause::Joined), "{:?}", w.events);
    }
    // The input terminal (layout 1) found at wire position 4 and brought back; the junction,
    // the output terminal and the members untouched until the drop.
    assert!(
        back_with(w, 1, SubdeviceCause::PowerCycled),
        "the terminal behind the group not back: {:?}",
        w.events
    );
    untouched(w, &[0, 2, 3, 4, 5], start..DROP);
    let t1 = (w.log[POWER..DROP].iter())
        .rposition(|s| !s.valid[1])
        .map(|k| POWER + k + 1)
        .expect("the terminal's outage");
    untouched(w, &[1], t1..DROP);
    // The re-initialisation with the group present: the same layout, the group back.
    assert_eq!(r.p.layouts.len(), 2, "bring-ups");
    assert_eq!(
        r.p.layouts[0], r.p.layouts[1],
        "the layout of the second bring-up"
    );
    assert!(
        (r.p.layouts[0].iter()).any(|e| e.0 == "Value"),
        "the members' entries from their [[device]] entries: {:?}",
        r.p.layouts[0]
    );
    let end = w.log.last().expect("cycles");
    assert!(end.all_well(), "after the re-initialisation: {end:?}");
    assert_eq!(r.out.rec.unexpected.max, 0, "{:?}", r.events);
}

/// The drives of `examples/cia402` on a junction: the first with four ports (the reference
/// clock, 700 ns to the devices on its ports), an optional drive (alias 0x20) on its port 3 and
/// a mandatory drive on its port 1 after it.
fn dc_junction() -> ecsim::SegmentSpec {
    let (head, first, second) = support::line::cia402_parts();
    let t = format!(
        "{head}[[device]]{}[[device]]{}[[device]]{}",
        first.replacen("serial = 1\n", "serial = 1\nports = 4\nhop_ns = 700\n", 1),
        second.replacen(
            "serial = 2\n",
            "serial = 2\nalias = 32\nupstream = [0, 3]\n",
            1
        ),
        first.replacen("serial = 1\n", "serial = 3\nupstream = [0, 1]\n", 1),
    );
    ecsim::SegmentSpec::from_toml(&t).expect("the junction's drives")
}

/// A DC drive on a junction's port 3 before a mandatory DC drive, absent at bring-up and
/// plugged in: it joins with the propagation delay the frame really has to it (measured along
/// the devices before it on the wire, not the layout's order, in which it is last), its clock in
/// sync and SYNC0 on the segment's grid; the two others lose no cycle.
#[test]
fn a_dc_drive_on_a_junction_s_first_port_joins_in_sync_before_a_mandatory_drive() {
    dc_drive_on_a_junction(true, BringUp::Ethercrab);
}

/// The same drive there at bring-up: kept out of ethercrab's group, joined at once, in sync.
#[test]
fn a_dc_drive_on_a_junction_s_first_port_at_bring_up_runs_in_sync() {
    dc_drive_on_a_junction(false, BringUp::Ethercrab);
}

/// Both with rtcat's own bring-up: its scan keeps the drive out, its DC set-up measures the
/// delays along the wire with the drive there or not.
#[test]
fn a_dc_drive_on_a_junction_s_first_port_runs_in_sync_with_rtcat_s_bring_up() {
    dc_drive_on_a_junction(true, BringUp::Rtcat);
    dc_drive_on_a_junction(false, BringUp::Rtcat);
}

fn dc_drive_on_a_junction(absent: bool, b: BringUp) {
    const PLUG: usize = 900;
    const DRIVE: usize = 1;
    let cfg = || {
        let mut cfg = rtcat_master::Config::parse(
            "[cycle]\nperiod_us = 1000\n[dc]\nenabled = true\n\
             [health]\nrecovery = \"subdevice\"\nrecovery_backoff_ms = 50\n\
             bad_cycles_before_recovery = 1\n\
             [[group]]\nname = \"drive\"\noptional = true\nbehind = { position = 0, port = 3 }\n\
             members = [{ alias = 0x20 }]\n\
             [[device]]\nalias = 0x20\npdo_assign = { sm2 = [0x1600], sm3 = [0x1a00] }\n\
             [[device.pdo_map]]\nindex = 0x1600\nentries = [\"0x6040:00:16\", \"0x607a:00:32\", \
             \"0x6060:00:8\"]\n\
             [[device.pdo_map]]\nindex = 0x1a00\nentries = [\"0x6041:00:16\", \"0x6064:00:32\", \
             \"0x6061:00:8\"]\n",
            "branch dc test",
        )
        .expect("config");
        support::patient(&mut cfg);
        cfg.bus.bring_up = b;
        cfg
    };
    type Clock = Option<(ecsim::dc::DcStatus, u32, u64)>;
    let (r, clock) = within_machine_noise("DC drive on a junction's port", |_| {
        let faults = Faults::new();
        faults.apply(FaultCommand::Cable {
            position: DRIVE,
            plugged: !absent,
        });
        // The drive's clock, its delay register (0x0928) and the simulator's figure: the
        // frame's arrival at it after the reference.
        let clock: Arc<std::sync::Mutex<Clock>> = Arc::default();
        let c = clock.clone();
        let target = support::observed::observed(dc_junction(), &faults, move |port, _| {
            let now = port.now_ns();
            let status = port.segment_mut().dc_status(DRIVE, now);
            let devices = port.segment().devices();
            let m = &devices[DRIVE].mem()[0x0928..0x092c];
            let truth = devices[DRIVE].arrival_ns() - devices[0].arrival_ns();
            *c.lock().unwrap_or_else(|e| e.into_inner()) =
                status.map(|s| (s, u32::from_le_bytes([m[0], m[1], m[2], m[3]]), truth));
        });
        // Present at bring-up: its join right after it is the outage the run waits out.
        let plug = if absent {
            vec![(
                PLUG,
                FaultCommand::Cable {
                    position: DRIVE,
                    plugged: true,
                },
            )]
        } else {
            Vec::new()
        };
        let r = run_on::<3>(cfg(), target, (faults, Arc::default()), plug, 500)?;
        let clock = (*clock.lock().unwrap_or_else(|e| e.into_inner())).ok_or("no clock")?;
        // Frames after the drive's SYNC0 pulse are the machine's phase: a few, not most.
        ensure(clock.0.late * 50 <= clock.0.on_time, || {
            format!("{} late frames of {}", clock.0.late, clock.0.on_time)
        })?;
        Ok((r, clock))
    });
    let w = &r.p.w;
    // The reference and the mandatory drive behind the member's port: every cycle.
    for i in [0, 1] {
        let bad = w.log.iter().filter(|s| !s.valid[i] || !s.in_op[i]).count();
        assert_eq!(bad, 0, "position {i}: {bad} cycles invalid or out of OP");
    }
    assert_eq!(r.out.rec.recoveries, 0, "{:?}", r.events);
    assert!(
        (w.events.iter()).any(|e| e.position == 2
            && matches!(
                e.change,
                SubdeviceChange::Back {
                    cause: SubdeviceCause::Joined,
                    ..
                }
            )),
        "{:?}",
        w.events
    );
    assert!(w.log.last().expect("cycles").all_well());
    let (dc, set, truth) = clock;
    eprintln!(
        "DC drive on the junction's port 3 (absent at bring-up: {absent}): delay {set} ns (the \
         simulator's {truth} ns)"
    );
    assert!(
        u64::from(set).abs_diff(truth) <= 10,
        "delay {set} ns, truly {truth} ns"
    );
    let sync0 = dc.sync0.expect("SYNC0 running");
    assert_eq!(sync0.cycle, 1_000_000, "{dc:?}");
    assert!(dc.in_sync && dc.diff_ns.abs() < 1000, "{dc:?}");
}
