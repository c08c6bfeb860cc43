//! FoE (File access over EtherCAT, ETG.1000.5/.6): reading and writing a device's files through
//! its mailbox — firmware images, parameter files — on the mailbox layer ([`crate::mailbox`]),
//! which it shares with CoE (one counter per subdevice).
//!
//! ## How a transfer goes
//! - **Read**: RRQ (password, name) → DATA 1, ACK 1 → DATA 2, … A DATA shorter than the most
//!   the device's send mailbox carries (its size − 12) ends the file; its ACK gets no answer.
//! - **Write**: WRQ (password, name) → ACK 0, then DATA n → ACK n, in packets of the most the
//!   receive mailbox carries (its size − 12); a shorter packet ends the file, an empty one when
//!   the file is a whole number of packets.
//! - **BUSY** (the device erases its flash, checks an image): the client repeats its last request
//!   after a pause, as SOEM does, for at most [`Limits::busy`]; the device's progress
//!   (`done`/`entire`) goes to the caller's progress callback.
//! - **ERROR** from the device ends the transfer with its code and text ([`frame::error_text`]).
//!   When the client gives up (a timeout, a malformed reply, its size limit) it sends ERROR to the
//!   device, so that the device drops the transfer and can start over.
//!
//! Firmware is often served only in the device's BOOT state, with its bootstrap mailbox:
//! [`boot`] takes a device INIT → BOOT and back; [`update`] does it for one device of a running
//! segment, through the cycle's queue, while the others cycle on.

pub mod boot;
pub mod frame;
pub mod update;

pub use frame::{code, error_text};

use crate::mailbox::{self, BusPort, Mailbox, Transport};
use frame::Reply;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Default largest file the client reads: a bound on what a broken device can make the master
/// allocate, far above drive firmware images (a few MiB).
pub const MAX_READ: usize = 64 << 20;

/// Longest file name the client sends; the device's receive mailbox bounds it further (its size
/// − 12 bytes of headers).
pub const MAX_NAME: usize = 255;

/// What can go wrong in an FoE transfer.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The device ended the transfer with an FoE error.
    #[error(
        "position {position}: FoE {op} {file:?}: the device refused it{}: FoE error {code:#06x}, {}{}",
        after(*done, *total), error_text(*code), device_text(text)
    )]
    Device {
        /// Position of the subdevice.
        position: u16,
        /// `read` or `write`.
        op: &'static str,
        /// The file name.
        file: String,
        /// Bytes transferred before (0: at the request).
        done: u64,
        /// Bytes of the whole file (a write).
        total: Option<u64>,
        /// FoE error code.
        code: u32,
        /// The device's text.
        text: String,
    },
    /// The file is larger than the client reads ([`Limits::max_read`]).
    #[error(
        "position {position}: FoE read {file:?}: the file is larger than {limit} bytes (the most \
         this read takes); the transfer was ended"
    )]
    TooLarge {
        /// Position of the subdevice.
        position: u16,
        /// The file name.
        file: String,
        /// The limit.
        limit: usize,
    },
    /// The device kept answering BUSY.
    #[error(
        "position {position}: FoE {op} {file:?}: the device stayed busy for {} s{}",
        waited.as_secs(), busy_text(text)
    )]
    Busy {
        /// Position of the subdevice.
        position: u16,
        /// `read` or `write`.
        op: &'static str,
        /// The file name.
        file: String,
        /// How long.
        waited: Duration,
        /// The device's last busy text.
        text: String,
    },
    /// The device answered out of turn (a wrong packet number, an opcode the transfer does not
    /// expect).
    #[error("position {position}: FoE {op} {file:?}: {why}")]
    Protocol {
        /// Position of the subdevice.
        position: u16,
        /// `read` or `write`.
        op: &'static str,
        /// The file name.
        file: String,
        /// What was wrong.
        why: String,
    },
    /// The request cannot be sent (an empty or too long name).
    #[error("FoE: {0}")]
    Request(String),
    /// The mailbox transport failed.
    #[error(transparent)]
    Mailbox(#[from] mailbox::Error),
    /// The BOOT state could not be entered or left.
    #[error("position {position}: {why}")]
    State {
        /// Position of the subdevice.
        position: u16,
        /// What happened.
        why: String,
    },
}

