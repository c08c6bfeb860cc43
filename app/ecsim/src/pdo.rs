//! The process data objects of a simulated device: PDOs, their entries, names and data types, as
//! the SII TxPDO/RxPDO categories carry them (ETG.2010, categories TxPDO 50 and RxPDO 51).
//!
//! A device either lists its PDOs in the segment description (`[[device.txpdo]]`,
//! `[[device.rxpdo]]`) or gets the generated default ([`default_pdos`]): entries of up to 4 bytes,
//! at most 64 per PDO, named "Input 1".. / "Output 1".. within their PDO.

use std::fmt;

/// An entry's data type: the basic data types a PDO entry maps, with the codes of the data type
/// area of the object dictionary (ETG.1000.6, the same as CiA 301 "object dictionary data
/// types") and their bit widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// BOOLEAN (0x0001), 1 bit.
    Bool,
    /// INTEGER8 (0x0002).
    Int8,
    /// INTEGER16 (0x0003).
    Int16,
    /// INTEGER24 (0x0010).
    Int24,
    /// INTEGER32 (0x0004).
    Int32,
    /// INTEGER64 (0x0015).
    Int64,
    /// UNSIGNED8 (0x0005).
    Unsigned8,
    /// UNSIGNED16 (0x0006).
    Unsigned16,
    /// UNSIGNED24 (0x0016).
    Unsigned24,
    /// UNSIGNED32 (0x0007).
    Unsigned32,
    /// UNSIGNED64 (0x001B).
    Unsigned64,
    /// REAL32 (0x0008).
    Real32,
    /// REAL64 (0x0011).
    Real64,
}

impl DataType {
    /// Every type, in the order the segment description documents them.
    pub const ALL: [DataType; 13] = [
        DataType::Bool,
        DataType::Int8,
        DataType::Int16,
        DataType::Int24,
        DataType::Int32,
        DataType::Int64,
        DataType::Unsigned8,
        DataType::Unsigned16,
        DataType::Unsigned24,
        DataType::Unsigned32,
        DataType::Unsigned64,
        DataType::Real32,
        DataType::Real64,
    ];

    /// The data type code written in the SII PDO entry (the object dictionary index of the type).
    pub fn code(self) -> u8 {
        match self {
            DataType::Bool => 0x01,
            DataType::Int8 => 0x02,
            DataType::Int16 => 0x03,
            DataType::Int32 => 0x04,
            DataType::Unsigned8 => 0x05,
            DataType::Unsigned16 => 0x06,
            DataType::Unsigned32 => 0x07,
            DataType::Real32 => 0x08,
            DataType::Int24 => 0x10,
            DataType::Real64 => 0x11,
            DataType::Int64 => 0x15,
            DataType::Unsigned24 => 0x16,
            DataType::Unsigned64 => 0x1b,
        }
    }

    /// The type of a data type code, if it is one of these.
    pub fn from_code(code: u8) -> Option<DataType> {
        DataType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// Width in bits.
    pub fn bits(self) -> u8 {
        match self {
            DataType::Bool => 1,
            DataType::Int8 | DataType::Unsigned8 => 8,
            DataType::Int16 | DataType::Unsigned16 => 16,
            DataType::Int24 | DataType::Unsigned24 => 24,
            DataType::Int32 | DataType::Unsigned32 | DataType::Real32 => 32,
            DataType::Int64 | DataType::Unsigned64 | DataType::Real64 => 64,
        }
    }

    /// The name used in segment descriptions (`type = "INT16"`).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int24 => "INT24",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Unsigned8 => "UNSIGNED8",
            DataType::Unsigned16 => "UNSIGNED16",
            DataType::Unsigned24 => "UNSIGNED24",
            DataType::Unsigned32 => "UNSIGNED32",
            DataType::Unsigned64 => "UNSIGNED64",
            DataType::Real32 => "REAL32",
            DataType::Real64 => "REAL64",
        }
    }

    /// The type named `name` (exactly as [`DataType::name`] spells it).
    pub fn from_name(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of a PDO: a mapped object (index:subindex) or padding (index 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdoEntrySpec {
    /// Object index; 0 = padding (a gap of `bits` bits).
    pub index: u16,
    /// Object subindex (0 for padding).
    pub sub: u8,
    /// Width in bits: the type's width, or the gap of a padding entry.
    pub bits: u8,
    /// Data type; `None` for padding.
    pub data_type: Option<DataType>,
    /// Name (SII string); `None` for padding.
    pub name: Option<String>,
}

impl PdoEntrySpec {
    /// Whether this entry is padding (no object behind it).
    pub fn is_padding(&self) -> bool {
        self.index == 0
    }
}

/// One PDO: its mapping index (0x16xx outputs, 0x1Axx inputs), name and entries in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdoSpec {
    pub index: u16,
    pub name: String,
    pub entries: Vec<PdoEntrySpec>,
}

impl PdoSpec {
    /// Total width of the PDO's entries in bits.
    pub fn bits(&self) -> u32 {
        self.entries.iter().map(|e| u32::from(e.bits)).sum()
    }
}

/// Direction of a PDO list, from the master's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// RxPDO (0x1600..=0x17FF): the master writes them, the device receives.
    Outputs,
    /// TxPDO (0x1A00..=0x1BFF): the device transmits, the master reads.
    Inputs,
}

impl Direction {
    /// The mapping-object range of this direction (the object dictionary areas of ETG.1000.6 and
    /// CiA 301: RxPDO mapping 0x1600..0x17FF, TxPDO mapping 0x1A00..0x1BFF).
    pub fn index_range(self) -> std::ops::RangeInclusive<u16> {
        match self {
            Direction::Outputs => 0x1600..=0x17ff,
            Direction::Inputs => 0x1a00..=0x1bff,
        }
    }

