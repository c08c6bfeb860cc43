//! Two simulated CiA 402 drives (`examples/cia402/segment.toml`) driven by an unmodified
//! ethercrab MainDevice in-process, at a 1 ms cycle: the CSP mapping read over CoE, enabling
//! through the state machine with the target set to the actual position, a move, a fault
//! injected as `rtcat sim-ctl` sends it (0x603F over SDO) and its reset, and a remapped drive.

use ecsim::cia402::{State, cw, mode};
use ecsim::inproc::InprocDriver;
use ecsim::{FaultCommand, Faults, SegmentSpec, SimPort};
use ethercrab::std::ethercat_now;
use ethercrab::subdevice_group::{Op, PreOp};
use ethercrab::{DefaultLock, MainDevice, MainDeviceConfig, PduStorage, SubDeviceGroup, Timeouts};
use futures_lite::future::block_on;
use std::thread::{self, JoinHandle};
use std::time::Duration;

const FRAMES: usize = 16;
const FRAME_DATA: usize = PduStorage::element_size(1100);

type Pre = SubDeviceGroup<4, 256, DefaultLock, PreOp>;
type Run = SubDeviceGroup<4, 256, DefaultLock, Op>;
type Driver = JoinHandle<(
    ethercrab::PduTx<'static>,
    ethercrab::PduRx<'static>,
    SimPort,
)>;

fn rig(faults: Faults) -> (MainDevice<'static>, Driver, Pre) {
    let spec = SegmentSpec::from_toml(include_str!("../../../examples/cia402/segment.toml"))
        .expect("loads");
    let storage: &'static PduStorage<FRAMES, FRAME_DATA> = Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().expect("split once");
    let port = SimPort::with_faults(spec, faults);
    let driver = thread::spawn(move || InprocDriver::new(tx, rx, port).run());
    // Generous: the tests share two cores with parallel builds (a stall is not a failure here).
    let timeouts = Timeouts {
        eeprom: Duration::from_millis(2000),
        pdu: Duration::from_millis(2000),
        mailbox_response: Duration::from_millis(1000),
        ..Timeouts::default()
    };
    let md = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
    let group = block_on(md.init_single_group::<4, 256>(ethercat_now)).expect("init to PRE-OP");
    (md, driver, group)
}

fn finish(md: MainDevice<'static>, driver: Driver) {
    // SAFETY: no group is used after this.
    unsafe { md.release_all() };
    driver.join().expect("driver");
}

fn i32_at(b: &[u8], k: usize) -> i32 {
    i32::from_le_bytes(b[k..k + 4].try_into().unwrap())
}

/// One 1 ms cycle; `f` writes drive k's outputs from its inputs.
fn cycle(md: &MainDevice, group: &Run, mut f: impl FnMut(usize, &[u8], &mut [u8])) {
    for (k, sd) in group.iter(md).enumerate() {
        let inputs = sd.inputs_raw().to_vec();
        f(k, &inputs, &mut sd.outputs_raw_mut());
    }
    let r = block_on(group.tx_rx(md)).expect("tx_rx");
    assert_eq!(r.working_counter, 6);
    // At least 1 ms between cycles, never a burst of catch-up cycles: the drive model steps by
    // the simulation clock, so every step is then >= 1 ms whatever the load of the machine.
    thread::sleep(Duration::from_millis(1));
}

fn state(inputs: &[u8]) -> State {
    let sw = u16::from_le_bytes([inputs[0], inputs[1]]);
    State::from_statusword(sw).unwrap_or_else(|| panic!("statusword {sw:#06x}"))
}

