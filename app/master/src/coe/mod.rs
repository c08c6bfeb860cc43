//! rtcat's CoE client: SDO upload and download (expedited, normal, segmented), complete access,
//! the SDO information service, and emergencies, over a subdevice's mailbox.
//!
//! ## Why not ethercrab's
//! ethercrab 0.7.1's CoE client (`mailbox/coe/mod.rs`) downloads only expedited values ("Only 4
//! byte SDO writes or smaller are supported"), has no complete access and no object or entry
//! description, and `assert_ne!`s (panics) when the response mailbox holds an emergency — which a
//! device may send at any time (ETG.1000.6 §5.6.4). Device configuration writes strings, PDO
//! mappings by complete access and values of 8 bytes, and its input comes from the wire, so this
//! client talks to the mailbox itself through ethercrab's public raw datagrams
//! ([`ethercrab::Command::fprd`] / [`fpwr`](ethercrab::Command::fpwr)), as the master's register
//! access does. ethercrab's own `sdo_read` stays in use where it is enough (the layout read).
//!
//! ## How a transfer goes
//! 1. The mailbox geometry (SM0 master→device, SM1 device→master) comes from the SII's standard
//!    mailbox words ([`Geometry::from_sii`]) or from the SM registers ethercrab configured
//!    ([`Geometry::read`]).
//! 2. A stale response left in SM1 (an emergency, the answer to a request that timed out) is
//!    read away first, as ethercrab does; emergencies found there are kept.
//! 3. The request, padded to the mailbox size (the ESC takes a mailbox when its last byte is
//!    written, ESC datasheet section I, "SyncManager mailbox mode"), goes to SM0 once its status
//!    (register 0x0805 + 8·n, bit 3 "mailbox full") says the device has taken the previous one.
//! 4. SM1's status is polled until full, the mailbox read whole (which frees it), and the
//!    response parsed ([`frame::parse`]); an emergency is kept and the wait goes on, until the
//!    response or the timeout.
//!
//! The mailbox counter is the client's own, 1..7 (0 is reserved, ETG.1000.4 §5.6); a new client
//! starts at 1, or after the counter of the client before it ([`Client::continue_after`], which
//! [`segment::PreOp`] does per subdevice). ethercrab's requests on the same subdevice count on
//! their own, so the first request may repeat ethercrab's last counter, and a device that
//! discards a repeated mailbox stays silent: a client whose first request times out sends it
//! once more with the next counter. The repeat mechanism (SM1 repeat request, ETG.1000.4
//! §5.6.2) is not used, as in ethercrab: a lost response is a timeout, and the caller retries.

pub mod abort;
pub mod frame;
pub mod segment;
pub mod value;

pub use abort::abort_text;
pub use frame::{EntryDescription, ObjectDescription, ParseError, Response};
pub use value::{SdoType, ValueError};

use ethercrab::{Command, MainDevice};
use futures_lite::future::block_on;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Largest object the client uploads (its complete size): far above parameters and names; a
/// bound on what a broken device can make the master allocate.
pub const MAX_UPLOAD: u32 = 1 << 20;

/// Largest SDO information response (all fragments): the OD list of every index,
/// 2 × 65536 bytes plus the list type (ETG.1000.6 §5.6.3.3).
pub const MAX_INFO: usize = 2 * 65536 + 2;

/// Emergencies a client keeps until [`Client::take_emergencies`] (later ones are logged only).
pub const MAX_EMERGENCIES: usize = 64;

