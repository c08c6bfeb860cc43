//! The object dictionary part of a segment description: `coe = true` and `[[device.object]]`.
//!
//! ```toml
//! [[device]]
//! name = "SERVO-COE"
//! coe = true
//! device_type = 0x00020192      # 0x1000
//! pdo_buffer = 64               # bytes each process data SM holds (default 64)
//! [[device.object]]
//! index = 0x6060
//! name = "Modes of operation"
//! type = "INT8"                 # BOOL, INT8..INT64, UINT8..UINT64 (or UNSIGNED8..), REAL32,
//!                               # REAL64, VISIBLE_STRING, OCTET_STRING, RECORD, ARRAY
//! access = "rw"                 # ro (default), rw, wo, rw_preop (writable in PRE-OP only)
//! pdo_mapping = "rx"            # rx (outputs) or tx (inputs); default: not mappable
//! default = 0                   # integer, float, bool, string; OCTET_STRING: "01 02 ff"
//! min = -128                    # optional range of an integer
//! max = 127
//! [[device.object]]
//! index = 0x8000
//! name = "AI Settings Ch.1"
//! type = "RECORD"
//! [[device.object.entry]]       # subindex 0 (the highest subindex) is generated
//! sub = 6
//! name = "Enable filter"
//! type = "BOOL"
//! access = "rw"
//! ```

use crate::od::{Access, Entry, Object, ObjectCode, ValueType};
use crate::pdo::{DataType, Direction};
use crate::spec::{CoePdo, CoeSpec, DeviceSpec, SpecError};
use serde::Deserialize;

/// Default capacity of a process data SM buffer of a CoE device.
pub const DEFAULT_PDO_BUFFER: u16 = 64;
/// Default 0x1C32:05 / 0x1C33:05.
pub const DEFAULT_MIN_CYCLE_NS: u32 = 100_000;
/// Longest string value.
pub const MAX_STRING: usize = 255;
/// Most objects a description lists per device.
pub const MAX_OBJECTS: usize = 1024;

/// One `[[device.object]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ObjectEntry {
    index: u16,
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    access: Option<String>,
    #[serde(default)]
    pdo_mapping: Option<String>,
    #[serde(default)]
    default: Option<toml::Value>,
    #[serde(default)]
    min: Option<i64>,
    #[serde(default)]
    max: Option<i64>,
    #[serde(default)]
    backup: Option<bool>,
    #[serde(default)]
    setting: Option<bool>,
    #[serde(default)]
    entry: Vec<SubEntry>,
}

/// The fields an entry has (a VAR object carries them itself).
#[derive(Debug, Clone, PartialEq, Default)]
struct ValueFields {
    access: Option<String>,
    pdo_mapping: Option<String>,
    default: Option<toml::Value>,
    min: Option<i64>,
    max: Option<i64>,
    backup: Option<bool>,
    setting: Option<bool>,
}

/// One `[[device.object.entry]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubEntry {
    sub: u8,
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    access: Option<String>,
    #[serde(default)]
    pdo_mapping: Option<String>,
    #[serde(default)]
    default: Option<toml::Value>,
    #[serde(default)]
    min: Option<i64>,
    #[serde(default)]
    max: Option<i64>,
    #[serde(default)]
    backup: Option<bool>,
    #[serde(default)]
    setting: Option<bool>,
}

/// The CoE fields of one `[[device]]`.
pub(crate) struct CoeFields<'a> {
    pub coe: bool,
    pub device_type: Option<u32>,
    pub hardware_version: Option<&'a str>,
    pub software_version: Option<&'a str>,
    pub pdo_buffer: Option<u16>,
    pub objects: &'a [ObjectEntry],
}

fn invalid<T>(m: String) -> Result<T, SpecError> {
    Err(SpecError::Invalid(m))
}

