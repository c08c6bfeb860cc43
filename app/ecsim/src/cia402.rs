//! A CiA 402 servo drive (IEC 61800-7-201 profile, IEC 61800-7-301 mapping to EtherCAT; ETG.6010
//! implementation directive): a device with `profile = "cia402"` in the segment description.
//!
//! **Dictionary and PDOs.** The profile gives the device the objects of [`PROFILE_TOML`] and the
//! cyclic synchronous position (CSP) mapping of ETG.6010 as default: RxPDO 0x1600 = controlword
//! 0x6040, modes of operation 0x6060, target position 0x607A, target velocity 0x60FF, target
//! torque 0x6071; TxPDO 0x1A00 = statusword 0x6041, modes of operation display 0x6061, position
//! actual 0x6064, velocity actual 0x606C, torque actual 0x6077, following error actual 0x60F4,
//! error code 0x603F. Both PDOs are remappable in PRE-OP (up to 16 entries) and a second empty
//! PDO of each direction can be assigned, as on SERVO-COE. A description may still list its own
//! `rxpdo` / `txpdo` (they replace the profile's) and objects (an index the profile has is
//! replaced).
//!
//! **State machine** (IEC 61800-7-201 §6.3, the "drive state machine" figure; numbers are the
//! standard's transitions): not ready to switch on --1--> switch on disabled --2 shutdown-->
//! ready to switch on --3 switch on--> switched on --4 enable operation--> operation enabled;
//! back 5 (disable operation), 6 and 8 (shutdown), 7, 9, 10 (disable voltage; quick stop from
//! ready to switch on / switched on), 11 (quick stop from operation enabled) to quick stop active,
//! 12 (quick stop done or disable voltage) to switch on disabled, 16 (enable operation in quick
//! stop active, option codes 5..8); any fault: 13 to fault reaction active, 14 (reaction done) to
//! fault, 15 (rising edge of controlword bit 7) to switch on disabled. A command that is not a
//! transition of the current state is ignored, as the standard says.
//!
//! **Motion** (one step per device application cycle, on the output SM event; `dt` is the
//! simulation time since the previous step, bounded to [`MAX_STEP_S`]). Position is in counts,
//! velocity in counts/s, torque in per mille of the rated torque.
//! - CSP (mode 8): the position follows 0x607A through a first-order lag of time constant
//!   [`TAU_S`] (`p += (target - p) * (1 - e^(-dt/tau))`), its speed limited to 0x607F (max
//!   profile velocity, the motor's top speed here); velocity actual is its derivative;
//!   following error 0x60F4 = target - actual. A ramp of v counts/s lags v * tau in steady state.
//! - CSV (mode 9): the velocity follows 0x60FF (limited to 0x607F) through the same lag; the
//!   position integrates it.
//! - CST (mode 10): the torque follows 0x6071 through the lag; the motor is an inertia with viscous
//!   friction: `a = torque * ACCEL_PER_PERMILLE - v / TAU_MECH_S`.
//! - A following error beyond 0x6065 (CSP) for longer than 0x6066 ms: fault 0x8611.
//! - Quick stop: the velocity ramps to 0 with 0x6085 (counts/s²), then, per 0x605A, switch on
//!   disabled (codes 1..4; 0 stops at once) or stay in quick stop active (5..8). The slow down
//!   ramp 0x6084 and the current / voltage limits of codes 1, 3, 4, 7, 8 are not modelled: every
//!   ramp uses 0x6085.
//! - Fault reaction: the power stage is switched off (the motor stops at once), one step later the
//!   state is fault. Below operation enabled the motor stands still and a target that changes
//!   is not followed; enabling follows whatever target is then commanded (a master must set the
//!   target to the actual position first, or the jump trips the following error).
//!
//! Faults: [`Drive::inject`] (`drive-fault` on the control socket) -> fault reaction -> fault with
//! 0x603F set and an emergency message with the same error code (error codes of CiA 402 /
//! IEC 61800-7-201 Annex: 0x8611 following error, 0x2310 continuous over-current).

