//! Cost of the reply filter on the receive path (`cargo bench -p rtcat --bench wire`): the
//! classifier alone per frame, and a whole `Bus::pump_rx` of one frame that the filter drops
//! (foreign source) next to one that passes it and is handed to ethercrab (which drops it as
//! not awaited: no frame is in flight). Prints ns per frame; asserts nothing about times.

use ecsim::frame::{Cmd, FrameBuilder, phys};
use ethercrab::PduStorage;
use rtcat_master::bus::{Bus, Link, Reply, RxReject, classify};
use std::hint::black_box;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// The reference cycle's reply: one LRW of 132 bytes and three AL status reads.
fn cycle_reply() -> Vec<u8> {
    let mut b = FrameBuilder::new().datagram(Cmd::Lrw, 1, 0, &[0; 132]);
    for d in 0..3u16 {
        b = b.datagram(Cmd::Fprd, 2 + d as u8, phys(0x1000 + d, 0x0130), &[8, 0]);
    }
    let mut f = b.build();
    f[6] |= 0x02;
    f
}

fn ns_per_iter(iters: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(iters)
}

/// Best of several rounds: the machine is shared, the minimum is the cost.
fn best(iters: u32, mut f: impl FnMut()) -> f64 {
    (0..7)
        .map(|_| ns_per_iter(iters, &mut f))
        .fold(f64::INFINITY, f64::min)
}

/// ns for one `pump_rx` of one frame (the link yields one frame, then nothing).
fn pump_one(frame: Vec<u8>) -> (f64, Bus) {
    struct Once(Vec<u8>, bool);
    impl Link for Once {
        fn send(&mut self, _: &[u8]) -> io::Result<()> {
            Ok(())
        }
        fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            self.1 = !self.1;
            Ok(self.1.then(|| {
                buf[..self.0.len()].copy_from_slice(&self.0);
                self.0.len()
            }))
        }
        fn wait(&mut self, _: Duration, _: Option<RawFd>) -> io::Result<()> {
            Ok(())
        }
        fn describe(&self) -> String {
            "once".into()
        }
    }
    type Sto = PduStorage<32, { PduStorage::element_size(1100) }>;
    let storage: &'static Sto = Box::leak(Box::new(Sto::new()));
    let (tx, rx, _pdu_loop) = storage.try_split().unwrap();
    let mut bus = Bus::new(tx, rx, Box::new(Once(frame, false)));
    let ns = best(200_000, || {
        black_box(bus.pump_rx());
    });
    (ns, bus)
}

fn main() {
    let reply = cycle_reply();
    let mut full = FrameBuilder::new()
        .datagram(Cmd::Lrw, 1, 0, &[0; 1500 - 2 - 12])
        .build();
    full[6] |= 0x02;
    let mut foreign = reply.clone();
    foreign[6..12].copy_from_slice(&[0x02, 0x42, 0xac, 0x11, 0x00, 0x02]);
    let mut inconsistent = reply.clone();
    inconsistent[14] = inconsistent[14].wrapping_add(40);
    assert_eq!(classify(&reply), Ok(Reply::Ethercrab));
    assert_eq!(classify(&full), Ok(Reply::Ethercrab));
    assert_eq!(classify(&foreign), Err(RxReject::ForeignSource));
    assert_eq!(classify(&inconsistent), Err(RxReject::BadLength));

    println!("reply filter (classify), ns per frame, best of 7 rounds:");
    for (name, f) in [
        ("reference cycle reply", &reply),
        ("1514-byte reply", &full),
        ("foreign source", &foreign),
        ("inconsistent length", &inconsistent),
    ] {
        let ns = best(5_000_000, || {
            black_box(classify(black_box(f))).ok();
        });
        println!("  {name:<24} {:>5} bytes {ns:>7.2} ns", f.len());
    }

    println!("Bus::pump_rx of one frame (link copy + filter + counters [+ ethercrab]):");
    let (drop_ns, bus) = pump_one(foreign);
    assert!(bus.counters.rejected(RxReject::ForeignSource) > 0);
    println!("  dropped by the filter (foreign source)  {drop_ns:>7.1} ns");
    let (eth_ns, bus) = pump_one(reply);
    assert!(bus.counters.rejected(RxReject::NotAwaited) > 0);
    println!("  passed to ethercrab (not awaited)       {eth_ns:>7.1} ns");
}
