//! Error codes of 0x603F as text.
//!
//! The codes are the emergency error codes of CiA 301 §7.2.7.1 (the classes by the high byte)
//! with the drive-specific ones of IEC 61800-7-201 Annex (CiA 402 part 2, "error code" table)
//! that ETG.6010 §11 takes over for EtherCAT drives. A code not in the table is named by its class,
//! with "device specific" for 0xFFxx, which manufacturers fill from their own manual.

/// The common codes, sorted by code (binary search).
const TABLE: &[(u16, &str)] = &[
    (0x0000, "no error"),
    (0x1000, "generic error"),
    (0x2110, "short circuit/earth leakage (input)"),
    (0x2200, "internal current"),
    (0x2220, "continuous over-current (device internal)"),
    (0x2250, "short circuit (device internal)"),
    (0x2300, "current on device output side"),
    (0x2310, "continuous over-current"),
    (0x2311, "continuous over-current no. 1"),
    (0x2320, "short circuit/earth leakage (motor side)"),
    (0x2330, "earth leakage (motor side)"),
    (0x2340, "short circuit (motor side)"),
    (0x3100, "mains voltage"),
    (0x3110, "mains over-voltage"),
    (0x3120, "mains under-voltage"),
    (0x3130, "phase failure"),
    (0x3200, "DC link voltage"),
    (0x3210, "DC link over-voltage"),
    (0x3220, "DC link under-voltage"),
    (0x3230, "load error"),
    (0x4000, "temperature"),
    (0x4100, "ambient temperature"),
    (0x4200, "device temperature"),
    (0x4210, "excess temperature device"),
    (0x4300, "drive temperature"),
    (0x4310, "excess temperature drive"),
    (0x5000, "device hardware"),
    (0x5100, "supply voltage"),
    (0x5112, "supply low voltage (+24 V)"),
    (0x5400, "power section"),
    (0x5441, "contact 1 (safe torque off)"),
    (0x5500, "data storage"),
    (0x5530, "EEPROM"),
    (0x6000, "device software"),
    (0x6010, "software reset (watchdog)"),
    (0x6100, "internal software"),
    (0x6320, "parameter error"),
    (0x7000, "additional modules"),
    (0x7100, "power"),
    (0x7110, "brake chopper"),
    (0x7120, "motor"),
    (0x7121, "motor blocked"),
    (0x7122, "motor error or commutation malfunction"),
    (0x7300, "sensor"),
    (0x7303, "resolver 1 fault"),
    (0x7305, "incremental sensor 1 fault"),
    (0x7500, "communication"),
    (0x7510, "serial interface no. 1"),
    (0x8000, "monitoring"),
    (0x8110, "CAN overrun (objects lost)"),
    (0x8130, "life guard error or heartbeat error"),
    (0x8400, "velocity speed controller"),
    (0x8500, "position controller"),
    (0x8600, "positioning controller"),
    (0x8611, "following error"),
    (0x8612, "reference limit"),
    (0x8700, "sync controller"),
    (0x8A00, "position controller (deviation)"),
    (0x9000, "external error"),
    (0xF000, "additional functions"),
];

/// The text of an error code: the table's entry, or the class of the code.
pub fn error_text(code: u16) -> &'static str {
    if let Ok(i) = TABLE.binary_search_by_key(&code, |&(c, _)| c) {
        return TABLE[i].1;
    }
    if code >= 0xFF00 {
        return "device specific";
    }
    match code >> 12 {
        0x1 => "generic error",
        0x2 => "current",
        0x3 => "voltage",
        0x4 => "temperature",
        0x5 => "device hardware",
        0x6 => "device software",
        0x7 => "additional modules",
        0x8 => "monitoring",
        0x9 => "external error",
        0xF => "additional functions",
        _ => "unknown error code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_for_the_search() {
        assert!(TABLE.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn known_codes_and_classes() {
        assert_eq!(error_text(0x8611), "following error");
        assert_eq!(error_text(0x2310), "continuous over-current");
        assert_eq!(error_text(0x3211), "voltage");
        assert_eq!(error_text(0xFF12), "device specific");
        assert_eq!(error_text(0x0001), "unknown error code");
    }
}
