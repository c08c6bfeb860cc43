//! Frames of rtcat's own: several datagrams in one frame, sent and answered over the bus beside
//! ethercrab's frames.
//!
//! ethercrab 0.7.1 sends one PDU per frame through its public API (`Command::…receive`; the
//! frame builder its group's cycle packs with, `alloc_frame`/`push_pdu`, is crate-private), so
//! reading one register of every device on the segment — the station address of each position,
//! to tell where a device is ([`crate::place::sweep`]) — costs a frame per device. These frames
//! carry a source MAC address of their own ([`OWN_MAC`]), so the bus tells their replies from
//! ethercrab's by it ([`crate::bus::classify`]) and hands them here; their datagram indices are
//! theirs alone, one tag per frame, so a late reply to a frame given up is never taken for
//! another's.
//!
//! A thread that wants an exchange ([`OwnFrames::exchange`]) fills a free slot and waits; the
//! thread that pumps the bus (the cyclic thread on an inline bus, else the TX/RX thread) sends
//! ready slots with ethercrab's frames and copies each reply into its slot. The cyclic thread
//! has slots of its own for the frames it sends every cycle ([`OwnFrames::submit_cycle`]: the
//! process data and AL states, [`crate::own_cycle`], and the region of members absent at
//! bring-up, [`crate::region`]), polled instead of waited for. The
//! pump only ever tries a slot's lock (it never waits for one) and holds it for a copy, never
//! across a send: the real-time path neither blocks nor allocates here
//! (`tests/region_alloc.rs` counts the cyclic thread's allocations with the region's frame and
//! the worker's count of the devices going through it).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, TryLockError};
use std::task::Waker;
use std::time::{Duration, Instant};

use rtcat_packet::{
    DATAGRAM_HEADER_LEN, ECAT_HEADER_LEN, ETH_HEADER_LEN, ETHERCAT_ETHERTYPE, WKC_LEN,
};

/// The source MAC address of rtcat's own frames: ethercrab's ([`crate::bus::MASTER_MAC`]) with
/// another last octet, still locally administered and unicast.
pub const OWN_MAC: [u8; 6] = [0x10, 0x10, 0x10, 0x10, 0x10, 0x11];
/// The source MAC address of a reply to one: bit 1 of the first octet set by the first
/// subdevice that processed it (as for ethercrab's, [`crate::bus::REPLY_MAC`]).
pub const OWN_REPLY_MAC: [u8; 6] = {
    let mut m = OWN_MAC;
    m[0] |= 0x02;
    m
};

/// The cyclic thread's slots ([`OwnFrames::submit_cycle`]): the cycle's frames
/// ([`crate::own_cycle`]: at most [`crate::own_cycle::MAX_FRAMES`]) and the region's one
/// ([`REGION_SLOT`]). The frames of a cycle go out together, one after the other.
pub(crate) const CYCLE_SLOTS: usize = 40;
/// The cyclic thread's slot of the region's frame ([`crate::region`]): the last of its slots.
pub(crate) const REGION_SLOT: usize = CYCLE_SLOTS - 1;
/// Slots: exchanges in flight at once. The first [`CYCLE_SLOTS`] are the cyclic thread's, the
/// others serve [`OwnFrames::exchange`] (the recovery worker needs one).
const SLOTS: usize = CYCLE_SLOTS + 3;
/// Most datagrams in one frame: far below what an ESC processes (any number that fits the
/// frame) and the simulator's limit (128); a batch with more goes out in several frames.
pub(crate) const MAX_DATAGRAMS: usize = 64;
/// Most datagram bytes in one frame (the EtherCAT header's 11-bit length, within a 1500-byte
/// Ethernet payload).
const MAX_DATAGRAM_BYTES: usize = 1500 - ECAT_HEADER_LEN;
/// How long a thread that finds every slot taken waits before it looks again.
const SLOT_WAIT: Duration = Duration::from_micros(200);

/// EtherCAT header type of frames carrying datagrams (ETG.1000.4).
const ECAT_TYPE_DATAGRAMS: u16 = 1;
/// The "another datagram follows" bit of a datagram's length word.
const MORE: u16 = 0x8000;

/// Datagram commands (ETG.1000.4 Table 12).
mod cmd {
    pub(super) const APRD: u8 = 1;
    pub(super) const FPRD: u8 = 4;
    pub(super) const BRD: u8 = 7;
    pub(super) const LRW: u8 = 12;
    pub(super) const FRMW: u8 = 14;
}

