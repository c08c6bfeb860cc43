//! The mailbox and the CoE server with raw datagrams, as a master sends them: SM0/SM1 mailbox
//! semantics, the repeat mechanism, mailbox error replies, every SDO transfer type and abort
//! code, complete access, the SDO information service, emergencies, a power cycle, and random
//! mailbox bytes (fuzzed).

use ecsim::frame::{Cmd, FrameBuilder, datagram_result, phys};
use ecsim::od::abort;
use ecsim::{Disposition, FaultCommand, Faults, Segment, SegmentSpec};
use proptest::prelude::*;

const MBX: usize = 128;
const SM0: u16 = 0x1000;
const SM1: u16 = 0x1080;

fn example() -> SegmentSpec {
    SegmentSpec::from_toml(include_str!("../../../examples/coe/segment.toml")).expect("loads")
}

/// A segment for the transfers the example does not exercise: a long string, a write-only
/// object, many objects (a fragmented object list).
fn test_device() -> SegmentSpec {
    let mut t = String::from(
        "[[device]]\nname = \"T\"\ncoe = true\ninputs = 2\n\
         [[device.object]]\nindex = 0x2000\nname = \"Long\"\ntype = \"VISIBLE_STRING\"\n\
         access = \"rw\"\n",
    );
    t.push_str(&format!("default = \"{}\"\n", long_text()));
    t.push_str(
        "[[device.object]]\nindex = 0x2001\nname = \"Secret\"\ntype = \"UINT32\"\n\
         access = \"wo\"\n",
    );
    for k in 0..80 {
        t.push_str(&format!(
            "[[device.object]]\nindex = {}\nname = \"P{k}\"\ntype = \"UINT8\"\naccess = \"rw\"\n\
             backup = {}\n",
            0x3000 + k,
            k % 2 == 0
        ));
    }
    SegmentSpec::from_toml(&t).expect("test device")
}

fn long_text() -> String {
    (0..200).map(|k| (b'A' + (k % 26) as u8) as char).collect()
}

struct Bus {
    seg: Segment,
    faults: Faults,
    counter: u8,
    /// The simulation time every datagram is sent at.
    now: u64,
}

/// The CoE part of one response: (service, bytes from the CoE header on).
fn coe_of(resp: &[u8]) -> (u8, &[u8]) {
    assert_eq!(resp[5] & 0x0f, 3, "a CoE mailbox: {resp:02x?}");
    let len = usize::from(u16::from_le_bytes([resp[0], resp[1]]));
    (resp[7] >> 4, &resp[6..6 + len])
}

impl Bus {
    fn new(spec: SegmentSpec) -> Bus {
        let faults = Faults::new();
        let n = spec.devices.len();
        let mut b = Bus {
            seg: Segment::with_faults(spec, faults.clone()),
            faults,
            counter: 0,
            now: 0,
        };
        for i in 0..n {
            b.init(i);
        }
        b
    }

    /// Station address, mailbox SMs, PRE-OP: what a master does in INIT.
    fn init(&mut self, pos: usize) {
        let adp = 0u16.wrapping_sub(pos as u16);
        let (_, wkc) = self.dg(
            Cmd::Apwr,
            phys(adp, 0x0010),
            &(0x1000 + pos as u16).to_le_bytes(),
        );
        assert_eq!(wkc, 1);
        let mut sms = [0u8; 16];
        sms[0..2].copy_from_slice(&SM0.to_le_bytes());
        sms[2..4].copy_from_slice(&(MBX as u16).to_le_bytes());
        sms[4] = 0x26;
        sms[6] = 1;
        sms[8..10].copy_from_slice(&SM1.to_le_bytes());
        sms[10..12].copy_from_slice(&(MBX as u16).to_le_bytes());
        sms[12] = 0x22;
        sms[14] = 1;
        assert_eq!(self.wr(pos, 0x0800, &sms), 1);
        self.state(pos, 2);
    }

    fn state(&mut self, pos: usize, st: u8) {
        assert_eq!(self.wr(pos, 0x0120, &[st, 0]), 1);
        let s = self.rd(pos, 0x0130, 2).0;
        assert_eq!(s[0] & 0x1f, st, "AL status {s:02x?}");
    }

    fn dg(&mut self, cmd: Cmd, address: u32, data: &[u8]) -> (Vec<u8>, u16) {
        let mut frame = FrameBuilder::new().datagram(cmd, 0, address, data).build();
        assert!(matches!(
            self.seg.process(&mut frame, self.now),
            Disposition::Reply { .. }
        ));
        datagram_result(&frame, 0).expect("a reply")
    }

    fn wr(&mut self, pos: usize, ado: u16, data: &[u8]) -> u16 {
        self.dg(Cmd::Fpwr, phys(0x1000 + pos as u16, ado), data).1
    }

    fn rd(&mut self, pos: usize, ado: u16, len: usize) -> (Vec<u8>, u16) {
        self.dg(Cmd::Fprd, phys(0x1000 + pos as u16, ado), &vec![0; len])
    }

    fn sm_status(&mut self, pos: usize, sm: u16) -> u8 {
        self.rd(pos, 0x0805 + 8 * sm, 1).0[0]
    }

    /// Write a whole mailbox (`data` after a header of `kind`) into SM0. Returns the WKC.
    fn send_raw(&mut self, pos: usize, mbx: &[u8]) -> u16 {
        let mut buf = mbx.to_vec();
        buf.resize(MBX, 0);
        self.wr(pos, SM0, &buf)
    }

    fn send(&mut self, pos: usize, kind: u8, data: &[u8]) -> u16 {
        self.counter = self.counter % 7 + 1;
        let mut m = (data.len() as u16).to_le_bytes().to_vec();
        m.extend_from_slice(&[0, 0, 0, kind | (self.counter << 4)]);
        m.extend_from_slice(data);
        self.send_raw(pos, &m)
    }

    /// The response in SM1, if it is full.
    fn receive(&mut self, pos: usize) -> Option<Vec<u8>> {
        if self.sm_status(pos, 1) & 0x08 == 0 {
            return None;
        }
        let (r, wkc) = self.rd(pos, SM1, MBX);
        assert_eq!(wkc, 1);
        Some(r)
    }

    /// One CoE request and its response (CoE part).
    fn coe(&mut self, pos: usize, coe: &[u8]) -> Vec<u8> {
        assert_eq!(self.send(pos, 3, coe), 1, "SM0 accepts the request");
        let r = self.receive(pos).expect("a response");
        coe_of(&r).1.to_vec()
    }

