//! The mailbox layer: how a request reaches a subdevice and its reply comes back, for every
//! mailbox protocol (CoE in [`crate::coe`], FoE in [`crate::foe`]).
//!
//! ## What it holds
//! - the **geometry** of a subdevice's mailbox: SM0 master→device, SM1 device→master, from the
//!   SII's standard or bootstrap mailbox words or from the SM registers ([`Geometry`]);
//! - the **header** every mailbox starts with (ETG.1000.4 §5.6, Table 29): length of what follows
//!   (u16), station address (u16, 0 from the master), channel/priority (u8), type in bits 0..3
//!   ([`kind`]) and counter in bits 4..6;
//! - the **transport** of one subdevice ([`Mailbox`]): write a request to SM0, read the reply from
//!   SM1, one counter per subdevice for every protocol, the repeat of a first unanswered request,
//!   and what arrives unasked: CoE emergencies are kept ([`Mailbox::take_emergencies`]), mailboxes
//!   of another protocol than the one waited for are set aside ([`Mailbox::take_set_aside`])
//!   instead of being lost, so two protocols to one device interleave on one counter.
//!
//! ## How a transfer goes
//! 1. A stale mailbox left in SM1 (an emergency, the answer to a request that timed out, another
//!    protocol's) is read away first, as ethercrab does; emergencies and other protocols' mailboxes
//!    found there are kept.
//! 2. The request, padded to the mailbox size (the ESC takes a mailbox when its last byte is
//!    written, ESC datasheet section I, "SyncManager mailbox mode"), goes to SM0 once its status
//!    (register 0x0805 + 8·n, bit 3 "mailbox full") says the device has taken the previous one.
//!    The layer stamps the subdevice's next counter into it.
//! 3. SM1's status is polled until full, the mailbox read whole (which frees it), and sorted: a
//!    mailbox of the protocol waited for is the reply, an emergency is kept, another protocol's
//!    is set aside, a mailbox error reply (type 0) ends the wait with its detail; until the reply
//!    or the timeout.
//!
//! The counter is 1..7 (0 is reserved, ETG.1000.4 §5.6); a new transport starts at 1, or after
//! the counter of the one before it ([`Mailbox::continue_after`], which
//! [`crate::coe::segment::PreOp`] does per subdevice). ethercrab's requests on the same subdevice
//! count on their own, so the first request may repeat ethercrab's last counter, and a device that
//! discards a repeated mailbox stays silent: a transport whose first request times out sends it
//! once more with the next counter. The repeat mechanism (SM1 repeat request, ETG.1000.4 §5.6.2)
//! is not used, as in ethercrab: a lost reply is a timeout, and the caller retries.
//!
//! The cyclic thread's side of the same layer is [`crate::acyclic`]: one request queue other
//! threads use during OP, served within the cycle's mailbox budget on fixed buffers; it shares
//! the geometry checks and the header constants of this module.

use ethercrab::{Command, MainDevice};
use futures_lite::future::block_on;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Bytes of the mailbox header.
pub const HEADER: usize = 6;

/// Smallest mailbox the master uses: one CoE initiate request with its 4 data bytes (header 6 +
/// CoE 2 + SDO 8); an FoE request with a short name fits it too.
pub const MIN_MAILBOX: u16 = 16;

/// Largest mailbox (SM0/SM1 size) the master uses: the data of one datagram in a 1500-byte
/// frame (ETG.1000.4 §5.4: 2 bytes EtherCAT header, 10 datagram header, 2 WKC).
pub const MAX_MAILBOX: u16 = 1486;

/// Emergencies a transport keeps until [`Mailbox::take_emergencies`] (later ones are logged only).
pub const MAX_EMERGENCIES: usize = 64;

/// Mailboxes of other protocols a transport keeps until [`Mailbox::take_set_aside`] (the oldest
/// is dropped, with a log line, beyond it).
pub const MAX_SET_ASIDE: usize = 16;

