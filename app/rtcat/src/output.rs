//! Results, never lost: summary.json, the histograms, the human table, and (from the status
//! thread) events.log and samples.csv, all under one output directory.

use anyhow::{Context, Result};
use rtcat_master::stats::Recorder;
use rtcat_results::{self as summary, LatencyStats, Mode, Policy, Summary, SystemInfo, Wkc};
use safefs::Dir;
use std::fmt::Write as _;
use std::path::Path;

/// What a run knows about itself besides its recorder.
pub struct RunFacts {
    pub mode: Mode,
    pub interface: Option<String>,
    pub stage: Option<String>,
    pub started_at_unix_ns: u64,
    pub duration_s: f64,
    pub period_ns: u64,
    pub expected_wkc: Option<u32>,
    pub subdevices: u32,
    pub pdi_bytes: u32,
    pub system: crate::sysinfo::SystemSnapshot,
    pub rt: rtcat_master::master::RtApplied,
    pub stop: Option<summary::Stop>,
    pub bus: Option<summary::BusStats>,
    pub logging: Option<summary::LoggingHealth>,
    pub axes: Option<Vec<summary::AxisSummary>>,
    pub dc: Option<summary::DcSummary>,
}

/// The `dc` object of a run with distributed clocks: the cyclic thread's phase errors (`rec`),
/// the lock state and the 0x092C samples (`live`), with `[dc]` and the cycle period of the
/// configuration. None when the segment ran without DC.
pub fn dc_summary(
    rec: &Recorder,
    live: &rtcat_master::stats::Live,
    cfg: &rtcat_master::dc::DcConfig,
    period: rtcat_master::Period,
) -> Option<summary::DcSummary> {
    use std::sync::atomic::Ordering;
    let dc = &live.dc;
    if !cfg.enabled || (dc.enabled.load(Ordering::Relaxed) == 0 && rec.phase.is_empty()) {
        return None;
    }
    let state = dc.lock_state();
    Some(summary::DcSummary {
        sync0_period_ns: cfg.sync0_period(period).as_nanos(),
        sync0_shift_ns: cfg.sync0_shift_ns(period),
        lock_state: state.as_str().to_string(),
        locked: state == rtcat_master::dc::LockState::Locked,
        drift_ppm: dc.drift_ppb.load(Ordering::Relaxed) as f64 / 1000.0,
        phase_error_ns: LatencyStats::from_histogram(&rec.phase),
        phase_error_min_ns: rec.phase_min_ns,
        phase_error_max_ns: rec.phase_max_ns,
        sync_window_violations: dc.sync_window_violations.load(Ordering::Relaxed),
        sync_window_ns: cfg.sync_window_ns,
        subdevices: dc
            .subdevices()
            .iter()
            .map(|d| summary::DcSubdeviceSummary {
                position: d.position,
                last_ns: d.last_ns,
                worst_ns: d.worst_ns,
            })
            .collect(),
    })
}

pub fn build_summary(rec: &Recorder, f: &RunFacts) -> Summary {
    Summary {
        schema: summary::SUMMARY_SCHEMA.to_string(),
        rtcat_version: env!("CARGO_PKG_VERSION").to_string(),
        mode: f.mode,
        interface: f.interface.clone(),
        stage: f.stage.clone(),
        started_at_unix_ns: f.started_at_unix_ns,
        duration_s: f.duration_s,
        cycles: rec.cycles,
        period_ns: f.period_ns,
        wake_lateness_ns: rec.wake_stats(),
        exec_ns: rec.exec_stats(),
        rtt_ns: if f.mode == Mode::TimerOnly {
            None
        } else {
            rec.rtt_stats()
        },
        missed_deadlines: rec.missed_deadlines,
        skipped_periods: rec.skipped_periods,
        wkc: Wkc {
            expected: f.expected_wkc,
            mismatches: rec.wkc_mismatches,
        },
        frames_lost: rec.frames_lost,
        recoveries: rec.recoveries,
        subdevices: f.subdevices,
        pdi_bytes: f.pdi_bytes,
        system: SystemInfo {
            hostname: f.system.hostname.clone(),
            kernel_release: f.system.kernel_release.clone(),
            kernel_version: f.system.kernel_version.clone(),
            preempt_rt: f.system.preempt_rt,
            cmdline: f.system.cmdline.clone(),
            cpu: f.rt.cpu.map(|c| c as u32),
            txrx_cpu: f.rt.txrx_cpu.map(|c| c as u32),
            policy: if f.rt.policy == "SCHED_FIFO" {
                Policy::Fifo
            } else {
                Policy::Other
            },
            priority: f.rt.priority,
            no_rt: f.rt.no_rt,
            timer_slack_ns: f.rt.timer_slack_ns,
            governor: f.system.governor.clone(),
        },
        stop: f.stop.clone(),
        bus: f.bus.clone(),
        logging: f.logging.clone(),
        axes: f.axes.clone(),
        dc: f.dc.clone(),
        floor: None,
        availability: (f.mode != Mode::TimerOnly).then(|| availability(rec)),
        unexpected_devices: (f.mode != Mode::TimerOnly).then(|| unexpected_devices(rec)),
    }
}

