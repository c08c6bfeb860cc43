//! An ENI as an rtcat configuration: what of the network description rtcat runs becomes
//! `rtcat.toml` keys, the rest is listed ([`EniConfig::notes`]), never dropped in silence.
//!
//! The mapping (the why of each rule is in the crate README, "ENI"):
//! - topology: `[segment] subdevices` and a `[[segment.device]]` (position, vendor, product)
//!   per slave; revision and serial as comments (rtcat checks vendor and product);
//! - per slave a `[[device]]` matched by position, with `input_bytes`/`output_bytes` from the
//!   PDOs the ENI assigns to the process-data sync managers;
//! - `pdo_assign` / `pdo_map` from `ProcessData` where the ENI's CoE init commands write the
//!   assignment (0x1C12/0x1C13) or a mapping object: the commands are replayed and must agree
//!   with `ProcessData`, else the file is refused (which of the two the tool meant is a guess);
//! - every other CoE write at IP, PS or SO as a `[[device.sdo]]` (IP and PS at `PS`: rtcat
//!   writes startup SDOs in PRE-OP);
//! - listed, not run: register init commands (rtcat's bring-up sets up the ESC itself), other
//!   mailbox protocols' init commands, CoE uploads, complete access outside the PDO objects,
//!   other transitions, disabled commands, the cyclic frames (rtcat lays out its image and
//!   frames itself), DC settings.

use crate::eni::{CoeInitCmd, EniFile, EniSlave, RegisterCmd, command_name};
use crate::{Error, Pdo};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The configuration made from an ENI.
#[derive(Debug, Clone, PartialEq)]
pub struct EniConfig {
    /// The `rtcat.toml` text (notes included as comments).
    pub toml: String,
    /// What the ENI holds and rtcat does not run, in file order.
    pub notes: Vec<EniNote>,
}

/// A part of the ENI not taken into the configuration, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniNote {
    /// Line in the ENI.
    pub line: u32,
    /// The subdevice's position, when the part belongs to one.
    pub position: Option<u16>,
    /// What and why.
    pub what: String,
}

impl std::fmt::Display for EniNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.position {
            Some(p) => write!(f, "line {}: position {p}: {}", self.line, self.what),
            None => write!(f, "line {}: {}", self.line, self.what),
        }
    }
}

/// Longest name written (rtcat's `MAX_NAME`).
const MAX_NAME: usize = 128;
/// Longest startup value rtcat writes (rtcat's `MAX_SDO_BYTES`).
const MAX_SDO_BYTES: usize = 1024;
/// Longest a startup SDO's `timeout_ms` may be (rtcat's `MAX_SDO_TIMEOUT_MS`).
const MAX_SDO_TIMEOUT_MS: u32 = 120_000;
/// The mailbox response timeout rtcat waits without `timeout_ms` (rtcat's mailbox default).
const DEFAULT_RESPONSE_MS: u32 = 1000;

/// A name as rtcat.toml accepts it: control characters replaced, at most [`MAX_NAME`] bytes;
/// `None` when nothing is left.
fn clean_name(s: &str) -> Option<String> {
    let mut out = String::new();
    for c in s.trim().chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > MAX_NAME {
            break;
        }
        out.push(c);
    }
    let out = out.trim().to_string();
    (!out.is_empty()).then_some(out)
}

