//! The CoE object dictionary of a simulated device (ETG.1000.6 §5.6.1, CiA 301 §7.4): objects
//! (VAR, ARRAY, RECORD), their entries with data type, access and PDO mapping flags, values, and
//! the PDO assignment (0x1C12 / 0x1C13) and mapping (0x1600.. / 0x1A00..) that decide the
//! device's process data.
//!
//! The dictionary is built from the segment description ([`crate::spec::CoeSpec`]): the
//! communication objects are generated from the device's identity and PDOs, the application
//! objects come from `[[device.object]]`, and an object a PDO maps but the description does not
//! list is generated from the PDO entry (type and name), read-only for inputs.

use crate::esc::AlState;
use crate::pdo::{DataType, Direction};
use crate::spec::{CoeSpec, DeviceSpec};
use std::collections::BTreeMap;

/// SDO abort codes (ETG.1000.6 Table 41, the same as CiA 301 §7.2.4.3.17).
pub mod abort {
    pub const TOGGLE: u32 = 0x0503_0000;
    pub const COMMAND_UNKNOWN: u32 = 0x0504_0001;
    pub const WRITE_ONLY: u32 = 0x0601_0001;
    pub const READ_ONLY: u32 = 0x0601_0002;
    pub const NO_OBJECT: u32 = 0x0602_0000;
    pub const CANNOT_MAP: u32 = 0x0604_0041;
    pub const PDO_LENGTH: u32 = 0x0604_0042;
    pub const LENGTH_MISMATCH: u32 = 0x0607_0010;
    pub const LENGTH_TOO_HIGH: u32 = 0x0607_0012;
    pub const LENGTH_TOO_LOW: u32 = 0x0607_0013;
    pub const NO_SUBINDEX: u32 = 0x0609_0011;
    pub const VALUE_RANGE: u32 = 0x0609_0030;
    pub const GENERAL: u32 = 0x0800_0000;
    pub const STATE: u32 = 0x0800_0022;

    /// The text of an abort code (ETG.1000.6 Table 41).
    pub fn text(code: u32) -> &'static str {
        match code {
            TOGGLE => "toggle bit not changed",
            COMMAND_UNKNOWN => "client/server command specifier not valid or unknown",
            WRITE_ONLY => "attempt to read a write-only object",
            READ_ONLY => "attempt to write a read-only object",
            NO_OBJECT => "the object does not exist in the object dictionary",
            CANNOT_MAP => "the object cannot be mapped into the PDO",
            PDO_LENGTH => {
                "the number and length of the objects to be mapped would exceed the PDO length"
            }
            LENGTH_MISMATCH => {
                "data type does not match, length of service parameter does not match"
            }
            LENGTH_TOO_HIGH => "data type does not match, length of service parameter too high",
            LENGTH_TOO_LOW => "data type does not match, length of service parameter too low",
            NO_SUBINDEX => "subindex does not exist",
            VALUE_RANGE => "value range of parameter exceeded",
            STATE => "data cannot be transferred or stored because of the present device state",
            _ => "general error",
        }
    }
}

/// An entry's value type: a basic data type or a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    Basic(DataType),
    /// VISIBLE_STRING (0x0009).
    VisibleString,
    /// OCTET_STRING (0x000A).
    OctetString,
}

impl ValueType {
    /// The data type index of the object dictionary (ETG.1000.6 Table 63).
    pub fn code(self) -> u16 {
        match self {
            ValueType::Basic(t) => u16::from(t.code()),
            ValueType::VisibleString => 0x0009,
            ValueType::OctetString => 0x000a,
        }
    }

