//! rtcat's configuration file (TOML). Unknown keys and out-of-range values are rejected with a
//! message naming the key, the value and the allowed range.

use crate::invalid::Invalid;
use crate::period::Period;
pub use crate::wait::WaitMode;
use serde::Deserialize;
use std::path::Path;
use thiserror::Error;

/// Where `rtcat run` looks for its configuration by default.
pub const DEFAULT_CONFIG: &str = "/etc/rtcat/rtcat.toml";

/// Largest configuration file read (a real one is a few KiB; this bounds what a wrong path such
/// as a log file or a device costs).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Debug, Error)]
/// Why a configuration was refused.
pub enum ConfigError {
    #[error("cannot read config: {source}")]
    /// The file could not be read.
    Read {
        /// The file.
        path: String,
        /// Why it could not be read.
        source: safefs::Error,
    },
    #[error("config {path}: {}", clip_lines(message))]
    /// The file is not valid TOML for this schema.
    Parse {
        /// The file.
        path: String,
        /// The parser's message (names the key and line).
        message: String,
    },
    #[error("config {path}: {key} = {}: {}", clip(value), clip(message))]
    /// A value is out of range: the key, the value and the allowed range are named.
    Invalid {
        /// The file.
        path: String,
        /// The key (`cycle.period_us`).
        key: String,
        /// The value found.
        value: String,
        /// What is allowed.
        message: String,
    },
}

pub use crate::invalid::{MAX_QUOTED, clip, clip_lines};

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
/// The master's configuration: the sections of `rtcat.toml` the master reads (the `rtcat`
/// binary's file embeds it and adds `[ipc]`, `[control]`, `[shm]`, `[output]`, `[tune]`,
/// `[gateway]` and `[[eoe]]`); every section has defaults.
pub struct Config {
    /// `[bus]`: the interface and the bring-up timeouts.
    pub bus: BusConfig,
    /// `[cycle]`: period, CPU, priority, TX/RX mode.
    pub cycle: CycleConfig,
    /// `[rt]`: process-wide real-time settings.
    pub rt: RtConfig,
    /// `[segment]`: what the segment must look like.
    pub segment: SegmentConfig,
    /// `[health]`: when to recover and when to give up.
    pub health: HealthConfig,
    /// `[[device]]`: PDO assignment, mapping and startup SDOs written in PRE-OP at every
    /// bring-up and recovery (see [`crate::devices`]).
    pub device: Vec<crate::devices::DeviceConfig>,
    /// `[dc]`: distributed clocks (SYNC0, the phase lock); off by default.
    pub dc: crate::dc::DcConfig,
    /// `[[axis]]`: CiA 402 drives used as axes (see [`crate::axis`]). After [`Config::parse`],
    /// `device` also holds the device configuration of every axis no `[[device]]` configures.
    pub axis: Vec<crate::axis::AxisConfig>,
    /// `[[group]]`: devices that belong together; an optional group's members may be absent
    /// and come back while the rest runs (see [`crate::hotconnect`]).
    pub group: Vec<crate::hotconnect_config::GroupConfig>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
/// `[bus]`.
pub struct BusConfig {
    /// NIC wired to the EtherCAT segment.
    pub interface: String,
    /// How long a cycle waits for its frames to come back, in µs; absent: 90 % of the period.
    pub response_timeout_us: Option<u32>,
    /// PDU timeout during initialisation (ms).
    pub init_pdu_timeout_ms: u32,
    /// SII EEPROM timeout during initialisation (ms).
    pub init_eeprom_timeout_ms: u32,
    /// AL state transition timeout (ms).
    pub state_timeout_ms: u32,
    /// The socket that carries the frames (docs/NOTES.md §1.5).
    pub link: LinkKind,
    /// With `link = "xdp"`: the receive queue of the interface the AF_XDP socket binds to.
    pub xdp_queue: u32,
    /// File the SII images read at bring-up are kept in across restarts (`None`: kept in
    /// memory for the run only). Each is checked against its device before use
    /// (`sii_cache` module).
    pub sii_cache: Option<std::path::PathBuf>,
    /// Subdevices whose SII is read (or checked against the cache) at the same time in PRE-OP:
    /// each ESC has its own EEPROM interface. 1 = one after another.
    pub sii_in_flight: u16,
    /// Subdevices whose `[[device]]` SDO configuration and mapping read-back run at the same
    /// time in PRE-OP (their mailbox answers overlap, one frame on the wire at a time). 1 = one
    /// after another.
    pub config_in_flight: u16,
    /// Who brings the segment up: rtcat's own (the default), or ethercrab's group
    /// initialisation (the same segment in OP, slower; docs/NOTES.md §17.4).
    pub bring_up: BringUp,
}

/// `[bus] bring_up`: who brings the segment up (docs/NOTES.md §17.4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BringUp {
    /// ethercrab 0.7.1's group initialisation (scan, PRE-OP, process data sizing over CoE),
    /// kept as the fallback for a device rtcat's own does not bring up.
    Ethercrab,
    /// rtcat's own: every step for all subdevices at once, the sync managers and FMMUs
    /// computed from the SII and the layout.
    #[default]
    Rtcat,
}

