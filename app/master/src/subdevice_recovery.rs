//! One subdevice brought back into OP on its own while the others cycle on (`[health] recovery
//! = "subdevice"`).
//!
//! ethercrab 0.7.1 moves a whole group through the AL states (`SubDeviceGroup::into_*`) and
//! configures sync managers, FMMUs and DC only in its group initialisation: its API has no way
//! to take one subdevice of an OP group back through INIT and PRE-OP. What it does have is the
//! raw datagram API (`ethercrab::Command` FPRD/FPWR/APRD/APWR) and the SDO client of a
//! `SubDeviceRef`, which any thread may use while the group cycles; this module builds the
//! per-subdevice recovery on those.
//!
//! - After every bring-up reached OP, `snapshot` reads each subdevice's sync manager
//!   (0x0800..) and FMMU (0x0600..) registers and, for a DC subdevice, its DC registers
//!   (0x0900..0x09AF): what ethercrab wrote, to be written again.
//! - The cyclic thread marks a subdevice seen out of OP on the [`Board`] (a few atomics, no
//!   lock, no allocation, no system call) and keeps cycling: its data is flagged invalid, the
//!   working counter judged without its share ([`crate::cycle::judge`]).
//! - The worker thread (`worker`, normal priority) brings it back: station address by
//!   position if it lost it (a power cycle), its identity from the SII against the one the
//!   segment was brought up with (another identity is refused and never driven), INIT with the
//!   error acknowledged, the mailbox sync managers, PRE-OP, its `[[device]]` configuration (the
//!   same `devices::apply_pre_op` as a bring-up), the process data sync managers and FMMUs as
//!   they were, the DC registers for a DC subdevice, SAFE-OP, the SAFE-OP startup SDOs, OP.
//!   Register layout: ETG.1000.4 §6 (0x0010 station address, 0x0120 AL control, 0x0130 AL
//!   status, 0x0134 AL status code, 0x0600 FMMUs of 16 bytes, 0x0800 sync managers of 8
//!   bytes, 0x0900.. distributed clocks).
//! - `[health] subdevice_attempts` failures in a row set `Board::escalate`: the cyclic loop
//!   then ends for a whole-segment recovery.
//! - A subdevice can be **parked** for a firmware update ([`crate::foe::update`]): the acyclic
//!   service asks for it on the cyclic thread (`Board::park`), the next cycle tells the
//!   application ([`crate::SubdeviceChange::Parked`]) and from then on flags its data invalid
//!   whatever its state; the worker leaves it alone. `Board::hand_back` gives it to the worker
//!   as if the cycle had seen it out of OP, with cause
//!   [`crate::SubdeviceCause::FirmwareUpdate`]. Its identity is then checked on vendor and
//!   product only: new firmware may carry a new revision (ETG.2010 Table 2 word 0x0C is the
//!   device's to change), which becomes the one later recoveries expect.

use crate::config::Config;
use crate::devices;
use crate::error::{Error, Result};
use crate::layout::Layout;
use ethercrab::{Command, MainDevice};
use futures_lite::future::block_on;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const STATION_ADDRESS: u16 = 0x0010;
const AL_CONTROL: u16 = 0x0120;
const AL_STATUS: u16 = 0x0130;
const FMMU0: u16 = 0x0600;
const SM0: u16 = 0x0800;
const DC_BASE: u16 = 0x0900;
/// 16 FMMUs of 16 bytes (ETG.1000.4 §6.6).
const FMMU_BYTES: usize = 256;
/// 16 sync managers of 8 bytes (ETG.1000.4 §6.7).
const SM_BYTES: usize = 128;
/// 0x0900..0x09AF: receive times, system time, offset (0x0920), delay (0x0928), SYNC
/// activation (0x0981), start time (0x0990), SYNC0/1 cycle times (0x09A0/0x09A4).
const DC_BYTES: usize = 0xb0;

const INIT: u8 = 0x01;
const PRE_OP: u8 = 0x02;
const SAFE_OP: u8 = 0x04;
const OP: u8 = 0x08;
const ERROR_ACK: u8 = 0x10;

/// The logical address where ethercrab 0.7.1 starts the process image of rtcat's one group:
/// `MainDevice::init` lays the groups out from `PdiOffset::default()` (address 0), and
/// `init_single_group` makes one group (tests/pd_registers.rs relies on it too).
pub(crate) const ETHERCRAB_PDI_START: u32 = 0;

/// What one subdevice ran with once the bring-up reached OP.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    position: u16,
    address: u16,
    identity: (u32, u32, u32),
    /// Its station alias (0x0012, from SII word 4) as it was brought up.
    alias: u16,
    name: String,
    sm: [u8; SM_BYTES],
    fmmu: [u8; FMMU_BYTES],
    /// The DC registers of a DC subdevice whose SYNC is active.
    dc: Option<[u8; DC_BYTES]>,
    /// The `[[device]]` entry that configures it.
    device: Option<usize>,
    coe: bool,
    /// It has a distributed clock (the first one is the reference, as ethercrab chooses it).
    dc_capable: bool,
}

/// What rtcat's own bring-up computed for one subdevice ([`crate::own_bringup`]).
pub(crate) struct Computed<'a> {
    pub(crate) position: u16,
    pub(crate) address: u16,
    pub(crate) identity: (u32, u32, u32),
    pub(crate) alias: u16,
    pub(crate) name: String,
    pub(crate) registers: &'a crate::pd_registers::PdRegisters,
    pub(crate) device: Option<usize>,
    pub(crate) coe: bool,
    pub(crate) dc_capable: bool,
}

impl Snapshot {
    /// What a subdevice whose registers rtcat computed runs with (rtcat's own bring-up, a
    /// member absent at bring-up that joins): the registers written, no DC registers (a
    /// joining member adds its own).
    pub(crate) fn computed(c: Computed<'_>) -> Snapshot {
        let (sm, fmmu) = c.registers.areas();
        Snapshot {
            position: c.position,
            address: c.address,
            identity: c.identity,
            alias: c.alias,
            name: c.name,
            sm,
            fmmu,
            dc: None,
            device: c.device,
            coe: c.coe,
            dc_capable: c.dc_capable,
        }
    }

    /// With the DC registers it runs with (a subdevice with a distributed clock, read after
    /// OP), for rtcat's own bring-up with `[dc]`.
    pub(crate) fn with_running_dc(self, md: &MainDevice<'static>) -> Result<Snapshot> {
        let dc = if self.dc_capable {
            running_dc(md, self.address, self.position)?
        } else {
            None
        };
        Ok(Snapshot { dc, ..self })
    }
}

/// The DC registers of the subdevice at `address` (position `pos`) when its SYNC unit runs:
/// only such a one needs them set up again.
fn running_dc(md: &MainDevice<'static>, address: u16, pos: u16) -> Result<Option<[u8; DC_BYTES]>> {
    let r = block_on(Command::fprd(address, DC_BASE).receive_slice(md, DC_BYTES as u16))
        .map_err(|e| Error::bus(format!("position {pos}: snapshot of {DC_BASE:#06x}"), e))?;
    let mut regs = [0u8; DC_BYTES];
    regs.copy_from_slice(&r[..DC_BYTES]);
    Ok((regs[0x81] != 0).then_some(regs))
}

