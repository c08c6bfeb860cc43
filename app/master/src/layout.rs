//! The process-data layout: for every subdevice, the PDOs in effect and, for every entry, its
//! index:subindex, name, data type and bit position in the process image.
//!
//! Built at every (re)initialisation in PRE-OP, from the mapping the subdevice will run with —
//! the same sources, in the same order, as ethercrab 0.7.1 uses to size the sync managers
//! (`SubDevice::configure_fmmus`): for a subdevice with CoE the assignment objects 0x1C10+n of
//! each process-data sync manager n (0x1C12 outputs, 0x1C13 inputs) and the mapping objects they
//! list (0x16xx / 0x1Axx, each sub n = index << 16 | subindex << 8 | bits, ETG.1000.6 §5.6.7.4),
//! otherwise the SII TxPDO/RxPDO categories' PDOs with a sync manager. After OP the master checks
//! that each subdevice's image has exactly the layout's size.
//!
//! The image the application sees (see [`crate::image`]) holds all inputs in position order, then
//! (separately) all outputs; [`Entry::bit_offset`] is the bit position in that image.

use crate::sii::Sii;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Schema name of the JSON form (`rtcat pdos --json`).
pub const LAYOUT_SCHEMA: &str = "rtcat.layout/1";

/// A `&'static str` serde does not try to borrow from the input (the value is one of ours).
pub type Static = &'static str;

/// [`LAYOUT_SCHEMA`] read back: a layout of another schema is refused, not misread.
fn schema<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let s = String::deserialize(d)?;
    if s == LAYOUT_SCHEMA {
        Ok(LAYOUT_SCHEMA)
    } else {
        Err(serde::de::Error::custom(format!(
            "schema {s:?}: this rtcat reads {LAYOUT_SCHEMA:?}"
        )))
    }
}

/// An entry's CoE data type (ETG.1000.6 Table 64), as far as the master interprets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DataType {
    /// BOOLEAN (0x01) and BIT1 (0x30).
    Bool,
    /// INTEGER8 (0x02).
    Int8,
    /// INTEGER16 (0x03).
    Int16,
    /// INTEGER32 (0x04).
    Int32,
    /// INTEGER64 (0x15).
    Int64,
    /// UNSIGNED8 (0x05).
    Unsigned8,
    /// UNSIGNED16 (0x06).
    Unsigned16,
    /// UNSIGNED32 (0x07).
    Unsigned32,
    /// UNSIGNED64 (0x1B).
    Unsigned64,
    /// REAL32 (0x08).
    Real32,
    /// REAL64 (0x11).
    Real64,
    /// BIT2..BIT8 (0x31..0x37): an unsigned bit field.
    Bits,
    /// Any other code, or unknown (0: the mapping came over CoE without a description).
    Other(u8),
}

impl DataType {
    /// From a CoE data type code.
    pub fn from_code(code: u8) -> Self {
        match code {
            0x01 | 0x30 => DataType::Bool,
            0x02 => DataType::Int8,
            0x03 => DataType::Int16,
            0x04 => DataType::Int32,
            0x15 => DataType::Int64,
            0x05 => DataType::Unsigned8,
            0x06 => DataType::Unsigned16,
            0x07 => DataType::Unsigned32,
            0x1b => DataType::Unsigned64,
            0x08 => DataType::Real32,
            0x11 => DataType::Real64,
            0x31..=0x37 => DataType::Bits,
            c => DataType::Other(c),
        }
    }

    /// Whether the data type says floating point.
    pub fn is_float(self) -> bool {
        matches!(self, DataType::Real32 | DataType::Real64)
    }

    /// Whether the master knows what the type is (not [`DataType::Other`]).
    pub fn is_known(self) -> bool {
        !matches!(self, DataType::Other(_))
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataType::Bool => f.write_str("BOOL"),
            DataType::Int8 => f.write_str("INT8"),
            DataType::Int16 => f.write_str("INT16"),
            DataType::Int32 => f.write_str("INT32"),
            DataType::Int64 => f.write_str("INT64"),
            DataType::Unsigned8 => f.write_str("UINT8"),
            DataType::Unsigned16 => f.write_str("UINT16"),
            DataType::Unsigned32 => f.write_str("UINT32"),
            DataType::Unsigned64 => f.write_str("UINT64"),
            DataType::Real32 => f.write_str("REAL32"),
            DataType::Real64 => f.write_str("REAL64"),
            DataType::Bits => f.write_str("BITS"),
            DataType::Other(0) => f.write_str("?"),
            DataType::Other(c) => write!(f, "type {c:#04x}"),
        }
    }
}

