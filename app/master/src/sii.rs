//! The Slave Information Interface (SII) EEPROM image decoded: identity, mailbox, strings,
//! General, FMMU, SyncManager, TxPDO/RxPDO and DC categories (ETG.2010, "EtherCAT Slave
//! Information Interface", §2 word layout and §3 categories).
//!
//! Written here rather than taken from ethercrab, which reads these categories for its own
//! configuration but keeps its parser private. The image comes from the wire, so every length is
//! checked against the bytes present: a truncated or inconsistent image gives a [`SiiError`]
//! naming the category and offset, never a panic, and nothing is allocated beyond the image's
//! own size.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Category types (ETG.2010 Table 3).
pub mod category {
    /// Strings.
    pub const STRINGS: u16 = 10;
    /// Data types (rarely used).
    pub const DATA_TYPES: u16 = 20;
    /// General information.
    pub const GENERAL: u16 = 30;
    /// FMMU usage.
    pub const FMMU: u16 = 40;
    /// Sync manager configuration.
    pub const SYNC_MANAGER: u16 = 41;
    /// TxPDO descriptions (inputs).
    pub const TXPDO: u16 = 50;
    /// RxPDO descriptions (outputs).
    pub const RXPDO: u16 = 51;
    /// Distributed clock operation modes.
    pub const DC: u16 = 60;
    /// End of the category list.
    pub const END: u16 = 0xffff;
}

/// Word address of the first category header.
const FIRST_CATEGORY_WORD: usize = 0x40;

/// What can be wrong with an SII image.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SiiError {
    /// Shorter than the fixed area (words 0x00..0x40).
    #[error("SII image is {0} bytes, shorter than the 128-byte fixed area")]
    TooShort(usize),
    /// A category runs past the end of the image.
    #[error("SII category {kind} at word {word:#06x}: {words} words run past the end of the image")]
    CategoryOverrun {
        /// Category type.
        kind: u16,
        /// Word address of its header.
        word: usize,
        /// Its declared length in words.
        words: usize,
    },
    /// A category's content does not fit its declared length.
    #[error("SII category {kind} at word {word:#06x}: {what}")]
    BadCategory {
        /// Category type.
        kind: u16,
        /// Word address of its header.
        word: usize,
        /// What is inconsistent.
        what: String,
    },
}

/// Mailbox protocols a subdevice supports (SII word 0x1C, ETG.2010 Table 2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MailboxProtocols {
    /// ADS over EtherCAT.
    pub aoe: bool,
    /// Ethernet over EtherCAT.
    pub eoe: bool,
    /// CANopen over EtherCAT.
    pub coe: bool,
    /// File access over EtherCAT.
    pub foe: bool,
    /// Servo drive profile over EtherCAT.
    pub soe: bool,
    /// Vendor specific.
    pub voe: bool,
}

impl MailboxProtocols {
    /// Decode the bit field.
    pub fn from_bits(w: u16) -> Self {
        MailboxProtocols {
            aoe: w & 0x01 != 0,
            eoe: w & 0x02 != 0,
            coe: w & 0x04 != 0,
            foe: w & 0x08 != 0,
            soe: w & 0x10 != 0,
            voe: w & 0x20 != 0,
        }
    }

    /// The protocols as a list of names (`CoE`, `FoE`, ...).
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.aoe, "AoE"),
            (self.eoe, "EoE"),
            (self.coe, "CoE"),
            (self.foe, "FoE"),
            (self.soe, "SoE"),
            (self.voe, "VoE"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect()
    }
}

/// One mailbox (offset and size in the ESC's memory).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Mailbox {
    /// Receive mailbox (master to subdevice): offset.
    pub rx_offset: u16,
    /// Receive mailbox size in bytes.
    pub rx_size: u16,
    /// Send mailbox (subdevice to master): offset.
    pub tx_offset: u16,
    /// Send mailbox size in bytes.
    pub tx_size: u16,
}