/// Read what every subdevice of `group` runs with (after OP).
pub(crate) fn snapshot<S: ethercrab::subdevice_group::HasPdi, DC>(
    md: &MainDevice<'static>,
    group: &ethercrab::SubDeviceGroup<
        { crate::limits::MAX_SUBDEVICES },
        { crate::limits::MAX_PDI_BYTES },
        ethercrab::DefaultLock,
        S,
        DC,
    >,
    layout: &Layout,
    chosen: &[Option<usize>],
    dc: bool,
    optional: (&crate::hotconnect::Membership, &crate::sii_cache::SiiCache),
) -> Result<Vec<Snapshot>> {
    let mut out = Vec::with_capacity(layout.subdevices.len());
    for (pos, (sd, s)) in group.iter(md).zip(&layout.subdevices).enumerate() {
        let address = sd.configured_address();
        let read = |reg: u16, buf: &mut [u8]| -> Result<()> {
            let r = block_on(Command::fprd(address, reg).receive_slice(md, buf.len() as u16))
                .map_err(|e| Error::bus(format!("position {pos}: snapshot of {reg:#06x}"), e))?;
            buf.copy_from_slice(&r[..buf.len()]);
            Ok(())
        };
        let mut sm = [0u8; SM_BYTES];
        let mut fmmu = [0u8; FMMU_BYTES];
        read(SM0, &mut sm)?;
        read(FMMU0, &mut fmmu)?;
        // A member of an optional group: rtcat's own registers (`pd_registers`, from its SII and
        // the layout), what a member absent at bring-up will be given, are checked against
        // what ethercrab wrote. A difference is logged and ethercrab's are kept: the check is
        // the field's evidence for the computation, never a reason to refuse a segment that
        // came up (tests/pd_registers.rs finds them equal on the simulated devices).
        if optional.0.optional(pos) {
            let position = pos as u16;
            let computed = crate::mapping::sii_of(md, &sd, position, optional.1).and_then(|sii| {
                let at = crate::pd_registers::Logical::in_group(
                    layout,
                    (position, group.len()),
                    ETHERCRAB_PDI_START,
                )
                .ok_or_else(|| Error::SegmentMismatch("not in the layout".into()))?;
                let bits = crate::pd_registers::sm_bits(layout, position);
                crate::pd_registers::compute(position, &sii, s.coe, &bits, at)
                    .map_err(|e| Error::SegmentMismatch(e.to_string()))
            });
            match computed.map(|r| r.differs_from(&sm, &fmmu)) {
                Ok(None) => {}
                Ok(Some(d)) => log::warn!(
                    "position {pos} (optional): rtcat's computed registers differ from \
                     ethercrab's, {d}: a member absent at bring-up would be configured wrong"
                ),
                Err(e) => log::warn!(
                    "position {pos} (optional): rtcat cannot compute its registers ({e}): a \
                     member absent at bring-up could not be configured"
                ),
            }
        }
        let dc = if dc && sd.dc_support().any() {
            running_dc(md, address, pos as u16)?
        } else {
            None
        };
        let id = sd.identity();
        out.push(Snapshot {
            position: pos as u16,
            address,
            identity: (id.vendor_id, id.product_id, id.revision),
            alias: sd.alias_address(),
            name: sd.name().to_string(),
            sm,
            fmmu,
            dc,
            device: chosen.get(pos).copied().flatten(),
            coe: s.coe,
            dc_capable: sd.dc_support().any(),
        });
    }
    Ok(out)
}

/// Phases of one subdevice on the [`Board`].
mod phase {
    /// In OP as far as the recovery is concerned.
    pub const IN_SERVICE: u8 = 0;
    /// Seen out of OP by the cycle; the worker takes it.
    pub const REQUESTED: u8 = 1;
    /// The worker is bringing it back.
    pub const RECOVERING: u8 = 2;
    /// The worker saw it in OP; the cycle confirms and puts it back in service.
    pub const BACK: u8 = 3;
    /// An attempt failed; retried after the backoff.
    pub const WAITING: u8 = 4;
    /// Another identity answers there: retried after the backoff, never driven.
    pub const REFUSED: u8 = 5;
    /// `subdevice_attempts` failures in a row: the segment is re-initialised.
    pub const GAVE_UP: u8 = 6;
    /// The acyclic service asked to park it; the cycle tells the application and parks it.
    pub const PARK_ASKED: u8 = 7;
    /// Out on purpose (a firmware update): data invalid, the worker leaves it alone.
    pub const PARKED: u8 = 8;
    /// A member of an optional `[[group]]` that does not answer: looked for again every
    /// `probe_interval_ms`, never escalated ([`crate::hotconnect`]).
    pub const ABSENT: u8 = 9;
}

/// Cause codes on the board (`cause` slot): kind in bits 16.., AL status code in 0..16.
const CAUSE_AL: u32 = 1 << 16;
const CAUSE_POWER: u32 = 2 << 16;
const CAUSE_LEFT: u32 = 3 << 16;
const CAUSE_FIRMWARE: u32 = 4 << 16;
const CAUSE_RECONNECTED: u32 = 5 << 16;
const CAUSE_JOINED: u32 = 6 << 16;

fn encode_cause(c: crate::application::SubdeviceCause) -> u32 {
    use crate::application::SubdeviceCause as C;
    match c {
        C::AlError(code) => CAUSE_AL | u32::from(code),
        C::PowerCycled => CAUSE_POWER,
        C::LeftOp => CAUSE_LEFT,
        C::FirmwareUpdate => CAUSE_FIRMWARE,
        C::Reconnected => CAUSE_RECONNECTED,
        C::Joined => CAUSE_JOINED,
    }
}

fn decode_cause(v: u32) -> crate::application::SubdeviceCause {
    use crate::application::SubdeviceCause as C;
    match v & !0xffff {
        CAUSE_AL => C::AlError(v as u16),
        CAUSE_POWER => C::PowerCycled,
        CAUSE_FIRMWARE => C::FirmwareUpdate,
        CAUSE_RECONNECTED => C::Reconnected,
        CAUSE_JOINED => C::Joined,
        _ => C::LeftOp,
    }
}

/// One subdevice's place on the board.
#[derive(Default)]
struct Slot {
    phase: AtomicU8,
    /// Failed attempts in a row of this outage.
    failures: AtomicU32,
    /// Attempts of this outage (failed and the last one).
    attempts: AtomicU32,
    cause: AtomicU32,
    /// The identity found by a refusal: vendor, product, revision packed.
    found: [AtomicU32; 3],
    /// A refusal for the station alias: 1 << 32 | found << 16 | expected (0: not the alias).
    found_alias: AtomicU64,
    /// Handed back after a firmware update: the next success has that cause and may find a
    /// new revision.
    updated: AtomicBool,
    /// The revision it is expected to have (the bring-up's, or what a firmware update left).
    revision: AtomicU32,
    /// A member of an optional group: how often it is looked for while absent, ms (0: not
    /// optional, its failures count towards escalation).
    probe_ms: u32,
    /// This outage, it was absent (not answering): it comes back `Reconnected`.
    was_absent: AtomicBool,
    /// The sync error counter limit (0x10F1:02) its last successful attempt read, + 1 (0:
    /// not read: no CoE, no such object).
    sync_error_limit: AtomicU64,
}

/// What the cyclic thread and the worker share: one slot per subdevice, allocated before the
/// cyclic phase. The cyclic thread writes REQUESTED, IN_SERVICE and PARKED (the acyclic service,
/// on the same thread, PARK_ASKED and the hand-back's REQUESTED), the worker every other phase,
/// each by compare-and-swap where both may move the same slot; the cycle looks at the slots
/// only while it has handed over a subdevice not yet back, or a park was asked.
pub struct Board {
    slots: Box<[Slot]>,
    quit: AtomicBool,
    /// Position + 1 of a subdevice whose recovery gave up (0: none).
    escalate: AtomicU32,
    /// Vendor and product of each position as brought up (the revision is in the slot).
    expected: Box<[(u32, u32)]>,
    /// A park was asked since the cycle last looked.
    park_news: AtomicBool,
    /// Devices on the segment the configuration does not place ([`crate::topology_watch`]):
    /// how many << 16 | the first one's position; `unexpected_news` when that changed since
    /// the cycle last looked.
    unexpected: AtomicU32,
    unexpected_news: AtomicBool,
}

/// Why [`Board::park`] or [`Board::hand_back`] refused.
pub(crate) type Refusal = &'static str;

impl Board {
    /// A board for the subdevices brought up (`snapshots`) and, after them, the members of
    /// optional groups absent at bring-up (`hot.absent`): those start absent, looked for at
    /// their group's rate.
    pub(crate) fn new(snapshots: &[Snapshot], hot: &crate::hotconnect::Membership) -> Board {
        let n = snapshots.len();
        let late = hot.absent.iter().enumerate().map(|(j, a)| Slot {
            phase: AtomicU8::new(phase::ABSENT),
            revision: AtomicU32::new(a.expected.identity.2),
            probe_ms: hot.probe_ms.get(n + j).copied().unwrap_or(0),
            was_absent: AtomicBool::new(true),
            ..Slot::default()
        });
        Board {
            slots: snapshots
                .iter()
                .enumerate()
                .map(|(i, s)| Slot {
                    revision: AtomicU32::new(s.identity.2),
                    probe_ms: hot.probe_ms.get(i).copied().unwrap_or(0),
                    ..Slot::default()
                })
                .chain(late)
                .collect(),
            quit: AtomicBool::new(false),
            escalate: AtomicU32::new(0),
            expected: snapshots
                .iter()
                .map(|s| (s.identity.0, s.identity.1))
                .chain(
                    hot.absent
                        .iter()
                        .map(|a| (a.expected.identity.0, a.expected.identity.1)),
                )
                .collect(),
            park_news: AtomicBool::new(false),
            unexpected: AtomicU32::new(0),
            unexpected_news: AtomicBool::new(false),
        }
    }

