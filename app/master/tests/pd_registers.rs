//! rtcat's own sync manager and FMMU registers (`pd_registers`, what a hot-connect member that
//! was absent at bring-up gets) against what ethercrab 0.7.1 wrote into the same devices: the
//! I/O line of `examples/segment-io.toml` (no mailbox, SII PDOs), the CoE example (mailbox,
//! PDOs assigned and mapped over CoE by its `[[device]]` entries) and the DC drives of
//! `examples/cia402` (mapped by their axes), each read back in OP through
//! the master's register queue and compared byte for byte (the SMs' read-only status byte
//! aside). The SII is the simulator's image of each device, the mapping the bring-up's layout.
//!
//! Not timing-dependent in its verdict: a run that did not reach OP on a loaded machine is
//! retried (`ecsim::noise`), the comparison is asserted once.

mod support;

use ecsim::noise::within_machine_noise;
use ecsim::{Faults, SegmentSpec};
use rtcat_master::acyclic::{SdoClient, sdo_queue};
use rtcat_master::pd_registers::{self, Logical};
use rtcat_master::sii::Sii;
use rtcat_master::{AppError, Application, Config, Cycle, Layout, Setup, Stop};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static SERIAL: Mutex<()> = Mutex::new(());

/// Keeps the bring-up's layout and says when every subdevice has been valid and in OP for a
/// while.
struct Keep {
    layout: Arc<Mutex<Option<Layout>>>,
    good: u32,
    up: Arc<AtomicBool>,
}

impl Application for Keep {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        *self.layout.lock().unwrap_or_else(|e| e.into_inner()) = Some(setup.layout().clone());
        Ok(())
    }
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let well = cx
            .status
            .subdevices
            .iter()
            .all(|d| d.data_valid && d.in_op());
        self.good = if well { self.good + 1 } else { 0 };
        if self.good >= 20 {
            self.up.store(true, Ordering::Release);
        }
    }
}

/// `len` bytes of `position`'s registers from `address`, in pieces the register queue carries.
fn registers(c: &SdoClient, position: u16, address: u16, len: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let n = (len - out.len()).min(32);
        let at = address + out.len() as u16;
        let d = c
            .read_register(position, at, n as u8, Duration::from_secs(1))
            .map_err(|e| format!("position {position} register {at:#06x}: {e:?}"))?;
        out.extend_from_slice(&d.as_slice()[..n]);
    }
    Ok(out)
}

/// What ethercrab wrote (SM area, FMMU area) and the layout, per position, read in OP.
type Read = (Layout, Vec<(Vec<u8>, Vec<u8>)>);

fn read_back(cfg: Config, spec: SegmentSpec) -> Result<Read, String> {
    let n = spec.devices.len();
    let (client, service) = sdo_queue(16, Duration::from_micros(300));
    let stop = Stop::new();
    let mut run = support::line::sim_run(
        cfg,
        spec,
        Faults::new(),
        stop.clone(),
        Duration::from_secs(60),
    );
    run.sdo = Some(service);
    let layout = Arc::new(Mutex::new(None));
    let up = Arc::new(AtomicBool::new(false));
    let mut app = Keep {
        layout: layout.clone(),
        good: 0,
        up: up.clone(),
    };
    let reader = std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        while !up.load(Ordering::Acquire) {
            if t0.elapsed() > Duration::from_secs(50) {
                stop.request();
                return Err("not in OP within 50 s".to_string());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let r = (0..n as u16)
            .map(|p| {
                Ok((
                    registers(&client, p, 0x0800, 128)?,
                    registers(&client, p, 0x0600, 256)?,
                ))
            })
            .collect::<Result<Vec<_>, String>>();
        stop.request();
        r
    });
    let ran = rtcat_master::run_simple(run, &mut app).map_err(|e| format!("run: {e}"));
    let regs = reader.join().expect("reader")?;
    ran?;
    let layout = layout.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok((layout.ok_or("no layout")?, regs))
}

