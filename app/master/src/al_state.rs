//! AL states by name: the state codes a subdevice reports in its AL status register 0x0130
//! (ETG.1000.6 Table 9) and the texts of its AL status codes 0x0134 (ETG.1000.6 Table 11). A
//! leaf: the cycle's health judgement, the application API, the bus tools and the recoveries
//! all name states and codes without importing one another.

use ethercrab::EtherCrabWireRead;

/// No state read.
pub const NONE: u8 = 0x00;
/// INIT.
pub const INIT: u8 = 0x01;
/// PRE-OP.
pub const PRE_OP: u8 = 0x02;
/// BOOT.
pub const BOOT: u8 = 0x03;
/// SAFE-OP.
pub const SAFE_OP: u8 = 0x04;
/// OP.
pub const OP: u8 = 0x08;
/// The error indicator bit of the AL status (0x0130 bit 4), set beside the state.
pub const ERROR: u8 = 0x10;

/// The state of a code without the error indicator (`0x14`, SAFE-OP + error: SAFE-OP).
pub const fn state(code: u8) -> u8 {
    code & 0x0f
}

/// The text of an AL status code (ETG.1000.6 Table 11). ethercrab's `AlStatusCode` names the
/// codes of the table's older revision; the ones it lacks are those of the current table as
/// SOEM's `ec_ALstatuscodelist` also lists them (0x002E, 0x0052, 0x0070, 0x0080..0x0083);
/// 0x8000..0xFFFF are vendor specific.
pub fn al_status_text(code: u16) -> String {
    let extra = match code {
        0x002e => Some("Invalid input FMMU configuration"),
        0x0052 => Some("External hardware not ready"),
        0x0070 => Some("Detected module ident list does not match the configured one"),
        0x0080 => Some("Supply voltage too low"),
        0x0081 => Some("Supply voltage too high"),
        0x0082 => Some("Temperature too low"),
        0x0083 => Some("Temperature too high"),
        0x8000.. => Some("Vendor specific"),
        _ => None,
    };
    if let Some(t) = extra {
        return t.to_string();
    }
    match ethercrab::AlStatusCode::unpack_from_slice(&code.to_le_bytes()) {
        Ok(ethercrab::AlStatusCode::Unknown(_)) | Err(_) => "Unknown code (reserved)".into(),
        // Its Display is "0x001b: Sync manager watchdog"; the code is shown separately.
        Ok(c) => {
            let s = c.to_string();
            s.split_once(": ").map_or(s.clone(), |(_, t)| t.to_string())
        }
    }
}