    /// The type named `name` in a segment description: the PDO entry names (`UNSIGNED16`) and
    /// the ESI spellings `UINT8`..`UINT64`, plus the two string types.
    pub fn from_name(name: &str) -> Option<ValueType> {
        let basic = match name {
            "UINT8" | "USINT" => Some(DataType::Unsigned8),
            "UINT16" | "UINT" => Some(DataType::Unsigned16),
            "UINT24" => Some(DataType::Unsigned24),
            "UINT32" | "UDINT" => Some(DataType::Unsigned32),
            "UINT64" | "ULINT" => Some(DataType::Unsigned64),
            "SINT" => Some(DataType::Int8),
            "INT" => Some(DataType::Int16),
            "DINT" => Some(DataType::Int32),
            "LINT" => Some(DataType::Int64),
            "REAL" => Some(DataType::Real32),
            "LREAL" => Some(DataType::Real64),
            _ => DataType::from_name(name),
        };
        match (basic, name) {
            (Some(t), _) => Some(ValueType::Basic(t)),
            (None, "VISIBLE_STRING") => Some(ValueType::VisibleString),
            (None, "OCTET_STRING") => Some(ValueType::OctetString),
            _ => None,
        }
    }

    /// Bytes of a value of this type in an SDO transfer (BOOL travels as one byte); `None` for
    /// strings (their length is the value's).
    pub fn sdo_bytes(self) -> Option<usize> {
        match self {
            ValueType::Basic(t) => Some(usize::from(t.bits()).div_ceil(8)),
            _ => None,
        }
    }
}

/// Who may access an entry (ETG.1000.6 Table 43, object access).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Ro,
    Rw,
    Wo,
    /// Read always, write only in PRE-OP (PDO assignment and mapping).
    RwPreOp,
}

impl Access {
    pub fn from_name(name: &str) -> Option<Access> {
        Some(match name {
            "ro" => Access::Ro,
            "rw" => Access::Rw,
            "wo" => Access::Wo,
            "rw_preop" => Access::RwPreOp,
            _ => return None,
        })
    }

    /// The object access bits of the entry description (ETG.1000.6 Table 47): bits 0..2 read in
    /// PRE-OP, SAFE-OP, OP, bits 3..5 write in PRE-OP, SAFE-OP, OP.
    pub fn flags(self) -> u16 {
        match self {
            Access::Ro => 0x0007,
            Access::Rw => 0x003f,
            Access::Wo => 0x0038,
            Access::RwPreOp => 0x000f,
        }
    }

    fn readable(self) -> bool {
        self != Access::Wo
    }
}

/// Object code (ETG.1000.6 Table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectCode {
    Var = 7,
    Array = 8,
    Record = 9,
}

/// One entry (subindex) of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub sub: u8,
    pub name: String,
    pub ty: ValueType,
    pub access: Access,
    /// The PDO direction it may be mapped into.
    pub mapping: Option<Direction>,
    /// Power-on value (little endian; BOOL as one byte 0/1).
    pub default: Vec<u8>,
    /// Inclusive value range of an integer entry.
    pub min: Option<i128>,
    pub max: Option<i128>,
    /// Stored for device replacement (backup) / a startup parameter ("setting"): the object
    /// lists of the SDO information service.
    pub backup: bool,
    pub setting: bool,
}

impl Entry {
    /// A read-only entry with a default and no range.
    pub fn ro(sub: u8, name: &str, ty: ValueType, default: Vec<u8>) -> Entry {
        Entry {
            sub,
            name: name.to_string(),
            ty,
            access: Access::Ro,
            mapping: None,
            default,
            min: None,
            max: None,
            backup: false,
            setting: false,
        }
    }

    /// Width in bits as the entry description and a PDO mapping give it.
    pub fn bits(&self, value: &[u8]) -> u16 {
        match self.ty {
            ValueType::Basic(t) => u16::from(t.bits()),
            _ => (value.len() * 8).min(usize::from(u16::MAX)) as u16,
        }
    }
}

/// One object: VAR (one entry, subindex 0), or ARRAY / RECORD (subindex 0 = the highest
/// subindex, then the entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub index: u16,
    pub name: String,
    pub code: ObjectCode,
    pub entries: Vec<Entry>,
}

impl Object {
    pub fn var(index: u16, name: &str, entry: Entry) -> Object {
        Object {
            index,
            name: name.to_string(),
            code: ObjectCode::Var,
            entries: vec![Entry { sub: 0, ..entry }],
        }
    }

