//! Hot-connect groups (`[[group]]`, issue 28 item 2): devices marked optional leave and come
//! back without disturbing the rest of the segment.
//!
//! A `[[group]]` names devices by position, alias (ESC register 0x0012, from the SII) or
//! identity (vendor, product, optional revision), as `[[device]]` does. With `optional = true`
//! a member that disappears (its cable pulled, its power off) is not a fault of the segment:
//!
//! - its own recovery ([`crate::subdevice_recovery`]) finds it absent with a presence probe
//!   (one frame: an FPRD of its station address, an APRD of its position and of the one before:
//!   ETG.1000.4 §5.3, a datagram nobody answers comes back with working counter 0) and probes
//!   again every `probe_interval_ms` instead of counting failures: it never escalates to a
//!   whole-segment re-initialisation;
//! - the cycle judges the working counter without its share, flags only its data invalid and
//!   tells the application (`Lost`, then `Absent`); when it answers again with the identity it
//!   was brought up with, the per-subdevice recovery brings it back (mailbox, `[[device]]`,
//!   SMs and FMMUs from the bring-up's snapshot, DC, OP) and the application hears `Back` with
//!   cause `Reconnected`.
//!
//! What this version checks at bring-up, and why (the same checks are [`check_line`] for
//! `rtcat config check`):
//! - **Optional devices are the end of the line, or their junction's port is named.** A line
//!   is one path (ETG.1000.4 §3: the frame passes every device and turns back at the last port
//!   with a link), so a device missing at position p takes every device behind it away, and the
//!   positions of those before it do not change. A group on a junction's port with mandatory
//!   devices after that port moves their positions when it comes and goes: it names its place
//!   (`behind = { position, port }`, members by alias) and is kept out of ethercrab's group at
//!   every scan (`branch`), so ethercrab's image and the positions of the configuration
//!   never count it; any other optional device with a mandatory one behind it is refused.
//!   Recovery finds a power-cycled device by its position on the wire now (APWR of its station
//!   address) where its neighbours confirm it (`place`).
//! - **A member absent at bring-up needs its mapping configured.** ethercrab 0.7.1 lays out the
//!   process image and the FMMUs only in its group initialisation, from the devices present; a
//!   member absent then gets its place in the layout from its `[[device]]` entry
//!   ([`crate::absent`]), at the positions after the line's end in `members` order, and its
//!   data is exchanged in rtcat's own logical region (`region`) once its recovery has
//!   configured it (docs/NOTES.md §17.2).
//! - **The DC reference clock is not optional**: every other clock follows its system time.

use crate::devices::Found;
use crate::error::{Error, Result};

pub use crate::hotconnect_config::{
    Behind, DEFAULT_PROBE_INTERVAL_MS, GroupConfig, MemberConfig, on_a_branch, validate,
};

/// The bring-up's checks of the groups, as far as a scan without the bus's DC capabilities
/// allows (`rtcat config check` against the bus): each position's group, or why the segment
/// would be refused.
pub fn check_line(
    groups: &[GroupConfig],
    devices: &[crate::devices::DeviceConfig],
    found: &[Found],
) -> std::result::Result<Vec<Option<usize>>, String> {
    resolve(groups, devices, &main_line(groups, found), None)
        .map(|m| m.group)
        .map_err(|e| e.to_string())
}

/// The subdevices of a whole scan that the bring-up gives ethercrab's group, renumbered: all
/// but the members of groups behind a junction's port (named by their aliases), which rtcat's
/// region runs whether present or not.
pub fn main_line(groups: &[GroupConfig], found: &[Found]) -> Vec<Found> {
    let kept = found.iter().filter(|f| !on_a_branch(groups, f.alias));
    kept.enumerate()
        .map(|(p, f)| Found {
            position: u16::try_from(p).unwrap_or(u16::MAX),
            ..*f
        })
        .collect()
}

/// The members of optional groups not on the segment `found`, as the bring-up would expect
/// them (their positions after the line's end, their matchers' alias and identity): what a
/// `[[device]]` entry may select although no subdevice on the bus matches it. Empty when the
/// bring-up would refuse the groups ([`check_line`] says why).
pub fn absent_members(
    groups: &[GroupConfig],
    devices: &[crate::devices::DeviceConfig],
    found: &[Found],
) -> Vec<Found> {
    resolve(groups, devices, &main_line(groups, found), None)
        .map(|m| m.absent.iter().map(|a| a.expected).collect())
        .unwrap_or_default()
}

