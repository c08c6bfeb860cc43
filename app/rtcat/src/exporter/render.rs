//! The Prometheus text exposition format, version 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format>):
//! `# HELP` and `# TYPE` once per metric family, before its samples; label values with `\`, `"`
//! and line feeds escaped; histograms as cumulative `_bucket{le="..."}` lines ending with
//! `le="+Inf"` (= `_count`), then `_sum` and `_count`. Names follow the naming conventions
//! (<https://prometheus.io/docs/practices/naming/>): base units (seconds, ratios), `_total` on
//! counters, the unit before it.

use super::model::{EscCounters, Histo, PortCounters, Status, SubdeviceCounters};
use rtcat_control::protocol::AxisStatus;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Everything one scrape learned.
#[derive(Debug, Default)]
pub struct Scrape {
    /// The `status` reply, or why there is none.
    pub status: Option<Status>,
    /// The `counters` reply (absent when the master could not be asked or it failed).
    pub counters: Option<EscCounters>,
    /// Device names by position (from `scan`, asked again when the generation changes).
    pub names: BTreeMap<u16, String>,
    /// Seconds the scrape took to ask the master.
    pub duration_s: f64,
}

/// The exporter's own counters, kept across scrapes.
#[derive(Debug, Default, Clone)]
pub struct ExporterCounters {
    pub scrapes: u64,
    /// Failed requests to the control socket, by command (`status`, `counters`, `scan`).
    pub errors: BTreeMap<&'static str, u64>,
}

/// The CiA 402 states (IEC 61800-7-201, the state machine of the statusword 0x6041), as the
/// master names them in `axes[].state`.
const AXIS_STATES: [&str; 8] = [
    "not ready to switch on",
    "switch on disabled",
    "ready to switch on",
    "switched on",
    "operation enabled",
    "quick stop active",
    "fault reaction active",
    "fault",
];

const MASTER_STATES: [&str; 4] = ["starting", "op", "recovering", "stopped"];

/// A label value escaped per the format: backslash, double quote and line feed.
pub fn escape_label(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

/// A HELP text escaped per the format: backslash and line feed.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value: Go's ParseFloat reads Rust's shortest round-trip representation; the
/// non-finite values have their own spelling in the format.
fn value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// Builds the page: each family's header, then its samples.
#[derive(Default)]
struct Page {
    out: String,
}

type Labels<'a> = &'a [(&'a str, String)];

impl Page {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: Labels, v: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(val));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", value(v));
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, v: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], v);
    }

    /// A histogram family with one series per label set; the bounds and the sum are divided by
    /// `per` for the family's unit (1e9: ns to seconds; a division, correctly rounded, so that
    /// 2959359 ns prints as 0.002959359 and not as 0.0029593590000000004).
    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        series: &[(Vec<(&str, String)>, &Histo)],
        per: f64,
    ) {
        if series.is_empty() {
            return;
        }
        self.family(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        for (labels, h) in series {
            for &(le, n) in &h.buckets {
                let mut l = labels.clone();
                l.push(("le", value(le as f64 / per)));
                self.sample(&bucket, &l, n as f64);
            }
            let mut l = labels.clone();
            l.push(("le", "+Inf".into()));
            self.sample(&bucket, &l, h.count as f64);
            self.sample(&format!("{name}_sum"), labels, h.sum as f64 / per);
            self.sample(&format!("{name}_count"), labels, h.count as f64);
        }
    }
}

/// The `/metrics` page of one scrape.
pub fn render(s: &Scrape, own: &ExporterCounters) -> String {
    let mut p = Page::default();
    let up = s.status.is_some();
    p.one(
        "rtcat_up",
        "gauge",
        "1 when the master answered on its control socket, 0 when it did not (down, starting, or a malformed reply)",
        if up { 1.0 } else { 0.0 },
    );
    p.one(
        "rtcat_exporter_scrapes_total",
        "counter",
        "Scrapes this exporter answered",
        own.scrapes as f64,
    );
    p.family(
        "rtcat_exporter_control_errors_total",
        "counter",
        "Failed requests to the master's control socket, by command",
    );
    for cmd in ["status", "counters", "scan"] {
        let n = own.errors.get(cmd).copied().unwrap_or(0);
        p.sample(
            "rtcat_exporter_control_errors_total",
            &[("command", cmd.into())],
            n as f64,
        );
    }
    p.one(
        "rtcat_exporter_scrape_duration_seconds",
        "gauge",
        "Time this scrape took to ask the master",
        s.duration_s,
    );
    let names = &s.names;
    if let Some(st) = &s.status {
        status(&mut p, st, names);
    }
    if let Some(c) = &s.counters {
        esc_counters(&mut p, c, names);
    }
    p.out
}

