//! A simulated segment behind a "port": frames go in, responses come out when they are due.
//!
//! Shared by both transports. Responses wait in a fixed ring of preallocated buffers (response
//! delay injection), so the steady state allocates nothing.

use crate::faults::Faults;
use crate::segment::{Disposition, Segment, SegmentStats};
use crate::spec::SegmentSpec;
use std::time::Instant;

/// Largest frame the port accepts (Ethernet II without FCS, jumbo frames are not EtherCAT).
pub const MAX_FRAME: usize = 1518;
/// Responses that may wait for their due time at once.
pub const QUEUE_SLOTS: usize = 32;

struct Slot {
    due_ns: u64,
    len: usize,
    buf: [u8; MAX_FRAME],
}

pub struct SimPort {
    segment: Segment,
    epoch: Instant,
    slots: Box<[Slot]>,
    /// Ring indices: `head` is the oldest queued response, `count` how many are queued.
    head: usize,
    count: usize,
    overflows: u64,
    oversize: u64,
}

impl SimPort {
    pub fn new(spec: SegmentSpec) -> Self {
        Self::with_faults(spec, Faults::new())
    }

    pub fn with_faults(spec: SegmentSpec, faults: Faults) -> Self {
        let slots = (0..QUEUE_SLOTS)
            .map(|_| Slot {
                due_ns: 0,
                len: 0,
                buf: [0; MAX_FRAME],
            })
            .collect();
        SimPort {
            segment: Segment::with_faults(spec, faults),
            epoch: Instant::now(),
            slots,
            head: 0,
            count: 0,
            overflows: 0,
            oversize: 0,
        }
    }

    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    pub fn segment_mut(&mut self) -> &mut Segment {
        &mut self.segment
    }

    pub fn faults(&self) -> &Faults {
        self.segment.faults()
    }

    pub fn stats(&self) -> SegmentStats {
        self.segment.stats()
    }

    /// Responses dropped because every queue slot was taken.
    pub fn overflows(&self) -> u64 {
        self.overflows
    }

    /// Frames refused because they were longer than [`MAX_FRAME`].
    pub fn oversize(&self) -> u64 {
        self.oversize
    }

    /// Nanoseconds since this port was created (the simulation clock).
    pub fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Hand one frame to the segment. The response (if any) becomes available through
    /// [`SimPort::recv`] once due.
    pub fn send(&mut self, frame: &[u8]) -> Disposition {
        if frame.len() > MAX_FRAME {
            self.oversize += 1;
            return Disposition::Ignored;
        }
        if self.count == QUEUE_SLOTS {
            self.overflows += 1;
            return Disposition::Lost;
        }
        let now = self.now_ns();
        let idx = (self.head + self.count) % QUEUE_SLOTS;
        let slot = &mut self.slots[idx];
        slot.buf[..frame.len()].copy_from_slice(frame);
        let d = self.segment.process(&mut slot.buf[..frame.len()], now);
        if let Disposition::Reply { delay_ns } = d {
            slot.len = frame.len();
            slot.due_ns = now + delay_ns;
            self.count += 1;
        }
        d
    }

    /// Copy the oldest due response into `out`; returns its length. Responses leave in order.
    pub fn recv(&mut self, out: &mut [u8]) -> Option<usize> {
        if self.count == 0 {
            return None;
        }
        let slot = &self.slots[self.head];
        if slot.due_ns > self.now_ns() {
            return None;
        }
        let n = slot.len.min(out.len());
        out[..n].copy_from_slice(&slot.buf[..n]);
        self.head = (self.head + 1) % QUEUE_SLOTS;
        self.count -= 1;
        Some(n)
    }

    /// When the oldest queued response becomes due (simulation clock), if any is queued.
    pub fn next_due_ns(&self) -> Option<u64> {
        (self.count > 0).then(|| self.slots[self.head].due_ns)
    }

    /// Drop every queued response (e.g. after a link flap).
    pub fn flush(&mut self) {
        self.head = 0;
        self.count = 0;
    }
}
