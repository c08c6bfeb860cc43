//! The tune state journal: every value is recorded before it is changed, in an atomically
//! written JSON file, so `restore` puts back exactly what was there.
//!
//! The journal is data, never code. `restore` runs as root and writes what the journal says into
//! `/proc` and `/sys`, so a journal is only used when
//! - it and its directory (and every directory above, in [`StateFile::at`] form) are owned by
//!   root (or the user running the command) and writable by nobody else, it is a regular file
//!   below [`JOURNAL_MAX_BYTES`] and not a symbolic link;
//! - it records this boot (`/proc/sys/kernel/random/boot_id`; runtime knobs do not survive a
//!   reboot);
//! - every entry is a knob tune itself writes ([`classify`]), with a value of that knob's syntax,
//!   at a path without symbolic links, of a CPU that exists; services only by a name tune knows.
//!
//! Anything else refuses the journal as a whole ([`JournalError`]): nothing is restored.

use crate::cpuset::{CpuSet, MAX_CPUS};
use crate::sysroot::SysRoot;
use crate::tune::KnobGroup;
use safefs::{Dir, Owner};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod change;

pub use change::Change;

pub const JOURNAL_VERSION: u32 = 1;

/// Largest journal read. One entry is about 300 bytes; a board has a few hundred IRQs and
/// threads, so 8 MiB leaves room for tens of thousands of entries.
pub const JOURNAL_MAX_BYTES: u64 = 8 << 20;

/// The daemons tune stops (and so may start again).
pub const KNOWN_SERVICES: &[&str] = &["irqbalance"];

/// `PID_MAX_LIMIT` on 64-bit kernels (include/linux/threads.h).
const PID_MAX: u32 = 4 * 1024 * 1024;
/// `CPUIDLE_STATE_MAX` (include/linux/cpuidle.h).
const CPUIDLE_STATE_MAX: u32 = 10;
/// `CPUFREQ_NAME_LEN` (include/linux/cpufreq.h) less the NUL.
const GOVERNOR_NAME_MAX: usize = 15;

/// Why a journal is not used. [`JournalError::exit_code`]: 2 for a refused journal (bad input),
/// 1 for an I/O failure.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Not trusted (owner, mode, link, size) or not a journal tune writes: refused as a whole.
    #[error("tune state {}: {why}; the journal is refused as a whole, nothing was restored or changed", path.display())]
    Refused { path: PathBuf, why: String },
    /// One entry is not a knob tune writes: the whole journal is refused.
    #[error(
        "tune state {}: entry {index} ({id}): {why}; the journal is refused as a whole, nothing was restored or changed",
        path.display()
    )]
    Entry {
        path: PathBuf,
        index: usize,
        id: String,
        why: String,
    },
    /// The journal does not record this boot.
    #[error("tune state {}: {why}; nothing was restored", path.display())]
    Boot { path: PathBuf, why: String },
    #[error("cannot read tune state {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write tune state {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl JournalError {
    /// True for a journal refused for what it is or where it lies (not for an I/O failure).
    pub fn is_refusal(&self) -> bool {
        !matches!(self, JournalError::Read { .. } | JournalError::Write { .. })
    }

    /// Process exit code: 2 (bad input) for a refused journal, 1 for a read or write failure.
    pub fn exit_code(&self) -> u8 {
        if self.is_refusal() { 2 } else { 1 }
    }
}

