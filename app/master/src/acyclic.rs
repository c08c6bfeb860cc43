//! SDO requests while the segment cycles.
//!
//! This is the mailbox layer's face on the cyclic thread ([`crate::mailbox`] is its blocking
//! face for the PRE-OP tools): the one way other threads reach a subdevice's mailbox during OP.
//! Other threads (a control socket, the application's own threads) queue requests through an
//! [`SdoClient`]; the cyclic thread serves them from its [`SdoService`] in a bounded time budget
//! **after** each cycle's own work (exchange, application, outputs, measurements) and never
//! before it, so a mailbox frame is never on the wire ahead of the cyclic frame and the cycle's
//! execution time does not include it. A transfer that does not finish within one budget goes on
//! in the next cycle's budget (its frame may still be in flight when the next cyclic frame goes
//! out: the two are independent PDUs, and the budget ends well before the next deadline).
//!
//! The queues are bounded ring buffers of fixed-size requests and replies ([`MAX_SDO_BYTES`] of
//! data each): nothing is allocated per request on either side. Transfers are rtcat's own CoE
//! client ([`crate::coe::frame`] builds and parses the mailboxes) run as a future over
//! ethercrab's FPRD/FPWR commands, its mailbox buffers owned by the [`SdoService`]: upload
//! expedited, normal or segmented, download expedited, normal or segmented, up to
//! [`MAX_SDO_BYTES`]. A CoE emergency found in the send mailbox goes to a bounded ring
//! ([`SdoClient::take_emergency`]) and the transfer goes on; whatever a device sends ends in a
//! reply, never a panic of the cyclic thread.

use crate::coe::frame::{self, Response};
use crate::mailbox::{Counter, Emergency, Geometry, RegisterError, Timeouts};
use ethercrab::{Command, MainDevice};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Largest value of one request or reply (bytes).
pub const MAX_SDO_BYTES: usize = 64;

/// Largest mailbox (SM0/SM1 size) the service handles: the data of one datagram in a
/// 1500-byte frame (ETG.1000.4 §5.4: 2 bytes EtherCAT header, 10 datagram header, 2 WKC).
pub const MAX_MAILBOX: usize = crate::mailbox::MAX_MAILBOX as usize;

/// A whole mailbox (header included) of at most [`MAX_MAILBOX`] bytes, held inline: what a
/// request of another protocol than CoE sends ([`SdoOp::Mailbox`]) and what its reply holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct MailboxData {
    len: u16,
    bytes: [u8; MAX_MAILBOX],
}

impl MailboxData {
    /// The mailbox `bytes`, or `None` when longer than [`MAX_MAILBOX`].
    pub fn new(bytes: &[u8]) -> Option<MailboxData> {
        if bytes.len() > MAX_MAILBOX {
            return None;
        }
        let mut m = MailboxData {
            len: bytes.len() as u16,
            bytes: [0; MAX_MAILBOX],
        };
        m.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(m)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for MailboxData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.as_slice();
        write!(
            f,
            "MailboxData({} bytes: {:02x?})",
            b.len(),
            &b[..b.len().min(16)]
        )
    }
}

/// Mailboxes of another protocol than CoE kept until a consumer takes them
/// ([`SdoClient::take_set_aside`]; beyond it they are counted, then dropped).
pub const SET_ASIDE_RING: usize = 8;

/// A mailbox of another protocol than CoE (an EoE frame, an FoE answer nobody waits for) that a
/// subdevice sent while the service read its send mailbox: set aside for that protocol's client,
/// as the blocking transport does ([`crate::mailbox::Mailbox::take_set_aside`]). Fixed size: the
/// cyclic thread copies it into a preallocated ring.
#[derive(Clone, Copy)]
pub struct SetAside {
    /// Position of the subdevice.
    pub position: u16,
    len: u16,
    bytes: [u8; MAX_MAILBOX],
}

impl SetAside {
    /// The mailbox, header included, as long as its header says.
    pub fn mailbox(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Its type ([`crate::mailbox::kind`]).
    pub fn kind(&self) -> u8 {
        self.bytes[5] & 0x0f
    }
}

impl std::fmt::Debug for SetAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SetAside {{ position: {}, {}: {:02x?} }}",
            self.position,
            crate::mailbox::kind::name(self.kind()),
            self.mailbox()
        )
    }
}

/// Emergencies kept until a consumer takes them (older ones are counted, then dropped).
pub const EMERGENCY_RING: usize = 64;

/// The bytes of an SDO value (at most [`MAX_SDO_BYTES`]), held inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SdoData {
    len: u8,
    bytes: [u8; MAX_SDO_BYTES],
}

impl SdoData {
    /// The value `bytes`, or `None` when it is longer than [`MAX_SDO_BYTES`].
    pub fn new(bytes: &[u8]) -> Option<SdoData> {
        if bytes.len() > MAX_SDO_BYTES {
            return None;
        }
        let mut d = SdoData {
            len: bytes.len() as u8,
            bytes: [0; MAX_SDO_BYTES],
        };
        d.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(d)
    }

    /// Append `more`; false (and nothing appended) when the result would be too long.
    fn extend(&mut self, more: &[u8]) -> bool {
        let n = usize::from(self.len);
        if n + more.len() > MAX_SDO_BYTES {
            return false;
        }
        self.bytes[n..n + more.len()].copy_from_slice(more);
        self.len = (n + more.len()) as u8;
        true
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for SdoData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SdoData({:02x?})", self.as_slice())
    }
}

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdoOp {
    /// Read the object (upload).
    Read,
    /// Write these bytes to it (download).
    Write(SdoData),
    /// Read `len` bytes (at most [`MAX_SDO_BYTES`]) of the ESC registers from `address` (FPRD,
    /// ETG.1000.4 §5.4.3); `index` and `sub` of the request are not used.
    ReadRegister {
        /// First register.
        address: u16,
        /// Bytes to read.
        len: u8,
    },
    /// Write these bytes to the ESC registers from `address` (FPWR); `index` and `sub` are
    /// not used. AL control (0x0120) for a state request, for instance.
    WriteRegister {
        /// First register.
        address: u16,
        /// The bytes.
        data: SdoData,
    },
    /// Read the send mailbox (SM1) once if the subdevice has filled it: a CoE emergency found
    /// there goes to the ring, anything else is read away. The value is `[1]` when a mailbox
    /// was read, empty when SM1 was empty. Emergencies only reach the master when SM1 is read
    /// (ETG.1000.4 §5.6: the device cannot send on its own), so a poller sends this
    /// regularly; `index` and `sub` are not used.
    PollMailbox,
    /// Send this mailbox as it is (FoE; a raw CoE request of the mailbox gateway; header first,
    /// its type set, the counter is the service's: the subdevice's one sequence) and reply with
    /// the next mailbox of the same type ([`SdoReply::mailbox`]; for CoE the next that is not an
    /// emergency); CoE emergencies and other protocols' mailboxes found meanwhile go to their
    /// rings. `index` and `sub` are not used.
    Mailbox(MailboxData),
    /// Send this mailbox and do not wait for a reply (the last FoE ACK, an FoE ERROR).
    MailboxSend(MailboxData),
    /// Take the subdevice out of its per-subdevice recovery's hands for a firmware update
    /// (`subdevice_recovery::Board::park`): the next cycle tells the application and
    /// flags its data invalid until [`SdoOp::HandBack`]. No bus access; refused without
    /// per-subdevice recovery. `index` and `sub` are not used.
    Park,
    /// Give a parked subdevice back to its recovery, which brings it to OP.
    HandBack,
}

