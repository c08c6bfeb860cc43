//! Every transition of the state machine, against a model drive that applies the standard's
//! transitions to the controlword and codes its statusword with the simulator's state bits (an
//! independent encoder: the decode here must agree with it).

use super::*;
use ecsim::cia402 as sim;

fn to_sim(s: State) -> sim::State {
    match s {
        State::NotReadyToSwitchOn => sim::State::NotReadyToSwitchOn,
        State::SwitchOnDisabled => sim::State::SwitchOnDisabled,
        State::ReadyToSwitchOn => sim::State::ReadyToSwitchOn,
        State::SwitchedOn => sim::State::SwitchedOn,
        State::OperationEnabled => sim::State::OperationEnabled,
        State::QuickStopActive => sim::State::QuickStopActive,
        State::FaultReactionActive => sim::State::FaultReactionActive,
        State::Fault => sim::State::Fault,
    }
}

/// A drive per IEC 61800-7-201 §6.3 (quick stop option code 2: quick stop active ends in switch
/// on disabled once stopped, after `qs_cycles`).
struct Model {
    state: State,
    last_cw: u16,
    pos: i32,
    target: i32,
    mode: i8,
    qs_left: u32,
    qs_cycles: u32,
    error: u16,
    /// Position jumps seen when enabling (target != actual in the first enabled cycle).
    max_jump: i32,
}

impl Model {
    fn new(pos: i32) -> Model {
        Model {
            state: State::SwitchOnDisabled,
            last_cw: 0,
            pos,
            target: pos,
            mode: 0,
            qs_left: 0,
            qs_cycles: 3,
            error: 0,
            max_jump: 0,
        }
    }

    fn input(&self) -> DriveIn {
        let mut s = to_sim(self.state).bits();
        if self.state == State::OperationEnabled {
            s |= sw::FOLLOWS_COMMAND;
        }
        DriveIn {
            statusword: s,
            mode_display: self.mode,
            position: self.pos,
            error_code: self.error,
        }
    }

    fn fault(&mut self, code: u16) {
        self.state = State::FaultReactionActive;
        self.error = code;
    }

    fn apply(&mut self, o: &DriveOut) {
        use sim::Command as C;
        let c = sim::command(o.controlword);
        let rising_reset =
            o.controlword & cw::FAULT_RESET != 0 && self.last_cw & cw::FAULT_RESET == 0;
        self.last_cw = o.controlword;
        self.mode = o.mode;
        let was = self.state;
        self.state = match (self.state, c) {
            (State::FaultReactionActive, _) => State::Fault, // 14
            (State::Fault, _) if rising_reset => State::SwitchOnDisabled, // 15
            (State::Fault, _) => State::Fault,
            (State::SwitchOnDisabled, C::Shutdown) => State::ReadyToSwitchOn, // 2
            (State::ReadyToSwitchOn, C::SwitchOn) => State::SwitchedOn,       // 3
            (State::ReadyToSwitchOn, C::DisableVoltage | C::QuickStop) => State::SwitchOnDisabled, // 7
            (State::SwitchedOn, C::EnableOperation) => State::OperationEnabled, // 4
            (State::SwitchedOn, C::Shutdown) => State::ReadyToSwitchOn,         // 6
            (State::SwitchedOn, C::DisableVoltage | C::QuickStop) => State::SwitchOnDisabled, // 10
            (State::OperationEnabled, C::SwitchOn) => State::SwitchedOn,        // 5
            (State::OperationEnabled, C::Shutdown) => State::ReadyToSwitchOn,   // 8
            (State::OperationEnabled, C::DisableVoltage) => State::SwitchOnDisabled, // 9
            (State::OperationEnabled, C::QuickStop) => {
                self.qs_left = self.qs_cycles;
                State::QuickStopActive // 11
            }
            (State::QuickStopActive, C::DisableVoltage) => State::SwitchOnDisabled, // 12
            (State::QuickStopActive, _) if self.qs_left == 0 => State::SwitchOnDisabled, // 12
            (State::QuickStopActive, _) => {
                self.qs_left -= 1;
                State::QuickStopActive
            }
            (s, _) => s,
        };
        if self.state == State::OperationEnabled {
            if was != State::OperationEnabled {
                self.max_jump = self.max_jump.max((o.target_position - self.pos).abs());
            }
            self.target = o.target_position;
            self.pos = self.target; // a perfect follower
        }
    }
}

