//! File access that a process running as root can trust.
//!
//! rtcat runs as root for `tune`, `ladder` and `bench` and reads files other users may have
//! written or planted links into. Every such access goes through this crate:
//!
//! - [`read_bounded`] / [`read_to_string_bounded`]: an input (configuration, segment, journal,
//!   report file) must be a regular file no larger than a stated limit. A FIFO, a device such as
//!   `/dev/zero` or a directory is refused without blocking (the open is non-blocking and the type
//!   is checked on the open descriptor, so there is no check-then-open race).
//! - [`Dir`]: a directory opened once, without following a symlink in its last component, and
//!   every file below it created, replaced or appended through that handle with `O_NOFOLLOW`, so
//!   a link planted in the directory is never followed. [`Dir::write_atomic`] is temp file +
//!   fsync + rename + directory fsync: a reader sees the old file or the new one, never a torn one.
//! - [`check_private`]: a file (or directory) root trusts must be owned by root (or the given
//!   user) and not writable by group or others.
//!
//! - [`SysRoot`]: sysfs, procfs, the kernel command line and `/dev` under one root directory, so
//!   every reader and writer of kernel interfaces runs against fake trees in tests; [`netif`]:
//!   the kernel's rules for interface names.
//!
//! Written on nix's `openat`/`renameat`/`fstat` rather than a crate such as `cap-std` because the
//! few calls needed are thin and this keeps the dependency tree of the shipped binary small.

pub mod netif;
pub mod sysroot;
pub use sysroot::SysRoot;

use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What went wrong, always with the path it concerns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: not a regular file ({kind}); only regular files are read")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("{path}: larger than the limit of {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path}: {why}")]
    Untrusted { path: PathBuf, why: String },
    #[error("{path}: {why}")]
    Invalid { path: PathBuf, why: String },
}

impl Error {
    /// The underlying I/O error kind, if this is an I/O error (e.g. `NotFound`, `StorageFull`).
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Error::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }

    /// True for errors that come from the input itself (wrong type, too large, untrusted) rather
    /// than from the system: callers map these to a usage/input exit code.
    pub fn is_input(&self) -> bool {
        !matches!(self, Error::Io { .. })
    }
}

pub type Result<T> = std::result::Result<T, Error>;

fn io_err(path: &Path) -> impl FnOnce(nix::Error) -> Error + '_ {
    move |e| Error::Io {
        path: path.to_path_buf(),
        source: io::Error::from(e),
    }
}

fn kind_name(st: &FileStat) -> &'static str {
    match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFLNK => "a symbolic link",
        SFlag::S_IFREG => "a regular file",
        _ => "of unknown type",
    }
}

fn is_kind(st: &FileStat, kind: SFlag) -> bool {
    st.st_mode & SFlag::S_IFMT.bits() == kind.bits()
}

/// Open `path` for reading without blocking on a FIFO and check it is a regular file.
fn open_regular(path: &Path, flags: OFlag) -> Result<File> {
    let fd = nix::fcntl::open(
        path,
        flags | OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err(path))?;
    let st = fstat(&fd).map_err(io_err(path))?;
    if !is_kind(&st, SFlag::S_IFREG) {
        return Err(Error::NotRegular {
            path: path.to_path_buf(),
            kind: kind_name(&st),
        });
    }
    Ok(File::from(fd))
}

fn read_limited(mut f: File, path: &Path, limit: u64) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    (&mut f)
        .take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if buf.len() as u64 > limit {
        return Err(Error::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(buf)
}

/// Read a regular file of at most `limit` bytes (symlinks to regular files are followed; use
/// [`Dir::read_bounded`] where a link must not be).
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let f = open_regular(path, OFlag::empty())?;
    read_limited(f, path, limit)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_to_string_bounded(path: &Path, limit: u64) -> Result<String> {
    let bytes = read_bounded(path, limit)?;
    String::from_utf8(bytes).map_err(|_| Error::Invalid {
        path: path.to_path_buf(),
        why: "not valid UTF-8 text".into(),
    })
}

/// Open a regular file for reading (checked like [`read_bounded`]) and return it with its size,
/// for inputs that are streamed rather than read whole (e.g. histogram logs).
pub fn open_regular_file(path: &Path) -> Result<(File, u64)> {
    let f = open_regular(path, OFlag::empty())?;
    let len = f
        .metadata()
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?
        .len();
    Ok((f, len))
}

/// Who may own a trusted file besides root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// Owned by uid 0.
    Root,
    /// Owned by this uid (e.g. the user running the command).
    Uid(u32),
}