/// The General category (ETG.2010 Table 5), with its string indices resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct General {
    /// Group name (`strings[group_idx]`).
    pub group: Option<String>,
    /// Image name.
    pub image: Option<String>,
    /// Order number (`EL2008`).
    pub order: Option<String>,
    /// Device name (`EL2008 8Ch. Dig. Output 24V, 0.5A`).
    pub name: Option<String>,
    /// CoE details bit field (SDO info, PDO assign, PDO config, upload at startup, complete access).
    pub coe_details: u8,
    /// FoE details.
    pub foe_details: u8,
    /// EoE details.
    pub eoe_details: u8,
    /// Flags (bit 0: enable SAFE-OP, bit 1: enable not LRW).
    pub flags: u8,
    /// Current consumption on the E-bus in mA (negative: feeds current).
    pub ebus_current_ma: i16,
    /// Physical port types, one nibble per port 0..3 (0 none, 1 MII, 2 reserved, 3 EBUS, 4 fast hot connect).
    pub ports: u16,
}

/// How an FMMU is used (FMMU category).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FmmuUsage {
    /// Not used.
    Unused,
    /// Maps outputs.
    Outputs,
    /// Maps inputs.
    Inputs,
    /// Maps the SyncManager status (mailbox polling).
    SyncManagerStatus,
    /// A value the standard does not define.
    Other(u8),
}

/// What a sync manager carries (SyncManager category, type byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SmUsage {
    /// Not used.
    Unused,
    /// Mailbox, master to subdevice.
    MailboxOut,
    /// Mailbox, subdevice to master.
    MailboxIn,
    /// Process data outputs.
    Outputs,
    /// Process data inputs.
    Inputs,
    /// A value the standard does not define.
    Other(u8),
}

/// One sync manager as the SII describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SyncManager {
    /// Start address in the ESC memory.
    pub start: u16,
    /// Length in bytes (0 for process data SMs sized by the PDOs).
    pub length: u16,
    /// Control register value.
    pub control: u8,
    /// Enable byte (bit 0: enabled).
    pub enable: u8,
    /// What it carries.
    pub usage: SmUsage,
}

/// Direction of a PDO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// TxPDO: subdevice to master (inputs of the master).
    Inputs,
    /// RxPDO: master to subdevice (outputs of the master).
    Outputs,
}

/// One PDO entry (8 bytes in the SII).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PdoEntry {
    /// Object index (0 for a padding gap).
    pub index: u16,
    /// Subindex.
    pub subindex: u8,
    /// Name, if the SII gives one.
    pub name: Option<String>,
    /// CoE data type code (ETG.1000.6 Table 64: 0x01 BOOL, 0x07 UNSIGNED32, 0x08 REAL32, ...).
    pub data_type: u8,
    /// Length in bits.
    pub bits: u8,
}

/// One PDO with its entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pdo {
    /// PDO index (0x1600.. outputs, 0x1A00.. inputs).
    pub index: u16,
    /// Inputs or outputs.
    pub direction: Direction,
    /// Sync manager it is assigned to by default (0xff: not assigned).
    pub sync_manager: u8,
    /// Name, if the SII gives one.
    pub name: Option<String>,
    /// Flags (bit 0 mandatory, bit 1 default, bit 4 fixed content, ...).
    pub flags: u16,
    /// Its entries, in mapping order.
    pub entries: Vec<PdoEntry>,
}

impl Pdo {
    /// Sum of the entries' bit lengths.
    pub fn bits(&self) -> u32 {
        self.entries.iter().map(|e| u32::from(e.bits)).sum()
    }
}

/// One DC operation mode (DC category, 24 bytes, ETG.2010 Table 10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DcMode {
    /// SYNC0 cycle time in ns (0: the master's cycle).
    pub cycle_time_0: u32,
    /// SYNC0 shift in ns.
    pub shift_time_0: u32,
    /// SYNC1 shift in ns.
    pub shift_time_1: u32,
    /// SYNC1 cycle factor.
    pub sync1_cycle_factor: i16,
    /// AssignActivate word written to 0x0980.
    pub assign_activate: u16,
    /// SYNC0 cycle factor.
    pub sync0_cycle_factor: i16,
    /// Name of the mode.
    pub name: Option<String>,
}

