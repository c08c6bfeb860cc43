//! The CiA 402 demo with distributed clocks over a real wire: `rtcat sim --segment
//! examples/cia402/segment.toml` in one network namespace, `rtcat bench --config
//! examples/cia402/rtcat.toml` in another, joined by a veth pair. Both axes are enabled and
//! moved, the phase lock holds, the summary has the `axes` list and the `dc` object. Root only.

use ecsim::netns::{VethPair, root_or_skip};
use ecsim::noise::ensure;

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");
const TOP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[path = "support/sim_proc.rs"]
mod sim_proc;
use sim_proc::SimProc;

#[test]
fn the_cia402_demo_with_dc_over_veth() {
    if !root_or_skip("dc_over_veth") {
        return;
    }
    // Whether the lock and both axes made it over this VM's wire is the machine's verdict as
    // much as the code's (a debug build over veth on two shared cores).
    ecsim::noise::within_machine_noise("the CiA 402 demo with DC over veth", |_| demo_run());
}

/// One run of the demo over veth: correctness asserted, the machine-dependent results returned.
fn demo_run() -> Result<(), String> {
    let net = VethPair::create("rtcatdc").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("sim.sock");
    let sim = SimProc::start_segment(
        BIN.as_ref(),
        &net,
        &control,
        Some(format!("{TOP}/examples/cia402/segment.toml").as_ref()),
    );
    // The demo's configuration with two changes for this machine's wire, not the product's:
    // the debug build's round trip over veth on a shared 2-core VM (P50 0.4-0.7 ms, P99 above
    // 1 ms, measured) does not fit a 1 ms cycle, so the run cycles at 2 ms; and a frame lost
    // while an axis is being enabled quick-stops it, which for axis x (`stay_disabled`) is for
    // good: here both axes re-enable, so the test checks DC and CiA 402 over a real wire
    // rather than whether this VM lost a frame in the first 50 ms. The policy itself is tested
    // in process (rtcat-master's cia402 tests).
    let demo = std::fs::read_to_string(format!("{TOP}/examples/cia402/rtcat.toml")).unwrap();
    assert!(demo.contains("after_recovery = \"stay_disabled\""));
    let cfg = dir.path().join("rtcat.toml");
    std::fs::write(
        &cfg,
        demo.replace(
            "after_recovery = \"stay_disabled\"",
            "after_recovery = \"re_enable\"",
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let log = dir.path().join("bench.stderr");
    let status = net
        .master_cmd(BIN)
        .args([
            "bench",
            "--iface",
            &net.master_if,
            "--duration",
            "6",
            "--period-us",
            "2000",
            "--config",
        ])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .stderr(std::fs::File::create(&log).unwrap())
        .status()
        .unwrap();
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    // A bring-up that times out on a loaded machine is its verdict, retried; any other failure
    // is a defect.
    ecsim::noise::exited_ok("rtcat bench over veth", status, &err)?;
    let s = rtcat_results::Summary::read(&out.join("summary.json")).expect("summary.json");
    let ev = std::fs::read_to_string(out.join("events.log")).unwrap_or_default();
    let dc = s.dc.as_ref().expect("a dc object");
    // The lock needs a cycle that keeps its deadlines: on a machine too loaded for that (more
    // than 2 % of the cycles missed — other builds on a shared 2-core CI runner) it is not
    // asserted here, only reported; the in-process lock tests (rtcat-master tests/dc.rs) and
    // the rest of this test still run.
    let kept_the_cycle = s.missed_deadlines * 50 <= s.cycles;
    if kept_the_cycle {
        // The lock reached (not necessarily held at the very last cycle: ten late wake-ups in
        // a row make it "lost" for a moment).
        ensure(ev.contains("dc_lock state=locked"), || {
            format!("lock {}: {ev}", dc.lock_state)
        })?;
    } else {
        eprintln!(
            "over veth: {} of {} cycles missed their deadline; the lock ({}) is not asserted",
            s.missed_deadlines, s.cycles, dc.lock_state
        );
    }
    assert_eq!(dc.sync0_period_ns, 2_000_000);
    // Every cycle in OP measures its phase (how many cycles a loaded machine manages in 6 s
    // varies: 1400 to 6000 here).
    assert!(
        dc.phase_error_ns.count > 0
            && (!kept_the_cycle || dc.phase_error_ns.count * 10 >= s.cycles * 9),
        "{} cycles, {:?}",
        s.cycles,
        dc.phase_error_ns
    );
    // The median cycle is on the grid; single cycles of a loaded machine may not be.
    if kept_the_cycle {
        ensure(dc.phase_error_ns.p50 < 50_000, || {
            format!("median off the grid: {:?}", dc.phase_error_ns)
        })?;
    }
    // Drive 2's clock is compared with drive 1's (the reference) and sampled.
    assert_eq!(dc.subdevices.len(), 1, "{:?}", dc.subdevices);
    assert!(dc.subdevices[0].last_ns.is_some(), "{:?}", dc.subdevices);
    let axes = s.axes.as_ref().expect("axes");
    assert_eq!(axes.len(), 2);
    for a in axes {
        assert!(a.following_error_counts.is_some(), "{}", a.name);
    }
    let txt = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(txt.contains("distributed clocks: SYNC0"), "{txt}");
    for a in axes {
        ensure(
            a.state_reached.as_deref() == Some("operation enabled") && a.faults == 0,
            || {
                format!(
                    "axis {} reached {:?} with {} faults: {ev}",
                    a.name, a.state_reached, a.faults
                )
            },
        )?;
    }
    eprintln!(
        "over veth: |phase error| P50 {} P99 {} P99.9 {} max {} ns, drift {:+.2} ppm",
        dc.phase_error_ns.p50,
        dc.phase_error_ns.p99,
        dc.phase_error_ns.p999,
        dc.phase_error_ns.max,
        dc.drift_ppm
    );
    drop(sim);
    Ok(())
}
