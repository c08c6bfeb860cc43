//! The client against a scripted device: an ESC's mailbox SMs at register level (status bit 3,
//! a mailbox taken when written whole, freed when read) with a small SDO server behind them.

use super::*;
use std::collections::{BTreeMap, VecDeque};

const MBX: u16 = 128;
const RX: u16 = 0x1000;
const TX: u16 = 0x1080;

#[derive(Default)]
struct Server {
    od: BTreeMap<(u16, u8), Vec<u8>>,
    read_only: Vec<u16>,
    /// Upload in progress: the bytes still to send.
    up: Option<Vec<u8>>,
    /// Download in progress: target and bytes so far, complete size.
    down: Option<((u16, u8), Vec<u8>, usize)>,
    toggle: bool,
    /// Send an emergency before the next response.
    emergency_next: bool,
    /// Answer segments with the wrong toggle.
    bad_toggle: bool,
    /// Answer expedited uploads for the next index.
    echo_other: bool,
    /// Stay silent.
    mute: bool,
    /// Upload segments without data and never the last.
    empty_segments: bool,
    /// Discard a request whose counter repeats the last one, as device stacks do.
    drop_repeats: bool,
    /// Send only the first fragment of an SDO information response.
    truncate_info: bool,
    last_counter: Option<u8>,
    /// Requests seen (decoded command bytes).
    log: Vec<u8>,
    counters: Vec<u8>,
}

fn mbx(service: u8, body: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8];
    b[0..2].copy_from_slice(&((body.len() + 2) as u16).to_le_bytes());
    b[5] = 0x03 | 0x10;
    b[7] = service << 4;
    b.extend_from_slice(body);
    b
}

fn sdo_resp(cmd: u8, index: u16, sub: u8, data: [u8; 4]) -> Vec<u8> {
    let i = index.to_le_bytes();
    let mut b = vec![cmd, i[0], i[1], sub];
    b.extend_from_slice(&data);
    mbx(3, &b)
}

fn abort(index: u16, sub: u8, code: u32) -> Vec<u8> {
    sdo_resp(0x80, index, sub, code.to_le_bytes())
}

impl Server {
    fn handle(&mut self, req: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if self.mute {
            return out;
        }
        let counter = frame::counter_of(req);
        if self.drop_repeats && self.last_counter == Some(counter) {
            return out;
        }
        self.last_counter = Some(counter);
        if std::mem::take(&mut self.emergency_next) {
            out.push(mbx(1, &[0x10, 0x82, 0x11, 1, 2, 3, 4, 5]));
        }
        self.counters.push(frame::counter_of(req));
        let len = usize::from(u16::from_le_bytes([req[0], req[1]]));
        let p = &req[6..6 + len];
        let svc = p[1] >> 4;
        if svc == 8 {
            let mut frags = self.info(p);
            if self.truncate_info {
                frags.truncate(1);
            }
            out.extend(frags);
            return out;
        }
        let cmd = p[2];
        self.log.push(cmd);
        let index = u16::from_le_bytes([p[3], p[4]]);
        let sub = p[5];
        let seg_max = usize::from(MBX) - 9;
        let r = match cmd >> 5 {
            2 => match self.od.get(&(index, sub)).cloned() {
                None => abort(index, sub, 0x0602_0000),
                Some(d) if d.len() <= 4 => {
                    let mut v = [0u8; 4];
                    v[..d.len()].copy_from_slice(&d);
                    sdo_resp(
                        0x43 | ((4 - d.len() as u8) << 2),
                        index + u16::from(self.echo_other),
                        sub,
                        v,
                    )
                }
                Some(d) => {
                    let first = d.len().min(usize::from(MBX) - 16);
                    let mut r = sdo_resp(0x41, index, sub, (d.len() as u32).to_le_bytes());
                    r.extend_from_slice(&d[..first]);
                    let l = (r.len() - 6) as u16;
                    r[0..2].copy_from_slice(&l.to_le_bytes());
                    if first < d.len() {
                        self.up = Some(d[first..].to_vec());
                        self.toggle = false;
                    }
                    r
                }
            },
            3 => {
                let t = cmd & 0x10 != 0;
                let rest = self.up.take().unwrap_or_default();
                let n = if self.empty_segments {
                    0
                } else {
                    rest.len().min(seg_max)
                };
                let last = n == rest.len();
                if !last {
                    self.up = Some(rest[n..].to_vec());
                }
                let unused = if n < 7 { 7 - n as u8 } else { 0 };
                let t = t ^ self.bad_toggle;
                let mut body = vec![u8::from(last) | (unused << 1) | (u8::from(t) << 4)];
                body.extend_from_slice(&rest[..n]);
                body.resize(body.len().max(8), 0);
                mbx(3, &body)
            }
            1 => {
                if self.read_only.contains(&index) {
                    abort(index, sub, 0x0601_0002)
                } else if cmd & 0x02 != 0 {
                    let n = 4 - usize::from((cmd >> 2) & 3);
                    self.od.insert((index, sub), p[6..6 + n].to_vec());
                    sdo_resp(0x60, index, sub, [0; 4])
                } else {
                    let complete = u32::from_le_bytes([p[6], p[7], p[8], p[9]]) as usize;
                    let data = p[10..].to_vec();
                    if data.len() >= complete {
                        self.od.insert((index, sub), data[..complete].to_vec());
                    } else {
                        self.down = Some(((index, sub), data, complete));
                    }
                    sdo_resp(0x60, index, sub, [0; 4])
                }
            }
            0 => {
                let (key, mut data, complete) = self.down.take().expect("download open");
                let mut n = p.len() - 3;
                if n == 7 {
                    n -= usize::from((cmd >> 1) & 7);
                }
                data.extend_from_slice(&p[3..3 + n]);
                if cmd & 1 != 0 {
                    assert_eq!(data.len(), complete);
                    self.od.insert(key, data);
                } else {
                    self.down = Some((key, data, complete));
                }
                let t = (cmd & 0x10) ^ if self.bad_toggle { 0x10 } else { 0 };
                mbx(3, &[0x20 | t, 0, 0, 0, 0, 0, 0, 0])
            }
            4 => return out,
            _ => abort(index, sub, 0x0504_0001),
        };
        out.push(r);
        out
    }

