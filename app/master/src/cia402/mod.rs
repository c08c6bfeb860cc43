//! The CiA 402 drive profile (IEC 61800-7-201 §6.3, the drive state machine; IEC 61800-7-301 and
//! ETG.6010 for its use over EtherCAT): the state decoded from the statusword 0x6041, the
//! controlword 0x6040 commands that walk a drive to operation enabled and back, the modes of
//! operation 0x6060/0x6061, fault reset with the error code 0x603F as text, and a policy for bad
//! cycles and recovery.
//!
//! [`Drive::step`] runs once per cycle in the cyclic thread: it is pure (its inputs are the
//! values read from the process image, its result the values to write) and allocates nothing.
//!
//! Rules it keeps:
//! - **No jump when enabling.** Until the drive reports operation enabled (and in the first
//!   cycle it does), the target written is the position actual 0x6064, and the target velocity
//!   is 0; [`StepOut::enabled_now`] tells the motion source to restart from that position.
//! - **Mode before power.** The drive is switched on, but enable operation is only sent once the
//!   modes of operation display 0x6061 shows the configured mode (ETG.6010 §5: the master checks
//!   0x6061 before commanding motion).
//! - **Faults need an operator.** A fault drops the enable request; [`Drive::reset_fault`] sends
//!   a rising edge of controlword bit 7 (transition 15), [`Drive::enable`] enables again.

mod errors;

pub use errors::error_text;

/// Statusword bits (IEC 61800-7-201, the statusword table).
pub mod sw {
    /// Statusword bit: ready to switch on.
    pub const READY_TO_SWITCH_ON: u16 = 1 << 0;
    /// Statusword bit: switched on.
    pub const SWITCHED_ON: u16 = 1 << 1;
    /// Statusword bit: operation enabled.
    pub const OPERATION_ENABLED: u16 = 1 << 2;
    /// Statusword bit: fault.
    pub const FAULT: u16 = 1 << 3;
    /// Statusword bit: voltage enabled.
    pub const VOLTAGE_ENABLED: u16 = 1 << 4;
    /// Active low: 0 = a quick stop is in progress.
    pub const QUICK_STOP: u16 = 1 << 5;
    /// Statusword bit: switch on disabled.
    pub const SWITCH_ON_DISABLED: u16 = 1 << 6;
    /// Statusword bit: warning.
    pub const WARNING: u16 = 1 << 7;
    /// Statusword bit: remote.
    pub const REMOTE: u16 = 1 << 9;
    /// Statusword bit: target reached.
    pub const TARGET_REACHED: u16 = 1 << 10;
    /// Statusword bit: internal limit.
    pub const INTERNAL_LIMIT: u16 = 1 << 11;
    /// CSP/CSV/CST: the drive follows the target (bit 12, operation mode specific).
    pub const FOLLOWS_COMMAND: u16 = 1 << 12;
    /// CSP: following error (bit 13, operation mode specific).
    pub const FOLLOWING_ERROR: u16 = 1 << 13;
}

/// Controlword values of the device control commands (IEC 61800-7-201 §6.3.2, the table of
/// device control commands: bit 0 switch on, 1 enable voltage, 2 quick stop (active low),
/// 3 enable operation, 7 fault reset).
pub mod cw {
    /// Command "shutdown".
    pub const SHUTDOWN: u16 = 0x0006;
    /// Command "switch on".
    pub const SWITCH_ON: u16 = 0x0007;
    /// Command "enable operation".
    pub const ENABLE_OPERATION: u16 = 0x000f;
    /// Command "disable voltage".
    pub const DISABLE_VOLTAGE: u16 = 0x0000;
    /// Command "quick stop".
    pub const QUICK_STOP: u16 = 0x0002;
    /// Command "disable operation".
    pub const DISABLE_OPERATION: u16 = 0x0007;
    /// Command "fault reset".
    pub const FAULT_RESET: u16 = 0x0080;
}

/// The states of the drive state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// The state "not ready to switch on".
    NotReadyToSwitchOn,
    /// The state "switch on disabled".
    SwitchOnDisabled,
    /// The state "ready to switch on".
    ReadyToSwitchOn,
    /// The state "switched on".
    SwitchedOn,
    /// The state "operation enabled".
    OperationEnabled,
    /// The state "quick stop active".
    QuickStopActive,
    /// The state "fault reaction active".
    FaultReactionActive,
    /// The state "fault".
    Fault,
}

