//! Bring-up to OP of 32 and 64 CoE drives with the simulator's ESC timing model
//! (`cargo bench -p rtcat-master --features sim --bench bringup_fast`), in eleven modes
//! interleaved in one run: with ethercrab's bring-up, everything one device after another
//! (`[bus] sii_in_flight = 1`, `config_in_flight = 1`), cold (no `[bus] sii_cache` file) and
//! warm (the file the cold run just wrote: a restart); the SII 8 at a time
//! (`RTCAT_BENCH_IN_FLIGHT`) with the SDO configuration still one after another, warm; both 8 at
//! a time, cold and warm; and rtcat's own bring-up (`[bus] bring_up = "rtcat"`), 8 at a time,
//! cold and warm; then both bring-ups, 8 at a time, cold and warm, with distributed clocks (`[dc]`
//! as `examples/cia402` has it: SYNC0 every 1 ms, the CoE sync modes, 10 000 static sync
//! frames; each drive accepts OP only after 3 frames on time since SYNC0 started). Prints
//! P50 / max of the bring-up over `RTCAT_BENCH_REPS` repetitions (default 3), then the P50 of
//! each phase the master logs (the scan to PRE-OP — ethercrab's with its DC initialisation —,
//! rtcat's DC set-up, the SII, the configuration and mapping read-back, the process data
//! sizing — ethercrab's over CoE, or rtcat's registers —, SAFE-OP and OP); asserts nothing
//! about times.
//! `RTCAT_BENCH_DRIVES=8,32` other segment sizes; `RTCAT_BENCH_KINDS=8` drives of 8 revisions
//! (8 SIIs to read cold); `RTCAT_BENCH_LOG=1` the master's log.
//!
//! The drives are `examples/cia402`'s SERVO402-SIM, each with its own serial. Timing per device (docs/NOTES.md §7.4): an SII command 680 µs (ET1100 Table 79),
//! INIT -> PRE-OP 10 ms, PRE-OP -> SAFE-OP 20 ms, SAFE-OP -> OP 10 ms, down 2 ms, mailbox
//! answer 1 ms. Configuration per drive (`[[device]]` by identity): the CSP mapping written to
//! 0x1600 (5 entries) and 0x1A00 (7), assigned in 0x1C12 / 0x1C13, two startup SDOs: 24 SDO
//! writes, then the mapping read back (18 SDO reads).
//!
//! Bring-up time: from `run()` to the segment in OP (the run's `on_ready`), the scan, every SII
//! read, the configuration, the layout read and the AL transitions included.

use ecsim::{EscTiming, Faults, SegmentSpec};
use rtcat_master::config::BringUp;
use rtcat_master::{Application, Config, Cycle, RunSpec, Stop, Target};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const SEGMENT: &str = include_str!("../../../examples/cia402/segment.toml");

const CONFIG: &str = r#"
[bus]
interface = "sim"
init_pdu_timeout_ms = 1000
init_eeprom_timeout_ms = 1000

[cycle]
period_us = 1000

[[device]]
vendor_id = 0x00000766
product_id = 0x00040002
name = "drive"
input_bytes = 19
output_bytes = 13
pdo_assign = { sm2 = [0x1600], sm3 = [0x1A00] }

[[device.pdo_map]]
index = 0x1600
entries = [
  { entry = "0x6040:00:16", name = "Controlword" },
  { entry = "0x6060:00:8", name = "Modes of operation" },
  { entry = "0x607A:00:32", name = "Target position" },
  { entry = "0x60FF:00:32", name = "Target velocity" },
  { entry = "0x6071:00:16", name = "Target torque" },
]

[[device.pdo_map]]
index = 0x1A00
entries = [
  { entry = "0x6041:00:16", name = "Statusword" },
  { entry = "0x6061:00:8", name = "Modes of operation display" },
  { entry = "0x6064:00:32", name = "Position actual value" },
  { entry = "0x606C:00:32", name = "Velocity actual value" },
  { entry = "0x6077:00:16", name = "Torque actual value" },
  { entry = "0x60F4:00:32", name = "Following error actual value" },
  { entry = "0x603F:00:16", name = "Error code" },
]

[[device.sdo]]
index = 0x6060
sub = 0
type = "i8"
value = 8

[[device.sdo]]
index = 0x6085
sub = 0
type = "u32"
value = 500000
"#;

/// The timing of docs/NOTES.md §7.4 (with DC: OP after 3 frames on time).
fn timing(dc: bool) -> EscTiming {
    EscTiming {
        dc_op_frames: if dc { 3 } else { 0 },
        sii_ns: 680_000,
        init_preop_ns: 10_000_000,
        preop_safeop_ns: 20_000_000,
        safeop_op_ns: 10_000_000,
        down_ns: 2_000_000,
        mailbox_ns: 1_000_000,
        ..EscTiming::default()
    }
}

