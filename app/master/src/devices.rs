//! `[[device]]`: declarative configuration of CoE subdevices, applied in PRE-OP at every
//! bring-up and every recovery.
//!
//! A `[[device]]` entry picks subdevices by position, alias or identity and says which PDOs each
//! process-data sync manager carries (`pdo_assign`: the objects 0x1C12 outputs / 0x1C13 inputs,
//! ETG.1000.6 §5.6.7.4.7), what each PDO maps (`pdo_map`: 0x1600..=0x17FF RxPDOs, 0x1A00..=0x1BFF
//! TxPDOs, each subindex n = index << 16 | subindex << 8 | bits, ETG.1000.6 §5.6.7.4.8) and which
//! startup parameters are written (`sdo`, at PRE-OP -> SAFE-OP or SAFE-OP -> OP). The master writes
//! them in PRE-OP before it reads the layout, so the layout, the SM lengths ethercrab computes from
//! 0x1C12/0x1C13 in `into_safe_op`, and the expected working counter all follow the configuration.
//!
//! A subdevice without CoE (the digital terminals whose process data sit on SM0/SM1) has its
//! assignment and mapping fixed in its SII: for it nothing is written, `pdo_assign` (`sm0`..`sm3`)
//! and `pdo_map` are compared with the SII ([`check_mailbox`], [`compare`]).
//!
//! `[[segment.device]]` is a different thing: it only checks the identity at a position and
//! writes nothing.
//!
//! Everything that can be known without the bus is checked by [`validate`] (so `rtcat config
//! check` refuses it, exit 2); what only the subdevice can say (an object it does not have, a
//! write it aborts) fails the bring-up with a [`DeviceError`] naming the subdevice, the object,
//! the value and the abort code's text.

use crate::layout::{PdoSource, SubdeviceSource};
use crate::sii::Direction;
use serde::Deserialize;
use std::fmt::Write as _;
use thiserror::Error;

/// Longest `string` / `bytes` startup value: far above a device's parameters, a bound on what a
/// wrong file makes the master send.
pub const MAX_SDO_BYTES: usize = 1024;

/// Longest value written as an expedited SDO download (ETG.1000.6 §5.6.2.1: at most 4 data
/// bytes); longer ones go as a normal or segmented download (which ethercrab 0.7.1 does not
/// do). rtcat's [`crate::coe`] client writes both.
pub const EXPEDITED_MAX: usize = 4;

/// Largest process data of one sync manager: ethercrab 0.7.1 sums the mapped bits of an SM in a
/// `u16` (`SubDevice::configure_pdos_coe`), so 65535 bits, 8191 whole bytes.
pub const MAX_SM_BYTES: u32 = 8191;

/// Longest `name` of a device or a PDO entry.
pub const MAX_NAME: usize = 128;

/// Most `[[device]]` entries (a segment has at most this many subdevices).
pub const MAX_DEVICES: usize = crate::limits::MAX_SUBDEVICES;

/// RxPDO mapping objects (outputs, master -> subdevice), ETG.1000.6 Table 67.
pub const RXPDO: std::ops::RangeInclusive<u16> = 0x1600..=0x17ff;
/// TxPDO mapping objects (inputs, subdevice -> master), ETG.1000.6 Table 67.
pub const TXPDO: std::ops::RangeInclusive<u16> = 0x1a00..=0x1bff;
/// RxPDO assignment of SM2.
pub const ASSIGN_SM2: u16 = 0x1c12;
/// TxPDO assignment of SM3.
pub const ASSIGN_SM3: u16 = 0x1c13;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[device]]` entry.
pub struct DeviceConfig {
    /// Match the subdevice at this position (0 = first after the master).
    pub position: Option<u16>,
    /// Match the subdevice with this configured station alias (ESC register 0x0012).
    pub alias: Option<u16>,
    /// Match by identity: vendor ID (with `product_id`).
    pub vendor_id: Option<u32>,
    /// Match by identity: product code (with `vendor_id`).
    pub product_id: Option<u32>,
    /// Match by identity: revision number (optional, with `vendor_id` + `product_id`).
    pub revision: Option<u32>,
    /// Label used in messages.
    pub name: Option<String>,
    /// Expected input process data of the subdevice, checked after OP.
    pub input_bytes: Option<u32>,
    /// Expected output process data of the subdevice, checked after OP.
    pub output_bytes: Option<u32>,
    /// PDO assignment per sync manager.
    pub pdo_assign: Option<PdoAssign>,
    /// Mapping per PDO.
    #[serde(default)]
    pub pdo_map: Vec<PdoMap>,
    /// Startup SDOs, written in file order.
    #[serde(default)]
    pub sdo: Vec<StartupSdo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
/// `pdo_assign = { sm2 = [...], sm3 = [...] }`: the PDOs of each process-data sync manager.
///
/// A CoE subdevice's `sm2` / `sm3` are written (objects 0x1C12 / 0x1C13). A subdevice without
/// a mailbox has its assignment fixed in its SII, often on SM0/SM1 (digital terminals: outputs
/// on SM0, inputs on SM0 or SM1, 16 channels split over SM0 and SM1): every list is compared
/// with the SII, nothing is written.
pub struct PdoAssign {
    /// PDOs of SM0, one direction (a subdevice without a mailbox).
    pub sm0: Option<Vec<u16>>,
    /// PDOs of SM1, one direction (a subdevice without a mailbox).
    pub sm1: Option<Vec<u16>>,
    /// RxPDOs (0x16xx/0x17xx) of SM2, the outputs (object 0x1C12).
    pub sm2: Option<Vec<u16>>,
    /// TxPDOs (0x1Axx/0x1Bxx) of SM3, the inputs (object 0x1C13).
    pub sm3: Option<Vec<u16>>,
}

impl PdoAssign {
    /// Each sync manager the entry lists, with its PDOs, in SM order.
    pub fn lists(&self) -> impl Iterator<Item = (u8, &Vec<u16>)> {
        [&self.sm0, &self.sm1, &self.sm2, &self.sm3]
            .into_iter()
            .enumerate()
            .filter_map(|(n, l)| l.as_ref().map(|l| (n as u8, l)))
    }

    /// Whether it lists SM0 or SM1 (process data of a subdevice without a mailbox).
    pub fn names_sm01(&self) -> bool {
        self.sm0.is_some() || self.sm1.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[[device.pdo_map]]`.
pub struct PdoMap {
    /// The PDO's mapping object.
    pub index: u16,
    /// Its entries, in order.
    pub entries: Vec<MapEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    untagged,
    expecting = "an entry \"index:subindex:bits\" or a table { entry = \"index:subindex:bits\", name = \"...\" }"
)]
/// One mapped entry: `"0x6040:00:16"` or `{ entry = "0x6040:00:16", name = "Controlword" }`.
pub enum MapEntry {
    /// Without a name.
    Plain(String),
    /// With a name.
    Named(NamedEntry),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
/// The table form of a [`MapEntry`].
pub struct NamedEntry {
    /// `index:subindex:bits`.
    pub entry: String,
    /// The entry's name in the layout (replaces the SII's).
    pub name: Option<String>,
}

impl MapEntry {
    /// The `index:subindex:bits` text.
    pub fn text(&self) -> &str {
        match self {
            MapEntry::Plain(s) => s,
            MapEntry::Named(n) => &n.entry,
        }
    }

    /// The configured name, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            MapEntry::Plain(_) => None,
            MapEntry::Named(n) => n.name.as_deref(),
        }
    }
}

/// Parse `index:subindex:bits`: index and subindex in hex, with or without `0x` (`0x6040:00`,
/// `6040:0`, as IgH's `ethercat pdos` and TwinCAT print them), bits in decimal (`16`) or hex
/// with `0x`. Index 0 is padding (ETG.1000.6 §5.6.7.4.8: a gap of `bits` bits) and needs
/// subindex 0. Returns (index, subindex, bits).
pub fn parse_entry(s: &str) -> Result<(u16, u8, u8), String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [i, sub, bits] = parts[..] else {
        return Err(
            "must be \"index:subindex:bits\" (hex index and subindex, decimal bits)".into(),
        );
    };
    let hex = |t: &str, what: &str, max_digits: usize| -> Result<u32, String> {
        let t = t.trim();
        let d = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        if d.is_empty() || d.len() > max_digits || !d.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "{what} {t:?} is not hex of at most {max_digits} digits"
            ));
        }
        u32::from_str_radix(d, 16).map_err(|e| format!("{what} {t:?}: {e}"))
    };
    let index = hex(i, "index", 4)? as u16;
    let sub = hex(sub, "subindex", 2)? as u8;
    let b = bits.trim();
    let bits = match b.strip_prefix("0x").or_else(|| b.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => b.parse::<u32>(),
    }
    .map_err(|_| format!("bits {b:?} is not a number"))?;
    if !(1..=64).contains(&bits) {
        return Err(format!("bits {bits}: must be 1..=64"));
    }
    if index == 0 && sub != 0 {
        return Err("padding (index 0) must have subindex 0".into());
    }
    Ok((index, sub, bits as u8))
}

/// The mapping object value of an entry (ETG.1000.6 §5.6.7.4.8).
pub fn mapping_value(index: u16, sub: u8, bits: u8) -> u32 {
    u32::from(index) << 16 | u32::from(sub) << 8 | u32::from(bits)
}

pub use crate::coe::SdoType;

/// A `type = "..."` of the file, by the names of [`SdoType`].
fn de_sdo_type<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SdoType, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

