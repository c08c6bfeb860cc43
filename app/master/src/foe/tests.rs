//! The FoE client against a scripted device: an ESC's mailbox SMs at register level (status
//! bit 3, a mailbox taken when written whole, freed when read) with a small FoE server behind
//! them, which can answer BUSY, refuse half-way, send emergencies and CoE between the packets.

use super::*;
use crate::mailbox::{Geometry, Port, Timeouts, kind};
use std::collections::{BTreeMap, VecDeque};

const MBX: u16 = 128;
const RX: u16 = 0x1000;
const TX: u16 = 0x1080;
const FULL: usize = MBX as usize - 12;

fn mbx(k: u8, body: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 6];
    b[0..2].copy_from_slice(&(body.len() as u16).to_le_bytes());
    b[5] = k;
    b.extend_from_slice(body);
    b
}

fn foe(op: u8, value: u32, body: &[u8]) -> Vec<u8> {
    let mut d = vec![op, 0];
    d.extend_from_slice(&value.to_le_bytes());
    d.extend_from_slice(body);
    mbx(kind::FOE, &d)
}

fn emergency() -> Vec<u8> {
    mbx(kind::COE, &[0, 0x10, 0x10, 0x82, 0x11, 1, 2, 3, 4, 5])
}

#[derive(Default)]
struct Device {
    files: BTreeMap<String, (u32, Vec<u8>)>,
    /// Read: (file, sent, last packet, ended); write: (file, buffer, last packet).
    reading: Option<(String, usize, u32, bool)>,
    writing: Option<(String, Vec<u8>, u32)>,
    /// Answer this many requests with BUSY before serving them.
    busy: u32,
    /// Refuse a write once it holds more than this (DISK_FULL).
    max_bytes: usize,
    /// Send an emergency and an EoE mailbox before the next reply.
    noise_next: bool,
    /// Silent from this request on (count of requests left to serve).
    mute_after: Option<u32>,
    /// Send DATA packet numbers off by one.
    bad_numbers: bool,
    /// Counters of every request, and their types.
    counters: Vec<(u8, u8)>,
    /// FoE errors the master sent.
    master_errors: Vec<u32>,
}

impl Device {
    fn handle(&mut self, req: &[u8]) -> Vec<Vec<u8>> {
        let k = req[5] & 0x0f;
        self.counters.push((k, (req[5] >> 4) & 7));
        if let Some(n) = &mut self.mute_after {
            if *n == 0 {
                return Vec::new();
            }
            *n -= 1;
        }
        let mut out = Vec::new();
        if std::mem::take(&mut self.noise_next) {
            out.push(emergency());
            out.push(mbx(kind::EOE, &[9, 9, 9, 9]));
        }
        if k == kind::COE {
            // Any SDO upload: expedited, one byte.
            out.push(mbx(
                kind::COE,
                &[0, 0x30, 0x4f, req[9], req[10], req[11], 42, 0, 0, 0],
            ));
            return out;
        }
        let len = usize::from(u16::from_le_bytes([req[0], req[1]]));
        let p = &req[6..6 + len];
        let (op, value, body) = (p[0], u32::from_le_bytes([p[2], p[3], p[4], p[5]]), &p[6..]);
        if op != frame::opcode::ERROR && self.busy > 0 {
            self.busy -= 1;
            let mut d = vec![frame::opcode::BUSY, 0];
            d.extend_from_slice(&3u16.to_le_bytes());
            d.extend_from_slice(&10u16.to_le_bytes());
            d.extend_from_slice(b"erasing");
            out.push(mbx(kind::FOE, &d));
            return out;
        }
        match op {
            1 | 2 => {
                let name = String::from_utf8_lossy(body).to_string();
                let Some((pw, content)) = self.files.get(&name).cloned() else {
                    out.push(foe(5, code::NOT_FOUND, b"not found\0"));
                    return out;
                };
                if pw != value {
                    out.push(foe(5, code::NO_RIGHTS, b""));
                    return out;
                }
                if op == 2 {
                    self.writing = Some((name, Vec::new(), 0));
                    out.push(foe(4, 0, &[]));
                } else {
                    let _ = content;
                    self.reading = Some((name, 0, 0, false));
                    out.extend(self.next_data());
                }
            }
            3 => match &mut self.writing {
                Some((name, buf, last)) if value == *last + 1 => {
                    buf.extend_from_slice(body);
                    *last = value;
                    if buf.len() > self.max_bytes {
                        self.writing = None;
                        out.push(foe(5, code::DISK_FULL, b"file too large"));
                        return out;
                    }
                    if body.len() < FULL {
                        let (n, b) = (name.clone(), std::mem::take(buf));
                        self.files.get_mut(&n).unwrap().1 = b;
                        self.writing = None;
                    }
                    out.push(foe(4, value, &[]));
                }
                _ => out.push(foe(5, code::ILLEGAL, b"")),
            },
            4 => match &self.reading {
                Some((_, _, last, ended)) if value == *last => {
                    if *ended {
                        self.reading = None;
                    } else {
                        out.extend(self.next_data());
                    }
                }
                _ => out.push(foe(5, code::ILLEGAL, b"")),
            },
            5 => {
                self.master_errors.push(value);
                self.reading = None;
                self.writing = None;
            }
            _ => out.push(foe(5, code::ILLEGAL, b"")),
        }
        out
    }

