//! The cyclic loop: wake on absolute deadlines, exchange process data, measure, check health.
//!
//! Catch-up policy: when a cycle ends after the next deadline, that deadline is missed (counted
//! once) and the loop skips to the first deadline still in the future, counting every period it
//! skipped; the grid of deadlines (start + k x period) is never shifted, so the phase is kept.
//! Nothing here allocates, locks across I/O, or prints: events and samples go into lock-free
//! rings drained by the status thread.
//!
//! One loop serves both kinds of groups ([`CycleGroup`]): without distributed clocks the cycle
//! is ethercrab's `tx_rx`; with them it is `tx_rx_dc` (the reference clock's system time is
//! read and distributed by an FRMW in the cycle's first frame), and the DC time of that frame
//! feeds [`crate::dc::PhaseLock`], whose correction moves the next absolute deadline: the grid is
//! then the DC grid seen through CLOCK_MONOTONIC, not CLOCK_MONOTONIC's own.

use crate::acyclic::{self, SdoService};
use crate::application::{Application, Cycle, CycleStatus, RecoveryCause, SubdeviceStatus};
use crate::bus::{Bus, BusCounters};
use crate::clock::{now_ns, sleep_until, unix_ns};
use crate::image::ProcessImage;
use crate::layout::Layout;
use crate::limits::{MAX_PDI_BYTES, MAX_SUBDEVICES};
use crate::period::Period;
use crate::stats::{Event, EventKind, Live, Recorder, Sample};
use crate::stop::Stop;
use ethercrab::subdevice_group::{CycleInfo, HasDc, NoDc, Op, TxRxResponse};
use ethercrab::{DefaultLock, MainDevice, SubDeviceGroup, SubDeviceState};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// The segment in OP, as ethercrab holds it, with (`HasDc`) or without (`NoDc`) distributed
/// clocks.
pub type Group<DC> = SubDeviceGroup<MAX_SUBDEVICES, MAX_PDI_BYTES, DefaultLock, Op, DC>;
/// The segment in OP without distributed clocks.
pub type OpGroup = Group<NoDc>;
/// The segment in OP with SYNC0 configured (`configure_dc_sync`).
pub type DcGroup = Group<HasDc>;

/// "Exchange this cycle's process data" for both kinds of OP groups.
pub trait CycleGroup {
    /// What the response carries besides the WKC and the states.
    type Extra;
    /// Send the process image and the state checks; with DC also the FRMW of the system time.
    fn exchange_once<'a>(
        &'a self,
        md: &'a MainDevice<'static>,
    ) -> impl Future<
        Output = Result<TxRxResponse<MAX_SUBDEVICES, Self::Extra>, ethercrab::error::Error>,
    > + 'a;
    /// The DC system time of the reference clock when the frame passed it (DC groups only).
    fn dc_time(extra: &Self::Extra) -> Option<u64>;
}

impl CycleGroup for OpGroup {
    type Extra = ();
    fn exchange_once<'a>(
        &'a self,
        md: &'a MainDevice<'static>,
    ) -> impl Future<Output = Result<TxRxResponse<MAX_SUBDEVICES>, ethercrab::error::Error>> + 'a
    {
        self.tx_rx(md)
    }
    fn dc_time(_: &()) -> Option<u64> {
        None
    }
}

impl CycleGroup for DcGroup {
    type Extra = CycleInfo;
    fn exchange_once<'a>(
        &'a self,
        md: &'a MainDevice<'static>,
    ) -> impl Future<
        Output = Result<TxRxResponse<MAX_SUBDEVICES, CycleInfo>, ethercrab::error::Error>,
    > + 'a {
        // ethercrab 0.7.1 `tx_rx_dc`: the FRMW of 0x0910 at the reference's configured address
        // is the first PDU of the cycle's first frame; `dc_system_time` is what it read there.
        self.tx_rx_dc(md)
    }
    fn dc_time(extra: &CycleInfo) -> Option<u64> {
        Some(extra.dc_system_time)
    }
}

/// Why the cyclic loop returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// SIGINT/SIGTERM (or a stop request).
    Stopped,
    /// The requested duration elapsed.
    DurationReached,
    /// Too many consecutive bad cycles: the segment must be re-initialised.
    Recover {
        /// Consecutive bad cycles.
        bad_cycles: u32,
        /// What the last one saw.
        cause: RecoveryCause,
    },
}

