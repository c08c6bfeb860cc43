//! How the inline cycle waits for its replies (`[cycle] wait`, docs/NOTES.md §1.2), and the
//! hybrid wait's learning of the round trip. A leaf: pure arithmetic and a fixed-size ring,
//! nothing here makes a system call or allocates; the bus (`bus::Bus::wait_reply`) acts on it.
//!
//! - `sleep`: block in `ppoll` on the link until a frame arrives or the timeout — no CPU spent
//!   while the frame is away, but every reply pays the wake-up of a sleeping thread.
//! - `busy`: read the link without blocking (`recv(MSG_DONTWAIT)`) again and again until the
//!   reply or the timeout — the reply is taken as soon as the kernel has it, and the core is
//!   busy for the whole round trip.
//! - `hybrid`: sleep in `ppoll` until shortly before the reply is expected, poll for a bounded
//!   window, then sleep again until the timeout. "Expected" and "shortly" are learned from the
//!   recent round trips and from how late the wait's own sleeps woke ([`RttLearner`]); a reply
//!   that comes early still wakes the sleep.

use serde::{Deserialize, Serialize};

/// How the cycle waits for its replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitMode {
    /// Block in `ppoll` until a frame or the timeout.
    Sleep,
    /// Poll the link without blocking until the reply or the timeout.
    Busy,
    /// Sleep until shortly before the learned round trip, poll a bounded window, sleep again.
    Hybrid,
}

impl WaitMode {
    /// The inline cycle's mode when `[cycle] wait` is absent: the round trip of `busy` within
    /// the noise (over veth 0.62–0.69× the raw-socket floor at p50, busy 0.62–0.72×, sleep
    /// 0.98–1.02×), no more CPU time, and a poll that stops after [`MAX_POLL_NS`] when the
    /// replies stop, where busy spins at SCHED_FIFO for the whole timeout (docs/NOTES.md §1.2).
    pub const DEFAULT: WaitMode = WaitMode::Hybrid;

    /// Every mode, in the order of [`WaitMode::name`]'s codes.
    pub const ALL: [WaitMode; 3] = [WaitMode::Sleep, WaitMode::Busy, WaitMode::Hybrid];

    /// The configuration's and the results' name.
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Sleep => "sleep",
            WaitMode::Busy => "busy",
            WaitMode::Hybrid => "hybrid",
        }
    }

    /// The mode of `name` (as in the configuration), None for anything else.
    pub fn from_name(name: &str) -> Option<WaitMode> {
        WaitMode::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl std::fmt::Display for WaitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Round trips (and wake-ups) the hybrid wait learns from: the most recent ones.
pub const HISTORY: usize = 64;
/// Round trips needed before the hybrid wait polls at all (until then it sleeps).
pub const MIN_HISTORY: usize = 16;
/// The plan is recomputed every this many round trips (a sort of [`HISTORY`] values).
pub const REPLAN_EVERY: u32 = 16;
/// How late a timed sleep is taken to wake until the hybrid wait has measured its own (timer
/// interrupt, context switch: a few µs on an idle core of an RT kernel, ten or more on a VM).
pub const DEFAULT_WAKE_NS: u64 = 10_000;
/// Added to the learned wake-up lateness and to the high end of the window, and an eighth of the
/// fastest usual round trip on top: what the percentiles of 64 values do not show.
pub const GUARD_NS: u64 = 2_000;
/// The longest poll window: beyond it the hybrid wait sleeps again, so a segment whose replies
/// suddenly take much longer (a cable pulled, a long mailbox frame) does not keep the core busy
/// for the whole timeout.
pub const MAX_POLL_NS: u64 = 200_000;

/// When to poll, relative to the first frame's send time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Sleep until this long after the send.
    pub poll_from_ns: u64,
    /// Poll until this long after the send, then sleep until the timeout.
    pub poll_until_ns: u64,
}

/// What the hybrid wait does `elapsed_ns` after the send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Sleep for at most this long (the reply may still wake it).
    Sleep(u64),
    /// Poll the link now.
    Poll,
    /// The window is over: sleep until the timeout.
    SleepToTimeout,
}