pub use crate::sii::Direction;

/// One mapped entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Position of the subdevice.
    pub position: u16,
    /// The PDO it is mapped in.
    pub pdo: u16,
    /// Object index (0: a padding gap, never resolved).
    pub index: u16,
    /// Subindex.
    pub subindex: u8,
    /// Name: from the SII, else `0xIIII:SS`.
    pub name: String,
    /// Name of the PDO it is mapped in, if the SII gives one (`Channel 1`).
    pub pdo_name: Option<String>,
    /// Bit position in the direction's process image (all subdevices' inputs, or outputs).
    pub bit_offset: u32,
    /// Length in bits.
    pub bits: u8,
    /// Data type.
    pub data_type: DataType,
    /// Inputs or outputs.
    pub direction: Direction,
}

impl Entry {
    /// `0xIIII:SS`.
    pub fn address(&self) -> String {
        format!("{:#06x}:{:02x}", self.index, self.subindex)
    }

    /// `PDO name.entry name` (`Channel 1.Input`), or the entry name when the PDO has none: the
    /// way TwinCAT and IgH's tool tell apart entries of the same name in different PDOs.
    pub fn qualified_name(&self) -> String {
        match &self.pdo_name {
            Some(p) => format!("{p}.{}", self.name),
            None => self.name.clone(),
        }
    }

    /// Whether `name` names this entry: its name or its qualified name.
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name
            || self
                .pdo_name
                .as_deref()
                .and_then(|p| name.strip_prefix(p))
                .and_then(|r| r.strip_prefix('.'))
                == Some(self.name.as_str())
    }
}

/// One PDO in effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pdo {
    /// PDO index.
    pub index: u16,
    /// Name from the SII, if any.
    pub name: Option<String>,
    /// Sync manager it is assigned to.
    pub sync_manager: u8,
    /// Inputs or outputs.
    pub direction: Direction,
    /// Indices into [`Layout::entries`].
    pub entries: std::ops::Range<usize>,
}

/// Where the mapping of a subdevice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingSource {
    /// CoE objects 0x1C1n and 0x16xx/0x1Axx.
    Coe,
    /// The SII PDO categories.
    Sii,
}

/// Identity of a subdevice (SII words 0x08..0x0F).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Vendor ID.
    pub vendor_id: u32,
    /// Product code.
    pub product_code: u32,
    /// Revision number.
    pub revision: u32,
    /// Serial number.
    pub serial: u32,
}

/// One subdevice in the layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subdevice {
    /// Position in the segment (0 = first after the master).
    pub position: u16,
    /// Configured station address.
    pub address: u16,
    /// Station alias.
    pub alias: u16,
    /// Name (SII).
    pub name: String,
    /// Identity.
    pub identity: Identity,
    /// Whether it speaks CoE.
    pub coe: bool,
    /// Where its mapping came from.
    pub mapping: MappingSource,
    /// Byte offset of its inputs in the input image, and their length.
    pub input_offset: u32,
    /// Input bytes.
    pub input_bytes: u32,
    /// Byte offset of its outputs in the output image.
    pub output_offset: u32,
    /// Output bytes.
    pub output_bytes: u32,
    /// Its PDOs (indices into [`Layout::pdos`]).
    pub pdos: std::ops::Range<usize>,
}

/// The whole layout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// [`LAYOUT_SCHEMA`].
    #[serde(deserialize_with = "schema")]
    pub schema: Static,
    /// Changes at every (re)initialisation: accessors of an older layout no longer apply.
    pub generation: u32,
    /// Input image size in bytes.
    pub input_bytes: u32,
    /// Output image size in bytes.
    pub output_bytes: u32,
    /// Subdevices in position order.
    pub subdevices: Vec<Subdevice>,
    /// All PDOs, subdevice by subdevice.
    pub pdos: Vec<Pdo>,
    /// All entries, PDO by PDO.
    pub entries: Vec<Entry>,
}

