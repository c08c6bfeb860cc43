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
    /// Decrement the WKC of the logical datagrams of the next N frames.
    CorruptWkc(u32),
    /// Clear every persistent fault (drops, fraction, delay, link down, WKC corruption).
    Clear,
}

#[derive(Debug, Error, PartialEq)]
#[error("fault command {input:?}: {why}")]
pub struct FaultParseError {
    pub input: String,
    pub why: String,
}

impl std::str::FromStr for FaultCommand {
    type Err = FaultParseError;

    /// Text form used by the control socket and the CLI:
    /// `drop-next N`, `drop-fraction F`, `delay-us N`, `link up|down`,
    /// `subdevice-error POS CODE` (CODE decimal or 0x hex), `power-cycle`, `corrupt-wkc N`, `clear`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| FaultParseError {
            input: s.to_string(),
            why: why.to_string(),
        };
        let words: Vec<&str> = s.split_whitespace().collect();
        let int = |w: Option<&&str>, what: &str| -> Result<u64, FaultParseError> {
            let w = w.ok_or_else(|| err(&format!("missing {what}")))?;
            let parsed = if let Some(h) = w.strip_prefix("0x") {
                u64::from_str_radix(h, 16)
            } else {
                w.parse()
            };
            parsed.map_err(|_| err(&format!("{what} {w:?} is not a non-negative integer")))
        };
        let cmd = match words.first().copied() {
            Some("drop-next") => {
                let n = int(words.get(1), "count")?;
                FaultCommand::DropNext(
                    u32::try_from(n).map_err(|_| err("count must fit in 32 bits"))?,
                )
            }
            Some("drop-fraction") => {
                let w = words.get(1).ok_or_else(|| err("missing fraction"))?;
                let f: f64 = w
                    .parse()
                    .map_err(|_| err(&format!("fraction {w:?} is not a number")))?;
                if !(0.0..=1.0).contains(&f) {
                    return Err(err("fraction must be within 0..=1"));
                }
                FaultCommand::DropFraction(f)
            }
            Some("delay-us") => {
                let n = int(words.get(1), "delay")?;
                if n > 10_000_000 {
                    return Err(err("delay must be at most 10000000 us"));
                }
                FaultCommand::DelayUs(n)
            }
            Some("link") => match words.get(1).copied() {
                Some("up") => FaultCommand::Link(true),
                Some("down") => FaultCommand::Link(false),
                _ => return Err(err("expected `link up` or `link down`")),
            },
            Some("subdevice-error") => {
                let position = int(words.get(1), "position")? as usize;
                let code = int(words.get(2), "AL status code")?;
                let code =
                    u16::try_from(code).map_err(|_| err("AL status code must fit in 16 bits"))?;
                FaultCommand::SubdeviceError { position, code }
            }
            Some("power-cycle") => FaultCommand::PowerCycle,
            Some("corrupt-wkc") => {
                let n = int(words.get(1), "count")?;
                FaultCommand::CorruptWkc(
                    u32::try_from(n).map_err(|_| err("count must fit in 32 bits"))?,
                )
            }
            Some("clear") => FaultCommand::Clear,
            Some(other) => return Err(err(&format!("unknown command {other:?}"))),
            None => return Err(err("empty command")),
        };
        let expected_words = match cmd {
            FaultCommand::PowerCycle | FaultCommand::Clear => 1,
            FaultCommand::SubdeviceError { .. } => 3,
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

/// A device-level fault waiting for the processing thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceFault {
    Error { position: usize, code: u16 },
    PowerCycle,
}

#[derive(Debug, Default)]
struct State {
    drop_next: AtomicU32,
    /// Fraction of responses to drop, in parts per million.
    drop_ppm: AtomicU32,
    delay_ns: AtomicU64,
    link_down: AtomicBool,
    corrupt_wkc_next: AtomicU32,
    device_pending: AtomicBool,
    device_faults: Mutex<Vec<DeviceFault>>,
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

    pub fn apply(&self, cmd: FaultCommand) {
        let s = &self.s;
        match cmd {
            FaultCommand::DropNext(n) => s.drop_next.store(n, Ordering::Release),
            FaultCommand::DropFraction(f) => s
                .drop_ppm
                .store((f * 1_000_000.0).round() as u32, Ordering::Release),
            FaultCommand::DelayUs(us) => s.delay_ns.store(us * 1000, Ordering::Release),
            FaultCommand::Link(up) => s.link_down.store(!up, Ordering::Release),
            FaultCommand::SubdeviceError { position, code } => {
                self.queue(DeviceFault::Error { position, code })
            }
            FaultCommand::PowerCycle => self.queue(DeviceFault::PowerCycle),
            FaultCommand::CorruptWkc(n) => s.corrupt_wkc_next.store(n, Ordering::Release),
            FaultCommand::Clear => {
                s.drop_next.store(0, Ordering::Release);
                s.drop_ppm.store(0, Ordering::Release);
                s.delay_ns.store(0, Ordering::Release);
                s.link_down.store(false, Ordering::Release);
                s.corrupt_wkc_next.store(0, Ordering::Release);
            }
        }
    }

    fn queue(&self, f: DeviceFault) {
        // A poisoned lock only means another thread panicked while pushing; the Vec is intact.
        let mut q = self
            .s
            .device_faults
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        q.push(f);
        self.s.device_pending.store(true, Ordering::Release);
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
            ("power-cycle now", "expected 1 word"),
        ] {
            let e = text.parse::<FaultCommand>().unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
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
