//! `summary.json` (schema `rtcat.summary/1`): the figures and the setup of one bench or run, and
//! [`write_results`], which writes a run directory.

use std::path::Path;

use hdrhistogram::Histogram;
use safefs::Dir;
use serde::{Deserialize, Serialize};

use crate::error::invalid;
use crate::files::{
    JsonFile, parse_json, read_json, read_json_in, to_json, write_json, write_json_to,
};
use crate::{
    EXEC_HDR_FILE, Error, RTT_HDR_FILE, Result, SUMMARY_FILE, SUMMARY_LIMIT, SUMMARY_SCHEMA,
    WAKE_HDR_FILE, validate_stage_id, write_hdr_to,
};

/// Run mode of a bench/run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Against the simulated segment (`ecsim`).
    #[serde(rename = "sim")]
    Sim,
    /// On a network interface (a real segment).
    #[serde(rename = "iface")]
    Iface,
    /// The cycle thread alone, without a bus (`--timer-only`).
    #[serde(rename = "timer-only")]
    TimerOnly,
}

/// Scheduling policy of the cycle thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Policy {
    /// `SCHED_FIFO` (real-time).
    #[serde(rename = "SCHED_FIFO")]
    Fifo,
    /// `SCHED_OTHER` (with `--no-rt`, or when real-time scheduling is refused).
    #[serde(rename = "SCHED_OTHER")]
    Other,
}

/// Statistics of one latency distribution, in ns (`mean` is a float).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyStats {
    /// Number of samples.
    pub count: u64,
    /// Smallest sample.
    pub min: u64,
    /// Mean of the samples.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest sample.
    pub max: u64,
}

impl LatencyStats {
    /// Statistics of a histogram (percentiles as HdrHistogram reports them).
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self {
                count: 0,
                min: 0,
                mean: 0.0,
                p50: 0,
                p99: 0,
                p999: 0,
                max: 0,
            };
        }
        Self {
            count: h.len(),
            min: h.min(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }

    /// Checks internal consistency; `field` names the object in the message (e.g. `wake_lateness_ns`).
    pub fn validate(&self, field: &str) -> Result<()> {
        if !self.mean.is_finite() || self.mean < 0.0 {
            invalid!(
                format!("{field}.mean"),
                "{field}.mean: {} is not a finite non-negative number",
                self.mean
            );
        }
        if self.count == 0 {
            if self.min != 0 || self.max != 0 || self.p50 != 0 || self.p99 != 0 || self.p999 != 0 {
                invalid!(
                    field,
                    "{field}: count is 0 but the statistics are not all 0"
                );
            }
            return Ok(());
        }
        let order = [
            ("min", self.min),
            ("p50", self.p50),
            ("p99", self.p99),
            ("p999", self.p999),
            ("max", self.max),
        ];
        for w in order.windows(2) {
            if w[0].1 > w[1].1 {
                invalid!(
                    field,
                    "{field}: {} ({}) is greater than {} ({})",
                    w[0].0,
                    w[0].1,
                    w[1].0,
                    w[1].1
                );
            }
        }
        // The mean of a histogram lies within [min, max] up to the histogram's resolution.
        let slack = (self.max as f64) * 1e-3 + 1.0;
        if self.mean + slack < self.min as f64 || self.mean > self.max as f64 + slack {
            invalid!(
                format!("{field}.mean"),
                "{field}.mean: {} lies outside [min {}, max {}]",
                self.mean,
                self.min,
                self.max
            );
        }
        Ok(())
    }
}

/// Working-counter result of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wkc {
    /// Expected WKC per cycle; `null` when there is no bus (timer-only mode).
    pub expected: Option<u32>,
    /// Cycles whose WKC differed from the expected one.
    pub mismatches: u64,
}

/// The system a run was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemInfo {
    /// `uname -n`
    pub hostname: String,
    /// `uname -r`
    pub kernel_release: String,
    /// `uname -v`
    pub kernel_version: String,
    /// The kernel is PREEMPT_RT (`/sys/kernel/realtime`, or `PREEMPT_RT` in `uname -v`).
    pub preempt_rt: bool,
    /// `/proc/cmdline`
    pub cmdline: String,
    /// CPU of the cycle thread, `null` when not pinned.
    pub cpu: Option<u32>,
    /// CPU of the TX/RX thread, `null` when not pinned.
    pub txrx_cpu: Option<u32>,
    /// Scheduling policy of the cycle thread.
    pub policy: Policy,
    /// SCHED_FIFO priority, 0 for SCHED_OTHER.
    pub priority: u32,
    /// Run with `--no-rt`.
    pub no_rt: bool,
    /// Timer slack the cycle thread ran with (`PR_SET_TIMERSLACK`).
    pub timer_slack_ns: u64,
    /// Governor of the cycle CPU's cpufreq policy, `null` without cpufreq.
    pub governor: Option<String>,
}

