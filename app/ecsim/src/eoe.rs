//! Ethernet over EtherCAT (EoE, ETG.1000.6 §5.7): the device side of a CoE device with
//! `[device.eoe]`. Ethernet frames travel through the mailbox in fragments; behind the device
//! is its network, a TAP interface in the simulator's network namespace (`tap = "…"`), where a
//! real server (an HTTP page, a drive's tuning service) answers — or nothing, and frames from
//! the master are counted and dropped.
//!
//! The EoE header (two 16-bit words, little-endian):
//! - word 1: bits 0..3 frame type, 4..7 port, 8 last fragment, 9 time appended, 10 time
//!   requested;
//! - word 2 of a fragment: bits 0..5 fragment number, 6..11 in fragment 0 the frame's size in
//!   32-byte blocks (rounded up), in the others the fragment's offset in 32-byte blocks, 12..15
//!   the frame number. Every fragment but the last carries a whole number of 32-byte blocks.
//!
//! Frame types: 0 fragment, 2/3 set IP parameter request/response, 4/5 set address filter,
//! 6/7 get IP parameter. The set IP request carries a flags word (bit 0 MAC, 1 IP, 2 subnet,
//! 3 gateway, 4 DNS server, 5 DNS name), then the fields flagged, in that order; addresses are
//! 32-bit little-endian numbers (so 192.168.1.2 travels as 02 01 a8 c0), the DNS name 32 bytes.
//! Both as ETG.1000.6 Table "EoE" describes them and as SOEM's `ethercateoe.c` and IgH's
//! `fsm_eoe.c` write them. A set IP with an address configures the TAP (the device's address
//! is where its server answers); the address filter is not supported (result 0x0401), time
//! stamps neither (an appended one is dropped, a request ignored).

use rtcat_packet::tap::{MAX_TAP_FRAME, Tap};
use std::collections::VecDeque;

/// Bytes of the EoE header.
pub const HEADER: usize = 4;
/// Frames from the device's network waiting for the mailbox; a device's buffer is not
/// bottomless, further frames are dropped (and counted).
pub const MAX_QUEUED_FRAMES: usize = 32;

/// Frame types (word 1, bits 0..3).
pub mod frame_type {
    pub const FRAGMENT: u8 = 0;
    pub const SET_IP_REQ: u8 = 2;
    pub const SET_IP_RESP: u8 = 3;
    pub const SET_FILTER_REQ: u8 = 4;
    pub const SET_FILTER_RESP: u8 = 5;
    pub const GET_IP_REQ: u8 = 6;
    pub const GET_IP_RESP: u8 = 7;
}

/// Results of the parameter services (word 2 of a response).
pub mod result {
    pub const SUCCESS: u16 = 0x0000;
    pub const UNSPECIFIED: u16 = 0x0001;
    pub const UNSUPPORTED_TYPE: u16 = 0x0002;
    pub const NO_FILTER_SUPPORT: u16 = 0x0401;
}

/// Flags of the IP parameter services.
pub mod flag {
    pub const MAC: u32 = 1 << 0;
    pub const IP: u32 = 1 << 1;
    pub const SUBNET: u32 = 1 << 2;
    pub const GATEWAY: u32 = 1 << 3;
    pub const DNS: u32 = 1 << 4;
    pub const DNS_NAME: u32 = 1 << 5;
}

/// Length of the DNS name field.
pub const DNS_NAME_LEN: usize = 32;

/// What the device's IP stack was told (set IP parameter).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpParams {
    pub mac: Option<[u8; 6]>,
    pub ip: Option<[u8; 4]>,
    pub subnet: Option<[u8; 4]>,
    pub gateway: Option<[u8; 4]>,
    pub dns: Option<[u8; 4]>,
    pub dns_name: Option<String>,
}

/// Counters of one endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EoeStats {
    /// Whole frames from the master put together (delivered or not).
    pub from_master: u64,
    /// Whole frames from the master delivered to the device's network.
    pub to_network: u64,
    /// Whole frames from the device's network sent to the master.
    pub to_master: u64,
    /// Frames dropped: a fragment out of order, a frame too long, a full queue, a frame while
    /// the mailbox does not run.
    pub dropped: u64,
    /// Set IP requests served.
    pub set_ip: u64,
}

