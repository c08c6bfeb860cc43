//! SDO requests while the segment cycles.
//!
//! Other threads (a control socket, the application's own threads) queue requests through an
//! [`SdoClient`]; the cyclic thread serves them from its [`SdoService`] in a bounded time budget
//! **after** each cycle's own work (exchange, application, outputs, measurements) and never
//! before it, so a mailbox frame is never on the wire ahead of the cyclic frame and the cycle's
//! execution time does not include it. A transfer that does not finish within one budget goes on
//! in the next cycle's budget (its frame may still be in flight when the next cyclic frame goes
//! out: the two are independent PDUs, and the budget ends well before the next deadline).
//!
//! The queues are bounded ring buffers of fixed-size requests and replies ([`MAX_SDO_BYTES`] of
//! data each): nothing is allocated per request on either side. Transfers go through
//! ethercrab's CoE client (`SubDeviceRef::sdo_read` / `sdo_write`), which downloads values of
//! at most 4 bytes (expedited) in 0.7.1; a longer download is refused with
//! [`SdoFailure::TooLong`] before anything is sent.

use crate::cycle::OpGroup;
use ethercrab::MainDevice;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Largest value of one request or reply (bytes).
pub const MAX_SDO_BYTES: usize = 64;

/// Largest value ethercrab 0.7.1 downloads (an expedited transfer, ETG.1000.6 §5.6.2.1).
pub const MAX_DOWNLOAD_BYTES: usize = 4;

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
    /// Another bus or mailbox error (ethercrab's).
    #[error("mailbox error: {0}")]
    Mailbox(&'static str),
    /// The master stopped (or the request timed out on the client side) before the reply came.
    #[error("no reply: the master is not cycling")]
    NotCycling,
    /// The request queue is full.
    #[error("request queue full")]
    QueueFull,
}

/// A request's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdoReply {
    /// The request.
    pub request: SdoRequest,
    /// The value read (empty for a write), or why it failed.
    pub result: Result<SdoData, SdoFailure>,
}

struct Ends {
    requests: rtrb::Producer<SdoRequest>,
    replies: rtrb::Consumer<SdoReply>,
}

/// The requesting side: shared by any number of threads; one transfer at a time (replies come
/// back in request order, and a caller waits for its own).
pub struct SdoClient {
    ends: Mutex<Ends>,
}

/// The serving side, handed to the master in [`crate::RunSpec::sdo`].
pub struct SdoService {
    requests: rtrb::Consumer<SdoRequest>,
    replies: rtrb::Producer<SdoReply>,
    /// Time the cyclic thread may spend on mailbox traffic after each cycle.
    budget: Duration,
    served: u64,
}

/// A client and its service; `budget` is the time per cycle the cyclic thread may spend on SDO
/// traffic after its own work (keep it well below the period: the cycle clamps it to the time
/// left before half of the next period).
pub fn sdo_queue(capacity: usize, budget: Duration) -> (SdoClient, SdoService) {
    let (rq_tx, rq_rx) = rtrb::RingBuffer::new(capacity.max(1));
    let (rp_tx, rp_rx) = rtrb::RingBuffer::new(capacity.max(1));
    (
        SdoClient {
            ends: Mutex::new(Ends {
                requests: rq_tx,
                replies: rp_rx,
            }),
        },
        SdoService {
            requests: rq_rx,
            replies: rp_tx,
            budget,
            served: 0,
        },
    )
}

