//! Hot-connect groups (`[[group]]`, issue 28 item 2) on a simulated line: the I/O segment of
//! `examples/segment-io.toml` (three mandatory devices) followed by a three-device optional
//! group. The group's first cable is pulled during OP at a 1 ms cycle (`unplug 3`, which takes
//! all three away) and plugged back: the mandatory devices must see no cycle of invalid data and
//! never leave OP, the group must be back in OP, and the time from the plug to the group's valid
//! data is printed. Without `optional = true` the same unplug escalates to the segment (the
//! control: the test can fail).
//!
//! Timing-dependent: the plug-to-OP time depends on the machine's load (the recovery worker is
//! a normal thread): judged when the machine gave the run its CPU (`support::Machine`); a frame
//! lost to the machine re-initialises the segment (`bad_cycles_before_recovery = 1`); such an
//! attempt is retried as `ecsim::noise` does. A run lasts until the line is back, however
//! slowly (60 s at most). The mandatory devices' invalid cycles do not depend on timing and are
//! asserted exactly.

mod support;

use ecsim::noise::{ensure, within_machine_noise};
use ecsim::{FaultCommand, Faults};
use rtcat_master::stats::EventKind;
use rtcat_master::{
    Application, Config, Cycle, RunSpec, Stop, SubdeviceCause, SubdeviceChange, SubdeviceEvent,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::aprds::Aprds;
use support::line::{Watch, no_frame_lost, run_with_events, run_with_live, sim_run};
use support::observed::observed;
use support::tool_group::{
    G0, N, config, group_devices, junction_first_branch, junction_line, line,
};

static SERIAL: Mutex<()> = Mutex::new(());

/// The cycles (run, counted by the probe) at which the group is unplugged and plugged back.
const UNPLUG_AT: usize = 300;
const PLUG_AT: usize = 900;
/// The wall time a run may take to tell its story (about 1 s on an idle machine).
const CAP: Duration = Duration::from_secs(60);

struct Probe {
    faults: Faults,
    /// Plugged back by the probe at `PLUG_AT` (else by the test's thread).
    plug: bool,
    /// The group's first device is powered off and on instead (its station address is lost:
    /// found again by position).
    power: bool,
    /// Raised when the cable was pulled.
    unplugged: Arc<AtomicBool>,
    w: Watch<N>,
    /// Requested once the line was whole and well for 100 cycles after the plug.
    stop: Stop,
}

impl Application for Probe {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let at = self.w.log.len();
        if at == UNPLUG_AT {
            self.unplugged.store(true, Ordering::Release);
        }
        if at == UNPLUG_AT || at == PLUG_AT && self.plug {
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
        self.w.cycle(cx.status);
        if self.w.log.len() > PLUG_AT && self.w.back_since(UNPLUG_AT, 100) {
            self.stop.request();
        }
    }

    fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        self.w.on_subdevice(e);
    }
}

/// A run of the line until the probe stops it (an attempt's reason when it timed out or
/// reached [`CAP`] first). Not optional, the group is plugged back 1 s after the segment's
/// re-initialisation refused the line without it (it waits for it then, its application not
/// called), however long a loaded machine took to get there.
fn run(
    optional: bool,
    power: bool,
    seg: ecsim::SegmentSpec,
) -> Result<(rtcat_master::Outcome, Probe, Vec<EventKind>), String> {
    let faults = Faults::new();
    let mut p = Probe {
        faults: faults.clone(),
        plug: optional,
        power,
        unplugged: Default::default(),
        w: Watch::new(100_000),
        stop: Stop::new(),
    };
    let refused = Arc::new(AtomicBool::new(false));
    let (f2, r2, stop) = (faults.clone(), refused.clone(), p.stop.clone());
    let plug = std::thread::spawn(move || {
        if optional {
            return;
        }
        while !r2.load(Ordering::Acquire) && !stop.is_requested() {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(1000));
        f2.apply(FaultCommand::Cable {
            position: G0,
            plugged: true,
        });
    });
    let run = sim_run(config(optional), seg, faults, p.stop.clone(), CAP);
    let ran = run_with_events(run, &mut p, move |k| {
        if matches!(k, EventKind::TopologyChanged { found: None, .. }) {
            refused.store(true, Ordering::Release);
        }
    });
    p.stop.request();
    plug.join().expect("plug");
    let (out, events) = ran?;
    Ok((out, p, events))
}

/// The run got past the plug and its application stopped it (not the cap); what it waited for
/// is `what`.
fn stopped_after_plug<const K: usize>(stop: &Stop, w: &Watch<K>, what: &str) -> Result<(), String> {
    ensure(stop.is_requested() && w.log.len() > PLUG_AT, || {
        format!(
            "{} s passed before {what}: {} cycles",
            CAP.as_secs(),
            w.log.len()
        )
    })
}

/// Positions `0..n` were in OP with valid data in every cycle of `log`.
fn untouched<const K: usize>(log: &[support::line::Seen<K>], n: usize) {
    for i in 0..n {
        let bad = log.iter().filter(|s| !s.valid[i] || !s.in_op[i]).count();
        assert_eq!(bad, 0, "position {i}: {bad} cycles invalid or out of OP");
    }
}

/// What a joined member's data showed while valid: the cycles its inputs echoed what was
/// written (and those that echoed anything else), and the values of the simulator's counter.
#[derive(Default)]
struct Flow {
    echoed: usize,
    wrong: usize,
    counter: std::collections::BTreeSet<u8>,
}

impl Flow {
    /// Its data went through rtcat's region both ways, in at least 50 cycles.
    fn check(&self, who: &str) {
        assert_eq!(self.wrong, 0, "{who}: inputs echoed what was never written");
        assert!(
            self.echoed >= 50,
            "{who}: outputs came back {} times",
            self.echoed
        );
        assert!(
            self.counter.len() >= 50,
            "{who}: counter values seen: {}",
            self.counter.len()
        );
    }
}

/// Nanoseconds from the plug (`PLUG_AT`) to the first cycle that `joined`.
fn plug_to<const K: usize>(
    log: &[support::line::Seen<K>],
    joined: impl Fn(&support::line::Seen<K>) -> bool,
) -> u64 {
    let back = log[PLUG_AT..]
        .iter()
        .position(joined)
        .expect("joined: the run stops only then");
    log[PLUG_AT + back].wake_ns - log[PLUG_AT].wake_ns
}

/// Whether `position` was told back with `cause`.
fn back_with(events: &[EventKind], position: u16, cause: SubdeviceCause) -> bool {
    told(
        events,
        position,
        |c| matches!(c, SubdeviceChange::Back { cause: got, .. } if *got == cause),
    )
}

fn told(events: &[EventKind], position: u16, f: impl Fn(&SubdeviceChange) -> bool) -> bool {
    events.iter().any(|k| {
        matches!(k, EventKind::Subdevice { position: p, change } if *p == position && f(change))
    })
}

/// Bound of the issue (docs/NOTES.md §17.2 has what was measured); not judged when the machine
/// kept the run waiting for a CPU (`support::Machine`).
const BACK_WITHIN_NS: u64 = 300_000_000;

