//! The shipped ESI files of the simulated devices (`examples/coe/*.xml`,
//! `examples/cia402/SERVO402-SIM.xml`, ETG.2000) parse with rtcat's ESI reader and agree with what
//! the simulator makes of the segment descriptions next to them: identity, sync managers, PDOs
//! with their default mapping, and every object of the dictionary (index, size, access, PDO
//! mapping, default value). One description of a device, two readers: they must not drift apart.

use ecsim::od::{Access, ObjectCode, Od};
use ecsim::pdo::Direction;
use ecsim::{DeviceSpec, SegmentSpec, sii};
use rtcat_esi::{AccessKind, PdoMapping, read_file};
use std::path::{Path, PathBuf};

fn examples(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(rel)
}

fn segment(rel: &str) -> SegmentSpec {
    SegmentSpec::load(&examples(rel)).expect("segment")
}

#[test]
fn the_esi_agrees_with_the_simulated_drive() {
    let spec = segment("cia402/segment.toml");
    let d = &spec.devices[0];
    assert_eq!((d.outputs, d.inputs), (13, 19), "the CSP mapping");
    assert_eq!(d.coe.as_ref().expect("CoE").device_type, 0x0002_0192);
    agrees(&examples("cia402/SERVO402-SIM.xml"), d);
}

#[test]
fn the_esi_files_agree_with_the_simulated_coe_devices() {
    let spec = segment("coe/segment.toml");
    assert_eq!(spec.devices.len(), 3);
    for d in &spec.devices {
        agrees(&examples(&format!("coe/{}.xml", d.name)), d);
    }
}

/// The mailbox-less terminals of `examples/sm01` (issue 31): per device the ESI's sync managers
/// are the simulator's SII ones (start, control byte, usage, size) and each PDO sits on the same
/// SM with the same entries.
#[test]
fn the_esi_agrees_with_the_simulated_sm01_terminals() {
    let spec = segment("sm01/segment.toml");
    let f = read_file(&examples("sm01/SM01-TERMINALS.xml")).expect("SM01-TERMINALS.xml");
    assert_eq!(f.devices.len(), spec.devices.len());
    for d in &spec.devices {
        let e = f.devices.iter().find(|e| e.name == d.name).expect(&d.name);
        assert_eq!(
            (e.product_code, e.revision),
            (d.product_id, Some(d.revision))
        );
        assert!(e.mailbox.is_none(), "{}", d.name);
        let esi: Vec<(u16, Option<u8>, String, Option<u16>)> = e
            .sync_managers
            .iter()
            .map(|s| (s.start, s.control_byte, s.usage.clone(), s.default_size))
            .collect();
        let sim: Vec<(u16, Option<u8>, String, Option<u16>)> = sii::process_data_sms(d)
            .iter()
            .map(|s| {
                let usage = if s.usage == 3 { "Outputs" } else { "Inputs" };
                (s.start, Some(s.control), usage.to_string(), Some(s.len))
            })
            .collect();
        assert_eq!(esi, sim, "{}: sync managers", d.name);
        let sms = d.sms.as_ref().expect("[[device.sm]]");
        for (dir, list) in [
            (Direction::Outputs, d.rx_pdos()),
            (Direction::Inputs, d.tx_pdos()),
        ] {
            for p in list.iter() {
                let (x, rx) = e.pdo(p.index).unwrap_or_else(|| panic!("{:#06x}", p.index));
                assert_eq!(rx, dir == Direction::Outputs);
                let sm = sms.iter().position(|s| s.pdos.contains(&p.index));
                assert_eq!(x.sm.map(usize::from), sm, "{} {:#06x}", d.name, p.index);
                let esi: Vec<(u16, u8, u16)> =
                    x.entries.iter().map(|e| (e.index, e.sub, e.bits)).collect();
                let sim: Vec<(u16, u8, u16)> = p
                    .entries
                    .iter()
                    .map(|e| (e.index, e.sub, u16::from(e.bits)))
                    .collect();
                assert_eq!(esi, sim, "{} {:#06x}", d.name, p.index);
            }
        }
        assert_eq!(
            e.rx_pdos.len() + e.tx_pdos.len(),
            d.rx_pdos().len() + d.tx_pdos().len()
        );
    }
}