fn refused(path: &Path, why: impl Into<String>) -> JournalError {
    JournalError::Refused {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// A safefs error while reading, as a journal error: the input's fault (link, FIFO, too large,
/// untrusted owner) refuses it, an I/O error is a read failure.
fn read_err(path: &Path, e: safefs::Error) -> JournalError {
    match e {
        safefs::Error::Io { source, .. } => JournalError::Read {
            path: path.to_path_buf(),
            source,
        },
        e @ safefs::Error::TooLarge { .. } => refused(
            path,
            format!("{e} (a journal is at most {JOURNAL_MAX_BYTES} bytes)"),
        ),
        e => refused(path, e.to_string()),
    }
}

fn write_err(path: &Path, e: safefs::Error) -> JournalError {
    match e {
        safefs::Error::Io { source, .. } => JournalError::Write {
            path: path.to_path_buf(),
            source,
        },
        e => refused(path, e.to_string()),
    }
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

/// Whether a journal belongs to the running boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Boot {
    Same,
    /// Written during another boot (its knobs were reset by the reboot).
    Other {
        journal: String,
        now: String,
    },
    /// This boot's id cannot be read: no journal can be matched to it.
    Unknown,
}

/// The kernel files tune writes, as [`classify`] recognises them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    /// `/proc/irq/N/smp_affinity`
    IrqMask(u32),
    /// `/proc/irq/N/smp_affinity_list`
    IrqList(u32),
    /// `/proc/irq/default_smp_affinity`
    DefaultIrqMask,
    /// `/sys/devices/virtual/workqueue/cpumask`
    WorkqueueMask,
    /// `/sys/devices/system/cpu/cpufreq/policyN/scaling_governor`
    Governor(usize),
    /// `/sys/devices/system/cpu/cpuN/cpuidle/stateM/disable`
    IdleDisable(usize, u32),
    /// `/proc/sys/kernel/timer_migration`
    TimerMigration,
}

/// A decimal number as the kernel prints it (no sign, no leading zero).
fn canonical_num(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if s.len() > 1 && s.starts_with('0') {
        return None;
    }
    s.parse().ok()
}

/// Which knob `path` (a kernel path, as journalled) is, if it is one tune writes. Only these
/// exact spellings match: no `.`/`..`, no doubled or trailing `/`.
pub fn classify(path: &str) -> Option<Knob> {
    match path {
        crate::facts::P_IRQ_DEFAULT => return Some(Knob::DefaultIrqMask),
        crate::facts::P_WQ_MASK => return Some(Knob::WorkqueueMask),
        crate::facts::P_TIMER_MIGRATION => return Some(Knob::TimerMigration),
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/proc/irq/") {
        let (n, file) = rest.split_once('/')?;
        let n = u32::try_from(canonical_num(n)?).ok()?;
        return match file {
            "smp_affinity" => Some(Knob::IrqMask(n)),
            "smp_affinity_list" => Some(Knob::IrqList(n)),
            _ => None,
        };
    }
    let cpu_dir = format!("{}/", crate::facts::P_CPU);
    let rest = path.strip_prefix(&cpu_dir)?;
    if let Some(r) = rest.strip_prefix("cpufreq/policy") {
        let n = r.strip_suffix("/scaling_governor")?;
        let n = usize::try_from(canonical_num(n)?).ok()?;
        return (n < MAX_CPUS).then_some(Knob::Governor(n));
    }
    let r = rest.strip_prefix("cpu")?;
    let (n, r) = r.split_once('/')?;
    let n = usize::try_from(canonical_num(n)?).ok()?;
    let r = r.strip_prefix("cpuidle/state")?;
    let m = r.strip_suffix("/disable")?;
    let m = u32::try_from(canonical_num(m)?).ok()?;
    (n < MAX_CPUS && m < CPUIDLE_STATE_MAX).then_some(Knob::IdleDisable(n, m))
}

impl Knob {
    /// The groups whose entries may write this knob.
    fn groups(self) -> &'static [KnobGroup] {
        match self {
            Knob::IrqMask(_) | Knob::IrqList(_) => &[KnobGroup::IrqAffinity, KnobGroup::NicIrqs],
            Knob::DefaultIrqMask => &[KnobGroup::DefaultIrqAffinity],
            Knob::WorkqueueMask => &[KnobGroup::WorkqueueMask],
            Knob::Governor(_) => &[KnobGroup::Governor],
            Knob::IdleDisable(..) => &[KnobGroup::CStates],
            Knob::TimerMigration => &[KnobGroup::TimerMigration],
        }
    }

    /// The CPU whose files these are, if any.
    fn cpu(self) -> Option<usize> {
        match self {
            Knob::Governor(n) | Knob::IdleDisable(n, _) => Some(n),
            _ => None,
        }
    }

    /// `Err` unless `v` (as read from or written to the knob) has this knob's syntax.
    fn check_value(self, v: &str) -> Result<(), String> {
        // what the kernel prints ends in one newline; what tune writes has none
        let t = v.strip_suffix('\n').unwrap_or(v);
        let ok = match self {
            Knob::IrqMask(_) | Knob::DefaultIrqMask | Knob::WorkqueueMask => {
                // 4096 CPUs: 1024 hex digits and 127 commas
                !t.is_empty()
                    && t.len() <= 1200
                    && t.bytes().all(|b| b.is_ascii_hexdigit() || b == b',')
                    && CpuSet::parse_mask(t).is_ok()
            }
            Knob::IrqList(_) => {
                !t.is_empty()
                    && t.len() <= 4 * MAX_CPUS
                    && t.bytes()
                        .all(|b| b.is_ascii_digit() || b == b',' || b == b'-')
                    && CpuSet::parse_list(t).is_ok_and(|s| s.max().is_none_or(|m| m < MAX_CPUS))
            }
            Knob::Governor(_) => {
                !t.is_empty()
                    && t.len() <= GOVERNOR_NAME_MAX
                    && t.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            }
            Knob::IdleDisable(..) | Knob::TimerMigration => t == "0" || t == "1",
        };
        if ok {
            Ok(())
        } else {
            Err(format!("{v:?} is not a value of this knob"))
        }
    }
}

