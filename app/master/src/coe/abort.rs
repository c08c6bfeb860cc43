//! SDO abort codes and their texts: ETG.1000.6 Table 41 (the same codes as CiA 301 §7.2.4.3.17,
//! which adds the block-transfer codes EtherCAT does not use; those are named too, as a device
//! that ported a CANopen stack may send them).

/// Every abort code the standards define, with its text as the tables word it.
pub const ABORT_CODES: &[(u32, &str)] = &[
    (0x0503_0000, "Toggle bit not changed"),
    (0x0504_0000, "SDO protocol timeout"),
    (
        0x0504_0001,
        "Client/Server command specifier not valid or unknown",
    ),
    (0x0504_0002, "Invalid block size (block mode only)"),
    (0x0504_0003, "Invalid sequence number (block mode only)"),
    (0x0504_0004, "CRC error (block mode only)"),
    (0x0504_0005, "Out of memory"),
    (0x0601_0000, "Unsupported access to an object"),
    (0x0601_0001, "Attempt to read a write only object"),
    (0x0601_0002, "Attempt to write a read only object"),
    (
        0x0601_0003,
        "Subindex cannot be written, SI0 must be 0 for write access",
    ),
    (
        0x0601_0004,
        "SDO Complete access not supported for objects of variable length such as ENUM object types",
    ),
    (0x0601_0005, "Object length exceeds mailbox size"),
    (0x0601_0006, "Object mapped to RxPDO, SDO Download blocked"),
    (
        0x0602_0000,
        "The object does not exist in the object directory",
    ),
    (0x0604_0041, "The object can not be mapped into the PDO"),
    (
        0x0604_0042,
        "The number and length of the objects to be mapped would exceed the PDO length",
    ),
    (0x0604_0043, "General parameter incompatibility reason"),
    (
        0x0604_0047,
        "General internal incompatibility in the device",
    ),
    (0x0606_0000, "Access failed due to a hardware error"),
    (
        0x0607_0010,
        "Data type does not match, length of service parameter does not match",
    ),
    (
        0x0607_0012,
        "Data type does not match, length of service parameter too high",
    ),
    (
        0x0607_0013,
        "Data type does not match, length of service parameter too low",
    ),
    (0x0609_0011, "Subindex does not exist"),
    (
        0x0609_0030,
        "Value range of parameter exceeded (only for write access)",
    ),
    (0x0609_0031, "Value of parameter written too high"),
    (0x0609_0032, "Value of parameter written too low"),
    (0x0609_0036, "Maximum value is less than minimum value"),
    (0x0800_0000, "General error"),
    (
        0x0800_0020,
        "Data cannot be transferred or stored to the application",
    ),
    (
        0x0800_0021,
        "Data cannot be transferred or stored to the application because of local control",
    ),
    (
        0x0800_0022,
        "Data cannot be transferred or stored to the application because of the present device state",
    ),
    (
        0x0800_0023,
        "Object dictionary dynamic generation fails or no object dictionary is present",
    ),
    (0x0800_0024, "No data available"),
];

/// The text of an abort code; codes no table defines are "unknown abort code" (vendors use the
/// manufacturer-specific range too).
pub fn abort_text(code: u32) -> &'static str {
    ABORT_CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("unknown abort code", |(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_sorted() {
        for w in ABORT_CODES.windows(2) {
            assert!(w[0].0 < w[1].0, "{:#010x} before {:#010x}", w[0].0, w[1].0);
        }
    }

    #[test]
    fn texts() {
        assert_eq!(
            abort_text(0x0602_0000),
            "The object does not exist in the object directory"
        );
        assert_eq!(
            abort_text(0x0609_0030),
            "Value range of parameter exceeded (only for write access)"
        );
        assert_eq!(abort_text(0x1234_5678), "unknown abort code");
    }
}
