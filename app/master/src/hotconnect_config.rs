//! `[[group]]`, the hot-connect groups' section of `rtcat.toml`: its keys and their offline
//! check. Apart from `hotconnect` (what the bring-up, the cycle and the recovery do with the
//! groups) so that the configuration imports only leaves: `hotconnect` uses the bring-up and the
//! master's errors, which hold the configuration's.

use crate::devices::Selector;
use crate::invalid::Invalid;
use serde::Deserialize;

/// Default of `probe_interval_ms`: a rejoining group is seen within 10 ms of its link, and an
/// absent member costs one frame of three datagrams per 10 ms.
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
    /// Where the group hangs when it is not the end of the line: behind a port of a junction
    /// with mandatory devices after that port (members named by alias, in the order a frame
    /// meets them).
    #[serde(default)]
    pub behind: Option<Behind>,
}

/// `behind = { position = J, port = P }`: the group's first member hangs off port `P` (1, 2 or
/// 3) of the device at position `J`, and the group is everything behind that port. `J` is a
/// position of the layout: counted without any optional group's members, so it does not
/// depend on what is plugged in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Behind {
    /// The junction's position.
    pub position: u16,
    /// Its port the group hangs off (ports 1..=3; port 0 leads to the master).
    pub port: u8,
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
        let place = match self.behind {
            Some(b) => format!(", behind port {} of position {}", b.port, b.position),
            None => String::new(),
        };
        format!(
            "group {:?}: {kind}{place}; members {}",
            self.name,
            members.join(", ")
        )
    }

    /// Whether a subdevice with station alias `alias` is a member of this group on a
    /// junction's branch: such members are never in ethercrab's group (their positions depend
    /// on what is plugged in), rtcat's region runs them whether present at bring-up or not.
    pub fn on_branch_with(&self, alias: u16) -> bool {
        self.behind.is_some() && alias != 0 && self.members.iter().any(|m| m.alias == Some(alias))
    }
}

/// Whether the subdevice with station alias `alias` is a member of a group behind a junction's
/// port ([`GroupConfig::on_branch_with`]).
pub fn on_a_branch(groups: &[GroupConfig], alias: u16) -> bool {
    groups.iter().any(|g| g.on_branch_with(alias))
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
        if let Some(b) = g.behind {
            validate_behind(groups, i, b, subdevices)?;
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

/// A group behind a junction's port: optional, members by alias, a downstream port, and no
/// other group behind the same port.
fn validate_behind(
    groups: &[GroupConfig],
    i: usize,
    b: Behind,
    subdevices: Option<u16>,
) -> Result<(), Invalid> {
    let g = &groups[i];
    if !g.optional {
        return Err(Invalid::new(
            format!("group[{i}].behind"),
            format!("{{ position = {}, port = {} }}", b.position, b.port),
            "only an optional group has a place of its own (a mandatory device is where the \
             scan finds it)",
        ));
    }
    if !(1..=3).contains(&b.port) {
        return Err(Invalid::new(
            format!("group[{i}].behind.port"),
            b.port,
            "must be 1, 2 or 3 (port 0 leads to the master)",
        ));
    }
    if let Some(n) = subdevices
        && b.position >= n
    {
        return Err(Invalid::new(
            format!("group[{i}].behind.position"),
            b.position,
            format!("must be below segment.subdevices ({n})"),
        ));
    }
    if let Some(j) = g.members.iter().position(|m| m.alias.is_none()) {
        return Err(Invalid::new(
            format!("group[{i}].members[{j}]"),
            g.members[j].matcher(),
            "a member of a group behind a junction's port is named by its alias: its \
             position depends on what is plugged in, and its identity may be another \
             device's too",
        ));
    }
    if let Some(j) = groups[..i].iter().position(|o| o.behind == Some(b)) {
        return Err(Invalid::new(
            format!("group[{i}].behind"),
            format!("{{ position = {}, port = {} }}", b.position, b.port),
            format!("group[{j}] hangs behind the same port"),
        ));
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
