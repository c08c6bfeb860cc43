//! The rtcat `[[device]]` block for a chosen set of PDOs (the format of rtcat.toml's device
//! section: identity match, `pdo_assign` per sync manager, `pdo_map` per configurable PDO,
//! expected sizes).

use crate::{Device, Module, Pdo, Slot};
use std::fmt::Write as _;

/// Why a set of PDOs cannot be configured on a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{device}: {why}")]
pub struct ConfigError {
    /// The device's `Type` text.
    pub device: String,
    /// What is wrong, naming the PDO.
    pub why: String,
}

fn list(pdos: &[Pdo]) -> String {
    if pdos.is_empty() {
        return "none".into();
    }
    pdos.iter()
        .map(|p| format!("0x{:04X}", p.index))
        .collect::<Vec<_>>()
        .join(", ")
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// One direction of the chosen PDOs.
struct Side<'a> {
    /// RxPDOs (outputs, SM2, 0x1C12) or TxPDOs (inputs, SM3, 0x1C13).
    rx: bool,
    chosen: Vec<&'a Pdo>,
    sm: Option<u8>,
    bytes: u32,
}

impl Device {
    fn err(&self, why: String) -> ConfigError {
        ConfigError {
            device: self.name.clone(),
            why,
        }
    }

    /// The number of the first sync manager with this usage (`Outputs` / `Inputs`).
    fn sm_for(&self, usage: &str) -> Option<u8> {
        self.sync_managers
            .iter()
            .position(|s| s.usage.eq_ignore_ascii_case(usage))
            .and_then(|i| u8::try_from(i).ok())
    }

    fn side<'a>(&'a self, rx: bool, chosen: Vec<&'a Pdo>) -> Result<Side<'a>, ConfigError> {
        let (kind, usage, want) = if rx {
            ("RxPDO", "Outputs", 2)
        } else {
            ("TxPDO", "Inputs", 3)
        };
        let mut sm = None;
        for p in &chosen {
            let s = p.sm.or_else(|| self.sm_for(usage)).ok_or_else(|| {
                self.err(format!(
                    "{kind} 0x{:04X} names no sync manager (Sm) and the device has no {usage} \
                     sync manager",
                    p.index
                ))
            })?;
            match sm {
                None => sm = Some((s, p.index)),
                Some((s0, i0)) if s0 != s => {
                    return Err(self.err(format!(
                        "{kind}s 0x{i0:04X} (SM{s0}) and 0x{:04X} (SM{s}) are on different sync \
                         managers; choose the {kind}s of one",
                        p.index
                    )));
                }
                Some(_) => {}
            }
        }
        if let Some((s, i)) = sm
            && s != want
        {
            // Simple digital terminals and evaluation boards have no mailbox and put their
            // process data on SM0/SM1; the master configures process data on SM2/SM3 only.
            let what = if self.mailbox.is_none() && s < 2 {
                format!(
                    " ({} is a device without a mailbox whose process data are on SM0/SM1; the \
                     master's support for such devices is pending, issue 31)",
                    self.name
                )
            } else {
                String::new()
            };
            return Err(self.err(format!(
                "{kind} 0x{i:04X} is on SM{s}: an rtcat configuration assigns {kind}s to \
                 sm{want} only{what}"
            )));
        }
        let bits: u32 = chosen.iter().map(|p| p.bits()).sum();
        let bytes = bits.div_ceil(8);
        if let Some((s, _)) = sm
            && let Some(max) = self
                .sync_managers
                .get(usize::from(s))
                .and_then(|m| m.max_size)
            && bytes > u32::from(max)
        {
            return Err(self.err(format!(
                "the chosen {kind}s take {bytes} bytes, more than SM{s}'s MaxSize of {max}"
            )));
        }
        Ok(Side {
            rx,
            chosen,
            sm: sm.map(|(s, _)| s),
            bytes,
        })
    }