/// A frame from the master being put together.
#[derive(Debug)]
struct Rx {
    frame_no: u8,
    next_fragment: u8,
    size_bound: usize,
    buf: Vec<u8>,
}

/// A frame to the master being sent in fragments.
#[derive(Debug)]
struct Tx {
    frame: Vec<u8>,
    sent: usize,
    fragment: u8,
    frame_no: u8,
}

/// The EoE side of one device.
#[derive(Debug)]
pub struct EoeEndpoint {
    /// The device's network (absent: frames from the master are counted and dropped).
    tap: Option<Tap>,
    mac: [u8; 6],
    rx: Option<Rx>,
    queue: VecDeque<Vec<u8>>,
    tx: Option<Tx>,
    next_frame_no: u8,
    params: IpParams,
    stats: EoeStats,
    /// The last whole frame from the master (for tests without a network behind).
    last_from_master: Vec<u8>,
}

fn word(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn header(kind: u8, last: bool, word2: u16) -> [u8; HEADER] {
    let w1 = u16::from(kind & 0x0f) | if last { 1 << 8 } else { 0 };
    let [a, b] = w1.to_le_bytes();
    let [c, d] = word2.to_le_bytes();
    [a, b, c, d]
}

impl EoeEndpoint {
    pub fn new(mac: [u8; 6]) -> Self {
        EoeEndpoint {
            tap: None,
            mac,
            rx: None,
            queue: VecDeque::new(),
            tx: None,
            next_frame_no: 0,
            params: IpParams::default(),
            stats: EoeStats::default(),
            last_from_master: Vec::new(),
        }
    }

    /// Put the device's network behind it: TAP `name`, with the device's MAC, up.
    pub fn attach(&mut self, name: &str) -> std::io::Result<()> {
        let tap = Tap::create(name)?;
        tap.set_mac(self.mac)?;
        tap.set_up()?;
        self.tap = Some(tap);
        Ok(())
    }

    /// Whether a TAP is attached.
    pub fn attached(&self) -> bool {
        self.tap.is_some()
    }

    pub fn stats(&self) -> EoeStats {
        self.stats
    }

    pub fn params(&self) -> &IpParams {
        &self.params
    }

    /// The last whole frame the master sent.
    pub fn last_from_master(&self) -> &[u8] {
        &self.last_from_master
    }

    /// A power cycle: transfers and IP settings are gone, the network behind stays.
    pub fn power_on(&mut self) {
        self.rx = None;
        self.tx = None;
        self.queue.clear();
        self.params = IpParams::default();
    }

    /// A request from the master (the data of an EoE mailbox): the responses to queue (EoE
    /// data, without the mailbox header). `Err` with a mailbox error code for a malformed one.
    pub fn handle(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, u16> {
        if data.len() < HEADER {
            return Err(crate::mailbox::error::SIZE_TOO_SHORT);
        }
        let w1 = word(data, 0);
        let w2 = word(data, 2);
        let kind = (w1 & 0x0f) as u8;
        let port = ((w1 >> 4) & 0x0f) as u8;
        let body = &data[HEADER..];
        match kind {
            frame_type::FRAGMENT => {
                if port != 0 {
                    // One Ethernet port behind this device.
                    self.stats.dropped += 1;
                    self.rx = None;
                } else {
                    self.fragment(w1, w2, body);
                }
                Ok(Vec::new())
            }
            frame_type::SET_IP_REQ => Ok(vec![self.set_ip(body)]),
            frame_type::GET_IP_REQ => Ok(vec![self.get_ip()]),
            frame_type::SET_FILTER_REQ => Ok(vec![
                header(frame_type::SET_FILTER_RESP, true, result::NO_FILTER_SUPPORT).to_vec(),
            ]),
            _ => Err(crate::mailbox::error::SERVICE_NOT_SUPPORTED),
        }
    }

    fn fragment(&mut self, w1: u16, w2: u16, body: &[u8]) {
        let last = w1 & (1 << 8) != 0;
        let time_appended = w1 & (1 << 9) != 0;
        let fragment = (w2 & 0x3f) as u8;
        let blocks = usize::from((w2 >> 6) & 0x3f);
        let frame_no = ((w2 >> 12) & 0x0f) as u8;
        let mut body = body;
        if last && time_appended {
            body = &body[..body.len().saturating_sub(4)];
        }
        if fragment == 0 {
            if self.rx.take().is_some() {
                // A new frame before the last one ended: that one is lost.
                self.stats.dropped += 1;
            }
            self.rx = Some(Rx {
                frame_no,
                next_fragment: 0,
                size_bound: (blocks * 32).min(MAX_TAP_FRAME),
                buf: Vec::with_capacity(blocks * 32),
            });
        }
        let Some(rx) = self.rx.as_mut() else {
            // A continuation without a beginning.
            self.stats.dropped += 1;
            return;
        };
        let in_order = rx.frame_no == frame_no
            && rx.next_fragment == fragment
            && (fragment == 0 || blocks * 32 == rx.buf.len())
            && (last || body.len().is_multiple_of(32))
            && rx.buf.len() + body.len() <= rx.size_bound;
        if !in_order {
            self.rx = None;
            self.stats.dropped += 1;
            return;
        }
        rx.buf.extend_from_slice(body);
        rx.next_fragment = rx.next_fragment.wrapping_add(1);
        if last {
            let frame = self.rx.take().map(|r| r.buf).unwrap_or_default();
            self.stats.from_master += 1;
            self.last_from_master = frame.clone();
            match &self.tap {
                Some(t) if t.send(&frame).is_ok() => self.stats.to_network += 1,
                _ => self.stats.dropped += 1,
            }
        }
    }

    fn set_ip(&mut self, body: &[u8]) -> Vec<u8> {
        let res = match parse_params(body) {
            Some(p) => self.apply(p),
            None => result::UNSPECIFIED,
        };
        header(frame_type::SET_IP_RESP, true, res).to_vec()
    }

    fn apply(&mut self, p: IpParams) -> u16 {
        if let Some(tap) = &self.tap {
            if let Some(mac) = p.mac
                && tap.set_mac(mac).and_then(|()| tap.set_up()).is_err()
            {
                return result::UNSPECIFIED;
            }
            if let Some(ip) = p.ip {
                let mask = p
                    .subnet
                    .or(self.params.subnet)
                    .unwrap_or([255, 255, 255, 0]);
                if tap.set_ipv4(ip, mask).is_err() {
                    return result::UNSPECIFIED;
                }
            }
        }
        if let Some(m) = p.mac {
            self.mac = m;
        }
        let old = std::mem::take(&mut self.params);
        self.params = IpParams {
            mac: p.mac.or(old.mac),
            ip: p.ip.or(old.ip),
            subnet: p.subnet.or(old.subnet),
            gateway: p.gateway.or(old.gateway),
            dns: p.dns.or(old.dns),
            dns_name: p.dns_name.or(old.dns_name),
        };
        self.stats.set_ip += 1;
        result::SUCCESS
    }

    fn get_ip(&self) -> Vec<u8> {
        let mut out = header(frame_type::GET_IP_RESP, true, 0).to_vec();
        out.extend(encode_params(&IpParams {
            mac: Some(self.mac),
            ..self.params.clone()
        }));
        out
    }

    /// Take what the device's network sent (non-blocking). `running`: the mailbox runs (PRE-OP
    /// and up); otherwise the frames are dropped, as a device in INIT has no EoE.
    pub fn poll_network(&mut self, running: bool) {
        let Some(tap) = &self.tap else { return };
        let mut buf = [0u8; MAX_TAP_FRAME];
        // A bounded number per call: the segment's frame must not wait on a flood.
        for _ in 0..MAX_QUEUED_FRAMES {
            match tap.recv(&mut buf) {
                Ok(Some(n)) if running && self.queue.len() < MAX_QUEUED_FRAMES => {
                    self.queue.push_back(buf[..n].to_vec())
                }
                Ok(Some(_)) => self.stats.dropped += 1,
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// The next fragment to the master (EoE data without the mailbox header), at most `room`
    /// bytes (SM1's length minus the mailbox header), or `None` when nothing waits.
    pub fn next_fragment(&mut self, room: usize) -> Option<Vec<u8>> {
        if self.tx.is_none() {
            let frame = self.queue.pop_front()?;
            self.next_frame_no = (self.next_frame_no + 1) & 0x0f;
            self.tx = Some(Tx {
                frame,
                sent: 0,
                fragment: 0,
                frame_no: self.next_frame_no,
            });
        }
        let tx = self.tx.as_mut()?;
        let max = room.saturating_sub(HEADER);
        let left = tx.frame.len() - tx.sent;
        let (n, last) = if left <= max {
            (left, true)
        } else {
            (max / 32 * 32, false)
        };
        if n == 0 && !last {
            // A mailbox too small for one block: the frame cannot travel.
            self.tx = None;
            self.stats.dropped += 1;
            return None;
        }
        let field = if tx.fragment == 0 {
            tx.frame.len().div_ceil(32)
        } else {
            tx.sent / 32
        } as u16;
        let w2 =
            u16::from(tx.fragment & 0x3f) | ((field & 0x3f) << 6) | (u16::from(tx.frame_no) << 12);
        let mut out = header(frame_type::FRAGMENT, last, w2).to_vec();
        out.extend_from_slice(&tx.frame[tx.sent..tx.sent + n]);
        tx.sent += n;
        tx.fragment += 1;
        if last {
            self.tx = None;
            self.stats.to_master += 1;
        }
        Some(out)
    }
}

/// The fields of a set IP parameter request (after the EoE header): `None` when shorter than
/// its flags say.
pub fn parse_params(b: &[u8]) -> Option<IpParams> {
    struct Cursor<'a>(&'a [u8]);
    impl<'a> Cursor<'a> {
        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            let (h, t) = (self.0.get(..n)?, self.0.get(n..)?);
            self.0 = t;
            Some(h)
        }
        fn addr(&mut self) -> Option<[u8; 4]> {
            let v = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
            Some(v.to_be_bytes())
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
            let n = c.take(DNS_NAME_LEN)?;
            let end = n.iter().position(|c| *c == 0).unwrap_or(n.len());
            Some(String::from_utf8_lossy(&n[..end]).into_owned())
        } else {
            None
        },
    })
}

/// A set IP parameter request's body (flags and fields), as a master writes it.
pub fn encode_params(p: &IpParams) -> Vec<u8> {
    let mut flags = 0;
    let mut fields = Vec::new();
    if let Some(m) = p.mac {
        flags |= flag::MAC;
        fields.extend_from_slice(&m);
    }
    for (f, v) in [
        (flag::IP, p.ip),
        (flag::SUBNET, p.subnet),
        (flag::GATEWAY, p.gateway),
        (flag::DNS, p.dns),
    ] {
        if let Some(a) = v {
            flags |= f;
            fields.extend_from_slice(&u32::from_be_bytes(a).to_le_bytes());
        }
    }
    if let Some(n) = &p.dns_name {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(frame_no: u8, fragment: u8, field: u16, last: bool, data: &[u8]) -> Vec<u8> {
        let w2 = u16::from(fragment) | (field << 6) | (u16::from(frame_no) << 12);
        let mut v = header(frame_type::FRAGMENT, last, w2).to_vec();
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn ip_parameters_round_trip_in_the_documented_byte_order() {
        let p = IpParams {
            mac: Some([2, 0, 0, 0, 0, 9]),
            ip: Some([192, 168, 1, 2]),
            subnet: Some([255, 255, 255, 0]),
            gateway: None,
            dns: Some([192, 168, 1, 1]),
            dns_name: Some("drive-x".into()),
        };
        let b = encode_params(&p);
        // flags MAC|IP|SUBNET|DNS|DNS_NAME, then the MAC, then 192.168.1.2 as 02 01 a8 c0
        assert_eq!(&b[..4], &(0x37u32).to_le_bytes());
        assert_eq!(&b[10..14], &[2, 1, 168, 192]);
        assert_eq!(b.len(), 4 + 6 + 4 + 4 + 4 + 32);
        assert_eq!(parse_params(&b), Some(p));
        // shorter than the flags say
        assert_eq!(parse_params(&b[..12]), None);
        assert_eq!(parse_params(&[1, 0]), None);
    }

    #[test]
    fn set_and_get_ip_without_a_network_behind() {
        let mut e = EoeEndpoint::new([2, 0, 0, 0, 0, 1]);
        let mut req = header(frame_type::SET_IP_REQ, true, 0).to_vec();
        req.extend(encode_params(&IpParams {
            ip: Some([10, 0, 0, 5]),
            ..IpParams::default()
        }));
        let r = e.handle(&req).unwrap();
        assert_eq!(
            r,
            vec![header(frame_type::SET_IP_RESP, true, result::SUCCESS).to_vec()]
        );
        assert_eq!(e.params().ip, Some([10, 0, 0, 5]));
        let r = e.handle(&header(frame_type::GET_IP_REQ, true, 0)).unwrap();
        assert_eq!(r[0][0] & 0x0f, frame_type::GET_IP_RESP);
        let got = parse_params(&r[0][HEADER..]).unwrap();
        assert_eq!(got.mac, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(got.ip, Some([10, 0, 0, 5]));
        // a malformed set IP: an error result, nothing changed
        let r = e.handle(&header(frame_type::SET_IP_REQ, true, 0)).unwrap();
        assert_eq!(word(&r[0], 2), result::UNSPECIFIED);
        assert_eq!(e.params().ip, Some([10, 0, 0, 5]));
        // filters are not supported; responses sent to the device are refused
        let r = e
            .handle(&header(frame_type::SET_FILTER_REQ, true, 0))
            .unwrap();
        assert_eq!(word(&r[0], 2), result::NO_FILTER_SUPPORT);
        assert!(e.handle(&header(frame_type::SET_IP_RESP, true, 0)).is_err());
        assert!(e.handle(&[0, 0]).is_err());
    }

    #[test]
    fn fragments_out_of_order_drop_the_frame_and_the_next_one_starts_clean() {
        let mut e = EoeEndpoint::new([2, 0, 0, 0, 0, 1]);
        let frame: Vec<u8> = (0..100u8).collect();
        // 100 bytes: 4 blocks; 64 + 36
        e.handle(&frag(1, 0, 4, false, &frame[..64])).unwrap();
        // wrong offset
        e.handle(&frag(1, 1, 1, true, &frame[64..])).unwrap();
        assert_eq!(e.stats().dropped, 1);
        // a continuation without a beginning
        e.handle(&frag(1, 1, 2, true, &frame[64..])).unwrap();
        assert_eq!(e.stats().dropped, 2);
        // in order: put together (no TAP: then counted as dropped at the network)
        e.handle(&frag(2, 0, 4, false, &frame[..64])).unwrap();
        e.handle(&frag(2, 1, 2, true, &frame[64..])).unwrap();
        assert_eq!(e.stats().from_master, 1);
        assert_eq!(e.last_from_master(), &frame[..]);
        assert_eq!(e.stats().dropped, 3);
        // a non-last fragment that is not whole blocks
        e.handle(&frag(3, 0, 4, false, &frame[..50])).unwrap();
        assert_eq!(e.stats().dropped, 4);
        // longer than its announced size
        e.handle(&frag(4, 0, 1, true, &frame[..40])).unwrap();
        assert_eq!(e.stats().dropped, 5);
    }

    #[test]
    fn frames_to_the_master_are_split_into_whole_blocks_and_numbered() {
        let mut e = EoeEndpoint::new([2, 0, 0, 0, 0, 1]);
        let frame: Vec<u8> = (0..=255u8).cycle().take(1514).collect();
        e.queue.push_back(frame.clone());
        // SM1 of 128 bytes: 122 after the mailbox header, 118 after EoE's: 96 per fragment
        let mut got = Vec::new();
        let mut n = 0;
        while let Some(f) = e.next_fragment(122) {
            let w2 = word(&f, 2);
            assert_eq!(usize::from(w2 & 0x3f), n);
            assert_eq!((w2 >> 12) as u8, 1);
            let field = usize::from((w2 >> 6) & 0x3f);
            if n == 0 {
                assert_eq!(field, 1514usize.div_ceil(32));
            } else {
                assert_eq!(field * 32, got.len());
            }
            let last = word(&f, 0) & (1 << 8) != 0;
            assert!(last || (f.len() - HEADER).is_multiple_of(32));
            got.extend_from_slice(&f[HEADER..]);
            n += 1;
            assert!(n < 40);
        }
        assert_eq!(got, frame);
        assert_eq!(n, 1514usize.div_ceil(96));
        assert_eq!(e.stats().to_master, 1);
    }
}