/// `summary.json` of one bench/run (schema `rtcat.summary/1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Always [`SUMMARY_SCHEMA`].
    pub schema: String,
    /// Version of the rtcat that wrote the file.
    pub rtcat_version: String,
    /// What was measured.
    pub mode: Mode,
    /// Interface name in `iface` mode.
    pub interface: Option<String>,
    /// Ladder stage id (`s0`..`s4`) or `null`.
    pub stage: Option<String>,
    /// Start of the measurement (ns since the Unix epoch).
    pub started_at_unix_ns: u64,
    /// Time measured, in seconds (less than requested when the run was interrupted).
    pub duration_s: f64,
    /// Cycles run.
    pub cycles: u64,
    /// Cycle period.
    pub period_ns: u64,
    /// How late the cycle thread woke after each deadline.
    pub wake_lateness_ns: LatencyStats,
    /// Time from wake-up to the end of the cycle's work.
    pub exec_ns: LatencyStats,
    /// Round trip of the cycle's frame; `null` in timer-only mode.
    pub rtt_ns: Option<LatencyStats>,
    /// Cycles that ended after the next deadline.
    pub missed_deadlines: u64,
    /// Periods skipped by the catch-up policy.
    pub skipped_periods: u64,
    /// Working-counter result.
    pub wkc: Wkc,
    /// Cycles whose frame got no reply.
    pub frames_lost: u64,
    /// Recoveries of the segment after a fault.
    pub recoveries: u64,
    /// SubDevices on the segment (0 in timer-only mode).
    pub subdevices: u32,
    /// Size of the process data image.
    pub pdi_bytes: u32,
    /// The system the run was measured on.
    pub system: SystemInfo,
    /// Why the run ended (or that it is still running, in a checkpoint). Absent in files written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// Frames the master refused as replies or failed to send; absent in timer-only mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<BusStats>,
    /// Problems writing `events.log` / `samples.csv` (a full disk, a closed stderr); absent when
    /// there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<LoggingHealth>,
    /// Per `[[axis]]` (CiA 402 drives run by the axes application); absent without axes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axes: Option<Vec<AxisSummary>>,
    /// Distributed clocks (`[dc] enabled`): the phase lock and the system time differences;
    /// absent without DC (and in files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dc: Option<DcSummary>,
    /// The floor benchmark (`bench --floor`): a bare ping/echo of the cyclic frame's size on the
    /// same thread, and rtcat's round trip over it; absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<FloorSummary>,
    /// Time in OP and outages per subdevice and for the segment; absent without a bus (and in
    /// files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability: Option<AvailabilitySummary>,
    /// Devices on the segment where the configuration places none (plugged in while the line
    /// ran; never driven); absent without a bus (and in files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unexpected_devices: Option<UnexpectedDevices>,
}

/// `unexpected_devices` of `summary.json`: devices found on the segment where the configured
/// order has none, by the master's count while the segment ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnexpectedDevices {
    /// How many at the end of the run.
    pub now: u16,
    /// The first one's position at the end of the run (absent when there are none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_position: Option<u16>,
    /// The most at any time of the run.
    pub max: u16,
    /// Times the number changed (each an `unexpected_devices` event in `events.log`).
    pub changes: u64,
}

impl UnexpectedDevices {
    fn validate(&self) -> Result<()> {
        let field = "unexpected_devices";
        if self.now > self.max {
            let f = format!("{field}.now");
            return Err(Error::field(
                &f,
                format!("{f}: {} above max ({})", self.now, self.max),
            ));
        }
        if (self.now > 0) != self.first_position.is_some() {
            let f = format!("{field}.first_position");
            return Err(Error::field(
                &f,
                format!(
                    "{f}: must be given exactly when now ({}) is above 0",
                    self.now
                ),
            ));
        }
        if self.max > 0 && self.changes == 0 {
            let f = format!("{field}.changes");
            return Err(Error::field(
                &f,
                format!("{f}: 0 although max is {}", self.max),
            ));
        }
        Ok(())
    }
}

/// `availability` of `summary.json`: the segment (valid when every subdevice's data is) and
/// each subdevice by position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AvailabilitySummary {
    /// The segment.
    pub segment: Availability,
    /// Each subdevice (`position` set).
    pub subdevices: Vec<Availability>,
}

/// Time with valid data and the outages of one subdevice or of the segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Availability {
    /// Position (subdevices only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u16>,
    /// Time with valid data (in OP), s.
    pub time_in_op_s: f64,
    /// Cycles with invalid data.
    pub invalid_cycles: u64,
    /// Outages (runs of cycles with invalid data, a whole-segment recovery included).
    pub outages: u64,
    /// Their total duration, ms.
    pub outage_total_ms: f64,
    /// The longest, ms.
    pub outage_max_ms: f64,
}

impl Availability {
    fn validate(&self, field: &str, cycles: u64) -> Result<()> {
        for (name, v) in [
            ("time_in_op_s", self.time_in_op_s),
            ("outage_total_ms", self.outage_total_ms),
            ("outage_max_ms", self.outage_max_ms),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                let f = format!("{field}.{name}");
                return Err(Error::field(
                    &f,
                    format!("{f}: {v} is not a finite non-negative number"),
                ));
            }
        }
        if self.outage_max_ms > self.outage_total_ms || self.invalid_cycles > cycles {
            let f = format!("{field}.outage_max_ms");
            return Err(Error::field(
                &f,
                format!(
                    "{field}: outage_max_ms ({}) above outage_total_ms ({}), or invalid_cycles \
                     ({}) above cycles ({cycles})",
                    self.outage_max_ms, self.outage_total_ms, self.invalid_cycles
                ),
            ));
        }
        Ok(())
    }
}

/// The floor benchmark's results (docs/NOTES.md §1.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloorSummary {
    /// Size of each ping: the cyclic frame's (bytes, before Ethernet padding).
    pub frame_bytes: u64,
    /// Pings sent (one per cycle, from the second cycle on).
    pub pings: u64,
    /// Pings without a reply before the end of their cycle (not in `rtt_ns`).
    pub lost: u64,
    /// Cycles whose ping the socket failed to send or receive (not in `pings`).
    pub errors: u64,
    /// Round trip of the pings that came back.
    pub rtt_ns: LatencyStats,
    /// rtcat's round trip over the floor's, at p50 and p99 (null when either is missing).
    pub ratio_p50: Option<f64>,
    /// See `ratio_p50`.
    pub ratio_p99: Option<f64>,
}

impl FloorSummary {
    /// The floor's results with the ratios of rtcat's round trip `rtcat` over them.
    pub fn new(
        frame_bytes: u64,
        [pings, lost, errors]: [u64; 3],
        rtt_ns: LatencyStats,
        rtcat: Option<&LatencyStats>,
    ) -> Self {
        let ratio = |a: u64, b: u64| (a > 0 && b > 0).then(|| a as f64 / b as f64);
        FloorSummary {
            frame_bytes,
            pings,
            lost,
            errors,
            ratio_p50: rtcat.and_then(|r| ratio(r.p50, rtt_ns.p50)),
            ratio_p99: rtcat.and_then(|r| ratio(r.p99, rtt_ns.p99)),
            rtt_ns,
        }
    }

