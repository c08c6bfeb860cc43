//! The health of a cycle and of a subdevice: the words for it (a subdevice's status in one
//! cycle, why the segment or one subdevice recovers, what happened to a subdevice) and the pure
//! judgement of one answered cycle from its AL states and working counter. A leaf beside
//! `al_state`: the cycle, the application API, the measurements and the recoveries use it
//! without importing one another.

use crate::al_state;

/// Per-subdevice status of one cycle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubdeviceStatus {
    /// AL state code as read this cycle ([`al_state`]); unchanged when the frame was lost.
    pub al_state: u8,
    /// Its inputs in the image are this cycle's and its outputs were written by the segment:
    /// the frame came back, the subdevice is in OP, and the working counter is the expected one
    /// or short by exactly the shares of the subdevices not in OP.
    pub data_valid: bool,
}

impl SubdeviceStatus {
    /// In OP.
    pub fn in_op(&self) -> bool {
        self.al_state == al_state::OP
    }
}

/// Why the master re-initialises the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryCause {
    /// Frames did not come back.
    FramesLost,
    /// The working counter was wrong.
    WkcMismatch {
        /// Last value received.
        got: u16,
        /// Expected value.
        expected: u16,
    },
    /// A subdevice left OP.
    NotOp {
        /// Its position.
        position: u16,
        /// Its AL state code.
        state: u8,
    },
}

/// Why a subdevice was out of OP, as its own recovery found it (`[health] recovery =
/// "subdevice"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubdeviceCause {
    /// It reported an AL error: the AL status code (0x0134, ETG.1000.6 Table 11).
    AlError(u16),
    /// It had lost its station address: it was powered off and on (or replaced).
    PowerCycled,
    /// It left OP without an error (an AL state request of its own, a sync-manager watchdog
    /// already acknowledged).
    LeftOp,
    /// The master took it out for a firmware update through the control socket (parked: its
    /// recovery left it alone until the update handed it back).
    FirmwareUpdate,
    /// A member of an optional `[[group]]` that was away from the line (its cable pulled or its
    /// power off: it did not answer) and answered again with its identity.
    Reconnected,
    /// A member of an optional `[[group]]` that was not on the segment at bring-up, configured
    /// for the first time (its data in rtcat's own region of the process data).
    Joined,
}

impl std::fmt::Display for SubdeviceCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubdeviceCause::AlError(code) => write!(
                f,
                "al_error code={code:#06x} text=\"{}\"",
                crate::al_state::al_status_text(*code)
            ),
            SubdeviceCause::PowerCycled => f.write_str("power_cycled"),
            SubdeviceCause::LeftOp => f.write_str("left_op"),
            SubdeviceCause::FirmwareUpdate => f.write_str("firmware_update"),
            SubdeviceCause::Reconnected => f.write_str("reconnected"),
            SubdeviceCause::Joined => f.write_str("joined"),
        }
    }
}

/// What happened to one subdevice while the others cycled on (`[health] recovery =
/// "subdevice"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubdeviceChange {
    /// It was seen out of OP (AL state code as the cycle read it; 0: it did not answer): its
    /// data is invalid and its own recovery starts.
    Lost {
        /// AL state code.
        state: u8,
    },
    /// It is back in OP, its data valid again.
    Back {
        /// Why it was out.
        cause: SubdeviceCause,
        /// From the cycle it was seen lost to the cycle it was seen back, ns.
        outage_ns: u64,
        /// Recovery attempts it took.
        attempts: u32,
        /// Its sync error counter limit (0x10F1:02, ETG.1020) as its recovery read it in
        /// PRE-OP (`None`: no CoE, or no such object): what it tolerates of missed frames, for
        /// an axis whose bound comes from its drive (a drive that joins, or was replaced).
        sync_error_limit: Option<u32>,
    },
    /// One attempt to bring it back failed (retried after `[health] recovery_backoff_ms`).
    Failed {
        /// Failed attempts in a row.
        attempt: u32,
    },
    /// A device with another identity answers at its position, or the same identity with
    /// another station alias (another unit): it is not driven (retried until the configured
    /// device is back).
    Refused {
        /// Vendor, product, revision found (SII).
        found: (u32, u32, u32),
        /// What the segment was brought up with.
        expected: (u32, u32, u32),
        /// Refused for its station alias (0x0012): the alias found and the one it was brought
        /// up with (`None`: the identity differs).
        alias: Option<(u16, u16)>,
    },
    /// Its recovery failed `[health] subdevice_attempts` times in a row: the whole segment is
    /// re-initialised.
    GaveUp,
    /// The master took it out on purpose (`cause`: a firmware update): its data is invalid and
    /// its recovery leaves it alone until it is handed back (then [`SubdeviceChange::Back`]
    /// with the same cause).
    Parked {
        /// Why.
        cause: SubdeviceCause,
    },
    /// A member of an optional `[[group]]` that does not answer (unplugged, powered off): its
    /// data stays invalid, the rest runs on, and it is looked for every `probe_interval_ms`
    /// until it answers (then [`SubdeviceChange::Back`] with cause
    /// [`SubdeviceCause::Reconnected`]).
    Absent,
}

