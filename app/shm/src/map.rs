//! A shared mapping and the only ways this crate touches it: atomics at aligned offsets inside
//! the mapping. Other processes write the same memory concurrently, so plain loads and stores
//! (or `&[u8]` over the mapping) would be data races; relaxed atomic words cost the same on
//! x86-64 and arm64 and keep the accesses defined.

use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};

/// A mapped object, unmapped on drop.
pub(crate) struct Map {
    ptr: NonNull<u8>,
    len: usize,
    /// Its entry in the SIGBUS guard, if guarded.
    guard: Option<usize>,
}

/// Mappings whose SIGBUS is absorbed. A process with write access to a shared-memory object can
/// shrink it (ftruncate); the next access of the master to a page beyond the new end then
/// raises SIGBUS (mmap(2)), which would kill the master without its shutdown sequence. The
/// handler replaces the whole guarded mapping with zeroed anonymous memory at the same address
/// (MAP_FIXED) and returns, so the faulting access is retried against it and succeeds; the map
/// reports [`Map::truncated`]. Everything read from the mapping is untrusted input already, so
/// zeros are just one more garbage content.
const GUARDS: usize = 16;
static GUARD_START: [AtomicUsize; GUARDS] = [const { AtomicUsize::new(0) }; GUARDS];
static GUARD_LEN: [AtomicUsize; GUARDS] = [const { AtomicUsize::new(0) }; GUARDS];
static GUARD_HIT: [AtomicBool; GUARDS] = [const { AtomicBool::new(false) }; GUARDS];
/// The SIGBUS action before ours: restored for a fault outside our mappings.
static PREVIOUS: OnceLock<nix::sys::signal::SigAction> = OnceLock::new();

extern "C" fn on_sigbus(
    _sig: nix::libc::c_int,
    info: *mut nix::libc::siginfo_t,
    _: *mut nix::libc::c_void,
) {
    use nix::libc;
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let addr = unsafe { (*info).si_addr() } as usize;
    for k in 0..GUARDS {
        let (start, len) = (
            GUARD_START[k].load(Ordering::Acquire),
            GUARD_LEN[k].load(Ordering::Acquire),
        );
        if start != 0 && addr >= start && addr - start < len {
            // SAFETY: replaces our own mapping (same address and length) with anonymous memory;
            // mmap is a plain system call, safe in a signal handler on Linux.
            let p = unsafe {
                libc::mmap(
                    start as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                GUARD_HIT[k].store(true, Ordering::Release);
                return;
            }
        }
    }
    // Not ours: the previous action; returning repeats the fault under it.
    if let Some(old) = PREVIOUS.get() {
        // SAFETY: restores the action that was installed before ours.
        let _ = unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGBUS, old) };
    }
}

fn install_guard() {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let act = SigAction::new(
            SigHandler::SigAction(on_sigbus),
            SaFlags::SA_SIGINFO | SaFlags::SA_ONSTACK,
            SigSet::empty(),
        );
        // SAFETY: the handler only loads atomics, calls mmap and sigaction.
        if let Ok(old) = unsafe { sigaction(Signal::SIGBUS, &act) } {
            let _ = PREVIOUS.set(old);
        }
    });
}

