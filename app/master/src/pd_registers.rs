//! A subdevice's sync managers and FMMUs computed by rtcat, from its SII and the mapping in the
//! layout, exactly as ethercrab 0.7.1 writes them in its group initialisation — for a device
//! ethercrab did not configure: a hot-connect member that was not on the segment at bring-up
//! (docs/NOTES.md §17.2). Until that runs, every bring-up checks them against what ethercrab
//! wrote into the optional groups' members (`subdevice_recovery::snapshot`).
//!
//! What ethercrab 0.7.1 writes (`SubDevice::configure_mailbox_sms`, `configure_pdos_coe`,
//! `configure_pdos_eeprom`, `write_sm_config`, `write_fmmu_config`):
//! - **Mailbox SMs** (SII SyncManager category type 1 and 2, ETG.2010 Table 8): start and
//!   control from the category, length the SII's standard mailbox receive (type 1) or send
//!   (type 2) size (words 0x18..0x1B), activated when the category enables it and the length is
//!   not 0.
//! - **Process-data SMs** (type 3 outputs, 4 inputs): each SM's length is the bits mapped to it
//!   rounded up to bytes, activated as above; each direction's SMs follow one another in the
//!   logical address space from the subdevice's start for that direction, each on a byte.
//! - **FMMUs** (ETG.1000.4 §6.6, 16 bytes: logical start, length, start bit 0, end bit 7,
//!   physical start, physical bit 0, read (inputs) or write (outputs), enable). With CoE the
//!   first FMMU the SII's FMMU category marks for the direction (Inputs/Outputs), written for
//!   every SM with data; a second SM of the same direction adds its length to it (ethercrab
//!   reads the FMMU back and extends it). Without CoE the FMMU whose index is the SM's (its
//!   FMMU_EX lookup yields the SM index either way), written even for an SM without data.
//!
//! Checked in `tests/pd_registers.rs` against what ethercrab wrote into the simulated devices
//! of the I/O line and the CoE example (read back in OP), byte for byte.

use crate::layout::{Direction, Layout};
use crate::sii::{FmmuUsage, Sii, SmUsage};
use thiserror::Error;

/// Bytes of one sync manager's registers (ETG.1000.4 §6.7: 0x0800 + 8 n).
pub const SM_BYTES: usize = 8;
/// Bytes of one FMMU's registers (ETG.1000.4 §6.6: 0x0600 + 16 n).
pub const FMMU_BYTES: usize = 16;

/// The registers to write: what ethercrab would have written into this subdevice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PdRegisters {
    /// (sync manager index, its registers: start, length, control, status 0, activate, PDI 0),
    /// in index order.
    pub sms: Vec<(u8, [u8; SM_BYTES])>,
    /// (FMMU index, its registers), in index order.
    pub fmmus: Vec<(u8, [u8; FMMU_BYTES])>,
}

/// Why the registers cannot be computed for a subdevice.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PdRegistersError {
    /// The mapping puts data on a sync manager the SII does not describe for that direction.
    #[error(
        "subdevice {position}: the mapping puts {bits} bits of {direction} on SM{sm}, which the \
         SII's SyncManager category does not list as an {direction} sync manager"
    )]
    SmNotInSii {
        /// Position.
        position: u16,
        /// Sync manager index.
        sm: u8,
        /// `inputs` or `outputs`.
        direction: &'static str,
        /// Bits mapped there.
        bits: u32,
    },
    /// A CoE subdevice whose SII has no FMMU for a direction it has data in.
    #[error(
        "subdevice {position}: the SII's FMMU category has no FMMU for {direction}, which SM{sm} \
         carries"
    )]
    NoFmmu {
        /// Position.
        position: u16,
        /// Sync manager index.
        sm: u8,
        /// `inputs` or `outputs`.
        direction: &'static str,
    },
    /// More data on one sync manager than its 16-bit length register holds.
    #[error("subdevice {position}: SM{sm} would carry {bits} bits, more than 65535 bytes")]
    TooLong {
        /// Position.
        position: u16,
        /// Sync manager index.
        sm: u8,
        /// Bits mapped there.
        bits: u32,
    },
}

