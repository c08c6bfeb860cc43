//! The layer's pure parts and the transport's sorting of what SM1 holds.

use super::*;
use std::collections::VecDeque;

const RX: u16 = 0x1000;
const TX: u16 = 0x1080;

fn geometry(size: u16) -> Geometry {
    Geometry {
        rx_sm: 0,
        rx_offset: RX,
        rx_size: size,
        tx_sm: 1,
        tx_offset: TX,
        tx_size: size,
    }
}

#[test]
fn the_registers_the_master_writes_read_back_as_the_same_geometry() {
    let g = geometry(128);
    assert_eq!(Geometry::from_registers(&g.registers()), Ok(g));
    let mut off = g.registers();
    off[14] = 0;
    assert_eq!(Geometry::from_registers(&off), Err(RegisterError::Disabled));
    let mut pd = g.registers();
    pd[4] = 0x64;
    assert_eq!(
        Geometry::from_registers(&pd),
        Err(RegisterError::NotMailbox)
    );
    for size in [8, MAX_MAILBOX + 1] {
        assert_eq!(
            Geometry::from_registers(&geometry(size).registers()),
            Err(RegisterError::Size(size, size))
        );
    }
}

#[test]
fn bootstrap_mailbox_from_the_sii() {
    let mut sii = crate::sii::Sii::default();
    let e = Geometry::bootstrap_from_sii(2, &sii)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no BOOT state"), "{e}");
    sii.bootstrap_mailbox = Some(crate::sii::Mailbox {
        rx_offset: 0x1800,
        rx_size: 512,
        tx_offset: 0x1c00,
        tx_size: 512,
    });
    let g = Geometry::bootstrap_from_sii(2, &sii).unwrap();
    assert_eq!((g.rx_offset, g.rx_size, g.tx_offset), (0x1800, 512, 0x1c00));
}

#[test]
fn header_payload_and_emergency() {
    let mut b = [0u8; 16];
    header(&mut b, 10, kind::COE);
    assert_eq!(&b[..6], &[10, 0, 0, 0, 0, 3]);
    b[6..16].copy_from_slice(&[0, 0x10, 0x10, 0x82, 0x11, 1, 2, 3, 4, 5]);
    assert_eq!(payload(&b).unwrap().len(), 10);
    let e = emergency_of(5, &b).unwrap();
    assert_eq!(
        (e.position, e.code, e.register, e.data),
        (5, 0x8210, 0x11, [1, 2, 3, 4, 5])
    );
    // An SDO response is no emergency, nor is an FoE mailbox.
    b[7] = 0x30;
    assert!(emergency_of(5, &b).is_none());
    b[5] = kind::FOE;
    b[7] = 0x10;
    assert!(emergency_of(5, &b).is_none());
    assert!(payload(&[1, 2, 3]).is_err());
    assert!(payload(&[20, 0, 0, 0, 0, 3, 0, 0]).is_err());
    assert_eq!(kind::name(kind::EOE), "EoE");
}

/// SM1 holds what the script says after each request.
struct Script {
    replies: VecDeque<Vec<Vec<u8>>>,
    queue: VecDeque<Vec<u8>>,
    written: Vec<Vec<u8>>,
}

impl Port for Script {
    fn read(&mut self, register: u16, buf: &mut [u8]) -> Result<(), ethercrab::error::Error> {
        match register {
            0x0805 => buf[0] = 0,
            0x080d => buf[0] = if self.queue.is_empty() { 0 } else { 0x08 },
            TX => {
                let m = self.queue.pop_front().unwrap();
                buf.fill(0);
                buf[..m.len()].copy_from_slice(&m);
            }
            r => panic!("read of {r:#06x}"),
        }
        Ok(())
    }

    fn write(&mut self, _register: u16, data: &[u8]) -> Result<(), ethercrab::error::Error> {
        self.written.push(data.to_vec());
        if let Some(r) = self.replies.pop_front() {
            self.queue.extend(r);
        }
        Ok(())
    }
}

fn mbx(k: u8, body: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 6];
    header(&mut b, body.len(), k);
    b.extend_from_slice(body);
    b
}