/// One unplug and plug of the optional group; the time from the plug to the group's valid data.
fn unplugged_and_back(power: bool, seg: ecsim::SegmentSpec) -> Result<u64, String> {
    let machine = support::Machine::watch();
    let (out, p, events) = run(true, power, seg)?;
    stopped_after_plug(&p.stop, &p.w, "the group was back")?;
    no_frame_lost(&out)?;
    let log = &p.w.log;
    // The rest never noticed: no re-initialisation, every cycle valid and in OP.
    assert_eq!(out.rec.recoveries, 0, "{events:?}");
    untouched(log, G0);
    // The group was away (its data invalid) and is told so: lost, absent, back reconnected.
    for i in G0..N {
        let away = log[UNPLUG_AT + 5..PLUG_AT].iter().all(|s| !s.valid[i]);
        assert!(away, "position {i} valid while unplugged");
        let pos = i as u16;
        assert!(
            told(&events, pos, |c| matches!(c, SubdeviceChange::Lost { .. })),
            "{events:?}"
        );
        assert!(
            back_with(&events, pos, SubdeviceCause::Reconnected),
            "position {i} not back reconnected: {events:?}"
        );
        assert!(!told(&events, pos, |c| *c == SubdeviceChange::GaveUp));
    }
    assert!(told(&events, G0 as u16, |c| *c == SubdeviceChange::Absent));
    // From the plug to the first cycle with the whole group valid and in OP, for the rest of
    // the run.
    let plug = &log[PLUG_AT];
    let back = log[PLUG_AT..]
        .iter()
        .position(|s| (G0..N).all(|i| s.valid[i] && s.in_op[i]))
        .expect("back: the run stops only then");
    let rest = &log[PLUG_AT + back..];
    assert!(
        rest.iter().all(|s| s.valid.iter().all(|&v| v)),
        "the group left again"
    );
    let ns = log[PLUG_AT + back].wake_ns - plug.wake_ns;
    machine.within("the group's return", ns, BACK_WITHIN_NS)?;
    Ok(ns)
}

#[test]
fn an_optional_group_leaves_and_rejoins_and_the_rest_loses_no_cycle() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = within_machine_noise("hot-connect group", |_| unplugged_and_back(false, line()));
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
    let ns = within_machine_noise("hot-connect power", |_| unplugged_and_back(true, line()));
    eprintln!(
        "hot-connect: group in OP {:.1} ms after its first device was powered on",
        ns as f64 / 1e6
    );
}

struct Nop;
impl Application for Nop {
    fn cycle(&mut self, _: &mut Cycle<'_>) {}
}

/// An optional group absent at the first bring-up without the mapping its entries in the layout
/// would come from (a `[[device]]` entry with `pdo_assign` and `pdo_map`) is refused, naming
/// the group and the member (docs/NOTES.md §17.2).
#[test]
fn an_absent_member_without_a_mapping_is_refused_naming_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let e = within_machine_noise("an absent group", |_| {
        let mut cfg = config(true);
        cfg.group[0].members[0].alias = Some(0x30);
        let run = sim_run(
            cfg,
            line(),
            Faults::new(),
            Stop::new(),
            Duration::from_millis(100),
        );
        let mut p = Nop;
        match rtcat_master::run_simple(run, &mut p) {
            Ok(_) => panic!("an absent optional member without a mapping was brought up"),
            Err(e) if support::timed_out(&e) => Err(format!("run: {e}")),
            Err(e) => Ok(e.to_string()),
        }
    });
    assert!(
        e.contains("group \"tool\": group[0].members[0] (alias 0x0030)")
            && e.contains("no [[device]] entry selects it (by position 6"),
        "{e}"
    );
}

/// The analog device of the group (position 5): what is written to its outputs comes back XOR
/// 0x5a in its input bytes 4..7 (the simulator's `pdi` rule, examples/segment-io.toml).
const ANALOG: usize = 5;

/// Plugs the group in at `PLUG_AT`, writes a pattern to the analog device's outputs and checks
/// that it comes back through rtcat's region.
struct Joiner {
    faults: Faults,
    w: Watch<N>,
    stop: Stop,
    /// The analog member's echo and the input terminal's counter, while valid.
    flow: Flow,
    /// Once joined, lose frames so that the segment is re-initialised with the group present.
    reinit: bool,
    /// The log length when the frames were dropped.
    dropped_at: Option<usize>,
    /// The group's entries (name, offset, bits) in the layout of each bring-up.
    layouts: Vec<Vec<(String, u32, u8)>>,
}

impl Application for Joiner {
    fn configure(
        &mut self,
        setup: &mut rtcat_master::Setup<'_>,
    ) -> Result<(), rtcat_master::AppError> {
        self.layouts
            .push(support::tool_group::entries(setup.layout(), G0..N));
        Ok(())
    }

    fn on_recovery(&mut self, r: &rtcat_master::Recovery) {
        self.w.on_recovery(r);
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let at = self.w.log.len();
        if at == PLUG_AT {
            self.faults.apply(FaultCommand::Cable {
                position: G0,
                plugged: true,
            });
        }
        self.w.cycle(cx.status);
        let st = &cx.status.subdevices;
        if st[ANALOG].data_valid {
            let i = cx.image.inputs_of(ANALOG);
            let back = [i[4] ^ 0x5a, i[5] ^ 0x5a, i[6] ^ 0x5a, i[7] ^ 0x5a];
            // Written below: 0x11 0x22 then the cycle's low byte twice; 0 before the first.
            if back == [0; 4] || back[..2] == [0x11, 0x22] && back[2] == back[3] {
                self.flow.echoed += usize::from(back != [0; 4]);
            } else {
                self.flow.wrong += 1;
            }
        }
        if st[G0].data_valid {
            self.flow.counter.insert(cx.image.inputs_of(G0)[0]);
        }
        let o = cx.image.outputs_of_mut(ANALOG);
        let c = at as u8;
        o.copy_from_slice(&[0x11, 0x22, c, c]);
        let joined = self.w.log.len() > PLUG_AT && self.w.back_since(0, 100);
        match self.dropped_at {
            None if joined && self.reinit => {
                // Frames lost: the segment is re-initialised (bad_cycles_before_recovery = 1).
                self.faults.apply(FaultCommand::DropNext(3));
                self.dropped_at = Some(self.w.log.len());
            }
            None if joined => self.stop.request(),
            Some(d) if !self.w.recoveries.is_empty() && self.w.back_since(d, 100) => {
                self.stop.request()
            }
            _ => {}
        }
    }

    fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        self.w.on_subdevice(e);
    }
}

