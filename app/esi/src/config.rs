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
    /// RxPDOs (outputs) or TxPDOs (inputs).
    rx: bool,
    chosen: Vec<&'a Pdo>,
    /// The sync managers carrying them, in SM order, with the PDOs of each and its bytes (an SM
    /// is sized in whole bytes).
    sms: Vec<(u8, Vec<u16>, u32)>,
    /// The direction's process data: the SMs' bytes summed.
    bytes: u32,
}

/// The highest sync manager an rtcat `pdo_assign` names (`sm0`..`sm3`).
const MAX_ASSIGN_SM: u8 = 3;

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

    /// The chosen PDOs of one direction on their sync managers. A device with a mailbox has
    /// SM0/SM1 for it and its process data on SM2 (RxPDOs) / SM3 (TxPDOs), one SM per
    /// direction; a device without one (digital terminals) has them where its SII puts them,
    /// often SM0/SM1, and may split a direction over several SMs of that usage.
    fn side<'a>(&'a self, rx: bool, chosen: Vec<&'a Pdo>) -> Result<Side<'a>, ConfigError> {
        let (kind, usage, want) = if rx {
            ("RxPDO", "Outputs", 2)
        } else {
            ("TxPDO", "Inputs", 3)
        };
        let mailbox = self.mailbox.is_some();
        let mut sms: Vec<(u8, Vec<u16>, u32)> = Vec::new();
        for p in &chosen {
            let s = p.sm.or_else(|| self.sm_for(usage)).ok_or_else(|| {
                self.err(format!(
                    "{kind} 0x{:04X} names no sync manager (Sm) and the device has no {usage} \
                     sync manager",
                    p.index
                ))
            })?;
            if mailbox {
                if let Some((s0, pdos, _)) = sms.first()
                    && *s0 != s
                {
                    return Err(self.err(format!(
                        "{kind}s 0x{:04X} (SM{s0}) and 0x{:04X} (SM{s}) are on different sync \
                         managers; choose the {kind}s of one",
                        pdos[0], p.index
                    )));
                }
                if s != want {
                    return Err(self.err(format!(
                        "{kind} 0x{:04X} is on SM{s}: a device with a mailbox has it on SM0/SM1, \
                         and an rtcat configuration assigns its {kind}s to sm{want}",
                        p.index
                    )));
                }
            } else {
                if let Some(m) = self.sync_managers.get(usize::from(s))
                    && !m.usage.eq_ignore_ascii_case(usage)
                {
                    return Err(self.err(format!(
                        "{kind} 0x{:04X} is on SM{s}, whose usage is {:?}: {kind}s need an \
                         {usage} sync manager",
                        p.index, m.usage
                    )));
                }
                if s > MAX_ASSIGN_SM {
                    return Err(self.err(format!(
                        "{kind} 0x{:04X} is on SM{s}: an rtcat pdo_assign names sm0..sm3",
                        p.index
                    )));
                }
            }
            match sms.iter_mut().find(|(n, _, _)| *n == s) {
                Some((_, pdos, bits)) => {
                    pdos.push(p.index);
                    *bits += p.bits();
                }
                None => sms.push((s, vec![p.index], p.bits())),
            }
        }
        sms.sort_by_key(|(n, _, _)| *n);
        for (s, _, bits) in &mut sms {
            // Bits to the SM's whole bytes, as the master sizes it.
            *bits = bits.div_ceil(8);
            if let Some(max) = self
                .sync_managers
                .get(usize::from(*s))
                .and_then(|m| m.max_size)
                && *bits > u32::from(max)
            {
                return Err(self.err(format!(
                    "the chosen {kind}s take {bits} bytes, more than SM{s}'s MaxSize of {max}"
                )));
            }
        }
        let bytes = sms.iter().map(|(_, _, b)| b).sum();
        Ok(Side {
            rx,
            chosen,
            sms,
            bytes,
        })
    }

    /// The rtcat `[[device]]` block that assigns exactly the PDOs `pdos` (and maps those that are
    /// not fixed, with the entries this file gives), matched by vendor id, product code and
    /// revision, with the expected process data sizes.
    ///
    /// Checked first: every PDO exists, none is chosen twice, no chosen PDO excludes another,
    /// every mandatory PDO is chosen, the PDOs of one direction share one sync manager (SM2 for
    /// RxPDOs, SM3 for TxPDOs) on a device with a mailbox, or sit on sync managers of their
    /// direction (SM0..SM3) on one without, each within its `MaxSize`, and a device whose CoE
    /// does not allow PDO assignment (`PdoAssign`), or that has no mailbox, keeps its default
    /// PDOs. A device without a mailbox gets its SII's assignment as `pdo_assign` for the master
    /// to compare (it writes nothing there).
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
                    let why = if self.mailbox.is_none() {
                        "no mailbox: its SII's"
                    } else {
                        "Mailbox/CoE@PdoAssign is not set"
                    };
                    return Err(self.err(format!(
                        "its PDO assignment is fixed ({why}): its {}s are always {}",
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
            let unit = |n: u32| if n == 1 { "byte" } else { "bytes" };
            let size = match side.sms.as_slice() {
                [] => format!("{} {}", side.bytes, unit(side.bytes)),
                sms => sms
                    .iter()
                    .map(|(n, _, b)| format!("SM{n}, {b} {}", unit(*b)))
                    .collect::<Vec<_>>()
                    .join("; "),
            };
            let _ = writeln!(s, "# {kind} ({dir}): {} ({size})", list(&chosen));
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
        if self.mailbox.is_none() {
            // No mailbox: the assignment is the SII's; the master compares it, writes nothing.
            let lists: Vec<String> = out
                .sms
                .iter()
                .chain(&inp.sms)
                .map(|(n, pdos, _)| {
                    let v: Vec<String> = pdos.iter().map(|i| format!("0x{i:04X}")).collect();
                    (n, format!("sm{n} = [{}]", v.join(", ")))
                })
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_values()
                .collect();
            if !lists.is_empty() {
                let _ = writeln!(s);
                let _ = writeln!(
                    s,
                    "# No mailbox: the assignment is fixed in the device's SII; the master \
                     compares it, writes nothing"
                );
                let _ = writeln!(s, "pdo_assign = {{ {} }}", lists.join(", "));
            }
        } else if !coe.pdo_assign {
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
                    // Without a mailbox nothing is assigned either: the SII's is compared.
                    let _ = writeln!(
                        s,
                        "# {kind} 0x{:04X} {}: fixed mapping ({} bits){}",
                        p.index,
                        toml_str(&p.name),
                        p.bits(),
                        if self.mailbox.is_some() {
                            ", assigned only"
                        } else {
                            ""
                        }
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
