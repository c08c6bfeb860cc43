//! The shipped ESI of the simulated drive (`examples/cia402/SERVO402-SIM.xml`, ETG.2000) parses
//! with rtcat's ESI reader and agrees with what the simulator makes of `profile = "cia402"`:
//! identity, sync managers, PDOs with their default mapping, and every object of the
//! dictionary (index, size, access, PDO mapping, default value).

use ecsim::SegmentSpec;
use ecsim::od::{Access, ObjectCode, Od};
use ecsim::pdo::Direction;
use rtcat_esi::{AccessKind, PdoMapping, read_file};
use std::path::PathBuf;

fn examples(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/cia402")
        .join(name)
}

#[test]
fn the_esi_agrees_with_the_simulated_drive() {
    let f = read_file(&examples("SERVO402-SIM.xml")).expect("parses");
    assert_eq!(f.devices.len(), 1);
    let e = &f.devices[0];
    let spec = SegmentSpec::from_toml(include_str!("../../../examples/cia402/segment.toml"))
        .expect("segment");
    let d = &spec.devices[0];
    assert_eq!(
        (e.name.as_str(), f.vendor.id, e.product_code, e.revision),
        (d.name.as_str(), d.vendor_id, d.product_id, Some(d.revision))
    );
    // Process data SMs with the default sizes.
    let sm = |usage: &str| e.sync_managers.iter().find(|s| s.usage == usage).unwrap();
    assert_eq!(sm("Outputs").default_size, Some(d.outputs));
    assert_eq!(sm("Inputs").default_size, Some(d.inputs));
    assert_eq!((d.outputs, d.inputs), (13, 19), "the CSP mapping");
    // Every PDO: index, default assignment (an SM) and entries.
    let coe = d.coe.as_ref().expect("CoE");
    assert_eq!(coe.device_type, 0x0002_0192);
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
