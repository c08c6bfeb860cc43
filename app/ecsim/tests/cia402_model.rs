//! The CiA 402 drive model (`profile = "cia402"`) through raw process data frames with a
//! simulated clock: every state machine transition (IEC 61800-7-201 §6.3), CSP and CSV
//! following, quick stop, injected faults with their emergency and 0x603F, a power cycle.

use ecsim::cia402::{State, cw, error_code, mode, sw};
use ecsim::frame::{Cmd, FrameBuilder, datagram_result, phys};
use ecsim::{Disposition, FaultCommand, Faults, Segment, SegmentSpec};

const CYCLE_NS: u64 = 1_000_000;

fn example() -> SegmentSpec {
    SegmentSpec::from_toml(include_str!("../../../examples/cia402/segment.toml")).expect("loads")
}

/// The outputs of one drive (the default CSP mapping, 13 bytes).
#[derive(Debug, Clone, Copy, Default)]
struct Out {
    cw: u16,
    mode: i8,
    pos: i32,
    vel: i32,
    torque: i16,
}

impl Out {
    fn bytes(&self) -> Vec<u8> {
        let mut b = self.cw.to_le_bytes().to_vec();
        b.push(self.mode as u8);
        b.extend_from_slice(&self.pos.to_le_bytes());
        b.extend_from_slice(&self.vel.to_le_bytes());
        b.extend_from_slice(&self.torque.to_le_bytes());
        b
    }
}

/// The inputs of one drive (19 bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
struct In {
    sw: u16,
    mode: i8,
    pos: i32,
    vel: i32,
    torque: i16,
    fe: i32,
    error: u16,
}

impl In {
    fn parse(b: &[u8]) -> In {
        let i32_at = |k: usize| i32::from_le_bytes(b[k..k + 4].try_into().unwrap());
        In {
            sw: u16::from_le_bytes([b[0], b[1]]),
            mode: b[2] as i8,
            pos: i32_at(3),
            vel: i32_at(7),
            torque: i16::from_le_bytes([b[11], b[12]]),
            fe: i32_at(13),
            error: u16::from_le_bytes([b[17], b[18]]),
        }
    }

    fn state(&self) -> State {
        State::from_statusword(self.sw).unwrap_or_else(|| panic!("statusword {:#06x}", self.sw))
    }
}

struct Bus {
    seg: Segment,
    faults: Faults,
    ranges: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
    image: usize,
    now: u64,
    out: Vec<Out>,
    /// The WKC each LRW must return (every drive in OP: 3 each).
    wkc: u16,
}

impl Bus {
    fn new() -> Bus {
        let faults = Faults::new();
        let mut seg = Segment::with_faults(example(), faults.clone());
        let p = seg.preconfigure();
        let n = p.ranges.len();
        Bus {
            seg,
            faults,
            ranges: p.ranges,
            image: p.image_len,
            now: 0,
            out: vec![Out::default(); n],
            wkc: 3 * n as u16,
        }
    }

    /// One cycle: an LRW of the image with the current outputs; returns the inputs read.
    fn cycle(&mut self) -> Vec<In> {
        self.now += CYCLE_NS;
        let mut img = vec![0u8; self.image];
        for (k, (o, _)) in self.ranges.iter().enumerate() {
            img[o.clone()].copy_from_slice(&self.out[k].bytes());
        }
        let mut frame = FrameBuilder::new().datagram(Cmd::Lrw, 0, 0, &img).build();
        assert!(matches!(
            self.seg.process(&mut frame, self.now),
            Disposition::Reply { .. }
        ));
        let (data, wkc) = datagram_result(&frame, 0).expect("reply");
        assert_eq!(wkc, self.wkc, "WKC");
        self.ranges
            .iter()
            .map(|(_, i)| In::parse(&data[i.clone()]))
            .collect()
    }

    fn cycles(&mut self, n: usize) -> Vec<In> {
        let mut last = Vec::new();
        for _ in 0..n {
            last = self.cycle();
        }
        last
    }