/// The group unplugged from the start, plugged in at `PLUG_AT`: the time from the plug to the
/// whole group's valid data.
fn absent_then_joined(reinit: bool, seg: ecsim::SegmentSpec) -> Result<(u64, Joiner), String> {
    let machine = support::Machine::watch();
    let faults = Faults::new();
    faults.apply(FaultCommand::Cable {
        position: G0,
        plugged: false,
    });
    let mut cfg = config(true);
    cfg.device = Config::parse(&group_devices(), "hotconnect test")
        .expect("devices")
        .device;
    let mut p = Joiner {
        faults: faults.clone(),
        w: Watch::new(100_000),
        stop: Stop::new(),
        flow: Flow::default(),
        reinit,
        dropped_at: None,
        layouts: Vec::new(),
    };
    // The simulated line behind a link that keeps the devices' AL states after each frame: the
    // last ones are those the run's shut-down left.
    let states: Arc<Mutex<Vec<u8>>> = Arc::default();
    let st = states.clone();
    let target = observed(seg, &faults, move |port, _| {
        let now = port
            .segment()
            .devices()
            .iter()
            .map(|d| d.al_state() & 0x0f)
            .collect();
        *st.lock().unwrap_or_else(|e| e.into_inner()) = now;
    });
    let mut run = RunSpec::new(cfg, target, p.stop.clone());
    run.no_rt = true;
    run.duration = Some(CAP);
    let (out, events) = run_with_events(run, &mut p, |_| {})?;
    stopped_after_plug(&p.stop, &p.w, "the group joined")?;
    if !reinit {
        no_frame_lost(&out)?;
    }
    let log = &p.w.log;
    // The layout had the group from the start: six subdevices.
    assert_eq!(out.subdevices, N);
    // Plugged in at their place: theirs to join, not devices the configuration does not place.
    assert!(unexpected(&events).is_empty(), "{events:?}");
    let joined_log = &log[..p.dropped_at.unwrap_or(log.len())];
    if !reinit {
        assert_eq!(out.rec.recoveries, 0, "{events:?}");
    }
    untouched(joined_log, G0);
    for i in G0..N {
        assert!(
            log[..PLUG_AT].iter().all(|s| !s.valid[i]),
            "position {i} valid before it was plugged in"
        );
        let pos = i as u16;
        assert!(
            told(&events, pos, |c| *c == SubdeviceChange::Absent),
            "{events:?}"
        );
        assert!(
            back_with(&events, pos, SubdeviceCause::Joined),
            "position {i} not joined: {events:?}"
        );
    }
    // The run's end took the joined members to INIT too (ethercrab's shut-down has only the
    // others).
    let end = states.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(end, [1; N], "AL states after the run");
    // Its data flows through the region: the analog outputs come back, the input terminal's
    // counter moves.
    p.flow.check("the group");
    let ns = plug_to(log, |s| (G0..N).all(|i| s.valid[i] && s.in_op[i]));
    machine.within("the group's first join", ns, BACK_WITHIN_NS)?;
    Ok((ns, p))
}

/// A group absent at bring-up: the segment comes up without it, its entries in the layout flagged
/// invalid; plugged in, it is configured (SMs and FMMUs computed by rtcat, in rtcat's own region
/// of the process data) and joins while the rest loses no cycle.
#[test]
fn an_optional_group_absent_at_bring_up_joins_when_plugged_in() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ns, _) = within_machine_noise("absent group joins", |_| absent_then_joined(false, line()));
    eprintln!(
        "hot-connect: 3-device group absent at bring-up in OP {:.1} ms after the plug (1 ms \
         cycle, the other 3 devices: 0 invalid cycles)",
        ns as f64 / 1e6
    );
}

/// Both stories on a segment ethercrab brought up (`[bus] bring_up = "ethercrab"`; the others
/// run on rtcat's own, the default): the group's members present at bring-up are in its group
/// and come back on their own after the unplug; absent at bring-up they are in the region and
/// join.
#[test]
fn an_optional_group_comes_and_goes_on_ethercrab_s_bring_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _ethercrab = support::tool_group::EthercrabBringUp::set();
    let back = within_machine_noise("hot-connect group, ethercrab's bring-up", |_| {
        unplugged_and_back(false, line())
    });
    let (joined, _) = within_machine_noise("absent group joins, ethercrab's bring-up", |_| {
        absent_then_joined(false, line())
    });
    eprintln!(
        "hot-connect on ethercrab's bring-up: back {:.1} ms, joined {:.1} ms after the plug",
        back as f64 / 1e6,
        joined as f64 / 1e6
    );
}

/// The control: the same group without `optional = true` is three mandatory devices; unplugged,
/// their recovery gives up and the segment is re-initialised (it waits for the line to be whole
/// again), so the mandatory devices lose cycles too.
#[test]
fn the_same_unplug_without_optional_escalates_to_the_segment() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, p, events) = within_machine_noise("hot-connect control", |_| {
        let r = run(false, false, line())?;
        // Whichever member's recovery gives up first escalates (within the cap on any machine:
        // the worker gives up after two attempts 50 ms apart).
        assert!(
            (G0..N).any(|i| told(&r.2, i as u16, |c| *c == SubdeviceChange::GaveUp)),
            "{:?}",
            r.2
        );
        ensure(r.1.stop.is_requested(), || {
            format!(
                "{} s passed before the line was back: {:?}",
                CAP.as_secs(),
                r.2
            )
        })?;
        Ok(r)
    });
    assert!(
        events
            .iter()
            .any(|k| matches!(k, EventKind::TopologyChanged { found: None, .. })),
        "{events:?}"
    );
    assert!(out.rec.recoveries >= 1, "{events:?}");
    // The mandatory devices went down with the segment: no cycle ran while it waited for the
    // line (the application is not called during a re-initialisation).
    let gap =
        p.w.log
            .windows(2)
            .map(|w| w[1].wake_ns - w[0].wake_ns)
            .max()
            .unwrap_or(0);
    assert!(gap > 500_000_000, "longest gap between cycles {gap} ns");
}