// SAFETY: the mapping is only accessed through atomics.
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    /// Map `len` bytes of `fd`, shared, read-write or read-only.
    pub(crate) fn new(fd: &std::os::fd::OwnedFd, len: usize, writable: bool) -> nix::Result<Map> {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap};
        let len_nz = std::num::NonZeroUsize::new(len).ok_or(nix::errno::Errno::EINVAL)?;
        let prot = if writable {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        // SAFETY: a fresh shared mapping of an fd we hold; nothing else aliases it in Rust.
        let p = unsafe { mmap(None, len_nz, prot, MapFlags::MAP_SHARED, fd, 0)? };
        Ok(Map {
            ptr: p.cast(),
            len,
            guard: None,
        })
    }

    /// [`Map::new`], writable, with its SIGBUS absorbed (the master's mappings: a client that
    /// shrinks the object must not kill it). Unguarded when all guard entries are in use.
    pub(crate) fn new_guarded(fd: &std::os::fd::OwnedFd, len: usize) -> nix::Result<Map> {
        install_guard();
        let mut m = Map::new(fd, len, true)?;
        let start = m.ptr.as_ptr() as usize;
        for k in 0..GUARDS {
            if GUARD_START[k]
                .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                GUARD_HIT[k].store(false, Ordering::Relaxed);
                GUARD_LEN[k].store(len, Ordering::Release);
                m.guard = Some(k);
                break;
            }
        }
        Ok(m)
    }

    /// The object was shrunk under this mapping: it is anonymous memory now, nobody else's.
    pub(crate) fn truncated(&self) -> bool {
        self.guard
            .is_some_and(|k| GUARD_HIT[k].load(Ordering::Acquire))
    }

    #[inline]
    fn at<T>(&self, off: usize) -> *mut T {
        let n = std::mem::size_of::<T>();
        // The offsets come from a Geometry checked against the mapping: this only fires on a
        // bug of this crate, never on the object's contents.
        assert!(
            off.checked_add(n).is_some_and(|e| e <= self.len) && off.is_multiple_of(n),
            "shm access at {off} (+{n}) outside the {}-byte mapping or misaligned",
            self.len
        );
        // SAFETY: in bounds (checked above).
        unsafe { self.ptr.as_ptr().add(off).cast() }
    }

    #[inline]
    pub(crate) fn u8(&self, off: usize) -> &AtomicU8 {
        // SAFETY: in bounds and aligned; the mapping lives as long as &self.
        unsafe { AtomicU8::from_ptr(self.at(off)) }
    }

    #[inline]
    pub(crate) fn u16(&self, off: usize) -> &AtomicU16 {
        // SAFETY: as above.
        unsafe { AtomicU16::from_ptr(self.at(off)) }
    }

    #[inline]
    pub(crate) fn u32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { AtomicU32::from_ptr(self.at(off)) }
    }

    #[inline]
    pub(crate) fn u64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: as above.
        unsafe { AtomicU64::from_ptr(self.at(off)) }
    }

    /// The words `off..off + 8 * n`, bounds and alignment checked once.
    #[inline]
    fn words(&self, off: usize, n: usize) -> &[AtomicU64] {
        assert!(
            off.is_multiple_of(8)
                && n.checked_mul(8)
                    .and_then(|b| b.checked_add(off))
                    .is_some_and(|e| e <= self.len),
            "shm words at {off} (x{n}) outside the {}-byte mapping or misaligned",
            self.len
        );
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned); AtomicU64 has the
        // layout of u64; the mapping lives as long as &self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off).cast::<AtomicU64>(), n) }
    }

    /// Store `src` at the 8-aligned `off` as relaxed words; the last word is zero-padded (the
    /// areas are padded to 8 bytes in the format).
    #[inline]
    pub(crate) fn store_bytes(&self, off: usize, src: &[u8]) {
        let words = self.words(off, src.len().div_ceil(8));
        let mut chunks = src.chunks_exact(8);
        for (wd, c) in words.iter().zip(&mut chunks) {
            wd.store(
                u64::from_le_bytes(c.try_into().expect("8 bytes")),
                Ordering::Relaxed,
            );
        }
        let r = chunks.remainder();
        if !r.is_empty() {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(r);
            words[words.len() - 1].store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
    }

    /// Load `dst.len()` bytes at the 8-aligned `off` as relaxed words (the area is padded to 8).
    #[inline]
    pub(crate) fn load_bytes(&self, off: usize, dst: &mut [u8]) {
        let words = self.words(off, dst.len().div_ceil(8));
        let mut chunks = dst.chunks_exact_mut(8);
        for (wd, c) in words.iter().zip(&mut chunks) {
            c.copy_from_slice(&wd.load(Ordering::Relaxed).to_le_bytes());
        }
        let r = chunks.into_remainder();
        if !r.is_empty() {
            let w = words[words.len() - 1].load(Ordering::Relaxed).to_le_bytes();
            let n = r.len();
            r.copy_from_slice(&w[..n]);
        }
    }

    /// The bytes `off..off + n` as atomics, bounds checked once.
    #[inline]
    pub(crate) fn bytes(&self, off: usize, n: usize) -> &[AtomicU8] {
        assert!(
            off.checked_add(n).is_some_and(|e| e <= self.len),
            "shm bytes at {off} (+{n}) outside the {}-byte mapping",
            self.len
        );
        // SAFETY: in bounds; AtomicU8 has the layout of u8.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off).cast::<AtomicU8>(), n) }
    }

    /// Load bytes at any offset (the header, the layout JSON), byte by byte.
    pub(crate) fn load_unaligned(&self, off: usize, dst: &mut [u8]) {
        for (i, b) in dst.iter_mut().enumerate() {
            *b = self.u8(off + i).load(Ordering::Relaxed);
        }
    }

    /// Store bytes at any offset, byte by byte (creation only).
    pub(crate) fn store_unaligned(&self, off: usize, src: &[u8]) {
        for (i, b) in src.iter().enumerate() {
            self.u8(off + i).store(*b, Ordering::Relaxed);
        }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        if let Some(k) = self.guard {
            GUARD_LEN[k].store(0, Ordering::Release);
            GUARD_START[k].store(0, Ordering::Release);
        }
        // SAFETY: our own mapping, not used after this.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), self.len) };
    }
}