/// Mailbox types (ETG.1000.4 Table 29).
pub mod kind {
    /// Mailbox error reply.
    pub const ERR: u8 = 0x00;
    /// ADS over EtherCAT.
    pub const AOE: u8 = 0x01;
    /// Ethernet over EtherCAT.
    pub const EOE: u8 = 0x02;
    /// CANopen over EtherCAT.
    pub const COE: u8 = 0x03;
    /// File access over EtherCAT.
    pub const FOE: u8 = 0x04;
    /// Servo drive profile over EtherCAT.
    pub const SOE: u8 = 0x05;
    /// Vendor specific.
    pub const VOE: u8 = 0x0f;

    /// The protocol's name (`CoE`), for messages.
    pub fn name(kind: u8) -> &'static str {
        match kind {
            ERR => "mailbox error",
            AOE => "AoE",
            EOE => "EoE",
            COE => "CoE",
            FOE => "FoE",
            SOE => "SoE",
            VOE => "VoE",
            _ => "reserved type",
        }
    }
}

/// Write a mailbox header into `buf[..6]`: `len` bytes follow it, type `kind`, counter 0 (the
/// transport stamps the counter when it sends).
pub fn header(buf: &mut [u8], len: usize, kind: u8) {
    let n = u16::try_from(len).unwrap_or(u16::MAX);
    buf[0..2].copy_from_slice(&n.to_le_bytes());
    // Address 0 (from the master), channel 0, priority 0.
    buf[2..5].fill(0);
    buf[5] = kind & 0x0f;
}

/// The type of a mailbox (bits 0..3 of byte 5), `None` without a header.
pub fn kind_of(buf: &[u8]) -> Option<u8> {
    buf.get(5).map(|b| b & 0x0f)
}

/// The counter of a mailbox (bits 4..6 of byte 5), 0 when there is no header.
pub fn counter_of(buf: &[u8]) -> u8 {
    buf.get(5).map_or(0, |b| (b >> 4) & 0x07)
}

/// The data after the header of a mailbox read from SM1, as long as the header says, or why
/// not. Never panics, whatever the bytes.
pub fn payload(buf: &[u8]) -> Result<&[u8], String> {
    if buf.len() < HEADER {
        return Err(format!(
            "{} bytes, shorter than the 6-byte mailbox header",
            buf.len()
        ));
    }
    let declared = usize::from(u16::from_le_bytes([buf[0], buf[1]]));
    let available = buf.len() - HEADER;
    if declared > available {
        return Err(format!(
            "mailbox header says {declared} bytes follow, the mailbox holds {available}"
        ));
    }
    Ok(&buf[HEADER..HEADER + declared])
}

/// What can go wrong in the transport of a mailbox.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// No answer in time.
    #[error("position {position}: {step}: no answer within {} ms", timeout.as_millis())]
    Timeout {
        /// Position of the subdevice.
        position: u16,
        /// The step that waited (`SDO 0x1008:00 upload: response`).
        step: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// The device sent something that is not a mailbox (or not one the request can use).
    #[error("position {position}: {what}: malformed response: {why}")]
    Malformed {
        /// Position of the subdevice.
        position: u16,
        /// The transfer.
        what: String,
        /// What was wrong.
        why: String,
    },
    /// The device replied with a mailbox error (ETG.1000.4 Table 30).
    #[error("position {position}: {what}: mailbox error {detail:#06x}: {}", error_text(*detail))]
    Mailbox {
        /// Position of the subdevice.
        position: u16,
        /// The transfer.
        what: String,
        /// Detail code.
        detail: u16,
    },
    /// The subdevice has no usable mailbox.
    #[error("position {position}: no mailbox: {why}")]
    NoMailbox {
        /// Position of the subdevice.
        position: u16,
        /// Why not.
        why: String,
    },
    /// The cyclic thread's queue failed the request ([`crate::acyclic`]: the master stopped,
    /// the queue is full, a bus error there).
    #[error("position {position}: {what}: {why}")]
    Queue {
        /// Position of the subdevice.
        position: u16,
        /// The transfer.
        what: String,
        /// What the queue said.
        why: String,
    },
    /// A datagram failed.
    #[error("position {position}: {what}: {source}")]
    Bus {
        /// Position of the subdevice.
        position: u16,
        /// The datagram (`FPRD 0x080d`).
        what: String,
        /// ethercrab's error.
        source: ethercrab::error::Error,
    },
}