/// The CoE example (`examples/coe`) with its drive (position 2) an optional member absent at
/// bring-up: plugged in, it is configured over its mailbox as its `[[device]]` says (mapping,
/// assignment, the PRE-OP startup SDOs), its SMs and FMMUs computed by rtcat (mailbox SMs, the
/// SII's FMMU category), and joins while the two others lose no cycle.
fn coe_member_joined() -> Result<u64, String> {
    const DRIVE: usize = 2;
    let machine = support::Machine::watch();
    let faults = Faults::new();
    faults.apply(FaultCommand::Cable {
        position: DRIVE,
        plugged: false,
    });
    let example = std::fs::read_to_string(support::line::example("coe/rtcat.toml"))
        .expect("examples/coe/rtcat.toml");
    let devices = &example[example.find("[[device]]").expect("devices")..];
    let text = format!(
        "[cycle]\nperiod_us = 1000\n\
         [health]\nrecovery = \"subdevice\"\nrecovery_backoff_ms = 50\n\
         bad_cycles_before_recovery = 1\n\
         [[group]]\nname = \"drive\"\noptional = true\nmembers = [{{ position = {DRIVE} }}]\n\
         {devices}"
    );
    let mut cfg = Config::parse(&text, "hotconnect coe test").expect("config");
    support::patient(&mut cfg);
    let seg = ecsim::SegmentSpec::load(&support::line::example("coe/segment.toml"))
        .expect("examples/coe/segment.toml");
    let mut p = Plugger::<3> {
        faults: faults.clone(),
        plug: true,
        w: Watch::new(100_000),
        stop: Stop::new(),
        position: DRIVE,
        settle: 100,
        flow: Some(Flow::default()),
    };
    let vendor = seg.devices[DRIVE].vendor_id;
    let mut run = sim_run(cfg, seg, faults, p.stop.clone(), CAP);
    // Another thread asks the drive for its vendor ID (0x1018:01) through the SDO queue all
    // along: refused while it is absent or joining, answered once it has joined.
    let (client, service) = rtcat_master::acyclic::sdo_queue(4, Duration::from_micros(300));
    run.sdo = Some(service);
    let stop = p.stop.clone();
    let asker = std::thread::spawn(move || {
        let mut answers = Vec::new();
        while !stop.is_requested() {
            let r = client.read(DRIVE as u16, 0x1018, 1, Duration::from_millis(500));
            answers.push(r.map(|d| d.as_slice().to_vec()).map_err(|e| e.to_string()));
            std::thread::sleep(Duration::from_millis(5));
        }
        answers
    });
    let (out, events) = run_with_events(run, &mut p, |_| {})?;
    let answers = asker.join().expect("the asking thread");
    stopped_after_plug(&p.stop, &p.w, "the drive joined")?;
    // Refused while absent or joining (not sent, not a timeout), then its vendor ID, and once
    // answered never refused again.
    let first = answers.iter().position(|a| a.is_ok());
    let first = first.ok_or_else(|| format!("no answer from the joined drive: {answers:?}"))?;
    let before = &answers[..first];
    assert!(
        before
            .iter()
            .all(|a| a.as_ref().is_err_and(|e| e.starts_with("refused: "))),
        "{before:?}"
    );
    assert!(
        before
            .iter()
            .any(|a| a.as_ref().is_err_and(|e| e.contains("(absent)"))),
        "{before:?}"
    );
    assert!(
        answers[first..]
            .iter()
            .all(|a| a.as_deref() == Ok(&vendor.to_le_bytes()[..])),
        "{:?}",
        &answers[first..]
    );
    no_frame_lost(&out)?;
    let log = &p.w.log;
    assert_eq!(out.rec.recoveries, 0, "{events:?}");
    untouched(log, DRIVE);
    assert!(log[..PLUG_AT].iter().all(|s| !s.valid[DRIVE]));
    assert!(
        back_with(&events, DRIVE as u16, SubdeviceCause::Joined),
        "the drive did not join: {events:?}"
    );
    // Its data through the region, where its mapping puts it: the simulator's counter in input
    // bytes 0..3 moves, and input bytes 4..11 echo output bytes 0..7 XOR 0x5a (its `pdi` rule).
    p.flow.as_ref().expect("watched").check("the drive");
    let ns = plug_to(log, |s| s.valid[DRIVE] && s.in_op[DRIVE]);
    machine.within("the drive's first join", ns, BACK_WITHIN_NS)?;
    Ok(ns)
}

#[test]
fn a_coe_member_absent_at_bring_up_joins_with_its_configuration() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = within_machine_noise("absent CoE member joins", |_| coe_member_joined());
    eprintln!(
        "hot-connect: CoE drive absent at bring-up in OP {:.1} ms after the plug (1 ms cycle, \
         the other 2 devices: 0 invalid cycles)",
        ns as f64 / 1e6
    );
}

/// A group absent at bring-up that joined, then a whole-segment re-initialisation (frames
/// lost): the group is now in ethercrab's image, its layout entries are those it was given at
/// the first bring-up (names from its `[[device]]` entries, same offsets), and it is in OP with
/// valid data again.
#[test]
fn a_joined_group_keeps_its_layout_through_a_re_initialisation() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_, p) = within_machine_noise("joined group re-initialised", |_| {
        let r = absent_then_joined(true, line())?;
        ensure(!r.1.w.recoveries.is_empty(), || {
            "no re-initialisation".into()
        })?;
        Ok(r)
    });
    assert!(p.layouts.len() >= 2, "bring-ups: {}", p.layouts.len());
    let first = &p.layouts[0];
    assert_eq!(first.len(), 8 + 8 + 18, "{first:?}");
    assert!(first.iter().any(|e| e.0 == "Value"), "{first:?}");
    for (k, l) in p.layouts.iter().enumerate().skip(1) {
        assert_eq!(l, first, "the layout of bring-up {k}");
    }
    let end = p.w.log.last().expect("cycles");
    assert!(end.all_well(), "after the re-initialisation: {end:?}");
}

/// `[health]` with per-subdevice recovery and the CiA 402 drive at `position` the only member
/// of an optional group: its `[[device]]` entry maps what an axis needs (an absent member's
/// mapping is its entry's).
fn optional_drive(position: usize) -> String {
    format!(
        "[health]\nrecovery = \"subdevice\"\nrecovery_backoff_ms = 50\n\
         bad_cycles_before_recovery = 1\n\
         [[group]]\nname = \"drive\"\noptional = true\nmembers = [{{ position = {position} }}]\n\
         [[device]]\nposition = {position}\npdo_assign = {{ sm2 = [0x1600], sm3 = [0x1a00] }}\n\
         [[device.pdo_map]]\nindex = 0x1600\nentries = [\"0x6040:00:16\", \"0x607a:00:32\", \
         \"0x6060:00:8\"]\n\
         [[device.pdo_map]]\nindex = 0x1a00\nentries = [\"0x6041:00:16\", \"0x6064:00:32\", \
         \"0x6061:00:8\"]\n"
    )
}

