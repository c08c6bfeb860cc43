//! Where each device hangs in the segment: its parent and the parent's port, from the DL status
//! (0x0110) of every device in processing order, and the port receive times (0x0900..0x090F)
//! read as the time a frame spends behind a port.
//!
//! A frame enters a device at port 0 and leaves through its open ports in the order 3, 1, 2
//! before it goes back out of port 0 (ETG.1000.4 §5.4 "frame processing", the ESC datasheet
//! section I "frame processing order"): positions are numbered depth first in that order, so
//! the device after a line's end hangs off the nearest device before it with a port still
//! unvisited. A port is open when communication is established on it and its loop is not
//! closed (DL status bits 9 + 2p and 8 + 2p, ET1100 register description).

/// The ports a frame leaves through after entering at port 0, in processing order.
pub(crate) const DOWNSTREAM: [usize; 3] = [3, 1, 2];

/// Whether port `p` of a device with DL status `dl` passes frames on (communication, loop open).
pub(crate) fn open(dl: u16, p: usize) -> bool {
    dl & (0x0200 << (2 * p)) != 0 && dl & (0x0100 << (2 * p)) == 0
}

/// A device's open downstream ports in processing order.
pub(crate) fn downstream(dl: u16) -> impl Iterator<Item = usize> {
    DOWNSTREAM.into_iter().filter(move |&p| open(dl, p))
}

/// Each device's parent and the parent's port it hangs off (`None` for the first), from the
/// DL statuses of the devices in processing order. A device with no parent left (more devices
/// than the open ports before them lead to) is an error naming it.
pub(crate) fn parents(dl: &[u16]) -> Result<Vec<Option<(usize, usize)>>, String> {
    // Devices with ports not yet visited, the latest last, each with its unvisited ports.
    let mut open_ports: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut out = Vec::with_capacity(dl.len());
    for (i, &s) in dl.iter().enumerate() {
        let parent = if i == 0 {
            None
        } else {
            let (p, ports) = open_ports.last_mut().ok_or_else(|| {
                format!(
                    "position {i}: no device before it has an open port left (DL status of \
                     positions 0..{i}: {:04x?})",
                    &dl[..i]
                )
            })?;
            let port = ports.remove(0);
            let p = *p;
            if ports.is_empty() {
                open_ports.pop();
            }
            Some((p, port))
        };
        out.push(parent);
        let ports: Vec<usize> = downstream(s).collect();
        if !ports.is_empty() {
            open_ports.push((i, ports));
        }
    }
    Ok(out)
}

/// A group on a junction's port, for [`processing_order`]: the junction's layout position, the
/// port, and the group's members' layout positions in the order a frame meets them.
pub(crate) type Branch<'a> = (usize, usize, &'a [usize]);

