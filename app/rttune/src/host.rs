//! Things that are not files: stopping/starting a service, ethtool coalescing (SIOCETHTOOL
//! ioctl), task CPU affinity (sched_setaffinity) and file capabilities (xattr). Tests replace
//! [`Host`] with a fake.

use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Declares [`Coalesce`] and its journal form from one list of the fields after `cmd`, so the
/// struct, the array and the two conversions cannot disagree on the order.
macro_rules! ethtool_coalesce {
    ($($field:ident),* $(,)?) => {
        /// `struct ethtool_coalesce` of include/uapi/linux/ethtool.h: the buffer of the
        /// `ETHTOOL_GCOALESCE`/`ETHTOOL_SCOALESCE` ioctls, field for field in kernel order.
        ///
        /// `cmd` is only set for the ioctl itself ([`RealHost`]); every value read, compared or
        /// journalled has `cmd` 0. In the journal the value is the 22 parameters after `cmd`,
        /// as a JSON array in kernel order (the format of journal version 1).
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(from = "[u32; 22]", into = "[u32; 22]")]
        pub struct Coalesce {
            pub cmd: u32,
            $(pub $field: u32,)*
        }

        impl From<[u32; 22]> for Coalesce {
            fn from(v: [u32; 22]) -> Coalesce {
                let [$($field),*] = v;
                Coalesce { cmd: 0, $($field),* }
            }
        }

        impl From<Coalesce> for [u32; 22] {
            fn from(c: Coalesce) -> [u32; 22] {
                [$(c.$field),*]
            }
        }
    };
}

ethtool_coalesce!(
    rx_coalesce_usecs,
    rx_max_coalesced_frames,
    rx_coalesce_usecs_irq,
    rx_max_coalesced_frames_irq,
    tx_coalesce_usecs,
    tx_max_coalesced_frames,
    tx_coalesce_usecs_irq,
    tx_max_coalesced_frames_irq,
    stats_block_coalesce_usecs,
    use_adaptive_rx_coalesce,
    use_adaptive_tx_coalesce,
    pkt_rate_low,
    rx_coalesce_usecs_low,
    rx_max_coalesced_frames_low,
    tx_coalesce_usecs_low,
    tx_max_coalesced_frames_low,
    pkt_rate_high,
    rx_coalesce_usecs_high,
    rx_max_coalesced_frames_high,
    tx_coalesce_usecs_high,
    tx_max_coalesced_frames_high,
    rate_sample_interval,
);

// 23 u32 without padding, as the kernel copies it (copy_from_user of sizeof(struct
// ethtool_coalesce)): a field added or lost here would corrupt the ioctl.
const _: () = assert!(std::mem::size_of::<Coalesce>() == 92);

impl Coalesce {
    /// `rx-usecs` of `ethtool -C`.
    pub fn rx_usecs(&self) -> u32 {
        self.rx_coalesce_usecs
    }
    /// `rx-frames` of `ethtool -C`.
    pub fn rx_frames(&self) -> u32 {
        self.rx_max_coalesced_frames
    }
    /// `tx-usecs` of `ethtool -C`.
    pub fn tx_usecs(&self) -> u32 {
        self.tx_coalesce_usecs
    }
    /// `tx-frames` of `ethtool -C`.
    pub fn tx_frames(&self) -> u32 {
        self.tx_max_coalesced_frames
    }

    /// `rx-usecs 3 rx-frames 1 tx-usecs 0 tx-frames 25` (the `ethtool -C` spelling).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "rx-usecs {} rx-frames {} tx-usecs {} tx-frames {}",
            self.rx_coalesce_usecs,
            self.rx_max_coalesced_frames,
            self.tx_coalesce_usecs,
            self.tx_max_coalesced_frames
        );
        if self.use_adaptive_rx_coalesce != 0 || self.use_adaptive_tx_coalesce != 0 {
            s.push_str(&format!(
                " adaptive-rx {} adaptive-tx {}",
                onoff(self.use_adaptive_rx_coalesce),
                onoff(self.use_adaptive_tx_coalesce)
            ));
        }
        s
    }

    /// This value with the configured fields replaced.
    pub fn with(&self, c: &crate::config::CoalesceConfig) -> Coalesce {
        let mut out = *self;
        if let Some(v) = c.rx_usecs {
            out.rx_coalesce_usecs = v;
        }
        if let Some(v) = c.rx_frames {
            out.rx_max_coalesced_frames = v;
        }
        if let Some(v) = c.tx_usecs {
            out.tx_coalesce_usecs = v;
        }
        if let Some(v) = c.tx_frames {
            out.tx_max_coalesced_frames = v;
        }
        out
    }
}

