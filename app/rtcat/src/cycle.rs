//! The cyclic loop: wake on absolute deadlines, exchange process data, measure, check health.
//!
//! Catch-up policy: when a cycle ends after the next deadline, that deadline is missed (counted
//! once) and the loop skips to the first deadline still in the future, counting every period it
//! skipped; the grid of deadlines (start + k x period) is never shifted, so the phase is kept.
//! Nothing here allocates, locks across I/O, or prints: events and samples go into lock-free
//! rings drained by the status thread.

use crate::app::Application;
use crate::bus::{Bus, BusCounters};
use crate::clock::{now_ns, sleep_until, unix_ns};
use crate::master::{MAX_PDI_BYTES, MAX_SUBDEVICES};
use crate::stats::{Event, EventKind, Live, Recorder, Sample};
use ethercrab::subdevice_group::{Op, TxRxResponse};
use ethercrab::{DefaultLock, MainDevice, SubDeviceGroup, SubDeviceState};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

pub type OpGroup = SubDeviceGroup<MAX_SUBDEVICES, MAX_PDI_BYTES, DefaultLock, Op>;

/// Why the cyclic loop returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// SIGINT/SIGTERM (or a stop request).
    Stopped,
    /// The requested duration elapsed.
    DurationReached,
    /// Too many consecutive bad cycles: the segment must be re-initialised.
    Recover { bad_cycles: u32 },
}

/// Fixed parameters of one cyclic phase.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub period_ns: u64,
    pub response_timeout_ns: u64,
    pub expected_wkc: u16,
    pub bad_cycles_before_recovery: u32,
    /// Monotonic end time (bench duration), if any.
    pub end_ns: Option<u64>,
}

/// Who moves the frames of a cycle.
pub enum Exchanger {
    /// The cyclic thread pumps the bus itself.
    Inline(Bus),
    /// A TX/RX thread pumps; the cyclic thread parks until woken.
    Thread {
        counters: Arc<BusCounters>,
        waker: Waker,
    },
}

impl Exchanger {
    fn counters(&self) -> &BusCounters {
        match self {
            Exchanger::Inline(bus) => &bus.counters,
            Exchanger::Thread { counters, .. } => counters,
        }
    }
}

/// One exchange: Ok(response), or Err(()) when nothing came back within the response timeout.
fn exchange(
    x: &mut Exchanger,
    md: &MainDevice<'static>,
    group: &OpGroup,
    deadline_ns: u64,
) -> Result<TxRxResponse<MAX_SUBDEVICES>, ()> {
    let mut fut = pin!(group.tx_rx(md));
    match x {
        Exchanger::Inline(bus) => {
            let mut cx = Context::from_waker(Waker::noop());
            loop {
                if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                    return r.map_err(drop);
                }
                bus.pump_tx();
                if bus.pump_rx() > 0 {
                    continue;
                }
                let now = now_ns();
                if now >= deadline_ns {
                    // Dropping the future releases its frame; a late response is then rejected
                    // by ethercrab and counted by the bus.
                    return Err(());
                }
                let _ = bus
                    .link
                    .wait(std::time::Duration::from_nanos(deadline_ns - now), None);
            }
        }
        Exchanger::Thread { waker, .. } => {
            let mut cx = Context::from_waker(waker);
            loop {
                if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                    return r.map_err(drop);
                }
                let now = now_ns();
                if now >= deadline_ns {
                    return Err(());
                }
                std::thread::park_timeout(std::time::Duration::from_nanos(deadline_ns - now));
            }
        }
    }
}

fn state_code(s: SubDeviceState) -> u8 {
    match s {
        SubDeviceState::None => 0,
        SubDeviceState::Init => 1,
        SubDeviceState::PreOp => 2,
        SubDeviceState::Bootstrap => 3,
        SubDeviceState::SafeOp => 4,
        SubDeviceState::Op => 8,
        SubDeviceState::Other(v) => v,
    }
}

/// Everything the loop writes to besides the recorder.
pub struct Sinks<'a> {
    pub live: &'a Live,
    pub events: &'a mut rtrb::Producer<Event>,
    pub samples: Option<&'a mut rtrb::Producer<Sample>>,
    /// Scratch for a copy of one subdevice's inputs (sized to the largest before the loop).
    pub scratch: &'a mut Vec<u8>,
    /// Last AL state seen per subdevice.
    pub states: &'a mut [u8; MAX_SUBDEVICES],
    pub stop: &'a dyn Fn() -> bool,
}

#[inline]
fn push_event(events: &mut rtrb::Producer<Event>, cycle: u64, kind: EventKind) {
    // A full ring drops the event; the counters still count it.
    let _ = events.push(Event {
        unix_ns: unix_ns(),
        cycle,
        kind,
    });
}

/// Move to the next deadline. A cycle that ended after it missed it: count the miss, skip to the
/// first deadline still in the future (same grid), count the skipped periods and return them.
#[inline]
fn advance(deadline: &mut u64, period: u64, end: u64, rec: &mut Recorder) -> Option<u64> {
    *deadline += period;
    if end <= *deadline {
        return None;
    }
    let behind = (end - *deadline) / period + 1;
    rec.missed_deadlines += 1;
    rec.skipped_periods += behind;
    *deadline += behind * period;
    Some(behind)
}

