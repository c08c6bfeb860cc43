//! Output the user names on the command line (`report --out FILE`, `report --plots DIR`,
//! `load --json FILE`) and messages on stdout/stderr that never panic.
//!
//! `rtcat report` is often run as root on result directories other users can write, so a name
//! given on the command line may be a link someone planted. The rule:
//! - a missing name or a regular file is replaced atomically through its directory (temporary
//!   file, fsync, rename): whatever sits at the name is replaced, never written through;
//! - a symbolic link is followed only when its directory can be written by nobody but root and
//!   the current user (so one of them made it: `/dev/stdout`, a link in one's own directory);
//!   in a directory others can write it is refused. Links are followed one at a time and the
//!   rule applies again where each leads;
//! - a character device or a FIFO (`/dev/null`, a terminal, a pipe) is written to, opened
//!   without blocking so a FIFO without a reader is an error rather than a hang, and checked on
//!   the open descriptor (a regular file swapped in meanwhile is not written); block devices,
//!   sockets and directories are refused.
//!
//! Directories above the last component are resolved as named: the user chose the path.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use anyhow::{Result, anyhow, bail};
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::stat::Mode;
use safefs::{Dir, Owner};

/// Mode of the files written (tables, plots, load reports).
pub const OUTPUT_MODE: u32 = 0o644;

/// Writes one line to stderr; a closed or broken stderr is ignored (the message is lost, the
/// program goes on: `eprintln!` would panic).
pub fn stderr_line(args: std::fmt::Arguments) {
    let mut e = io::stderr().lock();
    let _ = e.write_fmt(args);
    let _ = e.write_all(b"\n");
}

/// `say!("...")`: a line on stderr that cannot panic.
macro_rules! say {
    ($($t:tt)*) => { $crate::outfile::stderr_line(format_args!($($t)*)) };
}
pub(crate) use say;

