//! ethercrab against the simulated segment over a real wire: a veth pair between two network
//! namespaces, the responder on one end, an AF_PACKET TX/RX loop on the other. Root only.

use ecsim::netns::{VethPair, root_or_skip};
use ecsim::wire::Responder;
use ecsim::{FaultCommand, SegmentSpec, SimPort};
use ethercrab::std::ethercat_now;
use ethercrab::{MainDevice, MainDeviceConfig, PduRx, PduStorage, PduTx, Timeouts};
use futures_lite::future::block_on;
use rtcat_packet::{PacketKind, PacketSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A plain socket TX/RX loop for the test (rtcat has the production one).
fn socket_loop(mut tx: PduTx<'static>, mut rx: PduRx<'static>, sock: PacketSocket) {
    let mut buf = [0u8; 1536];
    while !tx.should_exit() {
        while let Some(f) = tx.next_sendable_frame() {
            let _ =
                f.send_blocking(|d| sock.send(d).map_err(|_| ethercrab::error::Error::SendFrame));
        }
        while let Ok(Some((n, kind))) = sock.recv(&mut buf) {
            if kind == PacketKind::Incoming {
                let _ = rx.receive_frame(&buf[..n]);
            }
        }
        let _ = sock.wait_readable(Some(Duration::from_micros(50)));
    }
}

fn over_veth<const N: usize, const PDI: usize>(spec: SegmentSpec, cycles: u32) {
    if !root_or_skip("over_veth") {
        return;
    }
    let net = VethPair::create("ecsim").expect("veth pair");
    let expected = spec.expected_wkc() as u16;
    let n = spec.devices.len();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_r = stop.clone();
    let seg_if = net.segment_if.clone();
    let port = SimPort::new(spec);
    let faults = port.faults().clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let responder = VethPair::in_ns(&net.segment_ns, move || {
        let r = Responder::new(&seg_if, port).expect("responder");
        ready_tx.send(()).unwrap();
        r.run(&stop_r)
    })
    .unwrap();
    // The master must not send before the segment listens: ethercrab does not retry by default.
    ready_rx.recv().expect("responder ready");

    let storage: &'static PduStorage<16, { PduStorage::element_size(1100) }> =
        Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().unwrap();
    let m_if = net.master_if.clone();
    let driver = VethPair::in_ns(&net.master_ns, move || {
        let sock = PacketSocket::open(&m_if).expect("master socket");
        socket_loop(tx, rx, sock)
    })
    .unwrap();
    let timeouts = Timeouts {
        pdu: Duration::from_millis(200),
        eeprom: Duration::from_millis(200),
        ..Timeouts::default()
    };
    let md = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
    let group = block_on(md.init_single_group::<N, PDI>(ethercat_now)).expect("init over veth");
    assert_eq!(group.len(), n);
    let group = block_on(group.into_op(&md)).expect("OP over veth");
    for c in 0..cycles {
        for sd in group.iter(&md) {
            sd.outputs_raw_mut().fill(c as u8);
        }
        let r = block_on(group.tx_rx(&md)).expect("cycle");
        assert_eq!(r.working_counter, expected, "cycle {c}");
        assert!(r.all_op());
        if c > 0 {
            for sd in group.iter(&md) {
                let i = sd.inputs_raw();
                assert!(
                    ecsim::pdi::check_inputs(&i, &vec![c as u8 - 1; sd.outputs_raw().len()])
                        .is_some()
                        || ecsim::pdi::check_inputs(&i, &sd.outputs_raw()).is_some(),
                    "cycle {c}: inputs do not echo outputs"
                );
            }
        }
    }
    // A fault on the wire side is seen by the master.
    faults.apply(FaultCommand::DropNext(2));
    assert!(block_on(group.tx_rx(&md)).is_err());
    assert!(block_on(group.tx_rx(&md)).is_err());
    assert_eq!(
        block_on(group.tx_rx(&md)).unwrap().working_counter,
        expected
    );
    faults.apply(FaultCommand::SubdeviceError {
        position: 0,
        code: 0x1b,
    });
    let r = block_on(group.tx_rx(&md)).unwrap();
    assert!(r.working_counter < expected);

    unsafe { md.release_all() };
    driver.join().unwrap();
    stop.store(true, Ordering::Release);
    let port = responder.join().unwrap().expect("responder ran");
    assert_eq!(port.stats().malformed, 0);
    assert!(port.stats().replied > u64::from(cycles));
}

#[test]
fn one_subdevice_over_veth() {
    over_veth::<2, 64>(SegmentSpec::uniform(1, 8, 8), 50);
}

#[test]
fn reference_segment_over_veth() {
    over_veth::<4, 256>(SegmentSpec::reference(), 200);
}

#[test]
fn sixteen_subdevices_over_veth() {
    over_veth::<16, 1024>(SegmentSpec::uniform(16, 22, 22), 50);
}

#[test]
fn sixty_four_subdevices_over_veth() {
    over_veth::<64, 4096>(SegmentSpec::uniform(64, 22, 22), 30);
}

#[test]
fn control_socket_accepts_commands_and_reports_status() {
    if !root_or_skip("control_socket") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ctl.sock");
    let faults = ecsim::Faults::new();
    let status = Arc::new(std::sync::Mutex::new("frames=0".to_string()));
    let stop = Arc::new(AtomicBool::new(false));
    let h = ecsim::control::serve(
        &sock,
        ecsim::control::Access::Owner,
        ecsim::control::Handler::new(faults.clone(), status, 3),
        stop.clone(),
    )
    .unwrap();
    assert_eq!(ecsim::control::request(&sock, "link down").unwrap(), "ok");
    assert_eq!(
        ecsim::control::request(&sock, "status").unwrap(),
        "frames=0"
    );
    let e = ecsim::control::request(&sock, "link sideways").unwrap();
    assert!(e.starts_with("error:") && e.contains("link up"), "{e}");
    stop.store(true, Ordering::Release);
    h.shutdown();
    assert!(
        !sock.exists(),
        "the socket is removed when the server stops"
    );
}

#[test]
fn coe_example_over_veth() {
    // ethercrab reads every device's assignment and mapping over the mailbox, on the wire.
    over_veth::<4, 256>(SegmentSpec::coe_example(), 100);
}

#[test]
fn sixty_four_coe_subdevices_over_veth() {
    over_veth::<64, 1024>(SegmentSpec::coe_reference(64), 30);
}
