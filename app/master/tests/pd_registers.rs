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

use ecsim::SegmentSpec;
use ecsim::noise::within_machine_noise;
use rtcat_master::pd_registers::{self, Logical};
use rtcat_master::sii::Sii;
use rtcat_master::{Config, Layout};
use std::sync::Mutex;
use support::readback::{Regs, read_back, sm_fields};

static SERIAL: Mutex<()> = Mutex::new(());

/// `cfg` with ethercrab's bring-up, whose registers these are compared with (rtcat's own is
/// the default, and writes the computed ones: `tests/own_bringup.rs` compares the two).
fn ethercrab_s(mut cfg: Config) -> Config {
    cfg.bus.bring_up = rtcat_master::config::BringUp::Ethercrab;
    cfg
}

/// Computes every device's registers and compares them with the read-back ones; returns how
/// many SMs and FMMUs were compared.
fn compare(spec: &SegmentSpec, layout: &Layout, read: &[Regs]) -> (usize, usize) {
    let (mut sms, mut fmmus) = (0, 0);
    for (p, r) in read.iter().enumerate() {
        let (sm_read, fmmu_read) = (&r.sm, &r.fmmu);
        let position = p as u16;
        let img = ecsim::sii::build_image(&spec.devices[p]).expect("SII image");
        let sii = Sii::parse(&img).expect("SII");
        let s = &layout.subdevices[p];
        let at = Logical::in_group(layout, (position, layout.subdevices.len()), 0)
            .expect("in the layout");
        let bits = pd_registers::sm_bits(layout, position);
        let regs = pd_registers::compute(position, &sii, s.coe, &bits, at)
            .unwrap_or_else(|e| panic!("position {p}: {e}"));
        let (sm_want, fmmu_want) = regs.areas();
        for n in 0..16 {
            let (got, want) = (&sm_read[8 * n..8 * n + 8], &sm_want[8 * n..8 * n + 8]);
            if regs.sms.iter().any(|(i, _)| usize::from(*i) == n) {
                assert_eq!(
                    sm_fields(got),
                    sm_fields(want),
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
    let cfg = ethercrab_s(
        Config::parse("[cycle]\nperiod_us = 1000\n", "pd_registers test").expect("config"),
    );
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
    let cfg = ethercrab_s(support::coe_example::config(support::coe_example::CONFIG));
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
    let cfg = ethercrab_s(cfg);
    let (layout, read) = within_machine_noise("CiA 402 read-back", |_| {
        read_back(cfg.clone(), spec.clone())
    });
    let (sms, fmmus) = compare(&spec, &layout, &read);
    assert!(sms >= 8 && fmmus >= 4, "{sms} SMs, {fmmus} FMMUs compared");
    eprintln!("CiA 402 drives: {sms} SMs and {fmmus} FMMUs as ethercrab wrote them");
}