fn after(done: u64, total: Option<u64>) -> String {
    match total {
        _ if done == 0 => String::new(),
        Some(t) => format!(" after {done} of {t} bytes"),
        None => format!(" after {done} bytes"),
    }
}

fn device_text(t: &str) -> String {
    if t.is_empty() {
        String::new()
    } else {
        format!(" (device: {t:?})")
    }
}

fn busy_text(t: &str) -> String {
    if t.is_empty() {
        String::new()
    } else {
        format!(" ({t:?})")
    }
}

impl Error {
    /// The FoE error code, if the device refused.
    pub fn code(&self) -> Option<u32> {
        match self {
            Error::Device { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// How much the client takes and waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file a read takes.
    pub max_read: usize,
    /// How long the device may keep answering BUSY before the client gives up (a flash erase
    /// takes seconds).
    pub busy: Duration,
    /// Pause before a request is repeated after BUSY.
    pub busy_pause: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_read: MAX_READ,
            busy: Duration::from_secs(60),
            busy_pause: Duration::from_millis(10),
        }
    }
}

/// Where a transfer is, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes transferred.
    pub done: u64,
    /// Bytes in all (a write; a read does not know).
    pub total: Option<u64>,
    /// The device answered BUSY with this progress (done, entire) of its own work.
    pub busy: Option<(u16, u16)>,
}

/// The FoE client of one subdevice, on its mailbox transport (borrowed: the transport, its
/// counter and what it set aside stay with the caller, for CoE or the next transfer).
pub struct Client<'m, T: Transport + ?Sized> {
    mbx: &'m mut T,
    limits: Limits,
}

/// The client on the bus (the PRE-OP tools).
pub type BusClient<'m, 'a> = Client<'m, Mailbox<BusPort<'a>>>;

/// One transfer's names, for its errors.
struct Op<'n> {
    position: u16,
    op: &'static str,
    file: &'n str,
    /// The file's size (a write).
    total: Option<u64>,
}

impl Op<'_> {
    fn what(&self, step: &str) -> String {
        format!("FoE {} {:?}: {step}", self.op, self.file)
    }

    fn device(&self, done: u64, code: u32, text: &[u8]) -> Error {
        Error::Device {
            position: self.position,
            op: self.op,
            file: self.file.to_string(),
            done,
            total: self.total,
            code,
            text: String::from_utf8_lossy(text).into_owned(),
        }
    }

    fn protocol(&self, why: impl Into<String>) -> Error {
        Error::Protocol {
            position: self.position,
            op: self.op,
            file: self.file.to_string(),
            why: why.into(),
        }
    }
}

impl<'m, T: Transport + ?Sized> Client<'m, T> {
    /// A client on a transport (its counter and emergencies go on).
    pub fn new(mbx: &'m mut T) -> Self {
        Client {
            mbx,
            limits: Limits::default(),
        }
    }

    /// The transport.
    pub fn mailbox(&mut self) -> &mut T {
        self.mbx
    }

