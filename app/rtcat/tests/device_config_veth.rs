//! `[[device]]` over a real wire: `rtcat sim --segment examples/coe/segment.toml` in one network
//! namespace, `rtcat bench --config examples/coe/rtcat.toml` in another, joined by a veth pair;
//! a power cycle of the simulated segment (dictionaries reset) is recovered with the
//! configuration re-applied. Root only.

use ecsim::netns::{VethPair, root_or_skip};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");
const TOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[path = "support/sim_proc.rs"]
mod sim_proc;
use sim_proc::SimProc;

#[test]
fn the_coe_example_over_veth_survives_a_power_cycle_with_its_configuration() {
    if !root_or_skip("device_config_over_veth") {
        return;
    }
    let net = VethPair::create("rtcatd").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("sim.sock");
    let sim = SimProc::start_segment(
        BIN.as_ref(),
        &net,
        &control,
        Some(format!("{TOP}/examples/coe/segment.toml").as_ref()),
    );

    let out = dir.path().join("out");
    let log = dir.path().join("bench.stderr");
    let mut bench = net
        .master_cmd(BIN)
        .args(["bench", "--iface", &net.master_if])
        .args([
            "--check-echo",
            "--duration",
            "6",
            "--period-us",
            "1000",
            "--config",
        ])
        .arg(format!("{TOP}/examples/coe/rtcat.toml"))
        .arg("--out")
        .arg(&out)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    sim.ctl("power-cycle");
    let status = bench.wait().unwrap();
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "{status}: {err}");
    let s = rtcat_results::Summary::read(&out.join("summary.json")).expect("summary.json");
    let ev = std::fs::read_to_string(out.join("events.log")).unwrap();
    // Every subdevice brought back on its own, its [[device]] configuration written again.
    for p in 0..3 {
        assert!(
            ev.contains(&format!("subdevice_back position={p} ")),
            "the power cycle: position {p}\n{ev}"
        );
    }
    assert_eq!(s.recoveries, 0, "{ev}");
    // The configured mapping: WKC 7 and 28 + 12 bytes (the default mapping is 11 + 3).
    assert_eq!(s.wkc.expected, Some(7));
    let txt = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(txt.contains("data errors 0"), "{txt}");
    assert_eq!((s.subdevices, s.pdi_bytes), (3, 28 + 12));
    drop(sim);
}