    /// An ARRAY or RECORD with the given entries (subindex 0 is added, read-only, holding the
    /// highest subindex).
    pub fn compound(index: u16, name: &str, code: ObjectCode, entries: Vec<Entry>) -> Object {
        let highest = entries.iter().map(|e| e.sub).max().unwrap_or(0);
        let mut all = vec![Entry::ro(
            0,
            "SubIndex 000",
            ValueType::Basic(DataType::Unsigned8),
            vec![highest],
        )];
        all.extend(entries);
        Object {
            index,
            name: name.to_string(),
            code,
            entries: all,
        }
    }

    pub fn entry(&self, sub: u8) -> Option<&Entry> {
        self.entries.iter().find(|e| e.sub == sub)
    }

    /// The highest subindex (the data type of subindex 0 entries is UNSIGNED8).
    pub fn max_sub(&self) -> u8 {
        self.entries.iter().map(|e| e.sub).max().unwrap_or(0)
    }
}

/// What the dictionary knows about the process data of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PdoRules {
    /// 0x1C12 / 0x1C13 writable in PRE-OP.
    pub assignable: bool,
    /// Most PDOs the assignment holds.
    pub max_pdos: u8,
    /// Capacity of the sync manager buffer, bytes.
    pub buffer_bytes: u16,
}

/// Where a mapped entry sits in the process image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub dir: Direction,
    pub bit_offset: u32,
    pub bits: u16,
}

/// A device's object dictionary with its current values.
#[derive(Debug, Clone)]
pub struct Od {
    objects: BTreeMap<u16, Object>,
    values: BTreeMap<(u16, u8), Vec<u8>>,
    rules: [PdoRules; 2],
}

fn dir_slot(dir: Direction) -> usize {
    match dir {
        Direction::Outputs => 0,
        Direction::Inputs => 1,
    }
}

/// The assignment object of a direction (0x1C12 RxPDO assign, 0x1C13 TxPDO assign; ETG.1000.6
/// Table 67).
pub fn assign_index(dir: Direction) -> u16 {
    match dir {
        Direction::Outputs => 0x1c12,
        Direction::Inputs => 0x1c13,
    }
}

fn u8t() -> ValueType {
    ValueType::Basic(DataType::Unsigned8)
}
fn u16t() -> ValueType {
    ValueType::Basic(DataType::Unsigned16)
}
fn u32t() -> ValueType {
    ValueType::Basic(DataType::Unsigned32)
}

/// A mapping entry value: index << 16 | subindex << 8 | bits (CiA 301 §7.5.2.36).
pub fn mapping_value(index: u16, sub: u8, bits: u8) -> u32 {
    (u32::from(index) << 16) | (u32::from(sub) << 8) | u32::from(bits)
}