    /// How many subdevices answer as far as the board knows: those in service and those
    /// parked (members of optional groups known absent do not). `None` while any other is
    /// being recovered, joined, retried or refused: then nothing can be judged by a count.
    fn settled(&self) -> Option<usize> {
        let mut answering = 0;
        for s in self.slots.iter() {
            match s.phase.load(Ordering::Acquire) {
                phase::IN_SERVICE | phase::PARK_ASKED | phase::PARKED => answering += 1,
                phase::ABSENT => {}
                _ => return None,
            }
        }
        Some(answering)
    }

    /// The worker found `devices` on the segment that the configuration does not place, from
    /// position `first` (0 devices: none any more).
    fn set_unexpected(&self, devices: u16, first: u16) {
        self.unexpected.store(
            u32::from(devices) << 16 | u32::from(first),
            Ordering::Relaxed,
        );
        self.unexpected_news.store(true, Ordering::Release);
    }

    /// What changed in the devices the configuration does not place since the last call: (how
    /// many, the first one's position). The cycle, once per cycle: one atomic.
    #[inline]
    pub(crate) fn unexpected_news(&self) -> Option<(u16, u16)> {
        if !(self.unexpected_news.load(Ordering::Relaxed)
            && self.unexpected_news.swap(false, Ordering::AcqRel))
        {
            return None;
        }
        let v = self.unexpected.load(Ordering::Relaxed);
        Some(((v >> 16) as u16, v as u16))
    }

    /// The identity `position` is expected to have now.
    fn expected(&self, position: usize) -> (u32, u32, u32) {
        let (v, p) = self.expected[position];
        (v, p, self.slots[position].revision.load(Ordering::Relaxed))
    }

    /// Write the revisions firmware updates brought into `topology` (identities by position),
    /// where vendor and product are the same.
    pub(crate) fn updated_revisions(&self, topology: &mut [(u32, u32, u32)]) {
        for (i, t) in topology.iter_mut().enumerate().take(self.slots.len()) {
            let (v, p, r) = self.expected(i);
            if (t.0, t.1) == (v, p) {
                t.2 = r;
            }
        }
    }

    /// The positions on the board: the subdevices brought up and the members absent at
    /// bring-up after them.
    pub(crate) fn positions(&self) -> usize {
        self.slots.len()
    }

    /// Why the acyclic service may not use `position`'s mailbox now, if it may not: the worker
    /// has it (its recovery or its join sets the mailbox up and talks to it with a counter of
    /// its own) or it is absent. In service or parked (a firmware update's own mailbox) it may.
    pub(crate) fn mailbox_refusal(&self, position: usize) -> Option<Refusal> {
        match self.slots.get(position)?.phase.load(Ordering::Acquire) {
            phase::IN_SERVICE | phase::PARK_ASKED | phase::PARKED => None,
            phase::ABSENT => Some("it is a member of an optional group and not there (absent)"),
            _ => Some("its recovery has it: ask again once it is back in OP"),
        }
    }

    /// Take `position` out of its recovery's hands for a firmware update (the acyclic service,
    /// on the cyclic thread): in service, or out and being retried (waiting, refused), it is
    /// parked by the next cycle. Already parked: nothing to do (an update starting over).
    pub(crate) fn park(&self, position: usize) -> std::result::Result<(), Refusal> {
        let s = self.slots.get(position).ok_or("no such position")?;
        loop {
            let now = s.phase.load(Ordering::Acquire);
            match now {
                phase::PARK_ASKED | phase::PARKED => return Ok(()),
                phase::IN_SERVICE | phase::WAITING | phase::REFUSED => {}
                phase::GAVE_UP => {
                    return Err("its recovery gave up: the segment is being re-initialised");
                }
                _ => {
                    return Err(
                        "its recovery is bringing it back right now: ask again once it \
                                is back in OP",
                    );
                }
            }
            if s.phase
                .compare_exchange(now, phase::PARK_ASKED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                s.updated.store(false, Ordering::Relaxed);
                self.park_news.store(true, Ordering::Release);
                return Ok(());
            }
        }
    }

    /// Whether a park was asked since the last call (the cycle, once per cycle: one atomic).
    #[inline]
    pub(crate) fn park_news(&self) -> bool {
        self.park_news.load(Ordering::Relaxed) && self.park_news.swap(false, Ordering::AcqRel)
    }

    /// The cycle parks `position` if it was asked to: true when it did.
    #[inline]
    pub(crate) fn take_park(&self, position: usize) -> bool {
        self.slots.get(position).is_some_and(|s| {
            s.phase
                .compare_exchange(
                    phase::PARK_ASKED,
                    phase::PARKED,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        })
    }

    /// Whether `position` is parked (or about to be).
    #[inline]
    pub(crate) fn parked(&self, position: usize) -> bool {
        matches!(self.phase(position), phase::PARK_ASKED | phase::PARKED)
    }

    /// Give a parked `position` back to the worker after a firmware update: it brings it to
    /// OP as if the cycle had seen it out, with that cause.
    pub(crate) fn hand_back(&self, position: usize) -> std::result::Result<(), Refusal> {
        let s = self.slots.get(position).ok_or("no such position")?;
        s.updated.store(true, Ordering::Relaxed);
        s.phase
            .compare_exchange(
                phase::PARKED,
                phase::REQUESTED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .map(drop)
            .map_err(|_| {
                s.updated.store(false, Ordering::Relaxed);
                "it is not parked"
            })
    }

    /// The position whose recovery gave up, if one did.
    #[inline]
    pub(crate) fn escalated(&self) -> Option<u16> {
        match self.escalate.load(Ordering::Acquire) {
            0 => None,
            p => Some((p - 1) as u16),
        }
    }

    /// The cycle saw the subdevice at `position` out of OP while in service: hand it to the
    /// worker. False when it is not in service (already being recovered).
    #[inline]
    pub(crate) fn request(&self, position: usize) -> bool {
        self.slots.get(position).is_some_and(|s| {
            s.phase
                .compare_exchange(
                    phase::IN_SERVICE,
                    phase::REQUESTED,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        })
    }

    /// The phase of `position` (see [`phase`]).
    #[inline]
    pub(crate) fn phase(&self, position: usize) -> u8 {
        self.slots
            .get(position)
            .map_or(phase::IN_SERVICE, |s| s.phase.load(Ordering::Acquire))
    }

    /// What the worker last reported for `position`, as the application is told it (None: a
    /// phase the cycle does not report: in service, requested, recovering).
    pub(crate) fn report(&self, position: usize) -> Option<Report> {
        let s = self.slots.get(position)?;
        Some(match s.phase.load(Ordering::Acquire) {
            phase::BACK => Report::Back {
                cause: decode_cause(s.cause.load(Ordering::Relaxed)),
                attempts: s.attempts.load(Ordering::Relaxed),
                sync_error_limit: match s.sync_error_limit.load(Ordering::Relaxed) {
                    0 => None,
                    v => Some((v - 1) as u32),
                },
            },
            phase::WAITING => Report::Failed {
                failures: s.failures.load(Ordering::Relaxed),
            },
            phase::REFUSED => Report::Refused {
                found: (
                    s.found[0].load(Ordering::Relaxed),
                    s.found[1].load(Ordering::Relaxed),
                    s.found[2].load(Ordering::Relaxed),
                ),
                expected: self.expected(position),
                alias: match s.found_alias.load(Ordering::Relaxed) {
                    0 => None,
                    v => Some(((v >> 16) as u16, v as u16)),
                },
            },
            phase::GAVE_UP => Report::GaveUp,
            phase::ABSENT => Report::Absent,
            _ => return None,
        })
    }

    /// Whether `position` is a member of an optional group out of service and not yet seen
    /// back by its recovery: its data is not valid even if it answers in OP (plugged back with
    /// its state kept, before its recovery has taken it through INIT again).
    #[inline]
    pub(crate) fn held_out(&self, position: usize) -> bool {
        self.slots.get(position).is_some_and(|s| {
            s.probe_ms > 0
                && !matches!(
                    s.phase.load(Ordering::Acquire),
                    phase::IN_SERVICE | phase::BACK
                )
        })
    }

    /// The cycle saw `position` back in OP: in service again.
    #[inline]
    pub(crate) fn back_in_service(&self, position: usize) {
        if let Some(s) = self.slots.get(position) {
            s.phase.store(phase::IN_SERVICE, Ordering::Release);
        }
    }

    /// The cyclic phase ends: the worker stops at its next step.
    pub(crate) fn quit(&self) {
        self.quit.store(true, Ordering::Release);
    }

    fn set(&self, position: usize, phase: u8) {
        self.slots[position].phase.store(phase, Ordering::Release);
    }
}

/// What the worker reported for one subdevice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Report {
    Back {
        cause: crate::application::SubdeviceCause,
        attempts: u32,
        sync_error_limit: Option<u32>,
    },
    Failed {
        failures: u32,
    },
    Refused {
        found: (u32, u32, u32),
        expected: (u32, u32, u32),
        alias: Option<(u16, u16)>,
    },
    GaveUp,
    /// A member of an optional group that does not answer (unplugged, powered off).
    Absent,
}

/// Why one attempt did not bring the subdevice back.
#[derive(Debug)]
enum Failure {
    /// Another identity answers at its position.
    /// Another identity (vendor, product, revision), or the same with another station alias
    /// (found, expected).
    Refused((u32, u32, u32), Option<(u16, u16)>),
    /// Anything else (retried).
    Failed(Error),
    /// What only the whole segment's re-initialisation can repair (no retry).
    Segment(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Failed(e)
    }
}

/// The worker's view of the segment.
pub(crate) struct Worker<'a> {
    pub(crate) md: &'a MainDevice<'static>,
    pub(crate) cfg: &'a Config,
    pub(crate) snapshots: &'a [Snapshot],
    pub(crate) board: &'a Board,
    /// The members of optional groups absent at bring-up, after the snapshots' positions:
    /// where their data is ([`crate::region`]), who they must be, and the layout their
    /// registers are computed from.
    pub(crate) late: Late<'a>,
    /// The 0x092C sampler's list, which a member joining with DC is added to.
    pub(crate) dc: &'a crate::stats::DcLive,
    /// rtcat's own frames on the bus: where a device is, several registers in one frame.
    pub(crate) own: crate::own_frames::OwnBus<'a>,
}

/// What the worker needs to configure a member ethercrab never saw.
#[derive(Clone, Copy)]
pub(crate) struct Late<'a> {
    pub(crate) members: &'a [crate::region::Member],
    pub(crate) layout: &'a Layout,
    /// The layout's positions in the order a frame meets them with every device present
    /// ([`crate::branch::order`]; the layout's own order without groups on a junction's port).
    pub(crate) order: &'a [usize],
}

