//! Moving ethercrab's frames: a [`Link`] (the trait of `rtcat-packet`, implemented there for the
//! AF_PACKET socket, in `ecsim` for the in-process segment, or by a user through
//! [`LinkFactory`]) and the [`Bus`] that pumps frames between ethercrab's PduTx/PduRx and the
//! link, with rtcat's own frames (several datagrams each, from another source MAC address)
//! beside them.
//!
//! Lost and late frames never stop the bus: a response ethercrab no longer waits for is counted
//! and dropped (the stock ethercrab tasks exit on it, upstream issue #293).
//!
//! Only replies reach ethercrab: every received frame goes through [`classify`] first (on either
//! link), and a frame that is not EtherCAT, was not processed by the segment, comes from another
//! source or has an implausible length is counted by [`RxReject`] reason and dropped; replies
//! to rtcat's own frames ([`Reply::Own`]) go to them.

use ethercrab::{PduRx, PduTx};
use rtcat_packet::{
    DATAGRAM_HEADER_LEN, ECAT_HEADER_LEN, ETH_HEADER_LEN, ETHERCAT_ETHERTYPE, WKC_LEN,
};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Wake, Waker};
use std::time::Duration;

use crate::clock::now_ns;
use crate::wait::{RttLearner, Step, WaitMode};

/// Receive buffer: larger than any plausible reply ([`MAX_REPLY_LEN`]), so that a longer frame
/// (the socket reports at most the buffer's length) is recognised as too long, not cut to fit.
pub const MAX_FRAME: usize = 1536;

/// The source MAC address ethercrab 0.7.1 writes into every frame it sends (its private
/// `MAINDEVICE_ADDR`, `src/lib.rs`, set in `FrameBox::init`; it uses no other on Linux).
pub const MASTER_MAC: [u8; 6] = [0x10; 6];
/// The source MAC address of a reply: the master's with the locally administered bit (bit 1 of
/// the first octet) set by the first subdevice that processed the frame ("The source MAC address
/// is changed for every frame passing the EtherCAT Processing Unit (`SOURCE_MAC[1]` is set to 1)",
/// Beckhoff EtherCAT Slave Controller Technology, Section I, 3 Frame Processing; `ecsim` does the
/// same). Anyone on the wire can still send this address: the check keeps out other traffic and
/// frames that went astray, it is no authentication.
pub const REPLY_MAC: [u8; 6] = {
    let mut m = MASTER_MAC;
    m[0] |= 0x02;
    m
};
/// The source MAC address of rtcat's own frames, the cycle's among them (docs/NOTES.md §17.3,
/// §17.4): [`MASTER_MAC`] with another last octet.
pub use crate::own_frames::OWN_MAC;
/// Ethernet minimum frame without FCS; shorter frames are padded to it on a real wire.
pub const ETH_MIN_FRAME: usize = 60;
/// Frame check sequence, which some NICs pass up with the frame (`ethtool -K IF rx-fcs on`).
pub const FCS_LEN: usize = 4;
/// Longest plausible reply: an untagged Ethernet II frame of 1500 payload bytes, plus the FCS.
/// ESCs do not lengthen frames and ethercrab sends at most its 1500-byte MTU.
pub const MAX_REPLY_LEN: usize = ETH_HEADER_LEN + 1500 + FCS_LEN;
/// Shortest plausible reply: the headers and one datagram without data.
pub const MIN_REPLY_LEN: usize = ETH_HEADER_LEN + ECAT_HEADER_LEN + DATAGRAM_HEADER_LEN + WKC_LEN;
/// EtherCAT header type of frames carrying datagrams (ETG.1000.4: type 1, "DLPDU").
const ECAT_TYPE_DATAGRAMS: u16 = 1;

/// Whose reply a received frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// ethercrab's (from [`REPLY_MAC`]).
    Ethercrab,
    /// One of rtcat's own frames (from `12:10:10:10:10:11`: they go out from `…:11`).
    Own,
}

/// Why a received frame was not taken as a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RxReject {
    /// Shorter than one datagram, longer than [`MAX_REPLY_LEN`], or the EtherCAT header's length
    /// does not match the bytes received (beyond Ethernet padding and an FCS).
    BadLength,
    /// Not EtherType 0x88a4 (a VLAN tag included), or an EtherCAT header type other than
    /// datagrams.
    NotEthercat,
    /// The master's own frame with the source MAC unchanged: no subdevice processed it (a loop
    /// without a segment, or a switch echoing it).
    Unprocessed,
    /// Any other source MAC: another station's frame, not a reply.
    ForeignSource,
    /// A well-formed reply ethercrab did not accept: late after its timeout, or an unknown index.
    NotAwaited,
}

impl RxReject {
    /// Every reason, in the order of the counters.
    pub const ALL: [RxReject; 5] = [
        RxReject::BadLength,
        RxReject::NotEthercat,
        RxReject::Unprocessed,
        RxReject::ForeignSource,
        RxReject::NotAwaited,
    ];

    /// The name used in results (`rx_rejected_by_reason`).
    pub fn name(self) -> &'static str {
        match self {
            RxReject::BadLength => "bad_length",
            RxReject::NotEthercat => "not_ethercat",
            RxReject::Unprocessed => "unprocessed",
            RxReject::ForeignSource => "foreign_source",
            RxReject::NotAwaited => "not_awaited",
        }
    }
}

