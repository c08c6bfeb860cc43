//! CoE devices driven by an unmodified ethercrab MainDevice, in-process: the mailbox, the SDO
//! server, the PDO assignment and mapping read by ethercrab in PRE-OP, and process data checked
//! byte for byte.

use ecsim::inproc::InprocDriver;
use ecsim::{Faults, SegmentSpec, SimPort, pdi};
use ethercrab::error::{Error, MailboxError};
use ethercrab::std::ethercat_now;
use ethercrab::subdevice_group::PreOp;
use ethercrab::{
    DefaultLock, MainDevice, MainDeviceConfig, PduStorage, SubDeviceGroup, SubDeviceState, Timeouts,
};
use futures_lite::future::block_on;
use std::thread::{self, JoinHandle};
use std::time::Duration;

const FRAMES: usize = 16;
const FRAME_DATA: usize = PduStorage::element_size(1100);

type Pre = SubDeviceGroup<4, 256, DefaultLock, PreOp>;

fn coe_segment() -> SegmentSpec {
    SegmentSpec::from_toml(include_str!("../../../examples/coe/segment.toml")).expect("loads")
}

struct Rig {
    md: MainDevice<'static>,
    driver: Option<
        JoinHandle<(
            ethercrab::PduTx<'static>,
            ethercrab::PduRx<'static>,
            SimPort,
        )>,
    >,
}

fn rig(spec: SegmentSpec, faults: Faults) -> (Rig, Pre) {
    let storage: &'static PduStorage<FRAMES, FRAME_DATA> = Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().expect("split once");
    let port = SimPort::with_faults(spec, faults);
    let driver = thread::spawn(move || InprocDriver::new(tx, rx, port).run());
    let timeouts = Timeouts {
        eeprom: Duration::from_millis(500),
        pdu: Duration::from_millis(500),
        mailbox_response: Duration::from_millis(1000),
        ..Timeouts::default()
    };
    let md = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
    let group = block_on(md.init_single_group::<4, 256>(ethercat_now)).expect("init to PRE-OP");
    (
        Rig {
            md,
            driver: Some(driver),
        },
        group,
    )
}

impl Rig {
    /// Stop the driver and hand back the simulated port (the devices' state).
    fn finish(mut self) -> SimPort {
        // SAFETY: no group is used after this.
        unsafe { self.md.release_all() };
        let (_tx, _rx, port) = self.driver.take().expect("once").join().expect("driver");
        port
    }
}

/// Cycle `n` times in OP and check every device's inputs against the `pdi` rule.
fn exchange(
    md: &MainDevice,
    group: &SubDeviceGroup<4, 256, DefaultLock, ethercrab::subdevice_group::Op>,
    n: u32,
    wkc: u16,
) {
    let mut prev: Vec<Vec<u8>> = group
        .iter(md)
        .map(|s| vec![0; s.outputs_raw().len()])
        .collect();
    let mut counters: Vec<Option<u32>> = vec![None; group.len()];
    for cycle in 0..n {
        for (i, sd) in group.iter(md).enumerate() {
            for (k, b) in sd.outputs_raw_mut().iter_mut().enumerate() {
                *b = (cycle as u8)
                    .wrapping_mul(13)
                    .wrapping_add(i as u8 + k as u8);
            }
        }
        let r = block_on(group.tx_rx(md)).expect("tx_rx");
        assert_eq!(r.working_counter, wkc, "cycle {cycle}");
        for (i, sd) in group.iter(md).enumerate() {
            let inputs = sd.inputs_raw();
            let c = pdi::check_inputs(&inputs, &prev[i])
                .or_else(|| pdi::check_inputs(&inputs, &sd.outputs_raw()))
                .unwrap_or_else(|| panic!("cycle {cycle} device {i}: inputs {:?}", &inputs[..]));
            if let Some(p) = counters[i] {
                let mask = if inputs.len() >= 4 {
                    u32::MAX
                } else {
                    (1u32 << (8 * inputs.len())) - 1
                };
                assert_eq!(c, p.wrapping_add(1) & mask, "device {i} counter");
            }
            counters[i] = Some(c);
            prev[i] = sd.outputs_raw().to_vec();
        }
    }
}