    /// Bring drive `k` to `state` by the standard's commands (from switch on disabled).
    fn drive_to(&mut self, k: usize, state: State) {
        let path: &[u16] = match state {
            State::SwitchOnDisabled => &[],
            State::ReadyToSwitchOn => &[cw::SHUTDOWN],
            State::SwitchedOn => &[cw::SHUTDOWN, cw::SWITCH_ON],
            State::OperationEnabled => &[cw::SHUTDOWN, cw::SWITCH_ON, cw::ENABLE_OPERATION],
            State::QuickStopActive => &[
                cw::SHUTDOWN,
                cw::SWITCH_ON,
                cw::ENABLE_OPERATION,
                cw::QUICK_STOP,
            ],
            s => panic!("no command path to {s:?}"),
        };
        for c in path {
            self.out[k].cw = *c;
            self.cycle();
        }
        // One more cycle: the inputs of a single-frame LRW show the state of the last step.
        assert_eq!(self.cycle()[k].state(), state);
    }

    /// An expedited SDO download (ETG.1000.6 §5.6.2.1) through the mailbox of `pos`; panics
    /// on an abort.
    fn sdo_download(&mut self, pos: usize, index: u16, sub: u8, data: &[u8]) {
        assert!((1..=4).contains(&data.len()));
        let mut m = vec![10u8, 0, 0, 0, 0, 0x13, 0x00, 0x20];
        m.push(0x23 | ((4 - data.len() as u8) << 2));
        m.extend_from_slice(&index.to_le_bytes());
        m.push(sub);
        let mut d = [0u8; 4];
        d[..data.len()].copy_from_slice(data);
        m.extend_from_slice(&d);
        m.resize(128, 0);
        let mut frame = FrameBuilder::new()
            .datagram(Cmd::Fpwr, 0, phys(0x1000 + pos as u16, 0x1000), &m)
            .build();
        self.seg.process(&mut frame, self.now);
        assert_eq!(datagram_result(&frame, 0).expect("reply").1, 1, "SM0 write");
        let (service, ..) = self.read_mailbox(pos);
        assert_eq!(service, 3, "an SDO response");
    }

    fn sm1_full(&mut self, pos: usize) -> bool {
        let mut frame = FrameBuilder::new()
            .datagram(Cmd::Fprd, 0, phys(0x1000 + pos as u16, 0x080d), &[0])
            .build();
        self.seg.process(&mut frame, self.now);
        datagram_result(&frame, 0).expect("reply").0[0] & 0x08 != 0
    }

    /// Read the mailbox in SM1 of `pos`: (CoE service, bytes 2..4 of the CoE data (an
    /// emergency's error code; an SDO response's command and index low byte), byte 4).
    fn read_mailbox(&mut self, pos: usize) -> (u8, u16, u8) {
        assert!(self.sm1_full(pos), "no mailbox waiting at {pos}");
        let mut frame = FrameBuilder::new()
            .datagram(Cmd::Fprd, 0, phys(0x1000 + pos as u16, 0x1080), &[0; 128])
            .build();
        self.seg.process(&mut frame, self.now);
        let m = datagram_result(&frame, 0).expect("reply").0;
        assert_eq!(m[5] & 0x0f, 3, "a CoE mailbox {m:02x?}");
        (m[7] >> 4, u16::from_le_bytes([m[8], m[9]]), m[10])
    }
}

#[test]
fn power_on_goes_through_not_ready_to_switch_on_disabled() {
    let mut b = Bus::new();
    // A single-frame LRW reads what the previous cycle's step published: nothing in the first
    // cycle, then the first step, the self test (not ready to switch on); transition 1 follows
    // on its own.
    let first = b.cycle();
    assert!(first.iter().all(|i| i.sw == 0));
    let second = b.cycle();
    assert!(
        second
            .iter()
            .all(|i| i.state() == State::NotReadyToSwitchOn)
    );
    for i in &b.cycle() {
        assert_eq!(i.state(), State::SwitchOnDisabled);
        assert_ne!(i.sw & sw::REMOTE, 0, "remote");
    }
}