    fn upload(&mut self, pos: usize, index: u16, sub: u8, ca: bool) -> Result<Vec<u8>, u32> {
        let i = index.to_le_bytes();
        let r = self.coe(
            pos,
            &[0, 0x20, 0x40 | if ca { 0x10 } else { 0 }, i[0], i[1], sub],
        );
        match r[2] >> 5 {
            4 => Err(u32::from_le_bytes(r[6..10].try_into().unwrap())),
            2 if r[2] & 0x02 != 0 => {
                let n = 4 - usize::from(r[2] >> 2 & 3);
                Ok(r[6..6 + n].to_vec())
            }
            2 => {
                let size = u32::from_le_bytes(r[6..10].try_into().unwrap()) as usize;
                let mut data = r[10..].to_vec();
                let mut toggle = false;
                while data.len() < size {
                    let s = self.coe(pos, &[0, 0x20, 0x60 | u8::from(toggle) << 4]);
                    if s[2] >> 5 == 4 {
                        return Err(u32::from_le_bytes(s[6..10].try_into().unwrap()));
                    }
                    assert_eq!(s[2] >> 5, 0, "upload segment response: {s:02x?}");
                    assert_eq!(s[2] & 0x10 != 0, toggle, "the toggle bit is echoed");
                    let mut n = s.len() - 3;
                    if n == 7 {
                        n -= usize::from(s[2] >> 1 & 7);
                    }
                    data.extend_from_slice(&s[3..3 + n]);
                    toggle = !toggle;
                    if s[2] & 1 != 0 {
                        break;
                    }
                }
                assert_eq!(data.len(), size);
                Ok(data)
            }
            _ => panic!("unexpected response {r:02x?}"),
        }
    }

    /// Download: expedited up to 4 bytes, else normal, segmented beyond the mailbox.
    fn download(&mut self, pos: usize, index: u16, sub: u8, ca: bool, v: &[u8]) -> Result<(), u32> {
        let i = index.to_le_bytes();
        let ca = if ca { 0x10 } else { 0 };
        let abort_of =
            |r: &[u8]| (r[2] >> 5 == 4).then(|| u32::from_le_bytes(r[6..10].try_into().unwrap()));
        if v.len() <= 4 {
            let mut req = vec![
                0,
                0x20,
                0x23 | ca | ((4 - v.len() as u8) << 2),
                i[0],
                i[1],
                sub,
            ];
            req.extend_from_slice(v);
            req.resize(12, 0);
            let r = self.coe(pos, &req);
            return abort_of(&r).map_or(Ok(()), Err);
        }
        let room = MBX - 6 - 10;
        let first = v.len().min(room);
        let mut req = vec![0, 0x20, 0x21 | ca, i[0], i[1], sub];
        req.extend_from_slice(&(v.len() as u32).to_le_bytes());
        req.extend_from_slice(&v[..first]);
        let r = self.coe(pos, &req);
        if let Some(c) = abort_of(&r) {
            return Err(c);
        }
        assert_eq!(r[2] >> 5, 3, "download response");
        let mut at = first;
        let mut toggle = false;
        while at < v.len() {
            let n = (v.len() - at).min(MBX - 6 - 3);
            let last = at + n == v.len();
            let unused = 7usize.saturating_sub(n) as u8;
            let mut req = vec![
                0,
                0x20,
                u8::from(toggle) << 4 | unused << 1 | u8::from(last),
            ];
            req.extend_from_slice(&v[at..at + n]);
            req.resize(req.len().max(10), 0);
            let r = self.coe(pos, &req);
            if let Some(c) = abort_of(&r) {
                return Err(c);
            }
            assert_eq!(r[2] >> 5, 1, "download segment response");
            at += n;
            toggle = !toggle;
        }
        Ok(())
    }

    /// An SDO information request; the responses (CoE parts) until the last fragment.
    fn info(&mut self, pos: usize, op: u8, body: &[u8]) -> Vec<Vec<u8>> {
        let mut req = vec![0, 0x80, op, 0, 0, 0];
        req.extend_from_slice(body);
        assert_eq!(self.send(pos, 3, &req), 1);
        let mut out = Vec::new();
        loop {
            let r = self.receive(pos).expect("an SDO information response");
            let c = coe_of(&r).1.to_vec();
            let incomplete = c[2] & 0x80 != 0;
            out.push(c);
            if !incomplete {
                return out;
            }
        }
    }
}

#[test]
fn a_request_is_answered_in_sm1_and_sm0_refuses_writes_while_full() {
    let mut b = Bus::new(example());
    assert_eq!(b.sm_status(2, 0) & 0x08, 0);
    assert_eq!(
        b.upload(2, 0x1000, 0, false),
        Ok(0x0002_0192u32.to_le_bytes().to_vec())
    );
    assert_eq!(
        b.sm_status(2, 1) & 0x08,
        0,
        "reading the last byte emptied SM1"
    );
    // A write that stops short of the last byte does not complete the mailbox.
    assert_eq!(
        b.wr(2, SM0, &[10, 0, 0, 0, 0, 0x13, 0, 0x20, 0x40, 0, 0x10, 0]),
        1
    );
    assert_eq!(b.sm_status(2, 0) & 0x08, 0);
    assert!(b.receive(2).is_none(), "nothing answered yet");
    // The master may not write the status registers.
    assert_eq!(b.wr(2, 0x0805, &[0x08]), 1);
    assert_eq!(b.sm_status(2, 0) & 0x08, 0);
    // Reading an empty SM1 is refused.
    assert_eq!(b.rd(2, SM1, MBX).1, 0);
    // Two requests without reading the first answer: the second waits in SM0 (full) and
    // writes to SM0 are refused until the device took it.
    let up = [10u8, 0, 0, 0, 0, 0x13, 0, 0x20, 0x40, 0x08, 0x10, 0];
    assert_eq!(b.send_raw(2, &up), 1);
    assert_eq!(b.sm_status(2, 1) & 0x08, 0x08);
    assert_eq!(
        b.send_raw(2, &up),
        1,
        "taken by the device: the response waits"
    );
    assert_eq!(
        b.sm_status(2, 0) & 0x08,
        0x08,
        "SM0 full: the device is busy"
    );
    assert_eq!(b.send_raw(2, &up), 0, "a full SM0 refuses the write");
    let first = b.receive(2).expect("first response");
    let second = b.receive(2).expect("second response");
    assert_eq!(first[6..], second[6..]);
    assert_ne!(
        first[5] >> 4,
        second[5] >> 4,
        "the device counts its responses"
    );
    assert_eq!(b.sm_status(2, 0) & 0x08, 0);
    // The same counter twice is still served (two clients share a device).
    for _ in 0..2 {
        assert_eq!(b.send_raw(2, &up), 1);
        assert!(b.receive(2).is_some());
    }
}

#[test]
fn a_device_with_a_mailbox_time_answers_after_it() {
    // `[device.timing] mailbox_us`: the response appears in SM1 that long after the device
    // took the request from SM0 (a real device's firmware answers in its own time).
    let mut spec = example();
    spec.devices[0].timing.mailbox_ns = 3_000_000;
    let mut b = Bus::new(spec);
    let i = 0x1008u16.to_le_bytes();
    assert_eq!(b.send(0, 3, &[0, 0x20, 0x40, i[0], i[1], 0]), 1);
    b.now = 2_900_000;
    assert!(b.receive(0).is_none(), "no answer 2.9 ms after the request");
    assert_eq!(b.sm_status(0, 0) & 0x08, 0, "the request was taken at once");
    b.now = 3_000_000;
    let r = b.receive(0).expect("the answer after 3 ms");
    assert_eq!(&coe_of(&r).1[10..18], b"DIO8-COE");
    // Without a mailbox time the other devices answer at once.
    assert_eq!(b.upload(1, 0x1000, 0, false).map(|v| v.len()), Ok(4));
}