#[test]
fn the_coe_example_reaches_op_with_its_default_mapping() {
    let spec = coe_segment();
    let (rig, group) = rig(spec.clone(), Faults::new());
    let md = &rig.md;
    for (i, sd) in group.iter(md).enumerate() {
        assert_eq!(sd.name(), spec.devices[i].name);
        // ethercrab read the identity over the SII and the dictionary agrees.
        let product: u32 = block_on(sd.sdo_read(0x1018, 2)).expect("0x1018:02");
        assert_eq!(product, spec.devices[i].product_id);
    }
    let group = block_on(group.into_op(md)).expect("PRE-OP -> OP");
    let sizes: Vec<(usize, usize)> = group
        .iter(md)
        .map(|s| (s.outputs_raw().len(), s.inputs_raw().len()))
        .collect();
    assert_eq!(sizes, [(1, 1), (0, 8), (2, 2)]);
    for sd in group.iter(md) {
        assert_eq!(block_on(sd.status()).expect("status").0, SubDeviceState::Op);
    }
    exchange(md, &group, 40, 3 + 1 + 3);
    // The mailbox keeps working in OP; the statusword SDO view is the input image.
    let servo = group.subdevice(md, 2).expect("servo");
    // The device published its next inputs at the end of the last cycle's frame: the next
    // exchange reads what the SDO upload returns now.
    let status: u16 = block_on(servo.sdo_read(0x6041, 0)).expect("statusword");
    block_on(group.tx_rx(md)).expect("tx_rx");
    assert_eq!(status.to_le_bytes(), servo.inputs_raw()[..2]);
    let control: u16 = block_on(servo.sdo_read(0x6040, 0)).expect("controlword");
    assert_eq!(control.to_le_bytes(), servo.outputs_raw()[..2]);
    let group = block_on(group.into_safe_op(md)).expect("SAFE-OP");
    let group = block_on(group.into_pre_op(md)).expect("PRE-OP");
    let _ = block_on(group.into_init(md)).expect("INIT");
    let port = rig.finish();
    assert_eq!(port.stats().malformed, 0);
}

#[test]
fn ethercrab_reads_and_writes_sdos() {
    let (rig, group) = rig(coe_segment(), Faults::new());
    let md = &rig.md;
    let servo = group.subdevice(md, 2).expect("servo");
    // Expedited uploads of every size.
    let t: u32 = block_on(servo.sdo_read(0x1000, 0)).unwrap();
    assert_eq!(t, 0x0002_0192);
    let modes: u32 = block_on(servo.sdo_read(0x6502, 0)).unwrap();
    assert_eq!(modes, 0x380);
    let n: u8 = block_on(servo.sdo_read(0x1c12, 0)).unwrap();
    assert_eq!(n, 1);
    let pdo: u16 = block_on(servo.sdo_read(0x1c12, 1)).unwrap();
    assert_eq!(pdo, 0x1600);
    let map: u32 = block_on(servo.sdo_read(0x1600, 1)).unwrap();
    assert_eq!(map, 0x6040_0010);
    // A normal (non-expedited) upload: the 9-character name.
    let name: [u8; 9] = block_on(servo.sdo_read(0x1008, 0)).unwrap();
    assert_eq!(&name, b"SERVO-COE");
    // Downloads, read back.
    block_on(servo.sdo_write(0x6085, 0, 50_000u32)).unwrap();
    let v: u32 = block_on(servo.sdo_read(0x6085, 0)).unwrap();
    assert_eq!(v, 50_000);
    block_on(servo.sdo_write(0x6060, 0, 8i8)).unwrap();
    let v: i8 = block_on(servo.sdo_read(0x6060, 0)).unwrap();
    assert_eq!(v, 8);
    // The array helpers: assignment of the AI4's four channels.
    let ai = group.subdevice(md, 1).expect("AI4");
    block_on(ai.sdo_write_array(0x1c13, [0x1a00u16, 0x1a01, 0x1a02, 0x1a03])).unwrap();
    let assigned = block_on(ai.sdo_read_array::<u16, 4>(0x1c13)).unwrap();
    assert_eq!(assigned[..], [0x1a00, 0x1a01, 0x1a02, 0x1a03]);
    // An abort comes back as ethercrab's Aborted error with the code.
    let e = block_on(servo.sdo_write(0x6041, 0, 1u16)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Mailbox(MailboxError::Aborted {
                address: 0x6041,
                sub_index: 0,
                ..
            })
        ),
        "{e:?}"
    );
    let e = block_on(ai.sdo_write(0x8000, 0x15, 8u16)).unwrap_err();
    assert!(format!("{e}").to_lowercase().contains("range"), "{e}");
    let _ = rig.finish();
}

