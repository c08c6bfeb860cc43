//! The EoE client against the simulator's EoE endpoint (`ecsim::eoe`), through a register-level
//! port over a simulated segment: the parameters both ways, frames cut and put together, and —
//! with a TAP behind the device (root) — a real network.

use super::*;
use crate::mailbox::{Geometry, Port, Timeouts};
use ecsim::frame::{Cmd, FrameBuilder, datagram_result, phys};
use ecsim::{Disposition, Segment, SegmentSpec};

const MBX: u16 = 128;
const RX: u16 = 0x1000;
const TX: u16 = 0x1080;

/// One subdevice of a simulated segment by register access (FPRD/FPWR at 0x1000 + position).
struct SimPort {
    seg: Segment,
    pos: u16,
    t0: std::time::Instant,
}

impl SimPort {
    fn dg(&mut self, cmd: Cmd, address: u32, data: &[u8]) -> (Vec<u8>, u16) {
        let mut frame = FrameBuilder::new().datagram(cmd, 0, address, data).build();
        let now = self.t0.elapsed().as_nanos() as u64;
        assert!(matches!(
            self.seg.process(&mut frame, now),
            Disposition::Reply { .. }
        ));
        datagram_result(&frame, 0).expect("a reply")
    }

    /// Station address, mailbox SMs, PRE-OP: what a master does in INIT.
    fn new(spec: SegmentSpec) -> SimPort {
        let mut p = SimPort {
            seg: Segment::new(spec),
            pos: 0,
            t0: std::time::Instant::now(),
        };
        assert_eq!(
            p.dg(Cmd::Apwr, phys(0, 0x0010), &0x1000u16.to_le_bytes()).1,
            1
        );
        let g = Geometry {
            rx_sm: 0,
            rx_offset: RX,
            rx_size: MBX,
            tx_sm: 1,
            tx_offset: TX,
            tx_size: MBX,
        };
        assert_eq!(p.dg(Cmd::Fpwr, phys(0x1000, 0x0800), &g.registers()).1, 1);
        assert_eq!(p.dg(Cmd::Fpwr, phys(0x1000, 0x0120), &[2, 0]).1, 1);
        assert_eq!(
            p.dg(Cmd::Fprd, phys(0x1000, 0x0130), &[0, 0]).0[0] & 0x0f,
            2
        );
        p
    }
}

impl Port for SimPort {
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error> {
        let (d, wkc) = self.dg(Cmd::Fprd, phys(0x1000 + self.pos, register), buf);
        if wkc != 1 {
            return Err(ethercrab::error::Error::WorkingCounter {
                expected: 1,
                received: wkc,
            });
        }
        buf.copy_from_slice(&d);
        Ok(())
    }
    fn write(&mut self, register: u16, data: &[u8]) -> Result<(), ethercrab::error::Error> {
        let (_, wkc) = self.dg(Cmd::Fpwr, phys(0x1000 + self.pos, register), data);
        if wkc != 1 {
            return Err(ethercrab::error::Error::WorkingCounter {
                expected: 1,
                received: wkc,
            });
        }
        Ok(())
    }
}

fn device(tap: Option<&str>) -> SegmentSpec {
    let tap = tap.map(|t| format!("tap = \"{t}\"\n")).unwrap_or_default();
    SegmentSpec::from_toml(&format!(
        "[[device]]\nname = \"Drive\"\ncoe = true\ninputs = 2\n\
         [device.eoe]\nmac = \"02:00:00:00:ec:01\"\n{tap}"
    ))
    .expect("an EoE device")
}

fn mailbox(port: SimPort) -> Mailbox<SimPort> {
    let g = Geometry {
        rx_sm: 0,
        rx_offset: RX,
        rx_size: MBX,
        tx_sm: 1,
        tx_offset: TX,
        tx_size: MBX,
    };
    Mailbox::new(
        port,
        0,
        g,
        Timeouts {
            poll: Duration::from_micros(100),
            ..Timeouts::default()
        },
    )
}

#[test]
fn ip_parameters_encode_as_documented_and_decode_back() {
    let p = IpParams {
        mac: Some([2, 0, 0, 0, 0, 9]),
        ip: Some([192, 168, 1, 2]),
        subnet: Some([255, 255, 255, 0]),
        gateway: Some([192, 168, 1, 1]),
        dns: None,
        dns_name: Some("drive-x".into()),
    };
    let b = p.encode();
    assert_eq!(&b[..4], &0x2fu32.to_le_bytes());
    assert_eq!(
        &b[10..14],
        &[2, 1, 168, 192],
        "192.168.1.2, 32-bit little-endian"
    );
    assert_eq!(IpParams::decode(&b), Some(p.clone()));
    assert_eq!(IpParams::decode(&b[..13]), None);
    assert_eq!(
        p.to_string(),
        "mac 02:00:00:00:00:09, ip 192.168.1.2, subnet 255.255.255.0, gateway 192.168.1.1, dns-name \"drive-x\""
    );
    assert_eq!(parse_mac("02:00:00:00:ec:01"), Ok([2, 0, 0, 0, 0xec, 1]));
    for bad in [
        "01:00:00:00:00:01",
        "00:00:00:00:00:00",
        "02:00:00:00:ec",
        "2:0:0:0:0:1x",
        "",
    ] {
        assert!(parse_mac(bad).is_err(), "{bad}");
    }
}

