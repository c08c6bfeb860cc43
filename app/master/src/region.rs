//! rtcat's own logical region: the process data of the optional members that were not on the
//! segment at bring-up (issue 28 item 2, docs/NOTES.md §17.2).
//!
//! ethercrab 0.7.1 lays out its group's process image and FMMUs only in its group
//! initialisation, from the devices it finds, and its cycle (`tx_rx`) exchanges exactly that
//! image. A member that appears later gets its FMMUs from its own recovery
//! ([`crate::subdevice_recovery`], registers from [`crate::pd_registers`]) at addresses of this
//! region, which starts at [`REGION_START`], far beyond any image ethercrab can lay out
//! ([`crate::limits::MAX_PDI_BYTES`]), so no datagram of one ever touches the other.
//!
//! Each cycle sends, beside ethercrab's frames, per member one LRW of its area (its inputs,
//! then its outputs) and one FPRD of its AL status: ethercrab's public API builds one PDU per
//! frame (`Command::lrw(..).send_receive_slice`; its frame builder is crate-private), so these
//! are two frames per member. Its data is valid only when the LRW came back with the member's
//! own working counter (+1 for its inputs read, +2 for its outputs written, ETG.1000.4 Table
//! 24) and the FPRD read OP: a judgement per member, so one member that leaves does not make
//! another one's data invalid. The futures live on the cycle's stack and the frames in
//! ethercrab's static storage: nothing is allocated per cycle (`tests/alloc.rs`).

use crate::error::{Error, Result};
use crate::image::ProcessImage;
use crate::layout::Layout;
use ethercrab::{Command, MainDevice};
use futures_lite::future::zip;
use std::future::Future;

/// Where the region starts in the logical address space: beyond every image ethercrab lays
/// out (from 0, at most [`crate::limits::MAX_PDI_BYTES`] bytes).
pub const REGION_START: u32 = 0x0001_0000;

/// Most members absent at bring-up one segment may have: each costs two frames a cycle from
/// ethercrab's storage ([`crate::limits::MAX_FRAMES`]), which also carries the image's LRWs.
pub const MAX_MEMBERS: usize = 8;

/// AL status register (ETG.1000.4 §6.3.2).
const AL_STATUS: u16 = 0x0130;

/// A member of an optional group absent at bring-up: where its data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// Its position (its index in the layout and the image).
    pub(crate) index: usize,
    /// The station address its recovery gives it (ethercrab's scheme, 0x1000 + position).
    pub(crate) address: u16,
    /// Logical address of its first input byte; its outputs follow its inputs.
    pub(crate) logical: u32,
    pub(crate) input_bytes: usize,
    pub(crate) output_bytes: usize,
    /// The `[[device]]` entry that configures it (its mapping comes from there).
    pub(crate) device: Option<usize>,
    /// Its `[[group]]` and its index in the group's `members`: who it must be.
    pub(crate) member: (usize, usize),
}

impl Member {
    /// Its process data in the logical address space, as [`crate::pd_registers`] takes it.
    pub(crate) fn at(&self) -> crate::pd_registers::Logical {
        crate::pd_registers::Logical {
            inputs: self.logical,
            outputs: self.logical + self.input_bytes as u32,
        }
    }

    /// The working counter of its LRW when its FMMUs are in place.
    fn expected_wkc(&self) -> u16 {
        u16::from(self.input_bytes > 0) + 2 * u16::from(self.output_bytes > 0)
    }

    fn len(&self) -> usize {
        self.input_bytes + self.output_bytes
    }

    /// Where its area starts in the region's buffers.
    fn offset(&self) -> usize {
        (self.logical - REGION_START) as usize
    }
}

/// The station address ethercrab 0.7.1 gives the subdevice at `position` (`BASE_SUBDEVICE_ADDRESS`
/// + index): a member absent at bring-up gets the one it would have had.
pub(crate) fn station_address(position: usize) -> u16 {
    0x1000u16.wrapping_add(position as u16)
}

