//! The `.hdr` histogram files: HdrHistogram V2, uncompressed, values in ns, rtcat's bounds
//! (1 ns .. 60 s, 3 significant figures). The reader checks the header before the decoder sees
//! it, so a crafted file cannot make it allocate more than the bounds allow.

use std::path::Path;

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{DeserializeError, Deserializer, Serializer, V2Serializer};
use safefs::Dir;

use crate::files::split_path;
use crate::{
    Error, HDR_FILE_LIMIT, HDR_HIGHEST_NS, HDR_MAX_HIGHEST_NS, HDR_MAX_SIGFIG, HDR_SIGFIG,
    RESULT_FILE_MODE, Result,
};

/// A new histogram with rtcat's bounds (1 ns .. 60 s, 3 significant figures).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HDR_HIGHEST_NS, HDR_SIGFIG)
        .expect("static histogram bounds are valid")
}

/// Cookie of an uncompressed V2 histogram (HdrHistogram's `V2_COOKIE`: base 0x1c849303 | 0x10).
const V2_COOKIE: u32 = 0x1c84_9313;
/// Cookie of a DEFLATE-compressed V2 histogram.
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9314;
/// Size of the V2 header: cookie, payload length, normalizing index offset, significant figures
/// (4 bytes each), lowest and highest trackable value (8 each), integer-to-double ratio (f64).
const V2_HEADER_LEN: usize = 40;

/// The histogram in the V2 (uncompressed) serialisation.
pub fn hdr_bytes(h: &Histogram<u64>) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut buf)
        .map_err(|e| Error::Encode {
            what: "histogram".into(),
            reason: format!("{e:?}"),
        })?;
    Ok(buf)
}

/// Writes a histogram (V2, uncompressed) as `name` in `dir` atomically, never following a link.
pub fn write_hdr_to(dir: &Dir, name: &str, h: &Histogram<u64>) -> Result<()> {
    let buf = hdr_bytes(h).map_err(|e| e.in_file(dir.path().join(name)))?;
    dir.write_atomic(name, &buf, RESULT_FILE_MODE)?;
    Ok(())
}

/// Writes a histogram to `path` atomically through its directory (see [`write_hdr_to`]).
pub fn write_hdr(path: &Path, h: &Histogram<u64>) -> Result<()> {
    let (dir, name) = split_path(path)?;
    write_hdr_to(&dir, name, h)
}

/// Reads a V2 histogram file named by the caller (a regular file of at most [`HDR_FILE_LIMIT`]
/// bytes); see [`parse_hdr`]. The error names the file.
pub fn read_hdr(path: &Path) -> Result<Histogram<u64>> {
    let bytes = safefs::read_bounded(path, HDR_FILE_LIMIT)?;
    parse_hdr(&bytes, path)
}

/// Reads histogram `name` in `dir` without following a link; see [`parse_hdr`].
pub fn read_hdr_in(dir: &Dir, name: &str) -> Result<Histogram<u64>> {
    let bytes = dir.read_bounded(name, HDR_FILE_LIMIT)?;
    parse_hdr(&bytes, &dir.path().join(name))
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes([
        b[at],
        b[at + 1],
        b[at + 2],
        b[at + 3],
        b[at + 4],
        b[at + 5],
        b[at + 6],
        b[at + 7],
    ])
}

