//! `rtcat esi FILE`: read an ESI file ([`rtcat_esi`]) and list its devices, show one device
//! (sync managers, PDOs with their flags and entries, the dictionary's size), print the model as
//! JSON, or print the `[[device]]` configuration for a chosen set of PDOs. Everything wrong with
//! the input (the file, the selector, the PDOs) exits 2; only a system I/O failure exits 1.

use crate::outcome::{Failure, Outcome};
use clap::Args;
use rtcat_esi::{Device, EsiFile, Pdo};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct EsiArgs {
    /// The ESI file (XML)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The whole model as JSON instead of the listing
    #[arg(long, conflicts_with = "emit_config")]
    pub json: bool,
    /// Choose the device by its type name (the `Type` text, e.g. EL3102)
    #[arg(long, value_name = "NAME", conflicts_with = "product")]
    pub device: Option<String>,
    /// Choose the device by its product code (decimal, 0x.. or #x..)
    #[arg(long, value_name = "ID", value_parser = parse_esi_number)]
    pub product: Option<u32>,
    /// Choose the revision (a file often carries several revisions of a product)
    #[arg(long, value_name = "REV", value_parser = parse_esi_number)]
    pub revision: Option<u32>,
    /// Print the rtcat [[device]] block assigning these PDOs (e.g. 0x1600 0x1A00); a modular
    /// device's modules (--slot) add theirs, a device without a mailbox needs none (its SII's)
    #[arg(long, value_name = "PDO", num_args = 0.., value_parser = parse_pdo_index)]
    pub emit_config: Option<Vec<u16>>,
    /// Put a module into a slot of a modular device: slot number = module type name or
    /// ModuleIdent (repeat per slot; with --emit-config)
    #[arg(long, value_name = "N=MODULE", requires = "emit_config", value_parser = parse_slot)]
    pub slot: Vec<(u32, String)>,
}

/// `N=MODULE`: a slot number and a module's type name or ident.
pub fn parse_slot(s: &str) -> Result<(u32, String), String> {
    let (n, m) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not N=MODULE (a slot number, '=', a module)"))?;
    let n = rtcat_esi::parse_number(n)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("{s:?}: {n:?} is not a slot number"))?;
    let m = m.trim();
    if m.is_empty() {
        return Err(format!("{s:?}: no module after '='"));
    }
    Ok((n, m.to_string()))
}

/// A number as ESI files and their users write it: decimal, `0x..` or `#x..`.
pub fn parse_esi_number(s: &str) -> Result<u32, String> {
    rtcat_esi::parse_number(s)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("{s:?} is not a 32-bit number (decimal, 0x.. or #x..)"))
}

/// A PDO index: any 16-bit number here. Whether it is a CoE mapping object (RxPDOs
/// 0x1600..0x17FF, TxPDOs 0x1A00..0x1BFF, ETG.1000.6) is checked against the chosen device, so
/// that a device of another profile (an SoE drive's AT/MDT) is named for what it is.
pub fn parse_pdo_index(s: &str) -> Result<u16, String> {
    match rtcat_esi::parse_number(s) {
        Some(v) => u16::try_from(v).map_err(|_| {
            format!("{s:?} is not a PDO index (RxPDOs 0x1600..0x17FF, TxPDOs 0x1A00..0x1BFF)")
        }),
        None => Err(format!("{s:?} is not a number (decimal, 0x.. or #x..)")),
    }
}

/// Run `rtcat esi`.
pub fn run(a: &EsiArgs) -> Outcome {
    let out = run_inner(a)?;
    let mut so = std::io::stdout().lock();
    so.write_all(out.as_bytes())
        .and_then(|()| so.flush())
        .map_err(|e| Failure::Runtime(format!("stdout: {e}")))
}