/// What can go wrong in a CoE transfer.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The device aborted the transfer (or answered an SDO information request with an error).
    #[error(
        "position {position}: SDO {index:#06x}:{sub:02x}: abort {code:#010x}: {}",
        abort_text(*code)
    )]
    Abort {
        /// Position of the subdevice.
        position: u16,
        /// Index.
        index: u16,
        /// Subindex.
        sub: u8,
        /// Abort code (ETG.1000.6 Table 41).
        code: u32,
    },
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
    /// The device answered with something that is not the answer.
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
    #[error("position {position}: {what}: mailbox error {detail:#06x}: {}", mailbox_error_text(*detail))]
    Mailbox {
        /// Position of the subdevice.
        position: u16,
        /// The transfer.
        what: String,
        /// Detail code.
        detail: u16,
    },
    /// The subdevice has no usable mailbox.
    #[error("position {position}: no CoE mailbox: {why}")]
    NoMailbox {
        /// Position of the subdevice.
        position: u16,
        /// Why not.
        why: String,
    },
    /// Data that cannot be sent (larger than an SDO can carry).
    #[error("position {position}: SDO {index:#06x}:{sub:02x}: {why}")]
    Request {
        /// Position of the subdevice.
        position: u16,
        /// Index.
        index: u16,
        /// Subindex.
        sub: u8,
        /// Why.
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

impl Error {
    /// The abort code, if the device aborted.
    pub fn abort_code(&self) -> Option<u32> {
        match self {
            Error::Abort { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// The text of a mailbox error detail code (ETG.1000.4 Table 30).
pub fn mailbox_error_text(detail: u16) -> &'static str {
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

/// A CoE emergency a device sent (ETG.1000.6 §5.6.4).
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
            value::hex_bytes(&self.data)
        )
    }
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

impl Geometry {
    /// The standard mailbox of the SII words 0x18..0x1B (ETG.2010 Table 2) on SM0 / SM1.
    pub fn from_sii(position: u16, m: &crate::sii::Mailbox) -> Result<Geometry, Error> {
        let g = Geometry {
            rx_sm: 0,
            rx_offset: m.rx_offset,
            rx_size: m.rx_size,
            tx_sm: 1,
            tx_offset: m.tx_offset,
            tx_size: m.tx_size,
        };
        g.check(position)?;
        Ok(g)
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
        let why = if a0 & 1 == 0 || a1 & 1 == 0 {
            Some("SM0/SM1 are not enabled (the subdevice is in INIT, or has no mailbox)")
        } else if c0 & 0x0f != 0x06 || c1 & 0x0f != 0x02 {
            Some("SM0/SM1 are not configured as mailboxes")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::NoMailbox {
                position,
                why: why.into(),
            });
        }
        let g = Geometry {
            rx_sm: 0,
            rx_offset,
            rx_size,
            tx_sm: 1,
            tx_offset,
            tx_size,
        };
        g.check(position)?;
        Ok(g)
    }

    fn check(&self, position: u16) -> Result<(), Error> {
        if self.rx_size < frame::MIN_MAILBOX || self.tx_size < frame::MIN_MAILBOX {
            return Err(Error::NoMailbox {
                position,
                why: format!(
                    "mailbox sizes {} / {} bytes, a CoE mailbox has at least {}",
                    self.rx_size,
                    self.tx_size,
                    frame::MIN_MAILBOX
                ),
            });
        }
        Ok(())
    }

    fn status_register(sm: u8) -> u16 {
        0x0805 + 8 * u16::from(sm)
    }
}

/// A mailbox the client received: one that parsed, and not an emergency.
struct Mailbox(Vec<u8>);

impl Mailbox {
    fn response(&self) -> Response<'_> {
        // `receive` keeps only mailboxes that parsed, and parsing is a pure function of the
        // bytes: this parse succeeds the same way.
        frame::parse(&self.0).expect("parsed once already")
    }
}

/// How long the client waits.
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

/// Register access to one subdevice: what the client needs of the bus. [`BusPort`] is the
/// EtherCAT one; tests put a scripted device behind it.
pub trait Port {
    /// Read `buf.len()` bytes from `register`.
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error>;
    /// Write `data` to `register`.
    fn write(&mut self, register: u16, data: &[u8]) -> Result<(), ethercrab::error::Error>;
}

/// A subdevice by its configured station address (FPRD/FPWR, ETG.1000.4 §5.4.3), which
/// ethercrab assigns at the scan (0x1000 + position).
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
        let r = block_on(Command::fprd(self.address, register).receive_slice(self.md, len))?;
        if r.len() < buf.len() {
            return Err(ethercrab::error::Error::Pdu(
                ethercrab::error::PduError::Decode,
            ));
        }
        buf.copy_from_slice(&r[..buf.len()]);
        Ok(())
    }

    fn write(&mut self, register: u16, data: &[u8]) -> Result<(), ethercrab::error::Error> {
        block_on(Command::fpwr(self.address, register).send(self.md, data))
    }
}

