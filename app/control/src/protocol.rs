//! The control socket protocol, version 1: JSON lines over a Unix stream socket.
//!
//! One request object per line (at most [`MAX_LINE`] bytes), one reply line per request:
//! `{"ok": true, "data": ...}` or `{"ok": false, "kind": "usage"|"runtime", "error": "..."}`.
//! A request names its command in `cmd`; see [`Request`] for the commands and their fields.
//! Parsing is done here, field by field, so every bad line gets an error that names the field
//! and the value ([`Request::parse`]), never a panic.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Protocol version in [`Status::version`].
pub const VERSION: u32 = 1;

/// Longest request line (bytes, without the newline). A longer one gets an error reply and
/// the connection is closed (the rest of it cannot be framed).
pub const MAX_LINE: usize = 64 * 1024;

/// Upper bounds (`le`, ns) of the histogram buckets of [`Histo::buckets`]: 1, 2, 5, 10, 20,
/// 50, 100, 200, 500 µs, 1, 2, 5, 10, 100 ms, 1 s. `+Inf` is [`Histo::count`].
pub const BUCKET_BOUNDS_NS: [u64; 15] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// The AL state an `al_state` request asks for (ETG.1000.6 Table 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AlTarget {
    /// INIT (1).
    #[serde(rename = "init")]
    Init,
    /// PRE-OP (2).
    #[serde(rename = "pre-op")]
    PreOp,
    /// SAFE-OP (4).
    #[serde(rename = "safe-op")]
    SafeOp,
    /// OP (8).
    #[serde(rename = "op")]
    Op,
}

impl AlTarget {
    /// The value written to AL control (0x0120 bits 0..3).
    pub fn code(self) -> u8 {
        match self {
            AlTarget::Init => 1,
            AlTarget::PreOp => 2,
            AlTarget::SafeOp => 4,
            AlTarget::Op => 8,
        }
    }

    /// The protocol's name.
    pub fn name(self) -> &'static str {
        match self {
            AlTarget::Init => "init",
            AlTarget::PreOp => "pre-op",
            AlTarget::SafeOp => "safe-op",
            AlTarget::Op => "op",
        }
    }

    fn parse(s: &str) -> Option<AlTarget> {
        Some(match s {
            "init" => AlTarget::Init,
            "pre-op" => AlTarget::PreOp,
            "safe-op" => AlTarget::SafeOp,
            "op" => AlTarget::Op,
            _ => return None,
        })
    }
}

/// What an `axis` request asks of the axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AxisAction {
    /// Ask for operation enabled.
    Enable,
    /// Switch the power stage off.
    Disable,
    /// Fault reset.
    Reset,
    /// A planned stop, then hold.
    Stop,
    /// A planned stop, then back to the configured program.
    Release,
    /// Run at `velocity` units/s (signed) while the lease is renewed.
    Jog {
        /// Units/s.
        velocity: f64,
    },
    /// Move to `position` units while the lease is renewed.
    MoveTo {
        /// Units.
        position: f64,
    },
    /// Extend the running jog's or move's lease (not recorded when done: it changes nothing
    /// but how long the motion holds).
    Renew,
}

impl AxisAction {
    /// The protocol's name.
    pub fn name(self) -> &'static str {
        match self {
            AxisAction::Enable => "enable",
            AxisAction::Disable => "disable",
            AxisAction::Reset => "reset",
            AxisAction::Stop => "stop",
            AxisAction::Release => "release",
            AxisAction::Jog { .. } => "jog",
            AxisAction::MoveTo { .. } => "move_to",
            AxisAction::Renew => "renew",
        }
    }

    /// Whether it moves the axis (holds only while its lease is renewed).
    pub fn is_motion(self) -> bool {
        matches!(
            self,
            AxisAction::Jog { .. } | AxisAction::MoveTo { .. } | AxisAction::Renew
        )
    }
}

/// Lease of a jog or move-to when the request names none (ms).
pub const DEFAULT_LEASE_MS: u64 = 300;
/// Shortest and longest lease a request may ask for (ms).
pub const LEASE_MS: std::ops::RangeInclusive<u64> = 50..=2000;

