//! Where a subdevice that lost its station address (or never had one) is on the segment now,
//! told by its neighbours before anything is written by position.
//!
//! A position-addressed datagram (APRD/APWR, ETG.1000.4 §5.3) reaches whatever device the
//! frame meets at that count, and a device that appears where it was not expected — a group
//! absent at bring-up plugged into a junction's first branch instead of the line's end — moves
//! every device behind it. Giving a station address by position there would overwrite another
//! subdevice's, and a unit with the same identity would then be driven as that subdevice (seen
//! in `tests/hotconnect.rs` before this module). So a recovery or a join that has to give an
//! address first asks the neighbours of the position ([`locate`]: the devices before and after
//! it answer with the addresses of the subdevices expected there), else reads the station
//! address (0x0010) of every device by position ([`sweep`]) and gives it only where the devices
//! found agree with the order expected ([`place`]): between its nearest expected neighbours
//! that answer with their own addresses there must be exactly as many devices without a known
//! address as the order expects there. Anything else is [`Place::Unclear`], and nothing is
//! written.

use crate::own_frames::{Batch, OwnBus, OwnError};

/// ESC register of the configured station address (ETG.1000.4 §6.1.2).
const STATION_ADDRESS: u16 = 0x0010;

/// Devices read beyond the expected count: a few unexpected ones are named, not missed.
const SWEEP_SPARE: usize = 16;

/// The station address of every device on the segment, by position, until a position nobody
/// answers (a datagram nobody answers comes back with working counter 0 at once), at most
/// `expected + 16` of them: one datagram per position, all in one frame of rtcat's own (64
/// per frame). A failed exchange reads as nobody answering from its first position on.
pub(crate) fn sweep(own: OwnBus<'_>, expected: usize) -> Vec<u16> {
    let positions = (expected + SWEEP_SPARE).min(usize::from(u16::MAX));
    let mut b = Batch::new();
    for p in 0..positions {
        b.aprd(p as u16, STATION_ADDRESS, 2);
    }
    let Ok(r) = own.exchange(&b) else {
        return Vec::new();
    };
    (0..positions).map_while(|i| r.u16_of_one(i)).collect()
}

/// What one frame shows of a subdevice expected with station address `station` at
/// `position`: whether it answers at its address with it, and the station addresses of the
/// devices at the position and the one before it (None: nobody there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Look {
    pub(crate) at_address: bool,
    pub(crate) there: Option<u16>,
    pub(crate) before: Option<u16>,
}

/// [`Look`]: one frame of three datagrams (FPRD of its address, APRD of the position and of
/// the one before; two at position 0).
pub(crate) fn look(own: OwnBus<'_>, station: u16, position: u16) -> Result<Look, OwnError> {
    let mut b = Batch::new();
    let fp = b.fprd(station, STATION_ADDRESS, 2);
    let ap = b.aprd(position, STATION_ADDRESS, 2);
    let before = position
        .checked_sub(1)
        .map(|p| b.aprd(p, STATION_ADDRESS, 2));
    let r = own.exchange(&b)?;
    Ok(Look {
        at_address: r.u16_of_one(fp) == Some(station),
        there: r.u16_of_one(ap),
        before: before.and_then(|i| r.u16_of_one(i)),
    })
}

/// The layout's subdevices in the order a frame meets them with all of them present
/// ([`crate::branch::order`]) and where each is on the wire now, as far as the recovery
/// worker knows which answer.
pub(crate) struct Order {
    /// Station addresses in that order (what [`locate`] and [`place`] compare with).
    pub(crate) addresses: Vec<u16>,
    /// Each layout position's index in it.
    index: Vec<usize>,
    /// The layout position of each entry.
    layout: Vec<usize>,
}

/// The nearest subdevices in [`Order`] before and after one that are thought to answer: the
/// station addresses expected at the position before its and at its own when it is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Around {
    pub(crate) before: Option<u16>,
    pub(crate) after: Option<u16>,
}

impl Order {
    /// From the layout positions in processing order and each one's station address.
    pub(crate) fn new(layout: &[usize], address: impl Fn(usize) -> u16) -> Order {
        let mut index = vec![0; layout.len()];
        for (k, &i) in layout.iter().enumerate() {
            index[i] = k;
        }
        Order {
            addresses: layout.iter().map(|&i| address(i)).collect(),
            index,
            layout: layout.to_vec(),
        }
    }

