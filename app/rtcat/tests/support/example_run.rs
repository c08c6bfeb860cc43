//! An example (`examples/NAME`: a segment file and its rtcat.toml) run by `rtcat bench
//! --check-echo`: in process against the segment (`in_process`), or over a fresh veth pair
//! against `rtcat sim` answering as the segment in its namespace (`over_veth`, root only).
//! Included with `#[path]` beside `sim_proc.rs` by the tests of the examples (sm01.rs,
//! modular.rs).

use crate::sim_proc::SimProc;
use ecsim::netns::VethPair;
use std::path::Path;
use std::process::{Command, Output};

/// `bin bench --sim --segment SEGMENT --config CONFIG --check-echo` for 2 s unprivileged, the
/// results in `out`.
pub fn in_process(bin: &Path, segment: &Path, config: &Path, out: &Path) -> Output {
    Command::new(bin)
        .args([
            "bench",
            "--sim",
            "--check-echo",
            "--duration",
            "2",
            "--no-rt",
        ])
        .arg("--segment")
        .arg(segment)
        .arg("--config")
        .arg(config)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// Run `bin bench` over veth pair `tag` against `segment` with `config` for 3 s at 1 ms. `check` asserts what
/// the example must show from the output directory and returns its summary. Lost frames and a
/// bench that fails to run are the machine's verdict (`Err`, for `ecsim::noise`); the data, the
/// WKC, the mode and the cycle count are asserted.
pub fn over_veth(
    bin: &Path,
    tag: &str,
    segment: &Path,
    config: &Path,
    check: impl Fn(&Path) -> rtcat_results::Summary,
) -> Result<(), String> {
    let net = VethPair::create(tag).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sim = SimProc::start_segment(bin, &net, &dir.path().join("sim.sock"), Some(segment));
    let out = dir.path().join("out");
    let o = net
        .master_cmd(bin)
        .args(["bench", "--iface", &net.master_if, "--check-echo"])
        .args(["--duration", "3", "--period-us", "1000", "--config"])
        .arg(config)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    ecsim::noise::exited_ok(
        "rtcat bench over veth",
        o.status,
        &String::from_utf8_lossy(&o.stderr),
    )?;
    let s = check(&out);
    assert_eq!(s.mode, rtcat_results::Mode::Iface);
    assert!(s.cycles > 2000, "{}", s.cycles);
    drop(sim);
    ecsim::noise::ensure(s.frames_lost * 100 < s.cycles, || {
        format!("{} lost of {}", s.frames_lost, s.cycles)
    })
}