#[test]
fn the_repeat_request_puts_the_last_response_again() {
    let mut b = Bus::new(example());
    let name = b.upload(0, 0x1008, 0, false).unwrap();
    assert_eq!(name, b"DIO8-COE");
    let (r0, _) = b.rd(0, 0x080e, 2);
    assert_eq!(r0[1] & 0x02, 0);
    // Toggle SM1's repeat request (0x080E bit 1).
    assert_eq!(b.wr(0, 0x080e, &[0x03]), 1);
    let (act, _) = b.rd(0, 0x080e, 2);
    assert_eq!(act[1] & 0x02, 0x02, "acknowledged in 0x080F bit 1");
    let again = b.receive(0).expect("the last response again");
    let (_, coe) = coe_of(&again);
    assert_eq!(&coe[10..], b"DIO8-COE");
    assert!(b.receive(0).is_none());
    assert_eq!(b.wr(0, 0x080e, &[0x01]), 1);
    assert_eq!(b.rd(0, 0x080e, 2).0[1] & 0x02, 0, "toggled back");
    assert!(b.receive(0).is_some(), "repeated once more");
}

#[test]
fn bad_mailbox_headers_get_a_mailbox_error_reply() {
    let mut b = Bus::new(example());
    let err = |r: &[u8]| {
        assert_eq!(r[5] & 0x0f, 0, "type 0: {r:02x?}");
        assert_eq!(u16::from_le_bytes([r[6], r[7]]), 1);
        u16::from_le_bytes([r[8], r[9]])
    };
    // Length beyond the mailbox.
    assert_eq!(b.send_raw(1, &[200, 0, 0, 0, 0, 0x13]), 1);
    assert_eq!(err(&b.receive(1).unwrap()), 0x0008);
    // Unknown / unsupported types (SoE, FoE, EoE, vendor).
    for kind in [5u8, 4, 2, 0x0f, 0x09] {
        assert_eq!(b.send(1, kind, &[0, 0]), 1);
        assert_eq!(err(&b.receive(1).unwrap()), 0x0002, "type {kind}");
    }
    // A CoE mailbox too short for its header.
    assert_eq!(b.send(1, 3, &[0]), 1);
    assert_eq!(err(&b.receive(1).unwrap()), 0x0006);
    // And the mailbox still serves a good request.
    assert_eq!(
        b.upload(1, 0x1018, 2, false),
        Ok(0x0003_0002u32.to_le_bytes().to_vec())
    );
}

#[test]
fn uploads_and_downloads_of_every_transfer_type() {
    let mut b = Bus::new(test_device());
    // Expedited (<= 4 bytes) and normal (in one mailbox).
    assert_eq!(
        b.upload(0, 0x1018, 1, false),
        Ok(0x766u32.to_le_bytes().to_vec())
    );
    assert_eq!(b.upload(0, 0x1009, 0, false), Ok(b"1.0".to_vec()));
    assert_eq!(b.upload(0, 0x1008, 0, false), Ok(b"T".to_vec()));
    // Segmented: 200 bytes do not fit a 128-byte mailbox.
    assert_eq!(b.upload(0, 0x2000, 0, false), Ok(long_text().into_bytes()));
    let new: Vec<u8> = (0..230).map(|k| b'a' + (k % 26) as u8).collect();
    b.download(0, 0x2000, 0, false, &new).unwrap();
    assert_eq!(b.upload(0, 0x2000, 0, false), Ok(new.clone()));
    let short = b"0123456789".to_vec();
    b.download(0, 0x2000, 0, false, &short).unwrap();
    assert_eq!(b.upload(0, 0x2000, 0, false), Ok(short));
    // Expedited download.
    b.download(0, 0x3001, 0, false, &[42]).unwrap();
    assert_eq!(b.upload(0, 0x3001, 0, false), Ok(vec![42]));
    // A wrong toggle bit aborts the transfer.
    b.download(0, 0x2000, 0, false, &new).unwrap();
    let up = b.coe(0, &[0, 0x20, 0x40, 0x00, 0x20, 0]);
    assert_eq!(up[2], 0x41, "normal upload with segments following");
    let r = b.coe(0, &[0, 0x20, 0x60 | 0x10]);
    assert_eq!(r[2], 0x80);
    assert_eq!(
        u32::from_le_bytes(r[6..10].try_into().unwrap()),
        abort::TOGGLE
    );
    // A segment with no transfer in progress.
    let r = b.coe(0, &[0, 0x20, 0x60]);
    assert_eq!(
        u32::from_le_bytes(r[6..10].try_into().unwrap()),
        abort::COMMAND_UNKNOWN
    );
}

#[test]
fn every_abort_code_is_raised() {
    let mut b = Bus::new(example());
    let t = test_device();
    let mut tb = Bus::new(t);
    assert_eq!(b.upload(2, 0x5555, 0, false), Err(abort::NO_OBJECT));
    assert_eq!(b.upload(2, 0x1018, 9, false), Err(abort::NO_SUBINDEX));
    assert_eq!(b.upload(1, 0x8000, 3, false), Err(abort::NO_SUBINDEX));
    assert_eq!(
        b.download(2, 0x6040, 0, false, &[1, 2, 3, 4]),
        Err(abort::LENGTH_TOO_HIGH)
    );
    assert_eq!(
        b.download(2, 0x6085, 0, false, &[1]),
        Err(abort::LENGTH_TOO_LOW)
    );
    assert_eq!(
        b.download(2, 0x6041, 0, false, &[1, 0]),
        Err(abort::READ_ONLY)
    );
    assert_eq!(
        b.download(0, 0x1c12, 0, false, &[0]),
        Err(abort::READ_ONLY),
        "fixed PDOs"
    );
    assert_eq!(tb.upload(0, 0x2001, 0, false), Err(abort::WRITE_ONLY));
    tb.download(0, 0x2001, 0, false, &[1, 2, 3, 4]).unwrap();
    assert_eq!(
        b.download(1, 0x8000, 0x15, false, &[8, 0]),
        Err(abort::VALUE_RANGE)
    );
    b.download(1, 0x8000, 0x15, false, &[7, 0]).unwrap();
    b.download(1, 0x8000, 0x06, false, &[0xff]).unwrap();
    assert_eq!(
        b.upload(1, 0x8000, 0x06, false),
        Ok(vec![1]),
        "TRUE is kept as 1"
    );
    // Mapping: not mappable, wrong direction, wrong width, too many entries.
    b.download(2, 0x1600, 0, false, &[0]).unwrap();
    let map = |i: u16, s: u8, bits: u8| ecsim::od::mapping_value(i, s, bits).to_le_bytes();
    assert_eq!(
        b.download(2, 0x1600, 1, false, &map(0x6085, 0, 32)),
        Err(abort::CANNOT_MAP)
    );
    assert_eq!(
        b.download(2, 0x1600, 1, false, &map(0x6064, 0, 32)),
        Err(abort::CANNOT_MAP)
    );
    assert_eq!(
        b.download(2, 0x1600, 1, false, &map(0x607a, 0, 16)),
        Err(abort::CANNOT_MAP)
    );
    assert_eq!(
        b.download(2, 0x1600, 1, false, &map(0x7777, 0, 16)),
        Err(abort::CANNOT_MAP)
    );
    assert_eq!(
        b.download(2, 0x1600, 0, false, &[9]),
        Err(abort::PDO_LENGTH)
    );
    // 8 x 64-bit padding = 64 bytes fits the buffer; 0x1601 assigned as well exceeds it.
    for k in 1..=8 {
        b.download(2, 0x1601, k, false, &map(0, 0, 64)).unwrap();
    }
    b.download(2, 0x1601, 0, false, &[8]).unwrap();
    b.download(2, 0x1600, 1, false, &map(0x6040, 0, 16))
        .unwrap();
    b.download(2, 0x1600, 0, false, &[1]).unwrap();
    b.download(2, 0x1c12, 0, false, &[0]).unwrap();
    b.download(2, 0x1c12, 2, false, &0x1601u16.to_le_bytes())
        .unwrap();
    assert_eq!(
        b.download(2, 0x1c12, 0, false, &[2]),
        Err(abort::PDO_LENGTH)
    );
    assert_eq!(
        b.download(2, 0x1c12, 0, false, &[3]),
        Err(abort::VALUE_RANGE),
        "max 2 PDOs"
    );
    assert_eq!(
        b.download(2, 0x1c12, 1, false, &0x1a00u16.to_le_bytes()),
        Err(abort::VALUE_RANGE),
        "a TxPDO in the RxPDO assignment"
    );
    // An unknown command specifier.
    let r = b.coe(2, &[0, 0x20, 0xe0, 0, 0x10, 0, 0, 0, 0, 0]);
    assert_eq!(
        u32::from_le_bytes(r[6..10].try_into().unwrap()),
        abort::COMMAND_UNKNOWN
    );
    // A segmented download that delivers fewer bytes than announced.
    let i = 0x2000u16.to_le_bytes();
    let mut req = vec![0, 0x20, 0x21, i[0], i[1], 0];
    req.extend_from_slice(&200u32.to_le_bytes());
    req.extend_from_slice(&[b'x'; 112]);
    let r = tb.coe(0, &req);
    assert_eq!(r[2] >> 5, 3);
    let r = tb.coe(0, &[0, 0x20, 0x01, b'y', b'y', 0, 0, 0, 0, 0]);
    assert_eq!(
        u32::from_le_bytes(r[6..10].try_into().unwrap()),
        abort::LENGTH_MISMATCH
    );
    // Assignment and mapping outside PRE-OP: see coe_inproc (the device in OP).
    assert_eq!(
        abort::text(abort::STATE),
        "data cannot be transferred or stored because of the present device state"
    );
}