impl std::fmt::Display for RxReject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `frame` (as received, without FCS unless the NIC keeps it) can be a reply to one of
/// the master's frames, and whose: ethercrab's or rtcat's own. Reads only the headers: no
/// allocation, constant time.
///
/// Checked in order: the EtherType (a frame too short to have one is `BadLength`), who sent it,
/// then the lengths, so that a foreign frame is counted as foreign whatever its shape.
#[inline]
pub fn classify(frame: &[u8]) -> Result<Reply, RxReject> {
    use crate::own_frames::{OWN_MAC, OWN_REPLY_MAC};
    let n = frame.len();
    if n < ETH_HEADER_LEN {
        return Err(RxReject::BadLength);
    }
    if u16::from_be_bytes([frame[12], frame[13]]) != ETHERCAT_ETHERTYPE {
        return Err(RxReject::NotEthercat);
    }
    let src = &frame[6..12];
    let reply = if src == REPLY_MAC {
        Reply::Ethercrab
    } else if src == OWN_REPLY_MAC {
        Reply::Own
    } else if src == MASTER_MAC || src == OWN_MAC {
        return Err(RxReject::Unprocessed);
    } else {
        return Err(RxReject::ForeignSource);
    };
    if !(MIN_REPLY_LEN..=MAX_REPLY_LEN).contains(&n) {
        return Err(RxReject::BadLength);
    }
    // EtherCAT header, little endian: length in bits 0..=10, type in bits 12..=15.
    let h = u16::from_le_bytes([frame[ETH_HEADER_LEN], frame[ETH_HEADER_LEN + 1]]);
    if h >> 12 != ECAT_TYPE_DATAGRAMS {
        return Err(RxReject::NotEthercat);
    }
    let datagrams = usize::from(h & 0x07ff);
    let used = ETH_HEADER_LEN + ECAT_HEADER_LEN + datagrams;
    if datagrams < DATAGRAM_HEADER_LEN + WKC_LEN
        || n < used
        || n > used.max(ETH_MIN_FRAME) + FCS_LEN
    {
        return Err(RxReject::BadLength);
    }
    Ok(reply)
}

pub use rtcat_packet::link::{Link, LinkPorts};

/// A user's [`Link`], opened when a run starts (`Target::Link`): a name for the results and
/// logs, and how to open it. The master opens it once per run (a [`crate::Session`] once per
/// session) and closes it at the end by dropping it.
#[derive(Clone)]
pub struct LinkFactory {
    name: String,
    open: Arc<dyn Fn() -> io::Result<Box<dyn Link>> + Send + Sync>,
}

impl LinkFactory {
    /// A link called `name` (shown where an interface name would be), opened by `open`.
    pub fn new(
        name: impl Into<String>,
        open: impl Fn() -> io::Result<Box<dyn Link>> + Send + Sync + 'static,
    ) -> Self {
        LinkFactory {
            name: name.into(),
            open: Arc::new(open),
        }
    }

    /// The name given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Open a link.
    pub fn open(&self) -> io::Result<Box<dyn Link>> {
        (self.open)()
    }
}

impl std::fmt::Debug for LinkFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkFactory")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Counters of the bus, readable from any thread.
#[derive(Debug, Default)]
pub struct BusCounters {
    /// Frames sent.
    pub sent: AtomicU64,
    /// Every frame received, replies or not.
    pub received: AtomicU64,
    /// Received frames not taken as replies, in total ...
    pub rx_rejected: AtomicU64,
    /// ... and by reason, indexed like [`RxReject::ALL`].
    pub rx_rejected_by: [AtomicU64; RxReject::ALL.len()],
    /// Frames the link failed to send.
    pub send_errors: AtomicU64,
    /// Receive errors of the link.
    pub recv_errors: AtomicU64,
    /// Monotonic time the first frame of the current cycle was handed to the link (0: none
    /// yet): the start of the round trip, and where the DC phase lock measures the send delay.
    pub first_tx_ns: AtomicU64,
    /// When the last reply of the current cycle arrived (monotonic ns, 0: none yet).
    pub last_rx_ns: AtomicU64,
    /// Length of the latest cycle's first frame (bytes, as handed to the link).
    pub first_tx_len: AtomicU64,
    /// The inline cycle's wait mode ([`WaitMode::ALL`] index + 1; 0: no inline cycle ran).
    pub wait_mode: AtomicU64,
    /// Exchanges whose wait's CPU time was measured (every [`WAIT_SAMPLE_EVERY`]th).
    pub wait_sampled: AtomicU64,
    /// The cyclic thread's CPU time in those waits (ns, CLOCK_THREAD_CPUTIME_ID).
    pub wait_cpu_ns: AtomicU64,
    /// Hybrid wait: replies that came after the poll window (taken by the sleep after it).
    pub wait_after_window: AtomicU64,
    /// Exchanges in which the wait polled the link at least once (busy, hybrid).
    pub wait_polled: AtomicU64,
}

/// The CPU time of the wait is measured in one exchange of this many: reading
/// CLOCK_THREAD_CPUTIME_ID is a system call (the vDSO serves only the wall clocks), two of them
/// per measured exchange.
pub const WAIT_SAMPLE_EVERY: u64 = 8;

/// The thread's CPU time (ns).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; the thread CPU clock always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// How the inline cycle waits for its replies, with what the hybrid mode learned.
#[derive(Debug)]
struct Waiter {
    mode: WaitMode,
    /// Boxed: two rings of 64 values would make the bus (and `cycle::Exchanger`) large.
    learner: Box<RttLearner>,
    /// Exchanges ended (the sampling counter).
    exchanges: u64,
    /// The thread's CPU time when this exchange's first wait began (0: not measured).
    cpu_start: u64,
    /// This exchange's reply came after the hybrid window (counted once).
    after_window: bool,
    /// This exchange polled (counted once).
    polled: bool,
}

