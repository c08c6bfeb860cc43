//! Ethernet over EtherCAT (EoE, ETG.1000.6 §5.7) in the master: a device's IP settings and the
//! Ethernet frames to and from the network behind it, through the mailbox layer
//! ([`crate::mailbox`]).
//!
//! - **IP parameters**: set IP parameter (frame type 2, answered by 3 with a result) writes a
//!   flags word and the fields flagged (MAC, IP address, subnet mask, gateway, DNS server: IPv4
//!   addresses as 32-bit little-endian numbers, so 192.168.1.2 travels as `02 01 a8 c0`; DNS
//!   name 32 bytes); get IP parameter (6 → 7) reads them back. As ETG.1000.6 Table "EoE" gives
//!   them and as SOEM (`ethercateoe.c`) and IgH (`fsm_eoe.c`) write them.
//! - **Frames**: a frame travels in fragments of at most the mailbox's size − 10 bytes; every
//!   fragment but the last carries whole 32-byte blocks. The header's second word holds the
//!   fragment number (bits 0..5), in fragment 0 the frame's size in blocks and in the others the
//!   offset in blocks (bits 6..11), and the frame number (bits 12..15). [`fragments`] cuts a
//!   frame, [`Reassembler`] puts the device's fragments together and drops a frame whose
//!   fragments come out of order (the next frame starts clean).
//! - **Frames the device sends unasked** arrive in its send mailbox like any reply: the client
//!   polls SM1 ([`Client::poll`]); mailboxes of other protocols found there are set aside by the
//!   layer for their clients, emergencies kept.
//!
//! - **Transports**: the client runs on any [`Transport`]: the bus tools' blocking mailbox on a
//!   segment in PRE-OP, and a running master's acyclic queue during OP (`[[eoe]]` of
//!   `rtcat run`), where each send and each look at SM1 is one queue request served by the
//!   cyclic thread within its mailbox budget.
//!
//! What is not done: the address filter (type 4) and time stamps (an appended one is dropped).

use crate::mailbox::{self, BusPort, Mailbox, Transport};
use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Bytes of the EoE header.
pub const HEADER: usize = 4;
/// Largest Ethernet frame (without FCS) the master tunnels: 1500 bytes of payload, the header
/// and a VLAN tag.
pub const MAX_FRAME: usize = 1518;
/// Length of the DNS name field.
pub const DNS_NAME_LEN: usize = 32;
/// Whole frames of the device a client keeps until [`Client::poll`] takes them (the oldest is
/// dropped, and counted, beyond it).
pub const MAX_PENDING: usize = 64;

/// Frame types (word 1, bits 0..3).
pub mod frame_type {
    /// An Ethernet frame's fragment.
    pub const FRAGMENT: u8 = 0;
    /// Set IP parameter request.
    pub const SET_IP_REQ: u8 = 2;
    /// Set IP parameter response.
    pub const SET_IP_RESP: u8 = 3;
    /// Get IP parameter request.
    pub const GET_IP_REQ: u8 = 6;
    /// Get IP parameter response.
    pub const GET_IP_RESP: u8 = 7;
}

/// Flags of the IP parameter services.
mod flag {
    pub const MAC: u32 = 1 << 0;
    pub const IP: u32 = 1 << 1;
    pub const SUBNET: u32 = 1 << 2;
    pub const GATEWAY: u32 = 1 << 3;
    pub const DNS: u32 = 1 << 4;
    pub const DNS_NAME: u32 = 1 << 5;
}

/// The text of an EoE result code (ETG.1000.6, EoE result parameter).
pub fn result_text(code: u16) -> &'static str {
    match code {
        0x0000 => "success",
        0x0001 => "unspecified error",
        0x0002 => "unsupported frame type",
        0x0201 => "no IP support",
        0x0202 => "DHCP not supported",
        0x0401 => "no filter support",
        _ => "unknown result code",
    }
}