/// The text of a mailbox error detail code (ETG.1000.4 Table 30).
pub fn error_text(detail: u16) -> &'static str {
    match detail {
        0x0001 => "syntax of the mailbox header is wrong",
        0x0002 => "the mailbox protocol is not supported",
        0x0003 => "channel field contains a wrong value",
        0x0004 => "the service is not supported",
        0x0005 => "invalid mailbox header",
        0x0006 => "length of the received mailbox data is too short",
        0x0007 => "no more memory in the subdevice",
        0x0008 => "the length of the data is inconsistent",
        _ => "unknown mailbox error code",
    }
}

/// A CoE emergency a device sent (ETG.1000.6 §5.6.4). Kept by the layer whatever protocol
/// waits: a device sends one whenever it detects a fault.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Emergency {
    /// Position of the subdevice.
    pub position: u16,
    /// Error code (CiA 301 Table 21).
    pub code: u16,
    /// Error register (0x1001).
    pub register: u8,
    /// Manufacturer-specific data.
    pub data: [u8; 5],
}

impl std::fmt::Display for Emergency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "position {}: emergency {:#06x}, error register {:#04x}, data {}",
            self.position,
            self.code,
            self.register,
            crate::coe::value::hex_bytes(&self.data)
        )
    }
}

/// The emergency in a mailbox, if it is one: CoE, service 1 in the CoE header, then code (u16),
/// error register (u8) and 5 bytes (ETG.1000.6 Table 50). `None` for anything else, including
/// an emergency too short to decode (the protocol waiting for it then reports it malformed).
pub fn emergency_of(position: u16, buf: &[u8]) -> Option<Emergency> {
    if kind_of(buf)? != kind::COE {
        return None;
    }
    let p = payload(buf).ok()?;
    if p.len() < 10 || p[1] >> 4 != 0x01 {
        return None;
    }
    let mut data = [0u8; 5];
    data.copy_from_slice(&p[5..10]);
    Some(Emergency {
        position,
        code: u16::from_le_bytes([p[2], p[3]]),
        register: p[4],
        data,
    })
}

/// Where a subdevice's mailbox is: the receive (master→device) and send (device→master)
/// sync managers, their start addresses and sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    /// SM of the receive mailbox (0 for the standard mailbox).
    pub rx_sm: u8,
    /// Its start address.
    pub rx_offset: u16,
    /// Its size in bytes.
    pub rx_size: u16,
    /// SM of the send mailbox (1).
    pub tx_sm: u8,
    /// Its start address.
    pub tx_offset: u16,
    /// Its size in bytes.
    pub tx_size: u16,
}

/// Why the SM0/SM1 registers are not a usable mailbox ([`Geometry::from_registers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RegisterError {
    /// An SM is disabled.
    #[error("SM0/SM1 are not enabled (the subdevice is in INIT, or has no mailbox)")]
    Disabled,
    /// An SM is not in mailbox mode or has the wrong direction.
    #[error("SM0/SM1 are not configured as mailboxes")]
    NotMailbox,
    /// A size outside [`MIN_MAILBOX`]..=[`MAX_MAILBOX`].
    #[error("mailbox sizes {0} / {1} bytes, the master uses {MIN_MAILBOX}..={MAX_MAILBOX}")]
    Size(u16, u16),
}

impl Geometry {
    /// The standard mailbox of the SII words 0x18..0x1B (ETG.2010 Table 2) on SM0 / SM1.
    pub fn from_sii(position: u16, m: &crate::sii::Mailbox) -> Result<Geometry, Error> {
        let g = Geometry::of_sii(m);
        g.check(position)?;
        Ok(g)
    }