/// A segment as a scan found it: identities (vendor, product, revision) and station aliases
/// (0x0012) by position.
pub(crate) type Topology<'a> = (&'a [(u32, u32, u32)], &'a [u16]);

/// What a re-initialisation must find again: the first bring-up's topology and its group
/// membership.
pub(crate) type Expected<'a> = (Topology<'a>, &'a Membership);

/// Which group each position belongs to, as one bring-up found the segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Membership {
    /// Per position: the index of its `[[group]]`.
    pub(crate) group: Vec<Option<usize>>,
    /// Per position: `probe_interval_ms` of its group when that is optional, else 0.
    pub(crate) probe_ms: Vec<u32>,
    /// The members of optional groups not on the segment at bring-up, at the positions after
    /// the line's end (`group` and `probe_ms` cover them too), in `[[group]]` then `members`
    /// order: their place in the layout comes from their `[[device]]` entry
    /// ([`crate::absent`]), their data from rtcat's own region ([`crate::region`]).
    pub(crate) absent: Vec<AbsentMember>,
}

/// A member of an optional group that was not on the segment at bring-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AbsentMember {
    /// Index of its `[[group]]`.
    pub(crate) group: usize,
    /// Index in the group's `members`.
    pub(crate) member: usize,
    /// What it is expected to be when it appears: the position after the line's end it was
    /// given, the alias and identity its matcher names (0 where it names none).
    pub(crate) expected: Found,
}

impl Membership {
    /// Whether `position` is a member of an optional group.
    pub(crate) fn optional(&self, position: usize) -> bool {
        self.probe_ms.get(position).is_some_and(|&p| p > 0)
    }
}

/// The subdevices of a scan as the matchers see them, from (alias, identity) by position.
pub(crate) fn found(subdevices: impl IntoIterator<Item = (u16, (u32, u32, u32))>) -> Vec<Found> {
    subdevices
        .into_iter()
        .enumerate()
        .map(|(p, (alias, identity))| Found {
            position: u16::try_from(p).unwrap_or(u16::MAX),
            alias,
            identity,
        })
        .collect()
}