/// The two DC drives of `examples/cia402` with the second an optional member absent at
/// bring-up: plugged in, it gets its propagation delay measured, its clock's offset and SYNC0 on
/// the segment's grid, and joins; its clock is then in sync with the reference (0x092C) and its
/// SYNC0 runs with the segment's period.
fn dc_member_joined<const K: usize>(
    absent: bool,
    seg: ecsim::SegmentSpec,
    drive: usize,
) -> Result<(u64, ecsim::dc::DcStatus, Delay), String> {
    let machine = support::Machine::watch();
    let faults = Faults::new();
    faults.apply(FaultCommand::Cable {
        position: drive,
        plugged: !absent,
    });
    let text = format!(
        "[cycle]\nperiod_us = 1000\n[dc]\nenabled = true\n{}",
        optional_drive(drive)
    );
    let mut cfg = Config::parse(&text, "hotconnect dc test").expect("config");
    support::patient(&mut cfg);
    // The drive's clock and its propagation delay register (0x0928) as the master left them,
    // and the simulator's own figure: the frame's arrival at the drive after the reference.
    let last: Arc<Mutex<Option<ecsim::dc::DcStatus>>> = Arc::default();
    let delay: Arc<Mutex<Delay>> = Arc::default();
    let (l, d) = (last.clone(), delay.clone());
    // The DC devices the sampler reads: all but the reference (the first; positions < K).
    let dc_after_the_reference: Vec<u16> = (1..K)
        .filter(|&i| seg.devices[i].dc)
        .map(|i| i as u16)
        .collect();
    let target = observed(seg, &faults, move |port, _| {
        let now = port.now_ns();
        *l.lock().unwrap_or_else(|e| e.into_inner()) = port.segment_mut().dc_status(drive, now);
        let devices = port.segment().devices();
        if let (Some(dev), Some(reference)) = (devices.get(drive), devices.first()) {
            let m = &dev.mem()[0x0928..0x092c];
            *d.lock().unwrap_or_else(|e| e.into_inner()) = Delay {
                set: u32::from_le_bytes([m[0], m[1], m[2], m[3]]),
                truth: dev.arrival_ns() - reference.arrival_ns(),
            };
        }
    });
    let mut p = Plugger::<K> {
        faults: faults.clone(),
        plug: absent,
        w: Watch::new(100_000),
        stop: Stop::new(),
        position: drive,
        // 500 cycles in OP: SYNC0 has started and run for a while.
        settle: 500,
        flow: None,
    };
    let mut run = RunSpec::new(cfg, target, p.stop.clone());
    run.no_rt = true;
    run.duration = Some(CAP);
    // The status side's 0x092C sampler, as `rtcat run` has it.
    let (client, service) = rtcat_master::acyclic::sdo_queue(4, Duration::from_micros(300));
    run.sdo = Some(service);
    let live: Arc<rtcat_master::stats::Live> = Arc::default();
    let sampler =
        rtcat_master::dc_sampler::Sampler::spawn(Arc::new(client), live.clone(), 1000, |_| {})
            .expect("the sampler");
    let (out, events) = run_with_live(run, &mut p, live.clone(), |_| {})?;
    sampler.finish();
    stopped_after_plug(&p.stop, &p.w, "the drive joined")?;
    no_frame_lost(&out)?;
    let log = &p.w.log;
    assert_eq!(out.rec.recoveries, 0, "{events:?}");
    untouched(log, drive);
    // Every DC drive is sampled, the one that joined too (last, in position order).
    let sampled = live.dc.subdevices();
    assert_eq!(
        sampled.iter().map(|d| d.position).collect::<Vec<_>>(),
        dc_after_the_reference,
        "{sampled:?}"
    );
    assert!(
        sampled
            .iter()
            .all(|d| d.last_ns.is_some_and(|ns| ns.abs() < 1000)),
        "{sampled:?}"
    );
    let delay = *delay.lock().unwrap_or_else(|e| e.into_inner());
    if !absent {
        // ethercrab's DC initialisation, the drive present from the start.
        let dc = (*last.lock().unwrap_or_else(|e| e.into_inner())).expect("the drive's clock");
        frames_on_time(&dc)?;
        return Ok((0, dc, delay));
    }
    assert!(
        back_with(&events, drive as u16, SubdeviceCause::Joined),
        "the drive did not join: {events:?}"
    );
    let dc = (*last.lock().unwrap_or_else(|e| e.into_inner())).expect("the drive's clock");
    frames_on_time(&dc)?;
    let ns = plug_to(log, |s| s.valid[drive] && s.in_op[drive]);
    machine.within("the DC drive's first join", ns, BACK_WITHIN_NS)?;
    Ok((ns, dc, delay))
}

/// Plugs `position` in at `PLUG_AT`; stops once every subdevice was well for `settle` cycles.
/// With `flow`, writes a pattern to its outputs and watches it come back: the simulator's rule
/// echoes output bytes 0..7 XOR 0x5a in input bytes 4..11, with its counter in bytes 0..3.
struct Plugger<const K: usize> {
    faults: Faults,
    /// Plug it in at `PLUG_AT` (else it is there from the start).
    plug: bool,
    w: Watch<K>,
    stop: Stop,
    position: usize,
    settle: usize,
    flow: Option<Flow>,
}

impl<const K: usize> Application for Plugger<K> {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let at = self.w.log.len();
        if at == PLUG_AT && self.plug {
            self.faults.apply(FaultCommand::Cable {
                position: self.position,
                plugged: true,
            });
        }
        self.w.cycle(cx.status);
        if let Some(flow) = &mut self.flow {
            let p = self.position;
            if cx.status.subdevices[p].data_valid {
                let i = cx.image.inputs_of(p);
                flow.counter.insert(i[0]);
                let back: Vec<u8> = i[4..11].iter().map(|b| b ^ 0x5a).collect();
                // Written below: 0xa1..0xa6 then the cycle's low byte; zeros before the first.
                if back[..6] == [0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6] {
                    flow.echoed += 1;
                } else if back != [0; 7] {
                    flow.wrong += 1;
                }
            }
            let o = cx.image.outputs_of_mut(p);
            o[..6].copy_from_slice(&[0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6]);
            o[6] = at as u8;
        }
        let well = if self.plug {
            self.w.back_since(0, self.settle)
        } else {
            self.w
                .log
                .iter()
                .rev()
                .take(self.settle)
                .all(|s| s.all_well())
        };
        if self.w.log.len() > PLUG_AT && well {
            self.stop.request();
        }
    }

    fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        self.w.on_subdevice(e);
    }
}

/// The propagation delay a joining drive was given (0x0928) and the simulator's own: the
/// frame's arrival at it after the reference (`Esc::arrival_ns`).
#[derive(Debug, Clone, Copy, Default)]
struct Delay {
    set: u32,
    truth: u64,
}

/// The machine's verdict on a DC run: frames that reach the drive after its SYNC0 pulse are the
/// cycle's phase on a loaded machine (the phase lock steers the reference's grid), not the
/// join's — a few, not most; more than 2 % and the run is retried (`ecsim::noise`), as a CI run
/// under the whole test suite once had 12 of 502.
fn frames_on_time(dc: &ecsim::dc::DcStatus) -> Result<(), String> {
    ensure(dc.late * 50 <= dc.on_time, || {
        format!(
            "{} of {} frames after the drive's SYNC0 pulse (the machine's phase)",
            dc.late,
            dc.late + dc.on_time
        )
    })
}

/// The drive's clock after its join: in sync with the reference, SYNC0 with the segment's
/// period, its frames on time.
fn in_sync(dc: &ecsim::dc::DcStatus) {
    let sync0 = dc.sync0.expect("SYNC0 running");
    assert_eq!(sync0.cycle, 1_000_000, "{dc:?}");
    assert!(dc.in_sync, "{dc:?}");
    assert!(dc.diff_ns.abs() < 1000, "0x092C {} ns: {dc:?}", dc.diff_ns);
    // Frames after the SYNC0 pulse are the cycle's phase on a loaded machine (the phase lock
    // steers the reference's grid), not the join's: a few, not most.
    assert!(dc.on_time >= 400 && dc.late * 50 <= dc.on_time, "{dc:?}");
}

fn cia402() -> ecsim::SegmentSpec {
    ecsim::SegmentSpec::load(&support::line::example("cia402/segment.toml"))
        .expect("examples/cia402/segment.toml")
}