fn agrees(esi: &Path, d: &DeviceSpec) {
    let f = read_file(esi).unwrap_or_else(|e| panic!("{}: {e}", esi.display()));
    assert_eq!(f.devices.len(), 1, "{}", esi.display());
    let e = &f.devices[0];
    assert_eq!(
        (e.name.as_str(), f.vendor.id, e.product_code, e.revision),
        (d.name.as_str(), d.vendor_id, d.product_id, Some(d.revision))
    );
    // Process data SMs with the default sizes.
    let sm = |usage: &str| e.sync_managers.iter().find(|s| s.usage == usage).unwrap();
    assert_eq!(sm("Outputs").default_size, Some(d.outputs));
    assert_eq!(sm("Inputs").default_size, Some(d.inputs));
    // Every sync manager where the simulator's SII puts it (ETG.2000 Sm@StartAddress).
    let starts: Vec<(&str, u16)> = e
        .sync_managers
        .iter()
        .map(|s| (s.usage.as_str(), s.start))
        .collect();
    assert_eq!(
        starts,
        [
            ("MBoxOut", sii::MBX_OUT_ADDR),
            ("MBoxIn", sii::MBX_IN_ADDR),
            ("Outputs", sii::COE_OUTPUT_SM_ADDR),
            ("Inputs", sii::COE_INPUT_SM_ADDR)
        ],
        "{}: sync managers",
        d.name
    );
    // Every PDO: index, default assignment (an SM) and entries.
    let coe = d.coe.as_ref().expect("CoE");
    for p in &coe.pdos {
        let (x, rx) = e
            .pdo(p.pdo.index)
            .unwrap_or_else(|| panic!("{:#06x}", p.pdo.index));
        assert_eq!(rx, p.dir == Direction::Outputs);
        assert_eq!(x.sm.is_some(), p.assigned, "{:#06x} assigned", p.pdo.index);
        let esi: Vec<(u16, u8, u16)> = x.entries.iter().map(|e| (e.index, e.sub, e.bits)).collect();
        let sim: Vec<(u16, u8, u16)> = p
            .pdo
            .entries
            .iter()
            .map(|e| (e.index, e.sub, u16::from(e.bits)))
            .collect();
        assert_eq!(esi, sim, "{:#06x}", p.pdo.index);
    }
    assert_eq!(e.rx_pdos.len() + e.tx_pdos.len(), coe.pdos.len());
    // Every object of the simulated dictionary is in the ESI with the same properties.
    let od = Od::build(d, coe);
    let dict = e.dictionary.as_ref().expect("dictionary");
    let mut n = 0;
    for o in od.objects() {
        let x = dict
            .object(o.index)
            .unwrap_or_else(|| panic!("{:#06x} missing from the ESI", o.index));
        n += 1;
        if o.code != ObjectCode::Var {
            // Records: the count of sub-items and their defaults.
            assert_eq!(
                x.sub_items.len(),
                o.entries.len(),
                "{:#06x} sub-items",
                o.index
            );
            for (k, se) in o.entries.iter().enumerate() {
                let want = se
                    .default
                    .iter()
                    .rev()
                    .fold(0u64, |a, &b| a << 8 | u64::from(b));
                let got = x.sub_items[k].default.as_ref().and_then(|v| v.as_u64());
                // The serial number (0x1018:04) is the device's, not the description's.
                if (o.index, se.sub) != (0x1018, 4) && se.default.len() <= 8 {
                    assert_eq!(got, Some(want), "{:#06x}:{:02x} default", o.index, se.sub);
                }
            }
            continue;
        }
        let v = &o.entries[0];
        if o.index >= 0x6000 {
            assert_eq!(
                x.bit_size,
                u32::from(v.bits(&v.default)),
                "{:#06x} size",
                o.index
            );
            let default = x.default.as_ref().and_then(|v| v.as_u64());
            let want = v
                .default
                .iter()
                .rev()
                .fold(0u64, |a, &b| a << 8 | u64::from(b));
            assert_eq!(default, Some(want), "{:#06x} default", o.index);
            let access = x.access.as_ref().map(|a| a.kind);
            let want = match v.access {
                Access::Ro => AccessKind::Ro,
                _ => AccessKind::Rw,
            };
            assert_eq!(access, Some(want), "{:#06x} access", o.index);
            let map = match v.mapping {
                Some(Direction::Outputs) => Some(PdoMapping::R),
                Some(Direction::Inputs) => Some(PdoMapping::T),
                None => None,
            };
            assert_eq!(x.pdo_mapping, map, "{:#06x} PDO mapping", o.index);
        }
    }
    assert_eq!(
        n,
        dict.objects.len(),
        "the ESI lists no object the drive lacks"
    );
}