#[test]
fn fragments_are_whole_blocks_and_put_together_again() {
    for len in [1usize, 60, 118, 119, 500, 1514, MAX_FRAME] {
        let frame: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
        let fs = fragments(&frame, usize::from(MBX) - 6, 5);
        let mut r = Reassembler::default();
        let mut out = None;
        for (k, f) in fs.iter().enumerate() {
            assert!(f.len() <= usize::from(MBX) - 6);
            let last = k + 1 == fs.len();
            assert_eq!(word(f, 0) & (1 << 8) != 0, last);
            assert!(last || (f.len() - HEADER).is_multiple_of(32));
            assert_eq!(word(f, 2) >> 12, 5);
            out = r.push(f);
            assert_eq!(out.is_some(), last);
        }
        assert_eq!(out.as_deref(), Some(&frame[..]), "{len} bytes");
    }
    // out of order: dropped, the next frame clean
    let frame = vec![7u8; 300];
    let fs = fragments(&frame, 122, 1);
    let mut r = Reassembler::default();
    assert_eq!(r.push(&fs[0]), None);
    assert_eq!(r.push(&fs[2]), None);
    assert_eq!(r.dropped(), 1);
    assert_eq!(r.push(&fs[1]), None, "a continuation of a dropped frame");
    assert_eq!(r.dropped(), 2);
    let mut last = None;
    for f in &fs {
        last = r.push(f);
    }
    assert_eq!(last, Some(frame));
    assert_eq!(r.push(&[1, 2]), None);
    assert_eq!(r.dropped(), 3);
}

#[test]
fn the_simulated_device_takes_its_parameters_and_a_whole_frame() {
    let mut m = mailbox(SimPort::new(device(None)));
    let mut c = Client::new(&mut m);
    let p = IpParams {
        ip: Some([10, 9, 8, 7]),
        subnet: Some([255, 255, 0, 0]),
        dns_name: Some("x".into()),
        ..IpParams::default()
    };
    c.set_ip(&p).unwrap();
    let got = c.get_ip().unwrap();
    assert_eq!(got.mac, Some([2, 0, 0, 0, 0xec, 1]));
    assert_eq!(got.ip, p.ip);
    assert_eq!(got.subnet, p.subnet);
    assert_eq!(got.dns_name.as_deref(), Some("x"));
    let frame: Vec<u8> = (0..1514u32).map(|i| (i % 251) as u8).collect();
    c.send_frame(&frame).unwrap();
    c.send_frame(&frame[..60]).unwrap();
    assert!(matches!(c.send_frame(&[]), Err(Error::FrameSize(0))));
    assert!(matches!(
        c.send_frame(&vec![0; 2000]),
        Err(Error::FrameSize(2000))
    ));
    assert_eq!(
        c.poll().unwrap(),
        None,
        "nothing from a device without a network"
    );
    drop(c);
    let e = m.port().seg.devices()[0].eoe().unwrap();
    assert_eq!(e.stats().from_master, 2);
    assert_eq!(e.last_from_master(), &frame[..60]);
}

#[test]
fn a_device_without_eoe_refuses_with_a_mailbox_error() {
    let spec =
        SegmentSpec::from_toml("[[device]]\nname = \"D\"\ncoe = true\ninputs = 2\n").unwrap();
    let mut m = mailbox(SimPort::new(spec));
    let e = Client::new(&mut m).get_ip().unwrap_err().to_string();
    assert!(e.contains("0x0002") || e.contains("unsupported"), "{e}");
}

/// A real network behind the device (a TAP: root). The device's address set over EoE is where
/// a socket receives the master's datagram; the kernel's ARP request comes back as a frame.
#[test]
fn frames_reach_the_network_behind_the_device_and_come_back() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: a TAP needs root");
        return;
    }
    let tap = format!("rteoe{}", std::process::id() % 100_000);
    let mut port = SimPort::new(device(Some(&tap)));
    port.seg.attach_eoe().unwrap();
    let mut m = mailbox(port);
    let mut c = Client::new(&mut m);
    let x = (std::process::id() % 200) as u8 + 20;
    let (dev_ip, master_ip) = ([10, 204, x, 2], [10, 204, x, 1]);
    c.set_ip(&IpParams {
        ip: Some(dev_ip),
        subnet: Some([255, 255, 255, 0]),
        ..IpParams::default()
    })
    .unwrap();
    let sock = std::net::UdpSocket::bind((std::net::Ipv4Addr::from(dev_ip), 0)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let port_no = sock.local_addr().unwrap().port();
    // An IPv4/UDP frame from the master's side to that socket.
    let payload = vec![0x5a; 700];
    let mut f = vec![2, 0, 0, 0, 0xec, 1, 2, 0, 0, 0, 0xec, 0xfe, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
    ip.extend_from_slice(&master_ip);
    ip.extend_from_slice(&dev_ip);
    let sum = {
        let mut s: u32 = ip
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    };
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&4000u16.to_be_bytes());
    f.extend_from_slice(&port_no.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&payload);
    c.send_frame(&f).unwrap();
    let mut buf = [0u8; 2000];
    let (n, from) = sock.recv_from(&mut buf).expect("the datagram arrives");
    assert_eq!(&buf[..n], &payload[..]);
    sock.send_to(b"back", from).unwrap();
    let t0 = std::time::Instant::now();
    let arp = loop {
        if let Some(fr) = c.poll().unwrap()
            && fr.len() >= 42
            && fr[12..14] == [0x08, 0x06]
        {
            break fr;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "no ARP request came back"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(&arp[28..32], &dev_ip);
    assert_eq!(&arp[38..42], &master_ip);
}