    fn validate(&self) -> Result<()> {
        self.rtt_ns.validate("floor.rtt_ns")?;
        if self.rtt_ns.count + self.lost > self.pings {
            invalid!(
                "floor.pings",
                "floor.pings ({}) is less than floor.rtt_ns.count ({}) + floor.lost ({})",
                self.pings,
                self.rtt_ns.count,
                self.lost
            );
        }
        for (name, r) in [
            ("floor.ratio_p50", self.ratio_p50),
            ("floor.ratio_p99", self.ratio_p99),
        ] {
            if r.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
                invalid!(name, "{name}: must be a finite positive number");
            }
        }
        Ok(())
    }
}

/// `dc` in `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcSummary {
    /// SYNC0 period.
    pub sync0_period_ns: u64,
    /// Where the frame is held, after SYNC0.
    pub sync0_shift_ns: u64,
    /// The phase lock's state at the end: `locking`, `locked` or `lost`.
    pub lock_state: String,
    /// `lock_state == "locked"`.
    pub locked: bool,
    /// Drift of the reference clock against the master's CLOCK_MONOTONIC the lock measured,
    /// ppm (positive: the reference runs fast).
    pub drift_ppm: f64,
    /// |phase error| of every DC cycle: where the frame passed the reference clock against
    /// its place on the SYNC0 grid (HdrHistogram).
    pub phase_error_ns: LatencyStats,
    /// Smallest signed phase error (negative: the frame was early).
    pub phase_error_min_ns: i64,
    /// Largest signed phase error.
    pub phase_error_max_ns: i64,
    /// Excursions of a DC subdevice's system time difference (0x092C) above the sync window.
    pub sync_window_violations: u64,
    /// The sync window, ns.
    pub sync_window_ns: u32,
    /// Per DC subdevice, 0x092C as sampled about every 100 ms off the real-time path.
    pub subdevices: Vec<DcSubdeviceSummary>,
}

impl DcSummary {
    fn validate(&self, cycles: u64) -> Result<()> {
        self.phase_error_ns.validate("dc.phase_error_ns")?;
        if self.phase_error_ns.count > cycles {
            invalid!(
                "dc.phase_error_ns.count",
                "dc.phase_error_ns.count ({}) exceeds cycles ({cycles})",
                self.phase_error_ns.count
            );
        }
        if self.sync0_period_ns == 0 {
            invalid!("dc.sync0_period_ns", "dc.sync0_period_ns: must be > 0");
        }
        if !matches!(self.lock_state.as_str(), "locking" | "locked" | "lost") {
            invalid!(
                "dc.lock_state",
                "dc.lock_state: \"{}\" is not locking, locked or lost",
                self.lock_state.escape_debug()
            );
        }
        if self.locked != (self.lock_state == "locked") {
            invalid!(
                "dc.locked",
                "dc.locked ({}) disagrees with dc.lock_state ({})",
                self.locked,
                self.lock_state
            );
        }
        if !self.drift_ppm.is_finite() {
            invalid!(
                "dc.drift_ppm",
                "dc.drift_ppm: {} is not finite",
                self.drift_ppm
            );
        }
        if self.phase_error_ns.count > 0
            && (self.phase_error_min_ns > self.phase_error_max_ns
                || self
                    .phase_error_max_ns
                    .unsigned_abs()
                    .max(self.phase_error_min_ns.unsigned_abs())
                    > self
                        .phase_error_ns
                        .max
                        .saturating_add(self.phase_error_ns.max / 100 + 1))
        {
            invalid!(
                "dc.phase_error_min_ns",
                "dc.phase_error_min_ns ({}) / dc.phase_error_max_ns ({}) disagree with \
                 dc.phase_error_ns.max ({})",
                self.phase_error_min_ns,
                self.phase_error_max_ns,
                self.phase_error_ns.max
            );
        }
        Ok(())
    }
}

/// One DC subdevice's system time difference in `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcSubdeviceSummary {
    /// Position on the segment.
    pub position: u16,
    /// The last value read, ns (signed; absent: never read).
    #[serde(default)]
    pub last_ns: Option<i32>,
    /// The value of largest magnitude read.
    #[serde(default)]
    pub worst_ns: Option<i32>,
}

/// One axis in `summary.json` (`axes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxisSummary {
    /// The axis' name.
    pub name: String,
    /// The drive's position in the segment (absent: never bound).
    #[serde(default)]
    pub position: Option<u16>,
    /// Mode of operation (`csp`, `csv`).
    pub mode: String,
    /// The highest state reached (the CiA 402 state names: `operation enabled`, ...).
    #[serde(default)]
    pub state_reached: Option<String>,
    /// The state at the end of the run.
    #[serde(default)]
    pub final_state: Option<String>,
    /// |following error| in drive counts over the good cycles in operation enabled, the
    /// master's own: the position set-point sent minus the position actual 0x6064
    /// (HdrHistogram; absent when never enabled).
    #[serde(default)]
    pub following_error_counts: Option<LatencyStats>,
    /// |following error actual 0x60F4| in drive counts as the drive reported it, the same
    /// cycles (absent: not mapped, or never enabled).
    #[serde(default)]
    pub drive_following_error_counts: Option<LatencyStats>,
    /// Bad cycles in a row through which the last set-point is held before a quick stop
    /// (absent: `on_bad_cycles = "hold"`, no bound).
    #[serde(default)]
    pub hold_bad_cycles: Option<u32>,
    /// Where that bound comes from: `config`, `drive` (its sync error counter limit 0x10F1:02),
    /// `default`, `unbounded`.
    #[serde(default)]
    pub hold_bad_cycles_from: Option<String>,
    /// The drive's sync error counter limit 0x10F1:02 the bound was derived from (absent: not
    /// read, or not used).
    #[serde(default)]
    pub drive_sync_error_limit: Option<u32>,
    /// Bad cycles through which the last set-point was held (no quick stop).
    #[serde(default)]
    pub held_cycles: u64,
    /// The longest run of bad cycles in a row.
    #[serde(default)]
    pub longest_bad_run: u32,
    /// Counts per user unit (to read the following error in units).
    pub counts_per_unit: f64,
    /// Faults the drive reported.
    pub faults: u32,
    /// The error code 0x603F of the last fault (absent: none).
    #[serde(default)]
    pub last_error_code: Option<u16>,
    /// Its text.
    #[serde(default)]
    pub last_error_text: Option<String>,
    /// Quick stops commanded because of bad cycles.
    pub quick_stops: u32,
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The requested duration was reached.
    Duration,
    /// A signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) asked it to stop.
    Signal,
    /// The segment failed and could not be recovered.
    Fatal,
    /// Not stopped: this is a checkpoint written while the run goes on.
    Running,
}