    /// The rtcat `[[device]]` block that assigns exactly the PDOs `pdos` (and maps those that are
    /// not fixed, with the entries this file gives), matched by vendor id, product code and
    /// revision, with the expected process data sizes.
    ///
    /// Checked first: every PDO exists, none is chosen twice, no chosen PDO excludes another,
    /// every mandatory PDO is chosen, the PDOs of one direction share one sync manager (SM2 for
    /// RxPDOs, SM3 for TxPDOs) and fit its `MaxSize`, and a device whose CoE does not allow PDO
    /// assignment (`PdoAssign`) keeps its default PDOs.
    pub fn config_for(&self, pdos: &[u16]) -> Result<String, ConfigError> {
        if let Some(why) = self.unsupported_profile() {
            return Err(self.err(why));
        }
        if let Some(&i) = pdos.iter().find(|i| !(0x1600..=0x1BFF).contains(*i)) {
            return Err(self.err(format!(
                "0x{i:04X} is not a PDO index (RxPDOs 0x1600..0x17FF, TxPDOs 0x1A00..0x1BFF)"
            )));
        }
        let mut rx = Vec::new();
        let mut tx = Vec::new();
        for (n, &i) in pdos.iter().enumerate() {
            if pdos[..n].contains(&i) {
                return Err(self.err(format!("PDO 0x{i:04X} is chosen twice")));
            }
            match self.pdo(i) {
                Some((p, true)) => rx.push(p),
                Some((p, false)) => tx.push(p),
                None => {
                    return Err(self.err(format!(
                        "PDO 0x{i:04X} is not in its ESI (RxPDOs: {}; TxPDOs: {})",
                        list(&self.rx_pdos),
                        list(&self.tx_pdos)
                    )));
                }
            }
        }
        for p in rx.iter().chain(&tx) {
            if let Some(x) = p.excludes.iter().find(|x| pdos.contains(x)) {
                return Err(self.err(format!(
                    "PDO 0x{:04X} excludes 0x{x:04X} (its Exclude list): choose one of them",
                    p.index
                )));
            }
        }
        for p in self.rx_pdos.iter().chain(&self.tx_pdos) {
            if p.mandatory && !pdos.contains(&p.index) {
                return Err(self.err(format!(
                    "PDO 0x{:04X} {:?} is mandatory: it must be chosen",
                    p.index, p.name
                )));
            }
        }
        let coe = self.coe().copied().unwrap_or(crate::Coe {
            sdo_info: false,
            complete_access: false,
            pdo_assign: false,
            pdo_config: false,
            pdo_upload: false,
        });
        let sides = [self.side(true, rx)?, self.side(false, tx)?];
        if !coe.pdo_assign {
            for s in &sides {
                let all = if s.rx { &self.rx_pdos } else { &self.tx_pdos };
                let default: Vec<u16> = all
                    .iter()
                    .filter(|p| p.sm.is_some())
                    .map(|p| p.index)
                    .collect();
                let mut chosen: Vec<u16> = s.chosen.iter().map(|p| p.index).collect();
                chosen.sort_unstable();
                let mut sorted = default.clone();
                sorted.sort_unstable();
                if chosen != sorted {
                    let hex: Vec<String> = default.iter().map(|i| format!("0x{i:04X}")).collect();
                    return Err(self.err(format!(
                        "its PDO assignment is fixed (Mailbox/CoE@PdoAssign is not set): its {}s \
                         are always {}",
                        if s.rx { "RxPDO" } else { "TxPDO" },
                        if hex.is_empty() {
                            "none".to_string()
                        } else {
                            hex.join(", ")
                        }
                    )));
                }
            }
        }
        Ok(self.render(&sides, coe))
    }