/// The quick stop at the first bad cycle (`hold_bad_cycles = 0`).
const IMMEDIATE: Policy = Policy {
    on_bad_cycles: OnBadCycles::QuickStopAfter(0),
    after_recovery: AfterRecovery::StayDisabled,
};

fn run(d: &mut Drive, m: &mut Model, n: usize, set: Setpoint) -> StepOut {
    let mut last = StepOut::default();
    for _ in 0..n {
        last = d.step(true, &m.input(), set);
        m.apply(&last.out);
    }
    last
}

fn sp(position: i32) -> Setpoint {
    Setpoint {
        position,
        ..Setpoint::default()
    }
}

#[test]
fn decode_agrees_with_the_state_coding_of_every_state() {
    for s in State::ALL {
        let bits = to_sim(s).bits();
        assert_eq!(State::from_statusword(bits), Some(s), "{s}");
        // The "x" bits (voltage enabled, warning, manufacturer and mode bits) change nothing.
        for extra in [
            sw::VOLTAGE_ENABLED,
            sw::WARNING,
            sw::REMOTE,
            sw::TARGET_REACHED,
            0xc000,
        ] {
            let masked = if matches!(
                s,
                State::QuickStopActive
                    | State::ReadyToSwitchOn
                    | State::SwitchedOn
                    | State::OperationEnabled
            ) {
                extra
            } else {
                extra | sw::QUICK_STOP
            };
            assert_eq!(
                State::from_statusword(bits | masked),
                Some(s),
                "{s} with {masked:#x}"
            );
        }
    }
    // Undefined combinations decode to nothing: e.g. operation enabled without switched on.
    assert_eq!(State::from_statusword(0x0025), None);
}

#[test]
fn modes_round_trip() {
    for m in [Mode::Csp, Mode::Csv, Mode::Cst] {
        assert_eq!(Mode::from_code(m.code()), Some(m));
    }
    assert_eq!(Mode::from_code(1), None);
}

#[test]
fn enables_through_2_3_4_without_a_position_jump() {
    let mut d = Drive::new(Mode::Csp, Policy::default());
    let mut m = Model::new(12345);
    // Not asked: stays in switch on disabled and the target follows the actual position.
    let r = run(&mut d, &mut m, 5, sp(999_999));
    assert_eq!(m.state, State::SwitchOnDisabled);
    assert_eq!(r.out.target_position, 12345);
    d.enable();
    let mut seen = Vec::new();
    let mut enabled_now = 0;
    for _ in 0..10 {
        let r = d.step(true, &m.input(), sp(999_999));
        enabled_now += r.enabled_now as u32;
        m.apply(&r.out);
        seen.push(m.state);
    }
    seen.dedup();
    assert_eq!(
        seen,
        [
            State::ReadyToSwitchOn,
            State::SwitchedOn,
            State::OperationEnabled
        ]
    );
    assert_eq!(
        m.max_jump, 0,
        "the first enabled target is the actual position"
    );
    assert_eq!(enabled_now, 1);
    // Enabled: the setpoint is followed.
    assert_eq!(m.pos, 999_999);
}

#[test]
fn waits_for_the_mode_display_before_enabling() {
    let mut d = Drive::new(Mode::Csp, Policy::default());
    d.enable();
    let mut m = Model::new(0);
    for _ in 0..10 {
        let mut i = m.input();
        i.mode_display = 0; // the drive has not taken the mode
        let r = d.step(true, &i, sp(0));
        m.apply(&r.out);
    }
    assert_eq!(m.state, State::SwitchedOn);
    run(&mut d, &mut m, 3, sp(0));
    assert_eq!(m.state, State::OperationEnabled);
}

