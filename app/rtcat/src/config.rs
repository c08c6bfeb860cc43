//! `rtcat.toml` as the `rtcat` command reads it: the master's configuration
//! ([`rtcat_master::Config`]: bus, cycle, rt, segment, health, dc, devices, axes; for now also
//! ipc, control and shm) and the sections only this binary reads, `[output]` (results, status
//! lines, checkpoints) and `[tune]` (`rtcat tune`, `doctor`). One file, the keys of the master's
//! sections at the top level as before.
//!
//! [`Config::load`] is the one entry point every command with `--config` goes through: `config
//! check`, `run`, `bench` and the bus commands (`pdos`, `scan`, …) parse and validate the same
//! way, so what `run` would refuse the check refuses and what `run` would apply the bus commands
//! apply.

// The master's section types, under this module as before (`rtcat::config::CycleConfig`).
pub use rtcat_master::config::{
    BusConfig, ConfigError, ControlConfig, CycleConfig, DEFAULT_CONFIG, ExpectedDevice, GroupError,
    HealthConfig, IpcConfig, MAX_CONFIG_BYTES, MAX_QUOTED, MAX_SOCKET_PATH, RtConfig,
    SegmentConfig, TxRxMode, clip, clip_lines, read_text,
};
use rtcat_master::invalid::Invalid;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The master's configuration (the part of the file the library reads).
pub type MasterConfig = rtcat_master::Config;

/// The example configuration shipped with rtcat, every key commented.
pub const EXAMPLE: &str = include_str!("../../master/rtcat.example.toml");

/// The whole configuration file (`/etc/rtcat/rtcat.toml`); every section has defaults.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// The master's sections.
    pub master: MasterConfig,
    /// `[output]`: results, status lines, checkpoints.
    pub output: OutputConfig,
    /// `[tune]`: the CPU shield and NIC tuning (`rtcat tune`).
    pub tune: rttune::TuneSection,
    /// `[gateway]`: the mailbox gateway (ETG.8200) of `rtcat run`, off by default.
    pub gateway: crate::gateway::GatewayConfig,
    /// `[[eoe]]`: TAP interfaces bridged to devices' networks over EoE during `rtcat run`.
    pub eoe: Vec<crate::eoe_bridge::EoeConfig>,
}

/// The file's sections as serde reads them: the master's section types, and the binary's own.
/// Listing them here (not `serde(flatten)`) keeps the parser's messages exactly as they were
/// (key, line, the list of known sections); [`File::split`] builds the master's `Config` with a
/// struct literal, so a section added to the master fails to compile here until it is listed.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct File {
    bus: BusConfig,
    cycle: CycleConfig,
    rt: RtConfig,
    segment: SegmentConfig,
    health: HealthConfig,
    output: OutputConfig,
    tune: rttune::TuneSection,
    device: Vec<rtcat_master::devices::DeviceConfig>,
    dc: rtcat_master::dc::DcConfig,
    axis: Vec<rtcat_master::axis::AxisConfig>,
    ipc: IpcConfig,
    control: ControlConfig,
    shm: rtcat_master::shm::ShmConfig,
    gateway: crate::gateway::GatewayConfig,
    eoe: Vec<crate::eoe_bridge::EoeConfig>,
}

impl File {
    fn split(
        self,
    ) -> (
        MasterConfig,
        OutputConfig,
        rttune::TuneSection,
        crate::gateway::GatewayConfig,
        Vec<crate::eoe_bridge::EoeConfig>,
    ) {
        let master = MasterConfig {
            bus: self.bus,
            cycle: self.cycle,
            rt: self.rt,
            segment: self.segment,
            health: self.health,
            device: self.device,
            dc: self.dc,
            axis: self.axis,
            ipc: self.ipc,
            control: self.control,
            shm: self.shm,
        };
        (master, self.output, self.tune, self.gateway, self.eoe)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
/// `[output]`.
pub struct OutputConfig {
    /// Results directory of `rtcat run`.
    pub dir: PathBuf,
    /// Write one CSV row per cycle (samples.csv).
    pub samples_csv: bool,
    /// Status line period (ms); 0 = none.
    pub status_interval_ms: u32,
    /// Write summary.json and the histograms this often while running (s); 0 = only at the end.
    /// A SIGKILL, an OOM kill or a power loss loses at most one interval.
    pub checkpoint_s: u32,
    /// Results of earlier runs kept under `<dir>/runs/` when a new run starts (0 = keep none).
    pub keep_runs: u32,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            dir: PathBuf::from("/var/lib/rtcat"),
            samples_csv: false,
            status_interval_ms: 1000,
            checkpoint_s: 10,
            keep_runs: 10,
        }
    }
}