fn run_inner(a: &EsiArgs) -> Result<String, Failure> {
    let file = rtcat_esi::read_file(&a.file).map_err(|e| {
        if e.is_input() {
            Failure::Usage(e.to_string())
        } else {
            Failure::Runtime(e.to_string())
        }
    })?;
    // Repairs the reader made (a one-digit DefaultData, ...): said, not hidden; a file with
    // thousands of them says the count.
    const SHOWN: usize = 20;
    for w in file.warnings.iter().take(SHOWN) {
        crate::say!("rtcat: warning: {w}");
    }
    if file.warnings.len() > SHOWN {
        crate::say!(
            "rtcat: warning: ... and {} more like these",
            file.warnings.len() - SHOWN
        );
    }
    let fname = a.file.display().to_string();
    let selected = select(&file, a, &fname)?;
    if a.json {
        let shown = EsiFile {
            devices: selected.iter().map(|d| (*d).clone()).collect(),
            ..file.clone()
        };
        let mut s = serde_json::to_string_pretty(&shown)
            .map_err(|e| Failure::Runtime(format!("JSON: {e}")))?;
        s.push('\n');
        return Ok(s);
    }
    if let Some(pdos) = &a.emit_config {
        let d = match selected.as_slice() {
            [d] => d,
            [] => return Err(Failure::Usage(format!("{fname}: describes no device"))),
            many => {
                let same_product = many
                    .iter()
                    .all(|d| d.name == many[0].name && d.product_code == many[0].product_code);
                let hint = if same_product && a.revision.is_none() {
                    "they differ only by revision: choose one with --revision REV"
                } else if same_product {
                    "they have the same type, product code and revision: the file describes one \
                     device twice"
                } else {
                    "choose one with --device NAME or --product ID"
                };
                return Err(Failure::Usage(format!(
                    "{fname}: {} devices match ({}); {hint}",
                    many.len(),
                    many.iter().map(|d| ident(d)).collect::<Vec<_>>().join(", ")
                )));
            }
        };
        let block = if d.slots.is_some() {
            let (dev, extra) = d
                .with_modules(&file.modules, &a.slot)
                .map_err(|e| Failure::Usage(format!("{fname}: {e}")))?;
            // The device's own mandatory PDOs, then the modules' default ones.
            let mut all = pdos.clone();
            let own = d.rx_pdos.iter().chain(&d.tx_pdos).filter(|p| p.mandatory);
            for i in own.map(|p| p.index).chain(extra) {
                if !all.contains(&i) {
                    all.push(i);
                }
            }
            dev.config_for(&all)
        } else if !a.slot.is_empty() {
            return Err(Failure::Usage(format!(
                "{fname}: {} has no slots (not a modular device): --slot does not apply",
                d.name
            )));
        } else if pdos.is_empty() && d.mailbox.is_none() {
            // No mailbox: the assignment is the SII's, nothing to choose.
            let fixed: Vec<u16> = d
                .rx_pdos
                .iter()
                .chain(&d.tx_pdos)
                .filter(|p| p.sm.is_some())
                .map(|p| p.index)
                .collect();
            d.config_for(&fixed)
        } else if pdos.is_empty() {
            return Err(Failure::Usage(format!(
                "{fname}: --emit-config needs the PDOs to assign (e.g. --emit-config 0x1600 \
                 0x1A00); only a modular device's modules (--slot) and a device without a \
                 mailbox (its SII's) bring their own"
            )));
        } else {
            d.config_for(pdos)
        }
        .map_err(|e| Failure::Usage(format!("{fname}: {e}")))?;
        return Ok(block);
    }
    let mut s = String::new();
    let selector = a.device.is_some() || a.product.is_some() || a.revision.is_some();
    if !selector && file.devices.len() != 1 {
        list(&mut s, &file, &fname);
    } else {
        for (n, d) in selected.iter().enumerate() {
            if n > 0 {
                s.push('\n');
            }
            show(&mut s, &file, d);
        }
    }
    Ok(s)
}

fn ident(d: &Device) -> String {
    match d.revision {
        Some(r) => format!("{} rev 0x{r:08X}", d.name),
        None => d.name.clone(),
    }
}

