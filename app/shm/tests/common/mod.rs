//! Test helpers: a control socket per test serving its image, a synthetic layout, raw access
//! to objects.
#![allow(dead_code)]

use rtcat_shm::testkit::Serve;
use rtcat_shm::{DeclaredWriter, Error, Hub, OutputEntry, Publisher, PublisherConfig};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// A control socket no other test (or test run) uses, serving the image [`publish`] creates
/// for it (`rtcat_shm::testkit`); the socket is removed on drop. `.0` is its path.
pub struct Name(pub String, pub Hub, Serve);

static HUBS: Mutex<Vec<(String, Hub)>> = Mutex::new(Vec::new());

impl Name {
    pub fn new(tag: &str) -> Name {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "rtcat-test-{tag}-{}-{}.sock",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let hub = Hub::new();
        let serve = Serve::start(&path, hub.clone()).expect("serve");
        let p = path.display().to_string();
        HUBS.lock().unwrap().push((p.clone(), hub.clone()));
        Name(p, hub, serve)
    }

    /// The bytes of the image now (read through the descriptor clients get).
    pub fn image(&self, offset: u64, len: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::from(self.1.get().expect("published").image().unwrap());
        let mut b = vec![0; len];
        f.read_exact_at(&mut b, offset).unwrap();
        b
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        HUBS.lock().unwrap().retain(|(p, _)| *p != self.0);
    }
}

fn hub_of(path: &str) -> Option<Hub> {
    HUBS.lock()
        .unwrap()
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, h)| h.clone())
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
/// these rows and declared writers; served at `name` when it is a [`Name`]'s socket.
pub fn publish(
    name: &str,
    json: &str,
    rows: &[OutputEntry],
    writers: &[DeclaredWriter],
    timeout: u64,
    generation: u32,
) -> Result<Publisher, Error> {
    let p = Publisher::create(&PublisherConfig {
        name: "test",
        generation,
        period_ns: 1_000_000,
        subdevices: 2,
        input_bytes: 12,
        output_bytes: 16,
        layout_json: json.as_bytes(),
        entries: rows,
        writers,
        writer_timeout_cycles: timeout,
    })?;
    if let Some(h) = hub_of(name) {
        h.set(Some(p.broker()));
    }
    Ok(p)
}

/// Write raw bytes into an object through a descriptor (what its holder can do).
pub fn poke_fd(fd: &std::os::fd::OwnedFd, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    std::fs::File::from(fd.try_clone()?).write_all_at(bytes, offset)
}