/// Fixed parameters of one cyclic phase.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Cycle period.
    pub period: Period,
    /// How long an exchange waits for its frames.
    pub response_timeout_ns: u64,
    /// Expected working counter.
    pub expected_wkc: u16,
    /// Consecutive bad cycles that start a recovery.
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
        /// The bus counters (the bus is on the TX/RX thread).
        counters: Arc<BusCounters>,
        /// Wakes this thread when a frame came back.
        waker: Waker,
        /// The TX/RX thread's passes: one more is asked for before a frame is declared lost.
        passes: crate::bus::TxRxPasses,
    },
}

impl Exchanger {
    fn counters(&self) -> &BusCounters {
        match self {
            Exchanger::Inline(bus) => &bus.counters,
            Exchanger::Thread { counters, .. } => counters,
        }
    }

    /// Let `service` use the bus until `until` (monotonic ns) or until it has nothing in flight.
    fn serve_sdo<F: std::future::Future<Output = ()>>(
        &mut self,
        service: std::pin::Pin<&mut F>,
        busy: &acyclic::Busy,
        until: u64,
    ) {
        match self {
            Exchanger::Inline(bus) => {
                let mut cx = Context::from_waker(Waker::noop());
                acyclic::drive(service, busy, &mut cx, || {
                    bus.pump_tx();
                    if bus.pump_rx() > 0 {
                        return true;
                    }
                    let now = now_ns();
                    if now >= until {
                        return false;
                    }
                    let _ = bus
                        .link
                        .wait(std::time::Duration::from_nanos(until - now), None);
                    true
                });
            }
            Exchanger::Thread { waker, .. } => {
                let mut cx = Context::from_waker(waker);
                acyclic::drive(service, busy, &mut cx, || {
                    let now = now_ns();
                    if now >= until {
                        return false;
                    }
                    std::thread::park_timeout(std::time::Duration::from_nanos(until - now));
                    true
                });
            }
        }
    }
}

/// How long, after the response timeout, the cyclic thread waits for the TX/RX thread's pass
/// that reads the link once more (on an idle core it takes tens of µs; the bound is for a TX/RX
/// thread that does not get to run at all).
const TXRX_GRACE_NS: u64 = 1_000_000;
/// How often the cyclic thread looks whether that pass has finished (a pass without an answer
/// wakes nobody).
const TXRX_POLL_NS: u64 = 20_000;