/// What a directory entry is, links not followed ([`Dir::entry_kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

fn check_stat(st: &FileStat, path: &Path, owner: Owner) -> Result<()> {
    let want = match owner {
        Owner::Root => 0,
        Owner::Uid(u) => u,
    };
    // root may own anything a process trusts (it could write there anyway)
    if st.st_uid != want && st.st_uid != 0 {
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            why: match owner {
                Owner::Root => format!("owned by uid {}, not root", st.st_uid),
                Owner::Uid(u) => format!("owned by uid {}, not root or uid {u}", st.st_uid),
            },
        });
    }
    if st.st_mode & 0o022 != 0 {
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            why: format!(
                "writable by group or others (mode {:04o})",
                st.st_mode & 0o7777
            ),
        });
    }
    Ok(())
}

/// A file or directory root trusts: owned by `owner`, not writable by group or others, and the
/// same for every directory above it up to `/` (a directory others can write lets them replace
/// the file). The path itself is examined with `lstat`: a symbolic link is refused.
pub fn check_private(path: &Path, owner: Owner) -> Result<()> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?
            .join(path)
    };
    let st = nix::sys::stat::lstat(&abs).map_err(io_err(path))?;
    if is_kind(&st, SFlag::S_IFLNK) {
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            why: "is a symbolic link".into(),
        });
    }
    check_stat(&st, path, owner)?;
    let mut dir = abs.parent();
    while let Some(d) = dir {
        let st = nix::sys::stat::stat(d).map_err(io_err(d))?;
        // A sticky, world-writable directory (/tmp) still lets only the owner replace a file.
        let sticky = st.st_mode & 0o1000 != 0;
        if !sticky {
            check_stat(&st, d, Owner::Root).or_else(|e| {
                // Directories of the owning user are as trusted as the file itself.
                if owner != Owner::Root {
                    check_stat(&st, d, owner)
                } else {
                    Err(e)
                }
            })?;
        } else if st.st_uid != 0 {
            return Err(Error::Untrusted {
                path: d.to_path_buf(),
                why: format!("sticky directory owned by uid {}, not root", st.st_uid),
            });
        }
        dir = d.parent();
    }
    Ok(())
}

/// Whether anyone but root could write (create, replace or remove files in) directory `dir`:
/// the directory itself or one above it is not owned by root or is writable by group or others
/// (sticky world-writable directories included: anyone can create files there).
pub fn writable_by_non_root(dir: &Path) -> Result<Option<String>> {
    let mut d = Some(dir);
    while let Some(p) = d {
        match nix::sys::stat::stat(p) {
            Ok(st) => {
                if st.st_uid != 0 {
                    return Ok(Some(format!(
                        "{} is owned by uid {}",
                        p.display(),
                        st.st_uid
                    )));
                }
                if st.st_mode & 0o022 != 0 {
                    return Ok(Some(format!(
                        "{} is writable by group or others (mode {:04o})",
                        p.display(),
                        st.st_mode & 0o7777
                    )));
                }
            }
            // Not there yet: whoever may create it is decided by the directory above.
            Err(nix::Error::ENOENT) => {}
            Err(e) => return Err(io_err(p)(e)),
        }
        d = p.parent().filter(|x| !x.as_os_str().is_empty());
    }
    Ok(None)
}

