//! A 200 MB command line costs the simulator no more than its 4 KiB line buffer. Alone in its
//! test binary so that the resident set measured is the server's, not another test's.

use ecsim::control::{self, Access, Handler};
use ecsim::{FaultState, Faults};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// VmRSS of this process, KiB.
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/self/status")
}

#[test]
fn a_200_mb_line_gets_an_error_and_memory_stays_bounded() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ctl.sock");
    let faults = Faults::new();
    let status = Arc::new(Mutex::new("frames=0".to_string()));
    let _server = control::serve(
        &p,
        Access::Owner,
        Handler::new(faults.clone(), status, 3),
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap();
    // Warm up (thread stacks, first allocations) before the baseline.
    assert_eq!(control::request(&p, "status").unwrap(), "frames=0");
    let before = rss_kib();

    let mut s = UnixStream::connect(&p).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    let total = 200usize << 20;
    let mut sent = 0;
    let t = Instant::now();
    // The server stops reading at 4 KiB and closes: the writes end with EPIPE/ECONNRESET.
    while sent < total {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    let _ = s.write_all(b"\n");
    let mut reply = Vec::new();
    let _ = (&s).take(1 << 20).read_to_end(&mut reply);
    let after = rss_kib();
    let reply = String::from_utf8_lossy(&reply);
    eprintln!(
        "sent {sent} of {total} bytes in {:?}; reply {} bytes; VmRSS {before} -> {after} KiB",
        t.elapsed(),
        reply.len()
    );
    assert!(
        reply.starts_with("error: command line longer than 4096 bytes"),
        "{:?}",
        &reply[..reply.len().min(100)]
    );
    assert!(reply.len() < 200, "reply of {} bytes", reply.len());
    // The old server buffered the whole line and echoed it: +680 MiB.
    assert!(
        after.saturating_sub(before) < 4 * 1024,
        "VmRSS grew from {before} to {after} KiB"
    );
    assert_eq!(faults.snapshot(), FaultState::default());
    // And it still serves.
    assert_eq!(control::request(&p, "clear").unwrap(), "ok");
}