/// `unexpected_devices` of the summary: the recovery worker's last count and the run's most.
fn unexpected_devices(rec: &Recorder) -> summary::UnexpectedDevices {
    let u = &rec.unexpected;
    summary::UnexpectedDevices {
        now: u.now,
        first_position: (u.now > 0).then_some(u.first),
        max: u.max,
        changes: u.changes,
    }
}

/// `availability` of the summary from the recorder's figures at the end of the run.
fn availability(rec: &Recorder) -> summary::AvailabilitySummary {
    let (subs, seg) = rec.availability.figures_at_last_cycle();
    summary::AvailabilitySummary {
        segment: availability_of(None, &seg),
        subdevices: subs
            .iter()
            .enumerate()
            .map(|(i, f)| availability_of(Some(i as u16), f))
            .collect(),
    }
}

/// One subdevice's (or the segment's) figures as `summary.json` has them.
pub fn availability_of(
    position: Option<u16>,
    f: &rtcat_master::availability::Figures,
) -> summary::Availability {
    summary::Availability {
        position,
        time_in_op_s: f.op_ns as f64 / 1e9,
        invalid_cycles: f.invalid_cycles,
        outages: f.outages,
        outage_total_ms: f.outage_ns as f64 / 1e6,
        outage_max_ms: f.outage_max_ns as f64 / 1e6,
    }
}

fn us(ns: f64) -> String {
    format!("{:.3}", ns / 1000.0)
}