fn toml_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(o, "\\u{:04X}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A comment line's text: one line, bounded.
fn comment(s: &str) -> String {
    let one: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(120)
        .collect();
    one.trim().to_string()
}

fn hex_bytes(d: &[u8]) -> String {
    let shown: Vec<String> = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    let more = if d.len() > 16 {
        format!(" ... ({} bytes)", d.len())
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(""))
}

/// The sync-manager objects rtcat configures: the assignment of SM2/SM3 and the PDO mappings.
fn is_pdo_object(index: u16) -> bool {
    matches!(index, 0x1C12 | 0x1C13 | 0x1600..=0x17FF | 0x1A00..=0x1BFF)
}

/// An object's content after replaying writes: subindex 0 (the count) and the others.
#[derive(Default)]
struct Replayed {
    count: Option<u8>,
    subs: BTreeMap<u8, u32>,
    line: u32,
}

impl Replayed {
    fn list(&self) -> Vec<u32> {
        (1..=self.count.unwrap_or(0))
            .map(|k| self.subs.get(&k).copied().unwrap_or(0))
            .collect()
    }
}

fn le(b: &[u8]) -> u32 {
    b.iter()
        .take(4)
        .enumerate()
        .fold(0u32, |v, (i, x)| v | u32::from(*x) << (8 * i))
}

/// Replay one write to a PDO object; an error text when its data do not fit the object.
fn replay(r: &mut Replayed, c: &CoeInitCmd) -> Result<(), String> {
    // Assignment entries are UNSIGNED16 PDO indices, mapping entries UNSIGNED32 (ETG.1000.6
    // §5.6.7.4.7, §5.6.7.4.8).
    let width = if matches!(c.index, 0x1C12 | 0x1C13) {
        2
    } else {
        4
    };
    r.line = c.line;
    if c.complete_access {
        // Complete access from subindex 0 carries subindex 0 padded to 16 bits, then the
        // entries (ETG.1000.6 §5.6.2: complete access; subindex 0 takes two bytes).
        let entries = match c.sub {
            0 => {
                let n = *c.data.first().ok_or("no data")?;
                r.count = Some(n);
                c.data.get(2..).unwrap_or(&[])
            }
            1 => &c.data[..],
            s => return Err(format!("complete access from subindex {s}")),
        };
        if !entries.len().is_multiple_of(width) {
            return Err(format!(
                "{} bytes of entries are not whole {width}-byte entries",
                entries.len()
            ));
        }
        for (k, e) in entries.chunks(width).enumerate() {
            let sub = u8::try_from(k + 1).map_err(|_| "more than 255 entries".to_string())?;
            r.subs.insert(sub, le(e));
        }
        return Ok(());
    }
    match c.sub {
        0 => r.count = Some(c.data[0]),
        s => {
            if c.data.len() != width {
                return Err(format!(
                    "subindex {s} takes {width} bytes, the command writes {}",
                    c.data.len()
                ));
            }
            r.subs.insert(s, le(&c.data));
        }
    }
    Ok(())
}

/// A startup value of an ESI/ENI data type (IEC 61131 names as ETG.2000 uses them, or the CoE
/// names of ETG.1000.6 Table 64): rtcat's type and the TOML value, when the data has the
/// type's size.
fn typed(data_type: &str, d: &[u8]) -> Option<(&'static str, String)> {
    let mut b = [0u8; 8];
    b.get_mut(..d.len())?.copy_from_slice(d);
    let u = u64::from_le_bytes(b);
    let (ty, size) = match data_type.trim().to_ascii_uppercase().as_str() {
        "BOOL" | "BOOLEAN" => ("bool", 1),
        "SINT" | "INTEGER8" => ("i8", 1),
        "INT" | "INTEGER16" => ("i16", 2),
        "DINT" | "INTEGER32" => ("i32", 4),
        "LINT" | "INTEGER64" => ("i64", 8),
        "USINT" | "BYTE" | "UNSIGNED8" => ("u8", 1),
        "UINT" | "WORD" | "UNSIGNED16" => ("u16", 2),
        "UDINT" | "DWORD" | "UNSIGNED32" => ("u32", 4),
        "ULINT" | "LWORD" | "UNSIGNED64" => ("u64", 8),
        "REAL" | "REAL32" => ("f32", 4),
        "LREAL" | "REAL64" => ("f64", 8),
        _ => return None,
    };
    if d.len() != size {
        return None;
    }
    let value = match ty {
        "bool" if u <= 1 => (u == 1).to_string(),
        "bool" => return None,
        "i8" => (u as u8 as i8).to_string(),
        "i16" => (u as u16 as i16).to_string(),
        "i32" => (u as u32 as i32).to_string(),
        "i64" => (u as i64).to_string(),
        // A float that is not finite is no startup value rtcat writes.
        "f32" => float(f64::from(f32::from_bits(u as u32)))?,
        "f64" => float(f64::from_bits(u))?,
        _ => return Some(untyped(d)).filter(|(t, _)| *t == ty),
    };
    Some((ty, value))
}

fn float(f: f64) -> Option<String> {
    // `{:?}` keeps a decimal point, so TOML reads a float.
    f.is_finite().then(|| format!("{f:?}"))
}

/// A startup value of unknown type: unsigned by width (1, 2, 4, 8 bytes), else bytes.
fn untyped(d: &[u8]) -> (&'static str, String) {
    let ty = match d.len() {
        1 => "u8",
        2 => "u16",
        4 => "u32",
        8 => "u64",
        _ => {
            let hex: Vec<String> = d.iter().map(|b| format!("{b:02x}")).collect();
            return ("bytes", toml_str(&hex.join(" ")));
        }
    };
    let mut b = [0u8; 8];
    b[..d.len()].copy_from_slice(d);
    let v = u64::from_le_bytes(b);
    // A TOML integer is an i64: larger values go as a 0x string, which rtcat reads too.
    let value = if i64::try_from(v).is_ok() {
        format!("0x{v:X}")
    } else {
        toml_str(&format!("0x{v:X}"))
    };
    (ty, value)
}

fn pdo_bits(p: &Pdo) -> u32 {
    p.entries.iter().map(|e| u32::from(e.bits)).sum()
}

fn entry_text(index: u16, sub: u8, bits: u16) -> String {
    format!("0x{index:04X}:{sub:02X}:{bits}")
}

/// The transitions of a command rtcat can run it at: `PS` (for IP and PS) and `SO`.
fn run_at(t: &[String]) -> (Vec<&'static str>, Vec<String>) {
    let mut at = Vec::new();
    let mut not = Vec::new();
    for x in t {
        let r = match x.as_str() {
            "IP" | "PS" => Some("PS"),
            "SO" => Some("SO"),
            _ => None,
        };
        match r {
            Some(r) if !at.contains(&r) => at.push(r),
            Some(_) => {}
            None => not.push(x.clone()),
        }
    }
    (at, not)
}

struct Out<'a> {
    file: &'a str,
    toml: String,
    notes: Vec<EniNote>,
}