/// The [`CoeSpec`] of `device[i]` (`None` without `coe = true`; then no CoE field may be set).
pub(crate) fn coe_spec(
    i: usize,
    f: CoeFields<'_>,
    d: &DeviceSpec,
    pdos: Vec<CoePdo>,
) -> Result<Option<CoeSpec>, SpecError> {
    if !f.coe {
        for (key, set) in [
            ("device_type", f.device_type.is_some()),
            ("hardware_version", f.hardware_version.is_some()),
            ("software_version", f.software_version.is_some()),
            ("pdo_buffer", f.pdo_buffer.is_some()),
            ("object", !f.objects.is_empty()),
        ] {
            if set {
                return invalid(format!(
                    "device[{i}].{key}: only a CoE device (coe = true) has an object dictionary"
                ));
            }
        }
        return Ok(None);
    }
    let mut pdos = pdos;
    // A direction given by its byte count only: the generated default PDOs, fixed.
    for (dir, list) in [
        (Direction::Outputs, d.rx_pdos()),
        (Direction::Inputs, d.tx_pdos()),
    ] {
        if !pdos.iter().any(|p| p.dir == dir) {
            pdos.extend(list.iter().map(|p| CoePdo {
                dir,
                pdo: p.clone(),
                assigned: true,
                assignable: false,
                mappable: false,
                max_entries: p.entries.len() as u8,
            }));
        }
    }
    let buffer = f.pdo_buffer.unwrap_or(DEFAULT_PDO_BUFFER);
    if buffer == 0 || buffer > crate::spec::MAX_IO_BYTES {
        return invalid(format!(
            "device[{i}].pdo_buffer = {buffer}: must be 1..={} bytes",
            crate::spec::MAX_IO_BYTES
        ));
    }
    for (key, bytes) in [("outputs", d.outputs), ("inputs", d.inputs)] {
        if bytes > buffer {
            return invalid(format!(
                "device[{i}].{key}: the default PDOs carry {bytes} bytes, more than \
                 pdo_buffer = {buffer}"
            ));
        }
    }
    if pdos.iter().filter(|p| p.dir == Direction::Outputs).count() > 255
        || pdos.iter().filter(|p| p.dir == Direction::Inputs).count() > 255
    {
        return invalid(format!("device[{i}]: more than 255 PDOs in one direction"));
    }
    for (key, v) in [
        ("hardware_version", f.hardware_version),
        ("software_version", f.software_version),
    ] {
        if let Some(v) = v
            && (v.len() > MAX_STRING || !v.bytes().all(|b| (0x20..=0x7e).contains(&b)))
        {
            return invalid(format!(
                "device[{i}].{key} = {:?}: must be at most {MAX_STRING} printable ASCII characters",
                crate::spec::truncated(v, 40)
            ));
        }
    }
    if f.objects.len() > MAX_OBJECTS {
        return invalid(format!(
            "device[{i}].object: {} objects, at most {MAX_OBJECTS}",
            f.objects.len()
        ));
    }
    let mut objects: Vec<Object> = Vec::new();
    for (j, o) in f.objects.iter().enumerate() {
        let at = format!("device[{i}].object[{j}]");
        let obj = object(&at, o)?;
        if reserved(obj.index, &pdos) {
            return invalid(format!(
                "{at}.index = {:#06x}: generated by the simulator (0x1000, 0x1008, 0x1009, \
                 0x100A, 0x1018, 0x1C00, 0x1C12, 0x1C13, 0x1C32, 0x1C33 and the PDO mapping \
                 objects)",
                obj.index
            ));
        }
        if let Some(k) = objects.iter().position(|x| x.index == obj.index) {
            return invalid(format!(
                "{at}.index = {:#06x}: already device[{i}].object[{k}]",
                obj.index
            ));
        }
        objects.push(obj);
    }
    // A PDO entry that maps a listed object must agree with it.
    for p in &pdos {
        for (k, e) in p.pdo.entries.iter().enumerate() {
            if e.is_padding() {
                continue;
            }
            let Some(o) = objects.iter().find(|o| o.index == e.index) else {
                continue;
            };
            let at = format!(
                "device[{i}].{}[{:#06x}].entries[{k}]",
                p.dir.key(),
                p.pdo.index
            );
            let Some(oe) = o.entry(e.sub) else {
                return invalid(format!(
                    "{at}: object {:#06x} has no subindex {}",
                    e.index, e.sub
                ));
            };
            if oe.ty != ValueType::Basic(e.data_type.unwrap_or(DataType::Unsigned8))
                || oe.mapping != Some(p.dir)
            {
                return invalid(format!(
                    "{at}: object {:#06x}:{:02x} must be of type {} with pdo_mapping = \"{}\"",
                    e.index,
                    e.sub,
                    e.data_type.map_or("?", DataType::name),
                    if p.dir == Direction::Outputs {
                        "rx"
                    } else {
                        "tx"
                    }
                ));
            }
        }
    }
    Ok(Some(CoeSpec {
        device_type: f.device_type.unwrap_or(0),
        hardware_version: f.hardware_version.unwrap_or("1.0").to_string(),
        software_version: f.software_version.unwrap_or("1.0").to_string(),
        min_cycle_ns: DEFAULT_MIN_CYCLE_NS,
        pdo_buffer_bytes: buffer,
        pdos,
        objects,
    }))
}