/// ethercrab's TX/RX handles plus a link.
pub struct Bus {
    /// ethercrab's sending half.
    pub tx: PduTx<'static>,
    /// ethercrab's receiving half.
    pub rx: PduRx<'static>,
    /// What the frames go over.
    pub link: Box<dyn Link>,
    /// Counters, shared with whoever reports them.
    pub counters: Arc<BusCounters>,
    buf: Box<[u8; MAX_FRAME]>,
    wait: Waiter,
    /// Wakes [`Bus::pump_others_until`] when another thread queues a frame.
    others: Option<OthersWake>,
    /// rtcat's own frames, sent and answered with ethercrab's.
    own: Arc<crate::own_frames::OwnFrames>,
    /// An own frame as it is sent (the slot's lock is not held across the send).
    own_buf: Box<[u8; MAX_FRAME]>,
}

/// An eventfd registered with ethercrab while the inline cycle moves other threads' frames:
/// the worker's next frame is sent as soon as it is queued, not at the end of the wait.
struct OthersWake {
    efd: Arc<EventFdWaker>,
    waker: Waker,
}

impl Bus {
    /// The PDU halves back (the link is closed).
    pub fn into_parts(self) -> (PduTx<'static>, PduRx<'static>, Box<dyn Link>) {
        (self.tx, self.rx, self.link)
    }

    /// A bus moving the frames of `tx`/`rx` over `link`.
    pub fn new(tx: PduTx<'static>, rx: PduRx<'static>, link: Box<dyn Link>) -> Self {
        Bus {
            tx,
            rx,
            link,
            counters: Arc::new(BusCounters::default()),
            buf: Box::new([0; MAX_FRAME]),
            wait: Waiter {
                mode: WaitMode::Sleep,
                learner: Box::default(),
                exchanges: 0,
                cpu_start: 0,
                after_window: false,
                polled: false,
            },
            others: None,
            own: Arc::default(),
            own_buf: Box::new([0; MAX_FRAME]),
        }
    }

    /// rtcat's own frames on this bus: for the threads that exchange through it.
    pub(crate) fn own_frames(&self) -> Arc<crate::own_frames::OwnFrames> {
        self.own.clone()
    }

    /// Let [`Bus::pump_others_until`] wake as soon as another thread queues a frame (one
    /// eventfd for the bus's life, made here, before cycling: the cycle allocates nothing).
    pub fn wake_on_others(&mut self) -> io::Result<()> {
        if self.others.is_none() {
            let efd = Arc::new(EventFdWaker(new_eventfd()?));
            let waker = Waker::from(efd.clone());
            self.others = Some(OthersWake { efd, waker });
        }
        Ok(())
    }

    /// Move other threads' frames (the per-subdevice recovery's worker on an inline bus) until
    /// `until_ns` (monotonic): each reply handed over as it comes, each frame sent as soon as
    /// it is queued when [`Bus::wake_on_others`] was called (else at the end of the wait: one
    /// exchange per call). ethercrab wakes the registered waker when a frame becomes sendable;
    /// it is registered only here, so the cycle's own frames never write the eventfd.
    pub fn pump_others_until(&mut self, until_ns: u64) {
        let fd = self.others.as_ref().map(|o| o.efd.0.as_raw_fd());
        let mut drain = [0u8; 8];
        loop {
            // Before sending: a frame queued from here on wakes the wait below.
            if let Some(o) = &self.others {
                self.tx.replace_waker(&o.waker);
                self.own.register(&o.waker);
            }
            self.pump_tx();
            if self.pump_rx() > 0 {
                continue;
            }
            let now = now_ns();
            if now >= until_ns {
                break;
            }
            let _ = self.link.wait(Duration::from_nanos(until_ns - now), fd);
            if let Some(fd) = fd {
                // SAFETY: reading the eventfd counter into an 8-byte buffer (non-blocking).
                unsafe { libc::read(fd, drain.as_mut_ptr() as *mut libc::c_void, 8) };
            }
        }
        if self.others.is_some() {
            self.tx.replace_waker(Waker::noop());
            self.own.register(Waker::noop());
        }
    }

    /// Wait for replies in `mode` from now on ([`Bus::wait_reply`]); the hybrid mode starts
    /// learning the round trip afresh.
    pub fn set_wait(&mut self, mode: WaitMode) {
        self.wait.mode = mode;
        self.wait.learner.reset();
        let code = WaitMode::ALL.iter().position(|&m| m == mode).unwrap_or(0) as u64 + 1;
        self.counters.wait_mode.store(code, Ordering::Relaxed);
    }

