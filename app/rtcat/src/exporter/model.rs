//! What the exporter reads from the master's control socket: the `status` reply (the control
//! protocol's own [`Status`]) and the `counters` and `scan` replies, which the protocol passes
//! through as JSON (`rtcat counters --json`, `rtcat scan --json`), as far as the exporter uses
//! them.
//!
//! Fields the master adds later are ignored (serde's default); a field that is missing or of the
//! wrong type is an error naming it, and the scrape then says `rtcat_up 0` instead of rendering
//! half a reply.

use serde::Deserialize;

pub use rtcat_control::protocol::{Histo, Status};

/// Checks what Prometheus needs of a histogram (bounds increasing, counts cumulative and at
/// most `count`); `what` names the field in the error.
pub fn check_histogram(h: &Histo, what: &str) -> Result<(), String> {
    let mut last: Option<(u64, u64)> = None;
    for (i, &(le, n)) in h.buckets.iter().enumerate() {
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
        if n > h.count {
            return Err(format!(
                "{what}.buckets[{i}]: count {n} exceeds the histogram's count {}",
                h.count
            ));
        }
        last = Some((le, n));
    }
    Ok(())
}

/// The checks serde cannot do on a `status` reply: every histogram well-formed.
pub fn check_status(st: &Status) -> Result<(), String> {
    check_histogram(&st.histograms.wake_ns, "histograms.wake_ns")?;
    check_histogram(&st.histograms.exec_ns, "histograms.exec_ns")?;
    check_histogram(&st.histograms.rtt_ns, "histograms.rtt_ns")?;
    if let Some(dc) = &st.dc {
        check_histogram(&dc.phase_error_abs_ns, "dc.phase_error_abs_ns")?;
    }
    for (i, a) in st.axes.iter().flatten().enumerate() {
        check_histogram(
            &a.following_error_abs,
            &format!("axes[{i}].following_error_abs"),
        )?;
    }
    Ok(())
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
    pub position: u16,
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
    pub position: u16,
    #[serde(default)]
    pub name: Option<String>,
}
