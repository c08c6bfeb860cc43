//! The registers the bus tools read, with raw datagrams as a master sends them: DL status and the
//! port descriptor per position, the ESC error counters 0x0300..0x0313 with the `crc-errors` and
//! `link down` faults and their clear-on-write, and the AL status code of a subdevice error.

use ecsim::esc::ErrorCounters;
use ecsim::frame::{Cmd, FrameBuilder, datagram_result, phys};
use ecsim::{Disposition, FaultCommand, Faults, Segment, SegmentSpec};

/// A segment of `n` reference devices with station addresses 0x1000 + position.
fn segment(n: usize) -> (Segment, Faults) {
    let faults = Faults::new();
    let mut seg = Segment::with_faults(SegmentSpec::uniform(n, 22, 22), faults.clone());
    for i in 0..n {
        let adp = 0u16.wrapping_sub(i as u16);
        let wkc = exchange(
            &mut seg,
            Cmd::Apwr,
            phys(adp, 0x0010),
            &(0x1000 + i as u16).to_le_bytes(),
        )
        .1;
        assert_eq!(wkc, 1);
    }
    (seg, faults)
}

/// One datagram in one frame through the segment: (data, WKC) of the reply.
fn exchange(seg: &mut Segment, cmd: Cmd, address: u32, data: &[u8]) -> (Vec<u8>, u16) {
    let mut frame = FrameBuilder::new().datagram(cmd, 0, address, data).build();
    assert!(
        matches!(seg.process(&mut frame, 0), Disposition::Reply { .. }),
        "{cmd:?} {address:#x} answered"
    );
    datagram_result(&frame, 0).expect("a valid reply")
}

fn fprd(seg: &mut Segment, station: u16, ado: u16, len: usize) -> Vec<u8> {
    let (data, wkc) = exchange(seg, Cmd::Fprd, phys(station, ado), &vec![0; len]);
    assert_eq!(wkc, 1, "FPRD {station:#x}:{ado:#06x}");
    data
}

fn counters(seg: &mut Segment, position: usize) -> ErrorCounters {
    let r = fprd(seg, 0x1000 + position as u16, 0x0300, 20);
    ErrorCounters::from_registers(&r.try_into().unwrap())
}

fn dl_status(seg: &mut Segment, position: usize) -> u16 {
    let r = fprd(seg, 0x1000 + position as u16, 0x0110, 2);
    u16::from_le_bytes([r[0], r[1]])
}

/// Bits of DL status 0x0110 (ET1100 register description).
const PDI_OPERATIONAL: u16 = 1 << 0;
const fn link(p: u16) -> u16 {
    1 << (4 + p)
}
const fn loop_closed(p: u16) -> u16 {
    1 << (8 + 2 * p)
}
const fn communication(p: u16) -> u16 {
    1 << (9 + 2 * p)
}

#[test]
fn dl_status_shows_a_chain_through_ports_0_and_1_closed_at_the_end() {
    for n in [1usize, 3] {
        let (mut seg, _) = segment(n);
        for pos in 0..n {
            let dl = dl_status(&mut seg, pos);
            let mut want =
                PDI_OPERATIONAL | link(0) | communication(0) | loop_closed(2) | loop_closed(3);
            if pos + 1 < n {
                want |= link(1) | communication(1);
            } else {
                want |= loop_closed(1);
            }
            assert_eq!(dl, want, "{n} devices, position {pos}: {dl:#06x}");
            // The port descriptor agrees: ports 0 and 1 are MII (0b11), 2 and 3 not implemented,
            // and a port not implemented has no link and is closed.
            let desc = fprd(&mut seg, 0x1000 + pos as u16, 0x0007, 1)[0];
            assert_eq!(desc, 0x0f);
            for p in 0..4u16 {
                if (desc >> (2 * p)) & 3 == 0 {
                    assert_eq!(dl & link(p), 0, "port {p}");
                    assert_ne!(dl & loop_closed(p), 0, "port {p}");
                }
            }
        }
    }
}