fn reserved(index: u16, pdos: &[CoePdo]) -> bool {
    matches!(
        index,
        0x1000 | 0x1008 | 0x1009 | 0x100a | 0x1018 | 0x1c00 | 0x1c12 | 0x1c13 | 0x1c32 | 0x1c33
    ) || pdos.iter().any(|p| p.pdo.index == index)
}

fn object(at: &str, o: &ObjectEntry) -> Result<Object, SpecError> {
    crate::spec::check_name_pub(&format!("{at}.name"), &o.name)?;
    let value = ValueFields {
        access: o.access.clone(),
        pdo_mapping: o.pdo_mapping.clone(),
        default: o.default.clone(),
        min: o.min,
        max: o.max,
        backup: o.backup,
        setting: o.setting,
    };
    if o.index == 0 {
        return invalid(format!("{at}.index = 0: index 0 is padding, not an object"));
    }
    match o.ty.as_str() {
        "RECORD" | "ARRAY" => {
            let code = if o.ty == "RECORD" {
                ObjectCode::Record
            } else {
                ObjectCode::Array
            };
            if value != ValueFields::default() {
                return invalid(format!(
                    "{at}: a {} has no access, pdo_mapping, default, min, max, backup or \
                     setting of its own; give them to its [[device.object.entry]]",
                    o.ty
                ));
            }
            if o.entry.is_empty() {
                return invalid(format!("{at}.entry: a {} needs at least one entry", o.ty));
            }
            let mut entries: Vec<Entry> = Vec::new();
            for (k, s) in o.entry.iter().enumerate() {
                let eat = format!("{at}.entry[{k}]");
                if s.sub == 0 {
                    return invalid(format!(
                        "{eat}.sub = 0: subindex 0 (the highest subindex) is generated"
                    ));
                }
                if entries.iter().any(|e| e.sub == s.sub) {
                    return invalid(format!("{eat}.sub = {}: listed twice", s.sub));
                }
                let fields = ValueFields {
                    access: s.access.clone(),
                    pdo_mapping: s.pdo_mapping.clone(),
                    default: s.default.clone(),
                    min: s.min,
                    max: s.max,
                    backup: s.backup,
                    setting: s.setting,
                };
                entries.push(entry(&eat, s.sub, &s.name, &s.ty, &fields)?);
            }
            if code == ObjectCode::Array && entries.iter().any(|e| e.ty != entries[0].ty) {
                return invalid(format!(
                    "{at}.entry: the entries of an ARRAY have one type; use a RECORD"
                ));
            }
            entries.sort_by_key(|e| e.sub);
            Ok(Object::compound(o.index, &o.name, code, entries))
        }
        _ => {
            if !o.entry.is_empty() {
                return invalid(format!(
                    "{at}.entry: only a RECORD or ARRAY has entries (type = {:?})",
                    crate::spec::truncated(&o.ty, 40)
                ));
            }
            let e = entry(at, 0, &o.name, &o.ty, &value)?;
            Ok(Object::var(o.index, &o.name, e))
        }
    }
}

