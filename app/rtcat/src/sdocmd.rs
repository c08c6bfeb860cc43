//! `rtcat sdo read|write|list` and `rtcat config from-bus`: CoE on a segment brought to PRE-OP
//! ([`rtcat_master::coe::segment`]), printed as text or JSON. Exit 2 for the user's input (a
//! position beyond the segment, an `INDEX:SUB` or value that does not parse or fit its type,
//! an unknown type), 1 for the bus and for aborts (the code and its ETG.1000.6 text).
//!
//! With `--sim` the segment lives in this process: a write changes the simulated device until
//! the command ends, so a write is seen by a read only within one process (the library API:
//! [`rtcat_master::coe::segment::with_pre_op`] and a client's `download` then `upload`).

use crate::buscmd::{Fail, emit, finish, json, open, remote, table};
use crate::cli::{BusArgs, SdoCmd, SdoListArgs, SdoReadArgs, SdoWriteArgs};
use rtcat_control::Request;
use rtcat_master::coe::segment::{self, DeviceMapping, ObjectInfo, PreOp};
use rtcat_master::coe::{self, SdoType, Timeouts, value::hex_bytes};
use rtcat_master::diag;
use rtcat_master::sii::Direction;
use std::fmt::Write as _;
use std::process::ExitCode;

/// `INDEX:SUB` in hex, the 0x optional on both (`0x1018:02`, `1018:2`).
pub fn parse_entry(s: &str) -> Result<(u16, u8), String> {
    let bad = |why: &str| format!("INDEX:SUB {s:?}: {why} (hex, such as 0x1018:02)");
    let (i, sub) = s.split_once(':').ok_or_else(|| bad("no ':'"))?;
    let hex = |t: &str| {
        let t = t.trim();
        let t = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        if t.is_empty() || !t.chars().all(|c| c.is_ascii_hexdigit()) {
            None
        } else {
            u32::from_str_radix(t, 16).ok()
        }
    };
    let index = hex(i)
        .and_then(|v| u16::try_from(v).ok())
        .ok_or_else(|| bad("the index is not a hex number 0..=0xffff"))?;
    let sub = hex(sub)
        .and_then(|v| u8::try_from(v).ok())
        .ok_or_else(|| bad("the subindex is not a hex number 0..=0xff"))?;
    Ok((index, sub))
}

fn parse_type(s: &str) -> Result<SdoType, Fail> {
    s.parse()
        .map_err(|e: coe::ValueError| Fail::Usage(e.to_string()))
}

impl From<coe::Error> for Fail {
    fn from(e: coe::Error) -> Self {
        Fail::Runtime(e.to_string())
    }
}