/// Every transition of the drive state machine from the standard's table, as (from, command
/// controlword, expected state): the table-driven core of the model's test.
#[test]
fn every_state_machine_transition() {
    use State::*;
    let table: &[(State, u16, State, &str)] = &[
        (SwitchOnDisabled, cw::SHUTDOWN, ReadyToSwitchOn, "2"),
        (
            SwitchOnDisabled,
            cw::SWITCH_ON,
            SwitchOnDisabled,
            "no transition",
        ),
        (
            SwitchOnDisabled,
            cw::ENABLE_OPERATION,
            SwitchOnDisabled,
            "no transition",
        ),
        (
            SwitchOnDisabled,
            cw::QUICK_STOP,
            SwitchOnDisabled,
            "no transition",
        ),
        (ReadyToSwitchOn, cw::SWITCH_ON, SwitchedOn, "3"),
        (
            ReadyToSwitchOn,
            cw::ENABLE_OPERATION,
            OperationEnabled,
            "3 + 4",
        ),
        (ReadyToSwitchOn, cw::DISABLE_VOLTAGE, SwitchOnDisabled, "7"),
        (ReadyToSwitchOn, cw::QUICK_STOP, SwitchOnDisabled, "7"),
        (ReadyToSwitchOn, cw::SHUTDOWN, ReadyToSwitchOn, "stays"),
        (SwitchedOn, cw::ENABLE_OPERATION, OperationEnabled, "4"),
        (SwitchedOn, cw::SHUTDOWN, ReadyToSwitchOn, "6"),
        (SwitchedOn, cw::DISABLE_VOLTAGE, SwitchOnDisabled, "10"),
        (SwitchedOn, cw::QUICK_STOP, SwitchOnDisabled, "10"),
        (OperationEnabled, cw::DISABLE_OPERATION, SwitchedOn, "5"),
        (OperationEnabled, cw::SHUTDOWN, ReadyToSwitchOn, "8"),
        (OperationEnabled, cw::DISABLE_VOLTAGE, SwitchOnDisabled, "9"),
        (OperationEnabled, cw::QUICK_STOP, QuickStopActive, "11"),
        (
            OperationEnabled,
            cw::ENABLE_OPERATION,
            OperationEnabled,
            "stays",
        ),
        (QuickStopActive, cw::DISABLE_VOLTAGE, SwitchOnDisabled, "12"),
        (
            QuickStopActive,
            cw::ENABLE_OPERATION,
            OperationEnabled,
            "16 (option code 6)",
        ),
        (
            QuickStopActive,
            cw::QUICK_STOP,
            QuickStopActive,
            "stays (option code 6)",
        ),
        (
            QuickStopActive,
            cw::SHUTDOWN,
            QuickStopActive,
            "no transition",
        ),
    ];
    for (from, command, to, why) in table {
        let mut b = Bus::new();
        b.cycles(2);
        // Quick stop option code 6: stay in quick stop active at standstill, so that the
        // command decides (with the default 2 a standing drive leaves it at once: see
        // `quick_stop_decelerates_to_standstill_then_switch_on_disabled`).
        b.sdo_download(0, 0x605a, 0, &6i16.to_le_bytes());
        b.drive_to(0, *from);
        b.out[0].cw = *command;
        b.cycle();
        let got = b.cycle()[0].state();
        assert_eq!(got, *to, "{from:?} + {command:#06x} ({why})");
        // The other drive was never commanded.
        assert_eq!(b.cycle()[1].state(), SwitchOnDisabled);
    }
}

/// Bring drive `k` to operation enabled in `m` with the target at the actual position.
fn enabled(b: &mut Bus, k: usize, m: i8) -> In {
    b.cycles(2);
    b.out[k].mode = m;
    b.drive_to(k, State::OperationEnabled);
    let i = b.cycle()[k];
    assert_eq!(i.mode, m, "mode display");
    assert_ne!(i.sw & sw::FOLLOWS_COMMAND, 0, "follows the command value");
    i
}

#[test]
fn csp_follows_a_ramp_with_a_bounded_following_error_and_converges() {
    let mut b = Bus::new();
    let start = enabled(&mut b, 0, mode::CSP);
    assert_eq!((start.pos, start.fe), (0, 0));
    // 100 counts per 1 ms cycle = 100 000 counts/s; the model's 2 ms lag gives ~200 counts.
    let mut max_fe = 0;
    let mut last = start;
    for n in 1..=500 {
        b.out[0].pos = 100 * n;
        last = b.cycle()[0];
        max_fe = max_fe.max(last.fe.abs());
        assert_eq!(last.state(), State::OperationEnabled, "cycle {n}");
        assert_eq!(last.sw & sw::FOLLOWING_ERROR, 0, "within the window");
    }
    assert!(max_fe <= 260, "following error {max_fe} > 260 counts");
    assert!(
        (150..=260).contains(&last.fe),
        "steady-state lag {} (v * tau = 200)",
        last.fe
    );
    assert!(
        (98_000..=102_000).contains(&last.vel),
        "velocity actual {}",
        last.vel
    );
    // Standing target: the position converges (e^-10 of the lag after 20 ms).
    for _ in 0..25 {
        last = b.cycle()[0];
    }
    assert!((last.pos - 50_000).abs() <= 1, "position {}", last.pos);
    assert!(last.fe.abs() <= 1 && last.vel.abs() < 1000, "{last:?}");
    assert_ne!(last.sw & sw::TARGET_REACHED, 0, "target reached");
    assert_eq!(b.cycle()[1].pos, 0, "the other axis stood still");
}