#[test]
fn a_dc_drive_absent_at_bring_up_joins_in_sync() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ns, dc, delay) = within_machine_noise("absent DC drive joins", |_| {
        dc_member_joined::<2>(true, cia402(), 1)
    });
    // The propagation delay it was given is the one ethercrab's DC initialisation gives it when
    // it is there from the start (a clock offset computed with a wrong delay would still read
    // 0x092C = 0: the delay is checked on its own), and the simulator's.
    let (_, _, ethercrab) = within_machine_noise("DC drive present", |_| {
        dc_member_joined::<2>(false, cia402(), 1)
    });
    assert!(ethercrab.set > 0, "ethercrab's delay {ethercrab:?}");
    assert!(
        delay.set.abs_diff(ethercrab.set) <= 10,
        "delay {delay:?}, ethercrab's {ethercrab:?}"
    );
    assert!(
        u64::from(delay.set).abs_diff(delay.truth) <= 10,
        "{delay:?}"
    );
    in_sync(&dc);
    eprintln!(
        "hot-connect: DC drive absent at bring-up in OP {:.1} ms after the plug, delay {} ns \
         (ethercrab's {} ns, the simulator's {} ns), 0x092C {} ns, {} frames on time and {} late",
        ns as f64 / 1e6,
        delay.set,
        ethercrab.set,
        delay.truth,
        dc.diff_ns,
        dc.on_time,
        dc.late
    );
}

/// The drives of `examples/cia402` behind a junction: the first one with four ports (the
/// reference clock, 700 ns to the devices on its ports), a mandatory drive on its port 3, and
/// the optional drive on its port 1. The optional drive hangs off the junction, not off the
/// device before it (a line's end), and the frame reaches it only after the port-3 branch.
fn junction_drives() -> ecsim::SegmentSpec {
    let (head, first, second) = support::line::cia402_parts();
    let t = format!(
        "{head}[[device]]{}[[device]]{}[[device]]{}",
        first.replacen("serial = 1\n", "serial = 1\nports = 4\nhop_ns = 700\n", 1),
        first.replacen("serial = 1\n", "serial = 3\nupstream = [0, 3]\n", 1),
        second.replacen("serial = 2\n", "serial = 2\nupstream = [0, 1]\n", 1),
    );
    ecsim::SegmentSpec::from_toml(&t).expect("the junction's drives")
}

/// The drives of `examples/cia402` with a device without DC between them (700 ns from the
/// first drive to it, 300 ns from it to the second).
fn drives_through_a_device_without_dc() -> ecsim::SegmentSpec {
    let text = std::fs::read_to_string(support::line::example("cia402/segment.toml"))
        .expect("examples/cia402/segment.toml");
    let at = text
        .match_indices("[[device]]")
        .nth(1)
        .expect("the second drive")
        .0;
    let t = format!(
        "{}[[device]]\nname = \"PLAIN\"\nproduct_id = 2\noutputs = 2\ninputs = 2\n\
         hop_ns = 300\n\n{}",
        text[..at].replacen("serial = 1\n", "serial = 1\nhop_ns = 700\n", 1),
        &text[at..]
    );
    ecsim::SegmentSpec::from_toml(&t).expect("drives around a device without DC")
}

/// A DC drive absent at bring-up behind a device without DC: its delay is measured from the
/// DC drive before that device, through it (1000 ns: 700 + 300).
#[test]
fn a_dc_drive_behind_a_device_without_dc_joins_with_its_delay_through_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ns, dc, delay) = within_machine_noise("DC drive joins behind a device without DC", |_| {
        dc_member_joined::<3>(true, drives_through_a_device_without_dc(), 2)
    });
    assert_eq!(delay.truth, 1000, "the simulator's wiring");
    assert!(u64::from(delay.set).abs_diff(delay.truth) <= 2, "{delay:?}");
    in_sync(&dc);
    eprintln!(
        "hot-connect: DC drive behind a device without DC absent at bring-up in OP {:.1} ms \
         after the plug, delay {} ns (the simulator's {} ns), 0x092C {} ns",
        ns as f64 / 1e6,
        delay.set,
        delay.truth,
        dc.diff_ns,
    );
}

#[test]
fn a_dc_drive_on_a_junction_s_branch_joins_with_the_branch_before_it_in_its_delay() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ns, dc, delay) = within_machine_noise("DC drive joins on a junction's branch", |_| {
        dc_member_joined::<3>(true, junction_drives(), 2)
    });
    // 700 ns to the drive on port 3 and back, then 700 ns to this one.
    assert_eq!(delay.truth, 2100, "the simulator's wiring");
    assert!(
        u64::from(delay.set).abs_diff(delay.truth) <= 10,
        "{delay:?}"
    );
    in_sync(&dc);
    let (_, _, ethercrab) = within_machine_noise("DC drive present on the branch", |_| {
        dc_member_joined::<3>(false, junction_drives(), 2)
    });
    eprintln!(
        "hot-connect: DC drive on a junction's port 1 absent at bring-up in OP {:.1} ms after \
         the plug, delay {} ns (the simulator's {} ns; ethercrab's when present at bring-up {} \
         ns), 0x092C {} ns, {} frames on time and {} late",
        ns as f64 / 1e6,
        delay.set,
        delay.truth,
        ethercrab.set,
        dc.diff_ns,
        dc.on_time,
        dc.late
    );
}

/// The group on the last port of a junction (port 2 of a 4-port junction: its devices are
/// numbered after every other, so its cable pulled there moves no other device's position):
/// unplugged and plugged back, and absent at bring-up then plugged in, the other three (the
/// junction and a device on each of its ports 3 and 1) lose no cycle.
#[test]
fn an_optional_group_on_a_junction_s_last_port_leaves_joins_and_rejoins() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let back = within_machine_noise("junction group", |_| {
        unplugged_and_back(false, junction_line())
    });
    let (joined, _) = within_machine_noise("junction group joins", |_| {
        absent_then_joined(false, junction_line())
    });
    eprintln!(
        "hot-connect: group on a junction's port 2 back in OP {:.1} ms after the plug, absent at \
         bring-up joined {:.1} ms after it (the junction and the devices on its ports 3 and 1: 0 \
         invalid cycles)",
        back as f64 / 1e6,
        joined as f64 / 1e6
    );
}

/// Watches the line and plugs in the cable at `position` of the simulator's list at `PLUG_AT`
/// (and pulls it again `unplug` cycles later); stops `after` cycles after the plug.
struct PlugAndWatch<const K: usize> {
    faults: Faults,
    position: usize,
    unplug: Option<usize>,
    after: usize,
    w: Watch<K>,
    stop: Stop,
    /// The run's record of the devices the configuration does not place (set after it).
    unexpected: rtcat_master::stats::Unexpected,
    /// Position-addressed reads (APRD) the master sent and the frames that carried them,
    /// counted by the link, and both when the cable was plugged in.
    aprds: Arc<Aprds>,
    aprds_at_plug: (u64, u64),
}

impl<const K: usize> Application for PlugAndWatch<K> {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let at = self.w.log.len();
        if at == PLUG_AT {
            self.aprds_at_plug = self.aprds.now();
        }
        if at == PLUG_AT || self.unplug.is_some_and(|u| at == PLUG_AT + u) {
            self.faults.apply(FaultCommand::Cable {
                position: self.position,
                plugged: at == PLUG_AT,
            });
        }
        self.w.cycle(cx.status);
        if self.w.log.len() >= PLUG_AT + self.after {
            self.stop.request();
        }
    }
    fn on_recovery(&mut self, r: &rtcat_master::Recovery) {
        self.w.on_recovery(r);
    }
    fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        self.w.on_subdevice(e);
    }
}