/// `n` drives of `kinds` revisions (`RTCAT_BENCH_KINDS`, default 1): as many identities, each
/// with its own SII to read cold.
fn segment(n: usize, kinds: usize, dc: bool) -> SegmentSpec {
    let base = SegmentSpec::from_toml(SEGMENT).expect("examples/cia402/segment.toml");
    let mut s = base.clone();
    s.devices = (0..n)
        .map(|i| {
            let mut d = base.devices[0].clone();
            d.serial = 1000 + i as u32;
            d.revision = 1 + (i % kinds.max(1)) as u32;
            d
        })
        .collect();
    s.name = format!("{n} drives");
    s.with_dc(dc).with_timing(timing(dc))
}

/// Stops at the first cycle.
struct First(Stop);

impl Application for First {
    fn cycle(&mut self, _cx: &mut Cycle<'_>) {
        self.0.request();
    }
}

fn now_ns() -> u64 {
    rtcat_master::clock::now_ns()
}

/// The phases of one bring-up as the master logs them, in ms: scan, SII, configuration and
/// mapping, process data sizing, SAFE-OP and OP, rtcat's DC static drift compensation (beside
/// the steps in PRE-OP, not after them).
type Phases = [f64; 6];

const PHASES: [&str; 6] = ["scan", "SII", "config", "sizing", "SO+OP", "DC"];

/// One bring-up; its time to OP and its phases in ms.
fn one(
    n: usize,
    kinds: usize,
    (sii_in_flight, config_in_flight): (u16, u16),
    (bring_up, dc): (BringUp, bool),
    cache: &std::path::Path,
) -> Result<(f64, Phases), String> {
    let mut cfg = Config::parse(CONFIG, "bench").map_err(|e| e.to_string())?;
    cfg.bus.bring_up = bring_up;
    cfg.dc.enabled = dc;
    cfg.bus.sii_in_flight = sii_in_flight;
    cfg.bus.config_in_flight = config_in_flight;
    cfg.bus.sii_cache = Some(cache.to_path_buf());
    let stop = Stop::new();
    let ready = Arc::new(AtomicU64::new(0));
    let r2 = ready.clone();
    let mut spec = RunSpec::new(
        cfg,
        Target::Sim {
            spec: segment(n, kinds, dc),
            faults: Faults::new(),
        },
        stop.clone(),
    );
    spec.no_rt = true;
    spec.duration = Some(std::time::Duration::from_secs(120));
    spec.on_ready = Some(Box::new(move || r2.store(now_ns(), Ordering::Relaxed)));
    let t0 = now_ns();
    take_phases();
    rtcat_master::run_simple(spec, &mut First(stop)).map_err(|e| e.to_string())?;
    let t = ready.load(Ordering::Relaxed);
    if t == 0 {
        return Err("never in OP".into());
    }
    Ok(((t - t0) as f64 / 1e6, take_phases()))
}

/// What the master's log said of the last bring-up's phases.
static LOGGED: std::sync::Mutex<Phases> = std::sync::Mutex::new([f64::NAN; 6]);

fn take_phases() -> Phases {
    std::mem::replace(
        &mut *LOGGED.lock().unwrap_or_else(|p| p.into_inner()),
        [f64::NAN; 6],
    )
}

/// The numbers before " ms" in a log line, in order.
fn millis(m: &str) -> Vec<f64> {
    m.split(" ms")
        .filter_map(|part| part.rsplit(' ').next()?.parse().ok())
        .collect()
}

/// Keeps the phase times the master logs (`bring-up: scan …` — rtcat's with its mailboxes and
/// PRE-OP apart, counted together as ethercrab's scan to PRE-OP is —, `SII cache: … SII N ms,
/// configuration and mapping N ms`, `bring-up: process data sizing … N ms, SAFE-OP and OP N
/// ms`).
fn keep_phases(m: &str) {
    let mut p = LOGGED.lock().unwrap_or_else(|p| p.into_inner());
    let v = millis(m);
    if m.starts_with("bring-up: scan") && !v.is_empty() {
        p[0] = v.iter().sum();
    } else if m.starts_with("SII cache:") && v.len() >= 2 {
        (p[1], p[2]) = (v[0], v[1]);
    } else if m.starts_with("bring-up: process data sizing") && v.len() >= 2 {
        (p[3], p[4]) = (v[0], v[1]);
    } else if m.starts_with("bring-up: DC static drift compensation") && v.len() == 1 {
        p[5] = v[0];
    }
}

fn p50_max(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.sort_by(f64::total_cmp);
    format!("{:.0} / {:.0}", v[v.len() / 2], v[v.len() - 1])
}

/// Keeps the phase times of the master's log; with `RTCAT_BENCH_LOG=1` prints it on stderr.
struct Phased {
    print: std::sync::atomic::AtomicBool,
}

impl log::Log for Phased {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let m = r.args().to_string();
            keep_phases(&m);
            if self.print.load(Ordering::Relaxed) {
                eprintln!("{}: {m}", r.level());
            }
        }
    }
    fn flush(&self) {}
}

