//! The EtherCAT mailbox gateway (ETG.8200): a configuration or diagnosis tool on another
//! computer sends a device's mailbox request in a UDP datagram (port 0x88A4) to the master,
//! which forwards it to the addressed subdevice and sends the device's reply back the same way.
//!
//! A datagram is an EtherCAT header (16 bits, little-endian: length of what follows in bits
//! 0..10, type in bits 12..15, 5 = mailbox; ETG.1000.4 Table "EtherCAT frame header") and one
//! mailbox: its 6-byte header (length, address, channel/priority, type/counter) and data. The
//! address is the subdevice's configured station address (0x1000 + position, as the master
//! assigns them); 0 would be the master's own object dictionary (ETG.1510), which rtcat does
//! not have. The reply keeps the request's EtherCAT header bits 11..15 and carries the device's
//! mailbox with the station address in its address field, so the tool knows who answered (as
//! the gateways of KickCAT and ethercrab's proposal do).
//!
//! What is refused, and how the tool learns it:
//! - a peer outside the allowed networks, a datagram shorter than the two headers, another
//!   EtherCAT type, a mailbox longer than the datagram: dropped without an answer (a gateway
//!   does not answer what it cannot parse; counted and logged by the caller);
//! - a station address of no subdevice, a subdevice without a mailbox, a request larger than its
//!   mailbox, address 0: a mailbox error reply (type 0) from that address with the ETG.1000.4
//!   Table 30 code (0x0002 unsupported protocol, 0x0008 invalid size, 0x0003 invalid channel
//!   for an address of no device), so the tool does not wait for a timeout;
//! - a device that does not answer: a mailbox error reply 0x0001 (syntax) is not right either,
//!   so nothing is sent and the tool's own timeout applies (as in KickCAT).

use std::net::{IpAddr, SocketAddr};

/// The UDP port of the mailbox gateway (ETG.8200).
pub const PORT: u16 = 0x88a4;
/// EtherCAT header type "mailbox".
pub const TYPE_MAILBOX: u16 = 5;
/// Largest datagram taken (an Ethernet frame's EtherCAT payload).
pub const MAX_DATAGRAM: usize = 1500;

/// Mailbox error codes (ETG.1000.4 Table 30).
pub mod mbx_error {
    /// The device has no mailbox or does not speak the protocol.
    pub const UNSUPPORTED_PROTOCOL: u16 = 0x0002;
    /// No device has this station address.
    pub const INVALID_CHANNEL: u16 = 0x0003;
    /// The request does not fit the device's mailbox.
    pub const INVALID_SIZE: u16 = 0x0008;
}

/// A network peers may come from: address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    net: IpAddr,
    prefix: u8,
}

impl Allowed {
    /// `10.0.0.0/24`, `192.168.1.7` (one host), `::1/128`.
    pub fn parse(s: &str) -> Result<Allowed, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: not an IP address or network (e.g. 10.0.0.0/24)"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("{s:?}: the prefix length is 0..={max}")),
            },
        };
        Ok(Allowed { net, prefix })
    }

    /// Whether `ip` is in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let m = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & m == u32::from(a) & m
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let m = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & m == u128::from(a) & m
            }
            _ => false,
        }
    }
}

/// What one datagram asks.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// Forward `mailbox` (header with address 0, then data) to the subdevice at `address`;
    /// `ecat_high` are the EtherCAT header's bits 11..15 to answer with.
    Forward {
        address: u16,
        mailbox: Vec<u8>,
        ecat_high: u16,
    },
    /// Not to be answered: why.
    Drop(&'static str),
}

/// Read one datagram.
pub fn parse(d: &[u8]) -> Request {
    if d.len() < 2 + 6 {
        return Request::Drop("shorter than the EtherCAT and mailbox headers");
    }
    let ecat = u16::from_le_bytes([d[0], d[1]]);
    if ecat >> 12 != TYPE_MAILBOX {
        return Request::Drop("not an EtherCAT mailbox (header type is not 5)");
    }
    let m = &d[2..];
    let len = usize::from(u16::from_le_bytes([m[0], m[1]]));
    if 6 + len > m.len() {
        return Request::Drop("the mailbox is longer than the datagram");
    }
    let address = u16::from_le_bytes([m[2], m[3]]);
    let mut mailbox = m[..6 + len].to_vec();
    // Sent to the device as the master's own request.
    mailbox[2] = 0;
    mailbox[3] = 0;
    Request::Forward {
        address,
        mailbox,
        ecat_high: ecat & 0xf800,
    }
}

