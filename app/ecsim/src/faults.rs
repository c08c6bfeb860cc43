//! Fault injection, controllable at run time from any thread (tests, the CLI control socket).
//!
//! The frame-processing thread reads a handful of atomics per frame; device faults (error,
//! power-cycle) are queued and applied by that thread at the start of the next frame.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use thiserror::Error;

/// One fault request.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultCommand {
    /// Lose the next N responses (the frames were processed, the replies never arrive).
    DropNext(u32),
    /// Lose this fraction (0..=1) of responses, pseudo-randomly (fixed seed: reproducible).
    DropFraction(f64),
    /// Delay every response by this many microseconds (0 = off).
    DelayUs(u64),
    /// Link down (no frame passes) or up.
    Link(bool),
    /// The subdevice at `position` falls to SAFE-OP with the error flag and `code`.
    SubdeviceError { position: usize, code: u16 },
    /// Every subdevice loses power and comes back: registers reset, INIT, no station address.
    PowerCycle,
    /// The subdevice at `position` loses power and comes back at once (`power-cycle POS`): its
    /// registers reset, INIT, no station address; the others keep their state.
    PowerCycleOne { position: usize },
    /// The subdevice at `position` loses power (`power-off POS`): it and every subdevice behind
    /// it are unreachable (a powered-off ESC forwards nothing; the one before it closes its
    /// port 1) until `power-on POS`, which brings it back reset (INIT).
    Power { position: usize, on: bool },
    /// The cable into port 0 of the subdevice at `position` is pulled (`unplug POS`, position
    /// 1 or later; position 0's cable is `link down`): it and everything behind it are
    /// unreachable, powered, keeping their state, until `plug POS`. Their sync-manager
    /// watchdogs run on (see [`crate::esc`]).
    Cable { position: usize, plugged: bool },
    /// The device at `position` is swapped for one described like the device at `like`
    /// (`replace POS LIKE`): its identity, process data and dictionary from then on, new and
    /// powered on (INIT, no station address) — a technician who fits another module in the
    /// same place.
    Replace { position: usize, like: usize },
    /// Decrement the WKC of the logical datagrams of the next N frames.
    CorruptWkc(u32),
    /// The subdevice at `position` receives `count` frames with a bad checksum on `port`: the
    /// ESC error counters count them as a real chain would (see [`crate::segment`]); the frames
    /// themselves still arrive (add `drop-next` to lose them too).
    CrcErrors {
        position: usize,
        port: u8,
        count: u8,
    },
    /// The CoE subdevice at `position` sends an emergency message (ETG.1000.6 §5.6.4) with this
    /// error code and error register (5 bytes of manufacturer data, zero), delivered in its
    /// SM1 when the mailbox is idle; a subdevice without CoE has no mailbox and ignores it.
    Emergency {
        position: usize,
        code: u16,
        register: u8,
    },
    /// The CiA 402 drive at `position` (`profile = "cia402"`) faults with this 0x603F error code:
    /// fault reaction active, then fault, and an emergency message with the code; a fault reset
    /// clears it. A device without the profile ignores it.
    DriveFault { position: usize, code: u16 },
    /// Clear every persistent fault (drops, fraction, delay, link down, WKC corruption). The error
    /// counters stay: they are the devices' registers (a write clears them, a power cycle resets
    /// them).
    Clear,
}

/// Largest count of `drop-next` and `corrupt-wkc`: about 17 minutes of 1 kHz cycles; a longer
/// outage is `link down`.
pub const MAX_COUNT: u32 = 1_000_000;
/// Largest `delay-us`: 10 s, far beyond any master's response timeout (a lost response).
pub const MAX_DELAY_US: u64 = 10_000_000;
/// Largest `crc-errors` count: the counters are 8 bits wide and stop at 0xFF.
pub const MAX_CRC_ERRORS: u8 = 255;
/// Ports of an ESC (ETG.1000.4: ports 0..3).
pub const PORTS: u8 = 4;
/// How much of an invalid command line an error message quotes.
const QUOTE_CHARS: usize = 64;

#[derive(Debug, Error, PartialEq)]
#[error("fault command {:?}: {why}", crate::spec::truncated(.input, QUOTE_CHARS))]
pub struct FaultParseError {
    pub input: String,
    pub why: String,
}