#[test]
fn complete_access_packs_the_whole_object() {
    let mut b = Bus::new(example());
    // 0x1C13 of the AI4: subindex 0 as 16 bits, then the u16 entries (4 of them).
    let ca = b.upload(1, 0x1c13, 0, true).unwrap();
    assert_eq!(ca, [2, 0, 0x00, 0x1a, 0x01, 0x1a, 0, 0, 0, 0]);
    // From subindex 1: the entries only.
    let ca = b.upload(1, 0x1018, 1, true).unwrap();
    let mut want = Vec::new();
    for v in [0x766u32, 0x0003_0002, 1, 2] {
        want.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(ca, want);
    // The DIO8 inputs record: 8 BOOLs packed into one byte after the 16-bit count.
    assert_eq!(b.upload(0, 0x6000, 0, true).unwrap().len(), 3);
    // A complete download of the assignment: all four channels.
    let mut v = vec![4, 0];
    for p in [0x1a00u16, 0x1a01, 0x1a02, 0x1a03] {
        v.extend_from_slice(&p.to_le_bytes());
    }
    b.download(1, 0x1c13, 0, true, &v).unwrap();
    assert_eq!(b.upload(1, 0x1c13, 0, false), Ok(vec![4]));
    assert_eq!(b.upload(1, 0x1c13, 4, false), Ok(vec![0x03, 0x1a]));
    // One that is refused changes nothing.
    let mut bad = vec![2, 0];
    for p in [0x1a00u16, 0x1600, 0, 0] {
        bad.extend_from_slice(&p.to_le_bytes());
    }
    assert_eq!(
        b.download(1, 0x1c13, 0, true, &bad),
        Err(abort::VALUE_RANGE)
    );
    assert_eq!(b.upload(1, 0x1c13, 0, true).unwrap(), v);
    assert_eq!(b.upload(1, 0x1c13, 2, true), Err(abort::NO_SUBINDEX));
}

#[test]
fn sdo_information_lists_and_describes_objects() {
    let mut b = Bus::new(example());
    // Object quantities (list type 0): all, rx, tx, backup, startup.
    let r = b.info(2, 1, &[0, 0]);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0][2], 0x02);
    let q: Vec<u16> = r[0][8..18]
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let all = b.info(2, 1, &[1, 0]);
    let indices: Vec<u16> = all[0][8..]
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(q[0] as usize, indices.len());
    for i in [
        0x1000, 0x1008, 0x1018, 0x1c12, 0x1c13, 0x1600, 0x1a01, 0x1c32, 0x6040, 0x6502,
    ] {
        assert!(indices.contains(&i), "{i:#06x} in {indices:04x?}");
    }
    let rx = b.info(2, 1, &[2, 0]);
    let rx: Vec<u16> = rx[0][8..]
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(rx, [0x6040, 0x6060, 0x6071, 0x607a, 0x60ff]);
    assert_eq!(q[1] as usize, rx.len());
    // Object description: index, data type, max subindex, object code, name.
    let d = &b.info(2, 3, &0x6060u16.to_le_bytes())[0];
    assert_eq!(d[2], 0x04);
    assert_eq!(&d[6..12], &[0x60, 0x60, 0x02, 0x00, 0x00, 7]);
    assert_eq!(&d[12..], b"Modes of operation");
    let d = &b.info(2, 3, &0x1018u16.to_le_bytes())[0];
    assert_eq!((d[10], d[11]), (4, 9), "a RECORD of 4 entries");
    assert_eq!(u16::from_le_bytes([d[8], d[9]]), 0x0023, "IDENTITY");
    let d = &b.info(2, 3, &0x1c12u16.to_le_bytes())[0];
    assert_eq!(
        u16::from_le_bytes([d[8], d[9]]),
        0x0006,
        "an ARRAY of UNSIGNED16"
    );
    assert_eq!((d[10], d[11]), (2, 8));
    assert_eq!(&d[12..], b"RxPDO assign");
    // Entry description with default, min and max.
    let mut body = 0x8000u16.to_le_bytes().to_vec();
    body.extend_from_slice(&[0x15, 0x10 | 0x20 | 0x40]);
    let d = &b.info(1, 5, &body)[0];
    assert_eq!(d[2], 0x06);
    assert_eq!(&d[6..10], &[0x00, 0x80, 0x15, 0x70]);
    assert_eq!(u16::from_le_bytes([d[10], d[11]]), 0x0006, "UNSIGNED16");
    assert_eq!(u16::from_le_bytes([d[12], d[13]]), 16, "bits");
    assert_eq!(
        u16::from_le_bytes([d[14], d[15]]),
        0x003f,
        "read/write in every state"
    );
    assert_eq!(&d[16..22], &[0, 0, 0, 0, 7, 0], "default 0, min 0, max 7");
    assert_eq!(&d[22..], b"Filter settings");
    // A TxPDO-mappable read-only entry.
    let d = &b.info(2, 5, &[0x41, 0x60, 0, 0])[0];
    assert_eq!(u16::from_le_bytes([d[14], d[15]]), 0x0007 | 0x0080);
    // The PDO assignment: writable in PRE-OP only.
    let d = &b.info(2, 5, &[0x12, 0x1c, 1, 0])[0];
    assert_eq!(u16::from_le_bytes([d[14], d[15]]), 0x000f);
    // Errors: unknown object, unknown subindex.
    let e = &b.info(2, 3, &0x5555u16.to_le_bytes())[0];
    assert_eq!(e[2], 0x07);
    assert_eq!(
        u32::from_le_bytes(e[6..10].try_into().unwrap()),
        abort::NO_OBJECT
    );
    let e = &b.info(2, 5, &[0x18, 0x10, 9, 0])[0];
    assert_eq!(
        u32::from_le_bytes(e[6..10].try_into().unwrap()),
        abort::NO_SUBINDEX
    );
}