/// The groups on the segment `found` (a bring-up's scan): each position's group and the
/// members absent (an optional one with its mapping in a `[[device]]` entry, at the positions
/// after the line's end), or why this version cannot run them — a mandatory member not on the
/// segment, an absent one without its mapping or expected at another position, a subdevice two
/// groups claim, an optional device with a mandatory one behind it, or the DC reference clock
/// (`dc_reference`) optional.
pub(crate) fn resolve(
    groups: &[GroupConfig],
    devices: &[crate::devices::DeviceConfig],
    found: &[Found],
    dc_reference: Option<u16>,
) -> Result<Membership> {
    let mut m = Membership {
        group: vec![None; found.len()],
        probe_ms: vec![0; found.len()],
        absent: Vec::new(),
    };
    let refuse = |s: String| Err(Error::SegmentMismatch(s));
    for (gi, g) in groups.iter().enumerate() {
        for (j, member) in g.members.iter().enumerate() {
            let mut any = false;
            for s in found.iter().filter(|s| member.matches(s)) {
                any = true;
                let p = usize::from(s.position);
                match m.group[p] {
                    Some(other) if other != gi => {
                        return refuse(format!(
                            "group {:?} (group[{gi}].members[{j}], {}) and group {:?} both \
                             claim the subdevice at position {p}",
                            g.name,
                            member.matcher(),
                            groups[other].name
                        ));
                    }
                    _ => {
                        m.group[p] = Some(gi);
                        if g.optional {
                            m.probe_ms[p] = g.probe_interval_ms;
                        }
                    }
                }
            }
            if !any {
                if !g.optional {
                    return refuse(format!(
                        "group {:?}: group[{gi}].members[{j}] ({}) is not on the segment ({} \
                         subdevices): the group is not optional",
                        g.name,
                        member.matcher(),
                        found.len()
                    ));
                }
                // Absent at bring-up: it takes the next position after the line's end, and its
                // place in the layout comes from its `[[device]]` entry (refused without one).
                let position = found.len() + m.absent.len();
                let p16 = u16::try_from(position).unwrap_or(u16::MAX);
                if let Some(want) = member.position
                    && want != p16
                {
                    return refuse(format!(
                        "group {:?}: group[{gi}].members[{j}] (position {want}) is not on the \
                         segment ({} subdevices): a member absent at bring-up is expected at the \
                         next position after the line's end in members order, {position}",
                        g.name,
                        found.len()
                    ));
                }
                crate::absent::source(groups, gi, j, p16, devices)
                    .map_err(|e| Error::SegmentMismatch(e.to_string()))?;
                m.group.push(Some(gi));
                m.probe_ms.push(g.probe_interval_ms);
                m.absent.push(AbsentMember {
                    group: gi,
                    member: j,
                    expected: Found {
                        position: p16,
                        alias: member.alias.unwrap_or(0),
                        identity: (
                            member.vendor_id.unwrap_or(0),
                            member.product_id.unwrap_or(0),
                            member.revision.unwrap_or(0),
                        ),
                    },
                });
            }
        }
    }
    // A group on a junction's port: its members are never in `found` (the bring-up keeps them
    // out of ethercrab's group, `main_line`), so all of them are absent here, present or not.
    for g in groups {
        let Some(b) = g.behind else { continue };
        let j = usize::from(b.position);
        if j >= found.len() {
            return refuse(format!(
                "group {:?}: behind port {} of position {j}, but the segment has {} subdevices \
                 besides the members of groups on a junction's port",
                g.name,
                b.port,
                found.len()
            ));
        }
        if m.optional(j) {
            return refuse(format!(
                "group {:?}: behind port {} of position {j}, which is itself optional (group \
                 {:?}): the junction a group hangs off must always be there",
                g.name,
                b.port,
                m.group[j].map_or("", |o| groups[o].name.as_str())
            ));
        }
    }
    if let Some(first) = (0..found.len()).find(|&p| m.optional(p))
        && let Some(p) = (first..found.len()).find(|&p| !m.optional(p))
    {
        let name = |p: usize| m.group[p].map_or("", |g| groups[g].name.as_str());
        let mandatory = match m.group[p] {
            Some(_) => format!("in group {:?}, not optional", name(p)),
            None => "in no optional group".to_string(),
        };
        return refuse(format!(
            "group {:?}: position {first} is optional but position {p} behind it is not \
             ({mandatory}): optional devices are the end of the line (a missing one takes \
             every device behind it away), or a group on a junction's port says which with \
             `behind = {{ position = J, port = P }}` (members named by alias)",
            name(first)
        ));
    }
    if let Some(r) = dc_reference
        && m.optional(usize::from(r))
    {
        return refuse(format!(
            "group {:?}: position {r} is the DC reference clock, which cannot be optional (every \
             other clock follows its system time)",
            m.group[usize::from(r)].map_or("?", |g| groups[g].name.as_str())
        ));
    }
    Ok(m)
}

/// A re-initialisation's scan against the topology the run started with (`expected`, and
/// the `optional` positions, which include those of members absent then): the positions both
/// have must hold the same identities; a line that ends early where optional groups begin, or
/// goes on beyond the first bring-up's end with optional members, is not a changed topology —
/// the bring-up gives the absent ones their places again ([`resolve`]) and checks the present
/// ones against their matchers. Everything else is `same_identities`'s. Where both have a
/// device with the same identity, the station aliases must be the same too: the alias is what
/// tells identical units apart (a configuration may select by it), and two of them swapped
/// would otherwise get each other's outputs.
pub(crate) fn check_topology(
    (found, found_aliases): Topology<'_>,
    (expected, expected_aliases): Topology<'_>,
    optional: &Membership,
) -> Result<()> {
    let common = found.len().min(expected.len());
    let longer = found.len().max(expected.len());
    if (common..longer).all(|p| optional.optional(p)) {
        same_identities(&found[..common], &expected[..common])?;
    } else {
        same_identities(found, expected)?;
    }
    let aliases = found_aliases.iter().zip(expected_aliases).take(common);
    match aliases.enumerate().find(|(_, (f, e))| f != e) {
        Some((p, (&f, &e))) => Err(Error::TopologyChanged {
            position: p as u16,
            found: Some(found[p]),
            expected: Some(expected[p]),
            alias: Some((f, e)),
        }),
        None => Ok(()),
    }
}

/// The scanned segment against the topology the run started with: the first position whose
/// identity differs, or that one has and the other has not, refuses the segment.
fn same_identities(found: &[(u32, u32, u32)], expected: &[(u32, u32, u32)]) -> Result<()> {
    for position in 0..found.len().max(expected.len()) {
        let (f, e) = (
            found.get(position).copied(),
            expected.get(position).copied(),
        );
        if f != e {
            return Err(Error::TopologyChanged {
                position: position as u16,
                found: f,
                expected: e,
                alias: None,
            });
        }
    }
    Ok(())
}

