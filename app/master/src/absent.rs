//! The place in the layout of an optional group's member that is not on the segment at
//! bring-up (issue 28 item 2, docs/NOTES.md §17.2): its PDOs from its `[[device]]` entry.
//!
//! The layout the application and the shared image see must not change when a member comes or
//! goes, so a member absent at bring-up gets its entries then, flagged invalid until it has
//! joined. Its mapping cannot be read from a device that is not there, and its SII (PDO names,
//! data types) is not known either: the `[[device]]` entry that names it must give
//! `pdo_assign` and, for every PDO assigned, `pdo_map` — the same mapping it will be configured
//! with when it appears (an absent CoE device without one is refused, naming the group and the
//! member). Entries are named as `pdo_map` names them, else `0xIIII:SS`; their data type is
//! unknown (0) and stays so, as the layout does not change when the device appears.
//!
//! Optional devices are the end of the line (`hotconnect`), so the absent members take the
//! positions after the last device found, in the order of their group's `members`: their inputs
//! and outputs come after every present device's in the application's image, and no present
//! device's offset moves.

use crate::devices::{self, DeviceConfig, Found};
use crate::hotconnect_config::GroupConfig;
use crate::layout::{Direction, Identity, MappingSource, PdoSource, SubdeviceSource};
use thiserror::Error;

/// Why an absent member has no place in the layout.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "group {group:?}: group[{gi}].members[{member}] ({matcher}) is not on the segment at \
     bring-up: {why}"
)]
pub struct AbsentError {
    /// The group's name.
    pub group: String,
    /// Index of the group in `[[group]]`.
    pub gi: usize,
    /// Index of the member in its `members`.
    pub member: usize,
    /// The member's matcher (`alias 0x0010`).
    pub matcher: String,
    /// What is missing.
    pub why: String,
}