#[test]
fn a_target_changed_while_disabled_is_not_followed_until_enabled() {
    let mut b = Bus::new();
    b.cycles(2);
    b.out[0].mode = mode::CSP;
    b.drive_to(0, State::SwitchedOn);
    b.out[0].pos = 5000;
    let i = b.cycles(20)[0];
    assert_eq!((i.pos, i.vel, i.fe), (0, 0, 0), "switched on: no motion");
    b.out[0].cw = cw::ENABLE_OPERATION;
    let i = b.cycles(30)[0];
    assert_eq!(i.state(), State::OperationEnabled);
    assert!((i.pos - 5000).abs() <= 1, "follows once enabled: {}", i.pos);
}

#[test]
fn a_following_error_beyond_the_window_faults_with_0x8611() {
    let mut b = Bus::new();
    enabled(&mut b, 0, mode::CSP);
    // A jump of 10^6 counts: far beyond the 10 000 count window for longer than 10 ms.
    b.out[0].pos = 1_000_000;
    let mut seen = Vec::new();
    for _ in 0..20 {
        let s = b.cycle()[0].state();
        if seen.last() != Some(&s) {
            seen.push(s);
        }
    }
    assert_eq!(
        seen,
        [
            State::OperationEnabled,
            State::FaultReactionActive,
            State::Fault
        ]
    );
    let i = b.cycle()[0];
    assert_eq!(i.error, error_code::FOLLOWING_ERROR);
    assert_eq!(i.vel, 0, "the power stage is off");
    assert_eq!(b.read_mailbox(0), (1, 0x8611, 0x21), "the emergency");
}

#[test]
fn csv_follows_the_target_velocity() {
    let mut b = Bus::new();
    enabled(&mut b, 0, mode::CSV);
    b.out[0].vel = 50_000;
    let i = b.cycles(30)[0];
    assert!((i.vel - 50_000).abs() <= 50, "velocity {}", i.vel);
    let p0 = i.pos;
    let i = b.cycles(100)[0];
    // 100 ms at 50 000 counts/s.
    assert!((i.pos - p0 - 5000).abs() <= 60, "moved {}", i.pos - p0);
    assert_eq!(i.fe, 0, "no following error outside CSP");
    b.out[0].vel = -20_000;
    let i = b.cycles(30)[0];
    assert!((i.vel + 20_000).abs() <= 50, "velocity {}", i.vel);
}

#[test]
fn cst_follows_the_target_torque() {
    let mut b = Bus::new();
    enabled(&mut b, 0, mode::CST);
    b.out[0].torque = 100;
    let i = b.cycles(30)[0];
    assert_eq!(i.torque, 100);
    assert!(i.vel > 0, "the torque accelerates the motor: {}", i.vel);
    let i = b.cycles(1000)[0];
    // Steady state: a * tau_mech = 100 * 1000 * 0.1 = 10 000 counts/s.
    assert!((i.vel - 10_000).abs() <= 100, "velocity {}", i.vel);
}

/// Run drive `k` at 100 000 counts/s in CSV, then quick stop: returns (cycles until switch on
/// disabled, counts travelled during the stop).
fn quick_stop(b: &mut Bus, k: usize) -> (u32, i32) {
    enabled(b, k, mode::CSV);
    b.out[k].vel = 100_000;
    let i = b.cycles(30)[k];
    assert!((i.vel - 100_000).abs() <= 100);
    b.out[k].cw = cw::QUICK_STOP;
    let i = b.cycles(2)[k];
    assert_eq!(i.state(), State::QuickStopActive);
    assert_eq!(
        i.sw & sw::QUICK_STOP,
        0,
        "statusword bit 5 low: quick stop active"
    );
    let (p0, mut v) = (i.pos, i.vel);
    for n in 1..1000 {
        let i = b.cycle()[k];
        if i.state() == State::SwitchOnDisabled {
            assert_eq!(i.vel, 0, "standstill");
            return (n, i.pos - p0);
        }
        assert_eq!(i.state(), State::QuickStopActive);
        assert!(i.vel < v, "decelerating: {} after {v}", i.vel);
        v = i.vel;
    }
    panic!("no standstill in 1000 cycles");
}