/// Decodes an uncompressed V2 histogram (`path` names it in errors) into one with rtcat's bounds.
///
/// The header is checked before the decoder sees it, because the decoder allocates what the
/// header declares: a payload buffer of the declared length and a counts array for the declared
/// range and precision. So the declared payload length must equal what follows the header in the
/// file (no truncation, no trailing bytes), at most [`HDR_MAX_SIGFIG`] significant figures and a
/// highest trackable value of at most [`HDR_MAX_HIGHEST_NS`]. A histogram with other bounds than
/// rtcat's is converted to rtcat's (its values must fit in 1 ns .. 60 s), so that histograms of
/// several runs can always be merged.
pub fn parse_hdr(bytes: &[u8], path: &Path) -> Result<Histogram<u64>> {
    let bad = |reason: String| Error::Hdr {
        path: path.to_path_buf(),
        reason,
    };
    if bytes.len() < V2_HEADER_LEN {
        return Err(bad(format!(
            "{} bytes, shorter than the {V2_HEADER_LEN}-byte V2 header",
            bytes.len()
        )));
    }
    let cookie = be_u32(bytes, 0);
    if cookie == V2_DEFLATE_COOKIE {
        return Err(bad(
            "DEFLATE-compressed V2 is not read (rtcat writes uncompressed V2)".into(),
        ));
    }
    if cookie != V2_COOKIE {
        return Err(bad(format!(
            "cookie {cookie:#010x} is not the V2 cookie {V2_COOKIE:#010x}"
        )));
    }
    let payload = u64::from(be_u32(bytes, 4));
    let follows = (bytes.len() - V2_HEADER_LEN) as u64;
    if payload != follows {
        return Err(bad(format!(
            "the header declares a payload of {payload} bytes but {follows} bytes follow the \
             {V2_HEADER_LEN}-byte header ({})",
            if payload > follows {
                "truncated"
            } else {
                "trailing bytes"
            }
        )));
    }
    let offset = be_u32(bytes, 8);
    if offset != 0 {
        return Err(bad(format!(
            "normalizing index offset {offset} is not supported (must be 0)"
        )));
    }
    let sigfig = be_u32(bytes, 12);
    if sigfig > u32::from(HDR_MAX_SIGFIG) {
        return Err(bad(format!(
            "{sigfig} significant figures (at most {HDR_MAX_SIGFIG})"
        )));
    }
    let low = be_u64(bytes, 16);
    let high = be_u64(bytes, 24);
    if low == 0 || high / 2 < low {
        return Err(bad(format!(
            "lowest value {low} and highest trackable value {high} do not form a range \
             (need 1 <= lowest and 2 × lowest <= highest)"
        )));
    }
    if high > HDR_MAX_HIGHEST_NS {
        return Err(bad(format!(
            "highest trackable value {high} ns is above the bound of {HDR_MAX_HIGHEST_NS} ns \
             (16 × rtcat's {HDR_HIGHEST_NS} ns)"
        )));
    }
    let ratio = f64::from_be_bytes(bytes[32..40].try_into().unwrap_or([0; 8]));
    if ratio != 1.0 {
        return Err(bad(format!(
            "integer-to-double conversion ratio {ratio} is not 1 (not an integer histogram)"
        )));
    }
    let mut cursor = std::io::Cursor::new(bytes);
    let h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut cursor)
        .map_err(|e| bad(describe_deserialize_error(&e)))?;
    if cursor.position() != bytes.len() as u64 {
        return Err(bad(format!(
            "{} trailing bytes after the histogram",
            bytes.len() as u64 - cursor.position()
        )));
    }
    if h.low() == 1 && h.high() == HDR_HIGHEST_NS && h.sigfig() == HDR_SIGFIG {
        return Ok(h);
    }
    let mut out = new_histogram();
    out.add(&h).map_err(|_| {
        bad(format!(
            "holds values up to {} ns, above rtcat's range of {HDR_HIGHEST_NS} ns",
            h.max()
        ))
    })?;
    Ok(out)
}