/// The verdict on one answered cycle (see [`judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The working counter is the expected one.
    pub wkc_ok: bool,
    /// The working counter is the expected one, or short by exactly the shares of the
    /// subdevices not in OP: the data of those in OP is valid.
    pub explained: bool,
    /// The first subdevice not in OP: its position and AL state code.
    pub first_not_op: Option<(u16, u8)>,
}

impl Verdict {
    /// A bad cycle (counts towards a recovery).
    pub fn is_bad(&self) -> bool {
        !self.wkc_ok || self.first_not_op.is_some()
    }

    /// Why a run of bad cycles would recover, as this one saw it (a subdevice out of OP says
    /// more than the working counter it shortens).
    pub fn cause(&self, wkc: u16, expected_wkc: u16) -> Option<RecoveryCause> {
        match self.first_not_op {
            Some((position, state)) => Some(RecoveryCause::NotOp { position, state }),
            None if !self.wkc_ok => Some(RecoveryCause::WkcMismatch {
                got: wkc,
                expected: expected_wkc,
            }),
            None => None,
        }
    }
}

/// The health judgement of one answered cycle, pure: from this cycle's AL states (`status`),
/// each subdevice's share of the expected working counter (inputs, outputs) and the working
/// counter received. A subdevice in SAFE-OP still has its inputs read (ETG.1000.6 AL states:
/// inputs valid in SAFE-OP, outputs only in OP; ecsim does the same); below SAFE-OP its process
/// data FMMUs do nothing. A wrong WKC fully explained by the subdevices not in OP leaves the
/// others' data valid; any other mismatch makes every subdevice's data suspect (ethercrab
/// returns one sum for all the LRW frames of the cycle).
pub fn judge(
    status: &[SubdeviceStatus],
    shares: &[(u32, u32)],
    wkc: u16,
    expected_wkc: u16,
) -> Verdict {
    let mut missing_share = 0u32;
    let mut first_not_op = None;
    for (i, s) in status.iter().enumerate() {
        if s.al_state == al_state::OP {
            continue;
        }
        let (ins, outs) = shares.get(i).copied().unwrap_or((0, 0));
        missing_share += if al_state::state(s.al_state) == al_state::SAFE_OP {
            outs
        } else {
            ins + outs
        };
        first_not_op.get_or_insert((i as u16, s.al_state));
    }
    Verdict {
        wkc_ok: wkc == expected_wkc,
        explained: wkc == expected_wkc || u32::from(wkc) + missing_share == u32::from(expected_wkc),
        first_not_op,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn states(codes: &[u8]) -> Vec<SubdeviceStatus> {
        codes
            .iter()
            .map(|&al_state| SubdeviceStatus {
                al_state,
                data_valid: false,
            })
            .collect()
    }

    /// Three subdevices: inputs only (1 share), outputs only (2), both (1 + 2): WKC 6.
    const SHARES: [(u32, u32); 3] = [(1, 0), (0, 2), (1, 2)];

    #[test]
    fn all_in_op_with_the_expected_wkc_is_good() {
        let v = judge(&states(&[al_state::OP; 3]), &SHARES, 6, 6);
        assert_eq!(
            v,
            Verdict {
                wkc_ok: true,
                explained: true,
                first_not_op: None
            }
        );
        assert!(!v.is_bad());
        assert_eq!(v.cause(6, 6), None);
    }

    #[test]
    fn a_wkc_short_by_the_shares_of_those_out_of_op_is_explained() {
        use al_state::{OP, PRE_OP, SAFE_OP};
        // SAFE-OP: its inputs are still read, only its outputs' share (2) is missing.
        let v = judge(&states(&[OP, OP, SAFE_OP]), &SHARES, 4, 6);
        assert!(v.explained && !v.wkc_ok && v.is_bad());
        assert_eq!(v.first_not_op, Some((2, SAFE_OP)));
        // SAFE-OP with the error indicator counts as SAFE-OP.
        let v = judge(&states(&[OP, OP, SAFE_OP | al_state::ERROR]), &SHARES, 4, 6);
        assert!(v.explained);
        // Below SAFE-OP both shares are missing; SAFE-OP's share would not explain it.
        assert!(judge(&states(&[OP, OP, PRE_OP]), &SHARES, 3, 6).explained);
        assert!(!judge(&states(&[OP, OP, SAFE_OP]), &SHARES, 3, 6).explained);
        // The cause names the subdevice, not the working counter it shortens.
        assert_eq!(
            judge(&states(&[OP, PRE_OP, SAFE_OP]), &SHARES, 1, 6).cause(1, 6),
            Some(RecoveryCause::NotOp {
                position: 1,
                state: PRE_OP
            })
        );
    }

    #[test]
    fn an_unexplained_wkc_is_a_mismatch_and_suspects_every_subdevice() {
        let v = judge(&states(&[al_state::OP; 3]), &SHARES, 5, 6);
        assert!(!v.wkc_ok && !v.explained && v.is_bad());
        assert_eq!(
            v.cause(5, 6),
            Some(RecoveryCause::WkcMismatch {
                got: 5,
                expected: 6
            })
        );
        // A subdevice out of OP with the expected WKC (it answered anyway) is still bad.
        let v = judge(
            &states(&[al_state::OP, al_state::INIT, al_state::OP]),
            &SHARES,
            6,
            6,
        );
        assert!(v.wkc_ok && v.explained && v.is_bad());
        // No subdevices, no shares: only the WKC counts.
        assert!(!judge(&[], &[], 0, 0).is_bad());
    }
}