/// One request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `{"cmd": "status"}`: the master's state, counters and histograms ([`Status`]).
    Status,
    /// `{"cmd": "scan"}`: the `rtcat scan --json` array, read through the acyclic path.
    Scan,
    /// `{"cmd": "pdos"}`: the layout in effect (`rtcat pdos --json`).
    Pdos,
    /// `{"cmd": "counters"}`: `{"polled_unix_ns": N, "subdevices": [...]}`, the error counters
    /// of the poller's last reading (the `rtcat counters --json` array).
    Counters,
    /// `{"cmd": "sdo_read", "position": 0, "index": 4120, "sub": 1}`: data `{"data": "hex"}`.
    SdoRead {
        /// Subdevice position.
        position: u16,
        /// Object index.
        index: u16,
        /// Subindex.
        sub: u8,
    },
    /// `{"cmd": "od_list", "position": 2}`: the device's object dictionary by SDO information
    /// (ETG.1000.6 §5.6.3), through the cycle's mailbox queue: data `{"position": N,
    /// "objects": [{"index", "name", "object_code", "max_sub", "data_type"} or {"index",
    /// "error"}], "described": N}` (at most [`MAX_OD_DESCRIBED`] objects described, the rest
    /// listed by index only).
    OdList {
        /// Subdevice position.
        position: u16,
    },
    /// `{"cmd": "od_object", "position": 2, "index": 24640}`: one object's description and
    /// its entries' (`{"sub", "name", "data_type", "type", "bits", "access"}` or `{"sub",
    /// "error"}`).
    OdObject {
        /// Subdevice position.
        position: u16,
        /// Object index.
        index: u16,
    },
    /// `{"cmd": "sdo_write", "position": 0, "index": 8192, "sub": 1, "data": "2a00"}`, with
    /// `"timeout_ms": 5000` for a device that acts on the value before it answers (storing
    /// parameters, writing flash).
    SdoWrite {
        /// Subdevice position.
        position: u16,
        /// Object index.
        index: u16,
        /// Subindex.
        sub: u8,
        /// The bytes to write.
        data: Vec<u8>,
        /// How long the device may take to answer, 1..=[`MAX_SDO_TIMEOUT_MS`] ms (None: the
        /// master's default, 1 s). The master's other acyclic requests wait as long.
        timeout_ms: Option<u32>,
    },
    /// `{"cmd": "al_state", "position": 1, "state": "safe-op"}`: write AL control.
    AlState {
        /// Subdevice position.
        position: u16,
        /// The state asked for.
        state: AlTarget,
    },
    /// `{"cmd": "shm_image"}`: the shared process image (`app/shm/FORMAT.md`, format v3): data
    /// `{"generation": N, "bytes": N}` and the image's sealed, read-only memfd with
    /// `SCM_RIGHTS` on the same reply.
    ShmImage,
    /// `{"cmd": "shm_writer", "name": "hmi"}`: a writer object of its own (its slot) for the
    /// asking process: data `{"slot": k, "bytes": N, "generation": N, "declared": bool}` and
    /// the writer's sealed memfd with `SCM_RIGHTS`.
    ShmWriter {
        /// The writer's name (1..=31 bytes).
        name: String,
    },
    /// `{"cmd": "shm_claim", "slot": 0, "row": 3}`: the writer of `slot` (the asking process
    /// must be the one it was handed to) owns entry-table row `row` from now on.
    ShmClaim {
        /// Writer slot.
        slot: u32,
        /// Entry-table row.
        row: u32,
    },
    /// `{"cmd": "foe_read", "position": 0, "name": "params.bin", "password": 0}` with one
    /// descriptor passed (`SCM_RIGHTS`) that is open for writing: the device's file over FoE,
    /// through the cycle's mailbox queue, written into it. Data `{"bytes": N, "seconds": S}`.
    /// The descriptor is the client's: the master opens no path a client names.
    FoeRead {
        /// Subdevice position.
        position: u16,
        /// The file's name on the device.
        name: String,
        /// The password the device asks for (0: none).
        password: u32,
    },
    /// `{"cmd": "foe_write", "position": 0, "name": "params.bin", "password": 0}` with one
    /// descriptor passed that is open for reading (a regular file): its content written to the
    /// device's file. Data `{"bytes": N, "seconds": S}`. With `"boot": true` a firmware update:
    /// the device is taken out of the running segment, written in its BOOT state and handed
    /// back to its recovery (needs `[health] recovery = "subdevice"`); the data then also say
    /// `"back_in_op"` and the identity `"before"` and `"after"`.
    FoeWrite {
        /// Subdevice position.
        position: u16,
        /// The file's name on the device.
        name: String,
        /// The password the device asks for (0: none).
        password: u32,
        /// In the device's BOOT state (a firmware update).
        boot: bool,
    },
    /// `{"cmd": "eoe_get_ip", "position": 1}`: a device's IP parameters over EoE (get IP
    /// parameter), through the cycle's mailbox queue. Data `{"position": 1, "mac": ..., "ip":
    /// ..., "subnet": ..., "gateway": ..., "dns": ..., "dns_name": ...}` (null: not reported).
    EoeGetIp {
        /// Subdevice position.
        position: u16,
    },
    /// `{"cmd": "eoe_set_ip", "position": 1, "ip": "192.168.10.2/24", "gateway": ..., "dns":
    /// ..., "dns_name": ..., "mac": ...}` (at least one; the text of `rtcat eoe set-ip`'s
    /// options, which the master parses): EoE set IP parameter. Data `{"position": 1, "set":
    /// "ip 192.168.10.2, ..."}`.
    EoeSetIp {
        /// Subdevice position.
        position: u16,
        /// `--ip`, `--gateway`, `--dns`, `--dns-name`, `--mac`, as given.
        settings: EoeSettings,
    },
    /// `{"cmd": "shm_release", "slot": 0, "row": 3}`: give a claimed row up.
    ShmRelease {
        /// Writer slot.
        slot: u32,
        /// Entry-table row.
        row: u32,
    },
    /// `{"cmd": "note", "text": "web user=alice: sdo_write ..."}`: put a line on the master's
    /// record (events.log and the journal) with the peer's uid and pid. A program that acts
    /// for its own users (the commissioning page) says with it who asks for the write it sends
    /// next; it needs the write right as that write does. Data `{}`.
    Note {
        /// The line (1..=[`MAX_NOTE`] bytes, no control characters).
        text: String,
    },
    /// `{"cmd": "axis", "name": "x", "action": "jog", "velocity": -5.0, "lease_ms": 300}`: a
    /// manual command for an `[[axis]]` of the built-in axes application (actions: enable,
    /// disable, reset, stop, release; jog with `velocity` units/s, move_to with `position`
    /// units, renew). A jog or move holds for `lease_ms` (default 300) unless renewed, then
    /// the axis stops (planned) and holds: hold-to-run. Values outside the axis' limits are
    /// refused. A command takes the axis out of its program until `release`. Data `{}`.
    Axis {
        /// `[[axis]] name`.
        name: String,
        /// What to do.
        action: AxisAction,
        /// Lease of a jog, move-to or renewal (ms, [`LEASE_MS`]).
        lease_ms: u64,
    },
}

/// Objects an `od_list` reply describes at most (each is one SDO information exchange).
pub const MAX_OD_DESCRIBED: usize = 1024;

/// Longest [`Request::Note`] text (bytes).
pub const MAX_NOTE: usize = 512;

/// Why a request failed: the caller's input, or the master/bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// A malformed request or a value out of range (a CLI exits 2).
    Usage,
    /// The master or the bus failed (a CLI exits 1).
    Runtime,
}

/// A failed request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// Usage or runtime.
    pub kind: FailureKind,
    /// What was wrong, naming the field or value.
    pub message: String,
}

impl Failure {
    /// A usage failure.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            kind: FailureKind::Usage,
            message: message.into(),
        }
    }

    /// A runtime failure.
    pub fn runtime(message: impl Into<String>) -> Failure {
        Failure {
            kind: FailureKind::Runtime,
            message: message.into(),
        }
    }
}

/// One reply line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request succeeded.
    pub ok: bool,
    /// Its data (success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Usage or runtime (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FailureKind>,
    /// What went wrong (failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reply {
    /// A success with `data`.
    pub fn ok(data: Value) -> Reply {
        Reply {
            ok: true,
            data: Some(data),
            kind: None,
            error: None,
        }
    }

    /// A failure.
    pub fn fail(f: &Failure) -> Reply {
        Reply {
            ok: false,
            data: None,
            kind: Some(f.kind),
            error: Some(f.message.clone()),
        }
    }

    /// The data, or the failure (a reply with `ok = false` but no kind is a runtime failure).
    pub fn into_result(self) -> Result<Value, Failure> {
        if self.ok {
            Ok(self.data.unwrap_or(Value::Null))
        } else {
            Err(Failure {
                kind: self.kind.unwrap_or(FailureKind::Runtime),
                message: self
                    .error
                    .unwrap_or_else(|| "failed (no reason given)".into()),
            })
        }
    }

    /// The reply as one line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a reply serializes")
    }
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of a hex string (pairs of hex digits; spaces between bytes allowed).
pub fn from_hex(s: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = s.bytes().filter(|b| *b != b' ').collect();
    if !digits.len().is_multiple_of(2) {
        return Err(format!("{s:?}: an odd number of hex digits"));
    }
    digits
        .chunks(2)
        .map(|p| {
            let h = |c: u8| (c as char).to_digit(16);
            match (h(p[0]), h(p[1])) {
                (Some(a), Some(b)) => Ok((a * 16 + b) as u8),
                _ => Err(format!(
                    "{s:?}: {:?} is not a hex byte",
                    String::from_utf8_lossy(p)
                )),
            }
        })
        .collect()
}

