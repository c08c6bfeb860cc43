//! Issue 31, the modular device: `examples/modular`, a simulated two-axis drive on one ESC whose
//! PDO set is chosen by the axis modules in its slots. Its ESI (written for rtcat) emits, for a
//! chosen module set, the configuration the master writes over CoE: the shipped one (CSP axis A,
//! CSV axis B) and another (one CSV axis) reach OP with the expected WKC and sizes in process,
//! the shipped one over veth too (root).

use ecsim::netns::root_or_skip;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");
const SHIPPED_SLOTS: [&str; 4] = ["--slot", "0=CSP-AXIS", "--slot", "1=CSV-AXIS"];

#[path = "support/example_run.rs"]
mod example_run;
#[path = "support/sim_proc.rs"]
mod sim_proc;

// The bench runs busy-loop: one at a time on two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/modular")
        .join(name)
}

fn rtcat(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn emit(slots: &[&str]) -> String {
    let esi = example("TWO-AXIS.xml");
    let mut args = vec!["esi", esi.to_str().unwrap(), "--emit-config"];
    args.extend_from_slice(slots);
    let o = rtcat(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// A run's summary: one subdevice, WKC 3 every cycle, `bytes` of process data, data echoed.
fn assert_clean(out: &Path, bytes: u32) -> rtcat_results::Summary {
    let s = rtcat_results::Summary::read(&out.join("summary.json")).expect("summary.json");
    assert_eq!((s.subdevices, s.pdi_bytes), (1, bytes));
    assert_eq!(s.wkc.expected, Some(3));
    assert_eq!(s.wkc.mismatches, 0);
    let txt = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(txt.contains("data errors 0"), "{txt}");
    s
}

#[test]
fn the_shipped_configuration_is_what_the_esi_emits_for_its_modules() {
    let block = emit(&SHIPPED_SLOTS);
    let shipped = std::fs::read_to_string(example("rtcat.toml")).unwrap();
    assert!(
        shipped.ends_with(&block),
        "examples/modular/rtcat.toml is not what `rtcat esi --emit-config` prints:\n{block}"
    );
    let cfg = rtcat_master::Config::parse(&shipped, "rtcat.toml").unwrap();
    let a = cfg.device[0].pdo_assign.as_ref().unwrap();
    assert_eq!(a.sm2.as_deref(), Some(&[0x1600, 0x1611][..]));
    assert_eq!(a.sm3.as_deref(), Some(&[0x1a00, 0x1a10][..]));
}

fn bench_sim(cfg: &Path, out: &Path) -> Output {
    example_run::in_process(BIN.as_ref(), &example("segment.toml"), cfg, out)
}

#[test]
fn module_sets_chosen_from_the_esi_run_in_process() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // The shipped set: both axes, 6 + 6 bytes each way; then axis A alone in CSV (the device's
    // default is axis A in CSP: the assignment and mapping are written).
    let one = dir.path().join("one.toml");
    std::fs::write(&one, emit(&["--slot", "0=CSV-AXIS"])).unwrap();
    for (cfg, bytes) in [(example("rtcat.toml"), 24), (one, 12)] {
        let out = dir.path().join("out");
        let o = bench_sim(&cfg, &out);
        assert!(
            o.status.success(),
            "{}: {}",
            cfg.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_clean(&out, bytes);
    }
    let text = emit(&["--slot", "0=CSV-AXIS"]);
    assert!(
        text.contains("pdo_assign = { sm2 = [0x1601], sm3 = [0x1A00] }"),
        "{text}"
    );
}

#[test]
fn the_modular_drive_runs_over_veth_with_the_emitted_configuration() {
    if !root_or_skip("modular_over_veth") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Lost frames are the machine's verdict; the data, the WKC and the sizes are asserted.
    ecsim::noise::within_machine_noise("modular drive over veth", |_| {
        example_run::over_veth(
            BIN.as_ref(),
            "rtmod",
            &example("segment.toml"),
            &example("rtcat.toml"),
            |out| assert_clean(out, 24),
        )
    });
}