fn onoff(v: u32) -> &'static str {
    if v != 0 { "on" } else { "off" }
}

/// How a service was stopped (journalled).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum ServiceStop {
    /// `systemctl stop UNIT`; restored with `systemctl start UNIT`.
    Systemd { unit: String },
    /// SIGTERM to the daemon. `cmdline` is recorded for the operator only: restore never runs
    /// it (the journal is data), it starts the service by what [`plan_service_start`] finds.
    Signalled { pid: u32, cmdline: Vec<String> },
}

/// How restore starts a stopped service: decided by the tuner from the service's name and what
/// it finds on the machine, never from a command line in the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceStart {
    /// `systemctl start UNIT` (UNIT = `NAME.service`).
    Systemd { unit: String },
    /// Run this root-owned binary from [`KNOWN_BINARIES`] without arguments (the daemon's own
    /// defaults; irqbalance then forks into the background).
    Exec { program: PathBuf },
}

/// Where each service tune stops may be installed (Debian, Yocto, Fedora layouts).
pub const KNOWN_BINARIES: &[(&str, &[&str])] = &[(
    "irqbalance",
    &[
        "/usr/sbin/irqbalance",
        "/sbin/irqbalance",
        "/usr/bin/irqbalance",
        "/bin/irqbalance",
    ],
)];

/// Where systemctl is (run by absolute path: the caller's PATH is not trusted).
const SYSTEMCTL: &[&str] = &["/usr/bin/systemctl", "/bin/systemctl"];
const RAUC: &[&str] = &["/usr/bin/rauc", "/bin/rauc", "/usr/sbin/rauc"];
/// `rauc status` asks the RAUC service over D-Bus; a service that hangs must not hang doctor.
const RAUC_TIMEOUT: Duration = Duration::from_secs(10);

/// Decide how to start service `name` again after it was stopped `how`: through systemd by its
/// unit name when systemd runs and the unit exists (also for a daemon that was signalled), else
/// the first of its [`KNOWN_BINARIES`] that is a regular, executable file owned by root in
/// directories only root can write. The journal's command line is never used.
pub fn plan_service_start(
    root: &SysRoot,
    name: &str,
    how: &ServiceStop,
) -> io::Result<ServiceStart> {
    if !crate::journal::KNOWN_SERVICES.contains(&name) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a service rtcat tune stops"),
        ));
    }
    let unit = format!("{name}.service");
    if matches!(how, ServiceStop::Systemd { .. })
        || (systemd_runs(root) && crate::unitfile::exists(root, &unit))
    {
        return Ok(ServiceStart::Systemd { unit });
    }
    let candidates = KNOWN_BINARIES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
        .unwrap_or_default();
    for p in candidates {
        let host = root.path(p);
        let Ok(md) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        use std::os::unix::fs::PermissionsExt;
        if md.is_file()
            && md.permissions().mode() & 0o111 != 0
            && safefs::check_private(&host, safefs::Owner::Root).is_ok()
        {
            return Ok(ServiceStart::Exec { program: host });
        }
    }
    Err(io::Error::other(format!(
        "no {unit} and no root-owned {name} binary in {}: start {name} by hand",
        candidates.join(", ")
    )))
}

/// File capabilities (`security.capability` xattr).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileCaps {
    pub permitted: u64,
    pub effective: bool,
}