/// Computes every device's registers and compares them with the read-back ones; returns how
/// many SMs and FMMUs were compared.
fn compare(spec: &SegmentSpec, layout: &Layout, read: &[(Vec<u8>, Vec<u8>)]) -> (usize, usize) {
    let (mut sms, mut fmmus) = (0, 0);
    for (p, (sm_read, fmmu_read)) in read.iter().enumerate() {
        let position = p as u16;
        let img = ecsim::sii::build_image(&spec.devices[p]).expect("SII image");
        let sii = Sii::parse(&img).expect("SII");
        let s = &layout.subdevices[p];
        let at = Logical::in_group(layout, position, 0).expect("in the layout");
        let bits = pd_registers::sm_bits(layout, position);
        let regs = pd_registers::compute(position, &sii, s.coe, &bits, at)
            .unwrap_or_else(|e| panic!("position {p}: {e}"));
        let (sm_want, fmmu_want) = regs.areas();
        for n in 0..16 {
            let (got, want) = (&sm_read[8 * n..8 * n + 8], &sm_want[8 * n..8 * n + 8]);
            if regs.sms.iter().any(|(i, _)| usize::from(*i) == n) {
                // Byte 5 is the SM's status (read only, the device's).
                let strip = |r: &[u8]| [r[0], r[1], r[2], r[3], r[4], r[6], r[7]];
                assert_eq!(
                    strip(got),
                    strip(want),
                    "position {p} SM{n}: read {got:02x?}"
                );
                sms += 1;
            } else {
                assert_eq!(
                    &got[2..4],
                    [0, 0],
                    "position {p} SM{n} configured, not computed"
                );
            }
            let (got, want) = (
                &fmmu_read[16 * n..16 * n + 16],
                &fmmu_want[16 * n..16 * n + 16],
            );
            assert_eq!(got, want, "position {p} FMMU{n}");
            fmmus += usize::from(want[12] & 1);
        }
    }
    (sms, fmmus)
}

#[test]
fn the_io_lines_registers_are_what_ethercrab_wrote() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = support::line::segment_io();
    let cfg = Config::parse("[cycle]\nperiod_us = 1000\n", "pd_registers test").expect("config");
    let (layout, read) =
        within_machine_noise("I/O read-back", |_| read_back(cfg.clone(), spec.clone()));
    let (sms, fmmus) = compare(&spec, &layout, &read);
    assert!(sms >= 3 && fmmus >= 3, "{sms} SMs, {fmmus} FMMUs compared");
    eprintln!("I/O line: {sms} SMs and {fmmus} FMMUs as ethercrab wrote them");
}

#[test]
fn the_coe_examples_registers_are_what_ethercrab_wrote() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = support::coe_example::segment(3);
    let cfg = support::coe_example::config(support::coe_example::CONFIG);
    let (layout, read) =
        within_machine_noise("CoE read-back", |_| read_back(cfg.clone(), spec.clone()));
    assert!(layout.subdevices.iter().any(|s| s.coe), "a CoE device");
    let (sms, fmmus) = compare(&spec, &layout, &read);
    assert!(sms >= 6 && fmmus >= 4, "{sms} SMs, {fmmus} FMMUs compared");
    eprintln!("CoE example: {sms} SMs and {fmmus} FMMUs as ethercrab wrote them");
}

/// The two CiA 402 drives of `examples/cia402` with their configuration (DC, the axes' own PDO
/// mapping written over CoE).
#[test]
fn the_cia402_drives_registers_are_what_ethercrab_wrote() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cia402");
    let spec = SegmentSpec::load(&dir.join("segment.toml")).expect("segment");
    let text = std::fs::read_to_string(dir.join("rtcat.toml")).expect("rtcat.toml");
    let mut cfg = Config::parse(&text, "examples/cia402/rtcat.toml").expect("config");
    support::patient(&mut cfg);
    let (layout, read) = within_machine_noise("CiA 402 read-back", |_| {
        read_back(cfg.clone(), spec.clone())
    });
    let (sms, fmmus) = compare(&spec, &layout, &read);
    assert!(sms >= 8 && fmmus >= 4, "{sms} SMs, {fmmus} FMMUs compared");
    eprintln!("CiA 402 drives: {sms} SMs and {fmmus} FMMUs as ethercrab wrote them");
}