impl State {
    /// Every state, in the order of the enum.
    pub const ALL: [State; 8] = [
        State::NotReadyToSwitchOn,
        State::SwitchOnDisabled,
        State::ReadyToSwitchOn,
        State::SwitchedOn,
        State::OperationEnabled,
        State::QuickStopActive,
        State::FaultReactionActive,
        State::Fault,
    ];

    /// The state a statusword codes: the mask/value pairs of the standard's state coding table
    /// (bits 0, 1, 2, 3, 5, 6; "x" bits masked out). Every statusword codes at most one state;
    /// `None` for the combinations the table leaves undefined.
    pub const fn from_statusword(s: u16) -> Option<State> {
        const TABLE: [(u16, u16, State); 8] = [
            (0x4f, 0x00, State::NotReadyToSwitchOn),
            (0x4f, 0x40, State::SwitchOnDisabled),
            (0x6f, 0x21, State::ReadyToSwitchOn),
            (0x6f, 0x23, State::SwitchedOn),
            (0x6f, 0x27, State::OperationEnabled),
            (0x6f, 0x07, State::QuickStopActive),
            (0x4f, 0x0f, State::FaultReactionActive),
            (0x4f, 0x08, State::Fault),
        ];
        let mut i = 0;
        while i < TABLE.len() {
            let (m, v, st) = TABLE[i];
            if s & m == v {
                return Some(st);
            }
            i += 1;
        }
        None
    }

    /// The state's name as the standard writes it.
    pub const fn name(self) -> &'static str {
        match self {
            State::NotReadyToSwitchOn => "not ready to switch on",
            State::SwitchOnDisabled => "switch on disabled",
            State::ReadyToSwitchOn => "ready to switch on",
            State::SwitchedOn => "switched on",
            State::OperationEnabled => "operation enabled",
            State::QuickStopActive => "quick stop active",
            State::FaultReactionActive => "fault reaction active",
            State::Fault => "fault",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Modes of operation (0x6060 / 0x6061 values, IEC 61800-7-201 §6.2; the cyclic synchronous
/// modes ETG.6010 requires for EtherCAT drives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Cyclic synchronous position.
    Csp,
    /// Cyclic synchronous velocity.
    Csv,
    /// Cyclic synchronous torque.
    Cst,
}

impl Mode {
    /// The 0x6060 value.
    pub const fn code(self) -> i8 {
        match self {
            Mode::Csp => 8,
            Mode::Csv => 9,
            Mode::Cst => 10,
        }
    }

    /// The mode a 0x6061 value names, if it is one of these.
    pub const fn from_code(c: i8) -> Option<Mode> {
        match c {
            8 => Some(Mode::Csp),
            9 => Some(Mode::Csv),
            10 => Some(Mode::Cst),
            _ => None,
        }
    }
}

/// What to do in a cycle whose inputs are not valid (lost frame, wrong working counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnBadCycles {
    /// Keep the last outputs (the drive holds the last target) through up to this many bad
    /// cycles in a row, then command a quick stop (the drive decelerates with 0x6085 and, per
    /// 0x605A, disables). 0: quick stop at the first bad cycle.
    QuickStopAfter(u32),
    /// Keep the last outputs through any number of bad cycles: the drive's own checks (its
    /// sync error counter, the SM watchdog) are all that stops it.
    Hold,
}

impl Default for OnBadCycles {
    fn default() -> Self {
        OnBadCycles::QuickStopAfter(DEFAULT_HOLD_BAD_CYCLES)
    }
}

/// Bad cycles in a row held before a quick stop when neither the configuration nor the drive
/// (0x10F1:02) says: 3, what a drive whose sync error counter limit is 10..12 tolerates from a
/// clean counter (see [`hold_from_sync_error_limit`]); a longer hold leaves the drive unwatched
/// longer than most drives' own check does.
pub const DEFAULT_HOLD_BAD_CYCLES: u32 = 3;

/// The "Sync error counter limit" (ETG.1020, object 0x10F1:02, "Error Settings").
pub const SYNC_ERROR_LIMIT: (u16, u8) = (0x10f1, 2);

/// The bad cycles in a row a drive tolerates given its sync error counter limit (0x10F1:02):
/// the counter grows by 3 for every missed SM event and shrinks by 1 for every good one, and
/// the drive's synchronisation stays valid while the counter is below the limit; 0 switches the
/// check off (the EtherCAT Slave Stack Code, `ecatappl.c`: `Sync0_Isr` and the DC check). From
/// an empty counter `k` misses in a row are tolerated while `3k < limit`. `None`: the check is
/// off, the drive names no bound.
pub const fn hold_from_sync_error_limit(limit: u32) -> Option<u32> {
    if limit == 0 {
        None
    } else {
        Some((limit - 1) / 3)
    }
}

/// Whether a drive is enabled again after a quick stop on bad cycles or after a recovery of the
/// segment or of the drive alone (a drive that was power-cycled comes back in switch on
/// disabled). A drive of an optional group absent at bring-up that joins comes as after a
/// recovery: with `StayDisabled` its axis waits for an enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AfterRecovery {
    /// Enable again by itself once the cycles are good.
    ReEnable,
    /// Stay disabled until [`Drive::enable`] is called.
    #[default]
    StayDisabled,
}