/// A run of [`PlugAndWatch`] on `seg` with the cable at `position` out from the start: plugged
/// in at `PLUG_AT`, pulled again `unplug` cycles later, stopped `after` cycles after the plug
/// (the devices are counted every second: these leave time for a count). No frame lost to the
/// machine, `subdevices` in the layout, no re-initialisation.
fn plug_and_watch<const K: usize>(
    cfg: Config,
    seg: ecsim::SegmentSpec,
    (position, unplug, after): (usize, Option<usize>, usize),
    subdevices: usize,
) -> Result<(PlugAndWatch<K>, Vec<EventKind>), String> {
    let faults = Faults::new();
    faults.apply(FaultCommand::Cable {
        position,
        plugged: false,
    });
    let mut p = PlugAndWatch::<K> {
        faults: faults.clone(),
        position,
        unplug,
        after,
        w: Watch::new(100_000),
        stop: Stop::new(),
        unexpected: Default::default(),
        aprds: Default::default(),
        aprds_at_plug: (0, 0),
    };
    let target = support::aprds::counting(seg, &faults, &p.aprds);
    let mut run = RunSpec::new(cfg, target, p.stop.clone());
    run.no_rt = true;
    run.duration = Some(CAP);
    let (out, events) = run_with_events(run, &mut p, |_| {})?;
    p.unexpected = out.rec.unexpected;
    no_frame_lost(&out)?;
    assert_eq!(out.subdevices, subdevices);
    assert_eq!(out.rec.recoveries, 0, "{events:?}");
    Ok((p, events))
}

/// The group absent at bring-up, plugged in on a junction's first branch with the junction's
/// other two devices (mandatory) after it: nothing at bring-up can tell where it will appear,
/// and this version expects a member absent at bring-up at the line's end. Plugged in there it
/// takes positions 1..3 and moves the two terminals behind it: the group's probes and the
/// address its join gives by position must not take a mandatory device for a member, nor a
/// recovery a member for a mandatory device. Before `place`: the joins wrote members' station
/// addresses over the two terminals' (found at the positions expected for the members), the
/// terminals' recoveries then gave their addresses by position to the group's first two
/// devices — units of the same identity — and configured them as the terminals (`Back`
/// `PowerCycled`), and the segment was re-initialised and refused as another topology until
/// the end. Now the mandatory devices lose no cycle and the group is not driven.
#[test]
fn a_group_plugged_in_before_mandatory_devices_is_not_mistaken_for_them() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (p, events) = within_machine_noise("group plugged in before mandatory devices", |_| {
        let mut cfg = config(true);
        cfg.device = Config::parse(&group_devices(), "hotconnect test")
            .expect("devices")
            .device;
        plug_and_watch::<N>(cfg, junction_first_branch(), (1, None, 1500), N)
    });
    // The junction and the two terminals (layout positions 0..3): every cycle valid, in OP.
    untouched(&p.w.log, G0);
    // The members' probes find devices there that are not them (each probe reads every
    // device's address to tell, in one frame): backed off towards one a second, at most about
    // 50 frames of position reads in the 1.5 s after the plug (8 probes of the 3 members, 2 of
    // them each; the topology watch's sweeps). A loaded machine probes less, never more: the
    // bound does not depend on its timing.
    let (datagrams, frames) = p.aprds.now();
    let (datagrams, frames) = (datagrams - p.aprds_at_plug.0, frames - p.aprds_at_plug.1);
    eprintln!("position reads in the 1500 cycles after the plug: {datagrams} in {frames} frames");
    assert!(
        frames < 80,
        "{frames} frames of position reads after the plug"
    );
    // The three devices where the configuration has none: an event naming the first.
    assert_eq!(
        unexpected(&events),
        [(3, 1)],
        "the group's devices reported once: {events:?}"
    );
    // The run's record (summary.json, the status, the metrics): still there at the end.
    assert_eq!(
        (
            p.unexpected.now,
            p.unexpected.first,
            p.unexpected.max,
            p.unexpected.changes
        ),
        (3, 1, 3, 1)
    );
    for i in G0..N {
        assert!(
            p.w.log.iter().all(|s| !s.valid[i]),
            "position {i}: a member's data valid"
        );
        assert!(
            !told(&events, i as u16, |c| matches!(
                c,
                SubdeviceChange::Back { .. }
            )),
            "position {i} joined: {events:?}"
        );
    }
}

/// Twelve members absent at bring-up (four copies of the I/O set behind the I/O segment),
/// plugged in together while the line runs: every member joins, all in the region's one frame
/// of rtcat's own (until session 21 the region took two frames a member and refused more than
/// 8), and the three mandatory devices lose no cycle.
#[test]
fn twelve_members_absent_at_bring_up_join_in_the_region_s_one_frame() {
    const ALL: usize = 15;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let p = within_machine_noise("twelve members join", |_| {
        let (seg, cfg) = support::tool_group::long_group(4);
        let (p, _) = plug_and_watch::<ALL>(cfg, seg, (G0, None, 2500), ALL)?;
        // All twelve joined: every device's data valid in the last cycles.
        let well =
            p.w.log
                .iter()
                .rev()
                .take(50)
                .all(|s| s.valid.iter().all(|&v| v));
        ensure(well, || {
            let last = p.w.log.last().map(|s| s.valid);
            format!("not every member joined within 2.5 s of the plug: {last:?}")
        })?;
        Ok(p)
    });
    untouched(&p.w.log, G0);
    let joined =
        p.w.log
            .iter()
            .position(|s| s.valid.iter().all(|&v| v))
            .expect("joined");
    eprintln!(
        "hot-connect: 12 members absent at bring-up all in OP {} cycles after the plug (1 ms \
         cycle, the other 3 devices: 0 invalid cycles)",
        joined.saturating_sub(PLUG_AT)
    );
}

/// The `unexpected_devices` events of a run: (devices, first position).
fn unexpected(events: &[EventKind]) -> Vec<(u16, u16)> {
    events
        .iter()
        .filter_map(|k| match k {
            EventKind::UnexpectedDevices { devices, first } => Some((*devices, *first)),
            _ => None,
        })
        .collect()
}

/// Devices plugged in at the line's end while it runs, with no `[[group]]` placing them: the
/// master counts the devices on the segment (every second) and reports them (they answer no datagram of the
/// cycle, so nothing else shows them before a re-initialisation), never drives them, and
/// reports them gone when their cable is pulled again. The three configured devices lose no
/// cycle.
#[test]
fn devices_plugged_in_where_none_are_configured_are_reported_not_driven() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (p, events) = within_machine_noise("devices plugged in at a free port", |_| {
        let mut cfg = Config::parse(
            "[cycle]\nperiod_us = 1000\n[health]\nrecovery = \"subdevice\"\n",
            "hotconnect test",
        )
        .expect("config");
        support::patient(&mut cfg);
        plug_and_watch::<G0>(cfg, line(), (G0, Some(1500), 2700), G0)
    });
    untouched(&p.w.log, G0);
    assert_eq!(
        unexpected(&events),
        [(3, 3), (0, 0)],
        "reported when plugged in, and when pulled: {events:?}"
    );
    // The run's record: none at the end, three at most, two changes.
    assert_eq!(
        (p.unexpected.now, p.unexpected.max, p.unexpected.changes),
        (0, 3, 2)
    );
}