/// Run cycles until stopped, the duration ends, or the segment needs recovery.
pub fn run(
    x: &mut Exchanger,
    md: &MainDevice<'static>,
    group: &OpGroup,
    app: &mut dyn Application,
    rec: &mut Recorder,
    sinks: &mut Sinks<'_>,
    p: Params,
) -> Exit {
    let period = p.period_ns;
    // First deadline one period from now; all later ones on the same grid.
    let mut deadline = now_ns() + period;
    let mut bad_run: u32 = 0;
    let mut wkc_was_ok = true;
    loop {
        sleep_until(deadline);
        let wake = now_ns();
        let lateness = wake.saturating_sub(deadline);
        if (sinks.stop)() {
            return Exit::Stopped;
        }
        if p.end_ns.is_some_and(|e| wake >= e) {
            return Exit::DurationReached;
        }
        let cycle = rec.cycles;
        x.counters().start_cycle();
        let result = exchange(x, md, group, wake + p.response_timeout_ns);
        let rtt = x.counters().cycle_rtt_ns();

        let mut bad = false;
        let mut wkc = 0u16;
        match &result {
            Ok(resp) => {
                wkc = resp.working_counter;
                if wkc != p.expected_wkc {
                    rec.wkc_mismatches += 1;
                    bad = true;
                    if wkc_was_ok {
                        push_event(
                            sinks.events,
                            cycle,
                            EventKind::WkcMismatch {
                                got: wkc,
                                expected: p.expected_wkc,
                            },
                        );
                    }
                    wkc_was_ok = false;
                } else if !wkc_was_ok {
                    wkc_was_ok = true;
                    push_event(sinks.events, cycle, EventKind::WkcRestored);
                }
                let mut all_op = true;
                for (i, s) in resp.subdevice_states.iter().enumerate() {
                    let code = state_code(*s);
                    all_op &= code == 8;
                    if sinks.states[i] != code {
                        sinks.states[i] = code;
                        push_event(
                            sinks.events,
                            cycle,
                            EventKind::StateChange {
                                position: i as u16,
                                state: code,
                            },
                        );
                    }
                }
                if !all_op {
                    rec.not_op_cycles += 1;
                    bad = true;
                }
            }
            Err(()) => {
                rec.frames_lost += 1;
                bad = true;
                push_event(sinks.events, cycle, EventKind::FrameLost);
            }
        }

        // The application sees this cycle's inputs and writes the next outputs -- only after a
        // complete exchange: with a wrong WKC some inputs are stale, and the outputs of the last
        // good cycle stay in place.
        if !bad {
            for (i, sd) in group.iter(md).enumerate() {
                let mut io = sd.io_raw_mut();
                let n = io.inputs().len().min(sinks.scratch.len());
                sinks.scratch[..n].copy_from_slice(&io.inputs()[..n]);
                if !app.cycle(cycle, i, &sinks.scratch[..n], io.outputs()) {
                    rec.data_errors += 1;
                    push_event(
                        sinks.events,
                        cycle,
                        EventKind::DataMismatch { position: i as u16 },
                    );
                }
            }
        }

        let end = now_ns();
        let exec = end - wake;
        rec.record(lateness, exec, rtt);
        if let Some(s) = sinks.samples.as_deref_mut() {
            let _ = s.push(Sample {
                cycle,
                wake_ns: lateness,
                exec_ns: exec,
                rtt_ns: rtt.unwrap_or(0),
                wkc,
            });
        }
        bad_run = if bad { bad_run + 1 } else { 0 };
        sinks.live.publish(rec, lateness, exec, !bad);
        x.counters().publish(sinks.live);

        if let Some(behind) = advance(&mut deadline, period, end, rec) {
            push_event(
                sinks.events,
                cycle,
                EventKind::MissedDeadline { skipped: behind },
            );
        }
        if bad_run >= p.bad_cycles_before_recovery {
            return Exit::Recover {
                bad_cycles: bad_run,
            };
        }
    }
}

/// The timer-only loop (no bus): comparable with cyclictest at the same period.
pub fn run_timer_only(
    rec: &mut Recorder,
    live: &Live,
    period: u64,
    end_ns: Option<u64>,
    stop: &dyn Fn() -> bool,
) -> Exit {
    let mut deadline = now_ns() + period;
    loop {
        sleep_until(deadline);
        let wake = now_ns();
        let lateness = wake.saturating_sub(deadline);
        if stop() {
            return Exit::Stopped;
        }
        if end_ns.is_some_and(|e| wake >= e) {
            return Exit::DurationReached;
        }
        let end = now_ns();
        rec.record(lateness, end - wake, None);
        live.publish(rec, lateness, end - wake, true);
        advance(&mut deadline, period, end, rec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_up_keeps_the_grid_and_counts_skips() {
        let mut rec = Recorder::new();
        let mut d = 1_000;
        // On time: next deadline one period later.
        assert_eq!(advance(&mut d, 1_000, 1_500, &mut rec), None);
        assert_eq!(d, 2_000);
        // Ended at 4_200, after the deadlines 3_000 and 4_000: next is 5_000, two skipped.
        assert_eq!(advance(&mut d, 1_000, 4_200, &mut rec), Some(2));
        assert_eq!(d, 5_000);
        assert_eq!((rec.missed_deadlines, rec.skipped_periods), (1, 2));
        // Ending exactly on the next deadline is not a miss.
        assert_eq!(advance(&mut d, 1_000, 6_000, &mut rec), None);
    }
}