    fn render(&self, sides: &[Side; 2], coe: crate::Coe) -> String {
        let [out, inp] = sides;
        let mut s = String::new();
        let _ = writeln!(s, "# {}: {}", self.name, self.display_name());
        let rev = self
            .revision
            .map(|r| format!("revision 0x{r:08X}"))
            .unwrap_or_else(|| "no revision".into());
        let _ = writeln!(
            s,
            "# From its ESI: vendor 0x{:08X}, product 0x{:08X}, {rev}.",
            self.vendor_id, self.product_code
        );
        for side in sides {
            let (kind, dir) = if side.rx {
                ("RxPDOs", "outputs")
            } else {
                ("TxPDOs", "inputs")
            };
            let chosen: Vec<Pdo> = side.chosen.iter().map(|p| (*p).clone()).collect();
            let sm = side.sm.map(|n| format!("SM{n}, ")).unwrap_or_default();
            let unit = if side.bytes == 1 { "byte" } else { "bytes" };
            let _ = writeln!(
                s,
                "# {kind} ({dir}): {} ({sm}{} {unit})",
                list(&chosen),
                side.bytes
            );
        }
        let _ = writeln!(s, "[[device]]");
        let _ = writeln!(s, "vendor_id = 0x{:08X}", self.vendor_id);
        let _ = writeln!(s, "product_id = 0x{:08X}", self.product_code);
        match self.revision {
            Some(r) => {
                let _ = writeln!(s, "revision = 0x{r:08X}");
            }
            None => {
                let _ = writeln!(s, "# no RevisionNo in the ESI: matches every revision");
            }
        }
        let _ = writeln!(s, "name = {}", toml_str(&self.name));
        let _ = writeln!(s, "output_bytes = {}", out.bytes);
        let _ = writeln!(s, "input_bytes = {}", inp.bytes);

        let mut assign = Vec::new();
        for (side, key, all) in [(out, "sm2", &self.rx_pdos), (inp, "sm3", &self.tx_pdos)] {
            // A direction the device has no PDOs for is left alone; one it has but none was
            // chosen for is cleared (an empty assignment).
            if !all.is_empty() {
                let v: Vec<String> = side
                    .chosen
                    .iter()
                    .map(|p| format!("0x{:04X}", p.index))
                    .collect();
                assign.push(format!("{key} = [{}]", v.join(", ")));
            }
        }
        if !coe.pdo_assign {
            let _ = writeln!(
                s,
                "# PDO assignment fixed by the device (CoE PdoAssign not set): nothing to write"
            );
        } else if !assign.is_empty() {
            let _ = writeln!(s);
            let _ = writeln!(s, "# sm2 = outputs (0x1C12), sm3 = inputs (0x1C13)");
            let _ = writeln!(s, "pdo_assign = {{ {} }}", assign.join(", "));
        }

        for side in sides {
            for p in &side.chosen {
                let _ = writeln!(s);
                let kind = if side.rx { "RxPDO" } else { "TxPDO" };
                if p.fixed {
                    let _ = writeln!(
                        s,
                        "# {kind} 0x{:04X} {}: fixed mapping ({} bits), assigned only",
                        p.index,
                        toml_str(&p.name),
                        p.bits()
                    );
                    continue;
                }
                if !coe.pdo_config {
                    let _ = writeln!(
                        s,
                        "# {kind} 0x{:04X} {}: mapping not configurable (CoE PdoConfig not \
                         set), {} bits",
                        p.index,
                        toml_str(&p.name),
                        p.bits()
                    );
                    continue;
                }
                // A PDO without entries maps nothing: an empty mapping would only clear the
                // device's own; the PDO is assigned (it takes no process data).
                if p.entries.is_empty() {
                    let _ = writeln!(
                        s,
                        "# {kind} 0x{:04X} {}: no entries (0 bits), assigned only",
                        p.index,
                        toml_str(&p.name)
                    );
                    continue;
                }
                // An entry the master cannot map (0 or more than 64 bits, which `config check`
                // refuses): the device keeps its own mapping of this PDO, never a file that fails.
                if let Some(e) = p.entries.iter().find(|e| !(1..=64).contains(&e.bits)) {
                    let _ = writeln!(
                        s,
                        "# {kind} 0x{:04X} {}: entry 0x{:04X}:{:02X} has BitLen {} (rtcat maps 1 to \
                         64 bits): its mapping is left to the device, assigned only",
                        p.index,
                        toml_str(&p.name),
                        e.index,
                        e.sub,
                        e.bits
                    );
                    continue;
                }
                let _ = writeln!(
                    s,
                    "# {kind} 0x{:04X} {}: {} bits",
                    p.index,
                    toml_str(&p.name),
                    p.bits()
                );
                let _ = writeln!(s, "[[device.pdo_map]]");
                let _ = writeln!(s, "index = 0x{:04X}", p.index);
                let _ = writeln!(s, "entries = [");
                for e in &p.entries {
                    let spec = format!("0x{:04X}:{:02X}:{}", e.index, e.sub, e.bits);
                    if e.index == 0 {
                        let _ = writeln!(s, "  \"{spec}\",  # padding");
                        continue;
                    }
                    let ty = e
                        .data_type
                        .as_deref()
                        .map(|t| format!("  # {t}"))
                        .unwrap_or_default();
                    if e.name.is_empty() {
                        let _ = writeln!(s, "  \"{spec}\",{ty}");
                    } else {
                        let _ = writeln!(
                            s,
                            "  {{ entry = \"{spec}\", name = {} }},{ty}",
                            toml_str(&e.name)
                        );
                    }
                }
                let _ = writeln!(s, "]");
            }
        }
        s
    }
}

