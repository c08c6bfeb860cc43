//! The cycle's frames, rtcat's own (issue 28, docs/NOTES.md §17.4): the segment's process data
//! and every subdevice's AL status (with distributed clocks the reference clock's system time
//! first) in frames built once for a cyclic phase and sent together through the cyclic
//! thread's slots of [`crate::own_frames`].
//!
//! They carry what ethercrab 0.7.1's `tx_rx` and `tx_rx_dc` send, in the same order: with DC an
//! FRMW of the system time (0x0910, 8 bytes) at the reference clock, first in the first frame;
//! the group's image from its logical start as LRWs of [`LRW_CHUNK`] bytes (every subdevice's
//! inputs, then every subdevice's outputs: the order ethercrab lays a group out,
//! [`crate::pd_registers::Logical`]; the chunks the expected working counter is counted by);
//! then an FPRD of the AL status (0x0130) of each subdevice in the room left, further frames as
//! needed. The working counter is the LRWs' sum and a state the low nibble of its AL status (0
//! when its FPRD was not answered), as ethercrab's `TxRxResponse` has them. Unlike `tx_rx`,
//! which sends a frame only when the one before has come back, all frames of a cycle go out
//! together: an image longer than a frame costs one round trip, not one per frame. A cycle
//! one of whose frames did not come back, or came back with other datagrams than were sent,
//! is lost as a whole (as `tx_rx` fails on any frame).
//!
//! The frames are built once and their outputs copied in each cycle; replies go into buffers
//! of this module's: nothing is allocated per cycle (`tests/region_alloc.rs` counts).

use crate::image::ProcessImage;
use crate::limits::LRW_CHUNK;
use crate::own_frames::{Batch, OwnFrames, answers, datagrams_of};
use rtcat_packet::DATAGRAM_HEADER_LEN;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Most frames one cycle sends: the cyclic thread's slots less the region's
/// ([`crate::own_frames::CYCLE_SLOTS`]). The largest image and segment the master runs
/// ([`crate::limits::MAX_PDI_BYTES`], [`crate::limits::MAX_SUBDEVICES`]) need fewer than 32:
/// an LRW of [`LRW_CHUNK`] bytes a frame (the FRMW beside the first), the states in the room
/// left and then at most [`crate::own_frames::MAX_DATAGRAMS`] to a frame.
pub(crate) const MAX_FRAMES: usize = crate::own_frames::REGION_SLOT;
const _: () = assert!(
    crate::limits::MAX_PDI_BYTES.div_ceil(LRW_CHUNK)
        + 1
        + crate::limits::MAX_SUBDEVICES.div_ceil(crate::own_frames::MAX_DATAGRAMS)
        <= MAX_FRAMES
);
const _: () = assert!(Batch::size(8) + Batch::size(LRW_CHUNK) <= Batch::FRAME_ROOM);
const _: () = assert!(MAX_FRAMES <= u64::BITS as usize);

/// AL status register (ETG.1000.4 §6.3.2).
const AL_STATUS: u16 = 0x0130;
/// DC system time register (ETG.1000.4 §6.9.2): the FRMW's.
const DC_SYSTEM_TIME: u16 = 0x0910;

/// What the frames carry: the group's image and its subdevices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Logical address of the image's first byte.
    pub(crate) start: u32,
    /// Bytes of inputs (first in the image), then of outputs.
    pub(crate) inputs: usize,
    pub(crate) outputs: usize,
    /// Station address of each subdevice, in position order.
    pub(crate) addresses: Vec<u16>,
    /// With distributed clocks: the station address of the reference clock.
    pub(crate) dc_reference: Option<u16>,
}

impl Plan {
    /// The frames of the layout's first `addresses.len()` subdevices (at `addresses`, by
    /// position): their image from logical address `start` as ethercrab lays out a group (every
    /// one's inputs, then every one's outputs), with DC the reference clock at station
    /// `dc_reference`. The subdevices after them (rtcat's region) are not in it.
    pub(crate) fn of(
        layout: &crate::layout::Layout,
        (addresses, start): (Vec<u16>, u32),
        dc_reference: Option<u16>,
    ) -> Plan {
        let ours = &layout.subdevices[..addresses.len().min(layout.subdevices.len())];
        Plan {
            start,
            inputs: ours.iter().map(|s| s.input_bytes as usize).sum(),
            outputs: ours.iter().map(|s| s.output_bytes as usize).sum(),
            addresses,
            dc_reference,
        }
    }
}

/// Where a datagram's data is: (frame, offset of its data in the frame).
type At = (usize, usize);

