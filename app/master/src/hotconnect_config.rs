//! `[[group]]`, the hot-connect groups' section of `rtcat.toml`: its keys and their offline
//! check. Apart from `hotconnect` (what the bring-up, the cycle and the recovery do with the
//! groups) so that the configuration imports only leaves: `hotconnect` uses the bring-up and the
//! master's errors, which hold the configuration's.

use crate::devices::Selector;
use crate::invalid::Invalid;
use serde::Deserialize;

/// Default of `probe_interval_ms`: a rejoining group is seen within 10 ms of its link, and an
/// absent member costs at most two datagrams per 10 ms.
pub const DEFAULT_PROBE_INTERVAL_MS: u32 = 10;
/// Longest group name (bytes).
const MAX_NAME: usize = 64;

/// `[[group]]`: devices that belong together, optionally optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// Name in messages and events (`[A-Za-z0-9_-]`, 1..=64 bytes, unique).
    pub name: String,
    /// The members may be absent and come back while the rest runs (required: say it).
    pub optional: bool,
    /// Which subdevices belong to it.
    pub members: Vec<MemberConfig>,
    /// How often an absent member is looked for, ms (1..=10000).
    #[serde(default = "default_probe")]
    pub probe_interval_ms: u32,
}

fn default_probe() -> u32 {
    DEFAULT_PROBE_INTERVAL_MS
}

/// One member matcher of a `[[group]]`: exactly one of `position`, `alias`, or `vendor_id` +
/// `product_id` (+ `revision`, and then every subdevice with that identity); the rule of
/// `[[device]]`.
pub type MemberConfig = Selector;

impl GroupConfig {
    /// One line for `rtcat config check`: `group "tool": optional (absent members looked for
    /// every 10 ms); members alias 0x0010, position 5`.
    pub fn describe(&self) -> String {
        let members: Vec<String> = self.members.iter().map(MemberConfig::matcher).collect();
        let kind = if self.optional {
            format!(
                "optional (absent members looked for every {} ms)",
                self.probe_interval_ms
            )
        } else {
            "not optional".to_string()
        };
        format!(
            "group {:?}: {kind}; members {}",
            self.name,
            members.join(", ")
        )
    }
}

/// `[[group]]` checked offline: names, matchers, ranges, a position or alias in two groups.
pub fn validate(groups: &[GroupConfig], subdevices: Option<u16>) -> Result<(), Invalid> {
    if groups.len() > crate::limits::MAX_SUBDEVICES {
        return Err(Invalid::new(
            "group",
            format!("{} entries", groups.len()),
            format!("at most {} groups", crate::limits::MAX_SUBDEVICES),
        ));
    }
    for (i, g) in groups.iter().enumerate() {
        let n = &g.name;
        if n.is_empty()
            || n.len() > MAX_NAME
            || !n
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(Invalid::new(
                format!("group[{i}].name"),
                format!("{:?}", crate::invalid::clip(n)),
                format!("must be 1..={MAX_NAME} bytes of A-Z, a-z, 0-9, '_' and '-'"),
            ));
        }
        if let Some(j) = groups[..i].iter().position(|o| o.name == *n) {
            return Err(Invalid::new(
                format!("group[{i}].name"),
                format!("{n:?}"),
                format!("group[{j}] has the same name"),
            ));
        }
        Invalid::range(
            &format!("group[{i}].probe_interval_ms"),
            g.probe_interval_ms.into(),
            1,
            10_000,
            " ms",
        )?;
        if g.members.is_empty() {
            return Err(Invalid::new(
                format!("group[{i}].members"),
                "[]",
                "needs at least one member ({ position = N }, { alias = N } or \
                 { vendor_id = V, product_id = P })",
            ));
        }
        if g.members.len() > crate::limits::MAX_SUBDEVICES {
            return Err(Invalid::new(
                format!("group[{i}].members"),
                format!("{} entries", g.members.len()),
                format!("at most {}", crate::limits::MAX_SUBDEVICES),
            ));
        }
        for (j, m) in g.members.iter().enumerate() {
            validate_member(&format!("group[{i}].members[{j}]"), m, subdevices)?;
        }
    }
    // The same position or alias in two places: which group it belongs to would be a guess.
    let all: Vec<(usize, usize, &MemberConfig)> = groups
        .iter()
        .enumerate()
        .flat_map(|(i, g)| g.members.iter().enumerate().map(move |(j, m)| (i, j, m)))
        .collect();
    for (k, (i, j, m)) in all.iter().enumerate() {
        for (i2, j2, m2) in &all[..k] {
            let (key, value) = match (m.position, m2.position, m.alias, m2.alias) {
                (Some(a), Some(b), ..) if a == b => ("position", a.to_string()),
                (_, _, Some(a), Some(b)) if a == b => ("alias", format!("{a:#06x}")),
                _ => continue,
            };
            return Err(Invalid::new(
                format!("group[{i}].members[{j}].{key}"),
                value,
                format!("group[{i2}].members[{j2}] names the same subdevice"),
            ));
        }
    }
    Ok(())
}

fn validate_member(key: &str, m: &MemberConfig, subdevices: Option<u16>) -> Result<(), Invalid> {
    let identity = m.vendor_id.is_some() || m.product_id.is_some() || m.revision.is_some();
    let matchers =
        usize::from(m.position.is_some()) + usize::from(m.alias.is_some()) + usize::from(identity);
    if matchers != 1 {
        return Err(Invalid::new(
            key,
            if matchers == 0 {
                "no matcher"
            } else {
                "several matchers"
            },
            "needs exactly one of `position`, `alias`, or `vendor_id` + `product_id` \
             (+ `revision`)",
        ));
    }
    if identity {
        for (k, v) in [("vendor_id", m.vendor_id), ("product_id", m.product_id)] {
            if v.is_none() {
                return Err(Invalid::new(
                    format!("{key}.{k}"),
                    "(missing)",
                    "an identity matcher needs both vendor_id and product_id",
                ));
            }
        }
    }
    if m.alias == Some(0) {
        return Err(Invalid::new(
            format!("{key}.alias"),
            0,
            "must be 1..=65535 (alias 0 means no alias is set)",
        ));
    }
    if let (Some(p), Some(n)) = (m.position, subdevices)
        && p >= n
    {
        return Err(Invalid::new(
            format!("{key}.position"),
            p,
            format!("must be below segment.subdevices ({n})"),
        ));
    }
    Ok(())
}
