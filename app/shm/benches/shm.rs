//! The shared-memory image's own costs (`cargo bench -p rtcat-shm`), measured side by side in
//! one run; asserts nothing about times. The cost inside a master cycle (with vs without
//! publishing, on the simulated segment) is `cargo bench -p rtcat-master --features sim --bench
//! shm`.
//!
//! - publish: one `Publisher::publish` (the seqlock write of one cycle) and one
//!   `Publisher::take_writes` (no writer attached / one writer owning every entry), for the
//!   reference segment's image (3 subdevices, 66 + 66 bytes, 33 16-bit output entries) and for
//!   256 subdevices (4096 + 4096 bytes, 1024 32-bit output entries);
//! - snapshot: how long a reader's `Client::snapshot_into` takes while a publisher thread
//!   publishes every 1 ms (the normal case) and back to back (the worst case: the reader
//!   retries), P50 / P99 / max over the samples.

use rtcat_shm::{
    Client, CycleInfo, DeclaredWriter, Hub, OutputEntry, Publisher, PublisherConfig, Snapshot,
    Value,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

struct Seg {
    label: &'static str,
    subdevices: u32,
    bytes_per: u32,
    entries_per: u32,
}

fn layout(seg: &Seg) -> (String, Vec<OutputEntry>) {
    let mut rows = Vec::new();
    let mut json = Vec::new();
    let bits = seg.bytes_per * 8 / seg.entries_per;
    for p in 0..seg.subdevices {
        for k in 0..seg.entries_per {
            let off = p * seg.bytes_per * 8 + k * bits;
            for dir in ["outputs", "inputs"] {
                json.push(
                    serde_json::json!({"position": p, "index": 0x7000 + k, "subindex": 1,
                    "name": format!("E{k}"), "pdo_name": null, "bit_offset": off, "bits": bits,
                    "data_type": "UNSIGNED32", "direction": dir}),
                );
            }
            rows.push(OutputEntry {
                bit_offset: off,
                bits: bits as u16,
                writer: None,
                safe: 0,
                ..OutputEntry::default()
            });
        }
    }
    (
        serde_json::json!({"schema": "rtcat.layout/1", "entries": json}).to_string(),
        rows,
    )
}

fn create(hub: &Hub, seg: &Seg) -> Publisher {
    let (json, rows) = layout(seg);
    let bytes = seg.subdevices * seg.bytes_per;
    let p = Publisher::create(&PublisherConfig {
        name: "bench",
        generation: 1,
        period_ns: 1_000_000,
        subdevices: seg.subdevices,
        input_bytes: bytes,
        output_bytes: bytes,
        layout_json: json.as_bytes(),
        entries: &rows,
        writers: &[] as &[DeclaredWriter],
        writer_timeout_cycles: 1_000_000,
    })
    .expect("create");
    hub.set(Some(p.broker()));
    p
}

fn pct(mut v: Vec<u64>) -> (u64, u64, u64) {
    if v.is_empty() {
        return (0, 0, 0);
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99), *v.last().unwrap())
}

