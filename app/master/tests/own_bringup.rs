//! `[bus] bring_up = "rtcat"` (docs/NOTES.md §17.4): the same segments as ethercrab brings up,
//! brought up by rtcat itself, must run the same way. The I/O line of
//! `examples/segment-io.toml` (no mailbox, SII PDOs), the CoE example (PDOs assigned and mapped
//! over CoE by its `[[device]]` entries, startup SDOs) and the drives of `examples/cia402`
//! without DC (their axes' mapping) are brought up both ways and read back in OP: the layout
//! the application gets and every sync manager and FMMU (the SMs' status byte aside) equal.
//! Then the per-subdevice and the whole-segment recovery on a segment rtcat brought up.
//!
//! Not timing-dependent in its verdicts: a run that did not reach OP on a loaded machine is
//! retried (`ecsim::noise`); what is compared is asserted once.

mod support;

use ecsim::noise::{ensure, within_machine_noise};
use ecsim::{FaultCommand, Faults, SegmentSpec};
use rtcat_master::config::{BringUp, RecoveryPolicy};
use rtcat_master::{Application, Config, Cycle, Stop, SubdeviceCause, SubdeviceChange};
use std::sync::Mutex;
use std::time::Duration;
use support::readback::{Read, read_back, sm_fields};

static SERIAL: Mutex<()> = Mutex::new(());

fn with(mut cfg: Config, b: BringUp) -> Config {
    cfg.bus.bring_up = b;
    cfg
}

/// The segment read back after each bring-up.
fn both(what: &str, cfg: &Config, spec: &SegmentSpec) -> (Read, Read) {
    let by = |b: BringUp| {
        within_machine_noise(&format!("{what}, {b:?}"), |_| {
            read_back(with(cfg.clone(), b), spec.clone())
        })
    };
    (by(BringUp::Ethercrab), by(BringUp::Rtcat))
}

/// The layouts equal entry by entry, the registers byte for byte (an SM's status byte is the
/// device's); returns (SMs, FMMUs) configured.
fn same(what: &str, (l1, r1): &Read, (l2, r2): &Read) -> (usize, usize) {
    assert_eq!(l1.subdevices, l2.subdevices, "{what}: subdevices");
    assert_eq!(l1.pdos, l2.pdos, "{what}: PDOs");
    assert_eq!(l1.entries, l2.entries, "{what}: entries");
    assert_eq!(r1.len(), r2.len());
    let (mut sms, mut fmmus) = (0, 0);
    for (p, (a, b)) in r1.iter().zip(r2).enumerate() {
        let ((sm1, fmmu1), (sm2, fmmu2)) = ((&a.sm, &a.fmmu), (&b.sm, &b.fmmu));
        for n in 0..16 {
            let (a, b) = (&sm1[8 * n..8 * n + 8], &sm2[8 * n..8 * n + 8]);
            assert_eq!(sm_fields(a), sm_fields(b), "{what}: position {p} SM{n}");
            sms += usize::from(a[2] | a[3] != 0);
            let (a, b) = (&fmmu1[16 * n..16 * n + 16], &fmmu2[16 * n..16 * n + 16]);
            assert_eq!(a, b, "{what}: position {p} FMMU{n}");
            fmmus += usize::from(a[12] & 1);
        }
    }
    (sms, fmmus)
}

#[test]
fn the_io_line_runs_the_same_whoever_brings_it_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = support::line::segment_io();
    let cfg = Config::parse("[cycle]\nperiod_us = 1000\n", "own test").expect("config");
    let (a, b) = both("I/O line", &cfg, &spec);
    let (sms, fmmus) = same("I/O line", &a, &b);
    assert!(sms >= 3 && fmmus >= 3, "{sms} SMs, {fmmus} FMMUs");
}

#[test]
fn the_coe_example_runs_the_same_whoever_brings_it_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = support::coe_example::segment(3);
    let cfg = support::coe_example::config(support::coe_example::CONFIG);
    let (a, b) = both("CoE example", &cfg, &spec);
    assert!(a.0.subdevices.iter().any(|s| s.coe), "a CoE device");
    let (sms, fmmus) = same("CoE example", &a, &b);
    assert!(sms >= 8 && fmmus >= 4, "{sms} SMs, {fmmus} FMMUs");
}

/// The drives of `examples/cia402` with their axes' mapping, without DC.
#[test]
fn the_cia402_drives_run_the_same_whoever_brings_them_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cia402");
    let spec = SegmentSpec::load(&dir.join("segment.toml")).expect("segment");
    let text = std::fs::read_to_string(dir.join("rtcat.toml")).expect("rtcat.toml");
    let mut cfg = Config::parse(&text, "examples/cia402/rtcat.toml").expect("config");
    support::patient(&mut cfg);
    cfg.dc.enabled = false;
    let (a, b) = both("CiA 402 drives", &cfg, &spec);
    let (sms, fmmus) = same("CiA 402 drives", &a, &b);
    assert!(sms >= 8 && fmmus >= 4, "{sms} SMs, {fmmus} FMMUs");
}

