//! What one journalled change is, and what each phase of tune does with it: apply it, show it,
//! keep its first original, restore it, and check that it is a change tune makes at all.
//!
//! The kind of a change, not its knob, decides this: every sysfs/procfs knob (IRQ masks,
//! workqueue mask, governor, idle states, timer migration) is a [`Change::File`], written in one
//! `write(2)` and read back.

use super::{KNOWN_SERVICES, PID_MAX, check_cpu_list, classify};
use crate::cpuset::CpuSet;
use crate::facts;
use crate::host::{self, Coalesce, Host, ServiceStart, ServiceStop};
use crate::sysroot::SysRoot;
use crate::tune::KnobGroup;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A sysfs/procfs file; `original` is the raw content as read (restored byte for byte).
    File {
        path: String,
        original: String,
        target: String,
    },
    /// A daemon that was running and is stopped.
    Service { name: String, how: ServiceStop },
    /// NIC coalescing parameters (the whole `struct ethtool_coalesce`).
    Coalesce {
        iface: String,
        original: Coalesce,
        target: Coalesce,
    },
    /// CPU affinity of one thread (identified by tid and start time, against PID reuse).
    Affinity {
        pid: u32,
        tid: u32,
        starttime: u64,
        comm: String,
        original: String,
        target: String,
    },
}

impl Change {
    /// One line naming the knob, its original and its tuned value.
    pub fn describe(&self) -> String {
        match self {
            Change::File {
                path,
                original,
                target,
            } => {
                format!("{path}: {} (tuned {})", original.trim(), target.trim())
            }
            Change::Service { name, .. } => format!("service {name}"),
            Change::Coalesce {
                iface, original, ..
            } => format!("{iface} coalescing {}", original.describe()),
            Change::Affinity {
                comm,
                tid,
                original,
                ..
            } => format!("task {comm}[{tid}] affinity {original}"),
        }
    }

    /// Make the change, reading the knob back.
    pub fn apply(&self, root: &SysRoot, host: &dyn Host) -> Result<(), String> {
        match self {
            Change::File { path, target, .. } => {
                root.write(path, &format!("{target}\n"))
                    .map_err(|e| e.to_string())?;
                let back = root
                    .read_knob(path)
                    .map_err(|e| format!("read-back: {e}"))?;
                if !same_value(path, &back, target) {
                    return Err(format!(
                        "read back {:?} after writing {target:?}",
                        back.trim()
                    ));
                }
                Ok(())
            }
            Change::Service { how, .. } => host.stop_service(root, how).map_err(|e| e.to_string()),
            Change::Coalesce { iface, target, .. } => {
                host.set_coalesce(iface, target)
                    .map_err(|e| e.to_string())?;
                let back = host
                    .get_coalesce(iface)
                    .map_err(|e| format!("read-back: {e}"))?;
                if &back != target {
                    return Err(format!(
                        "driver reads back {} after setting {}",
                        back.describe(),
                        target.describe()
                    ));
                }
                Ok(())
            }
            Change::Affinity {
                pid,
                tid,
                starttime,
                target,
                ..
            } => {
                if affinity_of(root, *pid, *tid, *starttime).is_none() {
                    return Err("task exited".into());
                }
                let t = CpuSet::parse_list(target).map_err(|e| e.to_string())?;
                host.set_affinity(*tid, &t).map_err(|e| e.to_string())
            }
        }
    }

    /// What the live value says about this applied change: in effect, drifted, gone, …
    pub fn status(&self, root: &SysRoot, host: &dyn Host) -> String {
        match self {
            Change::File {
                path,
                target,
                original,
            } => match root.read_knob(path) {
                Err(_) => "gone".into(),
                Ok(c) if same_value(path, &c, target) => "in effect".into(),
                Ok(c) if same_value(path, &c, original) => "not in effect (original value)".into(),
                Ok(c) => format!("drifted: now {:?}", c.trim()),
            },
            Change::Service { name, .. } => {
                if facts::pids_named(&facts::read_processes(root), name).is_empty() {
                    "in effect (stopped)".into()
                } else {
                    "drifted: running again".into()
                }
            }
            Change::Coalesce { iface, target, .. } => match host.get_coalesce(iface) {
                Ok(c) if c == *target => "in effect".into(),
                Ok(c) => format!("drifted: now {}", c.describe()),
                Err(err) => format!("unreadable: {err}"),
            },
            Change::Affinity {
                pid,
                tid,
                starttime,
                target,
                ..
            } => match affinity_of(root, *pid, *tid, *starttime) {
                None => "gone (task exited)".into(),
                Some(c) if c.to_list() == *target => "in effect".into(),
                Some(c) => format!("drifted: now {c}"),
            },
        }
    }