#[test]
fn quick_stop_decelerates_to_standstill_then_switch_on_disabled() {
    // Axis 1: 0x6085 = 10^6 counts/s², 100 ms from 100 000 counts/s, v²/2a = 5000 counts.
    let mut b = Bus::new();
    let (n, d) = quick_stop(&mut b, 0);
    assert!((95..=102).contains(&n), "{n} cycles");
    assert!((d - 5000).abs() <= 150, "{d} counts");
    // Axis 2 has 0x6085 = 500 000 in the example: twice the time and the distance.
    let mut b = Bus::new();
    let (n, d) = quick_stop(&mut b, 1);
    assert!((195..=202).contains(&n), "{n} cycles");
    assert!((d - 10_000).abs() <= 200, "{d} counts");
}

#[test]
fn quick_stop_with_option_code_6_stays_in_quick_stop_active() {
    let mut b = Bus::new();
    b.sdo_download(0, 0x605a, 0, &6i16.to_le_bytes());
    enabled(&mut b, 0, mode::CSV);
    b.out[0].vel = 100_000;
    b.cycles(30);
    b.out[0].cw = cw::QUICK_STOP;
    let i = b.cycles(150)[0];
    assert_eq!((i.state(), i.vel), (State::QuickStopActive, 0));
    assert_ne!(
        i.sw & sw::TARGET_REACHED,
        0,
        "standstill shown as target reached"
    );
}

#[test]
fn an_injected_fault_raises_the_emergency_and_0x603f_until_a_fault_reset() {
    for (word, code, register) in [
        ("following-error", 0x8611u16, 0x21u8),
        ("over-current", 0x2310, 0x03),
        ("0x7500", 0x7500, 0x21),
    ] {
        let mut b = Bus::new();
        enabled(&mut b, 1, mode::CSP);
        let cmd = FaultCommand::parse_for(&format!("drive-fault 1 {word}"), 2).expect("parses");
        assert_eq!(cmd, FaultCommand::DriveFault { position: 1, code });
        b.faults.apply(cmd);
        b.cycle();
        assert_eq!(b.cycle()[1].state(), State::FaultReactionActive, "{word}");
        let i = b.cycle()[1];
        assert_eq!((i.state(), i.error), (State::Fault, code), "{word}");
        assert_ne!(i.sw & sw::FAULT, 0);
        assert_eq!(b.read_mailbox(1), (1, code, register), "emergency {word}");
        assert!(!b.sm1_full(0), "the other drive sent nothing");
        // Commands other than a fault reset do nothing in fault.
        b.out[1].cw = cw::ENABLE_OPERATION;
        assert_eq!(b.cycles(3)[1].state(), State::Fault);
        // Transition 15 on the rising edge of bit 7; the error code is cleared.
        b.out[1].cw = cw::FAULT_RESET;
        let i = b.cycles(2)[1];
        assert_eq!((i.state(), i.error), (State::SwitchOnDisabled, 0), "{word}");
        // The drive can be enabled again.
        b.out[1].cw = cw::SHUTDOWN;
        b.cycle();
        b.out[1].cw = cw::ENABLE_OPERATION;
        assert_eq!(b.cycles(2)[1].state(), State::OperationEnabled);
    }
}

#[test]
fn a_fault_reset_needs_a_rising_edge() {
    let mut b = Bus::new();
    b.cycles(2);
    // Bit 7 already set when the fault comes: no edge, no reset.
    b.out[0].cw = cw::FAULT_RESET;
    b.cycle();
    b.faults.apply(FaultCommand::DriveFault {
        position: 0,
        code: 0x2310,
    });
    let i = b.cycles(5)[0];
    assert_eq!((i.state(), i.error), (State::Fault, 0x2310));
    b.out[0].cw = 0;
    b.cycle();
    b.out[0].cw = cw::FAULT_RESET;
    assert_eq!(b.cycles(2)[0].state(), State::SwitchOnDisabled);
}

