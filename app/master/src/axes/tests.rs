//! One axis against a model drive in a hand-built process image: runs of bad cycles held up
//! to the bound and quick-stopped after it, the counters, and the master's own following error
//! beside a 0x60F4 the drive never updates.

use super::*;
use crate::application::{CycleStatus, RegisterAccess, SubdeviceStatus};
use crate::cia402::cw;
use crate::image::ProcessImage;
use crate::layout::{Direction, Identity, Layout, MappingSource, PdoSource, SubdeviceSource};
use ecsim::cia402 as sim;

struct NoRegisters;
impl RegisterAccess for NoRegisters {
    fn read(&mut self, _: u16, _: u16, _: &mut [u8]) -> crate::Result<()> {
        Ok(())
    }
    fn write(&mut self, _: u16, _: u16, _: &[u8]) -> crate::Result<()> {
        Ok(())
    }
}

/// A drive whose 0x10F1:02 holds `limit` (UNSIGNED16), counting the reads.
struct SyncErrorLimit {
    limit: u16,
    reads: u32,
}
impl RegisterAccess for SyncErrorLimit {
    fn read(&mut self, _: u16, _: u16, _: &mut [u8]) -> crate::Result<()> {
        Ok(())
    }
    fn write(&mut self, _: u16, _: u16, _: &[u8]) -> crate::Result<()> {
        Ok(())
    }
    fn read_sdo(&mut self, p: u16, index: u16, sub: u8, buf: &mut [u8]) -> crate::Result<usize> {
        assert_eq!((p, index, sub), (0, 0x10f1, 2));
        self.reads += 1;
        buf[..2].copy_from_slice(&self.limit.to_le_bytes());
        Ok(2)
    }
}

/// One CSP drive at position 0 mapping what an axis needs, 0x60F4 included.
fn layout() -> Layout {
    let dev = SubdeviceSource {
        address: 0x1001,
        alias: 0,
        name: "Drive".into(),
        identity: Identity::default(),
        coe: true,
        mapping: MappingSource::Sii,
        pdos: vec![
            PdoSource {
                index: 0x1600,
                name: None,
                sync_manager: 2,
                direction: Direction::Outputs,
                entries: vec![
                    (0x6040, 0, 16, None, 0x06),
                    (0x6060, 0, 8, None, 0x02),
                    (0x607a, 0, 32, None, 0x04),
                ],
            },
            PdoSource {
                index: 0x1a00,
                name: None,
                sync_manager: 3,
                direction: Direction::Inputs,
                entries: vec![
                    (0x6041, 0, 16, None, 0x06),
                    (0x6061, 0, 8, None, 0x02),
                    (0x6064, 0, 32, None, 0x04),
                    (0x60f4, 0, 32, None, 0x04),
                ],
            },
        ],
    };
    Layout::build(1, &[dev]).unwrap()
}

/// A drive per the state machine (quick stop ends in switch on disabled after 2 cycles) whose
/// position follows the target two exchanges late, and whose 0x60F4 stays 0 (a drive that does
/// not update it).
struct Model {
    state: sim::State,
    qs_left: u32,
    pos: i32,
    next: i32,
    mode: i8,
}

impl Model {
    /// The exchange: the outputs the master wrote reach the drive, its inputs come back.
    fn exchange(&mut self, image: &mut ProcessImage) {
        let out = image.outputs_of(0).to_vec();
        let controlword = u16::from_le_bytes([out[0], out[1]]);
        self.mode = out[2] as i8;
        let target = i32::from_le_bytes([out[3], out[4], out[5], out[6]]);
        use sim::{Command as C, State as S};
        self.state = match (self.state, sim::command(controlword)) {
            (S::SwitchOnDisabled, C::Shutdown) => S::ReadyToSwitchOn,
            (S::ReadyToSwitchOn, C::SwitchOn) => S::SwitchedOn,
            (S::SwitchedOn, C::EnableOperation) => S::OperationEnabled,
            (S::OperationEnabled, C::QuickStop) => {
                self.qs_left = 2;
                S::QuickStopActive
            }
            (S::QuickStopActive, _) if self.qs_left == 0 => S::SwitchOnDisabled,
            (S::QuickStopActive, _) => {
                self.qs_left -= 1;
                S::QuickStopActive
            }
            (_, C::DisableVoltage) => S::SwitchOnDisabled,
            (s, _) => s,
        };
        if self.state == S::OperationEnabled {
            self.pos = self.next;
            self.next = target;
        } else {
            self.next = self.pos;
        }
        let inputs = image.inputs_of_mut(0);
        inputs[0..2].copy_from_slice(&self.state.bits().to_le_bytes());
        inputs[2] = self.mode as u8;
        inputs[3..7].copy_from_slice(&self.pos.to_le_bytes());
        inputs[7..11].copy_from_slice(&0i32.to_le_bytes());
    }
}