/// Run `f` on the segment the arguments name, in PRE-OP; emergencies go to stderr.
fn on_segment<R: Send>(
    bus: &BusArgs,
    f: impl FnOnce(&PreOp<'_>) -> diag::Result<R> + Send,
) -> Result<R, Fail> {
    let (s, _cfg) = open(bus)?;
    Ok(segment::with_pre_op(
        s.maindevice(),
        Timeouts::default(),
        f,
    )?)
}

/// The request of `sdo read|write --control` (what the master's queue can do: no complete
/// access, at most [`rtcat_control::protocol::MAX_SDO_DATA`] bytes).
fn remote_request(
    position: u32,
    index: u16,
    sub: u8,
    complete: bool,
    data: Option<Vec<u8>>,
) -> Result<Request, Fail> {
    if complete {
        return Err(Fail::Usage(
            "--complete: not over --control (the master's queue transfers one subindex)".into(),
        ));
    }
    let position = u16::try_from(position)
        .map_err(|_| Fail::Usage(format!("POS {position}: positions are 0..=65535")))?;
    Ok(match data {
        None => Request::SdoRead {
            position,
            index,
            sub,
        },
        Some(d) => {
            let max = rtcat_control::protocol::MAX_SDO_DATA;
            if d.len() > max {
                return Err(Fail::Usage(format!(
                    "VALUE: {} bytes; over --control at most {max}",
                    d.len()
                )));
            }
            Request::SdoWrite {
                position,
                index,
                sub,
                data: d,
            }
        }
    })
}

fn say_emergencies(e: &[coe::Emergency]) {
    for e in e {
        crate::say!("rtcat: {e}");
    }
}

/// `rtcat sdo`.
pub fn sdo(c: SdoCmd) -> ExitCode {
    finish(match c {
        SdoCmd::Read(a) => read(a),
        SdoCmd::Write(a) => write(a),
        SdoCmd::List(a) => list(a),
    })
}

#[derive(serde::Serialize)]
struct ReadJson {
    position: u32,
    index: u16,
    sub: u8,
    complete_access: bool,
    /// The bytes as hex pairs (`03 00 03 00`).
    hex: String,
    /// The type the value is printed as (`--type`, or SDO information's).
    #[serde(skip_serializing_if = "Option::is_none")]
    r#type: Option<SdoType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

fn check_complete(complete: bool, sub: u8) -> Result<(), Fail> {
    if complete && sub > 1 {
        return Err(Fail::Usage(format!(
            "--complete: subindex {sub:#04x}: complete access starts at subindex 0 or 1"
        )));
    }
    Ok(())
}

fn read(a: SdoReadArgs) -> Result<(), Fail> {
    let (index, sub) = parse_entry(&a.entry).map_err(Fail::Usage)?;
    check_complete(a.complete, sub)?;
    let ty = a.ty.as_deref().map(parse_type).transpose()?;
    let position = a.position;
    let complete = a.complete;
    let (bytes, described, emergencies) = if a.bus.control.is_some() {
        // Through the running master's acyclic queue: an upload, no SDO information (the
        // type comes from --type, the value is shown as hex without it).
        let v = remote(
            &a.bus,
            &remote_request(position, index, sub, complete, None)?,
        )?;
        let hex = v.get("data").and_then(|d| d.as_str()).unwrap_or_default();
        let bytes = rtcat_control::protocol::from_hex(hex)
            .map_err(|e| Fail::Runtime(format!("control socket: data {e}")))?;
        (bytes, None, Vec::new())
    } else {
        on_segment(&a.bus, move |seg| {
            let d = seg.device(position)?;
            let info = d.sdo_info();
            let mut c = seg.client(position)?;
            let bytes = if complete {
                c.upload_complete(index, sub == 0)?
            } else {
                c.upload(index, sub)?
            };
            // Without --type, SDO information says what the bytes are, when the device has it.
            let described = if ty.is_none() && info && !complete {
                c.entry_description(index, sub)
                    .ok()
                    .map(|e| (e.data_type, segment::entry_name(&mut c, index, sub)))
            } else {
                None
            };
            Ok((bytes, described, c.take_emergencies()))
        })?
    };
    say_emergencies(&emergencies);
    let (ty, name) = match (ty, &described) {
        (Some(t), _) => (Some(t), None),
        (None, Some((dt, name))) => (SdoType::from_coe(*dt), name.clone()),
        (None, None) => (None, None),
    };
    let value = match ty {
        Some(t) => match t.format(&bytes) {
            Ok(v) => Some(v),
            // The user's --type does not fit what the device sent: their input.
            Err(e) if a.ty.is_some() => {
                return Err(Fail::Usage(format!(
                    "{:#06x}:{sub:02x} --type {t}: {e} ({})",
                    index,
                    hex_bytes(&bytes)
                )));
            }
            Err(_) => None,
        },
        None => None,
    };
    if a.bus.json {
        emit(&json(&ReadJson {
            position,
            index,
            sub,
            complete_access: complete,
            hex: hex_bytes(&bytes),
            r#type: ty,
            value,
            name,
        }));
        return Ok(());
    }
    emit(&match (a.ty.is_some(), value) {
        // With --type: the value alone, for scripts.
        (true, Some(v)) => format!("{v}\n"),
        (_, Some(v)) => format!(
            "{}  = {v} ({}{})\n",
            hex_bytes(&bytes),
            ty.map_or("", |t| t.name()),
            name.map(|n| format!(", {n:?}")).unwrap_or_default()
        ),
        (_, None) => format!("{}\n", hex_bytes(&bytes)),
    });
    Ok(())
}

#[derive(serde::Serialize)]
struct WriteJson<'a> {
    position: u32,
    index: u16,
    sub: u8,
    complete_access: bool,
    r#type: SdoType,
    value: &'a str,
    hex: String,
}

fn write(a: SdoWriteArgs) -> Result<(), Fail> {
    // Everything the user typed is checked before the bus is opened.
    let (index, sub) = parse_entry(&a.entry).map_err(Fail::Usage)?;
    check_complete(a.complete, sub)?;
    let ty = parse_type(&a.ty)?;
    let data = ty
        .encode(&a.value)
        .map_err(|e| Fail::Usage(format!("{:#06x}:{sub:02x}: {e}", index)))?;
    if data.is_empty() {
        return Err(Fail::Usage(format!(
            "{index:#06x}:{sub:02x}: VALUE is empty: an SDO download carries at least one byte"
        )));
    }
    let (position, complete) = (a.position, a.complete);
    let d2 = data.clone();
    let emergencies = if a.bus.control.is_some() {
        remote(
            &a.bus,
            &remote_request(position, index, sub, complete, Some(data.clone()))?,
        )?;
        Vec::new()
    } else {
        on_segment(&a.bus, move |seg| {
            let mut c = seg.client(position)?;
            if complete {
                c.download_complete(index, sub == 0, &d2)?;
            } else {
                c.download(index, sub, &d2)?;
            }
            Ok(c.take_emergencies())
        })?
    };
    say_emergencies(&emergencies);
    if a.bus.sim {
        crate::say!(
            "rtcat: note: --sim: written to this process's simulated segment, which ends with \
             the command"
        );
    }
    emit(&if a.bus.json {
        json(&WriteJson {
            position,
            index,
            sub,
            complete_access: complete,
            r#type: ty,
            value: &a.value,
            hex: hex_bytes(&data),
        })
    } else {
        format!(
            "position {position}: {index:#06x}:{sub:02x} <- {} ({ty})\n",
            ty.format(&data).unwrap_or_else(|_| hex_bytes(&data))
        )
    });
    Ok(())
}

fn object_code(c: u8) -> String {
    match c {
        7 => "VAR".into(),
        8 => "ARRAY".into(),
        9 => "RECORD".into(),
        c => format!("{c:#04x}"),
    }
}

fn type_name(code: u16) -> String {
    SdoType::from_coe(code).map_or_else(|| format!("{code:#06x}"), |t| t.name().to_string())
}

/// `rtcat sdo list` as a table.
pub fn list_text(objects: &[ObjectInfo], entries: bool) -> String {
    let mut rows = vec![
        ["INDEX", "OBJECT", "TYPE", "MAXSUB", "NAME"]
            .map(String::from)
            .to_vec(),
    ];
    for o in objects {
        rows.push(vec![
            format!("{:#06x}", o.object.index),
            object_code(o.object.object_code),
            type_name(o.object.data_type),
            o.object.max_sub.to_string(),
            o.object.name.clone(),
        ]);
    }
    if !entries {
        return table(&rows);
    }
    // Each object, then its entries indented below it.
    let mut out = String::new();
    let t = table(&rows);
    let mut lines = t.lines();
    if let Some(h) = lines.next() {
        let _ = writeln!(out, "{h}");
    }
    for (o, line) in objects.iter().zip(lines) {
        let _ = writeln!(out, "{line}");
        let rows: Vec<Vec<String>> = o
            .entries
            .iter()
            .map(|e| {
                vec![
                    format!("    :{:02x}", e.sub),
                    e.access_text(),
                    format!("{} bit{}", e.bits, if e.bits == 1 { "" } else { "s" }),
                    type_name(e.data_type),
                    match (e.rx_mappable(), e.tx_mappable()) {
                        (true, true) => "rx/tx".into(),
                        (true, false) => "rx".into(),
                        (false, true) => "tx".into(),
                        (false, false) => "-".into(),
                    },
                    e.name.clone(),
                ]
            })
            .collect();
        out.push_str(&table(&rows));
    }
    out
}

fn list(a: SdoListArgs) -> Result<(), Fail> {
    let (position, entries) = (a.position, a.entries);
    let objects = on_segment(&a.bus, move |seg| {
        if !seg.device(position)?.sdo_info() {
            log::info!(
                "position {position}: the SII does not announce SDO information; asking anyway"
            );
        }
        segment::list_objects(seg, position, entries)
    })?;
    emit(&if a.bus.json {
        json(&objects)
    } else {
        list_text(&objects, entries)
    });
    Ok(())
}

fn entry_text(index: u16, sub: u8, bits: u8) -> String {
    format!("0x{index:04X}:{sub:02X}:{bits}")
}

fn toml_str(s: &str) -> String {
    // A TOML basic string: JSON's escaping is a subset of TOML's.
    serde_json::to_string(s).expect("a string serializes")
}

fn hex_list(v: &[u16]) -> String {
    v.iter()
        .map(|i| format!("0x{i:04X}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn writable_note(w: Option<bool>) -> &'static str {
    match w {
        Some(true) => "",
        Some(false) => "read-only in PRE-OP (fixed by the device)",
        None => "writability not known (no SDO information)",
    }
}

/// The `[[device]]` configuration that reproduces `devices`' current mapping, commented, in
/// the format of rtcat.toml. Fixed parts (read-only assignment or mapping objects, devices
/// without CoE) are written as comments: applying them at a bring-up would be refused.
pub fn from_bus_toml(devices: &[DeviceMapping], source: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# rtcat config from-bus: the PDO assignment and mapping read in PRE-OP\n\
         # from {source}.\n\
         # Each [[device]] reproduces what the subdevice holds now; edit it and add it to\n\
         # rtcat.toml (matched by position: add the identity to match the device wherever it\n\
         # sits). Parts the device fixes are comments: writing them would be refused."
    );
    for d in devices {
        let id = &d.identity;
        o.push('\n');
        let label = if d.name.is_empty() { "?" } else { &d.name };
        let _ = writeln!(
            o,
            "# Position {}: {label}: vendor_id = {:#010x}, product_id = {:#010x}, revision = \
             {:#010x}, serial {}{}",
            d.position,
            id.vendor_id,
            id.product_code,
            id.revision,
            id.serial,
            if d.alias != 0 {
                format!(", alias {:#06x}", d.alias)
            } else {
                String::new()
            }
        );
        if !d.coe {
            // The SII's assignment per SM: a [[device]] may state it, the master compares it.
            let assign: Vec<String> = d
                .assignments
                .iter()
                .map(|a| format!("sm{} = [{}]", a.sm, hex_list(&a.pdos)))
                .collect();
            let _ = writeln!(
                o,
                "# No CoE: its process data is fixed by its SII ({} in, {} out); nothing to \
                 configure (uncommented, the master compares this with the SII).\n\
                 # [[device]]\n# position = {}\n# name = {}\n# input_bytes = {}\n\
                 # output_bytes = {}",
                bytes(d.input_bytes),
                bytes(d.output_bytes),
                d.position,
                toml_str(&d.name),
                d.input_bytes,
                d.output_bytes
            );
            if !assign.is_empty() {
                let _ = writeln!(o, "# pdo_assign = {{ {} }}", assign.join(", "));
            }
            continue;
        }
        if !d.sdo_info {
            let _ = writeln!(
                o,
                "# No SDO information: names from the SII, writability not known."
            );
        }
        let _ = writeln!(o, "[[device]]");
        let _ = writeln!(o, "position = {}", d.position);
        let _ = writeln!(o, "name = {}", toml_str(&d.name));
        let _ = writeln!(o, "input_bytes = {}", d.input_bytes);
        let _ = writeln!(o, "output_bytes = {}", d.output_bytes);
        let mut active = Vec::new();
        let mut fixed = Vec::new();
        let mut other_sm = Vec::new();
        for a in &d.assignments {
            let item = format!("sm{} = [{}]", a.sm, hex_list(&a.pdos));
            if !matches!(a.sm, 2 | 3) {
                other_sm.push(item);
            } else if a.writable == Some(false) {
                fixed.push(item);
            } else {
                active.push(item);
            }
        }
        if !other_sm.is_empty() {
            let _ = writeln!(
                o,
                "# Process data on other sync managers than SM2/SM3, which rtcat.toml does not assign: {{ {} }}",
                other_sm.join(", ")
            );
        }
        let unknown = d.assignments.iter().any(|a| a.writable.is_none());
        if !active.is_empty() {
            let _ = writeln!(
                o,
                "# PDO assignment: sm2 = outputs (0x1C12), sm3 = inputs (0x1C13){}",
                if unknown {
                    format!("; {}", writable_note(None))
                } else {
                    String::new()
                }
            );
            let _ = writeln!(o, "pdo_assign = {{ {} }}", active.join(", "));
        }
        if !fixed.is_empty() {
            let _ = writeln!(
                o,
                "# pdo_assign, {}: {{ {} }}",
                writable_note(Some(false)),
                fixed.join(", ")
            );
        }
        for p in &d.pdos {
            let lead = if p.writable == Some(false) { "# " } else { "" };
            o.push('\n');
            let dir = match p.direction {
                Direction::Outputs => "RxPDO (outputs)",
                Direction::Inputs => "TxPDO (inputs)",
            };
            let name = p
                .name
                .as_deref()
                .map(|n| format!(" {n:?}"))
                .unwrap_or_default();
            let note = writable_note(p.writable);
            let _ = writeln!(
                o,
                "# {dir} 0x{:04X}{name}{}",
                p.index,
                if note.is_empty() {
                    String::new()
                } else {
                    format!(": {note}")
                }
            );
            let _ = writeln!(o, "{lead}[[device.pdo_map]]");
            let _ = writeln!(o, "{lead}index = 0x{:04X}", p.index);
            let _ = writeln!(o, "{lead}entries = [");
            for e in &p.entries {
                let t = entry_text(e.index, e.sub, e.bits);
                match (&e.name, e.index) {
                    (_, 0) => {
                        let _ = writeln!(o, "{lead}  {},  # padding", toml_str(&t));
                    }
                    (Some(n), _) => {
                        let _ = writeln!(
                            o,
                            "{lead}  {{ entry = {}, name = {} }},",
                            toml_str(&t),
                            toml_str(n)
                        );
                    }
                    (None, _) => {
                        let _ = writeln!(o, "{lead}  {},", toml_str(&t));
                    }
                }
            }
            let _ = writeln!(o, "{lead}]");
        }
    }
    o
}

fn bytes(n: u32) -> String {
    format!("{n} byte{}", if n == 1 { "" } else { "s" })
}

/// `rtcat config from-bus`.
pub fn from_bus(bus: BusArgs) -> ExitCode {
    finish((|| {
        let source = if bus.sim {
            match &bus.segment {
                Some(p) => format!("the simulated segment {}", p.display()),
                None => "the simulated reference segment".into(),
            }
        } else {
            match &bus.iface {
                Some(i) => format!("interface {i}"),
                None => "[bus] interface".into(),
            }
        };
        let devices = on_segment(&bus, segment::read_mappings)?;
        for d in &devices {
            say_emergencies(&d.emergencies);
        }
        emit(&if bus.json {
            json(&devices)
        } else {
            from_bus_toml(&devices, &source)
        });
        Ok(())
    })())
}

/// Every way `cfg` does not fit the subdevices `bus` read in PRE-OP (before any configuration
/// is written): the count, the identity at each checked position (an identity found elsewhere
/// is reported as the order), `[[device]]` entries nothing matches, and per matched entry what
/// the subdevice cannot take (PDO configuration without CoE, a fixed assignment or mapping
/// configured otherwise) and process-data sizes that the mapping it would run with does not
/// give. Empty when the configuration fits.
pub fn bus_differences(cfg: &crate::config::MasterConfig, bus: &[DeviceMapping]) -> Vec<String> {
    use rtcat_master::devices::{Found, parse_entry};
    let mut out = Vec::new();
    let n = bus.len();
    let ident = |b: &DeviceMapping| {
        format!(
            "{} (vendor_id {:#010x} product_id {:#010x})",
            if b.name.is_empty() { "?" } else { &b.name },
            b.identity.vendor_id,
            b.identity.product_code
        )
    };
    if let Some(want) = cfg.segment.subdevices
        && usize::from(want) != n
    {
        out.push(format!(
            "count: segment.subdevices = {want}, the bus has {n} subdevice{}",
            if n == 1 { "" } else { "s" }
        ));
    }
    for (i, e) in cfg.segment.device.iter().enumerate() {
        let fits = |b: &DeviceMapping| {
            e.vendor_id.is_none_or(|v| v == b.identity.vendor_id)
                && e.product_id.is_none_or(|p| p == b.identity.product_code)
        };
        let want = format!(
            "vendor_id {} product_id {}",
            e.vendor_id.map_or("any".into(), |v| format!("{v:#010x}")),
            e.product_id.map_or("any".into(), |v| format!("{v:#010x}"))
        );
        let Some(b) = bus.get(usize::from(e.position)) else {
            out.push(format!(
                "count: segment.device[{i}] expects {want} at position {}, the bus has {n} subdevice{}",
                e.position,
                if n == 1 { "" } else { "s" }
            ));
            continue;
        };
        if fits(b) {
            continue;
        }
        let elsewhere: Vec<String> = bus
            .iter()
            .filter(|x| fits(x))
            .map(|x| x.position.to_string())
            .collect();
        if elsewhere.is_empty() {
            out.push(format!(
                "identity: segment.device[{i}] expects {want} at position {}, the bus has {} there",
                e.position,
                ident(b)
            ));
        } else {
            out.push(format!(
                "order: segment.device[{i}] expects {want} at position {}, the bus has it at position {} and {} at {}",
                e.position,
                elsewhere.join(", "),
                ident(b),
                e.position
            ));
        }
    }
    for (i, d) in cfg.device.iter().enumerate() {
        let hits: Vec<&DeviceMapping> = bus
            .iter()
            .filter(|b| {
                d.matches(&Found {
                    position: b.position,
                    alias: b.alias,
                    identity: (
                        b.identity.vendor_id,
                        b.identity.product_code,
                        b.identity.revision,
                    ),
                })
            })
            .collect();
        if hits.is_empty() {
            out.push(format!(
                "identity: device[{i}] ({}): no subdevice on the bus matches",
                d.matcher()
            ));
        }
        for b in hits {
            let who = format!("device[{i}] at position {} {}", b.position, ident(b));
            let configures = d.pdo_assign.is_some() || !d.pdo_map.is_empty();
            if !b.coe && (configures || !d.sdo.is_empty()) {
                out.push(format!(
                    "mapping: {who}: has no CoE mailbox; its pdo_assign, pdo_map and sdo cannot be written"
                ));
                continue;
            }
            let entries = |v: &[(u16, u8, u8)]| {
                v.iter()
                    .map(|(i, s, b)| format!("{i:#06x}:{s:02x}:{b}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            for p in &d.pdo_map {
                let want: Vec<(u16, u8, u8)> = p
                    .entries
                    .iter()
                    .map(|e| parse_entry(e.text()).unwrap_or((0, 0, 0)))
                    .collect();
                if let Some(q) = b.pdos.iter().find(|q| q.index == p.index) {
                    let got: Vec<(u16, u8, u8)> =
                        q.entries.iter().map(|e| (e.index, e.sub, e.bits)).collect();
                    if got != want && q.writable == Some(false) {
                        out.push(format!(
                            "mapping: {who}: {:#06x} is fixed at [{}], configured [{}]",
                            p.index,
                            entries(&got),
                            entries(&want)
                        ));
                    }
                }
            }
            let assign = d.pdo_assign.as_ref();
            for (sm, dir, list, key, want_bytes) in [
                (
                    2u8,
                    Direction::Outputs,
                    assign.and_then(|a| a.sm2.as_ref()),
                    "output_bytes",
                    d.output_bytes,
                ),
                (
                    3,
                    Direction::Inputs,
                    assign.and_then(|a| a.sm3.as_ref()),
                    "input_bytes",
                    d.input_bytes,
                ),
            ] {
                let on_bus = b.assignments.iter().find(|a| a.sm == sm);
                if let (Some(want), Some(a)) = (list, on_bus)
                    && &a.pdos != want
                    && a.writable == Some(false)
                {
                    out.push(format!(
                        "mapping: {who}: the sm{sm} assignment is fixed at [{}], configured [{}]",
                        hex_list(&a.pdos),
                        hex_list(want)
                    ));
                }
                // The size it would run with: the configured (else the current) assignment,
                // each PDO's configured (else current) mapping; unknown when a PDO assigned by
                // the configuration is not assigned now (its mapping is not read).
                let Some(want_bytes) = want_bytes else {
                    continue;
                };
                let pdos: Vec<u16> = match (list, on_bus) {
                    (Some(l), _) => l.clone(),
                    (None, Some(a)) => a.pdos.clone(),
                    (None, None) => b
                        .pdos
                        .iter()
                        .filter(|q| q.direction == dir)
                        .map(|q| q.index)
                        .collect(),
                };
                let mut bits = Some(0u32);
                for pdo in &pdos {
                    let one = match d.pdo_map.iter().find(|m| m.index == *pdo) {
                        Some(m) => Some(
                            m.entries
                                .iter()
                                .map(|e| parse_entry(e.text()).map_or(0, |x| u32::from(x.2)))
                                .sum::<u32>(),
                        ),
                        None => b
                            .pdos
                            .iter()
                            .find(|q| q.index == *pdo)
                            .map(|q| q.entries.iter().map(|e| u32::from(e.bits)).sum()),
                    };
                    bits = bits.zip(one).map(|(a, b)| a + b);
                }
                if let Some(bits) = bits
                    && bits.div_ceil(8) != want_bytes
                {
                    out.push(format!(
                        "mapping: {who}: {key} = {want_bytes}, the PDOs it would run with ([{}]) map {bits} bits ({} bytes)",
                        hex_list(&pdos),
                        bits.div_ceil(8)
                    ));
                }
            }
        }
    }
    out
}

/// `rtcat config check FILE`, and with `--sim`/`--iface` the comparison with the bus
/// ([`bus_differences`]): exit 2 naming every difference, 1 when the bus fails.
pub fn check(file: &std::path::Path, mut bus: BusArgs) -> ExitCode {
    let cfg = match crate::config::Config::load(file) {
        Ok(c) => c,
        Err(e) => {
            crate::say!("rtcat: {e}");
            return ExitCode::from(2);
        }
    };
    println!("{}: OK", file.display());
    // --control is refused by `open` below: the check reads the bus itself.
    if !bus.sim && bus.iface.is_none() && bus.control.is_none() {
        // Checked offline (the file may be for another machine): a note, not an error.
        if let Err(why) =
            rttune::netif::check_exists(&rttune::SysRoot::live(), &cfg.master.bus.interface)
        {
            crate::say!("rtcat: note: bus.interface: {why}");
        }
        return ExitCode::SUCCESS;
    }
    bus.config = Some(file.to_path_buf());
    finish((|| {
        let found = on_segment(&bus, segment::read_mappings)?;
        let diffs = bus_differences(&cfg.master, &found);
        if diffs.is_empty() {
            emit(&format!(
                "bus: {} subdevices fit the configuration (count, identity, order, mapping)\n",
                found.len()
            ));
            return Ok(());
        }
        for d in &diffs {
            crate::say!("rtcat: {d}");
        }
        Err(Fail::Usage(format!(
            "{}: {} difference{} with the bus",
            file.display(),
            diffs.len(),
            if diffs.len() == 1 { "" } else { "s" }
        )))
    })())
}

/// `rtcat config from-eni FILE [--out FILE]`: the ENI read ([`rtcat_esi::read_eni`]), turned
/// into a configuration, checked by the master's own parser, written; what is not run goes to
/// stderr as notes (and is in the file as comments). Bad input exits 2, a failed write 1.
pub fn from_eni(file: &std::path::Path, out: Option<&std::path::Path>) -> ExitCode {
    finish((|| {
        let eni = rtcat_esi::read_eni(file).map_err(|e| {
            if e.is_input() {
                Fail::Usage(e.to_string())
            } else {
                Fail::Runtime(e.to_string())
            }
        })?;
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| file.display().to_string());
        let made = eni
            .to_config(&name)
            .map_err(|e| Fail::Usage(e.to_string()))?;
        // rtcat.toml is read with a size bound: a file it would refuse is not written.
        let max = crate::config::MAX_CONFIG_BYTES;
        if made.toml.len() as u64 > max {
            return Err(Fail::Usage(format!(
                "the configuration made from {name} ({} subdevices) is {} bytes, more than \
                 rtcat reads from a configuration file ({max})",
                eni.slaves.len(),
                made.toml.len()
            )));
        }
        // The generated text must be a configuration the master accepts; if it is not, the ENI
        // holds something this import does not bound (the master's message names the key).
        crate::config::Config::parse(&made.toml, &format!("configuration made from {name}"))
            .map_err(|e| {
                Fail::Usage(format!("{e} (the ENI's values do not fit rtcat's limits)"))
            })?;
        for n in &made.notes {
            crate::say!("rtcat: note: {name}: not run: {n}");
        }
        match out {
            Some(p) => std::fs::write(p, &made.toml)
                .map_err(|e| Fail::Runtime(format!("{}: {e}", p.display())))?,
            None => emit(&made.toml),
        }
        Ok(())
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_in_hex() {
        assert_eq!(parse_entry("0x1018:02"), Ok((0x1018, 2)));
        assert_eq!(parse_entry("1018:2"), Ok((0x1018, 2)));
        assert_eq!(parse_entry("0x6060:0x00"), Ok((0x6060, 0)));
        for bad in [
            "0x1018",
            "0x10180:0",
            "0x1018:100",
            "x:1",
            ":1",
            "0x1018:",
            "0x-1:0",
        ] {
            let e = parse_entry(bad).unwrap_err();
            assert!(e.starts_with(&format!("INDEX:SUB {bad:?}")), "{e}");
        }
    }
}
