//! Groups on a junction's port (`[[group]] behind = { position, port }`, issue 28 item 2): the
//! scan that keeps their members out of ethercrab's group, and the order a frame meets the
//! layout's devices in (docs/NOTES.md §17.2).
//!
//! ethercrab 0.7.1 numbers its group by the scan: a group plugged into a junction's port with
//! mandatory devices after that port takes the positions before them, so its presence at a
//! scan would move their places in ethercrab's process image, and its leaving their positions
//! on the wire. So its members (named by alias) go to a second ethercrab group at every scan
//! (`MainDevice::init` with a filter) that rtcat never drives: ethercrab's group — the image,
//! the layout, the working counter — is the same whether the members are there or not. The
//! members are run by rtcat's region ([`crate::region`]) as members absent at bring-up are,
//! joining through their recovery whether they were there at the scan or came later, with
//! station addresses of the region's own range.
//!
//! Every position-addressed step of a recovery then needs the device's position on the wire
//! now, which depends on which members are there: the worker keeps the layout's devices in the
//! order a frame meets them ([`order`], from the scan's DL statuses and each group's configured
//! port: [`crate::tree::processing_order`]), counts the devices before it that answer, and has
//! the neighbours confirm the place before anything is written ([`crate::place`]).

use crate::error::{Error, Result};
use crate::group::PreOpGroup;
use crate::hotconnect::{GroupConfig, Membership, on_a_branch};
use crate::limits::{MAX_PDI_BYTES, MAX_SUBDEVICES};
use crate::region::MAX_MEMBERS;
use ethercrab::std::ethercat_now;
use ethercrab::subdevice_group::PreOp;
use ethercrab::{Command, DefaultLock, MainDevice, SubDeviceGroup, SubDeviceGroupHandle};
use futures_lite::future::block_on;

/// The members of groups on a junction's port a scan found: ethercrab configured them to
/// PRE-OP, nothing else (no process data).
type AsideGroup = SubDeviceGroup<MAX_MEMBERS, 0, DefaultLock, PreOp>;

/// A device a scan kept out of ethercrab's group: a member of a group on a junction's port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Aside {
    /// The station address the scan gave it (0x1000 + scan index).
    pub(crate) address: u16,
    pub(crate) alias: u16,
    pub(crate) dc: bool,
}

/// Every device of a scan in processing order: ethercrab's group and the members kept aside,
/// by the station addresses the scan gave (0x1000 + scan index), each with whether it has DC.
pub(crate) type Scanned = Vec<(u16, bool)>;

/// The segment scanned to PRE-OP, the members of `groups` on a junction's port (by alias) kept
/// out of ethercrab's group. Without such groups, ethercrab's single group as before.
pub(crate) fn scan(
    md: &MainDevice<'static>,
    groups: &[GroupConfig],
) -> Result<(PreOpGroup, Vec<Aside>)> {
    if !groups.iter().any(|g| g.behind.is_some()) {
        return block_on(md.init_single_group::<MAX_SUBDEVICES, MAX_PDI_BYTES>(ethercat_now))
            .map(|g| (g, Vec::new()))
            .map_err(|e| scan_failed(md, false, e));
    }
    let (main, aside): (PreOpGroup, AsideGroup) = block_on(md.init::<MAX_SUBDEVICES, _>(
        ethercat_now,
        Default::default(),
        |g: &(PreOpGroup, AsideGroup), sd| {
            Ok(if on_a_branch(groups, sd.alias_address()) {
                &g.1 as &dyn SubDeviceGroupHandle
            } else {
                &g.0 as &dyn SubDeviceGroupHandle
            })
        },
    ))
    .map_err(|e| scan_failed(md, true, e))?;
    let aside = aside
        .iter(md)
        .map(|sd| Aside {
            address: sd.configured_address(),
            alias: sd.alias_address(),
            dc: sd.dc_support().any(),
        })
        .collect();
    Ok((main, aside))
}

/// A scan's failure as the master reports it: a segment beyond the master's capacities names
/// both sizes (`branches`: with groups on a junction's port, whose members have a limit of
/// their own).
fn scan_failed(md: &MainDevice<'static>, branches: bool, e: ethercrab::error::Error) -> Error {
    match e {
        ethercrab::error::Error::Capacity(ethercrab::error::Item::SubDevice) => {
            Error::Capacity(format!(
                "the segment has {} subdevices; rtcat runs at most {MAX_SUBDEVICES}{}",
                md.num_subdevices(),
                if branches {
                    format!(
                        ", of them at most {MAX_MEMBERS} members of groups on a junction's port"
                    )
                } else {
                    String::new()
                }
            ))
        }
        e => Error::bus("segment scan/configuration", e),
    }
}

/// Every device of the scan in processing order ([`Scanned`]): ethercrab's group's and the
/// members kept aside, merged by the addresses the scan gave in its order.
pub(crate) fn scanned(md: &MainDevice<'static>, group: &PreOpGroup, aside: &[Aside]) -> Scanned {
    let mut all: Scanned = group
        .iter(md)
        .map(|sd| (sd.configured_address(), sd.dc_support().any()))
        .chain(aside.iter().map(|a| (a.address, a.dc)))
        .collect();
    all.sort_by_key(|&(address, _)| address);
    all
}