/// Slot states. The requester moves FREE → FILLING → READY and takes ANSWERED back to FREE
/// (or gives up READY/SENT → FREE); the pump moves READY → SENT → RECEIVING → ANSWERED.
mod state {
    pub(super) const FREE: u8 = 0;
    pub(super) const FILLING: u8 = 1;
    pub(super) const READY: u8 = 2;
    pub(super) const SENT: u8 = 3;
    pub(super) const RECEIVING: u8 = 4;
    pub(super) const ANSWERED: u8 = 5;
}

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OwnError {
    /// No reply within the timeout (nobody pumps the bus, the link is down, or the frame was
    /// lost), or no slot came free.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The reply does not carry the datagrams sent (another length, command or index).
    #[error("a reply that does not match the frame sent: {0}")]
    Mismatch(&'static str),
}

impl OwnError {
    /// As the master's error, in ethercrab's terms (its PDU timeout; a reply that cannot be
    /// decoded), with what was being done.
    pub(crate) fn into_error(self, stage: impl Into<String>) -> crate::error::Error {
        use ethercrab::error::{Error as E, PduError, TimeoutError};
        let source = match self {
            OwnError::Timeout(_) => E::Timeout(TimeoutError::Pdu),
            OwnError::Mismatch(_) => E::Pdu(PduError::Decode),
        };
        crate::error::Error::bus(stage, source)
    }
}

/// A thread's way to the bus's own frames: the frames and how long to wait for a reply.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnBus<'a> {
    pub(crate) frames: &'a OwnFrames,
    pub(crate) timeout: Duration,
}

impl OwnBus<'_> {
    /// [`OwnFrames::exchange`] with this bus's timeout.
    pub(crate) fn exchange(&self, batch: &Batch) -> Result<Replies, OwnError> {
        self.frames.exchange(batch, self.timeout)
    }
}

/// The frames shared by the bus and the threads that exchange through it.
#[derive(Debug)]
pub(crate) struct OwnFrames {
    slots: [Slot; SLOTS],
    /// The pump's waker: a requester wakes it when a slot is ready.
    waker: atomic_waker::AtomicWaker,
    next_tag: AtomicU8,
}

#[derive(Debug, Default)]
struct Slot {
    state: AtomicU8,
    /// The tag (every datagram's index) of the frame in the slot.
    tag: AtomicU8,
    data: Mutex<SlotData>,
}

#[derive(Debug, Default)]
struct SlotData {
    /// The frame to send, then its reply.
    frame: Vec<u8>,
    /// Woken by the reply.
    owner: Option<Owner>,
}

/// Who waits for a slot's reply.
#[derive(Debug, Clone)]
enum Owner {
    /// A thread parked in [`OwnFrames::exchange`].
    Thread(std::thread::Thread),
    /// The cyclic thread's exchange ([`OwnFrames::submit_cycle`]).
    Waker(Waker),
}

impl Owner {
    fn wake(self) {
        match self {
            Owner::Thread(t) => t.unpark(),
            Owner::Waker(w) => w.wake(),
        }
    }
}

impl Default for OwnFrames {
    fn default() -> Self {
        OwnFrames {
            slots: std::array::from_fn(|_| Slot::default()),
            waker: atomic_waker::AtomicWaker::new(),
            next_tag: AtomicU8::new(0),
        }
    }
}

/// Datagrams to send together: built by the requester, split into frames of at most
/// [`MAX_DATAGRAMS`] datagrams and [`MAX_DATAGRAM_BYTES`] bytes.
#[derive(Debug, Default, Clone)]
pub(crate) struct Batch {
    /// (command, address, data length) of each datagram, in order.
    datagrams: Vec<(u8, u32, u16)>,
}

/// The answers of a [`Batch`], datagram by datagram in the order they were added.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Replies {
    answers: Vec<(u16, Vec<u8>)>,
}

impl Batch {
    pub(crate) fn new() -> Self {
        Batch::default()
    }

    /// Read `len` bytes of `register` from the device at `position` (auto-increment
    /// addressing: the address is the negated position, ETG.1000.4 §5.3.1).
    pub(crate) fn aprd(&mut self, position: u16, register: u16, len: u16) -> usize {
        self.push(cmd::APRD, 0u16.wrapping_sub(position), register, len)
    }