/// The human table (µs, like the reference study's tables).
pub fn human_table(s: &Summary, rec: &Recorder) -> String {
    let mut t = String::new();
    let row = |t: &mut String, name: &str, l: &LatencyStats| {
        let _ = writeln!(
            t,
            "{name:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            us(l.min as f64),
            us(l.mean),
            us(l.p50 as f64),
            us(l.p99 as f64),
            us(l.p999 as f64),
            us(l.max as f64)
        );
    };
    let _ = writeln!(
        t,
        "rtcat {} — {} cycles of {} µs, mode {:?}{}{}",
        s.rtcat_version,
        s.cycles,
        s.period_ns / 1000,
        s.mode,
        s.interface
            .as_deref()
            .map(|i| format!(" on {i}"))
            .unwrap_or_default(),
        if s.system.no_rt {
            " (--no-rt: SCHED_OTHER, unpinned, NOT a real-time measurement)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        t,
        "kernel {} ({}), cycle thread {} prio {} on CPU {}, governor {}",
        s.system.kernel_release,
        if s.system.preempt_rt {
            "PREEMPT_RT"
        } else {
            "not RT"
        },
        if s.system.policy == Policy::Fifo {
            "SCHED_FIFO"
        } else {
            "SCHED_OTHER"
        },
        s.system.priority,
        s.system.cpu.map_or("any".into(), |c| c.to_string()),
        s.system.governor.as_deref().unwrap_or("n/a")
    );
    let _ = writeln!(
        t,
        "\n{:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "µs", "min", "mean", "p50", "p99", "p99.9", "max"
    );
    row(&mut t, "wake lateness", &s.wake_lateness_ns);
    row(&mut t, "execution", &s.exec_ns);
    if let Some(r) = &s.rtt_ns {
        row(&mut t, "round trip", r);
    }
    let _ = writeln!(
        t,
        "\nmissed deadlines {}  skipped periods {}  frames lost {}  WKC expected {} mismatches {}  \
         recoveries {}  data errors {}",
        s.missed_deadlines,
        s.skipped_periods,
        s.frames_lost,
        s.wkc.expected.map_or("-".into(), |w| w.to_string()),
        s.wkc.mismatches,
        s.recoveries,
        rec.data_errors
    );
    if let Some(a) = &s.availability {
        let line = |name: String, a: &summary::Availability| {
            format!(
                "{name:<16} in OP {:.3} s  invalid cycles {}  outages {} ({:.1} ms, longest {:.1} ms)",
                a.time_in_op_s, a.invalid_cycles, a.outages, a.outage_total_ms, a.outage_max_ms
            )
        };
        let _ = writeln!(t, "{}", line("segment".into(), &a.segment));
        // Every subdevice with an outage (all of them when there are few).
        for sd in a
            .subdevices
            .iter()
            .filter(|sd| sd.outages > 0 || a.subdevices.len() <= 8)
        {
            let _ = writeln!(
                t,
                "{}",
                line(format!("  position {}", sd.position.unwrap_or(0)), sd)
            );
        }
    }
    if let Some(u) = s.unexpected_devices.as_ref().filter(|u| u.max > 0) {
        let _ = writeln!(
            t,
            "devices the configuration does not place (never driven): {} at the end{}, at most {}",
            u.now,
            u.first_position
                .map_or(String::new(), |p| format!(" from position {p}")),
            u.max
        );
    }
    if let Some(b) = &s.bus {
        let reasons: Vec<String> = b
            .rx_rejected_by_reason
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        let _ = writeln!(
            t,
            "rejected frames {}{}  send errors {}",
            b.rx_rejected,
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join(", "))
            },
            b.send_errors
        );
        if let Some(w) = &b.wait {
            let _ = writeln!(
                t,
                "wait {}: CPU {} µs per cycle ({} cycles measured){}",
                w.mode,
                us(w.cpu_ns_per_cycle as f64),
                w.sampled_cycles,
                match w.mode.as_str() {
                    "hybrid" => format!(
                        ", polled in {} cycles, {} replies after the poll window",
                        w.polled_cycles, w.after_window
                    ),
                    "busy" => format!(", polled in {} cycles", w.polled_cycles),
                    _ => String::new(),
                }
            );
        }
    }
    if let Some(l) = &s.logging {
        let _ = writeln!(
            t,
            "logging problems: {} failed writes, {} events and {} samples not written{}",
            l.write_errors,
            l.events_dropped,
            l.samples_dropped,
            l.first_error
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        );
    }
    if let Some(st) = &s.stop {
        let _ = writeln!(
            t,
            "stopped: {}{}{}",
            match st.reason {
                summary::StopReason::Duration => "duration reached",
                summary::StopReason::Signal => "by a signal",
                summary::StopReason::Fatal => "unrecoverable fault",
                summary::StopReason::Running => "not yet (checkpoint of a running master)",
            },
            st.signal
                .as_deref()
                .map(|x| format!(" ({x})"))
                .unwrap_or_default(),
            st.detail
                .as_deref()
                .map(|x| format!(": {x}"))
                .unwrap_or_default()
        );
    }
    if let Some(f) = &s.floor {
        t.push_str(&floor_table(f, s.rtt_ns.as_ref()));
    }
    if let Some(dc) = &s.dc {
        t.push_str(&dc_table(dc));
    }
    if let Some(axes) = &s.axes {
        t.push_str(&axes_table(axes));
    }
    t
}