/// The layout's devices in the order a frame meets them with every one of them present:
/// the devices a scan found (`parents` of each, from [`parents`]; `layout_of` each one's layout
/// position, `None` for a member of a group on a junction's port, which the layout holds after
/// the line's end), each group of `branches` in the place of whatever its port leads to, and
/// `tail` (the other members absent at the scan, the line's end) last. A device of the layout
/// found behind a group's port (its position would depend on the group) is an error naming it.
pub(crate) fn processing_order(
    parents: &[Option<(usize, usize)>],
    layout_of: &[Option<usize>],
    branches: &[Branch<'_>],
    tail: &[usize],
) -> Result<Vec<usize>, String> {
    let mut child = vec![[None::<usize>; 4]; parents.len()];
    for (i, p) in parents.iter().enumerate() {
        if let Some((p, port)) = *p {
            child[p][port] = Some(i);
        }
    }
    let mut out = Vec::with_capacity(layout_of.len() + tail.len());
    let mut placed = vec![false; branches.len()];
    // Depth first without recursion (a line of a thousand devices): each device on the stack
    // with the index of its next port in `DOWNSTREAM`.
    let mut stack: Vec<(usize, usize)> = Vec::new();
    if !parents.is_empty() {
        out.extend(layout_of[0]);
        stack.push((0, 0));
    }
    while let Some(top) = stack.last_mut() {
        let (d, k) = *top;
        if k == DOWNSTREAM.len() {
            stack.pop();
            continue;
        }
        top.1 += 1;
        let port = DOWNSTREAM[k];
        let branch =
            layout_of[d].and_then(|l| branches.iter().position(|&(j, p, _)| (j, p) == (l, port)));
        if let Some(b) = branch {
            out.extend_from_slice(branches[b].2);
            placed[b] = true;
            // What hangs there now must be the group's, none of the layout's own devices.
            let mut behind: Vec<usize> = child[d][port].into_iter().collect();
            while let Some(x) = behind.pop() {
                if let Some(l) = layout_of[x] {
                    return Err(format!(
                        "position {l} hangs behind port {port} of position {}, where an optional \
                         group is configured: its position would change with the group's",
                        branches[b].0
                    ));
                }
                behind.extend(child[x].iter().flatten());
            }
            continue;
        }
        if let Some(c) = child[d][port] {
            out.extend(layout_of[c]);
            stack.push((c, 0));
        }
    }
    if let Some(b) = placed.iter().position(|p| !p) {
        return Err(format!(
            "no device at position {} on the segment for the group behind its port {}",
            branches[b].0, branches[b].1
        ));
    }
    out.extend_from_slice(tail);
    Ok(out)
}

/// Nanoseconds from a frame's arrival at port 0 until it came back through port `port` (the
/// receive times `t` of ports 0..3 latched by one frame, 32-bit local times).
pub(crate) fn back_at(t: [u32; 4], port: usize) -> u32 {
    t[port].wrapping_sub(t[0])
}

/// Nanoseconds from a frame's arrival at port 0 until it leaves through `port`: until it came
/// back through the open port before it in processing order, 0 for the first.
pub(crate) fn out_at(t: [u32; 4], dl: u16, port: usize) -> u32 {
    downstream(dl)
        .take_while(|&p| p != port)
        .last()
        .map_or(0, |p| back_at(t, p))
}

/// The time a frame spends behind a device (its loop): until it came back through its last
/// open port; 0 at a line's end.
pub(crate) fn loop_ns(t: [u32; 4], dl: u16) -> u32 {
    downstream(dl).last().map_or(0, |p| back_at(t, p))
}

/// The propagation delay of a device hanging off `port` of its parent, from one frame's
/// receive times in both and their DL statuses: the parent's delay, plus the time the frame
/// spends in the parent's branches before that port, plus half the round trip through the port
/// less the time it spends behind the device (the cable and the ports' forwarding, out and
/// back). For a pass-through parent it is ethercrab 0.7.1's rule (`configure_subdevice_offsets`,
/// `Topology::Passthrough`: half the difference of the two loop times).
pub(crate) fn delay_behind(
    parent_delay: u32,
    parent: ([u32; 4], u16),
    port: usize,
    own: ([u32; 4], u16),
) -> u32 {
    let (out, back) = (out_at(parent.0, parent.1, port), back_at(parent.0, port));
    let round_trip = back
        .saturating_sub(out)
        .saturating_sub(loop_ns(own.0, own.1));
    parent_delay
        .saturating_add(out)
        .saturating_add(round_trip / 2)
}

/// Where a DC device's delay is measured from: its nearest ancestor with a distributed clock
/// and that ancestor's port on the way, through devices without DC that pass frames straight on
/// (one open port after port 0: the round trip through the ancestor's port is then the way to
/// this device and back, and whatever is behind it). `None` for a device with no DC ancestor (the
/// reference clock, or one off another branch). A device without DC that branches on the way
/// would add its other branches to that round trip: an error naming it.
pub(crate) fn dc_parent(
    parents: &[Option<(usize, usize)>],
    dl: &[u16],
    dc: &[bool],
    i: usize,
) -> Result<Option<(usize, usize)>, String> {
    let mut at = i;
    loop {
        let Some((p, port)) = parents.get(at).copied().flatten() else {
            return Ok(None);
        };
        if dc.get(p).copied().unwrap_or(false) {
            return Ok(Some((p, port)));
        }
        if downstream(dl[p]).count() != 1 {
            return Err(format!(
                "position {p} has no distributed clock and frames branch there (DL status \
                 {:#06x}): the propagation delay of position {i} behind it cannot be measured",
                dl[p]
            ));
        }
        at = p;
    }
}

/// Every DC device's propagation delay (`None` for a device without DC) from one latch of the
/// whole segment: the DL statuses, which devices have DC, and the receive times (processing
/// order). The first DC device is the reference (0), as ethercrab takes it; every other is
/// measured from its DC parent ([`dc_parent`], [`delay_behind`]).
pub(crate) fn delays(
    dl: &[u16],
    dc: &[bool],
    times: &[[u32; 4]],
) -> Result<Vec<Option<u32>>, String> {
    let parents = parents(dl)?;
    let mut out: Vec<Option<u32>> = vec![None; dl.len()];
    let mut reference = None;
    for i in 0..dl.len() {
        if !dc.get(i).copied().unwrap_or(false) {
            continue;
        }
        let Some(r) = reference else {
            // The reference: the delays are the others' lag behind it.
            reference = Some(i);
            out[i] = Some(0);
            continue;
        };
        out[i] = Some(match dc_parent(&parents, dl, dc, i)? {
            None => {
                return Err(format!(
                    "position {i}: a distributed clock with no DC device on its way from the \
                     master, the reference clock (position {r}) on another branch: its delay \
                     cannot be measured"
                ));
            }
            Some((p, port)) => {
                let parent_delay = out[p].unwrap_or(0);
                delay_behind(parent_delay, (times[p], dl[p]), port, (times[i], dl[i]))
            }
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DL status with ports `open` communicating, the others closed.
    fn dl(open: &[usize]) -> u16 {
        (0..4).fold(0x0001, |s, p| {
            s | if open.contains(&p) {
                (0x0010 << p) | (0x0200 << (2 * p))
            } else {
                0x0100 << (2 * p)
            }
        })
    }

    #[test]
    fn a_line_hangs_each_device_off_port_1_of_the_one_before() {
        let line = [dl(&[0, 1]), dl(&[0, 1]), dl(&[0])];
        assert_eq!(
            parents(&line).unwrap(),
            vec![None, Some((0, 1)), Some((1, 1))]
        );
    }

    #[test]
    fn branches_are_visited_in_the_order_3_1_2() {
        // A 4-port junction: a device on port 3, a two-device line on port 1, one on port 2.
        let seg = [dl(&[0, 1, 2, 3]), dl(&[0]), dl(&[0, 1]), dl(&[0]), dl(&[0])];
        assert_eq!(
            parents(&seg).unwrap(),
            vec![None, Some((0, 3)), Some((0, 1)), Some((2, 1)), Some((0, 2))]
        );
        // A junction behind a junction: the inner one's branches come first.
        let seg = [dl(&[0, 1, 3]), dl(&[0, 1, 3]), dl(&[0]), dl(&[0]), dl(&[0])];
        assert_eq!(
            parents(&seg).unwrap(),
            vec![None, Some((0, 3)), Some((1, 3)), Some((1, 1)), Some((0, 1))]
        );
    }

    /// A 4-port junction (layout 0) with the input terminal on port 1 and the output terminal
    /// on port 2, and a three-device group configured behind port 3 (layout 3, 4, 5).
    #[test]
    fn a_group_on_a_junction_s_first_port_comes_before_the_devices_on_its_other_ports() {
        let group = [3, 4, 5];
        // Absent at the scan: the junction's port 3 closed.
        let seg = [dl(&[0, 1, 2]), dl(&[0]), dl(&[0])];
        let scan = parents(&seg).unwrap();
        let layout_of = [Some(0), Some(1), Some(2)];
        assert_eq!(
            processing_order(&scan, &layout_of, &[(0, 3, &group)], &[]).unwrap(),
            vec![0, 3, 4, 5, 1, 2]
        );
        // Present at the scan: its devices are not the layout's (`None`), in the same place.
        let seg = [
            dl(&[0, 1, 2, 3]),
            dl(&[0, 1]),
            dl(&[0, 1]),
            dl(&[0]),
            dl(&[0]),
            dl(&[0]),
        ];
        let scan = parents(&seg).unwrap();
        let layout_of = [Some(0), None, None, None, Some(1), Some(2)];
        assert_eq!(
            processing_order(&scan, &layout_of, &[(0, 3, &group)], &[]).unwrap(),
            vec![0, 3, 4, 5, 1, 2]
        );
        // On port 1: after the device on port 3, before the one on port 2; the members of an
        // end-of-line group absent at the scan (6) last.
        let seg = [dl(&[0, 2, 3]), dl(&[0]), dl(&[0])];
        let scan = parents(&seg).unwrap();
        let layout_of = [Some(0), Some(1), Some(2)];
        assert_eq!(
            processing_order(&scan, &layout_of, &[(0, 1, &group)], &[6]).unwrap(),
            vec![0, 1, 3, 4, 5, 2, 6]
        );
        // Without groups: the scan's order.
        assert_eq!(
            processing_order(&scan, &layout_of, &[], &[]).unwrap(),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn a_layout_device_behind_a_group_s_port_or_a_missing_junction_is_refused() {
        // A device of the layout (not a member) hangs behind the group's port 3.
        let seg = [dl(&[0, 1, 3]), dl(&[0]), dl(&[0])];
        let scan = parents(&seg).unwrap();
        let e = processing_order(&scan, &[Some(0), Some(1), Some(2)], &[(0, 3, &[3])], &[])
            .unwrap_err();
        assert!(
            e.contains("position 1 hangs behind port 3 of position 0"),
            "{e}"
        );
        // The junction is not on the segment.
        let e = processing_order(&scan, &[Some(0), Some(1), Some(2)], &[(7, 3, &[3])], &[])
            .unwrap_err();
        assert!(e.contains("no device at position 7"), "{e}");
    }

    /// The simulator's wiring of a line A (DC, 700 ns to the next) - P (no DC, 300 ns) - B (DC,
    /// 300 ns) - C (DC): arrivals 0, 700, 1000, 1300 ns. ethercrab 0.7.1 gave 0, 0, 0, 300 (it
    /// reads P's missing receive times as 0, docs/NOTES.md §7.4).
    #[test]
    fn a_device_without_dc_on_the_way_is_measured_through() {
        let line = [dl(&[0, 1]), dl(&[0, 1]), dl(&[0, 1]), dl(&[0])];
        let dc = [true, false, true, true];
        // Loop behind each DC device: A 2 (700 + 300 + 300) = 2600, B 2 300 = 600, C 0.
        let t = [
            [10, 10 + 2600, 0, 0],
            [0; 4],
            [20, 20 + 600, 0, 0],
            [30, 0, 0, 0],
        ];
        assert_eq!(
            delays(&line, &dc, &t).unwrap(),
            vec![Some(0), None, Some(1000), Some(1300)]
        );
        // P branching (a second open port) makes B's delay unmeasurable, named.
        let branching = [dl(&[0, 1]), dl(&[0, 1, 3]), dl(&[0, 1]), dl(&[0]), dl(&[0])];
        let dc = [true, false, true, true, false];
        let t = [[0; 4]; 5];
        let e = delays(&branching, &dc, &t).unwrap_err();
        assert!(e.starts_with("position 1 has no distributed clock"), "{e}");
        // A DC device on another branch of a junction without DC than the reference.
        let seg = [dl(&[0, 1, 3]), dl(&[0]), dl(&[0])];
        let e = delays(&seg, &[false, true, true], &[[0; 4]; 3]).unwrap_err();
        assert!(
            e.starts_with("position 0 has no distributed clock") && e.contains("position 2"),
            "{e}"
        );
    }

    #[test]
    fn a_device_beyond_every_open_port_is_named() {
        let e = parents(&[dl(&[0, 1]), dl(&[0]), dl(&[0])]).unwrap_err();
        assert!(e.starts_with("position 2: no device before it"), "{e}");
    }

    #[test]
    fn the_delay_of_a_device_on_a_junction_s_branch_counts_the_branches_before_it() {
        // The simulator's rule (ecsim `Segment::wiring`): per device a hop h each way; a
        // port's return time is the ports before it plus 2 h plus the loop behind it.
        let h = 500u32;
        // Junction: port 3 leads to one device (loop 0), port 1 to the member (loop 0).
        let junction = ([1_000, 1_000 + 4 * h, 0, 1_000 + 2 * h], dl(&[0, 1, 3]));
        let member = ([77, 0, 0, 0], dl(&[0]));
        // The member sees the frame after the junction's port 3 branch (2 h) and one hop.
        assert_eq!(delay_behind(0, junction, 1, member), 2 * h + h);
        assert_eq!(delay_behind(250, junction, 3, member), 250 + h);
        // A pass-through: ethercrab's rule, half the difference of the loops.
        let parent = ([10, 10 + 3_000, 0, 0], dl(&[0, 1]));
        let own = ([5, 5 + 2_000, 0, 0], dl(&[0, 1]));
        assert_eq!(delay_behind(700, parent, 1, own), 700 + 500);
        // Behind a member that is a junction itself: its whole loop is its last port's time.
        let own = ([5, 5 + 2_000, 0, 5 + 800], dl(&[0, 1, 3]));
        assert_eq!(loop_ns(own.0, own.1), 2_000);
        let own = ([5, 5 + 2_000, 5 + 3_000, 5 + 800], dl(&[0, 1, 2, 3]));
        assert_eq!(loop_ns(own.0, own.1), 3_000);
        assert_eq!(out_at(own.0, own.1, 2), 2_000);
        assert_eq!(out_at(own.0, own.1, 1), 800);
        assert_eq!(out_at(own.0, own.1, 3), 0);
    }
}