impl Od {
    /// The dictionary of a CoE device, every value at its default.
    pub fn build(d: &DeviceSpec, coe: &CoeSpec) -> Od {
        let mut objects = BTreeMap::new();
        let mut add = |o: Object| {
            objects.insert(o.index, o);
        };
        let vs = ValueType::VisibleString;
        add(Object::var(
            0x1000,
            "Device type",
            Entry::ro(0, "", u32t(), coe.device_type.to_le_bytes().to_vec()),
        ));
        add(Object::var(
            0x1008,
            "Device name",
            Entry::ro(0, "", vs, d.name.as_bytes().to_vec()),
        ));
        add(Object::var(
            0x1009,
            "Hardware version",
            Entry::ro(0, "", vs, coe.hardware_version.as_bytes().to_vec()),
        ));
        add(Object::var(
            0x100a,
            "Software version",
            Entry::ro(0, "", vs, coe.software_version.as_bytes().to_vec()),
        ));
        add(Object::compound(
            0x1018,
            "Identity",
            ObjectCode::Record,
            vec![
                Entry::ro(1, "Vendor ID", u32t(), d.vendor_id.to_le_bytes().to_vec()),
                Entry::ro(
                    2,
                    "Product code",
                    u32t(),
                    d.product_id.to_le_bytes().to_vec(),
                ),
                Entry::ro(3, "Revision", u32t(), d.revision.to_le_bytes().to_vec()),
                Entry::ro(4, "Serial number", u32t(), d.serial.to_le_bytes().to_vec()),
            ],
        ));
        // SM0 mailbox out, SM1 mailbox in, SM2 outputs, SM3 inputs (ETG.1000.6 Table 67).
        add(Object::compound(
            0x1c00,
            "Sync manager type",
            ObjectCode::Array,
            (1..=4)
                .map(|k| Entry::ro(k, &format!("SubIndex {k:03}"), u8t(), vec![k]))
                .collect(),
        ));
        let mut rules = [PdoRules {
            assignable: false,
            max_pdos: 0,
            buffer_bytes: coe.pdo_buffer_bytes,
        }; 2];
        for dir in [Direction::Outputs, Direction::Inputs] {
            let pdos: Vec<_> = coe.pdos.iter().filter(|p| p.dir == dir).collect();
            let assignable = pdos.iter().any(|p| p.assignable);
            rules[dir_slot(dir)] = PdoRules {
                assignable,
                max_pdos: pdos.len() as u8,
                buffer_bytes: coe.pdo_buffer_bytes,
            };
            let access = if assignable {
                Access::RwPreOp
            } else {
                Access::Ro
            };
            let assigned: Vec<u16> = pdos
                .iter()
                .filter(|p| p.assigned)
                .map(|p| p.pdo.index)
                .collect();
            let mut o = Object::compound(
                assign_index(dir),
                match dir {
                    Direction::Outputs => "RxPDO assign",
                    Direction::Inputs => "TxPDO assign",
                },
                ObjectCode::Array,
                (1..=pdos.len() as u8)
                    .map(|k| Entry {
                        access,
                        ..Entry::ro(
                            k,
                            &format!("SubIndex {k:03}"),
                            u16t(),
                            assigned
                                .get(usize::from(k) - 1)
                                .copied()
                                .unwrap_or(0)
                                .to_le_bytes()
                                .to_vec(),
                        )
                    })
                    .collect(),
            );
            o.entries[0].access = access;
            o.entries[0].default = vec![assigned.len() as u8];
            add(o);
            for p in pdos {
                let access = if p.mappable {
                    Access::RwPreOp
                } else {
                    Access::Ro
                };
                let n = if p.mappable {
                    p.max_entries
                } else {
                    p.pdo.entries.len() as u8
                };
                let mut o = Object::compound(
                    p.pdo.index,
                    &p.pdo.name,
                    ObjectCode::Record,
                    (1..=n)
                        .map(|k| {
                            let v = p
                                .pdo
                                .entries
                                .get(usize::from(k) - 1)
                                .map_or(0, |e| mapping_value(e.index, e.sub, e.bits));
                            Entry {
                                access,
                                ..Entry::ro(
                                    k,
                                    &format!("SubIndex {k:03}"),
                                    u32t(),
                                    v.to_le_bytes().to_vec(),
                                )
                            }
                        })
                        .collect(),
                );
                o.entries[0].access = access;
                o.entries[0].default = vec![p.pdo.entries.len() as u8];
                add(o);
            }
        }
        for (index, name) in [
            (0x1c32u16, "SM output parameter"),
            (0x1c33, "SM input parameter"),
        ] {
            let rw = |sub, name: &str, ty, default: Vec<u8>| Entry {
                access: Access::Rw,
                ..Entry::ro(sub, name, ty, default)
            };
            // Sync modes supported: bit 0 free run, bit 2 DC SYNC0 (ETG.1020 §21.1.2).
            let modes: u16 = if d.dc { 0x0005 } else { 0x0001 };
            add(Object::compound(
                index,
                name,
                ObjectCode::Record,
                vec![
                    rw(1, "Sync mode", u16t(), vec![0, 0]),
                    rw(2, "Cycle time", u32t(), vec![0; 4]),
                    Entry::ro(
                        4,
                        "Sync modes supported",
                        u16t(),
                        modes.to_le_bytes().to_vec(),
                    ),
                    Entry::ro(
                        5,
                        "Minimum cycle time",
                        u32t(),
                        coe.min_cycle_ns.to_le_bytes().to_vec(),
                    ),
                ],
            ));
        }
        for o in &coe.objects {
            add(o.clone());
        }
        // Objects the PDOs map but the description leaves out: generated from the entries.
        for p in &coe.pdos {
            for e in p.pdo.entries.iter().filter(|e| !e.is_padding()) {
                let Some(t) = e.data_type else { continue };
                let entry = Entry {
                    access: match p.dir {
                        Direction::Outputs => Access::Rw,
                        Direction::Inputs => Access::Ro,
                    },
                    mapping: Some(p.dir),
                    ..Entry::ro(
                        e.sub,
                        e.name.as_deref().unwrap_or(""),
                        ValueType::Basic(t),
                        vec![0; usize::from(t.bits()).div_ceil(8)],
                    )
                };
                match objects.get_mut(&e.index) {
                    None if e.sub == 0 => {
                        objects.insert(e.index, Object::var(e.index, &entry.name.clone(), entry));
                    }
                    None => {
                        objects.insert(
                            e.index,
                            Object::compound(e.index, &p.pdo.name, ObjectCode::Record, vec![entry]),
                        );
                    }
                    Some(o) if o.code != ObjectCode::Var && o.entry(e.sub).is_none() => {
                        o.entries.push(entry);
                        o.entries.sort_by_key(|x| x.sub);
                        let highest = o.max_sub();
                        o.entries[0].default = vec![highest];
                    }
                    Some(_) => {}
                }
            }
        }
        let mut od = Od {
            objects,
            values: BTreeMap::new(),
            rules,
        };
        od.reset();
        od
    }