/// Whether subdevice `target` of `order` (every subdevice's station address in processing
/// order), expected at `position`, answers: by its address (powered throughout), else by its
/// position (power-cycled, address lost, or plugged in for the first time) where
/// [`crate::place::locate`] says the device there is it. One frame of three datagrams when
/// nothing is there, when it has its address, or when the devices at the position and before
/// it are the ones `around` says are there when it is not (a member of a group on a junction's
/// port, absent: the devices after its port are where it would be); one more of two, or of
/// one per device on the segment, for a device there without a known address. `Err`: not
/// there, with what the segment showed when that is worth a technician's look.
pub(crate) fn present(
    own: crate::own_frames::OwnBus<'_>,
    order: &[u16],
    (target, position): (usize, u16),
    around: crate::place::Around,
) -> std::result::Result<(), Option<String>> {
    use crate::place::{Look, Place, locate, look};
    match look(own, order[target], position) {
        Ok(Look {
            at_address: true, ..
        }) => Ok(()),
        Err(_) | Ok(Look { there: None, .. }) => Err(None),
        Ok(Look { there, before, .. }) if there == around.after && before == around.before => {
            Err(None)
        }
        Ok(Look {
            there: Some(there), ..
        }) => match locate(own, order, target, (position, there)) {
            Place::At(_) => Ok(()),
            Place::Absent(strays) => Err(strays.map(|s| s.text)),
            Place::Unclear(why) => Err(Some(why)),
        },
    }
}