/// The IP parameters of an `eoe_set_ip`, as text (the master parses them as `rtcat eoe set-ip`
/// does its options).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EoeSettings {
    /// Address with its prefix length.
    pub ip: Option<String>,
    /// Default gateway.
    pub gateway: Option<String>,
    /// DNS server.
    pub dns: Option<String>,
    /// DNS name.
    pub dns_name: Option<String>,
    /// MAC address.
    pub mac: Option<String>,
}

impl EoeSettings {
    /// The fields by their JSON names.
    fn fields(&self) -> [(&'static str, &Option<String>); 5] {
        [
            ("ip", &self.ip),
            ("gateway", &self.gateway),
            ("dns", &self.dns),
            ("dns_name", &self.dns_name),
            ("mac", &self.mac),
        ]
    }
}

/// Longest text of one `eoe_set_ip` field.
const MAX_EOE_FIELD: usize = 64;

/// Largest value an `sdo_write` carries (the master's acyclic queue moves at most this).
pub const MAX_SDO_DATA: usize = 64;

/// Longest answer an `sdo_write` may wait for (`timeout_ms`): 2 minutes, as a startup SDO's
/// `[[device.sdo]] timeout_ms`.
pub const MAX_SDO_TIMEOUT_MS: u32 = 120_000;

fn field<'a>(o: &'a Map<String, Value>, name: &str) -> Result<&'a Value, Failure> {
    o.get(name)
        .ok_or_else(|| Failure::usage(format!("missing field {name:?}")))
}

/// An unsigned field of at most `max`: a JSON number, or a string in decimal or `0x` hex
/// (`"0x6040"`, as object indices are written).
fn number(o: &Map<String, Value>, name: &str, max: u64) -> Result<u64, Failure> {
    let v = field(o, name)?;
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => {
            let s = s.trim();
            match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        }
        _ => None,
    };
    match n {
        Some(n) if n <= max => Ok(n),
        _ => Err(Failure::usage(format!(
            "{name} = {v}: must be an integer 0..={max} (a number, or a string in decimal or 0x hex)"
        ))),
    }
}

fn string<'a>(o: &'a Map<String, Value>, name: &str) -> Result<&'a str, Failure> {
    match field(o, name)? {
        Value::String(s) => Ok(s),
        v => Err(Failure::usage(format!("{name} = {v}: must be a string"))),
    }
}

fn only(o: &Map<String, Value>, cmd: &str, allowed: &[&str]) -> Result<(), Failure> {
    for k in o.keys() {
        if k != "cmd" && !allowed.contains(&k.as_str()) {
            return Err(Failure::usage(if allowed.is_empty() {
                format!("{cmd}: unknown field {k:?} (it takes none)")
            } else {
                format!(
                    "{cmd}: unknown field {k:?} (it takes {})",
                    allowed.join(", ")
                )
            }));
        }
    }
    Ok(())
}

/// The commands, for error messages.
pub const COMMANDS: &str = "status, scan, pdos, counters, sdo_read, sdo_write, al_state, \
                            shm_image, shm_writer, shm_claim, shm_release, foe_read, foe_write, \
                            eoe_get_ip, eoe_set_ip, note, axis, od_list, od_object";