/// The devices the selector names (all without a selector); none is a usage error.
fn select<'a>(file: &'a EsiFile, a: &EsiArgs, fname: &str) -> Result<Vec<&'a Device>, Failure> {
    let all: Vec<&Device> = file.devices.iter().collect();
    let mut v: Vec<&Device> = all
        .iter()
        .copied()
        .filter(|d| {
            a.device
                .as_ref()
                .is_none_or(|n| d.name.eq_ignore_ascii_case(n))
        })
        .filter(|d| a.product.is_none_or(|p| d.product_code == p))
        .collect();
    let what = match (&a.device, a.product) {
        (Some(n), _) => Some(format!("device {n:?}")),
        (None, Some(p)) => Some(format!("product code 0x{p:08X}")),
        (None, None) => None,
    };
    if let Some(n) = &a.device
        && v.is_empty()
        && let Some(p) = file.passive.iter().find(|p| p.name.eq_ignore_ascii_case(n))
    {
        return Err(Failure::Usage(format!(
            "{fname}: {} ({}, line {}) is a passive device: no EtherCAT slave controller and no \
             product code; it does not appear on the bus and takes no configuration",
            p.name,
            p.display_name(),
            p.line
        )));
    }
    if let Some(w) = &what
        && v.is_empty()
    {
        let known: Vec<String> = all
            .iter()
            .map(|d| format!("{} (0x{:08X})", d.name, d.product_code))
            .collect();
        return Err(Failure::Usage(format!(
            "{fname}: no {w}; it describes {}",
            if known.is_empty() {
                "no device".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    if let Some(r) = a.revision {
        let revs: Vec<String> = v.iter().map(|d| ident(d)).collect();
        v.retain(|d| d.revision == Some(r));
        if v.is_empty() {
            return Err(Failure::Usage(format!(
                "{fname}: no revision 0x{r:08X}{}; it has {}",
                what.map(|w| format!(" of {w}")).unwrap_or_default(),
                if revs.is_empty() {
                    "no device".into()
                } else {
                    revs.join(", ")
                }
            )));
        }
    }
    Ok(v)
}

fn list(s: &mut String, f: &EsiFile, fname: &str) {
    let passive = if f.passive.is_empty() {
        String::new()
    } else {
        format!(", {} passive", f.passive.len())
    };
    let _ = writeln!(
        s,
        "{fname}: vendor 0x{:08X} {:?}, {} devices{passive}, {} modules",
        f.vendor.id,
        f.vendor.name,
        f.devices.len(),
        f.modules.len()
    );
    let w = f
        .devices
        .iter()
        .map(|d| d.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(s, "  {:w$}  PRODUCT     REVISION    NAME", "TYPE");
    for d in &f.devices {
        let rev = d
            .revision
            .map(|r| format!("0x{r:08X}"))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "  {:w$}  0x{:08X}  {rev:10}  {}",
            d.name,
            d.product_code,
            d.display_name()
        );
    }
    for p in &f.passive {
        let _ = writeln!(
            s,
            "  {:w$}  passive (no ESC: not on the bus, not configured)  {}",
            p.name,
            p.display_name()
        );
    }
    for m in &f.modules {
        let id = m
            .ident
            .map(|i| format!("0x{i:08X}"))
            .unwrap_or_else(|| "-".into());
        let src = m
            .source
            .as_ref()
            .map(|f| format!("  [from {f}]"))
            .unwrap_or_default();
        let _ = writeln!(s, "  module {} ({id}): {}{src}", m.name, m.display_name);
    }
    if f.devices.len() > 1 {
        let _ = writeln!(s, "Show one with --device NAME or --product ID.");
    }
    // Revisions of one product: --device and --product cannot separate them. (A map, not a
    // scan per device: a file may hold very many devices.)
    let mut order: Vec<(&str, u32)> = Vec::new();
    let mut revs: std::collections::HashMap<(&str, u32), Vec<String>> = Default::default();
    for d in &f.devices {
        let key = (d.name.as_str(), d.product_code);
        let r = d
            .revision
            .map(|r| format!("0x{r:08X}"))
            .unwrap_or_else(|| "-".into());
        revs.entry(key)
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push(r);
    }
    for key in order {
        if let Some(r) = revs.get(&key).filter(|r| r.len() > 1) {
            let _ = writeln!(
                s,
                "{} comes in {} revisions ({}): choose one with --revision REV.",
                key.0,
                r.len(),
                r.join(", ")
            );
        }
    }
}

fn show(s: &mut String, f: &EsiFile, d: &Device) {
    let rev = d
        .revision
        .map(|r| format!("0x{r:08X}"))
        .unwrap_or_else(|| "-".into());
    let _ = writeln!(
        s,
        "{}  product 0x{:08X}  revision {rev}  vendor 0x{:08X} ({})",
        d.name, d.product_code, d.vendor_id, f.vendor.name
    );
    let _ = writeln!(s, "  name: {}  (line {})", d.display_name(), d.line);
    if let Some(why) = d.unsupported_profile() {
        let _ = writeln!(s, "  profile: {why}");
    }
    if let Some(g) = &d.group {
        let _ = writeln!(s, "  group: {g}");
    }
    match &d.mailbox {
        None => {
            let _ = writeln!(s, "  mailbox: none");
        }
        Some(m) => {
            let mut p = m.protocols.join(", ");
            if let Some(c) = &m.coe {
                let flags: Vec<&str> = [
                    (c.sdo_info, "SDO info"),
                    (c.complete_access, "complete access"),
                    (c.pdo_assign, "PDO assign"),
                    (c.pdo_config, "PDO config"),
                    (c.pdo_upload, "PDO upload"),
                ]
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, n)| *n)
                .collect();
                let _ = write!(
                    p,
                    "  [CoE: {}]",
                    if flags.is_empty() {
                        "no flags".to_string()
                    } else {
                        flags.join(", ")
                    }
                );
            }
            let _ = writeln!(s, "  mailbox: {p}");
        }
    }
    let _ = writeln!(s, "  sync managers:");
    for (i, sm) in d.sync_managers.iter().enumerate() {
        let size = sm
            .default_size
            .map(|z| format!("{z} byte{}", if z == 1 { "" } else { "s" }))
            .unwrap_or_else(|| "size -".into());
        let ctl = sm
            .control_byte
            .map(|c| format!("0x{c:02X}"))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "    SM{i}  0x{:04X}  {size:10}  control {ctl}  {}  {}",
            sm.start,
            if sm.enable { "enabled " } else { "disabled" },
            sm.usage
        );
    }
    if !d.fmmus.is_empty() {
        let _ = writeln!(s, "  FMMUs: {}", d.fmmus.join(", "));
    }
    pdos(s, "RxPDOs (outputs)", &d.rx_pdos);
    pdos(s, "TxPDOs (inputs)", &d.tx_pdos);
    if let Some(sl) = &d.slots {
        let _ = writeln!(
            s,
            "  slots (modular device; per slot number: PDO index +0x{:X}, object index +0x{:X}):",
            sl.pdo_increment, sl.index_increment
        );
        // The first and last position number of each Slot element (one pass).
        let mut span: Vec<(Option<u32>, Option<u32>)> = vec![(None, None); sl.slots.len()];
        for (n, i) in d.slot_positions() {
            let e = &mut span[i];
            e.0 = e.0.or(Some(n));
            e.1 = Some(n);
        }
        for (slot, (first, last)) in sl.slots.iter().zip(&span) {
            let range = match (first, last) {
                (Some(a), Some(b)) if a == b => format!("{a}"),
                (Some(a), Some(b)) => format!("{a}..{b}"),
                _ => "-".into(),
            };
            let inc = match (slot.pdo_increment, slot.index_increment) {
                (None, None) => String::new(),
                (p, i) => format!(
                    "  (PDO +0x{:X}, object +0x{:X})",
                    p.unwrap_or(sl.pdo_increment),
                    i.unwrap_or(sl.index_increment)
                ),
            };
            let _ = writeln!(
                s,
                "    slot {range} {:?}  {}..{} module(s){inc}: accepts {}",
                slot.name,
                slot.min_instances,
                slot.max_instances,
                rtcat_esi::accepts(slot, &f.modules)
            );
        }
        let _ = writeln!(
            s,
            "  choose modules with --emit-config [PDO...] --slot N=MODULE ..."
        );
    }
    match &d.dictionary {
        Some(dict) => {
            let _ = writeln!(
                s,
                "  dictionary: {} objects, {} data types",
                dict.objects.len(),
                dict.data_types.len()
            );
        }
        None => {
            let _ = writeln!(s, "  dictionary: none in this file");
        }
    }
}

fn pdos(s: &mut String, title: &str, list: &[Pdo]) {
    if list.is_empty() {
        let _ = writeln!(s, "  {title}: none");
        return;
    }
    let _ = writeln!(s, "  {title}:");
    for p in list {
        let mut flags = Vec::new();
        if p.fixed {
            flags.push("fixed".to_string());
        }
        if p.mandatory {
            flags.push("mandatory".to_string());
        }
        if !p.excludes.is_empty() {
            let x: Vec<String> = p.excludes.iter().map(|i| format!("0x{i:04X}")).collect();
            flags.push(format!("excludes {}", x.join(" ")));
        }
        let sm =
            p.sm.map(|n| format!("SM{n}"))
                .unwrap_or_else(|| "not assigned".into());
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!("  [{}]", flags.join(", "))
        };
        let _ = writeln!(
            s,
            "    0x{:04X} {:?}  {sm}  {} bits{flags}",
            p.index,
            p.name,
            p.bits()
        );
        for e in &p.entries {
            if e.index == 0 {
                let _ = writeln!(s, "      0x0000:00  {:3}  (padding)", e.bits);
            } else {
                let _ = writeln!(
                    s,
                    "      0x{:04X}:{:02X}  {:3}  {:6}  {}",
                    e.index,
                    e.sub,
                    e.bits,
                    e.data_type.as_deref().unwrap_or("-"),
                    e.name
                );
            }
        }
    }
}