    /// Layout position `i`'s index in the order.
    pub(crate) fn target(&self, i: usize) -> usize {
        self.index[i]
    }

    /// Where layout position `i` is on the wire if the subdevices before it in the order that
    /// answer are those `answers` says: their number. A guess where a member came or went
    /// unseen; [`locate`] checks it before anything is written.
    pub(crate) fn position(&self, i: usize, answers: impl Fn(usize) -> bool) -> u16 {
        let before = &self.layout[..self.index[i]];
        before.iter().filter(|&&k| answers(k)).count() as u16
    }

    /// [`Around`] layout position `i`, with `answers` as for [`Order::position`].
    pub(crate) fn around(&self, i: usize, answers: impl Fn(usize) -> bool) -> Around {
        let k = self.index[i];
        let address = |j: usize| answers(self.layout[j]).then(|| self.addresses[j]);
        Around {
            before: (0..k).rev().find_map(address),
            after: (k + 1..self.layout.len()).find_map(address),
        }
    }
}

/// Where subdevice `order[target]`, which does not answer at its station address, is now;
/// `position` is where it is expected and `there` the station address the device at that
/// position answered with. That address its own: it is there. Another subdevice's: the
/// positions moved (a member of a group came or went before it unseen, or a device was plugged
/// in elsewhere than configured), every device is read ([`sweep`]) and [`place`] decides where
/// it is. Else its neighbours (two datagrams): the device before that position answers
/// with the address of the subdevice expected before it, and the one after with the address of
/// the subdevice expected after it (or nothing answers there when it is the last expected):
/// then the device between them is in its place. Otherwise every device is read ([`sweep`])
/// and [`place`] decides.
pub(crate) fn locate(
    own: OwnBus<'_>,
    order: &[u16],
    target: usize,
    (position, there): (u16, u16),
) -> Place {
    if there == order[target] {
        return Place::At(position);
    }
    // Another subdevice's address there: the positions moved (a member of a group came or
    // went before it, or a device was plugged in elsewhere): every device is read below.
    if order.contains(&there) {
        return place(&sweep(own, order.len()), order, target);
    }
    // The neighbours, in one frame.
    let mut b = Batch::new();
    let before = position
        .checked_sub(1)
        .map(|p| b.aprd(p, STATION_ADDRESS, 2));
    let after = position
        .checked_add(1)
        .map(|p| b.aprd(p, STATION_ADDRESS, 2));
    if let Ok(r) = own.exchange(&b) {
        let read = |i: Option<usize>| i.and_then(|i| r.u16_of_one(i));
        let before_ok = match (target.checked_sub(1), before) {
            (None, None) => true,
            (Some(k), Some(_)) => read(before) == Some(order[k]),
            _ => false,
        };
        let after_ok = match order.get(target + 1) {
            Some(&a) => read(after) == Some(a),
            None => read(after).is_none(),
        };
        if before_ok && after_ok {
            return Place::At(position);
        }
    }
    place(&sweep(own, order.len()), order, target)
}

/// Where the subdevice `order[target]` is, from the station addresses `seen` by position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// At this position, with its own address or with none known (its place between its
    /// neighbours is unambiguous).
    At(u16),
    /// Not on the segment: its neighbours answer and nothing is between them (with devices
    /// found where the order expects none, named: [`strays`]).
    Absent(Option<Strays>),
    /// The devices found do not tell: why, for the log.
    Unclear(String),
}