/// Non-file operations used by doctor and tune.
pub trait Host {
    /// Stop a running daemon the way `how` says (see [`plan_service_stop`]).
    fn stop_service(&self, root: &SysRoot, how: &ServiceStop) -> io::Result<()>;
    fn start_service(&self, root: &SysRoot, how: &ServiceStart) -> io::Result<()>;
    fn get_coalesce(&self, iface: &str) -> io::Result<Coalesce>;
    fn set_coalesce(&self, iface: &str, c: &Coalesce) -> io::Result<()>;
    fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> io::Result<()>;
    fn file_caps(&self, root: &SysRoot, path: &str) -> io::Result<Option<FileCaps>>;
    /// `rauc status --detailed --output-format=json` (doctor's A/B slot report); `Ok(None)` when
    /// RAUC is not installed.
    fn rauc_status(&self) -> io::Result<Option<String>>;
}

/// The real machine.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealHost;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GCOALESCE: u32 = 0x0e;
const ETHTOOL_SCOALESCE: u32 = 0x0f;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

fn ethtool_ioctl(iface: &str, raw: &mut Coalesce) -> io::Result<()> {
    if !crate::netif::valid_name(iface) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{iface:?} is not an interface name"),
        ));
    }
    let mut ifr = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: raw as *mut Coalesce as *mut libc::c_void,
        _pad: [0; 16],
    };
    ifr.name[..iface.len()].copy_from_slice(iface.as_bytes());
    // SAFETY: plain socket syscall; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifr and the buffer it points to live across the call and have the layout the
    // kernel expects for SIOCETHTOOL (struct ifreq with ifr_data).
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL as _, &mut ifr as *mut IfReq) };
    let err = io::Error::last_os_error();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if rc < 0 { Err(err) } else { Ok(()) }
}

fn systemd_runs(root: &SysRoot) -> bool {
    root.exists("/run/systemd/system")
}

/// Decide how to stop daemon `name` (process `pid`): through systemd when it is PID 1's manager,
/// otherwise by SIGTERM, recording its command line (for the operator; see [`ServiceStop`]).
pub fn plan_service_stop(root: &SysRoot, name: &str, pid: u32) -> io::Result<ServiceStop> {
    let unit = format!("{name}.service");
    // under systemd, a daemon with a unit is stopped through it (else systemd restarts it);
    // one started by hand is signalled like on a system without systemd
    if systemd_runs(root) && crate::unitfile::exists(root, &unit) {
        return Ok(ServiceStop::Systemd { unit });
    }
    let cmdline: Vec<String> = root
        .read_bytes(&format!("/proc/{pid}/cmdline"))?
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    if cmdline.is_empty() {
        return Err(io::Error::other(format!(
            "{name} (pid {pid}) has no command line to restart it with"
        )));
    }
    Ok(ServiceStop::Signalled { pid, cmdline })
}

/// A minimal environment for the programs tune runs as root.
const SAFE_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

fn systemctl(args: &[&str]) -> io::Result<()> {
    let cmd = SYSTEMCTL
        .iter()
        .find(|p| Path::new(p).is_file())
        .ok_or_else(|| {
            io::Error::other(format!("systemctl not found in {}", SYSTEMCTL.join(", ")))
        })?;
    run(cmd, args)
}