#[test]
fn link_down_closes_port_0_of_the_first_device_and_counts_a_lost_link() {
    let (mut seg, faults) = segment(3);
    faults.apply(FaultCommand::Link(false));
    let mut frame = FrameBuilder::new()
        .datagram(Cmd::Fprd, 0, phys(0x1000, 0x0110), &[0, 0])
        .build();
    assert_eq!(seg.process(&mut frame, 0), Disposition::LinkDown);
    let dl = u16::from_le_bytes([
        seg.devices()[0].mem()[0x0110],
        seg.devices()[0].mem()[0x0111],
    ]);
    assert_eq!(dl & (link(0) | communication(0)), 0, "{dl:#06x}");
    assert_ne!(dl & loop_closed(0), 0, "{dl:#06x}");
    faults.apply(FaultCommand::Link(true));
    assert_eq!(dl_status(&mut seg, 0) & (link(0) | loop_closed(0)), link(0));
    assert_eq!(counters(&mut seg, 0).lost_link, [1, 0, 0, 0]);
    assert_eq!(counters(&mut seg, 1).lost_link, [0; 4]);
    // Two losses between two frames are two losses; `link down` twice is one.
    for _ in 0..2 {
        faults.apply(FaultCommand::Link(false));
        faults.apply(FaultCommand::Link(false));
        faults.apply(FaultCommand::Link(true));
    }
    assert_eq!(counters(&mut seg, 0).lost_link, [3, 0, 0, 0]);
    // `clear` brings the link back without counting.
    faults.apply(FaultCommand::Link(false));
    faults.apply(FaultCommand::Clear);
    assert_eq!(counters(&mut seg, 0).lost_link, [4, 0, 0, 0]);
    // Writing one lost link counter clears all four.
    assert_eq!(
        exchange(&mut seg, Cmd::Fpwr, phys(0x1000, 0x0312), &[9]).1,
        1
    );
    assert_eq!(counters(&mut seg, 0).lost_link, [0; 4]);
}