/// Where `order[target]` is, given the station addresses `seen` by position. `order` is every
/// subdevice's station address in the order a frame is expected to meet them (processing
/// order), present or not.
///
/// Its nearest neighbours in `order` that are found with their own addresses bound the
/// positions it can be at; the devices between them without a known address are the devices
/// of `order` between the two neighbours that are on the segment. Their number must be every
/// one of those devices (then each is at its place in order) or none (then it is absent);
/// anything between — some there and some not — cannot be told apart without writing, and a
/// known address out of order is another topology.
pub(crate) fn place(seen: &[u16], order: &[u16], target: usize) -> Place {
    let at = |a: u16| seen.iter().position(|&s| s == a);
    if let Some(p) = at(order[target]) {
        return Place::At(p as u16);
    }
    // The known devices must be found in order.
    let mut last = None;
    for (k, &a) in order.iter().enumerate() {
        if let Some(p) = at(a) {
            if last.is_some_and(|(_, q)| q > p) {
                let (j, q) = last.unwrap_or((0, 0));
                return Place::Unclear(format!(
                    "station {a:#06x} answers at position {p}, before station {:#06x} at \
                     position {q}, which the segment was brought up with before it (order {j} \
                     and {k}): another topology",
                    order[j]
                ));
            }
            last = Some((k, p));
        }
    }
    let before = (0..target).rev().find_map(|k| at(order[k]).map(|p| (k, p)));
    let after = (target + 1..order.len()).find_map(|k| at(order[k]).map(|p| (k, p)));
    let (k0, lo) = before.map_or((None, 0), |(k, p)| (Some(k), p + 1));
    let (k1, hi) = after.map_or((order.len(), seen.len()), |(k, p)| (k, p));
    let unknown = hi.saturating_sub(lo);
    let expected = k1 - k0.map_or(0, |k| k + 1);
    let rank = target - k0.map_or(0, |k| k + 1);
    if unknown == 0 {
        Place::Absent(strays(seen, order))
    } else if unknown == expected {
        Place::At((lo + rank) as u16)
    } else if after.is_none() && unknown < expected {
        // The segment's end: on a line the devices there are the first ones of those expected
        // (a missing device takes every device behind it away), as the members of a group at
        // the line's end appear one after another.
        if rank < unknown {
            Place::At((lo + rank) as u16)
        } else {
            Place::Absent(None)
        }
    } else {
        Place::Unclear(format!(
            "{} where {expected} subdevice(s) of the configured order are expected, this one \
             among them: which one is which cannot be told",
            without_address(lo, hi)
        ))
    }
}

/// Devices without a known station address where `order` expects fewer: how many beyond what
/// it expects, the first position of the first such run, and the text for the technician.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Strays {
    pub(crate) devices: u16,
    pub(crate) first: u16,
    pub(crate) text: String,
}

/// Devices without a known station address where `order` expects fewer between two devices
/// that answer with their own (or before the first, after the last): a device plugged in
/// elsewhere than the configuration places it, named for the technician.
pub(crate) fn strays(seen: &[u16], order: &[u16]) -> Option<Strays> {
    let mut over = regions(seen, order).filter(|r| r.found() > r.expected);
    let first = over.next()?;
    let devices = over.fold(first.found() - first.expected, |n, r| {
        n + r.found() - r.expected
    });
    let near = match first.after {
        Some(k) => format!("after station {:#06x}", order[k]),
        None => "at the segment's start".to_string(),
    };
    Some(Strays {
        devices: u16::try_from(devices).unwrap_or(u16::MAX),
        first: first.lo as u16,
        text: format!(
            "{} {near}, where the configured order has {}: plugged in elsewhere than configured?",
            without_address(first.lo, first.hi),
            first.expected
        ),
    })
}

/// "N device(s) without a known station address at position(s) …" for positions `lo..hi`.
fn without_address(lo: usize, hi: usize) -> String {
    match hi - lo {
        1 => format!("1 device without a known station address at position {lo}"),
        n => format!(
            "{n} devices without a known station address at positions {lo}..{}",
            hi - 1
        ),
    }
}

/// The devices without a known station address between two that answer with their own.
struct Region {
    /// The index in the order of the device before them (None: the segment's start).
    after: Option<usize>,
    /// Their positions `lo..hi`.
    lo: usize,
    hi: usize,
    /// How many devices the order has between the same two.
    expected: usize,
}

impl Region {
    fn found(&self) -> usize {
        self.hi - self.lo
    }
}

