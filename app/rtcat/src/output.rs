//! Results, never lost: summary.json, the histograms, the human table, and (from the status
//! thread) events.log and samples.csv, all under one output directory.

use crate::stats::Recorder;
use anyhow::{Context, Result};
use rtlab::summary::{self, LatencyStats, Mode, Policy, Summary, SystemInfo, Wkc};
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
    pub rt: crate::master::RtApplied,
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
        stop: None,
        bus: None,
        logging: None,
    }
}

fn us(ns: f64) -> String {
    format!("{:.3}", ns / 1000.0)
}

/// The human table (µs, like the seeds' tables).
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
    t
}

/// Write summary.json, summary.txt and the histograms into `dir` (created if needed).
pub fn write_results(dir: &Path, s: &Summary, rec: &Recorder) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create output dir {}", dir.display()))?;
    s.write(&dir.join(summary::SUMMARY_FILE))?;
    summary::write_hdr(&dir.join(summary::WAKE_HDR_FILE), &rec.wake)?;
    summary::write_hdr(&dir.join(summary::EXEC_HDR_FILE), &rec.exec)?;
    if s.rtt_ns.is_some() {
        summary::write_hdr(&dir.join(summary::RTT_HDR_FILE), &rec.rtt)?;
    }
    let txt = dir.join("summary.txt");
    std::fs::write(&txt, human_table(s, rec))
        .with_context(|| format!("write {}", txt.display()))?;
    Ok(())
}