/// The policy of a drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Policy {
    /// What a bad cycle does.
    pub on_bad_cycles: OnBadCycles,
    /// Whether the drive is enabled again after a quick stop or a recovery.
    pub after_recovery: AfterRecovery,
}

/// The drive's inputs of one cycle, read from the process image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DriveIn {
    /// 0x6041.
    pub statusword: u16,
    /// 0x6061.
    pub mode_display: i8,
    /// 0x6064, counts.
    pub position: i32,
    /// 0x603F, 0 when the device does not map it.
    pub error_code: u16,
}

/// The drive's outputs of one cycle, to write into the process image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DriveOut {
    /// 0x6040.
    pub controlword: u16,
    /// 0x6060.
    pub mode: i8,
    /// 0x607A, counts.
    pub target_position: i32,
    /// 0x60FF, counts/s.
    pub target_velocity: i32,
    /// 0x6071, per mille of rated torque.
    pub target_torque: i16,
}

/// The result of one [`Drive::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepOut {
    /// The outputs to write this cycle.
    pub out: DriveOut,
    /// The drive reached operation enabled in this cycle: the motion source restarts from
    /// `DriveIn::position` (the target written this cycle).
    pub enabled_now: bool,
    /// A fault was first seen in this cycle (the error code is [`Drive::last_error`]).
    pub fault_now: bool,
    /// A bad cycle whose outputs are the last ones, held (no quick stop).
    pub held: bool,
    /// The quick stop on bad cycles was commanded in this cycle (the first of a latch).
    pub quick_stop_now: bool,
}

/// The setpoint the application asks for, used only in operation enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Setpoint {
    /// Target position (CSP), counts.
    pub position: i32,
    /// Target velocity (CSV), counts/s.
    pub velocity: i32,
    /// Target torque (CST), per mille of rated torque.
    pub torque: i16,
}

/// Cycles controlword bit 7 is held high (then as long low) while a fault reset is pending: the
/// drive acts on the rising edge (transition 15), and a drive still busy with its reaction gets
/// another edge.
pub const RESET_PULSE_CYCLES: u32 = 8;

/// One drive's profile state (no allocation; one per axis).
#[derive(Debug, Clone)]
pub struct Drive {
    mode: Mode,
    policy: Policy,
    want_enabled: bool,
    reset_pending: bool,
    reset_phase: u32,
    /// A quick stop on bad cycles is latched until the cycles are good again.
    bad_latched: bool,
    state: Option<State>,
    last: DriveOut,
    last_error: u16,
    faults: u32,
    was_enabled: bool,
    /// Bad cycles in a row up to now (0 after a good one).
    bad_run: u32,
}