/// The recent round trips, how late the hybrid wait's own sleeps woke, and the plan made of
/// them. With `lo`/`hi` the 10th/90th percentile of the round trips and `wake` the 90th of the
/// wake-up lateness ([`DEFAULT_WAKE_NS`] until measured), the margin is `wake + GUARD_NS + lo/8`;
/// the window opens `margin` before `lo` and closes `margin` after `hi` (at most [`MAX_POLL_NS`]
/// long). Percentiles, not means, so that an outlier (a preempted echo; a lost frame's timeout
/// is never recorded) neither drags the window late nor widens it for long.
#[derive(Debug, Clone)]
pub struct RttLearner {
    rtt: Ring,
    wake: Ring,
    since_plan: u32,
    plan: Option<Plan>,
}

/// The last [`HISTORY`] values (ns, saturated to u32: 4.3 s).
#[derive(Debug, Clone)]
struct Ring {
    v: [u32; HISTORY],
    len: usize,
    next: usize,
}

impl Ring {
    const EMPTY: Ring = Ring {
        v: [0; HISTORY],
        len: 0,
        next: 0,
    };

    fn push(&mut self, ns: u64) {
        self.v[self.next] = ns.min(u64::from(u32::MAX)) as u32;
        self.next = (self.next + 1) % HISTORY;
        self.len = (self.len + 1).min(HISTORY);
    }

    /// The `tenths`/10 quantile (nearest rank below), None when empty. Sorts a copy on the stack.
    fn quantile(&self, tenths: usize) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let mut v = self.v;
        let v = &mut v[..self.len];
        v.sort_unstable();
        Some(u64::from(v[(self.len * tenths / 10).min(self.len - 1)]))
    }
}

impl Default for RttLearner {
    fn default() -> Self {
        RttLearner {
            rtt: Ring::EMPTY,
            wake: Ring::EMPTY,
            since_plan: 0,
            plan: None,
        }
    }
}

impl RttLearner {
    /// Learn one complete exchange's round trip (first frame out to last reply in).
    pub fn record(&mut self, rtt_ns: u64) {
        self.rtt.push(rtt_ns);
        self.since_plan += 1;
        if self.rtt.len >= MIN_HISTORY && (self.plan.is_none() || self.since_plan >= REPLAN_EVERY) {
            self.plan = Some(self.make_plan());
            self.since_plan = 0;
        }
    }

    /// Learn how late a sleep of the hybrid wait woke after its timeout (not one a frame ended).
    pub fn record_wake(&mut self, late_ns: u64) {
        self.wake.push(late_ns);
    }

    /// The plan in effect (None: too few round trips yet, sleep).
    pub fn plan(&self) -> Option<Plan> {
        self.plan
    }

    /// Forget everything (a new bring-up: another segment, another round trip).
    pub fn reset(&mut self) {
        *self = RttLearner::default();
    }

    fn make_plan(&self) -> Plan {
        let lo = self.rtt.quantile(1).unwrap_or(0);
        let hi = self.rtt.quantile(9).unwrap_or(0);
        let wake = self.wake.quantile(9).unwrap_or(DEFAULT_WAKE_NS);
        let margin = wake + GUARD_NS + lo / 8;
        let poll_from_ns = lo.saturating_sub(margin);
        let poll_until_ns = (hi + margin).min(poll_from_ns + MAX_POLL_NS);
        Plan {
            poll_from_ns,
            poll_until_ns,
        }
    }