#[test]
fn a_long_object_list_is_fragmented() {
    let mut b = Bus::new(test_device());
    let r = b.info(0, 1, &[1, 0]);
    assert!(r.len() >= 2, "{} fragments", r.len());
    let n = r.len();
    let mut indices = Vec::new();
    for (k, f) in r.iter().enumerate() {
        assert_eq!(f[2] & 0x7f, 2);
        assert_eq!(
            f[2] & 0x80 != 0,
            k + 1 < n,
            "incomplete on all but the last"
        );
        assert_eq!(
            u16::from_le_bytes([f[4], f[5]]) as usize,
            n - 1 - k,
            "fragments left"
        );
        // The list type only in the first fragment.
        let data = if k == 0 { &f[8..] } else { &f[6..] };
        indices.extend(data.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])));
    }
    assert_eq!(indices.len(), 10 + 2 + 2 + 80, "{indices:04x?}");
    assert!(indices.windows(2).all(|w| w[0] < w[1]));
    let backup = b.info(0, 1, &[4, 0]);
    let backup: usize = backup.iter().map(|f| f.len()).sum::<usize>();
    assert_eq!(backup, 8 + 2 * 40, "40 backup objects in one fragment");
}

#[test]
fn an_emergency_is_delivered_when_the_mailbox_is_idle() {
    let mut b = Bus::new(example());
    let cmd = FaultCommand::parse_for("emergency 2 0x8611 0x81", 3).unwrap();
    assert_eq!(
        cmd,
        FaultCommand::Emergency {
            position: 2,
            code: 0x8611,
            register: 0x81
        }
    );
    assert!(FaultCommand::parse_for("emergency 3 0x8611", 3).is_err());
    assert!(FaultCommand::parse_for("emergency 0 0x18611", 3).is_err());
    assert!(FaultCommand::parse_for("emergency 0 1 256", 3).is_err());
    assert!(FaultCommand::parse_for("emergency 0 1 2 3", 3).is_err());
    assert_eq!(
        FaultCommand::parse_for("emergency 0 0x1000", 3).unwrap(),
        FaultCommand::Emergency {
            position: 0,
            code: 0x1000,
            register: 0
        }
    );
    b.faults.apply(cmd);
    // Applied at the next frame; SM1 then holds it.
    let r = b.receive(2).expect("the emergency");
    let (service, coe) = coe_of(&r);
    assert_eq!(service, 1);
    assert_eq!(&coe[2..10], &[0x11, 0x86, 0x81, 0, 0, 0, 0, 0]);
    // While a response is unread the emergency waits behind it.
    let up = [10u8, 0, 0, 0, 0, 0x13, 0, 0x20, 0x40, 0x00, 0x10, 0];
    assert_eq!(b.send_raw(2, &up), 1);
    b.faults.apply(FaultCommand::Emergency {
        position: 2,
        code: 0x5000,
        register: 1,
    });
    let r = b.receive(2).unwrap();
    assert_eq!(coe_of(&r).0, 3, "the SDO response first");
    let r = b.receive(2).unwrap();
    assert_eq!(coe_of(&r).0, 1, "then the emergency");
}

#[test]
fn a_power_cycle_restores_the_defaults() {
    let mut b = Bus::new(example());
    b.download(2, 0x6085, 0, false, &50_000u32.to_le_bytes())
        .unwrap();
    b.download(2, 0x1600, 0, false, &[0]).unwrap();
    b.download(
        2,
        0x1600,
        2,
        false,
        &ecsim::od::mapping_value(0x607a, 0, 32).to_le_bytes(),
    )
    .unwrap();
    b.download(2, 0x1600, 0, false, &[2]).unwrap();
    b.download(1, 0x8000, 0x06, false, &[1]).unwrap();
    b.faults.apply(FaultCommand::PowerCycle);
    // The next frame applies it: the station address is gone.
    let _ = b.dg(Cmd::Brd, phys(0, 0x0130), &[0, 0]);
    b.init(1);
    b.init(2);
    assert_eq!(
        b.upload(2, 0x6085, 0, false),
        Ok(10_000u32.to_le_bytes().to_vec())
    );
    assert_eq!(b.upload(2, 0x1600, 0, false), Ok(vec![1]));
    assert_eq!(b.upload(2, 0x1600, 2, false), Ok(vec![0; 4]));
    assert_eq!(b.upload(1, 0x8000, 0x06, false), Ok(vec![0]));
}

#[test]
fn the_mailbox_config_is_checked_on_the_way_to_pre_op() {
    let mut b = Bus::new(example());
    b.state(0, 1);
    assert_eq!(b.wr(0, 0x0802, &64u16.to_le_bytes()), 1);
    assert_eq!(b.wr(0, 0x0120, &[2, 0]), 1);
    let s = b.rd(0, 0x0130, 6).0;
    assert_eq!(s[0], 0x11, "INIT with the error flag");
    assert_eq!(
        u16::from_le_bytes([s[4], s[5]]),
        0x0016,
        "invalid mailbox configuration"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// Random bytes written into SM0 never panic and never stall the mailbox: SM0 is free
    /// again, at most the fragments of one answer wait in SM1, and a good request afterwards
    /// is answered.
    #[test]
    fn random_mailboxes_never_stall(
        requests in prop::collection::vec(
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..=MBX),
                // A plausible header with random contents: the parsers behind it.
                (0u16..140, 0u8..16, prop::collection::vec(any::<u8>(), 0..120)).prop_map(
                    |(len, kind, body)| {
                        let mut m = len.to_le_bytes().to_vec();
                        m.extend_from_slice(&[0, 0, 0, kind | 0x10]);
                        m.extend_from_slice(&body);
                        m
                    }
                ),
                (0u8..0xff, prop::collection::vec(any::<u8>(), 0..12)).prop_map(|(cmd, rest)| {
                    let mut m = vec![(4 + rest.len()) as u8, 0, 0, 0, 0, 0x13, 0, 0x20, cmd];
                    m.extend_from_slice(&rest);
                    m
                }),
                prop::collection::vec(any::<u8>(), 0..8).prop_map(|rest| {
                    let mut m = vec![(6 + rest.len()) as u8, 0, 0, 0, 0, 0x13, 0, 0x80];
                    m.extend_from_slice(&rest);
                    m
                }),
            ],
            1..6,
        ),
        pos in 0usize..3,
    ) {
        let mut b = Bus::new(example());
        for r in &requests {
            prop_assert_eq!(b.send_raw(pos, r), 1);
            let mut n = 0;
            while b.receive(pos).is_some() {
                n += 1;
                prop_assert!(n <= 64, "a bounded answer");
            }
            prop_assert_eq!(b.sm_status(pos, 0) & 0x08, 0, "SM0 free again");
        }
        // Cancel whatever transfer the bytes started, then a good request is answered.
        b.send(pos, 3, &[0, 0x20, 0x80, 0, 0, 0, 0, 0, 0, 0]);
        while b.receive(pos).is_some() {}
        prop_assert_eq!(b.upload(pos, 0x1018, 1, false), Ok(0x766u32.to_le_bytes().to_vec()));
    }
}