impl Drive {
    /// A drive in the given mode, disabled until [`Drive::enable`].
    pub fn new(mode: Mode, policy: Policy) -> Drive {
        Drive {
            mode,
            policy,
            want_enabled: false,
            reset_pending: false,
            reset_phase: 0,
            bad_latched: false,
            state: None,
            last: DriveOut {
                mode: mode.code(),
                ..DriveOut::default()
            },
            last_error: 0,
            faults: 0,
            was_enabled: false,
            bad_run: 0,
        }
    }

    /// Ask for operation enabled (walked to over the next cycles).
    pub fn enable(&mut self) {
        self.want_enabled = true;
    }

    /// Ask for the power stage off (shutdown: ready to switch on).
    pub fn disable(&mut self) {
        self.want_enabled = false;
    }

    /// Ask for a fault reset (acted on while the drive is in fault).
    pub fn reset_fault(&mut self) {
        self.reset_pending = true;
        self.reset_phase = 0;
    }

    /// Whether operation enabled is asked for.
    pub fn enable_requested(&self) -> bool {
        self.want_enabled
    }

    /// The state decoded from the last valid statusword (`None` before the first one).
    pub fn state(&self) -> Option<State> {
        self.state
    }

    /// The error code (0x603F) of the last fault, 0 if none was seen.
    pub fn last_error(&self) -> u16 {
        self.last_error
    }

    /// Faults seen (entries into fault reaction active or fault).
    pub fn faults(&self) -> u32 {
        self.faults
    }

    /// The configured mode of operation.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The policy for bad cycles and recovery.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Change what bad cycles do (at bring-up, when the drive's own limit is known; not while
    /// bad cycles are being held).
    pub fn set_on_bad_cycles(&mut self, on: OnBadCycles) {
        self.policy.on_bad_cycles = on;
    }

    /// Bad cycles in a row up to the last step (0 after a good one).
    pub fn bad_run(&self) -> u32 {
        self.bad_run
    }

    /// The segment was re-initialised (the drive may have lost power): forget its state; per
    /// [`AfterRecovery`] the enable request is kept or dropped.
    pub fn on_recovery(&mut self) {
        self.state = None;
        self.bad_latched = false;
        self.bad_run = 0;
        self.last = DriveOut {
            mode: self.mode.code(),
            ..DriveOut::default()
        };
        if self.policy.after_recovery == AfterRecovery::StayDisabled {
            self.want_enabled = false;
        }
    }

    /// One cycle. `good`: the inputs are valid (the cycle's working counter was right); `input`
    /// is ignored otherwise. `set`: what the application wants while operation is enabled.
    pub fn step(&mut self, good: bool, input: &DriveIn, set: Setpoint) -> StepOut {
        if !good {
            return self.bad_cycle();
        }
        self.bad_run = 0;
        if self.bad_latched {
            self.bad_latched = false;
            if self.policy.after_recovery == AfterRecovery::StayDisabled {
                self.want_enabled = false;
            }
        }
        let prev = self.state;
        let state = State::from_statusword(input.statusword);
        self.state = state;
        let mut r = StepOut::default();
        let faulted = matches!(state, Some(State::Fault | State::FaultReactionActive));
        if faulted && !matches!(prev, Some(State::Fault | State::FaultReactionActive)) {
            r.fault_now = true;
            self.faults = self.faults.saturating_add(1);
            // A fault drops the enable request: enabling again is the operator's decision.
            self.want_enabled = false;
        }
        if faulted && input.error_code != 0 {
            self.last_error = input.error_code;
        }
        // Off operation enabled the target is the actual position (no jump when enabling).
        let hold = DriveOut {
            controlword: cw::DISABLE_VOLTAGE,
            mode: self.mode.code(),
            target_position: input.position,
            target_velocity: 0,
            target_torque: 0,
        };
        let out = match state {
            None | Some(State::NotReadyToSwitchOn) => hold,
            Some(State::FaultReactionActive) => hold,
            Some(State::Fault) => {
                let mut o = hold;
                if self.reset_pending {
                    if self.reset_phase < RESET_PULSE_CYCLES {
                        o.controlword = cw::FAULT_RESET;
                    }
                    self.reset_phase = (self.reset_phase + 1) % (2 * RESET_PULSE_CYCLES);
                }
                o
            }
            Some(s) => {
                if self.reset_pending {
                    // Out of fault: the reset is done.
                    self.reset_pending = false;
                }
                self.drive(s, input, set, hold, &mut r)
            }
        };
        self.was_enabled = state == Some(State::OperationEnabled);
        self.last = out;
        r.out = out;
        r
    }