/// Every [`Region`] of the segment `seen`: before the first device with a known address,
/// between each two, after the last.
fn regions<'a>(seen: &'a [u16], order: &'a [u16]) -> impl Iterator<Item = Region> + 'a {
    let known: Vec<(usize, usize)> = seen
        .iter()
        .enumerate()
        .filter_map(|(p, a)| order.iter().position(|o| o == a).map(|k| (k, p)))
        .collect();
    (0..=known.len()).map(move |i| {
        let (after, lo) = match i.checked_sub(1) {
            None => (None, 0),
            Some(j) => (Some(known[j].0), known[j].1 + 1),
        };
        let (k1, hi) = known.get(i).copied().unwrap_or((order.len(), seen.len()));
        Region {
            after,
            lo,
            hi: hi.max(lo),
            expected: k1.saturating_sub(after.map_or(0, |k| k + 1)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // J 0x1000, in 0x1001, out 0x1002, then three members absent at bring-up.
    const ORDER: [u16; 6] = [0x1000, 0x1001, 0x1002, 0x1003, 0x1004, 0x1005];

    #[test]
    fn a_device_with_its_own_address_is_where_it_answers() {
        assert_eq!(place(&[0x1000, 0x1001, 0x1002], &ORDER, 1), Place::At(1));
    }

    #[test]
    fn members_plugged_in_at_the_line_s_end_take_their_places_in_order() {
        let seen = [0x1000, 0x1001, 0x1002, 0, 0, 0];
        assert_eq!(place(&seen, &ORDER, 3), Place::At(3));
        assert_eq!(place(&seen, &ORDER, 5), Place::At(5));
        // the first one joined: the others still between it and the end
        let seen = [0x1000, 0x1001, 0x1002, 0x1003, 0, 0];
        assert_eq!(place(&seen, &ORDER, 4), Place::At(4));
        // not plugged in
        assert_eq!(place(&ORDER[..3], &ORDER, 3), Place::Absent(None));
    }

    #[test]
    fn a_power_cycled_device_between_its_neighbours() {
        let seen = [0x1000, 0, 0x1002, 0x1003];
        assert_eq!(place(&seen, &ORDER[..4], 1), Place::At(1));
        // the first device of the segment
        assert_eq!(place(&[0, 0x1001], &ORDER[..2], 0), Place::At(0));
    }

    #[test]
    fn devices_plugged_in_before_mandatory_ones_are_not_taken_for_members() {
        // The group on a junction's first branch: three new devices at 1..=3, the two
        // terminals moved to 4 and 5.
        let seen = [0x1000, 0, 0, 0, 0x1001, 0x1002];
        let Place::Absent(strays_seen) = place(&seen, &ORDER, 3) else {
            panic!("placed")
        };
        assert_eq!(strays_seen, strays(&seen, &ORDER));
        let found = strays(&seen, &ORDER).expect("strays");
        assert_eq!((found.devices, found.first), (3, 1));
        assert_eq!(
            Some(found.text.as_str()),
            Some(
                "3 devices without a known station address at positions 1..3 after station \
                 0x1000, where the configured order has 0: plugged in elsewhere than configured?"
            )
        );
        // where absent members are expected: theirs
        assert_eq!(strays(&[0x1000, 0x1001, 0x1002, 0, 0], &ORDER), None);
        assert_eq!(strays(&ORDER, &ORDER), None);
        // one at the line's end, where the order has none
        let end = strays(&[0x1000, 0x1001, 0], &ORDER[..2]).expect("strays");
        assert_eq!((end.devices, end.first), (1, 2));
        // A terminal power-cycled meanwhile: four devices without an address where one is
        // expected.
        let seen = [0x1000, 0, 0, 0, 0, 0x1002];
        let Place::Unclear(why) = place(&seen, &ORDER, 1) else {
            panic!("placed")
        };
        assert!(why.contains("4 devices without a known station address at positions 1..4"));
        assert!(why.contains("where 1 subdevice(s)"), "{why}");
    }

    #[test]
    fn at_the_segment_s_end_the_devices_found_are_the_first_ones_expected() {
        // Members 3..6 expected after out; two devices found there (the third one's power
        // off): the first two members.
        let seen = [0x1000, 0x1001, 0x1002, 0, 0];
        assert_eq!(place(&seen, &ORDER, 3), Place::At(3));
        assert_eq!(place(&seen, &ORDER, 4), Place::At(4));
        assert_eq!(place(&seen, &ORDER, 5), Place::Absent(None));
        // More than expected there: unclear.
        let seen = [0x1000, 0x1001, 0x1002, 0, 0, 0, 0];
        assert!(matches!(place(&seen, &ORDER, 3), Place::Unclear(_)));
    }

    #[test]
    fn between_answering_neighbours_some_there_and_some_not_is_unclear() {
        // in and out expected between J and a joined member 0x1003; one device found there.
        let seen = [0x1000, 0, 0x1003];
        assert!(matches!(place(&seen, &ORDER[..4], 1), Place::Unclear(_)));
    }

    #[test]
    fn known_addresses_out_of_order_are_another_topology() {
        let seen = [0x1000, 0x1002, 0x1001, 0];
        let Place::Unclear(why) = place(&seen, &ORDER[..4], 3) else {
            panic!("placed")
        };
        assert!(why.contains("another topology"), "{why}");
    }
}