/// What can go wrong in an EoE service.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The device answered a parameter service with an error result.
    #[error("position {position}: EoE {what}: the device refused it: result {code:#06x}, {}", result_text(*code))]
    Device {
        /// Position of the subdevice.
        position: u16,
        /// The service.
        what: &'static str,
        /// The result code.
        code: u16,
    },
    /// The device's answer is not what the service needs.
    #[error("position {position}: EoE {what}: {why}")]
    Protocol {
        /// Position of the subdevice.
        position: u16,
        /// The service.
        what: &'static str,
        /// What was wrong.
        why: String,
    },
    /// A frame to send is empty or longer than [`MAX_FRAME`].
    #[error("EoE: a frame of {0} bytes cannot be sent (1..={MAX_FRAME})")]
    FrameSize(usize),
    /// The mailbox transport failed.
    #[error(transparent)]
    Mailbox(#[from] mailbox::Error),
}

/// A device's IP settings (what set IP parameter writes, get IP parameter reads). `None`: not
/// given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpParams {
    /// MAC address.
    pub mac: Option<[u8; 6]>,
    /// IPv4 address.
    pub ip: Option<[u8; 4]>,
    /// Subnet mask.
    pub subnet: Option<[u8; 4]>,
    /// Default gateway.
    pub gateway: Option<[u8; 4]>,
    /// DNS server.
    pub dns: Option<[u8; 4]>,
    /// DNS name (at most 32 bytes).
    pub dns_name: Option<String>,
}

fn ip4(a: [u8; 4]) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(a)
}

impl fmt::Display for IpParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(m) = self.mac {
            parts.push(format!("mac {}", format_mac(m)));
        }
        for (k, v) in [
            ("ip", self.ip),
            ("subnet", self.subnet),
            ("gateway", self.gateway),
            ("dns", self.dns),
        ] {
            if let Some(a) = v {
                parts.push(format!("{k} {}", ip4(a)));
            }
        }
        if let Some(n) = &self.dns_name {
            parts.push(format!("dns-name {n:?}"));
        }
        if parts.is_empty() {
            f.write_str("nothing set")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A unicast MAC address `aa:bb:cc:dd:ee:ff`, or why not.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let bytes: Option<Vec<u8>> = (parts.len() == 6)
        .then(|| {
            parts
                .iter()
                .map(|p| {
                    (p.len() == 2)
                        .then(|| u8::from_str_radix(p, 16).ok())
                        .flatten()
                })
                .collect()
        })
        .flatten();
    match bytes {
        Some(b) if b[0] & 1 == 0 && b.iter().any(|x| *x != 0) => {
            Ok([b[0], b[1], b[2], b[3], b[4], b[5]])
        }
        Some(_) => Err(format!(
            "{s:?} is not a unicast MAC address (multicast or zero)"
        )),
        None => Err(format!(
            "{s:?} is not a MAC address (six hex bytes, aa:bb:cc:dd:ee:ff)"
        )),
    }
}

impl IpParams {
    /// The body of a set IP parameter request: the flags word, then the fields flagged.
    pub fn encode(&self) -> Vec<u8> {
        let mut flags = 0u32;
        let mut fields = Vec::new();
        if let Some(m) = self.mac {
            flags |= flag::MAC;
            fields.extend_from_slice(&m);
        }
        for (f, v) in [
            (flag::IP, self.ip),
            (flag::SUBNET, self.subnet),
            (flag::GATEWAY, self.gateway),
            (flag::DNS, self.dns),
        ] {
            if let Some(a) = v {
                flags |= f;
                fields.extend_from_slice(&u32::from_be_bytes(a).to_le_bytes());
            }
        }
        if let Some(n) = &self.dns_name {
            flags |= flag::DNS_NAME;
            let mut b = [0u8; DNS_NAME_LEN];
            let k = n.len().min(DNS_NAME_LEN);
            b[..k].copy_from_slice(&n.as_bytes()[..k]);
            fields.extend_from_slice(&b);
        }
        let mut out = flags.to_le_bytes().to_vec();
        out.extend_from_slice(&fields);
        out
    }