/// A decoded SII image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Sii {
    /// Configured station alias (word 0x04).
    pub alias: u16,
    /// Vendor ID (word 0x08).
    pub vendor_id: u32,
    /// Product code (word 0x0A).
    pub product_code: u32,
    /// Revision number (word 0x0C).
    pub revision: u32,
    /// Serial number (word 0x0E).
    pub serial: u32,
    /// Standard mailbox (words 0x18..0x1B); `None` without a mailbox.
    pub mailbox: Option<Mailbox>,
    /// Bootstrap mailbox (words 0x14..0x17); `None` without one.
    pub bootstrap_mailbox: Option<Mailbox>,
    /// Supported mailbox protocols (word 0x1C).
    pub protocols: MailboxProtocols,
    /// EEPROM size in bytes (word 0x3E).
    pub eeprom_bytes: u32,
    /// SII version (word 0x3F).
    pub version: u16,
    /// The string table (index 1 is `strings[0]`).
    pub strings: Vec<String>,
    /// General category.
    pub general: Option<General>,
    /// FMMU usage, one per FMMU.
    pub fmmus: Vec<FmmuUsage>,
    /// Sync managers, in order.
    pub sync_managers: Vec<SyncManager>,
    /// TxPDOs then RxPDOs, in the order of the image.
    pub pdos: Vec<Pdo>,
    /// DC operation modes.
    pub dc: Vec<DcMode>,
    /// Categories the decoder does not interpret: (type, length in words).
    pub other_categories: Vec<(u16, usize)>,
}

fn word(img: &[u8], w: usize) -> u16 {
    u16::from_le_bytes([img[2 * w], img[2 * w + 1]])
}

fn dword(img: &[u8], w: usize) -> u32 {
    u32::from(word(img, w)) | (u32::from(word(img, w + 1)) << 16)
}

/// The FMMU category (ETG.2010): one usage byte per FMMU (0xff pads an odd count to
/// whole words).
fn parse_fmmus(data: &[u8]) -> Vec<FmmuUsage> {
    let mut fmmus: Vec<FmmuUsage> = data
        .iter()
        .map(|&b| match b {
            0 => FmmuUsage::Unused,
            1 => FmmuUsage::Outputs,
            2 => FmmuUsage::Inputs,
            3 => FmmuUsage::SyncManagerStatus,
            o => FmmuUsage::Other(o),
        })
        .collect();
    if fmmus.last() == Some(&FmmuUsage::Other(0xff)) {
        fmmus.pop();
    }
    fmmus
}

/// The sync manager category (ETG.2010): 8 bytes per sync manager.
fn parse_sync_managers(data: &[u8]) -> Vec<SyncManager> {
    data.chunks_exact(8)
        .map(|c| SyncManager {
            start: u16::from_le_bytes([c[0], c[1]]),
            length: u16::from_le_bytes([c[2], c[3]]),
            control: c[4],
            enable: c[6],
            usage: match c[7] {
                0 => SmUsage::Unused,
                1 => SmUsage::MailboxOut,
                2 => SmUsage::MailboxIn,
                3 => SmUsage::Outputs,
                4 => SmUsage::Inputs,
                o => SmUsage::Other(o),
            },
        })
        .collect()
}

/// Words of the fixed area a reader needs before it knows where the categories end.
pub const FIXED_AREA_BYTES: usize = 2 * FIRST_CATEGORY_WORD;