use crate::od::{Od, read_bits};
use crate::pdo::{DataType, Direction};

/// The objects and PDOs the profile gives a device (merged into its description by
/// [`crate::spec`]). Kept as TOML so that it goes through the same checks as a description.
pub const PROFILE_TOML: &str = r#"
coe = true
device_type = 0x00020192        # CiA 402, servo drive (0x1000: profile 402, bit 17 servo)
[[rxpdo]]
index = 0x1600
name = "RxPDO CSP"
assignable = true
mappable = true
max_entries = 16
entries = [
  { index = 0x6040, sub = 0, type = "UNSIGNED16", name = "Controlword" },
  { index = 0x6060, sub = 0, type = "INT8", name = "Modes of operation" },
  { index = 0x607a, sub = 0, type = "INT32", name = "Target position" },
  { index = 0x60ff, sub = 0, type = "INT32", name = "Target velocity" },
  { index = 0x6071, sub = 0, type = "INT16", name = "Target torque" },
]
[[rxpdo]]
index = 0x1601
name = "RxPDO 2"
assigned = false
assignable = true
mappable = true
max_entries = 16
entries = []
[[txpdo]]
index = 0x1a00
name = "TxPDO CSP"
assignable = true
mappable = true
max_entries = 16
entries = [
  { index = 0x6041, sub = 0, type = "UNSIGNED16", name = "Statusword" },
  { index = 0x6061, sub = 0, type = "INT8", name = "Modes of operation display" },
  { index = 0x6064, sub = 0, type = "INT32", name = "Position actual value" },
  { index = 0x606c, sub = 0, type = "INT32", name = "Velocity actual value" },
  { index = 0x6077, sub = 0, type = "INT16", name = "Torque actual value" },
  { index = 0x60f4, sub = 0, type = "INT32", name = "Following error actual value" },
  { index = 0x603f, sub = 0, type = "UNSIGNED16", name = "Error code" },
]
[[txpdo]]
index = 0x1a01
name = "TxPDO 2"
assigned = false
assignable = true
mappable = true
max_entries = 16
entries = []
[[object]]
index = 0x603f
name = "Error code"
type = "UINT16"
access = "ro"
pdo_mapping = "tx"
[[object]]
index = 0x6040
name = "Controlword"
type = "UINT16"
access = "rw"
pdo_mapping = "rx"
[[object]]
index = 0x6041
name = "Statusword"
type = "UINT16"
access = "ro"
pdo_mapping = "tx"
[[object]]
index = 0x605a
name = "Quick stop option code"
type = "INT16"
access = "rw"
default = 2
min = 0
max = 8
[[object]]
index = 0x6060
name = "Modes of operation"
type = "INT8"
access = "rw"
pdo_mapping = "rx"
default = 0
[[object]]
index = 0x6061
name = "Modes of operation display"
type = "INT8"
access = "ro"
pdo_mapping = "tx"
[[object]]
index = 0x6064
name = "Position actual value"
type = "INT32"
access = "ro"
pdo_mapping = "tx"
[[object]]
index = 0x6065
name = "Following error window"
type = "UINT32"
access = "rw"
default = 10000
[[object]]
index = 0x6066
name = "Following error time out"
type = "UINT16"
access = "rw"
default = 10
[[object]]
index = 0x606c
name = "Velocity actual value"
type = "INT32"
access = "ro"
pdo_mapping = "tx"
[[object]]
index = 0x6071
name = "Target torque"
type = "INT16"
access = "rw"
pdo_mapping = "rx"
[[object]]
index = 0x6077
name = "Torque actual value"
type = "INT16"
access = "ro"
pdo_mapping = "tx"
[[object]]
index = 0x607a
name = "Target position"
type = "INT32"
access = "rw"
pdo_mapping = "rx"
[[object]]
index = 0x607f
name = "Max profile velocity"
type = "UINT32"
access = "rw"
default = 1000000               # counts/s: the motor model's speed limit (CSP and CSV)
[[object]]
index = 0x6085
name = "Quick stop deceleration"
type = "UINT32"
access = "rw"
default = 1000000
[[object]]
index = 0x60f4
name = "Following error actual value"
type = "INT32"
access = "ro"
pdo_mapping = "tx"
[[object]]
index = 0x60ff
name = "Target velocity"
type = "INT32"
access = "rw"
pdo_mapping = "rx"
[[object]]
index = 0x6502
name = "Supported drive modes"
type = "UINT32"
access = "ro"
default = 0x00000380               # CSP | CSV | CST (bits 7..9)
"#;