/// The datagram that answers with `mailbox` (the device's reply, or an error reply) from
/// station `address`.
pub fn answer(ecat_high: u16, address: u16, mailbox: &[u8]) -> Vec<u8> {
    let len = usize::from(u16::from_le_bytes([mailbox[0], mailbox[1]]));
    let m = &mailbox[..(6 + len).min(mailbox.len())];
    let ecat = (ecat_high & 0xf000) | (TYPE_MAILBOX << 12) | (m.len() as u16 & 0x07ff);
    let mut out = ecat.to_le_bytes().to_vec();
    out.extend_from_slice(m);
    out[4..6].copy_from_slice(&address.to_le_bytes());
    out
}

/// A mailbox error reply (type 0: service 1, then `code`).
pub fn error_mailbox(code: u16) -> Vec<u8> {
    let mut m = vec![4, 0, 0, 0, 0, 0];
    m.extend_from_slice(&1u16.to_le_bytes());
    m.extend_from_slice(&code.to_le_bytes());
    m
}

/// Where a gateway forwards to: the subdevices of a segment.
pub trait Forward {
    /// The mailbox size of the subdevice at station `address`: `Err` with a mailbox error code
    /// when there is none (no such device, no mailbox).
    fn mailbox_size(&mut self, address: u16) -> Result<usize, u16>;
    /// Send `mailbox` to the subdevice and return its reply of the same type; `None` when it did
    /// not answer (or the bus failed: logged by the implementation).
    fn transact(&mut self, address: u16, mailbox: &[u8]) -> Option<Vec<u8>>;
}

/// Counters of a gateway.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub forwarded: u64,
    pub answered: u64,
    pub refused_peer: u64,
    pub dropped_malformed: u64,
    pub error_replies: u64,
    pub unanswered: u64,
}

