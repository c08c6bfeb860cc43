//! Cost of one simulated cycle: the LRW of the whole process image (plus one AL status read per
//! subdevice, as ethercrab sends it) through the chain, for 3, 64 and 256 subdevices.
//! Run: `cargo bench -p ecsim --bench cycle`. Target: < 5 us for the reference segment.

use ecsim::frame::{Cmd, FrameBuilder, phys};
use ecsim::{Disposition, Segment, SegmentSpec};
use std::hint::black_box;
use std::time::Instant;

/// Frames of one cycle, split like ethercrab does (at most 1100 data bytes per frame), with the
/// logical range of each frame's LRW.
fn cycle_frames(image: usize, n_dev: usize) -> Vec<(Vec<u8>, std::ops::Range<usize>)> {
    let mut frames = Vec::new();
    let mut off = 0;
    let mut dev = 0;
    while off < image || dev < n_dev {
        let mut b = FrameBuilder::new();
        let mut room = 1100usize + 12;
        let start = off;
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
        frames.push((b.build(), start..off));
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
        let layout = seg.preconfigure();
        let image = layout.image_len;
        let with_ranges = cycle_frames(image, n);
        let templates: Vec<Vec<u8>> = with_ranges.iter().map(|(f, _)| f.clone()).collect();
        let mut frames = templates.clone();
        // Check once that the cycle is real: every frame's LRW comes back with its full WKC.
        for (f, (_, range)) in frames.iter_mut().zip(&with_ranges) {
            assert!(matches!(seg.process(f, 0), Disposition::Reply { .. }));
            if !range.is_empty() {
                let (_, w) = ecsim::frame::datagram_result(f, 0).expect("valid reply");
                assert_eq!(
                    u32::from(w),
                    layout.lrw_wkc(range.clone()),
                    "LRW WKC of {range:?}"
                );
            }
        }
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