/// What is wrong with a layout or a lookup in it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// No entry has this name (or address).
    #[error("no {direction} entry {what}{hint}")]
    NotFound {
        /// Inputs or outputs.
        direction: &'static str,
        /// The name or address asked for.
        what: String,
        /// Close names, if any.
        hint: String,
    },
    /// Several entries have this name: ask by position and index:subindex.
    #[error(
        "{direction} entry name {name:?} is used by {count} entries ({positions}): qualify it \
         with its PDO name (`PDO.entry`), give the position, or use index:subindex"
    )]
    Ambiguous {
        /// Inputs or outputs.
        direction: &'static str,
        /// The name.
        name: String,
        /// How many entries have it.
        count: usize,
        /// Their positions.
        positions: String,
    },
    /// The type asked for does not fit the entry.
    #[error("entry {entry} is {bits} bits of {data_type}; it cannot be read as {asked}")]
    Type {
        /// The entry (`name (position P, 0xIIII:SS)`).
        entry: String,
        /// Its bits.
        bits: u8,
        /// Its data type.
        data_type: DataType,
        /// The Rust type asked for.
        asked: &'static str,
    },
    /// The mapping read from a subdevice is inconsistent.
    #[error("subdevice {position} ({name}): {what}")]
    Mapping {
        /// Position.
        position: u16,
        /// Name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// After OP, the image ethercrab configured differs from the layout.
    #[error(
        "subdevice {position} ({name}): the mapping read gives {layout_in} input and \
         {layout_out} output bytes, but the configured image has {image_in} and {image_out}"
    )]
    SizeMismatch {
        /// Position.
        position: u16,
        /// Name.
        name: String,
        /// Input bytes per the layout.
        layout_in: u32,
        /// Output bytes per the layout.
        layout_out: u32,
        /// Input bytes in the image.
        image_in: usize,
        /// Output bytes in the image.
        image_out: usize,
    },
}

/// One PDO as read from a subdevice, before the layout places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdoSource {
    /// PDO index.
    pub index: u16,
    /// Name, if known.
    pub name: Option<String>,
    /// Sync manager.
    pub sync_manager: u8,
    /// Direction.
    pub direction: Direction,
    /// Entries: (index, subindex, bits, name, data type code).
    pub entries: Vec<(u16, u8, u8, Option<String>, u8)>,
}

/// A subdevice as read in PRE-OP, before the layout places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubdeviceSource {
    /// Station address.
    pub address: u16,
    /// Alias.
    pub alias: u16,
    /// Name.
    pub name: String,
    /// Identity.
    pub identity: Identity,
    /// Speaks CoE.
    pub coe: bool,
    /// Where the PDOs came from.
    pub mapping: MappingSource,
    /// PDOs in sync manager order, then assignment order.
    pub pdos: Vec<PdoSource>,
}

impl SubdeviceSource {
    /// The PDOs of an SII image: those assigned to a sync manager by default, in SM order
    /// (outputs and inputs each), as ethercrab sizes the SMs without CoE.
    pub fn pdos_from_sii(sii: &Sii) -> Vec<PdoSource> {
        let mut out: Vec<PdoSource> = sii
            .pdos
            .iter()
            .filter(|p| p.sync_manager != 0xff)
            .map(|p| PdoSource {
                index: p.index,
                name: p.name.clone(),
                sync_manager: p.sync_manager,
                direction: p.direction,
                entries: p
                    .entries
                    .iter()
                    .map(|e| (e.index, e.subindex, e.bits, e.name.clone(), e.data_type))
                    .collect(),
            })
            .collect();
        // Stable: keeps the SII order within one sync manager.
        out.sort_by_key(|p| p.sync_manager);
        out
    }

    /// Name and data type of an entry from the SII's PDO descriptions, for a mapping read over
    /// CoE (which carries only index, subindex and length).
    pub fn describe_from_sii(sii: &Sii, index: u16, subindex: u8) -> (Option<String>, u8) {
        sii.pdos
            .iter()
            .flat_map(|p| p.entries.iter())
            .find(|e| e.index == index && e.subindex == subindex)
            .map_or((None, 0), |e| (e.name.clone(), e.data_type))
    }
}

