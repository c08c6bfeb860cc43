//! A counting global allocator for the tests that prove the cyclic thread allocates nothing:
//! it counts per thread (the thread sets [`TRACK`]). Inline, the in-process simulator runs
//! inside the cyclic thread's frame send (its servers allocate, as a device's firmware may: it
//! is not the master): with [`SPLIT_SIM`] an allocation whose stack passes through `ecsim::`
//! is counted apart (the stack is captured with counting off, so the capture is not counted).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counts the allocations of the threads that switched [`TRACK`] on; the test declares it its
/// `#[global_allocator]`.
pub struct Counting;

thread_local! {
    pub static TRACK: Cell<bool> = const { Cell::new(false) };
}
pub static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Allocations inside the simulator (inline mode), not counted.
pub static SIM_ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Count simulator allocations apart (inline mode) instead of counting everything.
pub static SPLIT_SIM: AtomicBool = AtomicBool::new(false);
/// The stack of the first counted allocation, for the failure message.
pub static FIRST: Mutex<Option<String>> = Mutex::new(None);

fn count() {
    if !TRACK.with(|t| t.get()) {
        return;
    }
    TRACK.with(|t| t.set(false));
    let stack = std::backtrace::Backtrace::force_capture().to_string();
    if SPLIT_SIM.load(Ordering::Relaxed) && stack.contains("ecsim::") {
        SIM_ALLOCS.fetch_add(1, Ordering::Relaxed);
    } else {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        let mut f = FIRST.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(stack);
        }
    }
    TRACK.with(|t| t.set(true));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(p, l, n) }
    }
}