/// The floor benchmark beside rtcat's round trip (`bench --floor`, docs/NOTES.md §1.1).
fn floor_table(f: &summary::FloorSummary, rtcat: Option<&LatencyStats>) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nfloor: bare AF_PACKET ping/echo of {} bytes, mid-period on the cycle thread; {} pings, \
         {} lost, {} socket errors",
        f.frame_bytes, f.pings, f.lost, f.errors
    );
    let _ = writeln!(
        t,
        "{:<16} {:>10} {:>10} {:>10} {:>10}",
        "round trip µs", "p50", "p99", "p99.9", "max"
    );
    for (name, l) in [("rtcat", rtcat), ("floor", Some(&f.rtt_ns))] {
        if let Some(l) = l {
            let _ = writeln!(
                t,
                "{name:<16} {:>10} {:>10} {:>10} {:>10}",
                us(l.p50 as f64),
                us(l.p99 as f64),
                us(l.p999 as f64),
                us(l.max as f64)
            );
        }
    }
    let ratio = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}"));
    let _ = writeln!(
        t,
        "{:<16} {:>10} {:>10}",
        "rtcat / floor",
        ratio(f.ratio_p50),
        ratio(f.ratio_p99)
    );
    t
}

/// The DC part of the human table: lock, drift, phase error, 0x092C per subdevice.
pub fn dc_table(dc: &summary::DcSummary) -> String {
    let mut t = String::new();
    let p = &dc.phase_error_ns;
    let _ = writeln!(
        t,
        "\ndistributed clocks: SYNC0 {} µs, frame at +{} µs; lock {}, drift {:+.2} ppm",
        us(dc.sync0_period_ns as f64),
        us(dc.sync0_shift_ns as f64),
        dc.lock_state,
        dc.drift_ppm
    );
    let _ = writeln!(
        t,
        "|phase error| µs  p50 {}  p99 {}  p99.9 {}  max {}  (signed {} .. {}, {} cycles)",
        us(p.p50 as f64),
        us(p.p99 as f64),
        us(p.p999 as f64),
        us(p.max as f64),
        us(dc.phase_error_min_ns as f64),
        us(dc.phase_error_max_ns as f64),
        p.count
    );
    let diffs: Vec<String> = dc
        .subdevices
        .iter()
        .map(|d| {
            let f = |v: Option<i32>| v.map_or("-".to_string(), |v| v.to_string());
            format!("{}: {} (worst {})", d.position, f(d.last_ns), f(d.worst_ns))
        })
        .collect();
    let _ = writeln!(
        t,
        "system time difference 0x092C ns  {}  sync window {} ns, violations {}",
        if diffs.is_empty() {
            "-".to_string()
        } else {
            diffs.join("  ")
        },
        dc.sync_window_ns,
        dc.sync_window_violations
    );
    t
}

/// Files of one run in its output directory (what a new run moves aside first).
pub const RESULT_FILES: [&str; 7] = [
    summary::SUMMARY_FILE,
    summary::WAKE_HDR_FILE,
    summary::EXEC_HDR_FILE,
    summary::RTT_HDR_FILE,
    "summary.txt",
    "events.log",
    "samples.csv",
];

/// The space the final results are written into, taken when a run starts ([`Reserve`]).
pub const RESERVE_FILE: &str = ".final-reserve";

/// Bytes kept for the final results: summary.json, summary.txt and the three histograms of a
/// sim run take 7.5 KB (24 KiB in 4 KiB blocks), and each is written beside its checkpoint
/// before the rename frees the old one. Five times that leaves room for wider histograms and
/// longer lists (axes, DC subdevices) without taking much of a small file system.
pub const FINAL_RESERVE: u64 = 128 * 1024;

/// The final results' space, allocated in the output directory when the run starts so that a
/// writer that fills the file system meanwhile (another user's, a runaway log) cannot take it;
/// given back just before the final write, and when the run ends without one.
pub struct Reserve {
    dir: std::sync::Arc<Dir>,
    held: bool,
}

impl Reserve {
    /// Take `bytes` in `dir`. When that fails (the file system is already full) the run goes on
    /// without it, and says so once.
    pub fn take(dir: &std::sync::Arc<Dir>, bytes: u64) -> Reserve {
        let held = match dir.reserve(RESERVE_FILE, bytes) {
            Ok(()) => true,
            Err(e) => {
                let _ = dir.remove(RESERVE_FILE);
                crate::say!(
                    "rtcat: could not keep {} KiB for the final results ({e}); they are \
                     written if there is room at the end",
                    bytes / 1024
                );
                false
            }
        };
        Reserve {
            dir: dir.clone(),
            held,
        }
    }

