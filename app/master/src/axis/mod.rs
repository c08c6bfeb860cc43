//! `[[axis]]`: a CiA 402 drive used as an axis (see [`crate::cia402`]).
//!
//! An axis is bound to a subdevice the way a `[[device]]` entry is (position, alias or
//! identity). Unless a `[[device]]` entry selects the same subdevice, the axis brings its own
//! device configuration ([`generated_device`]): the cyclic synchronous mapping of ETG.6010
//! (§5, the minimum objects of CSP / CSV) in RxPDO 0x1600 / TxPDO 0x1A00 and the mode of
//! operation 0x6060 as a startup SDO, applied by [`crate::devices`] at every bring-up and
//! recovery. A `[[device]]` entry of the axis' subdevice with a PDO mapping (as `rtcat config
//! from-bus` writes one) must map the objects the axis reads and writes ([`needed_objects`]);
//! the error names the missing ones and the entry to delete so that the axis maps its drive
//! itself.

use serde::Deserialize;

use crate::cia402::{AfterRecovery, Mode, OnBadCycles, Policy};
use crate::devices::{self, DeviceConfig, Invalid, MapEntry, PdoAssign, PdoMap, StartupSdo};

/// `mode = "csp" | "csv"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AxisMode {
    /// Cyclic synchronous position (0x6060 = 8).
    #[default]
    Csp,
    /// Cyclic synchronous velocity (0x6060 = 9).
    Csv,
}

impl AxisMode {
    /// The profile's mode.
    pub fn mode(self) -> Mode {
        match self {
            AxisMode::Csp => Mode::Csp,
            AxisMode::Csv => Mode::Csv,
        }
    }
}

/// `on_bad_cycles = "quick_stop" | "hold"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BadCycles {
    /// See [`OnBadCycles::QuickStopAfter`]: after `hold_bad_cycles` bad cycles in a row.
    #[default]
    QuickStop,
    /// See [`OnBadCycles::Hold`].
    Hold,
}