impl Bus {
    /// Configure SM2/SM3 of `pos` with these lengths (enabled when > 0) and request SAFE-OP:
    /// the AL status and status code the device answers.
    fn safe_op_with(&mut self, pos: usize, out_len: u16, in_len: u16) -> (u8, u16) {
        let mut sms = [0u8; 16];
        for (k, (start, len, control)) in [(0x1100u16, out_len, 0x64u8), (0x1900, in_len, 0x20)]
            .into_iter()
            .enumerate()
        {
            sms[8 * k..8 * k + 2].copy_from_slice(&start.to_le_bytes());
            sms[8 * k + 2..8 * k + 4].copy_from_slice(&len.to_le_bytes());
            sms[8 * k + 4] = control;
            sms[8 * k + 6] = u8::from(len > 0);
        }
        assert_eq!(self.wr(pos, 0x0810, &sms), 1);
        assert_eq!(self.wr(pos, 0x0120, &[4, 0]), 1);
        let s = self.rd(pos, 0x0130, 6).0;
        (s[0], u16::from_le_bytes([s[4], s[5]]))
    }
}

#[test]
fn safe_op_checks_the_sms_against_the_mapping_and_locks_it() {
    let mut b = Bus::new(example());
    let map = |i: u16, s: u8, bits: u8| ecsim::od::mapping_value(i, s, bits).to_le_bytes();
    // The servo's inputs become statusword + position actual value: 6 bytes.
    b.download(2, 0x1a00, 0, false, &[0]).unwrap();
    b.download(2, 0x1a00, 2, false, &map(0x6064, 0, 32))
        .unwrap();
    b.download(2, 0x1a00, 0, false, &[2]).unwrap();
    // SM3 still sized for the default: invalid input configuration.
    assert_eq!(b.safe_op_with(2, 2, 2), (0x12, 0x001e));
    assert_eq!(b.wr(2, 0x0120, &[0x12, 0]), 1, "acknowledge");
    assert_eq!(
        b.safe_op_with(2, 3, 6),
        (0x12, 0x001d),
        "and SM2 must match too"
    );
    assert_eq!(b.wr(2, 0x0120, &[0x12, 0]), 1);
    assert_eq!(b.safe_op_with(2, 2, 6), (0x04, 0));
    // In SAFE-OP the assignment and mapping are locked; other objects stay writable.
    assert_eq!(b.download(2, 0x1a00, 0, false, &[0]), Err(abort::STATE));
    assert_eq!(b.download(2, 0x1c13, 0, false, &[0]), Err(abort::STATE));
    b.download(2, 0x6085, 0, false, &1234u32.to_le_bytes())
        .unwrap();
    // The mapped position actual value reads from the input image (the pdi rule: bytes 2..6
    // are the counter's high half and the first echoed output).
    let img = b.rd(2, 0x1900, 6).0;
    assert_eq!(b.upload(2, 0x6064, 0, false), Ok(img[2..6].to_vec()));
    // The AI4 has no outputs: SM2 may stay disabled.
    assert_eq!(b.safe_op_with(1, 0, 8), (0x04, 0));
}

/// A CoE device with files (FoE): a text file, a writable parameter file behind a password and
/// a firmware image the device serves only in BOOT.
fn file_device() -> SegmentSpec {
    SegmentSpec::from_toml(
        "[[device]]\nname = \"FW\"\ncoe = true\ninputs = 2\n\
         [[device.file]]\nname = \"info.txt\"\ntext = \"rtcat simulated drive v1\"\n\
         [[device.file]]\nname = \"params.bin\"\nwritable = true\nmax_bytes = 1000\n\
         password = 0x1234\n\
         [[device.file]]\nname = \"firmware.bin\"\nsize = 1000\nwritable = true\nboot = true\n\
         [[device.file]]\nname = \"slow.bin\"\nwritable = true\nbusy = 2\n",
    )
    .expect("file device")
}

/// The FoE part of one response: (opcode, the 32-bit field, the rest).
fn foe_of(resp: &[u8]) -> (u8, u32, Vec<u8>) {
    assert_eq!(resp[5] & 0x0f, 4, "an FoE mailbox: {resp:02x?}");
    let len = usize::from(u16::from_le_bytes([resp[0], resp[1]]));
    let d = &resp[6..6 + len];
    (
        d[0],
        u32::from_le_bytes(d[2..6].try_into().unwrap()),
        d[6..].to_vec(),
    )
}

impl Bus {
    fn foe(&mut self, pos: usize, op: u8, value: u32, body: &[u8]) -> Option<(u8, u32, Vec<u8>)> {
        let mut d = vec![op, 0];
        d.extend_from_slice(&value.to_le_bytes());
        d.extend_from_slice(body);
        assert_eq!(self.send(pos, 4, &d), 1, "SM0 accepts the FoE request");
        self.receive(pos).map(|r| foe_of(&r))
    }

    /// Read a file: the content, or the FoE error code.
    fn foe_read(&mut self, pos: usize, name: &str, password: u32) -> Result<Vec<u8>, u32> {
        let mut data = Vec::new();
        let mut r = self
            .foe(pos, 1, password, name.as_bytes())
            .expect("an answer");
        loop {
            match r {
                (3, n, chunk) => {
                    data.extend_from_slice(&chunk);
                    let last = chunk.len() < MBX - 12;
                    let next = self.foe(pos, 4, n, &[]);
                    if last {
                        assert!(next.is_none(), "nothing after the last ACK: {next:?}");
                        return Ok(data);
                    }
                    r = next.expect("the next packet");
                }
                (5, code, _) => return Err(code),
                other => panic!("unexpected FoE answer {other:?}"),
            }
        }
    }

    /// Write a file in packets of the most a mailbox carries.
    fn foe_write(&mut self, pos: usize, name: &str, password: u32, data: &[u8]) -> Result<(), u32> {
        match self
            .foe(pos, 2, password, name.as_bytes())
            .expect("an answer")
        {
            (4, 0, _) => {}
            (5, code, _) => return Err(code),
            other => panic!("unexpected FoE answer {other:?}"),
        }
        let chunk = MBX - 12;
        let mut packets: Vec<&[u8]> = data.chunks(chunk).collect();
        if data.len().is_multiple_of(chunk) {
            packets.push(&[]);
        }
        for (k, p) in packets.iter().enumerate() {
            let n = k as u32 + 1;
            match self.foe(pos, 3, n, p).expect("an answer") {
                (4, a, _) if a == n => {}
                (5, code, _) => return Err(code),
                other => panic!("unexpected FoE answer {other:?}"),
            }
        }
        Ok(())
    }
}