    /// Give the space back (just before the final write).
    pub fn release(mut self) {
        self.free();
    }

    fn free(&mut self) {
        if std::mem::take(&mut self.held) {
            let _ = self.dir.remove(RESERVE_FILE);
        }
    }
}

impl Drop for Reserve {
    fn drop(&mut self) {
        self.free();
    }
}

/// Where earlier runs' files go, below the output directory.
pub const RUNS_DIR: &str = "runs";

/// Mode of result files: readable by the operators, written only by the run's user.
const FILE_MODE: u32 = 0o644;

/// Open (creating it if needed) the output directory without following a link in its last
/// component, and move the files of a previous run into `runs/<time>/` so a restart never
/// overwrites them; keep the newest `keep_runs` there (0: the previous files are removed).
pub fn prepare_dir(path: &Path, keep_runs: u32) -> Result<Dir> {
    let dir = Dir::create_all(path).with_context(|| "results directory".to_string())?;
    let present: Vec<&str> = RESULT_FILES
        .iter()
        .copied()
        .filter(|f| dir.exists(f))
        .collect();
    if present.is_empty() {
        return Ok(dir);
    }
    if keep_runs == 0 {
        for f in present {
            dir.remove(f)?;
        }
        return Ok(dir);
    }
    let runs = dir.subdir(RUNS_DIR, true)?;
    let base = previous_run_name(&dir);
    let mut name = base.clone();
    let mut k = 1;
    while runs.exists(&name) {
        name = format!("{base}-{k}");
        k += 1;
    }
    let old = runs.subdir(&name, true)?;
    for f in present {
        // Same file system: a rename, never a copy; a planted link is moved, not followed.
        dir.rename_into(f, &old, f)
            .with_context(|| format!("move {f} to {RUNS_DIR}/{name}"))?;
    }
    old.sync();
    dir.sync();
    prune_runs(&runs, keep_runs as usize)?;
    Ok(dir)
}

/// `20261201T091500Z` from the previous summary's start time, else from events.log's mtime.
fn previous_run_name(dir: &Dir) -> String {
    let started = dir
        .read_bounded(summary::SUMMARY_FILE, summary::SUMMARY_LIMIT)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["started_at_unix_ns"].as_u64())
        .map(|ns| ns / 1_000_000_000);
    let secs = started.unwrap_or_else(|| {
        dir.mtime("events.log")
            .map(|t| t.max(0) as u64)
            .unwrap_or_else(|_| rtcat_master::clock::unix_ns() / 1_000_000_000)
    });
    utc_stamp(secs)
}

/// Seconds since the epoch as `YYYYMMDDTHHMMSSZ` (civil-from-days, H. Hinnant's algorithm).
pub fn utc_stamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Remove the oldest run directories beyond `keep` (names sort by time).
fn prune_runs(runs: &Dir, keep: usize) -> Result<()> {
    let mut names = runs.entries()?;
    names.retain(|n| n.len() >= 16 && n.as_bytes()[8] == b'T');
    names.sort();
    if names.len() <= keep {
        return Ok(());
    }
    for n in &names[..names.len() - keep] {
        // std's remove_dir_all does not follow links (CVE-2022-21658 fixed in Rust 1.58.1).
        let p = runs.path().join(n);
        std::fs::remove_dir_all(&p).with_context(|| format!("remove {}", p.display()))?;
    }
    runs.sync();
    Ok(())
}

/// Write summary.json, summary.txt and the histograms into `dir`, each atomically (temp file,
/// fsync, rename): a crash or a full disk leaves the previous complete file, never a torn one.
/// summary.json goes last, so it always comes with histograms at least as new. Returns about
/// how many bytes the files take (the room the next write needs, for the status thread).
pub fn write_results(dir: &Dir, s: &Summary, rec: &Recorder) -> Result<u64> {
    let table = human_table(s, rec);
    dir.write_atomic("summary.txt", table.as_bytes(), FILE_MODE)?;
    summary::write_results(
        dir,
        s,
        &rec.wake,
        &rec.exec,
        s.rtt_ns.is_some().then_some(&rec.rtt),
    )?;
    // Sizes for the free-space reserve only (a stat by path is good enough for an estimate).
    let size = |f: &str| std::fs::metadata(dir.path().join(f)).map_or(0, |m| m.len());
    Ok(table.len() as u64
        + [
            summary::SUMMARY_FILE,
            summary::WAKE_HDR_FILE,
            summary::EXEC_HDR_FILE,
            summary::RTT_HDR_FILE,
        ]
        .iter()
        .map(|f| size(f))
        .sum::<u64>())
}