/// What one exchange brought when every frame came back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reply {
    /// Sum of the LRWs' working counters.
    pub(crate) wkc: u16,
    /// The reference clock's system time the FRMW read (DC only).
    pub(crate) dc_time: Option<u64>,
}

/// The cycle's frames and the last replies.
#[derive(Debug, Default)]
pub(crate) struct OwnCycle {
    own: Option<Arc<OwnFrames>>,
    tx: Vec<Vec<u8>>,
    rx: Vec<Vec<u8>>,
    /// Each reply's length (the buffers stay as long as the frames sent).
    rx_len: Vec<usize>,
    /// Each LRW: where its data is, the image offset it starts at, its length.
    chunks: Vec<(At, usize, usize)>,
    /// Each subdevice's AL status.
    states_at: Vec<At>,
    frmw: Option<At>,
    inputs: usize,
    outputs: usize,
    /// Per subdevice: its state in the last reply.
    states: Vec<u8>,
    /// Frames submitted this exchange and not taken back yet (bit k: slot k).
    pending: u64,
}

impl OwnCycle {
    /// The frames of `plan`, exchanged through `own`.
    pub(crate) fn new(plan: &Plan, own: Arc<OwnFrames>) -> OwnCycle {
        let mut b = Batch::new();
        // Which datagram is what, in the batch's order.
        enum Role {
            Frmw,
            Lrw(usize, usize),
            State(usize),
        }
        let mut roles = Vec::new();
        if let Some(r) = plan.dc_reference {
            b.frmw(r, DC_SYSTEM_TIME, 8);
            roles.push(Role::Frmw);
        }
        // LRWs of LRW_CHUNK bytes from the image's start, as the expected working counter is
        // counted (`Layout::wkc_of`: a subdevice whose data two LRWs share counts in both).
        let len = plan.inputs + plan.outputs;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(LRW_CHUNK);
            b.lrw(plan.start + done as u32, n as u16);
            roles.push(Role::Lrw(done, n));
            done += n;
        }
        for i in 0..plan.addresses.len() {
            b.fprd(plan.addresses[i], AL_STATUS, 2);
            roles.push(Role::State(i));
        }
        let tx = b.encoded();
        let mut out = OwnCycle {
            own: Some(own),
            rx: tx.iter().map(|f| vec![0; f.len()]).collect(),
            rx_len: vec![0; tx.len()],
            states_at: vec![(0, 0); plan.addresses.len()],
            states: vec![0; plan.addresses.len()],
            inputs: plan.inputs,
            outputs: plan.outputs,
            ..OwnCycle::default()
        };
        let mut role = roles.into_iter();
        for (f, frame) in tx.iter().enumerate() {
            for (off, _) in datagrams_of(frame) {
                let at = (f, off + DATAGRAM_HEADER_LEN);
                match role.next() {
                    Some(Role::Frmw) => out.frmw = Some(at),
                    Some(Role::Lrw(from, n)) => out.chunks.push((at, from, n)),
                    Some(Role::State(i)) => out.states_at[i] = at,
                    None => {}
                }
            }
        }
        out.tx = tx;
        out
    }

    /// Refused beyond [`MAX_FRAMES`] (cannot happen within the master's limits, checked at
    /// compile time above; kept for a plan built otherwise).
    pub(crate) fn fits(&self) -> bool {
        self.tx.len() <= MAX_FRAMES
    }

    /// The application's outputs of the group into the frames, sent with the next exchange.
    pub(crate) fn copy_outputs(&mut self, image: &ProcessImage) {
        let src = image.outputs();
        let (lo, hi) = (self.inputs, self.inputs + self.outputs);
        for &((f, at), from, n) in &self.chunks {
            // This LRW's part of the outputs [lo, hi) of the image.
            let (a, b) = (from.max(lo), (from + n).min(hi));
            if a >= b {
                continue;
            }
            let (Some(dst), Some(s)) = (
                self.tx[f].get_mut(at + (a - from)..at + (b - from)),
                src.get(a - lo..b - lo),
            ) else {
                continue;
            };
            dst.copy_from_slice(s);
        }
    }

    /// The inputs of the group that came back, into the application's image.
    pub(crate) fn copy_inputs(&self, image: &mut ProcessImage) {
        let dst = image.inputs_mut();
        for &((f, at), from, n) in &self.chunks {
            let b = (from + n).min(self.inputs);
            if from >= b {
                continue;
            }
            let (Some(d), Some(s)) = (dst.get_mut(from..b), self.rx[f].get(at..at + (b - from)))
            else {
                continue;
            };
            d.copy_from_slice(s);
        }
    }

    /// Each subdevice's AL state in the last reply (position order).
    pub(crate) fn states(&self) -> &[u8] {
        &self.states
    }

    /// The frames out and their replies in: a future the cycle polls, Ok with what the replies
    /// say, Err(()) when one could not be sent or came back with other datagrams; dropped
    /// before it is ready, the frames are given up.
    pub(crate) fn exchange(&mut self) -> Exchange<'_> {
        Exchange {
            cycle: self,
            sent: false,
        }
    }

    /// Every reply as sent (same length, same datagrams): the working counter, the states and
    /// the DC time read; Err(()) otherwise.
    fn read_replies(&mut self) -> Result<Reply, ()> {
        for ((tx, rx), &n) in self.tx.iter().zip(&self.rx).zip(&self.rx_len) {
            if !rx.get(..n).is_some_and(|r| answers(tx, r)) {
                return Err(());
            }
        }
        let word = |(f, at): At, len: usize| -> u16 {
            let r = &self.rx[f];
            u16::from_le_bytes([r[at + len], r[at + len + 1]])
        };
        let mut wkc = 0u16;
        for &(at, _, n) in &self.chunks {
            wkc = wkc.wrapping_add(word(at, n));
        }
        for (s, &(f, at)) in self.states.iter_mut().zip(&self.states_at) {
            *s = if word((f, at), 2) == 1 {
                self.rx[f][at] & 0x0f
            } else {
                0
            };
        }
        let dc_time = self.frmw.map(|(f, at)| {
            let mut t = [0u8; 8];
            t.copy_from_slice(&self.rx[f][at..at + 8]);
            u64::from_le_bytes(t)
        });
        Ok(Reply { wkc, dc_time })
    }
}