/// Time constant of the first-order lag of the motor model, s.
pub const TAU_S: f64 = 0.002;
/// CST: acceleration per per mille of rated torque, counts/s².
pub const ACCEL_PER_PERMILLE: f64 = 1000.0;
/// CST: mechanical time constant of the viscous friction, s.
pub const TAU_MECH_S: f64 = 0.1;
/// Longest step the model integrates at once (a pause of the master is not a jump of the motor).
pub const MAX_STEP_S: f64 = 0.01;

/// Modes of operation (0x6060 / 0x6061, IEC 61800-7-201 §6.2.2).
pub mod mode {
    pub const CSP: i8 = 8;
    pub const CSV: i8 = 9;
    pub const CST: i8 = 10;
}

/// Error codes (0x603F) of the injectable faults.
pub mod error_code {
    /// Following error (dynamic position error too high).
    pub const FOLLOWING_ERROR: u16 = 0x8611;
    /// Continuous over-current.
    pub const OVER_CURRENT: u16 = 0x2310;
}

/// Statusword bits (IEC 61800-7-201 §6.3.3, the statusword table).
pub mod sw {
    pub const READY_TO_SWITCH_ON: u16 = 1 << 0;
    pub const SWITCHED_ON: u16 = 1 << 1;
    pub const OPERATION_ENABLED: u16 = 1 << 2;
    pub const FAULT: u16 = 1 << 3;
    pub const VOLTAGE_ENABLED: u16 = 1 << 4;
    /// Active low: 0 = a quick stop is in progress.
    pub const QUICK_STOP: u16 = 1 << 5;
    pub const SWITCH_ON_DISABLED: u16 = 1 << 6;
    pub const WARNING: u16 = 1 << 7;
    pub const REMOTE: u16 = 1 << 9;
    pub const TARGET_REACHED: u16 = 1 << 10;
    pub const INTERNAL_LIMIT: u16 = 1 << 11;
    /// Cyclic modes: the drive follows the command value.
    pub const FOLLOWS_COMMAND: u16 = 1 << 12;
    /// CSP: following error.
    pub const FOLLOWING_ERROR: u16 = 1 << 13;
}

/// The states of the drive state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    NotReadyToSwitchOn,
    SwitchOnDisabled,
    ReadyToSwitchOn,
    SwitchedOn,
    OperationEnabled,
    QuickStopActive,
    FaultReactionActive,
    Fault,
}

impl State {
    /// The state bits of the statusword (bits 0, 1, 2, 3, 5, 6; IEC 61800-7-201, the table of
    /// state coding) plus voltage enabled (bit 4) where the power stage has voltage.
    pub fn bits(self) -> u16 {
        use sw::*;
        match self {
            State::NotReadyToSwitchOn => 0,
            State::SwitchOnDisabled => SWITCH_ON_DISABLED,
            State::ReadyToSwitchOn => READY_TO_SWITCH_ON | QUICK_STOP,
            State::SwitchedOn => READY_TO_SWITCH_ON | SWITCHED_ON | QUICK_STOP | VOLTAGE_ENABLED,
            State::OperationEnabled => {
                READY_TO_SWITCH_ON | SWITCHED_ON | OPERATION_ENABLED | QUICK_STOP | VOLTAGE_ENABLED
            }
            State::QuickStopActive => {
                READY_TO_SWITCH_ON | SWITCHED_ON | OPERATION_ENABLED | VOLTAGE_ENABLED
            }
            State::FaultReactionActive => {
                READY_TO_SWITCH_ON | SWITCHED_ON | OPERATION_ENABLED | FAULT | VOLTAGE_ENABLED
            }
            State::Fault => FAULT,
        }
    }