/// Where a subdevice's process data lies in the logical address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logical {
    /// Logical address of its first input byte.
    pub inputs: u32,
    /// Logical address of its first output byte.
    pub outputs: u32,
}

impl Logical {
    /// As ethercrab 0.7.1 lays out one group of the layout's first `group` subdevices from its
    /// start address `pdi_start`: every subdevice's inputs in position order, then every
    /// subdevice's outputs (the order [`Layout::wkc_of`] counts the working counter in). The
    /// subdevices after them (members of optional groups absent at bring-up, in rtcat's own
    /// region) are not in its image: its outputs start after the group's inputs, not the
    /// layout's.
    pub fn in_group(
        layout: &Layout,
        (position, group): (u16, usize),
        pdi_start: u32,
    ) -> Option<Logical> {
        let s = layout.subdevices.get(usize::from(position))?;
        let inputs: u32 = layout
            .subdevices
            .get(..group)?
            .iter()
            .map(|s| s.input_bytes)
            .sum();
        Some(Logical {
            inputs: pdi_start + s.input_offset,
            outputs: pdi_start + inputs + s.output_offset,
        })
    }
}

/// Bits the layout maps to each (sync manager, direction) of the subdevice at `position`.
pub fn sm_bits(layout: &Layout, position: u16) -> Vec<(u8, Direction, u32)> {
    let Some(s) = layout.subdevices.get(usize::from(position)) else {
        return Vec::new();
    };
    per_sm(layout.pdos[s.pdos.clone()].iter().map(|p| {
        let bits = layout.entries[p.entries.clone()]
            .iter()
            .map(|e| u32::from(e.bits))
            .sum();
        (p.sync_manager, p.direction, bits)
    }))
}

/// PDOs' bits (sync manager, direction, bits) summed per sync manager and direction, in the
/// order each first appears.
pub(crate) fn per_sm(
    pdos: impl IntoIterator<Item = (u8, Direction, u32)>,
) -> Vec<(u8, Direction, u32)> {
    let mut out: Vec<(u8, Direction, u32)> = Vec::new();
    for (sm, d, bits) in pdos {
        match out.iter_mut().find(|(s, dd, _)| *s == sm && *dd == d) {
            Some(o) => o.2 += bits,
            None => out.push((sm, d, bits)),
        }
    }
    out
}

pub(crate) fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Inputs => "inputs",
        Direction::Outputs => "outputs",
    }
}

fn sm_register(start: u16, length: u16, control: u8, sii_enable: u8) -> [u8; SM_BYTES] {
    let mut r = [0u8; SM_BYTES];
    r[0..2].copy_from_slice(&start.to_le_bytes());
    r[2..4].copy_from_slice(&length.to_le_bytes());
    r[4] = control;
    // Activate only what the SII enables and has a length: an ESC refuses an active SM of
    // length 0 (ethercrab's `write_sm_config`).
    r[6] = u8::from(sii_enable & 0x01 != 0 && length > 0);
    r
}

fn fmmu_register(logical: u32, length: u16, physical: u16, d: Direction) -> [u8; FMMU_BYTES] {
    let mut r = [0u8; FMMU_BYTES];
    r[0..4].copy_from_slice(&logical.to_le_bytes());
    r[4..6].copy_from_slice(&length.to_le_bytes());
    // Logical start bit 0, end bit 7: byte-aligned.
    r[7] = 7;
    r[8..10].copy_from_slice(&physical.to_le_bytes());
    r[11] = match d {
        Direction::Inputs => 0x01,
        Direction::Outputs => 0x02,
    };
    r[12] = 0x01;
    r
}

