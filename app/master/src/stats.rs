//! Measurements of the cyclic thread: HdrHistograms (ns, 1 ns .. 60 s, 3 significant digits,
//! saturating) and counters, plus the live view the status thread reads.

use hdrhistogram::Histogram;
#[cfg(test)]
use rtcat_results::HDR_HIGHEST_NS;
use rtcat_results::{LatencyStats, new_histogram};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Everything one run measured. Owned by the cyclic thread while it runs.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Wake lateness per cycle (ns).
    pub wake: Histogram<u64>,
    /// Execution time per cycle, wake to end (ns).
    pub exec: Histogram<u64>,
    /// Round trip, first frame out to last frame in (ns).
    pub rtt: Histogram<u64>,
    /// Cycles run.
    pub cycles: u64,
    /// Cycles that ended after the next deadline.
    pub missed_deadlines: u64,
    /// Periods skipped to catch up.
    pub skipped_periods: u64,
    /// Cycles with a wrong working counter.
    pub wkc_mismatches: u64,
    /// Cycles whose frames did not come back in time.
    pub frames_lost: u64,
    /// Cycles with a subdevice not in OP.
    pub not_op_cycles: u64,
    /// Cycles whose inputs did not echo the outputs (simulated segment only).
    pub data_errors: u64,
    /// Recoveries that brought the segment back.
    pub recoveries: u64,
    /// Recovery attempts that failed.
    pub failed_recoveries: u64,
    /// |phase error| of each DC cycle against the SYNC0 grid (ns; empty without DC).
    pub phase: Histogram<u64>,
    /// Smallest signed phase error (ns; negative = the frame passed the reference early).
    pub phase_min_ns: i64,
    /// Largest signed phase error (ns).
    pub phase_max_ns: i64,
    /// Time in OP and outages, per subdevice and for the segment.
    pub availability: crate::availability::Availability,
    /// Devices on the segment where the configuration places none.
    pub unexpected: Unexpected,
}

/// Devices on the segment where the configured order has none (a device plugged into a free
/// port while the line runs; never driven): what the recovery worker's count last found
/// ([`EventKind::UnexpectedDevices`]) and the most it found in the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unexpected {
    /// How many now (0 after every bring-up until the worker counts them again).
    pub now: u16,
    /// The first one's position (meaningful when `now` > 0).
    pub first: u16,
    /// The most at any time of the run.
    pub max: u16,
    /// Times the number changed (each an `unexpected_devices` event).
    pub changes: u64,
}

impl Unexpected {
    /// The worker's finding: `devices` from position `first`.
    #[inline]
    pub fn found(&mut self, devices: u16, first: u16) {
        self.now = devices;
        self.first = first;
        self.max = self.max.max(devices);
        self.changes += 1;
    }

    /// A new bring-up: nothing known until the worker counts again.
    pub fn new_segment(&mut self) {
        self.now = 0;
        self.first = 0;
    }

    /// Packed for [`Live::unexpected`]: now, first, max (16 bits each).
    fn pack(&self) -> u64 {
        u64::from(self.now) << 32 | u64::from(self.first) << 16 | u64::from(self.max)
    }