    /// The body of a get IP parameter response; `None` when shorter than its flags say.
    pub fn decode(b: &[u8]) -> Option<IpParams> {
        struct Cursor<'a>(&'a [u8]);
        impl<'a> Cursor<'a> {
            fn take(&mut self, n: usize) -> Option<&'a [u8]> {
                let (h, t) = (self.0.get(..n)?, self.0.get(n..)?);
                self.0 = t;
                Some(h)
            }
            fn addr(&mut self) -> Option<[u8; 4]> {
                Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?).to_be_bytes())
            }
        }
        let mut c = Cursor(b);
        let flags = u32::from_le_bytes(c.take(4)?.try_into().ok()?);
        let on = |f: u32| flags & f != 0;
        Some(IpParams {
            mac: if on(flag::MAC) {
                Some(c.take(6)?.try_into().ok()?)
            } else {
                None
            },
            ip: if on(flag::IP) { Some(c.addr()?) } else { None },
            subnet: if on(flag::SUBNET) {
                Some(c.addr()?)
            } else {
                None
            },
            gateway: if on(flag::GATEWAY) {
                Some(c.addr()?)
            } else {
                None
            },
            dns: if on(flag::DNS) { Some(c.addr()?) } else { None },
            dns_name: if on(flag::DNS_NAME) {
                // A device may send a shorter name field than the 32 bytes (SOEM reads what
                // there is).
                let n = c.0.get(..DNS_NAME_LEN.min(c.0.len()))?;
                let end = n.iter().position(|c| *c == 0).unwrap_or(n.len());
                Some(String::from_utf8_lossy(&n[..end]).into_owned())
            } else {
                None
            },
        })
    }
}