    /// The inline exchange found no reply yet and `deadline_ns` (monotonic) is still ahead: wait
    /// for one as the mode says. `sleep` blocks in the link's wait until a frame may be there or
    /// the deadline; `busy` returns at once (the caller reads the link again); `hybrid` sleeps
    /// until its window, returns at once inside it, and sleeps to the deadline after it. Call
    /// [`Bus::exchange_end`] when the exchange is over.
    #[inline]
    pub fn wait_reply(&mut self, deadline_ns: u64) {
        let w = &mut self.wait;
        if w.cpu_start == 0 && w.exchanges.is_multiple_of(WAIT_SAMPLE_EVERY) {
            w.cpu_start = thread_cpu_ns();
        }
        let now = now_ns();
        let to_deadline = deadline_ns.saturating_sub(now);
        // (how long to sleep, whether a sleep that ends by its timeout teaches the wake-up)
        let (sleep_ns, learn_wake) = match w.mode {
            WaitMode::Sleep => (to_deadline, false),
            WaitMode::Busy => (0, false),
            WaitMode::Hybrid => {
                let sent = self.counters.first_tx_ns.load(Ordering::Relaxed);
                match w.learner.step(now.saturating_sub(sent)) {
                    Step::Sleep(ns) => (ns.min(to_deadline), ns < to_deadline),
                    Step::Poll => (0, false),
                    Step::SleepToTimeout => {
                        if w.learner.plan().is_some() && !w.after_window {
                            w.after_window = true;
                            self.counters
                                .wait_after_window
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        (to_deadline, false)
                    }
                }
            }
        };
        if sleep_ns == 0 {
            if !w.polled {
                w.polled = true;
                self.counters.wait_polled.fetch_add(1, Ordering::Relaxed);
            }
            std::hint::spin_loop();
            return;
        }
        let _ = self.link.wait(Duration::from_nanos(sleep_ns), None);
        if learn_wake {
            // Woken by the timeout (not early by a frame): how late.
            let late = now_ns().checked_sub(now + sleep_ns);
            if let Some(late) = late {
                w.learner.record_wake(late);
            }
        }
    }

    /// The inline exchange is over (`answered`: every reply came back): its round trip is
    /// learned, and the wait's CPU time of a measured exchange is counted.
    #[inline]
    pub fn exchange_end(&mut self, answered: bool) {
        let w = &mut self.wait;
        if answered
            && w.mode == WaitMode::Hybrid
            && let Some(rtt) = self.counters.cycle_rtt_ns()
        {
            w.learner.record(rtt);
        }
        if w.exchanges.is_multiple_of(WAIT_SAMPLE_EVERY) {
            // An exchange answered before any wait is measured too: its wait cost nothing.
            let cpu = if w.cpu_start == 0 {
                0
            } else {
                thread_cpu_ns().saturating_sub(w.cpu_start)
            };
            self.counters.wait_sampled.fetch_add(1, Ordering::Relaxed);
            self.counters.wait_cpu_ns.fetch_add(cpu, Ordering::Relaxed);
        }
        w.cpu_start = 0;
        w.after_window = false;
        w.polled = false;
        w.exchanges += 1;
    }

    /// Send every frame queued: rtcat's own first (the cycle's frames, [`crate::own_cycle`],
    /// then the others'), then ethercrab's. A send error leaves the frame to its requester's
    /// timeout.
    pub fn pump_tx(&mut self) -> usize {
        let link = &mut self.link;
        let counters = &self.counters;
        let (sent, failed) = self.own.send_ready(&mut self.own_buf[..], |f, cycle| {
            // The cycle's first frame is stamped before the send: the in-process segment
            // processes the frame (and reads the DC time) inside it, an AF_PACKET frame is on
            // the wire during it.
            let first = cycle && counters.first_tx_ns.load(Ordering::Relaxed) == 0;
            let t = if first { now_ns() } else { 0 };
            link.send(f)?;
            if first {
                counters.first_tx_ns.store(t, Ordering::Relaxed);
                counters
                    .first_tx_len
                    .store(f.len() as u64, Ordering::Relaxed);
            }
            Ok(())
        });
        if sent + failed > 0 {
            self.counters.sent.fetch_add(sent as u64, Ordering::Relaxed);
            self.counters
                .send_errors
                .fetch_add(failed as u64, Ordering::Relaxed);
        }
        let mut n = 0;
        while let Some(frame) = self.tx.next_sendable_frame() {
            let link = &mut self.link;
            let r = frame.send_blocking(|data| {
                link.send(data)
                    .map(|_| data.len())
                    .map_err(|_| ethercrab::error::Error::SendFrame)
            });
            match r {
                Ok(_) => {
                    self.counters.sent.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                Err(_) => {
                    // The claim was released; retrying now would spin on a dead link.
                    self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
        n + sent
    }

    /// Hand every received frame to ethercrab.
    pub fn pump_rx(&mut self) -> usize {
        let mut n = 0;
        loop {
            match self.link.recv(&mut self.buf[..]) {
                Ok(Some(len)) => {
                    n += 1;
                    self.counters.received.fetch_add(1, Ordering::Relaxed);
                    let frame = &self.buf[..len];
                    match classify(frame) {
                        Ok(Reply::Ethercrab) => {
                            if self.rx.receive_frame(frame).is_err() {
                                self.counters.reject(RxReject::NotAwaited);
                            }
                        }
                        // Only the cycle's frames end its round trip.
                        Ok(Reply::Own) => match self.own.receive(frame) {
                            Some(true) => {
                                self.counters.last_rx_ns.store(now_ns(), Ordering::Relaxed)
                            }
                            Some(false) => {}
                            None => self.counters.reject(RxReject::NotAwaited),
                        },
                        Err(why) => self.counters.reject(why),
                    }
                }
                Ok(None) => return n,
                Err(_) => {
                    self.counters.recv_errors.fetch_add(1, Ordering::Relaxed);
                    return n;
                }
            }
        }
    }
}

impl BusCounters {
    #[inline]
    fn reject(&self, why: RxReject) {
        self.rx_rejected.fetch_add(1, Ordering::Relaxed);
        self.rx_rejected_by[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Frames rejected for `why` so far.
    pub fn rejected(&self, why: RxReject) -> u64 {
        self.rx_rejected_by[why as usize].load(Ordering::Relaxed)
    }

    /// Copy the totals the status line shows into `live` (relaxed stores, no allocation).
    #[inline]
    pub fn publish(&self, live: &crate::stats::Live) {
        live.rx_rejected
            .store(self.rx_rejected.load(Ordering::Relaxed), Ordering::Relaxed);
        live.send_errors
            .store(self.send_errors.load(Ordering::Relaxed), Ordering::Relaxed);
        live.cycle_frame_bytes
            .store(self.first_tx_len.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The counters as the results report them (every reason listed, zero or not).
    pub fn bus_stats(&self) -> rtcat_results::BusStats {
        rtcat_results::BusStats {
            rx_rejected: self.rx_rejected.load(Ordering::Relaxed),
            rx_rejected_by_reason: RxReject::ALL
                .iter()
                .map(|&r| (r.name().to_string(), self.rejected(r)))
                .collect(),
            send_errors: self.send_errors.load(Ordering::Relaxed),
            wait: self.wait_stats(),
        }
    }

    /// What the inline cycle's waits cost (None: no inline cycle ran on this bus).
    pub fn wait_stats(&self) -> Option<rtcat_results::WaitStats> {
        let code = self.wait_mode.load(Ordering::Relaxed) as usize;
        let mode = *WaitMode::ALL.get(code.checked_sub(1)?)?;
        let sampled = self.wait_sampled.load(Ordering::Relaxed);
        let cpu_ns = self.wait_cpu_ns.load(Ordering::Relaxed);
        Some(rtcat_results::WaitStats {
            mode: mode.name().to_string(),
            sampled_cycles: sampled,
            cpu_ns,
            cpu_ns_per_cycle: cpu_ns.checked_div(sampled).unwrap_or(0),
            after_window: self.wait_after_window.load(Ordering::Relaxed),
            polled_cycles: self.wait_polled.load(Ordering::Relaxed),
        })
    }

    /// Forget the per-cycle round-trip timestamps.
    #[inline]
    pub fn start_cycle(&self) {
        self.first_tx_ns.store(0, Ordering::Relaxed);
        self.last_rx_ns.store(0, Ordering::Relaxed);
    }

    /// Round trip of the current cycle: first frame out to last frame in.
    #[inline]
    pub fn cycle_rtt_ns(&self) -> Option<u64> {
        let a = self.first_tx_ns.load(Ordering::Relaxed);
        let b = self.last_rx_ns.load(Ordering::Relaxed);
        (a != 0 && b >= a).then(|| b - a)
    }
}

/// Wakes a parked thread (the cyclic thread in `txrx = "thread"` mode).
pub struct ThreadWaker(pub std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Wakes the TX/RX thread through an eventfd (usable from any thread, no allocation).
struct EventFdWaker(std::os::fd::OwnedFd);

impl Wake for EventFdWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to an eventfd we own.
        unsafe {
            libc::write(
                self.0.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }
}

fn new_eventfd() -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: eventfd returns a new fd or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// A TX/RX thread: pumps frames until stopped, then gives the bus back.
pub struct TxRxThread {
    stop: Arc<AtomicBool>,
    waker: Waker,
    passes: TxRxPasses,
    handle: std::thread::JoinHandle<Bus>,
}

/// The TX/RX thread's passes (send what is queued, take what came back), counted, so the cyclic
/// thread can tell "the segment did not answer in time" from "our own TX/RX thread did not get
/// to run": a frame is declared lost only once a pass that began after its timeout has read the
/// link, as the inline loop reads it once more after its wait. Without that, a stall of the
/// whole machine longer than the timeout (a host that preempts a VM's vCPUs, measured on the CI
/// machines) lost the frame of the cycle it hit although the answer was there.
#[derive(Clone)]
pub struct TxRxPasses {
    started: Arc<AtomicU64>,
    finished: Arc<AtomicU64>,
    waker: Waker,
}

impl TxRxPasses {
    /// Ask the thread for a pass now; returns the mark [`TxRxPasses::passed_since`] compares with.
    /// One eventfd write: only when a response is overdue, never on a good cycle.
    pub fn request(&self) -> u64 {
        let mark = self.started.load(Ordering::Acquire);
        self.waker.wake_by_ref();
        mark
    }

    /// Whether a whole pass that began after `request` returned `mark` has finished.
    pub fn passed_since(&self, mark: u64) -> bool {
        self.finished.load(Ordering::Acquire) > mark
    }
}

/// How a TX/RX thread is set up.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRt {
    /// CPU to pin the thread to.
    pub cpu: Option<usize>,
    /// SCHED_FIFO priority (None: the default policy).
    pub fifo_priority: Option<u8>,
}

impl TxRxThread {
    /// Start a TX/RX thread on `bus` with the real-time settings `rt`.
    pub fn spawn(mut bus: Bus, rt: ThreadRt) -> crate::Result<Self> {
        let efd = Arc::new(EventFdWaker(
            new_eventfd().map_err(crate::Error::io("eventfd for the TX/RX thread"))?,
        ));
        let efd_raw = efd.0.as_raw_fd();
        let waker = Waker::from(efd.clone());
        // Register before the thread starts: a frame queued in between must wake it, not a
        // waker left over from an earlier phase.
        bus.tx.replace_waker(&waker);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let waker2 = waker.clone();
        let passes = TxRxPasses {
            started: Arc::new(AtomicU64::new(0)),
            finished: Arc::new(AtomicU64::new(0)),
            waker: waker.clone(),
        };
        let (started, finished) = (passes.started.clone(), passes.finished.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<crate::Result<()>>();
        let handle = std::thread::Builder::new()
            .name("rtcat-txrx".into())
            .spawn(move || {
                let setup = (|| -> crate::Result<()> {
                    if let Some(cpu) = rt.cpu {
                        crate::rt::pin_to(cpu)?;
                    }
                    if let Some(p) = rt.fifo_priority {
                        crate::rt::set_fifo(p)?;
                    }
                    Ok(())
                })();
                let ok = setup.is_ok();
                let _ = ready_tx.send(setup);
                if !ok {
                    return bus;
                }
                let _keep = efd;
                let mut drain = [0u8; 8];
                let mut pass = 0u64;
                while !stop2.load(Ordering::Acquire) && !bus.tx.should_exit() {
                    pass += 1;
                    started.store(pass, Ordering::Release);
                    bus.tx.replace_waker(&waker2);
                    bus.own.register(&waker2);
                    bus.pump_tx();
                    bus.pump_rx();
                    finished.store(pass, Ordering::Release);
                    let _ = bus.link.wait(Duration::from_millis(5), Some(efd_raw));
                    // SAFETY: reading the eventfd counter into an 8-byte buffer.
                    unsafe { libc::read(efd_raw, drain.as_mut_ptr() as *mut libc::c_void, 8) };
                }
                bus
            })
            .map_err(crate::Error::io("spawn the TX/RX thread"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = handle.join();
                return Err(e);
            }
            Err(_) => return Err(crate::Error::Panicked("TX/RX")),
        }
        Ok(TxRxThread {
            stop,
            waker,
            passes,
            handle,
        })
    }

    /// The thread's pass counter, for the cyclic thread.
    pub fn passes(&self) -> TxRxPasses {
        self.passes.clone()
    }

    /// Stop the thread and take the bus back.
    pub fn stop(self) -> Bus {
        self.stop.store(true, Ordering::Release);
        self.waker.wake_by_ref();
        // A panic in the TX/RX loop is a bug; propagate it.
        self.handle.join().expect("TX/RX thread panicked")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ecsim::frame::{Cmd, FrameBuilder, phys};
    use ethercrab::{Command, MainDevice, MainDeviceConfig, PduStorage, Timeouts};
    use rtcat_packet::wait_fds;
    use std::collections::VecDeque;
    use std::os::fd::RawFd;
    use std::sync::Mutex;

    /// A reply as the segment returns it: one FPRD of the AL status, source MAC U/L bit set.
    fn reply() -> Vec<u8> {
        let mut f = FrameBuilder::new()
            .datagram(Cmd::Fprd, 7, phys(0x1000, 0x0130), &[0x08, 0x00])
            .build();
        f[6] |= 0x02;
        f
    }

    #[test]
    fn reasons_are_indexed_like_all() {
        for (i, r) in RxReject::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r}");
        }
        assert_eq!(REPLY_MAC, [0x12, 0x10, 0x10, 0x10, 0x10, 0x10]);
        assert_eq!(MASTER_MAC, ecsim::frame::MAINDEVICE_MAC);
    }

    #[test]
    fn a_reply_from_the_segment_is_accepted() {
        let f = reply();
        assert_eq!(f.len(), ETH_MIN_FRAME, "padded like on a real wire");
        assert_eq!(classify(&f), Ok(Reply::Ethercrab));
        // Unpadded (veth) and with an FCS kept by the NIC.
        let used = ETH_HEADER_LEN + ECAT_HEADER_LEN + DATAGRAM_HEADER_LEN + 2 + WKC_LEN;
        assert_eq!(classify(&f[..used]), Ok(Reply::Ethercrab));
        let mut fcs = f.clone();
        fcs.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(classify(&fcs), Ok(Reply::Ethercrab));
        // A full-size frame: one LRW of 1486 bytes (1500 bytes of Ethernet payload).
        let mut big = FrameBuilder::new()
            .datagram(Cmd::Lrw, 1, 0, &[0; 1500 - 2 - 12])
            .build();
        big[6] |= 0x02;
        assert_eq!(big.len(), 1514);
        assert_eq!(classify(&big), Ok(Reply::Ethercrab));
    }

    #[test]
    fn too_short_or_too_long_is_bad_length() {
        let f = reply();
        for n in [0, 1, 13] {
            assert_eq!(classify(&f[..n]), Err(RxReject::BadLength), "{n} bytes");
        }
        // Ethernet and EtherCAT headers but no complete datagram.
        assert_eq!(classify(&f[..MIN_REPLY_LEN - 1]), Err(RxReject::BadLength));
        let mut long = f.clone();
        long.resize(MAX_REPLY_LEN + 1, 0);
        assert_eq!(classify(&long), Err(RxReject::BadLength));
        // What the socket reports for a jumbo frame: cut to the receive buffer.
        long.resize(MAX_FRAME, 0);
        assert_eq!(classify(&long), Err(RxReject::BadLength));
    }

    #[test]
    fn ethercat_length_inconsistent_with_the_frame_is_bad_length() {
        let f = reply();
        let set_len = |f: &mut Vec<u8>, len: u16| {
            let h = u16::from_le_bytes([f[14], f[15]]) & !0x07ff;
            f[14..16].copy_from_slice(&(h | len).to_le_bytes());
        };
        // Claims more datagram bytes than the frame holds.
        let mut over = f.clone();
        set_len(&mut over, 60);
        assert_eq!(classify(&over), Err(RxReject::BadLength));
        // Claims no datagram at all, or less than one header.
        for len in [0, 11] {
            let mut short = f.clone();
            set_len(&mut short, len);
            assert_eq!(classify(&short), Err(RxReject::BadLength), "length {len}");
        }
        // Far more bytes than the header says, beyond padding and an FCS.
        let mut trailing = FrameBuilder::new()
            .datagram(Cmd::Lrw, 1, 0, &[0; 100])
            .build();
        trailing[6] |= 0x02;
        trailing.extend_from_slice(&[0; FCS_LEN]);
        assert_eq!(classify(&trailing), Ok(Reply::Ethercrab));
        trailing.push(0);
        assert_eq!(classify(&trailing), Err(RxReject::BadLength));
    }

    #[test]
    fn other_ethertypes_and_header_types_are_not_ethercat() {
        let f = reply();
        for ty in [0x0800u16, 0x8100, 0x88a8, 0x88a5] {
            let mut g = f.clone();
            g[12..14].copy_from_slice(&ty.to_be_bytes());
            assert_eq!(classify(&g), Err(RxReject::NotEthercat), "{ty:#06x}");
        }
        // EtherCAT header type 4 (network variables) or 5 (mailbox gateway): not datagrams.
        for ty in [0u16, 4, 5, 15] {
            let mut g = f.clone();
            let h = (u16::from_le_bytes([g[14], g[15]]) & 0x0fff) | (ty << 12);
            g[14..16].copy_from_slice(&h.to_le_bytes());
            assert_eq!(classify(&g), Err(RxReject::NotEthercat), "type {ty}");
        }
    }

    #[test]
    fn another_source_mac_is_foreign_and_our_own_is_unprocessed() {
        let f = reply();
        for mac in [
            [0x02, 0x42, 0xac, 0x11, 0x00, 0x02],
            [0x12, 0x10, 0x10, 0x10, 0x10, 0x13],
            [0x13, 0x10, 0x10, 0x10, 0x10, 0x10],
            [0xff; 6],
        ] {
            let mut g = f.clone();
            g[6..12].copy_from_slice(&mac);
            assert_eq!(classify(&g), Err(RxReject::ForeignSource), "{mac:02x?}");
        }
        // Foreign wins over a bad length: the frame is not ours whatever its shape.
        let mut g = f[..20].to_vec();
        g[6] = 0x02;
        assert_eq!(classify(&g), Err(RxReject::ForeignSource));
        let mut own = f.clone();
        own[6] &= !0x02;
        assert_eq!(classify(&own), Err(RxReject::Unprocessed));
        // rtcat's own frames: their replies are told apart by the source MAC address.
        let mut g = f.clone();
        g[6..12].copy_from_slice(&crate::own_frames::OWN_REPLY_MAC);
        assert_eq!(classify(&g), Ok(Reply::Own));
        g[6..12].copy_from_slice(&crate::own_frames::OWN_MAC);
        assert_eq!(classify(&g), Err(RxReject::Unprocessed));
    }

    /// A link whose received frames the test scripts; sent frames are kept.
    #[derive(Default)]
    struct Script {
        sent: Vec<Vec<u8>>,
        inbox: VecDeque<Vec<u8>>,
    }
    struct ScriptLink(Arc<Mutex<Script>>);

    impl Link for ScriptLink {
        fn send(&mut self, frame: &[u8]) -> io::Result<()> {
            self.0.lock().unwrap().sent.push(frame.to_vec());
            Ok(())
        }
        fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            Ok(self.0.lock().unwrap().inbox.pop_front().map(|f| {
                buf[..f.len()].copy_from_slice(&f);
                f.len()
            }))
        }
        fn wait(&mut self, _: Duration, _: Option<RawFd>) -> io::Result<()> {
            Ok(())
        }
        fn describe(&self) -> String {
            "script".into()
        }
    }

    /// The bus hands ethercrab only the real reply: a forged copy from another MAC that arrives
    /// first, the master's own frame echoed back unprocessed and a truncated copy are counted and
    /// dropped, and a duplicate of the reply after it was taken counts as not awaited.
    #[test]
    fn only_replies_reach_ethercrab() {
        type Sto = PduStorage<4, { PduStorage::element_size(64) }>;
        let storage: &'static Sto = Box::leak(Box::new(Sto::new()));
        let (tx, rx, pdu_loop) = storage.try_split().unwrap();
        let md = MainDevice::new(pdu_loop, Timeouts::default(), MainDeviceConfig::default());
        let script = Arc::new(Mutex::new(Script::default()));
        let mut bus = Bus::new(tx, rx, Box::new(ScriptLink(script.clone())));

        let mut fut = std::pin::pin!(Command::fprd(0x1000, 0x0130).receive::<u16>(&md));
        let mut cx = std::task::Context::from_waker(Waker::noop());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert_eq!(bus.pump_tx(), 1);
        let sent = script.lock().unwrap().sent[0].clone();
        assert_eq!(sent[6..12], MASTER_MAC, "ethercrab's source MAC");
        // The request: one FPRD, 2 data bytes at 26..28, WKC at 28..30.
        let mut real = sent.clone();
        real[6] |= 0x02;
        real[26..28].copy_from_slice(&[0x08, 0x00]);
        real[28..30].copy_from_slice(&1u16.to_le_bytes());
        let mut forged = real.clone();
        forged[6..12].copy_from_slice(&[0x02, 0x42, 0xac, 0x11, 0x00, 0x02]);
        forged[26] = 0x04;
        script.lock().unwrap().inbox.extend([
            forged,
            sent.clone(),
            real[..20].to_vec(),
            real.clone(),
            real.clone(),
        ]);
        assert_eq!(bus.pump_rx(), 5);
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => assert_eq!(r.expect("reply"), 0x0008),
            std::task::Poll::Pending => panic!("the real reply was not taken"),
        }
        let c = &bus.counters;
        assert_eq!(c.received.load(Ordering::Relaxed), 5);
        assert_eq!(c.rejected(RxReject::ForeignSource), 1);
        assert_eq!(c.rejected(RxReject::Unprocessed), 1);
        assert_eq!(c.rejected(RxReject::BadLength), 1);
        assert_eq!(c.rejected(RxReject::NotAwaited), 1);
        assert_eq!(c.rejected(RxReject::NotEthercat), 0);
        let stats = c.bus_stats();
        assert_eq!(stats.rx_rejected, 4);
        assert_eq!(stats.rx_rejected_by_reason.len(), RxReject::ALL.len());
        assert_eq!(stats.rx_rejected_by_reason["foreign_source"], 1);
        let live = crate::stats::Live::default();
        c.publish(&live);
        assert_eq!(live.rx_rejected.load(Ordering::Relaxed), 4);
        assert_eq!(live.send_errors.load(Ordering::Relaxed), 0);
    }

    /// A link whose wait sees only the eventfd, as a TX/RX thread that did not get to run sees
    /// nothing: a reply put in its inbox stays there until somebody asks for a pass.
    struct DeafLink(Arc<Mutex<Script>>);

    impl Link for DeafLink {
        fn send(&mut self, frame: &[u8]) -> io::Result<()> {
            ScriptLink(self.0.clone()).send(frame)
        }
        fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            ScriptLink(self.0.clone()).recv(buf)
        }
        fn wait(&mut self, _: Duration, extra_fd: Option<RawFd>) -> io::Result<()> {
            wait_fds(
                &[extra_fd.expect("the TX/RX thread's eventfd")],
                Some(Duration::from_secs(10)),
            )
            .map(drop)
        }
        fn describe(&self) -> String {
            "deaf script".into()
        }
    }

    /// A main device on storage of its own, whose own timeout cannot end a future while a test
    /// waits, and the halves of its bus.
    fn patient_main_device() -> (PduTx<'static>, PduRx<'static>, MainDevice<'static>) {
        type Sto = PduStorage<4, { PduStorage::element_size(64) }>;
        let storage: &'static Sto = Box::leak(Box::new(Sto::new()));
        let (tx, rx, pdu_loop) = storage.try_split().unwrap();
        let md = MainDevice::new(
            pdu_loop,
            Timeouts {
                pdu: Duration::from_secs(10),
                ..Timeouts::default()
            },
            MainDeviceConfig::default(),
        );
        (tx, rx, md)
    }

    /// An overdue reply that the TX/RX thread has not read is taken by the pass asked for.
    #[test]
    fn a_requested_pass_reads_what_the_thread_had_not() {
        let (tx, rx, md) = patient_main_device();
        let script = Arc::new(Mutex::new(Script::default()));
        let bus = Bus::new(tx, rx, Box::new(DeafLink(script.clone())));
        let t = TxRxThread::spawn(bus, ThreadRt::default()).expect("TX/RX thread");
        let passes = t.passes();

        let mut fut = std::pin::pin!(Command::fprd(0x1000, 0x0130).receive::<u16>(&md));
        let mut cx = std::task::Context::from_waker(Waker::noop());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        let until = |what: &str, f: &dyn Fn() -> bool| {
            let t0 = std::time::Instant::now();
            while !f() {
                assert!(t0.elapsed() < Duration::from_secs(5), "{what}");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // The queued frame woke the thread, which sent it.
        until("the frame sent", &|| {
            !script.lock().unwrap().sent.is_empty()
        });
        let mut real = script.lock().unwrap().sent[0].clone();
        real[6] |= 0x02;
        real[26..28].copy_from_slice(&[0x08, 0x00]);
        real[28..30].copy_from_slice(&1u16.to_le_bytes());
        // The reply arrives while the thread waits and does not see it.
        let mark = passes.started.load(Ordering::Acquire);
        until("the thread back in its wait", &|| {
            passes.passed_since(mark - 1)
        });
        script.lock().unwrap().inbox.push_back(real);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            fut.as_mut().poll(&mut cx).is_pending(),
            "read without a pass"
        );
        assert_eq!(script.lock().unwrap().inbox.len(), 1);
        // One pass asked for, and the reply is there.
        let mark = passes.request();
        until("the pass asked for", &|| passes.passed_since(mark));
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => assert_eq!(r.expect("reply"), 0x0008),
            std::task::Poll::Pending => panic!("the requested pass did not read the reply"),
        }
        drop(t.stop());
    }

    /// The inline cycle's pump sends another thread's frames as soon as they are queued: a
    /// thread reading 20 times, one read after another, gets them all through within one call
    /// of `pump_others_until`. Without `wake_on_others` the pump's wait lasts to its end, so
    /// one call moves at most the frame already queued and the one after it — unless the
    /// reader, woken by its reply, queues its next frame before the pump looks again, which on
    /// a busy machine (both threads on one core, the woken one run first) can chain all 20: that
    /// verdict is the machine's, retried as `ecsim::noise` does (a CI run saw 20).
    #[test]
    fn the_pump_sends_other_threads_frames_as_they_come() {
        fn exchanges(wake: bool) -> usize {
            let (tx, rx, md) = patient_main_device();
            let link = ecsim::SimPort::new(ecsim::SegmentSpec::reference());
            let mut bus = Bus::new(tx, rx, Box::new(link));
            if wake {
                bus.wake_on_others().expect("eventfd");
            }
            let done = std::sync::atomic::AtomicUsize::new(0);
            let finished = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    for _ in 0..20 {
                        let r = futures_lite::future::block_on(
                            Command::brd(0x0000).ignore_wkc().receive::<u16>(&md),
                        );
                        if r.is_err() {
                            break;
                        }
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    finished.store(true, Ordering::SeqCst);
                });
                bus.pump_others_until(now_ns() + 1_000_000_000);
                let n = done.load(Ordering::SeqCst);
                // Let the reader finish.
                while !finished.load(Ordering::SeqCst) {
                    bus.pump_others_until(now_ns() + 1_000_000);
                }
                n
            })
        }
        assert_eq!(exchanges(true), 20);
        ecsim::noise::within_machine_noise("the pump without the wake", |_| {
            let without = exchanges(false);
            ecsim::noise::ensure(without <= 2, || {
                format!("{without} exchanges without the wake")
            })
        });
    }
}