/// One exchange: Ok(response), or Err(()) when nothing came back within the response timeout
/// (and, with a TX/RX thread, nothing in its next look at the link either).
fn exchange<G: CycleGroup>(
    x: &mut Exchanger,
    md: &MainDevice<'static>,
    group: &G,
    deadline_ns: u64,
) -> Result<TxRxResponse<MAX_SUBDEVICES, G::Extra>, ()> {
    let mut fut = pin!(group.exchange_once(md));
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
        Exchanger::Thread { waker, passes, .. } => {
            let mut cx = Context::from_waker(waker);
            // After the timeout: the mark of the pass asked for, and how long it may take.
            let mut overdue: Option<(u64, u64)> = None;
            loop {
                // Read before the poll: a pass seen finished has delivered what it read.
                let passed = overdue.is_some_and(|(mark, _)| passes.passed_since(mark));
                if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                    return r.map_err(drop);
                }
                let now = now_ns();
                let until = match overdue {
                    None if now < deadline_ns => deadline_ns,
                    None => {
                        let end = now + TXRX_GRACE_NS;
                        overdue = Some((passes.request(), end));
                        end
                    }
                    Some((_, end)) if passed || now >= end => return Err(()),
                    Some((_, end)) => end,
                };
                let step = if overdue.is_some() {
                    TXRX_POLL_NS
                } else {
                    u64::MAX
                };
                std::thread::park_timeout(std::time::Duration::from_nanos((until - now).min(step)));
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
    /// Live counters for the status thread.
    pub live: &'a Live,
    /// Health events.
    pub events: &'a mut rtrb::Producer<Event>,
    /// Per-cycle samples.
    pub samples: Option<&'a mut rtrb::Producer<Sample>>,
    /// Stop request.
    pub stop: &'a Stop,
    /// SDO requests of other threads, served after each cycle's own work.
    pub sdo: Option<&'a mut SdoService>,
}

/// What the cycle keeps between cycles of one bring-up, allocated before the loop starts.
pub struct State {
    image: ProcessImage,
    status: Vec<SubdeviceStatus>,
    /// Each subdevice's share of the expected working counter (inputs, outputs).
    shares: Vec<(u32, u32)>,
    /// The phase lock of a DC group (None: no distributed clocks).
    lock: Option<crate::dc::PhaseLock>,
}

impl State {
    /// State for a segment with `layout`.
    pub fn new(layout: &Layout, shares: &[(u32, u32)]) -> Self {
        State {
            image: ProcessImage::for_layout(layout),
            status: vec![SubdeviceStatus::default(); layout.subdevices.len()],
            shares: shares.to_vec(),
            lock: None,
        }
    }

    /// Lock the deadlines of a DC group with `lock` (reset: a new bring-up has a new grid).
    pub fn with_lock(mut self, mut lock: crate::dc::PhaseLock) -> Self {
        lock.reset();
        self.lock = Some(lock);
        self
    }
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
#[allow(clippy::too_many_arguments)]
pub fn run<DC>(
    x: &mut Exchanger,
    md: &MainDevice<'static>,
    group: &Group<DC>,
    app: &mut dyn Application,
    rec: &mut Recorder,
    sinks: &mut Sinks<'_>,
    st: &mut State,
    p: Params,
) -> Exit
where
    Group<DC>: CycleGroup,
{
    let period = p.period.as_nanos();
    // First deadline one period from now; all later ones on the same grid.
    let mut deadline = now_ns() + period;
    let mut bad_run: u32 = 0;
    let mut wkc_was_ok = true;
    let mut cause = RecoveryCause::FramesLost;
    // SDO requests of other threads: one long-lived future, polled only in the budget after a
    // cycle's own work (see `acyclic`).
    let busy = acyclic::Busy::new();
    let budget_ns = sinks
        .sdo
        .as_ref()
        .map_or(0, |s| s.budget().as_nanos() as u64);
    let service = sinks
        .sdo
        .take()
        .map(|s| acyclic::serve(s, md, group, &busy));
    let mut service = pin!(service);
    loop {
        sleep_until(deadline);
        let wake = now_ns();
        let lateness = wake.saturating_sub(deadline);
        if sinks.stop.is_requested() {
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
        let lost = result.is_err();
        // The phase lock: where this cycle's frame passed the reference clock against the SYNC0
        // grid, and the correction of the next deadline (no allocation, no system call).
        let mut correction = 0i64;
        let mut phase_error = 0i64;
        let dc_time = result
            .as_ref()
            .ok()
            .and_then(|r| <Group<DC> as CycleGroup>::dc_time(&r.extra));
        if let (Some(dc_time), Some(lock)) = (dc_time, st.lock.as_mut()) {
            let before = lock.state();
            // The send delay: deadline to the first frame handed to the link (stamped by the
            // bus; 0 only if nothing was sent, and then there is no DC time either).
            let sent = x
                .counters()
                .first_tx_ns
                .load(std::sync::atomic::Ordering::Relaxed);
            correction = lock.update(dc_time, sent.saturating_sub(deadline));
            phase_error = lock.last_error_ns();
            rec.record_phase(phase_error);
            sinks.live.dc.publish(lock);
            if lock.state() != before {
                push_event(
                    sinks.events,
                    cycle,
                    EventKind::DcLock {
                        state: lock.state(),
                        error_ns: phase_error,
                    },
                );
            }
        }
        match &result {
            Ok(resp) => {
                wkc = resp.working_counter;
                let mut missing_share = 0u32;
                let mut first_not_op = None;
                for (i, s) in resp.subdevice_states.iter().enumerate() {
                    let code = state_code(*s);
                    if let Some(st) = st.status.get_mut(i) {
                        if st.al_state != code {
                            push_event(
                                sinks.events,
                                cycle,
                                EventKind::StateChange {
                                    position: i as u16,
                                    state: code,
                                },
                            );
                        }
                        st.al_state = code;
                    }
                    if code != 8 {
                        // In SAFE-OP a subdevice still has its inputs read (the ETG.1000.6 AL
                        // states: inputs valid in SAFE-OP, outputs only in OP; ecsim does the
                        // same); below SAFE-OP its process data FMMUs do nothing.
                        let (ins, outs) = st.shares.get(i).copied().unwrap_or((0, 0));
                        missing_share += if code & 0x0f == 4 { outs } else { ins + outs };
                        first_not_op.get_or_insert((i as u16, code));
                    }
                }
                // A wrong WKC fully explained by the subdevices not in OP leaves the others'
                // data valid; any other mismatch makes every subdevice's data suspect (ethercrab
                // returns one sum for all the LRW frames of the cycle).
                let explained = wkc == p.expected_wkc
                    || u32::from(wkc) + missing_share == u32::from(p.expected_wkc);
                for s in st.status.iter_mut() {
                    s.data_valid = explained && s.al_state == 8;
                }
                if wkc != p.expected_wkc {
                    rec.wkc_mismatches += 1;
                    bad = true;
                    cause = RecoveryCause::WkcMismatch {
                        got: wkc,
                        expected: p.expected_wkc,
                    };
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
                if let Some((position, state)) = first_not_op {
                    rec.not_op_cycles += 1;
                    bad = true;
                    cause = RecoveryCause::NotOp { position, state };
                }
            }
            Err(()) => {
                rec.frames_lost += 1;
                bad = true;
                cause = RecoveryCause::FramesLost;
                for s in st.status.iter_mut() {
                    s.data_valid = false;
                }
                push_event(sinks.events, cycle, EventKind::FrameLost);
            }
        }

        // The application sees this cycle's inputs (those that came back) and writes the next
        // outputs, on bad cycles too: it decides what a bad cycle means for the machine.
        if !lost {
            for (i, sd) in group.iter(md).enumerate() {
                let io = sd.io_raw();
                let dst = st.image.inputs_of_mut(i);
                let n = dst.len().min(io.inputs().len());
                dst[..n].copy_from_slice(&io.inputs()[..n]);
            }
        }
        let mut data_errors = 0u32;
        let mut first_error = None;
        {
            let status = CycleStatus {
                cycle,
                deadline_ns: deadline,
                wake_ns: wake,
                expected_wkc: p.expected_wkc,
                wkc,
                frames_lost: lost,
                subdevices: &st.status,
            };
            app.cycle(&mut Cycle {
                status: &status,
                image: &mut st.image,
                data_errors: &mut data_errors,
                first_error: &mut first_error,
                events: &mut *sinks.events,
            });
        }
        for (i, sd) in group.iter(md).enumerate() {
            let mut io = sd.io_raw_mut();
            let src = st.image.outputs_of(i);
            let out = io.outputs();
            let n = out.len().min(src.len());
            out[..n].copy_from_slice(&src[..n]);
        }
        if data_errors > 0 {
            rec.data_errors += u64::from(data_errors);
            push_event(
                sinks.events,
                cycle,
                EventKind::DataMismatch {
                    position: first_error.unwrap_or(0),
                },
            );
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
                phase_error_ns: phase_error,
            });
        }
        bad_run = if bad { bad_run + 1 } else { 0 };
        sinks.live.publish(rec, lateness, exec, !bad);
        x.counters().publish(sinks.live);

        // SDO traffic: after everything the cycle measures, never past half the time left to
        // the next deadline, so the next cyclic frame leaves on time.
        if let Some(svc) = service.as_mut().as_pin_mut() {
            let next = deadline + period;
            let now = now_ns();
            let until = (now + budget_ns).min(now + next.saturating_sub(now) / 2);
            if until > now {
                x.serve_sdo(svc, &busy, until);
            }
        }

        // The lock's correction moves the grid itself (the next and all later deadlines).
        deadline = deadline.saturating_add_signed(correction);
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
                cause,
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
    stop: &Stop,
) -> Exit {
    let mut deadline = now_ns() + period;
    loop {
        sleep_until(deadline);
        let wake = now_ns();
        let lateness = wake.saturating_sub(deadline);
        if stop.is_requested() {
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