fn name_of(names: &BTreeMap<u16, String>, position: u16) -> String {
    names.get(&position).cloned().unwrap_or_default()
}

fn status(p: &mut Page, st: &Status, names: &BTreeMap<u16, String>) {
    p.family(
        "rtcat_master_state",
        "gauge",
        "The master's state: 1 for the current one",
    );
    let mut states: Vec<&str> = MASTER_STATES.to_vec();
    if !states.contains(&st.state.as_str()) {
        states.push(&st.state);
    }
    for s in states {
        let v = if s == st.state { 1.0 } else { 0.0 };
        p.sample("rtcat_master_state", &[("state", s.into())], v);
    }
    p.one(
        "rtcat_generation",
        "gauge",
        "Generation of the process-data layout (changes when the segment is re-initialised with another layout)",
        st.generation as f64,
    );
    p.one(
        "rtcat_cycle_period_seconds",
        "gauge",
        "Configured cycle period",
        st.period_ns as f64 / 1e9,
    );
    p.one(
        "rtcat_uptime_seconds",
        "gauge",
        "Time since the master started",
        st.uptime_s,
    );
    p.one(
        "rtcat_subdevices",
        "gauge",
        "Subdevices of the segment",
        st.subdevices as f64,
    );
    p.one(
        "rtcat_pdi_bytes",
        "gauge",
        "Bytes of the process data image",
        st.pdi_bytes as f64,
    );
    p.one(
        "rtcat_expected_wkc",
        "gauge",
        "Working counter the cyclic frame is expected to return",
        st.expected_wkc as f64,
    );
    let c = &st.counters;
    let counters: [(&str, &str, u64); 11] = [
        ("rtcat_cycles_total", "Cycles run", c.cycles),
        (
            "rtcat_missed_deadlines_total",
            "Cycles whose work ended after the next period began",
            c.missed_deadlines,
        ),
        (
            "rtcat_skipped_periods_total",
            "Periods skipped to catch up after an overrun",
            c.skipped_periods,
        ),
        (
            "rtcat_lost_frames_total",
            "Cyclic frames that did not come back in time",
            c.frames_lost,
        ),
        (
            "rtcat_wkc_mismatches_total",
            "Cycles whose working counter differed from the expected one",
            c.wkc_mismatches,
        ),
        (
            "rtcat_not_op_cycles_total",
            "Cycles run while the segment was not in OP",
            c.not_op_cycles,
        ),
        (
            "rtcat_rejected_frames_total",
            "Received frames rejected (not ours, malformed, stale)",
            c.rx_rejected,
        ),
        (
            "rtcat_send_errors_total",
            "Frames the NIC refused to send",
            c.send_errors,
        ),
        (
            "rtcat_recoveries_total",
            "Re-initialisations of the segment",
            c.recoveries,
        ),
        (
            "rtcat_failed_recoveries_total",
            "Re-initialisations that did not bring the segment back to OP",
            c.failed_recoveries,
        ),
        (
            "rtcat_coe_emergencies_total",
            "CoE emergency messages received from the subdevices",
            c.emergencies,
        ),
    ];
    for (name, help, v) in counters {
        p.one(name, "counter", help, v as f64);
    }
    let h = &st.histograms;
    let hists: [(&str, &str, &Histo); 3] = [
        (
            "rtcat_wake_lateness_seconds",
            "How late the cyclic thread woke after its deadline",
            &h.wake_ns,
        ),
        (
            "rtcat_exec_time_seconds",
            "Execution time of one cycle's work",
            &h.exec_ns,
        ),
        (
            "rtcat_round_trip_seconds",
            "Round trip of the cyclic frame",
            &h.rtt_ns,
        ),
    ];
    for (name, help, hist) in hists {
        p.histogram(name, help, &[(vec![], hist)], 1e9);
    }
    for (name, help, hist) in hists {
        let n = name.replace("_seconds", "_max_seconds");
        let help = format!("{help}: the largest value since the master started");
        p.one(&n, "gauge", &help, hist.max as f64 / 1e9);
    }
    if !st.subdevice_states.is_empty() {
        let sds = &st.subdevice_states;
        let labels = |pos: u16| [("position", pos.to_string()), ("name", name_of(names, pos))];
        p.family(
            "rtcat_subdevice_al_state",
            "gauge",
            "AL state of the subdevice (ETG.1000.6 AL status 0x0130 bits 0..3: 1 INIT, 2 PRE-OP, 3 BOOT, 4 SAFE-OP, 8 OP)",
        );
        for sd in sds {
            let state = f64::from(sd.al_state & 0x0f);
            p.sample("rtcat_subdevice_al_state", &labels(sd.position), state);
        }
        p.family(
            "rtcat_subdevice_al_error",
            "gauge",
            "1 when the subdevice signals an error (AL status 0x0130 bit 4; the code is rtcat_subdevice_al_status_code)",
        );
        for sd in sds {
            let err = f64::from((sd.al_state >> 4) & 1);
            p.sample("rtcat_subdevice_al_error", &labels(sd.position), err);
        }
        p.family(
            "rtcat_subdevice_al_status_code",
            "gauge",
            "AL status code of the subdevice (0x0134; ETG.1000.6 Table 11, 0 = no error)",
        );
        for sd in sds {
            let code = f64::from(sd.al_status_code);
            p.sample("rtcat_subdevice_al_status_code", &labels(sd.position), code);
        }
        p.family(
            "rtcat_subdevice_coe_emergencies_total",
            "counter",
            "CoE emergency messages received from the subdevice",
        );
        for sd in sds {
            let n = sd.emergencies as f64;
            p.sample(
                "rtcat_subdevice_coe_emergencies_total",
                &labels(sd.position),
                n,
            );
        }
    }
    if let Some(a) = &st.availability {
        availability(p, a, names);
    }
    if let Some(u) = &st.unexpected_devices {
        p.one(
            "rtcat_unexpected_devices",
            "gauge",
            "Devices on the segment where the configuration places none (plugged in while the line runs; never driven)",
            f64::from(u.count),
        );
        if let Some(first) = u.first_position {
            p.one(
                "rtcat_unexpected_devices_first_position",
                "gauge",
                "Position of the first device the configuration does not place",
                f64::from(first),
            );
        }
    }
    if let Some(dc) = &st.dc {
        p.one(
            "rtcat_dc_locked",
            "gauge",
            "1 when the distributed clocks phase lock holds",
            if dc.locked { 1.0 } else { 0.0 },
        );
        p.one(
            "rtcat_dc_drift_ratio",
            "gauge",
            "Drift of the master's clock against the reference clock (ppm × 1e-6)",
            dc.drift_ppm / 1e6,
        );
        p.one(
            "rtcat_dc_sync_window_violations_total",
            "counter",
            "Cycles whose phase error was outside the sync window",
            dc.sync_window_violations as f64,
        );
        p.histogram(
            "rtcat_dc_phase_error_seconds",
            "Absolute phase error of the cycle against the DC reference",
            &[(vec![], &dc.phase_error_abs_ns)],
            1e9,
        );
        if !dc.system_time_difference_ns.is_empty() {
            p.family(
                "rtcat_dc_system_time_difference_seconds",
                "gauge",
                "System time difference of the subdevice's clock (ESC register 0x092C)",
            );
            for d in &dc.system_time_difference_ns {
                let labels = [
                    ("position", d.position.to_string()),
                    ("name", name_of(names, d.position)),
                ];
                p.sample(
                    "rtcat_dc_system_time_difference_seconds",
                    &labels,
                    d.ns as f64 / 1e9,
                );
            }
        }
    }
    if let Some(axes) = st.axes.as_ref().filter(|a| !a.is_empty()) {
        p.family(
            "rtcat_axis_state",
            "gauge",
            "CiA 402 state of the axis: 1 for the current one",
        );
        for a in axes {
            let mut states: Vec<&str> = AXIS_STATES.to_vec();
            if !states.contains(&a.state.as_str()) {
                states.push(&a.state);
            }
            for s in states {
                let labels = [
                    ("axis", a.name.clone()),
                    ("position", a.position.to_string()),
                    ("state", s.to_string()),
                ];
                let v = if s == a.state { 1.0 } else { 0.0 };
                p.sample("rtcat_axis_state", &labels, v);
            }
        }
        p.family(
            "rtcat_axis_faults_total",
            "counter",
            "Faults of the axis' drive",
        );
        for a in axes {
            let labels = [
                ("axis", a.name.clone()),
                ("position", a.position.to_string()),
            ];
            p.sample("rtcat_axis_faults_total", &labels, a.faults as f64);
        }
        axis_bad_cycles(p, axes);
        p.family(
            "rtcat_axis_following_error_last_increments",
            "gauge",
            "The axis' following error in the last cycle, the master's own (set-point sent minus \
             position actual), in position increments",
        );
        for a in axes {
            let labels = [
                ("axis", a.name.clone()),
                ("position", a.position.to_string()),
            ];
            p.sample(
                "rtcat_axis_following_error_last_increments",
                &labels,
                a.following_error as f64,
            );
        }
        axis_drive_following_error(p, axes);
        let series: Vec<(Vec<(&str, String)>, &Histo)> = axes
            .iter()
            .map(|a| {
                (
                    vec![
                        ("axis", a.name.clone()),
                        ("position", a.position.to_string()),
                    ],
                    &a.following_error_abs,
                )
            })
            .collect();
        p.histogram(
            "rtcat_axis_following_error_increments",
            "Absolute following error of the axis, in position increments",
            &series,
            1.0,
        );
    }
}

