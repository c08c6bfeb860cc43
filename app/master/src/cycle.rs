//! The cyclic loop: wake on absolute deadlines, exchange process data, measure, check health.
//!
//! Catch-up policy: when a cycle ends after the next deadline, that deadline is missed (counted
//! once) and the loop skips to the first deadline still in the future, counting every period it
//! skipped; the grid of deadlines (start + k x period) is never shifted, so the phase is kept.
//! Nothing here allocates, locks across I/O, or prints: events and samples go into lock-free
//! rings drained by the status thread.
//!
//! The cycle's frames are rtcat's own (`own_cycle`: what ethercrab's `tx_rx` and
//! `tx_rx_dc` send, all of a cycle's frames at once). With distributed clocks the reference
//! clock's system time is read and distributed by an FRMW in the cycle's first frame, and the
//! DC time of that frame feeds [`crate::phase_lock::PhaseLock`], whose correction moves the
//! next absolute deadline: the grid is then the DC grid seen through CLOCK_MONOTONIC, not
//! CLOCK_MONOTONIC's own.

use crate::acyclic::{self, SdoService};
use crate::al_state;
use crate::application::{Application, Cycle, CycleStatus};
use crate::bus::{Bus, BusCounters};
use crate::clock::{now_ns, sleep_until, unix_ns};
use crate::health::{RecoveryCause, SubdeviceStatus};
use crate::image::ProcessImage;
use crate::layout::Layout;
use crate::own_cycle::{OwnCycle, Reply};
use crate::period::Period;
use crate::stats::{Event, EventKind, Live, Recorder, Sample};
use crate::stop::Stop;
use crate::subdevice_recovery::{Board, Report};
use ethercrab::MainDevice;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