fn describe_deserialize_error(e: &DeserializeError) -> String {
    match e {
        DeserializeError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the payload ends inside a count".into()
        }
        DeserializeError::IoError(e) => format!("read error: {e}"),
        DeserializeError::InvalidCookie => "unknown cookie".into(),
        DeserializeError::UnsupportedFeature => {
            "uses a feature this reader does not support".into()
        }
        DeserializeError::UnsuitableCounterType => {
            "a count is negative or does not fit in 64 bits".into()
        }
        DeserializeError::InvalidParameters => {
            "the lowest value, highest value and significant figures do not form a histogram".into()
        }
        DeserializeError::UsizeTypeTooSmall => "a run of zero counts is too long".into(),
        DeserializeError::EncodedArrayTooLong => {
            "the counts run past the end of the declared range".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn hdr_round_trip_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v * 997).unwrap();
        }
        let p = dir.path().join("x.hdr");
        write_hdr(&p, &h).unwrap();
        let back = read_hdr(&p).unwrap();
        assert_eq!(back, h);
        let bytes = fs::read(&p).unwrap();
        fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
        let e = read_hdr(&p).unwrap_err().to_string();
        assert!(e.contains("x.hdr: not a valid HdrHistogram V2 file"), "{e}");
    }

    fn header(payload_len: u32, sigfig: u32, low: u64, high: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&V2_COOKIE.to_be_bytes());
        b.extend_from_slice(&payload_len.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&sigfig.to_be_bytes());
        b.extend_from_slice(&low.to_be_bytes());
        b.extend_from_slice(&high.to_be_bytes());
        b.extend_from_slice(&1.0f64.to_be_bytes());
        b
    }

    #[test]
    fn hdr_header_is_checked_before_decoding() {
        let p = Path::new("x.hdr");
        let e = |b: &[u8]| format!("{:#}", parse_hdr(b, p).unwrap_err());
        let mut h = new_histogram();
        h.record(1234).unwrap();
        let good = hdr_bytes(&h).unwrap();
        assert_eq!(parse_hdr(&good, p).unwrap(), h);
        assert!(e(&good[..good.len() - 1]).contains("(truncated)"));
        assert!(e(&[good.as_slice(), b"x"].concat()).contains("(trailing bytes)"));
        assert_eq!(
            e(&header(u32::MAX, 3, 1, HDR_HIGHEST_NS)),
            "x.hdr: not a valid HdrHistogram V2 file: the header declares a payload of 4294967295 \
             bytes but 0 bytes follow the 40-byte header (truncated)"
        );
        assert!(e(&header(0, 6, 1, HDR_HIGHEST_NS)).contains("6 significant figures (at most 5)"));
        assert!(e(&header(0, 3, 0, HDR_HIGHEST_NS)).contains("do not form a range"));
        assert!(e(&header(0, 3, 1000, 1999)).contains("do not form a range"));
        assert!(e(&header(0, 3, 1, HDR_MAX_HIGHEST_NS + 1)).contains("is above the bound"));
        let mut b = header(0, 3, 1, HDR_HIGHEST_NS);
        b[8..12].copy_from_slice(&7u32.to_be_bytes());
        assert!(e(&b).contains("normalizing index offset 7"));
        let mut b = header(0, 3, 1, HDR_HIGHEST_NS);
        b[32..40].copy_from_slice(&0.5f64.to_be_bytes());
        assert!(e(&b).contains("ratio 0.5 is not 1"));
        // counts beyond the declared range: the decoder's own check, with a clear message
        let mut b = header(10, 3, 1, HDR_HIGHEST_NS);
        // a run of 2^62 zeros, then a count: past the end of the 27 648 counts
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x02]);
        assert_eq!(
            e(&b),
            "x.hdr: not a valid HdrHistogram V2 file: the counts run past the end of the declared range"
        );
        // a varint cut off at the end of the payload
        let mut b = header(2, 3, 1, HDR_HIGHEST_NS);
        b.extend_from_slice(&[0x02, 0x80]);
        assert!(
            e(&b).ends_with("the payload ends inside a count"),
            "{}",
            e(&b)
        );
    }

    #[test]
    fn hdr_with_other_bounds_is_converted_to_rtcats() {
        let p = Path::new("y.hdr");
        let mut other = Histogram::<u64>::new_with_bounds(1, 2 * HDR_HIGHEST_NS, 2).unwrap();
        other.record_n(5_000, 7).unwrap();
        other.record(1_000_000).unwrap();
        let h = parse_hdr(&hdr_bytes(&other).unwrap(), p).unwrap();
        assert_eq!(
            (h.low(), h.high(), h.sigfig()),
            (1, HDR_HIGHEST_NS, HDR_SIGFIG)
        );
        assert_eq!(h.len(), 8);
        // 2 significant figures: within 1 % of the recorded value
        assert!(
            h.value_at_quantile(0.5).abs_diff(5_000) <= 50,
            "{}",
            h.value_at_quantile(0.5)
        );
        // mergeable with rtcat's own histograms (the report pools runs)
        new_histogram().add(&h).unwrap();
        other.record(100_000_000_000).unwrap(); // 100 s
        let e = format!(
            "{:#}",
            parse_hdr(&hdr_bytes(&other).unwrap(), p).unwrap_err()
        );
        assert!(e.contains("above rtcat's range of 60000000000 ns"), "{e}");
    }
}
