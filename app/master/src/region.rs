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
//! Each cycle sends, beside ethercrab's frames, one frame of rtcat's own
//! ([`crate::own_frames`]) with, per member, one LRW of its area (its inputs, then its
//! outputs) and one FPRD of its AL status. Its data is valid only when its LRW came back with
//! the member's own working counter (+1 for its inputs read, +2 for its outputs written,
//! ETG.1000.4 Table 24) and the FPRD read OP: a judgement per member (each datagram has its
//! own working counter), so one member that leaves does not make another one's data invalid.
//! The frame is built once (its outputs copied in every cycle) and its reply read into a
//! buffer of the region's: nothing is allocated per cycle (`tests/region_alloc.rs`). Before
//! these frames, ethercrab's public API (one PDU per frame) made it two frames per member
//! each cycle, at most 8 members.

use crate::error::{Error, Result};
use crate::image::ProcessImage;
use crate::layout::Layout;
use crate::own_frames::{Batch, OwnFrames};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Where the region starts in the logical address space: beyond every image ethercrab lays
/// out (from 0, at most [`crate::limits::MAX_PDI_BYTES`] bytes).
pub const REGION_START: u32 = 0x0001_0000;

/// Most members absent at bring-up one segment may have: two datagrams each in the region's
/// one frame ([`crate::own_frames::MAX_DATAGRAMS`]), whose bytes bound them too.
pub const MAX_MEMBERS: usize = crate::own_frames::MAX_DATAGRAMS / 2;

/// AL status register (ETG.1000.4 §6.3.2).
const AL_STATUS: u16 = 0x0130;

/// A member of an optional group absent at bring-up: where its data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// Its position (its index in the layout and the image).
    pub(crate) index: usize,
    /// The station address its recovery gives it ([`station_address`]).
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
}

/// First station address of the members of the region: above every address ethercrab 0.7.1
/// gives at a scan (`BASE_SUBDEVICE_ADDRESS` 0x1000 + scan index, below 0x1000 +
/// [`crate::limits::MAX_SUBDEVICES`]). A range of their own, because a group on a junction's
/// port present at a scan takes scan indices before mandatory devices: an address from the
/// layout position (0x1000 + position) would then be a mandatory device's.
pub(crate) const STATION_BASE: u16 = 0x2000;
const _: () = assert!(0x1000 + crate::limits::MAX_SUBDEVICES <= STATION_BASE as usize);

/// The station address the recovery gives the member at layout `position` (the positions
/// after ethercrab's group): [`STATION_BASE`] + position.
pub(crate) fn station_address(position: usize) -> u16 {
    STATION_BASE.wrapping_add(position as u16)
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
             {MAX_MEMBERS} (all are exchanged in one frame)",
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
    if !out.is_empty() && frame_of(&out).is_none() {
        let bytes: usize = out.iter().map(Member::len).sum();
        return Err(Error::Capacity(format!(
            "{} members of optional groups are absent at bring-up with {bytes} bytes of \
             process data: more than the one frame they are exchanged in holds",
            out.len()
        )));
    }
    Ok(out)
}

/// The region's frame: per member an LRW of its area and an FPRD of its AL status (None: more
/// than one frame).
fn frame_of(members: &[Member]) -> Option<Vec<u8>> {
    let mut b = Batch::new();
    for m in members {
        b.lrw(m.logical, m.len() as u16);
        b.fprd(m.address, AL_STATUS, 2);
    }
    b.one_frame()
}

/// What one cycle learned of one member.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Its LRW came back with its working counter: the inputs in `rx` are this cycle's.
    pub(crate) data: bool,
    /// Its AL state (0: the FPRD was not answered).
    pub(crate) al_state: u8,
}

/// The cycle's side of the region: its members, its frame as sent and as received, and what
/// the last exchange brought; allocated before the cyclic phase.
#[derive(Debug, Default)]
pub struct Region {
    members: Vec<Member>,
    /// The frame: per member its LRW (zeros where its inputs go, then its outputs) and its
    /// FPRD, working counters zero.
    tx: Vec<u8>,
    /// The last reply (as long as `tx`).
    rx: Vec<u8>,
    /// Per member, where the data of its LRW and of its FPRD start in the frame.
    at: Vec<(usize, usize)>,
    answers: Vec<Answer>,
    own: Option<Arc<OwnFrames>>,
}

impl Region {
    /// The region of `members` (checked by [`plan`]), exchanged through `own`.
    pub(crate) fn new(members: &[Member], own: Arc<OwnFrames>) -> Region {
        let tx = frame_of(members).unwrap_or_default();
        let data = |(off, _)| off + rtcat_packet::DATAGRAM_HEADER_LEN;
        let offsets: Vec<usize> = crate::own_frames::datagrams_of(&tx).map(data).collect();
        Region {
            members: members.to_vec(),
            rx: vec![0; tx.len()],
            at: offsets.chunks(2).map(|c| (c[0], c[1])).collect(),
            tx,
            answers: vec![Answer::default(); members.len()],
            own: Some(own),
        }
    }