/// The axes of `examples/cia402` with the drive of axis y an optional member absent at
/// bring-up (a tool changer's axis): axis x runs its profile from the start, y's drive is
/// plugged in at `PLUG_AT`.
struct AxisJoin {
    app: rtcat_master::axes::AxesApp,
    plugger: Plugger<2>,
    /// Axis y's state and actual position (units) each cycle; axis x's actual position.
    y: Vec<(Option<rtcat_master::cia402::State>, f64)>,
    x: Vec<f64>,
}

impl rtcat_master::Layer for AxisJoin {
    fn inner(&mut self) -> &mut dyn Application {
        &mut self.app
    }
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        self.app.cycle(cx);
        self.plugger.cycle(cx);
        let a = &self.app.axes;
        self.y.push((a.state(1), a.axes()[1].actual()));
        self.x.push(a.axes()[0].actual());
    }
    fn on_subdevice(&mut self, e: &SubdeviceEvent) {
        self.plugger.on_subdevice(e);
        self.app.on_subdevice(e);
    }
}

/// A run of [`AxisJoin`] with axis y's `after_recovery` set to `after` (the example's is
/// `re_enable`).
fn axis_join(after: &str) -> (AxisJoin, Vec<EventKind>) {
    const Y: usize = 1;
    within_machine_noise("axis y joins", |_| {
        let faults = Faults::new();
        faults.apply(FaultCommand::Cable {
            position: Y,
            plugged: false,
        });
        let example = std::fs::read_to_string(support::line::example("cia402/rtcat.toml"))
            .expect("examples/cia402/rtcat.toml");
        assert_eq!(example.matches("after_recovery = \"re_enable\"").count(), 1);
        // y's bound from its drive: the example's hold_bad_cycles out
        let held = "hold_bad_cycles = 5 ";
        assert_eq!(example.matches(held).count(), 1);
        let example = example
            .replace(
                "after_recovery = \"re_enable\"",
                &format!("after_recovery = \"{after}\""),
            )
            .replace(held, "# (the drive's) ");
        let text = format!("{example}\n{}", optional_drive(Y));
        let mut cfg = Config::parse(&text, "hotconnect axis test").expect("config");
        support::patient(&mut cfg);
        let mut p = AxisJoin {
            app: rtcat_master::axes::AxesApp::from_config(&cfg, Default::default()),
            plugger: Plugger::<2> {
                faults: faults.clone(),
                plug: true,
                w: Watch::new(100_000),
                stop: Stop::new(),
                position: Y,
                // 1.5 s in OP after the join: y enabled and on its way (25 mm/s).
                settle: 1500,
                flow: None,
            },
            y: Vec::new(),
            x: Vec::new(),
        };
        // Drive y says what it tolerates (0x10F1:02 = 16): read when it joins, not at the
        // axes' setup, where it is absent.
        let seg = support::line::cia402_with_sync_error_limit();
        let run = sim_run(cfg, seg, faults, p.plugger.stop.clone(), CAP);
        let (out, events) = run_with_events(run, &mut p, |_| {})?;
        stopped_after_plug(&p.plugger.stop, &p.plugger.w, "axis y's drive joined")?;
        no_frame_lost(&out)?;
        assert_eq!(out.rec.recoveries, 0, "{events:?}");
        assert!(
            back_with(&events, Y as u16, SubdeviceCause::Joined),
            "the drive did not join: {events:?}"
        );
        untouched(&p.plugger.w.log, Y);
        Ok((p, events))
    })
}

/// Axis x ran its profile on through y's join, never quick-stopped: how far it moved after
/// the plug (mm).
fn x_undisturbed(p: &AxisJoin) -> f64 {
    let x = &p.app.axes.axes()[0];
    assert_eq!(x.stats().quick_stops, 0, "{:?}", x.stats());
    assert_eq!(x.stats().faults, 0, "{:?}", x.stats());
    let x_moved = p.x[PLUG_AT..]
        .iter()
        .fold(0.0f64, |m, v| m.max((v - p.x[PLUG_AT]).abs()));
    assert!(x_moved > 5.0, "axis x moved {x_moved} mm after the plug");
    x_moved
}

/// A drive that joins comes as after a recovery: with `after_recovery = "re_enable"` its axis
/// is enabled and runs; with `"stay_disabled"` it waits for an operator (a tool's axis does not
/// start moving because its cable was plugged in).
#[test]
fn an_axis_on_a_drive_absent_at_bring_up_follows_after_recovery_when_it_joins() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (p, events) = axis_join("re_enable");
    // The bound of y's axis is its drive's, read by the join (absent at the setup: the
    // default until then); x's drive has no 0x10F1, its axis keeps the default.
    use rtcat_master::axes::HoldFrom;
    let (x, y) = (&p.app.axes.axes()[0], &p.app.axes.axes()[1]);
    assert_eq!(y.hold_bad_cycles(), (Some(5), HoldFrom::Drive(16)));
    assert_eq!(y.summary().drive_sync_error_limit, Some(16));
    let default = rtcat_master::cia402::DEFAULT_HOLD_BAD_CYCLES;
    assert_eq!(x.hold_bad_cycles(), (Some(default), HoldFrom::Default));
    assert!(
        events
            .iter()
            .any(|e| e.to_string().contains("subdevice_back position=1 ")
                && e.to_string().contains(" sync_error_limit=16")),
        "{events:?}"
    );
    let enabled =
        p.y.iter()
            .position(|(s, _)| *s == Some(rtcat_master::cia402::State::OperationEnabled))
            .expect("axis y never enabled");
    assert!(enabled > PLUG_AT, "enabled at cycle {enabled}");
    let (_, y_end) = p.y.last().copied().unwrap_or_default();
    assert!(y_end > 5.0, "axis y at {y_end} mm after its join");
    let x_moved = x_undisturbed(&p);
    eprintln!(
        "hot-connect: axis y's drive joined; y in operation enabled {} ms after the plug, at \
         {y_end:.1} mm {} ms after it; axis x moved {x_moved:.1} mm meanwhile, 0 quick stops",
        enabled - PLUG_AT,
        p.y.len() - PLUG_AT
    );
    let (p, _) = axis_join("stay_disabled");
    assert!(
        p.y.iter()
            .all(|(s, _)| *s != Some(rtcat_master::cia402::State::OperationEnabled)),
        "axis y enabled without an operator"
    );
    let (_, y_end) = p.y.last().copied().unwrap_or_default();
    assert!(y_end.abs() < 0.01, "axis y at {y_end} mm");
    x_undisturbed(&p);
}