#[test]
fn ethercrab_enables_and_moves_two_csp_drives_and_resets_an_injected_fault() {
    let faults = Faults::new();
    let (md, driver, group) = rig(faults.clone());
    for sd in group.iter(&md) {
        let modes: u32 = block_on(sd.sdo_read(0x6502, 0)).expect("0x6502");
        assert_eq!(modes & 0x380, 0x380, "CSP, CSV, CST");
        block_on(sd.sdo_write(0x6060, 0, mode::CSP)).expect("0x6060");
    }
    let group = block_on(group.into_op(&md)).expect("PRE-OP -> OP");
    let sizes: Vec<(usize, usize)> = group
        .iter(&md)
        .map(|s| (s.outputs_raw().len(), s.inputs_raw().len()))
        .collect();
    assert_eq!(sizes, [(13, 19), (13, 19)], "the CSP mapping");
    // Enable: shutdown until ready to switch on, then switch on + enable operation with the
    // target held at the actual position (no jump).
    let mut reached = [None; 2];
    for n in 0..200 {
        cycle(&md, &group, |k, i, o| {
            let s = state(i);
            let c = match s {
                State::SwitchOnDisabled => cw::SHUTDOWN,
                State::ReadyToSwitchOn | State::SwitchedOn | State::OperationEnabled => {
                    cw::ENABLE_OPERATION
                }
                _ => 0,
            };
            o[..2].copy_from_slice(&c.to_le_bytes());
            o[2] = mode::CSP as u8;
            o[3..7].copy_from_slice(&i32_at(i, 3).to_le_bytes());
            if s == State::OperationEnabled && reached[k].is_none() {
                reached[k] = Some(n);
            }
        });
        if reached.iter().all(Option::is_some) {
            break;
        }
    }
    assert!(
        reached.iter().all(|r| r.is_some_and(|n| n < 10)),
        "{reached:?}"
    );
    // Move both axes: a 200 ms ramp of 100 counts/ms and back, measuring the following error.
    let mut max_fe = [0i32; 2];
    for n in 0..400i32 {
        let target = if n < 200 { 100 * n } else { 100 * (400 - n) };
        cycle(&md, &group, |k, i, o| {
            assert_eq!(state(i), State::OperationEnabled);
            max_fe[k] = max_fe[k].max(i32_at(i, 13).abs());
            o[3..7].copy_from_slice(&(target * (k as i32 + 1)).to_le_bytes());
        });
    }
    // Steps of >= 1 ms: the 2 ms lag leaves at most step * e^(-1/2) / (1 - e^(-1/2)) = 154
    // counts behind a ramp of 100 counts per step (a longer step, less).
    assert!(
        max_fe[0] <= 160 && max_fe[1] <= 320,
        "following errors {max_fe:?}"
    );
    assert!(max_fe[0] >= 50, "the motor lags: {max_fe:?}");
    // Fault drive 1 as `rtcat sim-ctl drive-fault 1 over-current` does.
    faults.apply(FaultCommand::parse_for("drive-fault 1 over-current", 2).expect("parses"));
    let mut faulted = false;
    for _ in 0..10 {
        cycle(&md, &group, |k, i, _| {
            if k == 1 && state(i) == State::Fault {
                faulted = true;
            }
        });
    }
    assert!(faulted, "drive 1 in fault");
    let d1 = group.subdevice(&md, 1).expect("drive 1");
    let code: u16 = block_on(d1.sdo_read(0x603f, 0)).expect("0x603F");
    assert_eq!(code, 0x2310);
    // Drive 0 goes on unaffected; a fault reset (rising edge of bit 7) clears drive 1.
    for n in 0..5 {
        cycle(&md, &group, |k, i, o| {
            if k == 0 {
                assert_eq!(state(i), State::OperationEnabled);
            } else {
                let c = if n == 0 { 0 } else { cw::FAULT_RESET };
                o[..2].copy_from_slice(&c.to_le_bytes());
            }
        });
    }
    let d1 = group.subdevice(&md, 1).expect("drive 1");
    let sw: u16 = block_on(d1.sdo_read(0x6041, 0)).expect("0x6041");
    assert_eq!(State::from_statusword(sw), Some(State::SwitchOnDisabled));
    let code: u16 = block_on(d1.sdo_read(0x603f, 0)).expect("0x603F");
    assert_eq!(code, 0);
    let group = block_on(group.into_safe_op(&md)).expect("SAFE-OP");
    let group = block_on(group.into_pre_op(&md)).expect("PRE-OP");
    drop(group);
    finish(md, driver);
}

#[test]
fn a_drive_remapped_in_pre_op_reads_its_objects_where_the_mapping_puts_them() {
    let (md, driver, group) = rig(Faults::new());
    let d0 = group.subdevice(&md, 0).expect("drive 0");
    // CSV with a short mapping: target velocity first, then the controlword; inputs:
    // velocity actual, statusword.
    block_on(d0.sdo_write(0x6060, 0, mode::CSV)).expect("0x6060");
    block_on(d0.sdo_write_array(0x1600, [0x60ff_0020u32, 0x6040_0010])).expect("0x1600");
    block_on(d0.sdo_write_array(0x1a00, [0x606c_0020u32, 0x6041_0010])).expect("0x1A00");
    let group = block_on(group.into_op(&md)).expect("PRE-OP -> OP");
    let sizes: Vec<(usize, usize)> = group
        .iter(&md)
        .map(|s| (s.outputs_raw().len(), s.inputs_raw().len()))
        .collect();
    assert_eq!(sizes, [(6, 6), (13, 19)]);
    let mut vel = 0;
    for _ in 0..100 {
        cycle(&md, &group, |k, i, o| {
            if k != 0 {
                return;
            }
            let sw = u16::from_le_bytes([i[4], i[5]]);
            let c = match State::from_statusword(sw) {
                Some(State::SwitchOnDisabled) => cw::SHUTDOWN,
                _ => cw::ENABLE_OPERATION,
            };
            o[..4].copy_from_slice(&30_000i32.to_le_bytes());
            o[4..6].copy_from_slice(&c.to_le_bytes());
            vel = i32_at(i, 0);
        });
    }
    assert!((vel - 30_000).abs() <= 100, "velocity actual {vel}");
    let group = block_on(group.into_safe_op(&md)).expect("SAFE-OP");
    let group = block_on(group.into_pre_op(&md)).expect("PRE-OP");
    drop(group);
    finish(md, driver);
}