    /// `new` with this change's original: a second apply keeps the first-recorded original.
    pub fn keep_original(&self, new: &Change) -> Change {
        match (self, new) {
            (Change::File { path, original, .. }, Change::File { target, .. }) => Change::File {
                path: path.clone(),
                original: original.clone(),
                target: target.clone(),
            },
            (
                Change::Coalesce {
                    iface, original, ..
                },
                Change::Coalesce { target, .. },
            ) => Change::Coalesce {
                iface: iface.clone(),
                original: *original,
                target: *target,
            },
            (
                Change::Affinity {
                    pid,
                    tid,
                    starttime,
                    comm,
                    original,
                    ..
                },
                Change::Affinity { target, .. },
            ) => Change::Affinity {
                pid: *pid,
                tid: *tid,
                starttime: *starttime,
                comm: comm.clone(),
                original: original.clone(),
                target: target.clone(),
            },
            (_, n) => n.clone(),
        }
    }

    /// Put the original back; `Ok` says what was done (restored, already original, gone, …).
    pub fn undo(&self, root: &SysRoot, host: &dyn Host) -> Result<String, String> {
        match self {
            Change::File {
                path,
                original,
                target,
            } => {
                let cur = match root.read_knob(path) {
                    Ok(c) => c,
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                        return Ok(format!("gone ({path} no longer exists)"));
                    }
                    Err(err) => return Err(format!("cannot read {path}: {err}")),
                };
                if cur == *original {
                    return Ok("already original".into());
                }
                let drift = !same_value(path, &cur, target) && !same_value(path, &cur, original);
                root.write(path, original)
                    .map_err(|err| format!("write {path}: {err}"))?;
                let back = root
                    .read_knob(path)
                    .map_err(|err| format!("read-back {path}: {err}"))?;
                if !same_value(path, &back, original) {
                    return Err(format!(
                        "{path} reads {:?} after restoring {:?}",
                        back.trim(),
                        original.trim()
                    ));
                }
                Ok(if drift {
                    format!(
                        "restored (it had been changed to {:?} since apply)",
                        cur.trim()
                    )
                } else {
                    "restored".into()
                })
            }
            Change::Service { name, how } => {
                let running = !facts::pids_named(&facts::read_processes(root), name).is_empty();
                if running {
                    return Ok("already running".into());
                }
                // how to start it is decided here, from its name and the machine: a journalled
                // command line is never run
                let start =
                    host::plan_service_start(root, name, how).map_err(|err| err.to_string())?;
                host.start_service(root, &start)
                    .map_err(|err| err.to_string())?;
                Ok(match start {
                    ServiceStart::Systemd { unit } => format!("started ({unit})"),
                    ServiceStart::Exec { program } => format!(
                        "started ({} with its default options; the journalled command line is not used)",
                        program.display()
                    ),
                })
            }
            Change::Coalesce {
                iface, original, ..
            } => {
                let cur: Coalesce = host.get_coalesce(iface).map_err(|err| err.to_string())?;
                if cur == *original {
                    return Ok("already original".into());
                }
                host.set_coalesce(iface, original)
                    .map_err(|err| err.to_string())?;
                let back = host.get_coalesce(iface).map_err(|err| err.to_string())?;
                if back != *original {
                    return Err(format!(
                        "driver reads back {} after restoring {}",
                        back.describe(),
                        original.describe()
                    ));
                }
                Ok("restored".into())
            }
            Change::Affinity {
                pid,
                tid,
                starttime,
                original,
                ..
            } => {
                let Some(cur) = affinity_of(root, *pid, *tid, *starttime) else {
                    return Ok("gone (task exited)".into());
                };
                let orig = CpuSet::parse_list(original).map_err(|err| err.to_string())?;
                if cur == orig {
                    return Ok("already original".into());
                }
                host.set_affinity(*tid, &orig)
                    .map_err(|err| err.to_string())?;
                Ok("restored".into())
            }
        }
    }

    /// `Err` unless this is a change tune itself makes, journalled under `id` in `group`
    /// (the checks that do not depend on the machine).
    pub(crate) fn check(&self, id: &str, group: KnobGroup) -> Result<(), String> {
        let want_group = |allowed: &[KnobGroup]| {
            if allowed.contains(&group) {
                Ok(())
            } else {
                Err(format!(
                    "group {} does not change this kind of knob",
                    group.name()
                ))
            }
        };
        let want_id = |want: String| {
            if id == want {
                Ok(())
            } else {
                Err(format!("id does not match the change (expected {want:?})"))
            }
        };
        match self {
            Change::File {
                path,
                original,
                target,
            } => {
                let Some(k) = classify(path) else {
                    return Err(format!("{path:?} is not a file rtcat tune writes"));
                };
                want_id(format!("file:{path}"))?;
                want_group(k.groups())?;
                k.check_value(original)
                    .map_err(|m| format!("original: {m}"))?;
                k.check_value(target).map_err(|m| format!("target: {m}"))?;
            }
            Change::Service { name, how } => {
                if !KNOWN_SERVICES.contains(&name.as_str()) {
                    return Err(format!(
                        "service {name:?} is not one rtcat tune stops (only {})",
                        KNOWN_SERVICES.join(", ")
                    ));
                }
                want_id(format!("service:{name}"))?;
                want_group(&[KnobGroup::Irqbalance])?;
                match how {
                    ServiceStop::Systemd { unit } => {
                        if *unit != format!("{name}.service") {
                            return Err(format!("unit {unit:?} is not {name}.service"));
                        }
                    }
                    ServiceStop::Signalled { pid, cmdline } => {
                        if *pid == 0 || *pid > PID_MAX {
                            return Err(format!("pid {pid} is out of range"));
                        }
                        // never run: restore starts the service by what it finds itself. Checked
                        // so that a journal carrying a command of something else is refused.
                        let prog = cmdline.first().map(|c| c.rsplit('/').next().unwrap_or(c));
                        if prog != Some(name.as_str()) {
                            return Err(format!(
                                "recorded command line {cmdline:?} is not {name}'s"
                            ));
                        }
                        if cmdline.len() > 256
                            || cmdline.iter().map(String::len).sum::<usize>() > 65536
                        {
                            return Err("recorded command line is too long".into());
                        }
                    }
                }
            }
            Change::Coalesce { iface, .. } => {
                crate::netif::check_name(iface)?;
                want_id(format!("coalesce:{iface}"))?;
                want_group(&[KnobGroup::Coalesce])?;
            }
            Change::Affinity {
                pid,
                tid,
                starttime,
                comm,
                original,
                target,
            } => {
                for (what, v) in [("pid", pid), ("tid", tid)] {
                    if *v == 0 || *v > PID_MAX {
                        return Err(format!("{what} {v} is out of range"));
                    }
                }
                want_id(format!("task:{tid}:{starttime}"))?;
                want_group(&[KnobGroup::Tasks])?;
                if comm.len() > 64 {
                    return Err("comm is longer than 64 bytes".into());
                }
                check_cpu_list("original", original)?;
                check_cpu_list("target", target)?;
            }
        }
        Ok(())
    }
}

fn affinity_of(root: &SysRoot, pid: u32, tid: u32, starttime: u64) -> Option<CpuSet> {
    let base = format!("/proc/{pid}/task/{tid}");
    let stat = root.read_raw(&format!("{base}/stat")).ok()?;
    let (_, f) = facts::parse_stat(&stat)?;
    if f.get(19).and_then(|v| v.parse::<u64>().ok()) != Some(starttime) {
        return None;
    }
    let status = root.read_raw(&format!("{base}/status")).ok()?;
    facts::status_field(&status, "Cpus_allowed_list").and_then(|s| CpuSet::parse_list(s).ok())
}

fn same_value(path: &str, a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    if a == b {
        return true;
    }
    if (path.ends_with("smp_affinity") || path.ends_with("cpumask"))
        && let (Ok(x), Ok(y)) = (CpuSet::parse_mask(a), CpuSet::parse_mask(b))
    {
        return x == y;
    }
    false
}