/// Quick stops and held bad cycles per axis (counters).
fn axis_bad_cycles(p: &mut Page, axes: &[AxisStatus]) {
    for (name, help, value) in [
        (
            "rtcat_axis_quick_stops_total",
            "Quick stops the master commanded because of bad cycles",
            (|a: &AxisStatus| a.quick_stops) as fn(&AxisStatus) -> u64,
        ),
        (
            "rtcat_axis_held_cycles_total",
            "Bad cycles through which the axis' last set-point was held (no quick stop)",
            |a: &AxisStatus| a.held_cycles,
        ),
    ] {
        p.family(name, "counter", help);
        for a in axes {
            let labels = [
                ("axis", a.name.clone()),
                ("position", a.position.to_string()),
            ];
            p.sample(name, &labels, value(a) as f64);
        }
    }
}

/// The drive's own following error 0x60F4, beside the master's (only axes whose drive maps it).
fn axis_drive_following_error(p: &mut Page, axes: &[AxisStatus]) {
    let name = "rtcat_axis_drive_following_error_last_increments";
    if axes.iter().all(|a| a.drive_following_error.is_none()) {
        return;
    }
    p.family(
        name,
        "gauge",
        "The following error actual 0x60F4 the axis' drive reported in the last cycle, in \
         position increments",
    );
    for a in axes {
        if let Some(f) = a.drive_following_error {
            let labels = [
                ("axis", a.name.clone()),
                ("position", a.position.to_string()),
            ];
            p.sample(name, &labels, f as f64);
        }
    }
}