/// [`OwnCycle::exchange`]: sends the frames at its first poll, ready when every reply is in.
pub(crate) struct Exchange<'a> {
    cycle: &'a mut OwnCycle,
    sent: bool,
}

impl Future for Exchange<'_> {
    type Output = Result<Reply, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let c = &mut *this.cycle;
        let Some(own) = c.own.clone() else {
            return Poll::Ready(Err(()));
        };
        if !this.sent {
            if !c.fits() {
                return Poll::Ready(Err(()));
            }
            this.sent = true;
            for (k, f) in c.tx.iter().enumerate() {
                if !own.submit_cycle(k, f, cx.waker()) {
                    // A slot still busy with a reply to the last cycle: this one is lost.
                    return Poll::Ready(Err(()));
                }
                c.pending |= 1u64 << k;
            }
        }
        for k in 0..c.tx.len() {
            if c.pending & (1u64 << k) == 0 {
                continue;
            }
            match own.take_cycle(k, &mut c.rx[k]) {
                Some(n) => {
                    c.pending &= !(1u64 << k);
                    // A shorter reply is refused as not what was sent.
                    c.rx_len[k] = n;
                }
                None => return Poll::Pending,
            }
        }
        this.sent = false;
        Poll::Ready(c.read_replies())
    }
}