/// A CPU list as tune journals it: parses, not empty, below [`MAX_CPUS`].
fn check_cpu_list(what: &str, v: &str) -> Result<(), String> {
    let s = CpuSet::parse_list(v).map_err(|e| format!("{what}: {e}"))?;
    match s.max() {
        None => Err(format!("{what}: empty CPU list")),
        Some(m) if m >= MAX_CPUS => Err(format!("{what}: CPU {m} is out of range")),
        Some(_) => Ok(()),
    }
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

    /// Parse a journal and check everything that does not depend on the machine: version, boot
    /// id present, every entry a knob tune writes with a value of its syntax, no duplicates.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Journal, JournalError> {
        let j: Journal = serde_json::from_slice(bytes)
            .map_err(|e| refused(path, format!("not a journal rtcat tune writes: {e}")))?;
        if j.version != JOURNAL_VERSION {
            return Err(refused(
                path,
                format!(
                    "version {} not supported (expected {JOURNAL_VERSION})",
                    j.version
                ),
            ));
        }
        let b = &j.boot_id;
        if b.is_empty() {
            return Err(JournalError::Boot {
                path: path.to_path_buf(),
                why: "the journal records no boot id, so it cannot be matched to this boot".into(),
            });
        }
        if b.len() > 64 || !b.bytes().all(|c| c.is_ascii_graphic()) {
            return Err(JournalError::Boot {
                path: path.to_path_buf(),
                why: format!("boot id {b:?} is not one the kernel prints"),
            });
        }
        check_cpu_list("rt_cpus", &j.rt_cpus).map_err(|m| refused(path, m))?;
        let mut seen = HashSet::new();
        for (index, e) in j.entries.iter().enumerate() {
            let bad = |why: String| JournalError::Entry {
                path: path.to_path_buf(),
                index,
                id: format!("{:?}", e.id),
                why,
            };
            e.change.check(&e.id, e.group).map_err(bad)?;
            if !seen.insert(e.id.as_str()) {
                return Err(bad("a second entry for the same knob".into()));
            }
        }
        Ok(j)
    }

    /// The checks that need the machine: CPUs of cpufreq/cpuidle entries exist, and no file
    /// entry's path has a symbolic link in it (the kernel has none there) or is anything but a
    /// regular file (or gone).
    pub fn check_against(&self, root: &SysRoot, path: &Path) -> Result<(), JournalError> {
        let possible = root
            .read_opt(&format!("{}/possible", crate::facts::P_CPU))
            .and_then(|s| CpuSet::parse_list(&s).ok())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| crate::facts::online_cpus(root));
        for (index, e) in self.entries.iter().enumerate() {
            let Change::File { path: kp, .. } = &e.change else {
                continue;
            };
            let bad = |why: String| JournalError::Entry {
                path: path.to_path_buf(),
                index,
                id: format!("{:?}", e.id),
                why,
            };
            if let Some(cpu) = classify(kp).and_then(Knob::cpu)
                && !possible.is_empty()
                && !possible.contains(cpu)
            {
                return Err(bad(format!(
                    "CPU {cpu} does not exist here (CPUs: {possible})"
                )));
            }
            match root.knob_kind(kp) {
                Ok(None) | Ok(Some(safefs::EntryKind::File)) => {}
                Ok(Some(k)) => {
                    return Err(bad(format!(
                        "{kp} is {} here, not a kernel file",
                        match k {
                            safefs::EntryKind::Symlink => "a symbolic link",
                            safefs::EntryKind::Dir => "a directory",
                            _ => "a special file",
                        }
                    )));
                }
                Err(err) => return Err(bad(format!("{kp}: {err}"))),
            }
        }
        Ok(())
    }

    /// Read and check a journal at `path` (trusted owner: root or the effective user). Use
    /// [`StateFile::load`] to also check it against the machine before acting on it.
    pub fn load(path: &Path) -> Result<Option<Journal>, JournalError> {
        StateFile::at(path).read()
    }

    /// Write atomically to `path` (see [`StateFile::save`]).
    pub fn save(&self, path: &Path) -> Result<(), JournalError> {
        StateFile::at(path).save(self)
    }

    /// Whether the journal was written during this boot.
    pub fn boot(&self, root: &SysRoot) -> Boot {
        let now = boot_id(root);
        if now.is_empty() {
            Boot::Unknown
        } else if self.boot_id == now {
            Boot::Same
        } else {
            Boot::Other {
                journal: self.boot_id.clone(),
                now,
            }
        }
    }

    /// True if this journal belongs to the running boot.
    pub fn same_boot(&self, root: &SysRoot) -> bool {
        self.boot(root) == Boot::Same
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

/// This boot's id, empty when unreadable.
pub fn boot_id(root: &SysRoot) -> String {
    root.read_opt("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
}

/// Who may own a journal: root, or the user running the command (tests and fake trees run
/// unprivileged; such a user's journal can only change what that user may change anyway).
pub fn default_owner() -> Owner {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        Owner::Root
    } else {
        Owner::Uid(euid)
    }
}

/// Where a journal lives: a path (every directory above it must be trusted too), or a name in a
/// directory handle the caller opened (the ladder's own output directory: whoever can rename
/// that directory's parent cannot swap what the handle refers to).
#[derive(Clone, Debug)]
pub struct StateFile {
    path: PathBuf,
    pinned: Option<Arc<Dir>>,
    name: String,
    owner: Owner,
}

/// A directory holding a journal, opened for one operation or pinned.
enum DirRef<'a> {
    Owned(Dir),
    Pinned(&'a Dir),
}

impl std::ops::Deref for DirRef<'_> {
    type Target = Dir;
    fn deref(&self) -> &Dir {
        match self {
            DirRef::Owned(d) => d,
            DirRef::Pinned(d) => d,
        }
    }
}