    /// The state a statusword codes (the mask/value pairs of the standard's state table).
    pub fn from_statusword(s: u16) -> Option<State> {
        [
            (0x4f, 0x00, State::NotReadyToSwitchOn),
            (0x4f, 0x40, State::SwitchOnDisabled),
            (0x6f, 0x21, State::ReadyToSwitchOn),
            (0x6f, 0x23, State::SwitchedOn),
            (0x6f, 0x27, State::OperationEnabled),
            (0x6f, 0x07, State::QuickStopActive),
            (0x4f, 0x0f, State::FaultReactionActive),
            (0x4f, 0x08, State::Fault),
        ]
        .into_iter()
        .find(|(m, v, _)| s & m == *v)
        .map(|(_, _, st)| st)
    }
}

/// Controlword commands (IEC 61800-7-201 §6.3.2, the table of device control commands; bits
/// 7 fault reset, 3 enable operation, 2 quick stop (active low), 1 enable voltage, 0 switch on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Shutdown,
    SwitchOn,
    /// Switch on + enable operation (also "enable operation" from switched on).
    EnableOperation,
    // "Disable operation" has the bits of switch on (0b0111): [`Command::SwitchOn`] in
    // operation enabled is transition 5.
    DisableVoltage,
    QuickStop,
}

/// The command a controlword gives, bit 7 (fault reset) aside.
pub fn command(cw: u16) -> Command {
    if cw & 0x0002 == 0 {
        Command::DisableVoltage
    } else if cw & 0x0006 == 0x0002 {
        Command::QuickStop
    } else if cw & 0x0007 == 0x0006 {
        Command::Shutdown
    } else if cw & 0x000f == 0x0007 {
        Command::SwitchOn
    } else {
        // Bits 0..3 all set: the bit patterns of the table cover every controlword.
        Command::EnableOperation
    }
}

/// Controlword values of the commands (what a master writes).
pub mod cw {
    pub const SHUTDOWN: u16 = 0x0006;
    pub const SWITCH_ON: u16 = 0x0007;
    pub const ENABLE_OPERATION: u16 = 0x000f;
    pub const DISABLE_VOLTAGE: u16 = 0x0000;
    pub const QUICK_STOP: u16 = 0x0002;
    pub const DISABLE_OPERATION: u16 = 0x0007;
    pub const FAULT_RESET: u16 = 0x0080;
}

/// An emergency the device application asks its ESC to send: (error code, error register).
pub type Emergency = (u16, u8);

/// One drive's state (reset by a power cycle: [`Drive::default`]).
#[derive(Debug, Clone, Default)]
pub struct Drive {
    state: Option<State>,
    pos: f64,
    vel: f64,
    torque: f64,
    last_cw: u16,
    error_code: u16,
    /// Time the following error has been beyond the window, s.
    fe_time: f64,
    injected: Option<u16>,
}

/// The object types the model reads and writes (index -> type).
fn object_type(index: u16) -> DataType {
    match index {
        0x6040 | 0x6041 | 0x603f | 0x6066 => DataType::Unsigned16,
        0x6060 | 0x6061 => DataType::Int8,
        0x6071 | 0x6077 | 0x605a => DataType::Int16,
        0x6065 | 0x6085 | 0x607f => DataType::Unsigned32,
        _ => DataType::Int32,
    }
}

/// The current value of an output object: from the output image when an assigned PDO maps it,
/// else what an SDO download last wrote.
fn get(od: &Od, outputs: &[u8], index: u16) -> i64 {
    let t = object_type(index);
    let n = usize::from(t.bits() / 8);
    let bytes = match od.placement(index, 0) {
        Some(p) if p.dir == Direction::Outputs => read_bits(outputs, p.bit_offset, p.bits, n),
        _ => od.value(index, 0).unwrap_or(&[]).to_vec(),
    };
    crate::od::integer(t, &bytes).unwrap_or(0) as i64
}

