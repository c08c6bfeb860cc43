//! The SII cache and the overlapped SII reads against the simulated CoE segment of
//! `examples/coe`: the cache missed, then hit across a restart (`[bus] sii_cache`), a device of
//! another revision read (a miss), a device whose SII changed under the same identity read again
//! (invalidated), a damaged file ignored and replaced, a segment recovery checking instead of
//! reading; and a larger segment brought up with its
//! SII read and its devices configured 8 at a time giving the same layout and dictionary
//! contents as one at a time, and the same error naming the same device when one refuses its
//! configuration.

use ecsim::{Faults, SegmentSpec};
mod support;

use rtcat_master::coe::{Client, Geometry, Timeouts};
use rtcat_master::sii_cache::SiiCache;
use rtcat_master::{AppError, Application, Config, Cycle, Layout, RunSpec, Setup, Stop, Target};
use std::sync::Mutex;
use std::time::Duration;
use support::SetupPort;
use support::coe_example::{self, CONFIG, segment};

/// The tests share the machine's two CPUs and the log capture: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The master's "SII cache: …" log lines.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        let m = r.args().to_string();
        if m.starts_with("SII cache") {
            LINES.lock().unwrap_or_else(|p| p.into_inner()).push(m);
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture;

fn capture() -> Vec<String> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        log::set_logger(&CAPTURE).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Info);
    });
    std::mem::take(&mut *LINES.lock().unwrap_or_else(|p| p.into_inner()))
}

/// (checked and used, read, read again) of the bring-ups since the last call.
fn counts() -> Vec<(u32, u32, u32)> {
    capture()
        .iter()
        .filter(|m| m.contains("checked and used"))
        .map(|m| {
            let n: Vec<u32> = m
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            (n[0], n[1], n[2])
        })
        .collect()
}

/// The example configuration (the servo by identity, the segment checks dropped), the SII
/// reads and the SDO configuration alike one at a time or `in_flight` overlapped.
fn config(text: &str, in_flight: u16) -> Config {
    let mut c = coe_example::config(text);
    c.bus.sii_in_flight = in_flight;
    c.bus.config_in_flight = in_flight;
    c
}

/// The objects the configuration writes (assignments, the servo's mapping and mode, the AI4's
/// filter) and their neighbours, read back from every device: what the devices hold after the
/// PRE-OP configuration, or the abort.
const READ: [(u16, u8); 15] = [
    (0x1c12, 0),
    (0x1c12, 1),
    (0x1c13, 0),
    (0x1c13, 1),
    (0x1c13, 2),
    (0x1c13, 4),
    (0x1600, 0),
    (0x1600, 1),
    (0x1600, 4),
    (0x1a00, 0),
    (0x1a00, 1),
    (0x1a00, 4),
    (0x6060, 0),
    (0x8000, 6),
    (0x8000, 7),
];

/// (position, index, subindex, value read or the abort).
type Read = (usize, u16, u8, Result<Vec<u8>, String>);

#[derive(Default)]
struct Probe {
    stop: Stop,
    layout: Option<Layout>,
    dictionary: Vec<Read>,
    read_back: bool,
    cycles: u32,
}

impl Application for Probe {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.layout = Some(setup.layout().clone());
        if self.read_back {
            for p in 0..setup.subdevices().len() {
                let mut port = SetupPort {
                    setup,
                    position: p as u16,
                };
                let g = Geometry::read(&mut port, p as u16).expect("mailbox geometry");
                let mut c = Client::new(port, p as u16, g, Timeouts::default());
                for (i, s) in READ {
                    self.dictionary
                        .push((p, i, s, c.upload(i, s).map_err(|e| e.to_string())));
                }
            }
        }
        Ok(())
    }

    fn cycle(&mut self, _cx: &mut Cycle<'_>) {
        self.cycles += 1;
        if self.cycles >= 20 {
            self.stop.request();
        }
    }
}

fn run(seg: SegmentSpec, cfg: Config, probe: &mut Probe) -> rtcat_master::Result<()> {
    let mut spec = RunSpec::new(
        cfg,
        Target::Sim {
            spec: seg,
            faults: Faults::new(),
        },
        probe.stop.clone(),
    );
    spec.no_rt = true;
    spec.duration = Some(Duration::from_secs(60));
    rtcat_master::run_simple(spec, probe).map(|_| ())
}

fn up(seg: SegmentSpec, cfg: &Config) -> Layout {
    let mut p = Probe::default();
    run(seg, cfg.clone(), &mut p).expect("bring-up");
    p.layout.expect("configure ran")
}

