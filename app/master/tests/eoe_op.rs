//! EoE to a subdevice of a running segment, through the acyclic queue (`QueueMailbox`): the IP
//! parameters set and read back, whole frames sent in fragments, all in the cycle's mailbox
//! budget, while the cyclic exchange of every subdevice goes on undisturbed (no wrong working
//! counter, every subdevice in OP).

use ecsim::{Faults, SegmentSpec};
use rtcat_master::acyclic::sdo_queue;
use rtcat_master::config::TxRxMode;
use rtcat_master::eoe::{self, IpParams};
use rtcat_master::{Config, RunSpec, Stop, Target, ZeroOutputs};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SEGMENT: &str = r#"
[[device]]
name = "IO-A"
inputs = 2
outputs = 2

[[device]]
name = "Drive"
coe = true
inputs = 2
outputs = 2
[device.eoe]
mac = "02:00:00:00:ec:07"
"#;

#[test]
fn eoe_during_op_goes_in_the_mailbox_budget_and_the_others_keep_their_data() {
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
    let worker = std::thread::spawn(move || {
        let t = Duration::from_secs(5);
        let start = Instant::now();
        let mut mbx = loop {
            match c2.queue_mailbox(1, t) {
                Ok(m) => break m,
                Err(e) if start.elapsed() > Duration::from_secs(30) => panic!("{e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let mut c = eoe::Client::new(&mut mbx);
        let p = IpParams {
            ip: Some([10, 9, 8, 7]),
            subnet: Some([255, 255, 255, 0]),
            gateway: Some([10, 9, 8, 1]),
            ..IpParams::default()
        };
        c.set_ip(&p).unwrap();
        let got = c.get_ip().unwrap();
        let frame: Vec<u8> = (0..1514u32).map(|i| (i % 251) as u8).collect();
        let t0 = Instant::now();
        for _ in 0..20 {
            c.send_frame(&frame).unwrap();
        }
        let secs = t0.elapsed().as_secs_f64();
        // Nothing comes back from a device without a network: one look, no wait.
        let none = c.poll().unwrap();
        // CoE between EoE services, on the same counter.
        let name = c2.read(1, 0x1008, 0, t).unwrap();
        let again = c.get_ip().unwrap();
        stop.request();
        (p, got, again, none, name, secs)
    });
    let out = rtcat_master::run_simple(spec, &mut ZeroOutputs).expect("run");
    let (p, got, again, none, name, secs) = worker.join().expect("client thread");
    assert_eq!(got.mac, Some([2, 0, 0, 0, 0xec, 7]));
    assert_eq!(
        (got.ip, got.subnet, got.gateway),
        (p.ip, p.subnet, p.gateway)
    );
    assert_eq!(again, got);
    assert_eq!(none, None);
    assert_eq!(name.as_slice(), b"Drive");
    assert!(out.rec.cycles > 100, "{} cycles", out.rec.cycles);
    assert_eq!(out.rec.wkc_mismatches, 0);
    assert_eq!(out.rec.not_op_cycles, 0);
    assert_eq!(out.rec.recoveries, 0);
    println!(
        "EoE during OP at 1 ms, 300 us budget: 20 frames of 1514 bytes in {secs:.2} s, \
         {:.1} KiB/s to the device ({} cycles, {} lost)",
        20.0 * 1514.0 / 1024.0 / secs,
        out.rec.cycles,
        out.rec.frames_lost
    );
}