impl Out<'_> {
    fn note(&mut self, line: u32, position: Option<u16>, what: String) {
        // Wrapped comment lines: the note whole, one line of the ENI's text each at most.
        let mut cur = format!("# NOT RUN (ENI line {line}):");
        for w in what.split_whitespace() {
            if cur.len() + 1 + w.len() > 96 && cur.len() > 8 {
                let _ = writeln!(self.toml, "{cur}");
                cur = "#  ".to_string();
            }
            cur.push(' ');
            cur.extend(w.chars().map(|c| if c.is_control() { ' ' } else { c }));
        }
        let _ = writeln!(self.toml, "{cur}");
        self.notes.push(EniNote {
            line,
            position,
            what,
        });
    }

    fn refuse(&self, line: u32, path: &str, why: String) -> Error {
        Error::Invalid {
            file: self.file.to_string(),
            line,
            path: path.to_string(),
            why,
        }
    }

    fn register_cmd(&mut self, c: &RegisterCmd, position: Option<u16>) {
        let what = format!(
            "register init command at {}: {} {}{} ({} bytes){}: rtcat's bring-up sets up the \
             ESC itself",
            c.transitions.join("/"),
            command_name(c.cmd),
            c.adp.map(|a| format!("adp 0x{a:04x} ")).unwrap_or_default(),
            c.ado.map(|a| format!("ado 0x{a:04x}")).unwrap_or_default(),
            c.len,
            if c.comment.is_empty() {
                String::new()
            } else {
                format!(" \"{}\"", comment(&c.comment))
            }
        );
        self.note(c.line, position, what);
    }
}

