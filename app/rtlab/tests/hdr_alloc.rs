//! `read_hdr` allocates what the file holds, not what its header claims: a counting allocator
//! records the peak of live heap bytes while crafted `.hdr` files are read. It refuses any single
//! request above 1 GiB, so a regression aborts this test binary instead of exhausting the machine.
//!
//! One test only: the counters are global to the binary, and a parallel test would add its own
//! allocations to the peak.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
const REFUSE_ABOVE: usize = 1 << 30;

// SAFETY: forwards to the system allocator; only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.size() > REFUSE_ABOVE {
            return std::ptr::null_mut();
        }
        // SAFETY: same layout contract as the caller's.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::SeqCst) + l.size();
            PEAK.fetch_max(now, Ordering::SeqCst);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.size() > REFUSE_ABOVE {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::SeqCst) + l.size();
            PEAK.fetch_max(now, Ordering::SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::SeqCst);
        // SAFETY: p was allocated by System with l.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new > REFUSE_ABOVE {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                let now = LIVE.fetch_add(new - l.size(), Ordering::SeqCst) + (new - l.size());
                PEAK.fetch_max(now, Ordering::SeqCst);
            } else {
                LIVE.fetch_sub(l.size() - new, Ordering::SeqCst);
            }
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

fn header(payload_len: u32, sigfig: u32, low: u64, high: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0x1c84_9313u32.to_be_bytes());
    b.extend_from_slice(&payload_len.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(&sigfig.to_be_bytes());
    b.extend_from_slice(&low.to_be_bytes());
    b.extend_from_slice(&high.to_be_bytes());
    b.extend_from_slice(&1.0f64.to_be_bytes());
    b
}

/// Peak live heap bytes above the level before `f`, and its result.
fn peak_of<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let r = f();
    (PEAK.load(Ordering::SeqCst) - base, r)
}

#[test]
fn crafted_headers_allocate_only_what_the_file_holds() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("wake_lateness_ns.hdr");

    // a genuine histogram as the yardstick
    let mut h = rtcat_results::new_histogram();
    for v in 1..=10_000u64 {
        h.record(v * 6007).unwrap();
    }
    rtcat_results::write_hdr(&p, &h).unwrap();
    let (genuine, r) = peak_of(|| rtcat_results::read_hdr(&p));
    assert_eq!(r.unwrap(), h);

    let cases: [(&str, Vec<u8>); 3] = [
        // 40 bytes claiming a 4 GiB payload
        ("4 GiB payload", header(u32::MAX, 3, 1, 60_000_000_000)),
        // a consistent length, but the widest range and precision the format allows
        ("widest range", header(0, 5, 1, u64::MAX / 2)),
        // 16 MiB of claimed payload behind a 1 KiB file
        (
            "16 MiB payload",
            [header(16 << 20, 3, 1, 60_000_000_000), vec![0; 1024]].concat(),
        ),
    ];
    for (name, bytes) in cases {
        std::fs::write(&p, &bytes).unwrap();
        let (peak, r) = peak_of(|| rtcat_results::read_hdr(&p));
        let e = format!("{:#}", r.unwrap_err());
        assert!(
            e.contains("wake_lateness_ns.hdr: not a valid HdrHistogram V2 file"),
            "{name}: {e}"
        );
        // reading the genuine histogram needs its counts array (~216 KiB) plus the file; a refused
        // header must not cost more than that
        assert!(
            peak <= genuine.max(1 << 20),
            "{name}: peak {peak} bytes (genuine file: {genuine} bytes)"
        );
        eprintln!("{name}: refused with a peak of {peak} heap bytes (genuine: {genuine}): {e}");
    }

    // the most a header can make the decoder allocate and still be accepted: 5 significant
    // figures up to the range bound, 3.1 M counts (24 MiB); converted to rtcat's bounds
    let widest = header(0, 5, 1, rtcat_results::HDR_MAX_HIGHEST_NS);
    std::fs::write(&p, &widest).unwrap();
    let (peak, r) = peak_of(|| rtcat_results::read_hdr(&p));
    let h = r.unwrap();
    assert!(h.is_empty() && h.sigfig() == 3 && h.high() == rtcat_results::HDR_HIGHEST_NS);
    assert!(
        peak <= 32 << 20,
        "accepted widest header: peak {peak} bytes"
    );
    eprintln!("widest accepted header: peak {peak} heap bytes");
}