/// A gauge family: name, help, and the register it shows.
type Family<T> = (&'static str, &'static str, fn(&T) -> u8);

fn esc_counters(p: &mut Page, c: &EscCounters, names: &BTreeMap<u16, String>) {
    p.one(
        "rtcat_esc_counters_polled_timestamp_seconds",
        "gauge",
        "When the master last read the ESC error counters (Unix time)",
        c.polled_unix_ns as f64 / 1e9,
    );
    // Gauges, not counters: each register is 8 bits, stops at 255 and is cleared by a write
    // (Beckhoff ESC datasheet section II, 0x0300..0x0313), which breaks a counter's contract.
    let ports: [Family<PortCounters>; 4] = [
        (
            "rtcat_esc_invalid_frames",
            "Invalid frames received at the port (ESC 0x0300 + 2*port; stops at 255)",
            |p| p.invalid_frame,
        ),
        (
            "rtcat_esc_rx_errors",
            "Physical layer RX errors at the port (ESC 0x0301 + 2*port; stops at 255)",
            |p| p.rx_error,
        ),
        (
            "rtcat_esc_forwarded_errors",
            "Frames that arrived at the port already marked broken (ESC 0x0308 + port; stops at 255)",
            |p| p.forwarded,
        ),
        (
            "rtcat_esc_lost_links",
            "Times the port lost its link (ESC 0x0310 + port; stops at 255)",
            |p| p.lost_link,
        ),
    ];
    for (name, help, get) in ports {
        p.family(name, "gauge", help);
        for sd in &c.subdevices {
            for port in &sd.ports {
                let labels = [
                    ("position", sd.position.to_string()),
                    ("name", name_of(names, sd.position)),
                    ("port", port.port.to_string()),
                ];
                p.sample(name, &labels, f64::from(get(port)));
            }
        }
    }
    let whole: [Family<SubdeviceCounters>; 2] = [
        (
            "rtcat_esc_processing_unit_errors",
            "Invalid frames that passed the EtherCAT processing unit (ESC 0x030C; stops at 255)",
            |s| s.processing_unit,
        ),
        (
            "rtcat_esc_pdi_errors",
            "Errors of the process data interface (ESC 0x030D; stops at 255)",
            |s| s.pdi,
        ),
    ];
    for (name, help, get) in whole {
        p.family(name, "gauge", help);
        for sd in &c.subdevices {
            let labels = [
                ("position", sd.position.to_string()),
                ("name", name_of(names, sd.position)),
            ];
            p.sample(name, &labels, f64::from(get(sd)));
        }
    }
}