#[test]
fn a_power_cycle_resets_the_drive() {
    let mut b = Bus::new();
    b.sdo_download(0, 0x605a, 0, &6i16.to_le_bytes());
    enabled(&mut b, 0, mode::CSV);
    b.out[0].vel = 100_000;
    assert!(b.cycles(50)[0].pos > 1000);
    b.faults.apply(FaultCommand::PowerCycle);
    // The devices are back in INIT: the master configures them again.
    let mut frame = FrameBuilder::new()
        .datagram(Cmd::Brd, 0, phys(0, 0x0130), &[0, 0])
        .build();
    b.seg.process(&mut frame, b.now);
    let (st, wkc) = datagram_result(&frame, 0).expect("reply");
    assert_eq!((st[0] & 0x0f, wkc), (1, 2), "INIT");
    b.seg.preconfigure();
    b.out[0] = Out::default();
    let i = b.cycles(2)[0];
    assert_eq!((i.state(), i.pos, i.vel), (State::NotReadyToSwitchOn, 0, 0));
    assert_eq!(b.cycle()[0].state(), State::SwitchOnDisabled);
    // The dictionary is back to its defaults: option code 2, a quick stop ends at standstill.
    let d = &b.seg.devices()[0];
    let od = &d.coe().expect("CoE").od;
    assert_eq!(od.value(0x605a, 0), Some(&2i16.to_le_bytes()[..]));
}

#[test]
fn leaving_op_disables_the_drive() {
    let mut b = Bus::new();
    enabled(&mut b, 0, mode::CSP);
    // SAFE-OP: the outputs are no longer valid; the drive still publishes its statusword.
    let mut frame = FrameBuilder::new()
        .datagram(Cmd::Fpwr, 0, phys(0x1000, 0x0120), &[4, 0])
        .build();
    b.seg.process(&mut frame, b.now);
    b.wkc = 1 + 3;
    let i = b.cycles(3)[0];
    assert_eq!(i.state(), State::SwitchOnDisabled);
}

#[test]
fn drive_fault_commands_are_checked() {
    for (line, why) in [
        ("drive-fault 2 following-error", "outside the segment"),
        ("drive-fault 0 0", "other than 0"),
        ("drive-fault 0 0x10000", "16-bit"),
        (
            "drive-fault 0 bogus",
            "drive error \"bogus\": expected following-error, over-current",
        ),
        ("drive-fault 0", "missing drive error code"),
        ("drive-fault 0 over-current 1", "expected 3 word(s)"),
        ("drive-fault x over-current", "position"),
    ] {
        let e = FaultCommand::parse_for(line, 2).expect_err(line);
        assert!(e.to_string().contains(why), "{line}: {e}");
    }
}

#[test]
fn a_profile_is_checked_and_its_objects_can_be_replaced() {
    let e = SegmentSpec::from_toml("[[device]]\nname = \"D\"\nprofile = \"cia401\"\n")
        .expect_err("unknown profile");
    assert!(
        e.to_string().contains(
            "device[0].profile = \"cia401\": the simulator knows the profile \"cia402\" only"
        ),
        "{e}"
    );
    // The example's axis 2 replaces 0x6085; everything else is the profile's.
    let s = example();
    let od = |k: usize| ecsim::od::Od::build(&s.devices[k], s.devices[k].coe.as_ref().unwrap());
    assert_eq!(
        od(0).value(0x6085, 0),
        Some(&1_000_000u32.to_le_bytes()[..])
    );
    assert_eq!(od(1).value(0x6085, 0), Some(&500_000u32.to_le_bytes()[..]));
    assert_eq!(od(0).objects().count(), od(1).objects().count());
    // A description's own PDOs replace the profile's of that direction.
    let s = SegmentSpec::from_toml(
        "[[device]]\nname = \"D\"\nprofile = \"cia402\"\n[[device.rxpdo]]\nindex = 0x1600\n\
         name = \"Short\"\nentries = [{ index = 0x6040, type = \"UNSIGNED16\", name = \"Controlword\" }]\n",
    )
    .expect("loads");
    assert_eq!((s.devices[0].outputs, s.devices[0].inputs), (2, 19));
}
