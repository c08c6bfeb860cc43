//! Cost of one simulated cycle: the LRW of the whole process image (plus one AL status read per
//! subdevice, as ethercrab sends it) through the chain, for 3, 64 and 256 subdevices.
//! Run: `cargo bench -p ecsim --bench cycle`. Target: < 5 us for the reference segment.

use ecsim::frame::{Cmd, FrameBuilder, phys};
use ecsim::{Disposition, Segment, SegmentSpec};
use std::hint::black_box;
use std::time::Instant;

/// Frames of one cycle, split like ethercrab does (at most ~1100 data bytes per frame).
fn cycle_frames(image: usize, n_dev: usize) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut off = 0;
    let mut dev = 0;
    while off < image || dev < n_dev {
        let mut b = FrameBuilder::new();
        let mut room = 1100usize;
        if off < image {
            let chunk = (image - off).min(room - 12);
            b = b.datagram(Cmd::Lrw, 0, off as u32, &vec![0u8; chunk]);
            off += chunk;
            room -= chunk + 12;
        }
        while dev < n_dev && room >= 14 && off >= image {
            b = b.datagram(Cmd::Fprd, 1, phys(0x1000 + dev as u16, 0x0130), &[0, 0]);
            dev += 1;
            room -= 14;
        }
        frames.push(b.build());
    }
    frames
}

fn main() {
    println!("ecsim cycle cost (one LRW of the whole image + AL status reads):");
    println!(
        "{:>10} {:>8} {:>7} {:>12} {:>12} {:>10}",
        "subdevices", "bytes", "frames", "ns/cycle", "ns/device", "vs 5us"
    );
    for n in [3usize, 64, 256] {
        let mut seg = Segment::new(SegmentSpec::uniform(n, 22, 22));
        let (image, wkc) = seg.preconfigure();
        let templates = cycle_frames(image, n);
        let mut frames = templates.clone();
        // Check once that the cycle is real: the full WKC comes back.
        let mut got = 0u32;
        for f in frames.iter_mut() {
            assert!(matches!(seg.process(f, 0), Disposition::Reply { .. }));
            if let Some((_, w)) = ecsim::frame::datagram_result(f, 0) {
                if f[16] == Cmd::Lrw as u8 {
                    got += u32::from(w);
                }
            }
        }
        assert_eq!(got, u32::from(wkc), "LRW WKC over all frames");
        let iters = (200_000 / n).max(200);
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            for i in 0..iters {
                for (f, tpl) in frames.iter_mut().zip(&templates) {
                    f.copy_from_slice(tpl);
                    black_box(seg.process(black_box(f), i as u64));
                }
            }
            best = best.min(t.elapsed().as_nanos() as f64 / iters as f64);
        }
        println!(
            "{:>10} {:>8} {:>7} {:>12.0} {:>12.1} {:>9.2}x",
            n,
            image,
            templates.len(),
            best,
            best / n as f64,
            best / 5000.0
        );
    }
}
