//! The `[tune]` table of rtcat's configuration and the context doctor/tune run in.

use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Default location of the tune state journal.
/// Root-only directory (rtcat-tune.service's StateDirectory): the unprivileged master must not be
/// able to edit what `tune restore` writes back into /proc and /sys as root.
pub const DEFAULT_STATE_FILE: &str = "/var/lib/rtcat-tune/tune-state.json";

/// Interrupt-coalescing targets for the EtherCAT NIC (`ethtool -C` semantics). A key that is
/// absent is left as the driver has it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoalesceConfig {
    pub tx_usecs: Option<u32>,
    pub tx_frames: Option<u32>,
    pub rx_usecs: Option<u32>,
    pub rx_frames: Option<u32>,
}

impl CoalesceConfig {
    pub fn is_empty(&self) -> bool {
        self.tx_usecs.is_none()
            && self.tx_frames.is_none()
            && self.rx_usecs.is_none()
            && self.rx_frames.is_none()
    }
}

/// The `[tune]` table of `/etc/rtcat/rtcat.toml` (unknown keys rejected).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TuneSection {
    /// CPUs that take IRQs, unbound work and ordinary tasks (kernel list, e.g. `"0-5,7"`).
    /// Absent: every online CPU except the RT CPU, and masks are only narrowed (RT CPU removed).
    pub housekeeping_cpus: Option<String>,
    /// CPU the EtherCAT NIC's IRQs are pinned to. Absent: NIC IRQs are only moved off the RT CPU.
    pub nic_irq_cpu: Option<usize>,
    /// NIC interrupt coalescing targets.
    pub coalesce: CoalesceConfig,
    /// cpufreq governor for the policy owning the RT CPU.
    pub governor: String,
    /// Disable the idle states of the RT CPU whose exit latency exceeds `cstate_max_latency_us`.
    pub disable_cstates: bool,
    /// Highest idle-state exit latency (µs) kept enabled on the RT CPU; state0 (WFI/POLL) is never
    /// disabled, so 0 keeps only state0.
    pub cstate_max_latency_us: u32,
    /// Stop irqbalance while tuned.
    pub stop_irqbalance: bool,
    /// Move movable tasks and kthreads off the RT CPU.
    pub move_tasks: bool,
    /// Set `kernel.timer_migration` to 0.
    pub disable_timer_migration: bool,
    /// Tune state journal (default `/var/lib/rtcat-tune/tune-state.json`, under `--root`).
    pub state_file: Option<PathBuf>,
}

impl Default for TuneSection {
    fn default() -> Self {
        TuneSection {
            housekeeping_cpus: None,
            nic_irq_cpu: None,
            coalesce: CoalesceConfig::default(),
            governor: "performance".into(),
            disable_cstates: true,
            cstate_max_latency_us: 0,
            stop_irqbalance: true,
            move_tasks: true,
            disable_timer_migration: true,
            state_file: None,
        }
    }
}

/// A configuration value outside its allowed range; the message names the key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

fn cerr(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
    }
}

pub const COALESCE_USECS_MAX: u32 = 100_000;
pub const COALESCE_FRAMES_MAX: u32 = 65_535;
pub const GOVERNORS: &[&str] = &[
    "performance",
    "powersave",
    "schedutil",
    "ondemand",
    "conservative",
    "userspace",
    "interactive",
];

impl TuneSection {
    /// Parse a `[tune]` table given as TOML text (the table's content, not the whole file).
    pub fn from_toml_str(s: &str) -> anyhow::Result<TuneSection> {
        let t: TuneSection = toml::from_str(s)?;
        t.validate()?;
        Ok(t)
    }

    /// Housekeeping set, if configured.
    pub fn housekeeping(&self) -> Result<Option<CpuSet>, ConfigError> {
        match &self.housekeeping_cpus {
            None => Ok(None),
            Some(s) => {
                let set = CpuSet::parse_list(s).map_err(|e| {
                    cerr(
                        "tune.housekeeping_cpus",
                        format!("{e} (expected a CPU list such as \"0-5,7\")"),
                    )
                })?;
                if set.is_empty() {
                    return Err(cerr("tune.housekeeping_cpus", "must name at least one CPU"));
                }
                Ok(Some(set))
            }
        }
    }