static PHASED: Phased = Phased {
    print: std::sync::atomic::AtomicBool::new(false),
};

fn main() {
    PHASED.print.store(
        std::env::var_os("RTCAT_BENCH_LOG").is_some(),
        Ordering::Relaxed,
    );
    if log::set_logger(&PHASED).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    let sizes: Vec<usize> = std::env::var("RTCAT_BENCH_DRIVES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![32, 64]);
    let ovl: u16 = std::env::var("RTCAT_BENCH_IN_FLIGHT")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&r| r > 1)
        .unwrap_or(8);
    let kinds: usize = std::env::var("RTCAT_BENCH_KINDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(1);
    let reps: usize = std::env::var("RTCAT_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(3);
    let dir = tempfile::tempdir().expect("temporary directory");
    println!(
        "bring-up to OP, simulated CiA 402 drives with ESC timing (SII 680 µs/command, \
         transitions 10/20/10 ms, mailbox 1 ms), {kinds} revision(s), {ovl} in flight when \
         overlapped, {reps} repetitions, P50 / max in ms; then the P50 of each logged phase"
    );
    // (name, (SII in flight, configuration in flight), warm, (bring-up, DC)): columns in that
    // order.
    let (e, r) = (BringUp::Ethercrab, BringUp::Rtcat);
    let modes = [
        ("all sequential, cold", (1u16, 1u16), false, (e, false)),
        ("all sequential, warm", (1, 1), true, (e, false)),
        ("SII ovl, config seq, warm", (ovl, 1), true, (e, false)),
        ("all overlapped, cold", (ovl, ovl), false, (e, false)),
        ("all overlapped, warm", (ovl, ovl), true, (e, false)),
        ("rtcat's bring-up, cold", (ovl, ovl), false, (r, false)),
        ("rtcat's bring-up, warm", (ovl, ovl), true, (r, false)),
        ("DC, all overlapped, cold", (ovl, ovl), false, (e, true)),
        ("DC, all overlapped, warm", (ovl, ovl), true, (e, true)),
        ("DC, rtcat's, cold", (ovl, ovl), false, (r, true)),
        ("DC, rtcat's, warm", (ovl, ovl), true, (r, true)),
    ];
    for n in sizes {
        let mut t: Vec<Vec<(f64, Phases)>> = vec![Vec::new(); modes.len()];
        let mut failed = Vec::new();
        for rep in 0..reps {
            for (k, &(name, in_flight, warm, bring_up)) in modes.iter().enumerate() {
                // Warm runs use the file the cold run of the same SII mode (just before) wrote;
                // the one warm run without a cold run before it uses the sequential one's.
                let file = if in_flight == (ovl, 1) {
                    (1, 1)
                } else {
                    in_flight
                };
                // The DC devices' SIIs are others (their DC features): files of their own.
                let cache = dir.path().join(format!(
                    "{n}-{}-{:?}-{}-{rep}.cache",
                    file.0, bring_up.0, bring_up.1
                ));
                if !warm {
                    let _ = std::fs::remove_file(&cache);
                }
                match one(n, kinds, in_flight, bring_up, &cache) {
                    Ok(r) => t[k].push(r),
                    Err(e) => failed.push(format!("{name}: {e}")),
                }
            }
        }
        let p50 = |v: Vec<f64>| {
            let mut v: Vec<f64> = v.into_iter().filter(|x| !x.is_nan()).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
        };
        println!(
            "\n{n} drives{}",
            if failed.is_empty() {
                String::new()
            } else {
                format!(" ({} failed: {})", failed.len(), failed[0])
            }
        );
        print!("{:>28} {:>13}", "mode", "total");
        for p in PHASES {
            print!(" {p:>7}");
        }
        println!();
        for (k, (name, ..)) in modes.iter().enumerate() {
            print!(
                "{name:>28} {:>13}",
                p50_max(t[k].iter().map(|r| r.0).collect())
            );
            for i in 0..PHASES.len() {
                print!(" {:>7.0}", p50(t[k].iter().map(|r| r.1[i]).collect()));
            }
            println!();
        }
        let med = |k: usize| p50(t[k].iter().map(|r| r.0).collect());
        println!(
            "{:>28} config seq/ovl (warm) {:.2}, total seq/ovl (warm) {:.2}, cold/warm (ovl) {:.2}",
            "",
            p50(t[2].iter().map(|r| r.1[2]).collect()) / p50(t[4].iter().map(|r| r.1[2]).collect()),
            med(2) / med(4),
            med(3) / med(4)
        );
        println!(
            "{:>28} ethercrab's/rtcat's bring-up: cold {:.2}, warm {:.2}; with DC cold {:.2}, \
             warm {:.2}",
            "",
            med(3) / med(5),
            med(4) / med(6),
            med(7) / med(9),
            med(8) / med(10)
        );
    }
}