fn word(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The EoE header: `kind`, port 0, last fragment, then word 2.
fn header(kind: u8, last: bool, word2: u16) -> [u8; HEADER] {
    let w1 = u16::from(kind & 0x0f) | if last { 1 << 8 } else { 0 };
    let [a, b] = w1.to_le_bytes();
    let [c, d] = word2.to_le_bytes();
    [a, b, c, d]
}

/// The fragments (EoE header and data, without the mailbox header) of `frame`, each at most
/// `room` bytes (the receive mailbox's size − the mailbox header), numbered `frame_no` (0..15).
pub fn fragments(frame: &[u8], room: usize, frame_no: u8) -> Vec<Vec<u8>> {
    let max = room.saturating_sub(HEADER) / 32 * 32;
    let mut out = Vec::new();
    let mut at = 0;
    let mut k = 0u16;
    loop {
        let left = frame.len() - at;
        let (n, last) = if left <= room.saturating_sub(HEADER) {
            (left, true)
        } else {
            (max, false)
        };
        let field = if k == 0 {
            frame.len().div_ceil(32)
        } else {
            at / 32
        } as u16;
        let w2 = (k & 0x3f) | ((field & 0x3f) << 6) | (u16::from(frame_no & 0x0f) << 12);
        let mut f = header(frame_type::FRAGMENT, last, w2).to_vec();
        f.extend_from_slice(&frame[at..at + n]);
        out.push(f);
        at += n;
        k += 1;
        if last || n == 0 {
            return out;
        }
    }
}

/// Puts the device's fragments together.
#[derive(Debug, Default)]
pub struct Reassembler {
    cur: Option<(u8, u8, usize, Vec<u8>)>,
    dropped: u64,
}

impl Reassembler {
    /// One fragment (EoE header and data): the whole frame when it was the last.
    pub fn push(&mut self, f: &[u8]) -> Option<Vec<u8>> {
        if f.len() < HEADER {
            self.dropped += 1;
            return None;
        }
        let (w1, w2) = (word(f, 0), word(f, 2));
        if w1 & 0x0f != u16::from(frame_type::FRAGMENT) || (w1 >> 4) & 0x0f != 0 {
            self.dropped += 1;
            return None;
        }
        let last = w1 & (1 << 8) != 0;
        let mut data = &f[HEADER..];
        if last && w1 & (1 << 9) != 0 {
            // A time stamp appended to the last fragment.
            data = &data[..data.len().saturating_sub(4)];
        }
        let fragment = (w2 & 0x3f) as u8;
        let field = usize::from((w2 >> 6) & 0x3f);
        let frame_no = (w2 >> 12) as u8;
        if fragment == 0 {
            if self.cur.take().is_some() {
                self.dropped += 1;
            }
            self.cur = Some((frame_no, 0, (field * 32).min(MAX_FRAME), Vec::new()));
        }
        let Some((no, next, bound, buf)) = self.cur.as_mut() else {
            self.dropped += 1;
            return None;
        };
        let ok = *no == frame_no
            && *next == fragment
            && (fragment == 0 || field * 32 == buf.len())
            && (last || data.len().is_multiple_of(32))
            && buf.len() + data.len() <= *bound;
        if !ok {
            self.cur = None;
            self.dropped += 1;
            return None;
        }
        buf.extend_from_slice(data);
        *next += 1;
        if last {
            return self.cur.take().map(|c| c.3);
        }
        None
    }

    /// Frames dropped so far (fragments out of order, too long, not a fragment; whole frames
    /// nobody took in time).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// The EoE client of one subdevice on a mailbox transport: the blocking one of the bus tools
/// ([`Mailbox`], PRE-OP) or the cyclic thread's queue during OP
/// ([`crate::acyclic::QueueMailbox`]). It uses only [`Transport::send`] and
/// [`Transport::poll`]: a parameter service's reply is looked for like the device's frames, so
/// that a fragment arriving first is kept, not taken for the reply.
pub struct Client<'m, T: Transport + ?Sized> {
    mbx: &'m mut T,
    frame_no: u8,
    rx: Reassembler,
    /// Whole frames of the device that arrived while a parameter service waited.
    pending: VecDeque<Vec<u8>>,
    /// How long a parameter service waits for its reply.
    response: Duration,
    /// Between two looks at the send mailbox while a parameter service waits.
    poll_gap: Duration,
}

/// The client on the bus (PRE-OP).
pub type BusClient<'m, 'a> = Client<'m, Mailbox<BusPort<'a>>>;

impl<'m, T: Transport + ?Sized> Client<'m, T> {
    /// The client of the subdevice `mbx` is the transport of.
    pub fn new(mbx: &'m mut T) -> Self {
        let t = mailbox::Timeouts::default();
        Client {
            mbx,
            frame_no: 0,
            rx: Reassembler::default(),
            pending: VecDeque::new(),
            response: t.response,
            poll_gap: t.poll,
        }
    }

    /// How long a parameter service waits for the device's reply (default: the mailbox layer's
    /// response timeout).
    pub fn set_response_timeout(&mut self, t: Duration) {
        self.response = t;
    }

    /// The transport.
    pub fn mailbox(&mut self) -> &mut T {
        self.mbx
    }

    fn request(&self, kind: u8, body: &[u8]) -> Vec<u8> {
        let mut req = vec![0u8; mailbox::HEADER];
        req.extend_from_slice(&header(kind, true, 0));
        req.extend_from_slice(body);
        mailbox::header(&mut req, HEADER + body.len(), mailbox::kind::EOE);
        req
    }

    fn keep(&mut self, frame: Vec<u8>) {
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
            self.rx.dropped += 1;
        }
        self.pending.push_back(frame);
    }

    /// Wait for the EoE reply of type `want`; fragments arriving meanwhile go to the
    /// reassembler (the device's traffic is not lost to a parameter service).
    fn reply(&mut self, want: u8, what: &'static str) -> Result<Vec<u8>, Error> {
        let position = self.mbx.position();
        let deadline = Instant::now() + self.response;
        loop {
            let Some(buf) = self.mbx.poll(mailbox::kind::EOE, what)? else {
                if Instant::now() >= deadline {
                    return Err(mailbox::Error::Timeout {
                        position,
                        step: format!("{what}: response"),
                        timeout: self.response,
                    }
                    .into());
                }
                std::thread::sleep(self.poll_gap);
                continue;
            };
            let p = mailbox::payload(&buf)
                .map_err(|why| Error::Protocol {
                    position,
                    what,
                    why,
                })?
                .to_vec();
            if p.len() < HEADER {
                return Err(Error::Protocol {
                    position,
                    what,
                    why: format!("an EoE mailbox of {} bytes (the header has 4)", p.len()),
                });
            }
            let kind = p[0] & 0x0f;
            if kind == want {
                return Ok(p);
            }
            if kind == frame_type::FRAGMENT {
                // A frame of the device's network: kept for [`Client::poll`].
                if let Some(f) = self.rx.push(&p) {
                    self.keep(f);
                }
                continue;
            }
            return Err(Error::Protocol {
                position,
                what,
                why: format!("an EoE frame of type {kind} where type {want} was expected"),
            });
        }
    }

    /// Set the device's IP parameters.
    pub fn set_ip(&mut self, p: &IpParams) -> Result<(), Error> {
        let what = "set IP parameter";
        let req = self.request(frame_type::SET_IP_REQ, &p.encode());
        self.mbx.send(&req, what)?;
        let r = self.reply(frame_type::SET_IP_RESP, what)?;
        match word(&r, 2) {
            0 => Ok(()),
            code => Err(Error::Device {
                position: self.mbx.position(),
                what,
                code,
            }),
        }
    }

    /// Read the device's IP parameters.
    pub fn get_ip(&mut self) -> Result<IpParams, Error> {
        let what = "get IP parameter";
        let req = self.request(frame_type::GET_IP_REQ, &0u32.to_le_bytes());
        self.mbx.send(&req, what)?;
        let r = self.reply(frame_type::GET_IP_RESP, what)?;
        IpParams::decode(&r[HEADER..]).ok_or_else(|| Error::Protocol {
            position: self.mbx.position(),
            what,
            why: format!(
                "the parameters ({} bytes) are shorter than their flags say",
                r.len() - HEADER
            ),
        })
    }

    /// The mailboxes `frame` travels in (header, EoE header, data), numbered with the next
    /// frame number.
    fn mailboxes(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
        if frame.is_empty() || frame.len() > MAX_FRAME {
            return Err(Error::FrameSize(frame.len()));
        }
        self.frame_no = (self.frame_no + 1) & 0x0f;
        let room = usize::from(self.mbx.geometry().rx_size) - mailbox::HEADER;
        Ok(fragments(frame, room, self.frame_no)
            .into_iter()
            .map(|f| {
                let mut m = vec![0u8; mailbox::HEADER];
                m.extend_from_slice(&f);
                mailbox::header(&mut m, f.len(), mailbox::kind::EOE);
                m
            })
            .collect())
    }

    /// Send one Ethernet frame to the device's network.
    pub fn send_frame(&mut self, frame: &[u8]) -> Result<(), Error> {
        self.send_frame_paced(frame, |_| {})
    }

    /// As [`Client::send_frame`], calling `pace` with each fragment's mailbox size before it
    /// goes out (a rate limit may wait there).
    pub fn send_frame_paced(
        &mut self,
        frame: &[u8],
        mut pace: impl FnMut(usize),
    ) -> Result<(), Error> {
        for m in self.mailboxes(frame)? {
            pace(m.len());
            self.mbx.send(&m, "EoE frame")?;
            // What the device sent meanwhile was set aside by the layer (a bounded queue):
            // into the reassembler at once, so that a long frame each way loses nothing.
            self.collect_set_aside();
        }
        Ok(())
    }

    fn collect_set_aside(&mut self) {
        while let Some(m) = self.mbx.take_set_aside(mailbox::kind::EOE) {
            if let Ok(p) = mailbox::payload(&m)
                && let Some(f) = self.rx.push(p)
            {
                self.keep(f);
            }
        }
    }

    /// A whole frame the device sent, if one is complete: looks at the send mailbox once (one
    /// status read when it is empty).
    pub fn poll(&mut self) -> Result<Option<Vec<u8>>, Error> {
        if let Some(f) = self.pending.pop_front() {
            return Ok(Some(f));
        }
        self.collect_set_aside();
        if let Some(f) = self.pending.pop_front() {
            return Ok(Some(f));
        }
        match self.mbx.poll(mailbox::kind::EOE, "EoE poll")? {
            Some(buf) => {
                let p = mailbox::payload(&buf).unwrap_or_default();
                Ok(self.rx.push(p))
            }
            None => Ok(None),
        }
    }

    /// Frames of the device dropped so far (fragments out of order).
    pub fn dropped(&self) -> u64 {
        self.rx.dropped()
    }
}

#[cfg(test)]
mod tests;