impl Layout {
    /// Place the subdevices' PDOs in the image. Each sync manager's data starts on a byte
    /// boundary (an SM's length is whole bytes, ethercrab rounds each up).
    pub fn build(generation: u32, subs: &[SubdeviceSource]) -> Result<Layout, LayoutError> {
        let mut l = Layout {
            schema: LAYOUT_SCHEMA,
            generation,
            ..Layout::default()
        };
        let (mut in_bits_total, mut out_bits_total) = (0u64, 0u64);
        for (pos, s) in subs.iter().enumerate() {
            let position = u16::try_from(pos).map_err(|_| LayoutError::Mapping {
                position: u16::MAX,
                name: s.name.clone(),
                what: "more than 65535 subdevices".into(),
            })?;
            let pdo_start = l.pdos.len();
            let (in_start, out_start) = (in_bits_total, out_bits_total);
            for dir in [Direction::Inputs, Direction::Outputs] {
                let total = match dir {
                    Direction::Inputs => &mut in_bits_total,
                    Direction::Outputs => &mut out_bits_total,
                };
                let mut sm: Option<u8> = None;
                for p in s.pdos.iter().filter(|p| p.direction == dir) {
                    if sm.is_some_and(|m| m != p.sync_manager) {
                        *total = total.div_ceil(8) * 8;
                    }
                    sm = Some(p.sync_manager);
                    let e0 = l.entries.len();
                    for (index, subindex, bits, name, dt) in &p.entries {
                        l.entries.push(Entry {
                            position,
                            pdo: p.index,
                            index: *index,
                            subindex: *subindex,
                            name: name
                                .clone()
                                .filter(|n| !n.is_empty())
                                .unwrap_or_else(|| format!("{index:#06x}:{subindex:02x}")),
                            pdo_name: p.name.clone().filter(|n| !n.is_empty()),
                            bit_offset: u32::try_from(*total).unwrap_or(u32::MAX),
                            bits: *bits,
                            data_type: DataType::from_code(*dt),
                            direction: dir,
                        });
                        *total += u64::from(*bits);
                    }
                    l.pdos.push(Pdo {
                        index: p.index,
                        name: p.name.clone(),
                        sync_manager: p.sync_manager,
                        direction: dir,
                        entries: e0..l.entries.len(),
                    });
                }
                *total = total.div_ceil(8) * 8;
            }
            let bytes = |a: u64, b: u64| u32::try_from((b - a) / 8).unwrap_or(u32::MAX);
            l.subdevices.push(Subdevice {
                position,
                address: s.address,
                alias: s.alias,
                name: s.name.clone(),
                identity: s.identity,
                coe: s.coe,
                mapping: s.mapping,
                input_offset: (in_start / 8) as u32,
                input_bytes: bytes(in_start, in_bits_total),
                output_offset: (out_start / 8) as u32,
                output_bytes: bytes(out_start, out_bits_total),
                pdos: pdo_start..l.pdos.len(),
            });
        }
        l.input_bytes = (in_bits_total / 8) as u32;
        l.output_bytes = (out_bits_total / 8) as u32;
        Ok(l)
    }

    /// Input bytes per subdevice, in position order.
    pub fn input_sizes(&self) -> Vec<usize> {
        self.subdevices
            .iter()
            .map(|s| s.input_bytes as usize)
            .collect()
    }

    /// Output bytes per subdevice, in position order.
    pub fn output_sizes(&self) -> Vec<usize> {
        self.subdevices
            .iter()
            .map(|s| s.output_bytes as usize)
            .collect()
    }

    /// Inputs plus outputs, in bytes.
    pub fn pdi_bytes(&self) -> usize {
        self.input_bytes as usize + self.output_bytes as usize
    }