    fn next_data(&mut self) -> Vec<Vec<u8>> {
        let (name, sent, last, ended) = self.reading.as_mut().unwrap();
        let data = &self.files[name.as_str()].1;
        let n = FULL.min(data.len() - *sent);
        *last += 1;
        let number = *last + u32::from(self.bad_numbers);
        let p = foe(3, number, &data[*sent..*sent + n]);
        *sent += n;
        *ended = n < FULL;
        vec![p]
    }
}

struct FakeEsc {
    dev: Device,
    queue: VecDeque<Vec<u8>>,
}

impl Port for FakeEsc {
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error> {
        match register {
            0x0805 => buf[0] = 0,
            0x080d => buf[0] = if self.queue.is_empty() { 0 } else { 0x08 },
            TX => {
                let m = self.queue.pop_front().expect("read of an empty mailbox");
                buf.fill(0);
                buf[..m.len()].copy_from_slice(&m);
            }
            r => panic!("unexpected read of {r:#06x}"),
        }
        Ok(())
    }

    fn write(&mut self, register: u16, data: &[u8]) -> Result<(), ethercrab::error::Error> {
        assert_eq!(register, RX);
        assert_eq!(data.len(), usize::from(MBX), "the mailbox is written whole");
        let r = self.dev.handle(data);
        self.queue.extend(r);
        Ok(())
    }
}

fn geometry() -> Geometry {
    Geometry {
        rx_sm: 0,
        rx_offset: RX,
        rx_size: MBX,
        tx_sm: 1,
        tx_offset: TX,
        tx_size: MBX,
    }
}

fn transport(dev: Device) -> Mailbox<FakeEsc> {
    let t = Timeouts {
        response: Duration::from_millis(20),
        ..Timeouts::default()
    };
    Mailbox::new(
        FakeEsc {
            dev,
            queue: VecDeque::new(),
        },
        3,
        geometry(),
        t,
    )
}

fn client(m: &mut Mailbox<FakeEsc>) -> Client<'_, Mailbox<FakeEsc>> {
    let mut c = Client::new(m);
    c.set_limits(Limits {
        busy_pause: Duration::ZERO,
        ..Limits::default()
    });
    c
}

fn device() -> Device {
    let mut d = Device {
        max_bytes: usize::MAX,
        ..Device::default()
    };
    d.files.insert(
        "fw.bin".into(),
        (0, (0..1000u32).map(|i| (i % 251) as u8).collect()),
    );
    d.files.insert("secret".into(), (0x1234, b"s".to_vec()));
    d
}

fn dev<'c>(c: &'c mut Client<'_, Mailbox<FakeEsc>>) -> &'c mut Device {
    &mut c.mailbox().port.dev
}

#[test]
fn read_and_write_across_packet_boundaries() {
    let mut m = transport(device());
    let mut c = client(&mut m);
    let fw: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let mut seen = Vec::new();
    assert_eq!(c.read("fw.bin", 0, &mut |p| seen.push(p.done)).unwrap(), fw);
    // 1000 bytes in packets of 116: 8 full, one of 72.
    assert_eq!(seen.len(), 9);
    assert_eq!(seen.last(), Some(&1000));
    for len in [0usize, 1, FULL - 1, FULL, FULL + 1, 2 * FULL, 5000] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
        let mut last = None;
        c.write("fw.bin", 0, &data, &mut |p| last = Some((p.done, p.total)))
            .unwrap();
        assert_eq!(last, Some((len as u64, Some(len as u64))), "{len} bytes");
        assert_eq!(
            c.read("fw.bin", 0, &mut |_| {}).unwrap(),
            data,
            "{len} bytes"
        );
    }
}

