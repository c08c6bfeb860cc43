//! Issue 31, SM0/SM1: mailbox-less terminals whose process data sit on SM0/SM1
//! (`examples/sm01`: a digital input on SM0, an output on SM0, 16 outputs split over SM0 and
//! SM1, outputs on SM0 with inputs on SM1). Their ESI (written for rtcat) emits the shipped
//! configuration, which `config check` passes and which runs against the simulated terminals
//! in process and over veth (root) with the expected WKC; an assignment that is not the SII's
//! fails the bring-up naming the sync manager; SDOs for them are refused offline.

use ecsim::netns::root_or_skip;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");
const TERMINALS: [&str; 4] = ["DI8-SM0", "DO8-SM0", "DO16-SM01", "DIO8-SM01"];

#[path = "support/example_run.rs"]
mod example_run;
#[path = "support/sim_proc.rs"]
mod sim_proc;

// The bench runs busy-loop: one at a time on two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/sm01")
        .join(name)
}

fn rtcat(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

fn summary(out: &Path) -> rtcat_results::Summary {
    rtcat_results::Summary::read(&out.join("summary.json")).expect("summary.json")
}

/// What a run of the terminals must show: 4 subdevices, 6 bytes, WKC 8, data echoed.
fn assert_clean(out: &Path) -> rtcat_results::Summary {
    let s = summary(out);
    assert_eq!((s.subdevices, s.pdi_bytes), (4, 6));
    assert_eq!(s.wkc.expected, Some(8));
    assert_eq!(s.wkc.mismatches, 0);
    let txt = text(&out.join("summary.txt"));
    assert!(txt.contains("data errors 0"), "{txt}");
    s
}

#[test]
fn the_shipped_configuration_is_what_their_esi_emits() {
    let esi = example("SM01-TERMINALS.xml");
    let blocks: Vec<String> = TERMINALS
        .iter()
        .map(|d| {
            let o = rtcat(&["esi", esi.to_str().unwrap(), "--device", d, "--emit-config"]);
            assert!(
                o.status.success(),
                "{d}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            String::from_utf8(o.stdout).unwrap()
        })
        .collect();
    let shipped = text(&example("rtcat.toml"));
    assert!(
        shipped.ends_with(&blocks.join("\n")),
        "examples/sm01/rtcat.toml is not what `rtcat esi --emit-config` prints:\n{}",
        blocks.join("\n")
    );
    let o = rtcat(&["config", "check", example("rtcat.toml").to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cfg = rtcat_master::Config::parse(&shipped, "rtcat.toml").unwrap();
    let do16 = cfg.device[2].pdo_assign.as_ref().unwrap();
    assert_eq!(do16.sm0.as_ref().map(Vec::len), Some(8));
    assert_eq!(do16.sm1.as_ref().map(|l| l[0]), Some(0x1608));
}

fn bench_sim(cfg: &Path, out: &Path) -> Output {
    example_run::in_process(BIN.as_ref(), &example("segment.toml"), cfg, out)
}

#[test]
fn the_terminals_run_in_process_with_the_emitted_configuration() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = bench_sim(&example("rtcat.toml"), &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = assert_clean(&out);
    assert!(s.cycles > 100, "{}", s.cycles);
}

#[test]
fn an_assignment_that_is_not_the_sii_s_fails_the_bring_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let shipped = text(&example("rtcat.toml"));
    // Channels 9 and 10 of the 16-channel output swapped on SM1; then channel 9 on SM0.
    for (what, from, to, want) in [
        (
            "order",
            "sm1 = [0x1608, 0x1609,",
            "sm1 = [0x1609, 0x1608,",
            "SM1 assignment in the SII: assignment configured [0x1609, 0x1608",
        ),
        (
            "sync manager",
            "0x1607], sm1 = [0x1608, ",
            "0x1607, 0x1608], sm1 = [",
            "SM0 assignment in the SII: assignment configured [0x1600",
        ),
    ] {
        let bad = shipped.replacen(from, to, 1);
        assert_ne!(bad, shipped, "{what}: the replacement must change the file");
        let cfg = dir.path().join("bad.toml");
        std::fs::write(&cfg, bad).unwrap();
        let o = bench_sim(&cfg, &dir.path().join("out"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert!(
            err.contains("subdevice at position 2 (DO16-SM01, device[2])") && err.contains(want),
            "{what}: {err}"
        );
    }
}

/// `config from-bus` prints each terminal's SII assignment per SM in its commented block;
/// uncommented, the blocks are a configuration the master takes, with the shipped assignments.
#[test]
fn from_bus_shows_the_sii_assignment_the_master_compares() {
    let o = rtcat(&[
        "config",
        "from-bus",
        "--sim",
        "--segment",
        example("segment.toml").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed = String::from_utf8(o.stdout).unwrap();
    let mut blocks = String::new();
    let mut inside = false;
    for l in printed.lines() {
        inside = (inside || l == "# [[device]]") && !l.is_empty();
        if inside {
            blocks.push_str(l.trim_start_matches("# "));
            blocks.push('\n');
        }
    }
    let got = rtcat_master::Config::parse(&blocks, "from-bus").unwrap_or_else(|e| panic!("{e}"));
    let shipped = rtcat_master::Config::parse(&text(&example("rtcat.toml")), "rtcat.toml")
        .expect("shipped config");
    assert_eq!(got.device.len(), 4, "{blocks}");
    for (g, s) in got.device.iter().zip(&shipped.device) {
        assert_eq!(g.pdo_assign, s.pdo_assign, "{blocks}");
        assert_eq!(
            (g.input_bytes, g.output_bytes),
            (s.input_bytes, s.output_bytes)
        );
    }
}

#[test]
fn sdos_for_a_terminal_without_mailbox_are_refused_offline() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("sdo.toml");
    let shipped = text(&example("rtcat.toml"));
    std::fs::write(
        &cfg,
        format!("{shipped}\n[[device.sdo]]\nindex = 0x8000\nsub = 1\ntype = \"u8\"\nvalue = 1\n"),
    )
    .unwrap();
    let o = rtcat(&["config", "check", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("device[3].sdo[0].index = 0x8000") && err.contains("takes no SDOs"),
        "{err}"
    );
}

#[test]
fn the_terminals_run_over_veth_with_the_emitted_configuration() {
    if !root_or_skip("sm01_over_veth") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Lost frames are the machine's verdict; the data, the WKC and the states are asserted.
    ecsim::noise::within_machine_noise("SM0/SM1 terminals over veth", |_| {
        example_run::over_veth(
            BIN.as_ref(),
            "rtsm01",
            &example("segment.toml"),
            &example("rtcat.toml"),
            assert_clean,
        )
    });
}
