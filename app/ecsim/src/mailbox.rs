//! The mailbox of a simulated device: the header (ETG.1000.4 §5.6), the mailbox error reply
//! and the state of the two mailbox sync managers (SM0 master -> device, SM1 device -> master).
//!
//! Sync manager semantics in mailbox mode (ET1100 datasheet, section "SyncManager", mailbox
//! mode): a master write that reaches the last byte of SM0's buffer completes the mailbox (SM
//! status 0x0805 bit 3 "mailbox full"); further writes are refused (no working counter) until
//! the device has read it. The device puts its response into SM1 and the status of 0x080D says
//! full; the master's read of SM1's last byte empties it. Reading an empty SM1 is refused (no
//! working counter). Repeat: the master toggles SM1's repeat request (0x080E bit 1); the device
//! writes its last response into SM1 again and acknowledges with the same value in its PDI
//! control register (0x080F bit 1).
//!
//! The counter (header byte 5, bits 4..6): ETG.1000.4 §5.6 gives each new mailbox service the
//! next counter value 1..7 (0 is reserved) so that a device can recognise a repeated request
//! after a lost frame. This simulator does not drop a request whose counter equals the previous
//! one: two independent clients (ethercrab's CoE client and rtcat's own) each count from 1 on the
//! same device, and a real device serving both would otherwise lose requests. It answers with
//! counters of its own, 1..7.

use std::collections::VecDeque;

/// Bytes of the mailbox header.
pub const HEADER: usize = 6;
/// Responses that may wait for SM1 (the fragments of one SDO information answer and the
/// emergencies); beyond it further emergencies are dropped.
pub const MAX_QUEUED: usize = 64;

/// Mailbox types (ETG.1000.4 Table 29 "mailbox types").
pub mod kind {
    pub const ERR: u8 = 0x00;
    pub const AOE: u8 = 0x01;
    pub const EOE: u8 = 0x02;
    pub const COE: u8 = 0x03;
    pub const FOE: u8 = 0x04;
    pub const SOE: u8 = 0x05;
    pub const VOE: u8 = 0x0f;
}

/// Mailbox error codes (ETG.1000.4 Table 30 / ETG.1000.6 §5.5: the detail of a type-0 reply).
pub mod error {
    pub const SYNTAX: u16 = 0x0001;
    pub const UNSUPPORTED_PROTOCOL: u16 = 0x0002;
    pub const INVALID_CHANNEL: u16 = 0x0003;
    pub const SERVICE_NOT_SUPPORTED: u16 = 0x0004;
    pub const INVALID_HEADER: u16 = 0x0005;
    pub const SIZE_TOO_SHORT: u16 = 0x0006;
    pub const NO_MORE_MEMORY: u16 = 0x0007;
    pub const INVALID_SIZE: u16 = 0x0008;
}

/// A mailbox header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes of mailbox data after the header.
    pub length: u16,
    /// Station address of the originator (0 for the master).
    pub address: u16,
    /// Channel (bits 0..5 of byte 4) and priority (bits 6..7).
    pub channel: u8,
    pub priority: u8,
    /// Type (bits 0..3 of byte 5) and counter (bits 4..6).
    pub kind: u8,
    pub counter: u8,
}

impl Header {
    pub fn parse(b: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER] = b.get(..HEADER)?.try_into().ok()?;
        Some(Header {
            length: u16::from_le_bytes([b[0], b[1]]),
            address: u16::from_le_bytes([b[2], b[3]]),
            channel: b[4] & 0x3f,
            priority: b[4] >> 6,
            kind: b[5] & 0x0f,
            counter: (b[5] >> 4) & 0x07,
        })
    }

    pub fn encode(&self) -> [u8; HEADER] {
        let l = self.length.to_le_bytes();
        let a = self.address.to_le_bytes();
        [
            l[0],
            l[1],
            a[0],
            a[1],
            (self.channel & 0x3f) | (self.priority << 6),
            (self.kind & 0x0f) | ((self.counter & 7) << 4),
        ]
    }
}

/// A whole mailbox (header + data) of `kind` with the given data; counter 0 (set when sent).
pub fn frame(kind: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Header {
        length: data.len() as u16,
        address: 0,
        channel: 0,
        priority: 0,
        kind,
        counter: 0,
    }
    .encode()
    .to_vec();
    f.extend_from_slice(data);
    f
}

/// A mailbox error reply (type 0): service 0x0001, then the detail code.
pub fn error_reply(detail: u16) -> Vec<u8> {
    let mut d = 0x0001u16.to_le_bytes().to_vec();
    d.extend_from_slice(&detail.to_le_bytes());
    frame(kind::ERR, &d)
}

/// What a request written into SM0 is, before any protocol looks at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A CoE mailbox: its data (from the CoE header on).
    Coe(&'a [u8]),
    /// An FoE mailbox: its data (from the FoE header on).
    Foe(&'a [u8]),
    /// An EoE mailbox: its data (from the EoE header on).
    Eoe(&'a [u8]),
    /// Refused with a mailbox error reply.
    Error(u16),
}

/// Check a request's header against the mailbox size (`mailbox` = SM0's length).
pub fn parse(request: &[u8], mailbox: usize) -> Parsed<'_> {
    let Some(h) = Header::parse(request) else {
        return Parsed::Error(error::SIZE_TOO_SHORT);
    };
    let len = usize::from(h.length);
    if HEADER + len > mailbox.min(request.len()) {
        return Parsed::Error(error::INVALID_SIZE);
    }
    if h.channel != 0 {
        return Parsed::Error(error::INVALID_CHANNEL);
    }
    match h.kind {
        kind::COE if len < 2 => Parsed::Error(error::SIZE_TOO_SHORT),
        kind::COE => Parsed::Coe(&request[HEADER..HEADER + len]),
        kind::FOE => Parsed::Foe(&request[HEADER..HEADER + len]),
        kind::EOE => Parsed::Eoe(&request[HEADER..HEADER + len]),
        kind::ERR => Parsed::Error(error::INVALID_HEADER),
        _ => Parsed::Error(error::UNSUPPORTED_PROTOCOL),
    }
}

/// The device side of the two mailbox sync managers.
#[derive(Debug, Clone, Default)]
pub struct MailboxState {
    /// SM0 holds a request the device has not taken yet.
    pub out_full: bool,
    /// SM1 holds a response the master has not read yet.
    pub in_full: bool,
    /// Responses waiting for SM1.
    pub queue: VecDeque<Vec<u8>>,
    /// Emergencies waiting for an idle SM1.
    pub emergencies: VecDeque<Vec<u8>>,
    /// The last response put into SM1 (for the repeat mechanism).
    pub last: Option<Vec<u8>>,
    /// The device's counter of the last response.
    pub counter: u8,
    /// SM1's repeat request bit as last seen.
    pub repeat: bool,
    /// When the queued responses may go to SM1 (the device's answer time, `[device.timing]`);
    /// 0: nothing waits for time.
    pub ready_at: u64,
}

impl MailboxState {
    /// The next response counter: 1..7.
    pub fn next_counter(&mut self) -> u8 {
        self.counter = if self.counter >= 7 {
            1
        } else {
            self.counter + 1
        };
        self.counter
    }
}
