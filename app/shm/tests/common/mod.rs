//! Test helpers: unique object names, a synthetic layout, raw access to an object.
#![allow(dead_code)]

use rtcat_shm::{DeclaredWriter, Error, OutputEntry, Publisher, PublisherConfig};
use std::sync::atomic::{AtomicU32, Ordering};

/// A name no other test (or test run) uses; unlinked by [`Name`]'s drop.
pub struct Name(pub String);

impl Name {
    pub fn new(tag: &str) -> Name {
        static N: AtomicU32 = AtomicU32::new(0);
        Name(format!(
            "rtcat-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
    }
    pub fn path(&self) -> String {
        format!("/dev/shm/{}", self.0)
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.path());
    }
}

/// One entry of the synthetic layout.
pub struct E {
    pub position: u16,
    pub pdo: &'static str,
    pub name: &'static str,
    pub bit_offset: u32,
    pub bits: u16,
    pub ty: &'static str,
    pub out: bool,
}

pub fn e(
    position: u16,
    pdo: &'static str,
    name: &'static str,
    bit_offset: u32,
    bits: u16,
    ty: &'static str,
    out: bool,
) -> E {
    E {
        position,
        pdo,
        name,
        bit_offset,
        bits,
        ty,
        out,
    }
}

/// The layout JSON (the shape of `rtcat pdos --json`), with a padding gap among the outputs.
pub fn layout_json(entries: &[E], input_bytes: u32, output_bytes: u32, generation: u32) -> String {
    let mut rows = Vec::new();
    for (i, x) in entries.iter().enumerate() {
        rows.push(serde_json::json!({
            "position": x.position, "pdo": 0x1600, "index": 0x7000 + i, "subindex": 1,
            "name": x.name, "pdo_name": x.pdo, "bit_offset": x.bit_offset, "bits": x.bits,
            "data_type": x.ty, "direction": if x.out { "outputs" } else { "inputs" },
        }));
    }
    // A padding gap (index 0): never an entry, never a row of the entry table.
    rows.push(serde_json::json!({
        "position": 0, "pdo": 0x1600, "index": 0, "subindex": 0, "name": "0x0000:00",
        "pdo_name": null, "bit_offset": output_bytes * 8 - 1, "bits": 1,
        "data_type": {"OTHER": 0}, "direction": "outputs",
    }));
    serde_json::json!({
        "schema": "rtcat.layout/1", "generation": generation, "input_bytes": input_bytes,
        "output_bytes": output_bytes, "subdevices": [], "pdos": [], "entries": rows,
    })
    .to_string()
}

/// A layout of two subdevices with entries at awkward bit offsets.
pub fn awkward() -> Vec<E> {
    vec![
        e(0, "Outputs", "Bit 0", 0, 1, "BOOL", true),
        e(0, "Outputs", "Bits 1-3", 1, 3, "BITS", true),
        e(0, "Outputs", "Word", 5, 16, "UNSIGNED16", true),
        e(1, "Channel 1", "Setpoint", 24, 32, "INT32", true),
        e(1, "Channel 1", "Real", 56, 32, "REAL32", true),
        e(1, "Channel 2", "Setpoint", 88, 7, "INT8", true),
        e(0, "Inputs", "Counter", 0, 32, "UNSIGNED32", false),
        e(1, "Inputs", "Value", 35, 13, "INT16", false),
    ]
}

/// Output rows of a layout (declared writer and safe value per row index).
pub fn rows(entries: &[E], owners: &[(usize, usize)], safe: &[(usize, u64)]) -> Vec<OutputEntry> {
    entries
        .iter()
        .filter(|x| x.out)
        .enumerate()
        .map(|(i, x)| OutputEntry {
            bit_offset: x.bit_offset,
            bits: x.bits,
            writer: owners.iter().find(|o| o.0 == i).map(|o| o.1),
            safe: safe.iter().find(|s| s.0 == i).map(|s| s.1).unwrap_or(0),
            ..OutputEntry::default()
        })
        .collect()
}

pub struct Made {
    pub publisher: Publisher,
    pub json: String,
}

pub fn make(
    name: &str,
    entries: &[E],
    owners: &[(usize, usize)],
    safe: &[(usize, u64)],
    writers: &[&str],
    timeout: u64,
    generation: u32,
) -> Made {
    let json = layout_json(entries, 12, 16, generation);
    let rows = rows(entries, owners, safe);
    let writers: Vec<DeclaredWriter> = writers
        .iter()
        .map(|n| DeclaredWriter {
            name: n.to_string(),
        })
        .collect();
    let publisher = publish(name, &json, &rows, &writers, timeout, generation).expect("create");
    Made { publisher, json }
}

/// The object of the test geometry (2 subdevices, 12 input and 16 output bytes, 1 ms) with
/// these rows and declared writers.
pub fn publish(
    name: &str,
    json: &str,
    rows: &[OutputEntry],
    writers: &[DeclaredWriter],
    timeout: u64,
    generation: u32,
) -> Result<Publisher, Error> {
    Publisher::create(&PublisherConfig {
        name,
        gid: None,
        generation,
        period_ns: 1_000_000,
        subdevices: 2,
        input_bytes: 12,
        output_bytes: 16,
        layout_json: json.as_bytes(),
        entries: rows,
        writers,
        writer_timeout_cycles: timeout,
    })
}

/// Write raw bytes into an object (what any process with write access can do).
pub fn poke(path: &str, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

pub fn peek(path: &str, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).unwrap();
    let mut b = vec![0; len];
    f.read_exact_at(&mut b, offset).unwrap();
    b
}