/// How and why the run ended (`stop` in `summary.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stop {
    /// Why it ended.
    pub reason: StopReason,
    /// The signal's name (`SIGTERM`) when `reason` is `signal`.
    #[serde(default)]
    pub signal: Option<String>,
    /// The duration asked for (`--duration`); `null` for `rtcat run`, which runs until stopped.
    #[serde(default)]
    pub requested_duration_s: Option<f64>,
    /// The unrecoverable error when `reason` is `fatal`.
    #[serde(default)]
    pub detail: Option<String>,
}

/// Frames the bus refused as replies, by reason, and frames it could not send.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusStats {
    /// Received frames that were not taken as replies, in total.
    pub rx_rejected: u64,
    /// The same, by reason (`not_ethercat`, `foreign_source`, `bad_length`, `not_awaited`, …).
    #[serde(default)]
    pub rx_rejected_by_reason: std::collections::BTreeMap<String, u64>,
    /// Frames the link failed to send.
    pub send_errors: u64,
    /// How the inline cycle waited for its replies and what the wait cost (absent: a TX/RX
    /// thread moved the frames, or an older file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitStats>,
}

/// The inline cycle's wait for its replies (`[cycle] wait`, `bench --wait`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitStats {
    /// `sleep`, `busy` or `hybrid`.
    pub mode: String,
    /// Cycles whose wait's CPU time was measured (one in 8).
    pub sampled_cycles: u64,
    /// The cyclic thread's CPU time in those waits (ns, CLOCK_THREAD_CPUTIME_ID).
    pub cpu_ns: u64,
    /// Its mean per measured cycle (ns): what the wait cost the core per cycle.
    pub cpu_ns_per_cycle: u64,
    /// Hybrid: replies that came after the poll window (the wait had gone back to sleep).
    pub after_window: u64,
    /// Cycles in which the wait polled the link (busy: every cycle that waited; hybrid: those
    /// that reached the window).
    pub polled_cycles: u64,
}

/// Problems the status thread had with the log files; the run went on regardless.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggingHealth {
    /// Failed writes (to events.log, samples.csv or stderr).
    pub write_errors: u64,
    /// Events not written to events.log (after a write error, or with the disk nearly full).
    pub events_dropped: u64,
    /// Samples not written to samples.csv.
    pub samples_dropped: u64,
    /// The first error, as text.
    #[serde(default)]
    pub first_error: Option<String>,
}

impl Stop {
    /// Checks the fields against the reason; the error names the field.
    pub fn validate(&self) -> Result<()> {
        if let Some(d) = self.requested_duration_s
            && !(d.is_finite() && d > 0.0)
        {
            invalid!(
                "stop.requested_duration_s",
                "stop.requested_duration_s: {d} is not a finite positive number"
            );
        }
        match (&self.signal, self.reason) {
            (None, StopReason::Signal) => {
                invalid!(
                    "stop.signal",
                    "stop.signal: must be set when stop.reason is \"signal\""
                )
            }
            (Some(sig), StopReason::Signal) => {
                // SIGTERM, SIGRTMIN+3: shown verbatim in tables
                let ok = sig.len() <= 16
                    && sig.strip_prefix("SIG").is_some_and(|n| {
                        !n.is_empty()
                            && n.chars()
                                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '+')
                    });
                if !ok {
                    invalid!(
                        "stop.signal",
                        "stop.signal: \"{sig}\" is not a signal name such as \"SIGTERM\""
                    );
                }
            }
            (Some(_), r) => invalid!(
                "stop.signal",
                "stop.signal: set, but stop.reason is \"{}\" (only \"signal\" has one)",
                r.as_str()
            ),
            (None, _) => {}
        }
        if let Some(d) = &self.detail {
            check_text("stop.detail", d, 4096, true)?;
        }
        Ok(())
    }
}

impl StopReason {
    /// The name used in `summary.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Duration => "duration",
            StopReason::Signal => "signal",
            StopReason::Fatal => "fatal",
            StopReason::Running => "running",
        }
    }
}