/// `after_recovery = "re_enable" | "stay_disabled"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    /// See [`AfterRecovery::ReEnable`].
    ReEnable,
    /// See [`AfterRecovery::StayDisabled`].
    #[default]
    StayDisabled,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[axis]]` entry. Positions are in user units (`counts_per_unit` drive counts each).
pub struct AxisConfig {
    /// The axis' name (unique; used in results and by the application API).
    pub name: String,
    /// The drive at this position.
    pub position: Option<u16>,
    /// The drive with this configured station alias.
    pub alias: Option<u16>,
    /// The drive by identity: vendor ID (with `product_id`).
    pub vendor_id: Option<u32>,
    /// The drive by identity: product code (with `vendor_id`).
    pub product_id: Option<u32>,
    /// The drive by identity: revision (optional).
    pub revision: Option<u32>,
    /// Mode of operation.
    #[serde(default)]
    pub mode: AxisMode,
    /// Drive counts per user unit (> 0; negative values are not allowed: invert in the drive).
    pub counts_per_unit: f64,
    /// Lowest position, units.
    pub min_position: Option<f64>,
    /// Highest position, units.
    pub max_position: Option<f64>,
    /// Velocity limit, units/s (> 0).
    pub max_velocity: f64,
    /// Acceleration limit, units/s² (> 0).
    pub max_acceleration: f64,
    /// Jerk limit, units/s³ (> 0); absent: trapezoidal moves.
    pub max_jerk: Option<f64>,
    /// What a run of bad cycles does.
    #[serde(default)]
    pub on_bad_cycles: BadCycles,
    /// With `on_bad_cycles = "quick_stop"`: bad cycles in a row through which the last
    /// set-point is held; the next one quick-stops (0: the first one does). Absent: what the
    /// drive's sync error counter limit (0x10F1:02, read in PRE-OP) tolerates, else
    /// [`crate::cia402::DEFAULT_HOLD_BAD_CYCLES`].
    pub hold_bad_cycles: Option<u32>,
    /// Enabled again by itself after a quick stop or a recovery, or only when asked.
    #[serde(default)]
    pub after_recovery: Recovery,
    /// Built-in motion: these positions in turn (units), each reached at rest.
    #[serde(default)]
    pub moves: Vec<f64>,
    /// Built-in motion: a repeating back-and-forth move.
    pub profile: Option<ProfileConfig>,
    /// Rest at each target of `moves`, s.
    #[serde(default)]
    pub dwell_s: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
/// `profile = { from = 0.0, to = 10.0, dwell_s = 0.5, cycles = 3 }`.
pub struct ProfileConfig {
    /// First end, units (the axis moves there first).
    pub from: f64,
    /// Other end, units.
    pub to: f64,
    /// Rest at each end, s.
    #[serde(default)]
    pub dwell_s: f64,
    /// Round trips; absent: until the run ends.
    pub cycles: Option<u32>,
}

/// Rest between moves, at most (a longer one is likely a unit mistake: ms for s).
pub const MAX_DWELL_S: f64 = 3600.0;

/// `hold_bad_cycles`, at most: a longer hold drives the axis blind for too long (one second at
/// a 1 ms cycle); `on_bad_cycles = "hold"` is the explicit choice of an unbounded one.
pub const MAX_HOLD_BAD_CYCLES: u32 = 1000;

impl AxisConfig {
    /// The limits of the built-in moves, units.
    pub fn limits(&self) -> crate::motion::Limits {
        crate::motion::Limits {
            velocity: self.max_velocity,
            acceleration: self.max_acceleration,
            jerk: self.max_jerk,
        }
    }

    /// The built-in motion program (`None`: the axis only holds its position).
    pub fn program(&self) -> Option<crate::motion::Program> {
        if let Some(p) = &self.profile {
            return Some(crate::motion::Program::BackAndForth {
                a: p.from,
                b: p.to,
                dwell: p.dwell_s,
                cycles: p.cycles,
            });
        }
        (!self.moves.is_empty()).then(|| crate::motion::Program::Moves {
            positions: self.moves.clone(),
            dwell: self.dwell_s,
        })
    }

    /// The drive profile's policy (before the drive's own limit is known: without
    /// `hold_bad_cycles`, [`crate::cia402::DEFAULT_HOLD_BAD_CYCLES`]).
    pub fn policy(&self) -> Policy {
        Policy {
            on_bad_cycles: match self.on_bad_cycles {
                BadCycles::QuickStop => OnBadCycles::QuickStopAfter(
                    self.hold_bad_cycles
                        .unwrap_or(crate::cia402::DEFAULT_HOLD_BAD_CYCLES),
                ),
                BadCycles::Hold => OnBadCycles::Hold,
            },
            after_recovery: match self.after_recovery {
                Recovery::ReEnable => AfterRecovery::ReEnable,
                Recovery::StayDisabled => AfterRecovery::StayDisabled,
            },
        }
    }

    /// Whether the `[[device]]` entry `d` selects the same subdevice by the same key.
    pub fn same_device(&self, d: &DeviceConfig) -> bool {
        if self.position.is_some() || d.position.is_some() {
            return self.position == d.position;
        }
        if self.alias.is_some() || d.alias.is_some() {
            return self.alias == d.alias;
        }
        (self.vendor_id, self.product_id, self.revision) == (d.vendor_id, d.product_id, d.revision)
    }
}

/// A mapped object: index, subindex, bit length.
pub type Object = (u16, u8, u8);

/// Statusword 0x6041:00, 16 bits.
pub const STATUSWORD: (u16, u8, u8) = (0x6041, 0, 16);
/// Controlword 0x6040:00, 16 bits.
pub const CONTROLWORD: (u16, u8, u8) = (0x6040, 0, 16);

/// The output objects (index, subindex 0) through which a drive is commanded: controlword,
/// mode, position/velocity/torque targets and their offsets. Those of a drive an axis is bound
/// to belong to the axis (its limits, enable policy and no-jump rule), never to a client.
pub const COMMAND_OBJECTS: &[u16] = &[
    CONTROLWORD.0,
    0x6060,
    0x607a,
    0x60ff,
    0x6071,
    0x60b0,
    0x60b1,
    0x60b2,
];

/// The objects (index, subindex, bits) an axis needs in its outputs and inputs (ETG.6010 §5:
/// controlword, mode, target; statusword, mode display, position actual, velocity actual,
/// following error actual (CSP), error code).
pub fn required_objects(mode: AxisMode) -> (&'static [Object], &'static [Object]) {
    const RX_CSP: &[(u16, u8, u8)] = &[CONTROLWORD, (0x6060, 0, 8), (0x607a, 0, 32)];
    const RX_CSV: &[(u16, u8, u8)] = &[CONTROLWORD, (0x6060, 0, 8), (0x60ff, 0, 32)];
    const TX_CSP: &[(u16, u8, u8)] = &[
        STATUSWORD,
        (0x6061, 0, 8),
        (0x6064, 0, 32),
        (0x606c, 0, 32),
        (0x60f4, 0, 32),
        (0x603f, 0, 16),
    ];
    const TX_CSV: &[(u16, u8, u8)] = &[
        STATUSWORD,
        (0x6061, 0, 8),
        (0x6064, 0, 32),
        (0x606c, 0, 32),
        (0x603f, 0, 16),
    ];
    match mode {
        AxisMode::Csp => (RX_CSP, TX_CSP),
        AxisMode::Csv => (RX_CSV, TX_CSV),
    }
}

/// The objects (index, subindex, bits) an axis cannot run without, outputs and inputs: the
/// controlword, the mode, the target of its mode; the statusword, the mode display, the
/// position actual. The others of [`required_objects`] are read when mapped (0x60F4 is shown
/// beside the master's own following error, 0x603F gives a fault its text).
pub fn needed_objects(mode: AxisMode) -> (&'static [Object], &'static [Object]) {
    const RX_CSP: &[(u16, u8, u8)] = &[CONTROLWORD, (0x6060, 0, 8), (0x607a, 0, 32)];
    const RX_CSV: &[(u16, u8, u8)] = &[CONTROLWORD, (0x6060, 0, 8), (0x60ff, 0, 32)];
    const TX: &[(u16, u8, u8)] = &[STATUSWORD, (0x6061, 0, 8), (0x6064, 0, 32)];
    match mode {
        AxisMode::Csp => (RX_CSP, TX),
        AxisMode::Csv => (RX_CSV, TX),
    }
}

fn entry(o: &(u16, u8, u8)) -> MapEntry {
    MapEntry::Plain(format!("{:#06x}:{:02x}:{}", o.0, o.1, o.2))
}

/// The `[[device]]` configuration an axis brings when no entry configures its drive.
pub fn generated_device(a: &AxisConfig) -> DeviceConfig {
    let (rx, tx) = required_objects(a.mode);
    DeviceConfig {
        position: a.position,
        alias: a.alias,
        vendor_id: a.vendor_id,
        product_id: a.product_id,
        revision: a.revision,
        name: Some(format!("axis {}", a.name)),
        input_bytes: None,
        output_bytes: None,
        pdo_assign: Some(PdoAssign {
            sm2: Some(vec![0x1600]),
            sm3: Some(vec![0x1a00]),
            ..PdoAssign::default()
        }),
        pdo_map: vec![
            PdoMap {
                index: 0x1600,
                entries: rx.iter().map(entry).collect(),
            },
            PdoMap {
                index: 0x1a00,
                entries: tx.iter().map(entry).collect(),
            },
        ],
        sdo: vec![StartupSdo {
            index: 0x6060,
            sub: 0,
            ty: devices::SdoType::I8,
            value: toml::Value::Integer(a.mode.mode().code().into()),
            transition: devices::Transition::PS,
            timeout_ms: None,
        }],
    }
}

/// The `[[device]]` entries the axes add to `devices` (those of axes no entry configures).
pub fn generated_devices(axes: &[AxisConfig], devices: &[DeviceConfig]) -> Vec<DeviceConfig> {
    axes.iter()
        .filter(|a| !devices.iter().any(|d| a.same_device(d)))
        .map(generated_device)
        .collect()
}

fn invalid(key: String, value: impl std::fmt::Display, message: impl Into<String>) -> Invalid {
    Invalid::new(key, value, message)
}

/// Check the axes (limits, binding, names) and the `[[device]]` entries of their drives.
pub fn validate(axes: &[AxisConfig], devices: &[DeviceConfig]) -> Result<(), Invalid> {
    for (i, a) in axes.iter().enumerate() {
        let k = |f: &str| format!("axis[{i}].{f}");
        if a.name.is_empty() || a.name.len() > 64 || a.name.chars().any(|c| c.is_control()) {
            return Err(invalid(
                k("name"),
                format!("{:?}", a.name),
                "must be 1..64 printable characters",
            ));
        }
        if let Some(j) = axes[..i].iter().position(|b| b.name == a.name) {
            return Err(invalid(
                k("name"),
                format!("{:?}", a.name),
                format!("axis[{j}] has the same name"),
            ));
        }
        let keys = [
            a.position.is_some(),
            a.alias.is_some(),
            a.vendor_id.is_some() || a.product_id.is_some(),
        ];
        match keys.iter().filter(|&&b| b).count() {
            0 => {
                return Err(invalid(
                    k("position"),
                    "(none)",
                    "an axis needs position, alias or vendor_id + product_id",
                ));
            }
            1 => {}
            _ => {
                return Err(invalid(
                    k("position"),
                    "(several)",
                    "give one of position, alias or vendor_id + product_id",
                ));
            }
        }
        if keys[2] && (a.vendor_id.is_none() || a.product_id.is_none()) {
            return Err(invalid(
                k("product_id"),
                "(missing)",
                "vendor_id and product_id go together",
            ));
        }
        if a.revision.is_some() && !keys[2] {
            return Err(invalid(
                k("revision"),
                a.revision.unwrap_or(0),
                "only with vendor_id + product_id",
            ));
        }
        if let Some(j) = axes[..i].iter().position(|b| b.same_device_as_axis(a)) {
            return Err(invalid(
                k("position"),
                "(binding)",
                format!("axis[{j}] is bound to the same drive"),
            ));
        }
        let positive = |f: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(invalid(k(f), v, "must be a finite number > 0"))
            }
        };
        positive("counts_per_unit", a.counts_per_unit)?;
        positive("max_velocity", a.max_velocity)?;
        positive("max_acceleration", a.max_acceleration)?;
        if let Some(j) = a.max_jerk {
            positive("max_jerk", j)?;
        }
        for (f, v) in [
            ("min_position", a.min_position),
            ("max_position", a.max_position),
        ] {
            if let Some(v) = v {
                // The target must fit 0x607A (INTEGER32) in counts.
                let c = v * a.counts_per_unit;
                if !c.is_finite() || c.abs() > f64::from(i32::MAX) {
                    return Err(invalid(
                        k(f),
                        v,
                        format!("is {c} counts, beyond the 32-bit target position"),
                    ));
                }
            }
        }
        if let (Some(lo), Some(hi)) = (a.min_position, a.max_position)
            && lo >= hi
        {
            return Err(invalid(
                k("min_position"),
                lo,
                format!("must be below max_position ({hi})"),
            ));
        }
        let v = a.max_velocity * a.counts_per_unit;
        if v > f64::from(i32::MAX) {
            return Err(invalid(
                k("max_velocity"),
                a.max_velocity,
                format!("is {v} counts/s, beyond the 32-bit target velocity"),
            ));
        }
        if let Some(n) = a.hold_bad_cycles {
            if a.on_bad_cycles == BadCycles::Hold {
                return Err(invalid(
                    k("hold_bad_cycles"),
                    n,
                    "only with on_bad_cycles = \"quick_stop\" (\"hold\" holds through any \
                     number of bad cycles): remove one of the two",
                ));
            }
            if n > MAX_HOLD_BAD_CYCLES {
                return Err(invalid(
                    k("hold_bad_cycles"),
                    n,
                    format!(
                        "must be 0..{MAX_HOLD_BAD_CYCLES} (for no bound, on_bad_cycles = \"hold\")"
                    ),
                ));
            }
        }
        check_motion(i, a)?;
        if let Some(j) = devices.iter().position(|d| a.same_device(d)) {
            check_device(i, a, j, &devices[j])?;
        }
    }
    Ok(())
}

/// The built-in moves: one kind, finite, within the position limits, sane dwell times.
fn check_motion(i: usize, a: &AxisConfig) -> Result<(), Invalid> {
    let k = |f: &str| format!("axis[{i}].{f}");
    if a.profile.is_some() && !a.moves.is_empty() {
        return Err(invalid(
            k("profile"),
            "(with moves)",
            "give moves or profile, not both",
        ));
    }
    let within = |key: String, x: f64| {
        if !x.is_finite() {
            return Err(invalid(key, x, "must be a finite position"));
        }
        if let Some(lo) = a.min_position
            && x < lo
        {
            return Err(invalid(key, x, format!("is below min_position ({lo})")));
        }
        if let Some(hi) = a.max_position
            && x > hi
        {
            return Err(invalid(key, x, format!("is above max_position ({hi})")));
        }
        if (x * a.counts_per_unit).abs() > f64::from(i32::MAX) {
            return Err(invalid(key, x, "is beyond the 32-bit target position"));
        }
        Ok(())
    };
    for (j, &x) in a.moves.iter().enumerate() {
        within(k(&format!("moves[{j}]")), x)?;
    }
    let dwell = |key: String, d: f64| {
        if d.is_finite() && (0.0..=MAX_DWELL_S).contains(&d) {
            Ok(())
        } else {
            Err(invalid(key, d, format!("must be 0..{MAX_DWELL_S} s")))
        }
    };
    dwell(k("dwell_s"), a.dwell_s)?;
    if let Some(p) = &a.profile {
        within(k("profile.from"), p.from)?;
        within(k("profile.to"), p.to)?;
        dwell(k("profile.dwell_s"), p.dwell_s)?;
        if p.from == p.to {
            return Err(invalid(
                k("profile.to"),
                p.to,
                "must differ from profile.from",
            ));
        }
    }
    Ok(())
}

impl AxisConfig {
    fn same_device_as_axis(&self, b: &AxisConfig) -> bool {
        (self.position.is_some() && self.position == b.position)
            || (self.alias.is_some() && self.alias == b.alias)
            || (self.vendor_id.is_some()
                && (self.vendor_id, self.product_id, self.revision)
                    == (b.vendor_id, b.product_id, b.revision))
    }
}

/// An explicit `[[device]]` (`device[j]`) of an axis' drive: if it maps PDOs, the assigned
/// ones (or all it maps, without an assignment) must hold the objects the axis needs. Without a
/// mapping it runs the drive's own, checked against the layout at bring-up.
fn check_device(i: usize, a: &AxisConfig, j: usize, d: &DeviceConfig) -> Result<(), Invalid> {
    if d.pdo_map.is_empty() {
        return Ok(());
    }
    let (rx, tx) = needed_objects(a.mode);
    for (dir, need, sm) in [
        (
            "outputs",
            rx,
            d.pdo_assign.as_ref().and_then(|p| p.sm2.as_ref()),
        ),
        (
            "inputs",
            tx,
            d.pdo_assign.as_ref().and_then(|p| p.sm3.as_ref()),
        ),
    ] {
        let rx_side = dir == "outputs";
        let mut missing = Vec::new();
        for o in need {
            let found = d
                .pdo_map
                .iter()
                .filter(|m| {
                    let is_rx = (0x1600..0x1800).contains(&m.index);
                    is_rx == rx_side && sm.is_none_or(|s| s.contains(&m.index))
                })
                .flat_map(|m| m.entries.iter())
                .any(|e| {
                    devices::parse_entry(e.text())
                        .is_ok_and(|(ix, sub, bits)| ix == o.0 && sub == o.1 && bits == o.2)
                });
            if !found {
                missing.push(format!("{:#06x}:{:02x}:{}", o.0, o.1, o.2));
            }
        }
        if !missing.is_empty() {
            return Err(invalid(
                format!("axis[{i}]"),
                format!("{:?}", a.name),
                format!(
                    "the [[device]] entry for its drive (device[{j}], {}) does not map {} the \
                     axis needs in its {dir}: delete that [[device]] entry (with its \
                     [[device.pdo_map]] blocks), and the axis maps its drive itself (RxPDO \
                     0x1600, TxPDO 0x1A00, ETG.6010), or add the objects to its pdo_map",
                    d.matcher(),
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