/// Most slot positions of one modular device considered (a `Slot` with `MaxInstances` stands
/// for that many positions; bus couplers take up to a few hundred modules).
pub const MAX_SLOT_POSITIONS: u32 = 1024;

impl Device {
    /// The slot positions of a modular device in order, numbered from 0: each `Slot` element
    /// stands for `MaxInstances` positions (at most [`MAX_SLOT_POSITIONS`] in all). A position
    /// is given as (its number, the index of its `Slot` in [`crate::Slots::slots`]).
    pub fn slot_positions(&self) -> Vec<(u32, usize)> {
        let mut v = Vec::new();
        let Some(slots) = &self.slots else {
            return v;
        };
        for (i, s) in slots.slots.iter().enumerate() {
            for _ in 0..s.max_instances {
                let Ok(n) = u32::try_from(v.len()) else {
                    return v;
                };
                if n >= MAX_SLOT_POSITIONS {
                    return v;
                }
                v.push((n, i));
            }
        }
        v
    }

    /// The device with the chosen modules in their slots (`chosen`: slot number and module
    /// `Type` name or `ModuleIdent`), and the PDO indices the modules assign by default (those
    /// with `Sm` or `Mandatory`), for [`Device::config_for`].
    ///
    /// A module's PDO whose `Index` is `DependOnSlot` gets the slot's PDO increment times the
    /// slot number added, each `DependOnSlot` entry index the slot's index increment times the
    /// slot number (ETG.2000 `Slots@SlotPdoIncrement` / `@SlotIndexIncrement`, overridden per
    /// `Slot`; ETG.5001 numbers a module's objects from its slot this way, e.g. 0x6000 +
    /// 0x10 * n). Checked: the slot exists, the module is one the slot accepts (its
    /// `ModuleIdent` list, or its `ModuleClass`), each slot is filled once, every `Slot` gets at
    /// least its `MinInstances`, and no index leaves 16 bits.
    pub fn with_modules(
        &self,
        modules: &[Module],
        chosen: &[(u32, String)],
    ) -> Result<(Device, Vec<u16>), ConfigError> {
        let Some(slots) = &self.slots else {
            return Err(self.err("it has no slots (not a modular device)".into()));
        };
        let positions = self.slot_positions();
        let mut dev = self.clone();
        let mut extra = Vec::new();
        let mut filled: Vec<u32> = Vec::new();
        for (n, want) in chosen {
            let Some(slot) = positions
                .get(*n as usize)
                .and_then(|&(_, i)| slots.slots.get(i))
            else {
                return Err(self.err(format!(
                    "no slot {n}: it has slots 0..{}",
                    positions.len().saturating_sub(1)
                )));
            };
            if filled.contains(n) {
                return Err(self.err(format!("slot {n} is given twice")));
            }
            filled.push(*n);
            let by_ident = crate::parse_number(want).and_then(|v| u32::try_from(v).ok());
            let m = modules
                .iter()
                .find(|m| m.name.eq_ignore_ascii_case(want))
                .or_else(|| by_ident.and_then(|i| modules.iter().find(|m| m.ident == Some(i))))
                .ok_or_else(|| {
                    self.err(format!(
                        "slot {n}: no module {want:?} in the file or the files it references"
                    ))
                })?;
            let accepted = slot.module_idents.is_empty() && slot.module_classes.is_empty()
                || m.ident.is_some_and(|i| slot.module_idents.contains(&i))
                || m.class
                    .as_ref()
                    .is_some_and(|c| slot.module_classes.contains(c));
            if !accepted {
                return Err(self.err(format!(
                    "slot {n} ({:?}) does not accept module {} ({}); it accepts {}",
                    slot.name,
                    m.name,
                    m.ident
                        .map(|i| format!("0x{i:08X}"))
                        .unwrap_or_else(|| "no ModuleIdent".into()),
                    accepts(slot, modules)
                )));
            }
            let pdo_inc = slot.pdo_increment.unwrap_or(slots.pdo_increment);
            let idx_inc = slot.index_increment.unwrap_or(slots.index_increment);
            let shift = |base: u16, inc: u32, what: &str| -> Result<u16, ConfigError> {
                u16::try_from(u32::from(base) + inc * n).map_err(|_| {
                    self.err(format!(
                        "slot {n}, module {}: {what} 0x{base:04X} + {n} x 0x{inc:X} leaves 16 bits",
                        m.name
                    ))
                })
            };
            for (rx, list) in [(true, &m.rx_pdos), (false, &m.tx_pdos)] {
                for p in list {
                    let mut q = p.clone();
                    if p.depend_on_slot {
                        q.index = shift(p.index, pdo_inc, "PDO")?;
                    }
                    for e in &mut q.entries {
                        if e.depend_on_slot && e.index != 0 {
                            e.index = shift(e.index, idx_inc, "entry")?;
                        }
                    }
                    for x in &mut q.excludes {
                        if p.depend_on_slot {
                            *x = shift(*x, pdo_inc, "excluded PDO")?;
                        }
                    }
                    q.name = format!("{} (slot {n}: {})", p.name, m.name);
                    if dev.pdo(q.index).is_some() {
                        return Err(self.err(format!(
                            "slot {n}, module {}: PDO 0x{:04X} is already taken (by the device \
                             or another slot)",
                            m.name, q.index
                        )));
                    }
                    if q.sm.is_some() || q.mandatory {
                        extra.push(q.index);
                    }
                    if rx {
                        dev.rx_pdos.push(q);
                    } else {
                        dev.tx_pdos.push(q);
                    }
                }
            }
        }
        // Modules given per Slot element (linear: the positions are numbered in order).
        let mut given = vec![0u32; slots.slots.len()];
        for n in &filled {
            if let Some(&(_, i)) = positions.get(*n as usize) {
                given[i] += 1;
            }
        }
        let reached = positions.last().map_or(0, |&(_, i)| i + 1);
        for (k, (s, &n)) in slots.slots.iter().zip(&given).enumerate() {
            if n < s.min_instances && k >= reached && positions.len() as u32 >= MAX_SLOT_POSITIONS {
                return Err(self.err(format!(
                    "slot {:?} (line {}) lies beyond the first {MAX_SLOT_POSITIONS} slot \
                     positions, the most rtcat assembles",
                    s.name, s.line
                )));
            }
            if n < s.min_instances {
                return Err(self.err(format!(
                    "slot {:?} needs at least {} module(s), {n} given (--slot N=MODULE; it \
                     accepts {})",
                    s.name,
                    s.min_instances,
                    accepts(s, modules)
                )));
            }
        }
        Ok((dev, extra))
    }
}

/// The modules a slot accepts, for messages and the listing.
pub fn accepts(slot: &Slot, modules: &[Module]) -> String {
    let mut v: Vec<String> = Vec::new();
    for &i in &slot.module_idents {
        let name = modules
            .iter()
            .find(|m| m.ident == Some(i))
            .map(|m| m.name.clone())
            .unwrap_or_else(|| "(not described)".into());
        let default = if slot.default_ident == Some(i) {
            ", default"
        } else {
            ""
        };
        v.push(format!("{name} (0x{i:08X}{default})"));
    }
    for c in &slot.module_classes {
        v.push(format!("class {c:?}"));
    }
    if v.is_empty() {
        "any module".into()
    } else {
        v.join(", ")
    }
}