impl OutputConfig {
    /// `[output]`.
    fn check(&self) -> Result<(), Invalid> {
        Invalid::range(
            "output.status_interval_ms",
            self.status_interval_ms.into(),
            0,
            3_600_000,
            " ms",
        )?;
        Invalid::range(
            "output.checkpoint_s",
            self.checkpoint_s.into(),
            0,
            86_400,
            " s",
        )?;
        Invalid::range("output.keep_runs", self.keep_runs.into(), 0, 1000, "")?;
        if self.dir.as_os_str().is_empty() {
            return Err(Invalid::new(
                "output.dir",
                "\"\"",
                "must be a directory path",
            ));
        }
        if self.dir.as_os_str().as_encoded_bytes().contains(&0) {
            return Err(Invalid::new(
                "output.dir",
                format!("{:?}", self.dir),
                "a path cannot contain a NUL byte",
            ));
        }
        Ok(())
    }
}

/// `[tune]`'s own check, as a key/value refusal (its messages name the value).
fn check_tune(tune: &rttune::TuneSection) -> Result<(), Invalid> {
    tune.validate().map_err(|e| {
        Invalid::new(
            format!("tune.{}", e.key.trim_start_matches("tune.")),
            "(see message)",
            e.message,
        )
    })
}

impl Config {
    /// Read, parse and validate a file (at most [`MAX_CONFIG_BYTES`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::parse(&read_text(path)?, &path.display().to_string())
    }

    /// Parse and validate `text`; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| ConfigError::parse(path, &e))?;
        let (master, output, tune, gateway, eoe) = file.split();
        // The master's sections first, in its order, then the binary's (the first violation
        // is reported).
        let master = master.checked(path)?;
        let cfg = Config {
            master,
            output,
            tune,
            gateway,
            eoe,
        };
        cfg.check_own().map_err(|e| e.at(path))?;
        Ok(cfg)
    }

    /// Check every value (after command-line overrides); the first violation is reported.
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        self.master.validate(path)?;
        self.check_own().map_err(|e| e.at(path))
    }

    fn check_own(&self) -> Result<(), Invalid> {
        self.output.check()?;
        check_tune(&self.tune)?;
        self.gateway.checked()?;
        crate::eoe_bridge::checked(&self.eoe).map(|_| ())
    }

    /// The context doctor and tune run in, from this configuration.
    pub fn rt_context(&self) -> rttune::RtContext {
        rttune::RtContext {
            rt_cpu: self.master.cycle.cpu,
            iface: Some(self.master.bus.interface.clone()),
            tune: self.tune.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_is_valid_and_complete() {
        let c = Config::parse(EXAMPLE, "rtcat.example.toml").expect("example parses");
        assert_eq!(c.master.cycle.period_us, 1000);
        assert_eq!(c.master.cycle.cpu, Some(6));
        assert_eq!(c.master.segment.expected_wkc, Some(9));
    }

    #[test]
    fn empty_config_takes_defaults() {
        let c = Config::parse("", "x").unwrap();
        assert_eq!(c, Config::default());
    }

    /// The binary's sections keep their keys and messages; the master's sections read as
    /// they do through the library; an unknown section is refused naming it.
    #[test]
    fn errors_name_key_value_and_range() {
        for (text, want) in [
            ("[output]\ncheckpoint_s = 100000\n", "output.checkpoint_s"),
            (
                "[output]\ndir = \"/var/lib/a\\u0000b\"\n",
                "config c.toml: output.dir = ",
            ),
            (
                "[output]\ndir = \"\"\n",
                "output.dir = \"\": must be a directory path",
            ),
            (
                "[output]\nkeep_runs = 1001\n",
                "output.keep_runs = 1001: must be 0..=1000",
            ),
            ("[output]\nsamples = true\n", "unknown field `samples`"),
            (
                "[tune]\nhousekeeping_cpus = \"x\"\n",
                "tune.housekeeping_cpus",
            ),
            (
                "[cycle]\nperiod_us = 50\n",
                "cycle.period_us = 50: must be 125..=100000 µs",
            ),
            ("[cycle]\nperiod_us = \"fast\"\n", "period_us"),
            ("[outptu]\n", "unknown field `outptu`"),
            (
                "[gateway]\nlisten = \"127.0.0.1:34980\"\n",
                "gateway.allow = []: must name the networks",
            ),
            (
                "[gateway]\nlisten = \"nowhere\"\nallow = [\"10.0.0.0/24\"]\n",
                "gateway.listen = \"nowhere\": must be ADDR:PORT",
            ),
            (
                "[gateway]\nlisten = \"127.0.0.1:34980\"\nallow = [\"10.0.0.0/33\"]\n",
                "gateway.allow = \"10.0.0.0/33\"",
            ),
            (
                "[gateway]\nallow = [\"10.0.0.0/24\"]\n",
                "gateway.allow = [\"10.0.0.0/24\"]: has no effect without gateway.listen",
            ),
            (
                "[[eoe]]\nposition = 1\ntap = \"eoe1\"\ndevice_ip = \"10.1.1.2\"\n",
                "eoe[0].device_ip = \"10.1.1.2\": give the prefix length",
            ),
            (
                "[[eoe]]\nposition = 1\ntap = \"t\"\n[[eoe]]\nposition = 2\ntap = \"t\"\n",
                "eoe[1].tap = \"t\": is eoe[0].tap too",
            ),
            ("[[eoe]]\nposition = 1\n", "missing field `tap`"),
        ] {
            let e = Config::parse(text, "c.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?} gave {e:?}, wanted {want:?}");
            assert!(e.starts_with("config c.toml: "), "{e}");
        }
    }

    /// The master's part of a file is what the library reads from the same text without the
    /// binary's sections; an override checked with `validate` is checked as at load.
    #[test]
    fn the_master_part_is_the_librarys_config() {
        let text = "[cycle]\nperiod_us = 2000\n[[axis]]\nname = \"x\"\nposition = 0\n\
                    counts_per_unit = 1000.0\nmax_velocity = 1.0\nmax_acceleration = 10.0\n";
        let both = Config::parse(&format!("{text}[output]\nkeep_runs = 3\n"), "c.toml").unwrap();
        assert_eq!(both.master, MasterConfig::parse(text, "c.toml").unwrap());
        assert_eq!(both.output.keep_runs, 3);
        let mut c = both.clone();
        c.output.checkpoint_s = 100_000;
        assert!(
            c.validate("x")
                .unwrap_err()
                .to_string()
                .contains("output.checkpoint_s")
        );
        c = both;
        c.master.cycle.priority = 0;
        assert!(
            c.validate("x")
                .unwrap_err()
                .to_string()
                .contains("cycle.priority = 0")
        );
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]

            /// Mutations of the shipped example: one byte changed or the text cut anywhere.
            #[test]
            fn mutated_example_never_panics(pos in 0usize..EXAMPLE.len(), byte in any::<u8>(), cut in any::<bool>()) {
                let mut b = EXAMPLE.as_bytes().to_vec();
                if cut { b.truncate(pos) } else { b[pos] = byte }
                if let Ok(text) = String::from_utf8(b) {
                    match Config::parse(&text, "fuzz.toml") {
                        Ok(c) => prop_assert!(c.validate("fuzz.toml").is_ok()),
                        Err(e) => prop_assert!(e.to_string().starts_with("config fuzz.toml: ")),
                    }
                }
            }
        }
    }
}
