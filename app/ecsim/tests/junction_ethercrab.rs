//! A segment with a junction: a coupler whose port 3 leads to a branch of two terminals and
//! whose port 1 continues the line to two drives (the layout of a coupler with E-bus terminals
//! and a cable to the next station). An unmodified ethercrab 0.7.1 MainDevice finds the
//! devices in processing order and computes each one's propagation delay from the port receive
//! times; they must come to the simulator's own arrival times, branch or not.

use ecsim::inproc::InprocDriver;
use ecsim::{Faults, SegmentSpec, SimPort};
use ethercrab::std::ethercat_now;
use ethercrab::{MainDevice, MainDeviceConfig, PduStorage, Timeouts};
use futures_lite::future::block_on;
use std::thread;
use std::time::Duration;

const FRAMES: usize = 16;
const FRAME_DATA: usize = PduStorage::element_size(1100);

const SEGMENT: &str = "\
[[device]]\nname = \"COUPLER\"\noutputs = 1\ninputs = 1\ndc = true\nports = 3\nhop_ns = 700\n\
[[device]]\nname = \"TERM-A\"\noutputs = 2\ninputs = 2\ndc = true\nhop_ns = 300\n\
[[device]]\nname = \"TERM-B\"\noutputs = 2\ninputs = 2\ndc = true\nhop_ns = 300\n\
[[device]]\nname = \"DRIVE-X\"\noutputs = 4\ninputs = 4\ndc = true\nupstream = [0, 1]\nhop_ns = 900\n\
[[device]]\nname = \"DRIVE-Y\"\noutputs = 4\ninputs = 4\ndc = true\n";

#[test]
fn ethercrab_finds_the_branch_and_its_propagation_delays() {
    let spec = SegmentSpec::from_toml(SEGMENT).expect("valid segment");
    assert_eq!(
        spec.devices[1].upstream,
        Some((0, 3)),
        "the coupler's first free port"
    );
    assert_eq!(spec.devices[2].upstream, Some((1, 1)));
    assert_eq!(spec.devices[3].upstream, Some((0, 1)));
    let storage: &'static PduStorage<FRAMES, FRAME_DATA> = Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().expect("split once");
    let port = SimPort::with_faults(spec, Faults::new());
    let driver = InprocDriver::new(tx, rx, port);
    let driver_thread = thread::spawn(move || driver.run());
    let timeouts = Timeouts {
        eeprom: Duration::from_millis(500),
        pdu: Duration::from_millis(500),
        ..Timeouts::default()
    };
    let md = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
    let group = block_on(md.init_single_group::<8, 64>(ethercat_now)).expect("init");
    let found: Vec<(String, u32)> = group
        .iter(&md)
        .map(|sd| (sd.name().to_string(), sd.propagation_delay()))
        .collect();
    drop(group);
    // SAFETY: the group is not used again.
    unsafe { md.release_all() };
    let (_tx, _rx, port) = driver_thread.join().expect("driver thread");
    let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["COUPLER", "TERM-A", "TERM-B", "DRIVE-X", "DRIVE-Y"],
        "processing order"
    );
    let arrivals: Vec<u64> = port
        .segment()
        .devices()
        .iter()
        .map(|d| d.arrival_ns())
        .collect();
    // By hand: TERM-A 700 after the coupler; TERM-B 300 after it; the frame comes back through
    // the coupler's port 3 after 2 x 700 + 2 x 300 = 2000 ns and reaches DRIVE-X 700 later;
    // DRIVE-Y 900 after DRIVE-X.
    assert_eq!(arrivals, [0, 700, 1000, 2700, 3600]);
    for ((name, delay), arrival) in found.iter().zip(&arrivals) {
        let d = i64::from(*delay) - *arrival as i64;
        assert!(
            d.abs() <= 2,
            "{name}: ethercrab's propagation delay {delay} ns, the simulator's {arrival} ns"
        );
    }
}