#[test]
fn foe_reads_and_writes_files_in_packets() {
    let mut b = Bus::new(file_device());
    assert_eq!(
        b.foe_read(0, "info.txt", 0).unwrap(),
        b"rtcat simulated drive v1"
    );
    // A write replaces the content; a read gives it back, across packet boundaries (116 bytes
    // of data per packet in a 128-byte mailbox) and for a whole number of packets.
    for len in [0usize, 115, 116, 117, 232, 1000] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
        b.foe_write(0, "params.bin", 0x1234, &data).unwrap();
        assert_eq!(
            b.foe_read(0, "params.bin", 0x1234).unwrap(),
            data,
            "{len} bytes"
        );
    }
    // The files are the device's flash: a power cycle keeps what was written.
    b.faults.apply(FaultCommand::PowerCycle);
    b.init(0);
    assert_eq!(b.foe_read(0, "params.bin", 0x1234).unwrap().len(), 1000);
}

#[test]
fn foe_errors_name_what_went_wrong() {
    use ecsim::foe::code;
    let mut b = Bus::new(file_device());
    assert_eq!(b.foe_read(0, "nothing.bin", 0), Err(code::NOT_FOUND));
    assert_eq!(b.foe_read(0, "params.bin", 0), Err(code::NO_RIGHTS));
    assert_eq!(
        b.foe_write(0, "info.txt", 0, b"x"),
        Err(code::ACCESS_DENIED)
    );
    assert_eq!(
        b.foe_write(0, "params.bin", 0x1234, &[0; 1001]),
        Err(code::DISK_FULL)
    );
    // The firmware only in BOOT.
    assert_eq!(b.foe_read(0, "firmware.bin", 0), Err(code::BOOTSTRAP_ONLY));
    // Out of turn: an ACK with no read, a DATA with the wrong number.
    assert_eq!(b.foe(0, 4, 1, &[]).unwrap().0, 5);
    assert_eq!(b.foe(0, 2, 0x1234, b"params.bin").unwrap(), (4, 0, vec![]));
    let (op, c, _) = b.foe(0, 3, 2, &[1, 2, 3]).unwrap();
    assert_eq!((op, c), (5, code::PACKET_NUMBER));
    // A device without files answers FoE with a mailbox error (unsupported protocol).
    let mut e = Bus::new(example());
    assert_eq!(e.send(0, 4, &[1, 0, 0, 0, 0, 0, b'x']), 1);
    let r = e.receive(0).unwrap();
    assert_eq!((r[5] & 0x0f, u16::from_le_bytes([r[8], r[9]])), (0, 0x0002));
}

#[test]
fn in_boot_the_device_serves_its_firmware_over_foe_and_nothing_else() {
    let mut b = Bus::new(file_device());
    b.state(0, 1);
    b.state(0, 3);
    let fw = b.foe_read(0, "firmware.bin", 0).unwrap();
    assert_eq!(fw.len(), 1000);
    let new: Vec<u8> = (0..700u32).map(|i| (i % 13) as u8).collect();
    b.foe_write(0, "firmware.bin", 0, &new).unwrap();
    assert_eq!(b.foe_read(0, "firmware.bin", 0).unwrap(), new);
    // CoE is not served in BOOT: a mailbox error (unsupported protocol).
    let i = 0x1008u16.to_le_bytes();
    assert_eq!(b.send(0, 3, &[0, 0x20, 0x40, i[0], i[1], 0]), 1);
    let r = b.receive(0).unwrap();
    assert_eq!((r[5] & 0x0f, u16::from_le_bytes([r[8], r[9]])), (0, 0x0002));
    // Back through INIT to PRE-OP: CoE again, the new firmware kept.
    b.state(0, 1);
    b.state(0, 2);
    assert_eq!(b.upload(0, 0x1008, 0, false).unwrap(), b"FW");
    assert_eq!(b.seg.devices()[0].mem()[0x0130] & 0x0f, 2);
}

// ---- EoE -------------------------------------------------------------------------------------

fn eoe_device(tap: &str) -> SegmentSpec {
    SegmentSpec::from_toml(&format!(
        "[[device]]\nname = \"Drive\"\ncoe = true\ninputs = 2\n\
         [device.eoe]\ntap = \"{tap}\"\nmac = \"02:00:00:00:ec:01\"\n"
    ))
    .expect("EoE device")
}

/// RFC 1071 checksum.
fn inet_checksum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// An Ethernet frame with an IPv4 UDP datagram (UDP checksum 0: none).
fn udp_frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = dst_mac.to_vec();
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let c = inet_checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

impl Bus {
    /// An EoE request; the response, if the device sent one.
    fn eoe(&mut self, pos: usize, data: &[u8]) -> Option<Vec<u8>> {
        assert_eq!(self.send(pos, 2, data), 1, "SM0 accepts the EoE request");
        self.receive(pos).map(|r| {
            assert_eq!(r[5] & 0x0f, 2, "an EoE mailbox: {r:02x?}");
            let len = usize::from(u16::from_le_bytes([r[0], r[1]]));
            r[6..6 + len].to_vec()
        })
    }

    /// Send an Ethernet frame to the device in fragments of whole 32-byte blocks.
    fn eoe_send(&mut self, pos: usize, frame_no: u8, frame: &[u8]) {
        let max = (MBX - 6 - 4) / 32 * 32;
        let mut at = 0;
        let mut k = 0u16;
        loop {
            let n = (frame.len() - at).min(max);
            let last = at + n == frame.len();
            let field = if k == 0 {
                frame.len().div_ceil(32)
            } else {
                at / 32
            } as u16;
            let w1: u16 = if last { 1 << 8 } else { 0 };
            let w2: u16 = k | (field << 6) | (u16::from(frame_no) << 12);
            let mut d = w1.to_le_bytes().to_vec();
            d.extend_from_slice(&w2.to_le_bytes());
            d.extend_from_slice(&frame[at..at + n]);
            assert_eq!(self.eoe(pos, &d), None, "fragments are not answered");
            at += n;
            k += 1;
            if last {
                return;
            }
        }
    }

    /// The frames the device sent (reassembled from its fragments) within `tries` reads of SM1.
    fn eoe_frames(&mut self, pos: usize, tries: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut cur: Vec<u8> = Vec::new();
        for _ in 0..tries {
            let Some(r) = self.receive(pos) else {
                std::thread::sleep(std::time::Duration::from_millis(2));
                continue;
            };
            assert_eq!(r[5] & 0x0f, 2, "an EoE mailbox: {r:02x?}");
            let len = usize::from(u16::from_le_bytes([r[0], r[1]]));
            let d = &r[6..6 + len];
            let (w1, w2) = (
                u16::from_le_bytes([d[0], d[1]]),
                u16::from_le_bytes([d[2], d[3]]),
            );
            assert_eq!(w1 & 0x0f, 0, "a fragment");
            if w2 & 0x3f == 0 {
                cur.clear();
            } else {
                assert_eq!(usize::from((w2 >> 6) & 0x3f) * 32, cur.len(), "offset");
            }
            cur.extend_from_slice(&d[4..]);
            if w1 & (1 << 8) != 0 {
                out.push(std::mem::take(&mut cur));
            }
        }
        out
    }
}