    /// The bootstrap mailbox of the SII words 0x14..0x17 (ETG.2010 Table 2), which SM0 / SM1
    /// must hold in BOOT (ETG.1000.6 §6.4.1: the device's bootloader uses it).
    pub fn bootstrap_from_sii(position: u16, sii: &crate::sii::Sii) -> Result<Geometry, Error> {
        let m = sii.bootstrap_mailbox.as_ref().ok_or(Error::NoMailbox {
            position,
            why: "the SII has no bootstrap mailbox (words 0x14..0x17 are zero): the device has \
                  no BOOT state"
                .into(),
        })?;
        let g = Geometry::of_sii(m);
        g.check(position)?;
        Ok(g)
    }

    fn of_sii(m: &crate::sii::Mailbox) -> Geometry {
        Geometry {
            rx_sm: 0,
            rx_offset: m.rx_offset,
            rx_size: m.rx_size,
            tx_sm: 1,
            tx_offset: m.tx_offset,
            tx_size: m.tx_size,
        }
    }

    /// The geometry the SM0 / SM1 registers hold (0x0800..0x080F, ESC datasheet section II:
    /// start u16, length u16, control u8, status u8, activate u8, PDI control u8), as ethercrab
    /// configured them for PRE-OP. SM0 must be an enabled write mailbox, SM1 a read mailbox.
    pub fn read(port: &mut dyn Port, position: u16) -> Result<Geometry, Error> {
        let mut r = [0u8; 16];
        port.read(0x0800, &mut r).map_err(|source| Error::Bus {
            position,
            what: "FPRD 0x0800 (SM0/SM1 registers)".into(),
            source,
        })?;
        Geometry::from_registers(&r).map_err(|e| Error::NoMailbox {
            position,
            why: e.to_string(),
        })
    }

    /// The mailbox the 16 bytes of SM0/SM1 registers describe (pure: the blocking transport and
    /// the cyclic thread's share it).
    pub fn from_registers(r: &[u8; 16]) -> Result<Geometry, RegisterError> {
        let sm = |o: usize| {
            (
                u16::from_le_bytes([r[o], r[o + 1]]),
                u16::from_le_bytes([r[o + 2], r[o + 3]]),
                r[o + 4],
                r[o + 6],
            )
        };
        let (rx_offset, rx_size, c0, a0) = sm(0);
        let (tx_offset, tx_size, c1, a1) = sm(8);
        // Control bits 0..1 = 0b10 mailbox mode; bits 2..3 = 0b01 written by the master (SM0),
        // 0b00 read by the master (SM1). Activate bit 0: enabled.
        if a0 & 1 == 0 || a1 & 1 == 0 {
            return Err(RegisterError::Disabled);
        }
        if c0 & 0x0f != 0x06 || c1 & 0x0f != 0x02 {
            return Err(RegisterError::NotMailbox);
        }
        let g = Geometry {
            rx_sm: 0,
            rx_offset,
            rx_size,
            tx_sm: 1,
            tx_offset,
            tx_size,
        };
        g.sizes()?;
        Ok(g)
    }

    fn sizes(&self) -> Result<(), RegisterError> {
        let ok = |s: u16| (MIN_MAILBOX..=MAX_MAILBOX).contains(&s);
        if ok(self.rx_size) && ok(self.tx_size) {
            Ok(())
        } else {
            Err(RegisterError::Size(self.rx_size, self.tx_size))
        }
    }

    fn check(&self, position: u16) -> Result<(), Error> {
        self.sizes().map_err(|e| Error::NoMailbox {
            position,
            why: e.to_string(),
        })
    }

    /// The SM0 / SM1 register bytes that configure this mailbox (what ethercrab writes for
    /// PRE-OP; the master writes them for BOOT): start, length, control 0x26 (mailbox, written
    /// by the master, ECAT interrupt) and 0x22 (mailbox, read by the master), enabled.
    pub fn registers(&self) -> [u8; 16] {
        let mut r = [0u8; 16];
        for (o, start, len, control) in [
            (0, self.rx_offset, self.rx_size, 0x26u8),
            (8, self.tx_offset, self.tx_size, 0x22),
        ] {
            r[o..o + 2].copy_from_slice(&start.to_le_bytes());
            r[o + 2..o + 4].copy_from_slice(&len.to_le_bytes());
            r[o + 4] = control;
            r[o + 6] = 1;
        }
        r
    }