impl SdoClient {
    /// Queue `request` and wait up to `timeout` for its reply.
    pub fn transfer(&self, request: SdoRequest, timeout: Duration) -> Result<SdoData, SdoFailure> {
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
                return r.result;
            }
            if Instant::now() >= end {
                return Err(SdoFailure::NotCycling);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
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
    group: &OpGroup,
    busy: &Busy,
) {
    loop {
        let request = Next(&mut svc.requests).await;
        busy.0.set(true);
        let result = transfer(md, group, &request).await;
        busy.0.set(false);
        svc.served += 1;
        // A full reply ring means the clients stopped reading: the oldest caller has given up.
        let _ = svc.replies.push(SdoReply { request, result });
    }
}

async fn transfer(
    md: &MainDevice<'static>,
    group: &OpGroup,
    r: &SdoRequest,
) -> Result<SdoData, SdoFailure> {
    let sd = group
        .subdevice(md, usize::from(r.position))
        .map_err(|_| SdoFailure::NoSubdevice(r.position))?;
    match r.op {
        SdoOp::Read => {
            let v = sd
                .sdo_read::<heapless::Vec<u8, MAX_SDO_BYTES>>(r.index, r.sub)
                .await
                .map_err(failure)?;
            Ok(SdoData::new(&v).expect("bounded by the Vec's capacity"))
        }
        SdoOp::Write(d) => {
            if d.as_slice().len() > MAX_DOWNLOAD_BYTES {
                return Err(SdoFailure::TooLong {
                    len: d.as_slice().len(),
                    max: MAX_DOWNLOAD_BYTES,
                });
            }
            sd.sdo_write(r.index, r.sub, d.as_slice())
                .await
                .map_err(failure)?;
            Ok(SdoData::new(&[]).expect("empty"))
        }
    }
}

fn failure(e: ethercrab::error::Error) -> SdoFailure {
    use ethercrab::error::{Error, MailboxError};
    match e {
        Error::Mailbox(MailboxError::Aborted { code, .. }) => {
            let code = abort_code(code);
            SdoFailure::Aborted {
                code,
                text: abort_text(code),
            }
        }
        Error::Timeout(_) => SdoFailure::Timeout,
        Error::Mailbox(MailboxError::TooLong { .. }) => SdoFailure::TooLong {
            len: MAX_SDO_BYTES + 1,
            max: MAX_SDO_BYTES,
        },
        Error::Mailbox(_) => SdoFailure::Mailbox("mailbox protocol error"),
        Error::WorkingCounter { .. } => SdoFailure::Mailbox("working counter"),
        Error::Pdu(_) => SdoFailure::Mailbox("PDU error"),
        _ => SdoFailure::Mailbox("bus error"),
    }
}

/// The number of ethercrab's decoded abort code (it keeps only the enum).
fn abort_code(a: ethercrab::error::CoeAbortCode) -> u32 {
    if let ethercrab::error::CoeAbortCode::Unknown(c) = a {
        return c;
    }
    ABORT_CODES
        .iter()
        .copied()
        .find(|&c| ethercrab::error::CoeAbortCode::from(c) == a)
        .unwrap_or(0)
}

/// The standard abort codes (ETG.1000.6 Table 41).
const ABORT_CODES: [u32; 30] = [
    0x0503_0000,
    0x0504_0000,
    0x0504_0001,
    0x0504_0005,
    0x0601_0000,
    0x0601_0001,
    0x0601_0002,
    0x0601_0003,
    0x0601_0004,
    0x0601_0005,
    0x0601_0006,
    0x0602_0000,
    0x0604_0041,
    0x0604_0042,
    0x0604_0043,
    0x0604_0047,
    0x0606_0000,
    0x0607_0010,
    0x0607_0012,
    0x0607_0013,
    0x0609_0011,
    0x0609_0030,
    0x0609_0031,
    0x0609_0032,
    0x0609_0036,
    0x0800_0000,
    0x0800_0020,
    0x0800_0021,
    0x0800_0022,
    0x0800_0023,
];

/// The meaning of an SDO abort code (ETG.1000.6 Table 41; CiA 301 §7.2.4.3.17).
pub fn abort_text(code: u32) -> &'static str {
    match code {
        0x0503_0000 => "toggle bit not changed",
        0x0504_0000 => "SDO protocol timeout",
        0x0504_0001 => "client/server command specifier not valid or unknown",
        0x0504_0005 => "out of memory",
        0x0601_0000 => "unsupported access to an object",
        0x0601_0001 => "attempt to read a write-only object",
        0x0601_0002 => "attempt to write a read-only object",
        0x0601_0003 => "subindex cannot be written, SI0 must be 0 for write access",
        0x0601_0004 => "complete access not supported for this object",
        0x0601_0005 => "object length exceeds mailbox size",
        0x0601_0006 => "object mapped to RxPDO, SDO download blocked",
        0x0602_0000 => "the object does not exist in the object dictionary",
        0x0604_0041 => "the object cannot be mapped into the PDO",
        0x0604_0042 => {
            "the number and length of the objects to be mapped would exceed the PDO length"
        }
        0x0604_0043 => "general parameter incompatibility",
        0x0604_0047 => "general internal incompatibility in the device",
        0x0606_0000 => "access failed due to a hardware error",
        0x0607_0010 => "data type does not match, length of service parameter does not match",
        0x0607_0012 => "data type does not match, length of service parameter too high",
        0x0607_0013 => "data type does not match, length of service parameter too low",
        0x0609_0011 => "subindex does not exist",
        0x0609_0030 => "value range of parameter exceeded",
        0x0609_0031 => "value of parameter written too high",
        0x0609_0032 => "value of parameter written too low",
        0x0609_0036 => "maximum value is less than minimum value",
        0x0800_0000 => "general error",
        0x0800_0020 => "data cannot be transferred or stored to the application",
        0x0800_0021 => {
            "data cannot be transferred or stored to the application because of local control"
        }
        0x0800_0022 => {
            "data cannot be transferred or stored to the application because of the present device state"
        }
        0x0800_0023 => "object dictionary dynamic generation fails or no object dictionary present",
        _ => "unknown abort code",
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
    fn abort_codes_have_their_text() {
        assert_eq!(
            abort_text(0x0602_0000),
            "the object does not exist in the object dictionary"
        );
        assert_eq!(abort_text(0x1234_5678), "unknown abort code");
        for c in ABORT_CODES {
            assert_ne!(abort_text(c), "unknown abort code", "{c:#010x}");
            assert_eq!(abort_code(ethercrab::error::CoeAbortCode::from(c)), c);
        }
    }
}