impl BusStats {
    /// The reasons must be short identifiers and add up to `rx_rejected`.
    pub fn validate(&self) -> Result<()> {
        if self.rx_rejected_by_reason.len() > 32 {
            invalid!(
                "bus.rx_rejected_by_reason",
                "bus.rx_rejected_by_reason: {} reasons (at most 32)",
                self.rx_rejected_by_reason.len()
            );
        }
        let mut sum: u64 = 0;
        for (k, v) in &self.rx_rejected_by_reason {
            let ok = !k.is_empty()
                && k.len() <= 32
                && k.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !ok {
                invalid!(
                    "bus.rx_rejected_by_reason",
                    "bus.rx_rejected_by_reason: key \"{}\" is not 1..=32 characters of [a-z0-9_]",
                    k.escape_debug()
                );
            }
            sum = sum.checked_add(*v).ok_or_else(|| {
                Error::field(
                    "bus.rx_rejected_by_reason",
                    "bus.rx_rejected_by_reason: the counts overflow a 64-bit sum",
                )
            })?;
        }
        if !self.rx_rejected_by_reason.is_empty() && sum != self.rx_rejected {
            invalid!(
                "bus.rx_rejected",
                "bus.rx_rejected ({}) is not the sum of bus.rx_rejected_by_reason ({sum})",
                self.rx_rejected
            );
        }
        if let Some(w) = &self.wait {
            if !["sleep", "busy", "hybrid"].contains(&w.mode.as_str()) {
                invalid!(
                    "bus.wait.mode",
                    "bus.wait.mode: \"{}\" is not sleep, busy or hybrid",
                    w.mode.escape_debug()
                );
            }
            if w.cpu_ns.checked_div(w.sampled_cycles).unwrap_or(0) != w.cpu_ns_per_cycle {
                invalid!(
                    "bus.wait.cpu_ns_per_cycle",
                    "bus.wait.cpu_ns_per_cycle ({}) is not bus.wait.cpu_ns / sampled_cycles ({} / {})",
                    w.cpu_ns_per_cycle,
                    w.cpu_ns,
                    w.sampled_cycles
                );
            }
        }
        Ok(())
    }
}

/// A text field of at most `max` bytes; control characters (line breaks included) only where
/// `multiline` (they would break the report's tables otherwise).
fn check_text(field: &str, s: &str, max: usize, multiline: bool) -> Result<()> {
    if s.len() > max {
        invalid!(field, "{field}: {} bytes (at most {max})", s.len());
    }
    if !multiline && let Some(c) = s.chars().find(|c| c.is_control()) {
        invalid!(
            field,
            "{field}: contains the control character {:?}",
            c.escape_debug().to_string()
        );
    }
    Ok(())
}

impl Summary {
    /// Checks the schema id and the internal consistency of the figures; the error names the field.
    pub fn validate(&self) -> Result<()> {
        if self.schema != SUMMARY_SCHEMA {
            invalid!(
                "schema",
                "schema: expected \"{SUMMARY_SCHEMA}\", found \"{}\"",
                self.schema
            );
        }
        if !self.duration_s.is_finite() || self.duration_s < 0.0 {
            invalid!(
                "duration_s",
                "duration_s: {} is not a finite non-negative number",
                self.duration_s
            );
        }
        if self.period_ns == 0 {
            invalid!("period_ns", "period_ns: must be > 0");
        }
        if let Some(stage) = &self.stage {
            validate_stage_id(stage).map_err(|e| Error::field("stage", format!("stage: {e}")))?;
        }
        self.wake_lateness_ns.validate("wake_lateness_ns")?;
        self.exec_ns.validate("exec_ns")?;
        if let Some(rtt) = &self.rtt_ns {
            rtt.validate("rtt_ns")?;
        }
        if self.mode == Mode::TimerOnly && self.rtt_ns.is_some() {
            invalid!("rtt_ns", "rtt_ns: must be null in timer-only mode");
        }
        if self.mode == Mode::Iface && self.interface.is_none() {
            invalid!("interface", "interface: must be set in iface mode");
        }
        if self.wake_lateness_ns.count > self.cycles {
            invalid!(
                "wake_lateness_ns.count",
                "wake_lateness_ns.count ({}) exceeds cycles ({})",
                self.wake_lateness_ns.count,
                self.cycles
            );
        }
        if let Some(stop) = &self.stop {
            stop.validate()?;
        }
        if let Some(bus) = &self.bus {
            if self.mode == Mode::TimerOnly {
                invalid!(
                    "bus",
                    "bus: must be null in timer-only mode (there is no bus)"
                );
            }
            bus.validate()?;
        }
        if let Some(l) = &self.logging
            && let Some(e) = &l.first_error
        {
            check_text("logging.first_error", e, 4096, true)?;
        }
        check_text("rtcat_version", &self.rtcat_version, 64, false)?;
        if let Some(i) = &self.interface {
            // IFNAMSIZ (16) including the terminating NUL
            check_text("interface", i, 15, false)?;
        }
        let sys = &self.system;
        // __NEW_UTS_LEN (64) for the uname fields, CPUFREQ_NAME_LEN (16 with the NUL) for the
        // governor; the command line is at most COMMAND_LINE_SIZE (2048 on arm64 and x86).
        check_text("system.hostname", &sys.hostname, 64, false)?;
        check_text("system.kernel_release", &sys.kernel_release, 64, false)?;
        check_text("system.kernel_version", &sys.kernel_version, 64, false)?;
        check_text("system.cmdline", &sys.cmdline, 4096, true)?;
        if let Some(g) = &sys.governor {
            check_text("system.governor", g, 15, false)?;
        }
        if self.missed_deadlines > self.cycles {
            invalid!(
                "missed_deadlines",
                "missed_deadlines ({}) exceeds cycles ({})",
                self.missed_deadlines,
                self.cycles
            );
        }
        if let Some(a) = &self.availability {
            a.segment.validate("availability.segment", self.cycles)?;
            for (i, s) in a.subdevices.iter().enumerate() {
                s.validate(&format!("availability.subdevices[{i}]"), self.cycles)?;
            }
        }
        if let Some(u) = &self.unexpected_devices {
            u.validate()?;
        }
        if let Some(f) = &self.floor {
            f.validate()?;
        }
        if let Some(dc) = &self.dc {
            dc.validate(self.cycles)?;
        }
        Ok(())
    }

