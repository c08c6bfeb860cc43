//! SDO value types by name (`bool u8 u16 u32 u64 i8 i16 i32 i64 f32 f64 string bytes`): parsing
//! a value the user typed into the bytes an SDO carries, and printing bytes read back.
//! Unsigned values print as `0x...` zero-padded to the type's width, signed and floats in
//! decimal, strings as text, bytes as hex.

use std::fmt::Write as _;
use thiserror::Error;

/// A type an SDO value is read or written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SdoType {
    /// BOOLEAN, one byte 0 or 1.
    Bool,
    /// UNSIGNED8.
    U8,
    /// UNSIGNED16.
    U16,
    /// UNSIGNED32.
    U32,
    /// UNSIGNED64.
    U64,
    /// INTEGER8.
    I8,
    /// INTEGER16.
    I16,
    /// INTEGER32.
    I32,
    /// INTEGER64.
    I64,
    /// REAL32.
    F32,
    /// REAL64.
    F64,
    /// VISIBLE_STRING.
    String,
    /// Raw bytes (OCTET_STRING, DOMAIN, or anything else).
    Bytes,
}

/// The type names, as the command line and rtcat.toml spell them.
pub const TYPE_NAMES: &str = "bool u8 u16 u32 u64 i8 i16 i32 i64 f32 f64 string bytes";

/// A value that does not fit its type, or a type name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ValueError {
    /// Not one of [`TYPE_NAMES`].
    #[error("unknown type {0:?}: the types are {TYPE_NAMES}")]
    UnknownType(String),
    /// The value does not parse as, or does not fit, the type.
    #[error("value {value:?} is not a {ty}: {why}")]
    Value {
        /// What the user typed.
        value: String,
        /// The type.
        ty: SdoType,
        /// Why.
        why: String,
    },
    /// The bytes read are not as long as the type.
    #[error("{len} bytes read, a {ty} has {want}")]
    Length {
        /// The type.
        ty: SdoType,
        /// Its size.
        want: usize,
        /// Bytes read.
        len: usize,
    },
}

impl std::fmt::Display for SdoType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SdoType {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        Ok(match s {
            "bool" => SdoType::Bool,
            "u8" => SdoType::U8,
            "u16" => SdoType::U16,
            "u32" => SdoType::U32,
            "u64" => SdoType::U64,
            "i8" => SdoType::I8,
            "i16" => SdoType::I16,
            "i32" => SdoType::I32,
            "i64" => SdoType::I64,
            "f32" => SdoType::F32,
            "f64" => SdoType::F64,
            "string" => SdoType::String,
            "bytes" => SdoType::Bytes,
            _ => return Err(ValueError::UnknownType(s.to_string())),
        })
    }
}