impl Request {
    /// Parse one request line (without its newline). An object with a key twice is refused
    /// (naming the key): JSON leaves it open, and serde_json would take the last one, so
    /// `{"cmd":"status","cmd":"scan"}` would run what a filter reading the first one let pass.
    pub fn parse(line: &str) -> Result<Request, Failure> {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| Failure::usage(format!("not a JSON object: {e}")))?;
        if v.is_object() {
            serde_json::from_str::<NoDuplicates>(line).map_err(|e| {
                // serde's " at line 1 column N" is noise on a one-line request.
                let m = e.to_string();
                Failure::usage(m.split(" at line ").next().unwrap_or("").to_string())
            })?;
        }
        Request::from_value(&v)
    }

    /// Whether the request changes the state of the master or the segment (needs the write
    /// right, and is put on the record).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Request::SdoWrite { .. }
                | Request::AlState { .. }
                | Request::ShmWriter { .. }
                | Request::ShmClaim { .. }
                | Request::ShmRelease { .. }
                | Request::Note { .. }
                | Request::FoeWrite { .. }
                | Request::EoeSetIp { .. }
                | Request::Axis { .. }
        )
    }

    /// Whether the request takes a descriptor passed with it (`SCM_RIGHTS`).
    pub fn takes_fd(&self) -> bool {
        matches!(self, Request::FoeRead { .. } | Request::FoeWrite { .. })
    }

    /// The command's name (`"sdo_write"`).
    pub fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Scan => "scan",
            Request::Pdos => "pdos",
            Request::Counters => "counters",
            Request::SdoRead { .. } => "sdo_read",
            Request::SdoWrite { .. } => "sdo_write",
            Request::AlState { .. } => "al_state",
            Request::ShmImage => "shm_image",
            Request::ShmWriter { .. } => "shm_writer",
            Request::ShmClaim { .. } => "shm_claim",
            Request::ShmRelease { .. } => "shm_release",
            Request::Note { .. } => "note",
            Request::FoeRead { .. } => "foe_read",
            Request::FoeWrite { .. } => "foe_write",
            Request::EoeGetIp { .. } => "eoe_get_ip",
            Request::EoeSetIp { .. } => "eoe_set_ip",
            Request::Axis { .. } => "axis",
            Request::OdList { .. } => "od_list",
            Request::OdObject { .. } => "od_object",
        }
    }

    /// The request of a parsed JSON value.
    pub fn from_value(v: &Value) -> Result<Request, Failure> {
        let Value::Object(o) = v else {
            return Err(Failure::usage(format!(
                "a request is a JSON object with \"cmd\", not {}",
                kind_of(v)
            )));
        };
        let cmd = match o.get("cmd") {
            Some(Value::String(s)) => s.as_str(),
            Some(v) => return Err(Failure::usage(format!("cmd = {v}: must be a string"))),
            None => return Err(Failure::usage("missing field \"cmd\"")),
        };
        let pos = |o| number(o, "position", u64::from(u16::MAX)).map(|n| n as u16);
        let idx = |o| number(o, "index", u64::from(u16::MAX)).map(|n| n as u16);
        let sub = |o| number(o, "sub", u64::from(u8::MAX)).map(|n| n as u8);
        Ok(match cmd {
            "status" | "scan" | "pdos" | "counters" | "shm_image" => {
                only(o, cmd, &[])?;
                match cmd {
                    "status" => Request::Status,
                    "scan" => Request::Scan,
                    "pdos" => Request::Pdos,
                    "shm_image" => Request::ShmImage,
                    _ => Request::Counters,
                }
            }
            "shm_writer" => {
                only(o, cmd, &["name"])?;
                let name = string(o, "name")?;
                if name.is_empty() || name.len() > 31 || name.chars().any(char::is_control) {
                    return Err(Failure::usage(format!(
                        "name = {:?}: must be 1..=31 bytes without control characters",
                        name.chars().take(40).collect::<String>()
                    )));
                }
                Request::ShmWriter {
                    name: name.to_string(),
                }
            }
            "shm_claim" | "shm_release" => {
                only(o, cmd, &["slot", "row"])?;
                let slot = number(o, "slot", u64::from(u32::MAX))? as u32;
                let row = number(o, "row", u64::from(u32::MAX))? as u32;
                if cmd == "shm_claim" {
                    Request::ShmClaim { slot, row }
                } else {
                    Request::ShmRelease { slot, row }
                }
            }
            "eoe_get_ip" => {
                only(o, cmd, &["position"])?;
                Request::EoeGetIp { position: pos(o)? }
            }
            "eoe_set_ip" => {
                only(
                    o,
                    cmd,
                    &["position", "ip", "gateway", "dns", "dns_name", "mac"],
                )?;
                let text = |name: &str| -> Result<Option<String>, Failure> {
                    if !o.contains_key(name) {
                        return Ok(None);
                    }
                    let t = string(o, name)?;
                    if t.is_empty() || t.len() > MAX_EOE_FIELD || t.chars().any(char::is_control) {
                        return Err(Failure::usage(format!(
                            "{name} = {:?}: 1..={MAX_EOE_FIELD} bytes without control characters",
                            t.chars().take(40).collect::<String>()
                        )));
                    }
                    Ok(Some(t.to_string()))
                };
                let settings = EoeSettings {
                    ip: text("ip")?,
                    gateway: text("gateway")?,
                    dns: text("dns")?,
                    dns_name: text("dns_name")?,
                    mac: text("mac")?,
                };
                if settings == EoeSettings::default() {
                    return Err(Failure::usage(
                        "eoe_set_ip: nothing to set: give ip, gateway, dns, dns_name or mac",
                    ));
                }
                Request::EoeSetIp {
                    position: pos(o)?,
                    settings,
                }
            }
            "note" => {
                only(o, cmd, &["text"])?;
                let text = string(o, "text")?;
                if text.is_empty() || text.len() > MAX_NOTE || text.chars().any(char::is_control) {
                    return Err(Failure::usage(format!(
                        "text = {:?}: must be 1..={MAX_NOTE} bytes without control characters",
                        text.chars().take(40).collect::<String>()
                    )));
                }
                Request::Note {
                    text: text.to_string(),
                }
            }
            "foe_read" | "foe_write" => {
                if cmd == "foe_read" {
                    only(o, cmd, &["position", "name", "password"])?;
                } else {
                    only(o, cmd, &["position", "name", "password", "boot"])?;
                }
                let name = string(o, "name")?;
                if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
                    return Err(Failure::usage(format!(
                        "name = {:?}: a device file name has 1..=255 bytes without control characters",
                        name.chars().take(40).collect::<String>()
                    )));
                }
                let password = if o.contains_key("password") {
                    number(o, "password", u64::from(u32::MAX))? as u32
                } else {
                    0
                };
                let (position, name) = (pos(o)?, name.to_string());
                if cmd == "foe_read" {
                    Request::FoeRead {
                        position,
                        name,
                        password,
                    }
                } else {
                    let boot = match o.get("boot") {
                        None => false,
                        Some(Value::Bool(b)) => *b,
                        Some(other) => {
                            return Err(Failure::usage(format!("boot = {other}: true or false")));
                        }
                    };
                    Request::FoeWrite {
                        position,
                        name,
                        password,
                        boot,
                    }
                }
            }
            "axis" => axis_request(o)?,
            "od_list" => {
                only(o, cmd, &["position"])?;
                Request::OdList { position: pos(o)? }
            }
            "od_object" => {
                only(o, cmd, &["position", "index"])?;
                Request::OdObject {
                    position: pos(o)?,
                    index: idx(o)?,
                }
            }
            "sdo_read" => {
                only(o, cmd, &["position", "index", "sub"])?;
                Request::SdoRead {
                    position: pos(o)?,
                    index: idx(o)?,
                    sub: sub(o)?,
                }
            }
            "sdo_write" => {
                only(o, cmd, &["position", "index", "sub", "data", "timeout_ms"])?;
                let hex = string(o, "data")?;
                let data = from_hex(hex).map_err(|e| Failure::usage(format!("data = {e}")))?;
                if data.is_empty() || data.len() > MAX_SDO_DATA {
                    return Err(Failure::usage(format!(
                        "data = {hex:?}: {} bytes, must be 1..={MAX_SDO_DATA}",
                        data.len()
                    )));
                }
                let timeout_ms = match o.get("timeout_ms") {
                    None => None,
                    Some(_) => {
                        let t = number(o, "timeout_ms", u64::MAX)?;
                        if !(1..=u64::from(MAX_SDO_TIMEOUT_MS)).contains(&t) {
                            return Err(Failure::usage(format!(
                                "timeout_ms = {t}: must be 1..={MAX_SDO_TIMEOUT_MS} ms"
                            )));
                        }
                        Some(t as u32)
                    }
                };
                Request::SdoWrite {
                    position: pos(o)?,
                    index: idx(o)?,
                    sub: sub(o)?,
                    data,
                    timeout_ms,
                }
            }
            "al_state" => {
                only(o, cmd, &["position", "state"])?;
                let s = string(o, "state")?;
                let state = AlTarget::parse(s).ok_or_else(|| {
                    Failure::usage(format!(
                        "state = {s:?}: must be one of init, pre-op, safe-op, op"
                    ))
                })?;
                Request::AlState {
                    position: pos(o)?,
                    state,
                }
            }
            other => {
                return Err(Failure::usage(format!(
                    "cmd = {other:?}: unknown command (one of {COMMANDS})"
                )));
            }
        })
    }

    /// The request as a JSON value (what [`Request::parse`] reads back).
    pub fn to_value(&self) -> Value {
        use serde_json::json;
        match self {
            Request::Status => json!({"cmd": "status"}),
            Request::Scan => json!({"cmd": "scan"}),
            Request::Pdos => json!({"cmd": "pdos"}),
            Request::Counters => json!({"cmd": "counters"}),
            Request::SdoRead {
                position,
                index,
                sub,
            } => json!({"cmd": "sdo_read", "position": position, "index": index, "sub": sub}),
            Request::SdoWrite {
                position,
                index,
                sub,
                data,
                timeout_ms,
            } => {
                let mut v = json!({"cmd": "sdo_write", "position": position, "index": index,
                                   "sub": sub, "data": to_hex(data)});
                if let (Some(t), Some(o)) = (timeout_ms, v.as_object_mut()) {
                    o.insert("timeout_ms".into(), json!(t));
                }
                v
            }
            Request::AlState { position, state } => {
                json!({"cmd": "al_state", "position": position, "state": state.name()})
            }
            Request::ShmImage => json!({"cmd": "shm_image"}),
            Request::ShmWriter { name } => json!({"cmd": "shm_writer", "name": name}),
            Request::ShmClaim { slot, row } => {
                json!({"cmd": "shm_claim", "slot": slot, "row": row})
            }
            Request::ShmRelease { slot, row } => {
                json!({"cmd": "shm_release", "slot": slot, "row": row})
            }
            Request::Note { text } => json!({"cmd": "note", "text": text}),
            Request::FoeRead {
                position,
                name,
                password,
            } => {
                json!({"cmd": "foe_read", "position": position, "name": name, "password": password})
            }
            Request::EoeGetIp { position } => json!({"cmd": "eoe_get_ip", "position": position}),
            Request::EoeSetIp { position, settings } => {
                let mut v = json!({"cmd": "eoe_set_ip", "position": position});
                for (k, f) in settings.fields() {
                    if let Some(t) = f {
                        v[k] = Value::String(t.clone());
                    }
                }
                v
            }
            Request::FoeWrite {
                position,
                name,
                password,
                boot,
            } => {
                let mut v = json!({"cmd": "foe_write", "position": position, "name": name,
                                   "password": password});
                // Only when set: the line of a plain write stays what it was.
                if *boot {
                    v["boot"] = Value::Bool(true);
                }
                v
            }
            Request::OdList { position } => json!({"cmd": "od_list", "position": position}),
            Request::OdObject { position, index } => {
                json!({"cmd": "od_object", "position": position, "index": index})
            }
            Request::Axis {
                name,
                action,
                lease_ms,
            } => {
                let mut v = json!({"cmd": "axis", "name": name, "action": action.name()});
                match action {
                    AxisAction::Jog { velocity } => v["velocity"] = json!(velocity),
                    AxisAction::MoveTo { position } => v["position"] = json!(position),
                    _ => {}
                }
                if action.is_motion() {
                    v["lease_ms"] = json!(lease_ms);
                }
                v
            }
        }
    }

    /// The request as one line (no newline).
    pub fn to_line(&self) -> String {
        self.to_value().to_string()
    }
}