/// The sync managers and FMMUs of the subdevice at `position` with SII `sii`, CoE or not
/// (`coe`, as the layout says), `bits` mapped per sync manager ([`sm_bits`]) and its data at
/// `at` in the logical address space.
pub fn compute(
    position: u16,
    sii: &Sii,
    coe: bool,
    bits: &[(u8, Direction, u32)],
    at: Logical,
) -> Result<PdRegisters, PdRegistersError> {
    let mut regs = PdRegisters::default();
    if let Some(m) = &sii.mailbox {
        for (n, sm) in sii.sync_managers.iter().enumerate() {
            let length = match sm.usage {
                SmUsage::MailboxOut => m.rx_size,
                SmUsage::MailboxIn => m.tx_size,
                _ => continue,
            };
            regs.sms.push((
                n as u8,
                sm_register(sm.start, length, sm.control, sm.enable),
            ));
        }
    }
    for d in [Direction::Inputs, Direction::Outputs] {
        let (usage, fmmu_usage, mut logical) = match d {
            Direction::Inputs => (SmUsage::Inputs, FmmuUsage::Inputs, at.inputs),
            Direction::Outputs => (SmUsage::Outputs, FmmuUsage::Outputs, at.outputs),
        };
        for (n, sm) in sii.sync_managers.iter().enumerate() {
            if sm.usage != usage {
                continue;
            }
            let n = n as u8;
            let b = bits
                .iter()
                .filter(|(s, dd, _)| *s == n && *dd == d)
                .map(|x| x.2)
                .sum::<u32>();
            let length = u16::try_from(b.div_ceil(8)).map_err(|_| PdRegistersError::TooLong {
                position,
                sm: n,
                bits: b,
            })?;
            regs.sms
                .push((n, sm_register(sm.start, length, sm.control, sm.enable)));
            let fmmu = if coe {
                if b == 0 {
                    continue;
                }
                sii.fmmus
                    .iter()
                    .position(|u| *u == fmmu_usage)
                    .ok_or(PdRegistersError::NoFmmu {
                        position,
                        sm: n,
                        direction: direction_name(d),
                    })? as u8
            } else {
                n
            };
            match regs.fmmus.iter_mut().find(|(i, _)| *i == fmmu) {
                // ethercrab reads the FMMU back and, already enabled, extends its length.
                Some((_, r)) => {
                    let len = u16::from_le_bytes([r[4], r[5]]).saturating_add(length);
                    r[4..6].copy_from_slice(&len.to_le_bytes());
                }
                None => regs
                    .fmmus
                    .push((fmmu, fmmu_register(logical, length, sm.start, d))),
            }
            logical += u32::from(length);
        }
    }
    // Data on a sync manager the loop above did not visit is not in what ethercrab configures.
    for &(sm, d, b) in bits {
        let want = match d {
            Direction::Inputs => SmUsage::Inputs,
            Direction::Outputs => SmUsage::Outputs,
        };
        if b > 0
            && sii
                .sync_managers
                .get(usize::from(sm))
                .is_none_or(|s| s.usage != want)
        {
            return Err(PdRegistersError::SmNotInSii {
                position,
                sm,
                direction: direction_name(d),
                bits: b,
            });
        }
    }
    regs.sms.sort_by_key(|s| s.0);
    regs.fmmus.sort_by_key(|f| f.0);
    Ok(regs)
}

impl PdRegisters {
    /// The whole SM (0x0800, 16 × 8 bytes) and FMMU (0x0600, 16 × 16 bytes) register areas
    /// with these written into zeroed ones (ethercrab blanks every FMMU at its scan; an SM it
    /// does not configure has length 0 and is left alone by the recovery).
    pub fn areas(&self) -> ([u8; 16 * SM_BYTES], [u8; 16 * FMMU_BYTES]) {
        let mut sm = [0u8; 16 * SM_BYTES];
        let mut fmmu = [0u8; 16 * FMMU_BYTES];
        for (n, r) in &self.sms {
            let at = usize::from(*n) * SM_BYTES;
            if let Some(dst) = sm.get_mut(at..at + SM_BYTES) {
                dst.copy_from_slice(r);
            }
        }
        for (n, r) in &self.fmmus {
            let at = usize::from(*n) * FMMU_BYTES;
            if let Some(dst) = fmmu.get_mut(at..at + FMMU_BYTES) {
                dst.copy_from_slice(r);
            }
        }
        (sm, fmmu)
    }