impl SdoType {
    /// The name.
    pub fn name(self) -> &'static str {
        match self {
            SdoType::Bool => "bool",
            SdoType::U8 => "u8",
            SdoType::U16 => "u16",
            SdoType::U32 => "u32",
            SdoType::U64 => "u64",
            SdoType::I8 => "i8",
            SdoType::I16 => "i16",
            SdoType::I32 => "i32",
            SdoType::I64 => "i64",
            SdoType::F32 => "f32",
            SdoType::F64 => "f64",
            SdoType::String => "string",
            SdoType::Bytes => "bytes",
        }
    }

    /// Bytes of a value of the type; `None` for strings and bytes (any length).
    pub fn size(self) -> Option<usize> {
        Some(match self {
            SdoType::Bool | SdoType::U8 | SdoType::I8 => 1,
            SdoType::U16 | SdoType::I16 => 2,
            SdoType::U32 | SdoType::I32 | SdoType::F32 => 4,
            SdoType::U64 | SdoType::I64 | SdoType::F64 => 8,
            SdoType::String | SdoType::Bytes => return None,
        })
    }

    /// The type of a CoE data type code (ETG.1000.6 Table 63), if it is one of these.
    pub fn from_coe(code: u16) -> Option<SdoType> {
        Some(match code {
            0x0001 => SdoType::Bool,
            0x0002 => SdoType::I8,
            0x0003 => SdoType::I16,
            0x0004 => SdoType::I32,
            0x0015 => SdoType::I64,
            0x0005 => SdoType::U8,
            0x0006 => SdoType::U16,
            0x0007 => SdoType::U32,
            0x001b => SdoType::U64,
            0x0008 => SdoType::F32,
            0x0011 => SdoType::F64,
            0x0009 => SdoType::String,
            0x000a | 0x000f => SdoType::Bytes,
            _ => return None,
        })
    }

    fn bad(self, value: &str, why: impl Into<String>) -> ValueError {
        ValueError::Value {
            value: value.to_string(),
            ty: self,
            why: why.into(),
        }
    }

    /// The bytes (little-endian) of `value` typed on a command line: integers in decimal or
    /// with `0x`, `-` only for the signed types; `true`/`false`/`1`/`0` for bool; bytes as
    /// hex pairs, optionally separated by spaces (`"01 02 ff"`).
    pub fn encode(self, value: &str) -> Result<Vec<u8>, ValueError> {
        let v = value.trim();
        match self {
            SdoType::Bool => match v {
                "true" | "1" => Ok(vec![1]),
                "false" | "0" => Ok(vec![0]),
                _ => Err(self.bad(value, "use true, false, 1 or 0")),
            },
            SdoType::U8 | SdoType::U16 | SdoType::U32 | SdoType::U64 => {
                let n = parse_unsigned(v).ok_or_else(|| {
                    self.bad(value, "not an unsigned integer (decimal, or hex with 0x)")
                })?;
                let size = self.size().unwrap_or(8);
                let max = if size == 8 {
                    u64::MAX
                } else {
                    (1u64 << (8 * size)) - 1
                };
                if n > max {
                    return Err(self.bad(value, format!("out of range 0..={max}")));
                }
                Ok(n.to_le_bytes()[..size].to_vec())
            }
            SdoType::I8 | SdoType::I16 | SdoType::I32 | SdoType::I64 => {
                let n = parse_signed(v)
                    .ok_or_else(|| self.bad(value, "not an integer (decimal, or hex with 0x)"))?;
                let size = self.size().unwrap_or(8);
                let (min, max) = if size == 8 {
                    (i64::MIN, i64::MAX)
                } else {
                    (-(1i64 << (8 * size - 1)), (1i64 << (8 * size - 1)) - 1)
                };
                if n < min || n > max {
                    return Err(self.bad(value, format!("out of range {min}..={max}")));
                }
                Ok(n.to_le_bytes()[..size].to_vec())
            }
            SdoType::F32 => {
                let f: f32 = v.parse().map_err(|_| self.bad(value, "not a number"))?;
                if !f.is_finite() {
                    return Err(self.bad(value, "out of range for a 32-bit float"));
                }
                Ok(f.to_le_bytes().to_vec())
            }
            SdoType::F64 => {
                let f: f64 = v.parse().map_err(|_| self.bad(value, "not a number"))?;
                if !f.is_finite() {
                    return Err(self.bad(value, "not finite"));
                }
                Ok(f.to_le_bytes().to_vec())
            }
            // The string as typed, untrimmed: spaces may be part of it.
            SdoType::String => Ok(value.as_bytes().to_vec()),
            SdoType::Bytes => parse_hex_bytes(v).map_err(|why| self.bad(value, why)),
        }
    }

    /// `bytes` read from an SDO, printed as the type says.
    pub fn format(self, bytes: &[u8]) -> Result<String, ValueError> {
        if let Some(want) = self.size()
            && bytes.len() != want
        {
            return Err(ValueError::Length {
                ty: self,
                want,
                len: bytes.len(),
            });
        }
        let mut b8 = [0u8; 8];
        b8[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
        let u = u64::from_le_bytes(b8);
        Ok(match self {
            SdoType::Bool => match bytes[0] {
                0 => "false".into(),
                1 => "true".into(),
                b => format!("true ({b:#04x})"),
            },
            SdoType::U8 => format!("{u:#04x}"),
            SdoType::U16 => format!("{u:#06x}"),
            SdoType::U32 => format!("{u:#010x}"),
            SdoType::U64 => format!("{u:#018x}"),
            SdoType::I8 => (bytes[0] as i8).to_string(),
            SdoType::I16 => i16::from_le_bytes([bytes[0], bytes[1]]).to_string(),
            SdoType::I32 => {
                i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]).to_string()
            }
            SdoType::I64 => (u as i64).to_string(),
            SdoType::F32 => {
                f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]).to_string()
            }
            SdoType::F64 => f64::from_bits(u).to_string(),
            SdoType::String => {
                let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
                String::from_utf8_lossy(&bytes[..end]).into_owned()
            }
            SdoType::Bytes => hex_bytes(bytes),
        })
    }
}