fn name_ok(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// A directory opened once; every file below it is opened relative to this handle, never
/// following a symbolic link.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Open an existing directory. A symbolic link as its last component is refused; links
    /// higher up are resolved as usual (the caller chose the path).
    pub fn open(path: &Path) -> Result<Dir> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::Error::ELOOP | nix::Error::ENOTDIR => Error::Untrusted {
                path: path.to_path_buf(),
                why: "not a directory (a symbolic link is not followed)".into(),
            },
            e => io_err(path)(e),
        })?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Open an existing directory named by the user (a command-line argument such as
    /// `rtcat report latest`), following symbolic links in every component, the last one
    /// included: the user chose that path. Only the files below it are then opened without
    /// following links.
    pub fn open_named(path: &Path) -> Result<Dir> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::Error::ENOTDIR => Error::Invalid {
                path: path.to_path_buf(),
                why: "not a directory".into(),
            },
            e => io_err(path)(e),
        })?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Create the directory and the missing ones above it, each it creates mode 0755 whatever
    /// the umask (a umask of 000 must not leave a results directory writable by everyone; one
    /// of 077 must not hide it from the operators), then open it. Existing ones are left as
    /// they are.
    pub fn create_all(path: &Path) -> Result<Dir> {
        let mut missing = Vec::new();
        let mut p = path;
        while !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err() {
            missing.push(p);
            match p.parent() {
                Some(q) => p = q,
                None => break,
            }
        }
        for p in missing.into_iter().rev() {
            match nix::unistd::mkdir(p, Mode::from_bits_truncate(0o755)) {
                // Somebody else made it meanwhile: theirs, its mode left alone.
                Err(nix::Error::EEXIST) => continue,
                r => r.map_err(io_err(p))?,
            }
            let d = Dir::open(p)?;
            nix::sys::stat::fchmod(&d.fd, Mode::from_bits_truncate(0o755)).map_err(io_err(p))?;
        }
        Dir::open(path)
    }

    /// Keep `bytes` of the file system for later: `name` is created (or truncated) and its
    /// blocks allocated (`fallocate`; written with zeros where the file system cannot), so a
    /// writer that fills the file system later cannot take them. [`Dir::remove`] gives them
    /// back just before they are needed.
    pub fn reserve(&self, name: &str, bytes: u64) -> Result<()> {
        let p = self.child(name)?;
        let f = self.create(name, 0o600)?;
        let len = i64::try_from(bytes).unwrap_or(i64::MAX);
        match nix::fcntl::fallocate(&f, nix::fcntl::FallocateFlags::empty(), 0, len) {
            Ok(()) => Ok(()),
            Err(nix::Error::EOPNOTSUPP) => {
                let zeros = vec![0u8; 64 * 1024];
                let mut f = f;
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(zeros.len() as u64) as usize;
                    f.write_all(&zeros[..n]).map_err(|source| Error::Io {
                        path: p.clone(),
                        source,
                    })?;
                    left -= n as u64;
                }
                f.sync_all().map_err(|source| Error::Io { path: p, source })
            }
            Err(e) => Err(io_err(&p)(e)),
        }
    }

    /// Create a new directory with `mode` (an existing one, or anything else at the path, is an
    /// error: `AlreadyExists`), its parents as needed, and open it. The mode is set explicitly
    /// after creation so the umask cannot widen or narrow it.
    pub fn create_new(path: &Path, mode: u32) -> Result<Dir> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| Error::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        nix::unistd::mkdir(path, Mode::from_bits_truncate(mode)).map_err(io_err(path))?;
        let d = Dir::open(path)?;
        nix::sys::stat::fchmod(&d.fd, Mode::from_bits_truncate(mode)).map_err(io_err(path))?;
        Ok(d)
    }

    /// The path this directory was opened at (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn child(&self, name: &str) -> Result<PathBuf> {
        if !name_ok(name) {
            return Err(Error::Invalid {
                path: self.path.join(name),
                why: "not a plain file name".into(),
            });
        }
        Ok(self.path.join(name))
    }

    fn borrowed(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Open (or create) a subdirectory without following a link.
    pub fn subdir(&self, name: &str, create: bool) -> Result<Dir> {
        let p = self.child(name)?;
        let mut made = false;
        if create {
            match mkdirat(self.borrowed(), name, Mode::from_bits_truncate(0o755)) {
                Ok(()) => made = true,
                Err(nix::Error::EEXIST) => {}
                Err(e) => return Err(io_err(&p)(e)),
            }
        }
        let fd = openat(
            self.borrowed(),
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::Error::ELOOP | nix::Error::ENOTDIR => Error::Untrusted {
                path: p.clone(),
                why: "not a directory (a symbolic link is not followed)".into(),
            },
            e => io_err(&p)(e),
        })?;
        if made {
            // The umask must not change the mode of a directory we made.
            nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o755)).map_err(io_err(&p))?;
        }
        Ok(Dir { fd, path: p })
    }

    /// Replace (or create) `name` with `data` atomically: a temporary file in this directory
    /// (`O_EXCL | O_NOFOLLOW`), write, fsync, rename over `name`, fsync the directory. A link at
    /// `name` is replaced, not followed. On an error (ENOSPC, …) the old file stays and the
    /// temporary file is removed.
    pub fn write_atomic(&self, name: &str, data: &[u8], mode: u32) -> Result<()> {
        let dest = self.child(name)?;
        let tmp = format!(".{name}.tmp{}", std::process::id());
        // A stale temporary file of a crashed earlier run with our pid: remove, not follow.
        let _ = nix::unistd::unlinkat(
            self.borrowed(),
            tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        let fd = openat(
            self.borrowed(),
            tmp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )
        .map_err(io_err(&dest))?;
        let mut f = File::from(fd);
        let written = (|| -> io::Result<()> {
            // fchmod: the umask must not change the mode of results and journals.
            nix::sys::stat::fchmod(&f, Mode::from_bits_truncate(mode)).map_err(io::Error::from)?;
            f.write_all(data)?;
            f.sync_all()
        })();
        if let Err(source) = written {
            let _ = nix::unistd::unlinkat(
                self.borrowed(),
                tmp.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
            return Err(Error::Io { path: dest, source });
        }
        drop(f);
        if let Err(e) = renameat(self.borrowed(), tmp.as_str(), self.borrowed(), name) {
            let _ = nix::unistd::unlinkat(
                self.borrowed(),
                tmp.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
            return Err(io_err(&dest)(e));
        }
        self.sync();
        Ok(())
    }

    /// fsync the directory (makes renames and creations durable). Best effort.
    pub fn sync(&self) {
        let _ = nix::unistd::fsync(&self.fd);
    }

    /// Create `name` new (truncating an existing regular file, never following a link) for
    /// writing, e.g. a log that is appended to as a run goes.
    pub fn create(&self, name: &str, mode: u32) -> Result<File> {
        self.open_write(name, OFlag::O_TRUNC, mode)
    }

    /// Open `name` for appending (created if missing), never following a link.
    pub fn append(&self, name: &str, mode: u32) -> Result<File> {
        self.open_write(name, OFlag::O_APPEND, mode)
    }

    fn open_write(&self, name: &str, extra: OFlag, mode: u32) -> Result<File> {
        let p = self.child(name)?;
        let fd = openat(
            self.borrowed(),
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | extra,
            Mode::from_bits_truncate(mode),
        )
        .map_err(|e| match e {
            nix::Error::ELOOP => Error::Untrusted {
                path: p.clone(),
                why: "is a symbolic link (not followed)".into(),
            },
            e => io_err(&p)(e),
        })?;
        let st = fstat(&fd).map_err(io_err(&p))?;
        if !is_kind(&st, SFlag::S_IFREG) {
            return Err(Error::NotRegular {
                path: p,
                kind: kind_name(&st),
            });
        }
        // The mode asked for, not the umask's (events.log of a run under umask 077 is still
        // readable by the operators, one under 000 not writable by everyone). Only files of
        // ours: another user's file we may write keeps its mode.
        if st.st_mode & 0o7777 != mode && st.st_uid == nix::unistd::geteuid().as_raw() {
            nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(mode)).map_err(io_err(&p))?;
        }
        Ok(File::from(fd))
    }

    /// Read `name` below this directory: a regular file of at most `limit` bytes, not a link.
    pub fn read_bounded(&self, name: &str, limit: u64) -> Result<Vec<u8>> {
        let (f, p) = self.open_read_nofollow(name)?;
        read_limited(f, &p, limit)
    }

    /// Whether `name` exists (as anything, links not followed).
    pub fn exists(&self, name: &str) -> bool {
        name_ok(name) && fstatat(self.borrowed(), name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    }

    /// Rename `from` to `to` within this directory (links are renamed, not followed).
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        let p = self.child(from)?;
        self.child(to)?;
        renameat(self.borrowed(), from, self.borrowed(), to).map_err(io_err(&p))?;
        Ok(())
    }

    /// Move `from` in this directory to `to` in `other` (same file system; a link is moved, not
    /// followed).
    pub fn rename_into(&self, from: &str, other: &Dir, to: &str) -> Result<()> {
        let p = self.child(from)?;
        other.child(to)?;
        renameat(self.borrowed(), from, other.borrowed(), to).map_err(io_err(&p))?;
        Ok(())
    }

    /// Modification time of `name` (seconds since the epoch; a link's own, not followed).
    pub fn mtime(&self, name: &str) -> Result<i64> {
        let p = self.child(name)?;
        let st =
            fstatat(self.borrowed(), name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io_err(&p))?;
        Ok(st.st_mtime)
    }

    /// Free space for an unprivileged writer on this directory's file system, in bytes.
    pub fn available_bytes(&self) -> Result<u64> {
        let v = nix::sys::statvfs::fstatvfs(&self.fd).map_err(io_err(&self.path))?;
        Ok((v.blocks_available() as u64).saturating_mul(v.fragment_size() as u64))
    }

    /// Remove file `name` (a link is removed, not followed). Missing is not an error.
    pub fn remove(&self, name: &str) -> Result<()> {
        let p = self.child(name)?;
        match nix::unistd::unlinkat(
            self.borrowed(),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) | Err(nix::Error::ENOENT) => Ok(()),
            Err(e) => Err(io_err(&p)(e)),
        }
    }

    /// Names of the entries of this directory (not `.`/`..`), unsorted.
    pub fn entries(&self) -> Result<Vec<String>> {
        let fd = openat(
            self.borrowed(),
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err(&self.path))?;
        let mut d = nix::dir::Dir::from_fd(fd).map_err(io_err(&self.path))?;
        let mut out = Vec::new();
        for e in d.iter() {
            let e = e.map_err(io_err(&self.path))?;
            let n = OsStr::from_bytes(e.file_name().to_bytes());
            if let Some(s) = n.to_str()
                && s != "."
                && s != ".."
            {
                out.push(s.to_string());
            }
        }
        Ok(out)
    }

    /// Read `name` like [`Dir::read_bounded`] and check, on the open descriptor, that it is owned
    /// by `owner` and not writable by group or others: a file root acts on (a journal) that
    /// another user could have written is refused without a check-then-open race.
    pub fn read_private(&self, name: &str, limit: u64, owner: Owner) -> Result<Vec<u8>> {
        let (f, p) = self.open_read_nofollow(name)?;
        let st = fstat(&f).map_err(io_err(&p))?;
        check_stat(&st, &p, owner)?;
        read_limited(f, &p, limit)
    }

    fn open_read_nofollow(&self, name: &str) -> Result<(File, PathBuf)> {
        let p = self.child(name)?;
        let fd = openat(
            self.borrowed(),
            name,
            OFlag::O_RDONLY
                | OFlag::O_NONBLOCK
                | OFlag::O_NOFOLLOW
                | OFlag::O_NOCTTY
                | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::Error::ELOOP => Error::Untrusted {
                path: p.clone(),
                why: "is a symbolic link (not followed)".into(),
            },
            e => io_err(&p)(e),
        })?;
        let st = fstat(&fd).map_err(io_err(&p))?;
        if !is_kind(&st, SFlag::S_IFREG) {
            return Err(Error::NotRegular {
                path: p,
                kind: kind_name(&st),
            });
        }
        Ok((File::from(fd), p))
    }

    /// Open the existing regular file `name` (never created, a link never followed) for reading
    /// or, with `write`, for writing with `O_TRUNC` (which sysfs and procfs ignore), e.g. a kernel
    /// knob written in one write(2).
    pub fn open_existing(&self, name: &str, write: bool) -> Result<File> {
        if !write {
            return self.open_read_nofollow(name).map(|(f, _)| f);
        }
        let p = self.child(name)?;
        let fd = openat(
            self.borrowed(),
            name,
            OFlag::O_WRONLY
                | OFlag::O_TRUNC
                | OFlag::O_NONBLOCK
                | OFlag::O_NOFOLLOW
                | OFlag::O_NOCTTY
                | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::Error::ELOOP => Error::Untrusted {
                path: p.clone(),
                why: "is a symbolic link (not followed)".into(),
            },
            e => io_err(&p)(e),
        })?;
        let st = fstat(&fd).map_err(io_err(&p))?;
        if !is_kind(&st, SFlag::S_IFREG) {
            return Err(Error::NotRegular {
                path: p,
                kind: kind_name(&st),
            });
        }
        Ok(File::from(fd))
    }

    /// What `name` is (links not followed), or None when it does not exist.
    pub fn entry_kind(&self, name: &str) -> Result<Option<EntryKind>> {
        let p = self.child(name)?;
        match fstatat(self.borrowed(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(
                match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
                    SFlag::S_IFREG => EntryKind::File,
                    SFlag::S_IFDIR => EntryKind::Dir,
                    SFlag::S_IFLNK => EntryKind::Symlink,
                    _ => EntryKind::Other,
                },
            )),
            Err(nix::Error::ENOENT) => Ok(None),
            Err(e) => Err(io_err(&p)(e)),
        }
    }

    /// A second handle on the same directory (a duplicated descriptor).
    pub fn try_clone(&self) -> Result<Dir> {
        let fd = self.fd.try_clone().map_err(|source| Error::Io {
            path: self.path.clone(),
            source,
        })?;
        Ok(Dir {
            fd,
            path: self.path.clone(),
        })
    }

    /// Owner and mode check of the directory itself (see [`check_private`]).
    pub fn check_owner(&self, owner: Owner) -> Result<()> {
        let st = fstat(&self.fd).map_err(io_err(&self.path))?;
        check_stat(&st, &self.path, owner)
    }

    /// Raw descriptor (for callers that need `*at` calls of their own).
    pub fn as_raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    #[test]
    fn bounded_read_refuses_large_fifo_and_devices() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.toml");
        std::fs::write(&p, "x = 1\n").unwrap();
        assert_eq!(read_to_string_bounded(&p, 100).unwrap(), "x = 1\n");
        let e = read_bounded(&p, 3).unwrap_err();
        assert!(e.to_string().contains("limit of 3 bytes"), "{e}");
        assert!(e.is_input());
        let e = read_bounded(Path::new("/dev/zero"), 100).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_bounded(&fifo, 100).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        let link = d.path().join("zero");
        symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read_bounded(&link, 100).unwrap_err(),
            Error::NotRegular { .. }
        ));
        let e = read_bounded(d.path(), 100).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        let e = read_bounded(&d.path().join("missing"), 100).unwrap_err();
        assert_eq!(e.io_kind(), Some(io::ErrorKind::NotFound));
    }

    #[test]
    fn atomic_write_replaces_a_planted_link_without_following_it() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        symlink(&victim, out.join("summary.json")).unwrap();
        symlink(&victim, out.join("events.log")).unwrap();
        let dir = Dir::open(&out).unwrap();
        dir.write_atomic("summary.json", b"{}", 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(
            std::fs::read_to_string(out.join("summary.json")).unwrap(),
            "{}"
        );
        let e = dir.append("events.log", 0o644).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = dir.read_bounded("events.log", 100).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // No temporary file is left behind.
        let mut names = dir.entries().unwrap();
        names.sort();
        assert_eq!(names, ["events.log", "summary.json"]);
        assert!(dir.write_atomic("../x", b"", 0o644).is_err());
        // The directory itself as a link is refused.
        let ldir = d.path().join("ldir");
        symlink(&out, &ldir).unwrap();
        assert!(matches!(
            Dir::open(&ldir).unwrap_err(),
            Error::Untrusted { .. }
        ));
        // ... unless the user named it: open_named follows it, but still not the links below.
        let named = Dir::open_named(&ldir).unwrap();
        let e = named.read_bounded("events.log", 100).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(matches!(
            Dir::open_named(&victim).unwrap_err(),
            Error::Invalid { .. }
        ));
    }

    #[test]
    fn atomic_write_mode_ignores_umask() {
        let d = tempfile::tempdir().unwrap();
        let dir = Dir::open(d.path()).unwrap();
        let old = nix::sys::stat::umask(Mode::from_bits_truncate(0o077));
        dir.write_atomic("f", b"1", 0o644).unwrap();
        nix::sys::stat::umask(old);
        let m = std::fs::metadata(d.path().join("f")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o644);
    }

    #[test]
    fn create_new_refuses_an_existing_directory() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a/b");
        let dir = Dir::create_new(&p, 0o700).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o700
        );
        drop(dir);
        let e = Dir::create_new(&p, 0o700).unwrap_err();
        assert_eq!(e.io_kind(), Some(io::ErrorKind::AlreadyExists));
    }

    #[test]
    fn private_check_refuses_group_writable_and_links() {
        let d = tempfile::tempdir().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let f = d.path().join("j.json");
        std::fs::write(&f, "{}").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        // The tempdir's parents (/tmp: sticky, root-owned) are fine for our own uid.
        check_private(&f, Owner::Uid(me)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o620)).unwrap();
        let e = check_private(&f, Owner::Uid(me)).unwrap_err();
        assert!(e.to_string().contains("writable by group"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let l = d.path().join("l.json");
        symlink(&f, &l).unwrap();
        let e = check_private(&l, Owner::Uid(me)).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        if me != 0 {
            assert!(check_private(&f, Owner::Root).is_err());
        }
    }

    #[test]
    fn private_read_and_existing_opens_check_the_descriptor() {
        let d = tempfile::tempdir().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let dir = Dir::open(d.path()).unwrap();
        dir.write_atomic("j.json", b"{}", 0o600).unwrap();
        assert_eq!(
            dir.read_private("j.json", 100, Owner::Uid(me)).unwrap(),
            b"{}"
        );
        let e = dir.read_private("j.json", 1, Owner::Uid(me)).unwrap_err();
        assert!(e.to_string().contains("limit of 1 bytes"), "{e}");
        std::fs::set_permissions(
            d.path().join("j.json"),
            std::fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        let e = dir.read_private("j.json", 100, Owner::Uid(me)).unwrap_err();
        assert!(e.to_string().contains("writable by group or others"), "{e}");
        std::fs::set_permissions(
            d.path().join("j.json"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        if me == 0 {
            nix::unistd::chown(
                &d.path().join("j.json"),
                Some(nix::unistd::Uid::from_raw(4321)),
                None,
            )
            .unwrap();
            let e = dir.read_private("j.json", 100, Owner::Root).unwrap_err();
            assert!(e.to_string().contains("owned by uid 4321, not root"), "{e}");
            dir.read_private("j.json", 100, Owner::Uid(4321)).unwrap();
            nix::unistd::chown(
                &d.path().join("j.json"),
                Some(nix::unistd::Uid::from_raw(0)),
                None,
            )
            .unwrap();
            // root is trusted by every owner
            dir.read_private("j.json", 100, Owner::Uid(4321)).unwrap();
        }
        symlink(d.path().join("j.json"), d.path().join("l.json")).unwrap();
        let e = dir.read_private("l.json", 100, Owner::Uid(me)).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(dir.entry_kind("l.json").unwrap(), Some(EntryKind::Symlink));
        assert_eq!(dir.entry_kind("j.json").unwrap(), Some(EntryKind::File));
        assert_eq!(dir.entry_kind("nope").unwrap(), None);
        // an existing file is opened for writing, a missing one is not created, a link refused
        std::fs::write(d.path().join("knob"), "1\n").unwrap();
        let mut f = dir.open_existing("knob", true).unwrap();
        f.write_all(b"0\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("knob")).unwrap(),
            "0\n"
        );
        let e = dir.open_existing("missing", true).unwrap_err();
        assert_eq!(e.io_kind(), Some(io::ErrorKind::NotFound));
        assert!(!d.path().join("missing").exists());
        assert!(dir.open_existing("l.json", true).is_err());
        let twin = dir.try_clone().unwrap();
        assert!(twin.exists("knob"));
    }
}
