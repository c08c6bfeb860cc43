//! Bytes to text: a byte order mark, else the encoding of the XML declaration (XML 1.0 §4.3.3
//! and appendix F), else UTF-8. Vendor ESI files exist in UTF-8 and in ISO-8859-1 (German
//! umlauts in names); Windows-1252 and UTF-16 are rarer but cost little.

use std::borrow::Cow;

/// Why the bytes are not text: the byte offset of the problem and what it is.
pub(crate) struct DecodeError {
    pub offset: usize,
    pub why: String,
}

/// Windows-1252 0x80..=0x9F (the WHATWG encoding standard's index); 0 = the byte's own code
/// point (the five bytes Windows-1252 leaves undefined).
const CP1252_HIGH: [u16; 32] = [
    0x20AC, 0, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039,
    0x0152, 0, 0x017D, 0, 0, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC,
    0x2122, 0x0161, 0x203A, 0x0153, 0, 0x017E, 0x0178,
];

fn cp1252(b: u8) -> char {
    match b {
        0x80..=0x9F => match CP1252_HIGH[usize::from(b - 0x80)] {
            0 => char::from(b),
            u => char::from_u32(u32::from(u)).unwrap_or(char::from(b)),
        },
        _ => char::from(b),
    }
}

/// The `encoding` pseudo-attribute of a leading `<?xml ...?>` declaration, lower-cased.
fn declared_encoding(bytes: &[u8]) -> Option<String> {
    let head = bytes.get(..bytes.len().min(256))?;
    if !head.starts_with(b"<?xml") {
        return None;
    }
    let end = head.windows(2).position(|w| w == b"?>")?;
    let decl = std::str::from_utf8(&head[..end]).ok()?;
    let at = decl.find("encoding")?;
    let rest = decl[at + "encoding".len()..].trim_start();
    let rest = rest.strip_prefix('=')?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = &rest[1..];
    let close = value.find(quote)?;
    Some(value[..close].trim().to_ascii_lowercase())
}

fn utf16(bytes: &[u8], big_endian: bool) -> Result<String, DecodeError> {
    if !bytes.len().is_multiple_of(2) {
        return Err(DecodeError {
            offset: bytes.len(),
            why: "UTF-16 text with an odd number of bytes".into(),
        });
    }
    let units = bytes.chunks_exact(2).map(|c| {
        if big_endian {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_le_bytes([c[0], c[1]])
        }
    });
    let mut out = String::with_capacity(bytes.len() / 2);
    for (i, r) in char::decode_utf16(units).enumerate() {
        match r {
            Ok(c) => out.push(c),
            Err(_) => {
                return Err(DecodeError {
                    offset: 2 * i,
                    why: "invalid UTF-16 (unpaired surrogate)".into(),
                });
            }
        }
    }
    Ok(out)
}

/// Decode the file's bytes. The returned text starts after any byte order mark.
pub(crate) fn decode(bytes: &[u8]) -> Result<Cow<'_, str>, DecodeError> {
    if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
        return utf8(rest);
    }
    if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE") {
        return utf16(rest, false).map(Cow::Owned);
    }
    if let Some(rest) = bytes.strip_prefix(b"\xFE\xFF") {
        return utf16(rest, true).map(Cow::Owned);
    }
    match declared_encoding(bytes).as_deref() {
        None | Some("utf-8" | "utf8") => utf8(bytes),
        // ASCII is a subset of UTF-8: a byte above 0x7F is then an error either way.
        Some("us-ascii" | "ascii") => utf8(bytes),
        // The WHATWG encoding standard decodes every Latin-1 label as Windows-1252 (what such
        // files really are: a 0x80 in a German vendor's file is a euro sign, not a C1 control);
        // the two agree on every other byte.
        Some(
            "iso-8859-1" | "iso8859-1" | "latin1" | "latin-1" | "l1" | "iso_8859-1"
            | "windows-1252" | "cp1252",
        ) => Ok(Cow::Owned(bytes.iter().map(|&b| cp1252(b)).collect())),
        Some("utf-16" | "utf-16le" | "utf-16be") => Err(DecodeError {
            offset: 0,
            why: "declared UTF-16 but has no byte order mark".into(),
        }),
        Some(other) => Err(DecodeError {
            offset: 0,
            why: format!(
                "encoding {other:?} is not supported (UTF-8, ISO-8859-1, Windows-1252 and \
                 UTF-16 are)"
            ),
        }),
    }
}

fn utf8(bytes: &[u8]) -> Result<Cow<'_, str>, DecodeError> {
    std::str::from_utf8(bytes)
        .map(Cow::Borrowed)
        .map_err(|e| DecodeError {
            offset: e.valid_up_to(),
            why: format!(
                "not valid UTF-8 (byte 0x{:02X}); declare the file's encoding in its XML \
                 declaration, e.g. encoding=\"ISO-8859-1\"",
                bytes.get(e.valid_up_to()).copied().unwrap_or(0)
            ),
        })
}

/// 1-based line of a byte offset.
pub(crate) fn line_of(bytes: &[u8], offset: usize) -> u32 {
    let n = bytes[..offset.min(bytes.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    u32::try_from(n).unwrap_or(u32::MAX).saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latin1_is_decoded_by_its_declaration() {
        let b = b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\n<a>Ger\xe4t</a>";
        assert_eq!(
            decode(b).ok().unwrap(),
            "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\n<a>Ger\u{e4}t</a>"
        );
    }

    #[test]
    fn undeclared_latin1_names_the_line() {
        let b = b"<?xml version=\"1.0\"?>\n<a>\n<b>Ger\xe4t</b></a>";
        let e = decode(b).err().unwrap();
        assert_eq!(line_of(b, e.offset), 3);
        assert!(e.why.contains("0xE4"), "{}", e.why);
    }

    #[test]
    fn cp1252_and_utf16() {
        let b = b"<?xml version='1.0' encoding='windows-1252'?><a>\x80\x81\x9f</a>";
        assert!(
            decode(b)
                .ok()
                .unwrap()
                .ends_with("<a>\u{20AC}\u{81}\u{178}</a>")
        );
        let b = b"<?xml version='1.0' encoding='iso-8859-1'?><a>\x96 \xe9</a>";
        assert!(decode(b).ok().unwrap().ends_with("<a>\u{2013} \u{e9}</a>"));
        let mut u = vec![0xFF, 0xFE];
        for c in "<a>\u{e9}</a>".encode_utf16() {
            u.extend_from_slice(&c.to_le_bytes());
        }
        assert_eq!(decode(&u).ok().unwrap(), "<a>\u{e9}</a>");
        let e = decode(b"<?xml version='1.0' encoding='EBCDIC'?><a/>")
            .err()
            .unwrap();
        assert!(e.why.contains("\"ebcdic\""), "{}", e.why);
    }
}
