//! An unmodified ethercrab MainDevice scans the in-process simulated segment, walks it to OP and
//! exchanges process data, checked byte for byte in both directions.

use ecsim::inproc::InprocDriver;
use ecsim::pdi;
use ecsim::{Faults, SegmentSpec, SimPort};
use ethercrab::std::ethercat_now;
use ethercrab::{MainDevice, MainDeviceConfig, PduStorage, SubDeviceState, Timeouts};
use futures_lite::future::block_on;
use std::thread;

const FRAMES: usize = 16;
const FRAME_DATA: usize = PduStorage::element_size(1100);

fn bring_up_and_exchange<const N: usize, const PDI: usize>(spec: SegmentSpec, cycles: u32) {
    let storage: &'static PduStorage<FRAMES, FRAME_DATA> = Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().expect("split once");
    let faults = Faults::new();
    let n = spec.devices.len();
    let expected_wkc = spec.expected_wkc() as u16;
    let port = SimPort::with_faults(spec.clone(), faults);
    let driver = InprocDriver::new(tx, rx, port);
    let driver_thread = thread::spawn(move || driver.run());

    // Tests run in parallel on two cores: give ethercrab's 10 ms EEPROM timeout some slack.
    let timeouts = Timeouts {
        eeprom: std::time::Duration::from_millis(500),
        pdu: std::time::Duration::from_millis(500),
        ..Timeouts::default()
    };
    let md = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
    let group = block_on(md.init_single_group::<N, PDI>(ethercat_now)).expect("init to PRE-OP");
    assert_eq!(group.len(), n, "every simulated subdevice discovered");
    for (i, sd) in group.iter(&md).enumerate() {
        let d = &spec.devices[i];
        assert_eq!(sd.identity().vendor_id, d.vendor_id);
        assert_eq!(sd.identity().product_id, d.product_id);
        assert_eq!(sd.identity().serial, d.serial);
        assert_eq!(sd.name(), d.name);
        assert_eq!(sd.configured_address(), 0x1000 + i as u16);
    }
    let group = block_on(group.into_op(&md)).expect("PRE-OP -> OP");
    for sd in group.iter(&md) {
        assert_eq!(
            block_on(sd.status()).expect("AL status").0,
            SubDeviceState::Op
        );
    }

    let mut prev_outputs: Vec<Vec<u8>> = spec
        .devices
        .iter()
        .map(|d| vec![0u8; usize::from(d.outputs)])
        .collect();
    let mut counters: Vec<Option<u32>> = vec![None; n];
    let mut echo_mode: Vec<Option<bool>> = vec![None; n];
    for cycle in 0..cycles {
        // Outputs for this cycle: a pattern that changes every cycle and per device.
        for (i, sd) in group.iter(&md).enumerate() {
            let mut o = sd.outputs_raw_mut();
            for (k, b) in o.iter_mut().enumerate() {
                *b = (cycle as u8)
                    .wrapping_mul(7)
                    .wrapping_add(i as u8)
                    .wrapping_add(k as u8);
            }
        }
        let resp = block_on(group.tx_rx(&md)).expect("tx_rx");
        assert_eq!(resp.working_counter, expected_wkc, "cycle {cycle}");
        assert!(resp.all_op(), "cycle {cycle}: {:?}", resp.subdevice_states);
        for (i, sd) in group.iter(&md).enumerate() {
            let inputs = sd.inputs_raw();
            assert_eq!(inputs.len(), usize::from(spec.devices[i].inputs));
            // Inputs echo the previous cycle's outputs, or this cycle's when the device's inputs
            // travel in a later frame of a multi-frame image; a device always does the same.
            let (c, echoes_current) = match pdi::check_inputs(&inputs, &prev_outputs[i]) {
                Some(c) => (c, false),
                None => match pdi::check_inputs(&inputs, &sd.outputs_raw()) {
                    Some(c) => (c, true),
                    None => panic!(
                        "cycle {cycle} device {i}: inputs {:?} echo neither {:?} nor {:?}",
                        &inputs[..],
                        prev_outputs[i],
                        &sd.outputs_raw()[..]
                    ),
                },
            };
            if cycle > 0 {
                assert_eq!(
                    echo_mode[i],
                    Some(echoes_current),
                    "device {i} echo mode is stable"
                );
            }
            echo_mode[i] = Some(echoes_current);
            if let Some(prev) = counters[i] {
                let mask = if inputs.len() >= 4 {
                    u32::MAX
                } else {
                    (1u32 << (8 * inputs.len())) - 1
                };
                assert_eq!(
                    c,
                    prev.wrapping_add(1) & mask,
                    "device {i} counter advances by one"
                );
            }
            counters[i] = Some(c);
            prev_outputs[i] = sd.outputs_raw().to_vec();
        }
    }
    let group = block_on(group.into_safe_op(&md)).expect("OP -> SAFE-OP");
    let group = block_on(group.into_pre_op(&md)).expect("SAFE-OP -> PRE-OP");
    let _group = block_on(group.into_init(&md)).expect("PRE-OP -> INIT");
    // SAFETY: the group is not used again.
    unsafe { md.release_all() };
    let (_tx, _rx, port) = driver_thread.join().expect("driver thread");
    let st = port.stats();
    assert_eq!(st.malformed, 0);
    assert!(st.replied > u64::from(cycles));
    for d in port.segment().devices() {
        assert_eq!(d.al_state(), 1, "left in INIT");
    }
}