/// What an attempt checks the identity found against.
enum Expect<'a> {
    /// The identity the segment was brought up with (`updated`: after a firmware update, any
    /// revision of the same vendor and product).
    BroughtUp { updated: bool },
    /// A member absent at bring-up, its matcher checked by [`join`]: its mapping must be the
    /// layout's (read with its SII `sii` after its `[[device]]` configuration).
    Member { sii: &'a crate::sii::Sii },
}

/// How often the worker looks at the board when there is nothing to do.
const IDLE_POLL: Duration = Duration::from_millis(1);

/// Serve the board until [`Board::quit`]: bring back every subdevice the cycle hands over,
/// one at a time in position order, retrying failures after `[health] recovery_backoff_ms`.
pub(crate) fn worker(w: Worker<'_>) {
    let n = w.board.slots.len();
    let present = w.snapshots.len();
    // The registers of each member absent at bring-up, computed when it first appears (again
    // when another identity its matcher accepts appears), and its SII.
    let mut joined: Vec<Option<(Snapshot, crate::sii::Sii)>> = vec![None; w.late.members.len()];
    let sii_cache = crate::sii_cache::SiiCache::default();
    // Every subdevice's station address in the order a frame meets them (what positions are
    // checked against): the bring-up's, the members of groups on a junction's port at their
    // port, the other members absent at bring-up at the line's end.
    let address = |i: usize| match i.checked_sub(present) {
        None => w.snapshots[i].address,
        Some(j) => w.late.members[j].address,
    };
    let wire = if w.late.order.len() == n {
        crate::place::Order::new(w.late.order, address)
    } else {
        crate::place::Order::new(&(0..n).collect::<Vec<_>>(), address)
    };
    let order = wire.addresses.as_slice();
    // Which subdevices answer as far as the board knows: all but the members known absent.
    let answers = |k: usize| w.board.phase(k) != phase::ABSENT;
    // What the last probe of each showed that a technician should see (logged when it changes).
    let mut seen: Vec<Option<String>> = vec![None; n];
    let mut next_try = vec![Instant::now(); n];
    // Each optional member's probe interval now: its group's, stretched while a device that
    // is not it stands where it is expected (`crate::hotconnect::interval_after`).
    let mut interval: Vec<Duration> = (w.board.slots.iter())
        .map(|s| Duration::from_millis(s.probe_ms.into()))
        .collect();
    let mut watch = crate::topology_watch::Watch::new();
    let backoff = Duration::from_millis(w.cfg.health.recovery_backoff_ms.into());
    while !w.board.quit.load(Ordering::Acquire) {
        let now = Instant::now();
        let due = (0..n).find(|&i| match w.board.phase(i) {
            phase::REQUESTED => true,
            phase::WAITING | phase::REFUSED | phase::ABSENT => now >= next_try[i],
            _ => false,
        });
        let Some(i) = due else {
            watch.step(w.own, w.board.settled(), order, |n, first| {
                w.board.set_unexpected(n, first);
            });
            std::thread::sleep(IDLE_POLL);
            continue;
        };
        let slot = &w.board.slots[i];
        let was = w.board.phase(i);
        // A park (the acyclic service) may take a waiting or refused one meanwhile.
        if !matches!(
            was,
            phase::REQUESTED | phase::WAITING | phase::REFUSED | phase::ABSENT
        ) || slot
            .phase
            .compare_exchange(was, phase::RECOVERING, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        if was == phase::REQUESTED {
            slot.failures.store(0, Ordering::Relaxed);
            slot.attempts.store(0, Ordering::Relaxed);
            slot.was_absent.store(false, Ordering::Relaxed);
        }
        // Hot-connect: a member of an optional group that does not answer is away, not failing:
        // looked for again at its group's rate (one frame), never escalated.
        let optional = slot.probe_ms > 0;
        // Where it is on the wire now: the subdevices before it in the order that answer (it
        // counts itself as answering).
        let at = (wire.target(i), wire.position(i, answers));
        let around = wire.around(i, answers);
        let group_rate = Duration::from_millis(slot.probe_ms.into());
        let mut probe = || match crate::hotconnect::present(w.own, order, at, around) {
            Ok(()) => {
                interval[i] = group_rate;
                true
            }
            Err(note) => {
                let same = note == seen[i];
                if note.is_some() && !same {
                    log::warn!("position {i}: not found: {}", note.as_deref().unwrap_or(""));
                }
                interval[i] = crate::hotconnect::interval_after(
                    group_rate,
                    interval[i],
                    note.is_some(),
                    same,
                );
                seen[i] = note;
                false
            }
        };
        if optional && !probe() {
            if was != phase::ABSENT {
                log::info!(
                    "position {i}: optional, not answering: looked for every {} ms",
                    slot.probe_ms
                );
            }
            slot.was_absent.store(true, Ordering::Relaxed);
            next_try[i] = Instant::now() + interval[i];
            w.board.set(i, phase::ABSENT);
            continue;
        }
        slot.attempts.fetch_add(1, Ordering::Relaxed);
        let updated = slot.updated.load(Ordering::Relaxed);
        let attempt = match i.checked_sub(present) {
            None => recover_one(
                &w,
                (order, at),
                &w.snapshots[i],
                Expect::BroughtUp { updated },
            ),
            Some(j) => join(&w, (order, at), j, &mut joined[j], &sii_cache),
        };
        match attempt {
            Ok(cause) => {
                let cause = if updated {
                    slot.updated.store(false, Ordering::Relaxed);
                    crate::application::SubdeviceCause::FirmwareUpdate
                } else if cause == crate::application::SubdeviceCause::Joined {
                    cause
                } else if slot.was_absent.load(Ordering::Relaxed) {
                    crate::application::SubdeviceCause::Reconnected
                } else {
                    cause
                };
                slot.cause.store(encode_cause(cause), Ordering::Relaxed);
                w.board.set(i, phase::BACK);
            }
            Err(Failure::Refused(found, alias)) => {
                for (a, v) in slot.found.iter().zip([found.0, found.1, found.2]) {
                    a.store(v, Ordering::Relaxed);
                }
                slot.found_alias.store(
                    alias.map_or(0, |(f, e)| 1 << 32 | u64::from(f) << 16 | u64::from(e)),
                    Ordering::Relaxed,
                );
                match alias {
                    Some((f, e)) => log::warn!(
                        "position {i}: station alias {f:#06x} is not the {e:#06x} it was brought \
                         up with (identity {found:#x?} the same): another unit, refused"
                    ),
                    None => log::warn!(
                        "position {i}: identity {found:#x?} is not the configured {:#x?}: refused",
                        w.board.expected(i)
                    ),
                }
                next_try[i] = Instant::now() + backoff.max(IDLE_POLL * 100);
                w.board.set(i, phase::REFUSED);
            }
            Err(Failure::Segment(e)) => {
                log::warn!("position {i}: {e}");
                slot.failures.fetch_add(1, Ordering::Relaxed);
                w.board.escalate.store(i as u32 + 1, Ordering::Release);
                w.board.set(i, phase::GAVE_UP);
            }
            Err(Failure::Failed(e)) => {
                let failures = slot.failures.fetch_add(1, Ordering::Relaxed) + 1;
                log::warn!("position {i}: recovery attempt {failures} failed: {e}");
                if optional {
                    // Gone again half-way, or failing while present: never the segment's.
                    // The next look comes at the probe's rate if it is away, after the
                    // backoff if it answers.
                    let away = !probe();
                    next_try[i] = Instant::now()
                        + if away {
                            Duration::from_millis(slot.probe_ms.into())
                        } else {
                            backoff
                        };
                    w.board
                        .set(i, if away { phase::ABSENT } else { phase::WAITING });
                } else if failures >= w.cfg.health.subdevice_attempts {
                    w.board.escalate.store(i as u32 + 1, Ordering::Release);
                    w.board.set(i, phase::GAVE_UP);
                } else {
                    next_try[i] = Instant::now() + backoff;
                    w.board.set(i, phase::WAITING);
                }
            }
        }
    }
}

/// The station-addressed register access of one attempt, with `who` in its errors.
struct Station<'a> {
    md: &'a MainDevice<'static>,
    address: u16,
    position: u16,
    quit: &'a AtomicBool,
}