    /// What [`Live::unexpected`] holds, unpacked (`changes` is not carried).
    pub fn unpack(v: u64) -> Unexpected {
        Unexpected {
            now: (v >> 32) as u16,
            first: (v >> 16) as u16,
            max: v as u16,
            changes: 0,
        }
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// Empty histograms and counters.
    pub fn new() -> Self {
        Recorder {
            wake: new_histogram(),
            exec: new_histogram(),
            rtt: new_histogram(),
            cycles: 0,
            missed_deadlines: 0,
            skipped_periods: 0,
            wkc_mismatches: 0,
            frames_lost: 0,
            not_op_cycles: 0,
            data_errors: 0,
            recoveries: 0,
            failed_recoveries: 0,
            phase: new_histogram(),
            phase_min_ns: 0,
            phase_max_ns: 0,
            availability: Default::default(),
            unexpected: Unexpected::default(),
        }
    }

    /// Record one DC cycle's signed phase error (allocation-free, saturating).
    #[inline]
    pub fn record_phase(&mut self, error_ns: i64) {
        if self.phase.is_empty() {
            self.phase_min_ns = error_ns;
            self.phase_max_ns = error_ns;
        } else {
            self.phase_min_ns = self.phase_min_ns.min(error_ns);
            self.phase_max_ns = self.phase_max_ns.max(error_ns);
        }
        self.phase.saturating_record(error_ns.unsigned_abs());
    }

    /// |phase error| percentiles (None: no DC cycle).
    pub fn phase_stats(&self) -> Option<LatencyStats> {
        (!self.phase.is_empty()).then(|| LatencyStats::from_histogram(&self.phase))
    }

    /// Record one cycle's timings. Saturating: a value beyond 60 s is clamped, never lost.
    #[inline]
    pub fn record(&mut self, wake_ns: u64, exec_ns: u64, rtt_ns: Option<u64>) {
        self.cycles += 1;
        self.wake.saturating_record(wake_ns);
        self.exec.saturating_record(exec_ns);
        if let Some(r) = rtt_ns {
            self.rtt.saturating_record(r);
        }
    }

    /// Wake lateness percentiles.
    pub fn wake_stats(&self) -> LatencyStats {
        LatencyStats::from_histogram(&self.wake)
    }

    /// Execution time percentiles.
    pub fn exec_stats(&self) -> LatencyStats {
        LatencyStats::from_histogram(&self.exec)
    }

    /// Round-trip percentiles (None: none measured).
    pub fn rtt_stats(&self) -> Option<LatencyStats> {
        (!self.rtt.is_empty()).then(|| LatencyStats::from_histogram(&self.rtt))
    }
}

/// Counters the cyclic thread publishes for the status thread (relaxed atomics, no locks).
#[derive(Debug, Default)]
pub struct Live {
    /// Cycles run.
    pub cycles: AtomicU64,
    /// Missed deadlines.
    pub missed: AtomicU64,
    /// Working counter mismatches.
    pub wkc_mismatches: AtomicU64,
    /// Lost frames.
    pub frames_lost: AtomicU64,
    /// Recoveries.
    pub recoveries: AtomicU64,
    /// Maxima since the status thread last read them (swapped to 0 on read).
    pub wake_max_ns: AtomicU64,
    /// Largest execution time since the last read (ns).
    pub exec_max_ns: AtomicU64,
    /// 1 while cycling in OP with a healthy segment, 0 otherwise.
    pub healthy: AtomicU64,
    /// 1 while the master re-initialises the segment.
    pub recovering: AtomicU64,
    /// Received frames not taken as replies (all reasons), and frames the link failed to send:
    /// copies of the bus counters, refreshed every cycle and after each bring-up.
    pub rx_rejected: AtomicU64,
    /// Frames the link failed to send.
    pub send_errors: AtomicU64,
    /// Periods skipped by the catch-up policy (lags the recorder by at most one cycle).
    pub skipped: AtomicU64,
    /// The segment as last brought up (for checkpoints written while the run goes on).
    pub subdevices: AtomicU64,
    /// Process image bytes.
    pub pdi_bytes: AtomicU64,
    /// Expected working counter.
    pub expected_wkc: AtomicU64,
    /// Cycles with a subdevice not in OP.
    pub not_op_cycles: AtomicU64,
    /// Recovery attempts that failed.
    pub failed_recoveries: AtomicU64,
    /// Length of the last cycle's first frame as sent (bytes): the size the floor benchmark
    /// pings with (a copy of the bus counter, refreshed like `rx_rejected`).
    pub cycle_frame_bytes: AtomicU64,
    /// Distributed clocks: the phase lock (cyclic thread) and 0x092C (the sampler).
    pub dc: DcLive,
    /// Time in OP and outages, per subdevice and for the segment.
    pub availability: crate::availability::LiveAvailability,
    /// [`Recorder::unexpected`] as last published ([`Unexpected::unpack`]).
    pub unexpected: AtomicU64,
}

/// The DC part of [`Live`].
#[derive(Debug, Default)]
pub struct DcLive {
    /// 1 while the segment runs with distributed clocks (set at bring-up).
    pub enabled: AtomicU64,
    /// The phase lock's state: 0 locking, 1 locked, 2 lost ([`crate::phase_lock::LockState`]).
    pub lock: AtomicU64,
    /// Drift of the reference clock against CLOCK_MONOTONIC the lock has learned, ppb.
    pub drift_ppb: AtomicI64,
    /// The last cycle's phase error, ns (signed).
    pub phase_error_ns: AtomicI64,
    /// Times a DC subdevice's |0x092C| went above `[dc] sync_window_ns` (one per excursion).
    pub sync_window_violations: AtomicU64,
    /// Per DC subdevice, the system time difference: written by the bring-up (positions) and
    /// the sampler, never by the cyclic thread.
    pub subdevices: Mutex<Vec<DcSubdevice>>,
}

/// One DC subdevice's system time difference (0x092C) as sampled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DcSubdevice {
    /// Position.
    pub position: u16,
    /// Last value read, ns (signed: negative = the local copy is behind the reference).
    pub last_ns: Option<i32>,
    /// The value of largest magnitude read since the bring-up.
    pub worst_ns: Option<i32>,
    /// Currently above the sync window.
    pub outside: bool,
}