#[test]
fn one_subdevice_reaches_op() {
    bring_up_and_exchange::<2, 64>(SegmentSpec::uniform(1, 8, 8), 50);
}

#[test]
fn reference_segment_reaches_op() {
    let spec = SegmentSpec::reference();
    assert_eq!(spec.expected_wkc(), 9);
    bring_up_and_exchange::<4, 256>(spec, 200);
}

#[test]
fn sixteen_subdevices_reach_op() {
    bring_up_and_exchange::<16, 1024>(SegmentSpec::uniform(16, 22, 22), 50);
}

#[test]
fn sixty_four_subdevices_reach_op_with_a_multi_frame_image() {
    // 64 x 44 bytes = 2816 bytes: the LRW spans several frames.
    bring_up_and_exchange::<64, 4096>(SegmentSpec::uniform(64, 22, 22), 30);
}

#[test]
fn mixed_devices_and_short_images() {
    let spec = SegmentSpec::from_toml(
        "[[device]]\nname = \"OUT\"\noutputs = 2\n\
         [[device]]\nname = \"IN\"\ninputs = 3\n\
         [[device]]\nname = \"BIG\"\noutputs = 300\ninputs = 700\n",
    )
    .unwrap();
    assert_eq!(spec.expected_wkc(), 2 + 1 + 3);
    bring_up_and_exchange::<4, 2048>(spec, 30);
}

#[test]
fn dc_capable_segment_reaches_op() {
    bring_up_and_exchange::<4, 256>(SegmentSpec::reference().with_dc(true), 20);
}

/// The categories of an SII image read through ethercrab: (type, data).
fn sii_categories(img: &[u8]) -> Vec<(u16, Vec<u8>)> {
    let word = |at: usize| u16::from_le_bytes([img[at], img[at + 1]]);
    let mut at = 0x80;
    let mut out = Vec::new();
    while word(at) != 0xffff {
        let len = 2 * usize::from(word(at + 2));
        out.push((word(at), img[at + 4..at + 4 + len].to_vec()));
        at += 4 + len;
    }
    out
}

/// (PDO index, PDO name, [(index, sub, name, type code, bits)]) from an SII PDO category.
type NamedPdo = (u16, String, Vec<(u16, u8, String, u8, u8)>);

