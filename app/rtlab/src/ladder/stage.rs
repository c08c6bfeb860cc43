//! The rungs of the ladder: what each stage adds, as bench flags and tune knob groups.

use rttune::KnobGroup;
use serde::Serialize;

/// One rung of the ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StageId {
    /// plain: SCHED_OTHER, not pinned, governor and timer slack as found
    S0,
    /// + pinned to the RT CPU, SCHED_FIFO
    S1,
    /// + performance governor
    S2,
    /// + NIC coalescing off
    S3,
    /// + runtime CPU shield
    S4,
}

impl StageId {
    pub const ALL: [StageId; 5] = [
        StageId::S0,
        StageId::S1,
        StageId::S2,
        StageId::S3,
        StageId::S4,
    ];

    pub fn id(self) -> &'static str {
        match self {
            StageId::S0 => "s0",
            StageId::S1 => "s1",
            StageId::S2 => "s2",
            StageId::S3 => "s3",
            StageId::S4 => "s4",
        }
    }

    /// The stage named `id` (`s0` .. `s4`).
    pub fn from_id(id: &str) -> Option<StageId> {
        Self::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The one change this stage adds.
    pub fn change(self) -> &'static str {
        match self {
            StageId::S0 => "plain: SCHED_OTHER, not pinned, governor and timer slack as found",
            StageId::S1 => "+ pinned to the RT CPU, SCHED_FIFO",
            StageId::S2 => "+ performance governor on the RT CPU",
            StageId::S3 => "+ NIC interrupt coalescing off",
            StageId::S4 => "+ runtime CPU shield",
        }
    }

    /// Knob groups this stage adds itself.
    pub fn own_groups(self) -> Vec<KnobGroup> {
        match self {
            StageId::S0 | StageId::S1 => vec![],
            StageId::S2 => vec![KnobGroup::Governor],
            StageId::S3 => vec![KnobGroup::Coalesce],
            StageId::S4 => vec![KnobGroup::Shield],
        }
    }

    /// Knob groups in effect during this stage (its own and those of every stage below).
    pub fn groups(self) -> Vec<KnobGroup> {
        Self::ALL
            .iter()
            .filter(|s| **s <= self)
            .flat_map(|s| s.own_groups())
            .collect()
    }

    /// Does the cycle thread run pinned at SCHED_FIFO?
    pub fn rt(self) -> bool {
        self != StageId::S0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_cumulative_one_change_each() {
        assert!(StageId::S0.groups().is_empty());
        assert!(StageId::S1.groups().is_empty());
        assert_eq!(StageId::S2.groups(), vec![KnobGroup::Governor]);
        assert_eq!(
            StageId::S4.groups(),
            vec![KnobGroup::Governor, KnobGroup::Coalesce, KnobGroup::Shield]
        );
        for w in StageId::ALL.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            let added = hi.groups().len() - lo.groups().len() + usize::from(hi.rt() != lo.rt());
            assert_eq!(added, 1, "{} -> {}", lo.id(), hi.id());
        }
        for s in StageId::ALL {
            rtcat_results::validate_stage_id(s.id()).unwrap();
            assert_eq!(StageId::from_id(s.id()), Some(s));
        }
        assert_eq!(StageId::from_id("s5"), None);
    }
}