    fn drive(
        &mut self,
        s: State,
        input: &DriveIn,
        set: Setpoint,
        hold: DriveOut,
        r: &mut StepOut,
    ) -> DriveOut {
        let cmd = |c: u16| DriveOut {
            controlword: c,
            ..hold
        };
        if !self.want_enabled {
            return match s {
                // Transitions 5 + 6 in one: shutdown from operation enabled (transition 8).
                State::OperationEnabled | State::SwitchedOn | State::ReadyToSwitchOn => {
                    cmd(cw::SHUTDOWN)
                }
                // Transition 12 (disable voltage) ends a quick stop that stays active.
                _ => cmd(cw::DISABLE_VOLTAGE),
            };
        }
        match s {
            State::SwitchOnDisabled => cmd(cw::SHUTDOWN), // transition 2
            State::ReadyToSwitchOn => cmd(cw::SWITCH_ON), // transition 3
            State::SwitchedOn => {
                if input.mode_display == self.mode.code() {
                    cmd(cw::ENABLE_OPERATION) // transition 4
                } else {
                    cmd(cw::SWITCH_ON)
                }
            }
            State::OperationEnabled => {
                if !self.was_enabled {
                    // First enabled cycle: still the actual position; the motion source starts
                    // from it.
                    r.enabled_now = true;
                    cmd(cw::ENABLE_OPERATION)
                } else {
                    DriveOut {
                        controlword: cw::ENABLE_OPERATION,
                        mode: self.mode.code(),
                        target_position: if self.mode == Mode::Csp {
                            set.position
                        } else {
                            input.position
                        },
                        target_velocity: if self.mode == Mode::Csv {
                            set.velocity
                        } else {
                            0
                        },
                        target_torque: if self.mode == Mode::Cst {
                            set.torque
                        } else {
                            0
                        },
                    }
                }
            }
            // Transition 12 rather than the optional 16: a quick stop ends in switch on
            // disabled, then the normal way up.
            State::QuickStopActive => cmd(cw::DISABLE_VOLTAGE),
            State::NotReadyToSwitchOn | State::FaultReactionActive | State::Fault => hold,
        }
    }

    /// A bad cycle: the last outputs are held through the policy's number of bad cycles in a
    /// row, the next one commands the quick stop. Holding rather than extrapolating the target
    /// with the commanded velocity: a drive that missed the frames either held its target or
    /// extrapolated it itself (drive-specific), and only a held target guarantees that the
    /// first target after the gap is one cycle's step of the trajectory from the last one the
    /// drive got; the motion source pauses meanwhile (see `axes`), so the profile is delayed
    /// by the gap, never shortened into a jump.
    fn bad_cycle(&mut self) -> StepOut {
        self.bad_run = self.bad_run.saturating_add(1);
        let mut r = StepOut::default();
        let out = match self.policy.on_bad_cycles {
            OnBadCycles::Hold => {
                r.held = true;
                self.last
            }
            OnBadCycles::QuickStopAfter(n) if self.bad_run <= n && !self.bad_latched => {
                r.held = true;
                self.last
            }
            OnBadCycles::QuickStopAfter(_) => {
                // Whatever the drive's state now (the last statusword may be a cycle old), a drive
                // that was commanded beyond disable voltage (bit 1) gets a quick stop (transitions
                // 7, 10, 11); in switch on disabled the command is no transition.
                if self.last.controlword & 0x0002 != 0 || self.bad_latched {
                    r.quick_stop_now = !self.bad_latched;
                    self.bad_latched = true;
                    DriveOut {
                        controlword: cw::QUICK_STOP,
                        ..self.last
                    }
                } else {
                    self.last
                }
            }
        };
        self.last = out;
        if self.bad_latched {
            // After the quick stop the drive is enabled from scratch (target = actual again).
            self.was_enabled = false;
        }
        r.out = out;
        r
    }
}

#[cfg(test)]
mod tests;