    /// Check every value; errors name the key and the allowed range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.housekeeping()?;
        if let Some(c) = self.nic_irq_cpu
            && c >= crate::cpuset::MAX_CPUS
        {
            return Err(cerr(
                "tune.nic_irq_cpu",
                format!("{c} is out of range 0..={}", crate::cpuset::MAX_CPUS - 1),
            ));
        }
        let c = &self.coalesce;
        for (k, v, max) in [
            ("tune.coalesce.tx_usecs", c.tx_usecs, COALESCE_USECS_MAX),
            ("tune.coalesce.rx_usecs", c.rx_usecs, COALESCE_USECS_MAX),
            ("tune.coalesce.tx_frames", c.tx_frames, COALESCE_FRAMES_MAX),
            ("tune.coalesce.rx_frames", c.rx_frames, COALESCE_FRAMES_MAX),
        ] {
            if let Some(v) = v
                && v > max
            {
                return Err(cerr(k, format!("{v} is out of range 0..={max}")));
            }
        }
        if !GOVERNORS.contains(&self.governor.as_str()) {
            return Err(cerr(
                "tune.governor",
                format!(
                    "{:?} is not a cpufreq governor (allowed: {})",
                    self.governor,
                    GOVERNORS.join(", ")
                ),
            ));
        }
        if self.cstate_max_latency_us > 100_000 {
            return Err(cerr(
                "tune.cstate_max_latency_us",
                format!("{} is out of range 0..=100000", self.cstate_max_latency_us),
            ));
        }
        if let Some(p) = &self.state_file {
            check_state_file(p).map_err(|m| cerr("tune.state_file", m))?;
        }
        Ok(())
    }
}

/// Directories where users other than root can create or replace files, whether or not they
/// exist on the machine checking the configuration: the master's own StateDirectory (owned by
/// the unprivileged `rtcat` user, see rtcat.service), its runtime directory, and the
/// world-writable temporary directories.
pub const UNTRUSTED_STATE_DIRS: &[&str] = &[
    "/var/lib/rtcat",
    "/run/rtcat",
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/run/shm",
    "/run/lock",
    "/var/lock",
    "/run/user",
];

/// `[tune].state_file`: root restores what the journal says, so it must live where only root
/// can write — an absolute, plain path (no `.`/`..`), not below [`UNTRUSTED_STATE_DIRS`], in a
/// directory that (as far as it exists) nobody but root can write.
fn check_state_file(p: &Path) -> Result<(), String> {
    if p.as_os_str().is_empty() || !p.is_absolute() {
        return Err(format!("{} must be an absolute path", p.display()));
    }
    // on the raw text: Path::components() drops inner "." and doubled "/"
    let text = p.to_string_lossy();
    if text[1..]
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(format!(
            "{} must be a plain path to a file (no \".\", \"..\" or trailing \"/\")",
            p.display()
        ));
    }
    if let Some(d) = UNTRUSTED_STATE_DIRS
        .iter()
        .find(|d| p.starts_with(d) && p != Path::new(d))
    {
        return Err(format!(
            "{} is in {d}, where users other than root can write: `rtcat tune restore` runs as \
             root and would restore what they put there; keep the journal in a root-only \
             directory such as /var/lib/rtcat-tune",
            p.display()
        ));
    }
    let parent = p.parent().unwrap_or(Path::new("/"));
    match safefs::writable_by_non_root(parent) {
        Ok(None) => Ok(()),
        Ok(Some(why)) => Err(format!(
            "{}: {why}, so users other than root could replace the journal that \
             `rtcat tune restore` acts on as root; keep it in a root-only directory such as \
             /var/lib/rtcat-tune",
            p.display()
        )),
        Err(e) => Err(format!("{}: cannot check its directory: {e}", p.display())),
    }
}

/// What doctor and tune work on: built by rtcat from its config (`[cycle].cpu`, `.wait`,
/// `.txrx`, `[bus].interface`, `[tune]`); explicit CLI flags override it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RtContext {
    pub rt_cpu: Option<usize>,
    pub iface: Option<String>,
    pub tune: TuneSection,
    /// How the cycle waits for its replies (`[cycle] wait` and `txrx`); `None` without a config.
    pub wait: Option<CycleWait>,
    /// SCHED_FIFO priority of the cyclic thread (`[cycle] priority`, [`DEFAULT_CYCLE_PRIORITY`]
    /// when the file does not set it); `None` without a config.
    pub priority: Option<u8>,
}

/// rtcat's `[cycle] priority` when the configuration does not set it (the binary's tests check
/// it against the master's default).
pub const DEFAULT_CYCLE_PRIORITY: u8 = 80;