/// A little-endian integer of `n` bytes at `at` of a register area.
fn le(r: &[u8], at: usize, n: usize) -> u64 {
    r[at..at + n]
        .iter()
        .rev()
        .fold(0, |v, &b| (v << 8) | u64::from(b))
}

/// The same drives with `[dc]` as the example has it (SYNC0 at 1 ms, the CoE sync modes): the
/// process data registers as above, and every drive's DC registers alike: its propagation
/// delay (0x0928, within the rounding of ethercrab's halves), SYNC0's activation (0x0981) and
/// cycle time (0x09A0, SYNC1's 0x09A4 0), a start time (0x0990) on the SYNC0 grid, its clock
/// in sync with the reference's (0x092C, the control loop's difference, below 1 µs). The drives
/// take 5 ms to OP and accept it only after 3 frames on time since SYNC0 started, as a drive
/// in DC mode checks (`[device.timing] dc_op_frames`): both bring-ups exchange process data on
/// the SYNC0 grid while they wait.
#[test]
fn the_cia402_drives_with_dc_run_the_same_whoever_brings_them_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cia402");
    let mut spec = SegmentSpec::load(&dir.join("segment.toml")).expect("segment");
    for d in &mut spec.devices {
        d.timing.safeop_op_ns = 5_000_000;
        d.timing.dc_op_frames = 3;
    }
    let text = std::fs::read_to_string(dir.join("rtcat.toml")).expect("rtcat.toml");
    let mut cfg = Config::parse(&text, "examples/cia402/rtcat.toml").expect("config");
    support::patient(&mut cfg);
    assert!(cfg.dc.enabled, "the example runs DC");
    cfg.dc.static_sync_iterations = 1000;
    let (a, b) = both("CiA 402 drives with DC", &cfg, &spec);
    let (sms, fmmus) = same("CiA 402 drives with DC", &a, &b);
    assert!(sms >= 8 && fmmus >= 4, "{sms} SMs, {fmmus} FMMUs");
    let period = 1_000 * u64::from(cfg.cycle.period_us);
    let mut synced = 0;
    for (p, (e, r)) in a.1.iter().zip(&b.1).enumerate() {
        let (e, r) = (&e.dc, &r.dc);
        assert_eq!(e.is_empty(), r.is_empty(), "position {p}: a clock or none");
        if e.is_empty() {
            continue;
        }
        let what = |reg: &str| format!("position {p} {reg}: ethercrab's / rtcat's");
        assert!(
            le(e, 0x28, 4).abs_diff(le(r, 0x28, 4)) <= 2,
            "{} {} / {}",
            what("delay"),
            le(e, 0x28, 4),
            le(r, 0x28, 4)
        );
        assert_eq!(e[0x81], r[0x81], "{}", what("SYNC activation"));
        assert_eq!(le(e, 0xa0, 8), le(r, 0xa0, 8), "{}", what("SYNC0/1 cycle"));
        if r[0x81] == 0 {
            continue;
        }
        synced += 1;
        assert_eq!(le(r, 0xa0, 4), period, "{}", what("SYNC0 cycle"));
        for (who, d) in [("ethercrab's", e), ("rtcat's", r)] {
            let start = le(d, 0x90, 8);
            assert!(
                start > 0 && start.is_multiple_of(period),
                "position {p}, {who}: start time {start} off the grid"
            );
            // 0x092C: sign bit 31, magnitude below.
            let diff = le(d, 0x2c, 4) & 0x7fff_ffff;
            assert!(diff < 1000, "position {p}, {who}: 0x092C {diff} ns");
        }
    }
    assert_eq!(synced, 2, "both drives run SYNC0");
}

/// The devices of the I/O line with outputs go from SAFE-OP to OP only once the master has sent
/// them outputs (`[device.timing] op_outputs`, 5 ms to OP): rtcat's bring-up exchanges the
/// image while it waits for OP (ethercrab's `into_op` does not).
#[test]
fn rtcat_s_bring_up_sends_outputs_before_op() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut spec = support::line::segment_io();
    let mut checking = 0;
    for d in &mut spec.devices {
        if d.outputs > 0 {
            d.timing.safeop_op_ns = 5_000_000;
            d.timing.op_outputs = 1;
            checking += 1;
        }
    }
    assert!(checking > 0, "a device with outputs");
    let cfg = with(
        Config::parse("[cycle]\nperiod_us = 1000\n", "own test").expect("config"),
        BringUp::Rtcat,
    );
    within_machine_noise("outputs before OP", |_| {
        read_back(cfg.clone(), spec.clone())
    });
}