/// A finite number field.
fn real(o: &Map<String, Value>, name: &str) -> Result<f64, Failure> {
    match field(o, name)? {
        Value::Number(n) => n.as_f64().filter(|x| x.is_finite()),
        _ => None,
    }
    .ok_or_else(|| Failure::usage(format!("{name} = {}: must be a number", o[name])))
}

fn axis_request(o: &Map<String, Value>) -> Result<Request, Failure> {
    let action = string(o, "action")?;
    let (action, extra): (AxisAction, &[&str]) = match action {
        "enable" => (AxisAction::Enable, &[]),
        "disable" => (AxisAction::Disable, &[]),
        "reset" => (AxisAction::Reset, &[]),
        "stop" => (AxisAction::Stop, &[]),
        "release" => (AxisAction::Release, &[]),
        "renew" => (AxisAction::Renew, &["lease_ms"]),
        "jog" => (
            AxisAction::Jog {
                velocity: real(o, "velocity")?,
            },
            &["velocity", "lease_ms"],
        ),
        "move_to" => (
            AxisAction::MoveTo {
                position: real(o, "position")?,
            },
            &["position", "lease_ms"],
        ),
        other => {
            return Err(Failure::usage(format!(
                "action = {other:?}: must be one of enable, disable, reset, stop, release, jog, \
                 move_to, renew"
            )));
        }
    };
    let allowed: Vec<&str> = ["name", "action"].iter().chain(extra).copied().collect();
    only(o, &format!("axis {}", action.name()), &allowed)?;
    let name = string(o, "name")?;
    if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
        return Err(Failure::usage(format!(
            "name = {:?}: an axis name has 1..=64 bytes without control characters",
            name.chars().take(40).collect::<String>()
        )));
    }
    let lease_ms = if o.contains_key("lease_ms") {
        let n = number(o, "lease_ms", u64::MAX)?;
        if !LEASE_MS.contains(&n) {
            return Err(Failure::usage(format!(
                "lease_ms = {n}: must be {}..={}",
                LEASE_MS.start(),
                LEASE_MS.end()
            )));
        }
        n
    } else {
        DEFAULT_LEASE_MS
    };
    Ok(Request::Axis {
        name: name.to_string(),
        action,
        lease_ms,
    })
}

/// A JSON object whose keys are unique (its values are not kept: only the check matters).
struct NoDuplicates;

impl<'de> Deserialize<'de> for NoDuplicates {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NoDuplicates;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<NoDuplicates, A::Error> {
                let mut seen = std::collections::HashSet::new();
                while let Some(k) = m.next_key::<String>()? {
                    m.next_value::<serde::de::IgnoredAny>()?;
                    if !seen.insert(k.clone()) {
                        let k: String = k.chars().take(64).collect();
                        return Err(serde::de::Error::custom(format!(
                            "key {k:?} appears more than once; a request names each field once"
                        )));
                    }
                }
                Ok(NoDuplicates)
            }
        }
        d.deserialize_map(V)
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A histogram as the protocol carries it (ns).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histo {
    /// Samples.
    pub count: u64,
    /// Exact sum of the samples (summed from them, not mean × count).
    pub sum: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest sample.
    pub max: u64,
    /// `[le, cumulative count]` for each bound of [`BUCKET_BOUNDS_NS`].
    pub buckets: Vec<(u64, u64)>,
}