    fn info(&mut self, p: &[u8]) -> Vec<Vec<u8>> {
        let op = p[2];
        let frag = |op: u8, left: u16, incomplete: bool, data: &[u8]| {
            let l = left.to_le_bytes();
            let mut b = vec![op | if incomplete { 0x80 } else { 0 }, 0, l[0], l[1]];
            b.extend_from_slice(data);
            mbx(8, &b)
        };
        match op {
            1 => {
                let mut all: Vec<u8> = vec![1, 0];
                let mut idx: Vec<u16> = self.od.keys().map(|k| k.0).collect();
                idx.dedup();
                for i in idx {
                    all.extend_from_slice(&i.to_le_bytes());
                }
                // Small fragments, to exercise the reassembly.
                let chunks: Vec<&[u8]> = all.chunks(6).collect();
                let n = chunks.len();
                chunks
                    .iter()
                    .enumerate()
                    .map(|(i, c)| frag(2, (n - 1 - i) as u16, i + 1 < n, c))
                    .collect()
            }
            3 => {
                let index = u16::from_le_bytes([p[6], p[7]]);
                if !self.od.keys().any(|k| k.0 == index) {
                    return vec![mbx(8, &[7, 0, 0, 0, 0, 0, 2, 6])];
                }
                let i = index.to_le_bytes();
                let mut d = vec![i[0], i[1], 7, 0, 0, 7];
                d.extend_from_slice(b"Device name");
                vec![frag(4, 0, false, &d)]
            }
            5 => {
                let i = [p[6], p[7]];
                let mut d = vec![i[0], i[1], p[8], 0, 6, 0, 16, 0, 0x87, 0];
                d.extend_from_slice(b"Statusword");
                vec![frag(6, 0, false, &d)]
            }
            _ => vec![mbx(8, &[7, 0, 0, 0, 1, 0, 4, 5])],
        }
    }
}

/// The ESC side: SM0 takes a request when its last byte is written, SM1 holds responses.
struct FakeEsc {
    server: Server,
    rx: Vec<u8>,
    queue: VecDeque<Vec<u8>>,
    sm_enabled: bool,
    /// SM1 always full of emergencies.
    flood: bool,
}

impl FakeEsc {
    fn new(server: Server) -> Self {
        FakeEsc {
            server,
            rx: vec![0; usize::from(MBX)],
            queue: VecDeque::new(),
            sm_enabled: true,
            flood: false,
        }
    }
}