impl StateFile {
    /// The journal at `path`, trusted when owned by root or the effective user.
    pub fn at(path: impl Into<PathBuf>) -> StateFile {
        let path = path.into();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        StateFile {
            path,
            pinned: None,
            name,
            owner: default_owner(),
        }
    }

    /// The journal `name` in directory `dir` (opened by the caller).
    pub fn in_dir(dir: Arc<Dir>, name: &str) -> StateFile {
        StateFile {
            path: dir.path().join(name),
            pinned: Some(dir),
            name: name.to_string(),
            owner: default_owner(),
        }
    }

    /// Trust journals owned by `owner` (and root) instead of the effective user.
    pub fn with_owner(mut self, owner: Owner) -> StateFile {
        self.owner = owner;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn parent(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    fn check_name(&self) -> Result<(), JournalError> {
        if self.name.is_empty() || self.name == "." || self.name == ".." {
            return Err(refused(&self.path, "not a file name"));
        }
        Ok(())
    }

    /// The journal's directory, checked: owned by root or the owner, not writable by others
    /// (and, for a path, the same for every directory above). None when it does not exist.
    fn dir(&self) -> Result<Option<DirRef<'_>>, JournalError> {
        self.check_name()?;
        let d = match &self.pinned {
            Some(d) => DirRef::Pinned(d),
            None => {
                let parent = self.parent();
                match safefs::check_private(&parent, self.owner) {
                    Ok(()) => {}
                    Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => return Ok(None),
                    Err(e) => return Err(read_err(&self.path, e)),
                }
                match Dir::open(&parent) {
                    Ok(d) => DirRef::Owned(d),
                    Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => return Ok(None),
                    Err(e) => return Err(read_err(&self.path, e)),
                }
            }
        };
        d.check_owner(self.owner)
            .map_err(|e| read_err(&self.path, e))?;
        Ok(Some(d))
    }

    /// Whether a journal exists (as anything; links not followed).
    pub fn exists(&self) -> bool {
        match &self.pinned {
            Some(d) => d.exists(&self.name),
            None => std::fs::symlink_metadata(&self.path).is_ok(),
        }
    }

    /// Read and parse, checked for owner, mode, size and content (not yet against the machine).
    fn read(&self) -> Result<Option<Journal>, JournalError> {
        let Some(d) = self.dir()? else {
            return Ok(None);
        };
        let bytes = match d.read_private(&self.name, JOURNAL_MAX_BYTES, self.owner) {
            Ok(b) => b,
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => return Ok(None),
            Err(e) => return Err(read_err(&self.path, e)),
        };
        Journal::parse(&bytes, &self.path).map(Some)
    }

    /// The journal, if there is one, after every trust check: owner and mode of it and its
    /// directory, size, content, and against the machine under `root`. The boot is not checked
    /// here ([`Journal::boot`]): apply replaces a journal of another boot, restore refuses it.
    pub fn load(&self, root: &SysRoot) -> Result<Option<Journal>, JournalError> {
        let Some(j) = self.read()? else {
            return Ok(None);
        };
        j.check_against(root, &self.path)?;
        Ok(Some(j))
    }

    /// [`StateFile::load`], refusing a journal that does not record this boot.
    pub fn load_this_boot(&self, root: &SysRoot) -> Result<Option<Journal>, JournalError> {
        let Some(j) = self.load(root)? else {
            return Ok(None);
        };
        match j.boot(root) {
            Boot::Same => Ok(Some(j)),
            Boot::Unknown => Err(JournalError::Boot {
                path: self.path.clone(),
                why: "this boot's id (/proc/sys/kernel/random/boot_id) cannot be read, so the \
                      journal cannot be matched to it"
                    .into(),
            }),
            Boot::Other { journal, now } => Err(JournalError::Boot {
                path: self.path.clone(),
                why: format!(
                    "written during another boot (boot id {journal}, this boot is {now}): a \
                     reboot already reset the runtime knobs it records; remove it, or `rtcat tune \
                     apply` replaces it"
                ),
            }),
        }
    }

    /// Write the journal atomically (temporary file, fsync, rename, never following a link),
    /// creating its directory (mode 0700) when missing. A directory that the journal would not
    /// be trusted in at restore is refused before anything is written.
    pub fn save(&self, j: &Journal) -> Result<(), JournalError> {
        self.check_name()?;
        let mut data = serde_json::to_vec_pretty(j).map_err(|e| JournalError::Write {
            path: self.path.clone(),
            source: io::Error::other(e),
        })?;
        data.push(b'\n');
        let d = match self.dir()? {
            Some(d) => d,
            None => {
                let parent = self.parent();
                match Dir::create_new(&parent, 0o700) {
                    Ok(_) => {}
                    Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {}
                    Err(e) => return Err(write_err(&self.path, e)),
                }
                self.dir()?
                    .ok_or_else(|| refused(&self.path, "its directory vanished"))?
            }
        };
        d.write_atomic(&self.name, &data, 0o644)
            .map_err(|e| write_err(&self.path, e))
    }

    /// Remove the journal (missing is fine).
    pub fn remove(&self) -> Result<(), JournalError> {
        let Some(d) = self.dir()? else {
            return Ok(());
        };
        d.remove(&self.name).map_err(|e| write_err(&self.path, e))?;
        d.sync();
        Ok(())
    }
}

/// Anything the tune functions accept as the journal's location: a path or a [`StateFile`].
pub trait AsStateFile {
    fn as_state_file(&self) -> std::borrow::Cow<'_, StateFile>;
}

impl AsStateFile for StateFile {
    fn as_state_file(&self) -> std::borrow::Cow<'_, StateFile> {
        std::borrow::Cow::Borrowed(self)
    }
}