#[test]
fn disable_goes_to_ready_to_switch_on_and_back_up() {
    let mut d = Drive::new(Mode::Csp, Policy::default());
    d.enable();
    let mut m = Model::new(0);
    run(&mut d, &mut m, 5, sp(0));
    assert_eq!(m.state, State::OperationEnabled);
    d.disable();
    run(&mut d, &mut m, 1, sp(0));
    assert_eq!(m.state, State::ReadyToSwitchOn); // 8
    d.enable();
    run(&mut d, &mut m, 4, sp(0));
    assert_eq!(m.state, State::OperationEnabled);
}

#[test]
fn not_ready_to_switch_on_waits_and_1_is_the_drives() {
    let mut d = Drive::new(Mode::Csp, Policy::default());
    d.enable();
    let mut m = Model::new(7);
    m.state = State::NotReadyToSwitchOn;
    let r = run(&mut d, &mut m, 3, sp(0));
    assert_eq!(r.out.controlword, cw::DISABLE_VOLTAGE);
    assert_eq!(r.out.target_position, 7);
    m.state = State::SwitchOnDisabled; // transition 1, by the drive itself
    run(&mut d, &mut m, 4, sp(7));
    assert_eq!(m.state, State::OperationEnabled);
}

#[test]
fn fault_13_14_then_reset_15_only_when_asked_with_the_error_text() {
    let mut d = Drive::new(Mode::Csp, Policy::default());
    d.enable();
    let mut m = Model::new(0);
    run(&mut d, &mut m, 5, sp(0));
    m.fault(0x8611);
    let r = d.step(true, &m.input(), sp(0));
    assert!(r.fault_now);
    m.apply(&r.out);
    run(&mut d, &mut m, 50, sp(0));
    assert_eq!(m.state, State::Fault, "no reset without asking");
    assert_eq!(d.last_error(), 0x8611);
    assert_eq!(error_text(d.last_error()), "following error");
    assert_eq!(d.faults(), 1);
    assert!(!d.enable_requested(), "a fault drops the enable request");
    d.reset_fault();
    run(&mut d, &mut m, 2, sp(0));
    assert_eq!(m.state, State::SwitchOnDisabled);
    // Not enabled again by itself.
    run(&mut d, &mut m, 10, sp(0));
    assert_eq!(m.state, State::SwitchOnDisabled);
    d.enable();
    run(&mut d, &mut m, 4, sp(0));
    assert_eq!(m.state, State::OperationEnabled);
}

#[test]
fn fault_reset_pulses_again_when_the_drive_does_not_take_the_first_edge() {
    let mut d = Drive::new(Mode::Csp, Policy::default());
    let i = DriveIn {
        statusword: to_sim(State::Fault).bits(),
        error_code: 0x2310,
        ..DriveIn::default()
    };
    d.reset_fault();
    let cws: Vec<u16> = (0..4 * RESET_PULSE_CYCLES)
        .map(|_| d.step(true, &i, sp(0)).out.controlword)
        .collect();
    let edges = cws
        .windows(2)
        .filter(|w| w[0] & 0x80 == 0 && w[1] & 0x80 != 0)
        .count();
    assert_eq!(cws[0], cw::FAULT_RESET);
    assert_eq!(edges, 1, "{cws:?}");
    assert_eq!(error_text(d.last_error()), "continuous over-current");
}

#[test]
fn quick_stop_11_on_bad_cycles_then_12_and_per_policy() {
    for after in [AfterRecovery::ReEnable, AfterRecovery::StayDisabled] {
        let pol = Policy {
            on_bad_cycles: OnBadCycles::QuickStopAfter(0),
            after_recovery: after,
        };
        let mut d = Drive::new(Mode::Csp, pol);
        d.enable();
        let mut m = Model::new(0);
        run(&mut d, &mut m, 5, sp(100));
        assert_eq!(m.state, State::OperationEnabled);
        // Lost frames: the outputs of a bad cycle may still arrive (or the drive's watchdog
        // acts); here they arrive.
        for _ in 0..2 {
            let r = d.step(false, &DriveIn::default(), sp(100));
            assert_eq!(r.out.controlword, cw::QUICK_STOP);
            assert_eq!(r.out.target_position, 100, "the last target, not garbage");
            m.apply(&r.out);
        }
        assert_eq!(m.state, State::QuickStopActive);
        run(&mut d, &mut m, 10, sp(100));
        match after {
            AfterRecovery::ReEnable => assert_eq!(m.state, State::OperationEnabled),
            AfterRecovery::StayDisabled => {
                assert_eq!(m.state, State::SwitchOnDisabled);
                assert!(!d.enable_requested());
            }
        }
        assert_eq!(m.max_jump, 0);
    }
}