/// Publish an input object: into the dictionary (SDO uploads) and, when mapped, the input image.
fn put(od: &mut Od, inputs: &mut [u8], index: u16, v: i64) {
    let t = object_type(index);
    let n = usize::from(t.bits() / 8);
    let bytes = &v.to_le_bytes()[..n];
    od.set_value(index, 0, bytes);
    if let Some(p) = od.placement(index, 0)
        && p.dir == Direction::Inputs
    {
        write_bits(inputs, p.bit_offset, p.bits, bytes);
    }
}

/// Write the low `bits` bits of `value` at `bit_offset` of `image` (LSB first).
fn write_bits(image: &mut [u8], bit_offset: u32, bits: u16, value: &[u8]) {
    for k in 0..u32::from(bits).min(value.len() as u32 * 8) {
        let at = bit_offset + k;
        let Some(byte) = image.get_mut((at / 8) as usize) else {
            return;
        };
        let bit = value[(k / 8) as usize] >> (k % 8) & 1;
        *byte = (*byte & !(1 << (at % 8))) | (bit << (at % 8));
    }
}

/// `x` rounded to an i32 (saturating).
fn i32_of(x: f64) -> i64 {
    x.round().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i64
}

impl Drive {
    /// The state now (not ready to switch on before the first step).
    pub fn state(&self) -> State {
        self.state.unwrap_or(State::NotReadyToSwitchOn)
    }

    /// The error code (0x603F) now.
    pub fn error_code(&self) -> u16 {
        self.error_code
    }

    /// Raise a fault with this error code at the next step.
    pub fn inject(&mut self, code: u16) {
        self.injected = Some(code);
    }

    fn fault(&mut self, code: u16) -> Option<Emergency> {
        if matches!(self.state(), State::FaultReactionActive | State::Fault) {
            return None;
        }
        self.state = Some(State::FaultReactionActive);
        self.error_code = code;
        // Error register 0x1001 (CiA 301 §7.5.2.2): bit 0 generic, bit 1 current, bit 5 device
        // profile specific.
        let register = if code >> 12 == 2 { 0x03 } else { 0x21 };
        Some((code, register))
    }