/// One request: subdevice position, object index and subindex, read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdoRequest {
    /// Position of the subdevice in the segment (0 = next to the master).
    pub position: u16,
    /// Object index.
    pub index: u16,
    /// Subindex.
    pub sub: u8,
    /// Read or write.
    pub op: SdoOp,
    /// How long the device may take to answer this transfer; None: the service's
    /// ([`SdoService::set_timeouts`], 1 s by default). For a write the firmware acts on before
    /// it answers (storing parameters, writing flash). The requests queued behind it wait as
    /// long; the cycle does not.
    pub response: Option<Duration>,
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SdoFailure {
    /// No subdevice at that position.
    #[error("no subdevice at position {0}")]
    NoSubdevice(u16),
    /// The subdevice aborted the transfer (ETG.1000.6 Table 41 code).
    #[error("SDO abort {code:#010x}: {text}")]
    Aborted {
        /// The abort code.
        code: u32,
        /// Its meaning.
        text: &'static str,
    },
    /// The value is longer than this path transfers.
    #[error("value of {len} bytes: at most {max} bytes in this direction")]
    TooLong {
        /// The value's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The subdevice did not answer in time.
    #[error("no answer in time")]
    Timeout,
    /// Another bus or mailbox error.
    #[error("mailbox error: {0}")]
    Mailbox(&'static str),
    /// The device answered with something the transfer cannot use.
    #[error("malformed answer: {0}")]
    Malformed(&'static str),
    /// The request itself cannot be served (no data to write, ...).
    #[error("invalid request: {0}")]
    Invalid(&'static str),
    /// The master stopped (or the request timed out on the client side) before the reply came.
    #[error("no reply: the master is not cycling")]
    NotCycling,
    /// The request queue is full.
    #[error("request queue full")]
    QueueFull,
    /// The master refused the request in its present state (a park while the subdevice's
    /// recovery is bringing it back, ...).
    #[error("refused: {0}")]
    Refused(&'static str),
}

/// A request's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdoReply {
    /// The request.
    pub request: SdoRequest,
    /// The value read (empty for a write), or why it failed.
    pub result: Result<SdoData, SdoFailure>,
    /// The reply mailbox of an [`SdoOp::Mailbox`] request that succeeded.
    pub mailbox: Option<MailboxData>,
}

struct Ends {
    requests: rtrb::Producer<SdoRequest>,
    replies: rtrb::Consumer<SdoReply>,
}

/// The requesting side: shared by any number of threads; one transfer at a time (replies come
/// back in request order, and a caller waits for its own).
pub struct SdoClient {
    ends: Mutex<Ends>,
    emergencies: Mutex<rtrb::Consumer<Emergency>>,
    set_aside: Mutex<(
        rtrb::Consumer<SetAside>,
        std::collections::VecDeque<SetAside>,
    )>,
}

/// Set-aside mailboxes a consumer of one subdevice and type ([`SdoClient::take_set_aside_of`])
/// passed over, kept for the others (the oldest dropped beyond it).
const SET_ASIDE_KEPT: usize = 4 * SET_ASIDE_RING;

/// Where what a device sends unasked goes on the cyclic thread: two bounded rings, and counts of
/// what did not fit.
struct Unasked {
    emergencies: rtrb::Producer<Emergency>,
    emergencies_dropped: u64,
    set_aside: rtrb::Producer<SetAside>,
    set_aside_dropped: u64,
}

/// What the service knows of one subdevice's mailbox.
#[derive(Clone, Copy)]
struct Station {
    geometry: Geometry,
    /// Counter of the last request sent (the mailbox layer's: 1..7).
    counter: Counter,
    /// The device answered one of the service's requests.
    answered: bool,
}

/// The serving side, handed to the master in [`crate::RunSpec::sdo`].
pub struct SdoService {
    requests: rtrb::Consumer<SdoRequest>,
    replies: rtrb::Producer<SdoReply>,
    unasked: Unasked,
    /// Time the cyclic thread may spend on mailbox traffic after each cycle.
    budget: Duration,
    timeouts: Timeouts,
    served: u64,
    /// Mailbox geometry per position, read at the first request to a subdevice in a phase
    /// (cleared at the start of each: a recovery may reconfigure the mailboxes).
    stations: Box<[Option<Station>]>,
    out: Box<[u8]>,
    inp: Box<[u8]>,
    /// The reply of the last [`SdoOp::Mailbox`] request.
    reply: MailboxData,
}

/// A client and its service; `budget` is the time per cycle the cyclic thread may spend on SDO
/// traffic after its own work (keep it well below the period: the cycle clamps it to the time
/// left before half of the next period).
pub fn sdo_queue(capacity: usize, budget: Duration) -> (SdoClient, SdoService) {
    let (rq_tx, rq_rx) = rtrb::RingBuffer::new(capacity.max(1));
    let (rp_tx, rp_rx) = rtrb::RingBuffer::new(capacity.max(1));
    let (em_tx, em_rx) = rtrb::RingBuffer::new(EMERGENCY_RING);
    let (sa_tx, sa_rx) = rtrb::RingBuffer::new(SET_ASIDE_RING);
    (
        SdoClient {
            ends: Mutex::new(Ends {
                requests: rq_tx,
                replies: rp_rx,
            }),
            emergencies: Mutex::new(em_rx),
            set_aside: Mutex::new((sa_rx, std::collections::VecDeque::new())),
        },
        SdoService {
            requests: rq_rx,
            replies: rp_tx,
            unasked: Unasked {
                emergencies: em_tx,
                emergencies_dropped: 0,
                set_aside: sa_tx,
                set_aside_dropped: 0,
            },
            budget,
            timeouts: Timeouts::default(),
            served: 0,
            stations: vec![None; crate::limits::MAX_SUBDEVICES].into_boxed_slice(),
            out: vec![0; MAX_MAILBOX].into_boxed_slice(),
            inp: vec![0; MAX_MAILBOX].into_boxed_slice(),
            reply: MailboxData {
                len: 0,
                bytes: [0; MAX_MAILBOX],
            },
        },
    )
}

impl SdoClient {
    /// The oldest CoE emergency a device sent during a transfer that nobody has taken yet
    /// (the ring keeps [`EMERGENCY_RING`]; [`SdoService::emergencies_dropped`] counts the rest).
    pub fn take_emergency(&self) -> Option<Emergency> {
        let mut e = self.emergencies.lock().unwrap_or_else(|p| p.into_inner());
        e.pop().ok()
    }

    /// The oldest mailbox of another protocol than CoE that a device sent while the service read
    /// its send mailbox, if nobody has taken it yet (the ring keeps [`SET_ASIDE_RING`];
    /// [`SdoService::set_aside_dropped`] counts the rest).
    pub fn take_set_aside(&self) -> Option<SetAside> {
        let mut s = self.set_aside.lock().unwrap_or_else(|p| p.into_inner());
        let (ring, kept) = &mut *s;
        kept.pop_front().or_else(|| ring.pop().ok())
    }

    /// The oldest set-aside mailbox of type `kind` from the subdevice at `position` (an EoE
    /// client's fragments): the others it passes over stay for [`SdoClient::take_set_aside`]
    /// and the other consumers (up to a bound; the oldest is dropped beyond it).
    pub fn take_set_aside_of(&self, position: u16, kind: u8) -> Option<SetAside> {
        let mut s = self.set_aside.lock().unwrap_or_else(|p| p.into_inner());
        let (ring, kept) = &mut *s;
        if let Some(i) = kept
            .iter()
            .position(|m| m.position == position && m.kind() == kind)
        {
            return kept.remove(i);
        }
        while let Ok(m) = ring.pop() {
            if m.position == position && m.kind() == kind {
                return Some(m);
            }
            if kept.len() >= SET_ASIDE_KEPT {
                kept.pop_front();
            }
            kept.push_back(m);
        }
        None
    }

    /// Read `len` bytes of the ESC registers of the subdevice at `position` from `address`.
    pub fn read_register(
        &self,
        position: u16,
        address: u16,
        len: u8,
        timeout: Duration,
    ) -> Result<SdoData, SdoFailure> {
        self.transfer(
            SdoRequest {
                position,
                index: 0,
                sub: 0,
                op: SdoOp::ReadRegister { address, len },
                response: None,
            },
            timeout,
        )
    }

    /// Write `data` (at most [`MAX_SDO_BYTES`]) to the ESC registers of the subdevice at
    /// `position` from `address`.
    pub fn write_register(
        &self,
        position: u16,
        address: u16,
        data: &[u8],
        timeout: Duration,
    ) -> Result<(), SdoFailure> {
        let data = SdoData::new(data).ok_or(SdoFailure::TooLong {
            len: data.len(),
            max: MAX_SDO_BYTES,
        })?;
        self.transfer(
            SdoRequest {
                position,
                index: 0,
                sub: 0,
                op: SdoOp::WriteRegister { address, data },
                response: None,
            },
            timeout,
        )
        .map(drop)
    }

    /// Read the send mailbox of the subdevice at `position` once if it is full
    /// ([`SdoOp::PollMailbox`]): true when a mailbox was read.
    pub fn poll_mailbox(&self, position: u16, timeout: Duration) -> Result<bool, SdoFailure> {
        self.transfer(
            SdoRequest {
                position,
                index: 0,
                sub: 0,
                op: SdoOp::PollMailbox,
                response: None,
            },
            timeout,
        )
        .map(|d| !d.as_slice().is_empty())
    }

    /// Queue `request` and wait up to `timeout` for its reply.
    pub fn transfer(&self, request: SdoRequest, timeout: Duration) -> Result<SdoData, SdoFailure> {
        self.exchange(request, timeout).map(|(d, _)| d)
    }

    /// Send `mailbox` (another protocol than CoE: FoE) to the subdevice at `position` and wait
    /// up to `timeout` for the next mailbox of its type ([`SdoOp::Mailbox`]).
    pub fn mailbox(
        &self,
        position: u16,
        mailbox: &[u8],
        timeout: Duration,
    ) -> Result<MailboxData, SdoFailure> {
        let m = MailboxData::new(mailbox).ok_or(SdoFailure::TooLong {
            len: mailbox.len(),
            max: MAX_MAILBOX,
        })?;
        let request = SdoRequest {
            position,
            index: 0,
            sub: 0,
            op: SdoOp::Mailbox(m),
            response: None,
        };
        match self.exchange(request, timeout)? {
            (_, Some(reply)) => Ok(reply),
            (_, None) => Err(SdoFailure::Malformed("no reply mailbox")),
        }
    }

    /// Send `mailbox` to the subdevice at `position` without waiting for a reply
    /// ([`SdoOp::MailboxSend`]); returns once it is in the device's receive mailbox.
    pub fn mailbox_send(
        &self,
        position: u16,
        mailbox: &[u8],
        timeout: Duration,
    ) -> Result<(), SdoFailure> {
        let m = MailboxData::new(mailbox).ok_or(SdoFailure::TooLong {
            len: mailbox.len(),
            max: MAX_MAILBOX,
        })?;
        let request = SdoRequest {
            position,
            index: 0,
            sub: 0,
            op: SdoOp::MailboxSend(m),
            response: None,
        };
        self.exchange(request, timeout).map(drop)
    }

    fn exchange(
        &self,
        request: SdoRequest,
        timeout: Duration,
    ) -> Result<(SdoData, Option<MailboxData>), SdoFailure> {
        let mut ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        // Replies of earlier callers that gave up are dropped here: ours is the last one queued.
        while ends.replies.pop().is_ok() {}
        ends.requests
            .push(request)
            .map_err(|_| SdoFailure::QueueFull)?;
        let end = Instant::now() + timeout;
        loop {
            if let Ok(r) = ends.replies.pop()
                && r.request == request
            {
                return r.result.map(|d| (d, r.mailbox));
            }
            if Instant::now() >= end {
                return Err(SdoFailure::NotCycling);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Park the subdevice at `position` ([`SdoOp::Park`]).
    pub fn park(&self, position: u16, timeout: Duration) -> Result<(), SdoFailure> {
        self.transfer(
            SdoRequest {
                position,
                index: 0,
                sub: 0,
                op: SdoOp::Park,
                response: None,
            },
            timeout,
        )
        .map(drop)
    }

    /// Hand the parked subdevice at `position` back to its recovery ([`SdoOp::HandBack`]).
    pub fn hand_back(&self, position: u16, timeout: Duration) -> Result<(), SdoFailure> {
        self.transfer(
            SdoRequest {
                position,
                index: 0,
                sub: 0,
                op: SdoOp::HandBack,
                response: None,
            },
            timeout,
        )
        .map(drop)
    }

    /// Read `index:sub` of the subdevice at `position`.
    pub fn read(
        &self,
        position: u16,
        index: u16,
        sub: u8,
        timeout: Duration,
    ) -> Result<SdoData, SdoFailure> {
        self.transfer(
            SdoRequest {
                position,
                index,
                sub,
                op: SdoOp::Read,
                response: None,
            },
            timeout,
        )
    }

    /// Write `value` to `index:sub` of the subdevice at `position`.
    pub fn write(
        &self,
        position: u16,
        index: u16,
        sub: u8,
        value: &[u8],
        timeout: Duration,
    ) -> Result<(), SdoFailure> {
        self.write_within(position, (index, sub), value, None, timeout)
    }

    /// [`SdoClient::write`] whose device may take `response` to answer
    /// ([`SdoRequest::response`]; None: the service's); `timeout` is the caller's wait, which
    /// must cover it.
    pub fn write_within(
        &self,
        position: u16,
        (index, sub): (u16, u8),
        value: &[u8],
        response: Option<Duration>,
        timeout: Duration,
    ) -> Result<(), SdoFailure> {
        let data = SdoData::new(value).ok_or(SdoFailure::TooLong {
            len: value.len(),
            max: MAX_SDO_BYTES,
        })?;
        self.transfer(
            SdoRequest {
                position,
                index,
                sub,
                op: SdoOp::Write(data),
                response,
            },
            timeout,
        )
        .map(drop)
    }
}

impl SdoService {
    /// Requests served so far.
    pub fn served(&self) -> u64 {
        self.served
    }

    /// The time per cycle for SDO traffic.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// Emergencies dropped because the ring was full.
    pub fn emergencies_dropped(&self) -> u64 {
        self.unasked.emergencies_dropped
    }

    /// Mailboxes of other protocols dropped because their ring was full.
    pub fn set_aside_dropped(&self) -> u64 {
        self.unasked.set_aside_dropped
    }

    /// How long a transfer waits for the device (default: the blocking client's).
    pub fn set_timeouts(&mut self, timeouts: Timeouts) {
        self.timeouts = timeouts;
    }
}

/// A subdevice's mailbox reached through the queue during OP, for another protocol's client
/// (FoE: `foe::Client::new(&mut queue_mailbox)`): every request is one queue request, served by
/// the cyclic thread within its budget after the cycle's own work, on the subdevice's one counter
/// (SDO requests of other threads interleave between the packets).
pub struct QueueMailbox<'c> {
    client: &'c SdoClient,
    position: u16,
    geometry: Geometry,
    timeout: Duration,
}

impl SdoClient {
    /// The mailbox of the subdevice at `position` through this queue (its geometry read from its
    /// SM registers through the queue); each request waits up to `timeout` for its reply.
    pub fn queue_mailbox(
        &self,
        position: u16,
        timeout: Duration,
    ) -> Result<QueueMailbox<'_>, SdoFailure> {
        let r = self.read_register(position, 0x0800, 16, timeout)?;
        let regs: [u8; 16] = r
            .as_slice()
            .try_into()
            .map_err(|_| SdoFailure::Malformed("short SM register read"))?;
        Ok(QueueMailbox {
            client: self,
            position,
            geometry: geometry_of(&regs)?,
            timeout,
        })
    }
}

impl QueueMailbox<'_> {
    fn error(&self, what: &str, e: SdoFailure) -> crate::mailbox::Error {
        match e {
            SdoFailure::Timeout => crate::mailbox::Error::Timeout {
                position: self.position,
                step: format!("{what}: response"),
                timeout: Timeouts::default().response,
            },
            e => crate::mailbox::Error::Queue {
                position: self.position,
                what: what.to_string(),
                why: e.to_string(),
            },
        }
    }
}

impl crate::mailbox::Transport for QueueMailbox<'_> {
    fn position(&self) -> u16 {
        self.position
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn send(&mut self, req: &[u8], what: &str) -> Result<(), crate::mailbox::Error> {
        self.client
            .mailbox_send(self.position, req, self.timeout)
            .map_err(|e| self.error(what, e))
    }

    fn transact(&mut self, req: &[u8], what: &str) -> Result<Vec<u8>, crate::mailbox::Error> {
        self.client
            .mailbox(self.position, req, self.timeout)
            .map(|m| m.as_slice().to_vec())
            .map_err(|e| self.error(what, e))
    }

    /// A mailbox of `kind` the cyclic thread set aside for this subdevice, else one
    /// [`SdoOp::PollMailbox`] request (SM1 read once if full; what it finds of another protocol
    /// than CoE goes to the set-aside ring) and a second look.
    fn poll(&mut self, kind: u8, what: &str) -> Result<Option<Vec<u8>>, crate::mailbox::Error> {
        if let Some(m) = self.take_set_aside(kind) {
            return Ok(Some(m));
        }
        let read = self
            .client
            .poll_mailbox(self.position, self.timeout)
            .map_err(|e| self.error(what, e))?;
        Ok(if read {
            self.take_set_aside(kind)
        } else {
            None
        })
    }

    fn take_set_aside(&mut self, kind: u8) -> Option<Vec<u8>> {
        self.client
            .take_set_aside_of(self.position, kind)
            .map(|m| m.mailbox().to_vec())
    }
}

/// Whether a transfer is in progress (the cyclic thread spends its budget only then).
pub(crate) struct Busy(Cell<bool>);

impl Busy {
    pub(crate) fn new() -> Self {
        Busy(Cell::new(false))
    }
    pub(crate) fn get(&self) -> bool {
        self.0.get()
    }
}

/// The next request: ready when one is queued, else pending without registering a waker (the
/// cyclic thread polls once per cycle).
struct Next<'a>(&'a mut rtrb::Consumer<SdoRequest>);

impl Future for Next<'_> {
    type Output = SdoRequest;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<SdoRequest> {
        match self.0.pop() {
            Ok(r) => Poll::Ready(r),
            Err(_) => Poll::Pending,
        }
    }
}

/// Serve requests forever (the cyclic thread drops the future at the end of the phase; a
/// transfer cut short there is answered [`SdoFailure::NotCycling`] by the client's timeout).
pub(crate) async fn serve(
    svc: &mut SdoService,
    md: &MainDevice<'static>,
    addresses: &[u16],
    board: Option<&crate::subdevice_recovery::Board>,
    busy: &Busy,
) {
    // A new phase: the mailboxes may have been set up anew (bring-up, recovery).
    svc.stations.fill(None);
    loop {
        let request = Next(&mut svc.requests).await;
        busy.0.set(true);
        let result = match request.op {
            SdoOp::Park | SdoOp::HandBack => parking(svc, board, &request),
            _ => transfer(svc, md, addresses, board, &request).await,
        };
        busy.0.set(false);
        svc.served += 1;
        let mailbox = match (&result, request.op) {
            (Ok(_), SdoOp::Mailbox(_)) => Some(svc.reply),
            _ => None,
        };
        // A full reply ring means the clients stopped reading: the oldest caller has given up.
        let _ = svc.replies.push(SdoReply {
            request,
            result,
            mailbox,
        });
    }
}

/// [`SdoOp::Park`] and [`SdoOp::HandBack`] on the recovery's board.
fn parking(
    svc: &mut SdoService,
    board: Option<&crate::subdevice_recovery::Board>,
    r: &SdoRequest,
) -> Result<SdoData, SdoFailure> {
    let board = board.ok_or(SdoFailure::Refused(
        "no per-subdevice recovery on this master ([health] recovery = \"segment\"): one \
         device of a running segment cannot be taken out alone",
    ))?;
    let i = usize::from(r.position);
    if i >= svc.stations.len() {
        return Err(SdoFailure::NoSubdevice(r.position));
    }
    // Its mailbox will be set up anew (BOOT, then the recovery's PRE-OP).
    svc.stations[i] = None;
    let done = if r.op == SdoOp::Park {
        board.park(i)
    } else {
        board.hand_back(i)
    };
    done.map(|()| EMPTY).map_err(SdoFailure::Refused)
}

/// Whether a register write of `len` bytes at `reg` may change the mailbox geometry: the
/// SM0/SM1 registers (0x0800..0x080F), or the AL control (0x0120: INIT disables the mailbox
/// sync managers, BOOT runs another mailbox).
fn moves_mailbox(reg: u16, len: usize) -> bool {
    let (start, end) = (u32::from(reg), u32::from(reg) + len as u32);
    let overlaps = |a: u32, b: u32| start < b && a < end;
    overlaps(0x0800, 0x0810) || overlaps(0x0120, 0x0122)
}

async fn transfer(
    svc: &mut SdoService,
    md: &MainDevice<'static>,
    addresses: &[u16],
    board: Option<&crate::subdevice_recovery::Board>,
    r: &SdoRequest,
) -> Result<SdoData, SdoFailure> {
    let i = usize::from(r.position);
    let address = match addresses.get(i) {
        Some(&a) => a,
        // A member of an optional group absent at bring-up (after ethercrab's group on the
        // board): its station address is the one its join gives it. Absent, it does not answer.
        None if board.is_some_and(|b| i < b.positions()) => crate::region::station_address(i),
        None => return Err(SdoFailure::NoSubdevice(r.position)),
    };
    if let SdoOp::ReadRegister { address: reg, len } = r.op {
        let n = usize::from(len).min(MAX_SDO_BYTES);
        if n != usize::from(len) || n == 0 {
            return Err(SdoFailure::Invalid(
                "register read of 1 to MAX_SDO_BYTES bytes",
            ));
        }
        let mut d = EMPTY;
        let got = Command::fprd(address, reg)
            .receive_slice(md, u16::from(len))
            .await
            .map_err(failure)?;
        if got.len() < n || !d.extend(&got[..n]) {
            return Err(SdoFailure::Malformed("short register read"));
        }
        return Ok(d);
    }
    if let SdoOp::WriteRegister { address: reg, data } = r.op {
        if data.as_slice().is_empty() {
            return Err(SdoFailure::Invalid("no data to write"));
        }
        if moves_mailbox(reg, data.as_slice().len())
            && let Some(s) = svc.stations.get_mut(usize::from(r.position))
        {
            *s = None;
        }
        Command::fpwr(address, reg)
            .send(md, data.as_slice())
            .await
            .map_err(failure)?;
        return Ok(EMPTY);
    }
    if let Some(why) = board.and_then(|b| b.mailbox_refusal(i)) {
        return Err(SdoFailure::Refused(why));
    }
    let slot = svc
        .stations
        .get_mut(i)
        .ok_or(SdoFailure::NoSubdevice(r.position))?;
    let station = match slot {
        Some(s) => *s,
        None => {
            let g = read_geometry(md, address).await?;
            let s = Station {
                geometry: g,
                counter: Counter::default(),
                answered: false,
            };
            *slot = Some(s);
            s
        }
    };
    let mut io = Io {
        md,
        address,
        position: r.position,
        st: station,
        timeouts: Timeouts {
            response: r.response.unwrap_or(svc.timeouts.response),
            ..svc.timeouts
        },
        out: &mut svc.out,
        inp: &mut svc.inp,
        unasked: &mut svc.unasked,
        want: crate::mailbox::kind::COE,
    };
    let result = match r.op {
        SdoOp::Read => upload(&mut io, r.index, r.sub).await,
        SdoOp::Write(d) => download(&mut io, r.index, r.sub, d.as_slice())
            .await
            .map(|()| EMPTY),
        SdoOp::PollMailbox => io.poll().await,
        SdoOp::Mailbox(m) => io.other(m.as_slice(), Some(&mut svc.reply)).await,
        SdoOp::MailboxSend(m) => io.other(m.as_slice(), None).await,
        SdoOp::ReadRegister { .. }
        | SdoOp::WriteRegister { .. }
        | SdoOp::Park
        | SdoOp::HandBack => Err(SdoFailure::Invalid("not a mailbox transfer")),
    };
    let st = io.st;
    svc.stations[usize::from(r.position)] = Some(st);
    result
}

const EMPTY: SdoData = SdoData {
    len: 0,
    bytes: [0; MAX_SDO_BYTES],
};

/// The mailbox geometry of the SM0/SM1 registers (see [`Geometry::read`]), checked against
/// the service's buffers.
async fn read_geometry(md: &MainDevice<'static>, address: u16) -> Result<Geometry, SdoFailure> {
    let r = Command::fprd(address, 0x0800)
        .receive_slice(md, 16)
        .await
        .map_err(failure)?;
    if r.len() < 16 {
        return Err(SdoFailure::Malformed("short SM register read"));
    }
    let mut regs = [0u8; 16];
    regs.copy_from_slice(&r[..16]);
    let g = geometry_of(&regs)?;
    Ok(g)
}

/// The mailbox of the SM0/SM1 registers 0x0800..0x080F, by the mailbox layer's one reading
/// of them ([`Geometry::from_registers`]), which also bounds it by the service's buffers.
fn geometry_of(r: &[u8; 16]) -> Result<Geometry, SdoFailure> {
    Geometry::from_registers(r).map_err(|e| {
        SdoFailure::Mailbox(match e {
            RegisterError::Disabled | RegisterError::NotMailbox => {
                "the subdevice has no enabled mailbox on SM0/SM1"
            }
            RegisterError::Size(rx, tx) if rx.min(tx) < crate::mailbox::MIN_MAILBOX => {
                "mailbox smaller than a CoE request"
            }
            RegisterError::Size(..) => "mailbox larger than one datagram",
        })
    })
}

/// One transfer's access to a subdevice's mailbox, in the service's buffers.
struct Io<'a> {
    md: &'a MainDevice<'static>,
    address: u16,
    position: u16,
    st: Station,
    timeouts: Timeouts,
    out: &'a mut [u8],
    inp: &'a mut [u8],
    unasked: &'a mut Unasked,
    /// The mailbox type a reply has (CoE but for [`SdoOp::Mailbox`]).
    want: u8,
}

/// What a mailbox read from SM1 means to a transfer.
enum Seen {
    /// A response for the transfer, in `inp`.
    Response,
    /// An emergency (kept) or another protocol's mailbox: look again.
    Skipped,
}

impl Io<'_> {
    fn next_counter(&mut self) -> u8 {
        self.st.counter.advance()
    }

    async fn sm_full(&mut self, sm: u8) -> Result<bool, SdoFailure> {
        let reg = 0x0805 + 8 * u16::from(sm);
        let s = Command::fprd(self.address, reg)
            .receive_slice(self.md, 1)
            .await
            .map_err(failure)?;
        Ok(s.first().is_some_and(|b| b & 0x08 != 0))
    }

    /// Read SM1 whole into `inp` (which frees it for the device's next mailbox) and sort it.
    async fn read_mailbox(&mut self) -> Result<Seen, SdoFailure> {
        let g = self.st.geometry;
        let n = usize::from(g.tx_size);
        {
            let r = Command::fprd(self.address, g.tx_offset)
                .receive_slice(self.md, g.tx_size)
                .await
                .map_err(failure)?;
            if r.len() < n {
                return Err(SdoFailure::Malformed("short send mailbox read"));
            }
            self.inp[..n].copy_from_slice(&r[..n]);
        }
        classify(&self.inp[..n], self.position, self.unasked, self.want)
    }

    /// Clear a stale mailbox, wait for SM0 to be free, and write `out[..len]` padded to the
    /// receive mailbox's size.
    async fn send(&mut self, len: usize) -> Result<(), SdoFailure> {
        let g = self.st.geometry;
        for _ in 0..4 {
            if !self.sm_full(g.tx_sm).await? {
                break;
            }
            // A stale answer of an abandoned transfer, or an emergency: read away.
            self.read_mailbox().await?;
        }
        let deadline = Instant::now() + self.timeouts.mailbox_free;
        while self.sm_full(g.rx_sm).await? {
            if Instant::now() >= deadline {
                return Err(SdoFailure::Timeout);
            }
        }
        let rx = usize::from(g.rx_size);
        if len > rx {
            return Err(SdoFailure::Invalid(
                "request larger than the receive mailbox",
            ));
        }
        self.out[len..rx].fill(0);
        Command::fpwr(self.address, g.rx_offset)
            .send(self.md, &self.out[..rx])
            .await
            .map_err(failure)
    }

    /// Wait for the next mailbox that is a response (emergencies go to the ring).
    async fn receive(&mut self) -> Result<(), SdoFailure> {
        let deadline = Instant::now() + self.timeouts.response;
        loop {
            if self.sm_full(self.st.geometry.tx_sm).await?
                && let Seen::Response = self.read_mailbox().await?
            {
                return Ok(());
            }
            // Checked after every mailbox too: a device that sends emergencies without end
            // still ends the wait.
            if Instant::now() >= deadline {
                return Err(SdoFailure::Timeout);
            }
        }
    }

    /// Send a mailbox of another protocol (stamped with the next counter) and, with `reply`,
    /// wait for the next one of its type and copy it there ([`SdoOp::Mailbox`]).
    async fn other(
        &mut self,
        m: &[u8],
        reply: Option<&mut MailboxData>,
    ) -> Result<SdoData, SdoFailure> {
        let kind = match m.get(5) {
            Some(b) if m.len() >= crate::mailbox::HEADER => b & 0x0f,
            _ => return Err(SdoFailure::Invalid("mailbox shorter than its header")),
        };
        // A raw CoE mailbox too (the mailbox gateway forwards a tool's requests as they are):
        // its reply is the next CoE mailbox that is not an emergency, as for Read and Write.
        if kind == crate::mailbox::kind::ERR {
            return Err(SdoFailure::Invalid(
                "an error mailbox is a device's reply, not a request",
            ));
        }
        if m.len() > usize::from(self.st.geometry.rx_size) {
            return Err(SdoFailure::Invalid(
                "mailbox larger than the receive mailbox",
            ));
        }
        self.out[..m.len()].copy_from_slice(m);
        let c = self.next_counter();
        self.out[5] = (self.out[5] & 0x8f) | (c << 4);
        let Some(reply) = reply else {
            self.send(m.len()).await?;
            return Ok(EMPTY);
        };
        self.want = kind;
        let r = self.transact(m.len()).await;
        self.want = crate::mailbox::kind::COE;
        r?;
        let n = usize::from(self.st.geometry.tx_size);
        let len = crate::mailbox::payload(&self.inp[..n])
            .map_err(|_| SdoFailure::Malformed("unparsable mailbox"))?
            .len()
            + crate::mailbox::HEADER;
        reply.bytes[..len].copy_from_slice(&self.inp[..len]);
        reply.len = len as u16;
        Ok(EMPTY)
    }

    /// Read SM1 once if it is full ([`SdoOp::PollMailbox`]).
    async fn poll(&mut self) -> Result<SdoData, SdoFailure> {
        if !self.sm_full(self.st.geometry.tx_sm).await? {
            return Ok(EMPTY);
        }
        // An emergency goes to the ring; a response nobody waits for any more is dropped.
        self.read_mailbox().await?;
        let mut d = EMPTY;
        d.extend(&[1]);
        Ok(d)
    }

    /// Send `out[..len]` and wait for the response (in `inp`).
    async fn transact(&mut self, len: usize) -> Result<(), SdoFailure> {
        self.send(len).await?;
        let first = !self.st.answered;
        match self.receive().await {
            // As the blocking client: the first request may repeat the counter of the last
            // request someone else sent, which a device discards (ETG.1000.4 §5.6); once, the
            // same request with the next counter.
            Err(SdoFailure::Timeout) if first => {
                let c = self.next_counter();
                self.out[5] = (self.out[5] & 0x8f) | (c << 4);
                self.send(len).await?;
                let r = self.receive().await;
                self.st.answered = r.is_ok();
                r
            }
            r => {
                self.st.answered |= r.is_ok();
                r
            }
        }
    }

    fn response(&self) -> Result<Response<'_>, SdoFailure> {
        let n = usize::from(self.st.geometry.tx_size);
        frame::parse(&self.inp[..n]).map_err(|_| SdoFailure::Malformed("unparsable mailbox"))
    }

    /// Tell the device the transfer is given up (best effort).
    async fn send_abort(&mut self, index: u16, sub: u8, code: u32) {
        let c = self.next_counter();
        let n = frame::abort_request(self.out, c, index, sub, code);
        let _ = self.send(n).await;
    }
}