    /// Every value back to its default (a power cycle).
    pub fn reset(&mut self) {
        self.values.clear();
        for o in self.objects.values() {
            for e in &o.entries {
                self.values.insert((o.index, e.sub), e.default.clone());
            }
        }
    }

    pub fn objects(&self) -> impl Iterator<Item = &Object> {
        self.objects.values()
    }

    pub fn object(&self, index: u16) -> Option<&Object> {
        self.objects.get(&index)
    }

    pub fn rules(&self, dir: Direction) -> PdoRules {
        self.rules[dir_slot(dir)]
    }

    /// The current value of an entry (not the process image: see [`Od::placement`]).
    pub fn value(&self, index: u16, sub: u8) -> Option<&[u8]> {
        self.values.get(&(index, sub)).map(Vec::as_slice)
    }

    fn u8_at(&self, index: u16, sub: u8) -> u8 {
        self.value(index, sub)
            .and_then(|v| v.first().copied())
            .unwrap_or(0)
    }

    fn u16_at(&self, index: u16, sub: u8) -> u16 {
        self.value(index, sub)
            .and_then(|v| v.get(..2))
            .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32_at(&self, index: u16, sub: u8) -> u32 {
        self.value(index, sub)
            .and_then(|v| v.get(..4))
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The PDOs assigned in `dir`, in order.
    pub fn assigned(&self, dir: Direction) -> Vec<u16> {
        let at = assign_index(dir);
        (1..=self.u8_at(at, 0))
            .map(|k| self.u16_at(at, k))
            .collect()
    }

    /// The current mapping of a PDO: (index, subindex, bits) per entry.
    pub fn mapping(&self, pdo: u16) -> Vec<(u16, u8, u8)> {
        (1..=self.u8_at(pdo, 0))
            .map(|k| {
                let v = self.u32_at(pdo, k);
                ((v >> 16) as u16, (v >> 8) as u8, v as u8)
            })
            .collect()
    }

    /// Bits of process data in `dir` as assigned and mapped now.
    pub fn pd_bits(&self, dir: Direction) -> u32 {
        self.assigned(dir)
            .iter()
            .flat_map(|p| self.mapping(*p))
            .map(|(_, _, b)| u32::from(b))
            .sum()
    }

    /// Where `index:sub` sits in the process image, if an assigned PDO maps it.
    pub fn placement(&self, index: u16, sub: u8) -> Option<Placement> {
        for dir in [Direction::Outputs, Direction::Inputs] {
            let mut at = 0u32;
            for p in self.assigned(dir) {
                for (i, s, b) in self.mapping(p) {
                    if (i, s) == (index, sub) && i != 0 {
                        return Some(Placement {
                            dir,
                            bit_offset: at,
                            bits: u16::from(b),
                        });
                    }
                    at += u32::from(b);
                }
            }
        }
        None
    }

    /// Read access check of one entry: the entry, or the abort code.
    pub fn readable(&self, index: u16, sub: u8) -> Result<&Entry, u32> {
        let o = self.objects.get(&index).ok_or(abort::NO_OBJECT)?;
        let e = o.entry(sub).ok_or(abort::NO_SUBINDEX)?;
        if !e.access.readable() {
            return Err(abort::WRITE_ONLY);
        }
        Ok(e)
    }

    /// Write `data` to `index:sub` in `state` (an SDO download), with every check a device
    /// makes; the abort code when refused (nothing is changed then).
    pub fn write(&mut self, index: u16, sub: u8, data: &[u8], state: AlState) -> Result<(), u32> {
        let o = self.objects.get(&index).ok_or(abort::NO_OBJECT)?;
        let e = o.entry(sub).ok_or(abort::NO_SUBINDEX)?;
        match e.access {
            Access::Ro => return Err(abort::READ_ONLY),
            Access::RwPreOp if state != AlState::PreOp => return Err(abort::STATE),
            _ => {}
        }
        let value = check_value(e, data)?;
        let is_assign = index == 0x1c12 || index == 0x1c13;
        let pdo_dir = [Direction::Outputs, Direction::Inputs]
            .into_iter()
            .find(|d| d.index_range().contains(&index));
        if is_assign {
            let dir = if index == 0x1c12 {
                Direction::Outputs
            } else {
                Direction::Inputs
            };
            self.check_assign(dir, sub, &value)?;
        } else if let Some(dir) = pdo_dir {
            self.check_mapping(dir, index, sub, &value)?;
        }
        self.values.insert((index, sub), value);
        Ok(())
    }

    /// A write to 0x1C12 / 0x1C13: an entry names an existing PDO of the direction; subindex 0
    /// (the count) enables that many entries, whose PDOs must fit the sync manager.
    fn check_assign(&self, dir: Direction, sub: u8, value: &[u8]) -> Result<(), u32> {
        let at = assign_index(dir);
        if sub == 0 {
            let n = value[0];
            if n > self.rules(dir).max_pdos {
                return Err(abort::VALUE_RANGE);
            }
            let pdos: Vec<u16> = (1..=n).map(|k| self.u16_at(at, k)).collect();
            for (k, p) in pdos.iter().enumerate() {
                if !self.is_pdo(dir, *p) || pdos[..k].contains(p) {
                    return Err(abort::VALUE_RANGE);
                }
            }
            let bits: u32 = pdos
                .iter()
                .flat_map(|p| self.mapping(*p))
                .map(|(_, _, b)| u32::from(b))
                .sum();
            self.check_size(dir, bits)?;
        } else {
            if self.u8_at(at, 0) != 0 {
                // CiA 301 §7.5.2.35: the entries change only while subindex 0 is 0.
                return Err(abort::STATE);
            }
            let p = u16::from_le_bytes([value[0], value[1]]);
            if !self.is_pdo(dir, p) {
                return Err(abort::VALUE_RANGE);
            }
        }
        Ok(())
    }

    fn is_pdo(&self, dir: Direction, index: u16) -> bool {
        dir.index_range().contains(&index) && self.objects.contains_key(&index)
    }

    fn check_size(&self, dir: Direction, bits: u32) -> Result<(), u32> {
        if bits.div_ceil(8) > u32::from(self.rules(dir).buffer_bytes) {
            return Err(abort::PDO_LENGTH);
        }
        Ok(())
    }

    /// A write to a PDO mapping object: an entry maps an existing object mappable in this
    /// direction with its exact width (or padding, index 0); subindex 0 (the count) must keep
    /// the PDO, and the assignment holding it, within the sync manager.
    fn check_mapping(&self, dir: Direction, pdo: u16, sub: u8, value: &[u8]) -> Result<(), u32> {
        if sub == 0 {
            let n = value[0];
            let o = &self.objects[&pdo];
            if n > o.max_sub() {
                return Err(abort::PDO_LENGTH);
            }
            let bits_of = |p: u16, count: u8| -> u32 {
                (1..=count).map(|k| self.u32_at(p, k) & 0xff).sum::<u32>()
            };
            let this = bits_of(pdo, n);
            let others: u32 = self
                .assigned(dir)
                .iter()
                .filter(|p| **p != pdo)
                .map(|p| bits_of(*p, self.u8_at(*p, 0)))
                .sum();
            let assigned = self.assigned(dir).contains(&pdo);
            self.check_size(dir, if assigned { this + others } else { this })?;
            return Ok(());
        }
        if self.u8_at(pdo, 0) != 0 {
            return Err(abort::STATE);
        }
        let v = u32::from_le_bytes([value[0], value[1], value[2], value[3]]);
        let (index, osub, bits) = ((v >> 16) as u16, (v >> 8) as u8, v as u8);
        if index == 0 {
            return if bits == 0 {
                Err(abort::CANNOT_MAP)
            } else {
                Ok(())
            };
        }
        let e = self
            .objects
            .get(&index)
            .and_then(|o| o.entry(osub))
            .ok_or(abort::CANNOT_MAP)?;
        let width = e.bits(self.value(index, osub).unwrap_or(&[]));
        if e.mapping != Some(dir) || width != u16::from(bits) {
            return Err(abort::CANNOT_MAP);
        }
        Ok(())
    }
}

/// The value `data` stands for in entry `e`, checked: its length (the type's size; a string up
/// to 255 bytes) and range.
pub fn check_value(e: &Entry, data: &[u8]) -> Result<Vec<u8>, u32> {
    let Some(n) = e.ty.sdo_bytes() else {
        if data.len() > 255 {
            return Err(abort::LENGTH_TOO_HIGH);
        }
        return Ok(data.to_vec());
    };
    if data.len() > n {
        return Err(abort::LENGTH_TOO_HIGH);
    }
    if data.len() < n {
        return Err(abort::LENGTH_TOO_LOW);
    }
    if e.ty == ValueType::Basic(DataType::Bool) {
        // Any non-zero byte is TRUE (ethercrab writes 0xFF); the value kept is 1, the bit a
        // PDO carries.
        return Ok(vec![u8::from(data[0] != 0)]);
    }
    if let ValueType::Basic(t) = e.ty
        && let Some(v) = integer(t, data)
        && (e.min.is_some_and(|m| v < m) || e.max.is_some_and(|m| v > m))
    {
        return Err(abort::VALUE_RANGE);
    }
    Ok(data.to_vec())
}

/// The integer a little-endian value of type `t` stands for (`None` for reals).
pub fn integer(t: DataType, data: &[u8]) -> Option<i128> {
    let mut b = [0u8; 16];
    let n = data.len().min(8);
    b[..n].copy_from_slice(&data[..n]);
    let u = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let bits = u32::from(t.bits());
    let signed = |u: u64| -> i128 {
        let shift = 64 - bits;
        i128::from(((u << shift) as i64) >> shift)
    };
    Some(match t {
        DataType::Real32 | DataType::Real64 => return None,
        DataType::Int8 | DataType::Int16 | DataType::Int24 | DataType::Int32 | DataType::Int64 => {
            signed(u)
        }
        _ => i128::from(u),
    })
}

/// Read `bits` bits at `bit_offset` of `image` (LSB first, as process data is laid out) into a
/// little-endian value of `bytes` bytes.
pub fn read_bits(image: &[u8], bit_offset: u32, bits: u16, bytes: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes];
    for k in 0..u32::from(bits).min(bytes as u32 * 8) {
        let at = bit_offset + k;
        let byte = image.get((at / 8) as usize).copied().unwrap_or(0);
        if byte >> (at % 8) & 1 != 0 {
            out[(k / 8) as usize] |= 1 << (k % 8);
        }
    }
    out
}
