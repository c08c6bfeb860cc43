//! Tabular files through serde: a format is one `#[derive(Serialize, Deserialize)]` row struct,
//! whose field names, in order, are the header. Written with the `csv` crate (quoting where a
//! field needs it, `\n` line ends); read line by line under a row bound, and every error names
//! the line and the column.
//!
//! The reader does not collect a line before it has counted its fields, so a crafted line of a
//! million commas costs one pass over it, not a million-entry record. It takes no quoting: the
//! files it reads (`ladder.csv`) hold numbers and stage ids only, and a quote is an error of the
//! column it stands in.

use std::cell::Cell;

use serde::de::value::{BorrowedStrDeserializer, Error as ValueError, MapAccessDeserializer};
use serde::de::{DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Error, Result};

fn encode(e: impl std::fmt::Display) -> Error {
    Error::Encode {
        what: "a CSV row".into(),
        reason: e.to_string(),
    }
}

fn writer(headers: bool) -> csv::Writer<Vec<u8>> {
    csv::WriterBuilder::new()
        .has_headers(headers)
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new())
}

fn finish(w: csv::Writer<Vec<u8>>) -> Result<String> {
    let bytes = w.into_inner().map_err(|e| encode(e.error()))?;
    String::from_utf8(bytes).map_err(encode)
}

/// The column names of `T`: its field names in order (`T::default()` is serialised once to find
/// them, so every field must serialise to one column).
pub fn header<T: Serialize + Default>() -> Result<Vec<String>> {
    let mut w = writer(true);
    w.serialize(T::default()).map_err(encode)?;
    let text = finish(w)?;
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    Ok(r.headers()
        .map_err(encode)?
        .iter()
        .map(String::from)
        .collect())
}

/// The header line of `T`'s table, without the line end.
pub fn header_line<T: Serialize + Default>() -> Result<String> {
    let mut w = writer(false);
    w.write_record(header::<T>()?).map_err(encode)?;
    Ok(finish(w)?.trim_end_matches('\n').to_string())
}

/// One row as a CSV line, without the line end.
pub fn row_line<T: Serialize>(row: &T) -> Result<String> {
    let mut w = writer(false);
    w.serialize(row).map_err(encode)?;
    Ok(finish(w)?.trim_end_matches('\n').to_string())
}

/// A whole table: the header line, then one line per row, each ending in `\n`.
pub fn to_csv<'a, T: Serialize + Default + 'a>(
    rows: impl IntoIterator<Item = &'a T>,
) -> Result<String> {
    let mut w = writer(false);
    w.write_record(header::<T>()?).map_err(encode)?;
    for r in rows {
        w.serialize(r).map_err(encode)?;
    }
    finish(w)
}

/// Parses a table with `T`'s header. The first line must be the header (trailing white space
/// aside); blank lines are skipped; more than `max_rows` rows is an error whose message adds
/// `bound` (what the limit stands for). Every error names the line, and the column where one
/// column is at fault.
pub fn parse<T>(text: &str, max_rows: usize, bound: &str) -> Result<Vec<T>>
where
    T: DeserializeOwned + Serialize + Default,
{
    let columns = header::<T>()?;
    let header = header_line::<T>()?;
    let csv_err = |line: usize, column: Option<&str>, reason: String| Error::Csv {
        line: Some(line as u64),
        column: column.map(String::from),
        reason,
    };
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim_end() == header => {}
        Some((_, h)) => {
            return Err(csv_err(
                1,
                None,
                format!("header is \"{h}\", expected \"{header}\""),
            ));
        }
        None => {
            return Err(Error::Csv {
                line: None,
                column: None,
                reason: format!("empty file (expected the header \"{header}\")"),
            });
        }
    }
    let mut rows = Vec::new();
    for (i, line) in lines {
        let lno = i + 1;
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        if rows.len() == max_rows {
            return Err(csv_err(
                lno,
                None,
                format!("more than {max_rows} rows ({bound})"),
            ));
        }
        // at most one field more than expected is collected, whatever the line holds
        let fields: Vec<&str> = line.splitn(columns.len() + 1, ',').collect();
        if fields.len() != columns.len() {
            let n = line.split(',').count();
            return Err(csv_err(
                lno,
                None,
                format!("{n} fields, expected {}", columns.len()),
            ));
        }
        let failed = Cell::new(None);
        let access = RowAccess {
            columns: &columns,
            fields: &fields,
            next: 0,
            failed: &failed,
        };
        let row = T::deserialize(MapAccessDeserializer::new(access)).map_err(|e| {
            let column = failed.get().map(|k: usize| columns[k].as_str());
            csv_err(lno, column, e.to_string())
        })?;
        rows.push(row);
    }
    Ok(rows)
}

/// One line as a map from column name to field text; remembers which column failed.
struct RowAccess<'a> {
    columns: &'a [String],
    fields: &'a [&'a str],
    next: usize,
    failed: &'a Cell<Option<usize>>,
}

impl<'de> MapAccess<'de> for RowAccess<'de> {
    type Error = ValueError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ValueError> {
        match self.columns.get(self.next) {
            Some(c) => seed.deserialize(c.as_str().into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ValueError> {
        let k = self.next;
        self.next += 1;
        let r = seed.deserialize(BorrowedStrDeserializer::<ValueError>::new(self.fields[k]));
        if r.is_err() {
            self.failed.set(Some(k));
        }
        r
    }
}

/// `deserialize_with` for a count: a decimal non-negative integer.
pub fn uint<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = <&str>::deserialize(d)?;
    s.parse::<u64>()
        .map_err(|_| serde::de::Error::custom(format!("\"{s}\" is not a non-negative integer")))
}

/// `deserialize_with` for a 1-based number that fits in 32 bits (a run number).
pub fn ordinal<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = uint(d)?;
    u32::try_from(n)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| serde::de::Error::custom(format!("{n} is not in 1..=4294967295")))
}

/// `deserialize_with` for a figure such as a mean: a finite non-negative number.
pub fn non_negative<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let s = <&str>::deserialize(d)?;
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(serde::de::Error::custom(format!(
            "\"{s}\" is not a non-negative number"
        ))),
    }
}

/// `serialize_with` for a float in Rust's shortest round-trip form without exponent (`1500`,
/// `4369.799999999999`), the form `ladder.csv` has always had (the csv crate's own form would be
/// `1500.0`).
pub fn shortest<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}