    /// One device application cycle: read the outputs (controlword, mode, targets), step the
    /// state machine and the motor by `dt_s` seconds, publish the inputs. Returns an emergency to
    /// send when a fault occurred.
    /// `outputs` is `None` outside OP: the outputs are not valid, the drive sees controlword 0
    /// (disable voltage) and holds its mode.
    pub fn step(
        &mut self,
        od: &mut Od,
        outputs: Option<&[u8]>,
        inputs: &mut [u8],
        dt_s: f64,
    ) -> Option<Emergency> {
        let dt = dt_s.clamp(0.0, MAX_STEP_S);
        let valid = outputs.is_some();
        let outputs = outputs.unwrap_or(&[]);
        let cw = if valid {
            get(od, outputs, 0x6040) as u16
        } else {
            0
        };
        let mode = get(od, outputs, 0x6060) as i8;
        let mut emergency = None;
        // Transitions 0 and 1 happen on their own after power-on (the drive's self test).
        let state = match self.state {
            None => State::NotReadyToSwitchOn,
            Some(State::NotReadyToSwitchOn) => State::SwitchOnDisabled,
            Some(s) => s,
        };
        self.state = Some(state);
        if let Some(code) = self.injected.take() {
            emergency = self.fault(code);
        }
        // A fault raised in this step (13) is shown for one step before the fault (14).
        let faulted_now = emergency.is_some();
        let reset_edge = cw & cw::FAULT_RESET != 0 && self.last_cw & cw::FAULT_RESET == 0;
        self.last_cw = cw;
        let qs_option = get(od, outputs, 0x605a);
        let cmd = command(cw);
        let next = match (self.state(), cmd) {
            (s, _) if faulted_now => s,
            (State::NotReadyToSwitchOn, _) => State::NotReadyToSwitchOn,
            (State::SwitchOnDisabled, Command::Shutdown) => State::ReadyToSwitchOn, // 2
            (State::ReadyToSwitchOn, Command::SwitchOn) => State::SwitchedOn,       // 3
            // 3 + 4: "switch on + enable operation" from ready to switch on.
            (State::ReadyToSwitchOn, Command::EnableOperation) => State::OperationEnabled,
            (State::ReadyToSwitchOn, Command::DisableVoltage | Command::QuickStop) => {
                State::SwitchOnDisabled // 7
            }
            (State::SwitchedOn, Command::EnableOperation) => State::OperationEnabled, // 4
            (State::SwitchedOn, Command::Shutdown) => State::ReadyToSwitchOn,         // 6
            (State::SwitchedOn, Command::DisableVoltage | Command::QuickStop) => {
                State::SwitchOnDisabled // 10
            }
            (State::OperationEnabled, Command::SwitchOn) => {
                State::SwitchedOn // 5
            }
            (State::OperationEnabled, Command::Shutdown) => State::ReadyToSwitchOn, // 8
            (State::OperationEnabled, Command::DisableVoltage) => State::SwitchOnDisabled, // 9
            (State::OperationEnabled, Command::QuickStop) => State::QuickStopActive, // 11
            (State::QuickStopActive, Command::DisableVoltage) => State::SwitchOnDisabled, // 12
            (State::QuickStopActive, Command::EnableOperation) if (5..=8).contains(&qs_option) => {
                State::OperationEnabled // 16
            }
            (State::FaultReactionActive, _) => State::Fault, // 14
            (State::Fault, _) if reset_edge => State::SwitchOnDisabled, // 15
            (s, _) => s,
        };
        if next == State::SwitchOnDisabled && self.state() == State::Fault {
            self.error_code = 0;
            self.fe_time = 0.0;
        }
        self.state = Some(next);
        emergency = emergency.or(self.motion(od, outputs, mode, dt, qs_option));
        self.publish(od, outputs, inputs, mode);
        emergency
    }

    /// Move the motor by one step in the current state.
    fn motion(&mut self, od: &Od, outputs: &[u8], mode: i8, dt: f64, qs: i64) -> Option<Emergency> {
        let k = 1.0 - (-dt / TAU_S).exp();
        match self.state() {
            State::OperationEnabled => match mode {
                mode::CSP => {
                    let target = get(od, outputs, 0x607a) as f64;
                    let before = self.pos;
                    let vmax = get(od, outputs, 0x607f) as f64 * dt;
                    self.pos += ((target - self.pos) * k).clamp(-vmax, vmax);
                    self.vel = if dt > 0.0 {
                        (self.pos - before) / dt
                    } else {
                        0.0
                    };
                    self.torque = 0.0;
                    let window = get(od, outputs, 0x6065) as f64;
                    let timeout = get(od, outputs, 0x6066) as f64 / 1000.0;
                    if (target - self.pos).abs() > window {
                        self.fe_time += dt;
                        if self.fe_time > timeout {
                            return self.fault(error_code::FOLLOWING_ERROR);
                        }
                    } else {
                        self.fe_time = 0.0;
                    }
                }
                mode::CSV => {
                    let vmax = get(od, outputs, 0x607f) as f64;
                    let target = (get(od, outputs, 0x60ff) as f64).clamp(-vmax, vmax);
                    self.vel += (target - self.vel) * k;
                    self.pos += self.vel * dt;
                    self.torque = 0.0;
                }
                mode::CST => {
                    let target = get(od, outputs, 0x6071) as f64;
                    self.torque += (target - self.torque) * k;
                    self.vel += (self.torque * ACCEL_PER_PERMILLE - self.vel / TAU_MECH_S) * dt;
                    self.pos += self.vel * dt;
                }
                // A mode the drive does not support: it holds still.
                _ => self.vel = 0.0,
            },
            State::QuickStopActive => {
                let dec = get(od, outputs, 0x6085) as f64;
                let dv = dec * dt;
                if qs == 0 || self.vel.abs() <= dv {
                    self.pos += self.vel * dt / 2.0;
                    self.vel = 0.0;
                    if (0..=4).contains(&qs) {
                        self.state = Some(State::SwitchOnDisabled); // 12
                    }
                } else {
                    let v = self.vel - dv * self.vel.signum();
                    self.pos += (self.vel + v) / 2.0 * dt;
                    self.vel = v;
                }
                self.torque = 0.0;
            }
            _ => {
                self.vel = 0.0;
                self.torque = 0.0;
            }
        }
        None
    }

