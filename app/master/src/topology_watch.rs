//! Devices plugged in while the segment runs where the configuration has none (issue 28
//! item 3: "detects a change (a device inserted …) … an event").
//!
//! A device plugged into a free port — at the line's end, on an unused junction port, or a
//! group plugged in elsewhere than its configured place — answers no datagram of the cycle
//! (rtcat never gave it an address, an FMMU or a state), so neither the working counter nor
//! any subdevice's state shows it; before this, only the next re-initialisation's topology
//! check did. The recovery worker counts the devices on the segment every
//! [`INTERVAL`] (one broadcast read: each device that reads increments the working counter,
//! ETG.1000.4 §5.4.2) while every subdevice is settled — in service, parked, or a member of an
//! optional group known absent — and when more answer than those in service and parked, reads
//! every device's station address by position ([`crate::place::sweep`]): devices without a
//! known address where the configured order expects none ([`crate::place::strays`]) are
//! reported, on the board for the cycle to raise as an event
//! ([`crate::stats::EventKind::UnexpectedDevices`]) and in the log with their positions. They
//! are never driven (nothing rtcat writes addresses them). Devices where absent members of an
//! optional group are expected are their probes' to take (and to refuse when they are not the
//! members).

use std::time::{Duration, Instant};

/// How often the devices are counted: one datagram. On an inline bus with no recovery
/// outstanding the worker's frames go out with the cycle's own exchange: at 1 s the extra
/// frame is in 0.1 % of the cycles of a 1 ms cycle, below where the exec P99 is read.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// What the worker keeps between counts.
pub(crate) struct Watch {
    next: Instant,
    /// What was last reported: (devices, first position).
    reported: Option<(u16, u16)>,
}

impl Watch {
    pub(crate) fn new() -> Watch {
        Watch {
            next: Instant::now() + INTERVAL,
            reported: None,
        }
    }

    /// One count when due. `settled`: how many subdevices answer now as far as the board knows
    /// (`None`: a recovery is under way, nothing is judged); `order`: every subdevice's station
    /// address in processing order. What changed goes to `report` (0 devices: none any more).
    pub(crate) fn step(
        &mut self,
        own: crate::own_frames::OwnBus<'_>,
        settled: Option<usize>,
        order: &[u16],
        report: impl FnOnce(u16, u16),
    ) {
        let now = Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + INTERVAL;
        let Some(answering) = settled else { return };
        // Every device that reads the register increments the working counter.
        let mut b = crate::own_frames::Batch::new();
        let brd = b.brd(0x0000, 1);
        let Some(count) = own
            .exchange(&b)
            .ok()
            .and_then(|r| r.get(brd).map(|(wkc, _)| wkc))
        else {
            return;
        };
        let found = if usize::from(count) > answering {
            crate::place::strays(&crate::place::sweep(own, order.len()), order)
        } else {
            None
        };
        let key = |s: &crate::place::Strays| (s.devices, s.first);
        if found.as_ref().map(key) == self.reported {
            return;
        }
        match &found {
            Some(s) => {
                log::warn!(
                    "devices on the segment that the configuration does not place, {} in all: {}; \
                     not driven",
                    s.devices,
                    s.text
                );
                report(s.devices, s.first);
            }
            None => {
                log::info!("no device on the segment that the configuration does not place");
                report(0, 0);
            }
        }
        self.reported = found.as_ref().map(key);
    }
}