/// Sort a mailbox read from SM1: a response, or an emergency (pushed to the ring) or another
/// protocol's mailbox to skip; a mailbox error reply or bytes that do not parse fail.
fn classify(
    buf: &[u8],
    position: u16,
    unasked: &mut Unasked,
    want: u8,
) -> Result<Seen, SdoFailure> {
    use crate::mailbox::kind;
    if want != kind::COE && crate::mailbox::kind_of(buf) == Some(want) {
        return match crate::mailbox::payload(buf) {
            Ok(_) => Ok(Seen::Response),
            Err(_) => Err(SdoFailure::Malformed("unparsable mailbox")),
        };
    }
    match frame::parse(buf) {
        Err(_) => Err(SdoFailure::Malformed("unparsable mailbox")),
        Ok(Response::MailboxError { detail }) => {
            Err(SdoFailure::Mailbox(crate::mailbox::error_text(detail)))
        }
        Ok(Response::OtherProtocol { .. }) => {
            // `parse` checked the header: its length fits `buf`; the service's mailboxes fit the
            // ring's slots (a longer one, which it never reads, is counted as dropped).
            let len = crate::mailbox::payload(buf).map_or(0, |p| p.len()) + crate::mailbox::HEADER;
            if len > MAX_MAILBOX {
                unasked.set_aside_dropped += 1;
                return Ok(Seen::Skipped);
            }
            let mut m = SetAside {
                position,
                len: len as u16,
                bytes: [0; MAX_MAILBOX],
            };
            m.bytes[..len].copy_from_slice(&buf[..len]);
            if unasked.set_aside.push(m).is_err() {
                unasked.set_aside_dropped += 1;
            }
            Ok(Seen::Skipped)
        }
        Ok(Response::Emergency {
            code,
            register,
            data,
        }) => {
            let e = Emergency {
                position,
                code,
                register,
                data,
            };
            if unasked.emergencies.push(e).is_err() {
                unasked.emergencies_dropped += 1;
            }
            Ok(Seen::Skipped)
        }
        Ok(_) if want == kind::COE => Ok(Seen::Response),
        // A CoE reply nobody waits for while another protocol's is awaited.
        Ok(_) => Ok(Seen::Skipped),
    }
}