impl std::str::FromStr for FaultCommand {
    type Err = FaultParseError;

    /// Text form used by the control socket and the CLI:
    /// `drop-next N`, `drop-fraction F`, `delay-us N`, `link up|down`,
    /// `subdevice-error POS CODE` (CODE decimal or 0x hex), `power-cycle [POS]`,
    /// `power-off POS`, `power-on POS`, `unplug POS`, `plug POS` (POS ≥ 1), `replace POS LIKE`,
    /// `corrupt-wkc N`,
    /// `crc-errors POS PORT N` (PORT 0..=3, N 1..=255), `emergency POS CODE [REGISTER]`
    /// (CODE 16 bits, REGISTER 8 bits, default 0),
    /// `drive-fault POS following-error|over-current|CODE` (0x8611, 0x2310 or a 16-bit 0x603F
    /// code other than 0), `clear`.
    /// Values are checked against their bounds ([`MAX_COUNT`], [`MAX_DELAY_US`], 0..=1); a
    /// position can only be checked against a segment: [`FaultCommand::parse_for`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| FaultParseError {
            input: s.to_string(),
            why: why.to_string(),
        };
        let words: Vec<&str> = s.split_whitespace().collect();
        let quote = |w: &str| crate::spec::truncated(w, QUOTE_CHARS);
        let int = |w: Option<&&str>, what: &str| -> Result<u64, FaultParseError> {
            let w = w.ok_or_else(|| err(&format!("missing {what}")))?;
            let parsed = if let Some(h) = w.strip_prefix("0x") {
                u64::from_str_radix(h, 16)
            } else {
                w.parse()
            };
            parsed.map_err(|_| {
                err(&format!(
                    "{what} {:?} is not a non-negative integer",
                    quote(w)
                ))
            })
        };
        let position = |w: Option<&&str>| -> Result<usize, FaultParseError> {
            let p = int(w, "position")?;
            usize::try_from(p).map_err(|_| err(&format!("position {p} is out of range")))
        };
        let count = |w: Option<&&str>| -> Result<u32, FaultParseError> {
            let n = int(w, "count")?;
            if n > u64::from(MAX_COUNT) {
                return Err(err(&format!(
                    "count {n} is above the limit of {MAX_COUNT} (use `link down` for a longer outage)"
                )));
            }
            Ok(n as u32)
        };
        let cmd = match words.first().copied() {
            Some("drop-next") => FaultCommand::DropNext(count(words.get(1))?),
            Some("drop-fraction") => {
                let w = words.get(1).ok_or_else(|| err("missing fraction"))?;
                let f: f64 = w
                    .parse()
                    .map_err(|_| err(&format!("fraction {:?} is not a number", quote(w))))?;
                if !(0.0..=1.0).contains(&f) {
                    return Err(err(&format!("fraction {} must be within 0..=1", quote(w))));
                }
                FaultCommand::DropFraction(f)
            }
            Some("delay-us") => {
                let n = int(words.get(1), "delay")?;
                if n > MAX_DELAY_US {
                    return Err(err(&format!(
                        "delay {n} us is above the limit of {MAX_DELAY_US} us"
                    )));
                }
                FaultCommand::DelayUs(n)
            }
            Some("link") => match words.get(1).copied() {
                Some("up") => FaultCommand::Link(true),
                Some("down") => FaultCommand::Link(false),
                _ => return Err(err("expected `link up` or `link down`")),
            },
            Some("subdevice-error") => {
                // Checked against the segment by `parse_for`.
                let position = int(words.get(1), "position")?;
                let position = usize::try_from(position)
                    .map_err(|_| err(&format!("position {position} is out of range")))?;
                let code = int(words.get(2), "AL status code")?;
                let code = u16::try_from(code)
                    .map_err(|_| err(&format!("AL status code {code:#x} must fit in 16 bits")))?;
                FaultCommand::SubdeviceError { position, code }
            }
            Some("crc-errors") => {
                let position = int(words.get(1), "position")?;
                let position = usize::try_from(position)
                    .map_err(|_| err(&format!("position {position} is out of range")))?;
                let port = int(words.get(2), "port")?;
                if port >= u64::from(PORTS) {
                    return Err(err(&format!(
                        "port {port} must be 0..={} (an ESC has ports 0 to 3)",
                        PORTS - 1
                    )));
                }
                let n = int(words.get(3), "count")?;
                if n == 0 || n > u64::from(MAX_CRC_ERRORS) {
                    return Err(err(&format!(
                        "count {n} must be 1..={MAX_CRC_ERRORS} (the counters are 8 bits and stop \
                         at 255)"
                    )));
                }
                FaultCommand::CrcErrors {
                    position,
                    port: port as u8,
                    count: n as u8,
                }
            }
            Some("emergency") => {
                let position = int(words.get(1), "position")?;
                let position = usize::try_from(position)
                    .map_err(|_| err(&format!("position {position} is out of range")))?;
                let code = int(words.get(2), "emergency error code")?;
                let code = u16::try_from(code).map_err(|_| {
                    err(&format!(
                        "emergency error code {code:#x} must fit in 16 bits"
                    ))
                })?;
                let register = match words.get(3) {
                    None => 0,
                    w => {
                        let r = int(w, "error register")?;
                        u8::try_from(r).map_err(|_| {
                            err(&format!("error register {r:#x} must fit in 8 bits"))
                        })?
                    }
                };
                FaultCommand::Emergency {
                    position,
                    code,
                    register,
                }
            }
            Some("drive-fault") => {
                let position = int(words.get(1), "position")?;
                let position = usize::try_from(position)
                    .map_err(|_| err(&format!("position {position} is out of range")))?;
                let code = match words.get(2).copied() {
                    Some("following-error") => crate::cia402::error_code::FOLLOWING_ERROR,
                    Some("over-current") => crate::cia402::error_code::OVER_CURRENT,
                    None => return Err(err("missing drive error code")),
                    Some(w) => {
                        let code = int(Some(&w), "drive error code").map_err(|_| {
                            err(&format!(
                                "drive error {:?}: expected following-error, over-current or \
                                 a 0x603F error code (decimal or 0x hex)",
                                quote(w)
                            ))
                        })?;
                        match u16::try_from(code) {
                            Ok(c) if c != 0 => c,
                            _ => {
                                return Err(err(&format!(
                                    "drive error code {code:#x} must be following-error, \
                                     over-current or a 16-bit code other than 0 (0 is no error)"
                                )));
                            }
                        }
                    }
                };
                FaultCommand::DriveFault { position, code }
            }
            Some("power-cycle") if words.len() == 1 => FaultCommand::PowerCycle,
            Some("power-cycle") => FaultCommand::PowerCycleOne {
                position: position(words.get(1))?,
            },
            Some(w @ ("power-off" | "power-on")) => FaultCommand::Power {
                position: position(words.get(1))?,
                on: w == "power-on",
            },
            Some("replace") => FaultCommand::Replace {
                position: position(words.get(1))?,
                like: position(words.get(2))?,
            },
            Some(w @ ("unplug" | "plug")) => {
                let position = position(words.get(1))?;
                if position == 0 {
                    return Err(err(
                        "position 0's cable is the master's: use `link down` / `link up`",
                    ));
                }
                FaultCommand::Cable {
                    position,
                    plugged: w == "plug",
                }
            }
            Some("corrupt-wkc") => FaultCommand::CorruptWkc(count(words.get(1))?),
            Some("clear") => FaultCommand::Clear,
            Some(other) => return Err(err(&format!("unknown command {:?}", quote(other)))),
            None => return Err(err("empty command")),
        };
        let expected_words = match cmd {
            FaultCommand::PowerCycle | FaultCommand::Clear => 1,
            FaultCommand::SubdeviceError { .. }
            | FaultCommand::DriveFault { .. }
            | FaultCommand::Replace { .. } => 3,
            FaultCommand::PowerCycleOne { .. }
            | FaultCommand::Power { .. }
            | FaultCommand::Cable { .. } => 2,
            FaultCommand::CrcErrors { .. } => 4,
            FaultCommand::Emergency { .. } => words.len().clamp(3, 4),
            _ => 2,
        };
        if words.len() != expected_words {
            return Err(err(&format!(
                "expected {expected_words} word(s), got {}",
                words.len()
            )));
        }
        Ok(cmd)
    }
}