/// A real network behind a simulated device: the master sets the device's IP over EoE, a UDP
/// datagram fragmented through the mailbox reaches a socket bound to that address, and the
/// kernel's ARP request for the sender comes back through the mailbox. Needs root (a TAP).
#[test]
fn eoe_tunnels_ethernet_between_the_master_and_the_devices_network() {
    use ecsim::eoe::{IpParams, encode_params, frame_type, result};
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: a TAP needs root");
        return;
    }
    let tap = format!("ecsimeoe{}", std::process::id() % 100_000);
    let mut b = Bus::new(eoe_device(&tap));
    assert_eq!(b.seg.attach_eoe().unwrap(), vec![tap.clone()]);
    let dev_mac = [2, 0, 0, 0, 0xec, 1];
    let master_mac = [2, 0, 0, 0, 0xec, 0xfe];
    // A subnet of its own per run (the address must not clash with another test's).
    let x = (std::process::id() % 200) as u8 + 20;
    let (dev_ip, master_ip) = ([10, 203, x, 2], [10, 203, x, 1]);

    // Set IP: the device's address becomes the TAP's.
    let mut req = vec![frame_type::SET_IP_REQ, 0x01, 0, 0];
    req.extend(encode_params(&IpParams {
        ip: Some(dev_ip),
        subnet: Some([255, 255, 255, 0]),
        ..IpParams::default()
    }));
    let r = b.eoe(0, &req).expect("a set IP response");
    assert_eq!(r[0] & 0x0f, frame_type::SET_IP_RESP);
    assert_eq!(u16::from_le_bytes([r[2], r[3]]), result::SUCCESS);
    let sock = std::net::UdpSocket::bind((std::net::Ipv4Addr::from(dev_ip), 0))
        .expect("the device's address is an address of this namespace now");
    sock.set_read_timeout(Some(std::time::Duration::from_secs(3)))
        .unwrap();
    let port = sock.local_addr().unwrap().port();

    // Master -> network: 1000 bytes of payload in 11 fragments.
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 13 % 256) as u8).collect();
    let f = udp_frame(dev_mac, master_mac, master_ip, dev_ip, port, &payload);
    b.eoe_send(0, 1, &f);
    let mut buf = [0u8; 2000];
    let (n, from) = sock.recv_from(&mut buf).expect("the datagram arrives");
    assert_eq!(&buf[..n], &payload[..]);
    assert_eq!(from.ip(), std::net::Ipv4Addr::from(master_ip));
    assert_eq!(b.seg.devices()[0].eoe().unwrap().stats().to_network, 1);

    // Network -> master: the kernel answers the sender; first it asks for its MAC (ARP).
    sock.send_to(b"pong", from).unwrap();
    let frames = b.eoe_frames(0, 200);
    let arp = frames
        .iter()
        .find(|f| f.len() >= 42 && f[12..14] == [0x08, 0x06])
        .unwrap_or_else(|| panic!("an ARP request through the mailbox: {frames:02x?}"));
    assert_eq!(&arp[6..12], &dev_mac, "from the device's MAC");
    assert_eq!(&arp[28..32], &dev_ip, "sender: the device's address");
    assert_eq!(&arp[38..42], &master_ip, "asking for the master's");

    // A fragment out of turn is dropped, and the device takes the next frame cleanly.
    let before = b.seg.devices()[0].eoe().unwrap().stats();
    let mut bad = vec![0, 0x01, 0x05, 0x10];
    bad.extend_from_slice(&[0; 40]);
    assert_eq!(b.eoe(0, &bad), None);
    assert_eq!(
        b.seg.devices()[0].eoe().unwrap().stats().dropped,
        before.dropped + 1
    );
    b.eoe_send(0, 2, &f);
    let (n, _) = sock.recv_from(&mut buf).expect("the next datagram arrives");
    assert_eq!(n, payload.len());

    // The name is taken while the segment lives: a second one is refused, naming the device.
    let mut other = Bus::new(eoe_device(&tap));
    let e = other.seg.attach_eoe().unwrap_err().to_string();
    assert!(
        e.contains("device 0 (Drive)") && e.contains("exists already"),
        "{e}"
    );
}

#[test]
fn eoe_is_refused_by_devices_without_it_and_a_bad_eoe_section_names_its_key() {
    let mut b = Bus::new(test_device());
    // A device without [device.eoe]: a mailbox error "unsupported protocol".
    assert_eq!(b.send(0, 2, &[2, 1, 0, 0, 0, 0, 0, 0]), 1);
    let r = b.receive(0).expect("an error reply");
    assert_eq!(r[5] & 0x0f, 0);
    assert_eq!(u16::from_le_bytes([r[8], r[9]]), 0x0002);
    // The specification refuses EoE without a mailbox and a bad MAC, naming the key.
    for (t, why) in [
        (
            "[[device]]\nname = \"X\"\ninputs = 1\n[device.eoe]\n",
            "device[0].eoe.tap: EoE needs a mailbox",
        ),
        (
            "[[device]]\nname = \"X\"\ncoe = true\ninputs = 1\n[device.eoe]\nmac = \"01:00:00:00:00:01\"\n",
            "device[0].eoe.mac: \"01:00:00:00:00:01\" is not a unicast MAC",
        ),
        (
            "[[device]]\nname = \"X\"\ncoe = true\ninputs = 1\n[device.eoe]\ntap = \"a/b\"\n",
            "device[0].eoe.tap: \"a/b\"",
        ),
    ] {
        let e = SegmentSpec::from_toml(t).unwrap_err().to_string();
        assert!(e.contains(why), "{t}: {e}");
    }
}

/// `busy = 2`: the write request and every second DATA packet are answered BUSY (done, entire,
/// a text) once; the same request again gets its ACK.
#[test]
fn a_busy_file_answers_busy_once_then_serves_the_repeat() {
    let mut b = Bus::new(file_device());
    let r = b.foe(0, 2, 0, b"slow.bin").expect("an answer");
    assert_eq!(r.0, 6, "BUSY to the write request: {r:?}");
    assert_eq!(r.2, b"programming flash", "the device's text");
    assert_eq!(
        b.foe(0, 2, 0, b"slow.bin").expect("an answer").0,
        4,
        "ACK 0 on the repeat"
    );
    let chunk = vec![7u8; MBX - 12];
    assert_eq!(b.foe(0, 3, 1, &chunk).unwrap(), (4, 1, vec![]));
    assert_eq!(
        b.foe(0, 3, 2, &chunk).unwrap().0,
        6,
        "packet 2 finds the device busy"
    );
    assert_eq!(b.foe(0, 3, 2, &chunk).unwrap(), (4, 2, vec![]));
    assert_eq!(b.foe(0, 3, 3, &[1, 2, 3]).unwrap(), (4, 3, vec![]));
    let mut want = chunk.clone();
    want.extend_from_slice(&chunk);
    want.extend_from_slice(&[1, 2, 3]);
    assert_eq!(b.foe_read(0, "slow.bin", 0).unwrap(), want);
}