    /// Read `len` bytes of `register` from the device with station address `station`.
    pub(crate) fn fprd(&mut self, station: u16, register: u16, len: u16) -> usize {
        self.push(cmd::FPRD, station, register, len)
    }

    /// Read `len` bytes of `register` from every device (the data is their OR, the working
    /// counter the number of devices that read).
    pub(crate) fn brd(&mut self, register: u16, len: u16) -> usize {
        self.push(cmd::BRD, 0, register, len)
    }

    /// Read and write `len` bytes at logical address `logical` (the FMMUs of every device
    /// that maps them; working counter +1 per device that read, +2 per device that wrote).
    pub(crate) fn lrw(&mut self, logical: u32, len: u16) -> usize {
        self.push_at(cmd::LRW, logical, len)
    }

    /// Read `len` bytes of `register` at the device with station address `station` and write
    /// them into the same register of every device after it (ETG.1000.4 Table 12: the
    /// distribution of the reference clock's system time).
    pub(crate) fn frmw(&mut self, station: u16, register: u16, len: u16) -> usize {
        self.push(cmd::FRMW, station, register, len)
    }

    /// The most data one datagram can carry in a frame of its own (a longer one is cut to it).
    pub(crate) const MAX_DATA: usize = MAX_DATAGRAM_BYTES - DATAGRAM_HEADER_LEN - WKC_LEN;

    /// Bytes one datagram of `len` data bytes takes in a frame.
    pub(crate) const fn size(len: usize) -> usize {
        DATAGRAM_HEADER_LEN + len + WKC_LEN
    }

    /// Room for datagrams in one frame (bytes).
    pub(crate) const FRAME_ROOM: usize = MAX_DATAGRAM_BYTES;

    /// Every frame of the batch (data and working counters zero, the index bytes too: the tag
    /// is written when a frame is sent), in order.
    pub(crate) fn encoded(&self) -> Vec<Vec<u8>> {
        self.frames()
            .into_iter()
            .map(|range| {
                let mut f = Vec::new();
                self.encode(range, &mut f);
                f
            })
            .collect()
    }

    fn push(&mut self, command: u8, adp: u16, ado: u16, len: u16) -> usize {
        self.push_at(command, u32::from(adp) | u32::from(ado) << 16, len)
    }

    fn push_at(&mut self, command: u8, address: u32, len: u16) -> usize {
        let len = len.min(Self::MAX_DATA as u16);
        self.datagrams.push((command, address, len));
        self.datagrams.len() - 1
    }

    /// The whole batch as one frame (data and working counters zero), or None when it needs
    /// more than one.
    pub(crate) fn one_frame(&self) -> Option<Vec<u8>> {
        match self.frames().as_slice() {
            [range] => {
                let mut f = Vec::new();
                self.encode(range.clone(), &mut f);
                Some(f)
            }
            _ => None,
        }
    }

    /// Datagrams in the batch.
    pub(crate) fn len(&self) -> usize {
        self.datagrams.len()
    }

    /// The datagrams of each frame: index ranges into `datagrams`.
    fn frames(&self) -> Vec<std::ops::Range<usize>> {
        let mut frames = Vec::new();
        let (mut start, mut bytes) = (0, 0);
        for (i, &(_, _, len)) in self.datagrams.iter().enumerate() {
            let size = DATAGRAM_HEADER_LEN + usize::from(len) + WKC_LEN;
            if i > start && (i - start == MAX_DATAGRAMS || bytes + size > MAX_DATAGRAM_BYTES) {
                frames.push(start..i);
                (start, bytes) = (i, 0);
            }
            bytes += size;
        }
        if start < self.datagrams.len() {
            frames.push(start..self.datagrams.len());
        }
        frames
    }

    /// The frame of datagrams `range` (index bytes 0: the tag is written when it is sent).
    fn encode(&self, range: std::ops::Range<usize>, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&[0xff; 6]);
        out.extend_from_slice(&OWN_MAC);
        out.extend_from_slice(&ETHERCAT_ETHERTYPE.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        let last = range.end - 1;
        for i in range {
            let (command, address, len) = self.datagrams[i];
            let more = if i < last { MORE } else { 0 };
            out.push(command);
            out.push(0);
            out.extend_from_slice(&address.to_le_bytes());
            out.extend_from_slice(&(len | more).to_le_bytes());
            out.extend_from_slice(&[0, 0]);
            out.resize(out.len() + usize::from(len) + WKC_LEN, 0);
        }
        let datagrams = (out.len() - ETH_HEADER_LEN - ECAT_HEADER_LEN) as u16;
        let header = datagrams | ECAT_TYPE_DATAGRAMS << 12;
        out[ETH_HEADER_LEN..ETH_HEADER_LEN + ECAT_HEADER_LEN]
            .copy_from_slice(&header.to_le_bytes());
    }
}