impl FaultCommand {
    /// Parse a command for a segment of `devices` subdevices: as [`str::parse`], and a
    /// `subdevice-error` or `crc-errors` position must exist in that segment; `crc-errors` needs
    /// a port with a link (the chain uses ports 0 and 1; port 1 of the last subdevice is open).
    pub fn parse_for(s: &str, devices: usize) -> Result<Self, FaultParseError> {
        let cmd: FaultCommand = s.parse()?;
        let refuse = |why: String| {
            Err(FaultParseError {
                input: s.to_string(),
                why,
            })
        };
        let position = match cmd {
            FaultCommand::SubdeviceError { position, .. }
            | FaultCommand::CrcErrors { position, .. }
            | FaultCommand::Emergency { position, .. }
            | FaultCommand::DriveFault { position, .. }
            | FaultCommand::PowerCycleOne { position }
            | FaultCommand::Power { position, .. }
            | FaultCommand::Cable { position, .. } => position,
            FaultCommand::Replace { position, like } => position.max(like),
            _ => return Ok(cmd),
        };
        if position >= devices {
            return refuse(if devices == 0 {
                format!("position {position} does not exist: the segment has no subdevices")
            } else {
                format!(
                    "position {position} is outside the segment: positions 0..={} \
                     ({devices} subdevices)",
                    devices - 1
                )
            });
        }
        if let FaultCommand::CrcErrors { port, .. } = cmd {
            if port >= 2 {
                return refuse(format!(
                    "port {port} of subdevice {position} has no link: the simulated subdevices \
                     are chained through ports 0 and 1"
                ));
            }
            if port == 1 && position + 1 == devices {
                return refuse(format!(
                    "port 1 of subdevice {position} has no link: it is the last subdevice, \
                     where the chain ends"
                ));
            }
        }
        Ok(cmd)
    }
}

