//! `rtcat sdo read|write|list`: CoE on a segment brought to PRE-OP
//! ([`rtcat_master::coe::segment`]), printed as text or JSON. Exit 2 for the user's input (a
//! position beyond the segment, an `INDEX:SUB` or value that does not parse or fit its type,
//! an unknown type), 1 for the bus and for aborts (the code and its ETG.1000.6 text).
//!
//! With `--sim` the segment lives in this process: a write changes the simulated device until
//! the command ends, so a write is seen by a read only within one process (the library API:
//! [`rtcat_master::coe::segment::with_pre_op`] and a client's `download` then `upload`).

use super::bus::{emit, json, open, remote, remote_within, table};
use crate::cli::BusArgs;
use crate::outcome::{Failure, Outcome};
use clap::{Args, Subcommand};
use rtcat_control::Request;
use rtcat_master::coe::segment::{self, ObjectInfo, PreOp};
use rtcat_master::coe::{self, SdoType, Timeouts, value::hex_bytes};
use rtcat_master::diag;
use std::fmt::Write as _;

#[derive(Subcommand, Debug)]
pub enum SdoCmd {
    /// Read (upload) an object entry: its bytes and, when the device describes it, its value
    Read(SdoReadArgs),
    /// Write (download) a value to an object entry. With --sim the write goes to the
    /// simulated segment of this one process, which ends with it
    Write(SdoWriteArgs),
    /// The object dictionary by SDO information: index, object code, type, name
    List(SdoListArgs),
}

#[derive(Args, Debug)]
pub struct SdoReadArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// Object entry, index and subindex in hex (`0x1018:02`; the 0x is optional)
    #[arg(value_name = "INDEX:SUB")]
    pub entry: String,
    /// Print the value as this type: bool u8 u16 u32 u64 i8 i16 i32 i64 f32 f64 string bytes
    #[arg(long = "type", value_name = "T")]
    pub ty: Option<String>,
    /// Complete access: every subindex of the object at once (from SUB, which is 0 or 1)
    #[arg(long)]
    pub complete: bool,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct SdoWriteArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// Object entry, index and subindex in hex (`0x6060:00`)
    #[arg(value_name = "INDEX:SUB")]
    pub entry: String,
    /// bool u8 u16 u32 u64 i8 i16 i32 i64 f32 f64 string bytes
    #[arg(value_name = "TYPE")]
    pub ty: String,
    /// The value: decimal or 0x hex for integers, true/false, text, or hex pairs for bytes
    /// ("01 02 ff")
    #[arg(value_name = "VALUE", allow_hyphen_values = true)]
    pub value: String,
    /// Complete access: write every subindex of the object at once (from SUB, 0 or 1)
    #[arg(long)]
    pub complete: bool,
    /// How long the device may take to answer, 1..=120000 ms (default 1000): for a write it
    /// acts on first (storing parameters, writing flash). Over --control the running master's
    /// other acyclic requests wait as long
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u32>,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct SdoListArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// Every subindex too: access, bits, type and name
    #[arg(long)]
    pub entries: bool,
    #[command(flatten)]
    pub bus: BusArgs,
}

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

fn parse_type(s: &str) -> Result<SdoType, Failure> {
    s.parse()
        .map_err(|e: coe::ValueError| Failure::Usage(e.to_string()))
}

impl From<coe::Error> for Failure {
    fn from(e: coe::Error) -> Self {
        Failure::Runtime(e.to_string())
    }
}