    /// First object index of the generated default entries (the device profile areas of
    /// ETG.1000.6: 0x6000 inputs, 0x7000 outputs).
    fn default_object(self) -> u16 {
        match self {
            Direction::Outputs => 0x7000,
            Direction::Inputs => 0x6000,
        }
    }

    /// The key of the list in the segment description.
    pub fn key(self) -> &'static str {
        match self {
            Direction::Outputs => "rxpdo",
            Direction::Inputs => "txpdo",
        }
    }

    /// Byte-count field of the device in the segment description.
    pub fn bytes_key(self) -> &'static str {
        match self {
            Direction::Outputs => "outputs",
            Direction::Inputs => "inputs",
        }
    }

    fn noun(self) -> (&'static str, &'static str) {
        match self {
            Direction::Outputs => ("Outputs", "Output"),
            Direction::Inputs => ("Inputs", "Input"),
        }
    }
}

/// PDOs a direction may have: ethercrab 0.7 reads a device's PDOs of one direction into a
/// `heapless::Vec<Pdo, 64>` (`subdevice/eeprom.rs`, `pdos`); a 65th fails with
/// `Error::Capacity(Item::Pdo)`.
pub const MAX_PDOS: usize = 64;
/// Entries one PDO may have: the entry count is one byte in the SII PDO header (ETG.2010).
pub const MAX_ENTRIES_PER_PDO: usize = 255;
/// Entries (both directions) one device may list: keeps its SII image within 64 KiB.
pub const MAX_ENTRIES: usize = 2048;

/// Entries of up to 4 bytes per default PDO: 64, as before names were added.
const DEFAULT_ENTRIES_PER_PDO: usize = 64;

/// The generated PDOs of a device with `bytes` of process data in `dir`: PDO n (0x1600+n or
/// 0x1A00+n) holds up to 64 entries of 4 bytes (the last one shorter) mapping object
/// 0x7000+n / 0x6000+n, subindex 1, 2, ...; PDOs are named "Outputs" / "Inputs" (numbered
/// "Outputs 1".. when there are several) and entries "Output 1".. / "Input 1".., numbered within
/// their PDO so that a device's strings stay within the 255 an SII holds.
pub fn default_pdos(bytes: u16, dir: Direction) -> Vec<PdoSpec> {
    let (pdo_noun, entry_noun) = dir.noun();
    let n_pdos = usize::from(bytes)
        .div_ceil(4)
        .div_ceil(DEFAULT_ENTRIES_PER_PDO);
    let mut remaining = bytes;
    let mut pdos = Vec::with_capacity(n_pdos);
    for n in 0..n_pdos as u16 {
        let mut entries = Vec::new();
        while remaining > 0 && entries.len() < DEFAULT_ENTRIES_PER_PDO {
            let size = remaining.min(4) as u8;
            remaining -= u16::from(size);
            let data_type = match size {
                1 => DataType::Unsigned8,
                2 => DataType::Unsigned16,
                3 => DataType::Unsigned24,
                _ => DataType::Unsigned32,
            };
            entries.push(PdoEntrySpec {
                index: dir.default_object() + n,
                sub: entries.len() as u8 + 1,
                bits: size * 8,
                data_type: Some(data_type),
                name: Some(format!("{entry_noun} {}", entries.len() + 1)),
            });
        }
        pdos.push(PdoSpec {
            index: *dir.index_range().start() + n,
            name: if n_pdos == 1 {
                pdo_noun.to_string()
            } else {
                format!("{pdo_noun} {}", n + 1)
            },
            entries,
        });
    }
    pdos
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_code(t.code()), Some(t));
            assert_eq!(DataType::from_name(t.name()), Some(t));
        }
        assert_eq!(DataType::from_name("bool"), None);
        assert_eq!(DataType::from_code(0), None);
    }

    #[test]
    fn defaults_keep_the_layout_of_unnamed_images() {
        // 22 bytes: one PDO of 5 UNSIGNED32 and one UNSIGNED16, as the reference segment had.
        let p = default_pdos(22, Direction::Inputs);
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].index, p[0].name.as_str()), (0x1a00, "Inputs"));
        let bits: Vec<u8> = p[0].entries.iter().map(|e| e.bits).collect();
        assert_eq!(bits, [32, 32, 32, 32, 32, 16]);
        assert_eq!(p[0].entries[5].data_type, Some(DataType::Unsigned16));
        assert_eq!(p[0].entries[0].name.as_deref(), Some("Input 1"));
        assert_eq!((p[0].entries[5].index, p[0].entries[5].sub), (0x6000, 6));
        // 2048 bytes: 8 PDOs of 64 entries.
        let p = default_pdos(2048, Direction::Outputs);
        assert_eq!(p.len(), 8);
        assert!(p.iter().all(|p| p.entries.len() == 64));
        assert_eq!((p[7].index, p[7].name.as_str()), (0x1607, "Outputs 8"));
        assert_eq!(p[7].entries[63].index, 0x7007);
        assert_eq!(p.iter().map(PdoSpec::bits).sum::<u32>(), 2048 * 8);
        assert!(default_pdos(0, Direction::Inputs).is_empty());
        let tail = default_pdos(7, Direction::Inputs);
        assert_eq!(
            tail[0].entries[1].data_type,
            Some(DataType::Unsigned24),
            "a 3-byte tail is UNSIGNED24"
        );
    }
}