/// The longest an optional member's probe waits while a device that is not it stands where
/// it is expected: the topology watch's interval ([`crate::topology_watch::INTERVAL`]).
pub(crate) const PROBE_INTERVAL_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// An optional member's next probe interval after one that did not find it: its group's rate
/// when nothing answers where it is expected (a probe is one frame), else — a device there
/// that is not it, [`present`] having read its neighbours or every device on the segment to
/// tell, up to one datagram per device — twice the last one, up to [`PROBE_INTERVAL_MAX`],
/// while the finding (`same`) is unchanged. A group plugged in elsewhere than configured stays
/// there until a technician moves it: read at the group's rate (10 ms by default), a line of
/// a hundred devices would carry a sweep of every device per member all the time, and the
/// worker would serve other subdevices' recoveries between sweeps. A new finding starts again
/// at the group's rate; a group moved to its place within a second may take that second to
/// join.
pub(crate) fn interval_after(
    rate: std::time::Duration,
    last: std::time::Duration,
    something_there: bool,
    same: bool,
) -> std::time::Duration {
    if !something_there || !same {
        return rate;
    }
    (last * 2).clamp(rate, PROBE_INTERVAL_MAX.max(rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_that_finds_another_device_backs_off_to_a_second_and_starts_again_on_news() {
        let ms = std::time::Duration::from_millis;
        let rate = ms(10);
        let mut last = rate;
        let mut seen = Vec::new();
        for _ in 0..9 {
            last = interval_after(rate, last, true, true);
            seen.push(last.as_millis());
        }
        assert_eq!(seen, [20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        assert_eq!(
            interval_after(rate, last, true, false),
            rate,
            "a new finding"
        );
        assert_eq!(
            interval_after(rate, last, false, true),
            rate,
            "nothing there"
        );
        // A group's own rate above the bound stays its rate.
        assert_eq!(interval_after(ms(5000), ms(5000), true, true), ms(5000));
    }

    fn groups(text: &str) -> std::result::Result<Vec<GroupConfig>, String> {
        #[derive(serde::Deserialize)]
        struct F {
            group: Vec<GroupConfig>,
        }
        let f: F = toml::from_str(text).map_err(|e| e.to_string())?;
        validate(&f.group, Some(8)).map_err(|e| e.to_string())?;
        Ok(f.group)
    }

    fn refused(text: &str, want: &str) {
        let e = groups(text).expect_err(text);
        assert!(e.contains(want), "{e}");
    }

    const TOOL: &str = "[[group]]\nname = \"tool\"\noptional = true\n";

    #[test]
    fn a_group_parses_with_every_kind_of_member() {
        let g = groups(&format!(
            "{TOOL}members = [{{ position = 3 }}, {{ alias = 0x10 }}, \
             {{ vendor_id = 2, product_id = 0x30002 }}]\n"
        ))
        .expect("valid");
        assert_eq!(g[0].probe_interval_ms, DEFAULT_PROBE_INTERVAL_MS);
        assert_eq!(g[0].members[1].matcher(), "alias 0x0010");
    }

    #[test]
    fn bad_groups_are_refused_naming_the_key() {
        refused(&format!("{TOOL}members = []\n"), "group[0].members = []");
        refused(
            "[[group]]\nname = \"a b\"\noptional = true\nmembers = [{ position = 1 }]\n",
            "group[0].name = \"a b\"",
        );
        refused(
            "[[group]]\nname = \"t\"\nmembers = [{ position = 1 }]\n",
            "optional",
        );
        refused(
            &format!("{TOOL}members = [{{ position = 1, alias = 2 }}]\n"),
            "group[0].members[0] = several matchers",
        );
        refused(
            &format!("{TOOL}members = [{{ vendor_id = 2 }}]\n"),
            "group[0].members[0].product_id = (missing)",
        );
        refused(
            &format!("{TOOL}members = [{{ alias = 0 }}]\n"),
            "group[0].members[0].alias = 0",
        );
        refused(
            &format!("{TOOL}members = [{{ position = 8 }}]\n"),
            "group[0].members[0].position = 8: must be below segment.subdevices (8)",
        );
        refused(
            &format!("{TOOL}probe_interval_ms = 0\nmembers = [{{ position = 1 }}]\n"),
            "group[0].probe_interval_ms = 0",
        );
        refused(
            &format!(
                "{TOOL}members = [{{ position = 1 }}]\n{TOOL}members = [{{ position = 2 }}]\n"
            ),
            "group[1].name = \"tool\": group[0] has the same name",
        );
        refused(
            &format!(
                "{TOOL}members = [{{ alias = 5 }}]\n[[group]]\nname = \"b\"\noptional = false\n\
                 members = [{{ position = 2 }}, {{ alias = 5 }}]\n"
            ),
            "group[1].members[1].alias = 0x0005: group[0].members[0] names the same subdevice",
        );
        refused(
            &format!("{TOOL}members = [{{ position = 1 }}]\nspeed = 1\n"),
            "unknown field `speed`",
        );
    }

    #[test]
    fn a_group_behind_a_junction_s_port_is_checked_offline() {
        let g = groups(&format!(
            "{TOOL}behind = {{ position = 0, port = 3 }}\nmembers = [{{ alias = 0x10 }}]\n"
        ))
        .expect("valid");
        assert!(g[0].describe().contains("behind port 3 of position 0"));
        assert!(on_a_branch(&g, 0x10) && !on_a_branch(&g, 0x11) && !on_a_branch(&g, 0));
        let behind =
            |b: &str, members: &str| format!("{TOOL}behind = {b}\nmembers = [{members}]\n");
        refused(
            &behind("{ position = 0, port = 0 }", "{ alias = 1 }"),
            "group[0].behind.port = 0: must be 1, 2 or 3",
        );
        refused(
            &behind("{ position = 8, port = 1 }", "{ alias = 1 }"),
            "group[0].behind.position = 8: must be below segment.subdevices (8)",
        );
        refused(
            &behind(
                "{ position = 0, port = 1 }",
                "{ alias = 1 }, { position = 4 }",
            ),
            "group[0].members[1] = position 4: a member of a group behind a junction's port is \
             named by its alias",
        );
        refused(
            &behind(
                "{ position = 0, port = 1 }",
                "{ vendor_id = 2, product_id = 3 }",
            ),
            "is named by its alias",
        );
        refused(
            &behind("{ position = 0, port = 1, speed = 2 }", "{ alias = 1 }"),
            "unknown field `speed`",
        );
        refused(
            "[[group]]\nname = \"t\"\noptional = false\nbehind = { position = 0, port = 1 }\n\
             members = [{ alias = 1 }]\n",
            "group[0].behind = { position = 0, port = 1 }: only an optional group",
        );
        refused(
            &format!(
                "{}[[group]]\nname = \"b\"\noptional = true\nbehind = {{ position = 0, port = 1 }}\n\
                 members = [{{ alias = 2 }}]\n",
                behind("{ position = 0, port = 1 }", "{ alias = 1 }")
            ),
            "group[1].behind = { position = 0, port = 1 }: group[0] hangs behind the same port",
        );
    }

    #[test]
    fn a_group_behind_a_junction_s_port_is_absent_from_ethercrab_s_line_wherever_it_is() {
        let g = groups(&format!(
            "{TOOL}behind = {{ position = 0, port = 3 }}\n\
             members = [{{ alias = 0x13 }}, {{ alias = 0x14 }}]\n"
        ))
        .expect("valid");
        #[derive(serde::Deserialize)]
        struct D {
            device: Vec<crate::devices::DeviceConfig>,
        }
        let d: D = toml::from_str(
            "[[device]]\nalias = 0x13\npdo_assign = { sm3 = [0x1a00] }\n\
             [[device.pdo_map]]\nindex = 0x1a00\nentries = [\"0x6000:01:8\"]\n\
             [[device]]\nalias = 0x14\npdo_assign = { sm3 = [0x1a00] }\n\
             [[device.pdo_map]]\nindex = 0x1a00\nentries = [\"0x6000:01:8\"]\n",
        )
        .expect("devices");
        // The members (aliases 0x13, 0x14 at 3 and 4) before mandatory devices 5 and 6 of a
        // whole scan: out of the line ethercrab's group holds, which stays 0..5.
        let scan: Vec<Found> = line(7);
        let main = main_line(&g, &scan);
        assert_eq!(
            main.iter()
                .map(|f| (f.position, f.alias))
                .collect::<Vec<_>>(),
            [(0, 0), (1, 0), (2, 0), (3, 0x15), (4, 0x16)]
        );
        // Both absent from it: after its end in members order, the rest mandatory.
        let members = check_line(&g, &d.device, &scan).expect("accepted");
        assert_eq!(members, [None, None, None, None, None, Some(0), Some(0)]);
        let m = resolve(&g, &d.device, &main, None).expect("accepted");
        assert_eq!(
            m.absent
                .iter()
                .map(|a| a.expected.position)
                .collect::<Vec<_>>(),
            [5, 6]
        );
        // Without the place the same members are optional devices before mandatory ones.
        let mut end = g.clone();
        end[0].behind = None;
        let why = check_line(&end, &d.device, &scan).expect_err("refused");
        assert!(
            why.contains("position 3 is optional but position 5"),
            "{why}"
        );
        assert!(why.contains("behind = { position = J, port = P }"), "{why}");
        // The junction must be there, and not optional itself.
        let mut far = g.clone();
        far[0].behind = Some(Behind {
            position: 5,
            port: 1,
        });
        let why = check_line(&far, &d.device, &scan).expect_err("refused");
        assert!(
            why.contains("behind port 1 of position 5, but the segment has 5"),
            "{why}"
        );
    }

    fn line(n: u16) -> Vec<Found> {
        (0..n)
            .map(|p| Found {
                position: p,
                alias: if p >= 3 { 0x10 + p } else { 0 },
                identity: (2, 0x10000 + u32::from(p % 3), 1),
            })
            .collect()
    }

    #[test]
    fn members_resolve_by_position_alias_and_identity() {
        let g = groups(&format!(
            "{TOOL}members = [{{ position = 3 }}, {{ alias = 0x14 }}, \
             {{ vendor_id = 2, product_id = 0x10002 }}]\n"
        ))
        .expect("valid");
        // Identity 0x10002 is at 2 and 5: with 3 and 4 the tail 2..=5.
        let m = resolve(&g, &[], &line(6), None).expect("the tail");
        assert_eq!(
            (0..6).map(|p| m.optional(p)).collect::<Vec<_>>(),
            [false, false, true, true, true, true]
        );
        assert_eq!(m.probe_ms[3], DEFAULT_PROBE_INTERVAL_MS);
    }

    #[test]
    fn what_this_version_cannot_run_is_refused_at_bring_up() {
        let tool = |members: &str| {
            groups(&format!("{TOOL}members = [{members}]\n")).expect("valid offline")
        };
        let e = |r: Result<Membership>| r.expect_err("refused").to_string();
        // Absent at bring-up: without a `[[device]]` mapping for it the error says that first,
        // with one that this version needs it present.
        let why = e(resolve(&tool("{ alias = 0x20 }"), &[], &line(6), None));
        assert!(
            why.contains("group[0].members[0] (alias 0x0020)")
                && why.contains("no [[device]] entry selects it (by position 6"),
            "{why}"
        );
        #[derive(serde::Deserialize)]
        struct D {
            device: Vec<crate::devices::DeviceConfig>,
        }
        let d: D = toml::from_str(
            "[[device]]\nalias = 0x20\npdo_assign = { sm3 = [0x1a00] }\n\
             [[device.pdo_map]]\nindex = 0x1a00\nentries = [\"0x6000:01:8\"]\n",
        )
        .expect("device");
        // With one it is accepted, at the position after the line's end, its group and probe
        // interval with it; a position matcher naming another position is refused.
        let m = resolve(&tool("{ alias = 0x20 }"), &d.device, &line(6), None).expect("absent");
        assert_eq!(m.absent.len(), 1);
        assert_eq!(m.absent[0].expected.position, 6);
        assert_eq!(m.absent[0].expected.alias, 0x20);
        assert!(m.optional(6) && !m.optional(5));
        let why = e(resolve(&tool("{ position = 7 }"), &[], &line(6), None));
        assert!(
            why.contains("(position 7)") && why.contains("next position after the line's end"),
            "{why}"
        );
        // A mandatory device behind an optional one.
        let why = e(resolve(&tool("{ position = 3 }"), &[], &line(6), None));
        assert!(why.contains("position 4 behind it is not"), "{why}");
        // The DC reference.
        let all = "{ position = 0 }, { position = 1 }, { position = 2 }";
        assert!(e(resolve(&tool(all), &[], &line(3), Some(0))).contains("DC reference"));
        assert!(resolve(&tool(all), &[], &line(3), None).is_ok());
        // Two groups claim one device.
        let two = groups(&format!(
            "{TOOL}members = [{{ position = 2 }}]\n[[group]]\nname = \"b\"\noptional = true\n\
             members = [{{ vendor_id = 2, product_id = 0x10002 }}]\n"
        ))
        .expect("valid offline");
        assert!(e(resolve(&two, &[], &line(3), None)).contains("both claim"));
    }

    #[test]
    fn a_line_ending_at_an_optional_group_is_not_a_changed_topology() {
        let g = groups(&format!("{TOOL}members = [{{ position = 2 }}]\n")).expect("valid");
        let m = resolve(&g, &[], &line(3), None).expect("tail");
        let ids: Vec<_> = line(3).iter().map(|f| f.identity).collect();
        let al = [0u16; 4];
        fn at<'a>(ids: &'a [(u32, u32, u32)], al: &'a [u16]) -> Topology<'a> {
            (ids, &al[..ids.len()])
        }
        // The group away at a re-initialisation: its members are absent again.
        assert!(check_topology(at(&ids[..2], &al), at(&ids, &al), &m).is_ok());
        assert!(check_topology(at(&ids, &al), at(&ids, &al), &m).is_ok());
        // Shorter at a mandatory position: a changed topology as before.
        assert!(matches!(
            check_topology(at(&ids[..1], &al), at(&ids, &al), &m),
            Err(Error::TopologyChanged { position: 1, .. })
        ));
        // A member absent at the first bring-up present at a re-initialisation.
        let mut absent = m.clone();
        absent.probe_ms.push(10);
        absent.group.push(Some(0));
        let longer: Vec<_> = line(4).iter().map(|f| f.identity).collect();
        assert!(check_topology(at(&longer, &al), at(&ids, &al), &absent).is_ok());
        // One more device than the first bring-up knew of, not optional: changed.
        assert!(matches!(
            check_topology(at(&longer, &al), at(&ids, &al), &m),
            Err(Error::TopologyChanged { position: 3, .. })
        ));
        // A swapped identity where both have a device: changed.
        let mut swapped = ids.clone();
        swapped[0].1 ^= 1;
        assert!(check_topology(at(&swapped[..2], &al), at(&ids, &al), &m).is_err());
        // The same identities, two units swapped: their station aliases tell.
        let (first, swapped_aliases) = ([0x10u16, 0x11, 0x12], [0x11u16, 0x10, 0x12]);
        assert!(check_topology((&ids, &first), (&ids, &first), &m).is_ok());
        assert!(matches!(
            check_topology((&ids, &swapped_aliases), (&ids, &first), &m),
            Err(Error::TopologyChanged {
                position: 0,
                alias: Some((0x11, 0x10)),
                ..
            })
        ));
        // A group away: the positions both have are compared.
        assert!(check_topology((&ids[..2], &first[..2]), (&ids, &first), &m).is_ok());
    }
}