/// Run `f` on the segment the arguments name, in PRE-OP; emergencies go to stderr.
pub(super) fn on_segment<R: Send>(
    bus: &BusArgs,
    f: impl FnOnce(&PreOp<'_>) -> diag::Result<R> + Send,
) -> Result<R, Failure> {
    on_segment_within(bus, Timeouts::default(), f)
}

/// [`on_segment`] with the mailbox's `timeouts`.
fn on_segment_within<R: Send>(
    bus: &BusArgs,
    timeouts: Timeouts,
    f: impl FnOnce(&PreOp<'_>) -> diag::Result<R> + Send,
) -> Result<R, Failure> {
    let (s, _cfg) = open(bus)?;
    Ok(segment::with_pre_op(s.maindevice(), timeouts, f)?)
}

/// `--timeout-ms`: 1..=[`rtcat_control::protocol::MAX_SDO_TIMEOUT_MS`].
fn check_timeout(ms: Option<u32>) -> Result<Option<u32>, Failure> {
    let max = rtcat_control::protocol::MAX_SDO_TIMEOUT_MS;
    match ms {
        Some(t) if !(1..=max).contains(&t) => Err(Failure::Usage(format!(
            "--timeout-ms {t}: must be 1..={max} ms"
        ))),
        t => Ok(t),
    }
}

/// The request of `sdo read|write --control` (what the master's queue can do: no complete
/// access, at most [`rtcat_control::protocol::MAX_SDO_DATA`] bytes).
fn remote_request(
    position: u32,
    (index, sub): (u16, u8),
    complete: bool,
    data: Option<(Vec<u8>, Option<u32>)>,
) -> Result<Request, Failure> {
    if complete {
        return Err(Failure::Usage(
            "--complete: not over --control (the master's queue transfers one subindex)".into(),
        ));
    }
    let position = u16::try_from(position)
        .map_err(|_| Failure::Usage(format!("POS {position}: positions are 0..=65535")))?;
    Ok(match data {
        None => Request::SdoRead {
            position,
            index,
            sub,
        },
        Some((d, timeout_ms)) => {
            let max = rtcat_control::protocol::MAX_SDO_DATA;
            if d.len() > max {
                return Err(Failure::Usage(format!(
                    "VALUE: {} bytes; over --control at most {max}",
                    d.len()
                )));
            }
            Request::SdoWrite {
                position,
                index,
                sub,
                data: d,
                timeout_ms,
            }
        }
    })
}

pub(super) fn say_emergencies(e: &[coe::Emergency]) {
    for e in e {
        crate::say!("rtcat: {e}");
    }
}

/// `rtcat sdo`.
pub fn sdo(c: SdoCmd) -> Outcome {
    match c {
        SdoCmd::Read(a) => read(a),
        SdoCmd::Write(a) => write(a),
        SdoCmd::List(a) => list(a),
    }
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

fn check_complete(complete: bool, sub: u8) -> Result<(), Failure> {
    if complete && sub > 1 {
        return Err(Failure::Usage(format!(
            "--complete: subindex {sub:#04x}: complete access starts at subindex 0 or 1"
        )));
    }
    Ok(())
}

fn read(a: SdoReadArgs) -> Result<(), Failure> {
    let (index, sub) = parse_entry(&a.entry).map_err(Failure::Usage)?;
    check_complete(a.complete, sub)?;
    let ty = a.ty.as_deref().map(parse_type).transpose()?;
    let position = a.position;
    let complete = a.complete;
    let (bytes, described, emergencies) = if a.bus.control.is_some() {
        // Through the running master's acyclic queue: an upload, no SDO information (the
        // type comes from --type, the value is shown as hex without it).
        let v = remote(
            &a.bus,
            &remote_request(position, (index, sub), complete, None)?,
        )?;
        let hex = v.get("data").and_then(|d| d.as_str()).unwrap_or_default();
        let bytes = rtcat_control::protocol::from_hex(hex)
            .map_err(|e| Failure::Runtime(format!("control socket: data {e}")))?;
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
                return Err(Failure::Usage(format!(
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

fn write(a: SdoWriteArgs) -> Result<(), Failure> {
    // Everything the user typed is checked before the bus is opened.
    let (index, sub) = parse_entry(&a.entry).map_err(Failure::Usage)?;
    check_complete(a.complete, sub)?;
    let ty = parse_type(&a.ty)?;
    let timeout_ms = check_timeout(a.timeout_ms)?;
    let data = ty
        .encode(&a.value)
        .map_err(|e| Failure::Usage(format!("{:#06x}:{sub:02x}: {e}", index)))?;
    if data.is_empty() {
        return Err(Failure::Usage(format!(
            "{index:#06x}:{sub:02x}: VALUE is empty: an SDO download carries at least one byte"
        )));
    }
    let (position, complete) = (a.position, a.complete);
    let d2 = data.clone();
    let emergencies = if a.bus.control.is_some() {
        // The device's time on top of the socket's usual wait.
        let wait = rtcat_control::client::DEFAULT_TIMEOUT
            + std::time::Duration::from_millis(timeout_ms.unwrap_or(0).into());
        remote_within(
            &a.bus,
            &remote_request(
                position,
                (index, sub),
                complete,
                Some((data.clone(), timeout_ms)),
            )?,
            wait,
        )?;
        Vec::new()
    } else {
        let timeouts = Timeouts {
            response: timeout_ms.map_or(Timeouts::default().response, |t| {
                std::time::Duration::from_millis(t.into())
            }),
            ..Timeouts::default()
        };
        on_segment_within(&a.bus, timeouts, move |seg| {
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

fn list(a: SdoListArgs) -> Result<(), Failure> {
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