impl Replies {
    /// Datagram `i`'s working counter and data.
    pub(crate) fn get(&self, i: usize) -> Option<(u16, &[u8])> {
        self.answers.get(i).map(|(wkc, d)| (*wkc, d.as_slice()))
    }

    /// Datagram `i`'s data as a little-endian u16 when exactly one device read it (a
    /// position or station address reached one device: working counter 1).
    pub(crate) fn u16_of_one(&self, i: usize) -> Option<u16> {
        match self.get(i)? {
            (1, d) if d.len() >= 2 => Some(u16::from_le_bytes([d[0], d[1]])),
            _ => None,
        }
    }
}

/// Every datagram's index byte of `frame` set to `tag` (in place: no allocation).
fn tag_datagrams(frame: &mut [u8], tag: u8) {
    let mut at = ETH_HEADER_LEN + ECAT_HEADER_LEN;
    while at + DATAGRAM_HEADER_LEN + WKC_LEN <= frame.len() {
        frame[at + 1] = tag;
        let word = u16::from_le_bytes([frame[at + 6], frame[at + 7]]);
        if word & MORE == 0 {
            break;
        }
        at += DATAGRAM_HEADER_LEN + usize::from(word & 0x07ff) + WKC_LEN;
    }
}

/// Whether `reply` carries the datagrams of `sent`: as long as it, each datagram where it was
/// sent, as long and of the same command (a reply to another frame, or a damaged one, does
/// not). The cycle's frames and the region's are read only then.
pub(crate) fn answers(sent: &[u8], reply: &[u8]) -> bool {
    reply.len() == sent.len()
        && datagrams_of(reply).count() == datagrams_of(sent).count()
        && datagrams_of(reply)
            .zip(datagrams_of(sent))
            .all(|((a, la), (b, lb))| a == b && la == lb && reply[a] == sent[b])
}

/// Each datagram of `frame` as (offset of its header, data length).
pub(crate) fn datagrams_of(frame: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut at = Some(ETH_HEADER_LEN + ECAT_HEADER_LEN);
    std::iter::from_fn(move || {
        let off = at?;
        if off + DATAGRAM_HEADER_LEN + WKC_LEN > frame.len() {
            at = None;
            return None;
        }
        let word = u16::from_le_bytes([frame[off + 6], frame[off + 7]]);
        let len = usize::from(word & 0x07ff);
        at = (word & MORE != 0).then_some(off + DATAGRAM_HEADER_LEN + len + WKC_LEN);
        Some((off, len))
    })
}

impl OwnFrames {
    /// The next frame's tag: the cycle's with bit 7 set, the others' without, so that a late
    /// reply to one kind is never taken for the other; within a kind a reply would have to
    /// come 128 frames late (ethercrab's 8-bit PDU index has the same bound for its own).
    fn tag(&self, cycle: bool) -> u8 {
        self.next_tag.fetch_add(1, Ordering::Relaxed) & 0x7f | u8::from(cycle) << 7
    }

    /// Send `batch` (in as many frames as it needs, one after the other) and wait for every
    /// reply, `timeout` for each frame.
    pub(crate) fn exchange(&self, batch: &Batch, timeout: Duration) -> Result<Replies, OwnError> {
        let mut replies = Replies {
            answers: Vec::with_capacity(batch.len()),
        };
        let mut frame = Vec::new();
        for range in batch.frames() {
            batch.encode(range.clone(), &mut frame);
            let reply = self.one(&frame, timeout)?;
            let mut sent = datagrams_of(&frame);
            for (off, len) in datagrams_of(&reply) {
                let Some((s_off, s_len)) = sent.next() else {
                    return Err(OwnError::Mismatch("more datagrams than sent"));
                };
                if s_off != off || s_len != len || reply[off] != frame[off] {
                    return Err(OwnError::Mismatch("another datagram than sent"));
                }
                let data = &reply[off + DATAGRAM_HEADER_LEN..off + DATAGRAM_HEADER_LEN + len];
                let w = off + DATAGRAM_HEADER_LEN + len;
                let wkc = u16::from_le_bytes([reply[w], reply[w + 1]]);
                replies.answers.push((wkc, data.to_vec()));
            }
            if replies.answers.len() != range.end {
                return Err(OwnError::Mismatch("fewer datagrams than sent"));
            }
        }
        Ok(replies)
    }