/// The region of the layout's subdevices from `present` on (the members absent at bring-up,
/// `members` giving each one's group and member index, in position order), one after the
/// other from [`REGION_START`]. Refused beyond [`MAX_MEMBERS`] or when one member's data does
/// not fit one frame.
pub(crate) fn plan(
    layout: &Layout,
    present: usize,
    chosen: &[Option<usize>],
    members: &[(usize, usize)],
) -> Result<Vec<Member>> {
    let late = layout.subdevices.get(present..).unwrap_or(&[]);
    if late.len() > MAX_MEMBERS {
        return Err(Error::Capacity(format!(
            "{} members of optional groups are absent at bring-up; rtcat runs at most \
             {MAX_MEMBERS} (each is exchanged in frames of its own)",
            late.len()
        )));
    }
    if members.len() != late.len() {
        return Err(Error::SegmentMismatch(format!(
            "{} subdevices after the present ones in the layout, {} members absent (internal)",
            late.len(),
            members.len()
        )));
    }
    let mut logical = REGION_START;
    let mut out = Vec::with_capacity(late.len());
    for (k, (s, &member)) in late.iter().zip(members).enumerate() {
        let m = Member {
            index: present + k,
            address: station_address(present + k),
            logical,
            input_bytes: s.input_bytes as usize,
            output_bytes: s.output_bytes as usize,
            device: chosen.get(present + k).copied().flatten(),
            member,
        };
        if m.len() > crate::limits::LRW_CHUNK {
            return Err(Error::Capacity(format!(
                "position {} ({}): {} bytes of process data; a member absent at bring-up is \
                 exchanged in one datagram of at most {}",
                m.index,
                s.name,
                m.len(),
                crate::limits::LRW_CHUNK
            )));
        }
        logical += m.len() as u32;
        out.push(m);
    }
    Ok(out)
}

/// What one cycle learned of one member.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Its LRW came back with its working counter: the inputs in `rx` are this cycle's.
    pub(crate) data: bool,
    /// Its AL state (0: the FPRD was not answered).
    pub(crate) al_state: u8,
}

/// The cycle's side of the region: its members, the bytes sent and received, and what the
/// last exchange brought; allocated before the cyclic phase.
#[derive(Debug, Default)]
pub struct Region {
    members: Vec<Member>,
    /// Per member at (logical - REGION_START): zeros where its inputs go, then its outputs.
    tx: Vec<u8>,
    /// The same places: what came back.
    rx: Vec<u8>,
    answers: Vec<Answer>,
}

impl Region {
    pub(crate) fn new(members: &[Member]) -> Region {
        let len = members.last().map_or(0, |m| m.offset() + m.len());
        Region {
            members: members.to_vec(),
            tx: vec![0; len],
            rx: vec![0; len],
            answers: vec![Answer::default(); members.len()],
        }
    }