    /// Whether there is anything to exchange.
    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The region's frame out and its reply in: a future the cycle polls beside ethercrab's
    /// exchange, which writes each member's answer; dropped before it is ready, the frame is
    /// given up.
    pub(crate) fn exchange(&mut self) -> Exchange<'_> {
        Exchange {
            region: self,
            sent: false,
        }
    }

    /// What the exchange brought (`None`: the cycle ended before the reply came back).
    pub(crate) fn take(&mut self, answered: Option<()>) {
        if answered.is_none() {
            self.lost();
        }
    }

    /// Each member's answer from the reply in `rx` (`n` bytes): all lost when its datagrams
    /// are not where the frame sent has them.
    fn read_reply(&mut self, n: usize) {
        let rx = &self.rx[..n];
        if !crate::own_frames::answers(&self.tx, rx) {
            self.lost();
            return;
        }
        let wkc = |data_at: usize, len: usize| {
            u16::from_le_bytes([rx[data_at + len], rx[data_at + len + 1]])
        };
        for ((m, &(lrw, al)), a) in self.members.iter().zip(&self.at).zip(&mut self.answers) {
            a.data = wkc(lrw, m.len()) == m.expected_wkc();
            a.al_state = if wkc(al, 2) == 1 { rx[al] & 0x0f } else { 0 };
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
        for (j, (m, a)) in self.members.iter().zip(&self.answers).enumerate() {
            if !a.data {
                continue;
            }
            let (at, _) = self.at[j];
            let dst = image.inputs_of_mut(m.index);
            let n = dst.len().min(m.input_bytes);
            dst[..n].copy_from_slice(&self.rx[at..at + n]);
        }
    }

    /// The application's outputs of every member, sent with the next exchange.
    pub(crate) fn copy_outputs(&mut self, image: &ProcessImage) {
        for (m, &(lrw, _)) in self.members.iter().zip(&self.at) {
            let at = lrw + m.input_bytes;
            let src = image.outputs_of(m.index);
            let n = src.len().min(m.output_bytes);
            self.tx[at..at + n].copy_from_slice(&src[..n]);
        }
    }
}

/// [`Region::exchange`]: sends the frame at its first poll, ready when the reply is in.
pub(crate) struct Exchange<'a> {
    region: &'a mut Region,
    sent: bool,
}

impl Future for Exchange<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let r = &mut *this.region;
        let Some(own) = r.own.as_deref() else {
            r.lost();
            return Poll::Ready(());
        };
        if !this.sent {
            if !own.submit_cycle(crate::own_frames::REGION_SLOT, &r.tx, cx.waker()) {
                r.lost();
                return Poll::Ready(());
            }
            this.sent = true;
        }
        match own.take_cycle(crate::own_frames::REGION_SLOT, &mut r.rx) {
            Some(n) => {
                this.sent = false;
                r.read_reply(n);
                Poll::Ready(())
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for Exchange<'_> {
    fn drop(&mut self) {
        if self.sent
            && let Some(own) = self.region.own.as_deref()
        {
            own.abandon_cycle(crate::own_frames::REGION_SLOT);
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
            (1, 0x2001, REGION_START)
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
        assert!(e.contains("33 members") && e.contains("at most 32"), "{e}");
        assert!(plan(&l, 2, &[], &[(0, 0); MAX_MEMBERS]).is_ok());
        // Fewer, with more data than one frame holds: 4 of 400 bytes.
        let l = Layout::build(
            1,
            &[
                source(1, 1),
                source(200, 200),
                source(200, 200),
                source(200, 200),
                source(200, 200),
            ],
        )
        .expect("layout");
        let e = plan(&l, 1, &[], &[(0, 0); 4])
            .expect_err("too large")
            .to_string();
        assert!(e.contains("4 members") && e.contains("1600 bytes"), "{e}");
        assert!(plan(&l, 2, &[], &[(0, 0); 3]).is_ok());
    }

    /// A region of three members: their frame, an answer written as the segment would (the
    /// first with its inputs and outputs, the second not there, the third in SAFE-OP), and what
    /// the cycle reads from it.
    #[test]
    fn each_member_is_judged_by_its_own_datagrams_in_the_one_frame() {
        let l = Layout::build(1, &[source(1, 1), source(2, 1), source(1, 0), source(1, 2)])
            .expect("layout");
        let members = plan(&l, 1, &[], &[(0, 0), (0, 1), (0, 2)]).expect("plan");
        let own = Arc::new(OwnFrames::default());
        let mut r = Region::new(&members, own);
        let ds: Vec<(usize, usize)> = crate::own_frames::datagrams_of(&r.tx).collect();
        assert_eq!(ds.len(), 6, "an LRW and an FPRD per member");
        assert_eq!(
            ds.iter().map(|&(_, len)| len).collect::<Vec<_>>(),
            [3, 2, 1, 2, 3, 2]
        );
        // The reply: the first member read and written (working counter 3) in OP, the second
        // absent (nothing answered), the third read and written in SAFE-OP.
        let mut rx = r.tx.clone();
        let put = |rx: &mut Vec<u8>, (off, len): (usize, usize), data: &[u8], wkc: u16| {
            let d = off + rtcat_packet::DATAGRAM_HEADER_LEN;
            rx[d..d + data.len()].copy_from_slice(data);
            rx[d + len..d + len + 2].copy_from_slice(&wkc.to_le_bytes());
        };
        put(&mut rx, ds[0], &[0xa1, 0xa2], 3);
        put(&mut rx, ds[1], &[0x08, 0x00], 1);
        put(&mut rx, ds[4], &[0xc1], 3);
        put(&mut rx, ds[5], &[0x04, 0x00], 1);
        r.rx.copy_from_slice(&rx);
        r.read_reply(rx.len());
        let got: Vec<(usize, Answer)> = r.answers().collect();
        let answer = |data, al_state| Answer { data, al_state };
        assert_eq!(
            got,
            [
                (1, answer(true, 8)),
                (2, answer(false, 0)),
                (3, answer(true, 4))
            ]
        );
        // A reply of another shape: every member lost.
        r.read_reply(rx.len() - 1);
        assert!(r.answers().all(|(_, a)| a == Answer::default()));
    }
}