#[test]
fn quick_stop_7_and_10_from_the_lower_states() {
    for (start, steps) in [(State::ReadyToSwitchOn, 1), (State::SwitchedOn, 2)] {
        let mut d = Drive::new(Mode::Csp, IMMEDIATE);
        d.enable();
        let mut m = Model::new(0);
        run(&mut d, &mut m, steps, sp(0));
        assert_eq!(m.state, start);
        let r = d.step(false, &DriveIn::default(), sp(0));
        m.apply(&r.out);
        assert_eq!(m.state, State::SwitchOnDisabled, "from {start}");
    }
}

#[test]
fn hold_keeps_the_last_outputs_on_bad_cycles() {
    let pol = Policy {
        on_bad_cycles: OnBadCycles::Hold,
        after_recovery: AfterRecovery::StayDisabled,
    };
    let mut d = Drive::new(Mode::Csp, pol);
    d.enable();
    let mut m = Model::new(0);
    let last = run(&mut d, &mut m, 6, sp(50));
    for _ in 0..5 {
        let r = d.step(false, &DriveIn::default(), sp(70));
        assert_eq!(r.out, last.out);
        m.apply(&r.out);
    }
    assert_eq!(m.state, State::OperationEnabled);
    let r = run(&mut d, &mut m, 1, sp(70));
    assert!(!r.enabled_now);
    assert_eq!(m.pos, 70);
}

#[test]
fn disable_voltage_9_and_12_out_of_quick_stop_when_not_wanted() {
    let mut d = Drive::new(Mode::Csp, IMMEDIATE);
    d.enable();
    let mut m = Model::new(0);
    run(&mut d, &mut m, 5, sp(0));
    m.qs_cycles = 1000; // a quick stop that stays active (option codes 5..8)
    let r = d.step(false, &DriveIn::default(), sp(0));
    m.apply(&r.out);
    assert_eq!(m.state, State::QuickStopActive);
    // Good again, stay disabled: disable voltage ends it (12).
    run(&mut d, &mut m, 1, sp(0));
    assert_eq!(m.state, State::SwitchOnDisabled);
    // 9: disable voltage straight from operation enabled, applied to the model.
    let mut m = Model::new(0);
    m.state = State::OperationEnabled;
    m.apply(&DriveOut {
        controlword: cw::DISABLE_VOLTAGE,
        ..DriveOut::default()
    });
    assert_eq!(m.state, State::SwitchOnDisabled);
}

#[test]
fn a_power_cycle_re_enables_only_per_policy() {
    for after in [AfterRecovery::ReEnable, AfterRecovery::StayDisabled] {
        let pol = Policy {
            on_bad_cycles: OnBadCycles::QuickStopAfter(0),
            after_recovery: after,
        };
        let mut d = Drive::new(Mode::Csp, pol);
        d.enable();
        let mut m = Model::new(0);
        run(&mut d, &mut m, 5, sp(40));
        d.on_recovery();
        let mut m = Model::new(-3); // powered up again somewhere else
        run(&mut d, &mut m, 10, sp(40));
        match after {
            AfterRecovery::ReEnable => assert_eq!(m.state, State::OperationEnabled),
            AfterRecovery::StayDisabled => assert_eq!(m.state, State::SwitchOnDisabled),
        }
        assert_eq!(m.max_jump, 0);
    }
}

#[test]
fn csv_and_cst_write_only_their_own_setpoint() {
    for mode in [Mode::Csv, Mode::Cst] {
        let mut d = Drive::new(mode, Policy::default());
        d.enable();
        let mut m = Model::new(5);
        let set = Setpoint {
            position: 1000,
            velocity: 200,
            torque: 30,
        };
        let r = run(&mut d, &mut m, 6, set);
        assert_eq!(r.out.mode, mode.code());
        assert_eq!(r.out.target_position, 5);
        assert_eq!(
            r.out.target_velocity,
            if mode == Mode::Csv { 200 } else { 0 }
        );
        assert_eq!(r.out.target_torque, if mode == Mode::Cst { 30 } else { 0 });
    }
}