/// Time in OP and outages (issue 28): the segment's without labels, each subdevice's by
/// position and name.
fn availability(
    p: &mut Page,
    a: &rtcat_control::protocol::AvailabilityStatus,
    names: &BTreeMap<u16, String>,
) {
    type Of = fn(&rtcat_control::protocol::Availability) -> f64;
    let families: [(&str, &str, &str, Of); 5] = [
        (
            "rtcat_time_in_op_seconds_total",
            "counter",
            "Time with valid process data (in OP)",
            |a| a.time_in_op_s,
        ),
        (
            "rtcat_invalid_data_cycles_total",
            "counter",
            "Cycles whose process data was invalid",
            |a| a.invalid_cycles as f64,
        ),
        (
            "rtcat_outages_total",
            "counter",
            "Outages: runs of cycles with invalid data (an open one included)",
            |a| a.outages as f64,
        ),
        (
            "rtcat_outage_seconds_total",
            "counter",
            "Total duration of the outages",
            |a| a.outage_total_ms / 1e3,
        ),
        ("rtcat_outage_max_seconds", "gauge", "Longest outage", |a| {
            a.outage_max_ms / 1e3
        }),
    ];
    for (name, kind, help, of) in families {
        p.family(name, kind, help);
        p.sample(name, &[("scope", "segment".to_string())], of(&a.segment));
        for s in &a.subdevices {
            let pos = s.position.unwrap_or(0);
            let labels = [
                ("scope", "subdevice".to_string()),
                ("position", pos.to_string()),
                ("name", name_of(names, pos)),
            ];
            p.sample(name, &labels, of(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }

    #[test]
    fn values_spell_the_non_finite_ones() {
        assert_eq!(value(1e-6), "0.000001");
        assert_eq!(value(f64::INFINITY), "+Inf");
        assert_eq!(value(f64::NAN), "NaN");
        assert_eq!(value(3.0), "3");
    }

    #[test]
    fn nanoseconds_print_as_their_decimal_seconds() {
        let mut st = Status::default();
        st.histograms.exec_ns.max = 2_959_359;
        st.histograms.rtt_ns.sum = 430_000_999;
        st.period_ns = 1_000_000;
        let s = Scrape {
            status: Some(st),
            ..Default::default()
        };
        let page = render(&s, &ExporterCounters::default());
        assert!(
            page.contains("\nrtcat_exec_time_max_seconds 0.002959359\n"),
            "{page}"
        );
        assert!(
            page.contains("\nrtcat_round_trip_seconds_sum 0.430000999\n"),
            "{page}"
        );
        assert!(
            page.contains("\nrtcat_cycle_period_seconds 0.001\n"),
            "{page}"
        );
    }

    #[test]
    fn devices_the_configuration_does_not_place_are_a_gauge() {
        use rtcat_control::protocol::{Status, UnexpectedDevices};
        let mut st = Status {
            unexpected_devices: Some(UnexpectedDevices {
                count: 3,
                first_position: Some(4),
                max: 3,
            }),
            ..Status::default()
        };
        let scrape = |st: &Status| {
            render(
                &Scrape {
                    status: Some(st.clone()),
                    ..Scrape::default()
                },
                &ExporterCounters::default(),
            )
        };
        let page = scrape(&st);
        assert!(page.contains("\nrtcat_unexpected_devices 3\n"), "{page}");
        assert!(page.contains("\nrtcat_unexpected_devices_first_position 4\n"));
        st.unexpected_devices = Some(UnexpectedDevices {
            count: 0,
            first_position: None,
            max: 3,
        });
        let page = scrape(&st);
        assert!(page.contains("\nrtcat_unexpected_devices 0\n"));
        assert!(!page.contains("rtcat_unexpected_devices_first_position"));
        st.unexpected_devices = None;
        assert!(!scrape(&st).contains("rtcat_unexpected_devices"));
    }

    #[test]
    fn a_master_that_is_down_is_up_0_with_the_error_counted() {
        let mut own = ExporterCounters {
            scrapes: 4,
            ..Default::default()
        };
        own.errors.insert("status", 2);
        let page = render(&Scrape::default(), &own);
        assert!(page.contains("\nrtcat_up 0\n") || page.starts_with("# HELP rtcat_up"));
        assert!(page.contains("rtcat_up 0\n"));
        assert!(page.contains("rtcat_exporter_control_errors_total{command=\"status\"} 2\n"));
        assert!(!page.contains("rtcat_cycles_total"));
    }
}