fn aborted(code: u32) -> SdoFailure {
    SdoFailure::Aborted {
        code,
        text: crate::coe::abort_text(code),
    }
}

fn check_echo(want: (u16, u8), got: (u16, u8)) -> Result<(), SdoFailure> {
    if want != got {
        return Err(SdoFailure::Malformed("answer for another object"));
    }
    Ok(())
}

/// Upload `index:sub` (ETG.1000.6 §5.6.2.4..§5.6.2.6): expedited, normal or segmented.
async fn upload(io: &mut Io<'_>, index: u16, sub: u8) -> Result<SdoData, SdoFailure> {
    let c = io.next_counter();
    let n = frame::upload_request(io.out, c, index, sub, false);
    io.transact(n).await?;
    let mut data = EMPTY;
    let complete = match io.response()? {
        Response::Abort { code, .. } => return Err(aborted(code)),
        Response::UploadExpedited {
            index: i,
            sub: s,
            data: d,
        } => {
            check_echo((index, sub), (i, s))?;
            data.extend(d);
            return Ok(data);
        }
        Response::UploadNormal {
            index: i,
            sub: s,
            complete_size,
            data: d,
        } => {
            check_echo((index, sub), (i, s))?;
            let complete = complete_size as usize;
            if complete > MAX_SDO_BYTES {
                Err(complete)
            } else {
                // What follows the complete size is padding.
                data.extend(&d[..d.len().min(complete)]);
                Ok(complete)
            }
        }
        _ => return Err(SdoFailure::Malformed("not an upload response")),
    };
    let complete = match complete {
        Ok(c) => c,
        Err(len) => {
            io.send_abort(index, sub, 0x0504_0005).await;
            return Err(SdoFailure::TooLong {
                len,
                max: MAX_SDO_BYTES,
            });
        }
    };
    let mut toggle = false;
    while data.as_slice().len() < complete {
        let c = io.next_counter();
        let n = frame::upload_segment_request(io.out, c, toggle);
        io.transact(n).await?;
        let step = match io.response()? {
            Response::Abort { code, .. } => return Err(aborted(code)),
            Response::UploadSegment {
                toggle: t,
                last,
                data: seg,
            } => {
                if t != toggle {
                    Err((0x0503_0000, "segment toggle bit not changed"))
                } else if data.as_slice().len() + seg.len() > complete || !data.extend(seg) {
                    Err((0x0504_0001, "segments carry more than the complete size"))
                } else if last && data.as_slice().len() != complete {
                    Err((0x0504_0001, "last segment before the complete size"))
                } else if seg.is_empty() && !last {
                    Err((0x0504_0001, "empty segment that is not the last"))
                } else {
                    Ok(last)
                }
            }
            _ => return Err(SdoFailure::Malformed("not an upload segment response")),
        };
        match step {
            Ok(true) => break,
            Ok(false) => {}
            Err((code, why)) => {
                io.send_abort(index, sub, code).await;
                return Err(SdoFailure::Malformed(why));
            }
        }
        toggle = !toggle;
    }
    if data.as_slice().len() != complete {
        return Err(SdoFailure::Malformed(
            "last segment before the complete size",
        ));
    }
    Ok(data)
}

