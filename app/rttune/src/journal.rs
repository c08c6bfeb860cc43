//! The tune state journal: every value is recorded before it is changed, in an atomically
//! written JSON file, so `restore` puts back exactly what was there.

use crate::host::{Coalesce, ServiceStop};
use crate::sysroot::{SysRoot, atomic_write};
use crate::tune::KnobGroup;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const JOURNAL_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A sysfs/procfs file; `original` is the raw content as read (restored byte for byte).
    File {
        path: String,
        original: String,
        target: String,
    },
    /// A daemon that was running and is stopped.
    Service { name: String, how: ServiceStop },
    /// NIC coalescing parameters (the whole `struct ethtool_coalesce`).
    Coalesce {
        iface: String,
        original: Coalesce,
        target: Coalesce,
    },
    /// CPU affinity of one thread (identified by tid and start time, against PID reuse).
    Affinity {
        pid: u32,
        tid: u32,
        starttime: u64,
        comm: String,
        original: String,
        target: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum EntryState {
    /// Original recorded, change not (known to be) done yet: restore puts the original back.
    Pending,
    /// Change done and verified.
    Applied,
    /// The kernel refused the change (EPERM, EINVAL, …): nothing to restore.
    Refused { error: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Unique key of the knob, e.g. `file:/proc/irq/36/smp_affinity`.
    pub id: String,
    pub group: KnobGroup,
    pub change: Change,
    #[serde(flatten)]
    pub state: EntryState,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub version: u32,
    /// `/proc/sys/kernel/random/boot_id` when written: runtime knobs do not survive a reboot.
    pub boot_id: String,
    pub rt_cpus: String,
    /// Time since boot in clock ticks (the unit and clock of a task's `starttime`), read just
    /// before the tasks group was first applied: tasks that started later were created while the
    /// shield was up, and restore gives back the mask they inherited from a journalled task.
    /// Absent in journals written before it existed (still version 1) and when unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_since: Option<u64>,
    pub entries: Vec<Entry>,
}

impl Journal {
    pub fn new(root: &SysRoot, rt_cpus: &str) -> Journal {
        Journal {
            version: JOURNAL_VERSION,
            boot_id: boot_id(root),
            rt_cpus: rt_cpus.to_string(),
            tasks_since: None,
            entries: Vec::new(),
        }
    }

    pub fn load(path: &Path) -> anyhow::Result<Option<Journal>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => anyhow::bail!("cannot read tune state {}: {e}", path.display()),
        };
        let j: Journal = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("tune state {} is corrupt: {e}", path.display()))?;
        if j.version != JOURNAL_VERSION {
            anyhow::bail!(
                "tune state {}: version {} not supported (expected {JOURNAL_VERSION})",
                path.display(),
                j.version
            );
        }
        Ok(Some(j))
    }

    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let mut data = serde_json::to_vec_pretty(self)?;
        data.push(b'\n');
        atomic_write(path, &data)
            .map_err(|e| anyhow::anyhow!("cannot write tune state {}: {e}", path.display()))
    }

    /// True if this journal belongs to the running boot (or boot ids are unavailable).
    pub fn same_boot(&self, root: &SysRoot) -> bool {
        let now = boot_id(root);
        self.boot_id.is_empty() || now.is_empty() || self.boot_id == now
    }

    pub fn find(&self, id: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.id == id)
    }

    /// True if some task affinity is journalled.
    pub fn has_tasks(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.change, Change::Affinity { .. }))
    }

    /// True if the kernel refused a write to `path` (e.g. a managed IRQ).
    pub fn refused(&self, path: &str) -> bool {
        self.entries.iter().any(|e| {
            matches!(&e.state, EntryState::Refused { .. })
                && matches!(&e.change, Change::File { path: p, .. } if p == path)
        })
    }
}

fn boot_id(root: &SysRoot) -> String {
    root.read_opt("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1_journal_without_tasks_since_still_loads() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let p = dir.join("old.json");
        std::fs::write(
            &p,
            r#"{"version":1,"boot_id":"b","rt_cpus":"6","entries":[{"id":"task:410:142",
               "group":"tasks","change":{"kind":"affinity","pid":410,"tid":410,"starttime":142,
               "comm":"bash","original":"0-7","target":"0-5,7"},"state":"applied"}]}"#,
        )
        .unwrap();
        let j = Journal::load(&p).unwrap().unwrap();
        assert_eq!(j.tasks_since, None);
        assert!(j.has_tasks());
        // written back without the field while it is unknown, with it once known
        j.save(&p).unwrap();
        assert!(!std::fs::read_to_string(&p).unwrap().contains("tasks_since"));
        let mut j = j;
        j.tasks_since = Some(360_000);
        j.save(&p).unwrap();
        assert_eq!(
            Journal::load(&p).unwrap().unwrap().tasks_since,
            Some(360_000)
        );
    }
}
