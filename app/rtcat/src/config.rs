//! `rtcat.toml` as the `rtcat` command reads it: the master's configuration
//! ([`rtcat_master::Config`]: bus, cycle, rt, segment, health, dc, devices, axes) and the
//! sections only this binary reads: `[ipc]` (who may use the control socket and the shared
//! image), `[control]` (the control socket), `[shm]` (the shared-memory process image),
//! `[output]` (results, status lines, checkpoints), `[tune]` (`rtcat tune`, `doctor`),
//! `[gateway]` and `[[eoe]]`. One file, the keys of the master's sections at the top level as
//! before.
//!
//! [`Config::load`] is the one entry point every command with `--config` goes through: `config
//! check`, `run`, `bench` and the bus commands (`pdos`, `scan`, …) parse and validate the same
//! way, so what `run` would refuse the check refuses and what `run` would apply the bus commands
//! apply.

// The master's section types, under this module as before (`rtcat::config::CycleConfig`).
use rtcat_master::WaitMode;
pub use rtcat_master::config::{
    BusConfig, ConfigError, CycleConfig, DEFAULT_CONFIG, ExpectedDevice, HealthConfig,
    MAX_CONFIG_BYTES, MAX_QUOTED, RtConfig, SegmentConfig, TxRxMode, clip, clip_lines, read_text,
};
use rtcat_master::invalid::Invalid;
/// `[shm]`: its keys are checked here with the others; the shared image that reads it is the
/// master's `shm` module (an application layer).
pub use rtcat_master::shm::ShmConfig;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The master's configuration (the part of the file the library reads).
pub type MasterConfig = rtcat_master::Config;

/// The example configuration shipped with rtcat, every key commented.
pub const EXAMPLE: &str = include_str!("../../master/rtcat.example.toml");

/// The whole configuration file (`/etc/rtcat/rtcat.toml`); every section has defaults.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// The master's sections.
    pub master: MasterConfig,
    /// `[ipc]`: who may use what the master shares with other programs (the shared-memory
    /// process image, the control socket).
    pub ipc: IpcConfig,
    /// `[control]`: the control socket of `rtcat run` / `bench`.
    pub control: ControlConfig,
    /// `[shm]`: the shared-memory process image for other programs (see
    /// [`rtcat_master::shm`]).
    pub shm: ShmConfig,
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
    group: Vec<rtcat_master::hotconnect::GroupConfig>,
    ipc: IpcConfig,
    control: ControlConfig,
    shm: ShmConfig,
    gateway: crate::gateway::GatewayConfig,
    eoe: Vec<crate::eoe_bridge::EoeConfig>,
}