/// Download `data` to `index:sub` (ETG.1000.6 §5.6.2.1..§5.6.2.3): expedited up to 4 bytes,
/// normal when it fits the mailbox, segmented beyond.
async fn download(io: &mut Io<'_>, index: u16, sub: u8, data: &[u8]) -> Result<(), SdoFailure> {
    if data.is_empty() {
        return Err(SdoFailure::Invalid("no data to write"));
    }
    let rx = usize::from(io.st.geometry.rx_size);
    let c = io.next_counter();
    let (n, mut sent) = if data.len() <= 4 {
        (
            frame::download_expedited(io.out, c, index, sub, false, data),
            data.len(),
        )
    } else {
        let first = data.len().min(rx - frame::SDO_REQUEST_LEN);
        (
            frame::download_normal(
                io.out,
                c,
                index,
                sub,
                false,
                data.len() as u32,
                &data[..first],
            ),
            first,
        )
    };
    io.transact(n).await?;
    match io.response()? {
        Response::Abort { code, .. } => return Err(aborted(code)),
        Response::DownloadAck { index: i, sub: s } => check_echo((index, sub), (i, s))?,
        _ => return Err(SdoFailure::Malformed("not a download response")),
    }
    // Segments: mailbox header 6 + CoE 2 + segment header 1.
    let seg_max = rx - (frame::MBX_HEADER + 3);
    let mut toggle = false;
    while sent < data.len() {
        let k = (data.len() - sent).min(seg_max);
        let last = sent + k == data.len();
        let c = io.next_counter();
        let n = frame::download_segment(io.out, c, toggle, last, &data[sent..sent + k]);
        io.transact(n).await?;
        let ok = match io.response()? {
            Response::Abort { code, .. } => return Err(aborted(code)),
            Response::DownloadSegmentAck { toggle: t } => t == toggle,
            _ => return Err(SdoFailure::Malformed("not a download segment response")),
        };
        if !ok {
            io.send_abort(index, sub, 0x0503_0000).await;
            return Err(SdoFailure::Malformed("segment toggle bit not changed"));
        }
        sent += k;
        toggle = !toggle;
    }
    Ok(())
}