/// `[bus] link`: which socket carries the EtherCAT frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkKind {
    /// AF_PACKET raw socket (needs CAP_NET_RAW).
    Packet,
    /// AF_XDP, the XDP program native if the driver supports it, else generic (needs
    /// CAP_NET_RAW, CAP_NET_ADMIN, CAP_BPF); fails with the reason where it cannot.
    Xdp,
    /// AF_XDP with the program in the driver only (refused where the driver has no XDP).
    XdpNative,
    /// AF_XDP with generic XDP (any interface, copying).
    XdpGeneric,
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            interface: "eth1".into(),
            response_timeout_us: None,
            init_pdu_timeout_ms: 100,
            init_eeprom_timeout_ms: 100,
            state_timeout_ms: 5000,
            link: LinkKind::Packet,
            xdp_queue: 0,
            sii_cache: None,
            sii_in_flight: 8,
            config_in_flight: 8,
            bring_up: BringUp::Rtcat,
        }
    }
}

/// Who moves the frames during cyclic operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TxRxMode {
    /// The cyclic thread sends, waits for and processes its own frames: no thread hand-off.
    Inline,
    /// A separate TX/RX thread (pinned to `txrx_cpu`) moves the frames.
    Thread,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
/// `[cycle]`.
pub struct CycleConfig {
    /// Cycle period in µs.
    pub period_us: u32,
    /// CPU of the cyclic thread (the RT CPU); absent: not pinned.
    pub cpu: Option<usize>,
    /// SCHED_FIFO priority of the cyclic thread.
    pub priority: u8,
    /// Who moves the frames.
    pub txrx: TxRxMode,
    /// CPU of the TX/RX thread (`txrx = "thread"`); absent: the cycle's CPU.
    pub txrx_cpu: Option<usize>,
    /// SCHED_FIFO priority of the TX/RX thread.
    pub txrx_priority: u8,
    /// How the inline cycle waits for its replies (docs/NOTES.md §1.2); absent:
    /// [`WaitMode::DEFAULT`] inline (a TX/RX thread always sleeps in `ppoll`).
    pub wait: Option<WaitMode>,
}

impl CycleConfig {
    /// How the inline cycle waits: `wait`, or the default.
    pub fn wait_mode(&self) -> WaitMode {
        self.wait.unwrap_or(WaitMode::DEFAULT)
    }

    /// The cycle period (`period_us`).
    pub fn period(&self) -> Period {
        Period::from_micros(self.period_us)
    }
}

