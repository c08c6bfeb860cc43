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
    pub entries: Vec<Entry>,
}

impl Journal {
    pub fn new(root: &SysRoot, rt_cpus: &str) -> Journal {
        Journal {
            version: JOURNAL_VERSION,
            boot_id: boot_id(root),
            rt_cpus: rt_cpus.to_string(),
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
