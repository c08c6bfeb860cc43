//! Anonymous memory churn: map `--anon-mb` MiB, write every page, unmap, start again (page faults,
//! zeroing, TLB shootdowns).

use std::sync::atomic::Ordering;

use super::Ctl;

pub(super) fn anon_worker(c: &Ctl, bytes: usize) {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1);
    let mut pass: u8 = 0;
    while !c.done() {
        pass = pass.wrapping_add(1);
        // SAFETY: a fresh private anonymous mapping, written only within its length, unmapped below.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                c.error(format!(
                    "anon churn: mmap of {bytes} bytes failed: {}",
                    std::io::Error::last_os_error()
                ));
                return;
            }
            let base = p.cast::<u8>();
            let mut off = 0;
            let mut counted = 0;
            while off < bytes {
                let n = page.min(bytes - off);
                std::ptr::write_bytes(base.add(off), pass, n);
                off += n;
                if (off / page) % 256 == 0 {
                    c.counters
                        .anon_bytes
                        .fetch_add((off - counted) as u64, Ordering::Relaxed);
                    counted = off;
                    if c.done() {
                        break;
                    }
                }
            }
            c.counters
                .anon_bytes
                .fetch_add((off - counted) as u64, Ordering::Relaxed);
            libc::munmap(p, bytes);
        }
        c.counters.anon_passes.fetch_add(1, Ordering::Relaxed);
    }
}