    /// The SM status register of `sm` (0x0805 + 8·sm).
    pub fn status_register(sm: u8) -> u16 {
        0x0805 + 8 * u16::from(sm)
    }
}

/// How long the transport waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// For the device to take the previous request out of SM0 (ethercrab's `mailbox_echo`
    /// default, 100 ms).
    pub mailbox_free: Duration,
    /// For a response (ethercrab's `mailbox_response` default, 1 s: devices that write their
    /// EEPROM or a drive's flash answer slowly).
    pub response: Duration,
    /// Between two polls of an SM status.
    pub poll: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            mailbox_free: Duration::from_millis(100),
            response: Duration::from_millis(1000),
            poll: Duration::from_micros(100),
        }
    }
}

/// Register access to one subdevice: what the transport needs of the bus. [`BusPort`] is the
/// EtherCAT one; tests put a scripted device behind it.
pub trait Port {
    /// Read `buf.len()` bytes from `register`.
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error>;
    /// Write `data` to `register`.
    fn write(&mut self, register: u16, data: &[u8]) -> Result<(), ethercrab::error::Error>;
}

/// A subdevice by its configured station address (FPRD/FPWR, ETG.1000.4 §5.4.3), which
/// ethercrab assigns at the scan (0x1000 + position). Every datagram goes through
/// `pdu_gate`, so transports of several devices may run on threads side by side.
pub struct BusPort<'a> {
    md: &'a MainDevice<'a>,
    address: u16,
}

impl<'a> BusPort<'a> {
    /// The subdevice at station `address` on `md`.
    pub fn new(md: &'a MainDevice<'a>, address: u16) -> Self {
        BusPort { md, address }
    }
}

impl Port for BusPort<'_> {
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error> {
        let len = u16::try_from(buf.len()).map_err(|_| ethercrab::error::Error::Internal)?;
        // Behind the gate: several devices' transports may run on threads of one bring-up.
        crate::pdu_gate::gated(|| {
            let r = block_on(Command::fprd(self.address, register).receive_slice(self.md, len))?;
            if r.len() < buf.len() {
                return Err(ethercrab::error::Error::Pdu(
                    ethercrab::error::PduError::Decode,
                ));
            }
            buf.copy_from_slice(&r[..buf.len()]);
            Ok(())
        })
    }

    fn write(&mut self, register: u16, data: &[u8]) -> Result<(), ethercrab::error::Error> {
        crate::pdu_gate::gated(|| {
            block_on(Command::fpwr(self.address, register).send(self.md, data))
        })
    }
}

/// What a protocol's client needs of a subdevice's mailbox, whoever carries it: the blocking
/// transport ([`Mailbox`], the PRE-OP tools) or the cyclic thread's queue during OP
/// ([`crate::acyclic::QueueMailbox`]).
pub trait Transport {
    /// The subdevice's position.
    fn position(&self) -> u16;
    /// Its mailbox (the sizes bound what a request and a reply carry).
    fn geometry(&self) -> Geometry;
    /// Send `req` (header first, its type set; the counter is the transport's) without waiting
    /// for a reply.
    fn send(&mut self, req: &[u8], what: &str) -> Result<(), Error>;
    /// Send `req` and wait for the next mailbox of the same type (whole, as read from SM1).
    fn transact(&mut self, req: &[u8], what: &str) -> Result<Vec<u8>, Error>;
    /// One look, without waiting, for a mailbox of type `kind` the device sent unasked (an EoE
    /// frame's fragment): one set aside earlier first, else the send mailbox read once if it is
    /// full (emergencies kept, other types set aside). `None` when there is none.
    fn poll(&mut self, kind: u8, what: &str) -> Result<Option<Vec<u8>>, Error>;
    /// The oldest mailbox of type `kind` set aside while the transport waited for something
    /// else (no bus access).
    fn take_set_aside(&mut self, kind: u8) -> Option<Vec<u8>>;
}