/// Whether a mapped entry of `bits` bits can hold a value of `ty`: the type's size, or one bit
/// for a BOOL (mapped as a single bit, ETG.1000.6 Table 64 BOOLEAN/BIT1).
pub fn fits_bits(ty: SdoType, bits: u8) -> bool {
    match ty {
        SdoType::Bool => bits == 1 || bits == 8,
        t => t.size().is_none_or(|w| usize::from(bits) == 8 * w),
    }
}

/// The CoE data type code of `ty` (ETG.1000.6 Table 64), for the layout's entries.
pub fn coe_code(ty: SdoType) -> u8 {
    match ty {
        SdoType::Bool => 0x01,
        SdoType::I8 => 0x02,
        SdoType::I16 => 0x03,
        SdoType::I32 => 0x04,
        SdoType::U8 => 0x05,
        SdoType::U16 => 0x06,
        SdoType::U32 => 0x07,
        SdoType::F32 => 0x08,
        SdoType::String => 0x09,
        SdoType::Bytes => 0x0a,
        SdoType::F64 => 0x11,
        SdoType::I64 => 0x15,
        SdoType::U64 => 0x1b,
    }
}

/// Encode a value of the file for `ty`, little-endian as CoE sends it: the TOML kind must suit
/// the type (integer, or a decimal/`0x` string, for the integer types; true/false for bool; a
/// number for the floats; a string for string and bytes), then the value is parsed and
/// range-checked as `rtcat sdo write` does ([`SdoType::encode`]).
pub fn encode(ty: SdoType, value: &toml::Value) -> Result<Vec<u8>, String> {
    use toml::Value as V;
    let text = match (ty, value) {
        (SdoType::Bool, V::Boolean(b)) => b.to_string(),
        (SdoType::F32 | SdoType::F64, V::Float(f)) => {
            if !f.is_finite() {
                return Err(format!("must be a finite number for {ty}"));
            }
            f.to_string()
        }
        (SdoType::F32 | SdoType::F64, V::Integer(i)) => i.to_string(),
        (SdoType::String | SdoType::Bytes, V::String(s)) => s.clone(),
        (SdoType::Bool | SdoType::F32 | SdoType::F64 | SdoType::String | SdoType::Bytes, v) => {
            let want = match ty {
                SdoType::Bool => "true or false",
                SdoType::String => "a string",
                SdoType::Bytes => "a hex string such as \"01 02 ff\"",
                _ => "a number",
            };
            return Err(format!("must be {want} for {ty} (got a {})", v.type_str()));
        }
        (_, V::Integer(i)) => i.to_string(),
        (_, V::String(s)) => s.clone(),
        (_, v) => {
            return Err(format!(
                "must be an integer for {ty} (got a {})",
                v.type_str()
            ));
        }
    };
    let bytes = ty.encode(&text).map_err(|e| e.to_string())?;
    if matches!(ty, SdoType::String | SdoType::Bytes)
        && (bytes.is_empty() || bytes.len() > MAX_SDO_BYTES)
    {
        return Err(format!(
            "{} bytes: must be 1..={MAX_SDO_BYTES}",
            bytes.len()
        ));
    }
    Ok(bytes)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
/// When a startup SDO is written.
pub enum Transition {
    /// In PRE-OP, before the transition to SAFE-OP (after the PDO configuration).
    #[default]
    PS,
    /// In SAFE-OP, before the transition to OP.
    SO,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[[device.sdo]]`: one startup parameter.
pub struct StartupSdo {
    /// Object index.
    pub index: u16,
    /// Subindex.
    pub sub: u8,
    /// Value type.
    #[serde(rename = "type", deserialize_with = "de_sdo_type")]
    pub ty: SdoType,
    /// The value: integer (or a decimal/`0x` string), float, bool, string; bytes as hex.
    pub value: toml::Value,
    /// When it is written (default PS).
    #[serde(default)]
    pub transition: Transition,
    /// How long the device may take to answer this write, in ms (default: the mailbox's
    /// response timeout, [`crate::mailbox::Timeouts`], 1000 ms). For an object whose write the
    /// device's firmware acts on before it answers (storing parameters, a drive's motor data,
    /// a flash write); an ENI's `InitCmd/Timeout` imports as this.
    pub timeout_ms: Option<u32>,
}

impl StartupSdo {
    /// `0xIIII:SS`.
    pub fn object(&self) -> String {
        format!("{:#06x}:{:02x}", self.index, self.sub)
    }

    /// The value as the file gives it, with its type (`8 (i8)`).
    pub fn shown(&self) -> String {
        let v = match &self.value {
            toml::Value::String(s) => format!("{s:?}"),
            v => v.to_string(),
        };
        format!("{v} ({})", self.ty.name())
    }
}

/// A refused `[[device]]` value: the key (`device[2].pdo_map[0].entries[1]`), the value and why
/// (the error every configuration section returns).
pub use crate::invalid::Invalid;

fn invalid(
    key: impl Into<String>,
    value: impl std::fmt::Display,
    message: impl Into<String>,
) -> Invalid {
    Invalid::new(key, value, message)
}

fn pdo_direction(index: u16) -> Option<Direction> {
    if RXPDO.contains(&index) {
        Some(Direction::Outputs)
    } else if TXPDO.contains(&index) {
        Some(Direction::Inputs)
    } else {
        None
    }
}

/// Check every `[[device]]` entry; `subdevices` is `[segment] subdevices` if given. The first
/// violation is returned.
pub fn validate(devices: &[DeviceConfig], subdevices: Option<u16>) -> Result<(), Invalid> {
    // At most one entry per subdevice a segment can have; also bounds the pairwise check below.
    if devices.len() > MAX_DEVICES {
        return Err(invalid(
            format!("device[{MAX_DEVICES}]"),
            format!("{} [[device]] entries", devices.len()),
            format!("at most {MAX_DEVICES} (one per subdevice a segment may have)"),
        ));
    }
    for (i, d) in devices.iter().enumerate() {
        validate_one(i, d, subdevices)?;
    }
    // Two entries for the same position or alias: which one applies would be a guess.
    for (j, d) in devices.iter().enumerate() {
        for (i, e) in devices[..j].iter().enumerate() {
            if let (Some(a), Some(b)) = (d.position, e.position)
                && a == b
            {
                return Err(invalid(
                    format!("device[{j}].position"),
                    a,
                    format!("device[{i}] matches the same position"),
                ));
            }
            if let (Some(a), Some(b)) = (d.alias, e.alias)
                && a == b
            {
                return Err(invalid(
                    format!("device[{j}].alias"),
                    format!("{a:#06x}"),
                    format!("device[{i}] matches the same alias"),
                ));
            }
            if d.position.is_none()
                && d.alias.is_none()
                && (d.vendor_id, d.product_id, d.revision)
                    == (e.vendor_id, e.product_id, e.revision)
            {
                return Err(invalid(
                    format!("device[{j}].product_id"),
                    format!("{:#010x}", d.product_id.unwrap_or(0)),
                    format!("device[{i}] matches the same identity"),
                ));
            }
        }
    }
    Ok(())
}

fn validate_one(i: usize, d: &DeviceConfig, subdevices: Option<u16>) -> Result<(), Invalid> {
    let k = |rest: &str| format!("device[{i}].{rest}");
    let identity = d.vendor_id.is_some() || d.product_id.is_some() || d.revision.is_some();
    let matchers =
        usize::from(d.position.is_some()) + usize::from(d.alias.is_some()) + usize::from(identity);
    if matchers != 1 {
        return Err(invalid(
            format!("device[{i}]"),
            match matchers {
                0 => "no matcher".to_string(),
                _ => "several matchers".to_string(),
            },
            "needs exactly one of `position`, `alias`, or `vendor_id` + `product_id` \
             (+ `revision`)",
        ));
    }
    if identity {
        for (key, v) in [("vendor_id", d.vendor_id), ("product_id", d.product_id)] {
            if v.is_none() {
                return Err(invalid(
                    k(key),
                    "(missing)",
                    "an identity matcher needs both vendor_id and product_id",
                ));
            }
        }
    }
    if let (Some(p), Some(n)) = (d.position, subdevices)
        && p >= n
    {
        return Err(invalid(
            k("position"),
            p,
            format!("must be below segment.subdevices ({n})"),
        ));
    }
    if d.alias == Some(0) {
        return Err(invalid(
            k("alias"),
            0,
            "must be 1..=65535 (alias 0 means no alias is set)",
        ));
    }
    if let Some(n) = &d.name
        && (n.is_empty() || n.len() > MAX_NAME || n.chars().any(char::is_control))
    {
        return Err(invalid(
            k("name"),
            format!("{n:?}"),
            format!("must be 1..={MAX_NAME} bytes without control characters"),
        ));
    }
    for (key, v) in [
        ("input_bytes", d.input_bytes),
        ("output_bytes", d.output_bytes),
    ] {
        if let Some(b) = v
            && b > MAX_SM_BYTES
        {
            return Err(invalid(
                k(key),
                b,
                format!("must be 0..={MAX_SM_BYTES} (one sync manager's process data)"),
            ));
        }
    }

    let mapped = validate_pdo_map(i, d)?;

    // pdo_assign: the right PDOs on the right SM, no duplicates, sizes.
    validate_assign(i, d, &mapped)?;
    if let Some(a) = &d.pdo_assign
        && a.names_sm01()
        && !d.sdo.is_empty()
    {
        return Err(invalid(
            k("sdo[0].index"),
            format!("{:#06x}", d.sdo[0].index),
            "pdo_assign lists SM0/SM1: process data there belong to a subdevice without a \
             mailbox, which takes no SDOs",
        ));
    }

    validate_sdos(i, d)
}

/// `device[i].pdo_map`: indices, entries, names, widths against the device's startup SDOs;
/// returns each mapped PDO with the bits it maps.
fn validate_pdo_map(i: usize, d: &DeviceConfig) -> Result<Vec<(u16, u32)>, Invalid> {
    let k = |rest: &str| format!("device[{i}].{rest}");
    let mut mapped: Vec<(u16, u32)> = Vec::new();
    for (j, p) in d.pdo_map.iter().enumerate() {
        let key = k(&format!("pdo_map[{j}].index"));
        if pdo_direction(p.index).is_none() {
            return Err(invalid(
                key,
                format!("{:#06x}", p.index),
                "must be an RxPDO 0x1600..=0x17ff or a TxPDO 0x1a00..=0x1bff",
            ));
        }
        if let Some(prev) = d.pdo_map[..j].iter().position(|q| q.index == p.index) {
            return Err(invalid(
                key,
                format!("{:#06x}", p.index),
                format!("already mapped by pdo_map[{prev}]"),
            ));
        }
        if p.entries.len() > 255 {
            return Err(invalid(
                k(&format!("pdo_map[{j}].entries")),
                format!("{} entries", p.entries.len()),
                "a PDO maps at most 255 entries (its subindex 0 is an UNSIGNED8, ETG.1000.6 \
                 §5.6.7.4.8)",
            ));
        }
        let mut bits = 0u32;
        for (e, entry) in p.entries.iter().enumerate() {
            let key = k(&format!("pdo_map[{j}].entries[{e}]"));
            let (index, sub, b) = parse_entry(entry.text())
                .map_err(|m| invalid(&key, format!("{:?}", entry.text()), m))?;
            if let Some(n) = entry.name()
                && (n.is_empty() || n.len() > MAX_NAME || n.chars().any(char::is_control))
            {
                return Err(invalid(
                    format!("{key}.name"),
                    format!("{n:?}"),
                    format!("must be 1..={MAX_NAME} bytes without control characters"),
                ));
            }
            // The one type known offline: a startup SDO of this device writing the same object.
            if let Some((m, s)) = d
                .sdo
                .iter()
                .enumerate()
                .find(|(_, s)| index != 0 && s.index == index && s.sub == sub)
                && !fits_bits(s.ty, b)
            {
                return Err(invalid(
                    key,
                    format!("{:?}", entry.text()),
                    format!(
                        "{b} bits, but device[{i}].sdo[{m}] writes {:#06x}:{sub:02x} as {}{}",
                        index,
                        s.ty.name(),
                        s.ty.size()
                            .map(|w| format!(" ({} bits)", 8 * w))
                            .unwrap_or_default()
                    ),
                ));
            }
            bits += u32::from(b);
        }
        mapped.push((p.index, bits));
    }
    Ok(mapped)
}

/// `device[i].sdo`: objects that are not PDO mapping or assignment objects, values of their type.
fn validate_sdos(i: usize, d: &DeviceConfig) -> Result<(), Invalid> {
    let k = |rest: &str| format!("device[{i}].{rest}");
    for (m, s) in d.sdo.iter().enumerate() {
        if s.index == 0 {
            return Err(invalid(
                k(&format!("sdo[{m}].index")),
                "0x0000",
                "is not an object (0x0001..=0xffff)",
            ));
        }
        if RXPDO.contains(&s.index)
            || TXPDO.contains(&s.index)
            || s.index == ASSIGN_SM2
            || s.index == ASSIGN_SM3
        {
            return Err(invalid(
                k(&format!("sdo[{m}].index")),
                format!("{:#06x}", s.index),
                "is a PDO mapping or assignment object: configure it with pdo_map / pdo_assign \
                 (the master checks those after the bring-up)",
            ));
        }
        encode(s.ty, &s.value)
            .map_err(|msg| invalid(k(&format!("sdo[{m}].value")), s.shown(), msg))?;
        if let Some(t) = s.timeout_ms
            && !(1..=MAX_SDO_TIMEOUT_MS).contains(&t)
        {
            return Err(invalid(
                k(&format!("sdo[{m}].timeout_ms")),
                t.to_string(),
                format!("must be 1..={MAX_SDO_TIMEOUT_MS} ms"),
            ));
        }
    }
    Ok(())
}

/// Longest a startup SDO's `timeout_ms` may be: 2 minutes, beyond what any firmware takes to
/// act on a write (a recovery waits this long for a device that never answers).
pub const MAX_SDO_TIMEOUT_MS: u32 = 120_000;

/// `pdo_assign` of `device[i]`: per SM one direction (SM2 RxPDOs, SM3 TxPDOs, SM0/SM1 either),
/// each PDO once over all SMs, each direction's sizes against `output_bytes` / `input_bytes`,
/// and every PDO `pdo_map` configures is assigned where the assignment is written (SM2/SM3).
fn validate_assign(i: usize, d: &DeviceConfig, mapped: &[(u16, u32)]) -> Result<(), Invalid> {
    let k = |rest: &str| format!("device[{i}].{rest}");
    let Some(a) = &d.pdo_assign else {
        return Ok(());
    };
    // Per direction: bytes of the PDOs known from pdo_map (each SM rounded up to whole bytes,
    // as ethercrab sizes an SM), whether every PDO's size is known, and the SMs listed.
    let mut sizes = [(0u64, 0u64, true, Vec::new()), (0, 0, true, Vec::new())];
    let mut seen: Vec<(u16, u8)> = Vec::new();
    for (sm, list) in a.lists() {
        let key = format!("pdo_assign.sm{sm}");
        if list.len() > 255 {
            return Err(invalid(
                k(&key),
                format!("{} PDOs", list.len()),
                "at most 255 (subindex 0 of an assignment object is an UNSIGNED8)",
            ));
        }
        let fixed = match sm {
            2 => Some((Direction::Outputs, "RxPDOs 0x1600..=0x17ff")),
            3 => Some((Direction::Inputs, "TxPDOs 0x1a00..=0x1bff")),
            _ => None,
        };
        let mut dir = fixed.map(|f| f.0);
        let mut bits = 0u64;
        let mut all_known = true;
        for (n, &pdo) in list.iter().enumerate() {
            let key = k(&format!("{key}[{n}]"));
            let Some(this) = pdo_direction(pdo) else {
                return Err(invalid(
                    key,
                    format!("{pdo:#06x}"),
                    "must be an RxPDO 0x1600..=0x17ff or a TxPDO 0x1a00..=0x1bff",
                ));
            };
            match (dir, fixed) {
                (Some(want), Some((_, range))) if want != this => {
                    return Err(invalid(
                        key,
                        format!("{pdo:#06x}"),
                        format!("sm{sm} carries {range}"),
                    ));
                }
                (Some(want), None) if want != this => {
                    return Err(invalid(
                        key,
                        format!("{pdo:#06x}"),
                        format!(
                            "sm{sm} lists {} before it: a sync manager carries one direction",
                            if want == Direction::Outputs {
                                "RxPDOs"
                            } else {
                                "TxPDOs"
                            }
                        ),
                    ));
                }
                _ => dir = Some(this),
            }
            if let Some(&(_, other)) = seen.iter().find(|(p, _)| *p == pdo) {
                let why = if other == sm {
                    "assigned twice".to_string()
                } else {
                    format!("already assigned to sm{other}")
                };
                return Err(invalid(key, format!("{pdo:#06x}"), why));
            }
            seen.push((pdo, sm));
            match mapped.iter().find(|(p, _)| *p == pdo) {
                Some((_, b)) => bits += u64::from(*b),
                None => all_known = false,
            }
        }
        if bits.div_ceil(8) > u64::from(MAX_SM_BYTES) {
            return Err(invalid(
                k(&key),
                format!("{bits} bits"),
                format!(
                    "the assigned PDOs map more than one sync manager carries ({MAX_SM_BYTES} \
                     bytes)"
                ),
            ));
        }
        let Some(dir) = dir else { continue };
        let s = &mut sizes[usize::from(dir == Direction::Inputs)];
        s.0 += bits;
        s.1 += bits.div_ceil(8);
        // An SM0/SM1 list need not name every SM of its direction: its sizes are a lower bound.
        s.2 &= all_known && fixed.is_some();
        s.3.push(format!("sm{sm}"));
    }
    for (dir, (bits, bytes, exact, sms)) in [Direction::Outputs, Direction::Inputs]
        .into_iter()
        .zip(&sizes)
    {
        if sms.is_empty() {
            continue;
        }
        let (want_key, want) = match dir {
            Direction::Outputs => ("output_bytes", d.output_bytes),
            Direction::Inputs => ("input_bytes", d.input_bytes),
        };
        if let Some(want) = want
            && (*bytes > u64::from(want) || (*exact && *bytes != u64::from(want)))
        {
            return Err(invalid(
                k(want_key),
                want,
                format!(
                    "the PDOs assigned to {} map {bits} bits ({bytes} bytes){}",
                    sms.join(" and "),
                    if *exact { "" } else { " or more" }
                ),
            ));
        }
    }
    // A mapped PDO a written assignment (sm2/sm3) leaves out would be written and never used.
    for (sm, dir, list) in [
        (2, Direction::Outputs, &a.sm2),
        (3, Direction::Inputs, &a.sm3),
    ] {
        let Some(list) = list else { continue };
        for (j, p) in d.pdo_map.iter().enumerate() {
            if pdo_direction(p.index) == Some(dir)
                && !list.contains(&p.index)
                && !seen.iter().any(|(q, _)| *q == p.index)
            {
                return Err(invalid(
                    k(&format!("pdo_map[{j}].index")),
                    format!("{:#06x}", p.index),
                    format!("is not assigned: pdo_assign.sm{sm} does not list it"),
                ));
            }
        }
    }
    Ok(())
}

/// A subdevice as the matching sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Position.
    pub position: u16,
    /// Configured station alias.
    pub alias: u16,
    /// Vendor ID, product code, revision.
    pub identity: (u32, u32, u32),
}

/// How a `[[device]]` entry or a hot-connect group member names the subdevices it means: by
/// position, else by station alias, else by identity (revision optional). One rule for both: a
/// `[[group]]` member is one (`members = [{ alias = 0x10 }]`), a `[[device]]` entry carries the
/// same keys among its others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// The subdevice at this position (0 = first after the master).
    pub position: Option<u16>,
    /// The subdevice with this station alias.
    pub alias: Option<u16>,
    /// Every subdevice with this identity: vendor ID (with `product_id`).
    pub vendor_id: Option<u32>,
    /// Product code (with `vendor_id`).
    pub product_id: Option<u32>,
    /// Revision (optional, with both).
    pub revision: Option<u32>,
}

impl Selector {
    /// Whether it selects the subdevice `s`.
    pub fn matches(&self, s: &Found) -> bool {
        if let Some(p) = self.position {
            return p == s.position;
        }
        if let Some(a) = self.alias {
            return a == s.alias;
        }
        self.vendor_id == Some(s.identity.0)
            && self.product_id == Some(s.identity.1)
            && self.revision.is_none_or(|r| r == s.identity.2)
    }

    /// `position 2`, `alias 0x0010`, `vendor_id 0x00000766 product_id 0x00030003 revision 1`.
    pub fn matcher(&self) -> String {
        if let Some(p) = self.position {
            return format!("position {p}");
        }
        if let Some(a) = self.alias {
            return format!("alias {a:#06x}");
        }
        let mut s = format!(
            "vendor_id {:#010x} product_id {:#010x}",
            self.vendor_id.unwrap_or(0),
            self.product_id.unwrap_or(0)
        );
        if let Some(r) = self.revision {
            let _ = write!(s, " revision {r}");
        }
        s
    }
}

impl DeviceConfig {
    fn selector(&self) -> Selector {
        Selector {
            position: self.position,
            alias: self.alias,
            vendor_id: self.vendor_id,
            product_id: self.product_id,
            revision: self.revision,
        }
    }

    /// Whether this entry selects the subdevice `s`.
    pub fn matches(&self, s: &Found) -> bool {
        self.selector().matches(s)
    }

    /// `position 2`, `alias 0x0010`, `vendor_id 0x00000766 product_id 0x00030003 revision 1`.
    pub fn matcher(&self) -> String {
        self.selector().matcher()
    }
}

/// Which `[[device]]` entry applies to each subdevice (`None`: none). A position or alias that
/// is not on the segment, an identity no subdevice has, and a subdevice two entries select are
/// errors.
pub fn resolve(
    devices: &[DeviceConfig],
    found: &[Found],
) -> Result<Vec<Option<usize>>, DeviceError> {
    let mut out = vec![None; found.len()];
    for (i, d) in devices.iter().enumerate() {
        let mut any = false;
        for (s, slot) in found.iter().zip(out.iter_mut()) {
            if !d.matches(s) {
                continue;
            }
            any = true;
            if let Some(other) = *slot {
                return Err(DeviceError::Ambiguous {
                    position: s.position,
                    first: other,
                    second: i,
                });
            }
            *slot = Some(i);
        }
        if !any {
            return Err(DeviceError::NotFound {
                device: i,
                matcher: d.matcher(),
                subdevices: found.len(),
            });
        }
    }
    Ok(out)
}

/// Why the device configuration failed on the bus.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// A `[[device]]` entry selects no subdevice of the segment.
    #[error(
        "device[{device}] ({matcher}): no such subdevice on the segment ({subdevices} subdevices)"
    )]
    NotFound {
        /// The entry.
        device: usize,
        /// How it matches.
        matcher: String,
        /// Subdevices found.
        subdevices: usize,
    },
    /// Two entries select the same subdevice.
    #[error(
        "subdevice at position {position} is selected by both device[{first}] and device[{second}]"
    )]
    Ambiguous {
        /// The subdevice.
        position: u16,
        /// The first entry.
        first: usize,
        /// The second entry.
        second: usize,
    },
    /// An SDO write or read failed (the subdevice aborted it, or the mailbox failed).
    #[error("{who}: {action} {object}{value}: {source}")]
    Sdo {
        /// The subdevice and the entry (`subdevice at position 2 (SERVO-COE, device[0])`).
        who: String,
        /// `write` or `read back`.
        action: &'static str,
        /// `0x6060:00`.
        object: String,
        /// ` = 8 (i8)` for writes.
        value: String,
        /// Why: an abort names the code and its text.
        source: Box<SdoFailure>,
    },
    /// The mapping the subdevice runs with is not what was configured (it ignored a write).
    #[error("{who}: {object}: {what}")]
    Differs {
        /// The subdevice and the entry.
        who: String,
        /// The PDO (`0x1600`) or assignment object (`0x1c12`).
        object: String,
        /// What was asked and what it has.
        what: String,
    },
    /// The entry asks for what the subdevice's mailbox (or its lack of one) rules out: SDOs to
    /// a subdevice without CoE, SM0/SM1 process data on one whose SM0/SM1 are its mailbox.
    #[error("{who}: {key}: {what}")]
    Mailbox {
        /// The subdevice and the entry.
        who: String,
        /// The key (`sdo`, `pdo_assign.sm0`).
        key: String,
        /// Why it cannot be done.
        what: String,
    },
    /// The process data size after OP is not the configured one.
    #[error("{who}: {what} is {got} bytes, configured {key} = {want}")]
    Size {
        /// The subdevice and the entry.
        who: String,
        /// `input process data` / `output process data`.
        what: &'static str,
        /// `input_bytes` / `output_bytes`.
        key: &'static str,
        /// Configured.
        want: u32,
        /// Found.
        got: usize,
    },
}

/// Why an SDO transfer of the device configuration failed.
#[derive(Debug, Error)]
pub enum SdoFailure {
    /// rtcat's CoE client (every transfer of the configuration and its read-back: the abort
    /// code and its text, a timeout, a mailbox error).
    #[error(transparent)]
    Coe(crate::coe::Error),
}

/// How messages name a configured subdevice.
pub fn who(position: u16, name: &str, entry: usize, d: &DeviceConfig) -> String {
    match &d.name {
        Some(label) if label != name => {
            format!("subdevice at position {position} ({name}, device[{entry}] {label:?})")
        }
        _ => format!("subdevice at position {position} ({name}, device[{entry}])"),
    }
}

/// Writes the SDOs of one subdevice through rtcat's CoE client (expedited up to 4 bytes, normal
/// or segmented above), its errors naming the subdevice, the object and the value.
struct Writer<'s, 'm> {
    sdo: &'s mut crate::coe::OnDemand<'m>,
    who: &'s str,
}

impl Writer<'_, '_> {
    fn write(
        &mut self,
        index: u16,
        sub: u8,
        data: &[u8],
        shown: String,
    ) -> Result<(), DeviceError> {
        self.write_within(index, sub, data, shown, None)
    }

    /// [`Writer::write`], the device given `response` (when set) to answer this one write.
    fn write_within(
        &mut self,
        index: u16,
        sub: u8,
        data: &[u8],
        shown: String,
        response: Option<std::time::Duration>,
    ) -> Result<(), DeviceError> {
        let fail = |e| DeviceError::Sdo {
            who: self.who.to_string(),
            action: "write",
            object: format!("{index:#06x}:{sub:02x}"),
            value: format!(" = {shown}"),
            source: Box::new(SdoFailure::Coe(e)),
        };
        self.sdo
            .client()
            .and_then(|c| {
                let Some(response) = response else {
                    return c.download(index, sub, data);
                };
                // For this write only: the transport's own timeouts are back for the next.
                let before = c.mailbox().timeouts();
                c.mailbox()
                    .set_timeouts(crate::mailbox::Timeouts { response, ..before });
                let r = c.download(index, sub, data);
                c.mailbox().set_timeouts(before);
                r
            })
            .map_err(fail)
    }
}

/// Write the PDO configuration and the PS startup SDOs of `d` to `sd` (in PRE-OP), in the
/// documented order: each PDO of `pdo_map` (:00 = 0, :01.., :00 = n), each SM of `pdo_assign`
/// (same on 0x1C12/0x1C13), then the PS SDOs in file order (ETG.1000.6 §5.6.7.4: a mapping or
/// assignment is changed by clearing subindex 0 first, and takes effect when it is written back).
///
/// A subdevice without CoE (`coe` false) gets nothing written: its PDO assignment and mapping
/// are its SII's, which [`check_and_name`] compares with `d`; startup SDOs are refused.
pub fn apply_pre_op(
    sdo: &mut crate::coe::OnDemand<'_>,
    who: &str,
    d: &DeviceConfig,
    coe: bool,
) -> Result<(), DeviceError> {
    check_mailbox(who, d, coe)?;
    if !coe {
        return Ok(());
    }
    let mut w = Writer { sdo, who };
    for p in &d.pdo_map {
        w.write(p.index, 0, &[0], "0 (u8)".into())?;
        for (n, e) in p.entries.iter().enumerate() {
            let (index, sub, bits) = parse_entry(e.text()).unwrap_or((0, 0, 0));
            let v = mapping_value(index, sub, bits);
            w.write(
                p.index,
                (n + 1) as u8,
                &v.to_le_bytes(),
                format!("{v:#010x} ({})", e.text()),
            )?;
        }
        let n = p.entries.len() as u8;
        w.write(p.index, 0, &[n], format!("{n} (u8)"))?;
    }
    if let Some(a) = &d.pdo_assign {
        for (object, list) in [(ASSIGN_SM2, &a.sm2), (ASSIGN_SM3, &a.sm3)] {
            let Some(list) = list else { continue };
            w.write(object, 0, &[0], "0 (u8)".into())?;
            for (n, pdo) in list.iter().enumerate() {
                w.write(
                    object,
                    (n + 1) as u8,
                    &pdo.to_le_bytes(),
                    format!("{pdo:#06x} (u16)"),
                )?;
            }
            let n = list.len() as u8;
            w.write(object, 0, &[n], format!("{n} (u8)"))?;
        }
    }
    startup(&mut w, d, Transition::PS)
}

/// What `d` asks that the subdevice's mailbox rules out ([`DeviceError::Mailbox`]).
pub fn check_mailbox(who: &str, d: &DeviceConfig, coe: bool) -> Result<(), DeviceError> {
    let fail = |key: String, what: &str| {
        Err(DeviceError::Mailbox {
            who: who.to_string(),
            key,
            what: what.to_string(),
        })
    };
    if !coe && !d.sdo.is_empty() {
        return fail(
            "sdo".into(),
            "the subdevice has no CoE mailbox (SII words 0x18..0x1C): startup SDOs cannot be \
             written",
        );
    }
    if coe
        && let Some(a) = &d.pdo_assign
        && let Some((sm, _)) = a.lists().find(|(sm, _)| *sm < 2)
    {
        return fail(
            format!("pdo_assign.sm{sm}"),
            "SM0/SM1 are the mailbox of this CoE subdevice: its process data are on SM2/SM3",
        );
    }
    Ok(())
}

/// Write the startup SDOs of `d` for `transition`, in file order.
pub fn write_startup(
    sdo: &mut crate::coe::OnDemand<'_>,
    who: &str,
    d: &DeviceConfig,
    transition: Transition,
) -> Result<(), DeviceError> {
    startup(&mut Writer { sdo, who }, d, transition)
}

fn startup(
    w: &mut Writer<'_, '_>,
    d: &DeviceConfig,
    transition: Transition,
) -> Result<(), DeviceError> {
    for s in d.sdo.iter().filter(|s| s.transition == transition) {
        // validate() has encoded every value once; an error here cannot happen for a loaded
        // configuration, and would still be reported, not panic.
        let data = encode(s.ty, &s.value).unwrap_or_default();
        let response = s
            .timeout_ms
            .map(|t| std::time::Duration::from_millis(t.into()));
        w.write_within(s.index, s.sub, &data, s.shown(), response)?;
    }
    Ok(())
}

/// Compare what the subdevice runs with (`src`, read back in PRE-OP after the apply) with what
/// `d` asked ([`compare`]), then give the configured entries their names (and their types where
/// a startup SDO says it). A mapped PDO that is not assigned (the assignment is the device's
/// default) is read back with SDOs.
pub fn check_and_name(
    sdo: &mut crate::coe::OnDemand<'_>,
    who: &str,
    d: &DeviceConfig,
    src: &mut SubdeviceSource,
) -> Result<(), DeviceError> {
    if src.coe {
        compare(who, d, src, |pdo| read_mapping(sdo, who, pdo))?;
    } else {
        // Without CoE the SII is all there is: a PDO not assigned there is not run.
        compare(who, d, src, |pdo| {
            Err(DeviceError::Differs {
                who: who.to_string(),
                object: format!("{pdo:#06x}"),
                what: "configured in pdo_map, but the subdevice's SII assigns it to no sync \
                       manager"
                    .into(),
            })
        })?;
    }
    for p in &d.pdo_map {
        if let Some(q) = src.pdos.iter_mut().find(|q| q.index == p.index) {
            name_entries(q, p, d);
        }
    }
    Ok(())
}

/// Compare `src` with `d`, assignment by assignment and PDO by PDO, entry by entry; the mapping
/// of a configured PDO that `src` does not have (not assigned) comes from `unassigned`. The
/// error names the object and the first difference.
pub fn compare(
    who: &str,
    d: &DeviceConfig,
    src: &SubdeviceSource,
    mut unassigned: impl FnMut(u16) -> Result<Vec<(u16, u8, u8)>, DeviceError>,
) -> Result<(), DeviceError> {
    let differs = |object: String, what: String| DeviceError::Differs {
        who: who.to_string(),
        object,
        what,
    };
    if let Some(a) = &d.pdo_assign {
        for (sm, want) in a.lists() {
            let got: Vec<u16> = src
                .pdos
                .iter()
                .filter(|p| p.sync_manager == sm)
                .map(|p| p.index)
                .collect();
            if &got != want {
                // CoE: the assignment object 0x1C10 + n; without: the SII's.
                let object = if src.coe {
                    format!("{:#06x}", 0x1c10 + u16::from(sm))
                } else {
                    format!("SM{sm} assignment in the SII")
                };
                return Err(differs(
                    object,
                    format!(
                        "assignment configured [{}], the subdevice has [{}]",
                        hex_list(want),
                        hex_list(&got)
                    ),
                ));
            }
        }
    }
    for p in &d.pdo_map {
        let want: Vec<(u16, u8, u8)> = p
            .entries
            .iter()
            .map(|e| parse_entry(e.text()).unwrap_or((0, 0, 0)))
            .collect();
        let got: Vec<(u16, u8, u8)> = match src.pdos.iter().find(|q| q.index == p.index) {
            Some(q) => q.entries.iter().map(|e| (e.0, e.1, e.2)).collect(),
            None => unassigned(p.index)?,
        };
        if got != want {
            let first = want
                .iter()
                .zip(&got)
                .position(|(a, b)| a != b)
                .unwrap_or(want.len().min(got.len()));
            let show = |v: Option<&(u16, u8, u8)>| match v {
                Some((i, s, b)) => format!("{i:#06x}:{s:02x}:{b}"),
                None => "nothing".into(),
            };
            return Err(differs(
                format!("{:#06x}", p.index),
                format!(
                    "{} entries configured, the subdevice maps {}; entry {} configured {}, the \
                     subdevice has {}",
                    want.len(),
                    got.len(),
                    first + 1,
                    show(want.get(first)),
                    show(got.get(first))
                ),
            ));
        }
    }
    Ok(())
}

fn name_entries(q: &mut PdoSource, p: &PdoMap, d: &DeviceConfig) {
    for (slot, e) in q.entries.iter_mut().zip(&p.entries) {
        if let Some(n) = e.name() {
            slot.3 = Some(n.to_string());
        }
        if slot.4 == 0
            && let Some(s) = d.sdo.iter().find(|s| s.index == slot.0 && s.sub == slot.1)
        {
            slot.4 = coe_code(s.ty);
        }
    }
}

fn read_mapping(
    sdo: &mut crate::coe::OnDemand<'_>,
    who: &str,
    pdo: u16,
) -> Result<Vec<(u16, u8, u8)>, DeviceError> {
    let err = |sub: u8| {
        move |source| DeviceError::Sdo {
            who: who.to_string(),
            action: "read back",
            object: format!("{pdo:#06x}:{sub:02x}"),
            value: String::new(),
            source: Box::new(SdoFailure::Coe(source)),
        }
    };
    let client = sdo.client().map_err(err(0))?;
    let n = client.upload_uint(pdo, 0, 1).map_err(err(0))?;
    let mut out = Vec::with_capacity(n as usize);
    for k in 1..=n as u8 {
        let m = client.upload_uint(pdo, k, 4).map_err(err(k))?;
        out.push(((m >> 16) as u16, (m >> 8) as u8, m as u8));
    }
    Ok(out)
}

fn hex_list(v: &[u16]) -> String {
    v.iter()
        .map(|p| format!("{p:#06x}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Check the image sizes of a configured subdevice after OP.
pub fn check_sizes(
    who: &str,
    d: &DeviceConfig,
    inputs: usize,
    outputs: usize,
) -> Result<(), DeviceError> {
    for (what, key, want, got) in [
        ("input process data", "input_bytes", d.input_bytes, inputs),
        (
            "output process data",
            "output_bytes",
            d.output_bytes,
            outputs,
        ),
    ] {
        if let Some(w) = want
            && w as usize != got
        {
            return Err(DeviceError::Size {
                who: who.to_string(),
                what,
                key,
                want: w,
                got,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    /// The contract's example, valid.
    const SERVO: &str = r#"
[[device]]
position = 2
name = "SERVO-COE"
input_bytes = 11
output_bytes = 11
pdo_assign = { sm2 = [0x1600], sm3 = [0x1A00] }

[[device.pdo_map]]
index = 0x1600
entries = ["0x6040:00:16", { entry = "0x607A:00:32", name = "Target position" }, "0x60FF:00:32", "0x6060:00:8"]

[[device.pdo_map]]
index = 0x1A00
entries = ["0x6041:00:16", "0x6064:00:32", "0x606C:00:32", "0x6061:00:8"]

[[device.sdo]]
index = 0x6060
sub = 0
type = "i8"
value = 8

[[device.sdo]]
index = 0x6085
sub = 0
type = "u32"
value = 50000
transition = "SO"
"#;

    fn err(text: &str) -> String {
        Config::parse(text, "c.toml").unwrap_err().to_string()
    }

    #[track_caller]
    fn refused(text: &str, want: &[&str]) {
        let e = err(text);
        for w in want {
            assert!(e.contains(w), "{text}\ngave {e:?}, wanted {w:?}");
        }
    }

    #[test]
    fn the_contract_example_is_valid() {
        let c = Config::parse(SERVO, "c.toml").expect("valid");
        let d = &c.device[0];
        assert_eq!(d.position, Some(2));
        assert_eq!(d.pdo_map[0].entries[1].name(), Some("Target position"));
        assert_eq!(d.sdo[0].transition, Transition::PS);
        assert_eq!(d.sdo[1].transition, Transition::SO);
        assert_eq!(encode(d.sdo[0].ty, &d.sdo[0].value).unwrap(), vec![8]);
        assert_eq!(
            encode(d.sdo[1].ty, &d.sdo[1].value).unwrap(),
            50000u32.to_le_bytes()
        );
    }

    #[test]
    fn entries_parse_in_hex_with_or_without_0x() {
        assert_eq!(parse_entry("0x6040:00:16"), Ok((0x6040, 0, 16)));
        assert_eq!(parse_entry("6040:0:16"), Ok((0x6040, 0, 16)));
        assert_eq!(parse_entry("0X607a:0A:0x20"), Ok((0x607a, 0x0a, 32)));
        assert_eq!(parse_entry("0:0:14"), Ok((0, 0, 14)));
        assert_eq!(mapping_value(0x6040, 0, 16), 0x6040_0010);
        for (bad, why) in [
            ("0x6040:00", "index:subindex:bits"),
            ("0x6040:00:16:1", "index:subindex:bits"),
            ("0xZZ40:00:16", "index \"0xZZ40\""),
            ("0x16040:00:16", "at most 4 digits"),
            ("0x6040:100:16", "at most 2 digits"),
            ("0x6040:00:0", "must be 1..=64"),
            ("0x6040:00:65", "must be 1..=64"),
            ("0x6040:00:ab", "not a number"),
            ("0:1:8", "padding"),
            (":00:8", "index \"\""),
        ] {
            let e = parse_entry(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn matchers_exactly_one() {
        refused(
            "[[device]]\nname = \"x\"\n",
            &["device[0] = no matcher", "exactly one"],
        );
        refused(
            "[[device]]\nposition = 1\nalias = 5\n",
            &["device[0] = several matchers"],
        );
        refused(
            "[[device]]\nposition = 1\nvendor_id = 5\nproduct_id = 1\n",
            &["several matchers"],
        );
        refused(
            "[[device]]\nvendor_id = 0x766\n",
            &["device[0].product_id = (missing)"],
        );
        refused(
            "[[device]]\nrevision = 1\nproduct_id = 3\n",
            &["device[0].vendor_id = (missing)"],
        );
        refused("[[device]]\nalias = 0\n", &["device[0].alias = 0"]);
        refused(
            "[segment]\nsubdevices = 3\n[[device]]\nposition = 3\n",
            &["device[0].position = 3", "below segment.subdevices (3)"],
        );
        refused(
            "[[device]]\nposition = 1\nbogus = 1\n",
            &["unknown field `bogus`"],
        );
        Config::parse(
            "[[device]]\nvendor_id = 0x766\nproduct_id = 0x30003\nrevision = 1\n",
            "c.toml",
        )
        .expect("identity");
    }

    #[test]
    fn two_entries_for_one_subdevice_are_refused() {
        refused(
            "[[device]]\nposition = 1\n[[device]]\nposition = 1\n",
            &[
                "device[1].position = 1",
                "device[0] matches the same position",
            ],
        );
        refused(
            "[[device]]\nalias = 7\n[[device]]\nposition = 7\n[[device]]\nalias = 7\n",
            &["device[2].alias = 0x0007", "device[0]"],
        );
        refused(
            "[[device]]\nvendor_id = 1\nproduct_id = 2\n[[device]]\nvendor_id = 1\nproduct_id = 2\n",
            &["device[1].product_id", "same identity"],
        );
        // Same identity, different revisions: each matches its own.
        Config::parse(
            "[[device]]\nvendor_id = 1\nproduct_id = 2\nrevision = 1\n\
             [[device]]\nvendor_id = 1\nproduct_id = 2\nrevision = 2\n",
            "c.toml",
        )
        .expect("two revisions");
    }

    #[test]
    fn pdo_indices_and_their_sync_manager() {
        refused(
            "[[device]]\nposition = 0\n[[device.pdo_map]]\nindex = 0x1800\nentries = []\n",
            &[
                "device[0].pdo_map[0].index = 0x1800",
                "RxPDO 0x1600..=0x17ff",
            ],
        );
        refused(
            "[[device]]\nposition = 0\npdo_assign = { sm2 = [0x1A00] }\n",
            &["device[0].pdo_assign.sm2[0] = 0x1a00", "sm2 carries RxPDOs"],
        );
        refused(
            "[[device]]\nposition = 0\npdo_assign = { sm3 = [0x1A00, 0x1600] }\n",
            &["device[0].pdo_assign.sm3[1] = 0x1600", "sm3 carries TxPDOs"],
        );
        refused(
            "[[device]]\nposition = 0\npdo_assign = { sm3 = [0x1A00, 0x1A00] }\n",
            &["device[0].pdo_assign.sm3[1] = 0x1a00", "assigned twice"],
        );
        refused(
            "[[device]]\nposition = 0\npdo_assign = { sm4 = [0x1A00] }\n",
            &["unknown field `sm4`"],
        );
        refused(
            "[[device]]\nposition = 0\n[[device.pdo_map]]\nindex = 0x1A00\nentries = []\n\
             [[device.pdo_map]]\nindex = 0x1A00\nentries = []\n",
            &[
                "device[0].pdo_map[1].index = 0x1a00",
                "already mapped by pdo_map[0]",
            ],
        );
    }

    #[test]
    fn entries_are_named_in_errors() {
        refused(
            "[[device]]\nposition = 0\n[[device]]\nposition = 1\n[[device]]\nposition = 2\n\
             [[device.pdo_map]]\nindex = 0x1600\nentries = [\"0x6040:00:16\", \"0x6040:00\"]\n",
            &[
                "device[2].pdo_map[0].entries[1] = \"0x6040:00\"",
                "index:subindex:bits",
            ],
        );
        refused(
            "[[device]]\nposition = 0\n[[device.pdo_map]]\nindex = 0x1600\n\
             entries = [{ entry = \"0x6040:00:99\", name = \"Controlword\" }]\n",
            &[
                "device[0].pdo_map[0].entries[0] = \"0x6040:00:99\"",
                "1..=64",
            ],
        );
        refused(
            "[[device]]\nposition = 0\n[[device.pdo_map]]\nindex = 0x1600\n\
             entries = [{ entry = \"0x6040:00:16\", name = \"\" }]\n",
            &["device[0].pdo_map[0].entries[0].name = \"\""],
        );
        refused(
            "[[device]]\nposition = 0\n[[device.pdo_map]]\nindex = 0x1600\nentries = [16]\n",
            &["an entry \"index:subindex:bits\" or a table"],
        );
        refused(
            "[[device]]\nposition = 0\n[[device.pdo_map]]\nindex = 0x1600\n\
             entries = [{ entry = \"0x6040:00:16\", nmae = \"x\" }]\n",
            &["an entry \"index:subindex:bits\" or a table"],
        );
        let many: Vec<String> = (0..256).map(|_| "\"0:0:1\"".to_string()).collect();
        refused(
            &format!(
                "[[device]]\nposition = 0\n[[device.pdo_map]]\nindex = 0x1600\nentries = [{}]\n",
                many.join(",")
            ),
            &["device[0].pdo_map[0].entries = 256 entries", "at most 255"],
        );
    }

    #[test]
    fn a_mapped_pdo_must_be_assigned_when_its_sm_is_configured() {
        refused(
            "[[device]]\nposition = 0\npdo_assign = { sm2 = [0x1600] }\n\
             [[device.pdo_map]]\nindex = 0x1601\nentries = [\"0x6040:00:16\"]\n",
            &[
                "device[0].pdo_map[0].index = 0x1601",
                "pdo_assign.sm2 does not list it",
            ],
        );
        // No assignment configured for that SM: the device's own may use it.
        Config::parse(
            "[[device]]\nposition = 0\npdo_assign = { sm3 = [0x1A00] }\n\
             [[device.pdo_map]]\nindex = 0x1601\nentries = [\"0x6040:00:16\"]\n",
            "c.toml",
        )
        .expect("sm2 not configured");
    }

    #[test]
    fn sizes_follow_the_mapping() {
        // All assigned PDOs mapped: 80 bits = 10 bytes, not 11.
        let t = SERVO.replace("output_bytes = 11", "output_bytes = 10");
        refused(
            &t,
            &["device[0].output_bytes = 10", "sm2 map 88 bits (11 bytes)"],
        );
        let t = SERVO.replace("input_bytes = 11", "input_bytes = 12");
        refused(
            &t,
            &["device[0].input_bytes = 12", "sm3 map 88 bits (11 bytes)"],
        );
        // An assigned PDO not in pdo_map: only "more than" is known.
        let t = SERVO.replace("sm3 = [0x1A00]", "sm3 = [0x1A00, 0x1A01]");
        Config::parse(&t, "c.toml").expect("0x1A01 unknown: 11 or more bytes");
        let t = t.replace("input_bytes = 11", "input_bytes = 10");
        refused(
            &t,
            &["device[0].input_bytes = 10", "88 bits (11 bytes) or more"],
        );
        // Rounded up to whole bytes, as ethercrab sizes the SM.
        Config::parse(
            "[[device]]\nposition = 0\ninput_bytes = 1\npdo_assign = { sm3 = [0x1A00] }\n\
             [[device.pdo_map]]\nindex = 0x1A00\nentries = [\"0x6000:01:1\", \"0:0:2\"]\n",
            "c.toml",
        )
        .expect("3 bits in 1 byte");
        refused(
            "[[device]]\nposition = 0\ninput_bytes = 9000\n",
            &["device[0].input_bytes = 9000", "0..=8191"],
        );
        // A mapping larger than a sync manager carries.
        let e: Vec<String> = (0..255).map(|_| "\"0:0:64\"".to_string()).collect();
        let mut t = String::from(
            "[[device]]\nposition = 0\npdo_assign = { sm3 = [0x1A00, 0x1A01, 0x1A02, 0x1A03, 0x1A04] }\n",
        );
        for p in 0..5 {
            t += &format!(
                "[[device.pdo_map]]\nindex = {}\nentries = [{}]\n",
                0x1A00 + p,
                e.join(",")
            );
        }
        refused(&t, &["device[0].pdo_assign.sm3 = 81600 bits", "8191 bytes"]);
    }

    #[test]
    fn sdo_values_parse_for_their_type_and_range() {
        let sdo = |ty: &str, value: &str| {
            format!(
                "[[device]]\nposition = 0\n[[device.sdo]]\nindex = 0x8000\nsub = 6\n\
                 type = \"{ty}\"\nvalue = {value}\n"
            )
        };
        refused(
            &sdo("u8", "300"),
            &[
                "device[0].sdo[0].value = 300 (u8)",
                "is not a u8: out of range 0..=255",
            ],
        );
        refused(&sdo("u16", "-1"), &["sdo[0].value = -1 (u16)", "not a u16"]);
        refused(&sdo("i8", "128"), &["-128..=127"]);
        refused(&sdo("i16", "-32769"), &["-32768..=32767"]);
        refused(&sdo("u32", "4294967296"), &["0..=4294967295"]);
        refused(
            &sdo("u16", "\"fast\""),
            &["sdo[0].value = \"fast\" (u16)", "not an unsigned integer"],
        );
        refused(
            &sdo("u16", "1.5"),
            &["must be an integer for u16 (got a float)"],
        );
        refused(
            &sdo("bool", "\"yes\""),
            &["must be true or false for bool (got a string)"],
        );
        refused(&sdo("f32", "1e39"), &["out of range for a 32-bit float"]);
        refused(&sdo("f32", "nan"), &["finite"]);
        refused(
            &sdo("f64", "true"),
            &["must be a number for f64 (got a boolean)"],
        );
        refused(&sdo("bytes", "\"01 0\""), &["not hex pairs"]);
        refused(&sdo("bytes", "\"zz\""), &["not hex pairs"]);
        refused(&sdo("bytes", "5"), &["must be a hex string"]);
        refused(&sdo("string", "\"\""), &["0 bytes: must be 1..=1024"]);
        refused(
            &sdo("string", &format!("{:?}", "x".repeat(1025))),
            &["1025 bytes: must be 1..=1024"],
        );
        refused(&sdo("u9", "1"), &["unknown type \"u9\""]);
        // Longer than an expedited transfer: accepted, written with the CoE client.
        for (ty, v) in [
            ("u64", "\"0xffffffffffffffff\""),
            ("i64", "-1"),
            ("f64", "1.0"),
            ("string", "\"hello\""),
            ("bytes", "\"01 02 03 04 05\""),
        ] {
            Config::parse(&sdo(ty, v), "c.toml").unwrap_or_else(|e| panic!("{ty} {v}: {e}"));
        }
        refused(
            "[[device]]\nposition = 0\n[[device.sdo]]\nindex = 0x6060\nsub = 0\ntype = \"i8\"\n\
             value = 8\ntransition = \"OP\"\n",
            &["unknown variant `OP`"],
        );
        refused(
            "[[device]]\nposition = 0\n[[device.sdo]]\nindex = 0\nsub = 0\ntype = \"u8\"\nvalue = 8\n",
            &["device[0].sdo[0].index = 0x0000"],
        );
        refused(
            "[[device]]\nposition = 0\n[[device.sdo]]\nindex = 0x1C12\nsub = 0\ntype = \"u8\"\nvalue = 0\n",
            &["device[0].sdo[0].index = 0x1c12", "pdo_map / pdo_assign"],
        );
        refused(
            "[[device]]\nposition = 0\n[[device.sdo]]\nindex = 0x6060\nsub = 0\ntype = \"i8\"\n",
            &["missing field `value`"],
        );
        let timed = |ms: &str| format!("{}timeout_ms = {ms}\n", sdo("u8", "1"));
        refused(
            &timed("0"),
            &["device[0].sdo[0].timeout_ms = 0", "must be 1..=120000 ms"],
        );
        refused(&timed("120001"), &["sdo[0].timeout_ms = 120001"]);
        refused(&timed("-5"), &["timeout_ms"]);
        let c = Config::parse(&timed("120000"), "c.toml").expect("the longest timeout");
        assert_eq!(c.device[0].sdo[0].timeout_ms, Some(120_000));
    }

    #[test]
    fn sdo_values_encode_little_endian() {
        let v = |ty: SdoType, value: toml::Value| encode(ty, &value).unwrap();
        use toml::Value::{Boolean, Float, Integer, String as S};
        assert_eq!(v(SdoType::Bool, Boolean(true)), [1]);
        assert_eq!(v(SdoType::Bool, Boolean(false)), [0]);
        assert_eq!(v(SdoType::U16, Integer(0x1234)), [0x34, 0x12]);
        assert_eq!(v(SdoType::U16, S("0xBEEF".into())), [0xef, 0xbe]);
        assert_eq!(v(SdoType::I16, Integer(-2)), [0xfe, 0xff]);
        assert_eq!(v(SdoType::F32, Float(1.5)), 1.5f32.to_le_bytes());
        assert_eq!(v(SdoType::F32, Integer(2)), 2f32.to_le_bytes());
        assert_eq!(v(SdoType::F64, Float(-0.25)), (-0.25f64).to_le_bytes());
        assert_eq!(
            v(SdoType::U64, S("0xffffffffffffffff".into())),
            u64::MAX.to_le_bytes()
        );
        assert_eq!(v(SdoType::I64, Integer(i64::MIN)), i64::MIN.to_le_bytes());
        assert_eq!(v(SdoType::Bytes, S("01 02 ff".into())), [1, 2, 0xff]);
        assert_eq!(v(SdoType::Bytes, S("0102FF".into())), [1, 2, 0xff]);
        assert_eq!(v(SdoType::String, S("1.0".into())), *b"1.0");
    }

    #[test]
    fn a_mapped_object_of_a_known_type_needs_its_width() {
        let t = SERVO.replace("\"0x6060:00:8\"", "\"0x6060:00:16\"");
        let t = t.replace("output_bytes = 11", "output_bytes = 12");
        refused(
            &t,
            &[
                "device[0].pdo_map[0].entries[3] = \"0x6060:00:16\"",
                "16 bits, but device[0].sdo[0] writes 0x6060:00 as i8 (8 bits)",
            ],
        );
        assert!(fits_bits(SdoType::Bool, 1) && fits_bits(SdoType::Bool, 8));
        assert!(!fits_bits(SdoType::Bool, 2));
        assert!(fits_bits(SdoType::Bytes, 24));
        assert!(fits_bits(SdoType::I32, 32) && !fits_bits(SdoType::I32, 16));
    }

    #[test]
    fn dc_static_sync_iterations_is_bounded() {
        let c = Config::parse("[dc]\nstatic_sync_iterations = 0\n", "c.toml").unwrap();
        assert_eq!(c.maindevice_config().dc_static_sync_iterations, 0);
        assert_eq!(
            Config::default()
                .maindevice_config()
                .dc_static_sync_iterations,
            ethercrab::MainDeviceConfig::default().dc_static_sync_iterations
        );
        refused(
            "[dc]\nstatic_sync_iterations = 2000000\n",
            &["dc.static_sync_iterations = 2000000", "0..=1000000 frames"],
        );
    }

    #[test]
    fn resolve_picks_one_entry_per_subdevice() {
        let found = |position, alias, product| Found {
            position,
            alias,
            identity: (0x766, product, 1),
        };
        let seg = [found(0, 0, 1), found(1, 0x10, 2), found(2, 0, 2)];
        let c = Config::parse(
            "[[device]]\nalias = 0x10\n[[device]]\nvendor_id = 0x766\nproduct_id = 1\n",
            "c.toml",
        )
        .unwrap();
        assert_eq!(resolve(&c.device, &seg).unwrap(), [Some(1), Some(0), None]);
        // One identity entry configures every subdevice with it.
        let c = Config::parse("[[device]]\nvendor_id = 0x766\nproduct_id = 2\n", "c.toml").unwrap();
        assert_eq!(resolve(&c.device, &seg).unwrap(), [None, Some(0), Some(0)]);
        let c = Config::parse(
            "[[device]]\nvendor_id = 0x766\nproduct_id = 2\nrevision = 3\n",
            "c.toml",
        )
        .unwrap();
        let e = resolve(&c.device, &seg).unwrap_err().to_string();
        assert!(
            e.contains("device[0] (vendor_id 0x00000766 product_id 0x00000002 revision 3): no such subdevice"),
            "{e}"
        );
        let c = Config::parse("[[device]]\nposition = 3\n", "c.toml").unwrap();
        let e = resolve(&c.device, &seg).unwrap_err().to_string();
        assert!(
            e.contains("device[0] (position 3): no such subdevice on the segment (3 subdevices)"),
            "{e}"
        );
        let c = Config::parse(
            "[[device]]\nposition = 1\n[[device]]\nvendor_id = 0x766\nproduct_id = 2\n",
            "c.toml",
        )
        .unwrap();
        let e = resolve(&c.device, &seg).unwrap_err().to_string();
        assert!(
            e.contains("position 1 is selected by both device[0] and device[1]"),
            "{e}"
        );
    }

    #[test]
    fn the_shipped_coe_example_is_valid() {
        let c = Config::parse(
            include_str!("../../../examples/coe/rtcat.toml"),
            "examples/coe/rtcat.toml",
        )
        .expect("valid");
        assert_eq!(c.device.len(), 2);
        let servo = &c.device[1];
        assert_eq!(servo.position, Some(2));
        let map: Vec<_> = servo.pdo_map[0]
            .entries
            .iter()
            .map(|e| parse_entry(e.text()).unwrap())
            .collect();
        assert_eq!(
            map,
            [
                (0x6040, 0, 16),
                (0x607a, 0, 32),
                (0x60ff, 0, 32),
                (0x6060, 0, 8)
            ]
        );
        assert_eq!(c.device[0].input_bytes, Some(16));
    }

    /// The commented `[[device]]` block of rtcat.example.toml, uncommented, is a valid
    /// configuration (so what the example documents works as written).
    #[test]
    fn the_example_device_block_uncommented_is_valid() {
        let ex = include_str!("../rtcat.example.toml");
        let start = ex
            .find("# [[device]]")
            .expect("the example documents [[device]]");
        let block: String = ex[start..]
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l))
            .map(|l| format!("{l}\n"))
            .collect();
        let c = Config::parse(&block, "block").expect("valid");
        assert_eq!(c.device.len(), 1);
        assert_eq!(c.device[0].pdo_map[0].entries.len(), 4);
        assert_eq!(c.device[0].sdo[0].ty, SdoType::I8);
    }

    fn servo_source(tx: Vec<(u16, u8, u8)>) -> SubdeviceSource {
        let pdo = |index, sm, direction, e: Vec<(u16, u8, u8)>| PdoSource {
            index,
            name: None,
            sync_manager: sm,
            direction,
            entries: e.into_iter().map(|(i, s, b)| (i, s, b, None, 0)).collect(),
        };
        SubdeviceSource {
            address: 0x1002,
            alias: 0,
            name: "SERVO-COE".into(),
            identity: crate::layout::Identity {
                vendor_id: 0x766,
                product_code: 0x30003,
                revision: 1,
                serial: 3,
            },
            coe: true,
            mapping: crate::layout::MappingSource::Coe,
            pdos: vec![
                pdo(
                    0x1600,
                    2,
                    Direction::Outputs,
                    vec![
                        (0x6040, 0, 16),
                        (0x607a, 0, 32),
                        (0x60ff, 0, 32),
                        (0x6060, 0, 8),
                    ],
                ),
                pdo(0x1a00, 3, Direction::Inputs, tx),
            ],
        }
    }

    /// A device that ignores a write without aborting it: the comparison names the PDO and the
    /// first difference.
    #[test]
    fn compare_names_the_pdo_and_the_first_difference() {
        let c = Config::parse(SERVO, "c.toml").unwrap();
        let d = &c.device[0];
        let good = vec![
            (0x6041, 0, 16),
            (0x6064, 0, 32),
            (0x606c, 0, 32),
            (0x6061, 0, 8),
        ];
        let none = |_| -> Result<Vec<(u16, u8, u8)>, DeviceError> { panic!("all assigned") };
        compare("sub", d, &servo_source(good.clone()), none).unwrap();
        let e = compare("sub", d, &servo_source(vec![(0x6041, 0, 16)]), none)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "sub: 0x1a00: 4 entries configured, the subdevice maps 1; entry 2 configured \
             0x6064:00:32, the subdevice has nothing"
        );
        let mut wrong = good.clone();
        wrong[2] = (0x606c, 0, 16);
        let e = compare("sub", d, &servo_source(wrong), none)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("entry 3 configured 0x606c:00:32, the subdevice has 0x606c:00:16"),
            "{e}"
        );
        // The assignment: the device kept another PDO.
        let mut src = servo_source(good.clone());
        src.pdos[1].index = 0x1a01;
        let e = compare("sub", d, &src, none).unwrap_err().to_string();
        assert_eq!(
            e,
            "sub: 0x1c13: assignment configured [0x1a00], the subdevice has [0x1a01]"
        );
        // SM3's assignment left to the device: its mapped PDO is read back.
        let t2 = SERVO.replace(
            "pdo_assign = { sm2 = [0x1600], sm3 = [0x1A00] }",
            "pdo_assign = { sm2 = [0x1600] }",
        );
        let c = Config::parse(&t2, "c.toml").unwrap();
        let mut src = servo_source(good.clone());
        src.pdos.pop();
        let mut asked = Vec::new();
        compare("sub", &c.device[0], &src, |pdo| {
            asked.push(pdo);
            Ok(good.clone())
        })
        .unwrap();
        assert_eq!(asked, [0x1a00]);
    }

    /// A 16-channel digital output without a mailbox: channels 1-8 on SM0, 9-16 on SM1.
    const DO16: &str = "[[device]]\nposition = 0\noutput_bytes = 2\n\
        pdo_assign = { sm0 = [0x1600, 0x1601, 0x1602, 0x1603, 0x1604, 0x1605, 0x1606, 0x1607], \
        sm1 = [0x1608, 0x1609, 0x160A, 0x160B, 0x160C, 0x160D, 0x160E, 0x160F] }\n";

    #[test]
    fn sm0_and_sm1_assignments_are_validated_offline() {
        let c = Config::parse(DO16, "c.toml").expect("valid");
        let a = c.device[0].pdo_assign.as_ref().unwrap();
        let sms: Vec<u8> = a.lists().map(|(n, _)| n).collect();
        assert_eq!(sms, [0, 1]);
        refused(
            &DO16.replace("0x1609", "0x1A00"),
            &[
                "device[0].pdo_assign.sm1[1] = 0x1a00",
                "sm1 lists RxPDOs before it: a sync manager carries one direction",
            ],
        );
        refused(
            &DO16.replace("0x1609", "0x1600"),
            &[
                "device[0].pdo_assign.sm1[1] = 0x1600",
                "already assigned to sm0",
            ],
        );
        refused(
            &DO16.replace("0x1609", "0x1C00"),
            &["device[0].pdo_assign.sm1[1] = 0x1c00", "must be an RxPDO"],
        );
        refused(
            &DO16.replace("sm1 =", "sm4 ="),
            &["unknown field `sm4`", "sm0", "sm3"],
        );
        // Startup SDOs need a mailbox, which a device with process data on SM0/SM1 lacks.
        refused(
            &format!("{DO16}[[device.sdo]]\nindex = 0x8000\nsub = 1\ntype = \"u8\"\nvalue = 1\n"),
            &["device[0].sdo[0].index = 0x8000", "takes no SDOs"],
        );
        // Sizes: an SM0/SM1 list is a lower bound (the device may have more SMs).
        let mapped = "[[device]]\nposition = 0\noutput_bytes = 2\n\
            pdo_assign = { sm0 = [0x1600] }\n\
            [[device.pdo_map]]\nindex = 0x1600\nentries = [\"0x7000:01:1\"]\n";
        Config::parse(mapped, "c.toml").expect("1 byte known, 2 configured");
        refused(
            &mapped.replace("output_bytes = 2", "output_bytes = 0"),
            &[
                "device[0].output_bytes = 0",
                "the PDOs assigned to sm0 map 1 bits (1 bytes) or more",
            ],
        );
    }

    /// The SII's assignment of a device without CoE: SM0 outputs, SM1 outputs.
    fn do16_source() -> SubdeviceSource {
        let mut s = servo_source(Vec::new());
        s.coe = false;
        s.mapping = crate::layout::MappingSource::Sii;
        s.pdos = (0..16u16)
            .map(|c| PdoSource {
                index: 0x1600 + c,
                name: None,
                sync_manager: (c / 8) as u8,
                direction: Direction::Outputs,
                entries: vec![(0x7000 + 0x10 * c, 1, 1, None, 1)],
            })
            .collect();
        s
    }

    #[test]
    fn an_sii_assignment_is_compared_per_sync_manager() {
        let c = Config::parse(DO16, "c.toml").unwrap();
        let none = |_| -> Result<Vec<(u16, u8, u8)>, DeviceError> { panic!("all assigned") };
        compare("sub", &c.device[0], &do16_source(), none).unwrap();
        // Channel 9 on SM0 instead of SM1.
        let mut src = do16_source();
        src.pdos[8].sync_manager = 0;
        let e = compare("sub", &c.device[0], &src, none)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "sub: SM0 assignment in the SII: assignment configured [0x1600, 0x1601, \
                 0x1602, 0x1603, 0x1604, 0x1605, 0x1606, 0x1607], the subdevice has [0x1600"
            ),
            "{e}"
        );
    }

    #[test]
    fn the_mailbox_decides_what_can_be_asked() {
        let c = Config::parse(DO16, "c.toml").unwrap();
        check_mailbox("sub", &c.device[0], false).unwrap();
        let e = check_mailbox("sub", &c.device[0], true)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "sub: pdo_assign.sm0: SM0/SM1 are the mailbox of this CoE subdevice: its process \
             data are on SM2/SM3"
        );
        let c = Config::parse(SERVO, "c.toml").unwrap();
        check_mailbox("sub", &c.device[0], true).unwrap();
        let e = check_mailbox("sub", &c.device[0], false)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("sub: sdo: the subdevice has no CoE mailbox"),
            "{e}"
        );
    }

    #[test]
    fn size_check_names_the_key() {
        let c = Config::parse(SERVO, "c.toml").unwrap();
        let d = &c.device[0];
        check_sizes("sub", d, 11, 11).unwrap();
        let e = check_sizes("sub", d, 11, 2).unwrap_err().to_string();
        assert_eq!(
            e,
            "sub: output process data is 2 bytes, configured output_bytes = 11"
        );
    }
}