/// Device faults (error, power-cycle, crc-errors) that may wait for the segment's next frame at
/// once.
pub const MAX_PENDING_DEVICE_FAULTS: usize = 256;

/// [`Faults::try_apply`] refused a device fault: too many are waiting for the next frame.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "{MAX_PENDING_DEVICE_FAULTS} device faults are waiting for the segment's next frame; \
     not queueing more until a master sends"
)]
pub struct QueueFull;

/// A device-level fault waiting for the processing thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceFault {
    Error {
        position: usize,
        code: u16,
    },
    PowerCycle,
    CrcErrors {
        position: usize,
        port: u8,
        count: u8,
    },
    Emergency {
        position: usize,
        code: u16,
        register: u8,
    },
    Drive {
        position: usize,
        code: u16,
    },
    PowerCycleOne {
        position: usize,
    },
    Power {
        position: usize,
        on: bool,
    },
    Cable {
        position: usize,
        plugged: bool,
    },
    Replace {
        position: usize,
        like: usize,
    },
}

#[derive(Debug, Default)]
struct State {
    drop_next: AtomicU32,
    /// Fraction of responses to drop, in parts per million.
    drop_ppm: AtomicU32,
    delay_ns: AtomicU64,
    link_down: AtomicBool,
    /// Times the link went down (counted here, so that a down/up between two frames still
    /// reaches the lost link counter).
    link_losses: AtomicU32,
    corrupt_wkc_next: AtomicU32,
    device_pending: AtomicBool,
    device_faults: Mutex<Vec<DeviceFault>>,
}

/// A copy of the fault state at one moment ([`Faults::snapshot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultState {
    pub drop_next: u32,
    pub drop_ppm: u32,
    pub delay_ns: u64,
    pub link_down: bool,
    pub corrupt_wkc_next: u32,
    pub pending_device_faults: usize,
}

/// Shared handle to the fault state of one segment. Clone it freely.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    s: Arc<State>,
}

impl Faults {
    pub fn new() -> Self {
        Self::default()
    }

    /// Apply a fault. A device fault beyond [`MAX_PENDING_DEVICE_FAULTS`] not yet picked up by
    /// the segment is dropped; [`Faults::try_apply`] says so.
    pub fn apply(&self, cmd: FaultCommand) {
        let _ = self.try_apply(cmd);
    }