impl<P: Port> Transport for Mailbox<P> {
    fn position(&self) -> u16 {
        Mailbox::position(self)
    }
    fn geometry(&self) -> Geometry {
        Mailbox::geometry(self)
    }
    fn send(&mut self, req: &[u8], what: &str) -> Result<(), Error> {
        Mailbox::send(self, req, what)
    }
    fn transact(&mut self, req: &[u8], what: &str) -> Result<Vec<u8>, Error> {
        Mailbox::transact(self, req, what)
    }
    fn poll(&mut self, kind: u8, what: &str) -> Result<Option<Vec<u8>>, Error> {
        if let Some(m) = self.take_set_aside(kind) {
            return Ok(Some(m));
        }
        let t = self.timeouts;
        self.timeouts.response = Duration::ZERO;
        let r = self.receive(kind, what);
        self.timeouts = t;
        match r {
            Ok(m) => Ok(Some(m)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn take_set_aside(&mut self, kind: u8) -> Option<Vec<u8>> {
        Mailbox::take_set_aside(self, kind)
    }
}

/// The counter of a subdevice's mailbox requests (ETG.1000.4 §5.6): 1..7 and around again, 0
/// before the first (0 is reserved: never sent). One per subdevice for every protocol; the
/// blocking transport and the cyclic thread's service each keep theirs in this type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counter(u8);

impl Counter {
    /// The counter for the next request (and from now on the last one).
    pub fn advance(&mut self) -> u8 {
        self.0 = if self.0 >= 7 { 1 } else { self.0 + 1 };
        self.0
    }

    /// The counter of the last request (0 before the first).
    pub fn last(self) -> u8 {
        self.0
    }

    /// Go on after `last` (another transport's last counter to the same subdevice).
    pub fn continue_after(&mut self, last: u8) {
        self.0 = last & 0x07;
    }
}

/// The mailbox transport of one subdevice: every protocol's requests and replies, one counter.
pub struct Mailbox<P: Port> {
    pub(crate) port: P,
    position: u16,
    geometry: Geometry,
    timeouts: Timeouts,
    counter: Counter,
    /// The device has answered one of this transport's requests.
    answered: bool,
    emergencies: Vec<Emergency>,
    set_aside: VecDeque<Vec<u8>>,
}

/// The transport on the bus.
pub type BusMailbox<'a> = Mailbox<BusPort<'a>>;

impl<'a> Mailbox<BusPort<'a>> {
    /// The transport of the subdevice at `position` with station `address` on `md`, its
    /// mailbox read from the SM registers (the subdevice must be in PRE-OP or above, or BOOT).
    pub fn on_bus(
        md: &'a MainDevice<'a>,
        position: u16,
        address: u16,
        timeouts: Timeouts,
    ) -> Result<Self, Error> {
        let mut port = BusPort::new(md, address);
        let geometry = Geometry::read(&mut port, position)?;
        Ok(Mailbox::new(port, position, geometry, timeouts))
    }
}

impl<P: Port> Mailbox<P> {
    /// A transport on `port` with a known geometry.
    pub fn new(port: P, position: u16, geometry: Geometry, timeouts: Timeouts) -> Self {
        Mailbox {
            port,
            position,
            geometry,
            timeouts,
            counter: Counter::default(),
            answered: false,
            emergencies: Vec::new(),
            set_aside: VecDeque::new(),
        }
    }

    /// The mailbox in use.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The subdevice's position.
    pub fn position(&self) -> u16 {
        self.position
    }

    /// How long the transport waits.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Wait this long from now on.
    pub fn set_timeouts(&mut self, timeouts: Timeouts) {
        self.timeouts = timeouts;
    }

    /// Emergencies received since the last call (in the order they came).
    pub fn take_emergencies(&mut self) -> Vec<Emergency> {
        std::mem::take(&mut self.emergencies)
    }

    /// The oldest mailbox of type `kind` that arrived while another protocol waited (whole, with
    /// its header), if any.
    pub fn take_set_aside(&mut self, kind: u8) -> Option<Vec<u8>> {
        let i = self
            .set_aside
            .iter()
            .position(|m| kind_of(m) == Some(kind))?;
        self.set_aside.remove(i)
    }

    /// The counter of the last request (0 before the first).
    pub fn counter(&self) -> u8 {
        self.counter.last()
    }

    /// Continue counting after `last` (the counter of the last request another transport sent
    /// to this subdevice), so that the next request does not repeat it.
    pub fn continue_after(&mut self, last: u8) {
        self.counter.continue_after(last);
    }

    /// The port (for register access beside the mailbox, such as an AL state request).
    pub fn port(&mut self) -> &mut P {
        &mut self.port
    }

    /// A buffer of the receive mailbox's size (at least `min` bytes) to build a request in.
    pub fn buffer(&self, min: usize) -> Vec<u8> {
        vec![0u8; usize::from(self.geometry.rx_size).max(min)]
    }

    fn bus(&self, what: String) -> impl FnOnce(ethercrab::error::Error) -> Error {
        let position = self.position;
        move |source| Error::Bus {
            position,
            what,
            source,
        }
    }

    /// An error of the transfer `what` because the reply was not what it needs.
    pub fn malformed(&self, what: &str, why: impl Into<String>) -> Error {
        Error::Malformed {
            position: self.position,
            what: what.to_string(),
            why: why.into(),
        }
    }

    fn sm_full(&mut self, sm: u8) -> Result<bool, Error> {
        let reg = Geometry::status_register(sm);
        let mut s = [0u8];
        self.port
            .read(reg, &mut s)
            .map_err(self.bus(format!("FPRD {reg:#06x} (SM{sm} status)")))?;
        Ok(s[0] & 0x08 != 0)
    }

    /// Read SM1 whole (which frees it for the device's next mailbox).
    fn read_mailbox(&mut self) -> Result<Vec<u8>, Error> {
        let g = self.geometry;
        let mut buf = vec![0u8; usize::from(g.tx_size)];
        self.port
            .read(g.tx_offset, &mut buf)
            .map_err(self.bus(format!(
                "FPRD {:#06x} (send mailbox, {} bytes)",
                g.tx_offset, g.tx_size
            )))?;
        Ok(buf)
    }

    fn keep_emergency(&mut self, buf: &[u8]) -> bool {
        let Some(e) = emergency_of(self.position, buf) else {
            return false;
        };
        log::warn!("{e}");
        // Kept up to a bound: a device that floods emergencies does not grow the transport.
        if self.emergencies.len() < MAX_EMERGENCIES {
            self.emergencies.push(e);
        }
        true
    }

    fn set_aside(&mut self, buf: Vec<u8>, what: &str) {
        log::debug!(
            "position {}: {what}: a {} mailbox set aside",
            self.position,
            kind::name(kind_of(&buf).unwrap_or(0xff))
        );
        if self.set_aside.len() >= MAX_SET_ASIDE
            && let Some(old) = self.set_aside.pop_front()
        {
            log::warn!(
                "position {}: a {} mailbox nobody took is dropped",
                self.position,
                kind::name(kind_of(&old).unwrap_or(0xff))
            );
        }
        self.set_aside.push_back(buf);
    }

    /// Clear a stale mailbox, wait for SM0 to be free, and write `req` (header first, its type
    /// set) padded to the mailbox's size with the next counter.
    pub fn send(&mut self, req: &[u8], what: &str) -> Result<(), Error> {
        let g = self.geometry;
        if req.len() > usize::from(g.rx_size) {
            return Err(self.malformed(what, "request larger than the receive mailbox"));
        }
        if req.len() < HEADER {
            return Err(self.malformed(what, "request shorter than the mailbox header"));
        }
        let want = req[5] & 0x0f;
        // At most a few stale mailboxes: the device queues one behind the other at most.
        for _ in 0..4 {
            if !self.sm_full(g.tx_sm)? {
                break;
            }
            let stale = self.read_mailbox()?;
            if self.keep_emergency(&stale) {
                continue;
            }
            match kind_of(&stale) {
                // EoE mailboxes are the device's own frames, not a late reply: kept even when
                // the request sent is EoE too.
                Some(k)
                    if (k != want || k == kind::EOE)
                        && k != kind::ERR
                        && payload(&stale).is_ok() =>
                {
                    self.set_aside(stale, what);
                }
                _ => log::debug!(
                    "position {}: stale mailbox read away before {what}: {:02x?}",
                    self.position,
                    &stale[..stale.len().min(16)]
                ),
            }
        }
        let deadline = Instant::now() + self.timeouts.mailbox_free;
        while self.sm_full(g.rx_sm)? {
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    position: self.position,
                    step: format!("{what}: receive mailbox (SM{}) free", g.rx_sm),
                    timeout: self.timeouts.mailbox_free,
                });
            }
            std::thread::sleep(self.timeouts.poll);
        }
        let mut padded = vec![0u8; usize::from(g.rx_size)];
        padded[..req.len()].copy_from_slice(req);
        let c = self.counter.advance();
        padded[5] = (padded[5] & 0x8f) | (c << 4);
        self.port
            .write(g.rx_offset, &padded)
            .map_err(self.bus(format!(
                "FPWR {:#06x} (receive mailbox, {} bytes)",
                g.rx_offset, g.rx_size
            )))
    }