impl Station<'_> {
    fn read(&self, reg: u16, buf: &mut [u8]) -> Result<()> {
        let r = block_on(Command::fprd(self.address, reg).receive_slice(self.md, buf.len() as u16))
            .map_err(|e| Error::bus(format!("position {}: read {reg:#06x}", self.position), e))?;
        buf.copy_from_slice(&r[..buf.len()]);
        Ok(())
    }

    fn write(&self, reg: u16, data: &[u8]) -> Result<()> {
        block_on(Command::fpwr(self.address, reg).send(self.md, data))
            .map_err(|e| Error::bus(format!("position {}: write {reg:#06x}", self.position), e))
    }

    fn al_status(&self) -> Result<(u8, u16)> {
        let mut b = [0u8; 6];
        self.read(AL_STATUS, &mut b)?;
        Ok((b[0], u16::from_le_bytes([b[4], b[5]])))
    }

    /// Request `state` and wait for it (bounded by `[bus] state_timeout_ms`); an AL error on
    /// the way fails with its code.
    fn to_state(&self, state: u8, ack: bool, timeout: Duration) -> Result<()> {
        self.write(AL_CONTROL, &[state | if ack { ERROR_ACK } else { 0 }, 0])?;
        let start = Instant::now();
        loop {
            let (s, code) = self.al_status()?;
            if s & 0x0f == state && s & ERROR_ACK == 0 {
                return Ok(());
            }
            if s & ERROR_ACK != 0 && !ack {
                return Err(Error::SegmentMismatch(format!(
                    "position {}: AL error {code:#06x} ({}) on the way to state {state:#x}",
                    self.position,
                    crate::diag::al_status_text(code)
                )));
            }
            if start.elapsed() > timeout || self.quit.load(Ordering::Acquire) {
                return Err(Error::SegmentMismatch(format!(
                    "position {}: state {state:#x} not reached within {} ms (bus.state_timeout_ms): \
                     AL status {s:#04x}, code {code:#06x}",
                    self.position,
                    timeout.as_millis()
                )));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Write the sync managers (`mailbox` true: those in mailbox mode, else the others) that
    /// the snapshot holds enabled (length > 0).
    fn write_sms(&self, snap: &Snapshot, mailbox: bool) -> Result<()> {
        for sm in snap.sm.chunks_exact(8).enumerate() {
            let (n, r) = sm;
            let len = u16::from_le_bytes([r[2], r[3]]);
            let is_mailbox = r[4] & 0x03 == 0x02;
            if len == 0 || is_mailbox != mailbox {
                continue;
            }
            // Start, length, control, (status: read only), activation.
            self.write(SM0 + 8 * n as u16, &r[..7])?;
        }
        Ok(())
    }

    fn write_fmmus(&self, snap: &Snapshot) -> Result<()> {
        for (n, r) in snap.fmmu.chunks_exact(16).enumerate() {
            if r[12] & 0x01 != 0 {
                self.write(FMMU0 + 16 * n as u16, r)?;
            }
        }
        Ok(())
    }
}

/// Whether the identity `found` in the SII may be driven where `expected` was: the same, or
/// after a firmware update (`updated`) the same vendor and product with any revision.
pub(crate) fn identity_accepted(
    expected: (u32, u32, u32),
    found: (u32, u32, u32),
    updated: bool,
) -> bool {
    found == expected || updated && (found.0, found.1) == (expected.0, expected.1)
}

/// One attempt to bring `snap`'s subdevice back to OP (`updated`: after a firmware update);
/// its cause on success.
///
/// `(order, (target, wire))`: every subdevice's station address in processing order, this
/// one's index in it and its position on the wire as far as the worker knows (checked by
/// [`give_address`], which finds where it is).
fn recover_one(
    w: &Worker<'_>,
    (order, at): (&[u16], (usize, u16)),
    snap: &Snapshot,
    expect: Expect<'_>,
) -> std::result::Result<crate::application::SubdeviceCause, Failure> {
    use crate::application::SubdeviceCause;
    let md = w.md;
    let pos = snap.position;
    let st = Station {
        md,
        address: snap.address,
        position: pos,
        quit: &w.board.quit,
    };
    let timeout = Duration::from_millis(w.cfg.bus.state_timeout_ms.into());
    // 1. Its station address: lost with a power cycle (FPRD no longer answered, or another
    //    address there); given again by position (APWR).
    let (has_address, wire) = give_address(&st, order, at, w.own)?;
    // 2. The identity it had at the bring-up, from its SII: never drive another device (a
    //    member absent at bring-up: its matcher, checked by `join`).
    if let Expect::BroughtUp { updated } = expect {
        let found = read_identity(w, wire)?;
        let slot = &w.board.slots[usize::from(pos)];
        let expected = w.board.expected(usize::from(pos));
        if !identity_accepted(expected, found, updated) {
            // Leave it in INIT: nothing is mapped to it.
            let _ = st.write(AL_CONTROL, &[INIT | ERROR_ACK, 0]);
            return Err(Failure::Refused(found, None));
        }
        // The same identity with another station alias is another unit: the alias is what
        // tells identical units apart (a configuration may select by it), so a unit swapped in
        // with another one is not driven in this one's place.
        let mut a = [0u8; 2];
        st.read(STATION_ALIAS, &mut a)?;
        let alias = u16::from_le_bytes(a);
        if alias != snap.alias {
            let _ = st.write(AL_CONTROL, &[INIT | ERROR_ACK, 0]);
            return Err(Failure::Refused(found, Some((alias, snap.alias))));
        }
        if found.2 != expected.2 {
            log::info!(
                "position {pos}: revision {:#010x} after the firmware update (was {:#010x}): \
                 expected from now on",
                found.2,
                expected.2
            );
            slot.revision.store(found.2, Ordering::Relaxed);
        }
    }
    // 3. Why it left, then INIT with the error acknowledged.
    let (state, code) = st.al_status()?;
    let cause = if !has_address {
        SubdeviceCause::PowerCycled
    } else if state & ERROR_ACK != 0 {
        SubdeviceCause::AlError(code)
    } else {
        SubdeviceCause::LeftOp
    };
    st.to_state(INIT, true, timeout)?;
    // 4. Mailbox, PRE-OP, the `[[device]]` configuration.
    st.write_sms(snap, true)?;
    st.to_state(PRE_OP, false, timeout)?;
    let configured = snap.device.map(|i| {
        let d = &w.cfg.device[i];
        (d, devices::who(pos, &snap.name, i, d))
    });
    // One CoE transport for all of this device's transfers below (its counter runs on).
    let mut sdo = crate::coe::OnDemand::new(md, pos, snap.address, crate::coe::Timeouts::default());
    if let Some((d, who)) = &configured {
        devices::apply_pre_op(&mut sdo, who, d, snap.coe)
            .map_err(|e| Error::Device(Box::new(e)))?;
    }
    if let Expect::Member { sii } = expect {
        // Its data goes where the layout put it: the mapping it now runs with must be the one
        // the layout was built from (a device may ignore a write without aborting it).
        same_mapping(&mut sdo, w.late.layout, snap, sii)?;
    }
    // What it tolerates of missed frames, for an axis on it: read at every attempt, as a
    // drive that joins (absent at the axes' setup) or was replaced may say otherwise.
    let limit = if snap.coe {
        sync_error_limit(&mut sdo)
    } else {
        None
    };
    w.board.slots[usize::from(pos)]
        .sync_error_limit
        .store(limit.map_or(0, |l| u64::from(l) + 1), Ordering::Relaxed);
    let reference = w.snapshots.iter().find(|s| s.dc_capable).map(|s| s.address);
    if w.cfg.dc.enabled && !has_address && reference == Some(snap.address) {
        // The reference clock restarted: every other clock follows its system time through
        // each cycle's FRMW, so the grid itself jumped. Only the segment's DC initialisation
        // (offsets, delays, static sync) sets the clocks up again.
        return Err(Failure::Segment(Error::SegmentMismatch(format!(
            "position {pos}: the DC reference clock was power-cycled; the segment's clocks are \
             initialised again"
        ))));
    }
    if let Some(regs) = &snap.dc {
        dc_sync_mode(w, snap, &mut sdo)?;
        // A member absent at bring-up: its clock was never set (its offset is computed as
        // after a power cycle, which it may well have been).
        let new_clock = !has_address || matches!(expect, Expect::Member { .. });
        restore_dc(&st, regs, new_clock, reference)?;
    }
    // 5. Process data as the bring-up mapped it, SAFE-OP, SAFE-OP startup SDOs, OP.
    st.write_sms(snap, false)?;
    st.write_fmmus(snap)?;
    st.to_state(SAFE_OP, false, timeout)?;
    if let Some((d, who)) = &configured {
        devices::write_startup(&mut sdo, who, d, devices::Transition::SO)
            .map_err(|e| Error::Device(Box::new(e)))?;
    }
    st.to_state(OP, false, timeout)?;
    Ok(cause)
}

/// The sync error counter limit 0x10F1:02 (ETG.1020 "Error Settings") of a CoE device. `None`
/// when it has no such object (an abort) or the answer is not a 1..=4 byte value: the axes on
/// it keep the bound they have.
fn sync_error_limit(sdo: &mut crate::coe::OnDemand<'_>) -> Option<u32> {
    let (index, sub) = crate::cia402::SYNC_ERROR_LIMIT;
    let v = sdo.client().ok()?.upload(index, sub).ok()?;
    // UNSIGNED16 (the Slave Stack Code) or UNSIGNED32 (ETG.1020): little-endian either way.
    (1..=4).contains(&v.len()).then(|| {
        let mut b = [0u8; 4];
        b[..v.len()].copy_from_slice(&v);
        u32::from_le_bytes(b)
    })
}

/// Give the subdevice its station address by position (APWR) unless it answers at it already;
/// whether it had it, and its position on the wire. `order`: every subdevice's station
/// address in processing order, `(target, position)` its index there and where it is thought
/// to be. Only where [`crate::place::locate`] says the device at a position is it: never over
/// another subdevice's address, never to a device whose place cannot be told (a device missing
/// before it, or one plugged in elsewhere than configured, moves the positions; the
/// neighbours say where it is then).
fn give_address(
    st: &Station<'_>,
    order: &[u16],
    (target, position): (usize, u16),
    own: crate::own_frames::OwnBus<'_>,
) -> Result<(bool, u16)> {
    let (md, pos) = (st.md, st.position);
    let seen = crate::place::look(own, st.address, position)
        .map_err(|e| e.into_error(format!("position {pos}: its station address")))?;
    if seen.at_address {
        // Where it is on the wire: the neighbours tell when the guess was wrong.
        let at = match seen.there {
            Some(a) if a == st.address => position,
            _ => match crate::place::place(&crate::place::sweep(own, order.len()), order, target) {
                crate::place::Place::At(at) => at,
                _ => position,
            },
        };
        return Ok((true, at));
    }
    let probe = seen.there.ok_or_else(|| {
        Error::bus(
            format!("position {pos}: no answer by position {position}"),
            ethercrab::error::Error::WorkingCounter {
                expected: 1,
                received: 0,
            },
        )
    })?;
    let moved = |why: String| {
        Error::SegmentMismatch(format!(
            "position {pos}: not given station address {:#06x}: {why}",
            st.address
        ))
    };
    let at = match crate::place::locate(own, order, target, (position, probe)) {
        crate::place::Place::At(at) => at,
        crate::place::Place::Absent(strays) => {
            return Err(moved(format!(
                "not on the segment{}",
                strays.map_or(String::new(), |s| format!(" ({})", s.text))
            )));
        }
        crate::place::Place::Unclear(why) => return Err(moved(why)),
    };
    if at == position {
        log::info!(
            "position {pos}: station address {probe:#06x} at position {at} on the wire, giving \
             it {:#06x}",
            st.address
        );
    } else {
        log::info!(
            "position {pos}: at position {at} on the wire (its neighbours say; {position} was \
             thought), giving it station address {:#06x}",
            st.address
        );
    }
    block_on(Command::apwr(at, STATION_ADDRESS).send(md, st.address))
        .map_err(|e| Error::bus(format!("position {pos}: station address"), e))?;
    Ok((false, at))
}

/// Vendor, product and revision from the SII of the subdevice at `pos` (ETG.2010 words 0x08..).
fn read_identity(w: &Worker<'_>, pos: u16) -> Result<(u32, u32, u32)> {
    let probe =
        crate::diag::Probe::new(w.md, w.cfg).map_err(|e| Error::SegmentMismatch(e.to_string()))?;
    probe
        .read_identity(pos)
        .map_err(|e| Error::SegmentMismatch(e.to_string()))
}

/// ESC register of the station alias (ETG.1000.4 §6.1.2, loaded from SII word 4).
const STATION_ALIAS: u16 = 0x0012;

/// One attempt to bring member `j` of the optional groups absent at bring-up into OP: its
/// station address, the matcher of its member (alias, identity) checked — another device is
/// refused and never driven —, its SMs and FMMUs computed from its SII and the layout at its
/// place in rtcat's region ([`crate::pd_registers`], [`crate::region`]), then the same steps
/// as every recovery, with its mapping checked against the layout.
fn join(
    w: &Worker<'_>,
    (order, (target, guess)): (&[u16], (usize, u16)),
    j: usize,
    joined: &mut Option<(Snapshot, crate::sii::Sii)>,
    cache: &crate::sii_cache::SiiCache,
) -> std::result::Result<crate::application::SubdeviceCause, Failure> {
    let m = &w.late.members[j];
    let pos = m.index as u16;
    let st = Station {
        md: w.md,
        address: m.address,
        position: pos,
        quit: &w.board.quit,
    };
    let (_, wire) = give_address(&st, order, (target, guess), w.own)?;
    let identity = read_identity(w, wire)?;
    let mut a = [0u8; 2];
    st.read(STATION_ALIAS, &mut a)?;
    let found = devices::Found {
        position: pos,
        alias: u16::from_le_bytes(a),
        identity,
    };
    let (gi, mi) = m.member;
    let matcher = &w.cfg.group[gi].members[mi];
    if !matcher.matches(&found) {
        let _ = st.write(AL_CONTROL, &[INIT | ERROR_ACK, 0]);
        log::warn!(
            "position {pos}: alias {:#06x}, identity {identity:#x?} is not group[{gi}].members[{mi}] \
             ({}): refused (members absent at bring-up are expected in members order)",
            found.alias,
            matcher.matcher()
        );
        return Err(Failure::Refused(identity, None));
    }
    let first = joined.as_ref().is_none_or(|(s, _)| s.identity != identity);
    if first {
        *joined = Some(member_snapshot(
            w,
            m,
            (identity, found.alias),
            (order, wire),
            cache,
        )?);
    }
    let Some((snap, sii)) = joined.as_ref() else {
        return Err(Failure::Failed(Error::SegmentMismatch(format!(
            "position {pos}: no registers (internal)"
        ))));
    };
    let cause = recover_one(w, (order, (target, wire)), snap, Expect::Member { sii })?;
    if snap.dc.is_some() {
        w.dc.add(pos);
    }
    Ok(if first {
        crate::application::SubdeviceCause::Joined
    } else {
        cause
    })
}

/// What a member absent at bring-up runs with, as a [`Snapshot`] of what ethercrab would have
/// written: its SMs and FMMUs from its SII and the layout at its place in the region, and with
/// `[dc]` its DC registers ([`member_dc`]).
fn member_snapshot(
    w: &Worker<'_>,
    m: &crate::region::Member,
    (identity, alias): ((u32, u32, u32), u16),
    (order, wire): (&[u16], u16),
    cache: &crate::sii_cache::SiiCache,
) -> Result<(Snapshot, crate::sii::Sii)> {
    let pos = m.index as u16;
    let layout = w.late.layout;
    let s = layout
        .subdevices
        .get(m.index)
        .ok_or_else(|| Error::SegmentMismatch(format!("position {pos}: not in the layout")))?;
    let sii = crate::mapping::sii_at(
        w.md,
        (m.address, &s.name),
        pos,
        (identity, crate::mapping::Categories::Unseen),
        cache,
    )?;
    let coe = crate::mapping::has_coe(&sii);
    if coe != s.coe {
        return Err(Error::SegmentMismatch(format!(
            "position {pos}: the device {} CoE, but its [[device]] entry's pdo_assign {}",
            if coe { "speaks" } else { "does not speak" },
            if s.coe {
                "names sm2/sm3 (a CoE assignment)"
            } else {
                "names sm0/sm1 (the SII's)"
            }
        )));
    }
    let bits = crate::pd_registers::sm_bits(layout, pos);
    let regs = crate::pd_registers::compute(pos, &sii, coe, &bits, m.at())
        .map_err(|e| Error::SegmentMismatch(e.to_string()))?;
    let dc_capable = has_dc(w.md, m.address, pos)?;
    let dc = if w.cfg.dc.enabled && dc_capable && w.cfg.dc.assign_activate(pos) != 0 {
        Some(member_dc(w, m, (order, wire))?)
    } else {
        None
    };
    let computed = Snapshot::computed(Computed {
        position: pos,
        address: m.address,
        identity,
        alias,
        name: s.name.clone(),
        registers: &regs,
        device: m.device,
        coe,
        dc_capable,
    });
    Ok((Snapshot { dc, ..computed }, sii))
}

/// Whether the ESC at `address` has distributed clocks (0x0008 bit 2, ETG.1000.4 Table 31).
fn has_dc(md: &MainDevice<'static>, address: u16, pos: u16) -> Result<bool> {
    block_on(Command::fprd(address, 0x0008).receive::<u16>(md))
        .map(|f| f & 0x0004 != 0)
        .map_err(|e| Error::bus(format!("position {pos}: ESC features"), e))
}

/// The DC registers a member absent at bring-up gets, as ethercrab's DC initialisation and
/// `configure_dc_sync` would have written them (read by [`restore_dc`] as after a power cycle):
/// its propagation delay (0x0928) from the receive times one frame latches in it and in its
/// nearest DC ancestor (found from every DL status before it, through devices without DC that
/// pass frames straight on: [`crate::tree::dc_parent`]): that device's delay plus the time the
/// frame spends in its branches before the port towards the member plus half the round trip
/// through that port less the member's own loop ([`crate::tree::delay_behind`]);
/// SYNC0 with `[dc]`'s period and activation, its first pulse on the grid of the bring-up's
/// SYNC0 (its start time, ethercrab gives every device the same one).
fn member_dc(
    w: &Worker<'_>,
    m: &crate::region::Member,
    (order, wire): (&[u16], u16),
) -> Result<[u8; DC_BYTES]> {
    let (md, pos) = (w.md, m.index as u16);
    // Every device on the wire up to the member (it at `wire`, with its address given), by
    // its station address: the bring-up's, or a member's.
    let seen = crate::place::sweep(w.own, order.len());
    let upto = (seen.get(..=usize::from(wire)))
        .filter(|s| s.last() == Some(&m.address))
        .ok_or_else(|| {
            Error::SegmentMismatch(format!(
                "position {pos}: not at position {wire} on the wire with its station address \
                 {:#06x} when its propagation delay was to be measured",
                m.address
            ))
        })?;
    // Whether each has DC: the bring-up's snapshot knows it of the present ones.
    let devices = (upto.iter().enumerate())
        .map(
            |(k, &a)| match w.snapshots.iter().find(|s| s.address == a) {
                Some(s) => Ok((a, s.dc_capable)),
                None if order.contains(&a) => Ok((a, has_dc(md, a, k as u16)?)),
                None => Err(Error::SegmentMismatch(format!(
                    "position {pos}: the device at position {k} on the wire before it has no \
                     station address of the configuration ({a:#06x}); its delay is measured \
                     once every device before it is known"
                ))),
            },
        )
        .collect::<Result<Vec<(u16, bool)>>>()?;
    let index = devices.len() - 1;
    let address = |i: usize| devices[i].0;
    // The receive times of every device up to it, latched by one frame.
    let l = crate::dc_delays::latch(md, &devices, &format!("position {pos}"))?;
    let unmeasurable = |e: String| Error::SegmentMismatch(format!("position {pos}: {e}"));
    let parents = crate::tree::parents(&l.dl).map_err(unmeasurable)?;
    let (parent, port) = crate::tree::dc_parent(&parents, &l.dl, &l.dc, index)
        .map_err(unmeasurable)?
        .ok_or_else(|| {
            Error::SegmentMismatch(format!(
                "position {pos}: no device with a distributed clock on its way from the master, \
                 so its propagation delay cannot be measured: DC for a member absent at \
                 bring-up needs a DC device before it"
            ))
        })?;
    let parent_delay = block_on(Command::fprd(address(parent), 0x0928).receive::<u32>(md))
        .map_err(|e| {
            Error::bus(
                format!("position {pos}: delay of the device at position {parent} on the wire"),
                e,
            )
        })?;
    let (p_times, p_dl) = (l.times[parent], l.dl[parent]);
    let (o_times, o_dl) = (l.times[index], l.dl[index]);
    let delay = crate::tree::delay_behind(parent_delay, (p_times, p_dl), port, (o_times, o_dl));
    let cycle = w.cfg.dc.sync0_period(w.cfg.cycle.period()).as_nanos();
    let shift = w.cfg.dc.sync0_shift_ns(w.cfg.cycle.period());
    // The bring-up's grid: a DC subdevice's start time; without one, a grid of its own from
    // the reference's system time with `[dc]`'s shift.
    let start = match w.snapshots.iter().find_map(|s| s.dc) {
        Some(r) => u64::from_le_bytes(r[0x90..0x98].try_into().unwrap_or([0; 8])),
        None => {
            let now = block_on(Command::fprd(m.address, 0x0910).receive::<u64>(md))
                .map_err(|e| Error::bus(format!("position {pos}: system time"), e))?;
            now - now % cycle.max(1) + shift
        }
    };
    let mut regs = [0u8; DC_BYTES];
    regs[0x28..0x2c].copy_from_slice(&delay.to_le_bytes());
    regs[0x90..0x98].copy_from_slice(&start.to_le_bytes());
    regs[0xa0..0xa4].copy_from_slice(&u32::try_from(cycle).unwrap_or(u32::MAX).to_le_bytes());
    regs[0x81] = (w.cfg.dc.assign_activate(pos) >> 8) as u8;
    log::info!(
        "position {pos}: propagation delay {delay} ns (behind port {port} of the device at \
         position {parent} on the wire, \
         the nearest with DC: {parent_delay} ns, out through the port after {} ns, back after \
         {} ns; its own loop {} ns), SYNC0 every {cycle} ns",
        crate::tree::out_at(p_times, p_dl, port),
        crate::tree::back_at(p_times, port),
        crate::tree::loop_ns(o_times, o_dl),
    );
    Ok(regs)
}

/// The mapping a joined member runs with (read as the bring-up reads it: over CoE, or its SII)
/// against the layout's: the bits per sync manager and direction must be equal.
fn same_mapping(
    sdo: &mut crate::coe::OnDemand<'_>,
    layout: &Layout,
    snap: &Snapshot,
    sii: &crate::sii::Sii,
) -> Result<()> {
    let pos = snap.position;
    let who = format!("subdevice at position {pos} ({})", snap.name);
    let pdos = crate::mapping::pdos_with(sdo, &who, sii)?;
    let mut runs = crate::pd_registers::per_sm(pdos.iter().map(|p| {
        let bits = p.entries.iter().map(|e| u32::from(e.2)).sum();
        (p.sync_manager, p.direction, bits)
    }));
    let mut want = crate::pd_registers::sm_bits(layout, pos);
    runs.retain(|r| r.2 > 0);
    want.retain(|r| r.2 > 0);
    runs.sort_by_key(|r| (r.0, r.1 == crate::layout::Direction::Outputs));
    want.sort_by_key(|r| (r.0, r.1 == crate::layout::Direction::Outputs));
    if runs != want {
        return Err(Error::SegmentMismatch(format!(
            "{who}: runs with {} after its [[device]] configuration, but the layout has {}: \
             its data cannot go where the layout put it",
            describe_bits(&runs),
            describe_bits(&want)
        )));
    }
    Ok(())
}

fn describe_bits(runs: &[(u8, crate::layout::Direction, u32)]) -> String {
    let parts: Vec<String> = runs
        .iter()
        .map(|(sm, d, b)| {
            let d = crate::pd_registers::direction_name(*d);
            format!("SM{sm} {b} bits of {d}")
        })
        .collect();
    if parts.is_empty() {
        "no process data".into()
    } else {
        parts.join(", ")
    }
}

/// The end of a run for the members absent at bring-up that joined: their outputs zero (one
/// LRW of zeros), then INIT as a recovery requests a state (the AL state machine of ETG.1000.6
/// lets every state go to INIT), as ethercrab's shut-down takes its group there. A member that
/// does not answer is away and left alone; one that answers and is not in INIT within
/// `timeout` is the error.
pub(crate) fn shut_down_joined(
    md: &MainDevice<'static>,
    members: &[crate::region::Member],
    timeout: Duration,
) -> Result<()> {
    let quit = AtomicBool::new(false);
    let zeros = [0u8; crate::limits::LRW_CHUNK];
    for m in members {
        let st = Station {
            md,
            address: m.address,
            position: m.index as u16,
            quit: &quit,
        };
        if st.al_status().is_err() {
            continue;
        }
        let area = (m.input_bytes + m.output_bytes).min(zeros.len());
        let _ = block_on(
            Command::lrw(m.logical)
                .ignore_wkc()
                .send_receive_slice(md, &zeros[..area]),
        );
        st.to_state(INIT, true, timeout)?;
    }
    Ok(())
}

/// `[dc] coe_sync_mode`: 0x1C32:01 / 0x1C33:01 = 2 (DC SYNC0), as the bring-up writes them.
fn dc_sync_mode(w: &Worker<'_>, snap: &Snapshot, sdo: &mut crate::coe::OnDemand<'_>) -> Result<()> {
    if !w.cfg.dc.coe_sync_mode || !snap.coe || w.cfg.dc.assign_activate(snap.position) == 0 {
        return Ok(());
    }
    let client = sdo
        .client()
        .map_err(|e| Error::SegmentMismatch(format!("position {}: {e}", snap.position)))?;
    for object in [0x1c32u16, 0x1c33] {
        // A direction without process data has no such object: a refusal there is not fatal
        // at the bring-up either (it is written only where present; the snapshot does not
        // say, so an abort of the absent one is ignored).
        let _ = client.download(object, 1, &2u16.to_le_bytes());
    }
    Ok(())
}

/// The DC registers again. After a power cycle the local clock restarted at 0: the delay
/// (0x0928) is the bring-up's (the wiring is the same), and the offset (0x0920) is computed as
/// ethercrab's DC initialisation does it, from the receive times one frame latched in every
/// subdevice (a write to 0x0900, ETG.1000.4 §6.8.2): the reference's system time when the
/// frame passed it (its latched local time 0x0918 plus its offset), plus this subdevice's delay,
/// minus this subdevice's latched local time. Without a power cycle offset and delay are kept.
/// Then SYNC0 as ethercrab's `configure_dc_sync` writes it: off, cycle time, a start time on the
/// grid of the old one at least 50 ms ahead, on.
fn restore_dc(
    st: &Station<'_>,
    regs: &[u8; DC_BYTES],
    power_cycled: bool,
    reference: Option<u16>,
) -> Result<()> {
    let u64_at = |o: usize| u64::from_le_bytes(regs[o..o + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |o: usize| u32::from_le_bytes(regs[o..o + 4].try_into().unwrap_or([0; 4]));
    let read_u64 = |address: u16, reg: u16| -> Result<u64> {
        block_on(Command::fprd(address, reg).receive::<u64>(st.md))
            .map_err(|e| Error::bus(format!("position {}: DC {reg:#06x}", st.position), e))
    };
    if power_cycled {
        let reference = reference.ok_or_else(|| {
            Error::SegmentMismatch(format!(
                "position {}: no DC reference clock to set its clock from",
                st.position
            ))
        })?;
        let delay = u32_at(0x28);
        st.write(0x0928, &delay.to_le_bytes())?;
        // One frame latches the receive times of every subdevice (the others' latches are read
        // only by a DC initialisation, which writes them again).
        block_on(Command::bwr(0x0900).ignore_wkc().send(st.md, 0u32))
            .map_err(|e| Error::bus(format!("position {}: DC latch", st.position), e))?;
        let ref_local = read_u64(reference, 0x0918)?;
        let ref_offset = read_u64(reference, 0x0920)?;
        let local = read_u64(st.address, 0x0918)?;
        let offset = ref_local
            .wrapping_add(ref_offset)
            .wrapping_add(u64::from(delay))
            .wrapping_sub(local);
        st.write(0x0920, &offset.to_le_bytes())?;
    }
    let cycle = u64::from(u32_at(0xa0));
    let start_then = u64_at(0x90);
    st.write(0x0981, &[0])?;
    st.write(0x09a0, &regs[0xa0..0xa8])?;
    let ahead = read_u64(st.address, 0x0910)? + 50_000_000;
    let start = if cycle == 0 || ahead <= start_then {
        start_then.max(ahead)
    } else {
        start_then + (ahead - start_then).div_ceil(cycle) * cycle
    };
    st.write(0x0990, &start.to_le_bytes())?;
    st.write(0x0981, &[regs[0x81]])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_firmware_update_may_change_the_revision_only() {
        let was = (2, 0x1234, 1);
        assert!(identity_accepted(was, was, false));
        assert!(!identity_accepted(was, (2, 0x1234, 2), false));
        assert!(identity_accepted(was, (2, 0x1234, 2), true));
        assert!(!identity_accepted(was, (2, 0x1235, 1), true));
        assert!(!identity_accepted(was, (3, 0x1234, 1), true));
    }

    #[test]
    fn the_firmware_update_cause_survives_the_board() {
        use crate::application::SubdeviceCause as C;
        for c in [
            C::AlError(0x1b),
            C::PowerCycled,
            C::LeftOp,
            C::FirmwareUpdate,
            C::Reconnected,
            C::Joined,
        ] {
            assert_eq!(decode_cause(encode_cause(c)), c);
        }
    }
}
