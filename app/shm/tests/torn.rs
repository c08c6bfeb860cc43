//! The torn-read stress test: a publisher thread runs 10^6 cycles as fast as it can while
//! readers take snapshots concurrently. Every field of a publication is derived from its cycle
//! number, so a snapshot mixing two publications is detectable byte by byte; the seqlock value
//! is derived from it too (publication n has seq 2n), so a cycle delivered twice under two
//! different seqs, or seen going backwards, is detectable as well.

mod common;

use common::*;
use rtcat_shm::{Client, CycleInfo, DeclaredWriter, Publisher, PublisherConfig, Snapshot};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

const CYCLES: u64 = 1_000_000;
const SUBDEVICES: u32 = 64;
const IN: usize = 512;
const OUT: usize = 512;

fn in_byte(cycle: u64, k: usize) -> u8 {
    (cycle as u8).wrapping_mul(7).wrapping_add(k as u8) ^ (cycle >> 8) as u8
}
fn out_byte(cycle: u64, k: usize) -> u8 {
    (cycle as u8) ^ 0xa5 ^ (k as u8).wrapping_mul(3) ^ (cycle >> 16) as u8
}

fn check(s: &Snapshot) -> Result<(), String> {
    let c = s.cycle;
    if s.seq != 2 * (c + 1) {
        return Err(format!("seq {} with cycle {c}", s.seq));
    }
    if s.deadline_ns != c * 3 || s.wake_ns != c * 3 + 1 || s.unix_ns != !c {
        return Err(format!(
            "times of cycle {c}: {} {} {}",
            s.deadline_ns, s.wake_ns, s.unix_ns
        ));
    }
    if s.wkc != c as u16
        || s.expected_wkc != (c >> 16) as u16
        || s.frames_lost != c.is_multiple_of(3)
    {
        return Err(format!("wkc word of cycle {c}"));
    }
    for (k, v) in s.valid.iter().enumerate() {
        if *v != (c + k as u64).is_multiple_of(2) {
            return Err(format!("valid[{k}] of cycle {c}"));
        }
    }
    for (k, b) in s.inputs.iter().enumerate() {
        if *b != in_byte(c, k) {
            return Err(format!("input byte {k} of cycle {c}: {b:#04x}"));
        }
    }
    for (k, b) in s.outputs.iter().enumerate() {
        if *b != out_byte(c, k) {
            return Err(format!("output byte {k} of cycle {c}: {b:#04x}"));
        }
    }
    Ok(())
}

#[test]
fn no_torn_snapshot_in_a_million_cycles() {
    let n = Name::new("torn");
    let json = r#"{"schema":"rtcat.layout/1","entries":[]}"#;
    let mut p = Publisher::create(&PublisherConfig {
        name: "torn",
        generation: 1,
        period_ns: 1000,
        subdevices: SUBDEVICES,
        input_bytes: IN as u32,
        output_bytes: OUT as u32,
        layout_json: json.as_bytes(),
        entries: &[],
        writers: &[] as &[DeclaredWriter],
        writer_timeout_cycles: 10,
    })
    .unwrap();
    n.1.set(Some(p.broker()));
    let done = AtomicBool::new(false);
    // Publishing starts once both readers are attached.
    let ready = std::sync::Barrier::new(3);
    let t0 = Instant::now();
    let results = std::thread::scope(|sc| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                sc.spawn(|| {
                    let c = Client::attach(&n.0).unwrap();
                    ready.wait();
                    let mut s = Snapshot::default();
                    let (mut taken, mut distinct, mut retries, mut max_retries) =
                        (0u64, 0u64, 0u64, 0u32);
                    let mut last: Option<(u64, u64)> = None;
                    while !done.load(Ordering::Relaxed) {
                        match c.snapshot_into(&mut s) {
                            Ok(()) => {}
                            Err(rtcat_shm::Error::NotPublished { .. }) => continue,
                            Err(e) => panic!("{e}"),
                        }
                        taken += 1;
                        retries += u64::from(s.retries);
                        max_retries = max_retries.max(s.retries);
                        if let Err(why) = check(&s) {
                            panic!("torn snapshot: {why}");
                        }
                        match last {
                            Some((seq, cycle)) if seq == s.seq => assert_eq!(cycle, s.cycle),
                            Some((seq, cycle)) => {
                                assert!(s.seq > seq && s.cycle > cycle, "went backwards");
                                distinct += 1;
                            }
                            None => distinct += 1,
                        }
                        last = Some((s.seq, s.cycle));
                    }
                    (taken, distinct, retries, max_retries)
                })
            })
            .collect();
        ready.wait();
        let mut inputs = vec![0u8; IN];
        let mut outputs = vec![0u8; OUT];
        for c in 0..CYCLES {
            for (k, b) in inputs.iter_mut().enumerate() {
                *b = in_byte(c, k);
            }
            for (k, b) in outputs.iter_mut().enumerate() {
                *b = out_byte(c, k);
            }
            let info = CycleInfo {
                cycle: c,
                deadline_ns: c * 3,
                wake_ns: c * 3 + 1,
                unix_ns: !c,
                wkc: c as u16,
                expected_wkc: (c >> 16) as u16,
                frames_lost: c.is_multiple_of(3),
            };
            p.publish(
                &info,
                &inputs,
                &outputs,
                (0..SUBDEVICES as u64).map(|k| (c + k).is_multiple_of(2)),
            );
            // Back to back, publications would leave a reader almost no window in which a copy
            // completes (it would only ever see retries); a short gap lets both outcomes, clean
            // copies and overlapped ones, happen millions of times.
            let t = Instant::now();
            while t.elapsed().as_nanos() < 500 {
                std::hint::spin_loop();
            }
        }
        done.store(true, Ordering::Relaxed);
        readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    let secs = t0.elapsed().as_secs_f64();
    for (i, (taken, distinct, retries, max)) in results.iter().enumerate() {
        eprintln!(
            "reader {i}: {taken} snapshots, {distinct} distinct cycles, {retries} retries \
             (max {max} for one snapshot) during {CYCLES} cycles in {secs:.1} s"
        );
    }
    // The test proves something only if readers overlapped publications (retries) and also got
    // through between them, many times.
    let distinct: u64 = results.iter().map(|r| r.1).sum();
    let retries: u64 = results.iter().map(|r| r.2).sum();
    assert!(
        distinct >= 100 && retries > 0,
        "the readers did not race the publisher: {distinct} cycles seen, {retries} retries"
    );
}