#[test]
fn n_bad_cycles_are_held_and_the_next_one_quick_stops() {
    for n in [0u32, 1, 3, 10] {
        let pol = Policy {
            on_bad_cycles: OnBadCycles::QuickStopAfter(n),
            after_recovery: AfterRecovery::ReEnable,
        };
        let mut d = Drive::new(Mode::Csp, pol);
        d.enable();
        let mut m = Model::new(0);
        let last = run(&mut d, &mut m, 6, sp(50));
        assert_eq!(m.state, State::OperationEnabled);
        // A run of n bad cycles, twice, with one good cycle between: each run is held (the
        // count starts again after a good cycle), nothing reaches a quick stop.
        for round in 0..2 {
            for k in 1..=n {
                let r = d.step(false, &DriveIn::default(), sp(90));
                assert!(
                    r.held && !r.quick_stop_now,
                    "n {n} round {round} bad cycle {k}"
                );
                assert_eq!(r.out, last.out, "the last outputs, not the new set-point");
                assert_eq!(d.bad_run(), k);
                m.apply(&r.out);
            }
            assert_eq!(m.state, State::OperationEnabled, "n {n}");
            let r = run(&mut d, &mut m, 1, sp(50));
            assert!(!r.enabled_now, "no re-enable after a held run");
            assert_eq!(d.bad_run(), 0);
        }
        // n + 1 in a row: the quick stop, commanded once and kept while the cycles stay bad.
        for _ in 0..n {
            assert!(d.step(false, &DriveIn::default(), sp(50)).held);
        }
        let r = d.step(false, &DriveIn::default(), sp(50));
        assert!(!r.held && r.quick_stop_now, "n {n}");
        assert_eq!(r.out.controlword, cw::QUICK_STOP);
        assert_eq!(r.out.target_position, 50);
        m.apply(&r.out);
        let r = d.step(false, &DriveIn::default(), sp(50));
        assert!(!r.held && !r.quick_stop_now);
        assert_eq!(r.out.controlword, cw::QUICK_STOP);
        assert_eq!(d.bad_run(), n + 2);
        m.apply(&r.out);
        assert_eq!(m.state, State::QuickStopActive);
        // Good again: re-enabled (policy) from where it stands, without a jump.
        let at = m.pos;
        run(&mut d, &mut m, 12, sp(at));
        assert_eq!(m.state, State::OperationEnabled);
        assert_eq!(m.max_jump, 0);
    }
}

#[test]
fn hold_never_quick_stops() {
    let pol = Policy {
        on_bad_cycles: OnBadCycles::Hold,
        after_recovery: AfterRecovery::StayDisabled,
    };
    let mut d = Drive::new(Mode::Csp, pol);
    d.enable();
    let mut m = Model::new(0);
    run(&mut d, &mut m, 6, sp(5));
    for _ in 0..10_000 {
        let r = d.step(false, &DriveIn::default(), sp(5));
        assert!(r.held && !r.quick_stop_now);
    }
    assert_eq!(d.bad_run(), 10_000);
}

#[test]
fn the_default_hold_and_the_sync_error_limit() {
    assert_eq!(
        Policy::default().on_bad_cycles,
        OnBadCycles::QuickStopAfter(DEFAULT_HOLD_BAD_CYCLES)
    );
    // +3 per miss, valid while below the limit: 4 tolerates 1, 12 tolerates 3 (the 4th miss
    // makes 12), 13 tolerates 4; 0 switches the drive's check off.
    for (limit, n) in [
        (1, Some(0)),
        (3, Some(0)),
        (4, Some(1)),
        (12, Some(3)),
        (13, Some(4)),
    ] {
        assert_eq!(hold_from_sync_error_limit(limit), n, "limit {limit}");
    }
    assert_eq!(hold_from_sync_error_limit(0), None);
    assert_eq!(
        hold_from_sync_error_limit(u32::MAX),
        Some((u32::MAX - 1) / 3)
    );
}