impl AsStateFile for Path {
    fn as_state_file(&self) -> std::borrow::Cow<'_, StateFile> {
        std::borrow::Cow::Owned(StateFile::at(self))
    }
}

impl AsStateFile for PathBuf {
    fn as_state_file(&self) -> std::borrow::Cow<'_, StateFile> {
        std::borrow::Cow::Owned(StateFile::at(self.as_path()))
    }
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

    #[test]
    fn only_the_files_tune_writes_are_knobs() {
        for (p, k) in [
            ("/proc/irq/36/smp_affinity", Knob::IrqMask(36)),
            ("/proc/irq/0/smp_affinity_list", Knob::IrqList(0)),
            ("/proc/irq/default_smp_affinity", Knob::DefaultIrqMask),
            (
                "/sys/devices/virtual/workqueue/cpumask",
                Knob::WorkqueueMask,
            ),
            (
                "/sys/devices/system/cpu/cpufreq/policy6/scaling_governor",
                Knob::Governor(6),
            ),
            (
                "/sys/devices/system/cpu/cpu6/cpuidle/state2/disable",
                Knob::IdleDisable(6, 2),
            ),
            ("/proc/sys/kernel/timer_migration", Knob::TimerMigration),
        ] {
            assert_eq!(classify(p), Some(k), "{p}");
        }
        for p in [
            "/etc/shadow",
            "",
            "/",
            "/proc/irq/36/../../../etc/shadow",
            "/proc/irq/36/smp_affinity/",
            "/proc/irq//36/smp_affinity",
            "/proc/irq/036/smp_affinity",
            "/proc/irq/+36/smp_affinity",
            "/proc/irq/36/node",
            "/proc/irq/99999999999/smp_affinity",
            "proc/irq/36/smp_affinity",
            "/sys/devices/system/cpu/cpu6/cpufreq/scaling_governor",
            "/sys/devices/system/cpu/cpufreq/policy6/scaling_max_freq",
            "/sys/devices/system/cpu/cpu6/cpuidle/state10/disable",
            "/sys/devices/system/cpu/cpu4096/cpuidle/state1/disable",
            "/sys/devices/system/cpu/cpu6/cpuidle/state1/../../../../../../etc/x",
            "/sys/devices/virtual/workqueue/writeback/cpumask",
            "/proc/sys/kernel/timer_migration\u{0}",
        ] {
            assert_eq!(classify(p), None, "{p:?}");
        }
    }

    #[test]
    fn values_must_have_the_knobs_syntax() {
        assert!(Knob::IrqMask(1).check_value("ff\n").is_ok());
        assert!(Knob::IrqMask(1).check_value("00000000,000000ff\n").is_ok());
        assert!(Knob::IrqMask(1).check_value("ff\n\n").is_err());
        assert!(Knob::IrqMask(1).check_value("ff; reboot").is_err());
        assert!(Knob::IrqMask(1).check_value("").is_err());
        assert!(Knob::IrqList(1).check_value("0-5,7\n").is_ok());
        assert!(Knob::Governor(0).check_value("schedutil\n").is_ok());
        assert!(
            Knob::Governor(0)
                .check_value("a-very-long-governor")
                .is_err()
        );
        assert!(Knob::Governor(0).check_value("../x").is_err());
        assert!(Knob::TimerMigration.check_value("1\n").is_ok());
        assert!(Knob::TimerMigration.check_value("2\n").is_err());
        assert!(Knob::IdleDisable(0, 1).check_value("0").is_ok());
    }
}
