//! The 0x092C sampler of a run with distributed clocks: how far each DC subdevice's copy of the
//! system time is from the reference's, read while the segment cycles and kept per subdevice
//! with one event per excursion above `[dc] sync_window_ns`. Apart from `dc` (the `[dc]` section
//! and the phase lock, which the configuration and the cycle import) because it runs above the
//! cycle: on the SDO/register queue of `acyclic`, into the measurements of `stats`.

/// ESC register 0x092C "System Time Difference" (ESC datasheet section II, "Distributed Clocks
/// Time Loop Control Unit"): bits 30..0 the mean |local copy − received time|, bit 31 set when
/// the local copy is smaller than the received time. Returned signed: negative = the device's
/// copy of the system time is behind the reference.
pub const SYSTEM_TIME_DIFFERENCE: u16 = 0x092c;

/// 0x092C decoded (sign-magnitude, not two's complement).
pub fn decode_system_time_difference(raw: u32) -> i32 {
    let magnitude = (raw & 0x7fff_ffff) as i32;
    if raw & 0x8000_0000 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// How often the sampler reads 0x092C of every DC subdevice.
pub const SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The 0x092C sampler: a thread reading the system time difference of every DC subdevice
/// through the SDO/register queue (served by the cyclic thread in its acyclic budget, so the
/// reads never delay a cyclic frame), keeping the last and worst value per subdevice in
/// [`crate::stats::DcLive`], and raising one event per excursion above the sync window.
pub struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Start sampling for a run: positions come from `live.dc` (set at each bring-up),
    /// events go to `events`.
    pub fn spawn(
        client: std::sync::Arc<crate::acyclic::SdoClient>,
        live: std::sync::Arc<crate::stats::Live>,
        sync_window_ns: u32,
        mut events: impl FnMut(crate::stats::Event) + Send + 'static,
    ) -> std::io::Result<Sampler> {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("rtcat-dc-sample".into())
            .spawn(move || {
                let mut positions = Vec::new();
                while !stop2.load(Ordering::Acquire) {
                    let next = std::time::Instant::now() + SAMPLE_INTERVAL;
                    if live.dc.enabled.load(Ordering::Relaxed) == 1
                        && live.recovering.load(Ordering::Relaxed) == 0
                    {
                        positions.clear();
                        positions.extend(live.dc.subdevices().iter().map(|d| d.position));
                        for &p in &positions {
                            let Ok(d) = client.read_register(
                                p,
                                SYSTEM_TIME_DIFFERENCE,
                                4,
                                SAMPLE_INTERVAL / 2,
                            ) else {
                                // Not cycling (recovery) or the queue is busy: next round.
                                continue;
                            };
                            let b = d.as_slice();
                            if b.len() < 4 {
                                continue;
                            }
                            let ns = decode_system_time_difference(u32::from_le_bytes([
                                b[0], b[1], b[2], b[3],
                            ]));
                            let cycle = live.cycles.load(Ordering::Relaxed);
                            if let Some(kind) = record_sample(&live.dc, p, ns, sync_window_ns) {
                                events(crate::stats::Event {
                                    unix_ns: crate::clock::unix_ns(),
                                    cycle,
                                    kind,
                                });
                            }
                        }
                    }
                    let now = std::time::Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                }
            })?;
        Ok(Sampler {
            stop,
            thread: Some(thread),
        })
    }

    /// Stop the thread and wait for it.
    pub fn finish(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Keep one 0x092C sample of `position`: last, worst, the window state; returns the event of
/// an excursion starting or ending (one per excursion, not one per sample).
pub fn record_sample(
    dc: &crate::stats::DcLive,
    position: u16,
    ns: i32,
    sync_window_ns: u32,
) -> Option<crate::stats::EventKind> {
    use crate::stats::EventKind;
    let mut subs = dc.subdevices.lock().unwrap_or_else(|p| p.into_inner());
    let s = subs.iter_mut().find(|s| s.position == position)?;
    s.last_ns = Some(ns);
    if s.worst_ns
        .is_none_or(|w| ns.unsigned_abs() > w.unsigned_abs())
    {
        s.worst_ns = Some(ns);
    }
    let outside = ns.unsigned_abs() > sync_window_ns;
    if outside == s.outside {
        return None;
    }
    s.outside = outside;
    if outside {
        dc.sync_window_violations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(EventKind::SyncWindow { position, ns })
    } else {
        Some(EventKind::SyncWindowBack { position, ns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_time_difference_is_sign_magnitude() {
        assert_eq!(decode_system_time_difference(0), 0);
        assert_eq!(decode_system_time_difference(25), 25);
        assert_eq!(decode_system_time_difference(0x8000_0019), -25);
        assert_eq!(decode_system_time_difference(0x7fff_ffff), i32::MAX);
        assert_eq!(decode_system_time_difference(0xffff_ffff), -i32::MAX);
        // Not two's complement: 0xFFFF_FFE7 (-25 as i32) is a magnitude of 2^31 - 25.
        assert_eq!(decode_system_time_difference(0xffff_ffe7), -0x7fff_ffe7);
    }

    #[test]
    fn one_event_per_excursion() {
        let dc = crate::stats::DcLive::default();
        dc.set_segment(true, &[0, 2]);
        let mut events = Vec::new();
        for (p, ns) in [
            (0, 10),
            (2, -30),
            (0, 1500),
            (0, 2000),
            (0, -1200),
            (0, 20),
            (0, 5),
        ] {
            events.extend(record_sample(&dc, p, ns, 1000));
        }
        assert_eq!(
            events,
            [
                crate::stats::EventKind::SyncWindow {
                    position: 0,
                    ns: 1500
                },
                crate::stats::EventKind::SyncWindowBack {
                    position: 0,
                    ns: 20
                },
            ]
        );
        assert_eq!(
            dc.sync_window_violations
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        let s = dc.subdevices();
        assert_eq!((s[0].last_ns, s[0].worst_ns), (Some(5), Some(2000)));
        assert_eq!((s[1].last_ns, s[1].worst_ns), (Some(-30), Some(-30)));
        // A position that is not a DC subdevice is ignored.
        assert_eq!(record_sample(&dc, 1, 5000, 1000), None);
    }
}