#[test]
fn the_cache_is_used_across_restarts_only_for_the_same_sii() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").join("sii.cache");
    let mut cfg = config(CONFIG, 8);
    cfg.bus.sii_cache = Some(path.clone());
    capture();

    // Cold: three identities, three full reads, written to the file.
    let cold = up(segment(3), &cfg);
    assert_eq!(counts(), vec![(0, 3, 0)]);
    let ids = |l: &Layout| -> Vec<(u32, u32, u32)> {
        l.subdevices
            .iter()
            .map(|s| {
                (
                    s.identity.vendor_id,
                    s.identity.product_code,
                    s.identity.revision,
                )
            })
            .collect()
    };
    let mut on_disk = SiiCache::load(&path).keys();
    on_disk.sort();
    let mut want = ids(&cold);
    want.sort();
    assert_eq!(on_disk, want);

    // Warm (a restart: a new run reads the file): every device checked and served.
    let warm = up(segment(3), &cfg);
    assert_eq!(counts(), vec![(3, 0, 0)]);
    assert_eq!(warm, cold, "the same layout from the cache");

    // Another serial of the same model: the model's SII, checked, is used.
    let mut seg = segment(3);
    seg.devices[1].serial = 77;
    up(seg, &cfg);
    assert_eq!(counts(), vec![(3, 0, 0)]);

    // A device of another revision: its SII is read, the others still come from the cache.
    let mut seg = segment(3);
    seg.devices[1].revision += 1;
    let other = up(seg, &cfg);
    assert_eq!(counts(), vec![(2, 1, 0)]);
    assert_eq!(SiiCache::load(&path).keys().len(), 4);
    assert_eq!(
        other.subdevices[1].identity.revision,
        cold.subdevices[1].identity.revision + 1
    );

    // The same identity with another SII (a longer device name: the strings category grows):
    // the check sees it, the SII is read again and replaces the entry.
    let mut seg = segment(3);
    seg.devices[0].name.push_str("-B");
    let renamed = up(seg.clone(), &cfg);
    assert_eq!(counts(), vec![(2, 0, 1)]);
    assert_eq!(
        renamed.subdevices[0].name,
        format!("{}-B", cold.subdevices[0].name)
    );
    up(seg, &cfg);
    assert_eq!(
        counts(),
        vec![(3, 0, 0)],
        "the replaced entry serves the next start"
    );

    // A damaged file: ignored (logged), everything read, the file replaced by a good one.
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let again = up(segment(3), &cfg);
    assert!(
        capture()
            .iter()
            .any(|m| m.contains("ignored (CRC mismatch")),
        "the refusal is logged with its reason"
    );
    assert_eq!(again, cold);
    let _ = counts();
    assert_eq!(SiiCache::load(&path).keys().len(), 3);
}

#[test]
fn identical_devices_share_one_read_and_each_is_checked() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // 6 devices of 3 identities, no file: one full read per identity, the other three checked.
    capture();
    up(segment(6), &config(CONFIG, 8));
    assert_eq!(counts(), vec![(3, 3, 0)]);
}

#[test]
fn overlapped_sii_reads_give_the_layout_and_configuration_of_sequential_ones() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut got = Vec::new();
    for in_flight in [1, 8] {
        let mut p = Probe {
            read_back: true,
            ..Probe::default()
        };
        run(segment(12), config(CONFIG, in_flight), &mut p).expect("bring-up");
        assert!(
            p.dictionary
                .iter()
                .any(|(_, i, _, r)| *i == 0x6060 && r.is_ok()),
            "the servos' mode was read"
        );
        got.push((p.layout.expect("configure ran"), p.dictionary));
    }
    assert_eq!(got[0].0, got[1].0, "layout");
    assert_eq!(
        got[0].1, got[1].1,
        "the devices' dictionaries after configuration"
    );
    // The configuration did something: the servo entry's mapping (first entry 0x6040:00:16)
    // is in every servo.
    for (p, i, s, r) in &got[1].1 {
        if (*i, *s) == (0x1600, 1) && p % 3 == 2 {
            assert_eq!(
                r.as_deref(),
                Ok(&0x6040_0010u32.to_le_bytes()[..]),
                "position {p}"
            );
        }
    }
}

#[test]
fn a_refused_configuration_names_the_same_device_overlapped_or_not() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Every servo (positions 2, 5, 8, 11) refuses an object it does not have.
    let text = CONFIG.replace(
        "[[device.sdo]]\nindex = 0x6085",
        "[[device.sdo]]\nindex = 0x2000\nsub = 0\ntype = \"u16\"\nvalue = 5\n\n\
         [[device.sdo]]\nindex = 0x6085",
    );
    assert_ne!(text, CONFIG);
    let mut errors = Vec::new();
    for in_flight in [1, 8] {
        let mut p = Probe::default();
        let e = run(segment(12), config(&text, in_flight), &mut p)
            .expect_err("the servos refuse 0x2000");
        assert!(p.layout.is_none(), "configure must not run");
        errors.push(e.to_string());
    }
    assert!(
        errors[1].contains("subdevice at position 2 (SERVO-COE") && errors[1].contains("0x2000:00"),
        "{}",
        errors[1]
    );
    assert_eq!(errors[0], errors[1]);
}

/// Power-cycles the whole simulated segment at cycle 30 of the first bring-up and stops 20
/// cycles into the second.
struct PowerCycle {
    stop: Stop,
    faults: Faults,
    configured: u32,
    cycles: u32,
}

impl Application for PowerCycle {
    fn configure(&mut self, _setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.configured += 1;
        self.cycles = 0;
        Ok(())
    }

    fn cycle(&mut self, _cx: &mut Cycle<'_>) {
        self.cycles += 1;
        if self.configured == 1 && self.cycles == 30 {
            self.faults.apply(ecsim::FaultCommand::PowerCycle);
        }
        if self.configured >= 2 && self.cycles >= 20 {
            self.stop.request();
        }
    }
}

#[test]
fn a_segment_recovery_checks_the_sii_instead_of_reading_it() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut cfg = config(CONFIG, 8);
    cfg.health.recovery = rtcat_master::RecoveryPolicy::Segment;
    let faults = Faults::new();
    let mut app = PowerCycle {
        stop: Stop::new(),
        faults: faults.clone(),
        configured: 0,
        cycles: 0,
    };
    let mut spec = RunSpec::new(
        cfg,
        Target::Sim {
            spec: segment(3),
            faults,
        },
        app.stop.clone(),
    );
    spec.no_rt = true;
    spec.duration = Some(Duration::from_secs(60));
    capture();
    rtcat_master::run_simple(spec, &mut app).expect("run");
    assert_eq!(app.configured, 2, "one recovery");
    // No file: the first bring-up reads, the recovery (a new bring-up in the same run) checks.
    assert_eq!(counts(), vec![(0, 3, 0), (3, 0, 0)]);
}