    /// Whether there is anything to exchange.
    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Every member's LRW and AL status read, all in flight at once: one future of fixed size
    /// on the caller's stack, writing each member's inputs into its place of `rx` (only with its
    /// working counter); its output is each member's answer.
    pub(crate) fn exchange<'a>(
        &'a mut self,
        md: &'a MainDevice<'static>,
    ) -> impl Future<Output = [Answer; MAX_MEMBERS]> + 'a {
        let Region {
            members, tx, rx, ..
        } = self;
        // Each member's place of `rx`, handed to its own future.
        let mut places: [&mut [u8]; MAX_MEMBERS] = Default::default();
        let mut rest: &mut [u8] = rx;
        for (j, m) in members.iter().enumerate() {
            let (here, after) = std::mem::take(&mut rest).split_at_mut(m.len());
            places[j] = here;
            rest = after;
        }
        let (members, tx): (&'a [Member], &'a [u8]) = (members, tx);
        let [p0, p1, p2, p3, p4, p5, p6, p7] = places;
        let one = move |j: usize, place: &'a mut [u8]| async move {
            let Some(m) = members.get(j) else {
                return Answer::default();
            };
            let at = m.offset();
            let lrw = Command::lrw(m.logical)
                .ignore_wkc()
                .send_receive_slice(md, &tx[at..at + m.len()]);
            let al = Command::fprd(m.address, AL_STATUS).receive::<u16>(md);
            let (lrw, al) = zip(lrw, al).await;
            let mut a = Answer::default();
            if let Ok(pdu) = lrw
                && let Ok(pdu) = pdu.wkc(m.expected_wkc())
                && pdu.len() >= m.len()
            {
                place.copy_from_slice(&pdu[..m.len()]);
                a.data = true;
            }
            if let Ok(s) = al {
                a.al_state = (s & 0x0f) as u8;
            }
            a
        };
        let first = zip(zip(one(0, p0), one(1, p1)), zip(one(2, p2), one(3, p3)));
        let second = zip(zip(one(4, p4), one(5, p5)), zip(one(6, p6), one(7, p7)));
        async move {
            let (((a, b), (c, d)), ((e, f), (g, h))) = zip(first, second).await;
            [a, b, c, d, e, f, g, h]
        }
    }

    /// What the exchange brought (`None`: the cycle ended before every reply came back).
    pub(crate) fn take(&mut self, answers: Option<[Answer; MAX_MEMBERS]>) {
        match answers {
            Some(a) => {
                let n = self.answers.len();
                self.answers.copy_from_slice(&a[..n]);
            }
            None => self.lost(),
        }
    }

    /// Nothing came back this cycle.
    pub(crate) fn lost(&mut self) {
        self.answers.fill(Answer::default());
    }

    /// Each member's position and what this cycle learned of it.
    pub(crate) fn answers(&self) -> impl Iterator<Item = (usize, Answer)> + '_ {
        self.members
            .iter()
            .map(|m| m.index)
            .zip(self.answers.iter().copied())
    }

    /// The inputs of the members whose data came back, into the application's image.
    pub(crate) fn copy_inputs(&self, image: &mut ProcessImage) {
        for (m, a) in self.members.iter().zip(&self.answers) {
            if !a.data {
                continue;
            }
            let at = m.offset();
            let dst = image.inputs_of_mut(m.index);
            let n = dst.len().min(m.input_bytes);
            dst[..n].copy_from_slice(&self.rx[at..at + n]);
        }
    }

    /// The application's outputs of every member, sent with the next exchange.
    pub(crate) fn copy_outputs(&mut self, image: &ProcessImage) {
        for m in &self.members {
            let at = m.offset() + m.input_bytes;
            let src = image.outputs_of(m.index);
            let n = src.len().min(m.output_bytes);
            self.tx[at..at + n].copy_from_slice(&src[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Direction, Identity, MappingSource, PdoSource, SubdeviceSource};

    fn source(inputs: u8, outputs: u8) -> SubdeviceSource {
        let pdo = |index, sm, direction, bytes: u8| PdoSource {
            index,
            name: None,
            sync_manager: sm,
            direction,
            entries: (0..bytes).map(|k| (0x6000, k + 1, 8, None, 5)).collect(),
        };
        SubdeviceSource {
            address: 0,
            alias: 0,
            name: "d".into(),
            identity: Identity::default(),
            coe: true,
            mapping: MappingSource::Coe,
            pdos: vec![
                pdo(0x1600, 2, Direction::Outputs, outputs),
                pdo(0x1a00, 3, Direction::Inputs, inputs),
            ],
        }
    }

    #[test]
    fn absent_members_follow_one_another_from_the_region_start() {
        let l = Layout::build(1, &[source(2, 1), source(4, 3), source(1, 0)]).expect("layout");
        let r = plan(&l, 1, &[], &[(0, 0), (0, 1)]).expect("plan");
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].index, r[0].address, r[0].logical),
            (1, 0x1001, REGION_START)
        );
        assert_eq!(r[0].at().outputs, REGION_START + 4);
        assert_eq!(r[0].expected_wkc(), 3);
        assert_eq!(r[1].logical, REGION_START + 7);
        assert_eq!(r[1].expected_wkc(), 1);
        // Nothing absent: no region.
        assert!(plan(&l, 3, &[], &[]).expect("none").is_empty());
        // The region never overlaps ethercrab's image.
        assert!(REGION_START as usize >= crate::limits::MAX_PDI_BYTES);
    }

    #[test]
    fn too_many_absent_members_are_refused() {
        let subs = vec![source(1, 1); MAX_MEMBERS + 2];
        let l = Layout::build(1, &subs).expect("layout");
        let e = plan(&l, 1, &[], &[(0, 0); MAX_MEMBERS + 1])
            .expect_err("too many")
            .to_string();
        assert!(e.contains("9 members") && e.contains("at most 8"), "{e}");
        assert!(plan(&l, 2, &[], &[(0, 0); MAX_MEMBERS]).is_ok());
    }
}
