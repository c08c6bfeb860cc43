//! rtcat's CoE client: SDO upload and download (expedited, normal, segmented), complete access,
//! the SDO information service, and emergencies, over a subdevice's mailbox
//! ([`crate::mailbox`]: geometry, transport, counter, emergencies).
//!
//! ## Why not ethercrab's
//! ethercrab 0.7.1's CoE client (`mailbox/coe/mod.rs`) downloads only expedited values ("Only 4
//! byte SDO writes or smaller are supported"), has no complete access and no object or entry
//! description, and `assert_ne!`s (panics) when the response mailbox holds an emergency — which a
//! device may send at any time (ETG.1000.6 §5.6.4). Device configuration writes strings, PDO
//! mappings by complete access and values of 8 bytes, and its input comes from the wire, so this
//! client talks to the mailbox itself through ethercrab's public raw datagrams
//! ([`ethercrab::Command::fprd`] / [`fpwr`](ethercrab::Command::fpwr)), as the master's register
//! access does. ethercrab's own client is used only by ethercrab itself (its process data sizing
//! in PRE-OP → SAFE-OP); the `[[device]]` configuration and the layout's reads are this client's,
//! one [`OnDemand`] per subdevice, its frames behind the bring-up's PDU gate.
//!
//! ## How a transfer goes
//! The request is built by [`frame`] into a buffer of the mailbox's size, the mailbox layer sends
//! it with the subdevice's next counter and waits for the next CoE mailbox that is not an
//! emergency (emergencies are kept, other protocols' mailboxes set aside), and [`frame::parse`]
//! decodes it. The transport and its counter can pass from one client to another, of CoE or of
//! another protocol ([`Client::from_mailbox`], [`Client::into_mailbox`]).

pub mod abort;
pub mod frame;
pub mod info;
pub mod segment;
pub mod value;

pub use abort::abort_text;
pub use frame::{EntryDescription, ObjectDescription, ParseError, Response};
pub use value::{SdoType, ValueError};

pub use crate::mailbox::{
    BusPort, Emergency, Geometry, MAX_EMERGENCIES, Port, Timeouts, error_text as mailbox_error_text,
};

use crate::mailbox::{self, BusMailbox, Mailbox};
use ethercrab::MainDevice;
use std::time::Duration;
use thiserror::Error;

/// Largest object the client uploads (its complete size): far above parameters and names; a
/// bound on what a broken device can make the master allocate.
pub const MAX_UPLOAD: u32 = 1 << 20;

/// Largest SDO information response (all fragments): the OD list of every index,
/// 2 × 65536 bytes plus the list type (ETG.1000.6 §5.6.3.3).
pub const MAX_INFO: usize = 2 * 65536 + 2;

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

impl From<mailbox::Error> for Error {
    fn from(e: mailbox::Error) -> Self {
        match e {
            mailbox::Error::Timeout {
                position,
                step,
                timeout,
            } => Error::Timeout {
                position,
                step,
                timeout,
            },
            mailbox::Error::Malformed {
                position,
                what,
                why,
            } => Error::Malformed {
                position,
                what,
                why,
            },
            mailbox::Error::Mailbox {
                position,
                what,
                detail,
            } => Error::Mailbox {
                position,
                what,
                detail,
            },
            mailbox::Error::NoMailbox { position, why } => Error::NoMailbox { position, why },
            mailbox::Error::Queue {
                position,
                what,
                why,
            } => Error::Malformed {
                position,
                what,
                why,
            },
            mailbox::Error::Bus {
                position,
                what,
                source,
            } => Error::Bus {
                position,
                what,
                source,
            },
        }
    }
}

/// The CoE client of one subdevice, on its mailbox transport.
pub struct Client<P: Port> {
    pub(crate) mbx: Mailbox<P>,
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
        Ok(Client::from_mailbox(BusMailbox::on_bus(
            md, position, address, timeouts,
        )?))
    }
}

/// The CoE client of one subdevice on the bus, opened at its first transfer (its mailbox read
/// from the SM registers then): the `[[device]]` configuration of a subdevice and the read-back
/// of its mapping share one, so one counter runs through all of their requests, and a
/// subdevice without CoE (nothing to transfer) never has its mailbox read.
pub struct OnDemand<'a> {
    md: &'a MainDevice<'a>,
    position: u16,
    address: u16,
    timeouts: Timeouts,
    after: u8,
    client: Option<BusClient<'a>>,
}

impl<'a> OnDemand<'a> {
    /// The subdevice at `position` with station `address` on `md` (nothing is sent yet).
    pub fn new(md: &'a MainDevice<'a>, position: u16, address: u16, timeouts: Timeouts) -> Self {
        OnDemand {
            md,
            position,
            address,
            timeouts,
            after: 0,
            client: None,
        }
    }

    /// Continue counting after `last` (the last counter an earlier transport of rtcat sent to
    /// this subdevice).
    pub fn continue_after(mut self, last: u8) -> Self {
        self.after = last;
        self
    }

    /// The subdevice's position.
    pub fn position(&self) -> u16 {
        self.position
    }