struct Bench {
    axes: Axes,
    image: ProcessImage,
    model: Model,
    cycle: u64,
    events: rtrb::Producer<crate::stats::Event>,
    _rx: rtrb::Consumer<crate::stats::Event>,
}

impl Bench {
    fn new(extra: &str) -> Bench {
        Bench::with(extra, &mut NoRegisters)
    }

    fn with(extra: &str, registers: &mut dyn RegisterAccess) -> Bench {
        let cfg = Config::parse(
            &format!(
                "[cycle]\nperiod_us = 1000\n[[axis]]\nname = \"x\"\nposition = 0\n\
                 counts_per_unit = 10000.0\nmax_velocity = 1.0\nmax_acceleration = 100.0\n\
                 profile = {{ from = 0.0, to = 10.0 }}\nafter_recovery = \"re_enable\"\n{extra}\n"
            ),
            "t.toml",
        )
        .unwrap();
        let l = layout();
        let mut axes = Axes::from_config(&cfg);
        axes.enable(0);
        axes.configure(&mut Setup {
            layout: &l,
            registers,
        })
        .unwrap();
        let (events, rx) = rtrb::RingBuffer::new(16);
        Bench {
            axes,
            image: ProcessImage::for_layout(&l),
            model: Model {
                state: sim::State::SwitchOnDisabled,
                qs_left: 0,
                pos: 0,
                next: 0,
                mode: 0,
            },
            cycle: 0,
            events,
            _rx: rx,
        }
    }

    /// One cycle; a lost frame reaches no drive and brings no inputs back.
    fn step(&mut self, good: bool) -> u16 {
        if good {
            self.model.exchange(&mut self.image);
        }
        let subs = [SubdeviceStatus {
            al_state: 8,
            data_valid: good,
        }];
        let status = CycleStatus {
            cycle: self.cycle,
            deadline_ns: 0,
            wake_ns: 0,
            expected_wkc: 3,
            wkc: if good { 3 } else { 0 },
            frames_lost: !good,
            subdevices: &subs,
        };
        let (mut errors, mut first) = (0, None);
        self.axes.cycle(&mut Cycle {
            status: &status,
            image: &mut self.image,
            data_errors: &mut errors,
            first_error: &mut first,
            events: &mut self.events,
        });
        self.cycle += 1;
        let out = self.image.outputs_of(0);
        u16::from_le_bytes([out[0], out[1]])
    }

    fn run(&mut self, good: bool, n: usize) {
        for _ in 0..n {
            self.step(good);
        }
    }

    fn axis(&self) -> &Axis {
        &self.axes.axes()[0]
    }
}

#[test]
fn runs_of_n_bad_cycles_are_held_and_n_plus_1_quick_stops() {
    let mut b = Bench::new("hold_bad_cycles = 4");
    b.run(true, 200);
    assert_eq!(b.model.state, sim::State::OperationEnabled);
    assert_eq!(b.axis().hold_bad_cycles(), (Some(4), HoldFrom::Config));
    // Three runs of 4 bad cycles: every one held, the drive stays enabled and keeps its last
    // target, the motion carries on afterwards without a re-enable.
    for _ in 0..3 {
        let before = b.model.next;
        for _ in 0..4 {
            assert_eq!(b.step(false), cw::ENABLE_OPERATION);
        }
        b.run(true, 20);
        assert_eq!(b.model.state, sim::State::OperationEnabled);
        assert!(
            b.model.next > before,
            "the profile goes on after a held run"
        );
    }
    let s = b.axis().stats();
    assert_eq!(
        (s.held_cycles, s.quick_stops, s.longest_bad_run),
        (12, 0, 4)
    );
    // 5 in a row: the fifth commands the quick stop, once.
    for k in 1..=6 {
        let c = b.step(false);
        assert_eq!(
            c == cw::QUICK_STOP,
            k >= 5,
            "bad cycle {k}: controlword {c:#06x}"
        );
    }
    let s = b.axis().stats();
    assert_eq!(
        (s.held_cycles, s.quick_stops, s.longest_bad_run),
        (16, 1, 6)
    );
    b.run(true, 3);
    assert_eq!(b.model.state, sim::State::QuickStopActive);
    // Re-enabled (policy) from where the drive stands.
    b.run(true, 50);
    assert_eq!(b.model.state, sim::State::OperationEnabled);
    let sum = b.axis().summary();
    assert_eq!(
        (
            sum.hold_bad_cycles,
            sum.hold_bad_cycles_from.as_deref(),
            sum.held_cycles,
            sum.longest_bad_run,
            sum.quick_stops
        ),
        (Some(4), Some("config"), 16, 6, 1)
    );
}

