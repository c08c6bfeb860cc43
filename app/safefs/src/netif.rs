//! Network interface names: the kernel's rules, checked the same way by every command, and the
//! interfaces a machine has (for errors that name them).

use crate::sysroot::SysRoot;

/// The kernel's rules for an interface name (`dev_valid_name()` in net/core/dev.c): 1 to 15
/// bytes (IFNAMSIZ 16 with the NUL), not `.` or `..`, no `/`, `:`, whitespace or NUL.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an interface name cannot be empty".into());
    }
    if name.len() > 15 {
        return Err(format!(
            "{name:?} is {} bytes long; an interface name has at most 15",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not an interface name"));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
    {
        return Err(format!(
            "{name:?} is not an interface name (it contains {c:?}; '/', ':', NUL and whitespace are not allowed)"
        ));
    }
    Ok(())
}

/// Whether `name` follows the kernel's rules (see [`check_name`]).
pub fn valid_name(name: &str) -> bool {
    check_name(name).is_ok()
}

/// The interfaces this machine has (`/sys/class/net`), sorted, without `lo`.
pub fn present(root: &SysRoot) -> Vec<String> {
    let mut v: Vec<String> = root
        .list("/sys/class/net")
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n != "lo")
        .collect();
    v.sort();
    v
}

/// `Err` with a message naming the interfaces that exist when `name` is not one of them
/// ("eth1 does not exist; this machine has end0, end1").
pub fn check_exists(root: &SysRoot, name: &str) -> Result<(), String> {
    if root.exists(&format!("/sys/class/net/{name}")) {
        return Ok(());
    }
    let have = present(root);
    Err(if have.is_empty() {
        format!("{name} does not exist; this machine has no network interface besides lo")
    } else {
        format!(
            "{name} does not exist; this machine has {}",
            have.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_rules() {
        for ok in ["eth1", "end0", "ecat0", "enP4p65s0", "a", "123456789012345"] {
            check_name(ok).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "a\u{0}b",
            "1234567890123456",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        // 15 bytes, not 15 characters.
        assert!(check_name("ééééééééé").is_err());
    }

    #[test]
    fn missing_interface_names_the_present_ones() {
        let d = tempfile::tempdir().unwrap();
        for n in ["lo", "end1", "end0"] {
            std::fs::create_dir_all(d.path().join("sys/class/net").join(n)).unwrap();
        }
        let root = SysRoot::new(d.path());
        check_exists(&root, "end0").unwrap();
        assert_eq!(
            check_exists(&root, "eth1").unwrap_err(),
            "eth1 does not exist; this machine has end0, end1"
        );
    }
}
