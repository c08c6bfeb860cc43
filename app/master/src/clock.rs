//! CLOCK_MONOTONIC time and absolute-deadline sleeps, without allocation or locks.

/// Monotonic time in nanoseconds.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleep until the absolute monotonic time `deadline_ns` (TIMER_ABSTIME), retrying on EINTR so a
/// signal never shortens a period: the wake is always at or after the deadline.
#[inline]
pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: valid timespec; a null remainder is allowed with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// Wall-clock time (ns since the Unix epoch), for timestamps in results.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_until_never_wakes_early() {
        for _ in 0..20 {
            let d = now_ns() + 200_000;
            sleep_until(d);
            assert!(now_ns() >= d);
        }
        // A deadline in the past returns at once.
        let t = now_ns();
        sleep_until(t - 1_000_000);
        assert!(now_ns() - t < 50_000_000);
    }
}