/// How rtcat's cyclic thread waits for its replies, as doctor judges it against the RT CPU
/// (`[cycle] wait`, docs/NOTES.md §1.2; a TX/RX thread, `txrx = "thread"`, always sleeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleWait {
    /// `ppoll` until the reply.
    Sleep,
    /// Polls without blocking for the whole round trip.
    Busy,
    /// Sleeps, then polls a bounded window around the learned round trip (the default).
    Hybrid,
    /// A TX/RX thread moves the frames and sleeps on its socket.
    Thread,
}

impl CycleWait {
    /// The `[cycle]` keys' spelling.
    pub fn name(self) -> &'static str {
        match self {
            CycleWait::Sleep => "sleep",
            CycleWait::Busy => "busy",
            CycleWait::Hybrid => "hybrid",
            CycleWait::Thread => "txrx = thread",
        }
    }
}

impl RtContext {
    /// Build a context from an rtcat config file, reading only `[cycle].cpu`, `.wait`, `.txrx`,
    /// `[bus].interface` and `[tune]` (full validation of the file is `rtcat config check`).
    pub fn from_config_file(path: &Path) -> anyhow::Result<RtContext> {
        // a configuration is a few kB; a FIFO or /dev/zero is refused, not waited on
        let text = safefs::read_to_string_bounded(path, 1 << 20)
            .map_err(|e| anyhow::anyhow!("cannot read config: {e}"))?;
        Self::from_config_str(&text).map_err(|e| anyhow::anyhow!("config {}: {e}", path.display()))
    }