impl Default for CycleConfig {
    fn default() -> Self {
        CycleConfig {
            period_us: 1000,
            cpu: None,
            priority: 80,
            txrx: TxRxMode::Inline,
            txrx_cpu: None,
            txrx_priority: 81,
            wait: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
/// `[rt]`.
pub struct RtConfig {
    /// mlockall(MCL_CURRENT | MCL_FUTURE) once the segment is up.
    pub lock_memory: bool,
    /// Hold /dev/cpu_dma_latency at 0 µs while running (no deep C-states).
    pub hold_cpu_dma_latency: bool,
    /// Timer slack of the cyclic thread (ns).
    pub timer_slack_ns: u64,
    /// Stack the cyclic thread prefaults before its first cycle (KiB).
    pub prefault_stack_kib: u32,
}

impl Default for RtConfig {
    fn default() -> Self {
        RtConfig {
            lock_memory: true,
            hold_cpu_dma_latency: true,
            timer_slack_ns: 1,
            prefault_stack_kib: 256,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[[segment.device]]`: identity the subdevice at a position must have.
pub struct ExpectedDevice {
    /// Position in the segment.
    pub position: u16,
    /// Vendor ID it must have.
    pub vendor_id: Option<u32>,
    /// Product code it must have.
    pub product_id: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
/// `[segment]`.
pub struct SegmentConfig {
    /// Expected number of subdevices; absent: whatever is found.
    pub subdevices: Option<u16>,
    /// Expected working counter; absent: derived from the mapping (+2 outputs, +1 inputs).
    pub expected_wkc: Option<u32>,
    /// Identities to check at every bring-up.
    pub device: Vec<ExpectedDevice>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
/// `[health]`.
pub struct HealthConfig {
    /// Consecutive bad cycles (WKC mismatch, lost frame, subdevice not in OP) before the master
    /// re-initialises the segment.
    pub bad_cycles_before_recovery: u32,
    /// Give up (exit non-zero) after this many recoveries in a row that failed; 0 = never.
    pub max_failed_recoveries: u32,
    /// Pause between failed recovery attempts (ms).
    pub recovery_backoff_ms: u32,
    /// What a subdevice leaving OP brings back: itself alone (the others cycle on) or the
    /// whole segment.
    pub recovery: RecoveryPolicy,
    /// Failed recoveries of one subdevice in a row before the whole segment is re-initialised
    /// (`recovery = "subdevice"`).
    pub subdevice_attempts: u32,
}

/// `[health] recovery`: what a subdevice leaving OP brings back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecoveryPolicy {
    /// That subdevice alone, outside the real-time path, while the others stay in OP; the whole
    /// segment only for what needs it (frames lost, an unexplained working counter,
    /// `subdevice_attempts` failures in a row).
    Subdevice,
    /// The whole segment is re-initialised after `bad_cycles_before_recovery` bad cycles.
    Segment,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            bad_cycles_before_recovery: 10,
            max_failed_recoveries: 0,
            recovery_backoff_ms: 500,
            recovery: RecoveryPolicy::Subdevice,
            subdevice_attempts: 3,
        }
    }
}

impl Config {
    /// Read, parse and validate a file (at most [`MAX_CONFIG_BYTES`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::parse(&read_text(path)?, &path.display().to_string())
    }

    /// Parse and validate `text`; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::parse(path, &e))?;
        cfg.checked(path)
    }

    /// The one validation entry point after parsing (the `rtcat` binary's file comes through
    /// here too): every value checked ([`Config::validate`]), then the `[[device]]` entries the
    /// axes imply added.
    pub fn checked(mut self, path: &str) -> Result<Config, ConfigError> {
        self.validate(path)?;
        let generated = crate::axis::generated_devices(&self.axis, &self.device);
        self.device.extend(generated);
        Ok(self)
    }

    /// Check every value against its range; the first violation is reported.
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        self.check().map_err(|e| e.at(path))
    }

    /// Every section's check, in the file's order; each names its key.
    fn check(&self) -> Result<(), Invalid> {
        self.bus.check(&self.cycle)?;
        self.cycle.check()?;
        self.rt.check()?;
        self.segment.check()?;
        self.health.check()?;
        self.dc
            .validate(self.cycle.period_us, self.segment.subdevices)?;
        crate::devices::validate(&self.device, self.segment.subdevices)?;
        crate::axis::validate(&self.axis, &self.device)?;
        check_axis_limits(&self.axis)?;
        crate::hotconnect_config::validate(&self.group, self.segment.subdevices)?;
        // An optional member is kept out by its own recovery; the segment policy has none.
        if self.health.recovery == RecoveryPolicy::Segment
            && let Some(i) = self.group.iter().position(|g| g.optional)
        {
            return Err(Invalid::new(
                format!("group[{i}].optional"),
                true,
                "needs health.recovery = \"subdevice\" (with \"segment\" every device that \
                 leaves re-initialises the segment)",
            ));
        }
        Ok(())
    }

    /// Response timeout of one cycle: `bus.response_timeout_us`, or the period's default.
    pub fn response_timeout_ns(&self) -> u64 {
        match self.bus.response_timeout_us {
            Some(us) => Period::from_micros(us).as_nanos(),
            None => self.cycle.period().default_response_timeout_ns(),
        }
    }

    /// ethercrab's MainDevice settings (`[dc] static_sync_iterations`): every MainDevice the
    /// master creates uses them.
    pub fn maindevice_config(&self) -> ethercrab::MainDeviceConfig {
        ethercrab::MainDeviceConfig {
            dc_static_sync_iterations: self.dc.static_sync_iterations,
            ..ethercrab::MainDeviceConfig::default()
        }
    }
}

/// The text of a configuration file (a regular file of at most [`MAX_CONFIG_BYTES`]).
pub fn read_text(path: &Path) -> Result<String, ConfigError> {
    safefs::read_to_string_bounded(path, MAX_CONFIG_BYTES).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })
}

impl ConfigError {
    /// A TOML parser's error in the file `path`.
    pub fn parse(path: &str, e: &toml::de::Error) -> ConfigError {
        ConfigError::Parse {
            path: path.to_string(),
            message: e.to_string().trim_end().to_string(),
        }
    }
}

impl Invalid {
    /// This refusal in the file `path`.
    pub fn at(self, path: &str) -> ConfigError {
        ConfigError::Invalid {
            path: path.to_string(),
            key: self.key,
            value: self.value,
            message: self.message,
        }
    }
}

impl BusConfig {
    /// `[bus]` (the response timeout against the cycle period).
    fn check(&self, cycle: &CycleConfig) -> Result<(), Invalid> {
        if let Err(why) = safefs::netif::check_name(&self.interface) {
            return Err(Invalid::new(
                "bus.interface",
                format!("{:?}", self.interface),
                why,
            ));
        }
        Invalid::range(
            "cycle.period_us",
            cycle.period_us.into(),
            125,
            100_000,
            " µs",
        )?;
        if let Some(t) = self.response_timeout_us {
            Invalid::range(
                "bus.response_timeout_us",
                t.into(),
                10,
                u64::from(cycle.period_us),
                " µs (at most one period)",
            )?;
        }
        // Far above any NIC's queue count (stmmac: 8); the XSKMAP has this many slots plus one.
        Invalid::range("bus.xdp_queue", self.xdp_queue.into(), 0, 1023, "")?;
        Invalid::range(
            "bus.init_pdu_timeout_ms",
            self.init_pdu_timeout_ms.into(),
            1,
            10_000,
            " ms",
        )?;
        Invalid::range(
            "bus.init_eeprom_timeout_ms",
            self.init_eeprom_timeout_ms.into(),
            1,
            10_000,
            " ms",
        )?;
        Invalid::range("bus.sii_in_flight", self.sii_in_flight.into(), 1, 64, "")?;
        Invalid::range(
            "bus.config_in_flight",
            self.config_in_flight.into(),
            1,
            64,
            "",
        )?;
        if let Some(p) = &self.sii_cache
            && p.file_name().is_none()
        {
            return Err(Invalid::new(
                "bus.sii_cache",
                format_args!("{:?}", p.display().to_string()),
                "names no file (a path ending in a file name is needed)",
            ));
        }
        Invalid::range(
            "bus.state_timeout_ms",
            self.state_timeout_ms.into(),
            100,
            60_000,
            " ms",
        )
    }
}

impl CycleConfig {
    /// `[cycle]` (the period is checked with `[bus]`, whose timeout depends on it).
    fn check(&self) -> Result<(), Invalid> {
        Invalid::range(
            "cycle.priority",
            self.priority.into(),
            1,
            99,
            " (SCHED_FIFO)",
        )?;
        Invalid::range(
            "cycle.txrx_priority",
            self.txrx_priority.into(),
            1,
            99,
            " (SCHED_FIFO)",
        )?;
        for (key, cpu) in [("cycle.cpu", self.cpu), ("cycle.txrx_cpu", self.txrx_cpu)] {
            if let Some(c) = cpu {
                Invalid::range(key, c as u64, 0, 1023, "")?;
            }
        }
        if let Some(w) = self.wait
            && self.txrx == TxRxMode::Thread
            && w != WaitMode::Sleep
        {
            return Err(Invalid::new(
                "cycle.wait",
                format_args!("\"{w}\""),
                "needs cycle.txrx = \"inline\" (the TX/RX thread waits for the link and its \
                 wake-up in ppoll; only the inline cycle can poll)",
            ));
        }
        Ok(())
    }
}

impl RtConfig {
    /// `[rt]`.
    fn check(&self) -> Result<(), Invalid> {
        Invalid::range(
            "rt.timer_slack_ns",
            self.timer_slack_ns,
            1,
            50_000_000,
            " ns",
        )?;
        Invalid::range(
            "rt.prefault_stack_kib",
            self.prefault_stack_kib.into(),
            16,
            8192,
            " KiB",
        )
    }
}

impl SegmentConfig {
    /// `[segment]` and its `[[segment.device]]` checks.
    fn check(&self) -> Result<(), Invalid> {
        if let Some(n) = self.subdevices {
            Invalid::range(
                "segment.subdevices",
                n.into(),
                1,
                crate::limits::MAX_SUBDEVICES as u64,
                "",
            )?;
        }
        if let Some(w) = self.expected_wkc {
            Invalid::range("segment.expected_wkc", w.into(), 1, 65_535, "")?;
        }
        for (i, d) in self.device.iter().enumerate() {
            if let Some(n) = self.subdevices
                && d.position >= n
            {
                return Err(Invalid::new(
                    format!("segment.device[{i}].position"),
                    d.position,
                    format!("must be below segment.subdevices ({n})"),
                ));
            }
        }
        for (j, d) in self.device.iter().enumerate() {
            if let Some(i) = self.device[..j]
                .iter()
                .position(|e| e.position == d.position)
            {
                return Err(Invalid::new(
                    format!("segment.device[{j}].position"),
                    d.position,
                    format!("segment.device[{i}] checks the same position"),
                ));
            }
        }
        Ok(())
    }
}

impl HealthConfig {
    /// `[health]`.
    fn check(&self) -> Result<(), Invalid> {
        Invalid::range(
            "health.bad_cycles_before_recovery",
            self.bad_cycles_before_recovery.into(),
            1,
            1_000_000,
            " cycles",
        )?;
        Invalid::range(
            "health.recovery_backoff_ms",
            self.recovery_backoff_ms.into(),
            0,
            60_000,
            " ms",
        )?;
        Invalid::range(
            "health.subdevice_attempts",
            self.subdevice_attempts.into(),
            1,
            1_000,
            "",
        )
    }
}

/// Every move an axis can make, from one count to its whole range (the 32-bit target's without
/// position limits), must plan finite.
fn check_axis_limits(axes: &[crate::axis::AxisConfig]) -> Result<(), Invalid> {
    for (i, a) in axes.iter().enumerate() {
        let one = 1.0 / a.counts_per_unit;
        let range = match (a.min_position, a.max_position) {
            (Some(lo), Some(hi)) => hi - lo,
            _ => 2.0 * f64::from(i32::MAX) * one,
        };
        if let Err(why) = a.limits().check(one, range) {
            return Err(Invalid::new(
                format!("axis[{i}]"),
                format!(
                    // {:?}: 1e160, not its 161 digits.
                    "{{ max_velocity = {:?}, max_acceleration = {:?}, max_jerk = {} }}",
                    a.max_velocity,
                    a.max_acceleration,
                    a.max_jerk.map_or("none".into(), |j| format!("{j:?}"))
                ),
                format!("these limits cannot be planned: {why}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dc_static_sync_iterations_reach_every_maindevice() {
        let c = Config::parse("[dc]\nstatic_sync_iterations = 3\n", "c.toml").unwrap();
        assert_eq!(c.maindevice_config().dc_static_sync_iterations, 3);
        let c = Config::parse("", "c.toml").unwrap();
        assert!(!c.dc.enabled);
        assert_eq!(
            c.maindevice_config().dc_static_sync_iterations,
            ethercrab::MainDeviceConfig::default().dc_static_sync_iterations
        );
    }

    // Issue 26, item 8: what the first bring-up would refuse is refused by `config check`
    // (which is Config::load), and a huge value is quoted cut, with its length. (The `[ipc]`
    // cases are the binary's: app/rtcat/src/config.rs.)
    #[test]
    fn what_run_refuses_the_check_refuses_and_long_values_are_cut() {
        let e = Config::parse(
            "[segment]\n[[segment.device]]\nposition = 0\n[[segment.device]]\nposition = 0\n",
            "c.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(
                "segment.device[1].position = 0: segment.device[0] checks the same position"
            ),
            "{e}"
        );
        let c = Config::parse("[bus]\nlink = \"xdp\"\nxdp_queue = 2\n", "c.toml").unwrap();
        assert_eq!((c.bus.link, c.bus.xdp_queue), (LinkKind::Xdp, 2));
        assert_eq!(Config::default().bus.link, LinkKind::Packet);
        let c = Config::parse("[bus]\nlink = \"xdp-generic\"\n", "c.toml").unwrap();
        assert_eq!(c.bus.link, LinkKind::XdpGeneric);
        for (text, want) in [
            ("[bus]\nlink = \"af_xdp\"\n", "xdp-native"),
            ("[bus]\nxdp_queue = 1024\n", "bus.xdp_queue = 1024"),
        ] {
            let e = Config::parse(text, "c.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        let long = "e".repeat(1 << 20);
        let e = Config::parse(&format!("[bus]\ninterface = \"{long}\"\n"), "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.len() < 1000, "{} bytes", e.len());
        assert!(e.contains("bytes in all)"), "{}", clip(&e));
        let e = Config::parse(&format!("[bus]\ninterface = \"{long}\" junk\n"), "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.len() < 1000, "{} bytes", e.len());
        let many = "[[device]]\nvendor_id = 1\nproduct_id = 2\n".repeat(10_000);
        let t = std::time::Instant::now();
        let e = Config::parse(&many, "c.toml").unwrap_err().to_string();
        assert!(e.contains("device[1024]"), "{}", clip(&e));
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        // Absurd motion limits: a clear error, never a NaN plan at run time.
        let axis = "[[axis]]\nname = \"x\"\nposition = 0\ncounts_per_unit = 1000.0\n\
                    max_velocity = 1.0\nmax_jerk = 1.0\nmoves = [1.0]\n";
        let e = Config::parse(&format!("{axis}max_acceleration = 1e160\n"), "c.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "axis[0] = { max_velocity = 1.0, max_acceleration = 1e160, max_jerk = 1.0 }"
            ) && e.contains("these limits cannot be planned"),
            "{e}"
        );
        Config::parse(&format!("{axis}max_acceleration = 10.0\n"), "c.toml").unwrap();
    }

    #[test]
    fn every_wait_mode_is_accepted_inline_and_sleep_with_a_thread() {
        assert_eq!(Config::default().cycle.wait, None);
        assert_eq!(Config::default().cycle.wait_mode(), WaitMode::DEFAULT);
        for m in WaitMode::ALL {
            let c = Config::parse(&format!("[cycle]\nwait = \"{m}\"\n"), "c.toml").unwrap();
            assert_eq!(c.cycle.wait_mode(), m);
        }
        // A TX/RX thread with the default: not refused (the default is the inline cycle's).
        let c = Config::parse("[cycle]\ntxrx = \"thread\"\n", "c.toml").unwrap();
        assert_eq!(c.cycle.wait, None);
        let c = Config::parse("[cycle]\ntxrx = \"thread\"\nwait = \"sleep\"\n", "c.toml").unwrap();
        assert_eq!(c.cycle.wait, Some(WaitMode::Sleep));
        let e = Config::parse("[cycle]\ntxrx = \"thread\"\nwait = \"hybrid\"\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cycle.wait = \"hybrid\""), "{e}");
    }

    #[test]
    fn empty_config_takes_defaults() {
        let c = Config::parse("", "x").unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn errors_name_key_value_and_range() {
        for (text, want) in [
            (
                "[cycle]\nperiod_us = 50\n",
                "cycle.period_us = 50: must be 125..=100000 µs",
            ),
            (
                "[cycle]\npriority = 0\n",
                "cycle.priority = 0: must be 1..=99",
            ),
            (
                "[cycle]\ncpu = 5000\n",
                "cycle.cpu = 5000: must be 0..=1023",
            ),
            ("[bus]\ninterface = \"\"\n", "bus.interface = \"\""),
            (
                "[bus]\ninterface = \"a\\u0000b\"\n",
                "bus.interface = \"a\\0b\"",
            ),
            ("[bus]\ninterface = \".\"\n", "bus.interface = \".\""),
            ("[bus]\ninterface = \"..\"\n", "bus.interface = \"..\""),
            ("[bus]\ninterface = \"a:b\"\n", "bus.interface = \"a:b\""),
            ("[bus]\ninterface = \"abcdefghijklmnop\"\n", "at most 15"),
            ("[rt]\ntimer_slack_ns = 0\n", "rt.timer_slack_ns = 0"),
            (
                "[bus]\nconfig_in_flight = 0\n",
                "bus.config_in_flight = 0: must be 1..=64",
            ),
            (
                "[bus]\nconfig_in_flight = 65\n",
                "bus.config_in_flight = 65: must be 1..=64",
            ),
            (
                "[segment]\nsubdevices = 2\n[[segment.device]]\nposition = 2\n",
                "segment.device[0].position = 2",
            ),
            ("[cycle]\nperoid_us = 1000\n", "unknown field `peroid_us`"),
            ("[cycle]\nperiod_us = \"fast\"\n", "period_us"),
            ("[cycle]\ntxrx = \"both\"\n", "unknown variant `both`"),
            (
                "[cycle]\nwait = \"spin\"\n",
                "unknown variant `spin`, expected one of `sleep`, `busy`, `hybrid`",
            ),
            (
                "[cycle]\ntxrx = \"thread\"\nwait = \"busy\"\n",
                "cycle.wait = \"busy\": needs cycle.txrx = \"inline\"",
            ),
            (
                "[health]\nrecovery = \"device\"\n",
                "unknown variant `device`, expected `subdevice` or `segment`",
            ),
            ("[health]\nrecovery = \"device\"\n", "recovery"),
            (
                "[health]\nsubdevice_attempts = 0\n",
                "health.subdevice_attempts = 0: must be 1..=1000",
            ),
            (
                "[bus]\nresponse_timeout_us = 5000\n",
                "bus.response_timeout_us = 5000",
            ),
            (
                "[dc]\nsync0_period_us = 300\n",
                "dc.sync0_period_us = 300: must divide cycle.period_us (1000)",
            ),
            (
                "[dc]\nsync0_shift_us = 1000\n",
                "dc.sync0_shift_us = 1000: must be below the SYNC0 period (1000 µs)",
            ),
            (
                "[segment]\nsubdevices = 2\n[[dc.device]]\nposition = 2\nassign_activate = 0x300\n",
                "dc.device[0].position = 2",
            ),
            (
                "[[dc.device]]\nposition = 0\nassign_activate = 0x0100\n",
                "dc.device[0].assign_activate = 0x0100",
            ),
            ("[dc]\nenable = true\n", "unknown field `enable`"),
            // The binary's sections are not the library's (app/rtcat/src/config.rs).
            ("[ipc]\nwrites = false\n", "unknown field `ipc`"),
            ("[control]\n", "unknown field `control`"),
            ("[shm]\nname = \"x\"\n", "unknown field `shm`"),
            ("[output]\n", "unknown field `output`"),
        ] {
            let e = Config::parse(text, "c.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?} gave {e:?}, wanted {want:?}");
        }
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        /// Lines that are valid or nearly valid configuration, to reach past the TOML parser.
        fn line() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("[bus]".to_string()),
                Just("[cycle]".to_string()),
                Just("[output]".to_string()),
                Just("[tune]".to_string()),
                Just("[[segment.device]]".to_string()),
                Just("[[device]]".to_string()),
                Just("[[device.pdo_map]]".to_string()),
                Just("[[device.sdo]]".to_string()),
                Just("[dc]".to_string()),
                Just("[[dc.device]]".to_string()),
                Just("entries = [\"0x6040:00:16\", \"1a00:1:8\"]".to_string()),
                Just("pdo_assign = { sm2 = [0x1600], sm3 = [0x1A00] }".to_string()),
                Just("type = \"u8\"".to_string()),
                ("[a-z_]{1,24}", any::<i64>()).prop_map(|(k, v)| format!("{k} = {v}")),
                ("[a-z_]{1,24}", "\\PC{0,20}").prop_map(|(k, v)| format!("{k} = {v:?}")),
                (
                    prop::sample::select(vec![
                        "period_us",
                        "cpu",
                        "priority",
                        "interface",
                        "checkpoint_s",
                        "keep_runs",
                        "position",
                        "expected_wkc",
                        "housekeeping_cpus",
                        "index",
                        "sub",
                        "value",
                        "alias",
                        "input_bytes",
                        "sync0_period_us",
                        "sync0_shift_us",
                        "assign_activate",
                        "reference",
                        "sync_window_ns",
                    ]),
                    prop_oneof![
                        any::<i64>().prop_map(|v| v.to_string()),
                        "\\PC{0,20}".prop_map(|v| format!("{v:?}")),
                        Just("true".to_string()),
                        Just("[1, 2]".to_string()),
                    ]
                )
                    .prop_map(|(k, v)| format!("{k} = {v}")),
                "\\PC{0,40}",
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]

            /// Never a panic; an error always names the file, and a key or the parser's position.
            #[test]
            fn any_text_is_accepted_or_refused_with_a_named_error(
                lines in prop::collection::vec(line(), 0..12)
            ) {
                let text = lines.join("\n");
                match Config::parse(&text, "fuzz.toml") {
                    Ok(c) => prop_assert!(c.validate("fuzz.toml").is_ok()),
                    Err(e) => {
                        let m = e.to_string();
                        prop_assert!(m.starts_with("config fuzz.toml: "), "{}", m);
                        prop_assert!(m.len() > "config fuzz.toml: ".len(), "{}", m);
                    }
                }
            }

        }
    }
}