    /// The client, its mailbox read at the first call.
    pub fn client(&mut self) -> Result<&mut BusClient<'a>, Error> {
        if self.client.is_none() {
            let mut c = Client::on_bus(self.md, self.position, self.address, self.timeouts)?;
            c.continue_after(self.after);
            self.client = Some(c);
        }
        self.client.as_mut().ok_or_else(|| Error::NoMailbox {
            position: self.position,
            why: "client not opened (internal)".into(),
        })
    }

    /// The counter of the last request (what the next transport continues after).
    pub fn counter(&self) -> u8 {
        self.client.as_ref().map_or(self.after, |c| c.counter())
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
        Client::from_mailbox(Mailbox::new(port, position, geometry, timeouts))
    }

    /// A client on a transport (its counter, emergencies and set-aside mailboxes go on).
    pub fn from_mailbox(mbx: Mailbox<P>) -> Self {
        Client { mbx }
    }

    /// The transport, for another protocol's client to go on with.
    pub fn into_mailbox(self) -> Mailbox<P> {
        self.mbx
    }

    /// The transport.
    pub fn mailbox(&mut self) -> &mut Mailbox<P> {
        &mut self.mbx
    }

    /// The mailbox the client uses.
    pub fn geometry(&self) -> Geometry {
        self.mbx.geometry()
    }

    /// The subdevice's position.
    pub fn position(&self) -> u16 {
        self.mbx.position()
    }

    /// Emergencies received since the last call (in the order they came).
    pub fn take_emergencies(&mut self) -> Vec<Emergency> {
        self.mbx.take_emergencies()
    }

    /// The counter of the last request (0 before the first).
    pub fn counter(&self) -> u8 {
        self.mbx.counter()
    }

    /// Continue counting after `last` (the counter of the last request another client sent to
    /// this subdevice), so that its next request does not repeat it.
    pub fn continue_after(&mut self, last: u8) {
        self.mbx.continue_after(last);
    }

    /// A request built into a buffer of the receive mailbox's size (every request the client
    /// sends fits it: the client sizes normal downloads and segments by the mailbox). The
    /// counter is the transport's: it stamps it when it sends.
    fn request(&self, build: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
        let mut b = self.mbx.buffer(frame::SDO_REQUEST_LEN);
        let n = build(&mut b);
        b.truncate(n);
        b
    }

    fn malformed(&self, what: &str, why: impl Into<String>) -> Error {
        self.mbx.malformed(what, why).into()
    }

    /// Send `req` and wait for the CoE reply.
    fn transact(&mut self, req: &[u8], what: &str) -> Result<Reply, Error> {
        let buf = self.mbx.transact(req, what)?;
        self.reply(buf, what)
    }

    /// The next CoE reply (after a request already sent).
    fn receive(&mut self, what: &str) -> Result<Reply, Error> {
        let buf = self.mbx.receive(mailbox::kind::COE, what)?;
        self.reply(buf, what)
    }

    fn reply(&self, buf: Vec<u8>, what: &str) -> Result<Reply, Error> {
        frame::parse(&buf).map_err(|e| self.malformed(what, e.to_string()))?;
        Ok(Reply(buf))
    }

    fn abort(&self, index: u16, sub: u8, code: u32) -> Error {
        Error::Abort {
            position: self.position(),
            index,
            sub,
            code,
        }
    }

    /// Tell the device the client gives up a transfer (best effort: the error that caused it is
    /// what the caller gets).
    fn send_abort(&mut self, index: u16, sub: u8, code: u32, what: &str) {
        let req = self.request(|b| frame::abort_request(b, 0, index, sub, code));
        if let Err(e) = self.mbx.send(&req, what) {
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

    /// Upload an unsigned value of `width` bytes (1, 2 or 4) from `index:sub`: the first
    /// `width` bytes of what the device sends, little-endian (ethercrab's `sdo_read` takes the
    /// same prefix), an answer shorter than that malformed.
    pub fn upload_uint(&mut self, index: u16, sub: u8, width: usize) -> Result<u32, Error> {
        let v = self.upload(index, sub)?;
        if v.len() < width || width > 4 {
            return Err(self.malformed(
                &format!("SDO {index:#06x}:{sub:02x} upload"),
                format!("{} bytes, a {width}-byte value expected", v.len()),
            ));
        }
        let mut b = [0u8; 4];
        b[..width].copy_from_slice(&v[..width]);
        Ok(u32::from_le_bytes(b))
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
        let req = self.request(|b| frame::upload_request(b, 0, index, sub, ca));
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
            let req = self.request(|b| frame::upload_segment_request(b, 0, toggle));
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
                position: self.position(),
                index,
                sub,
                why: format!("{} bytes do not fit an SDO (32-bit size)", data.len()),
            });
        };
        if data.is_empty() {
            return Err(Error::Request {
                position: self.position(),
                index,
                sub,
                why: "no data to write".into(),
            });
        }
        let rx = usize::from(self.geometry().rx_size);
        let (req, mut sent) = if data.len() <= 4 {
            (
                self.request(|b| frame::download_expedited(b, 0, index, sub, ca, data)),
                data.len(),
            )
        } else {
            let n = data.len().min(rx.saturating_sub(frame::SDO_DATA + 4));
            (
                self.request(|b| {
                    frame::download_normal(b, 0, index, sub, ca, complete, &data[..n])
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
            let req = self
                .request(|b| frame::download_segment(b, 0, toggle, last, &data[sent..sent + n]));
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
        self.mbx.send(req, what)?;
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
        let data = self.info(
            &self.request(|b| frame::od_list_request(b, 0, list as u16)),
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
        let data = self.info(
            &self.request(|b| frame::object_description_request(b, 0, index)),
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
        let data = self.info(
            &self.request(|b| frame::entry_description_request(b, 0, index, sub)),
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

/// A CoE mailbox the client received: one that parsed, and not an emergency.
struct Reply(Vec<u8>);

impl Reply {
    fn response(&self) -> Response<'_> {
        // `reply` keeps only mailboxes that parsed, and parsing is a pure function of the
        // bytes: this parse succeeds the same way.
        frame::parse(&self.0).expect("parsed once already")
    }
}
