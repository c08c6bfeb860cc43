//! systemd units as rttune reads them: where a unit is installed, and the `Key=value` settings of
//! a unit file merged with its drop-ins (`NAME.d/*.conf`).
//!
//! This is not a full unit parser: sections are not told apart, and only the list-valued
//! capability settings accumulate (`AmbientCapabilities=`, `CapabilityBoundingSet=`: an empty
//! assignment resets them, as in systemd.exec(5)); every other key keeps its last value.

use crate::sysroot::SysRoot;
use std::collections::BTreeMap;

/// The unit search path of the system manager (systemd.unit(5), "Unit File Load Path"): where
/// an installed unit is looked for to decide how a service is stopped and started.
pub const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// Where doctor reads rtcat's own unit from, first match wins (the administrator's copy in /etc
/// before the package's).
const READ_DIRS: &[&str] = &[
    "/etc/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// Drop-in directories of a unit, `{}` standing for the unit name, in the order they are
/// applied (the later one wins).
const DROPIN_DIRS: &[&str] = &["/usr/lib/systemd/system/{}.d", "/etc/systemd/system/{}.d"];

/// Settings whose assignments add to a list.
const LIST_KEYS: &[&str] = &["AmbientCapabilities", "CapabilityBoundingSet"];

/// True when `unit` (e.g. `irqbalance.service`) is installed in one of [`UNIT_DIRS`].
pub fn exists(root: &SysRoot, unit: &str) -> bool {
    UNIT_DIRS
        .iter()
        .any(|d| root.exists(&format!("{d}/{unit}")))
}

/// A unit file and its drop-ins, merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unit {
    /// The unit file read (its drop-ins are not named).
    pub path: String,
    /// `Key` → value; list settings as their items joined by spaces, with a leading space.
    pub keys: BTreeMap<String, String>,
}

/// Read `unit` from the first of the directories doctor looks in, with its drop-ins
/// (`*.conf`, in directory-listing order). None when the unit is not installed.
pub fn read(root: &SysRoot, unit: &str) -> Option<Unit> {
    let (path, text) = READ_DIRS.iter().find_map(|d| {
        let p = format!("{d}/{unit}");
        root.read_raw(&p).ok().map(|t| (p, t))
    })?;
    let mut texts = vec![text];
    for dir in DROPIN_DIRS {
        let dir = dir.replace("{}", unit);
        for f in root.list(&dir).unwrap_or_default() {
            if f.ends_with(".conf")
                && let Ok(t) = root.read_raw(&format!("{dir}/{f}"))
            {
                texts.push(t);
            }
        }
    }
    Some(Unit {
        path,
        keys: merge(texts.iter().map(String::as_str)),
    })
}

/// The settings of unit texts applied in order (the unit file first, then its drop-ins).
pub fn merge<'a>(texts: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for t in texts {
        for l in t.lines() {
            let Some((k, v)) = l.trim().split_once('=') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            if LIST_KEYS.contains(&k) {
                let e = m.entry(k.to_string()).or_insert_with(String::new);
                if v.is_empty() {
                    e.clear();
                } else {
                    e.push(' ');
                    e.push_str(v);
                }
            } else {
                m.insert(k.to_string(), v.to_string());
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_ins_override_and_capability_lists_accumulate() {
        let m = merge([
            "[Service]\nUser=rtcat\nLimitMEMLOCK=64M\nAmbientCapabilities=CAP_NET_RAW\n",
            "[Service]\nLimitMEMLOCK=infinity\nAmbientCapabilities=CAP_SYS_NICE CAP_IPC_LOCK\n",
        ]);
        assert_eq!(m["User"], "rtcat");
        assert_eq!(m["LimitMEMLOCK"], "infinity");
        assert_eq!(
            m["AmbientCapabilities"],
            " CAP_NET_RAW CAP_SYS_NICE CAP_IPC_LOCK"
        );
        // an empty assignment resets a list
        let m = merge([
            "AmbientCapabilities=CAP_NET_RAW\n",
            "AmbientCapabilities=\nAmbientCapabilities=CAP_IPC_LOCK\n",
        ]);
        assert_eq!(m["AmbientCapabilities"], " CAP_IPC_LOCK");
        assert!(merge(["# comment\n[Unit]\n"]).is_empty());
    }

    #[test]
    fn reads_the_first_installed_unit_with_its_drop_ins() {
        let tmp = tempfile::tempdir().unwrap();
        let put = |p: &str, s: &str| {
            let f = tmp.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, s).unwrap();
        };
        put("/usr/lib/systemd/system/rtcat.service", "User=rtcat\n");
        put("/lib/systemd/system/rtcat.service", "User=other\n");
        put(
            "/etc/systemd/system/rtcat.service.d/10-caps.conf",
            "AmbientCapabilities=CAP_SYS_NICE\n",
        );
        put(
            "/etc/systemd/system/rtcat.service.d/README",
            "User=ignored\n",
        );
        let root = SysRoot::new(tmp.path());
        let u = read(&root, "rtcat.service").unwrap();
        assert_eq!(u.path, "/usr/lib/systemd/system/rtcat.service");
        assert_eq!(u.keys["User"], "rtcat");
        assert_eq!(u.keys["AmbientCapabilities"], " CAP_SYS_NICE");
        assert!(exists(&root, "rtcat.service"));
        assert!(!exists(&root, "irqbalance.service"));
        assert!(read(&root, "irqbalance.service").is_none());
    }
}