    /// The first register where `sm` and `fmmu` (the SM and FMMU areas as read back from the
    /// device) differ from these, as `SM2: read [..], computed [..]`; None when they agree.
    /// An SM's status byte (offset 5) is the device's and not compared; an SM neither side
    /// configures (length 0) is not either.
    pub fn differs_from(
        &self,
        sm: &[u8; 16 * SM_BYTES],
        fmmu: &[u8; 16 * FMMU_BYTES],
    ) -> Option<String> {
        let (sm_want, fmmu_want) = self.areas();
        let strip = |r: &[u8]| [r[0], r[1], r[2], r[3], r[4], r[6], r[7]];
        for n in 0..16 {
            let (got, want) = (
                &sm[SM_BYTES * n..SM_BYTES * (n + 1)],
                &sm_want[SM_BYTES * n..SM_BYTES * (n + 1)],
            );
            let configured = |r: &[u8]| r[2] != 0 || r[3] != 0;
            if (configured(got) || configured(want)) && strip(got) != strip(want) {
                return Some(format!("SM{n}: read {got:02x?}, computed {want:02x?}"));
            }
        }
        for n in 0..16 {
            let (got, want) = (
                &fmmu[FMMU_BYTES * n..FMMU_BYTES * (n + 1)],
                &fmmu_want[FMMU_BYTES * n..FMMU_BYTES * (n + 1)],
            );
            if got != want {
                return Some(format!("FMMU{n}: read {got:02x?}, computed {want:02x?}"));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sii::{Mailbox, SyncManager};

    fn sm(start: u16, control: u8, usage: SmUsage) -> SyncManager {
        SyncManager {
            start,
            length: 0,
            control,
            enable: 1,
            usage,
        }
    }

    /// A CoE drive's SII: mailbox SMs 0/1, outputs on SM2, inputs on SM3, FMMU 0 outputs,
    /// FMMU 1 inputs, FMMU 2 mailbox status.
    fn drive() -> Sii {
        Sii {
            mailbox: Some(Mailbox {
                rx_offset: 0x1000,
                rx_size: 128,
                tx_offset: 0x1080,
                tx_size: 128,
            }),
            fmmus: vec![
                FmmuUsage::Outputs,
                FmmuUsage::Inputs,
                FmmuUsage::SyncManagerStatus,
            ],
            sync_managers: vec![
                sm(0x1000, 0x26, SmUsage::MailboxOut),
                sm(0x1080, 0x22, SmUsage::MailboxIn),
                sm(0x1100, 0x64, SmUsage::Outputs),
                sm(0x1400, 0x20, SmUsage::Inputs),
            ],
            ..Sii::default()
        }
    }

    #[test]
    fn a_coe_drive_gets_its_mailbox_and_process_data_sms_and_two_fmmus() {
        let at = Logical {
            inputs: 0x20,
            outputs: 0x100,
        };
        let bits = [(2, Direction::Outputs, 56), (3, Direction::Inputs, 81)];
        let r = compute(4, &drive(), true, &bits, at).expect("computed");
        let sms: Vec<u8> = r.sms.iter().map(|s| s.0).collect();
        assert_eq!(sms, [0, 1, 2, 3]);
        assert_eq!(r.sms[0].1, [0x00, 0x10, 128, 0, 0x26, 0, 1, 0]);
        assert_eq!(r.sms[2].1, [0x00, 0x11, 7, 0, 0x64, 0, 1, 0]);
        // 81 bits: 11 bytes.
        assert_eq!(r.sms[3].1, [0x00, 0x14, 11, 0, 0x20, 0, 1, 0]);
        assert_eq!(
            r.fmmus,
            [
                (
                    0,
                    [0x00, 0x01, 0, 0, 7, 0, 0, 7, 0x00, 0x11, 0, 2, 1, 0, 0, 0]
                ),
                (
                    1,
                    [0x20, 0, 0, 0, 11, 0, 0, 7, 0x00, 0x14, 0, 1, 1, 0, 0, 0]
                ),
            ]
        );
        let (sm_area, fmmu_area) = r.areas();
        assert_eq!(&sm_area[24..32], &r.sms[3].1);
        assert_eq!(&fmmu_area[16..32], &r.fmmus[1].1);
        assert!(sm_area[32..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_read_back_differing_in_one_register_is_named_and_the_status_byte_is_not_compared() {
        let at = Logical {
            inputs: 0x20,
            outputs: 0x100,
        };
        let bits = [(2, Direction::Outputs, 56), (3, Direction::Inputs, 81)];
        let r = compute(4, &drive(), true, &bits, at).expect("computed");
        let (mut sm, mut fmmu) = r.areas();
        sm[8 * 3 + 5] = 0x09;
        assert_eq!(r.differs_from(&sm, &fmmu), None);
        fmmu[16 + 4] = 12;
        let d = r.differs_from(&sm, &fmmu).expect("a difference");
        assert!(d.starts_with("FMMU1: read [20, 00, 00, 00, 0c"), "{d}");
        let (mut sm, fmmu) = r.areas();
        sm[8 * 5 + 2] = 1;
        let d = r.differs_from(&sm, &fmmu).expect("an SM more");
        assert!(d.starts_with("SM5:"), "{d}");
    }

    #[test]
    fn an_sm_without_data_is_written_inactive_and_gets_no_coe_fmmu() {
        let at = Logical {
            inputs: 0,
            outputs: 0,
        };
        let r = compute(0, &drive(), true, &[(3, Direction::Inputs, 16)], at).expect("ok");
        assert_eq!(r.sms[2].1[2..4], [0, 0]);
        assert_eq!(r.sms[2].1[6], 0, "length 0 is never activated");
        assert_eq!(r.fmmus.len(), 1);
        assert_eq!(r.fmmus[0].0, 1);
    }

    #[test]
    fn without_coe_each_sm_has_the_fmmu_of_its_index_and_two_sms_follow_each_other() {
        // A digital terminal without a mailbox: outputs on SM0 and SM1.
        let sii = Sii {
            sync_managers: vec![
                sm(0x0f00, 0x44, SmUsage::Outputs),
                sm(0x0f01, 0x44, SmUsage::Outputs),
                sm(0x1000, 0x00, SmUsage::Inputs),
            ],
            ..Sii::default()
        };
        let at = Logical {
            inputs: 0x40,
            outputs: 0x80,
        };
        let bits = [(0, Direction::Outputs, 8), (1, Direction::Outputs, 4)];
        let r = compute(1, &sii, false, &bits, at).expect("ok");
        let fmmus: Vec<(u8, u32, u16)> = r
            .fmmus
            .iter()
            .map(|(n, f)| {
                (
                    *n,
                    u32::from_le_bytes([f[0], f[1], f[2], f[3]]),
                    u16::from_le_bytes([f[4], f[5]]),
                )
            })
            .collect();
        // SM2 carries no inputs: its FMMU is written all the same, of length 0 (ethercrab).
        assert_eq!(fmmus, [(0, 0x80, 1), (1, 0x81, 1), (2, 0x40, 0)]);
        assert!(r.sms.iter().all(|(n, _)| *n < 3), "no mailbox SMs");
    }

    #[test]
    fn two_sms_of_one_direction_share_the_coe_fmmu() {
        let mut sii = drive();
        sii.sync_managers.push(sm(0x1500, 0x20, SmUsage::Inputs));
        let bits = [(3, Direction::Inputs, 16), (4, Direction::Inputs, 8)];
        let at = Logical {
            inputs: 0x10,
            outputs: 0,
        };
        let r = compute(0, &sii, true, &bits, at).expect("ok");
        assert_eq!(r.fmmus.len(), 1);
        assert_eq!(r.fmmus[0].1[0..6], [0x10, 0, 0, 0, 3, 0]);
    }

    #[test]
    fn what_cannot_be_computed_is_refused_naming_the_subdevice_and_the_sm() {
        let at = Logical {
            inputs: 0,
            outputs: 0,
        };
        let e = compute(7, &drive(), true, &[(2, Direction::Inputs, 8)], at)
            .expect_err("SM2 is outputs");
        assert_eq!(
            e.to_string(),
            "subdevice 7: the mapping puts 8 bits of inputs on SM2, which the SII's SyncManager \
             category does not list as an inputs sync manager"
        );
        let mut sii = drive();
        sii.fmmus = vec![FmmuUsage::Outputs];
        let e = compute(7, &sii, true, &[(3, Direction::Inputs, 8)], at).expect_err("no FMMU");
        assert!(e.to_string().contains("no FMMU for inputs"), "{e}");
        let e = compute(7, &drive(), true, &[(3, Direction::Inputs, 1 << 20)], at)
            .expect_err("too long");
        assert!(matches!(e, PdRegistersError::TooLong { sm: 3, .. }), "{e}");
    }
}