/// The configuration `examples/coe/rtcat.toml` applies, written with ethercrab's SDO calls in
/// PRE-OP, in the order rtcat applies it (mapping, assignment, startup SDOs).
fn apply_example_config(md: &MainDevice, group: &Pre) {
    let servo = group.subdevice(md, 2).expect("servo");
    let rx = [0x6040_0010u32, 0x607a_0020, 0x60ff_0020, 0x6060_0008];
    let tx = [0x6041_0010u32, 0x6064_0020, 0x606c_0020, 0x6061_0008];
    block_on(servo.sdo_write_array(0x1600, rx)).expect("0x1600");
    block_on(servo.sdo_write_array(0x1a00, tx)).expect("0x1A00");
    block_on(servo.sdo_write_array(0x1c12, [0x1600u16])).expect("0x1C12");
    block_on(servo.sdo_write_array(0x1c13, [0x1a00u16])).expect("0x1C13");
    block_on(servo.sdo_write(0x6060, 0, 8i8)).expect("0x6060");
    block_on(servo.sdo_write(0x6085, 0, 50_000u32)).expect("0x6085");
    let ai = group.subdevice(md, 1).expect("AI4");
    block_on(ai.sdo_write_array(0x1c13, [0x1a00u16, 0x1a01, 0x1a02, 0x1a03])).expect("0x1C13");
    block_on(ai.sdo_write(0x8000, 0x06, true)).expect("0x8000:06");
}

#[test]
fn a_new_mapping_written_in_pre_op_reshapes_the_process_data() {
    let (rig, group) = rig(coe_segment(), Faults::new());
    let md = &rig.md;
    apply_example_config(md, &group);
    // ethercrab reads the CoE assignment and mapping while going to SAFE-OP and sizes the SMs.
    let group = block_on(group.into_op(md)).expect("PRE-OP -> OP with the new mapping");
    let sizes: Vec<(usize, usize)> = group
        .iter(md)
        .map(|s| (s.outputs_raw().len(), s.inputs_raw().len()))
        .collect();
    assert_eq!(sizes, [(1, 1), (0, 16), (11, 11)]);
    exchange(md, &group, 40, 3 + 1 + 3);
    let servo = group.subdevice(md, 2).expect("servo");
    // Named entries at their bit offsets: the SDO view of each mapped object is the bytes at
    // its offset in the image (inputs: read after the next exchange, see above).
    let pos: i32 = block_on(servo.sdo_read(0x6064, 0)).expect("0x6064");
    let vel: i32 = block_on(servo.sdo_read(0x606c, 0)).expect("0x606C");
    let mode: i8 = block_on(servo.sdo_read(0x6061, 0)).expect("0x6061");
    block_on(group.tx_rx(md)).expect("tx_rx");
    let i = servo.inputs_raw();
    assert_eq!(pos.to_le_bytes(), i[2..6]);
    assert_eq!(vel.to_le_bytes(), i[6..10]);
    assert_eq!(mode.to_le_bytes(), i[10..11]);
    drop(i);
    let target: i32 = block_on(servo.sdo_read(0x607a, 0)).expect("0x607A");
    assert_eq!(target.to_le_bytes(), servo.outputs_raw()[2..6]);
    // The startup value of an unmapped object stays; a mapped one (0x6060, now in 0x1600)
    // is what the master writes each cycle.
    let decel: u32 = block_on(servo.sdo_read(0x6085, 0)).expect("0x6085");
    assert_eq!(decel, 50_000);
    let mode: i8 = block_on(servo.sdo_read(0x6060, 0)).expect("0x6060");
    assert_eq!(mode as u8, servo.outputs_raw()[10]);
    // In OP the mapping is locked.
    let e = block_on(servo.sdo_write(0x1600, 0, 0u8)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Mailbox(MailboxError::Aborted {
                code: ethercrab::error::CoeAbortCode::InvalidState,
                address: 0x1600,
                ..
            })
        ),
        "{e:?}"
    );
    let e = block_on(servo.sdo_write(0x1c12, 0, 0u8)).unwrap_err();
    assert!(format!("{e}").contains("0x08000022"), "{e}");
    let _ = rig.finish();
}