impl Sii {
    /// Decode an image (as read from the EEPROM, byte-addressed, little endian). Bytes after the
    /// end category are ignored; a missing end category ends the list at the image's end.
    pub fn parse(img: &[u8]) -> Result<Sii, SiiError> {
        if img.len() < FIXED_AREA_BYTES {
            return Err(SiiError::TooShort(img.len()));
        }
        let mbx = |w: usize| {
            let m = Mailbox {
                rx_offset: word(img, w),
                rx_size: word(img, w + 1),
                tx_offset: word(img, w + 2),
                tx_size: word(img, w + 3),
            };
            (m.rx_size != 0 && m.tx_size != 0).then_some(m)
        };
        let mut sii = Sii {
            alias: word(img, 0x04),
            vendor_id: dword(img, 0x08),
            product_code: dword(img, 0x0a),
            revision: dword(img, 0x0c),
            serial: dword(img, 0x0e),
            bootstrap_mailbox: mbx(0x14),
            mailbox: mbx(0x18),
            protocols: MailboxProtocols::from_bits(word(img, 0x1c)),
            eeprom_bytes: (u32::from(word(img, 0x3e)) + 1) * 128,
            version: word(img, 0x3f),
            ..Sii::default()
        };
        let mut w = FIRST_CATEGORY_WORD;
        let mut general_raw = None;
        let mut pdo_raw = Vec::new();
        let mut dc_raw = None;
        while 2 * w + 4 <= img.len() {
            let kind = word(img, w);
            if kind == category::END {
                break;
            }
            let words = usize::from(word(img, w + 1));
            let start = 2 * (w + 2);
            let end = start + 2 * words;
            if end > img.len() {
                return Err(SiiError::CategoryOverrun {
                    kind,
                    word: w,
                    words,
                });
            }
            let data = &img[start..end];
            match kind {
                category::STRINGS => sii.strings = parse_strings(data, w)?,
                category::GENERAL => general_raw = Some((data, w)),
                category::FMMU => sii.fmmus = parse_fmmus(data),
                category::SYNC_MANAGER => sii.sync_managers = parse_sync_managers(data),
                category::TXPDO => pdo_raw.push((data, w, Direction::Inputs)),
                category::RXPDO => pdo_raw.push((data, w, Direction::Outputs)),
                category::DC => dc_raw = Some(data),
                other => sii.other_categories.push((other, words)),
            }
            w += 2 + words;
        }
        // Names are resolved once the string table is known (it may come after them).
        if let Some((g, at)) = general_raw {
            sii.general = Some(sii.parse_general(g, at)?);
        }
        for (data, at, direction) in pdo_raw {
            let pdos = sii.parse_pdos(data, at, direction)?;
            sii.pdos.extend(pdos);
        }
        if let Some(d) = dc_raw {
            sii.dc = sii.parse_dc(d);
        }
        Ok(sii)
    }

    /// The general category (ETG.2010 Table 5), its strings resolved.
    fn parse_general(&self, g: &[u8], at: usize) -> Result<General, SiiError> {
        if g.len() < 18 {
            return Err(SiiError::BadCategory {
                kind: category::GENERAL,
                word: at,
                what: format!("{} bytes, at least 18 expected", g.len()),
            });
        }
        Ok(General {
            group: self.string(g[0]),
            image: self.string(g[1]),
            order: self.string(g[2]),
            name: self.string(g[3]),
            coe_details: g[5],
            foe_details: g[6],
            eoe_details: g[7],
            flags: g[11],
            ebus_current_ma: i16::from_le_bytes([g[12], g[13]]),
            ports: u16::from_le_bytes([g[16], g[17]]),
        })
    }

    /// A TxPDO or RxPDO category (ETG.2010): PDOs of 8 bytes, each followed by its
    /// entries of 8 bytes.
    fn parse_pdos(
        &self,
        data: &[u8],
        at: usize,
        direction: Direction,
    ) -> Result<Vec<Pdo>, SiiError> {
        let kind = match direction {
            Direction::Inputs => category::TXPDO,
            Direction::Outputs => category::RXPDO,
        };
        let mut pdos = Vec::new();
        let mut p = 0;
        while p + 8 <= data.len() {
            let n = usize::from(data[p + 2]);
            let entries_end = p + 8 + 8 * n;
            if entries_end > data.len() {
                return Err(SiiError::BadCategory {
                    kind,
                    word: at,
                    what: format!(
                        "PDO {:#06x} declares {n} entries, more than the category holds",
                        u16::from_le_bytes([data[p], data[p + 1]])
                    ),
                });
            }
            let entries = data[p + 8..entries_end]
                .chunks_exact(8)
                .map(|e| PdoEntry {
                    index: u16::from_le_bytes([e[0], e[1]]),
                    subindex: e[2],
                    name: self.string(e[3]),
                    data_type: e[4],
                    bits: e[5],
                })
                .collect();
            pdos.push(Pdo {
                index: u16::from_le_bytes([data[p], data[p + 1]]),
                direction,
                sync_manager: data[p + 3],
                name: self.string(data[p + 5]),
                flags: u16::from_le_bytes([data[p + 6], data[p + 7]]),
                entries,
            });
            p = entries_end;
        }
        Ok(pdos)
    }