impl Histo {
    /// From an HdrHistogram and the exact sum of what was recorded in it. A sample counts
    /// under every bound its HdrHistogram bucket starts at or below: a sample equal to a bound
    /// counts under it, and one up to 0.1 % above may too (the histogram keeps 3 significant
    /// digits; rtcat's are `rtcat_results::new_histogram`).
    pub fn from_hdr(h: &Histogram<u64>, sum: u64) -> Histo {
        let count = h.len();
        let mut buckets: Vec<(u64, u64)> = BUCKET_BOUNDS_NS.iter().map(|&b| (b, 0)).collect();
        if count > 0 {
            for v in h.iter_recorded() {
                let low = h.lowest_equivalent(v.value_iterated_to());
                let n = v.count_at_value();
                for b in buckets.iter_mut().filter(|b| low <= b.0) {
                    b.1 += n;
                }
            }
        }
        let q = |x: f64| {
            if count == 0 {
                0
            } else {
                h.value_at_quantile(x)
            }
        };
        Histo {
            count,
            sum,
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
            max: if count == 0 { 0 } else { h.max() },
            buckets,
        }
    }
}

/// The run's counters in [`Status::counters`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Cycles run.
    pub cycles: u64,
    /// Cycles that ended after the next deadline.
    pub missed_deadlines: u64,
    /// Periods skipped to catch up.
    pub skipped_periods: u64,
    /// Cycles whose frames did not come back in time.
    pub frames_lost: u64,
    /// Cycles with a wrong working counter.
    pub wkc_mismatches: u64,
    /// Cycles with a subdevice not in OP.
    pub not_op_cycles: u64,
    /// Received frames not taken as replies.
    pub rx_rejected: u64,
    /// Frames the link failed to send.
    pub send_errors: u64,
    /// Recoveries that brought the segment back.
    pub recoveries: u64,
    /// Recovery attempts that failed.
    pub failed_recoveries: u64,
    /// CoE emergencies received from the subdevices.
    pub emergencies: u64,
}

/// One subdevice in [`Status::subdevice_states`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubdeviceState {
    /// Position.
    pub position: u16,
    /// AL status (0x0130) as last polled: bits 0..3 the state, bit 4 the error indication.
    pub al_state: u8,
    /// AL status code (0x0134) as last polled.
    #[serde(default)]
    pub al_status_code: u16,
    /// CoE emergencies received from it.
    #[serde(default)]
    pub emergencies: u64,
}

/// One subdevice's system time difference in [`DcStatus`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeDifference {
    /// Position.
    pub position: u16,
    /// Difference (ns).
    pub ns: i64,
}

/// Distributed clocks in [`Status::dc`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DcStatus {
    /// Whether the phase lock holds.
    pub locked: bool,
    /// The reference clock's drift against the master's clock (ppm).
    pub drift_ppm: f64,
    /// Absolute phase error (ns).
    pub phase_error_abs_ns: Histo,
    /// Cycles outside the sync window.
    pub sync_window_violations: u64,
    /// Per subdevice.
    pub system_time_difference_ns: Vec<TimeDifference>,
}

/// One axis in [`Status::axes`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AxisStatus {
    /// `[[axis]] name`.
    pub name: String,
    /// Position of its drive.
    pub position: u16,
    /// CiA 402 state (`"operation enabled"`).
    pub state: String,
    /// Faults seen.
    pub faults: u64,
    /// The last cycle's following error, the master's own: the set-point sent minus the
    /// position actual (counts; 0 when not in operation enabled).
    #[serde(default)]
    pub following_error: i64,
    /// The drive's following error actual 0x60F4 of the same cycle (counts; absent when the
    /// drive does not map it or is not in operation enabled).
    #[serde(default)]
    pub drive_following_error: Option<i64>,
    /// Quick stops commanded because of bad cycles.
    #[serde(default)]
    pub quick_stops: u64,
    /// Bad cycles through which the last set-point was held (no quick stop).
    #[serde(default)]
    pub held_cycles: u64,
    /// |following error| (counts) as a histogram. The master leaves it empty (the cyclic
    /// thread keeps the distribution; summary.json has its percentiles at the end).
    pub following_error_abs: Histo,
    /// Position actual, units (`counts_per_unit`).
    #[serde(default)]
    pub actual: f64,
    /// The manual command holding the axis (`"holding"`, `"jogging"`, `"moving"`,
    /// `"stopping"`); None: it runs its configured program.
    #[serde(default)]
    pub manual: Option<String>,
    /// `min_position`, units (None: not configured).
    #[serde(default)]
    pub min_position: Option<f64>,
    /// `max_position`, units (None: not configured).
    #[serde(default)]
    pub max_position: Option<f64>,
    /// `max_velocity`, units/s (the fastest jog).
    #[serde(default)]
    pub max_velocity: f64,
}

/// The data of a `status` reply. Fields may be added in later versions, never renamed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// [`VERSION`].
    pub version: u32,
    /// `"op"`, `"recovering"`, `"starting"` or `"stopped"`.
    pub state: String,
    /// Layout generation (changes at every re-initialisation).
    pub generation: u32,
    /// Cycle period (ns).
    pub period_ns: u64,
    /// Seconds since the run started.
    pub uptime_s: f64,
    /// Subdevices of the segment.
    pub subdevices: u32,
    /// Process image bytes.
    pub pdi_bytes: u32,
    /// Expected working counter.
    pub expected_wkc: u32,
    /// The run's counters.
    pub counters: Counters,
    /// `wake_ns`, `exec_ns`, `rtt_ns`.
    pub histograms: Histograms,
    /// Per subdevice, from the poller's last reading.
    pub subdevice_states: Vec<SubdeviceState>,
    /// Distributed clocks (None until they are driven).
    pub dc: Option<DcStatus>,
    /// Axes (None without `[[axis]]`).
    pub axes: Option<Vec<AxisStatus>>,
    /// Time in OP and outages, per subdevice and for the segment (None before the first
    /// cycle and from masters that do not count them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability: Option<AvailabilityStatus>,
    /// Devices on the segment where the configuration places none, by the master's count (None
    /// before the first cycle and from masters that do not count them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unexpected_devices: Option<UnexpectedDevices>,
}

/// [`Status::unexpected_devices`]: devices plugged in where the configured order has none
/// (never driven by the master).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnexpectedDevices {
    /// How many now (0: none, or not counted yet since the last bring-up).
    pub count: u16,
    /// The first one's position (None when there are none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_position: Option<u16>,
    /// The most found at any time of the run.
    pub max: u16,
}