fn failure(e: ethercrab::error::Error) -> SdoFailure {
    use ethercrab::error::Error;
    match e {
        Error::Timeout(_) => SdoFailure::Timeout,
        Error::WorkingCounter { .. } => SdoFailure::Mailbox("working counter"),
        Error::Pdu(_) => SdoFailure::Mailbox("PDU error"),
        _ => SdoFailure::Mailbox("bus error"),
    }
}

/// Drive `service` until `until` (monotonic ns) or until it has nothing in flight. `poll_io`
/// moves frames (inline mode) or waits for a wake-up (thread mode); it returns false when
/// `until` has passed.
pub(crate) fn drive<F: Future<Output = ()>>(
    mut service: Pin<&mut F>,
    busy: &Busy,
    cx: &mut Context<'_>,
    mut poll_io: impl FnMut() -> bool,
) {
    loop {
        // The future never completes (it serves forever).
        let _ = service.as_mut().poll(cx);
        if !busy.get() || !poll_io() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_bounded() {
        assert!(SdoData::new(&[0; MAX_SDO_BYTES]).is_some());
        assert!(SdoData::new(&[0; MAX_SDO_BYTES + 1]).is_none());
        assert_eq!(SdoData::new(&[1, 2]).unwrap().as_slice(), &[1, 2]);
    }

    #[test]
    fn a_client_without_a_cycling_master_times_out_and_a_full_queue_is_refused() {
        let (client, _svc) = sdo_queue(1, Duration::from_micros(100));
        let r = client.read(0, 0x1000, 0, Duration::from_millis(5));
        assert_eq!(r, Err(SdoFailure::NotCycling));
        // The first request still sits in the queue (nobody serves it): the next is refused.
        let r = client.read(0, 0x1000, 0, Duration::from_millis(5));
        assert_eq!(r, Err(SdoFailure::QueueFull));
    }

    #[test]
    fn failures_carry_the_abort_text_of_coe() {
        assert_eq!(
            aborted(0x0602_0000),
            SdoFailure::Aborted {
                code: 0x0602_0000,
                text: crate::coe::abort_text(0x0602_0000)
            }
        );
    }

    fn sm_regs(rx: (u16, u16), tx: (u16, u16)) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[0..2].copy_from_slice(&rx.0.to_le_bytes());
        r[2..4].copy_from_slice(&rx.1.to_le_bytes());
        r[4] = 0x26;
        r[6] = 1;
        r[8..10].copy_from_slice(&tx.0.to_le_bytes());
        r[10..12].copy_from_slice(&tx.1.to_le_bytes());
        r[12] = 0x22;
        r[14] = 1;
        r
    }

    #[test]
    fn geometry_from_the_sm_registers() {
        let g = geometry_of(&sm_regs((0x1000, 128), (0x1080, 128))).unwrap();
        assert_eq!(
            (g.rx_offset, g.rx_size, g.tx_offset, g.tx_size),
            (0x1000, 128, 0x1080, 128)
        );
        let mut off = sm_regs((0x1000, 128), (0x1080, 128));
        off[6] = 0;
        assert!(matches!(geometry_of(&off), Err(SdoFailure::Mailbox(_))));
        assert!(geometry_of(&sm_regs((0x1000, 8), (0x1080, 128))).is_err());
        assert!(geometry_of(&sm_regs((0x1000, 128), (0x1080, 4000))).is_err());
    }

    fn unasked(n: usize) -> (Unasked, rtrb::Consumer<Emergency>, rtrb::Consumer<SetAside>) {
        let (em_tx, em_rx) = rtrb::RingBuffer::new(n);
        let (sa_tx, sa_rx) = rtrb::RingBuffer::new(n);
        let u = Unasked {
            emergencies: em_tx,
            emergencies_dropped: 0,
            set_aside: sa_tx,
            set_aside_dropped: 0,
        };
        (u, em_rx, sa_rx)
    }

    #[test]
    fn emergencies_go_to_the_ring_and_are_counted_when_it_is_full() {
        let (mut u, mut rx, _) = unasked(1);
        let em = [
            10, 0, 0, 0, 0, 0x13, 0, 0x10, 0x10, 0x82, 0x11, 1, 2, 3, 4, 5,
        ];
        assert!(matches!(classify(&em, 2, &mut u, 3), Ok(Seen::Skipped)));
        assert!(matches!(classify(&em, 2, &mut u, 3), Ok(Seen::Skipped)));
        assert_eq!(u.emergencies_dropped, 1);
        let e = rx.pop().unwrap();
        assert_eq!((e.position, e.code, e.register), (2, 0x8210, 0x11));
        // A mailbox error reply fails the transfer with its text.
        assert_eq!(
            classify(&[4, 0, 0, 0, 0, 0x00, 1, 0, 2, 0], 0, &mut u, 3).err(),
            Some(SdoFailure::Mailbox("the mailbox protocol is not supported"))
        );
    }

    #[test]
    fn other_protocols_are_set_aside_not_lost() {
        let (mut u, _, mut rx) = unasked(1);
        // An EoE mailbox of 3 bytes in a 16-byte read: kept as long as its header says.
        let mut eoe = [0u8; 16];
        eoe[0] = 3;
        eoe[5] = 0x22;
        eoe[6..9].copy_from_slice(&[7, 8, 9]);
        assert!(matches!(classify(&eoe, 4, &mut u, 3), Ok(Seen::Skipped)));
        assert!(matches!(classify(&eoe, 4, &mut u, 3), Ok(Seen::Skipped)));
        assert_eq!(u.set_aside_dropped, 1);
        let m = rx.pop().unwrap();
        assert_eq!((m.position, m.kind()), (4, crate::mailbox::kind::EOE));
        assert_eq!(m.mailbox(), &eoe[..9]);
        assert!(rx.pop().is_err());
    }

    #[test]
    fn a_consumer_takes_its_own_set_aside_mailboxes_and_leaves_the_others() {
        let (client, mut svc) = sdo_queue(2, Duration::from_micros(100));
        let mbx = |kind: u8, tag: u8| {
            let mut b = [0u8; 16];
            b[0] = 1;
            b[5] = kind;
            b[6] = tag;
            b
        };
        let (eoe, foe) = (crate::mailbox::kind::EOE, crate::mailbox::kind::FOE);
        for (pos, kind, tag) in [(1, foe, 1), (2, eoe, 2), (1, eoe, 3), (1, eoe, 4)] {
            let m = mbx(kind, tag);
            assert!(matches!(
                classify(&m, pos, &mut svc.unasked, 3),
                Ok(Seen::Skipped)
            ));
        }
        let tag = |m: Option<SetAside>| m.map(|m| (m.position, m.kind(), m.mailbox()[6]));
        // Position 1's EoE mailboxes in order; the FoE one and position 2's passed over, kept.
        assert_eq!(tag(client.take_set_aside_of(1, eoe)), Some((1, eoe, 3)));
        assert_eq!(tag(client.take_set_aside_of(1, eoe)), Some((1, eoe, 4)));
        assert_eq!(tag(client.take_set_aside_of(1, eoe)), None);
        assert_eq!(tag(client.take_set_aside_of(2, eoe)), Some((2, eoe, 2)));
        assert_eq!(tag(client.take_set_aside()), Some((1, foe, 1)));
        assert_eq!(tag(client.take_set_aside()), None);
    }

    proptest::proptest! {
        // What the cyclic thread does with a mailbox a device sent: whatever the bytes, an
        // outcome, never a panic; and a response that parsed is one the transfer can read.
        #[test]
        fn any_mailbox_is_sorted_without_panic(buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let (mut u, _em, _sa) = unasked(4);
            let _ = classify(&buf, 0, &mut u, 3);
            let _ = classify(&buf, 0, &mut u, 4);
            let mut d = EMPTY;
            if let Ok(Response::UploadNormal { data, .. } | Response::UploadSegment { data, .. }
                | Response::UploadExpedited { data, .. }) = frame::parse(&buf) {
                let fits = data.len() <= MAX_SDO_BYTES;
                proptest::prop_assert_eq!(d.extend(data), fits);
            }
        }
    }

    #[test]
    fn writes_to_the_mailbox_sms_or_the_al_control_forget_the_geometry() {
        assert!(moves_mailbox(0x0800, 16));
        assert!(moves_mailbox(0x0806, 1));
        assert!(moves_mailbox(0x080e, 1));
        assert!(moves_mailbox(0x0120, 2));
        assert!(moves_mailbox(0x011f, 2));
        assert!(!moves_mailbox(0x0810, 8));
        assert!(!moves_mailbox(0x0600, 16));
        assert!(!moves_mailbox(0x0122, 2));
        assert!(!moves_mailbox(0x07f0, 16));
    }
}