    fn publish(&self, od: &mut Od, outputs: &[u8], inputs: &mut [u8], mode: i8) {
        let state = self.state();
        let enabled = state == State::OperationEnabled;
        let target = get(od, outputs, 0x607a) as f64;
        let fe = if enabled && mode == mode::CSP {
            target - self.pos
        } else {
            0.0
        };
        let window = get(od, outputs, 0x6065) as f64;
        let mut s = state.bits() | sw::REMOTE;
        if enabled && matches!(mode, mode::CSP | mode::CSV | mode::CST) {
            s |= sw::FOLLOWS_COMMAND;
        }
        if enabled && mode == mode::CSP && fe.abs() > window {
            s |= sw::FOLLOWING_ERROR;
        }
        // Target reached: in quick stop active, standstill; halt (bit 8) is not modelled.
        let standstill = self.vel.abs() < 1.0;
        if (state == State::QuickStopActive && standstill) || (enabled && fe.abs() < 1.0) {
            s |= sw::TARGET_REACHED;
        }
        put(od, inputs, 0x6041, i64::from(s));
        // The display follows the requested mode at once (IEC 61800-7-201 §6.2.2: 0x6061 shows
        // the mode the drive runs; this model switches without delay).
        put(od, inputs, 0x6061, i64::from(mode));
        put(od, inputs, 0x6064, i32_of(self.pos));
        put(od, inputs, 0x606c, i32_of(self.vel));
        put(
            od,
            inputs,
            0x6077,
            self.torque.round().clamp(-32768.0, 32767.0) as i64,
        );
        put(od, inputs, 0x60f4, i32_of(fe));
        put(od, inputs, 0x603f, i64::from(self.error_code));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_codes_back_to_itself() {
        for s in [
            State::NotReadyToSwitchOn,
            State::SwitchOnDisabled,
            State::ReadyToSwitchOn,
            State::SwitchedOn,
            State::OperationEnabled,
            State::QuickStopActive,
            State::FaultReactionActive,
            State::Fault,
        ] {
            assert_eq!(State::from_statusword(s.bits() | sw::REMOTE), Some(s));
        }
    }

    #[test]
    fn commands_decode_per_the_table() {
        assert_eq!(command(cw::SHUTDOWN), Command::Shutdown);
        assert_eq!(command(cw::SWITCH_ON), Command::SwitchOn);
        assert_eq!(command(cw::ENABLE_OPERATION), Command::EnableOperation);
        assert_eq!(command(cw::DISABLE_VOLTAGE), Command::DisableVoltage);
        assert_eq!(command(0x000d), Command::DisableVoltage);
        assert_eq!(command(cw::QUICK_STOP), Command::QuickStop);
        assert_eq!(command(0x000b), Command::QuickStop);
        assert_eq!(command(0x000e), Command::Shutdown);
    }

    #[test]
    fn bits_round_trip() {
        let mut img = [0u8; 6];
        write_bits(&mut img, 12, 16, &0xbeefu16.to_le_bytes());
        assert_eq!(read_bits(&img, 12, 16, 2), 0xbeefu16.to_le_bytes());
        write_bits(&mut img, 12, 16, &0u16.to_le_bytes());
        assert_eq!(img, [0; 6]);
    }
}