    /// Take and wait this much.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The limits in use.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn check_name(&self, name: &str) -> Result<(), Error> {
        let room = usize::from(self.mbx.geometry().rx_size).saturating_sub(frame::OVERHEAD);
        if name.is_empty() {
            return Err(Error::Request("the file name is empty".into()));
        }
        if name.len() > MAX_NAME.min(room) {
            return Err(Error::Request(format!(
                "file name {name:?}: {} bytes, the device's mailbox takes at most {}",
                name.len(),
                MAX_NAME.min(room)
            )));
        }
        Ok(())
    }

    fn build(&self, f: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
        let mut b = vec![0u8; usize::from(self.mbx.geometry().rx_size).max(frame::OVERHEAD)];
        let n = f(&mut b);
        b.truncate(n);
        b
    }

    /// Tell the device the client gives up (best effort: the error that caused it is what the
    /// caller gets), so that it can start over.
    fn give_up(&mut self, op: &Op<'_>, code: u32, text: &str) {
        let req = self.build(|b| frame::error(b, code, text.as_bytes()));
        if let Err(e) = self.mbx.send(&req, &op.what("error")) {
            log::debug!("{}: sending the FoE error failed: {e}", op.what("give up"));
        }
    }

    /// Send `req` and wait for the FoE reply; a BUSY reply repeats `req` (after a pause) until
    /// another reply or [`Limits::busy`]. Returns the reply mailbox.
    fn exchange(
        &mut self,
        op: &Op<'_>,
        req: &[u8],
        step: &str,
        progress: &mut dyn FnMut(Progress),
        at: (u64, Option<u64>),
    ) -> Result<Vec<u8>, Error> {
        let what = op.what(step);
        let mut busy_since: Option<Instant> = None;
        loop {
            let buf = self.mbx.transact(req, &what)?;
            match frame::parse(&buf) {
                Ok(Reply::Busy { done, entire, text }) => {
                    let since = *busy_since.get_or_insert_with(Instant::now);
                    progress(Progress {
                        done: at.0,
                        total: at.1,
                        busy: Some((done, entire)),
                    });
                    if since.elapsed() >= self.limits.busy {
                        let text = String::from_utf8_lossy(text).into_owned();
                        self.give_up(op, code::NOT_DEFINED, "master: busy too long");
                        return Err(Error::Busy {
                            position: op.position,
                            op: op.op,
                            file: op.file.to_string(),
                            waited: since.elapsed(),
                            text,
                        });
                    }
                    std::thread::sleep(self.limits.busy_pause);
                }
                Ok(_) => return Ok(buf),
                Err(e) => {
                    self.give_up(op, code::ILLEGAL, "master: malformed reply");
                    return Err(mailbox::Error::Malformed {
                        position: op.position,
                        what,
                        why: e.to_string(),
                    }
                    .into());
                }
            }
        }
    }

    /// Read the file `name` with `password` (0: none). `progress` is called after every packet.
    pub fn read(
        &mut self,
        name: &str,
        password: u32,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<u8>, Error> {
        self.check_name(name)?;
        let op = Op {
            position: self.mbx.position(),
            op: "read",
            file: name,
            total: None,
        };
        let full = usize::from(self.mbx.geometry().tx_size).saturating_sub(frame::OVERHEAD);
        let mut req = self.build(|b| frame::read_request(b, password, name.as_bytes()));
        let mut out: Vec<u8> = Vec::new();
        let mut packet: u32 = 1;
        loop {
            let step = if packet == 1 {
                "read request".to_string()
            } else {
                format!("packet {packet}")
            };
            let r = self.exchange(&op, &req, &step, progress, (out.len() as u64, None));
            let buf = match r {
                Ok(b) => b,
                // A transfer under way that the master abandons: the device is told.
                Err(e @ Error::Mailbox(mailbox::Error::Timeout { .. })) if packet > 1 => {
                    self.give_up(&op, code::NOT_DEFINED, "master: timeout");
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            match frame::parse(&buf) {
                Ok(Reply::Data { packet: n, data }) => {
                    if n != packet {
                        self.give_up(&op, code::PACKET_NUMBER, "master: packet number wrong");
                        return Err(op.protocol(format!(
                            "the device sent packet {n} where packet {packet} was due"
                        )));
                    }
                    if out.len() + data.len() > self.limits.max_read {
                        self.give_up(&op, code::DISK_FULL, "master: file too large");
                        return Err(Error::TooLarge {
                            position: op.position,
                            file: name.to_string(),
                            limit: self.limits.max_read,
                        });
                    }
                    out.extend_from_slice(data);
                    let last = data.len() < full;
                    progress(Progress {
                        done: out.len() as u64,
                        total: None,
                        busy: None,
                    });
                    req = self.build(|b| frame::ack(b, packet));
                    if last {
                        // The last ACK gets no answer.
                        self.mbx.send(&req, &op.what(&format!("ack {packet}")))?;
                        return Ok(out);
                    }
                    packet = packet.checked_add(1).ok_or_else(|| {
                        op.protocol("more than 2^32 - 1 packets (the packet number wraps)")
                    })?;
                }
                Ok(Reply::Error { code, text }) => {
                    return Err(op.device(out.len() as u64, code, text));
                }
                Ok(r) => {
                    self.give_up(&op, code::ILLEGAL, "master: unexpected reply");
                    return Err(op.protocol(format!("unexpected reply to a read: {r:?}")));
                }
                Err(e) => return Err(op.protocol(e.to_string())),
            }
        }
    }

    /// Write `data` to the file `name` with `password` (0: none). `progress` is called after
    /// every acknowledged packet.
    pub fn write(
        &mut self,
        name: &str,
        password: u32,
        data: &[u8],
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), Error> {
        self.check_name(name)?;
        let op = Op {
            position: self.mbx.position(),
            op: "write",
            file: name,
            total: Some(data.len() as u64),
        };
        let total = Some(data.len() as u64);
        let chunk = usize::from(self.mbx.geometry().rx_size).saturating_sub(frame::OVERHEAD);
        if chunk == 0 {
            return Err(Error::Request(format!(
                "the receive mailbox of {} bytes carries no FoE data",
                self.mbx.geometry().rx_size
            )));
        }
        let req = self.build(|b| frame::write_request(b, password, name.as_bytes()));
        let buf = self.exchange(&op, &req, "write request", progress, (0, total))?;
        match frame::parse(&buf) {
            Ok(Reply::Ack { packet: 0 }) => {}
            Ok(Reply::Error { code, text }) => return Err(op.device(0, code, text)),
            Ok(r) => {
                self.give_up(&op, code::ILLEGAL, "master: unexpected reply");
                return Err(op.protocol(format!("unexpected reply to a write request: {r:?}")));
            }
            Err(e) => return Err(op.protocol(e.to_string())),
        }
        let mut sent = 0usize;
        let mut packet: u32 = 1;
        loop {
            let n = (data.len() - sent).min(chunk);
            let req = self.build(|b| frame::data(b, packet, &data[sent..sent + n]));
            let step = format!("packet {packet}");
            let buf = match self.exchange(&op, &req, &step, progress, (sent as u64, total)) {
                Ok(b) => b,
                Err(e @ Error::Mailbox(mailbox::Error::Timeout { .. })) => {
                    self.give_up(&op, code::NOT_DEFINED, "master: timeout");
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            match frame::parse(&buf) {
                Ok(Reply::Ack { packet: a }) if a == packet => {}
                Ok(Reply::Ack { packet: a }) => {
                    self.give_up(&op, code::PACKET_NUMBER, "master: packet number wrong");
                    return Err(op.protocol(format!(
                        "the device acknowledged packet {a} where packet {packet} was sent"
                    )));
                }
                Ok(Reply::Error { code, text }) => {
                    return Err(op.device(sent as u64, code, text));
                }
                Ok(r) => {
                    self.give_up(&op, code::ILLEGAL, "master: unexpected reply");
                    return Err(op.protocol(format!("unexpected reply to DATA: {r:?}")));
                }
                Err(e) => return Err(op.protocol(e.to_string())),
            }
            sent += n;
            progress(Progress {
                done: sent as u64,
                total,
                busy: None,
            });
            // A short packet ended the file (an empty one after a whole number of packets).
            if n < chunk {
                return Ok(());
            }
            packet = packet
                .checked_add(1)
                .ok_or_else(|| op.protocol("more than 2^32 - 1 packets"))?;
        }
    }
}

#[cfg(test)]
mod tests;