/// One datagram from `peer`: the answer to send, if any.
pub fn handle(
    fwd: &mut dyn Forward,
    allowed: &[Allowed],
    peer: SocketAddr,
    d: &[u8],
    counts: &mut Counts,
) -> Option<Vec<u8>> {
    if !allowed.iter().any(|a| a.contains(peer.ip())) {
        counts.refused_peer += 1;
        log::warn!("gateway: datagram from {peer} refused: not in the allowed networks");
        return None;
    }
    let (address, mailbox, high) = match parse(d) {
        Request::Drop(why) => {
            counts.dropped_malformed += 1;
            log::warn!("gateway: datagram from {peer} dropped: {why}");
            return None;
        }
        Request::Forward {
            address,
            mailbox,
            ecat_high,
        } => (address, mailbox, ecat_high),
    };
    let err = |code: u16, counts: &mut Counts| {
        counts.error_replies += 1;
        Some(answer(high, address, &error_mailbox(code)))
    };
    if address == 0 {
        log::info!("gateway: {peer} asked the master's own dictionary (address 0): not served");
        return err(mbx_error::INVALID_CHANNEL, counts);
    }
    match fwd.mailbox_size(address) {
        Err(code) => {
            log::info!("gateway: {peer} asked station {address:#06x}: mailbox error {code:#06x}");
            err(code, counts)
        }
        Ok(size) if mailbox.len() > size => err(mbx_error::INVALID_SIZE, counts),
        Ok(_) => {
            counts.forwarded += 1;
            match fwd.transact(address, &mailbox) {
                Some(reply) => {
                    counts.answered += 1;
                    Some(answer(high, address, &reply))
                }
                None => {
                    counts.unanswered += 1;
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake {
        sent: Vec<(u16, Vec<u8>)>,
    }

    impl Forward for Fake {
        fn mailbox_size(&mut self, address: u16) -> Result<usize, u16> {
            match address {
                0x1000 => Ok(128),
                0x1001 => Err(mbx_error::UNSUPPORTED_PROTOCOL),
                _ => Err(mbx_error::INVALID_CHANNEL),
            }
        }
        fn transact(&mut self, address: u16, mailbox: &[u8]) -> Option<Vec<u8>> {
            self.sent.push((address, mailbox.to_vec()));
            (mailbox[6] != 0xee).then(|| vec![2, 0, 0, 0, 0, 3, 0xab, 0xcd])
        }
    }

    fn datagram(address: u16, data: &[u8]) -> Vec<u8> {
        let mut m = (data.len() as u16).to_le_bytes().to_vec();
        m.extend_from_slice(&address.to_le_bytes());
        m.extend_from_slice(&[0, 3]);
        m.extend_from_slice(data);
        let ecat = (TYPE_MAILBOX << 12) | m.len() as u16;
        let mut d = ecat.to_le_bytes().to_vec();
        d.extend_from_slice(&m);
        d
    }

    #[test]
    fn networks_parse_and_match() {
        let a = Allowed::parse("10.1.0.0/16").unwrap();
        assert!(a.contains("10.1.200.3".parse().unwrap()));
        assert!(!a.contains("10.2.0.1".parse().unwrap()));
        assert!(a.contains("::ffff:10.1.0.9".parse().unwrap()));
        let h = Allowed::parse("127.0.0.1").unwrap();
        assert!(h.contains("127.0.0.1".parse().unwrap()));
        assert!(!h.contains("127.0.0.2".parse().unwrap()));
        assert!(
            Allowed::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(
            Allowed::parse("::1/128")
                .unwrap()
                .contains("::1".parse().unwrap())
        );
        for bad in ["x", "10.0.0.0/33", "10.0.0.0/-1", "::1/129", ""] {
            assert!(Allowed::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn requests_are_forwarded_and_answered_with_the_station_address() {
        let mut f = Fake { sent: Vec::new() };
        let allow = [Allowed::parse("127.0.0.0/8").unwrap()];
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let mut c = Counts::default();
        let mut d = datagram(0x1000, &[1, 2, 3]);
        d.extend_from_slice(&[9, 9]); // trailing bytes are tolerated
        let a = handle(&mut f, &allow, peer, &d, &mut c).unwrap();
        assert_eq!(f.sent, vec![(0x1000, vec![3, 0, 0, 0, 0, 3, 1, 2, 3])]);
        assert_eq!(u16::from_le_bytes([a[0], a[1]]), (5 << 12) | 8);
        assert_eq!(&a[2..], &[2, 0, 0x00, 0x10, 0, 3, 0xab, 0xcd]);
        assert_eq!((c.forwarded, c.answered), (1, 1));
    }

    #[test]
    fn refusals_are_error_replies_or_silence_never_a_panic() {
        let mut f = Fake { sent: Vec::new() };
        let allow = [Allowed::parse("127.0.0.1").unwrap()];
        let me: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let mut c = Counts::default();
        let code = |a: &[u8]| u16::from_le_bytes([a[10], a[11]]);
        // a peer not allowed
        assert_eq!(
            handle(
                &mut f,
                &allow,
                "10.0.0.1:1".parse().unwrap(),
                &datagram(0x1000, &[1]),
                &mut c
            ),
            None
        );
        // no such device, no mailbox, the master itself, too large
        let a = handle(&mut f, &allow, me, &datagram(0x1005, &[1]), &mut c).unwrap();
        assert_eq!((a[7] & 0x0f, code(&a)), (0, mbx_error::INVALID_CHANNEL));
        let a = handle(&mut f, &allow, me, &datagram(0x1001, &[1]), &mut c).unwrap();
        assert_eq!(code(&a), mbx_error::UNSUPPORTED_PROTOCOL);
        assert_eq!(
            code(&handle(&mut f, &allow, me, &datagram(0, &[1]), &mut c).unwrap()),
            mbx_error::INVALID_CHANNEL
        );
        let a = handle(&mut f, &allow, me, &datagram(0x1000, &[1; 200]), &mut c).unwrap();
        assert_eq!(code(&a), mbx_error::INVALID_SIZE);
        // a device that does not answer: silence
        assert_eq!(
            handle(&mut f, &allow, me, &datagram(0x1000, &[0xee]), &mut c),
            None
        );
        // malformed: silence
        let mut long = datagram(0x1000, &[1, 2]);
        long[2] = 50;
        for d in [vec![], vec![0x05, 0x50, 1], long, {
            let mut x = datagram(0x1000, &[1]);
            x[1] = 0x10;
            x
        }] {
            assert_eq!(handle(&mut f, &allow, me, &d, &mut c), None, "{d:02x?}");
        }
        assert_eq!(c.refused_peer, 1);
        assert_eq!(c.error_replies, 4);
        assert_eq!(c.unanswered, 1);
        assert_eq!(c.dropped_malformed, 4);
        assert_eq!(
            f.sent.len(),
            1,
            "only the unanswered request reached a device"
        );
    }
}

/// `[gateway]` of `rtcat.toml`: the mailbox gateway of a running master (`rtcat run`), off
/// unless `listen` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// `ADDR:PORT` to listen on (port 34980 = 0x88A4 is ETG.8200's); absent: no gateway.
    pub listen: Option<String>,
    /// Networks or hosts whose datagrams are served (`10.0.0.0/24`, `10.0.0.5`); required with
    /// `listen`.
    pub allow: Vec<String>,
}

impl GatewayConfig {
    /// The address and the networks, checked; `None` when the gateway is off.
    pub fn checked(
        &self,
    ) -> Result<Option<(SocketAddr, Vec<Allowed>)>, rtcat_master::invalid::Invalid> {
        use rtcat_master::invalid::Invalid;
        let Some(l) = &self.listen else {
            if !self.allow.is_empty() {
                return Err(Invalid::new(
                    "gateway.allow",
                    format!("{:?}", self.allow),
                    "has no effect without gateway.listen",
                ));
            }
            return Ok(None);
        };
        let listen: SocketAddr = l.parse().map_err(|_| {
            Invalid::new(
                "gateway.listen",
                format!("{l:?}"),
                "must be ADDR:PORT, e.g. \"192.168.20.1:34980\"",
            )
        })?;
        if self.allow.is_empty() {
            return Err(Invalid::new(
                "gateway.allow",
                "[]",
                "must name the networks or hosts the tools are on (the protocol has no authentication)",
            ));
        }
        let allow = self
            .allow
            .iter()
            .map(|a| {
                Allowed::parse(a).map_err(|e| Invalid::new("gateway.allow", format!("{a:?}"), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some((listen, allow)))
    }
}

/// The subdevices of a running master, through its acyclic queue (served by the cyclic thread
/// within its mailbox budget, between its own SDO traffic): station 0x1000 + position, as
/// ethercrab assigns them.
pub struct Queue {
    client: std::sync::Arc<rtcat_master::acyclic::SdoClient>,
    timeout: std::time::Duration,
}

impl Queue {
    fn position(address: u16) -> Option<u16> {
        address.checked_sub(0x1000)
    }
}

impl Forward for Queue {
    fn mailbox_size(&mut self, address: u16) -> Result<usize, u16> {
        use rtcat_master::acyclic::SdoFailure;
        use rtcat_master::mailbox::Transport;
        let pos = Self::position(address).ok_or(mbx_error::INVALID_CHANNEL)?;
        match self.client.queue_mailbox(pos, self.timeout) {
            Ok(m) => Ok(usize::from(m.geometry().rx_size)),
            Err(SdoFailure::NoSubdevice(_)) => Err(mbx_error::INVALID_CHANNEL),
            Err(_) => Err(mbx_error::UNSUPPORTED_PROTOCOL),
        }
    }

    fn transact(&mut self, address: u16, mailbox: &[u8]) -> Option<Vec<u8>> {
        use rtcat_master::mailbox::Transport;
        let pos = Self::position(address)?;
        let r = self
            .client
            .queue_mailbox(pos, self.timeout)
            .map_err(|e| e.to_string())
            .and_then(|mut m| {
                m.transact(mailbox, "gateway request")
                    .map_err(|e| e.to_string())
            });
        match r {
            Ok(r) => Some(r),
            Err(e) => {
                log::warn!("gateway: station {address:#06x}: {e}");
                None
            }
        }
    }
}

/// The gateway of a running master: a thread serving `listen` until [`Running::stop`].
pub struct Running {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Counts>>,
    /// Where it listens (the port chosen when the configuration said 0).
    pub local: SocketAddr,
}

impl Running {
    /// Bind `listen` and serve the queue's subdevices to the peers of `allow`.
    pub fn start(
        listen: SocketAddr,
        allow: Vec<Allowed>,
        client: std::sync::Arc<rtcat_master::acyclic::SdoClient>,
    ) -> std::io::Result<Running> {
        use std::sync::atomic::Ordering;
        let sock = std::net::UdpSocket::bind(listen)?;
        sock.set_read_timeout(Some(std::time::Duration::from_millis(100)))?;
        let local = sock.local_addr()?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rtcat-gateway".into())
            .spawn(move || {
                let mut fwd = Queue {
                    client,
                    timeout: std::time::Duration::from_secs(2),
                };
                let mut counts = Counts::default();
                let mut buf = [0u8; MAX_DATAGRAM];
                while !stop2.load(Ordering::Relaxed) {
                    let Ok((n, peer)) = sock.recv_from(&mut buf) else {
                        continue;
                    };
                    if let Some(reply) = handle(&mut fwd, &allow, peer, &buf[..n], &mut counts) {
                        let _ = sock.send_to(&reply, peer);
                    }
                }
                counts
            })?;
        Ok(Running {
            stop,
            thread: Some(thread),
            local,
        })
    }

    /// Stop serving; what it served.
    pub fn stop(mut self) -> Counts {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}
