//! The one layer through which rtcat (the tuner, the master) reads and writes sysfs, procfs, the kernel command line and
//! `/dev`: every path is taken relative to a root directory, so tests run on fake trees.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A root directory (`/` on a live system) under which kernel interfaces are read and written.
#[derive(Clone, Debug)]
pub struct SysRoot {
    root: PathBuf,
    live: bool,
    /// Fault injection for fake trees: writes to these (absolute, root-relative) paths fail with
    /// the given errno, like a kernel file that reads fine but refuses a write (e.g. a managed IRQ's
    /// `smp_affinity` answering EPERM). Permission bits cannot model that when tests run as root.
    write_errors: Arc<Mutex<HashMap<String, i32>>>,
    /// The same for looking a path up: these paths answer `errno` as a directory of mode 0700 does
    /// to an unprivileged user (debugfs), which tests running as root cannot otherwise see.
    lookup_errors: Arc<Mutex<HashMap<String, i32>>>,
}

impl SysRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root: PathBuf = root.into();
        let live = root == Path::new("/")
            || fs::canonicalize(&root)
                .map(|p| p == Path::new("/"))
                .unwrap_or(false);
        SysRoot {
            root,
            live,
            write_errors: Arc::default(),
            lookup_errors: Arc::default(),
        }
    }

    /// The live system.
    pub fn live() -> Self {
        Self::new("/")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True when this is the real `/` (non-file probes such as ioctls only make sense there).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Make writes to `path` fail with `errno` (fake trees only).
    pub fn inject_write_error(&self, path: &str, errno: i32) {
        if let Ok(mut m) = self.write_errors.lock() {
            m.insert(path.to_string(), errno);
        }
    }

    /// Make looking up `path` (and reading below it) fail with `errno` (fake trees only).
    pub fn inject_lookup_error(&self, path: &str, errno: i32) {
        if let Ok(mut m) = self.lookup_errors.lock() {
            m.insert(path.to_string(), errno);
        }
    }

    /// True when `p` exists but this process may not look at it (EACCES/EPERM): debugfs is mode
    /// 0700, so an unprivileged doctor cannot read kernel-managed IRQ state there and must say
    /// so rather than take its absence for "not managed".
    pub fn access_denied(&self, p: &str) -> bool {
        let err = match self.injected_lookup(p) {
            Some(e) => e,
            None => match fs::metadata(self.path(p)) {
                Ok(_) => return false,
                Err(e) => e,
            },
        };
        err.kind() == io::ErrorKind::PermissionDenied
    }

    /// The error injected for `p` or a directory above it.
    fn injected_lookup(&self, p: &str) -> Option<io::Error> {
        let m = self.lookup_errors.lock().ok()?;
        m.iter()
            .find(|(k, _)| {
                let k = k.trim_end_matches('/');
                p == k || p.strip_prefix(k).is_some_and(|rest| rest.starts_with('/'))
            })
            .map(|(_, errno)| io::Error::from_raw_os_error(*errno))
    }

    /// Host path of a kernel path such as `/proc/irq/36/smp_affinity`.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    pub fn exists(&self, p: &str) -> bool {
        self.injected_lookup(p).is_none() && self.path(p).exists()
    }

    /// The whole content, as the kernel returned it (raw, newline included).
    pub fn read_raw(&self, p: &str) -> io::Result<String> {
        if let Some(e) = self.injected_lookup(p) {
            return Err(e);
        }
        let mut f = fs::File::open(self.path(p))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    pub fn read_bytes(&self, p: &str) -> io::Result<Vec<u8>> {
        fs::read(self.path(p))
    }

    /// Content with surrounding whitespace removed.
    pub fn read(&self, p: &str) -> io::Result<String> {
        Ok(self.read_raw(p)?.trim().to_string())
    }

    /// Trimmed content, or None if the file is missing or unreadable.
    pub fn read_opt(&self, p: &str) -> Option<String> {
        self.read(p).ok()
    }

    /// Names of the entries of a directory, sorted.
    pub fn list(&self, p: &str) -> io::Result<Vec<String>> {
        let mut v: Vec<String> = fs::read_dir(self.path(p))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        Ok(v)
    }

    /// Numeric entries of a directory (PIDs, IRQ numbers), sorted numerically.
    pub fn list_numeric(&self, p: &str) -> io::Result<Vec<u32>> {
        let mut v: Vec<u32> = fs::read_dir(self.path(p))?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    pub fn read_link(&self, p: &str) -> io::Result<PathBuf> {
        fs::read_link(self.path(p))
    }

    /// The directory holding kernel path `p` and the file name in it, reached from the root one
    /// component at a time without following a symbolic link: the kernel has none on the paths
    /// tune writes, so a link there was planted (or the path is not a knob tune knows).
    fn knob_dir(&self, p: &str) -> io::Result<(crate::Dir, String)> {
        let comps: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
        let Some((name, dirs)) = comps.split_last() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{p:?} is not a file path"),
            ));
        };
        let mut d = crate::Dir::open(&self.root).map_err(fs_err)?;
        for c in dirs {
            d = d.subdir(c, false).map_err(fs_err)?;
        }
        Ok((d, (*name).to_string()))
    }

    /// What kernel path `p` is, examined without following a link in any component: Ok(None) if
    /// it (or a directory on the way) does not exist, an error if a component is a link.
    pub fn knob_kind(&self, p: &str) -> io::Result<Option<crate::EntryKind>> {
        match self.knob_dir(p) {
            Ok((d, name)) => d.entry_kind(&name).map_err(fs_err),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`SysRoot::read_raw`] of a knob, never following a link (see [`SysRoot::write`]).
    pub fn read_knob(&self, p: &str) -> io::Result<String> {
        let (d, name) = self.knob_dir(p)?;
        let mut f = d.open_existing(&name, false).map_err(fs_err)?;
        let mut buf = Vec::new();
        // a knob is a page at most (sysfs), procfs masks are shorter
        (&mut f).take(1 << 16).read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Write `content` to an existing kernel file in a single write(2) (sysfs/procfs need that);
    /// never creates files and never follows a symbolic link (in any component: the kernel has
    /// none on the paths tune writes). The file is truncated first, which the kernel ignores and
    /// a fake tree needs.
    pub fn write(&self, p: &str, content: &str) -> io::Result<()> {
        if let Ok(m) = self.write_errors.lock()
            && let Some(errno) = m.get(p)
        {
            return Err(io::Error::from_raw_os_error(*errno));
        }
        let (d, name) = self.knob_dir(p)?;
        let mut f = d.open_existing(&name, true).map_err(fs_err)?;
        let n = f.write(content.as_bytes())?;
        if n != content.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write to {p}: {n} of {} bytes", content.len()),
            ));
        }
        f.flush()
    }
}

/// A safefs error as an I/O error (the kind kept: NotFound stays NotFound).
fn fs_err(e: crate::Error) -> io::Error {
    match e {
        crate::Error::Io { source, .. } => source,
        e => io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
    }
}
