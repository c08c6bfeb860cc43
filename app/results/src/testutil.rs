//! A summary with every field set, for the unit tests.

use crate::*;

pub(crate) fn sample_summary() -> Summary {
    let mut h = new_histogram();
    for v in [1000u64, 2000, 2000, 3333, 13514] {
        h.record(v).unwrap();
    }
    let wake = LatencyStats::from_histogram(&h);
    Summary {
        schema: SUMMARY_SCHEMA.into(),
        rtcat_version: "0.1.0".into(),
        mode: Mode::Sim,
        interface: None,
        stage: Some("s2".into()),
        started_at_unix_ns: 1_764_460_800_000_000_000,
        duration_s: 10.0,
        cycles: 5,
        period_ns: 1_000_000,
        wake_lateness_ns: wake,
        exec_ns: wake,
        rtt_ns: Some(wake),
        missed_deadlines: 0,
        skipped_periods: 0,
        wkc: Wkc {
            expected: Some(9),
            mismatches: 1,
        },
        frames_lost: 0,
        recoveries: 0,
        subdevices: 3,
        pdi_bytes: 132,
        system: SystemInfo {
            hostname: "board".into(),
            kernel_release: "5.10.160-rt89".into(),
            kernel_version: "#1 SMP PREEMPT_RT".into(),
            preempt_rt: true,
            cmdline: "console=ttyS2".into(),
            cpu: Some(6),
            txrx_cpu: Some(6),
            policy: Policy::Fifo,
            priority: 80,
            no_rt: false,
            timer_slack_ns: 1,
            governor: Some("performance".into()),
        },
        stop: None,
        bus: None,
        logging: None,
        axes: None,
        dc: None,
        floor: None,
        availability: None,
        unexpected_devices: None,
    }
}