/// With `[dc]`: ethercrab made the first device with DC of the whole scan the reference clock;
/// a member of a group on a junction's port cannot be it (every other clock follows its
/// system time, and it may leave).
pub(crate) fn check_reference(
    groups: &[GroupConfig],
    scanned: &Scanned,
    aside: &[Aside],
) -> Result<()> {
    let Some(&(address, _)) = scanned.iter().find(|(_, dc)| *dc) else {
        return Ok(());
    };
    match aside.iter().find(|a| a.address == address) {
        Some(a) => Err(Error::SegmentMismatch(format!(
            "the first device with a distributed clock on the segment (the DC reference clock) \
             is the one with alias {:#06x}, a member of group {:?} on a junction's port: a \
             device with DC must come before the group (every other clock follows the \
             reference's system time, and the group may leave)",
            a.alias,
            groups
                .iter()
                .find(|g| g.on_branch_with(a.alias))
                .map_or("?", |g| g.name.as_str())
        ))),
        None => Ok(()),
    }
}

/// The layout's positions in the order a frame meets them with every device present: the
/// scan's devices as the DL status of each shows them (one FPRD each), each group on a
/// junction's port in the place of its port, the other members absent at the scan at the
/// line's end. `n`: ethercrab's group's devices (layout positions 0..n), `hot.absent` the
/// members after them. Without groups on a junction's port, the layout's order (nothing read).
pub(crate) fn order(
    md: &MainDevice<'static>,
    groups: &[GroupConfig],
    scanned: &Scanned,
    aside: &[Aside],
    n: usize,
    hot: &Membership,
) -> Result<Vec<usize>> {
    if !groups.iter().any(|g| g.behind.is_some()) {
        return Ok((0..n + hot.absent.len()).collect());
    }
    // The layout positions of the members absent from ethercrab's group of the groups `keep`
    // takes (by index).
    let late = |keep: &dyn Fn(usize) -> bool| -> Vec<usize> {
        (hot.absent.iter().enumerate())
            .filter(|(_, a)| keep(a.group))
            .map(|(k, _)| n + k)
            .collect()
    };
    let mut dl = Vec::with_capacity(scanned.len());
    for (i, &(address, _)) in scanned.iter().enumerate() {
        dl.push(
            block_on(Command::fprd(address, 0x0110).receive::<u16>(md)).map_err(|e| {
                Error::bus(format!("DL status of the device at scan position {i}"), e)
            })?,
        );
    }
    let parents = crate::tree::parents(&dl).map_err(Error::SegmentMismatch)?;
    let mut next = 0;
    let layout_of: Vec<Option<usize>> = scanned
        .iter()
        .map(|&(address, _)| {
            (!aside.iter().any(|a| a.address == address)).then(|| {
                next += 1;
                next - 1
            })
        })
        .collect();
    let members: Vec<(usize, usize, Vec<usize>)> = (groups.iter().enumerate())
        .filter_map(|(gi, g)| {
            let b = g.behind?;
            Some((
                usize::from(b.position),
                usize::from(b.port),
                late(&|o| o == gi),
            ))
        })
        .collect();
    let branches: Vec<crate::tree::Branch<'_>> = (members.iter())
        .map(|(j, port, m)| (*j, *port, m.as_slice()))
        .collect();
    let tail = late(&|o| groups[o].behind.is_none());
    let order =
        crate::tree::processing_order(&parents, &layout_of, &branches, &tail).map_err(|e| {
            Error::SegmentMismatch(format!(
                "groups on a junction's port: {e} (DL status by scan position: {dl:04x?})"
            ))
        })?;
    // Every layout position once: what the recovery worker indexes by.
    let mut sorted = order.clone();
    sorted.sort_unstable();
    if !sorted.iter().copied().eq(0..n + hot.absent.len()) {
        return Err(Error::SegmentMismatch(format!(
            "groups on a junction's port: the order {order:?} is not each of the layout's {} \
             positions once (internal)",
            n + hot.absent.len()
        )));
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> Vec<GroupConfig> {
        #[derive(serde::Deserialize)]
        struct F {
            group: Vec<GroupConfig>,
        }
        let f: F = toml::from_str(
            "[[group]]\nname = \"tool\"\noptional = true\nbehind = { position = 0, port = 3 }\n\
             members = [{ alias = 0x10 }]\n",
        )
        .expect("group");
        f.group
    }

    #[test]
    fn a_member_on_a_junction_s_port_cannot_be_the_dc_reference() {
        let member = Aside {
            address: 0x1001,
            alias: 0x10,
            dc: true,
        };
        // The junction without DC, the member with: ethercrab's reference would be the member.
        let scanned = vec![(0x1000, false), (0x1001, true), (0x1002, true)];
        let e = check_reference(&tool(), &scanned, &[member]).expect_err("refused");
        assert!(
            e.to_string()
                .contains("alias 0x0010, a member of group \"tool\""),
            "{e}"
        );
        // A junction with DC is the reference.
        let scanned = vec![(0x1000, true), (0x1001, true), (0x1002, true)];
        assert!(check_reference(&tool(), &scanned, &[member]).is_ok());
        // No DC at all, or the member absent: nothing to check.
        assert!(check_reference(&tool(), &vec![(0x1000, false)], &[]).is_ok());
        assert!(check_reference(&tool(), &vec![(0x1000, false), (0x1001, true)], &[]).is_ok());
    }
}