impl DcLive {
    /// Publish one DC cycle from the cyclic thread (relaxed stores).
    #[inline]
    pub fn publish(&self, lock: &crate::phase_lock::PhaseLock) {
        let state = match lock.state() {
            crate::phase_lock::LockState::Locking => 0,
            crate::phase_lock::LockState::Locked => 1,
            crate::phase_lock::LockState::Lost => 2,
        };
        self.lock.store(state, Ordering::Relaxed);
        self.drift_ppb
            .store((lock.drift_ppm() * 1000.0) as i64, Ordering::Relaxed);
        self.phase_error_ns
            .store(lock.last_error_ns(), Ordering::Relaxed);
    }

    /// The lock state as published.
    pub fn lock_state(&self) -> crate::phase_lock::LockState {
        match self.lock.load(Ordering::Relaxed) {
            1 => crate::phase_lock::LockState::Locked,
            2 => crate::phase_lock::LockState::Lost,
            _ => crate::phase_lock::LockState::Locking,
        }
    }

    /// A bring-up: DC on or off, the DC subdevices' positions (their samples start anew).
    pub fn set_segment(&self, enabled: bool, positions: &[u16]) {
        self.enabled.store(u64::from(enabled), Ordering::Relaxed);
        self.lock.store(0, Ordering::Relaxed);
        let mut s = self.subdevices.lock().unwrap_or_else(|p| p.into_inner());
        s.clear();
        s.extend(positions.iter().map(|&position| DcSubdevice {
            position,
            ..DcSubdevice::default()
        }));
    }

    /// A DC subdevice that joined the running segment (a member of an optional group absent
    /// at the bring-up): sampled from now on, in position order.
    pub fn add(&self, position: u16) {
        let mut s = self.subdevices.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(at) = s.binary_search_by_key(&position, |d| d.position) {
            s.insert(
                at,
                DcSubdevice {
                    position,
                    ..DcSubdevice::default()
                },
            );
        }
    }

