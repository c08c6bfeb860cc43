//! The BOOT state (ETG.1000.6 §6.4.1, AL state 3): a device runs its bootloader, which serves
//! FoE only (firmware), through the bootstrap mailbox the SII declares in words 0x14..0x17
//! (ETG.2010 Table 2) — a real device may place it elsewhere than its standard mailbox, and with
//! another size. BOOT is entered from INIT only and left to INIT only (ETG.1000.6 Table 98,
//! the AL state machine).
//!
//! The master writes the AL control register 0x0120 (state in bits 0..3, error acknowledge bit
//! 4) and polls the AL status 0x0130 (the state, bit 4 an error) and its code 0x0134 (ETG.1000.6
//! Table 11), as for every AL state change; the SM0/SM1 registers are written with the bootstrap
//! mailbox while the device is in INIT (the ESC takes an SM configuration while the SM is
//! disabled, ESC datasheet section II "SyncManager").

use super::Error;
use crate::mailbox::{Geometry, Port};
use std::time::{Duration, Instant};

/// AL control register.
pub const AL_CONTROL: u16 = 0x0120;
/// AL status register (then a reserved word, then the status code at 0x0134).
pub const AL_STATUS: u16 = 0x0130;

/// AL state INIT.
pub const INIT: u8 = 0x01;
/// AL state PRE-OP.
pub const PRE_OP: u8 = 0x02;
/// AL state BOOT.
pub const BOOT: u8 = 0x03;

fn state_name(s: u8) -> &'static str {
    match s {
        1 => "INIT",
        2 => "PRE-OP",
        3 => "BOOT",
        4 => "SAFE-OP",
        8 => "OP",
        _ => "an unknown state",
    }
}

fn bus(position: u16, what: &str) -> impl FnOnce(ethercrab::error::Error) -> Error {
    let what = what.to_string();
    move |e| Error::State {
        position,
        why: format!("{what}: {e}"),
    }
}

/// Request AL state `state` and wait up to `timeout` until the device is in it; an AL error
/// (the device refuses) is acknowledged and returned with its code.
pub fn request_state<P: Port>(
    port: &mut P,
    position: u16,
    state: u8,
    timeout: Duration,
) -> Result<(), Error> {
    let name = state_name(state);
    port.write(AL_CONTROL, &[state, 0])
        .map_err(bus(position, &format!("request {name} (FPWR 0x0120)")))?;
    let end = Instant::now() + timeout;
    loop {
        let mut s = [0u8; 6];
        port.read(AL_STATUS, &mut s)
            .map_err(bus(position, "AL status (FPRD 0x0130)"))?;
        let now = s[0] & 0x0f;
        if s[0] & 0x10 != 0 {
            let code = u16::from_le_bytes([s[4], s[5]]);
            // Acknowledge, so the device takes the next request (best effort).
            let _ = port.write(AL_CONTROL, &[now | 0x10, 0]);
            return Err(Error::State {
                position,
                why: format!(
                    "the device refused {name}: AL status code {code:#06x} ({}), it stays in {}",
                    al_code_text(code),
                    state_name(now)
                ),
            });
        }
        if now == state {
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(Error::State {
                position,
                why: format!(
                    "not in {name} within {} ms (AL status: {})",
                    timeout.as_millis(),
                    state_name(now)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The common AL status codes of a failed INIT → BOOT (ETG.1000.6 Table 11).
fn al_code_text(code: u16) -> &'static str {
    match code {
        0x0011 => "invalid requested state change",
        0x0012 => "unknown requested state",
        0x0013 => "bootstrap not supported",
        0x0014 => "no valid firmware",
        0x0015 => "invalid mailbox configuration (BOOT)",
        0x0016 => "invalid mailbox configuration",
        _ => "see ETG.1000.6 Table 11",
    }
}

/// Set SM0/SM1 to the mailbox `g` (the device in INIT): both disabled first (activate registers
/// 0x0806, 0x080E), then configured.
fn configure<P: Port>(port: &mut P, position: u16, g: &Geometry) -> Result<(), Error> {
    for reg in [0x0806u16, 0x080e] {
        port.write(reg, &[0])
            .map_err(bus(position, &format!("disable SM (FPWR {reg:#06x})")))?;
    }
    port.write(0x0800, &g.registers())
        .map_err(bus(position, "mailbox SM0/SM1 (FPWR 0x0800)"))
}

/// Take the device to BOOT: INIT, SM0/SM1 set to the bootstrap mailbox `boot`, BOOT.
pub fn enter<P: Port>(
    port: &mut P,
    position: u16,
    boot: &Geometry,
    timeout: Duration,
) -> Result<(), Error> {
    request_state(port, position, INIT, timeout)?;
    configure(port, position, boot)?;
    request_state(port, position, BOOT, timeout)
}

/// Take the device out of BOOT: to INIT (the only way out), then, when `standard` is given, back
/// to PRE-OP with SM0/SM1 set to its standard mailbox (as the rest of a tool's segment is).
pub fn leave<P: Port>(
    port: &mut P,
    position: u16,
    standard: Option<&Geometry>,
    timeout: Duration,
) -> Result<(), Error> {
    request_state(port, position, INIT, timeout)?;
    if let Some(g) = standard {
        configure(port, position, g)?;
        request_state(port, position, PRE_OP, timeout)?;
    }
    Ok(())
}