#[test]
fn ethercrab_sizes_the_sms_from_the_mapping_it_reads() {
    // Only the TxPDO mapping changes (6 bytes in): ethercrab reads it in PRE-OP; the device
    // checks the SM lengths against its mapping at PRE-OP -> SAFE-OP (see coe_mailbox for
    // the refusal of a wrong length).
    let (rig, group) = rig(coe_segment(), Faults::new());
    let md = &rig.md;
    let servo = group.subdevice(md, 2).expect("servo");
    block_on(servo.sdo_write_array(0x1a00, [0x6041_0010u32, 0x6064_0020])).expect("0x1A00");
    let group = block_on(group.into_op(md)).expect("ethercrab follows the new mapping");
    assert_eq!(group.subdevice(md, 2).unwrap().inputs_raw().len(), 6);
    let _ = rig.finish();
}

#[test]
fn ethercrab_lists_the_dictionary() {
    // ethercrab's list buffers are 128 KiB each, on the stack.
    thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(list_the_dictionary)
        .expect("thread")
        .join()
        .expect("no panic");
}

fn list_the_dictionary() {
    let (rig, group) = rig(coe_segment(), Faults::new());
    let md = &rig.md;
    let servo = group.subdevice(md, 2).expect("servo");
    let all = block_on(
        servo.sdo_info_object_description_list(ethercrab::ObjectDescriptionListQuery::All),
    )
    .expect("OD list")
    .expect("CoE");
    for i in [
        0x1000u16, 0x1018, 0x1c12, 0x1c13, 0x1600, 0x1601, 0x1a00, 0x1a01, 0x6040, 0x60ff,
    ] {
        assert!(all.contains(&i), "{i:#06x}");
    }
    let q = block_on(servo.sdo_info_object_quantities())
        .expect("quantities")
        .expect("CoE");
    assert_eq!(usize::from(q.all), all.len());
    assert_eq!(q.rx_pdo_mappable, 5);
    assert_eq!(q.tx_pdo_mappable, 5);
    let _ = rig.finish();
}

#[test]
fn sixty_four_coe_devices_reach_op() {
    let spec = SegmentSpec::coe_reference(64);
    let storage: &'static PduStorage<FRAMES, FRAME_DATA> = Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().expect("split once");
    let port = SimPort::with_faults(spec.clone(), Faults::new());
    let driver = thread::spawn(move || InprocDriver::new(tx, rx, port).run());
    let timeouts = Timeouts {
        eeprom: Duration::from_millis(500),
        pdu: Duration::from_millis(500),
        mailbox_response: Duration::from_millis(1000),
        ..Timeouts::default()
    };
    let md = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
    let group = block_on(md.init_single_group::<64, 1024>(ethercat_now)).expect("init");
    let group = block_on(group.into_op(&md)).expect("OP");
    for (i, sd) in group.iter(&md).enumerate() {
        let d = &spec.devices[i];
        assert_eq!(
            (sd.outputs_raw().len(), sd.inputs_raw().len()),
            (usize::from(d.outputs), usize::from(d.inputs)),
            "{i} {}",
            d.name
        );
    }
    let r = block_on(group.tx_rx(&md)).expect("tx_rx");
    assert_eq!(u32::from(r.working_counter), spec.expected_wkc());
    // SAFETY: the group is not used again.
    unsafe { md.release_all() };
    let _ = driver.join();
}