    /// A copy of the per-subdevice samples.
    pub fn subdevices(&self) -> Vec<DcSubdevice> {
        self.subdevices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Live {
    #[inline]
    /// Publish one cycle (relaxed stores, no allocation).
    pub fn publish(&self, rec: &Recorder, wake: u64, exec: u64, healthy: bool) {
        self.cycles.store(rec.cycles, Ordering::Relaxed);
        self.missed.store(rec.missed_deadlines, Ordering::Relaxed);
        self.wkc_mismatches
            .store(rec.wkc_mismatches, Ordering::Relaxed);
        self.frames_lost.store(rec.frames_lost, Ordering::Relaxed);
        self.skipped.store(rec.skipped_periods, Ordering::Relaxed);
        self.not_op_cycles
            .store(rec.not_op_cycles, Ordering::Relaxed);
        self.failed_recoveries
            .store(rec.failed_recoveries, Ordering::Relaxed);
        self.wake_max_ns.fetch_max(wake, Ordering::Relaxed);
        self.exec_max_ns.fetch_max(exec, Ordering::Relaxed);
        self.healthy.store(u64::from(healthy), Ordering::Relaxed);
        self.unexpected
            .store(rec.unexpected.pack(), Ordering::Relaxed);
    }

    /// The devices the configuration does not place, as last published.
    pub fn unexpected(&self) -> Unexpected {
        Unexpected::unpack(self.unexpected.load(Ordering::Relaxed))
    }
}

impl Live {
    /// Publish the layout of a (re-)initialised segment (outside the cyclic path).
    pub fn set_layout(&self, subdevices: usize, pdi_bytes: usize, expected_wkc: u16) {
        self.subdevices.store(subdevices as u64, Ordering::Relaxed);
        self.pdi_bytes.store(pdi_bytes as u64, Ordering::Relaxed);
        self.expected_wkc
            .store(u64::from(expected_wkc), Ordering::Relaxed);
    }
}

/// One health event, produced in the cyclic thread, written out by the status thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Wall-clock time (ns since the epoch).
    pub unix_ns: u64,
    /// Cycle number.
    pub cycle: u64,
    /// What happened.
    pub kind: EventKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// What a health event says.
pub enum EventKind {
    /// The working counter left the expected value.
    WkcMismatch {
        /// Received.
        got: u16,
        /// Expected.
        expected: u16,
    },
    /// The working counter is back to the expected value.
    WkcRestored,
    /// No response within the response timeout.
    FrameLost,
    /// A subdevice's AL state changed (position, new state as ethercrab reports it).
    StateChange {
        /// Position.
        position: u16,
        /// New AL state code.
        state: u8,
    },
    /// The cycle ended after the next deadline; `skipped` periods were skipped.
    MissedDeadline {
        /// Periods skipped.
        skipped: u64,
    },
    /// Inputs did not echo the outputs (simulated segment).
    DataMismatch {
        /// Position of the first subdevice reported.
        position: u16,
    },
    /// Re-initialisation started.
    RecoveryStarted {
        /// Consecutive bad cycles.
        bad_cycles: u32,
    },
    /// Re-initialisation succeeded.
    RecoveryDone {
        /// Attempts it took.
        attempts: u32,
    },
    /// One re-initialisation attempt failed.
    RecoveryFailed {
        /// Attempt number.
        attempt: u32,
    },
    /// Service start: the segment could not be brought up yet (retried).
    StartFailed {
        /// Attempt number.
        attempt: u32,
    },
    /// The DC phase lock changed state (locking after a bring-up, locked, lost).
    DcLock {
        /// The new state.
        state: crate::phase_lock::LockState,
        /// The phase error of that cycle, ns.
        error_ns: i64,
    },
    /// A DC subdevice's system time difference (0x092C) went above `[dc] sync_window_ns`.
    SyncWindow {
        /// Position.
        position: u16,
        /// The value read, ns (signed).
        ns: i32,
    },
    /// It is back inside the window.
    SyncWindowBack {
        /// Position.
        position: u16,
        /// The value read, ns (signed).
        ns: i32,
    },
    /// End of the run: outputs zeroed, SAFE-OP, INIT (verified by ethercrab), or not.
    Shutdown {
        /// Whether INIT was reached.
        reached_init: bool,
    },
    /// A CoE emergency from a subdevice (ETG.1000.6 §5.6.4; raised off the real-time thread by
    /// whoever reads the mailboxes).
    Emergency {
        /// Position of the subdevice.
        position: u16,
        /// Error code (CiA 301 §7.2.7.1).
        code: u16,
        /// Error register (0x1001).
        register: u8,
        /// Manufacturer-specific data.
        data: [u8; 5],
    },
    /// A writer of the shared-memory process image attached, went stale (its outputs at their
    /// safe values), resumed or detached.
    ShmWriter {
        /// Its slot.
        slot: u8,
        /// Its pid as it wrote it.
        pid: u32,
        /// Its name, NUL-padded.
        name: [u8; 32],
        /// What happened.
        change: ShmWriterChange,
    },
    /// One subdevice left OP, came back, failed to, was refused, or gave up (`[health] recovery
    /// = "subdevice"`); the others cycled on.
    Subdevice {
        /// Its position.
        position: u16,
        /// What happened.
        change: crate::health::SubdeviceChange,
    },
    /// Devices on the segment that the configuration does not place (plugged in while it runs,
    /// at a free port or elsewhere than an optional group's place): never driven. `devices` 0:
    /// none any more.
    UnexpectedDevices {
        /// How many.
        devices: u16,
        /// The first one's position.
        first: u16,
    },
    /// A re-initialisation found another topology than the run started with and refused it
    /// (`found`/`expected`: vendor, product, revision; None: no device there).
    TopologyChanged {
        /// First position that differs.
        position: u16,
        /// What answers there now.
        found: Option<(u32, u32, u32)>,
        /// What the run started with.
        expected: Option<(u32, u32, u32)>,
        /// The same identity with another station alias (0x0012): found, started with.
        alias: Option<(u16, u16)>,
    },
    /// A client shrank the shared image (ftruncate): the master's mapping became private
    /// memory (no SIGBUS), clients see nothing new until the next bring-up re-creates it.
    ShmTruncated,
}

/// What happened to a shared-memory writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShmWriterChange {
    /// Attached.
    Attached,
    /// Heartbeat stopped: its outputs are at their safe values.
    Stale,
    /// Heartbeat back.
    Resumed,
    /// Detached.
    Detached,
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventKind::WkcMismatch { got, expected } => {
                write!(f, "wkc_mismatch got={got} expected={expected}")
            }
            EventKind::WkcRestored => write!(f, "wkc_restored"),
            EventKind::FrameLost => write!(f, "frame_lost"),
            EventKind::StateChange { position, state } => {
                write!(
                    f,
                    "state_change position={position} state={}",
                    state_name(*state)
                )
            }
            EventKind::MissedDeadline { skipped } => {
                write!(f, "missed_deadline skipped_periods={skipped}")
            }
            EventKind::DataMismatch { position } => write!(f, "data_mismatch position={position}"),
            EventKind::RecoveryStarted { bad_cycles } => {
                write!(f, "recovery_started bad_cycles={bad_cycles}")
            }
            EventKind::RecoveryDone { attempts } => write!(f, "recovery_done attempts={attempts}"),
            EventKind::RecoveryFailed { attempt } => write!(f, "recovery_failed attempt={attempt}"),
            EventKind::TopologyChanged {
                position,
                found,
                expected,
                alias,
            } => {
                let id = |i: &Option<(u32, u32, u32)>| match i {
                    Some((v, p, r)) => format!("{v:#010x}:{p:#010x}:{r:#010x}"),
                    None => "none".into(),
                };
                write!(
                    f,
                    "topology_changed position={position} found={} expected={}",
                    id(found),
                    id(expected)
                )?;
                match alias {
                    Some((a, e)) => write!(f, " alias={a:#06x} expected_alias={e:#06x}"),
                    None => Ok(()),
                }
            }
            EventKind::Subdevice { position, change } => {
                use crate::health::SubdeviceChange as C;
                let id = |(v, p, r): (u32, u32, u32)| format!("{v:#010x}:{p:#010x}:{r:#010x}");
                match change {
                    C::Lost { state } => write!(
                        f,
                        "subdevice_lost position={position} state={}",
                        state_name(*state)
                    ),
                    C::Back {
                        cause,
                        outage_ns,
                        attempts,
                        sync_error_limit,
                    } => {
                        write!(
                            f,
                            "subdevice_back position={position} outage_ms={:.1} \
                             attempts={attempts} cause={cause}",
                            *outage_ns as f64 / 1e6
                        )?;
                        match sync_error_limit {
                            Some(l) => write!(f, " sync_error_limit={l}"),
                            None => Ok(()),
                        }
                    }
                    C::Failed { attempt } => {
                        write!(
                            f,
                            "subdevice_recovery_failed position={position} attempt={attempt}"
                        )
                    }
                    C::Refused {
                        found,
                        expected,
                        alias,
                    } => {
                        write!(
                            f,
                            "subdevice_refused position={position} found={} expected={}",
                            id(*found),
                            id(*expected)
                        )?;
                        match alias {
                            Some((a, e)) => write!(f, " alias={a:#06x} expected_alias={e:#06x}"),
                            None => Ok(()),
                        }
                    }
                    C::GaveUp => write!(f, "subdevice_gave_up position={position}"),
                    C::Parked { cause } => {
                        write!(f, "subdevice_parked position={position} cause={cause}")
                    }
                    C::Absent => write!(f, "subdevice_absent position={position}"),
                }
            }
            EventKind::StartFailed { attempt } => write!(f, "start_failed attempt={attempt}"),
            EventKind::UnexpectedDevices { devices, first } => {
                write!(
                    f,
                    "unexpected_devices count={devices} first_position={first}"
                )
            }
            EventKind::Emergency {
                position,
                code,
                register,
                data,
            } => {
                write!(
                    f,
                    "emergency position={position} code={code:#06x} error_register={register:#04x} \
                     data={:02x}{:02x}{:02x}{:02x}{:02x} text=\"{}\"",
                    data[0],
                    data[1],
                    data[2],
                    data[3],
                    data[4],
                    crate::cia402::error_text(*code)
                )
            }
            EventKind::DcLock { state, error_ns } => {
                write!(
                    f,
                    "dc_lock state={} phase_error_ns={error_ns}",
                    state.as_str()
                )
            }
            EventKind::SyncWindow { position, ns } => {
                write!(
                    f,
                    "dc_sync_window_exceeded position={position} diff_ns={ns}"
                )
            }
            EventKind::SyncWindowBack { position, ns } => {
                write!(
                    f,
                    "dc_sync_window_restored position={position} diff_ns={ns}"
                )
            }
            EventKind::ShmWriter {
                slot,
                pid,
                name,
                change,
            } => {
                let n = name.iter().position(|&c| c == 0).unwrap_or(name.len());
                let change = match change {
                    ShmWriterChange::Attached => "attached",
                    ShmWriterChange::Stale => "stale outputs=safe",
                    ShmWriterChange::Resumed => "resumed",
                    ShmWriterChange::Detached => "detached",
                };
                write!(
                    f,
                    "shm_writer {change} slot={slot} pid={pid} name={:?}",
                    String::from_utf8_lossy(&name[..n])
                )
            }
            EventKind::ShmTruncated => write!(
                f,
                "shm_truncated published=nothing (a client shrank the object; re-created at the \
                 next bring-up)"
            ),
            EventKind::Shutdown { reached_init } => {
                write!(
                    f,
                    "shutdown outputs=0 segment={}",
                    if *reached_init { "INIT" } else { "UNKNOWN" }
                )
            }
        }
    }
}

/// Name of an AL state code as ethercrab encodes `SubDeviceState`.
pub fn state_name(s: u8) -> &'static str {
    match s {
        0x01 => "INIT",
        0x02 => "PRE-OP",
        0x03 => "BOOT",
        0x04 => "SAFE-OP",
        0x08 => "OP",
        0x00 => "NONE",
        _ => "UNKNOWN",
    }
}

/// One per-cycle sample for the optional samples.csv.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Cycle number.
    pub cycle: u64,
    /// Wake lateness (ns).
    pub wake_ns: u64,
    /// Execution time (ns).
    pub exec_ns: u64,
    /// 0 when no round trip was measured.
    pub rtt_ns: u64,
    /// Working counter.
    pub wkc: u16,
    /// DC phase error, ns (signed; 0 without DC).
    pub phase_error_ns: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturating_record_keeps_huge_values() {
        let mut r = Recorder::new();
        r.record(1_000, 2_000, Some(3_000));
        r.record(u64::MAX / 2, 5, None);
        assert_eq!(r.cycles, 2);
        assert_eq!(r.wake.len(), 2);
        assert!(r.wake.max() >= HDR_HIGHEST_NS / 2);
        assert_eq!(r.rtt.len(), 1);
    }
}