    /// The entries of one subdevice.
    pub fn entries_of(&self, position: u16) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(move |e| e.position == position)
    }

    fn find(
        &self,
        dir: Direction,
        mut pred: impl FnMut(&Entry) -> bool,
    ) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(move |e| e.direction == dir && e.index != 0 && pred(e))
    }

    /// The entry called `name` (its name, or `PDO name.entry name`) in direction `dir`, in the
    /// whole segment or only at `position`; an error if none or several are.
    pub fn by_name(
        &self,
        dir: Direction,
        position: Option<u16>,
        name: &str,
    ) -> Result<&Entry, LayoutError> {
        let here = |e: &Entry| position.is_none_or(|p| e.position == p);
        let found: Vec<&Entry> = self.find(dir, |e| here(e) && e.is_named(name)).collect();
        let at = position.map_or(String::new(), |p| format!(" at position {p}"));
        match found.as_slice() {
            [one] => Ok(one),
            [] => {
                let close: Vec<String> = self
                    .find(dir, |e| {
                        here(e)
                            && (e.name.eq_ignore_ascii_case(name)
                                || e.qualified_name().contains(name))
                    })
                    .map(Entry::qualified_name)
                    .take(5)
                    .collect();
                Err(LayoutError::NotFound {
                    direction: dir_name(dir),
                    what: format!("named {name:?}{at}"),
                    hint: if close.is_empty() {
                        String::new()
                    } else {
                        format!(" (similar: {})", close.join(", "))
                    },
                })
            }
            many => Err(LayoutError::Ambiguous {
                direction: dir_name(dir),
                name: name.to_string(),
                count: many.len(),
                positions: many
                    .iter()
                    .map(|e| format!("{} {}", e.position, e.qualified_name()))
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The entry `index:subindex` of the subdevice at `position`.
    pub fn by_address(
        &self,
        dir: Direction,
        position: u16,
        index: u16,
        subindex: u8,
    ) -> Result<&Entry, LayoutError> {
        self.find(dir, |e| {
            e.position == position && e.index == index && e.subindex == subindex
        })
        .next()
        .ok_or_else(|| LayoutError::NotFound {
            direction: dir_name(dir),
            what: format!("{index:#06x}:{subindex:02x} at position {position}"),
            hint: String::new(),
        })
    }

    /// Expected working counter of one cycle: ethercrab lays the group's image out as all
    /// inputs (in position order) then all outputs, and sends it as LRWs of at most `chunk`
    /// bytes; a subdevice counts in every LRW that touches its area (+1 for inputs read, +2 for
    /// outputs written, ETG.1000.4 Table 24), so a subdevice whose area straddles two frames
    /// counts twice. Returns the total and each subdevice's share: (from reading its inputs,
    /// from writing its outputs).
    pub fn wkc(&self, chunk: usize) -> (u32, Vec<(u32, u32)>) {
        self.wkc_of(self.subdevices.len(), chunk)
    }

    /// [`Layout::wkc`] of the first `present` subdevices, those of ethercrab's group: the
    /// members of optional groups absent at bring-up that follow them are not in its image
    /// (their data is rtcat's own region's, judged per member) and have no share in it.
    pub fn wkc_of(&self, present: usize, chunk: usize) -> (u32, Vec<(u32, u32)>) {
        let n = self.subdevices.len();
        // (bytes of the image, subdevice, direction is outputs), in the order ethercrab lays them.
        let mut areas = Vec::with_capacity(2 * n);
        let mut off = 0usize;
        for out in [false, true] {
            for (i, s) in self.subdevices.iter().enumerate().take(present) {
                let len = if out { s.output_bytes } else { s.input_bytes } as usize;
                areas.push((off..off + len, i, out));
                off += len;
            }
        }
        let total = off;
        let mut share = vec![(0u32, 0u32); n];
        let mut start = 0;
        while start < total {
            let end = (start + chunk).min(total);
            for (r, i, out) in &areas {
                if !r.is_empty() && r.start < end && start < r.end {
                    if *out {
                        share[*i].1 += 2;
                    } else {
                        share[*i].0 += 1;
                    }
                }
            }
            start = end;
        }
        (share.iter().map(|(a, b)| a + b).sum(), share)
    }
}

fn dir_name(d: Direction) -> &'static str {
    match d {
        Direction::Inputs => "input",
        Direction::Outputs => "output",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Layout {
        /// A layout of whole-byte areas (one 8-bit entry per byte).
        fn from_sizes(generation: u32, inputs: &[usize], outputs: &[usize]) -> Layout {
            let subs: Vec<SubdeviceSource> = inputs
                .iter()
                .zip(outputs)
                .map(|(&i, &o)| SubdeviceSource {
                    address: 0,
                    alias: 0,
                    name: String::new(),
                    identity: Identity::default(),
                    coe: false,
                    mapping: MappingSource::Sii,
                    pdos: [(Direction::Inputs, i), (Direction::Outputs, o)]
                        .into_iter()
                        .filter(|&(_, n)| n > 0)
                        .map(|(direction, n)| PdoSource {
                            index: 0,
                            name: None,
                            sync_manager: if direction == Direction::Outputs {
                                2
                            } else {
                                3
                            },
                            direction,
                            entries: (0..n).map(|_| (0, 0, 8, None, 0)).collect(),
                        })
                        .collect(),
                })
                .collect();
            Layout::build(generation, &subs).expect("whole-byte areas always place")
        }
    }

    #[test]
    fn wkc_counts_devices_straddling_frames_twice() {
        let l = Layout::from_sizes(1, &[22; 3], &[22; 3]);
        assert_eq!(l.wkc(1100).0, 9);
        // 64 x 22: chunk boundaries fall between devices (1100 = 50 x 22).
        let l = Layout::from_sizes(1, &[22; 64], &[22; 64]);
        assert_eq!(l.wkc(1100).0, 192);
        // 64 x 23 in, 64 x 23 out = 2944 bytes: the boundary at 1100 falls inside input 47
        // (1081..1104) and the one at 2200 inside output 31 (2185..2208): +1 and +2.
        let l = Layout::from_sizes(1, &[23; 64], &[23; 64]);
        let (total, share) = l.wkc(1100);
        assert_eq!(total, 192 + 1 + 2);
        assert_eq!(share[47], (2, 2));
        assert_eq!(share[31], (1, 4));
        let l = Layout::from_sizes(1, &[0, 4], &[2, 0]);
        assert_eq!(l.wkc(1100).0, 3);
    }

    fn bits_device() -> SubdeviceSource {
        SubdeviceSource {
            address: 0x1001,
            alias: 0,
            name: "IO".into(),
            identity: Identity::default(),
            coe: false,
            mapping: MappingSource::Sii,
            pdos: vec![
                PdoSource {
                    index: 0x1a00,
                    name: Some("Inputs".into()),
                    sync_manager: 3,
                    direction: Direction::Inputs,
                    entries: (1..=3)
                        .map(|i| (0x6000, i, 1, Some(format!("In {i}")), 0x01))
                        .collect(),
                },
                PdoSource {
                    index: 0x1600,
                    name: None,
                    sync_manager: 2,
                    direction: Direction::Outputs,
                    entries: vec![(0x7000, 1, 16, Some("Speed".into()), 0x03)],
                },
            ],
        }
    }

    #[test]
    fn bits_are_placed_and_sms_rounded_to_bytes() {
        let l = Layout::build(7, &[bits_device(), bits_device()]).unwrap();
        assert_eq!((l.input_bytes, l.output_bytes), (2, 4));
        assert_eq!(l.subdevices[1].input_offset, 1);
        assert_eq!(l.subdevices[1].output_offset, 2);
        let e: Vec<u32> = l
            .entries
            .iter()
            .filter(|e| e.direction == Direction::Inputs)
            .map(|e| e.bit_offset)
            .collect();
        assert_eq!(e, [0, 1, 2, 8, 9, 10]);
        let err = l.by_name(Direction::Inputs, None, "In 2").unwrap_err();
        assert!(
            err.to_string().contains("(0 Inputs.In 2, 1 Inputs.In 2)"),
            "{err}"
        );
        let e = l
            .by_name(Direction::Inputs, Some(1), "Inputs.In 2")
            .unwrap();
        assert_eq!(e.bit_offset, 9);
        assert!(
            l.by_name(Direction::Inputs, Some(1), "Inputs.In 9")
                .is_err()
        );
        let e = l.by_address(Direction::Inputs, 1, 0x6000, 2).unwrap();
        assert_eq!(e.bit_offset, 9);
        let err = l.by_name(Direction::Outputs, None, "speed").unwrap_err();
        assert!(err.to_string().contains("similar: Speed"), "{err}");
    }
}