impl Drop for Exchange<'_> {
    fn drop(&mut self) {
        let c = &mut *self.cycle;
        if let Some(own) = c.own.as_deref() {
            for k in 0..c.tx.len() {
                if c.pending & (1u64 << k) != 0 {
                    own.abandon_cycle(k);
                }
            }
        }
        c.pending = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(inputs: usize, outputs: usize, n: usize, dc: bool) -> Plan {
        Plan {
            start: 0,
            inputs,
            outputs,
            addresses: (0..n as u16).map(|i| 0x1000 + i).collect(),
            dc_reference: dc.then_some(0x1000),
        }
    }

    /// (command, address, length) of each datagram of each frame.
    fn shape(c: &OwnCycle) -> Vec<Vec<(u8, u32, usize)>> {
        c.tx.iter()
            .map(|f| {
                datagrams_of(f)
                    .map(|(off, len)| {
                        let a =
                            u32::from_le_bytes([f[off + 2], f[off + 3], f[off + 4], f[off + 5]]);
                        (f[off], a, len)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_small_image_is_one_frame_as_ethercrab_packs_it() {
        let c = OwnCycle::new(&plan(3, 2, 2, true), Arc::default());
        assert_eq!(
            shape(&c),
            vec![vec![
                (14, 0x1000 | 0x0910 << 16, 8),
                (12, 0, 5),
                (4, 0x1000 | 0x0130 << 16, 2),
                (4, 0x1001 | 0x0130 << 16, 2),
            ]]
        );
        let c = OwnCycle::new(&plan(0, 0, 1, false), Arc::default());
        assert_eq!(shape(&c), vec![vec![(4, 0x1000 | 0x0130 << 16, 2)]]);
    }

    #[test]
    fn a_long_image_is_cut_at_the_frame_and_every_state_follows() {
        let n = 200;
        let c = OwnCycle::new(&plan(2000, 1500, n, true), Arc::default());
        let s = shape(&c);
        // FRMW + LRW filling the first frame; whole-frame LRWs; the rest, then the states.
        let lrws: Vec<(u32, usize)> = s
            .iter()
            .flatten()
            .filter(|d| d.0 == 12)
            .map(|d| (d.1, d.2))
            .collect();
        assert_eq!(lrws.iter().map(|l| l.1).sum::<usize>(), 3500);
        let mut next = 0;
        for (a, len) in &lrws {
            assert_eq!(*a as usize, next, "consecutive");
            next += len;
        }
        assert_eq!(s[0][0].0, 14, "the FRMW first");
        assert_eq!(s.iter().flatten().filter(|d| d.0 == 4).count(), n);
        for f in &c.tx {
            assert!(f.len() <= 14 + 1500, "{}", f.len());
        }
        // The image in LRWs of 1100 bytes (the FRMW beside the first), the last two sharing a
        // frame with 12 states in the room left (1498 - 1112 - 212 bytes); then 64 states to
        // a frame (datagrams, not bytes, bound them: 64 x 14 = 896 bytes), 60 in the last.
        let per_frame: Vec<usize> = s.iter().map(Vec::len).collect();
        assert_eq!(
            lrws.iter().map(|l| l.1).collect::<Vec<_>>(),
            [1100, 1100, 1100, 200]
        );
        assert_eq!(per_frame, [2, 1, 2 + 12, 64, 64, 60]);
        assert!(c.fits());
    }

    /// Outputs go where the image has them; inputs come from where the reply has them; the
    /// working counter is the LRWs' sum, a state the AL status's low nibble (0 unanswered).
    #[test]
    fn replies_are_read_by_the_datagrams_sent() {
        let p = plan(1600, 1600, 3, true);
        let mut c = OwnCycle::new(&p, Arc::default());
        let mut image = ProcessImage::with_sizes(1600, 1600);
        for (i, b) in image.outputs_mut().iter_mut().enumerate() {
            *b = i as u8;
        }
        c.copy_outputs(&image);
        // The reply: every LRW's inputs set to their offset's low byte + 1, wkc 3 each; state
        // OP for two devices, the third unanswered; DC time 42.
        for (k, f) in c.tx.iter().enumerate() {
            c.rx[k] = f.clone();
            c.rx_len[k] = f.len();
        }
        let mut logical_out = vec![0u8; 1600];
        for &((f, at), from, n) in &c.chunks {
            for x in from..from + n {
                if x < 1600 {
                    c.rx[f][at + x - from] = (x as u8).wrapping_add(1);
                } else {
                    logical_out[x - 1600] = c.tx[f][at + x - from];
                }
            }
            c.rx[f][at + n..at + n + 2].copy_from_slice(&3u16.to_le_bytes());
        }
        assert_eq!(logical_out, image.outputs(), "the outputs in the frames");
        for (i, &(f, at)) in c.states_at.iter().enumerate() {
            if i < 2 {
                c.rx[f][at] = 0x18;
                c.rx[f][at + 2..at + 4].copy_from_slice(&1u16.to_le_bytes());
            } else {
                c.rx[f][at] = 0x08;
            }
        }
        let (f, at) = c.frmw.unwrap();
        c.rx[f][at..at + 8].copy_from_slice(&42u64.to_le_bytes());
        let r = c.read_replies().expect("as sent");
        assert_eq!(r.wkc, 3 * c.chunks.len() as u16);
        assert_eq!(r.dc_time, Some(42));
        assert_eq!(c.states(), &[8, 8, 0]);
        c.copy_inputs(&mut image);
        for (x, b) in image.inputs().iter().enumerate() {
            assert_eq!(*b, (x as u8).wrapping_add(1));
        }
        // A reply with another datagram: the cycle is lost.
        let (f, at) = c.states_at[0];
        c.rx[f][at - DATAGRAM_HEADER_LEN] = 5;
        assert_eq!(c.read_replies(), Err(()));
        // A short reply too.
        c.rx[f][at - DATAGRAM_HEADER_LEN] = 4;
        assert!(c.read_replies().is_ok());
        c.rx_len[f] -= 1;
        assert_eq!(c.read_replies(), Err(()));
    }
}
