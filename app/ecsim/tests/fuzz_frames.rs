//! The frame parser and the chain never panic, whatever arrives from the wire, and a malformed
//! frame is dropped and counted without touching any device.

use ecsim::frame::{Cmd, FrameBuilder, phys};
use ecsim::{Disposition, Segment, SegmentSpec};
use proptest::prelude::*;

fn valid_frame() -> Vec<u8> {
    FrameBuilder::new()
        .datagram(Cmd::Brd, 1, phys(0, 0x0130), &[0, 0])
        .datagram(Cmd::Aprd, 2, phys(0, 0x0000), &[0; 8])
        .datagram(Cmd::Lrw, 3, 0, &[0; 132])
        .datagram(Cmd::Fpwr, 4, phys(0x1000, 0x0120), &[2, 0])
        .build()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1600)) {
        let mut seg = Segment::new(SegmentSpec::reference());
        let mut f = bytes.clone();
        let _ = seg.process(&mut f, 0);
        let st = seg.stats();
        prop_assert_eq!(st.frames, 1);
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        flips in proptest::collection::vec((0usize..200, any::<u8>()), 1..12),
        cut in 0usize..220,
    ) {
        let mut seg = Segment::new(SegmentSpec::uniform(4, 16, 16));
        seg.preconfigure();
        let mut f = valid_frame();
        for (at, v) in flips {
            if at < f.len() { f[at] = v; }
        }
        f.truncate(cut.max(1));
        let before: Vec<Vec<u8>> = seg.devices().iter().map(|d| d.mem().to_vec()).collect();
        match seg.process(&mut f, 0) {
            Disposition::Malformed(_) | Disposition::Ignored => {
                // Nothing was applied to any device.
                for (d, b) in seg.devices().iter().zip(&before) {
                    prop_assert!(d.mem() == &b[..]);
                }
            }
            _ => {}
        }
    }
}

#[test]
fn malformed_frames_are_counted() {
    let mut seg = Segment::new(SegmentSpec::reference());
    let mut f = valid_frame();
    f.truncate(40);
    assert!(matches!(seg.process(&mut f, 0), Disposition::Malformed(_)));
    assert_eq!(seg.stats().malformed, 1);
    assert!(seg.last_error().is_some());
    let mut ok = valid_frame();
    assert!(matches!(seg.process(&mut ok, 0), Disposition::Reply { .. }));
    // The reply carries the U/L bit in the source MAC; a reply fed back in is ignored.
    assert_eq!(ok[6], 0x12);
    assert_eq!(seg.process(&mut ok, 0), Disposition::Ignored);
}

#[test]
fn wkc_rules_per_command() {
    let mut seg = Segment::new(SegmentSpec::uniform(3, 4, 4));
    let layout = seg.preconfigure();
    assert_eq!(layout.image_len, 24);
    assert_eq!(layout.lrw_wkc(0..24), 9);
    assert_eq!(
        layout.lrw_wkc(0..5),
        2 + 1,
        "device 0 outputs + first input byte"
    );
    let mut f = FrameBuilder::new()
        .datagram(Cmd::Brd, 0, phys(0, 0x0000), &[0])
        .datagram(Cmd::Aprd, 1, phys(0xffff, 0x0010), &[0, 0])
        .datagram(Cmd::Fprw, 2, phys(0x1002, 0x0012), &[0x34, 0x12])
        .datagram(Cmd::Bwr, 3, phys(0, 0x0900), &[0; 4])
        .datagram(Cmd::Frmw, 4, phys(0x1000, 0x0010), &[0, 0])
        .datagram(Cmd::Lrd, 5, 0, &[0; 24])
        .datagram(Cmd::Lwr, 6, 0, &[0; 24])
        .datagram(Cmd::Lrw, 7, 0, &[0; 24])
        .datagram(Cmd::Fprd, 8, phys(0x7777, 0x0000), &[0])
        .build();
    assert!(matches!(seg.process(&mut f, 0), Disposition::Reply { .. }));
    let w = |n| ecsim::frame::datagram_result(&f, n).unwrap();
    assert_eq!(w(0).1, 3, "BRD: every device");
    assert_eq!(w(1), (vec![0x01, 0x10], 1), "APRD -1 addresses position 1");
    assert_eq!(w(2).1, 3, "FPRW: read + write");
    assert_eq!(w(3).1, 0, "BWR to the DC block: no device has DC");
    assert_eq!(w(4).1, 3, "FRMW: one read, two writes");
    assert_eq!(w(5).1, 3, "LRD: inputs of 3 devices");
    assert_eq!(w(6).1, 3, "LWR: outputs of 3 devices");
    assert_eq!(w(7).1, 9, "LRW: 3 per device");
    assert_eq!(w(8).1, 0, "FPRD to an unknown address");
    // The station alias is loaded from SII word 4 at power-on and is read-only for the master
    // (ESC register description): the FPRW counts, its write changes nothing.
    assert_eq!(
        seg.devices()[2].mem()[0x12..0x14],
        [0, 0],
        "FPRW changed the read-only alias"
    );
}

#[test]
fn invalid_state_change_sets_error_and_code() {
    let mut seg = Segment::new(SegmentSpec::uniform(1, 4, 4));
    let mut f = FrameBuilder::new()
        .datagram(Cmd::Apwr, 0, phys(0, 0x0120), &[8, 0]) // INIT -> OP: invalid
        .datagram(Cmd::Aprd, 1, phys(0, 0x0130), &[0; 6])
        .build();
    seg.process(&mut f, 0);
    let (status, _) = ecsim::frame::datagram_result(&f, 1).unwrap();
    assert_eq!(status[0], 0x11, "INIT + error flag");
    assert_eq!(u16::from_le_bytes([status[4], status[5]]), 0x0011);
    // PRE-OP -> SAFE-OP without the SMs configured: invalid output configuration.
    let mut f = FrameBuilder::new()
        .datagram(Cmd::Apwr, 0, phys(0, 0x0120), &[0x12, 0]) // ack + PRE-OP
        .datagram(Cmd::Apwr, 1, phys(0, 0x0120), &[0x04, 0]) // SAFE-OP
        .datagram(Cmd::Aprd, 2, phys(0, 0x0130), &[0; 6])
        .build();
    seg.process(&mut f, 0);
    let (status, _) = ecsim::frame::datagram_result(&f, 2).unwrap();
    assert_eq!(status[0], 0x12, "PRE-OP + error flag");
    assert_eq!(u16::from_le_bytes([status[4], status[5]]), 0x001d);
}