/// Writes `data` to stdout and flushes it; the caller decides what a `BrokenPipe` means.
pub fn write_stdout(data: &[u8]) -> io::Result<()> {
    let mut so = io::stdout().lock();
    so.write_all(data)?;
    so.flush()
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Whether only root or the current user can change entries of `dir` (and of the directories
/// above it); otherwise why not.
fn only_root_or_me(dir: &Path) -> std::result::Result<(), String> {
    let me = nix::unistd::geteuid().as_raw();
    match safefs::check_private(dir, Owner::Root) {
        Ok(()) => Ok(()),
        Err(e) if me == 0 => Err(e.to_string()),
        Err(_) => safefs::check_private(dir, Owner::Uid(me)).map_err(|e| e.to_string()),
    }
}

fn atomic(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("{}: not a file name", path.display()))?;
    let dir = Dir::open_named(parent_of(path))?;
    dir.write_atomic(name, data, mode)?;
    Ok(())
}

/// Writes to a character device or FIFO; `path` is opened as named. What was opened is checked on
/// the descriptor: if a regular file (or anything else) was swapped in after the caller looked, it
/// is refused before a byte is written.
fn write_special(path: &Path, data: &[u8]) -> Result<()> {
    let fd = nix::fcntl::open(
        path,
        OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        nix::Error::ENXIO => anyhow!("{}: a FIFO without a reader", path.display()),
        e => anyhow!("{}: {}", path.display(), io::Error::from(e)),
    })?;
    let f = fs::File::from(fd);
    let ft = f
        .metadata()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?
        .file_type();
    if !(ft.is_char_device() || ft.is_fifo()) {
        bail!(
            "{}: {}; only files, character devices and FIFOs are written",
            path.display(),
            if ft.is_block_device() {
                "a block device"
            } else if ft.is_socket() {
                "a socket"
            } else {
                "changed while it was opened"
            }
        );
    }
    // Non-blocking only for the open: the writes below may wait for a slow reader.
    let fl = fcntl(&f, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let fl = OFlag::from_bits_truncate(fl) & !OFlag::O_NONBLOCK;
    fcntl(&f, FcntlArg::F_SETFL(fl)).map_err(io::Error::from)?;
    (&f).write_all(data).map_err(|e| {
        anyhow::Error::new(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    })?;
    Ok(())
}

/// Writes `data` to the file the user named, following the rules in the module documentation.
pub fn write_named(path: &Path, data: &[u8]) -> Result<()> {
    write_named_at(path, data, 0)
}

/// Most symbolic links followed from a name to the file (the kernel allows 40; 8 is plenty).
const MAX_LINKS: usize = 8;

fn write_named_at(path: &Path, data: &[u8], links: usize) -> Result<()> {
    let md = match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return atomic(path, data, OUTPUT_MODE);
        }
        Err(e) => bail!("{}: {e}", path.display()),
        Ok(m) => m,
    };
    let ft = md.file_type();
    if ft.is_symlink() {
        let dir = parent_of(path);
        if let Err(why) = only_root_or_me(dir) {
            bail!(
                "{}: a symbolic link in a directory others can write ({why}); not followed, \
                 name the file it points to",
                path.display()
            );
        }
        if links == MAX_LINKS {
            bail!("{}: more than {MAX_LINKS} symbolic links", path.display());
        }
        return match fs::metadata(path) {
            // One hop at a time, so that the rule applies again where the link leads (a
            // trusted link into a directory others can write gains nothing).
            Ok(t) if t.is_file() => {
                let target = fs::read_link(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
                write_named_at(&dir.join(target), data, links + 1)
            }
            Ok(t) if t.is_dir() => bail!("{}: is a directory", path.display()),
            // a device, a FIFO, or a pipe behind /proc/self/fd (`/dev/stdout`)
            Ok(_) => write_special(path, data),
            Err(e) => bail!("{}: dangling symbolic link ({e})", path.display()),
        };
    }
    if ft.is_file() {
        return atomic(path, data, md.permissions().mode() & 0o777);
    }
    if ft.is_dir() {
        bail!("{}: is a directory", path.display());
    }
    write_special(path, data)
}

/// Opens (creating it and its parents if missing) the output directory the user named, under
/// the same rule for a symbolic link as [`write_named`]. Files are then written below it through
/// the handle, never following a link.
pub fn open_named_dir(path: &Path) -> Result<Dir> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(path)
                .map_err(|e| anyhow!("{}: cannot create: {e}", path.display()))?;
            // Dir::open, not open_named: a link that appeared since is not followed
            Ok(Dir::open(path)?)
        }
        Err(e) => bail!("{}: {e}", path.display()),
        Ok(m) if m.file_type().is_symlink() => {
            if let Err(why) = only_root_or_me(parent_of(path)) {
                bail!(
                    "{}: a symbolic link in a directory others can write ({why}); not followed, \
                     name the directory it points to",
                    path.display()
                );
            }
            Ok(Dir::open_named(path)?)
        }
        Ok(m) if m.is_dir() => Ok(Dir::open(path)?),
        Ok(_) => bail!("{}: not a directory", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn replaces_files_writes_devices_and_refuses_links_in_foreign_dirs() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.md");
        write_named(&p, b"one").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        write_named(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        // the mode of the file it replaces is kept
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        write_named(Path::new("/dev/null"), b"x").unwrap();
        assert!(
            write_named(d.path(), b"x")
                .unwrap_err()
                .to_string()
                .contains("is a directory")
        );
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let e = write_named(&fifo, b"x").unwrap_err().to_string();
        assert!(e.contains("a FIFO without a reader"), "{e}");

        // a link in a directory only we can write is ours: followed (the target is replaced)
        let own = d.path().join("own");
        fs::create_dir(&own).unwrap();
        fs::set_permissions(&own, fs::Permissions::from_mode(0o755)).unwrap();
        let target = own.join("target.md");
        fs::write(&target, "old").unwrap();
        symlink(&target, own.join("link.md")).unwrap();
        // the tempdir is ours (0700) in a sticky directory of root's: as trusted as its contents
        only_root_or_me(&own).unwrap();
        write_named(&own.join("link.md"), b"new").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        assert!(
            fs::symlink_metadata(own.join("link.md"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // a link in a directory anyone can write is refused and its target left alone
        let open = d.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        symlink(&target, open.join("r.md")).unwrap();
        let e = write_named(&open.join("r.md"), b"evil")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a symbolic link in a directory others can write"),
            "{e}"
        );
        let e = open_named_dir(&open.join("r.md")).unwrap_err().to_string();
        assert!(e.contains("not followed"), "{e}");
        assert_ne!(fs::read(&target).unwrap(), b"evil");
        // a link of ours into that directory, where someone swapped the file for a link: the
        // rule applies again at every hop
        symlink(open.join("r.md"), own.join("via.md")).unwrap();
        let e = write_named(&own.join("via.md"), b"evil")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("open/r.md: a symbolic link in a directory others can write"),
            "{e}"
        );
        assert_ne!(fs::read(&target).unwrap(), b"evil");
    }
}