    /// One frame out, its reply back (the reply's bytes, padding included).
    fn one(&self, frame: &[u8], timeout: Duration) -> Result<Vec<u8>, OwnError> {
        let deadline = Instant::now() + timeout;
        let slot = loop {
            let free = self.slots[CYCLE_SLOTS..].iter().find(|s| {
                s.state
                    .compare_exchange(
                        state::FREE,
                        state::FILLING,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            });
            if let Some(s) = free {
                break s;
            }
            if Instant::now() >= deadline {
                return Err(OwnError::Timeout(timeout));
            }
            std::thread::sleep(SLOT_WAIT);
        };
        let tag = self.tag(false);
        {
            let mut d = slot.data.lock().unwrap_or_else(|p| p.into_inner());
            d.frame.clear();
            d.frame.extend_from_slice(frame);
            tag_datagrams(&mut d.frame, tag);
            d.owner = Some(Owner::Thread(std::thread::current()));
        }
        slot.tag.store(tag, Ordering::Relaxed);
        slot.state.store(state::READY, Ordering::Release);
        self.waker.wake();
        loop {
            if slot.state.load(Ordering::Acquire) == state::ANSWERED {
                let reply = {
                    let mut d = slot.data.lock().unwrap_or_else(|p| p.into_inner());
                    d.owner = None;
                    std::mem::take(&mut d.frame)
                };
                slot.state.store(state::FREE, Ordering::Release);
                return Ok(reply);
            }
            let now = Instant::now();
            if now >= deadline {
                // Given up, unless the pump is copying the reply in right now.
                for from in [state::READY, state::SENT] {
                    if slot
                        .state
                        .compare_exchange(from, state::FREE, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        return Err(OwnError::Timeout(timeout));
                    }
                }
                std::thread::yield_now();
                continue;
            }
            std::thread::park_timeout(deadline - now);
        }
    }

    /// The cyclic thread: `frame` out through its slot `k` (< [`CYCLE_SLOTS`]), `waker` woken
    /// by the reply (a thread that pumps the bus itself passes a no-op one). Nothing is
    /// allocated once the slot's buffer has held a frame this long. False when the slot is
    /// still busy (a reply being copied in after the last cycle gave up) or `k` is no cycle
    /// slot: nothing sent this cycle.
    pub(crate) fn submit_cycle(&self, k: usize, frame: &[u8], waker: &Waker) -> bool {
        let Some(slot) = self.slots[..CYCLE_SLOTS].get(k) else {
            return false;
        };
        // A reply that came in after the last cycle gave up on it: not this cycle's.
        let _ = slot.state.compare_exchange(
            state::ANSWERED,
            state::FREE,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        if slot
            .state
            .compare_exchange(
                state::FREE,
                state::FILLING,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        let tag = self.tag(true);
        match slot.data.try_lock() {
            Ok(mut d) => {
                d.frame.clear();
                d.frame.extend_from_slice(frame);
                tag_datagrams(&mut d.frame, tag);
                if !matches!(&d.owner, Some(Owner::Waker(w)) if w.will_wake(waker)) {
                    d.owner = Some(Owner::Waker(waker.clone()));
                }
            }
            Err(_) => {
                slot.state.store(state::FREE, Ordering::Release);
                return false;
            }
        }
        slot.tag.store(tag, Ordering::Relaxed);
        slot.state.store(state::READY, Ordering::Release);
        self.waker.wake();
        true
    }

    /// The cyclic thread: the reply to its frame in slot `k` copied into `reply` (its length
    /// returned), when it has come; the slot is free again then.
    pub(crate) fn take_cycle(&self, k: usize, reply: &mut [u8]) -> Option<usize> {
        let slot = self.slots[..CYCLE_SLOTS].get(k)?;
        if slot.state.load(Ordering::Acquire) != state::ANSWERED {
            return None;
        }
        let n = match slot.data.try_lock() {
            Ok(d) => {
                let n = d.frame.len().min(reply.len());
                reply[..n].copy_from_slice(&d.frame[..n]);
                n
            }
            Err(_) => return None,
        };
        slot.state.store(state::FREE, Ordering::Release);
        Some(n)
    }

    /// The cyclic thread gave up on its frame in slot `k` (the cycle's deadline): a reply
    /// after this is not taken (or, being copied in right now, dropped at the next submit).
    pub(crate) fn abandon_cycle(&self, k: usize) {
        let Some(slot) = self.slots[..CYCLE_SLOTS].get(k) else {
            return;
        };
        for from in [state::READY, state::SENT] {
            if slot
                .state
                .compare_exchange(from, state::FREE, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// The pump's waker, woken when a slot is ready to send.
    pub(crate) fn register(&self, waker: &Waker) {
        self.waker.register(waker);
    }

    /// The pump: send every ready slot over `send` (told whether it is one of the cycle's
    /// frames: the cyclic thread's slots but the region's), copying it into `buf` first (the
    /// slot's lock is not held across the send); the cycle's frames first, in order. A slot
    /// whose lock is taken is left for the next pump. Returns how many were sent and how many
    /// failed to send.
    pub(crate) fn send_ready(
        &self,
        buf: &mut [u8],
        mut send: impl FnMut(&[u8], bool) -> std::io::Result<()>,
    ) -> (usize, usize) {
        let (mut sent, mut failed) = (0, 0);
        for (k, slot) in self.slots.iter().enumerate() {
            if slot.state.load(Ordering::Acquire) != state::READY {
                continue;
            }
            let len = match slot.data.try_lock() {
                Ok(d) if d.frame.len() <= buf.len() => {
                    buf[..d.frame.len()].copy_from_slice(&d.frame);
                    d.frame.len()
                }
                Ok(_) | Err(TryLockError::WouldBlock) => continue,
                Err(TryLockError::Poisoned(_)) => continue,
            };
            // Given up meanwhile: not sent.
            if slot
                .state
                .compare_exchange(
                    state::READY,
                    state::SENT,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            match send(&buf[..len], k < REGION_SLOT) {
                Ok(()) => sent += 1,
                // Left to the requester's timeout, as ethercrab's frames are.
                Err(_) => failed += 1,
            }
        }
        (sent, failed)
    }

    /// The pump: a reply to one of these frames (the bus checked it: EtherCAT, from
    /// [`OWN_REPLY_MAC`], lengths consistent). None when no slot waits for it (late after its
    /// timeout, or not ours), else whether it is one of the cycle's frames (as in
    /// [`OwnFrames::send_ready`]).
    pub(crate) fn receive(&self, frame: &[u8]) -> Option<bool> {
        let tag = frame.get(ETH_HEADER_LEN + ECAT_HEADER_LEN + 1).copied()?;
        for (k, slot) in self.slots.iter().enumerate() {
            if slot.tag.load(Ordering::Relaxed) != tag
                || slot
                    .state
                    .compare_exchange(
                        state::SENT,
                        state::RECEIVING,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_err()
            {
                continue;
            }
            let owner = match slot.data.try_lock() {
                Ok(mut d) => {
                    // Into the buffer of the frame sent: no allocation (Ethernet padding past
                    // its length is cut; a shorter reply leaves a shorter frame, which the
                    // requester refuses as a mismatch).
                    let n = frame.len().min(d.frame.len());
                    d.frame[..n].copy_from_slice(&frame[..n]);
                    d.frame.truncate(n);
                    d.owner.clone()
                }
                Err(_) => {
                    slot.state.store(state::SENT, Ordering::Release);
                    return None;
                }
            };
            slot.state.store(state::ANSWERED, Ordering::Release);
            if let Some(w) = owner {
                w.wake();
            }
            return Some(k < REGION_SLOT);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A segment of `n` devices, in process: answers an own frame as ESCs would for APRD of
    /// 0x0010 (the station address 0x1000 + position) and BRD (working counter `n`).
    fn answer(frame: &[u8], n: u16) -> Vec<u8> {
        let mut r = frame.to_vec();
        r[6] |= 0x02;
        let offs: Vec<(usize, usize)> = datagrams_of(frame).collect();
        for (off, len) in offs {
            let adp = u16::from_le_bytes([r[off + 2], r[off + 3]]);
            let w = off + DATAGRAM_HEADER_LEN + len;
            match r[off] {
                cmd::APRD => {
                    let position = 0u16.wrapping_sub(adp);
                    if position < n {
                        r[off + DATAGRAM_HEADER_LEN..w][..2]
                            .copy_from_slice(&(0x1000 + position).to_le_bytes());
                        r[w..w + 2].copy_from_slice(&1u16.to_le_bytes());
                    }
                }
                cmd::BRD => r[w..w + 2].copy_from_slice(&n.to_le_bytes()),
                _ => {}
            }
        }
        r
    }

    /// A pump on its own thread until `stop`: sends ready slots to [`answer`], replies come back
    /// after `delay`.
    fn pump(
        own: Arc<OwnFrames>,
        n: u16,
        delay: Duration,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<usize> {
        std::thread::spawn(move || {
            let mut buf = [0u8; 1536];
            let mut frames = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut out = Vec::new();
                own.send_ready(&mut buf, |f, _| {
                    out.push(answer(f, n));
                    Ok(())
                });
                frames += out.len();
                std::thread::sleep(delay);
                for r in out {
                    own.receive(&r);
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            frames
        })
    }

    /// Frames, a pump answering for `n` devices at once, and what stops it.
    type Pumped = (
        Arc<OwnFrames>,
        Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<usize>,
    );
    fn pumped(n: u16) -> Pumped {
        let own = Arc::new(OwnFrames::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let p = pump(own.clone(), n, Duration::ZERO, stop.clone());
        (own, stop, p)
    }

    /// The station address of positions `0..n`.
    fn addresses(n: u16) -> Batch {
        let mut b = Batch::new();
        for position in 0..n {
            b.aprd(position, 0x0010, 2);
        }
        b
    }

    #[test]
    fn a_batch_of_reads_is_one_frame_and_answers_in_order() {
        let (own, stop, p) = pumped(5);
        let mut b = addresses(8);
        let count = b.brd(0x0000, 1);
        let r = own.exchange(&b, Duration::from_secs(5)).expect("answered");
        let seen: Vec<Option<u16>> = (0..8).map(|i| r.u16_of_one(i)).collect();
        assert_eq!(
            seen,
            [
                Some(0x1000),
                Some(0x1001),
                Some(0x1002),
                Some(0x1003),
                Some(0x1004),
                None,
                None,
                None
            ]
        );
        assert_eq!(r.get(count).map(|(wkc, _)| wkc), Some(5));
        stop.store(true, Ordering::Relaxed);
        assert_eq!(p.join().unwrap(), 1, "one frame");
    }

    #[test]
    fn a_large_batch_is_split_into_frames_within_the_limits() {
        let b = addresses(150);
        let frames = b.frames();
        assert_eq!(frames, [0..64, 64..128, 128..150]);
        let mut f = Vec::new();
        b.encode(frames[0].clone(), &mut f);
        assert_eq!(datagrams_of(&f).count(), 64);
        assert_eq!(&f[6..12], &OWN_MAC);
        // Long datagrams: the byte limit splits first.
        let mut b = Batch::new();
        for _ in 0..3 {
            b.brd(0x1000, 600);
        }
        assert_eq!(b.frames(), [0..2, 2..3]);
        let (own, stop, p) = pumped(100);
        let r = own
            .exchange(&addresses(150), Duration::from_secs(5))
            .expect("answered");
        assert_eq!(r.u16_of_one(99), Some(0x1000 + 99));
        assert_eq!(r.u16_of_one(100), None);
        assert_eq!(r.u16_of_one(149), None);
        stop.store(true, Ordering::Relaxed);
        assert_eq!(p.join().unwrap(), 3);
    }

    #[test]
    fn no_reply_is_a_timeout_and_a_late_one_is_not_taken_for_the_next() {
        let own = Arc::new(OwnFrames::default());
        let mut b = Batch::new();
        b.aprd(0, 0x0010, 2);
        // Nobody pumps: a timeout, and the slot is free again.
        let t = Duration::from_millis(20);
        assert_eq!(own.exchange(&b, t), Err(OwnError::Timeout(t)));
        assert!(
            own.slots
                .iter()
                .all(|s| s.state.load(Ordering::Relaxed) == state::FREE)
        );
        // Sent, answered too late: the stale reply is refused, the next exchange gets its own.
        let mut buf = [0u8; 1536];
        let mut late = Vec::new();
        let own2 = own.clone();
        let h = std::thread::spawn(move || own2.exchange(&b, Duration::from_millis(50)));
        while late.is_empty() {
            own.send_ready(&mut buf, |f, _| {
                late.push(answer(f, 1));
                Ok(())
            });
            std::thread::yield_now();
        }
        assert!(matches!(h.join().unwrap(), Err(OwnError::Timeout(_))));
        assert_eq!(own.receive(&late[0]), None, "a reply to a frame given up");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let p = pump(own.clone(), 2, Duration::ZERO, stop.clone());
        let mut b = Batch::new();
        b.aprd(1, 0x0010, 2);
        let r = own.exchange(&b, Duration::from_secs(5)).expect("answered");
        assert_eq!(r.u16_of_one(0), Some(0x1001));
        stop.store(true, Ordering::Relaxed);
        p.join().unwrap();
    }

    #[test]
    fn a_reply_with_other_datagrams_is_a_mismatch() {
        let own = Arc::new(OwnFrames::default());
        let own2 = own.clone();
        let h = std::thread::spawn(move || {
            let mut b = Batch::new();
            b.aprd(0, 0x0010, 2);
            b.aprd(1, 0x0010, 2);
            own2.exchange(&b, Duration::from_secs(5))
        });
        let mut buf = [0u8; 1536];
        let mut sent = Vec::new();
        while sent.is_empty() {
            own.send_ready(&mut buf, |f, _| {
                sent.push(f.to_vec());
                Ok(())
            });
            std::thread::yield_now();
        }
        let mut r = answer(&sent[0], 2);
        r[ETH_HEADER_LEN + ECAT_HEADER_LEN] = cmd::FPRD;
        assert_eq!(own.receive(&r), Some(false));
        assert_eq!(
            h.join().unwrap(),
            Err(OwnError::Mismatch("another datagram than sent"))
        );
    }

    /// The cycle's slot: submitted, answered, taken; given up, its late reply is not taken;
    /// a reply that came in after the cycle gave up is dropped at the next submit.
    #[test]
    fn the_cycle_s_slot_is_polled_and_given_up_at_its_deadline() {
        let own = OwnFrames::default();
        let mut b = Batch::new();
        b.aprd(0, 0x0010, 2);
        let frame = b.one_frame().expect("one frame");
        let (mut buf, mut reply) = ([0u8; 1536], [0u8; 1536]);
        let pump = |own: &OwnFrames, buf: &mut [u8; 1536]| {
            let mut out = Vec::new();
            own.send_ready(buf, |f, _| {
                out.push(answer(f, 1));
                Ok(())
            });
            out
        };
        assert!(own.submit_cycle(0, &frame, Waker::noop()));
        assert_eq!(own.take_cycle(0, &mut reply), None, "not answered yet");
        let r = pump(&own, &mut buf);
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0][ETH_HEADER_LEN + ECAT_HEADER_LEN + 1] & 0x80,
            0x80,
            "the cycle's tag"
        );
        assert_eq!(own.receive(&r[0]), Some(true), "one of the cycle's frames");
        let n = own.take_cycle(0, &mut reply).expect("answered");
        assert_eq!(&reply[26..28], &0x1000u16.to_le_bytes());
        assert_eq!(n, frame.len());
        // Given up at the deadline: the late reply is not the next cycle's.
        assert!(own.submit_cycle(0, &frame, Waker::noop()));
        let late = pump(&own, &mut buf);
        own.abandon_cycle(0);
        assert_eq!(own.receive(&late[0]), None);
        assert!(own.submit_cycle(0, &frame, Waker::noop()));
        assert_eq!(own.take_cycle(0, &mut reply), None);
        // Answered after the cycle gave up (the copy was under way): dropped at the next submit.
        let r = pump(&own, &mut buf);
        assert_eq!(own.receive(&r[0]), Some(true), "one of the cycle's frames");
        assert!(own.submit_cycle(0, &frame, Waker::noop()));
        assert_eq!(
            own.take_cycle(0, &mut reply),
            None,
            "a new frame, not yet answered"
        );
    }

    #[test]
    fn threads_share_the_slots() {
        let own = Arc::new(OwnFrames::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let p = pump(own.clone(), 30, Duration::from_micros(100), stop.clone());
        let threads: Vec<_> = (0..8u16)
            .map(|t| {
                let own = own.clone();
                std::thread::spawn(move || {
                    for k in 0..20u16 {
                        let mut b = Batch::new();
                        b.aprd((t + k) % 30, 0x0010, 2);
                        let r = own.exchange(&b, Duration::from_secs(10)).expect("answered");
                        assert_eq!(r.u16_of_one(0), Some(0x1000 + (t + k) % 30));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert_eq!(p.join().unwrap(), 160);
    }
}