    /// Wait for the next mailbox of type `want` (whole, as read from SM1: its header's length
    /// checked). Emergencies are kept, other protocols' mailboxes set aside, a mailbox error
    /// reply ends the wait.
    pub fn receive(&mut self, want: u8, what: &str) -> Result<Vec<u8>, Error> {
        let deadline = Instant::now() + self.timeouts.response;
        loop {
            let full = self.sm_full(self.geometry.tx_sm)?;
            if full {
                let buf = self.read_mailbox()?;
                payload(&buf).map_err(|e| self.malformed(what, e))?;
                let k = buf[5] & 0x0f;
                if k == kind::ERR {
                    let p = payload(&buf).unwrap_or_default();
                    if p.len() < 4 {
                        return Err(self.malformed(
                            what,
                            format!(
                                "mailbox error reply needs at least 4 bytes after the mailbox \
                                 header, has {}",
                                p.len()
                            ),
                        ));
                    }
                    return Err(Error::Mailbox {
                        position: self.position,
                        what: what.to_string(),
                        detail: u16::from_le_bytes([p[2], p[3]]),
                    });
                }
                if !self.keep_emergency(&buf) {
                    if k == want {
                        return Ok(buf);
                    }
                    self.set_aside(buf, what);
                }
            }
            // Checked after every mailbox too: a device that sends emergencies without end
            // still ends the wait.
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    position: self.position,
                    step: format!("{what}: response"),
                    timeout: self.timeouts.response,
                });
            }
            if !full {
                std::thread::sleep(self.timeouts.poll);
            }
        }
    }

    /// Send `req` and wait for the reply of the same type.
    pub fn transact(&mut self, req: &[u8], what: &str) -> Result<Vec<u8>, Error> {
        let want = kind_of(req).unwrap_or(kind::ERR);
        self.send(req, what)?;
        let first = !self.answered;
        match self.receive(want, what) {
            // The first request of a transport may repeat the counter of the last request
            // someone else (ethercrab, an earlier transport) sent, and a device that discards a
            // repeated mailbox (ETG.1000.4 §5.6) then stays silent: once, the same request with
            // the next counter.
            Err(Error::Timeout { .. }) if first => {
                log::debug!(
                    "position {}: {what}: no answer to the first request; again with the next \
                     counter",
                    self.position
                );
                self.send(req, what)?;
                let r = self.receive(want, what);
                self.answered = r.is_ok();
                r
            }
            r => {
                self.answered |= r.is_ok();
                r
            }
        }
    }
}

#[cfg(test)]
mod tests;
