//! How long the line was available (issue 28 item 5): per subdevice and for the segment, the
//! time its data was valid (in OP), the outages (each run of cycles with invalid data: a
//! subdevice out of OP, lost frames, a working counter not explained, a whole-segment recovery
//! in between) with their number and durations, and the cycles with invalid data.
//!
//! The cycle calls [`Availability::cycle`] once with every subdevice's validity; the work per
//! subdevice is a comparison with the last cycle, and time is added up only when the validity
//! changes (the open interval is added when the figures are read), so the cost stays a few
//! nanoseconds per subdevice. The live copy ([`LiveAvailability`]) is written only on those
//! changes and on invalid cycles: relaxed atomics, no lock.

use crate::health::SubdeviceStatus;
use crate::limits::MAX_SUBDEVICES;
use std::sync::atomic::{AtomicU64, Ordering};

/// The figures of one subdevice or of the segment, at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    /// Time with valid data (in OP), ns.
    pub op_ns: u64,
    /// Cycles with invalid data.
    pub invalid_cycles: u64,
    /// Outages: runs of cycles with invalid data (an outage still open counts).
    pub outages: u64,
    /// Their total duration, ns (from the first invalid cycle to the first valid one again).
    pub outage_ns: u64,
    /// The longest, ns.
    pub outage_max_ns: u64,
    /// Its data is invalid now (an outage is open).
    pub out_now: bool,
}

/// One subdevice's (or the segment's) record, owned by the cyclic thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tracker {
    started: bool,
    valid: bool,
    /// When the validity last changed (monotonic ns).
    since_ns: u64,
    op_ns: u64,
    invalid_cycles: u64,
    outages: u64,
    outage_ns: u64,
    outage_max_ns: u64,
}

impl Tracker {
    /// One cycle at `now` (monotonic ns) with `valid` data. True when the validity changed.
    #[inline]
    fn cycle(&mut self, valid: bool, now: u64) -> bool {
        let changed = if !self.started {
            self.started = true;
            self.valid = valid;
            self.since_ns = now;
            if !valid {
                self.outages += 1;
            }
            true
        } else if valid != self.valid {
            let d = now.saturating_sub(self.since_ns);
            if self.valid {
                self.op_ns += d;
                self.outages += 1;
            } else {
                self.outage_ns += d;
                self.outage_max_ns = self.outage_max_ns.max(d);
            }
            self.valid = valid;
            self.since_ns = now;
            true
        } else {
            false
        };
        if !valid {
            self.invalid_cycles += 1;
        }
        changed
    }

    /// The figures at `now`, the open interval included.
    pub fn figures(&self, now: u64) -> Figures {
        let open = if self.started {
            now.saturating_sub(self.since_ns)
        } else {
            0
        };
        let mut f = Figures {
            op_ns: self.op_ns,
            invalid_cycles: self.invalid_cycles,
            outages: self.outages,
            outage_ns: self.outage_ns,
            outage_max_ns: self.outage_max_ns,
            out_now: self.started && !self.valid,
        };
        if self.started && self.valid {
            f.op_ns += open;
        } else if self.started {
            f.outage_ns += open;
            f.outage_max_ns = f.outage_max_ns.max(open);
        }
        f
    }

    fn publish(&self, live: &LiveTracker) {
        live.started
            .store(u64::from(self.started), Ordering::Relaxed);
        live.valid.store(u64::from(self.valid), Ordering::Relaxed);
        live.since_ns.store(self.since_ns, Ordering::Relaxed);
        live.op_ns.store(self.op_ns, Ordering::Relaxed);
        live.outages.store(self.outages, Ordering::Relaxed);
        live.outage_ns.store(self.outage_ns, Ordering::Relaxed);
        live.outage_max_ns
            .store(self.outage_max_ns, Ordering::Relaxed);
        live.invalid_cycles
            .store(self.invalid_cycles, Ordering::Relaxed);
    }
}

/// The run's availability: one tracker per subdevice position and one for the segment (valid
/// when every subdevice's data is).
#[derive(Debug, Clone, Default)]
pub struct Availability {
    subdevices: Vec<Tracker>,
    segment: Tracker,
    /// The last cycle's time (monotonic ns): where a finished run's figures end.
    last_ns: u64,
}

impl Availability {
    /// Track `n` subdevices (outside the cycle, at every bring-up; positions kept).
    pub fn set_subdevices(&mut self, n: usize) {
        self.subdevices
            .resize(n.min(MAX_SUBDEVICES), Tracker::default());
    }