fn transport(replies: Vec<Vec<Vec<u8>>>) -> Mailbox<Script> {
    let t = Timeouts {
        response: Duration::from_millis(10),
        ..Timeouts::default()
    };
    let s = Script {
        replies: replies.into(),
        queue: VecDeque::new(),
        written: Vec::new(),
    };
    Mailbox::new(s, 1, geometry(64), t)
}

#[test]
fn the_reply_of_the_protocol_waited_for_others_set_aside() {
    let soe = mbx(kind::SOE, &[1, 2]);
    let foe = mbx(kind::FOE, &[4, 0, 0, 0, 0, 0]);
    let mut m = transport(vec![vec![soe.clone(), foe.clone()]]);
    let req = mbx(kind::FOE, &[1, 0, 0, 0, 0, 0, b'x']);
    let got = m.transact(&req, "test").unwrap();
    assert_eq!(&got[..foe.len()], &foe[..]);
    // The request went out padded, with counter 1 and its type.
    let w = &m.port.written[0];
    assert_eq!((w.len(), w[5]), (64, 0x14));
    assert_eq!(&m.take_set_aside(kind::SOE).unwrap()[..soe.len()], &soe[..]);
    assert!(m.take_set_aside(kind::SOE).is_none());
}

#[test]
fn a_mailbox_error_reply_ends_the_wait_with_its_text() {
    let mut m = transport(vec![vec![mbx(kind::ERR, &[1, 0, 2, 0])]]);
    let e = m
        .transact(&mbx(kind::FOE, &[1, 0, 0, 0, 0, 0]), "FoE read \"x\"")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "position 1: FoE read \"x\": mailbox error 0x0002: the mailbox protocol is not supported"
    );
}

#[test]
fn set_aside_mailboxes_are_bounded() {
    let flood: Vec<Vec<u8>> = (0..MAX_SET_ASIDE + 5)
        .map(|i| mbx(kind::EOE, &[i as u8]))
        .chain([mbx(kind::COE, &[0, 0x30, 0x4f, 0, 0x10, 0, 1, 0, 0, 0])])
        .collect();
    let mut m = transport(vec![flood]);
    m.transact(
        &mbx(kind::COE, &[0, 0x20, 0x40, 0, 0x10, 0, 0, 0, 0, 0]),
        "t",
    )
    .unwrap();
    let mut n = 0;
    let mut first = None;
    while let Some(b) = m.take_set_aside(kind::EOE) {
        first.get_or_insert(b[6]);
        n += 1;
    }
    // The oldest ones were dropped.
    assert_eq!((n, first), (MAX_SET_ASIDE, Some(5)));
}

#[test]
fn a_stale_reply_of_the_same_protocol_is_dropped_another_set_aside() {
    let mut m = transport(vec![vec![], vec![mbx(kind::FOE, &[4, 0, 1, 0, 0, 0])]]);
    // Left in SM1 before the request: an FoE answer nobody waits for, and an EoE mailbox.
    m.port.queue.push_back(mbx(kind::FOE, &[4, 0, 9, 0, 0, 0]));
    m.port.queue.push_back(mbx(kind::EOE, &[7]));
    m.send(&mbx(kind::FOE, &[3, 0, 0, 0, 0, 0]), "t").unwrap();
    assert!(m.port.queue.is_empty());
    assert_eq!(m.take_set_aside(kind::EOE).unwrap()[6], 7);
    assert!(m.take_set_aside(kind::FOE).is_none());
}

#[test]
fn the_counter_runs_1_to_7_and_never_0() {
    let mut c = Counter::default();
    assert_eq!(c.last(), 0);
    let seq: Vec<u8> = (0..9).map(|_| c.advance()).collect();
    assert_eq!(seq, [1, 2, 3, 4, 5, 6, 7, 1, 2]);
    c.continue_after(7);
    assert_eq!(c.advance(), 1);
    // Only the three counter bits of another transport's value count.
    c.continue_after(0x15);
    assert_eq!(c.advance(), 6);
}
