//! CPU sets in the two formats the kernel uses: lists (`0-5,7`) and hex masks
//! (`ff`, `00000000,000000ff`).

use std::collections::BTreeSet;
use std::fmt;

/// Highest CPU number accepted anywhere (the arm64 default of `NR_CPUS` is 512).
pub const MAX_CPUS: usize = 4096;

/// Why a CPU list does not parse; each names the element.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("{0:?} is not a CPU number or range")]
    NotACpu(String),
    #[error("range {0:?} runs backwards")]
    Backwards(String),
    #[error("CPU {0} is out of range (max {max})", max = MAX_CPUS - 1)]
    OutOfRange(usize),
}

/// An ordered set of CPU numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<usize>);

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn single(cpu: usize) -> Self {
        let mut s = Self::new();
        s.insert(cpu);
        s
    }

    pub fn insert(&mut self, cpu: usize) {
        self.0.insert(cpu);
    }

    pub fn contains(&self, cpu: usize) -> bool {
        self.0.contains(&cpu)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }

    pub fn max(&self) -> Option<usize> {
        self.0.iter().next_back().copied()
    }

    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.0.iter().any(|c| other.0.contains(c))
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }

    /// Parse a kernel CPU list such as `0-3,6` (the one parser of the workspace: rtlab's lists,
    /// `rtcat config cpus` and the CI scripts through it).
    ///
    /// The rule is the kernel's `cpulist_parse()` (`bitmap_parselist()` in lib/bitmap-str.c),
    /// which sysfs lists such as `/sys/devices/system/cpu/isolated` are written for: an empty list
    /// (or only whitespace, e.g. the `"\n"` of an empty sysfs file) is the empty set, elements are
    /// `N` or `A-B` separated by commas, whitespace around them is ignored. Stricter than the
    /// kernel: an empty element (`1,,2`) is refused rather than skipped (in a configuration it is a
    /// typo), and the `A-B:U/G` group form, `N` for the last CPU and `all` are not accepted (no
    /// kernel file here prints them). A caller that needs at least one CPU checks
    /// [`CpuSet::is_empty`] and says which option it was.
    pub fn parse_list(s: &str) -> Result<CpuSet, CpuListError> {
        let s = s.trim();
        let mut set = CpuSet::new();
        if s.is_empty() {
            return Ok(set);
        }
        for part in s.split(',') {
            let part = part.trim();
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a, b),
                None => (part, part),
            };
            let num = |x: &str| {
                x.trim()
                    .parse::<usize>()
                    .map_err(|_| CpuListError::NotACpu(part.to_string()))
            };
            let (a, b) = (num(a)?, num(b)?);
            if a > b {
                return Err(CpuListError::Backwards(part.to_string()));
            }
            if b >= MAX_CPUS {
                return Err(CpuListError::OutOfRange(b));
            }
            for c in a..=b {
                set.insert(c);
            }
        }
        Ok(set)
    }

    /// Parse a kernel hex mask (`3f`, `00000000,0000003f`).
    pub fn parse_mask(s: &str) -> Result<CpuSet, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty CPU mask".into());
        }
        let digits: String = s.chars().filter(|c| *c != ',').collect();
        let mut set = CpuSet::new();
        for (i, ch) in digits.chars().rev().enumerate() {
            let v = ch
                .to_digit(16)
                .ok_or_else(|| format!("{ch:?} is not a hex digit in CPU mask {s:?}"))?;
            for bit in 0..4 {
                if v & (1 << bit) != 0 {
                    let cpu = i * 4 + bit;
                    if cpu >= MAX_CPUS {
                        return Err(format!("CPU mask {s:?} is wider than {MAX_CPUS} CPUs"));
                    }
                    set.insert(cpu);
                }
            }
        }
        Ok(set)
    }

    /// Kernel list format (`0-5,7`).
    pub fn to_list(&self) -> String {
        let mut out = Vec::new();
        let mut it = self.0.iter().copied().peekable();
        while let Some(start) = it.next() {
            let mut end = start;
            while it.peek() == Some(&(end + 1)) {
                end = it.next().unwrap_or(end);
            }
            if start == end {
                out.push(start.to_string());
            } else {
                out.push(format!("{start}-{end}"));
            }
        }
        out.join(",")
    }

    /// Hex mask formatted like `template` (same number of comma groups and digits), so a value
    /// written back has the shape the kernel printed.
    pub fn to_mask_like(&self, template: &str) -> String {
        let template = template.trim();
        let groups: Vec<&str> = template.split(',').collect();
        let min_digits: usize = groups.iter().map(|g| g.len()).sum::<usize>().max(1);
        let need = self.max().map(|m| m / 4 + 1).unwrap_or(1);
        let ndigits = min_digits.max(need);
        let mut digits = vec![0u8; ndigits];
        for c in self.iter() {
            digits[c / 4] |= 1 << (c % 4);
        }
        let hex: String = digits
            .iter()
            .rev()
            .map(|d| char::from_digit(u32::from(*d), 16).unwrap_or('0'))
            .collect();
        if groups.len() <= 1 {
            return hex;
        }
        // comma every 8 digits from the right, as the kernel's %*pb does
        let mut out = String::new();
        let chars: Vec<char> = hex.chars().collect();
        let first = chars.len() % 8;
        for (i, ch) in chars.iter().enumerate() {
            if i > 0 && (i + 8 - first).is_multiple_of(8) {
                out.push(',');
            }
            out.push(*ch);
        }
        out
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            f.write_str("(none)")
        } else {
            f.write_str(&self.to_list())
        }
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<T: IntoIterator<Item = usize>>(iter: T) -> Self {
        CpuSet(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_round_trip() {
        for s in ["0-5,7", "6", "0,2,4", "0-3", ""] {
            assert_eq!(CpuSet::parse_list(s).unwrap().to_list(), s);
        }
        assert!(CpuSet::parse_list("5-3").is_err());
        assert!(CpuSet::parse_list("a").is_err());
        assert!(CpuSet::parse_list("1,,2").is_err());
        assert!(CpuSet::parse_list("99999").is_err());
    }

    /// As the kernel reads them: an empty sysfs list is the empty set; each error names the element.
    #[test]
    fn list_rules_follow_the_kernel() {
        assert!(CpuSet::parse_list("\n").unwrap().is_empty());
        assert_eq!(CpuSet::parse_list(" 6-7\n").unwrap().to_list(), "6-7");
        assert_eq!(CpuSet::parse_list("2, 0-1").unwrap().to_list(), "0-2");
        let e = |s: &str| CpuSet::parse_list(s).unwrap_err().to_string();
        assert_eq!(e("1,,2"), "\"\" is not a CPU number or range");
        assert_eq!(e("6,x"), "\"x\" is not a CPU number or range");
        assert_eq!(e("-1"), "\"-1\" is not a CPU number or range");
        assert_eq!(e("7-6"), "range \"7-6\" runs backwards");
        assert_eq!(e("4096"), "CPU 4096 is out of range (max 4095)");
    }

    #[test]
    fn mask_parse_and_format() {
        let s = CpuSet::parse_mask("bf").unwrap();
        assert_eq!(s.to_list(), "0-5,7");
        assert_eq!(s.to_mask_like("ff"), "bf");
        let w = CpuSet::parse_mask("00000000,000000bf").unwrap();
        assert_eq!(w, s);
        assert_eq!(s.to_mask_like("00000000,000000ff"), "00000000,000000bf");
        assert_eq!(CpuSet::single(6).to_mask_like("3"), "40");
        assert_eq!(CpuSet::new().to_mask_like("ff"), "00");
        assert!(CpuSet::parse_mask("xz").is_err());
        assert_eq!(CpuSet::parse_mask("1,00000000").unwrap().to_list(), "32");
    }
}