    pub fn from_config_str(text: &str) -> anyhow::Result<RtContext> {
        let v: toml::Table = toml::from_str(text)?;
        let rt_cpu = match v.get("cycle").and_then(|c| c.get("cpu")) {
            None => None,
            Some(toml::Value::Integer(i)) if *i >= 0 && (*i as usize) < crate::cpuset::MAX_CPUS => {
                Some(*i as usize)
            }
            Some(other) => anyhow::bail!(
                "cycle.cpu: {other} is not a CPU number (0..={})",
                crate::cpuset::MAX_CPUS - 1
            ),
        };
        let key = |k: &str| v.get("cycle").and_then(|c| c.get(k));
        let word = |k: &str, words: &[&'static str]| -> anyhow::Result<Option<&'static str>> {
            match key(k) {
                None => Ok(None),
                Some(toml::Value::String(s)) if words.contains(&s.as_str()) => {
                    Ok(words.iter().copied().find(|w| *w == s))
                }
                Some(other) => {
                    anyhow::bail!("cycle.{k}: {other} is not one of {}", words.join(", "))
                }
            }
        };
        let txrx = word("txrx", &["inline", "thread"])?;
        let wait = match word("wait", &["sleep", "busy", "hybrid"])? {
            _ if txrx == Some("thread") => CycleWait::Thread,
            Some("sleep") => CycleWait::Sleep,
            Some("busy") => CycleWait::Busy,
            _ => CycleWait::Hybrid,
        };
        let priority = match key("priority") {
            None => DEFAULT_CYCLE_PRIORITY,
            Some(toml::Value::Integer(p)) if (1..=99).contains(p) => *p as u8,
            Some(other) => anyhow::bail!("cycle.priority: {other} is not a priority (1..=99)"),
        };
        let iface = match v.get("bus").and_then(|b| b.get("interface")) {
            None => None,
            Some(toml::Value::String(s)) if crate::netif::valid_name(s) => Some(s.clone()),
            Some(other) => anyhow::bail!("bus.interface: {other} is not a network interface name"),
        };
        let tune = match v.get("tune") {
            None => TuneSection::default(),
            Some(t) => {
                let t: TuneSection = t
                    .clone()
                    .try_into()
                    .map_err(|e| anyhow::anyhow!("tune: {e}"))?;
                t.validate()?;
                t
            }
        };
        Ok(RtContext {
            rt_cpu,
            iface,
            tune,
            wait: Some(wait),
            priority: Some(priority),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        TuneSection::default().validate().unwrap();
    }

    #[test]
    fn errors_name_the_key() {
        let e = TuneSection::from_toml_str("housekeeping_cpus = \"0-x\"").unwrap_err();
        assert!(e.to_string().contains("tune.housekeeping_cpus"), "{e}");
        let e = TuneSection::from_toml_str("[coalesce]\nrx_frames = 70000").unwrap_err();
        assert!(e.to_string().contains("tune.coalesce.rx_frames"), "{e}");
        assert!(e.to_string().contains("0..=65535"), "{e}");
        let e = TuneSection::from_toml_str("governor = \"turbo\"").unwrap_err();
        assert!(e.to_string().contains("tune.governor"), "{e}");
        let e = TuneSection::from_toml_str("bogus = 1").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = TuneSection::from_toml_str("state_file = \"rel/x.json\"").unwrap_err();
        assert!(e.to_string().contains("tune.state_file"), "{e}");
    }

    #[test]
    fn state_file_must_be_where_only_root_writes() {
        for bad in [
            "/var/lib/rtcat/tune-state.json",
            "/var/lib/rtcat/sub/tune-state.json",
            concat!("/tmp", "/tune-state.json"),
            "/run/rtcat/tune-state.json",
            "/dev/shm/tune-state.json",
            "/var/lib/rtcat-tune/../rtcat/tune-state.json",
            "/var/lib/rtcat-tune/./tune-state.json",
        ] {
            let e = TuneSection::from_toml_str(&format!("state_file = \"{bad}\""))
                .unwrap_err()
                .to_string();
            assert!(e.contains("tune.state_file"), "{bad}: {e}");
        }
        // the default place, and a sibling of the service user's directory, are fine
        for ok in [
            "/var/lib/rtcat-tune/tune-state.json",
            "/var/lib/rtcat-tune-x/s.json",
        ] {
            TuneSection::from_toml_str(&format!("state_file = \"{ok}\"")).unwrap();
        }
        // any existing directory another user can write (outside /tmp, which is refused anyway)
        let d = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let t = TuneSection {
            state_file: Some(open.join("s.json")),
            ..TuneSection::default()
        };
        let e = t.validate().unwrap_err();
        assert_eq!(e.key, "tune.state_file");
        // A checkout below one of the untrusted directories (/tmp, /var/tmp: a CI runner's) is
        // refused for that first, by the rule above; wherever it lies, it is refused.
        // (that rule names the file, the other one its directory)
        let want = match UNTRUSTED_STATE_DIRS.iter().find(|d| open.starts_with(d)) {
            Some(d) => format!("{} is in {d}", open.join("s.json").display()),
            None => format!("{} is", open.display()),
        };
        assert!(e.message.contains(&want), "{e}");
        if !want.contains(" is in ") {
            assert!(e.message.contains("writable by group or others"), "{e}");
        }
    }

    #[test]
    fn context_from_rtcat_config() {
        let c = RtContext::from_config_str(
            "[bus]\ninterface = \"eth1\"\n[cycle]\ncpu = 6\nperiod_us = 1000\n[tune]\nhousekeeping_cpus = \"0-5,7\"\nnic_irq_cpu = 5\n[tune.coalesce]\ntx_usecs = 0\ntx_frames = 25\nrx_frames = 1\n",
        )
        .unwrap();
        assert_eq!(c.rt_cpu, Some(6));
        assert_eq!(c.iface.as_deref(), Some("eth1"));
        assert_eq!(c.tune.nic_irq_cpu, Some(5));
        assert_eq!(c.tune.coalesce.tx_frames, Some(25));
        assert!(RtContext::from_config_str("[cycle]\ncpu = -1\n").is_err());
        assert!(RtContext::from_config_str("[bus]\ninterface = \"a/b\"\n").is_err());
    }

    #[test]
    fn context_knows_how_the_cycle_waits() {
        let wait = |t: &str| RtContext::from_config_str(t).map(|c| c.wait.unwrap());
        assert_eq!(wait("").unwrap(), CycleWait::Hybrid, "the master's default");
        assert_eq!(wait("[cycle]\nwait = \"busy\"\n").unwrap(), CycleWait::Busy);
        assert_eq!(
            wait("[cycle]\nwait = \"sleep\"\n").unwrap(),
            CycleWait::Sleep
        );
        let thread = "[cycle]\ntxrx = \"thread\"\nwait = \"sleep\"\n";
        assert_eq!(wait(thread).unwrap(), CycleWait::Thread);
        let e = wait("[cycle]\nwait = \"spin\"\n").unwrap_err().to_string();
        assert!(e.contains("cycle.wait") && e.contains("spin"), "{e}");
        let e = wait("[cycle]\ntxrx = 1\n").unwrap_err().to_string();
        assert!(
            e.contains("cycle.txrx") && e.contains("inline, thread"),
            "{e}"
        );
    }

    #[test]
    fn context_knows_the_cycle_s_priority() {
        let p = |t: &str| RtContext::from_config_str(t).map(|c| c.priority.unwrap());
        assert_eq!(p("").unwrap(), DEFAULT_CYCLE_PRIORITY);
        assert_eq!(p("[cycle]\npriority = 49\n").unwrap(), 49);
        for bad in ["0", "100", "\"high\""] {
            let e = p(&format!("[cycle]\npriority = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("cycle.priority") && e.contains(bad), "{e}");
        }
    }
}