/// The CoE client of one subdevice.
pub struct Client<P: Port> {
    port: P,
    position: u16,
    geometry: Geometry,
    timeouts: Timeouts,
    counter: u8,
    /// The device has answered one of this client's requests.
    answered: bool,
    emergencies: Vec<Emergency>,
}

/// The client on the bus.
pub type BusClient<'a> = Client<BusPort<'a>>;

impl<'a> Client<BusPort<'a>> {
    /// The client of the subdevice at `position` with station `address` on `md`, its mailbox
    /// read from the SM registers (the subdevice must be in PRE-OP or above).
    pub fn on_bus(
        md: &'a MainDevice<'a>,
        position: u16,
        address: u16,
        timeouts: Timeouts,
    ) -> Result<Self, Error> {
        let mut port = BusPort::new(md, address);
        let geometry = Geometry::read(&mut port, position)?;
        Ok(Client::new(port, position, geometry, timeouts))
    }
}

/// Which objects an OD list asks for (ETG.1000.6 Table 45).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ListType {
    /// Every object.
    All = 1,
    /// Objects mappable into an RxPDO.
    RxPdoMappable = 2,
    /// Objects mappable into a TxPDO.
    TxPdoMappable = 3,
    /// Objects stored for a device replacement.
    Backup = 4,
    /// Startup parameters.
    Settings = 5,
}

impl<P: Port> Client<P> {
    /// A client on `port` with a known geometry.
    pub fn new(port: P, position: u16, geometry: Geometry, timeouts: Timeouts) -> Self {
        Client {
            port,
            position,
            geometry,
            timeouts,
            counter: 0,
            answered: false,
            emergencies: Vec::new(),
        }
    }

    /// The mailbox the client uses.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The subdevice's position.
    pub fn position(&self) -> u16 {
        self.position
    }

    /// Emergencies received since the last call (in the order they came).
    pub fn take_emergencies(&mut self) -> Vec<Emergency> {
        std::mem::take(&mut self.emergencies)
    }

    /// The counter of the last request (0 before the first).
    pub fn counter(&self) -> u8 {
        self.counter
    }

    /// Continue counting after `last` (the counter of the last request another client sent to
    /// this subdevice), so that its next request does not repeat it.
    pub fn continue_after(&mut self, last: u8) {
        self.counter = last & 0x07;
    }

    /// A request built into a buffer of the receive mailbox's size (every request the client
    /// sends fits it: the client sizes normal downloads and segments by the mailbox).
    fn request(&self, build: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
        let mut b = vec![0u8; usize::from(self.geometry.rx_size).max(frame::SDO_REQUEST_LEN)];
        let n = build(&mut b);
        b.truncate(n);
        b
    }

    fn next_counter(&mut self) -> u8 {
        self.counter = if self.counter >= 7 {
            1
        } else {
            self.counter + 1
        };
        self.counter
    }

    fn bus(&self, what: String) -> impl FnOnce(ethercrab::error::Error) -> Error {
        let position = self.position;
        move |source| Error::Bus {
            position,
            what,
            source,
        }
    }