    /// Parses and validates the text of a `summary.json`; errors name `path` and the field.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        parse_json(text, path)
    }

    /// Reads and validates a `summary.json` named by the caller (links in `path` are followed;
    /// it must be a regular file of at most [`SUMMARY_LIMIT`] bytes); errors name the file.
    pub fn read(path: &Path) -> Result<Self> {
        read_json(path)
    }

    /// Reads and validates `summary.json` in `dir` without following a link.
    pub fn read_in(dir: &Dir) -> Result<Self> {
        read_json_in(dir)
    }

    /// The summary as pretty JSON with a final newline.
    pub fn to_json(&self) -> Result<String> {
        to_json(self)
    }

    /// Writes `summary.json` into `dir` atomically (temporary file, fsync, rename, directory
    /// fsync); a link planted at the name is replaced, never followed.
    pub fn write_to(&self, dir: &Dir) -> Result<()> {
        write_json_to(self, dir)
    }

    /// Writes the summary to `path` atomically through its directory, like [`Summary::write_to`]
    /// (the directory is opened as named, following links in it; the file name is not followed).
    pub fn write(&self, path: &Path) -> Result<()> {
        write_json(self, path)
    }
}

/// Writes the histograms (`wake_lateness_ns.hdr`, `exec_ns.hdr`, and `rtt_ns.hdr` when given),
/// then `summary.json`, each atomically into `dir`. The summary comes last so that a summary on
/// disk never describes histograms that are not there yet; a crash between the files leaves the
/// new histograms next to the previous summary, which `rtcat report` refuses as inconsistent
/// rather than mixing them.
pub fn write_results(
    dir: &Dir,
    s: &Summary,
    wake: &Histogram<u64>,
    exec: &Histogram<u64>,
    rtt: Option<&Histogram<u64>>,
) -> Result<()> {
    write_hdr_to(dir, WAKE_HDR_FILE, wake)?;
    write_hdr_to(dir, EXEC_HDR_FILE, exec)?;
    if let Some(r) = rtt {
        write_hdr_to(dir, RTT_HDR_FILE, r)?;
    }
    s.write_to(dir)
}

impl JsonFile for Summary {
    const FILE: &'static str = SUMMARY_FILE;
    const LIMIT: u64 = SUMMARY_LIMIT;
    const WHAT: &'static str = "rtcat.summary/1 summary";
    fn check(&self) -> Result<()> {
        self.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::sample_summary;
    use crate::*;
    use std::fs;

    #[test]
    fn summary_round_trip_and_schema_names() {
        let s = sample_summary();
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["mode"], "sim");
        assert_eq!(json["system"]["policy"], "SCHED_FIFO");
        assert_eq!(json["wkc"]["expected"], 9);
        let back: Summary = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
        s.validate().unwrap();
    }