fn decode_pdos(data: &[u8], strings: &[String]) -> Vec<NamedPdo> {
    let name = |i: u8| match i {
        0 => String::new(),
        i => strings[usize::from(i) - 1].clone(),
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at + 8 <= data.len() {
        let n = usize::from(data[at + 2]);
        let entries = (0..n)
            .map(|k| {
                let e = &data[at + 8 + 8 * k..at + 16 + 8 * k];
                (
                    u16::from_le_bytes([e[0], e[1]]),
                    e[2],
                    name(e[3]),
                    e[4],
                    e[5],
                )
            })
            .collect();
        out.push((
            u16::from_le_bytes([data[at], data[at + 1]]),
            name(data[at + 5]),
            entries,
        ));
        at += 8 + 8 * n;
    }
    out
}

#[test]
fn named_pdos_are_read_from_the_sii_and_size_the_sync_managers() {
    let spec = SegmentSpec::from_toml(include_str!("../../../examples/segment-io.toml")).unwrap();
    let storage: &'static PduStorage<FRAMES, FRAME_DATA> = Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().expect("split once");
    let port = SimPort::with_faults(spec.clone(), Faults::new());
    std::thread::spawn(move || InprocDriver::new(tx, rx, port).run());
    let timeouts = Timeouts {
        eeprom: std::time::Duration::from_millis(500),
        pdu: std::time::Duration::from_millis(500),
        ..Timeouts::default()
    };
    let md = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
    let group = block_on(md.init_single_group::<4, 64>(ethercat_now)).expect("init to PRE-OP");
    for (i, sd) in group.iter(&md).enumerate() {
        let d = &spec.devices[i];
        assert_eq!(sd.name(), d.name);
        // The whole SII, read word by word through ethercrab's EEPROM interface.
        let size = block_on(sd.eeprom_size(&md)).expect("EEPROM size");
        let mut img = vec![0u8; size];
        let n = block_on(sd.eeprom_read_raw(&md, 0, &mut img)).expect("EEPROM read");
        assert_eq!(n, size);
        let cats = sii_categories(&img);
        let strings_cat = &cats.iter().find(|c| c.0 == 10).expect("strings").1;
        let mut strings = Vec::new();
        let mut at = 1;
        for _ in 0..strings_cat[0] {
            let len = usize::from(strings_cat[at]);
            strings.push(String::from_utf8(strings_cat[at + 1..at + 1 + len].to_vec()).unwrap());
            at += 1 + len;
        }
        for (kind, pdos) in [(51u16, d.rx_pdos()), (50, d.tx_pdos())] {
            let found = cats
                .iter()
                .find(|c| c.0 == kind)
                .map(|c| decode_pdos(&c.1, &strings))
                .unwrap_or_default();
            let want: Vec<NamedPdo> = pdos
                .iter()
                .map(|p| {
                    let entries = p
                        .entries
                        .iter()
                        .map(|e| {
                            (
                                e.index,
                                e.sub,
                                e.name.clone().unwrap_or_default(),
                                e.data_type.map_or(0, |t| t.code()),
                                e.bits,
                            )
                        })
                        .collect();
                    (p.index, p.name.clone(), entries)
                })
                .collect();
            assert_eq!(found, want, "{} category {kind}", d.name);
        }
    }
    let group = block_on(group.into_op(&md)).expect("PRE-OP -> OP");
    for (i, sd) in group.iter(&md).enumerate() {
        let d = &spec.devices[i];
        assert_eq!(sd.inputs_raw().len(), usize::from(d.inputs), "{}", d.name);
        assert_eq!(sd.outputs_raw().len(), usize::from(d.outputs), "{}", d.name);
        // SM0 holds the outputs when there are any, the next SM the inputs (no mailbox).
        let mut sms = Vec::new();
        for (bytes, usage) in [(d.outputs, 3), (d.inputs, 4)] {
            if bytes > 0 {
                sms.push((bytes, usage));
            }
        }
        for (k, (bytes, _)) in sms.iter().enumerate() {
            let sm: [u8; 8] = block_on(sd.register_read(0x0800 + 8 * k as u16)).expect("SM");
            assert_eq!(
                u16::from_le_bytes([sm[2], sm[3]]),
                *bytes,
                "{} SM{k}",
                d.name
            );
            assert_eq!(sm[6] & 1, 1, "{} SM{k} enabled", d.name);
        }
    }
    let resp = block_on(group.tx_rx(&md)).expect("tx_rx");
    assert_eq!(resp.working_counter, 6);
    assert!(resp.all_op());
}

#[test]
fn named_pdo_segment_exchanges_data() {
    let spec = SegmentSpec::from_toml(include_str!("../../../examples/segment-io.toml")).unwrap();
    assert_eq!(spec.pdi_bytes(), 14);
    bring_up_and_exchange::<4, 64>(spec, 50);
}

/// Issue 31: terminals without a mailbox whose process data sit on SM0/SM1 as the SII says (a
/// digital input on SM0 at 0x1000, outputs on SM0 at the ESC's output register 0x0F00, 16
/// outputs split over SM0 and SM1, outputs on SM0 with inputs on SM1) are configured by an
/// unmodified ethercrab from their SII alone, reach OP with the expected WKC and exchange data.
#[test]
fn sm01_terminals_are_configured_from_their_sii_and_exchange_data() {
    let spec = SegmentSpec::from_toml(include_str!("../../../examples/sm01/segment.toml")).unwrap();
    assert_eq!((spec.expected_wkc(), spec.pdi_bytes()), (8, 6));
    let storage: &'static PduStorage<FRAMES, FRAME_DATA> = Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().expect("split once");
    let port = SimPort::with_faults(spec.clone(), Faults::new());
    std::thread::spawn(move || InprocDriver::new(tx, rx, port).run());
    let timeouts = Timeouts {
        eeprom: std::time::Duration::from_millis(500),
        pdu: std::time::Duration::from_millis(500),
        ..Timeouts::default()
    };
    let md = MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default());
    let group = block_on(md.init_single_group::<4, 64>(ethercat_now)).expect("init to PRE-OP");
    for (i, sd) in group.iter(&md).enumerate() {
        let d = &spec.devices[i];
        let mut img = vec![0u8; block_on(sd.eeprom_size(&md)).expect("EEPROM size")];
        block_on(sd.eeprom_read_raw(&md, 0, &mut img)).expect("EEPROM read");
        // No mailbox: the standard mailbox words and the protocols are zero.
        assert!(img[0x30..0x3a].iter().all(|b| *b == 0), "{}", d.name);
        let cats = sii_categories(&img);
        let sms = &cats.iter().find(|c| c.0 == 41).expect("SyncManager").1;
        let want = d.sms.as_ref().expect("[[device.sm]]");
        assert_eq!(sms.len(), 8 * want.len(), "{}", d.name);
        for (k, s) in want.iter().enumerate() {
            let c = &sms[8 * k..8 * k + 8];
            let usage = if s.dir == ecsim::pdo::Direction::Outputs {
                3
            } else {
                4
            };
            assert_eq!(
                (u16::from_le_bytes([c[0], c[1]]), c[4], c[6], c[7]),
                (s.start, s.control, s.enable, usage),
                "{} SM{k}",
                d.name
            );
        }
        // Each PDO names the SM it is assigned to.
        for kind in [50u16, 51] {
            let Some(data) = cats.iter().find(|c| c.0 == kind).map(|c| &c.1) else {
                continue;
            };
            for p in data.chunks(16) {
                let index = u16::from_le_bytes([p[0], p[1]]);
                let k = want.iter().position(|s| s.pdos.contains(&index)).unwrap();
                assert_eq!(usize::from(p[3]), k, "{} PDO {index:#06x}", d.name);
            }
        }
    }
    let group = block_on(group.into_op(&md)).expect("PRE-OP -> OP");
    for (i, sd) in group.iter(&md).enumerate() {
        let d = &spec.devices[i];
        assert_eq!(sd.inputs_raw().len(), usize::from(d.inputs), "{}", d.name);
        assert_eq!(sd.outputs_raw().len(), usize::from(d.outputs), "{}", d.name);
        for (k, s) in d.sms.as_ref().unwrap().iter().enumerate() {
            let sm: [u8; 8] = block_on(sd.register_read(0x0800 + 8 * k as u16)).expect("SM");
            assert_eq!(
                (
                    u16::from_le_bytes([sm[0], sm[1]]),
                    u16::from_le_bytes([sm[2], sm[3]])
                ),
                (s.start, d.sm_bytes(k)),
                "{} SM{k}",
                d.name
            );
            assert_eq!(
                (sm[4] & 0x0f, sm[6] & 1),
                (s.control & 0x0f, 1),
                "{} SM{k}",
                d.name
            );
        }
    }
    let resp = block_on(group.tx_rx(&md)).expect("tx_rx");
    assert_eq!(resp.working_counter, 8);
    assert!(resp.all_op());
    drop(group);
    bring_up_and_exchange::<4, 64>(spec, 50);
}