/// Bytes as hex pairs separated by spaces (`01 02 ff`).
pub fn hex_bytes(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn parse_unsigned(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) if !h.is_empty() && !h.starts_with('+') => u64::from_str_radix(h, 16).ok(),
        Some(_) => None,
        None if !s.starts_with('+') => s.parse().ok(),
        None => None,
    }
}

fn parse_signed(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let m = parse_unsigned(digits)?;
    if neg {
        if m == 1u64 << 63 {
            Some(i64::MIN)
        } else {
            i64::try_from(m).ok().map(|v| -v)
        }
    } else {
        i64::try_from(m).ok()
    }
}

/// Hex bytes: pairs of hex digits, spaces between pairs optional (`"01 02 ff"`, `"0102ff"`).
pub fn parse_hex_bytes(s: &str) -> Result<Vec<u8>, String> {
    let digits: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if digits.is_empty() {
        return Err("no bytes (hex pairs such as \"01 02 ff\")".into());
    }
    if !digits.len().is_multiple_of(2) || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err("not hex pairs (such as \"01 02 ff\")".into());
    }
    Ok((0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap_or(0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> SdoType {
        s.parse().unwrap()
    }

    #[test]
    fn names_round_trip() {
        for n in TYPE_NAMES.split(' ') {
            assert_eq!(t(n).name(), n);
        }
        assert!(matches!(
            "u24".parse::<SdoType>(),
            Err(ValueError::UnknownType(_))
        ));
    }

    #[test]
    fn encodings() {
        assert_eq!(t("u16").encode("0x1234").unwrap(), [0x34, 0x12]);
        assert_eq!(t("u32").encode("50000").unwrap(), 50000u32.to_le_bytes());
        assert_eq!(t("i8").encode("-128").unwrap(), [0x80]);
        assert_eq!(t("i8").encode("8").unwrap(), [8]);
        assert_eq!(
            t("i64").encode("-9223372036854775808").unwrap(),
            i64::MIN.to_le_bytes()
        );
        assert_eq!(t("bool").encode("true").unwrap(), [1]);
        assert_eq!(t("bytes").encode("01 02 ff").unwrap(), [1, 2, 0xff]);
        assert_eq!(t("string").encode("a b").unwrap(), b"a b");
        assert_eq!(t("f32").encode("1.5").unwrap(), 1.5f32.to_le_bytes());
    }

    #[test]
    fn values_out_of_range_name_value_and_type() {
        let e = t("u8").encode("256").unwrap_err().to_string();
        assert_eq!(e, "value \"256\" is not a u8: out of range 0..=255");
        assert!(t("i8").encode("128").is_err());
        assert!(t("i8").encode("-129").is_err());
        assert!(t("u16").encode("-1").is_err());
        assert!(t("u32").encode("+1").is_err());
        assert!(t("u32").encode("0x").is_err());
        assert!(t("bool").encode("2").is_err());
        assert!(t("bytes").encode("1 2 3").is_err());
        assert!(t("f32").encode("1e39").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(t("u8").format(&[5]).unwrap(), "0x05");
        assert_eq!(t("u16").format(&[0x41, 0x60]).unwrap(), "0x6041");
        assert_eq!(
            t("u32").format(&0x766u32.to_le_bytes()).unwrap(),
            "0x00000766"
        );
        assert_eq!(
            t("u64").format(&1u64.to_le_bytes()).unwrap(),
            "0x0000000000000001"
        );
        assert_eq!(t("i16").format(&(-2i16).to_le_bytes()).unwrap(), "-2");
        assert_eq!(t("string").format(b"SERVO-COE\0").unwrap(), "SERVO-COE");
        assert_eq!(t("bytes").format(&[1, 0xab]).unwrap(), "01 ab");
        assert_eq!(
            t("u16").format(&[1]).unwrap_err().to_string(),
            "1 bytes read, a u16 has 2"
        );
    }

    proptest! {
        #[test]
        fn signed_round_trip(v: i32) {
            let b = t("i32").encode(&v.to_string()).unwrap();
            prop_assert_eq!(t("i32").format(&b).unwrap(), v.to_string());
        }

        #[test]
        fn unsigned_round_trip(v: u64) {
            let b = t("u64").encode(&format!("{v:#x}")).unwrap();
            prop_assert_eq!(u64::from_le_bytes(b.try_into().unwrap()), v);
        }

        #[test]
        fn encode_never_panics(s in ".{0,24}", ty in 0usize..13) {
            let name = TYPE_NAMES.split(' ').nth(ty).unwrap();
            let _ = t(name).encode(&s);
        }
    }
}
