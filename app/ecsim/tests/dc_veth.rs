//! Distributed clocks over a real wire: ethercrab's DC init, `configure_dc_sync` and `tx_rx_dc`
//! through a veth pair between two network namespaces; the clocks converge and the responder's
//! status line reports every DC device in sync. Root only.

use ecsim::netns::{VethPair, root_or_skip};
use ecsim::wire::Responder;
use ecsim::{SegmentSpec, SimPort};
use ethercrab::std::ethercat_now;
use ethercrab::subdevice_group::DcConfiguration;
use ethercrab::{DcSync, MainDevice, MainDeviceConfig, PduRx, PduStorage, PduTx, Timeouts};
use futures_lite::future::block_on;
use rtcat_packet::{PacketKind, PacketSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SEGMENT: &str = "\
[[device]]\nname = \"REF\"\noutputs = 4\ninputs = 4\ndc = true\ndc_offset_ns = 4000000\ndc_drift_ppm = -10.0\n\
[[device]]\nname = \"FAST\"\noutputs = 4\ninputs = 4\ndc = true\ndc_offset_ns = 29000000\ndc_drift_ppm = 50.0\n\
[[device]]\nname = \"SLOW\"\noutputs = 4\ninputs = 4\ndc = true\ndc_offset_ns = 1500000\ndc_drift_ppm = -50.0\n";
const CYCLE: Duration = Duration::from_millis(1);

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

#[test]
fn dc_converges_over_veth_and_the_status_line_reports_it() {
    if !root_or_skip("dc_over_veth") {
        return;
    }
    let net = VethPair::create("ecdc").expect("veth pair");
    let stop = Arc::new(AtomicBool::new(false));
    let stop_r = stop.clone();
    let seg_if = net.segment_if.clone();
    let port = SimPort::new(SegmentSpec::from_toml(SEGMENT).expect("valid"));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let responder = VethPair::in_ns(&net.segment_ns, move || {
        let r = Responder::new(&seg_if, port).expect("responder");
        ready_tx.send(r.status_handle()).unwrap();
        r.run(&stop_r)
    })
    .unwrap();
    let status = ready_rx.recv().expect("responder ready");
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
    let mut group = block_on(md.init_single_group::<4, 64>(ethercat_now)).expect("init");
    for mut sd in group.iter_mut(&md) {
        sd.set_dc_sync(DcSync::Sync0);
    }
    let group = block_on(group.into_pre_op_pdi(&md)).expect("PRE-OP with PDI");
    let group = block_on(group.configure_dc_sync(
        &md,
        DcConfiguration {
            start_delay: Duration::from_millis(100),
            sync0_period: CYCLE,
            sync0_shift: CYCLE / 2,
        },
    ))
    .expect("DC configuration");
    let group = block_on(group.request_into_op(&md)).expect("request OP");
    for _ in 0..1000 {
        let start = Instant::now();
        let resp = block_on(group.tx_rx_dc(&md)).expect("tx_rx_dc");
        std::thread::sleep(
            (start + resp.extra.next_cycle_wait).saturating_duration_since(Instant::now()),
        );
    }
    let mut worst = 0;
    for sd in group.iter(&md).skip(1) {
        let v = block_on(sd.register_read::<u32>(0x092cu16)).expect("0x092C");
        worst = worst.max(v & 0x7fff_ffff);
    }
    // The responder refreshes its status every 100 ms.
    std::thread::sleep(Duration::from_millis(250));
    let line = status.lock().unwrap().clone();
    unsafe { md.release_all() };
    driver.join().unwrap();
    stop.store(true, Ordering::Release);
    let port = responder.join().unwrap().expect("responder ran");
    eprintln!("worst |0x092C| {worst} ns; {line}");
    assert!(worst < 100, "worst |0x092C| {worst} ns");
    assert_eq!(port.stats().malformed, 0);
    let dc = line.split(" dc=").nth(1).expect(&line);
    let fields: Vec<Vec<&str>> = dc.split(',').map(|d| d.split(':').collect()).collect();
    assert_eq!(fields.len(), 3, "{line}");
    for (i, f) in fields.iter().enumerate() {
        assert_eq!(f[0], i.to_string(), "{line}");
        assert_eq!(f[4], "1000000", "SYNC0 cycle: {line}");
        if i > 0 {
            assert_eq!(f[2], "1", "device {i} in sync: {line}");
        }
    }
    assert!(
        line.contains("devices=[0x1000:8 0x1001:8 0x1002:8]"),
        "{line}"
    );
}
