//! What the exporter reads from the master's control socket: the `status` and `counters`
//! replies of the control protocol (`app/control/src/protocol.rs`), as the exporter needs them.
//!
//! Fields the master adds later are ignored (serde's default); a field that is missing or of the
//! wrong type is an error naming it, and the scrape then says `rtcat_up 0` instead of rendering
//! half a reply.

use serde::Deserialize;

/// The `status` reply's `data`.
#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    pub version: u32,
    pub state: String,
    pub generation: u64,
    pub period_ns: u64,
    pub uptime_s: f64,
    pub subdevices: u64,
    pub pdi_bytes: u64,
    pub expected_wkc: u64,
    pub counters: Counters,
    pub histograms: Histograms,
    #[serde(default)]
    pub subdevice_states: Vec<SubdeviceState>,
    #[serde(default)]
    pub dc: Option<Dc>,
    #[serde(default)]
    pub axes: Option<Vec<Axis>>,
}

/// The master's counters since it started (they restart at 0 with the process; Prometheus'
/// `rate()` treats a decrease as a counter reset).
#[derive(Debug, Clone, Deserialize)]
pub struct Counters {
    pub cycles: u64,
    pub missed_deadlines: u64,
    pub skipped_periods: u64,
    pub frames_lost: u64,
    pub wkc_mismatches: u64,
    pub not_op_cycles: u64,
    pub rx_rejected: u64,
    pub send_errors: u64,
    pub recoveries: u64,
    pub failed_recoveries: u64,
    pub emergencies: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Histograms {
    pub wake_ns: Histogram,
    pub exec_ns: Histogram,
    pub rtt_ns: Histogram,
}

/// A histogram as the control protocol carries it: cumulative bucket counts at fixed upper
/// bounds (`le`), the exact sum and the count (the `+Inf` bucket).
#[derive(Debug, Clone, Deserialize)]
pub struct Histogram {
    pub count: u64,
    pub sum: f64,
    #[serde(default)]
    pub max: Option<f64>,
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    /// Checks what Prometheus needs of a histogram (bounds increasing, counts cumulative and at
    /// most `count`); `what` names the field in the error.
    pub fn check(&self, what: &str) -> Result<(), String> {
        let mut last: Option<(f64, u64)> = None;
        for (i, &(le, n)) in self.buckets.iter().enumerate() {
            if !le.is_finite() {
                return Err(format!("{what}.buckets[{i}]: bound {le} is not finite"));
            }
            if let Some((ple, pn)) = last {
                if le <= ple {
                    return Err(format!(
                        "{what}.buckets[{i}]: bound {le} does not exceed the previous one ({ple})"
                    ));
                }
                if n < pn {
                    return Err(format!(
                        "{what}.buckets[{i}]: count {n} is below the previous bucket's ({pn}); \
                         the counts must be cumulative"
                    ));
                }
            }
            if n > self.count {
                return Err(format!(
                    "{what}.buckets[{i}]: count {n} exceeds the histogram's count {}",
                    self.count
                ));
            }
            last = Some((le, n));
        }
        if !self.sum.is_finite() {
            return Err(format!("{what}.sum: {} is not finite", self.sum));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct SubdeviceState {
    pub position: u32,
    /// AL status register 0x0130 bits 0..3 (ETG.1000.6 Table 9: 1 INIT, 2 PRE-OP, 3 BOOT,
    /// 4 SAFE-OP, 8 OP).
    pub al_state: u8,
    /// The device's name, when the master puts it here (else the `scan` reply's).
    #[serde(default)]
    pub name: Option<String>,
    /// CoE emergencies received from this subdevice, when the master counts them per position.
    #[serde(default)]
    pub emergencies: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Dc {
    pub locked: bool,
    pub drift_ppm: f64,
    pub phase_error_abs_ns: Histogram,
    pub sync_window_violations: u64,
    #[serde(default)]
    pub system_time_difference_ns: Vec<TimeDifference>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TimeDifference {
    pub position: u32,
    pub ns: i64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Axis {
    pub name: String,
    pub position: u32,
    pub state: String,
    pub faults: u64,
    pub following_error_abs: Histogram,
}

/// The `counters` reply's `data`: the background poller's last reading of the ESC error
/// counters (registers 0x0300..0x0313).
#[derive(Debug, Clone, Deserialize)]
pub struct EscCounters {
    pub polled_unix_ns: u64,
    pub subdevices: Vec<SubdeviceCounters>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SubdeviceCounters {
    pub position: u32,
    pub ports: Vec<PortCounters>,
    pub processing_unit: u8,
    pub pdi: u8,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PortCounters {
    pub port: u8,
    pub invalid_frame: u8,
    pub rx_error: u8,
    pub forwarded: u8,
    pub lost_link: u8,
}

/// One entry of the `scan` reply: only the name is used (for the `name` label).
#[derive(Debug, Clone, Deserialize)]
pub struct ScanEntry {
    pub position: u32,
    #[serde(default)]
    pub name: Option<String>,
}

impl Status {
    /// The checks serde cannot do: every histogram well-formed.
    pub fn check(&self) -> Result<(), String> {
        self.histograms.wake_ns.check("histograms.wake_ns")?;
        self.histograms.exec_ns.check("histograms.exec_ns")?;
        self.histograms.rtt_ns.check("histograms.rtt_ns")?;
        if let Some(dc) = &self.dc {
            dc.phase_error_abs_ns.check("dc.phase_error_abs_ns")?;
        }
        for (i, a) in self.axes.iter().flatten().enumerate() {
            a.following_error_abs
                .check(&format!("axes[{i}].following_error_abs"))?;
        }
        Ok(())
    }
}
