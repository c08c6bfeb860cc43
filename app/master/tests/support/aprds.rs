//! A link that counts the position-addressed reads (APRD) the master sends: how many
//! datagrams, in how many frames. The hot-connect tests bound a probe's cost on the wire with it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// APRD datagrams (ETG.1000.4 Table 12: command 1) and the frames they came in.
#[derive(Default)]
pub struct Aprds {
    datagrams: AtomicU64,
    frames: AtomicU64,
}

impl Aprds {
    /// (datagrams, frames) so far.
    pub fn now(&self) -> (u64, u64) {
        (
            self.datagrams.load(Ordering::Relaxed),
            self.frames.load(Ordering::Relaxed),
        )
    }
}

/// The simulated segment `seg` with `faults` behind a link that counts into `aprds`.
pub fn counting(
    seg: ecsim::SegmentSpec,
    faults: &ecsim::Faults,
    aprds: &Arc<Aprds>,
) -> rtcat_master::Target {
    let aprds = aprds.clone();
    super::observed::observed(seg, faults, move |_, frame| aprds.count(frame))
}

impl Aprds {
    fn count(&self, frame: &[u8]) {
        // Ethernet header (14), EtherCAT header (2), then datagrams: command, index, address
        // (4), length (11 bits; bit 15: another follows), interrupt (2), data, working counter.
        let (mut at, mut n) = (16, 0);
        while at + 10 <= frame.len() {
            n += u64::from(frame[at] == 1);
            let word = u16::from_le_bytes([frame[at + 6], frame[at + 7]]);
            at += 10 + usize::from(word & 0x07ff) + 2;
            if word & 0x8000 == 0 {
                break;
            }
        }
        if n > 0 {
            self.datagrams.fetch_add(n, Ordering::Relaxed);
            self.frames.fetch_add(1, Ordering::Relaxed);
        }
    }
}