impl Port for FakeEsc {
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error> {
        match register {
            0x0800 => {
                let a = u8::from(self.sm_enabled);
                let mut r = Vec::new();
                for (start, ctrl) in [(RX, 0x26u8), (TX, 0x22)] {
                    r.extend_from_slice(&start.to_le_bytes());
                    r.extend_from_slice(&MBX.to_le_bytes());
                    r.extend_from_slice(&[ctrl, 0, a, 0]);
                }
                buf.copy_from_slice(&r[..buf.len()]);
            }
            0x0805 => buf[0] = 0,
            0x080d => {
                buf[0] = if self.queue.is_empty() && !self.flood {
                    0
                } else {
                    0x08
                }
            }
            TX if self.flood => {
                let m = mbx(1, &[0x10, 0x82, 0x11, 1, 2, 3, 4, 5]);
                buf.fill(0);
                buf[..m.len()].copy_from_slice(&m);
            }
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
        self.rx.copy_from_slice(data);
        let req = self.rx.clone();
        let r = self.server.handle(&req);
        self.queue.extend(r);
        Ok(())
    }
}

fn client(server: Server) -> Client<FakeEsc> {
    let mut esc = FakeEsc::new(server);
    let g = Geometry::read(&mut esc, 2).unwrap();
    let t = Timeouts {
        response: Duration::from_millis(20),
        ..Timeouts::default()
    };
    Client::new(esc, 2, g, t)
}

fn server() -> Server {
    let mut s = Server::default();
    s.od.insert((0x1008, 0), b"SERVO-COE".to_vec());
    s.od.insert((0x1018, 2), 0x0003_0003u32.to_le_bytes().to_vec());
    s.od.insert((0x6060, 0), vec![0]);
    s.od.insert((0x2000, 0), (0..=255u8).cycle().take(1000).collect());
    s.read_only.push(0x1018);
    s
}

#[test]
fn geometry_from_registers_and_sii() {
    let c = client(server());
    assert_eq!(
        c.geometry(),
        Geometry {
            rx_sm: 0,
            rx_offset: RX,
            rx_size: MBX,
            tx_sm: 1,
            tx_offset: TX,
            tx_size: MBX
        }
    );
    let mut esc = FakeEsc::new(server());
    esc.sm_enabled = false;
    let e = Error::from(Geometry::read(&mut esc, 4).unwrap_err()).to_string();
    assert!(
        e.starts_with("position 4: no CoE mailbox: SM0/SM1 are not enabled"),
        "{e}"
    );
    let small = crate::sii::Mailbox {
        rx_offset: RX,
        rx_size: 8,
        tx_offset: TX,
        tx_size: 128,
    };
    assert!(Geometry::from_sii(0, &small).is_err());
}

#[test]
fn expedited_and_normal_uploads() {
    let mut c = client(server());
    assert_eq!(c.upload(0x1018, 2).unwrap(), 0x0003_0003u32.to_le_bytes());
    assert_eq!(c.upload(0x6060, 0).unwrap(), [0]);
    assert_eq!(c.upload(0x1008, 0).unwrap(), b"SERVO-COE");
}

#[test]
fn segmented_upload_reassembles_and_keeps_the_first_part() {
    let mut c = client(server());
    let want: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    assert_eq!(c.upload(0x2000, 0).unwrap(), want);
    // Initiate + ceil((1000 - 112) / 119) = 8 segment requests, toggling from 0.
    let log = &c.mbx.port.server.log;
    assert_eq!(log[0], 0x40);
    assert_eq!(log.len(), 9);
    for (i, cmd) in log[1..].iter().enumerate() {
        assert_eq!(*cmd, 0x60 | if i % 2 == 1 { 0x10 } else { 0 });
    }
}

#[test]
fn counter_runs_1_to_7() {
    let mut c = client(server());
    for _ in 0..9 {
        c.upload(0x6060, 0).unwrap();
    }
    assert_eq!(c.mbx.port.server.counters, [1, 2, 3, 4, 5, 6, 7, 1, 2]);
}

#[test]
fn downloads_expedited_normal_and_segmented() {
    let mut c = client(server());
    c.download(0x6060, 0, &[8]).unwrap();
    assert_eq!(c.mbx.port.server.od[&(0x6060, 0)], [8]);
    c.download(0x6085, 0, &50000u32.to_le_bytes()).unwrap();
    c.download(0x3000, 0, &1u64.to_le_bytes()).unwrap();
    assert_eq!(c.mbx.port.server.od[&(0x3000, 0)], 1u64.to_le_bytes());
    assert_eq!(
        *c.mbx.port.server.log.last().unwrap(),
        0x21,
        "8 bytes: normal"
    );
    let big: Vec<u8> = (0..700u32).map(|i| (i * 7) as u8).collect();
    c.download(0x3001, 0, &big).unwrap();
    assert_eq!(c.mbx.port.server.od[&(0x3001, 0)], big);
    // 112 bytes in the initiate, then ceil(588 / 119) = 5 segments, the last one marked.
    let segs: Vec<u8> = c.mbx.port.server.log[4..].to_vec();
    assert_eq!(segs.len(), 5, "{segs:x?}");
    assert_eq!(segs[4] & 1, 1);
    assert_eq!(segs[1] & 0x10, 0x10);
    // And it reads back the same.
    assert_eq!(c.upload(0x3001, 0).unwrap(), big);
}

#[test]
fn complete_access_sets_the_flag_and_subindex() {
    let mut c = client(server());
    c.mbx
        .port
        .server
        .od
        .insert((0x1c12, 0), vec![1, 0, 0x00, 0x16]);
    c.mbx.port.server.od.insert((0x1c12, 1), vec![0x00, 0x16]);
    assert_eq!(c.upload_complete(0x1c12, true).unwrap(), [1, 0, 0x00, 0x16]);
    assert_eq!(c.mbx.port.server.log[0], 0x50);
    c.download_complete(0x1c12, false, &[0x01, 0x16]).unwrap();
    assert_eq!(c.mbx.port.server.log[1] & 0x10, 0x10);
    assert_eq!(c.mbx.port.server.od[&(0x1c12, 1)], [0x01, 0x16]);
}

#[test]
fn aborts_carry_code_object_and_text() {
    let mut c = client(server());
    let e = c.upload(0x7777, 3).unwrap_err();
    assert_eq!(e.abort_code(), Some(0x0602_0000));
    assert_eq!(
        e.to_string(),
        "position 2: SDO 0x7777:03: abort 0x06020000: The object does not exist in the object \
         directory"
    );
    let e = c.download(0x1018, 2, &[1, 2, 3, 4]).unwrap_err();
    assert_eq!(e.abort_code(), Some(0x0601_0002));
    assert!(
        e.to_string()
            .ends_with("Attempt to write a read only object")
    );
}

#[test]
fn emergencies_are_kept_not_fatal() {
    let mut c = client(server());
    c.mbx.port.server.emergency_next = true;
    assert_eq!(c.upload(0x6060, 0).unwrap(), [0]);
    let e = c.take_emergencies();
    assert_eq!(
        e,
        [Emergency {
            position: 2,
            code: 0x8210,
            register: 0x11,
            data: [1, 2, 3, 4, 5]
        }]
    );
    assert!(c.take_emergencies().is_empty());
}

#[test]
fn a_flood_of_emergencies_ends_in_the_timeout() {
    let mut c = client(server());
    c.mbx.port.flood = true;
    let e = c.upload(0x6060, 0).unwrap_err().to_string();
    assert!(e.ends_with("response: no answer within 20 ms"), "{e}");
    assert_eq!(c.take_emergencies().len(), MAX_EMERGENCIES);
}

#[test]
fn an_empty_segment_that_is_not_the_last_is_malformed() {
    let mut c = client(server());
    c.mbx.port.server.od.insert((0x2001, 0), vec![1; 200]);
    c.mbx.port.server.empty_segments = true;
    let e = c.upload(0x2001, 0).unwrap_err().to_string();
    assert!(
        e.ends_with("malformed response: empty segment that is not the last"),
        "{e}"
    );
}

#[test]
fn a_first_request_repeating_the_last_counter_is_sent_again() {
    let mut s = server();
    // ethercrab's last request to this device had counter 1, the client's first has 1 too.
    s.drop_repeats = true;
    s.last_counter = Some(1);
    let mut c = client(s);
    assert_eq!(c.upload(0x6060, 0).unwrap(), [0]);
    assert_eq!(c.mbx.port.server.counters, [2]);
    // Only the first request is sent again: later silence is a timeout.
    c.mbx.port.server.mute = true;
    assert!(matches!(c.upload(0x6060, 0), Err(Error::Timeout { .. })));
}

#[test]
fn a_client_continues_after_the_last_counter() {
    let mut s = server();
    s.drop_repeats = true;
    let mut c = client(s);
    c.continue_after(7);
    c.upload(0x6060, 0).unwrap();
    assert_eq!(c.counter(), 1);
    assert_eq!(c.mbx.port.server.counters, [1]);
}

#[test]
fn stale_response_is_cleared_first() {
    let mut c = client(server());
    // The answer to a request that timed out, still in SM1.
    c.mbx
        .port
        .queue
        .push_back(sdo_resp(0x4f, 0x1c00, 4, [4, 0, 0, 0]));
    assert_eq!(c.upload(0x1018, 2).unwrap(), 0x0003_0003u32.to_le_bytes());
}

#[test]
fn timeout_names_the_step() {
    let mut c = client(server());
    c.mbx.port.server.mute = true;
    let e = c.upload(0x1008, 0).unwrap_err().to_string();
    assert_eq!(
        e,
        "position 2: SDO 0x1008:00 upload: response: no answer within 20 ms"
    );
}

#[test]
fn toggle_errors_are_malformed() {
    let mut c = client(server());
    c.mbx.port.server.bad_toggle = true;
    let e = c.upload(0x2000, 0).unwrap_err().to_string();
    assert!(
        e.contains("malformed response: segment toggle bit not changed"),
        "{e}"
    );
    // The client told the device it gave up (abort 0x05030000).
    assert_eq!(*c.mbx.port.server.log.last().unwrap(), 0x80);
}

#[test]
fn answer_for_another_object_is_malformed() {
    let mut c = client(server());
    c.mbx.port.server.echo_other = true;
    let e = c.upload(0x6060, 0).unwrap_err().to_string();
    assert_eq!(
        e,
        "position 2: SDO 0x6060:00 upload: malformed response: answer for 0x6061:00"
    );
}

#[test]
fn sdo_information_fragments() {
    let mut c = client(server());
    assert_eq!(
        c.od_list(ListType::All).unwrap(),
        [0x1008, 0x1018, 0x2000, 0x6060]
    );
    let d = c.object_description(0x1008).unwrap();
    assert_eq!((d.object_code, d.name.as_str()), (7, "Device name"));
    let e = c.object_description(0x7777).unwrap_err();
    assert_eq!(e.abort_code(), Some(0x0602_0000));
    let e = c.entry_description(0x6041, 0).unwrap();
    assert_eq!(
        (e.bits, e.name.as_str(), e.access_text().as_str()),
        (16, "Statusword", "ro")
    );
    assert!(e.tx_mappable());
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

/// A CoE-shaped mailbox with a random body: service and command bytes drawn so that the
/// client's segmented and SDO information paths are reached, not just the header checks.
fn coe_like() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    (
        prop_oneof![Just(1u8), Just(2), Just(3), Just(8), 0u8..16],
        any::<u8>(),
        proptest::collection::vec(any::<u8>(), 0..130),
        any::<bool>(),
    )
        .prop_map(|(svc, cmd, body, fit)| {
            let mut b = vec![0u8; 9];
            let len = if fit { body.len() + 3 } else { body.len() + 40 };
            b[0..2].copy_from_slice(&(len as u16).to_le_bytes());
            b[5] = 0x03;
            b[7] = svc << 4;
            b[8] = cmd;
            b.extend_from_slice(&body);
            b
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
    // Whatever the device answers, every service returns (a value or an error): no panic, no
    // endless loop (the answers run out, then the timeout).
    #[test]
    fn client_survives_any_answers(answers in proptest::collection::vec(coe_like(), 0..12)) {
        let g = Geometry { rx_sm: 0, rx_offset: RX, rx_size: MBX, tx_sm: 1, tx_offset: TX,
                           tx_size: MBX };
        let t = Timeouts { response: Duration::from_millis(1), mailbox_free:
                           Duration::from_millis(1), poll: Duration::ZERO };
        let mut c = Client::new(RandomEsc { answers: answers.into(), pending: 0 }, 0, g, t);
        let _ = c.upload(0x1008, 0);
        let _ = c.download(0x2000, 0, &[7u8; 300]);
        let _ = c.od_list(ListType::All);
        let _ = c.object_description(0x1000);
        let _ = c.entry_description(0x1000, 0);
        let _ = c.upload_complete(0x1c12, true);
    }
}

/// The same services over the `Transport` trait (what the running master's queue provides):
/// the fragments after the first are polled for.
#[test]
fn sdo_information_over_a_transport() {
    let mut c = client(server());
    let wait = Duration::from_secs(1);
    assert_eq!(
        info::od_list(&mut c.mbx, ListType::All, wait).unwrap(),
        [0x1008, 0x1018, 0x2000, 0x6060]
    );
    let d = info::object_description(&mut c.mbx, 0x1008, wait).unwrap();
    assert_eq!((d.object_code, d.name.as_str()), (7, "Device name"));
    let e = info::object_description(&mut c.mbx, 0x7777, wait).unwrap_err();
    assert_eq!(e.abort_code(), Some(0x0602_0000));
    let e = info::entry_description(&mut c.mbx, 0x6041, 0, wait).unwrap();
    assert_eq!((e.bits, e.name.as_str()), (16, "Statusword"));
    // A device that sends the first fragment only: the rest is waited for, then a timeout.
    let mut c = client(server());
    c.mbx.port().server.truncate_info = true;
    let t = std::time::Instant::now();
    let e = info::od_list(&mut c.mbx, ListType::All, Duration::from_millis(50)).unwrap_err();
    assert!(e.to_string().contains("next fragment"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(2));
}