    /// One cycle at `now` (monotonic ns) with the subdevices' `status`; changes go to `live`.
    #[inline]
    pub fn cycle(&mut self, status: &[SubdeviceStatus], now: u64, live: &LiveAvailability) {
        let mut all = true;
        for (i, (t, s)) in self.subdevices.iter_mut().zip(status).enumerate() {
            all &= s.data_valid;
            if (t.cycle(s.data_valid, now) || !s.data_valid)
                && let Some(l) = live.subdevices.get(i)
            {
                t.publish(l);
            }
        }
        if self.segment.cycle(all, now) || !all {
            self.segment.publish(&live.segment);
        }
        self.last_ns = now;
    }

    /// Per subdevice (by position) and for the segment, up to the last cycle (a finished run's
    /// figures: the time after it, shutdown and writing results, is no one's).
    pub fn figures_at_last_cycle(&self) -> (Vec<Figures>, Figures) {
        self.figures(self.last_ns)
    }

    /// Per subdevice (by position) and for the segment, at `now`.
    pub fn figures(&self, now: u64) -> (Vec<Figures>, Figures) {
        (
            self.subdevices.iter().map(|t| t.figures(now)).collect(),
            self.segment.figures(now),
        )
    }
}

/// The live copy of a [`Tracker`] (relaxed atomics).
#[derive(Debug, Default)]
pub struct LiveTracker {
    started: AtomicU64,
    valid: AtomicU64,
    since_ns: AtomicU64,
    op_ns: AtomicU64,
    invalid_cycles: AtomicU64,
    outages: AtomicU64,
    outage_ns: AtomicU64,
    outage_max_ns: AtomicU64,
}

impl LiveTracker {
    /// The figures at `now` (monotonic ns) as last published.
    pub fn figures(&self, now: u64) -> Figures {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Tracker {
            started: r(&self.started) == 1,
            valid: r(&self.valid) == 1,
            since_ns: r(&self.since_ns),
            op_ns: r(&self.op_ns),
            invalid_cycles: r(&self.invalid_cycles),
            outages: r(&self.outages),
            outage_ns: r(&self.outage_ns),
            outage_max_ns: r(&self.outage_max_ns),
        }
        .figures(now)
    }
}

/// What the status thread reads: every position the master can run, and the segment.
#[derive(Debug)]
pub struct LiveAvailability {
    subdevices: Box<[LiveTracker]>,
    segment: LiveTracker,
}

impl Default for LiveAvailability {
    fn default() -> Self {
        LiveAvailability {
            subdevices: (0..MAX_SUBDEVICES)
                .map(|_| LiveTracker::default())
                .collect(),
            segment: LiveTracker::default(),
        }
    }
}

impl LiveAvailability {
    /// The first `n` subdevices and the segment at `now` (monotonic ns).
    pub fn figures(&self, n: usize, now: u64) -> (Vec<Figures>, Figures) {
        (
            self.subdevices
                .iter()
                .take(n)
                .map(|t| t.figures(now))
                .collect(),
            self.segment.figures(now),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(valid: &[bool]) -> Vec<SubdeviceStatus> {
        valid
            .iter()
            .map(|&v| SubdeviceStatus {
                al_state: if v { 8 } else { 4 },
                data_valid: v,
            })
            .collect()
    }

    #[test]
    fn outages_are_counted_and_timed_per_subdevice_and_for_the_segment() {
        let live = LiveAvailability::default();
        let mut a = Availability::default();
        a.set_subdevices(2);
        // 1 ms cycles: 0 valid throughout; 1 out from 3 ms to 6 ms and from 8 ms on.
        let pattern = [
            true, true, true, false, false, false, true, true, false, false,
        ];
        for (k, &v) in pattern.iter().enumerate() {
            a.cycle(&st(&[true, v]), k as u64 * 1_000_000, &live);
        }
        let now = 10_000_000;
        let (subs, seg) = a.figures(now);
        assert_eq!(
            subs[0],
            Figures {
                op_ns: 10_000_000,
                ..Figures::default()
            }
        );
        let want = Figures {
            op_ns: 5_000_000,
            invalid_cycles: 5,
            outages: 2,
            outage_ns: 3_000_000 + 2_000_000,
            outage_max_ns: 3_000_000,
            out_now: true,
        };
        assert_eq!(subs[1], want);
        assert_eq!(seg, want, "the segment is out when any subdevice is");
        // The live copy says the same.
        let (l_subs, l_seg) = live.figures(2, now);
        assert_eq!((l_subs, l_seg), (subs, seg));
    }

    #[test]
    fn a_run_that_starts_out_counts_an_outage() {
        let live = LiveAvailability::default();
        let mut a = Availability::default();
        a.set_subdevices(1);
        a.cycle(&st(&[false]), 0, &live);
        a.cycle(&st(&[true]), 2_000, &live);
        let (subs, _) = a.figures(5_000);
        assert_eq!(
            (subs[0].outages, subs[0].outage_ns, subs[0].op_ns),
            (1, 2_000, 3_000)
        );
    }
}