#[test]
fn the_bring_up_key_takes_either_value() {
    Config::parse(
        "[bus]\nbring_up = \"rtcat\"\n[dc]\nenabled = true\n",
        "c.toml",
    )
    .expect("rtcat's with DC");
    let e = Config::parse("[bus]\nbring_up = \"fast\"\n", "c.toml").expect_err("unknown");
    assert!(e.to_string().contains("fast"), "{e}");
    Config::parse(
        "[bus]\nbring_up = \"ethercrab\"\n[dc]\nenabled = true\n",
        "c.toml",
    )
    .expect("ethercrab's with DC");
}

/// Counts, per position, the cycles whose data was not valid once the segment was up, and
/// applies `fault` at cycle `at`; stops `tail` cycles after everything was well again.
struct Story {
    faults: Faults,
    at: u64,
    fault: Option<FaultCommand>,
    invalid: Vec<u64>,
    well_since_fault: u64,
    applied: bool,
    stop: Stop,
    back: Vec<(u16, SubdeviceCause)>,
    lost: Vec<u16>,
}

impl Application for Story {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let n = cx.status.cycle;
        let all = cx
            .status
            .subdevices
            .iter()
            .all(|d| d.data_valid && d.in_op());
        if self.invalid.is_empty() {
            self.invalid = vec![0; cx.status.subdevices.len()];
        }
        if self.applied || all {
            for (i, d) in cx.status.subdevices.iter().enumerate() {
                if !(d.data_valid && d.in_op()) {
                    self.invalid[i] += 1;
                }
            }
        }
        if n >= self.at
            && let Some(f) = self.fault.take()
        {
            self.faults.apply(f);
            self.applied = true;
        }
        if self.applied {
            self.well_since_fault = if all { self.well_since_fault + 1 } else { 0 };
            if self.well_since_fault >= 200 {
                self.stop.request();
            }
        }
    }
    fn on_subdevice(&mut self, e: &rtcat_master::SubdeviceEvent) {
        match e.change {
            SubdeviceChange::Back { cause, .. } => self.back.push((e.position, cause)),
            SubdeviceChange::Lost { .. } => self.lost.push(e.position),
            _ => {}
        }
    }
}

fn story(
    cfg: Config,
    spec: SegmentSpec,
    fault: FaultCommand,
) -> Result<(rtcat_master::Outcome, Story), String> {
    let faults = Faults::new();
    let stop = Stop::new();
    let mut s = Story {
        faults: faults.clone(),
        at: 300,
        fault: Some(fault),
        invalid: Vec::new(),
        well_since_fault: 0,
        applied: false,
        stop: stop.clone(),
        back: Vec::new(),
        lost: Vec::new(),
    };
    let run = support::line::sim_run(cfg, spec, faults, stop.clone(), Duration::from_secs(60));
    let out = support::run_attempt(run, &mut s)?;
    ensure(stop.is_requested(), || {
        "60 s passed before the story was told".to_string()
    })?;
    support::line::no_frame_lost(&out)?;
    Ok((out, s))
}

fn io_config() -> Config {
    let mut cfg = Config::default();
    support::patient(&mut cfg);
    cfg.bus.bring_up = BringUp::Rtcat;
    cfg.health.recovery = RecoveryPolicy::Subdevice;
    cfg.health.recovery_backoff_ms = 50;
    cfg.health.bad_cycles_before_recovery = 1;
    cfg
}

/// A subdevice of a segment rtcat brought up, power-cycled (its station address and
/// registers gone): found and brought back alone by the per-subdevice recovery, with the
/// registers rtcat computed, while the others lose no cycle.
#[test]
fn a_power_cycled_subdevice_of_rtcat_s_segment_is_recovered_alone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, s) = within_machine_noise("own bring-up, power cycle", |_| {
        story(
            io_config(),
            support::line::segment_io(),
            FaultCommand::PowerCycleOne { position: 1 },
        )
    });
    assert_eq!(out.rec.recoveries, 0, "no re-initialisation");
    assert_eq!((s.invalid[0], s.invalid[2]), (0, 0), "the others' data");
    assert!(s.invalid[1] > 0, "position 1 was out");
    assert_eq!(s.lost, [1]);
    assert_eq!(s.back, [(1, SubdeviceCause::PowerCycled)]);
}

/// With `[health] recovery = "segment"` a fault re-initialises the segment through rtcat's own
/// bring-up again (the topology of the first one checked).
#[test]
fn rtcat_s_bring_up_re_initialises_the_segment() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (out, s) = within_machine_noise("own bring-up, segment recovery", |_| {
        let mut cfg = io_config();
        cfg.health.recovery = RecoveryPolicy::Segment;
        story(
            cfg,
            support::line::segment_io(),
            FaultCommand::SubdeviceError {
                position: 1,
                code: 0x001b,
            },
        )
    });
    assert_eq!(out.rec.recoveries, 1);
    assert!(s.invalid[1] >= 1, "{:?}", s.invalid);
    assert!(s.back.is_empty() && s.lost.is_empty());
}