#[test]
fn device_errors_name_the_file_the_code_and_the_text() {
    let mut m = transport(device());
    let mut c = client(&mut m);
    let e = c.read("nothing", 0, &mut |_| {}).unwrap_err();
    assert_eq!(e.code(), Some(code::NOT_FOUND));
    assert_eq!(
        e.to_string(),
        "position 3: FoE read \"nothing\": the device refused it: FoE error 0x8001, not found: \
         the device has no file of that name (device: \"not found\")"
    );
    let e = c.write("secret", 7, b"x", &mut |_| {}).unwrap_err();
    assert_eq!(e.code(), Some(code::NO_RIGHTS));
    assert!(e.to_string().contains("password"), "{e}");
    assert_eq!(c.read("secret", 0x1234, &mut |_| {}).unwrap(), b"s");
}

#[test]
fn a_device_that_refuses_half_way_can_start_over() {
    let mut d = device();
    d.max_bytes = 500;
    let mut m = transport(d);
    let mut c = client(&mut m);
    let big = vec![1u8; 2000];
    let e = c.write("fw.bin", 0, &big, &mut |_| {}).unwrap_err();
    assert_eq!(e.code(), Some(code::DISK_FULL));
    // Refused with packet 5 (580 bytes): 4 packets (464 bytes) were acknowledged.
    assert!(e.to_string().contains("after 464 of 2000 bytes"), "{e}");
    assert!(
        e.to_string().contains("larger than the device takes"),
        "{e}"
    );
    // The device starts over: a file that fits goes through, and reads back.
    c.write("fw.bin", 0, &[2u8; 300], &mut |_| {}).unwrap();
    assert_eq!(c.read("fw.bin", 0, &mut |_| {}).unwrap(), [2u8; 300]);
}

#[test]
fn busy_repeats_the_last_request_and_reports_the_device_progress() {
    let mut d = device();
    d.busy = 3;
    let mut m = transport(d);
    let mut c = client(&mut m);
    let mut busy = Vec::new();
    c.write("fw.bin", 0, &[5u8; 200], &mut |p| {
        if let Some(b) = p.busy {
            busy.push(b);
        }
    })
    .unwrap();
    assert_eq!(busy, [(3, 10); 3]);
    assert_eq!(c.read("fw.bin", 0, &mut |_| {}).unwrap(), [5u8; 200]);
    // A device that stays busy ends in an error naming it, and is told.
    dev(&mut c).busy = u32::MAX;
    c.set_limits(Limits {
        busy: Duration::from_millis(30),
        busy_pause: Duration::from_millis(1),
        ..Limits::default()
    });
    let e = c.write("fw.bin", 0, &[5u8; 200], &mut |_| {}).unwrap_err();
    assert!(matches!(e, Error::Busy { .. }), "{e}");
    assert!(e.to_string().contains("\"erasing\""), "{e}");
    assert_eq!(dev(&mut c).master_errors, [code::NOT_DEFINED]);
}

#[test]
fn the_client_tells_the_device_when_it_gives_up() {
    // Over the read limit: the device gets an FoE error, the caller TooLarge.
    let mut m = transport(device());
    let mut c = client(&mut m);
    c.set_limits(Limits {
        max_read: 300,
        ..c.limits()
    });
    let e = c.read("fw.bin", 0, &mut |_| {}).unwrap_err();
    assert!(matches!(e, Error::TooLarge { limit: 300, .. }), "{e}");
    assert_eq!(dev(&mut c).master_errors, [code::DISK_FULL]);
    assert!(dev(&mut c).reading.is_none(), "the device dropped the read");
    // A wrong packet number.
    let mut m = transport(device());
    let mut c = client(&mut m);
    dev(&mut c).bad_numbers = true;
    let e = c.read("fw.bin", 0, &mut |_| {}).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("the device sent packet 2 where packet 1 was due"),
        "{e}"
    );
    assert_eq!(dev(&mut c).master_errors, [code::PACKET_NUMBER]);
    // Silence half-way: a timeout naming the packet, and the device is told.
    let mut m = transport(device());
    let mut c = client(&mut m);
    dev(&mut c).mute_after = Some(3);
    let e = c.write("fw.bin", 0, &[1u8; 1000], &mut |_| {}).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("FoE write \"fw.bin\": packet 3: response: no answer within 20 ms"),
        "{e}"
    );
}