fn per_call(n: u64, mut f: impl FnMut(u64)) -> f64 {
    let t = Instant::now();
    for c in 0..n {
        f(c);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let segs = [
        Seg {
            label: "reference (3 x 22 B, 33 entries)",
            subdevices: 3,
            bytes_per: 22,
            entries_per: 11,
        },
        Seg {
            label: "256 subdevices (256 x 16 B, 1024 entries)",
            subdevices: 256,
            bytes_per: 16,
            entries_per: 4,
        },
    ];
    // The image is handed out over a socket (format v3): a minimal server of it, as the
    // master's control socket would.
    let name = std::env::temp_dir().join(format!("rtcat-bench-{}.sock", std::process::id()));
    let hub = Hub::new();
    let _serve = rtcat_shm::testkit::Serve::start(&name, hub.clone()).expect("serve");
    println!("rtcat-shm: per-call cost (ns, mean over 200 000 calls)");
    println!(
        "   {:<42} {:>9} {:>14} {:>14}",
        "image", "publish", "take (none)", "take (1 wr.)"
    );
    for seg in &segs {
        let mut p = create(&hub, seg);
        let bytes = (seg.subdevices * seg.bytes_per) as usize;
        let (inputs, mut outputs) = (vec![0x11u8; bytes], vec![0u8; bytes]);
        let valid = vec![true; seg.subdevices as usize];
        let n = 200_000;
        let publish = per_call(n, |c| {
            let info = CycleInfo {
                cycle: c,
                ..CycleInfo::default()
            };
            p.publish(&info, &inputs, &outputs, valid.iter().copied());
        });
        let take_none = per_call(n, |c| {
            std::hint::black_box(p.take_writes(&mut outputs, c));
        });
        let client = Client::attach(&name).expect("attach");
        let mut w = client.attach_writer("bench").expect("writer");
        let outs: Vec<_> = client
            .entries()
            .iter()
            .filter(|e| e.row.is_some())
            .cloned()
            .collect();
        for e in &outs {
            w.claim(e).expect("claim");
        }
        let vals: Vec<_> = outs.iter().map(|e| (e, Value::Unsigned(7))).collect();
        w.write(&vals).expect("write");
        let take_one = per_call(n, |c| {
            std::hint::black_box(p.take_writes(&mut outputs, c));
        });
        println!(
            "   {:<42} {publish:>9.0} {take_none:>14.0} {take_one:>14.0}",
            seg.label
        );
        drop(w);
        drop(client);
        p.replace().expect("unlink");
    }

    println!("rtcat-shm: a reader's snapshot_into (ns), 2 s each");
    println!(
        "   {:<42} {:<12} {:>8} {:>8} {:>9} {:>10} {:>8}",
        "image", "publisher", "p50", "p99", "max", "retries/s", "busy"
    );
    for seg in &segs {
        for paced in [true, false] {
            let mut p = create(&hub, seg);
            let bytes = (seg.subdevices * seg.bytes_per) as usize;
            let done = AtomicBool::new(false);
            let (samples, retries, busy) = std::thread::scope(|sc| {
                sc.spawn(|| {
                    let (inputs, outputs) = (vec![1u8; bytes], vec![2u8; bytes]);
                    let mut c = 0;
                    while !done.load(Ordering::Relaxed) {
                        let info = CycleInfo {
                            cycle: c,
                            ..CycleInfo::default()
                        };
                        p.publish(&info, &inputs, &outputs, std::iter::repeat_n(true, 256));
                        c += 1;
                        if paced {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                });
                let client = Client::attach(&name).expect("attach");
                let mut s = Snapshot::default();
                while client.snapshot_into(&mut s).is_err() {}
                let mut samples = Vec::with_capacity(4_000_000);
                let mut retries = 0u64;
                let mut busy = 0u64;
                let end = Instant::now() + Duration::from_secs(2);
                while Instant::now() < end {
                    let t = Instant::now();
                    // A publisher writing back to back (no real cycle does) can keep the
                    // seqlock moving for longer than the client's bounded retries: that is
                    // `Busy`, counted here, not a failure of the benchmark.
                    match client.snapshot_into(&mut s) {
                        Ok(()) => {
                            samples.push(t.elapsed().as_nanos() as u64);
                            retries += u64::from(s.retries);
                        }
                        Err(rtcat_shm::Error::Busy { .. }) => busy += 1,
                        Err(e) => panic!("snapshot: {e}"),
                    }
                }
                done.store(true, Ordering::Relaxed);
                (samples, retries, busy)
            });
            let (p50, p99, max) = pct(samples);
            println!(
                "   {:<42} {:<12} {p50:>8} {p99:>8} {max:>9} {:>10} {busy:>8}",
                seg.label,
                if paced { "every 1 ms" } else { "back to back" },
                retries / 2
            );
            p.replace().expect("unlink");
        }
    }
}
