//! CPU hogs: busy threads of integer arithmetic, no syscalls.

use std::sync::atomic::Ordering;

use super::{Ctl, gettid};

pub(super) fn hog_worker(c: &Ctl) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ gettid() as u64;
    while !c.done() {
        for _ in 0..50_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x ^= x >> 29;
        }
        std::hint::black_box(x);
        c.counters.hog_loops.fetch_add(1, Ordering::Relaxed);
    }
}