impl EniFile {
    /// The rtcat configuration of this network; `file` names the ENI in the header and in
    /// errors. Refused (an [`Error::Invalid`]): slave positions that are not 0..n-1, init
    /// commands writing a PDO assignment or mapping that disagrees with `ProcessData` or does
    /// not fit its object.
    pub fn to_config(&self, file: &str) -> Result<EniConfig, Error> {
        let mut o = Out {
            file,
            toml: String::new(),
            notes: Vec::new(),
        };
        let n = self.slaves.len();
        if n == 0 {
            return Err(o.refuse(
                1,
                "Config/Slave",
                "none: the network has no subdevice".into(),
            ));
        }
        let mut by_pos: Vec<&EniSlave> = self.slaves.iter().collect();
        by_pos.sort_by_key(|s| s.position);
        for (k, s) in by_pos.iter().enumerate() {
            if usize::from(s.position) != k {
                return Err(o.refuse(
                    s.line,
                    "Slave/Info/AutoIncAddr",
                    format!(
                        "position {} but the network has {n} slaves and no slave at position \
                         {k}: positions must be 0..{n} without a gap",
                        s.position
                    ),
                ));
            }
        }
        let _ = writeln!(
            o.toml,
            "# rtcat configuration made by `rtcat config from-eni` from {} (an ENI,\n\
             # ETG.2100){}: {n} subdevice{}.\n\
             # Identity and order are checked at every bring-up; PDO assignment, mapping and\n\
             # startup SDOs are written over CoE in PRE-OP. Lines \"NOT RUN\" list what the ENI\n\
             # holds and rtcat does not do.",
            comment(file),
            self.master
                .as_deref()
                .map(|m| format!(" of master \"{}\"", comment(m)))
                .unwrap_or_default(),
            if n == 1 { "" } else { "s" }
        );
        if let Some(us) = self.cycle_time_us
            && us > 0
        {
            let _ = writeln!(o.toml, "\n[cycle]\nperiod_us = {us}   # Cyclic/CycleTime");
        }
        let _ = writeln!(o.toml, "\n[segment]\nsubdevices = {n}");
        // The tool's expected working counter is comparable with rtcat's only when its cyclic
        // data is one LRW over the whole image, as ethercrab sends it.
        let logical: Vec<_> = self
            .cyclic
            .iter()
            .filter(|c| matches!(c.cmd, 10..=12))
            .collect();
        if let [one] = logical[..]
            && one.cmd == 12
            && let Some(cnt) = one.cnt.filter(|c| (1..=65535).contains(c))
        {
            let _ = writeln!(
                o.toml,
                "expected_wkc = {cnt}   # Cnt of the ENI's one LRW (line {})",
                one.line
            );
        }
        for s in &by_pos {
            let _ = writeln!(
                o.toml,
                "\n[[segment.device]]\nposition = {}\nvendor_id = {:#010x}\nproduct_id = \
                 {:#010x}{}",
                s.position,
                s.vendor_id,
                s.product_code,
                match (s.revision, s.serial) {
                    (None, None) => String::new(),
                    (r, sn) => format!(
                        "\n# not checked by rtcat:{}{}",
                        r.map(|r| format!(" revision {r:#010x}"))
                            .unwrap_or_default(),
                        sn.map(|s| format!(" serial {s}")).unwrap_or_default()
                    ),
                }
            );
        }
        for c in &self.master_init_cmds {
            o.toml.push('\n');
            o.register_cmd(c, None);
        }
        if !self.cyclic.is_empty() {
            let frames = self.cyclic.iter().map(|c| c.frame).max().unwrap_or(0) + 1;
            let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
            for c in &self.cyclic {
                *kinds.entry(command_name(c.cmd)).or_default() += 1;
            }
            let kinds: Vec<String> = kinds.iter().map(|(k, v)| format!("{v} {k}")).collect();
            o.toml.push('\n');
            o.note(
                self.cyclic[0].line,
                None,
                format!(
                    "the cyclic frames ({frames} frame{}, datagrams: {}): rtcat lays out the \
                     process image and its frames itself (one LRW for the segment), so the \
                     tool's logical addresses and frame split are not used",
                    if frames == 1 { "" } else { "s" },
                    kinds.join(", ")
                ),
            );
        }
        for s in &by_pos {
            slave(&mut o, s)?;
        }
        Ok(EniConfig {
            toml: o.toml,
            notes: o.notes,
        })
    }
}