#[test]
fn emergencies_and_other_protocols_during_a_transfer_are_kept() {
    let mut m = transport(device());
    let mut c = client(&mut m);
    dev(&mut c).noise_next = true;
    assert_eq!(c.read("secret", 0x1234, &mut |_| {}).unwrap(), b"s");
    let m = c.mailbox();
    let e = m.take_emergencies();
    assert_eq!((e.len(), e[0].code, e[0].position), (1, 0x8210, 3));
    let eoe = m
        .take_set_aside(kind::EOE)
        .expect("the EoE mailbox was set aside");
    assert_eq!(&eoe[6..10], &[9, 9, 9, 9]);
    assert!(m.take_set_aside(kind::EOE).is_none());
}

#[test]
fn coe_and_foe_share_one_counter_and_interleave() {
    let mut m = transport(device());
    client(&mut m).read("secret", 0x1234, &mut |_| {}).unwrap();
    // CoE on the same transport, then FoE again.
    let mut coe = crate::coe::Client::from_mailbox(m);
    assert_eq!(coe.upload(0x6060, 0).unwrap(), [42]);
    let mut m = coe.into_mailbox();
    let mut c = client(&mut m);
    c.write("fw.bin", 0, &[1, 2, 3], &mut |_| {}).unwrap();
    let counters: Vec<u8> = dev(&mut c).counters.iter().map(|x| x.1).collect();
    let kinds: Vec<u8> = dev(&mut c).counters.iter().map(|x| x.0).collect();
    // RRQ, ACK 1 (FoE), the upload (CoE), WRQ, DATA 1 (FoE): one sequence 1, 2, 3, 4, 5.
    assert_eq!(kinds, [4, 4, 3, 4, 4]);
    assert_eq!(counters, [1, 2, 3, 4, 5]);
}

#[test]
fn names_are_checked_before_anything_is_sent() {
    let mut m = transport(device());
    let mut c = client(&mut m);
    assert!(matches!(c.read("", 0, &mut |_| {}), Err(Error::Request(_))));
    let long = "x".repeat(200);
    let e = c.write(&long, 0, b"", &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("at most 116"), "{e}");
    assert!(dev(&mut c).counters.is_empty());
}

/// A device that answers every request with the next of a list of arbitrary mailboxes.
struct RandomEsc {
    answers: VecDeque<Vec<u8>>,
    pending: usize,
}

impl Port for RandomEsc {
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error> {
        match register {
            0x0805 => buf[0] = 0,
            0x080d => buf[0] = if self.pending > 0 { 0x08 } else { 0 },
            TX => {
                self.pending = self.pending.saturating_sub(1);
                let m = self.answers.pop_front().unwrap_or_default();
                buf.fill(0);
                let n = m.len().min(buf.len());
                buf[..n].copy_from_slice(&m[..n]);
            }
            _ => buf.fill(0),
        }
        Ok(())
    }

    fn write(&mut self, _register: u16, _data: &[u8]) -> Result<(), ethercrab::error::Error> {
        if !self.answers.is_empty() {
            self.pending += 1;
        }
        Ok(())
    }
}

fn foe_like() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    (
        prop_oneof![Just(3u8), Just(4), Just(5), Just(6), 0u8..16],
        0u32..4,
        proptest::collection::vec(any::<u8>(), 0..130),
        prop_oneof![Just(4u8), Just(3), Just(0), 0u8..16],
    )
        .prop_map(|(op, n, body, k)| {
            let mut d = vec![op, 0];
            d.extend_from_slice(&n.to_le_bytes());
            d.extend_from_slice(&body);
            let mut m = mbx(k, &d);
            m.truncate(usize::from(MBX));
            m
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    // Whatever the device answers, a read and a write return (a file or an error): no panic,
    // no endless loop (the answers run out, then the timeout).
    #[test]
    fn client_survives_any_answers(answers in proptest::collection::vec(foe_like(), 0..12)) {
        let t = Timeouts { response: Duration::from_millis(1), mailbox_free:
                           Duration::from_millis(1), poll: Duration::ZERO };
        let mut m = Mailbox::new(RandomEsc { answers: answers.into(), pending: 0 }, 0, geometry(), t);
        let mut c = Client::new(&mut m);
        c.set_limits(Limits { busy: Duration::from_millis(2), busy_pause: Duration::ZERO,
                              max_read: 4096 });
        let _ = c.read("fw.bin", 0, &mut |_| {});
        let _ = c.write("fw.bin", 0, &[7u8; 300], &mut |_| {});
    }
}