fn run(cmd: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .env_clear()
        .env("PATH", SAFE_PATH)
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Host for RealHost {
    fn stop_service(&self, root: &SysRoot, how: &ServiceStop) -> io::Result<()> {
        match how {
            ServiceStop::Systemd { unit } => systemctl(&["stop", unit]),
            ServiceStop::Signalled { pid, .. } => {
                // SAFETY: kill(2) with a pid read from /proc.
                if unsafe { libc::kill(*pid as libc::pid_t, libc::SIGTERM) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                let t0 = Instant::now();
                while root.exists(&format!("/proc/{pid}")) {
                    if t0.elapsed() > Duration::from_secs(5) {
                        return Err(io::Error::other(format!(
                            "pid {pid} still running 5 s after SIGTERM"
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(())
            }
        }
    }

    fn start_service(&self, _root: &SysRoot, how: &ServiceStart) -> io::Result<()> {
        match how {
            ServiceStart::Systemd { unit } => systemctl(&["start", unit]),
            ServiceStart::Exec { program } => {
                Command::new(program)
                    .env_clear()
                    .env("PATH", SAFE_PATH)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()?;
                Ok(())
            }
        }
    }

    fn get_coalesce(&self, iface: &str) -> io::Result<Coalesce> {
        let mut raw = Coalesce {
            cmd: ETHTOOL_GCOALESCE,
            ..Coalesce::default()
        };
        ethtool_ioctl(iface, &mut raw)?;
        raw.cmd = 0;
        Ok(raw)
    }

    fn set_coalesce(&self, iface: &str, c: &Coalesce) -> io::Result<()> {
        let mut raw = Coalesce {
            cmd: ETHTOOL_SCOALESCE,
            ..*c
        };
        ethtool_ioctl(iface, &mut raw)
    }

    fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> io::Result<()> {
        // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for c in cpus.iter() {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("CPU {c} beyond CPU_SETSIZE"),
                ));
            }
            // SAFETY: c < CPU_SETSIZE checked above.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        // SAFETY: valid cpu_set_t of the size passed.
        let rc = unsafe {
            libc::sched_setaffinity(
                tid as libc::pid_t,
                std::mem::size_of::<libc::cpu_set_t>(),
                &set,
            )
        };
        if rc != 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    fn file_caps(&self, root: &SysRoot, path: &str) -> io::Result<Option<FileCaps>> {
        use std::os::unix::ffi::OsStrExt;
        let p = root.path(path);
        let cpath = std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
        let mut buf = [0u8; 64];
        // SAFETY: valid C strings and buffer.
        let n = unsafe {
            libc::getxattr(
                cpath.as_ptr(),
                c"security.capability".as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(parse_vfs_cap(&buf[..n as usize]))
    }

    fn rauc_status(&self) -> io::Result<Option<String>> {
        let Some(cmd) = RAUC.iter().find(|p| Path::new(p).is_file()) else {
            return Ok(None);
        };
        let args = ["status", "--detailed", "--output-format=json"];
        let mut child = Command::new(cmd)
            .args(args)
            .env_clear()
            .env("PATH", SAFE_PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        // The output is a few KiB: it fits the pipe, so waiting before reading cannot block
        // the child; a service that never answers is killed at the deadline.
        let t0 = Instant::now();
        while child.try_wait()?.is_none() {
            if t0.elapsed() > RAUC_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{cmd} {} gave no answer in {RAUC_TIMEOUT:?}",
                        args.join(" ")
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "{cmd} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
    }
}

/// Parse `struct vfs_cap_data` (v2/v3).
pub fn parse_vfs_cap(b: &[u8]) -> Option<FileCaps> {
    let word = |i: usize| -> Option<u32> {
        b.get(i * 4..i * 4 + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    };
    let magic = word(0)?;
    let lo = word(1)?;
    let hi = word(3).unwrap_or(0);
    Some(FileCaps {
        permitted: u64::from(lo) | (u64::from(hi) << 32),
        effective: magic & 1 != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_is_journalled_as_the_kernel_order_array() {
        // a version-1 journal value: rx-usecs, rx-frames, …, tx-usecs (5th), tx-frames (6th),
        // …, use_adaptive_rx (10th), use_adaptive_tx (11th), …, rate_sample_interval (22nd)
        let v: Coalesce =
            serde_json::from_str("[2048,1,0,0,7,25,0,0,0,1,1,0,0,0,0,0,0,0,0,0,0,22]").unwrap();
        assert_eq!(v.cmd, 0);
        assert_eq!(
            (v.rx_usecs(), v.rx_frames(), v.tx_usecs(), v.tx_frames()),
            (2048, 1, 7, 25)
        );
        assert_eq!(
            (v.use_adaptive_rx_coalesce, v.use_adaptive_tx_coalesce),
            (1, 1)
        );
        assert_eq!(v.rate_sample_interval, 22);
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            "[2048,1,0,0,7,25,0,0,0,1,1,0,0,0,0,0,0,0,0,0,0,22]"
        );
        assert!(serde_json::from_str::<Coalesce>("[1,2,3]").is_err());
        assert_eq!(
            v.describe(),
            "rx-usecs 2048 rx-frames 1 tx-usecs 7 tx-frames 25 adaptive-rx on adaptive-tx on"
        );
    }
}
