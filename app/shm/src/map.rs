//! A shared mapping and the only ways this crate touches it: atomics at aligned offsets inside
//! the mapping. Other processes write the same memory concurrently, so plain loads and stores
//! (or `&[u8]` over the mapping) would be data races; relaxed atomic words cost the same on
//! x86-64 and arm64 and keep the accesses defined.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};

/// A mapped object, unmapped on drop.
pub(crate) struct Map {
    ptr: NonNull<u8>,
    len: usize,
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
        Ok(Map { ptr: p.cast(), len })
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
        // SAFETY: our own mapping, not used after this.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), self.len) };
    }
}

/// Open flags and helpers shared by both sides.
pub(crate) fn shm_path(name: &str) -> String {
    format!("/{name}")
}