/// [`Status::availability`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AvailabilityStatus {
    /// The segment (valid when every subdevice's data is).
    pub segment: Availability,
    /// Each subdevice by position.
    pub subdevices: Vec<Availability>,
}

/// Time with valid data and the outages of one subdevice or of the segment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Availability {
    /// Position (subdevices only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u16>,
    /// Time with valid data (in OP), s.
    pub time_in_op_s: f64,
    /// Cycles with invalid data.
    pub invalid_cycles: u64,
    /// Outages (an open one included).
    pub outages: u64,
    /// Their total duration, ms.
    pub outage_total_ms: f64,
    /// The longest, ms.
    pub outage_max_ms: f64,
    /// Its data is invalid now.
    pub out_now: bool,
}

/// The histograms of [`Status`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histograms {
    /// Wake lateness.
    pub wake_ns: Histo,
    /// Execution time.
    pub exec_ns: Histo,
    /// Round trip.
    pub rtt_ns: Histo,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_round_trip() {
        let all = [
            Request::Status,
            Request::Scan,
            Request::Pdos,
            Request::Counters,
            Request::SdoRead {
                position: 2,
                index: 0x1018,
                sub: 1,
            },
            Request::SdoWrite {
                position: 0,
                index: 0x2000,
                sub: 255,
                data: vec![0x2a, 0, 0xff],
                timeout_ms: None,
            },
            Request::SdoWrite {
                position: 3,
                index: 0x1010,
                sub: 1,
                data: b"save".to_vec(),
                timeout_ms: Some(MAX_SDO_TIMEOUT_MS),
            },
            Request::AlState {
                position: 65535,
                state: AlTarget::SafeOp,
            },
            Request::Note {
                text: "web user=alice: sdo_write".into(),
            },
            Request::FoeRead {
                position: 1,
                name: "params.bin".into(),
                password: 0x1234,
            },
            Request::FoeWrite {
                position: 0,
                name: "fw".into(),
                password: 0,
                boot: false,
            },
            Request::FoeWrite {
                position: 2,
                name: "firmware.efw".into(),
                password: 0x1234,
                boot: true,
            },
            Request::EoeGetIp { position: 3 },
            Request::EoeSetIp {
                position: 3,
                settings: EoeSettings {
                    ip: Some("192.168.10.2/24".into()),
                    dns_name: Some("drive-3".into()),
                    ..EoeSettings::default()
                },
            },
            Request::Axis {
                name: "x".into(),
                action: AxisAction::Jog { velocity: -2.5 },
                lease_ms: 300,
            },
            Request::Axis {
                name: "x".into(),
                action: AxisAction::MoveTo { position: 12.25 },
                lease_ms: 50,
            },
            Request::Axis {
                name: "y".into(),
                action: AxisAction::Renew,
                lease_ms: 2000,
            },
            Request::Axis {
                name: "y".into(),
                action: AxisAction::Reset,
                lease_ms: DEFAULT_LEASE_MS,
            },
            Request::OdList { position: 2 },
            Request::OdObject {
                position: 2,
                index: 0x6040,
            },
        ];
        for r in all {
            assert_eq!(
                Request::parse(&r.to_line()),
                Ok(r.clone()),
                "{}",
                r.to_line()
            );
        }
        // A note changes nothing but needs the write right: it is on the record like a write.
        assert!(Request::Note { text: "x".into() }.is_write());
        assert!(!Request::Status.is_write());
        let r = Request::parse(r#"{"cmd":"sdo_read","position":"1","index":"0x6041","sub":0}"#);
        assert_eq!(
            r,
            Ok(Request::SdoRead {
                position: 1,
                index: 0x6041,
                sub: 0
            })
        );
    }

    #[test]
    fn bad_requests_name_the_field_and_value() {
        let cases = [
            ("", "not a JSON object"),
            ("[1]", "not an array"),
            (r#"{"cmd":"reboot"}"#, "cmd = \"reboot\": unknown command"),
            (r#"{"cmd":7}"#, "cmd = 7: must be a string"),
            (r#"{"position":1}"#, "missing field \"cmd\""),
            (r#"{"cmd":"status","x":1}"#, "unknown field \"x\""),
            (
                r#"{"cmd":"sdo_read","position":70000,"index":1,"sub":0}"#,
                "position = 70000: must be an integer 0..=65535",
            ),
            (
                r#"{"cmd":"sdo_read","position":0,"index":1}"#,
                "missing field \"sub\"",
            ),
            (
                r#"{"cmd":"sdo_read","position":0,"index":-1,"sub":0}"#,
                "index = -1",
            ),
            (
                r#"{"cmd":"sdo_write","position":0,"index":1,"sub":0,"data":"abc"}"#,
                "odd number of hex digits",
            ),
            (
                r#"{"cmd":"sdo_write","position":0,"index":1,"sub":0,"data":""}"#,
                "0 bytes, must be 1..=64",
            ),
            (
                r#"{"cmd":"sdo_write","position":0,"index":1,"sub":0,"data":"01","timeout_ms":0}"#,
                "timeout_ms = 0: must be 1..=120000 ms",
            ),
            (
                r#"{"cmd":"sdo_write","position":0,"index":1,"sub":0,"data":"01","timeout_ms":120001}"#,
                "timeout_ms = 120001: must be 1..=120000 ms",
            ),
            (
                r#"{"cmd":"al_state","position":0,"state":"boot"}"#,
                "state = \"boot\": must be one of",
            ),
            (
                r#"{"cmd":"note","text":""}"#,
                "text = \"\": must be 1..=512",
            ),
            (
                r#"{"cmd":"note","text":"a\nb"}"#,
                "without control characters",
            ),
            (
                r#"{"cmd":"status","cmd":"scan"}"#,
                "key \"cmd\" appears more than once",
            ),
            (
                r#"{"cmd":"foe_write","position":0,"name":""}"#,
                "name = \"\": a device file name has 1..=255 bytes",
            ),
            (
                r#"{"cmd":"foe_read","position":0,"name":"a","password":-1}"#,
                "password = -1",
            ),
            (
                r#"{"cmd":"sdo_write","position":0,"index":1,"sub":0,"data":"00","position":1}"#,
                "key \"position\" appears more than once",
            ),
            (
                r#"{"cmd":"axis","name":"x","action":"fly"}"#,
                "action = \"fly\": must be one of",
            ),
            (
                r#"{"cmd":"axis","name":"x","action":"jog"}"#,
                "missing field \"velocity\"",
            ),
            (
                r#"{"cmd":"axis","name":"x","action":"jog","velocity":"fast"}"#,
                "velocity = \"fast\": must be a number",
            ),
            (
                r#"{"cmd":"axis","name":"x","action":"enable","velocity":1}"#,
                "axis enable: unknown field \"velocity\"",
            ),
            (
                r#"{"cmd":"axis","name":"x","action":"move_to","position":1,"lease_ms":10}"#,
                "lease_ms = 10: must be 50..=2000",
            ),
            (
                r#"{"cmd":"axis","name":"","action":"stop"}"#,
                "an axis name has 1..=64 bytes",
            ),
        ];
        for (line, want) in cases {
            let e = Request::parse(line).unwrap_err();
            assert_eq!(e.kind, FailureKind::Usage);
            assert!(e.message.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn replies_round_trip_and_fail_as_the_contract_says() {
        let r = Reply::ok(serde_json::json!([1, 2]));
        assert_eq!(r.to_line(), r#"{"ok":true,"data":[1,2]}"#);
        let f = Reply::fail(&Failure::usage("position = 9: no subdevice"));
        assert_eq!(
            f.to_line(),
            r#"{"ok":false,"kind":"usage","error":"position = 9: no subdevice"}"#
        );
        let back: Reply = serde_json::from_str(&f.to_line()).unwrap();
        assert_eq!(back.into_result().unwrap_err().kind, FailureKind::Usage);
    }

    #[test]
    fn histograms_keep_the_exact_sum_and_cumulative_buckets() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        let samples = [500u64, 1_000, 1_500, 3_000, 2_000_000, 7_000_000_000];
        for s in samples {
            h.record(s).unwrap();
        }
        let x = Histo::from_hdr(&h, samples.iter().sum());
        assert_eq!(x.count, 6);
        assert_eq!(x.sum, 7_002_006_000);
        assert_eq!(x.buckets.len(), BUCKET_BOUNDS_NS.len());
        let at = |le: u64| x.buckets.iter().find(|b| b.0 == le).unwrap().1;
        assert_eq!(at(1_000), 2);
        assert_eq!(at(2_000), 3);
        assert_eq!(at(5_000), 4);
        assert_eq!(at(2_000_000), 5);
        assert_eq!(at(1_000_000_000), 5);
        assert!(x.buckets.windows(2).all(|w| w[0].1 <= w[1].1));
        assert!(x.max >= 7_000_000_000 && x.p50 >= 1_000 && x.p50 <= 1_501);
        let empty = Histo::from_hdr(&Histogram::<u64>::new(3).unwrap(), 0);
        assert_eq!((empty.count, empty.p99, empty.max), (0, 0, 0));
    }

    #[test]
    fn status_has_the_contract_shape() {
        let v = serde_json::to_value(Status::default()).unwrap();
        for k in [
            "version",
            "state",
            "generation",
            "period_ns",
            "uptime_s",
            "subdevices",
            "pdi_bytes",
            "expected_wkc",
            "counters",
            "histograms",
            "subdevice_states",
            "dc",
            "axes",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert!(v["dc"].is_null() && v["axes"].is_null());
        assert!(v["histograms"]["rtt_ns"]["buckets"].is_array());
        assert!(v["counters"]["emergencies"].is_u64());
    }

    proptest! {
        // Any line: a request or a usage failure, never a panic.
        #[test]
        fn any_line_parses_or_fails_as_usage(line in ".{0,300}") {
            if let Err(e) = Request::parse(&line) {
                prop_assert_eq!(e.kind, FailureKind::Usage);
            }
        }

        #[test]
        fn any_object_parses_or_fails_as_usage(
            cmd in prop_oneof![Just("sdo_read".to_string()), Just("sdo_write".to_string()), Just("al_state".to_string()), Just("status".to_string()), ".{0,10}"],
            pos in proptest::option::of(any::<i64>()),
            data in proptest::option::of("[0-9a-fx ]{0,140}"),
            state in proptest::option::of(".{0,8}"),
        ) {
            let mut o = serde_json::Map::new();
            o.insert("cmd".into(), cmd.into());
            if let Some(p) = pos { o.insert("position".into(), p.into()); }
            o.insert("index".into(), 0x1000.into());
            o.insert("sub".into(), 0.into());
            if let Some(d) = data { o.insert("data".into(), d.into()); }
            if let Some(s) = state { o.insert("state".into(), s.into()); }
            if let Err(e) = Request::from_value(&Value::Object(o)) {
                prop_assert_eq!(e.kind, FailureKind::Usage);
            }
        }
    }

    #[test]
    fn an_eoe_set_ip_sets_something_and_its_texts_are_bounded() {
        let e = Request::parse(r#"{"cmd":"eoe_set_ip","position":1}"#).unwrap_err();
        assert!(e.message.contains("nothing to set"), "{}", e.message);
        let e = Request::parse(r#"{"cmd":"eoe_set_ip","position":1,"ip":""}"#).unwrap_err();
        assert!(e.message.starts_with("ip = \"\""), "{}", e.message);
        let e = Request::parse(r#"{"cmd":"eoe_set_ip","position":1,"dns":7}"#).unwrap_err();
        assert!(e.message.contains("must be a string"), "{}", e.message);
        let e = Request::parse(r#"{"cmd":"eoe_set_ip","position":1,"ipv6":"x"}"#).unwrap_err();
        assert!(
            e.message.contains("unknown field \"ipv6\""),
            "{}",
            e.message
        );
        assert!(
            Request::parse(r#"{"cmd":"eoe_set_ip","position":1,"mac":"02:00:00:00:00:01"}"#)
                .is_ok_and(|r| r.is_write())
        );
        assert!(
            Request::parse(r#"{"cmd":"eoe_get_ip","position":1}"#).is_ok_and(|r| !r.is_write())
        );
    }

    #[test]
    fn only_a_write_goes_to_boot_and_boot_is_a_boolean() {
        let w = r#"{"cmd":"foe_write","position":1,"name":"fw","boot":true}"#;
        assert!(matches!(
            Request::parse(w),
            Ok(Request::FoeWrite { boot: true, .. })
        ));
        let e =
            Request::parse(r#"{"cmd":"foe_write","position":1,"name":"fw","boot":1}"#).unwrap_err();
        assert!(e.message.contains("boot = 1"), "{}", e.message);
        assert!(
            Request::parse(r#"{"cmd":"foe_read","position":1,"name":"fw","boot":true}"#).is_err()
        );
        // A plain write's line is what it was before the field existed.
        let plain = Request::FoeWrite {
            position: 1,
            name: "fw".into(),
            password: 0,
            boot: false,
        };
        assert!(!plain.to_line().contains("boot"));
    }
}