pub use crate::health::{Verdict, judge};

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

    /// Move other threads' frames (the per-subdevice recovery's) until `until`: the cyclic
    /// thread is the only one that pumps an inline bus. Nothing to do with a TX/RX thread.
    fn pump_until(&mut self, until: u64) {
        if let Exchanger::Inline(bus) = self {
            bus.pump_others_until(until);
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

/// What one exchange brought: the cycle's frames' reply (Err: lost) and the region's.
type Exchanged<L> = (Result<Reply, ()>, Option<L>);

/// One exchange: Ok(reply), or Err(()) when nothing came back within the response timeout
/// (and, with a TX/RX thread, nothing in its next look at the link either); with it what
/// `late` (rtcat's own region, [`crate::region`]) brought, None if it was not done in time.
fn exchange<L: Future>(
    x: &mut Exchanger,
    frames: &mut OwnCycle,
    late: Option<L>,
    deadline_ns: u64,
) -> Exchanged<L::Output> {
    let mut fut = pin!(frames.exchange());
    let mut late = pin!(late);
    let mut got = None;
    let mut late_got = None;
    // Poll what is not done yet; true when both are.
    let mut poll = |cx: &mut Context<'_>| {
        if got.is_none()
            && let Poll::Ready(r) = fut.as_mut().poll(cx)
        {
            got = Some(r);
        }
        if let Some(l) = late.as_mut().as_pin_mut()
            && let Poll::Ready(v) = l.poll(cx)
        {
            late_got = Some(v);
            late.set(None);
        }
        got.is_some() && late.is_none()
    };
    match x {
        Exchanger::Inline(bus) => {
            let mut cx = Context::from_waker(Waker::noop());
            loop {
                if poll(&mut cx) {
                    break;
                }
                bus.pump_tx();
                if bus.pump_rx() > 0 {
                    continue;
                }
                let now = now_ns();
                if now >= deadline_ns {
                    // Dropping the futures releases their frames; a late response is then
                    // rejected by ethercrab and counted by the bus.
                    break;
                }
                // As `[cycle] wait` says: sleep, poll, or the hybrid of the two.
                bus.wait_reply(deadline_ns);
            }
            let r = got.unwrap_or(Err(()));
            bus.exchange_end(r.is_ok());
            (r, late_got)
        }
        Exchanger::Thread { waker, passes, .. } => {
            let mut cx = Context::from_waker(waker);
            // After the timeout: the mark of the pass asked for, and how long it may take.
            let mut overdue: Option<(u64, u64)> = None;
            loop {
                // Read before the poll: a pass seen finished has delivered what it read.
                let passed = overdue.is_some_and(|(mark, _)| passes.passed_since(mark));
                if poll(&mut cx) {
                    break;
                }
                let now = now_ns();
                let until = match overdue {
                    None if now < deadline_ns => deadline_ns,
                    None => {
                        let end = now + TXRX_GRACE_NS;
                        overdue = Some((passes.request(), end));
                        end
                    }
                    Some((_, end)) if passed || now >= end => break,
                    Some((_, end)) => end,
                };
                let step = if overdue.is_some() {
                    TXRX_POLL_NS
                } else {
                    u64::MAX
                };
                std::thread::park_timeout(std::time::Duration::from_nanos((until - now).min(step)));
            }
            (got.unwrap_or(Err(())), late_got)
        }
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
    lock: Option<crate::phase_lock::PhaseLock>,
    /// Per subdevice: what the cycle knows of its own recovery.
    watch: Vec<Watch>,
    /// Subdevices handed to the recovery worker and not yet back in service.
    outstanding: u32,
    /// rtcat's own region: the members of optional groups absent at bring-up.
    region: crate::region::Region,
    /// The cycle's frames: the process data and AL states of ethercrab's group.
    frames: OwnCycle,
}

/// The cycle's side of one subdevice's recovery: when it was lost, what was reported.
#[derive(Debug, Clone, Copy, Default)]
struct Watch {
    lost_ns: u64,
    /// The last report passed on (phase and failures), so each is passed on once.
    reported: Option<Report>,
    /// Cycles the worker said "back" while the cycle still read it out of OP.
    back_unconfirmed: u32,
    /// Counted in `State::outstanding`.
    counted: bool,
}

/// Cycles a subdevice the worker brought back may still read out of OP (the state check of a
/// frame already under way) before it counts as lost again.
const BACK_CONFIRM_CYCLES: u32 = 100;

impl State {
    /// State for a segment with `layout`.
    pub fn new(layout: &Layout, shares: &[(u32, u32)]) -> Self {
        State {
            image: ProcessImage::for_layout(layout),
            status: vec![SubdeviceStatus::default(); layout.subdevices.len()],
            shares: shares.to_vec(),
            lock: None,
            watch: vec![Watch::default(); layout.subdevices.len()],
            outstanding: 0,
            region: crate::region::Region::default(),
            frames: OwnCycle::default(),
        }
    }

    /// The cycle's frames ([`crate::own_cycle`]): the process data and AL states of the
    /// subdevices the bring-up put in OP (its group), with DC the reference's system time.
    pub(crate) fn with_frames(mut self, frames: OwnCycle) -> Self {
        self.frames = frames;
        self
    }

    /// Exchange the data of the members absent at bring-up (`members`, [`crate::region`]) in
    /// rtcat's own region. They start out of service with their recovery (which waits for them
    /// to appear), so the cycle looks at the board from the first cycle on.
    pub(crate) fn with_region(
        mut self,
        members: &[crate::region::Member],
        own: Arc<crate::own_frames::OwnFrames>,
    ) -> Self {
        self.region = crate::region::Region::new(members, own);
        for m in members {
            if let Some(w) = self.watch.get_mut(m.index) {
                *w = Watch {
                    lost_ns: now_ns(),
                    counted: true,
                    ..Watch::default()
                };
                self.outstanding += 1;
            }
        }
        self
    }

    /// Lock the deadlines of a DC group with `lock` (reset: a new bring-up has a new grid).
    pub fn with_lock(mut self, mut lock: crate::phase_lock::PhaseLock) -> Self {
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

/// Everything one cyclic phase works on besides the bus and the group.
pub struct Phase<'a, 's> {
    /// The application.
    pub app: &'a mut dyn Application,
    /// The measurements.
    pub rec: &'a mut Recorder,
    /// Live counters, events, samples, stop, SDO requests.
    pub sinks: &'a mut Sinks<'s>,
    /// What the cycle keeps between cycles (image, states, phase lock).
    pub st: &'a mut State,
    /// The fixed parameters.
    pub p: Params,
    /// Per-subdevice recovery (`[health] recovery = "subdevice"`); None: a subdevice out of OP
    /// counts towards a whole-segment recovery.
    pub board: Option<&'a Board>,
}

/// The health of the run across cycles: consecutive bad cycles, the working counter's last
/// verdict (events are pushed on its changes only) and the last cause.
struct Health {
    bad_run: u32,
    wkc_was_ok: bool,
    cause: RecoveryCause,
}

impl Health {
    /// Count an answered cycle's verdict; push the events of its changes. With `local`
    /// recovery a subdevice out of OP is its own recovery's business: only a working counter
    /// it does not explain makes the cycle bad for the segment.
    fn answered(
        &mut self,
        v: Verdict,
        wkc: u16,
        expected: u16,
        local: bool,
        cx: &mut Step<'_, '_>,
    ) -> bool {
        if !v.wkc_ok {
            cx.rec.wkc_mismatches += 1;
            if self.wkc_was_ok {
                push_event(
                    cx.events,
                    cx.cycle,
                    EventKind::WkcMismatch { got: wkc, expected },
                );
            }
        } else if !self.wkc_was_ok {
            push_event(cx.events, cx.cycle, EventKind::WkcRestored);
        }
        self.wkc_was_ok = v.wkc_ok;
        if v.first_not_op.is_some() {
            cx.rec.not_op_cycles += 1;
        }
        if let Some(c) = v.cause(wkc, expected) {
            self.cause = c;
        }
        if local { !v.explained } else { v.is_bad() }
    }

    /// Count a cycle whose frames did not come back.
    fn lost(&mut self, cx: &mut Step<'_, '_>) -> bool {
        cx.rec.frames_lost += 1;
        self.cause = RecoveryCause::FramesLost;
        push_event(cx.events, cx.cycle, EventKind::FrameLost);
        true
    }

    /// Count the cycle: a recovery when the run of bad cycles is long enough.
    fn end_of_cycle(&mut self, bad: bool, limit: u32) -> Option<Exit> {
        self.bad_run = if bad { self.bad_run + 1 } else { 0 };
        (self.bad_run >= limit).then_some(Exit::Recover {
            bad_cycles: self.bad_run,
            cause: self.cause,
        })
    }
}

/// What a step of one cycle records into.
struct Step<'r, 'e> {
    cycle: u64,
    rec: &'r mut Recorder,
    events: &'e mut rtrb::Producer<Event>,
}

/// This cycle's AL states, (position, state code), into `status`, an event for each change:
/// ethercrab's response has its group's, the region's answers those of the members absent at
/// bring-up.
fn record_states(
    states: impl Iterator<Item = (usize, u8)>,
    status: &mut [SubdeviceStatus],
    events: &mut rtrb::Producer<Event>,
    cycle: u64,
) {
    for (i, code) in states {
        let Some(st) = status.get_mut(i) else {
            continue;
        };
        if st.al_state != code {
            push_event(
                events,
                cycle,
                EventKind::StateChange {
                    position: i as u16,
                    state: code,
                },
            );
        }
        st.al_state = code;
    }
}

/// The phase lock's step: where this cycle's frame passed the reference clock against the
/// SYNC0 grid, and the correction of the next deadline (no allocation, no system call).
/// Returns (correction, phase error) in ns.
fn lock_phase(
    lock: &mut crate::phase_lock::PhaseLock,
    dc_time: u64,
    sent_ns: u64,
    deadline: u64,
    cx: &mut Step<'_, '_>,
    live: &Live,
) -> (i64, i64) {
    let before = lock.state();
    let correction = lock.update(dc_time, sent_ns.saturating_sub(deadline));
    let phase_error = lock.last_error_ns();
    cx.rec.record_phase(phase_error);
    live.dc.publish(lock);
    if lock.state() != before {
        push_event(
            cx.events,
            cx.cycle,
            EventKind::DcLock {
                state: lock.state(),
                error_ns: phase_error,
            },
        );
    }
    (correction, phase_error)
}

/// The per-subdevice recovery's step of the cycle: hand every subdevice newly seen out of OP to
/// the worker, and pass on what the worker reported (back, failed, refused, gave up) to the
/// application and the events. Looks at the board only while a recovery is outstanding.
fn local_recovery(
    board: &Board,
    st: &mut State,
    app: &mut dyn Application,
    cx: &mut Step<'_, '_>,
    now: u64,
) {
    use crate::application::{SubdeviceChange, SubdeviceEvent};
    let tell = |app: &mut dyn Application, cx: &mut Step<'_, '_>, i: usize, change| {
        let position = i as u16;
        app.on_subdevice(&SubdeviceEvent {
            position,
            change,
            cycle: cx.cycle,
        });
        push_event(
            cx.events,
            cx.cycle,
            EventKind::Subdevice { position, change },
        );
    };
    for i in 0..st.status.len() {
        let state = st.status[i].al_state;
        if state != al_state::OP && board.request(i) {
            st.watch[i] = Watch {
                lost_ns: now,
                counted: true,
                ..Watch::default()
            };
            st.outstanding += 1;
            tell(app, cx, i, SubdeviceChange::Lost { state });
        }
    }
    // Devices plugged in where the configuration has none (the worker's count): an event.
    if let Some((devices, first)) = board.unexpected_news() {
        cx.rec.unexpected.found(devices, first);
        push_event(
            cx.events,
            cx.cycle,
            EventKind::UnexpectedDevices { devices, first },
        );
    }
    // A firmware update took one out of its recovery's hands (the acyclic service asked, after
    // the last cycle): the application hears it before the device leaves OP.
    if board.park_news() {
        for i in 0..st.status.len() {
            if !board.take_park(i) {
                continue;
            }
            let w = &mut st.watch[i];
            if w.counted {
                // Out already (being retried): the outage goes on.
                w.reported = None;
                w.back_unconfirmed = 0;
            } else {
                *w = Watch {
                    lost_ns: now,
                    counted: true,
                    ..Watch::default()
                };
                st.outstanding += 1;
            }
            let cause = crate::application::SubdeviceCause::FirmwareUpdate;
            tell(app, cx, i, SubdeviceChange::Parked { cause });
        }
    }
    if st.outstanding == 0 {
        return;
    }
    for i in 0..st.status.len() {
        // Parked: its data is not the application's whatever state it is in.
        if board.parked(i) {
            st.status[i].data_valid = false;
            continue;
        }
        // An optional member plugged back keeps its state (OP) until its recovery has been
        // through it: its data is not the application's before that.
        if board.held_out(i) {
            st.status[i].data_valid = false;
        }
        let Some(report) = board.report(i) else {
            continue;
        };
        let w = &mut st.watch[i];
        if let Report::Back {
            cause,
            attempts,
            sync_error_limit,
        } = report
        {
            if st.status[i].al_state == al_state::OP {
                board.back_in_service(i);
                st.outstanding = st.outstanding.saturating_sub(1);
                w.counted = false;
                let outage_ns = now.saturating_sub(w.lost_ns);
                tell(
                    app,
                    cx,
                    i,
                    SubdeviceChange::Back {
                        cause,
                        outage_ns,
                        attempts,
                        sync_error_limit,
                    },
                );
            } else {
                w.back_unconfirmed += 1;
                if w.back_unconfirmed > BACK_CONFIRM_CYCLES {
                    // Out of OP again: in service, so the next cycle hands it over anew.
                    board.back_in_service(i);
                    st.outstanding = st.outstanding.saturating_sub(1);
                    w.counted = false;
                }
            }
            continue;
        }
        if w.reported == Some(report) {
            continue;
        }
        w.reported = Some(report);
        let change = match report {
            Report::Failed { failures } => SubdeviceChange::Failed { attempt: failures },
            Report::Refused {
                found,
                expected,
                alias,
            } => SubdeviceChange::Refused {
                found,
                expected,
                alias,
            },
            Report::GaveUp => SubdeviceChange::GaveUp,
            Report::Absent => SubdeviceChange::Absent,
            Report::Back { .. } => continue,
        };
        tell(app, cx, i, change);
    }
}

/// The application's cycle: it sees this cycle's inputs (those that came back) and writes the
/// next outputs, on bad cycles too (it decides what a bad cycle means for the machine). Its
/// data errors are counted and the first reported.
fn apply(
    app: &mut dyn Application,
    status: &CycleStatus<'_>,
    image: &mut ProcessImage,
    cx: &mut Step<'_, '_>,
) {
    let mut data_errors = 0u32;
    let mut first_error = None;
    app.cycle(&mut Cycle {
        status,
        image,
        data_errors: &mut data_errors,
        first_error: &mut first_error,
        events: &mut *cx.events,
    });
    if data_errors > 0 {
        cx.rec.data_errors += u64::from(data_errors);
        push_event(
            cx.events,
            cx.cycle,
            EventKind::DataMismatch {
                position: first_error.unwrap_or(0),
            },
        );
    }
}

/// The mailbox budget: until `budget_ns` from now, never past half the time left to `next`
/// (the next deadline), so the next cyclic frame leaves on time. None: no time left.
fn mailbox_until(now: u64, budget_ns: u64, next: u64) -> Option<u64> {
    let until = (now + budget_ns).min(now + next.saturating_sub(now) / 2);
    (until > now).then_some(until)
}

/// Run cycles until stopped, the duration ends, or the segment needs recovery. Each cycle is
/// `Cycler::one_cycle`: wait for the deadline, exchange, phase lock (DC), AL states and the
/// health judgement, input copy, application, output copy, measurements, mailbox budget, next
/// deadline.
pub fn run(
    x: &mut Exchanger,
    md: &MainDevice<'static>,
    addresses: &[u16],
    ph: Phase<'_, '_>,
) -> Exit {
    // SDO requests of other threads: one long-lived future, polled only in the budget after a
    // cycle's own work (see `acyclic`).
    let busy = acyclic::Busy::new();
    let budget_ns = ph
        .sinks
        .sdo
        .as_ref()
        .map_or(0, |s| s.budget().as_nanos() as u64);
    let service = ph
        .sinks
        .sdo
        .take()
        .map(|s| acyclic::serve(s, md, addresses, ph.board, &busy));
    let service = pin!(service);
    let period = ph.p.period.as_nanos();
    let mut c = Cycler {
        x,
        ph,
        period,
        // First deadline one period from now; all later ones on the same grid.
        deadline: now_ns() + period,
        health: Health {
            bad_run: 0,
            wkc_was_ok: true,
            cause: RecoveryCause::FramesLost,
        },
        mailbox: MailboxBudget {
            service,
            busy: &busy,
            budget_ns,
        },
    };
    loop {
        if let ControlFlow::Break(exit) = c.one_cycle() {
            return exit;
        }
    }
}

/// The SDO service of other threads and the time it gets after each cycle's own work.
struct MailboxBudget<'b, F> {
    service: Pin<&'b mut Option<F>>,
    busy: &'b acyclic::Busy,
    budget_ns: u64,
}

/// One cyclic phase in progress: what [`run`] was given and what it keeps from one cycle to the
/// next (the deadline, the health across cycles, the mailbox service). Its methods are the
/// cycle's steps.
struct Cycler<'x, 'a, 's, 'b, F> {
    x: &'x mut Exchanger,
    ph: Phase<'a, 's>,
    period: u64,
    deadline: u64,
    health: Health,
    mailbox: MailboxBudget<'b, F>,
}

/// What the exchange step hands to the later steps of the same cycle.
struct Answer {
    /// The reply, or Err when the frames did not come back.
    result: Result<Reply, ()>,
    /// First frame out to last frame in.
    rtt: Option<u64>,
}

impl<F> Cycler<'_, '_, '_, '_, F>
where
    F: Future<Output = ()>,
{
    /// One cycle, its steps in order; Break: the phase ends.
    #[inline]
    fn one_cycle(&mut self) -> ControlFlow<Exit> {
        let (wake, lateness) = self.wait()?;
        let cycle = self.ph.rec.cycles;
        let answer = self.exchange(wake);
        let (correction, phase_error) = self.lock_phase(&answer);
        let (bad, wkc) = self.judge_health(&answer, cycle, wake);
        self.run_application(&answer, cycle, wake, wkc);
        let end = now_ns();
        let sample = Sample {
            cycle,
            wake_ns: lateness,
            exec_ns: end - wake,
            rtt_ns: answer.rtt.unwrap_or(0),
            wkc,
            phase_error_ns: phase_error,
        };
        self.measure(sample, answer.rtt, bad);
        self.serve_mailbox();
        self.next_deadline(cycle, correction, end);
        if let Some(exit) = self
            .health
            .end_of_cycle(bad, self.ph.p.bad_cycles_before_recovery)
        {
            return ControlFlow::Break(exit);
        }
        self.escalation(cycle)
    }

    /// Sleep until the deadline; the wake-up time and its lateness, or the end of the phase
    /// (stop requested, duration reached).
    #[inline]
    fn wait(&mut self) -> ControlFlow<Exit, (u64, u64)> {
        sleep_until(self.deadline);
        let wake = now_ns();
        let lateness = wake.saturating_sub(self.deadline);
        if self.ph.sinks.stop.is_requested() {
            return ControlFlow::Break(Exit::Stopped);
        }
        if self.ph.p.end_ns.is_some_and(|e| wake >= e) {
            return ControlFlow::Break(Exit::DurationReached);
        }
        ControlFlow::Continue((wake, lateness))
    }

    /// The cycle's frames out and back, within the response timeout from the wake-up.
    #[inline]
    fn exchange(&mut self, wake: u64) -> Answer {
        self.x.counters().start_cycle();
        let deadline = wake + self.ph.p.response_timeout_ns;
        let State { region, frames, .. } = &mut *self.ph.st;
        let result = if region.is_empty() {
            exchange(self.x, frames, None::<std::future::Ready<()>>, deadline).0
        } else {
            let (result, late) = exchange(self.x, frames, Some(region.exchange()), deadline);
            region.take(late);
            result
        };
        let rtt = self.x.counters().cycle_rtt_ns();
        Answer { result, rtt }
    }

    /// The phase lock (DC groups with a reply): (correction of the next deadline, phase error).
    #[inline]
    fn lock_phase(&mut self, answer: &Answer) -> (i64, i64) {
        let dc_time = answer.result.as_ref().ok().and_then(|r| r.dc_time);
        match (dc_time, self.ph.st.lock.as_mut()) {
            (Some(dc_time), Some(lock)) => {
                // The send delay: deadline to the first frame handed to the link (stamped by
                // the bus; 0 only if nothing was sent, and then there is no DC time either).
                let sent = self
                    .x
                    .counters()
                    .first_tx_ns
                    .load(std::sync::atomic::Ordering::Relaxed);
                let mut cx = Step {
                    cycle: self.ph.rec.cycles,
                    rec: &mut *self.ph.rec,
                    events: &mut *self.ph.sinks.events,
                };
                lock_phase(
                    lock,
                    dc_time,
                    sent,
                    self.deadline,
                    &mut cx,
                    self.ph.sinks.live,
                )
            }
            _ => (0, 0),
        }
    }

    /// The AL states, the pure [`judge`]ment, each subdevice's data validity, the per-subdevice
    /// recovery's step and the time in OP: (a bad cycle for the segment, the working counter).
    #[inline]
    fn judge_health(&mut self, answer: &Answer, cycle: u64, wake: u64) -> (bool, u16) {
        let Phase {
            app,
            rec,
            sinks,
            st,
            p,
            board,
        } = &mut self.ph;
        let mut cx = Step {
            cycle,
            rec,
            events: &mut *sinks.events,
        };
        let (bad, wkc) = match &answer.result {
            Ok(reply) => {
                let wkc = reply.wkc;
                let group = st.frames.states().iter().copied();
                record_states(group.enumerate(), &mut st.status, cx.events, cycle);
                let region = st.region.answers().map(|(i, a)| (i, a.al_state));
                record_states(region, &mut st.status, cx.events, cycle);
                let v = judge(&st.status, &st.shares, wkc, p.expected_wkc);
                for s in st.status.iter_mut() {
                    s.data_valid = v.explained && s.al_state == al_state::OP;
                }
                // The region's members are judged by their own working counters.
                for (i, a) in st.region.answers() {
                    if let Some(s) = st.status.get_mut(i) {
                        s.data_valid = a.data && s.al_state == al_state::OP;
                    }
                }
                if let Some(b) = board {
                    local_recovery(b, st, &mut **app, &mut cx, wake);
                }
                let bad = self
                    .health
                    .answered(v, wkc, p.expected_wkc, board.is_some(), &mut cx);
                (bad, wkc)
            }
            Err(()) => {
                for s in st.status.iter_mut() {
                    s.data_valid = false;
                }
                st.region.lost();
                (self.health.lost(&mut cx), 0)
            }
        };
        rec.availability
            .cycle(&st.status, wake, &sinks.live.availability);
        (bad, wkc)
    }

    /// Inputs that came back into the application's image, the application, its outputs into
    /// the cycle's frames.
    #[inline]
    fn run_application(&mut self, answer: &Answer, cycle: u64, wake: u64, wkc: u16) {
        let lost = answer.result.is_err();
        let Phase {
            app,
            rec,
            sinks,
            st,
            p,
            ..
        } = &mut self.ph;
        if !lost {
            st.frames.copy_inputs(&mut st.image);
            st.region.copy_inputs(&mut st.image);
        }
        let status = CycleStatus {
            cycle,
            deadline_ns: self.deadline,
            wake_ns: wake,
            expected_wkc: p.expected_wkc,
            wkc,
            frames_lost: lost,
            subdevices: &st.status,
        };
        let mut cx = Step {
            cycle,
            rec,
            events: &mut *sinks.events,
        };
        apply(&mut **app, &status, &mut st.image, &mut cx);
        st.frames.copy_outputs(&st.image);
        st.region.copy_outputs(&st.image);
    }

    /// The cycle's measurements: histograms, the sample, the live counters. `rtt` is the
    /// round trip when one was measured (the sample says 0 otherwise).
    #[inline]
    fn measure(&mut self, sample: Sample, rtt: Option<u64>, bad: bool) {
        let Phase { rec, sinks, .. } = &mut self.ph;
        rec.record(sample.wake_ns, sample.exec_ns, rtt);
        if let Some(s) = sinks.samples.as_deref_mut() {
            let _ = s.push(sample);
        }
        sinks
            .live
            .publish(rec, sample.wake_ns, sample.exec_ns, !bad);
        self.x.counters().publish(sinks.live);
    }

    /// The mailbox budget: SDO traffic after everything the cycle measures, then the
    /// per-subdevice recovery's frames on an inline bus in what is left of the budget.
    #[inline]
    fn serve_mailbox(&mut self) {
        let next = self.deadline + self.period;
        let m = &mut self.mailbox;
        if let Some(svc) = m.service.as_mut().as_pin_mut()
            && let Some(until) = mailbox_until(now_ns(), m.budget_ns, next)
        {
            self.x.serve_sdo(svc, m.busy, until);
        }
        if self.ph.st.outstanding > 0
            && let Some(until) = mailbox_until(now_ns(), self.period / 2, next)
        {
            self.x.pump_until(until);
        }
    }

    /// The next deadline: the lock's correction moves the grid itself (this and all later
    /// ones); a cycle that ended after it skips to the first one still ahead.
    #[inline]
    fn next_deadline(&mut self, cycle: u64, correction: i64, end: u64) {
        self.deadline = self.deadline.saturating_add_signed(correction);
        if let Some(behind) = advance(&mut self.deadline, self.period, end, self.ph.rec) {
            push_event(
                self.ph.sinks.events,
                cycle,
                EventKind::MissedDeadline { skipped: behind },
            );
        }
    }

    /// A subdevice whose own recovery gave up: the whole segment recovers.
    #[inline]
    fn escalation(&mut self, cycle: u64) -> ControlFlow<Exit> {
        let Phase {
            app,
            sinks,
            st,
            board,
            ..
        } = &mut self.ph;
        let Some(position) = board.and_then(Board::escalated) else {
            return ControlFlow::Continue(());
        };
        let i = usize::from(position);
        if st
            .watch
            .get(i)
            .is_some_and(|w| w.reported != Some(Report::GaveUp))
        {
            let change = crate::health::SubdeviceChange::GaveUp;
            app.on_subdevice(&crate::application::SubdeviceEvent {
                position,
                change,
                cycle,
            });
            push_event(
                sinks.events,
                cycle,
                EventKind::Subdevice { position, change },
            );
        }
        ControlFlow::Break(Exit::Recover {
            bad_cycles: self.health.bad_run,
            cause: RecoveryCause::NotOp {
                position,
                state: st.status.get(i).map_or(0, |s| s.al_state),
            },
        })
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

    #[test]
    fn al_states_by_name() {
        assert_eq!(al_state::state(0x14), al_state::SAFE_OP);
        assert_eq!(al_state::state(al_state::OP), al_state::OP);
    }

    #[test]
    fn the_mailbox_budget_leaves_half_the_time_to_the_next_deadline() {
        // Budget shorter than half the time left: the budget.
        assert_eq!(mailbox_until(1_000, 100, 2_000), Some(1_100));
        // Longer: half the time left.
        assert_eq!(mailbox_until(1_000, 10_000, 2_000), Some(1_500));
        // At or past the next deadline: nothing.
        assert_eq!(mailbox_until(2_000, 10_000, 2_000), None);
        assert_eq!(mailbox_until(3_000, 10_000, 2_000), None);
    }
}