fn slave(o: &mut Out<'_>, s: &EniSlave) -> Result<(), Error> {
    let pos = Some(s.position);
    let pd = &s.process_data;
    let _ = writeln!(
        o.toml,
        "\n# Position {}: {} (vendor {:#010x}, product {:#010x}{}{})",
        s.position,
        comment(&s.name),
        s.vendor_id,
        s.product_code,
        s.revision
            .map(|r| format!(", revision {r:#010x}"))
            .unwrap_or_default(),
        s.phys_addr
            .map(|a| format!(", station address {a}"))
            .unwrap_or_default()
    );
    // The assignment per SM as ProcessData gives it: SmN/Pdo, else the PDOs' Sm attribute.
    let assigned = |sm: u8, pdos: &[Pdo]| -> Vec<u16> {
        match pd.sms.iter().find(|x| x.number == sm) {
            Some(x) => x.pdos.clone(),
            None => pdos
                .iter()
                .filter(|p| p.sm == Some(sm))
                .map(|p| p.index)
                .collect(),
        }
    };
    let sm2 = assigned(2, &pd.rx_pdos);
    let sm3 = assigned(3, &pd.tx_pdos);
    let find = |i: u16| pd.rx_pdos.iter().chain(&pd.tx_pdos).find(|p| p.index == i);
    let mut out_bits = 0u32;
    let mut in_bits = 0u32;
    for (list, bits, sm) in [(&sm2, &mut out_bits, 2), (&sm3, &mut in_bits, 3)] {
        for &i in list {
            let Some(p) = find(i) else {
                let line = pd
                    .sms
                    .iter()
                    .find(|x| x.number == sm)
                    .map_or(s.line, |x| x.line);
                return Err(o.refuse(
                    line,
                    &format!("Slave/ProcessData/Sm{sm}/Pdo"),
                    format!("0x{i:04X} is assigned but not described by an RxPdo/TxPdo"),
                ));
            };
            *bits += pdo_bits(p);
        }
    }
    for x in pd
        .sms
        .iter()
        .filter(|x| !matches!(x.number, 2 | 3) && !x.pdos.is_empty())
    {
        o.note(
            x.line,
            pos,
            format!(
                "process data on SM{} ({}): rtcat configures the process data of SM2/SM3; \
                 the device keeps its own there (its size is not checked here)",
                x.number,
                x.pdos
                    .iter()
                    .map(|p| format!("0x{p:04X}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    for (what, r, bits) in [("Send", pd.send, out_bits), ("Recv", pd.recv, in_bits)] {
        if let Some(r) = r
            && r.length.div_ceil(8) != bits.div_ceil(8)
            && pd
                .sms
                .iter()
                .all(|x| matches!(x.number, 2 | 3) || x.pdos.is_empty())
        {
            return Err(o.refuse(
                s.line,
                &format!("Slave/ProcessData/{what}/BitLength"),
                format!(
                    "{} bits, but the PDOs assigned to SM{} map {bits} bits",
                    r.length,
                    if what == "Send" { 2 } else { 3 }
                ),
            ));
        }
    }

    // The CoE init commands: PDO objects replayed, the rest sorted into SDOs and notes.
    let mut objects: BTreeMap<u16, Replayed> = BTreeMap::new();
    let mut sdos: Vec<(&CoeInitCmd, &'static str)> = Vec::new();
    let mut later: Vec<(u32, String)> = Vec::new();
    let empty = Vec::new();
    let cmds = s.mailbox.as_ref().map_or(&empty, |m| &m.coe_init_cmds);
    for c in cmds {
        let obj = format!("0x{:04X}:{:02X}", c.index, c.sub);
        let text = if c.comment.is_empty() {
            String::new()
        } else {
            format!(" \"{}\"", comment(&c.comment))
        };
        if c.disabled {
            later.push((
                c.line,
                format!("CoE {obj}{text}: disabled in the ENI, not written"),
            ));
            continue;
        }
        if !c.is_write() {
            later.push((
                c.line,
                format!(
                    "CoE {obj}{text}: an upload (Ccs {}, no data): rtcat reads nothing at \
                     startup",
                    c.ccs
                ),
            ));
            continue;
        }
        let (at, not) = run_at(&c.transitions);
        if !not.is_empty() {
            later.push((
                c.line,
                format!(
                    "CoE {obj}{text} at {}: rtcat writes startup SDOs at PS and SO only",
                    not.join("/")
                ),
            ));
        }
        if at.is_empty() {
            continue;
        }
        if is_pdo_object(c.index) {
            if at != ["PS"] {
                later.push((
                    c.line,
                    format!(
                        "CoE {obj}{text}: a PDO assignment or mapping written in SAFE-OP: rtcat \
                         configures them in PRE-OP only"
                    ),
                ));
                continue;
            }
            let r = objects.entry(c.index).or_default();
            replay(r, c).map_err(|why| {
                o.refuse(
                    c.line,
                    "Slave/Mailbox/CoE/InitCmds/InitCmd/Data",
                    format!("{obj}: {why}"),
                )
            })?;
            continue;
        }
        if c.complete_access {
            later.push((
                c.line,
                format!(
                    "CoE {obj}{text}: complete access ({} bytes): rtcat's startup SDOs write one \
                     subindex",
                    c.data.len()
                ),
            ));
            continue;
        }
        if c.data.len() > MAX_SDO_BYTES {
            later.push((
                c.line,
                format!(
                    "CoE {obj}{text}: {} bytes, more than rtcat writes as a startup value \
                     ({MAX_SDO_BYTES})",
                    c.data.len()
                ),
            ));
            continue;
        }
        for t in at {
            sdos.push((c, t));
        }
    }

    // What the replayed commands configure must be what ProcessData describes.
    let mut assign = Vec::new();
    for (obj, sm, list) in [(0x1C12u16, 2u8, &sm2), (0x1C13, 3, &sm3)] {
        let Some(r) = objects.get(&obj) else { continue };
        let written: Vec<u32> = r.list();
        let want: Vec<u32> = list.iter().map(|&i| u32::from(i)).collect();
        if written != want {
            return Err(o.refuse(
                r.line,
                "Slave/Mailbox/CoE/InitCmds",
                format!(
                    "the init commands assign 0x{obj:04X} = [{}], ProcessData/Sm{sm} lists [{}]",
                    written
                        .iter()
                        .map(|v| format!("0x{v:04X}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    want.iter()
                        .map(|v| format!("0x{v:04X}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        assign.push(format!(
            "sm{sm} = [{}]",
            list.iter()
                .map(|i| format!("0x{i:04X}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut maps: Vec<&Pdo> = Vec::new();
    for (&index, r) in objects
        .iter()
        .filter(|(i, _)| !matches!(**i, 0x1C12 | 0x1C13))
    {
        let Some(p) = find(index) else {
            return Err(o.refuse(
                r.line,
                "Slave/Mailbox/CoE/InitCmds",
                format!("the init commands map 0x{index:04X}, which ProcessData does not describe"),
            ));
        };
        let written = r.list();
        let want: Vec<u32> = p
            .entries
            .iter()
            .map(|e| u32::from(e.index) << 16 | u32::from(e.sub) << 8 | u32::from(e.bits))
            .collect();
        if written != want {
            return Err(o.refuse(
                r.line,
                "Slave/Mailbox/CoE/InitCmds",
                format!(
                    "the init commands map 0x{index:04X} = [{}], ProcessData's PDO lists [{}]",
                    written
                        .iter()
                        .map(|v| format!("0x{v:08X}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    want.iter()
                        .map(|v| format!("0x{v:08X}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if p.entries.iter().any(|e| e.bits == 0 || e.bits > 64) {
            return Err(o.refuse(
                r.line,
                "Slave/ProcessData/RxPdo/Entry/BitLen",
                format!("0x{index:04X} maps an entry of 0 or more than 64 bits"),
            ));
        }
        let on_sm = if (0x1600..=0x17FF).contains(&index) {
            &sm2
        } else {
            &sm3
        };
        let sm_written = objects.contains_key(&if on_sm == &sm2 { 0x1C12 } else { 0x1C13 });
        if sm_written && !on_sm.contains(&index) {
            later.push((
                r.line,
                format!(
                    "CoE mapping of 0x{index:04X}: the PDO is mapped but not assigned; rtcat \
                     writes the mappings of assigned PDOs only"
                ),
            ));
            continue;
        }
        maps.push(p);
    }

    let _ = writeln!(o.toml, "[[device]]\nposition = {}", s.position);
    if let Some(name) = clean_name(&s.name) {
        let _ = writeln!(o.toml, "name = {}", toml_str(&name));
    }
    // Sizes are what rtcat's SM2/SM3 configuration gives; a device with process data on other
    // sync managers keeps its own there, so its sizes are not stated (noted above).
    let other_sm = pd
        .sms
        .iter()
        .any(|x| !matches!(x.number, 2 | 3) && !x.pdos.is_empty());
    if !other_sm {
        let _ = writeln!(
            o.toml,
            "input_bytes = {}\noutput_bytes = {}",
            in_bits.div_ceil(8),
            out_bits.div_ceil(8)
        );
    }
    if !assign.is_empty() {
        let _ = writeln!(o.toml, "pdo_assign = {{ {} }}", assign.join(", "));
    }
    for p in maps {
        let _ = writeln!(
            o.toml,
            "\n[[device.pdo_map]]\nindex = 0x{:04X}{}\nentries = [",
            p.index,
            clean_name(&p.name)
                .map(|n| format!("   # {}", comment(&n)))
                .unwrap_or_default()
        );
        for e in &p.entries {
            let t = entry_text(e.index, e.sub, e.bits);
            match clean_name(&e.name) {
                Some(n) if e.index != 0 => {
                    let _ = writeln!(
                        o.toml,
                        "  {{ entry = {}, name = {} }},",
                        toml_str(&t),
                        toml_str(&n)
                    );
                }
                _ => {
                    let _ = writeln!(o.toml, "  {},", toml_str(&t));
                }
            }
        }
        let _ = writeln!(o.toml, "]");
    }
    for (c, t) in sdos {
        // The type: the one ProcessData gives the entry when the object is mapped (the master
        // takes a mapped entry's type from a startup write to it), else unsigned by width.
        let mapped = pd
            .rx_pdos
            .iter()
            .chain(&pd.tx_pdos)
            .flat_map(|p| &p.entries)
            .find(|e| e.index == c.index && e.sub == c.sub)
            .and_then(|e| e.data_type.as_deref())
            .and_then(|t| typed(t, &c.data));
        let (ty, value) = mapped.unwrap_or_else(|| untyped(&c.data));
        let _ = writeln!(
            o.toml,
            "\n[[device.sdo]]{}\nindex = 0x{:04X}\nsub = 0x{:02X}\ntype = \"{ty}\"   # ENI data \
             {}\nvalue = {value}\ntransition = \"{t}\"{}",
            if c.comment.is_empty() {
                String::new()
            } else {
                format!("   # {}", comment(&c.comment))
            },
            c.index,
            c.sub,
            hex_bytes(&c.data),
            timeout_key(c.timeout_ms)
        );
    }
    if !later.is_empty() || s.has_dc || !s.init_cmds.is_empty() {
        o.toml.push('\n');
    }
    for (line, what) in later {
        o.note(line, pos, what);
    }
    if let Some(m) = &s.mailbox {
        for c in &m.other_init_cmds {
            o.note(
                c.line,
                pos,
                format!(
                    "{} init command at {}{}: rtcat speaks CoE only",
                    c.protocol,
                    c.transitions.join("/"),
                    if c.comment.is_empty() {
                        String::new()
                    } else {
                        format!(" \"{}\"", comment(&c.comment))
                    }
                ),
            );
        }
    }
    if s.has_dc {
        o.note(
            s.line,
            pos,
            "DC settings of the ENI are not imported: configure [dc] (rtcat's keys, see \
             examples/cia402/rtcat.toml)"
                .into(),
        );
    }
    for c in &s.init_cmds {
        o.register_cmd(c, pos);
    }
    Ok(())
}

/// The `timeout_ms` line of a startup SDO whose `InitCmd/Timeout` is `ms`: none for 0 (the
/// master's default) or the default itself; longer than rtcat waits, the longest it waits,
/// said so.
fn timeout_key(ms: u32) -> String {
    match ms {
        0 | DEFAULT_RESPONSE_MS => String::new(),
        m if m > MAX_SDO_TIMEOUT_MS => format!(
            "\ntimeout_ms = {MAX_SDO_TIMEOUT_MS}   # ENI Timeout {m} ms: rtcat waits at most \
             {MAX_SDO_TIMEOUT_MS}"
        ),
        m => format!("\ntimeout_ms = {m}   # ENI Timeout"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_values_take_the_entry_type() {
        assert_eq!(typed("SINT", &[0xF8]), Some(("i8", "-8".into())));
        assert_eq!(
            typed("INTEGER16", &[0xFE, 0xFF]),
            Some(("i16", "-2".into()))
        );
        assert_eq!(typed("BOOL", &[1]), Some(("bool", "true".into())));
        assert_eq!(typed("BOOL", &[2]), None);
        assert_eq!(
            typed("REAL", &1.5f32.to_le_bytes()),
            Some(("f32", "1.5".into()))
        );
        assert_eq!(typed("REAL", &f32::NAN.to_le_bytes()), None);
        assert_eq!(
            typed("UDINT", &[0x50, 0xC3, 0, 0]),
            Some(("u32", "0xC350".into()))
        );
        // The size must be the type's; an unknown type is not guessed.
        assert_eq!(typed("DINT", &[1, 0]), None);
        assert_eq!(typed("STRING(8)", b"abcdefgh"), None);
        assert_eq!(untyped(&[0xFF; 8]).1, "\"0xFFFFFFFFFFFFFFFF\"");
        assert_eq!(untyped(&[1, 2, 3]), ("bytes", "\"01 02 03\"".into()));
    }
}