impl File {
    /// The configuration, unchecked.
    fn split(self) -> Config {
        let master = MasterConfig {
            bus: self.bus,
            cycle: self.cycle,
            rt: self.rt,
            segment: self.segment,
            health: self.health,
            device: self.device,
            dc: self.dc,
            axis: self.axis,
            group: self.group,
        };
        Config {
            master,
            ipc: self.ipc,
            control: self.control,
            shm: self.shm,
            output: self.output,
            tune: self.tune,
            gateway: self.gateway,
            eoe: self.eoe,
        }
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

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
/// `[control]`.
pub struct ControlConfig {
    /// Path of the control socket (JSON lines; `rtcat-control`); absent: none. `--control
    /// SOCK` sets or overrides it.
    pub socket: Option<std::path::PathBuf>,
}

/// Longest path of a Unix socket (`sun_path` holds 108 bytes with the NUL, unix(7)).
pub const MAX_SOCKET_PATH: usize = 107;

impl ControlConfig {
    /// Check a control socket path: absolute, at most [`MAX_SOCKET_PATH`] bytes, a file name
    /// that is not `.`/`..`. The message names what is wrong (the caller names the key).
    pub fn check_socket(p: &std::path::Path) -> Result<(), String> {
        let len = p.as_os_str().len();
        if !p.is_absolute() {
            return Err("must be an absolute path (the unit sets one under /run)".into());
        }
        if len > MAX_SOCKET_PATH {
            return Err(format!(
                "{len} bytes: a Unix socket path holds at most {MAX_SOCKET_PATH}"
            ));
        }
        match p.file_name() {
            Some(_) if !p.as_os_str().as_encoded_bytes().ends_with(b"/") => Ok(()),
            _ => Err("must name a file, not a directory".into()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
/// `[ipc]`.
pub struct IpcConfig {
    /// The group of the client programs: the shared-memory object and the control socket are
    /// created mode 0660 and handed to this group (the master must be a member). None: the
    /// master's own group.
    pub group: Option<String>,
    /// The group whose members may also make state-changing control requests (`sdo_write`,
    /// `al_state`); None: only the master's user and root may.
    pub write_group: Option<String>,
    /// Whether state-changing control requests are served at all (false: refused to everyone).
    pub writes: bool,
}

impl Default for IpcConfig {
    fn default() -> Self {
        IpcConfig {
            group: None,
            write_group: None,
            writes: true,
        }
    }
}

/// Why [`IpcConfig::gid`] or [`IpcConfig::write_gid`] found no group.
#[derive(Debug, Error)]
#[error("{key} = {name:?}: {message}")]
pub struct GroupError {
    /// The key (`ipc.group`).
    pub key: &'static str,
    /// The configured name.
    pub name: String,
    /// Why it cannot be used.
    pub message: String,
}

impl IpcConfig {
    /// The group id of `[ipc] group` (None when not set), looked up in the group database.
    pub fn gid(&self) -> Result<Option<nix::unistd::Gid>, GroupError> {
        lookup_group("ipc.group", self.group.as_deref())
    }

    /// The group id of `[ipc] write_group` (None when not set).
    pub fn write_gid(&self) -> Result<Option<nix::unistd::Gid>, GroupError> {
        lookup_group("ipc.write_group", self.write_group.as_deref())
    }
}

fn lookup_group(
    key: &'static str,
    name: Option<&str>,
) -> Result<Option<nix::unistd::Gid>, GroupError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let fail = |message: String| GroupError {
        key,
        name: name.to_string(),
        message,
    };
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(Some(g.gid)),
        Ok(None) => Err(fail("no such group".into())),
        Err(e) => Err(fail(format!("group lookup failed: {e}"))),
    }
}

/// A group name as useradd/systemd-sysusers accept it: `[a-z_][a-z0-9_-]*`, at most 31 bytes
/// (systemd's "strict" user/group name rules, `man systemd.syntax` / sysusers.d(5)).
fn valid_group_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 31
        && (b[0].is_ascii_lowercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}
impl IpcConfig {
    /// `[ipc]`: group names (looked up at bring-up, not here).
    fn check(&self) -> Result<(), Invalid> {
        for (key, group) in [
            ("ipc.group", &self.group),
            ("ipc.write_group", &self.write_group),
        ] {
            let Some(g) = group else { continue };
            if !valid_group_name(g) {
                return Err(Invalid::new(
                    key,
                    format!("{g:?}"),
                    "a group name: [a-z_][a-z0-9_-]*, at most 31 characters",
                ));
            }
            // The master (not root, not in the root group) cannot hand its socket to it, and
            // the clients' group must not be every root-group process: refused here, not at
            // the first bring-up.
            if g == "root" {
                return Err(Invalid::new(
                    key,
                    format!("{g:?}"),
                    "the root group is not a client group: create one (sysusers.d/rtcat.conf \
                     makes rtcat-clients)",
                ));
            }
        }
        Ok(())
    }
}

impl ControlConfig {
    /// `[control]`.
    fn check(&self) -> Result<(), Invalid> {
        match &self.socket {
            Some(p) => ControlConfig::check_socket(p).map_err(|m| {
                Invalid::new(
                    "control.socket",
                    format!("{:?}", p.display().to_string()),
                    m,
                )
            }),
            None => Ok(()),
        }
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
        let mut cfg = file.split();
        // The master's sections first, in its order, then the binary's (the first violation
        // is reported).
        cfg.master = cfg.master.checked(path)?;
        cfg.check_own().map_err(|e| e.at(path))?;
        Ok(cfg)
    }

    /// Check every value (after command-line overrides); the first violation is reported.
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        self.master.validate(path)?;
        self.check_own().map_err(|e| e.at(path))
    }

    fn check_own(&self) -> Result<(), Invalid> {
        self.ipc.check()?;
        self.control.check()?;
        self.shm.check()?;
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
            wait: Some(match self.master.cycle.txrx {
                TxRxMode::Thread => rttune::CycleWait::Thread,
                TxRxMode::Inline => match self.master.cycle.wait_mode() {
                    WaitMode::Sleep => rttune::CycleWait::Sleep,
                    WaitMode::Busy => rttune::CycleWait::Busy,
                    WaitMode::Hybrid => rttune::CycleWait::Hybrid,
                },
            }),
            priority: Some(self.master.cycle.priority),
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

    /// doctor judges the wait the master would use: the default, `[cycle] wait`, or the TX/RX
    /// thread's (which always sleeps) whatever `wait` says.
    #[test]
    fn doctor_sees_how_the_cycle_waits() {
        let wait = |t: &str| Config::parse(t, "c.toml").unwrap().rt_context().wait;
        assert_eq!(wait(""), Some(rttune::CycleWait::Hybrid));
        assert_eq!(
            wait("[cycle]\nwait = \"busy\"\n"),
            Some(rttune::CycleWait::Busy)
        );
        assert_eq!(
            wait("[cycle]\nwait = \"sleep\"\n"),
            Some(rttune::CycleWait::Sleep)
        );
        assert_eq!(
            wait("[cycle]\ntxrx = \"thread\"\n"),
            Some(rttune::CycleWait::Thread)
        );
    }

    /// doctor judges the cycle's priority against the NIC's interrupt thread: the one the master
    /// would run at, set or its default (rttune reads a file without the master's types).
    #[test]
    fn doctor_sees_the_cycle_s_priority() {
        let p = |t: &str| Config::parse(t, "c.toml").unwrap().rt_context().priority;
        assert_eq!(p(""), Some(rttune::DEFAULT_CYCLE_PRIORITY));
        assert_eq!(
            rttune::DEFAULT_CYCLE_PRIORITY,
            rtcat_master::config::CycleConfig::default().priority
        );
        assert_eq!(p("[cycle]\npriority = 49\n"), Some(49));
        let text = "[cycle]\npriority = 49\n";
        assert_eq!(
            rttune::RtContext::from_config_str(text).unwrap().priority,
            p(text)
        );
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
        let both = Config::parse(
            &format!("{text}[output]\nkeep_runs = 3\n[ipc]\nwrites = false\n[shm]\nname = \"x\"\n"),
            "c.toml",
        )
        .unwrap();
        assert_eq!(both.master, MasterConfig::parse(text, "c.toml").unwrap());
        assert_eq!(both.output.keep_runs, 3);
        assert!(!both.ipc.writes);
        assert_eq!(both.shm.name.as_deref(), Some("x"));
        let mut c = both.clone();
        c.output.checkpoint_s = 100_000;
        assert!(
            c.validate("x")
                .unwrap_err()
                .to_string()
                .contains("output.checkpoint_s")
        );
        c = both.clone();
        c.shm.writer_timeout_cycles = 0;
        assert!(
            c.validate("x")
                .unwrap_err()
                .to_string()
                .contains("shm.writer_timeout_cycles = 0")
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

    #[test]
    fn control_socket_is_checked() {
        let c = Config::parse(
            "[control]\nsocket = \"/run/rtcat/control.sock\"\n",
            "c.toml",
        )
        .unwrap();
        assert_eq!(
            c.control.socket.as_deref(),
            Some(std::path::Path::new("/run/rtcat/control.sock"))
        );
        for (v, why) in [
            ("run/x.sock", "absolute path"),
            ("/run/rtcat/", "must name a file"),
            (&format!("/{}", "a".repeat(107)), "at most 107"),
        ] {
            let e = Config::parse(&format!("[control]\nsocket = {v:?}\n"), "c.toml").unwrap_err();
            let e = e.to_string();
            assert!(e.contains("control.socket") && e.contains(why), "{e}");
        }
        assert!(Config::parse("[control]\nsock = \"/x\"\n", "c.toml").is_err());
    }

    #[test]
    fn ipc_group_is_checked_and_looked_up() {
        let e = Config::parse("[ipc]\ngroup = \"Bad Name\"\n", "c.toml").unwrap_err();
        assert!(e.to_string().contains("ipc.group = \"Bad Name\""), "{e}");
        // A group every system has, other than root (which is refused, see below).
        let (name, gid) = ["daemon", "bin", "sys", "adm", "users", "nogroup"]
            .iter()
            .find_map(|n| {
                nix::unistd::Group::from_name(n)
                    .ok()
                    .flatten()
                    .map(|g| (*n, g.gid))
            })
            .expect("a system group");
        let c = Config::parse(&format!("[ipc]\ngroup = \"{name}\"\n"), "c.toml").unwrap();
        assert_eq!(c.ipc.gid().unwrap(), Some(gid));
        let c = Config::parse(&format!("[ipc]\nwrite_group = \"{name}\"\n"), "c.toml").unwrap();
        assert_eq!(c.ipc.write_gid().unwrap(), Some(gid));
        assert!(c.ipc.writes);
        let c = Config::parse("[ipc]\ngroup = \"no-such-group-rtcat\"\n", "c.toml").unwrap();
        let e = c.ipc.gid().unwrap_err();
        assert!(e.to_string().contains("no such group"), "{e}");
        assert_eq!(Config::default().ipc.gid().unwrap(), None);
        let c = Config::parse("[ipc]\nwrite_group = \"no-such-group-rtcat\"\n", "c.toml").unwrap();
        let e = c.ipc.write_gid().unwrap_err();
        assert!(e.to_string().starts_with("ipc.write_group = "), "{e}");
    }

    // Issue 26, item 8: what the first bring-up would refuse is refused by `config check`
    // (which is Config::load).
    #[test]
    fn what_run_refuses_the_check_refuses() {
        for (text, want) in [
            (
                "[ipc]\ngroup = \"root\"\n",
                "ipc.group = \"root\": the root group",
            ),
            (
                "[ipc]\nwrite_group = \"root\"\n",
                "ipc.write_group = \"root\"",
            ),
        ] {
            let e = Config::parse(text, "c.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn config_keys_are_validated_with_their_names() {
        let parse = |s: &str| {
            Config::parse(s, "t.toml")
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        assert!(parse("[shm]\nname = \"a/b\"\n").contains("shm.name = \"a/b\""));
        assert!(parse("[shm]\nname = \".hidden\"\n").contains("start with '.'"));
        assert!(
            parse("[shm]\nwriter_timeout_cycles = 0\n").contains("shm.writer_timeout_cycles = 0")
        );
        assert!(
            parse("[[shm.writer]]\nname = \"a\"\nentries = [\"Output 1\"]\n")
                .contains("shm.writer[0].entries[0] = \"Output 1\": must be POSITION:NAME")
        );
        assert!(
            parse(
                "[[shm.writer]]\nname = \"a\"\nentries = [\"0:X\"]\n\
                 [[shm.writer]]\nname = \"b\"\nentries = [\"0:X\"]\n"
            )
            .contains("already owned by shm.writer[0]")
        );
        assert!(
            parse("[[shm.writer]]\nname = \"a\"\nentries = [\"0:X\"]\n[[shm.writer]]\nname = \"a\"\nentries = [\"0:Y\"]\n")
                .contains("declared twice")
        );
        assert!(parse("[[shm.writer]]\nname = \"a\"\nentries = []\n").contains("at least one"));
        assert!(
            parse("[[shm.safe]]\nentry = \"0:X\"\nvalue = nan\n").contains("shm.safe[0].value")
        );
        assert!(parse("[shm]\nnme = \"x\"\n").contains("nme"));
        let ok = Config::parse(
            "[shm]\nname = \"rtcat\"\nwriter_timeout_cycles = 50\n\
             [[shm.writer]]\nname = \"plc\"\nentries = [\"0:Outputs.Output 1\"]\n\
             [[shm.safe]]\nentry = \"0:Outputs.Output 1\"\nvalue = 3\n\
             [[shm.safe]]\nentry = \"1:Real\"\nvalue = 1.5\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(ok.shm.writer_timeout_cycles, 50);
        assert_eq!(
            ok.shm.safe[1].value,
            rtcat_master::shm::SafeValue::Float(1.5)
        );
    }

    /// `File` lists the sections instead of `#[serde(flatten)]`-ing the master's `Config`
    /// (serde does not support `deny_unknown_fields` together with `flatten`): a key no section
    /// has is refused naming it, in every section and at the top level.
    #[test]
    fn an_unknown_key_is_refused_naming_it_in_every_section() {
        for table in [
            "",
            "[bus]\n",
            "[cycle]\n",
            "[rt]\n",
            "[segment]\n",
            "[[segment.device]]\n",
            "[health]\n",
            "[[device]]\n",
            "[[device]]\nposition = 0\n[[device.pdo_map]]\n",
            "[[device]]\nposition = 0\n[[device.sdo]]\n",
            "[dc]\n",
            "[[dc.device]]\n",
            "[[axis]]\n",
            "[ipc]\n",
            "[control]\n",
            "[shm]\n",
            "[[shm.writer]]\n",
            "[[shm.safe]]\n",
            "[output]\n",
            "[tune]\n",
            "[gateway]\n",
            "[[eoe]]\n",
        ] {
            let text = format!("{table}no_such_key = 1\n");
            let e = Config::parse(&text, "c.toml").unwrap_err().to_string();
            assert!(
                e.starts_with("config c.toml: ") && e.contains("unknown field `no_such_key`"),
                "{text:?} gave {e:?}"
            );
        }
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