/// Write `text` to a file the user named (`--json FILE`) atomically, without following a link.
pub fn write_user_file(path: &Path, text: &str) -> Result<()> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow::anyhow!("{}: not a file name", path.display()))?;
    Dir::open(parent)?.write_atomic(name, text.as_bytes(), FILE_MODE)?;
    Ok(())
}

/// The axes part of the human table: state reached, following error (P99, max) in units —
/// the master's own, and the drive's 0x60F4 max when mapped — faults, quick stops and bad
/// cycles held (with the bound).
pub fn axes_table(axes: &[summary::AxisSummary]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<16} {:<20} {:>12} {:>12} {:>12} {:>7} {:>7} {:>11}  last fault",
        "axis",
        "state reached",
        "ferr P99",
        "ferr max",
        "0x60F4 max",
        "faults",
        "q-stops",
        "held (N)"
    );
    for a in axes {
        let units = |c: u64| format!("{:.6}", c as f64 / a.counts_per_unit);
        let (p99, max) = a
            .following_error_counts
            .as_ref()
            .map_or(("-".to_string(), "-".to_string()), |f| {
                (units(f.p99), units(f.max))
            });
        let drive = a
            .drive_following_error_counts
            .as_ref()
            .map_or("-".to_string(), |f| units(f.max));
        let held = match a.hold_bad_cycles {
            Some(n) => format!("{} ({n})", a.held_cycles),
            None => format!("{} (-)", a.held_cycles),
        };
        let _ = writeln!(
            t,
            "{:<16} {:<20} {:>12} {:>12} {:>12} {:>7} {:>7} {:>11}  {}",
            a.name,
            a.state_reached.as_deref().unwrap_or("-"),
            p99,
            max,
            drive,
            a.faults,
            a.quick_stops,
            held,
            match (a.last_error_code, &a.last_error_text) {
                (Some(c), Some(x)) => format!("{c:#06x} {x}"),
                _ => "-".to_string(),
            }
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axes_table_shows_0x60f4_beside_and_the_held_cycles() {
        let stats = |max: u64| {
            let mut h = rtcat_results::new_histogram();
            h.saturating_record(max);
            rtcat_results::LatencyStats::from_histogram(&h)
        };
        let axis = |name: &str, drive: Option<u64>, hold: Option<u32>| summary::AxisSummary {
            name: name.into(),
            position: Some(0),
            mode: "csp".into(),
            state_reached: Some("operation enabled".into()),
            final_state: Some("operation enabled".into()),
            following_error_counts: Some(stats(1409)),
            drive_following_error_counts: drive.map(stats),
            hold_bad_cycles: hold,
            hold_bad_cycles_from: None,
            drive_sync_error_limit: None,
            held_cycles: 7,
            longest_bad_run: 3,
            counts_per_unit: 10000.0,
            faults: 0,
            last_error_code: None,
            last_error_text: None,
            quick_stops: 1,
        };
        let t = axes_table(&[axis("x", Some(909), Some(3)), axis("y", None, None)]);
        let rows: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert!(t.lines().next().unwrap().contains("0x60F4 max"), "{t}");
        // name, state (2 words), P99, max, 0x60F4 max, faults, q-stops, held (N), last fault.
        assert_eq!(
            rows[1],
            [
                "x",
                "operation",
                "enabled",
                "0.140900",
                "0.140900",
                "0.090900",
                "0",
                "1",
                "7",
                "(3)",
                "-"
            ],
            "{t}"
        );
        assert_eq!(rows[2][5], "-", "no 0x60F4 mapped: {t}");
        assert_eq!(rows[2][8..10], ["7", "(-)"], "no bound: {t}");
    }

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400), "20000229T000000Z");
        assert_eq!(utc_stamp(1_764_460_799), "20251129T235959Z");
    }
}