/// The layout source of member `member` of group `gi`, absent at bring-up and expected at
/// `position`, from the `[[device]]` entry that selects it (by its position, alias or
/// identity: the only things known of a device that is not there).
pub fn source(
    groups: &[GroupConfig],
    gi: usize,
    member: usize,
    position: u16,
    device: &[DeviceConfig],
) -> Result<SubdeviceSource, AbsentError> {
    let g = &groups[gi];
    let m = &g.members[member];
    let refuse = |why: String| AbsentError {
        group: g.name.clone(),
        gi,
        member,
        matcher: m.matcher(),
        why,
    };
    let identity = (
        m.vendor_id.unwrap_or(0),
        m.product_id.unwrap_or(0),
        m.revision.unwrap_or(0),
    );
    let expected = Found {
        position,
        alias: m.alias.unwrap_or(0),
        identity,
    };
    let mut named = device
        .iter()
        .enumerate()
        .filter(|(_, d)| d.matches(&expected));
    let (di, d) = named.next().ok_or_else(|| {
        refuse(format!(
            "no [[device]] entry selects it (by position {position}, its alias or its identity), \
             and the layout needs its mapping before it appears: add one with pdo_assign and \
             pdo_map"
        ))
    })?;
    if let Some((other, _)) = named.next() {
        return Err(refuse(format!(
            "device[{di}] and device[{other}] both select it"
        )));
    }
    let Some(assign) = &d.pdo_assign else {
        return Err(refuse(format!(
            "device[{di}] ({}) has no pdo_assign: the mapping of a device that is not there \
             cannot be read, it must be configured",
            d.matcher()
        )));
    };
    let mut pdos = Vec::new();
    for (sm, list) in assign.lists() {
        for &index in list {
            let direction = if devices::RXPDO.contains(&index) {
                Direction::Outputs
            } else if devices::TXPDO.contains(&index) {
                Direction::Inputs
            } else {
                return Err(refuse(format!(
                    "device[{di}].pdo_assign.sm{sm} lists {index:#06x}, neither an RxPDO nor a \
                     TxPDO"
                )));
            };
            let map = d.pdo_map.iter().find(|p| p.index == index).ok_or_else(|| {
                refuse(format!(
                    "device[{di}].pdo_assign.sm{sm} lists {index:#06x}, which no \
                     device[{di}].pdo_map gives: the mapping of a device that is not there \
                     cannot be read, it must be configured"
                ))
            })?;
            let entries = map
                .entries
                .iter()
                .map(|e| {
                    devices::parse_entry(e.text())
                        .map(|(i, s, b)| (i, s, b, e.name().map(str::to_string), 0u8))
                        .map_err(|why| refuse(format!("device[{di}].pdo_map {index:#06x}: {why}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            pdos.push(PdoSource {
                index,
                name: None,
                sync_manager: sm,
                direction,
                entries,
            });
        }
    }
    // The order `Layout::build` expects: sync manager order, then assignment order.
    pdos.sort_by_key(|p| p.sync_manager);
    Ok(SubdeviceSource {
        address: 0,
        alias: m.alias.unwrap_or(0),
        // The name it keeps whether present or not (the layout does not change when it joins).
        name: d
            .name
            .clone()
            .unwrap_or_else(|| format!("{} {}", g.name, m.matcher())),
        identity: Identity {
            vendor_id: identity.0,
            product_code: identity.1,
            revision: identity.2,
            serial: 0,
        },
        coe: !assign.names_sm01(),
        mapping: if assign.names_sm01() {
            MappingSource::Sii
        } else {
            MappingSource::Coe
        },
        pdos,
    })
}

/// A member of an optional group by its `[[group]]` index, its index in `members` and the
/// position it was given after the line's end.
pub(crate) type Place = (usize, usize, u16);

/// The absent members in the layout's sources (`sources`: the present devices', by position):
/// those absent now (`absent`) after every present device, with the station address each
/// will be given; and those absent at the run's first bring-up but present now
/// (`first_absent`: joined, then the segment re-initialised) with the entries they were given
/// then, the device's identity and address kept — so the layout the application and the
/// shared image were given does not change when a member comes or goes (its sizes are
/// checked against ethercrab's image by the bring-up).
pub(crate) fn place(
    groups: &[GroupConfig],
    devices: &[DeviceConfig],
    sources: &mut Vec<SubdeviceSource>,
    (first_absent, absent): (&[Place], &[Place]),
) -> Result<(), AbsentError> {
    for &(gi, member, position) in first_absent {
        let p = usize::from(position);
        let Some(read) = sources.get(p) else {
            continue;
        };
        let mut src = source(groups, gi, member, position, devices)?;
        src.address = read.address;
        src.alias = read.alias;
        src.identity = read.identity;
        sources[p] = src;
    }
    for &(gi, member, position) in absent {
        let mut src = source(groups, gi, member, position, devices)?;
        src.address = crate::region::station_address(usize::from(position));
        sources.push(src);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    #[derive(serde::Deserialize)]
    struct F {
        #[serde(default)]
        group: Vec<GroupConfig>,
        #[serde(default)]
        device: Vec<DeviceConfig>,
    }

    fn parse(text: &str) -> F {
        let f: F = toml::from_str(text).expect("toml");
        crate::hotconnect::validate(&f.group, None).expect("groups");
        devices::validate(&f.device, None).expect("devices");
        f
    }

    const GROUP: &str = "[[group]]\nname = \"tool\"\noptional = true\n\
                         members = [{ alias = 0x10 }, { vendor_id = 2, product_id = 0x30003 }]\n";
    const DRIVE: &str = "[[device]]\nalias = 0x10\nname = \"gripper\"\n\
         pdo_assign = { sm2 = [0x1600], sm3 = [0x1a00] }\n\
         [[device.pdo_map]]\nindex = 0x1600\nentries = [{ entry = \"0x7000:01:16\", name = \"Jaw\" }, \"0x7000:02:1\"]\n\
         [[device.pdo_map]]\nindex = 0x1a00\nentries = [\"0x6000:01:32\"]\n";

    /// A present device's source: 2 input bytes, 1 output byte.
    fn present() -> SubdeviceSource {
        SubdeviceSource {
            address: 0x1001,
            alias: 0,
            name: "EL".into(),
            identity: Identity::default(),
            coe: false,
            mapping: MappingSource::Sii,
            pdos: vec![
                PdoSource {
                    index: 0x1a00,
                    name: None,
                    sync_manager: 1,
                    direction: Direction::Inputs,
                    entries: vec![(0x6000, 1, 16, None, 6)],
                },
                PdoSource {
                    index: 0x1600,
                    name: None,
                    sync_manager: 0,
                    direction: Direction::Outputs,
                    entries: vec![(0x7000, 1, 8, None, 5)],
                },
            ],
        }
    }

    #[test]
    fn an_absent_member_takes_its_configured_mapping_after_the_present_devices() {
        let f = parse(&format!("{GROUP}{DRIVE}"));
        let s = source(&f.group, 0, 0, 2, &f.device).expect("a source");
        assert_eq!(s.name, "gripper");
        assert!(s.coe);
        let mut subs = vec![present(), present()];
        let alone = Layout::build(1, &subs).expect("present only");
        subs.push(s);
        let l = Layout::build(1, &subs).expect("with the absent member");
        // The present devices' places do not move; the absent one's follow them.
        assert_eq!(l.subdevices[..2], alone.subdevices[..]);
        assert_eq!(l.entries[..4], alone.entries[..]);
        let g = &l.subdevices[2];
        assert_eq!((g.input_offset, g.input_bytes), (4, 4));
        // 17 bits of outputs: 3 bytes.
        assert_eq!((g.output_offset, g.output_bytes), (2, 3));
        let jaw = l.by_name(Direction::Outputs, Some(2), "Jaw");
        assert_eq!(jaw.map(|e| (e.bit_offset, e.bits)).ok(), Some((16, 16)));
        assert!(l.entries_of(2).any(|e| e.name == "0x7000:02"));
    }

    #[test]
    fn absent_members_are_placed_and_a_joined_one_keeps_its_configured_entries() {
        let f = parse(&format!("{GROUP}{DRIVE}"));
        // Absent now: appended with the address it will be given (the region's range).
        let mut subs = vec![present(), present()];
        place(&f.group, &f.device, &mut subs, (&[], &[(0, 0, 2)])).expect("placed");
        assert_eq!(subs.len(), 3);
        assert_eq!(
            (subs[2].name.as_str(), subs[2].address),
            ("gripper", 0x2002)
        );
        // Present at a re-initialisation after it joined: its configured entries, the
        // device's identity and address.
        let mut joined = present();
        joined.address = 0x1002;
        joined.identity.vendor_id = 7;
        let mut subs = vec![present(), present(), joined];
        place(&f.group, &f.device, &mut subs, (&[(0, 0, 2)], &[])).expect("placed");
        assert_eq!(subs.len(), 3);
        assert_eq!(subs[2].name, "gripper");
        assert_eq!((subs[2].address, subs[2].identity.vendor_id), (0x1002, 7));
        let sms: Vec<u8> = subs[2].pdos.iter().map(|p| p.sync_manager).collect();
        assert_eq!(sms, [2, 3], "the configured PDOs, not the device's");
        // Neither: nothing changes.
        let mut subs = vec![present()];
        place(&f.group, &f.device, &mut subs, (&[(0, 0, 2)], &[])).expect("nothing");
        assert_eq!(subs, vec![present()]);
    }

    #[test]
    fn an_absent_member_without_a_configured_mapping_is_refused_naming_it() {
        let f = parse(GROUP);
        let e = source(&f.group, 0, 0, 3, &f.device).expect_err("no [[device]]");
        assert_eq!(
            e.to_string(),
            "group \"tool\": group[0].members[0] (alias 0x0010) is not on the segment at \
             bring-up: no [[device]] entry selects it (by position 3, its alias or its \
             identity), and the layout needs its mapping before it appears: add one with \
             pdo_assign and pdo_map"
        );
        // By identity, an entry with the assignment but not the mapping of 0x1a00.
        let f = parse(&format!(
            "{GROUP}[[device]]\nvendor_id = 2\nproduct_id = 0x30003\n\
             pdo_assign = {{ sm2 = [0x1600], sm3 = [0x1a00] }}\n\
             [[device.pdo_map]]\nindex = 0x1600\nentries = [\"0x7000:01:16\"]\n"
        ));
        let e = source(&f.group, 0, 1, 4, &f.device)
            .expect_err("no mapping")
            .to_string();
        assert!(
            e.contains("group[0].members[1] (vendor_id 0x00000002 product_id 0x00030003)")
                && e.contains("lists 0x1a00, which no device[0].pdo_map gives"),
            "{e}"
        );
        // An entry without pdo_assign.
        let f = parse(&format!(
            "{GROUP}[[device]]\nalias = 0x10\n[[device.sdo]]\nindex = 0x8000\nsub = 1\n\
             type = \"u8\"\nvalue = 1\n"
        ));
        let e = source(&f.group, 0, 0, 3, &f.device).expect_err("no assignment");
        assert!(e.to_string().contains("has no pdo_assign"), "{e}");
    }
}