    /// Apply a fault, or refuse a device fault while [`MAX_PENDING_DEVICE_FAULTS`] are queued
    /// (the segment takes them at its next frame; with no master sending, they would pile up).
    pub fn try_apply(&self, cmd: FaultCommand) -> Result<(), QueueFull> {
        let s = &self.s;
        match cmd {
            FaultCommand::DropNext(n) => s.drop_next.store(n, Ordering::Release),
            // Clamped: a value built in code (not parsed) must not wrap or overflow.
            FaultCommand::DropFraction(f) => s.drop_ppm.store(
                (f.clamp(0.0, 1.0) * 1_000_000.0).round() as u32,
                Ordering::Release,
            ),
            FaultCommand::DelayUs(us) => {
                s.delay_ns.store(us.saturating_mul(1000), Ordering::Release)
            }
            FaultCommand::Link(up) => {
                let was_down = s.link_down.swap(!up, Ordering::AcqRel);
                if !up && !was_down {
                    s.link_losses.fetch_add(1, Ordering::AcqRel);
                }
            }
            FaultCommand::SubdeviceError { position, code } => {
                return self.queue(DeviceFault::Error { position, code });
            }
            FaultCommand::PowerCycle => return self.queue(DeviceFault::PowerCycle),
            FaultCommand::CrcErrors {
                position,
                port,
                count,
            } => {
                return self.queue(DeviceFault::CrcErrors {
                    position,
                    port,
                    count,
                });
            }
            FaultCommand::Emergency {
                position,
                code,
                register,
            } => {
                return self.queue(DeviceFault::Emergency {
                    position,
                    code,
                    register,
                });
            }
            FaultCommand::DriveFault { position, code } => {
                return self.queue(DeviceFault::Drive { position, code });
            }
            FaultCommand::PowerCycleOne { position } => {
                return self.queue(DeviceFault::PowerCycleOne { position });
            }
            FaultCommand::Power { position, on } => {
                return self.queue(DeviceFault::Power { position, on });
            }
            FaultCommand::Cable { position, plugged } => {
                return self.queue(DeviceFault::Cable { position, plugged });
            }
            FaultCommand::Replace { position, like } => {
                return self.queue(DeviceFault::Replace { position, like });
            }
            FaultCommand::CorruptWkc(n) => s.corrupt_wkc_next.store(n, Ordering::Release),
            FaultCommand::Clear => {
                s.drop_next.store(0, Ordering::Release);
                s.drop_ppm.store(0, Ordering::Release);
                s.delay_ns.store(0, Ordering::Release);
                s.link_down.store(false, Ordering::Release);
                s.corrupt_wkc_next.store(0, Ordering::Release);
            }
        }
        Ok(())
    }

    /// The persistent fault state and the number of device faults not yet applied (for status
    /// and tests: an invalid command must leave this unchanged).
    pub fn snapshot(&self) -> FaultState {
        let s = &self.s;
        FaultState {
            drop_next: s.drop_next.load(Ordering::Acquire),
            drop_ppm: s.drop_ppm.load(Ordering::Acquire),
            delay_ns: s.delay_ns.load(Ordering::Acquire),
            link_down: s.link_down.load(Ordering::Acquire),
            corrupt_wkc_next: s.corrupt_wkc_next.load(Ordering::Acquire),
            pending_device_faults: s
                .device_faults
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len(),
        }
    }

    fn queue(&self, f: DeviceFault) -> Result<(), QueueFull> {
        // A poisoned lock only means another thread panicked while pushing; the Vec is intact.
        let mut q = self
            .s
            .device_faults
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if q.len() >= MAX_PENDING_DEVICE_FAULTS {
            return Err(QueueFull);
        }
        q.push(f);
        self.s.device_pending.store(true, Ordering::Release);
        Ok(())
    }

    pub(crate) fn take_device_faults(&self, out: &mut Vec<DeviceFault>) {
        if !self.s.device_pending.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut q = self
            .s
            .device_faults
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        out.append(&mut q);
    }

    pub(crate) fn link_down(&self) -> bool {
        self.s.link_down.load(Ordering::Acquire)
    }