    fn malformed(&self, what: &str, why: impl Into<String>) -> Error {
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

    fn keep_emergency(&mut self, r: &Response) -> bool {
        if let Response::Emergency {
            code,
            register,
            data,
        } = *r
        {
            let e = Emergency {
                position: self.position,
                code,
                register,
                data,
            };
            log::warn!("{e}");
            // Kept up to a bound: a device that floods emergencies does not grow the client.
            if self.emergencies.len() < MAX_EMERGENCIES {
                self.emergencies.push(e);
            }
            true
        } else {
            false
        }
    }

    /// Clear a stale response, wait for SM0 to be free, and write `req` padded to its size.
    fn send(&mut self, req: &[u8], what: &str) -> Result<(), Error> {
        // At most a few stale mailboxes: the device queues one behind the other at most.
        for _ in 0..4 {
            if !self.sm_full(self.geometry.tx_sm)? {
                break;
            }
            let stale = self.read_mailbox()?;
            match frame::parse(&stale) {
                Ok(r) => {
                    if !self.keep_emergency(&r) {
                        log::debug!(
                            "position {}: stale mailbox read away before {what}: {r:?}",
                            self.position
                        );
                    }
                }
                Err(e) => log::debug!(
                    "position {}: stale mailbox read away before {what}: {e}",
                    self.position
                ),
            }
        }
        let g = self.geometry;
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
        if req.len() > usize::from(g.rx_size) {
            return Err(self.malformed(what, "request larger than the receive mailbox"));
        }
        let mut padded = vec![0u8; usize::from(g.rx_size)];
        padded[..req.len()].copy_from_slice(req);
        self.port
            .write(g.rx_offset, &padded)
            .map_err(self.bus(format!(
                "FPWR {:#06x} (receive mailbox, {} bytes)",
                g.rx_offset, g.rx_size
            )))
    }

    /// Wait for the next CoE mailbox that is not an emergency.
    fn receive(&mut self, what: &str) -> Result<Mailbox, Error> {
        let deadline = Instant::now() + self.timeouts.response;
        loop {
            let full = self.sm_full(self.geometry.tx_sm)?;
            if full {
                let buf = self.read_mailbox()?;
                let r = frame::parse(&buf).map_err(|e| self.malformed(what, e.to_string()))?;
                match r {
                    Response::MailboxError { detail } => {
                        return Err(Error::Mailbox {
                            position: self.position,
                            what: what.to_string(),
                            detail,
                        });
                    }
                    Response::OtherProtocol { mailbox_type } => {
                        log::debug!(
                            "position {}: {what}: skipped a mailbox of type {mailbox_type:#x}",
                            self.position
                        );
                    }
                    ref r if self.keep_emergency(r) => {}
                    _ => return Ok(Mailbox(buf)),
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

    fn transact(&mut self, req: &[u8], what: &str) -> Result<Mailbox, Error> {
        self.send(req, what)?;
        let first = !self.answered;
        match self.receive(what) {
            // The first request of a client may repeat the counter of the last request someone
            // else (ethercrab, an earlier client) sent, and a device that discards a repeated
            // mailbox (ETG.1000.4 §5.6) then stays silent: once, the same request with the
            // next counter.
            Err(Error::Timeout { .. }) if first => {
                let c = self.next_counter();
                let mut again = req.to_vec();
                again[5] = (again[5] & 0x8f) | (c << 4);
                log::debug!(
                    "position {}: {what}: no answer to the first request; again with counter {c}",
                    self.position
                );
                self.send(&again, what)?;
                let r = self.receive(what);
                self.answered = r.is_ok();
                r
            }
            r => {
                self.answered |= r.is_ok();
                r
            }
        }
    }

    fn abort(&self, index: u16, sub: u8, code: u32) -> Error {
        Error::Abort {
            position: self.position,
            index,
            sub,
            code,
        }
    }

    /// Tell the device the client gives up a transfer (best effort: the error that caused it is
    /// what the caller gets).
    fn send_abort(&mut self, index: u16, sub: u8, code: u32, what: &str) {
        let c = self.next_counter();
        let req = self.request(|b| frame::abort_request(b, c, index, sub, code));
        if let Err(e) = self.send(&req, what) {
            log::debug!("{what}: sending the abort failed: {e}");
        }
    }

    fn check_echo(
        &mut self,
        what: &str,
        want: (u16, u8),
        got: (u16, u8),
        ca: bool,
    ) -> Result<(), Error> {
        // With complete access a device may echo subindex 0 or 1; the index must match.
        if got.0 != want.0 || (!ca && got.1 != want.1) {
            return Err(self.malformed(what, format!("answer for {:#06x}:{:02x}", got.0, got.1)));
        }
        Ok(())
    }

    /// Upload (read) `index:sub`: the object's bytes, however the device transfers them.
    pub fn upload(&mut self, index: u16, sub: u8) -> Result<Vec<u8>, Error> {
        self.upload_inner(index, sub, false)
    }

    /// Upload `index` by complete access: every subindex at once, from subindex 0 (with its
    /// byte) when `with_sub0`, else from subindex 1 (ETG.1000.6 §5.6.2.1.2). The bytes are as
    /// the device packs them.
    pub fn upload_complete(&mut self, index: u16, with_sub0: bool) -> Result<Vec<u8>, Error> {
        self.upload_inner(index, u8::from(!with_sub0), true)
    }

    fn upload_inner(&mut self, index: u16, sub: u8, ca: bool) -> Result<Vec<u8>, Error> {
        let what = format!(
            "SDO {index:#06x}:{sub:02x} upload{}",
            if ca { " (complete access)" } else { "" }
        );
        let c = self.next_counter();
        let req = self.request(|b| frame::upload_request(b, c, index, sub, ca));
        let first = self.transact(&req, &what)?;
        let (complete, mut data) = match first.response() {
            Response::Abort { code, .. } => return Err(self.abort(index, sub, code)),
            Response::UploadExpedited {
                index: i,
                sub: s,
                data,
            } => {
                self.check_echo(&what, (index, sub), (i, s), ca)?;
                return Ok(data.to_vec());
            }
            Response::UploadNormal {
                index: i,
                sub: s,
                complete_size,
                data,
            } => {
                self.check_echo(&what, (index, sub), (i, s), ca)?;
                (complete_size, data.to_vec())
            }
            r => return Err(self.malformed(&what, format!("not an upload response: {r:?}"))),
        };
        if complete > MAX_UPLOAD {
            self.send_abort(index, sub, 0x0504_0005, &what);
            return Err(self.malformed(
                &what,
                format!("complete size {complete} bytes, the client takes at most {MAX_UPLOAD}"),
            ));
        }
        let complete = complete as usize;
        if data.len() >= complete {
            // A normal transfer in one mailbox; what follows the complete size is padding.
            data.truncate(complete);
            return Ok(data);
        }
        // Segmented (ETG.1000.6 §5.6.2.6): upload segment requests, toggling from 0.
        let mut toggle = false;
        loop {
            let c = self.next_counter();
            let req = self.request(|b| frame::upload_segment_request(b, c, toggle));
            let mb = self.transact(&req, &what)?;
            match mb.response() {
                Response::Abort { code, .. } => return Err(self.abort(index, sub, code)),
                Response::UploadSegment {
                    toggle: t,
                    last,
                    data: seg,
                } => {
                    if t != toggle {
                        self.send_abort(index, sub, 0x0503_0000, &what);
                        return Err(self.malformed(&what, "segment toggle bit not changed"));
                    }
                    if seg.is_empty() && !last {
                        self.send_abort(index, sub, 0x0504_0001, &what);
                        return Err(self.malformed(&what, "empty segment that is not the last"));
                    }
                    if data.len() + seg.len() > complete {
                        self.send_abort(index, sub, 0x0504_0001, &what);
                        return Err(self.malformed(
                            &what,
                            format!(
                                "segments carry more than the complete size of {complete} bytes"
                            ),
                        ));
                    }
                    data.extend_from_slice(seg);
                    if last {
                        break;
                    }
                }
                r => {
                    return Err(
                        self.malformed(&what, format!("not an upload segment response: {r:?}"))
                    );
                }
            }
            toggle = !toggle;
        }
        if data.len() != complete {
            return Err(self.malformed(
                &what,
                format!("last segment after {} of {complete} bytes", data.len()),
            ));
        }
        Ok(data)
    }

    /// Download (write) `data` to `index:sub`: expedited up to 4 bytes, normal when it fits
    /// the mailbox, segmented when larger.
    pub fn download(&mut self, index: u16, sub: u8, data: &[u8]) -> Result<(), Error> {
        self.download_inner(index, sub, false, data)
    }

    /// Download `data` to `index` by complete access, from subindex 0 when `with_sub0`.
    pub fn download_complete(
        &mut self,
        index: u16,
        with_sub0: bool,
        data: &[u8],
    ) -> Result<(), Error> {
        self.download_inner(index, u8::from(!with_sub0), true, data)
    }

    fn download_inner(&mut self, index: u16, sub: u8, ca: bool, data: &[u8]) -> Result<(), Error> {
        let what = format!(
            "SDO {index:#06x}:{sub:02x} download{}",
            if ca { " (complete access)" } else { "" }
        );
        let Ok(complete) = u32::try_from(data.len()) else {
            return Err(Error::Request {
                position: self.position,
                index,
                sub,
                why: format!("{} bytes do not fit an SDO (32-bit size)", data.len()),
            });
        };
        if data.is_empty() {
            return Err(Error::Request {
                position: self.position,
                index,
                sub,
                why: "no data to write".into(),
            });
        }
        let c = self.next_counter();
        let rx = usize::from(self.geometry.rx_size);
        let (req, mut sent) = if data.len() <= 4 {
            (
                self.request(|b| frame::download_expedited(b, c, index, sub, ca, data)),
                data.len(),
            )
        } else {
            let n = data.len().min(rx.saturating_sub(frame::SDO_DATA + 4));
            (
                self.request(|b| {
                    frame::download_normal(b, c, index, sub, ca, complete, &data[..n])
                }),
                n,
            )
        };
        let mb = self.transact(&req, &what)?;
        match mb.response() {
            Response::Abort { code, .. } => return Err(self.abort(index, sub, code)),
            Response::DownloadAck { index: i, sub: s } => {
                self.check_echo(&what, (index, sub), (i, s), ca)?
            }
            r => return Err(self.malformed(&what, format!("not a download response: {r:?}"))),
        }
        // Segments (ETG.1000.6 §5.6.2.3): mailbox header 6 + CoE 2 + segment header 1.
        let seg_max = rx.saturating_sub(frame::MBX_HEADER + 3).max(1);
        let mut toggle = false;
        while sent < data.len() {
            let n = (data.len() - sent).min(seg_max);
            let last = sent + n == data.len();
            let c = self.next_counter();
            let req = self
                .request(|b| frame::download_segment(b, c, toggle, last, &data[sent..sent + n]));
            let mb = self.transact(&req, &what)?;
            match mb.response() {
                Response::Abort { code, .. } => return Err(self.abort(index, sub, code)),
                Response::DownloadSegmentAck { toggle: t } if t == toggle => {}
                Response::DownloadSegmentAck { .. } => {
                    self.send_abort(index, sub, 0x0503_0000, &what);
                    return Err(self.malformed(&what, "segment toggle bit not changed"));
                }
                r => {
                    return Err(
                        self.malformed(&what, format!("not a download segment response: {r:?}"))
                    );
                }
            }
            sent += n;
            toggle = !toggle;
        }
        Ok(())
    }

    /// An SDO information service: one request, one or more response fragments, their data
    /// concatenated (ETG.1000.6 §5.6.3.2).
    fn info(
        &mut self,
        req: &[u8],
        want: u8,
        index: u16,
        sub: u8,
        what: &str,
    ) -> Result<Vec<u8>, Error> {
        self.send(req, what)?;
        let mut out = Vec::new();
        let mut expect_left: Option<u16> = None;
        loop {
            let mb = self.receive(what)?;
            match mb.response() {
                Response::InfoError { code } => return Err(self.abort(index, sub, code)),
                Response::Abort { code, .. } => return Err(self.abort(index, sub, code)),
                Response::Info {
                    opcode,
                    incomplete,
                    fragments_left,
                    data,
                } => {
                    if opcode != want {
                        return Err(self.malformed(
                            what,
                            format!("SDO information opcode {opcode:#x}, expected {want:#x}"),
                        ));
                    }
                    if let Some(e) = expect_left
                        && fragments_left != e
                    {
                        return Err(self.malformed(
                            what,
                            format!(
                                "fragment with {fragments_left} left after one with {}",
                                e + 1
                            ),
                        ));
                    }
                    if out.len() + data.len() > MAX_INFO {
                        return Err(self.malformed(
                            what,
                            format!("SDO information response beyond {MAX_INFO} bytes"),
                        ));
                    }
                    out.extend_from_slice(data);
                    if !incomplete {
                        return Ok(out);
                    }
                    let Some(next) = fragments_left.checked_sub(1) else {
                        return Err(self
                            .malformed(what, "fragment marked incomplete with 0 fragments left"));
                    };
                    expect_left = Some(next);
                }
                r => {
                    return Err(
                        self.malformed(what, format!("not an SDO information response: {r:?}"))
                    );
                }
            }
        }
    }

    /// The indices of the objects in `list` (Get OD list).
    pub fn od_list(&mut self, list: ListType) -> Result<Vec<u16>, Error> {
        let what = format!("SDO information: OD list (type {})", list as u16);
        let c = self.next_counter();
        let data = self.info(
            &self.request(|b| frame::od_list_request(b, c, list as u16)),
            frame::opcode::OD_LIST_RESP,
            0,
            0,
            &what,
        )?;
        let (_, list) =
            frame::parse_od_list(&data).map_err(|e| self.malformed(&what, e.to_string()))?;
        Ok(list)
    }

    /// The description of object `index` (Get object description).
    pub fn object_description(&mut self, index: u16) -> Result<ObjectDescription, Error> {
        let what = format!("SDO information: object {index:#06x} description");
        let c = self.next_counter();
        let data = self.info(
            &self.request(|b| frame::object_description_request(b, c, index)),
            frame::opcode::OBJECT_DESC_RESP,
            index,
            0,
            &what,
        )?;
        let d = frame::parse_object_description(&data)
            .map_err(|e| self.malformed(&what, e.to_string()))?;
        if d.index != index {
            return Err(self.malformed(&what, format!("description of {:#06x}", d.index)));
        }
        Ok(d)
    }

    /// The description of entry `index:sub` (Get entry description, no value information).
    pub fn entry_description(&mut self, index: u16, sub: u8) -> Result<EntryDescription, Error> {
        let what = format!("SDO information: entry {index:#06x}:{sub:02x} description");
        let c = self.next_counter();
        let data = self.info(
            &self.request(|b| frame::entry_description_request(b, c, index, sub)),
            frame::opcode::ENTRY_DESC_RESP,
            index,
            sub,
            &what,
        )?;
        let d = frame::parse_entry_description(&data)
            .map_err(|e| self.malformed(&what, e.to_string()))?;
        if (d.index, d.sub) != (index, sub) {
            return Err(self.malformed(
                &what,
                format!("description of {:#06x}:{:02x}", d.index, d.sub),
            ));
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests;