#[test]
fn the_default_bound_and_hold_without_one() {
    let mut b = Bench::new("");
    assert_eq!(
        b.axis().hold_bad_cycles(),
        (
            Some(crate::cia402::DEFAULT_HOLD_BAD_CYCLES),
            HoldFrom::Default
        )
    );
    b.run(true, 100);
    b.run(false, crate::cia402::DEFAULT_HOLD_BAD_CYCLES as usize);
    assert_eq!(b.axis().stats().quick_stops, 0);
    b.run(true, 10);
    b.run(false, crate::cia402::DEFAULT_HOLD_BAD_CYCLES as usize + 1);
    assert_eq!(b.axis().stats().quick_stops, 1);

    let mut b = Bench::new("on_bad_cycles = \"hold\"");
    assert_eq!(b.axis().hold_bad_cycles(), (None, HoldFrom::Unbounded));
    b.run(true, 100);
    b.run(false, 500);
    assert_eq!(b.axis().stats().quick_stops, 0);
    assert_eq!(b.axis().stats().held_cycles, 500);
    assert_eq!(b.axis().summary().hold_bad_cycles, None);
}

#[test]
fn the_following_error_is_the_masters_own_with_0x60f4_beside_it() {
    let mut b = Bench::new("");
    b.run(true, 400);
    // 1 unit/s at 10000 counts/unit and 1 ms: 10 counts per cycle; the model is one cycle
    // behind what the master compares with, so the error is one cycle's step at speed.
    let a = b.axis();
    let max = a.stats().following_error.max();
    assert!(
        (9..=11).contains(&max),
        "master's following error max {max}"
    );
    assert!(
        (a.following_error() - 0.001).abs() < 1.1e-4,
        "{}",
        a.following_error()
    );
    // The drive reports 0 all along: shown beside, not instead.
    assert_eq!(a.drive_following_error(), Some(0.0));
    assert_eq!(a.stats().drive_following_error.max(), 0);
    assert!(!a.stats().drive_following_error.is_empty());
    let s = a.summary();
    assert!(s.following_error_counts.is_some_and(|f| f.max >= 9));
    assert!(s.drive_following_error_counts.is_some_and(|f| f.max == 0));
    // Bad cycles keep the last good cycle's figures.
    let before = b.axis().following_error();
    b.run(false, 2);
    assert_eq!(b.axis().following_error(), before);
}

#[test]
fn the_bound_comes_from_the_drives_sync_error_limit_unless_configured() {
    // 16: +3 per miss, valid below 16: 5 misses in a row tolerated.
    let mut d = SyncErrorLimit {
        limit: 16,
        reads: 0,
    };
    let mut b = Bench::with("", &mut d);
    assert_eq!(d.reads, 1);
    assert_eq!(b.axis().hold_bad_cycles(), (Some(5), HoldFrom::Drive(16)));
    b.run(true, 100);
    b.run(false, 5);
    assert_eq!(b.axis().stats().quick_stops, 0);
    b.run(true, 10);
    b.run(false, 6);
    assert_eq!(b.axis().stats().quick_stops, 1);
    let s = b.axis().summary();
    assert_eq!(
        (
            s.hold_bad_cycles,
            s.hold_bad_cycles_from.as_deref(),
            s.drive_sync_error_limit
        ),
        (Some(5), Some("drive"), Some(16))
    );
    // 0: the drive's check is off, it names no bound: the default.
    let mut d = SyncErrorLimit { limit: 0, reads: 0 };
    let b = Bench::with("", &mut d);
    assert_eq!(
        b.axis().hold_bad_cycles(),
        (
            Some(crate::cia402::DEFAULT_HOLD_BAD_CYCLES),
            HoldFrom::Default
        )
    );
    // The configuration's bound wins, and "hold" needs none: the drive is not asked.
    for (extra, want) in [
        ("hold_bad_cycles = 2", (Some(2), HoldFrom::Config)),
        ("on_bad_cycles = \"hold\"", (None, HoldFrom::Unbounded)),
    ] {
        let mut d = SyncErrorLimit {
            limit: 16,
            reads: 0,
        };
        let b = Bench::with(extra, &mut d);
        assert_eq!(d.reads, 0, "{extra}");
        assert_eq!(b.axis().hold_bad_cycles(), want, "{extra}");
    }
}