    /// What to do `elapsed_ns` after the send.
    pub fn step(&self, elapsed_ns: u64) -> Step {
        match self.plan {
            None => Step::SleepToTimeout,
            Some(p) if elapsed_ns < p.poll_from_ns => Step::Sleep(p.poll_from_ns - elapsed_ns),
            Some(p) if elapsed_ns < p.poll_until_ns => Step::Poll,
            Some(_) => Step::SleepToTimeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in WaitMode::ALL {
            assert_eq!(WaitMode::from_name(m.name()), Some(m));
            assert_eq!(m.to_string(), m.name());
        }
        assert_eq!(WaitMode::from_name("spin"), None);
    }

    #[test]
    fn no_plan_before_enough_round_trips() {
        let mut l = RttLearner::default();
        for _ in 0..MIN_HISTORY - 1 {
            l.record(30_000);
            assert_eq!(l.plan(), None);
            assert_eq!(l.step(0), Step::SleepToTimeout);
        }
        l.record(30_000);
        assert!(l.plan().is_some());
    }

    #[test]
    fn the_window_brackets_the_usual_round_trips() {
        let mut l = RttLearner::default();
        // 40 µs .. 49 µs, evenly.
        for i in 0..HISTORY as u64 {
            l.record(40_000 + (i % 10) * 1_000);
        }
        let p = l.plan().unwrap();
        // 10th percentile 40 µs, margin 10 + 2 + 5 µs (no wake-up measured yet); 90th
        // percentile (the 58th of 64) 48 µs.
        assert_eq!(p.poll_from_ns, 40_000 - 17_000);
        assert_eq!(p.poll_until_ns, 48_000 + 17_000);
        assert_eq!(l.step(0), Step::Sleep(23_000));
        assert_eq!(l.step(22_999), Step::Sleep(1));
        assert_eq!(l.step(23_000), Step::Poll);
        assert_eq!(l.step(64_999), Step::Poll);
        assert_eq!(l.step(65_000), Step::SleepToTimeout);
    }

    #[test]
    fn outliers_move_neither_end() {
        let mut l = RttLearner::default();
        for i in 0..HISTORY {
            // Every 20th round trip 2 ms (a preempted echo), the others 30 µs.
            l.record(if i % 20 == 0 { 2_000_000 } else { 30_000 });
        }
        let p = l.plan().unwrap();
        assert_eq!(p.poll_from_ns, 30_000 - 12_000 - 3_750);
        assert_eq!(p.poll_until_ns, 30_000 + 12_000 + 3_750);
    }

    #[test]
    fn the_plan_follows_a_changed_round_trip_and_the_window_is_bounded() {
        let mut l = RttLearner::default();
        for _ in 0..HISTORY {
            l.record(30_000);
        }
        // The round trip grows to 1 ms (another segment after a recovery): once the ring holds
        // more new than old values, the window moves there.
        for _ in 0..HISTORY {
            l.record(1_000_000);
        }
        let p = l.plan().unwrap();
        assert_eq!(p.poll_from_ns, 1_000_000 - 12_000 - 125_000);
        // Twice the margin (274 µs) is more than the longest window.
        assert_eq!(p.poll_until_ns, p.poll_from_ns + MAX_POLL_NS);
        // Widely spread round trips: the window is cut to MAX_POLL_NS.
        for i in 0..HISTORY as u64 {
            l.record(20_000 + i * 20_000);
        }
        let p = l.plan().unwrap();
        assert_eq!(p.poll_until_ns - p.poll_from_ns, MAX_POLL_NS);
        // Short round trips: the sleep is skipped, the poll starts at once.
        l.reset();
        for _ in 0..HISTORY {
            l.record(5_000);
        }
        assert_eq!(l.plan().unwrap().poll_from_ns, 0);
        assert_eq!(l.step(0), Step::Poll);
        // A round trip beyond u32 ns (4.3 s) is clamped, not wrapped.
        l.record(u64::MAX);
        assert_eq!(l.rtt.v[(l.rtt.next + HISTORY - 1) % HISTORY], u32::MAX);
    }

    #[test]
    fn the_margin_is_the_measured_wake_up_lateness() {
        let mut l = RttLearner::default();
        // Sleeps that wake 30 µs late (a slow VM), one in ten 100 µs late.
        for i in 0..HISTORY {
            l.record_wake(if i % 10 == 9 { 100_000 } else { 30_000 });
        }
        for _ in 0..MIN_HISTORY {
            l.record(80_000);
        }
        // 90th percentile of the wake-ups (the 58th of 64): 30 µs; margin 30 + 2 + 10 µs.
        let p = l.plan().unwrap();
        assert_eq!(p.poll_from_ns, 80_000 - 42_000);
        assert_eq!(p.poll_until_ns, 80_000 + 42_000);
        // Quick wake-ups (an RT kernel): the window narrows at the next plan.
        for _ in 0..HISTORY {
            l.record_wake(3_000);
        }
        for _ in 0..REPLAN_EVERY {
            l.record(80_000);
        }
        let p = l.plan().unwrap();
        assert_eq!(p.poll_from_ns, 80_000 - 15_000);
        assert_eq!(p.poll_until_ns, 80_000 + 15_000);
    }
}