    /// How often the link went down since these faults were made.
    pub(crate) fn link_losses(&self) -> u32 {
        self.s.link_losses.load(Ordering::Acquire)
    }

    /// Consume one unit of a countdown; true when this frame is affected.
    fn take(counter: &AtomicU32) -> bool {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    pub(crate) fn take_drop(&self) -> bool {
        Self::take(&self.s.drop_next)
    }

    pub(crate) fn take_corrupt_wkc(&self) -> bool {
        Self::take(&self.s.corrupt_wkc_next)
    }

    pub(crate) fn drop_ppm(&self) -> u32 {
        self.s.drop_ppm.load(Ordering::Acquire)
    }

    pub fn delay_ns(&self) -> u64 {
        self.s.delay_ns.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_command() {
        let cases = [
            ("drop-next 5", FaultCommand::DropNext(5)),
            ("drop-fraction 0.25", FaultCommand::DropFraction(0.25)),
            ("delay-us 300", FaultCommand::DelayUs(300)),
            ("link down", FaultCommand::Link(false)),
            ("link up", FaultCommand::Link(true)),
            (
                "subdevice-error 1 0x001b",
                FaultCommand::SubdeviceError {
                    position: 1,
                    code: 0x1b,
                },
            ),
            ("power-cycle", FaultCommand::PowerCycle),
            ("corrupt-wkc 3", FaultCommand::CorruptWkc(3)),
            (
                "crc-errors 2 1 0x10",
                FaultCommand::CrcErrors {
                    position: 2,
                    port: 1,
                    count: 16,
                },
            ),
            (
                "emergency 2 0x8611 0x81",
                FaultCommand::Emergency {
                    position: 2,
                    code: 0x8611,
                    register: 0x81,
                },
            ),
            (
                "emergency 0 4096",
                FaultCommand::Emergency {
                    position: 0,
                    code: 0x1000,
                    register: 0,
                },
            ),
            ("clear", FaultCommand::Clear),
        ];
        for (text, cmd) in cases {
            assert_eq!(text.parse::<FaultCommand>().unwrap(), cmd, "{text}");
        }
    }

    #[test]
    fn rejects_bad_input_with_reason() {
        for (text, why) in [
            ("", "empty"),
            ("explode", "unknown command"),
            ("drop-next", "missing count"),
            ("drop-next -1", "not a non-negative integer"),
            ("drop-fraction 2", "within 0..=1"),
            ("link sideways", "link up"),
            ("subdevice-error 1 0x10000", "16 bits"),
            (
                "power-cycle now",
                "position \"now\" is not a non-negative integer",
            ),
        ] {
            let e = text.parse::<FaultCommand>().unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn values_are_bounded_and_errors_name_them() {
        for (text, why) in [
            (
                "drop-next 1000001",
                "count 1000001 is above the limit of 1000000",
            ),
            ("corrupt-wkc 99999999999", "count 99999999999 is above"),
            ("delay-us 10000001", "delay 10000001 us is above the limit"),
            ("drop-fraction -0.1", "fraction -0.1 must be within 0..=1"),
            ("drop-fraction nan", "fraction nan must be within"),
            ("drop-fraction inf", "fraction inf must be within"),
            ("subdevice-error 99999999999999999999 1", "position"),
            (
                "subdevice-error 1 70000",
                "AL status code 0x11170 must fit in 16 bits",
            ),
        ] {
            let e = text.parse::<FaultCommand>().unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
        assert_eq!(
            "drop-next 1000000".parse::<FaultCommand>().unwrap(),
            FaultCommand::DropNext(MAX_COUNT)
        );
        assert_eq!(
            "delay-us 10000000".parse::<FaultCommand>().unwrap(),
            FaultCommand::DelayUs(MAX_DELAY_US)
        );
    }

    #[test]
    fn positions_are_checked_against_the_segment() {
        let e = FaultCommand::parse_for("subdevice-error 99999 1", 3).unwrap_err();
        assert!(
            e.to_string()
                .contains("position 99999 is outside the segment: positions 0..=2 (3 subdevices)"),
            "{e}"
        );
        assert!(FaultCommand::parse_for("subdevice-error 3 1", 3).is_err());
        assert!(FaultCommand::parse_for("subdevice-error 0 1", 0).is_err());
        assert_eq!(
            FaultCommand::parse_for("subdevice-error 2 1", 3).unwrap(),
            FaultCommand::SubdeviceError {
                position: 2,
                code: 1
            }
        );
        // Position-free commands are unaffected.
        assert_eq!(
            FaultCommand::parse_for("power-cycle", 3).unwrap(),
            FaultCommand::PowerCycle
        );
    }

    #[test]
    fn crc_errors_are_bounded_and_need_a_linked_port() {
        for (text, why) in [
            ("crc-errors", "missing position"),
            ("crc-errors 1", "missing port"),
            ("crc-errors 1 0", "missing count"),
            ("crc-errors 1 0 5 6", "expected 4 word(s), got 5"),
            ("crc-errors 1 4 5", "port 4 must be 0..=3"),
            (
                "crc-errors 1 99999999999 5",
                "port 99999999999 must be 0..=3",
            ),
            ("crc-errors 1 0 0", "count 0 must be 1..=255"),
            ("crc-errors 1 0 256", "count 256 must be 1..=255"),
            (
                "crc-errors -1 0 1",
                "position \"-1\" is not a non-negative integer",
            ),
        ] {
            let e = text.parse::<FaultCommand>().unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
        for (text, why) in [
            (
                "crc-errors 3 0 1",
                "position 3 is outside the segment: positions 0..=2 (3 subdevices)",
            ),
            ("crc-errors 0 2 1", "port 2 of subdevice 0 has no link"),
            ("crc-errors 1 3 1", "port 3 of subdevice 1 has no link"),
            (
                "crc-errors 2 1 1",
                "port 1 of subdevice 2 has no link: it is the last subdevice",
            ),
        ] {
            let e = FaultCommand::parse_for(text, 3).unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
        assert_eq!(
            FaultCommand::parse_for("crc-errors 1 1 255", 3).unwrap(),
            FaultCommand::CrcErrors {
                position: 1,
                port: 1,
                count: 255
            }
        );
        assert!(FaultCommand::parse_for("crc-errors 0 0 1", 1).is_ok());
        assert!(FaultCommand::parse_for("crc-errors 0 1 1", 1).is_err());
    }

    #[test]
    fn an_error_quotes_a_long_input_only_in_part() {
        let long = format!("explode{}", "x".repeat(5000));
        let e = long.parse::<FaultCommand>().unwrap_err().to_string();
        assert!(e.len() < 300, "{} bytes", e.len());
        assert!(e.contains("unknown command"), "{e}");
        // Control characters are escaped: one line of text.
        let e = "link \u{1b}[2J\n"
            .parse::<FaultCommand>()
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\u{1b}') && !e.contains('\n'), "{e:?}");
    }

    #[test]
    fn device_faults_queue_is_bounded() {
        let f = Faults::new();
        for _ in 0..MAX_PENDING_DEVICE_FAULTS {
            f.try_apply(FaultCommand::PowerCycle).unwrap();
        }
        assert_eq!(f.try_apply(FaultCommand::PowerCycle), Err(QueueFull));
        assert_eq!(
            f.snapshot().pending_device_faults,
            MAX_PENDING_DEVICE_FAULTS
        );
        let mut out = Vec::new();
        f.take_device_faults(&mut out);
        assert_eq!(out.len(), MAX_PENDING_DEVICE_FAULTS);
        f.try_apply(FaultCommand::PowerCycle).unwrap();
    }

    #[test]
    fn values_built_in_code_do_not_overflow() {
        let f = Faults::new();
        f.apply(FaultCommand::DelayUs(u64::MAX));
        assert_eq!(f.delay_ns(), u64::MAX);
        f.apply(FaultCommand::DropFraction(7.0));
        assert_eq!(f.drop_ppm(), 1_000_000);
        f.apply(FaultCommand::DropFraction(f64::NAN));
        assert_eq!(f.drop_ppm(), 0);
    }

    #[test]
    fn countdowns_stop_at_zero() {
        let f = Faults::new();
        f.apply(FaultCommand::DropNext(2));
        assert!(f.take_drop());
        assert!(f.take_drop());
        assert!(!f.take_drop());
    }
}