fn entry(at: &str, sub: u8, name: &str, ty: &str, f: &ValueFields) -> Result<Entry, SpecError> {
    crate::spec::check_name_pub(&format!("{at}.name"), name)?;
    let Some(vt) = ValueType::from_name(ty) else {
        return invalid(format!(
            "{at}.type = {:?}: not a data type; one of BOOL, INT8, INT16, INT32, INT64, UINT8, \
             UINT16, UINT32, UINT64, REAL32, REAL64, VISIBLE_STRING, OCTET_STRING (RECORD and \
             ARRAY for an object)",
            crate::spec::truncated(ty, 40)
        ));
    };
    let access = match f.access.as_deref() {
        None => Access::Ro,
        Some(a) => Access::from_name(a).ok_or_else(|| {
            SpecError::Invalid(format!(
                "{at}.access = {:?}: one of ro, rw, wo, rw_preop",
                crate::spec::truncated(a, 40)
            ))
        })?,
    };
    let mapping = match f.pdo_mapping.as_deref() {
        None => None,
        Some("rx") => Some(Direction::Outputs),
        Some("tx") => Some(Direction::Inputs),
        Some(m) => {
            return invalid(format!(
                "{at}.pdo_mapping = {:?}: \"rx\" (outputs) or \"tx\" (inputs)",
                crate::spec::truncated(m, 40)
            ));
        }
    };
    if mapping.is_some() && !matches!(vt, ValueType::Basic(_)) {
        return invalid(format!("{at}.pdo_mapping: a string cannot be mapped"));
    }
    let int_type = match vt {
        ValueType::Basic(t) if !matches!(t, DataType::Real32 | DataType::Real64) => Some(t),
        _ => None,
    };
    if (f.min.is_some() || f.max.is_some()) && int_type.is_none() {
        return invalid(format!("{at}: min and max are for integer types, not {ty}"));
    }
    let (lo, hi) = int_type.map_or((0, 0), type_range);
    for (key, v) in [("min", f.min), ("max", f.max)] {
        if let Some(v) = v
            && (i128::from(v) < lo || i128::from(v) > hi)
        {
            return invalid(format!("{at}.{key} = {v}: outside the range of {ty}"));
        }
    }
    if let (Some(a), Some(b)) = (f.min, f.max)
        && a > b
    {
        return invalid(format!("{at}: min = {a} is above max = {b}"));
    }
    let default = default_value(at, vt, f)?;
    Ok(Entry {
        sub,
        name: name.to_string(),
        ty: vt,
        access,
        mapping,
        default,
        min: f.min.map(i128::from),
        max: f.max.map(i128::from),
        backup: f.backup.unwrap_or(false),
        setting: f.setting.unwrap_or(false),
    })
}

/// The range of an integer type.
pub fn type_range(t: DataType) -> (i128, i128) {
    let bits = u32::from(t.bits());
    match t {
        DataType::Bool => (0, 1),
        DataType::Int8 | DataType::Int16 | DataType::Int24 | DataType::Int32 | DataType::Int64 => {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        }
        _ => (0, (1i128 << bits) - 1),
    }
}

fn default_value(at: &str, vt: ValueType, f: &ValueFields) -> Result<Vec<u8>, SpecError> {
    let bad = |what: &str| {
        SpecError::Invalid(format!(
            "{at}.default = {}: {what}",
            crate::spec::truncated(
                &f.default.as_ref().map_or(String::new(), |v| v.to_string()),
                40
            )
        ))
    };
    let Some(v) = &f.default else {
        return Ok(match vt.sdo_bytes() {
            Some(n) => vec![0; n],
            None => Vec::new(),
        });
    };
    match vt {
        ValueType::VisibleString => match v.as_str() {
            Some(s) if s.len() <= MAX_STRING && s.is_ascii() => Ok(s.as_bytes().to_vec()),
            _ => Err(bad(&format!(
                "a string of at most {MAX_STRING} ASCII characters"
            ))),
        },
        ValueType::OctetString => {
            let s = v
                .as_str()
                .ok_or_else(|| bad("hex bytes as a string, \"01 02 ff\""))?;
            let bytes: Result<Vec<u8>, _> = s
                .split_whitespace()
                .map(|b| u8::from_str_radix(b, 16))
                .collect();
            match bytes {
                Ok(b) if b.len() <= MAX_STRING => Ok(b),
                _ => Err(bad("hex bytes as a string, \"01 02 ff\"")),
            }
        }
        ValueType::Basic(DataType::Real32) => {
            let x = v.as_float().or(v.as_integer().map(|i| i as f64));
            x.map(|x| (x as f32).to_le_bytes().to_vec())
                .ok_or_else(|| bad("a number"))
        }
        ValueType::Basic(DataType::Real64) => {
            let x = v.as_float().or(v.as_integer().map(|i| i as f64));
            x.map(|x| x.to_le_bytes().to_vec())
                .ok_or_else(|| bad("a number"))
        }
        ValueType::Basic(t) => {
            let n = match (t, v) {
                (DataType::Bool, toml::Value::Boolean(b)) => i128::from(*b),
                (_, toml::Value::Integer(i)) => i128::from(*i),
                _ => return Err(bad(&format!("an integer of type {t}"))),
            };
            let (lo, hi) = type_range(t);
            if n < lo || n > hi {
                return Err(bad(&format!("outside the range of {t}")));
            }
            if f.min.is_some_and(|m| n < i128::from(m)) || f.max.is_some_and(|m| n > i128::from(m))
            {
                return Err(bad("outside min..=max"));
            }
            let bytes = usize::from(t.bits()).div_ceil(8);
            Ok((n as u128).to_le_bytes()[..bytes].to_vec())
        }
    }
}
