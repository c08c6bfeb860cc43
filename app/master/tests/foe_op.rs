//! FoE to a subdevice of a running segment, through the acyclic queue (`QueueMailbox`): the
//! file goes packet by packet in the cycle's mailbox budget, SDO requests to the same device
//! interleave on its one counter, and the cyclic exchange of every subdevice goes on undisturbed
//! (no wrong working counter, every subdevice in OP, inputs echoing outputs). The throughput is
//! printed (`-- --nocapture`).

use ecsim::{Faults, SegmentSpec};
use rtcat_master::acyclic::sdo_queue;
use rtcat_master::config::TxRxMode;
use rtcat_master::foe;
use rtcat_master::{Config, RunSpec, Stop, Target, ZeroOutputs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CoE device with a writable firmware file, between two I/O terminals.
const SEGMENT: &str = r#"
[[device]]
name = "IO-A"
product_id = 0x00290011
inputs = 2
outputs = 2

[[device]]
name = "FW"
product_id = 0x00290012
coe = true
inputs = 2
[[device.file]]
name = "firmware.bin"
size = 1000
writable = true
[[device.file]]
name = "params.bin"
writable = true
max_bytes = 1000
password = 0x1234

[[device]]
name = "IO-B"
product_id = 0x00290013
inputs = 2
outputs = 2
"#;

const SIZE: usize = 64 << 10;

#[test]
fn foe_during_op_goes_in_the_mailbox_budget_and_the_others_keep_their_data() {
    let mut cfg = Config::default();
    cfg.cycle.period_us = 1000;
    cfg.cycle.txrx = TxRxMode::Inline;
    let (client, service) = sdo_queue(8, Duration::from_micros(300));
    let stop = Stop::new();
    let mut spec = RunSpec::new(
        cfg,
        Target::Sim {
            spec: SegmentSpec::from_toml(SEGMENT).unwrap(),
            faults: Faults::new(),
        },
        stop.clone(),
    );
    spec.no_rt = true;
    spec.duration = Some(Duration::from_secs(120));
    spec.sdo = Some(service);
    let client = Arc::new(client);
    let c2 = client.clone();
    let image: Vec<u8> = (0..SIZE).map(|i| (i * 31 % 256) as u8).collect();
    let sent = image.clone();
    let worker = std::thread::spawn(move || {
        let t = Duration::from_secs(5);
        // Wait for OP: requests before it only wait in the queue, but the geometry read needs
        // the mailbox configured.
        let start = Instant::now();
        let mut mbx = loop {
            match c2.queue_mailbox(1, t) {
                Ok(m) => break m,
                Err(e) if start.elapsed() > Duration::from_secs(30) => panic!("{e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let mut c = foe::Client::new(&mut mbx);
        let tw = Instant::now();
        c.write("firmware.bin", 0, &sent, &mut |_| {}).unwrap();
        let w = tw.elapsed();
        // CoE between two FoE transfers, on the same counter.
        let name = c2.read(1, 0x1008, 0, t).unwrap();
        let tr = Instant::now();
        let back = c.read("firmware.bin", 0, &mut |_| {}).unwrap();
        let r = tr.elapsed();
        // A refusal half-way, then a new start.
        let e = c
            .write("params.bin", 0x1234, &[1u8; 3000], &mut |_| {})
            .unwrap_err();
        c.write("params.bin", 0x1234, &[2u8; 500], &mut |_| {})
            .unwrap();
        let params = c.read("params.bin", 0x1234, &mut |_| {}).unwrap();
        // A device without a mailbox: refused by name before anything is sent.
        let no_mbx = c2.queue_mailbox(0, t).err().map(|e| e.to_string());
        stop.request();
        (back, name, e.code(), params, w, r, no_mbx)
    });
    let out = rtcat_master::run_simple(spec, &mut ZeroOutputs).expect("run");
    let (back, name, code, params, w, r, no_mbx) = worker.join().expect("client thread");
    assert_eq!(
        no_mbx.as_deref(),
        Some("mailbox error: the subdevice has no enabled mailbox on SM0/SM1")
    );
    assert!(back == image, "the image read back differs");
    assert_eq!(name.as_slice(), b"FW");
    assert_eq!(code, Some(foe::code::DISK_FULL));
    assert_eq!(params, [2u8; 500]);
    // Every cycle of the transfer exchanged valid data with every subdevice.
    assert!(out.rec.cycles > 500, "{} cycles", out.rec.cycles);
    assert_eq!(out.rec.wkc_mismatches, 0);
    assert_eq!(out.rec.not_op_cycles, 0);
    assert_eq!(out.rec.data_errors, 0);
    assert_eq!(out.rec.recoveries, 0);
    let kib = |d: Duration| SIZE as f64 / 1024.0 / d.as_secs_f64();
    println!(
        "FoE {} KiB during OP at 1 ms, 300 us budget: write {:.1} KiB/s, read {:.1} KiB/s \
         ({} cycles, {} lost)",
        SIZE >> 10,
        kib(w),
        kib(r),
        out.rec.cycles,
        out.rec.frames_lost
    );
}
