//! tmpfs write churn: one thread writing, truncating and deleting files in a private directory
//! under a tmpfs, never more than `--tmpfs-mb` MiB at a time; the directory is removed at the end.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, anyhow};

use super::{Ctl, TmpfsLoad};
use crate::error::usage;

/// Prefix of the private tmpfs directories (`<prefix><pid>-<seq>`).
pub const TMPFS_PREFIX: &str = "rtcat-load-";
/// `f_type` of a tmpfs (`TMPFS_MAGIC` in linux/magic.h).
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Sequence number of the private directories of this process.
static SEQ: AtomicU32 = AtomicU32::new(0);

/// Removes the private tmpfs directory when dropped.
pub(super) struct DirGuard(pub(super) PathBuf);
impl Drop for DirGuard {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Creates the private tmpfs directory after checking the filesystem and the space, and removes
/// directories left by load processes that no longer exist.
pub(super) fn prepare_tmpfs_dir(t: &TmpfsLoad) -> Result<DirGuard> {
    let st = nix::sys::statfs::statfs(&t.dir)
        .map_err(|e| usage(format!("--tmpfs-dir: {}: {e}", t.dir.display())))?;
    #[allow(clippy::unnecessary_cast)]
    if st.filesystem_type().0 as i64 != TMPFS_MAGIC {
        return Err(usage(format!(
            "--tmpfs-dir: {} is not a tmpfs",
            t.dir.display()
        )));
    }
    if let Ok(rd) = fs::read_dir(&t.dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(rest) = name.strip_prefix(TMPFS_PREFIX)
                && let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok())
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let vfs = nix::sys::statvfs::statvfs(&t.dir)
        .map_err(|e| usage(format!("--tmpfs-dir: {}: {e}", t.dir.display())))?;
    let free = vfs.blocks_available() as u64 * vfs.fragment_size() as u64;
    if (t.mib << 20) > free / 2 {
        return Err(usage(format!(
            "--tmpfs-mb: {} MiB is more than half of the free space on {} ({} MiB free)",
            t.mib,
            t.dir.display(),
            free >> 20
        )));
    }
    let dir = t.dir.join(format!(
        "{TMPFS_PREFIX}{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    // 0700 whatever the umask: /dev/shm is world-writable, and a link planted in a directory
    // others could write would be opened by the churn (as root in a ladder). A name taken by
    // someone else already (the pid is predictable) is an error, never reused.
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| usage(format!("--tmpfs-dir: cannot create {}: {e}", dir.display())))?;
        let guard = DirGuard(dir);
        fs::set_permissions(&guard.0, fs::Permissions::from_mode(0o700))
            .map_err(|e| anyhow!("--tmpfs-dir: {}: {e}", guard.0.display()))?;
        Ok(guard)
    }
}

pub(super) fn tmpfs_worker(c: &Ctl, dir: &Path, bytes: u64) {
    const FILE: u64 = 4 << 20;
    const CHUNK: usize = 64 << 10;
    let file_size = bytes.min(FILE);
    let nfiles = (bytes / file_size).max(1);
    let mut buf = vec![0u8; CHUNK];
    let mut pass: u8 = 0;
    let res = (|| -> Result<()> {
        while !c.done() {
            pass = pass.wrapping_add(1);
            buf.fill(pass);
            for i in 0..nfiles {
                let path = dir.join(format!("churn-{i}"));
                let mut f = {
                    use std::os::unix::fs::OpenOptionsExt;
                    fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .mode(0o600)
                        .custom_flags(libc::O_NOFOLLOW)
                        .open(&path)
                        .with_context(|| format!("tmpfs churn: {}", path.display()))?
                };
                let mut written = 0u64;
                while written < file_size {
                    if c.done() {
                        return Ok(());
                    }
                    let n = (file_size - written).min(CHUNK as u64) as usize;
                    f.write_all(&buf[..n])
                        .with_context(|| format!("tmpfs churn: {}", path.display()))?;
                    written += n as u64;
                    c.counters
                        .tmpfs_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                }
                c.counters.tmpfs_files.fetch_add(1, Ordering::Relaxed);
            }
            for i in 0..nfiles {
                let _ = fs::remove_file(dir.join(format!("churn-{i}")));
            }
        }
        Ok(())
    })();
    if let Err(e) = res {
        c.error(format!("{e:#}"));
    }
}