    #[test]
    fn dc_object_round_trips_and_is_checked() {
        let mut s = sample_summary();
        let dc = DcSummary {
            sync0_period_ns: 1_000_000,
            sync0_shift_ns: 500_000,
            lock_state: "locked".into(),
            locked: true,
            drift_ppm: 49.8,
            phase_error_ns: LatencyStats {
                count: 4,
                min: 10,
                mean: 500.0,
                p50: 400,
                p99: 2000,
                p999: 2000,
                max: 2000,
            },
            phase_error_min_ns: -2000,
            phase_error_max_ns: 1500,
            sync_window_violations: 1,
            sync_window_ns: 1000,
            subdevices: vec![DcSubdeviceSummary {
                position: 1,
                last_ns: Some(-3),
                worst_ns: Some(1200),
            }],
        };
        s.dc = Some(dc.clone());
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["dc"]["phase_error_ns"]["p99"], 2000);
        let back: Summary = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
        s.validate().unwrap();
        // Without DC the key is absent: older readers of schema /1 are not affected.
        s.dc = None;
        assert!(serde_json::to_value(&s).unwrap().get("dc").is_none());
        for (bad, field) in [
            (
                DcSummary {
                    locked: false,
                    ..dc.clone()
                },
                "dc.locked",
            ),
            (
                DcSummary {
                    lock_state: "maybe".into(),
                    ..dc.clone()
                },
                "dc.lock_state",
            ),
            (
                DcSummary {
                    phase_error_max_ns: 9000,
                    ..dc.clone()
                },
                "dc.phase_error_min_ns",
            ),
            (
                DcSummary {
                    drift_ppm: f64::NAN,
                    ..dc.clone()
                },
                "dc.drift_ppm",
            ),
            (
                DcSummary {
                    sync0_period_ns: 0,
                    ..dc.clone()
                },
                "dc.sync0_period_ns",
            ),
        ] {
            s.dc = Some(bad);
            let e = s.validate().unwrap_err().to_string();
            assert!(e.starts_with(field), "{field}: {e}");
        }
    }

    #[test]
    fn floor_section_has_the_ratios_round_trips_and_is_checked() {
        let mut s = sample_summary();
        let rtt = LatencyStats {
            count: 10,
            min: 20_000,
            mean: 26_000.0,
            p50: 25_000,
            p99: 40_000,
            p999: 40_000,
            max: 41_000,
        };
        let rtcat = LatencyStats {
            p50: 50_000,
            p99: 60_000,
            ..rtt
        };
        let f = FloorSummary::new(160, [12, 2, 0], rtt, Some(&rtcat));
        assert_eq!((f.ratio_p50, f.ratio_p99), (Some(2.0), Some(1.5)));
        // No ratio without rtcat's round trip or without a floor sample.
        assert_eq!(
            FloorSummary::new(160, [12, 2, 0], rtt, None).ratio_p50,
            None
        );
        let empty = LatencyStats::from_histogram(&crate::new_histogram());
        assert_eq!(
            FloorSummary::new(160, [3, 3, 0], empty, Some(&rtcat)).ratio_p99,
            None
        );
        s.floor = Some(f.clone());
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["floor"]["rtt_ns"]["p50"], 25_000);
        assert_eq!(json["floor"]["ratio_p50"], 2.0);
        let back: Summary = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
        s.validate().unwrap();
        s.floor = None;
        assert!(serde_json::to_value(&s).unwrap().get("floor").is_none());
        for (bad, field) in [
            (
                FloorSummary {
                    pings: 11,
                    ..f.clone()
                },
                "floor.pings",
            ),
            (
                FloorSummary {
                    ratio_p99: Some(f64::INFINITY),
                    ..f.clone()
                },
                "floor.ratio_p99",
            ),
            (
                FloorSummary {
                    rtt_ns: LatencyStats { p99: 1, ..rtt },
                    ..f.clone()
                },
                "floor.rtt_ns",
            ),
        ] {
            s.floor = Some(bad);
            let e = s.validate().unwrap_err().to_string();
            assert!(e.starts_with(field), "{field}: {e}");
        }
    }

    #[test]
    fn summary_rejects_unknown_and_missing_fields() {
        let mut json = serde_json::to_value(sample_summary()).unwrap();
        json["bogus"] = 1.into();
        let e = serde_json::from_value::<Summary>(json)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
        let mut json = serde_json::to_value(sample_summary()).unwrap();
        json.as_object_mut().unwrap().remove("recoveries");
        let e = serde_json::from_value::<Summary>(json)
            .unwrap_err()
            .to_string();
        assert!(e.contains("recoveries"), "{e}");
    }

    #[test]
    fn validate_names_the_field() {
        let mut s = sample_summary();
        s.wake_lateness_ns.p99 = s.wake_lateness_ns.max + 1;
        let e = s.validate().unwrap_err().to_string();
        assert!(e.starts_with("wake_lateness_ns: p99"), "{e}");
        let mut s = sample_summary();
        s.schema = "rtcat.summary/2".into();
        assert!(s.validate().unwrap_err().to_string().starts_with("schema:"));
        let mut s = sample_summary();
        s.mode = Mode::TimerOnly;
        assert!(s.validate().unwrap_err().to_string().starts_with("rtt_ns:"));
    }

    #[test]
    fn availability_is_validated_naming_the_field() {
        let fig = |position, total: f64, max: f64, invalid| Availability {
            position,
            time_in_op_s: 1.0,
            invalid_cycles: invalid,
            outages: 1,
            outage_total_ms: total,
            outage_max_ms: max,
        };
        let mut s = sample_summary();
        s.availability = Some(AvailabilitySummary {
            segment: fig(None, 2.0, 2.0, 2),
            subdevices: vec![fig(Some(0), 0.0, 0.0, 0), fig(Some(1), 2.0, 2.0, 2)],
        });
        s.validate().expect("valid");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Summary>(&json).unwrap(), s);
        let mut bad = s.clone();
        bad.availability.as_mut().unwrap().subdevices[1].outage_max_ms = 3.0;
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.starts_with("availability.subdevices[1]"), "{e}");
        let mut bad = s.clone();
        bad.availability.as_mut().unwrap().segment.time_in_op_s = f64::NAN;
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("availability.segment.time_in_op_s"), "{e}");
        let mut bad = s;
        bad.availability.as_mut().unwrap().segment.invalid_cycles = u64::MAX;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn unexpected_devices_are_validated_naming_the_field() {
        let mut s = sample_summary();
        s.unexpected_devices = Some(UnexpectedDevices {
            now: 3,
            first_position: Some(3),
            max: 3,
            changes: 1,
        });
        s.validate().expect("valid");
        let json = serde_json::to_string(&s).unwrap();
        assert!(
            json.contains(
                r#""unexpected_devices":{"now":3,"first_position":3,"max":3,"changes":1}"#
            ),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Summary>(&json).unwrap(), s);
        let gone = UnexpectedDevices {
            now: 0,
            first_position: None,
            max: 3,
            changes: 2,
        };
        s.unexpected_devices = Some(gone.clone());
        s.validate().expect("none now, three before");
        let e = |f: &dyn Fn(&mut UnexpectedDevices)| {
            let mut bad = s.clone();
            f(bad.unexpected_devices.as_mut().unwrap());
            bad.validate().unwrap_err().to_string()
        };
        assert!(e(&|u| u.now = 4).starts_with("unexpected_devices.now: 4 above max (3)"));
        assert!(
            e(&|u| u.first_position = Some(1)).starts_with("unexpected_devices.first_position")
        );
        assert!(
            e(&|u| {
                u.now = 1;
            })
            .starts_with("unexpected_devices.first_position")
        );
        assert!(e(&|u| u.changes = 0).starts_with("unexpected_devices.changes"));
        let mut unknown = serde_json::to_value(&s).unwrap();
        unknown["unexpected_devices"]["where"] = 1.into();
        assert!(serde_json::from_value::<Summary>(unknown).is_err());
    }

    #[test]
    fn new_fields_are_validated() {
        let e = |f: &dyn Fn(&mut Summary)| {
            let mut s = sample_summary();
            f(&mut s);
            s.validate().unwrap_err().to_string()
        };
        let stop = |reason, signal: Option<&str>| Stop {
            reason,
            signal: signal.map(String::from),
            requested_duration_s: Some(10.0),
            detail: None,
        };
        let mut s = sample_summary();
        s.stop = Some(stop(StopReason::Signal, Some("SIGTERM")));
        s.bus = Some(BusStats {
            rx_rejected: 3,
            rx_rejected_by_reason: [("foreign_source".to_string(), 2), ("bad_length".into(), 1)]
                .into(),
            send_errors: 1,
            wait: Some(WaitStats {
                mode: "hybrid".into(),
                sampled_cycles: 4,
                cpu_ns: 10,
                cpu_ns_per_cycle: 2,
                after_window: 1,
                polled_cycles: 3,
            }),
        });
        s.logging = Some(LoggingHealth {
            write_errors: 1,
            events_dropped: 2,
            samples_dropped: 3,
            first_error: Some("No space left on device (os error 28)".into()),
        });
        s.validate().unwrap();
        let back: Summary = serde_json::from_str(&s.to_json().unwrap()).unwrap();
        assert_eq!(back, s);

        assert!(
            e(&|s| s.stop = Some(stop(StopReason::Signal, None)))
                .starts_with("stop.signal: must be set")
        );
        assert!(
            e(&|s| s.stop = Some(stop(StopReason::Duration, Some("SIGINT"))))
                .contains("set, but stop.reason is \"duration\"")
        );
        assert!(
            e(&|s| s.stop = Some(stop(StopReason::Signal, Some("TERM|x"))))
                .contains("is not a signal name")
        );
        assert!(
            e(&|s| {
                s.stop = Some(Stop {
                    requested_duration_s: Some(f64::NAN),
                    ..stop(StopReason::Duration, None)
                })
            })
            .starts_with("stop.requested_duration_s")
        );
        let bus = |n: u64| BusStats {
            rx_rejected: n,
            rx_rejected_by_reason: [("not_ethercat".to_string(), 2)].into(),
            send_errors: 0,
            wait: None,
        };
        assert!(e(&|s| s.bus = Some(bus(3))).contains("is not the sum"));
        let wait = |mode: &str, per: u64| BusStats {
            wait: Some(WaitStats {
                mode: mode.into(),
                sampled_cycles: 3,
                cpu_ns: 10,
                cpu_ns_per_cycle: per,
                after_window: 0,
                polled_cycles: 0,
            }),
            ..bus(2)
        };
        assert!(e(&|s| s.bus = Some(wait("spin", 3))).contains("bus.wait.mode: \"spin\""));
        assert!(e(&|s| s.bus = Some(wait("busy", 4))).contains("bus.wait.cpu_ns_per_cycle (4)"));
        let mut ok = sample_summary();
        ok.bus = Some(wait("busy", 3));
        ok.validate().unwrap();
        assert!(
            e(&|s| {
                s.mode = Mode::TimerOnly;
                s.rtt_ns = None;
                s.bus = Some(bus(2));
            })
            .starts_with("bus: must be null in timer-only mode")
        );
        assert!(
            e(&|s| {
                s.bus = Some(BusStats {
                    rx_rejected: 1,
                    rx_rejected_by_reason: [("Bad Reason".to_string(), 1)].into(),
                    send_errors: 0,
                    wait: None,
                })
            })
            .contains("key \"Bad Reason\"")
        );
        assert!(
            e(&|s| {
                s.bus = Some(BusStats {
                    rx_rejected: 0,
                    rx_rejected_by_reason: [("a".to_string(), u64::MAX), ("b".into(), 1)].into(),
                    send_errors: 0,
                    wait: None,
                })
            })
            .contains("overflow")
        );
        assert!(
            e(&|s| s.system.hostname = "a\nb".into())
                .starts_with("system.hostname: contains the control character")
        );
        assert_eq!(
            e(&|s| s.system.kernel_release = "5".repeat(65)),
            "system.kernel_release: 65 bytes (at most 64)"
        );
        assert!(
            e(&|s| {
                s.logging = Some(LoggingHealth {
                    first_error: Some("x".repeat(5000)),
                    ..Default::default()
                })
            })
            .starts_with("logging.first_error: 5000 bytes")
        );
    }

    #[test]
    fn writers_replace_planted_links_instead_of_following_them() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let out = d.path().join("out");
        fs::create_dir(&out).unwrap();
        for name in [SUMMARY_FILE, WAKE_HDR_FILE, MANIFEST_FILE] {
            symlink(&victim, out.join(name)).unwrap();
        }
        let s = sample_summary();
        s.write(&out.join(SUMMARY_FILE)).unwrap();
        write_hdr(&out.join(WAKE_HDR_FILE), &new_histogram()).unwrap();
        let m = LadderManifest {
            schema: LADDER_SCHEMA.into(),
            created_unix_ns: 1,
            system: s.system.clone(),
            stages: vec!["s0".into()],
            runs: 1,
            duration_s: 1.0,
            loaded: false,
        };
        m.write(&out.join(MANIFEST_FILE)).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        for name in [SUMMARY_FILE, WAKE_HDR_FILE, MANIFEST_FILE] {
            assert!(
                fs::symlink_metadata(out.join(name)).unwrap().is_file(),
                "{name}"
            );
        }
        assert_eq!(Summary::read(&out.join(SUMMARY_FILE)).unwrap(), s);
        assert_eq!(LadderManifest::read(&out.join(MANIFEST_FILE)).unwrap(), m);
    }

    #[test]
    fn dir_api_writes_results_and_reads_without_following_links() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let dir = Dir::open(d.path()).unwrap();
        let s = sample_summary();
        let mut w = new_histogram();
        w.record(5).unwrap();
        write_results(&dir, &s, &w, &new_histogram(), Some(&new_histogram())).unwrap();
        let mut names = dir.entries().unwrap();
        names.sort();
        assert_eq!(
            names,
            [EXEC_HDR_FILE, RTT_HDR_FILE, SUMMARY_FILE, WAKE_HDR_FILE]
        );
        assert_eq!(Summary::read_in(&dir).unwrap(), s);
        assert_eq!(read_hdr_in(&dir, WAKE_HDR_FILE).unwrap(), w);
        let mode = fs::metadata(d.path().join(SUMMARY_FILE)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, RESULT_FILE_MODE);
        // reading through the handle does not follow a link, even to a valid summary
        let other = tempfile::tempdir().unwrap();
        fs::rename(d.path().join(SUMMARY_FILE), other.path().join(SUMMARY_FILE)).unwrap();
        symlink(other.path().join(SUMMARY_FILE), d.path().join(SUMMARY_FILE)).unwrap();
        let e = Summary::read_in(&dir).unwrap_err().to_string();
        assert!(
            e.ends_with("summary.json: is a symbolic link (not followed)"),
            "{e}"
        );
        // the path API follows it: the caller named that path
        assert_eq!(Summary::read(&d.path().join(SUMMARY_FILE)).unwrap(), s);
    }
}