#[test]
fn crc_errors_count_where_a_real_chain_counts_them() {
    let (mut seg, faults) = segment(3);
    for p in 0..3 {
        assert_eq!(counters(&mut seg, p), ErrorCounters::default());
    }
    // Bad frames arriving at port 0 of device 1 (the link from device 0).
    faults.apply(FaultCommand::parse_for("crc-errors 1 0 5", 3).unwrap());
    let c: Vec<ErrorCounters> = (0..3).map(|p| counters(&mut seg, p)).collect();
    assert_eq!(c[0].invalid_frame, [0; 4]);
    assert_eq!(c[0].forwarded, [0, 5, 0, 0], "on the way back");
    assert_eq!(c[0].processing_unit, 0);
    assert_eq!(c[1].invalid_frame, [5, 0, 0, 0]);
    assert_eq!(c[1].forwarded, [0, 5, 0, 0]);
    assert_eq!(c[1].processing_unit, 5);
    assert_eq!(c[2].invalid_frame, [0; 4]);
    assert_eq!(
        c[2].forwarded,
        [5, 0, 0, 0],
        "the last device: no way back through it"
    );
    assert_eq!(c[2].processing_unit, 5);
    assert!(
        c.iter()
            .all(|c| c.rx_error == [0; 4] && c.lost_link == [0; 4] && c.pdi == 0)
    );

    // Bad frames on the way back, arriving at port 1 of device 1 from device 2.
    faults.apply(FaultCommand::parse_for("crc-errors 1 1 7", 3).unwrap());
    let c: Vec<ErrorCounters> = (0..3).map(|p| counters(&mut seg, p)).collect();
    assert_eq!(c[1].invalid_frame, [5, 7, 0, 0]);
    assert_eq!(
        c[1].processing_unit, 5,
        "the way back bypasses the processing unit"
    );
    assert_eq!(c[0].forwarded, [0, 12, 0, 0]);
    assert_eq!(c[2].forwarded, [5, 0, 0, 0]);

    // A BRD ORs the counters of every device, as any register read.
    let (or, wkc) = exchange(&mut seg, Cmd::Brd, phys(0, 0x0300), &[0; 20]);
    assert_eq!(wkc, 3);
    let or = ErrorCounters::from_registers(&or.try_into().unwrap());
    assert_eq!(or.invalid_frame, [5, 7, 0, 0]);
    assert_eq!(or.forwarded, [5, 12 | 5, 0, 0]);

    // Counters stop at 0xFF.
    faults.apply(FaultCommand::parse_for("crc-errors 0 0 255", 3).unwrap());
    faults.apply(FaultCommand::parse_for("crc-errors 0 0 255", 3).unwrap());
    let c0 = counters(&mut seg, 0);
    assert_eq!(c0.invalid_frame[0], 0xff);
    assert_eq!(c0.forwarded[1], 0xff);
    assert_eq!(counters(&mut seg, 2).processing_unit, 0xff);

    // Writing any of 0x0300..0x030B clears 0x0300..0x030B (the value is ignored), not 0x030C.
    assert_eq!(
        exchange(&mut seg, Cmd::Fpwr, phys(0x1001, 0x0309), &[0x55]).1,
        1
    );
    let c1 = counters(&mut seg, 1);
    assert_eq!((c1.invalid_frame, c1.forwarded), ([0; 4], [0; 4]));
    assert_eq!(c1.processing_unit, 0xff);
    assert_ne!(
        counters(&mut seg, 0).invalid_frame,
        [0; 4],
        "only the addressed device"
    );
    // 0x030C clears itself.
    assert_eq!(
        exchange(&mut seg, Cmd::Fpwr, phys(0x1001, 0x030c), &[0x55]).1,
        1
    );
    assert_eq!(counters(&mut seg, 1), ErrorCounters::default());
    // A BWR over the whole block clears every device's counters.
    assert_eq!(
        exchange(&mut seg, Cmd::Bwr, phys(0, 0x0300), &[0xaa; 20]).1,
        3
    );
    for p in 0..3 {
        assert_eq!(
            counters(&mut seg, p),
            ErrorCounters::default(),
            "device {p}"
        );
    }
    // A power cycle resets them too (reset value 0).
    faults.apply(FaultCommand::parse_for("crc-errors 2 0 1", 3).unwrap());
    assert_eq!(counters(&mut seg, 2).invalid_frame, [1, 0, 0, 0]);
    faults.apply(FaultCommand::PowerCycle);
    let (r, _) = exchange(
        &mut seg,
        Cmd::Aprd,
        phys(0u16.wrapping_sub(2), 0x0300),
        &[0; 20],
    );
    assert_eq!(r, [0; 20]);
}

#[test]
fn a_subdevice_error_shows_its_al_status_code() {
    let faults = Faults::new();
    let mut seg = Segment::with_faults(SegmentSpec::reference(), faults.clone());
    seg.preconfigure();
    assert_eq!(fprd(&mut seg, 0x1002, 0x0130, 2), [0x08, 0], "OP");
    faults.apply(FaultCommand::parse_for("subdevice-error 2 0x001b", 3).unwrap());
    let status = fprd(&mut seg, 0x1002, 0x0130, 2);
    assert_eq!(status, [0x14, 0], "SAFE-OP with the error flag");
    assert_eq!(fprd(&mut seg, 0x1002, 0x0134, 2), [0x1b, 0]);
    // The others are untouched.
    assert_eq!(fprd(&mut seg, 0x1001, 0x0130, 2), [0x08, 0]);
    assert_eq!(fprd(&mut seg, 0x1001, 0x0134, 2), [0, 0]);
}