    /// The DC category (ETG.2010 Table 10): operation modes of 24 bytes.
    fn parse_dc(&self, d: &[u8]) -> Vec<DcMode> {
        d.chunks_exact(24)
            .map(|c| DcMode {
                cycle_time_0: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                shift_time_0: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                shift_time_1: u32::from_le_bytes([c[8], c[9], c[10], c[11]]),
                sync1_cycle_factor: i16::from_le_bytes([c[12], c[13]]),
                assign_activate: u16::from_le_bytes([c[14], c[15]]),
                sync0_cycle_factor: i16::from_le_bytes([c[16], c[17]]),
                name: self.string(c[18]),
            })
            .collect()
    }

    /// String `idx` of the string table (1-based; 0 = no string).
    pub fn string(&self, idx: u8) -> Option<String> {
        idx.checked_sub(1)
            .and_then(|i| self.strings.get(usize::from(i)))
            .cloned()
    }

    /// The device name: General's name, else its order number, else the first string.
    pub fn device_name(&self) -> Option<&str> {
        self.general
            .as_ref()
            .and_then(|g| g.name.as_deref().or(g.order.as_deref()))
            .or(self.strings.first().map(String::as_str))
    }

    /// The PDOs assigned by default to sync managers, in one direction.
    pub fn default_pdos(&self, direction: Direction) -> impl Iterator<Item = &Pdo> {
        self.pdos
            .iter()
            .filter(move |p| p.direction == direction && p.sync_manager != 0xff)
    }
}

fn parse_strings(data: &[u8], at: usize) -> Result<Vec<String>, SiiError> {
    let Some((&n, mut rest)) = data.split_first() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(usize::from(n));
    for i in 0..n {
        let Some((&len, tail)) = rest.split_first() else {
            return Err(SiiError::BadCategory {
                kind: category::STRINGS,
                word: at,
                what: format!("declares {n} strings, holds {i}"),
            });
        };
        let len = usize::from(len);
        if tail.len() < len {
            return Err(SiiError::BadCategory {
                kind: category::STRINGS,
                word: at,
                what: format!("string {} is {len} bytes, {} left", i + 1, tail.len()),
            });
        }
        // ETG.2010 strings are ASCII; anything else is shown, not refused.
        out.push(String::from_utf8_lossy(&tail[..len]).into_owned());
        rest = &tail[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_the_simulators_image() {
        let spec = ecsim::SegmentSpec::reference();
        let img = ecsim::sii::build_image(&spec.devices[0]).unwrap();
        let s = Sii::parse(&img).unwrap();
        assert_eq!(s.vendor_id, spec.devices[0].vendor_id);
        assert_eq!(s.product_code, spec.devices[0].product_id);
        assert_eq!(s.device_name(), Some(spec.devices[0].name.as_str()));
        let out_bits: u32 = s.default_pdos(Direction::Outputs).map(Pdo::bits).sum();
        let in_bits: u32 = s.default_pdos(Direction::Inputs).map(Pdo::bits).sum();
        assert_eq!(out_bits, u32::from(spec.devices[0].outputs) * 8);
        assert_eq!(in_bits, u32::from(spec.devices[0].inputs) * 8);
        assert!(!s.sync_managers.is_empty());
    }

    #[test]
    fn truncated_categories_are_errors() {
        let spec = ecsim::SegmentSpec::reference();
        let img = ecsim::sii::build_image(&spec.devices[0]).unwrap();
        // Cut inside the first category.
        let e = Sii::parse(&img[..FIXED_AREA_BYTES + 6]).unwrap_err();
        assert!(matches!(e, SiiError::CategoryOverrun { .. }), "{e}");
        assert!(Sii::parse(&img[..100]).is_err());
    }

    proptest! {
        #[test]
        fn any_image_decodes_or_errors(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = Sii::parse(&bytes);
        }

        #[test]
        fn mutated_images_never_panic(pos in 0usize..2048, b in any::<u8>()) {
            let spec = ecsim::SegmentSpec::reference();
            let mut img = ecsim::sii::build_image(&spec.devices[1]).unwrap();
            let p = pos % img.len();
            img[p] = b;
            let _ = Sii::parse(&img);
        }
    }
}
