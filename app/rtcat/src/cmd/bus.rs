//! The bus commands: `rtcat scan`, `pdos`, `sii`, `counters`, `regs` (IgH's `ethercat` tool is
//! the model). They open the segment on a NIC or the in-process simulator, ask
//! [`rtcat_master::diag`] and print a table, or JSON with `--json`. Exit 2 for the user's input
//! (a position, address or length out of range, an unknown interface, a bad file), 1 for a bus
//! failure.

use crate::cli::BusArgs;
use crate::outcome::{Failure, Outcome};
use clap::Args;
use ecsim::{Faults, SegmentSpec};
use rtcat_control::protocol::FailureKind;
use rtcat_control::{Client, ClientError, Request};
use rtcat_master::config::Config;
use rtcat_master::diag::{self, ErrorCounters, PortKind, PortState, Probe, ScanEntry};
use rtcat_master::layout::{Direction, Layout};
use rtcat_master::sii::{FmmuUsage, Sii, SmUsage};
use rtcat_master::{Session, Target};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ScanArgs {
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct PdosArgs {
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct SiiArgs {
    /// Position of the subdevice (default: all)
    #[arg(value_name = "POS")]
    pub position: Option<u32>,
    /// Write the image's bytes to stdout (needs POS; refused on a terminal)
    #[arg(long, requires = "position", conflicts_with = "json")]
    pub raw: bool,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct CountersArgs {
    /// Read again every SECONDS (default 1) and print what changed, until SIGINT/SIGTERM
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "1")]
    pub watch: Option<f64>,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct RegsArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// Register address, 0..=0xffff (hex with 0x, or decimal)
    #[arg(value_name = "ADDR", value_parser = parse_number)]
    pub address: u32,
    /// Bytes to read, 1..=4096, ADDR + LEN at most 0x10000
    #[arg(value_name = "LEN", value_parser = parse_number)]
    pub length: u32,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct AliasArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// The station alias to write, 0..=0xffff (hex with 0x, or decimal; 0: none)
    #[arg(value_name = "ALIAS", value_parser = parse_number)]
    pub alias: u32,
    #[command(flatten)]
    pub bus: BusArgs,
}

/// A number in decimal or with a `0x` prefix in hex.
pub fn parse_number(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a number (decimal, or hex with 0x)"))
}

impl From<diag::Error> for Failure {
    fn from(e: diag::Error) -> Self {
        if e.is_usage() {
            Failure::Usage(e.to_string())
        } else {
            Failure::Runtime(e.to_string())
        }
    }
}

/// Ask the running master on `bus.control` (`--control SOCK`): the reply's data, or the
/// master's failure (usage → exit 2, runtime → exit 1). No master at the path is exit 1.
pub(crate) fn remote(bus: &BusArgs, request: &Request) -> Result<serde_json::Value, Failure> {
    remote_within(bus, request, rtcat_control::client::DEFAULT_TIMEOUT)
}

/// [`remote`], waiting up to `timeout` for the reply.
pub(crate) fn remote_within(
    bus: &BusArgs,
    request: &Request,
    timeout: std::time::Duration,
) -> Result<serde_json::Value, Failure> {
    let path = bus
        .control
        .as_deref()
        .expect("remote() with --control only");
    let mut c = Client::connect(path)
        .map_err(|e| Failure::Runtime(e.to_string()))?
        .with_timeout(timeout);
    c.call(request).map_err(|e| match e {
        ClientError::Failed(f) if f.kind == FailureKind::Usage => Failure::Usage(f.message),
        e => Failure::Runtime(e.to_string()),
    })
}

/// `--duration SECS` of a command that runs until stopped: `None` (until SIGINT/SIGTERM) or a
/// positive number of seconds (at most 10^7).
pub(crate) fn run_for(secs: Option<f64>) -> Result<Option<std::time::Duration>, Failure> {
    match secs {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e7 => {
            Ok(Some(std::time::Duration::from_secs_f64(s)))
        }
        Some(s) => Err(Failure::Usage(format!(
            "--duration {s}: a number of seconds > 0"
        ))),
    }
}

/// `T` from a reply's data (the master and this binary speak the same version).
pub(crate) fn decode<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, Failure> {
    serde_json::from_value(v)
        .map_err(|e| Failure::Runtime(format!("control socket: unexpected reply data: {e}")))
}

/// The configuration, and the session on the target the arguments name.
pub(crate) fn open(bus: &BusArgs) -> Result<(Session, Config), Failure> {
    if bus.control.is_some() {
        return Err(Failure::Usage(
            "--control: this command reads the bus itself; over the control socket: scan, \
             pdos, counters, sdo read, sdo write"
                .into(),
        ));
    }
    let cfg = match &bus.config {
        Some(p) => {
            crate::config::Config::load(p)
                .map_err(|e| Failure::Usage(e.to_string()))?
                .master
        }
        None => Config::default(),
    };
    let target = if bus.sim {
        let spec = match &bus.segment {
            Some(p) => SegmentSpec::load(p).map_err(|e| Failure::Usage(e.to_string()))?,
            None => SegmentSpec::reference(),
        };
        Target::Sim {
            spec,
            faults: Faults::new(),
        }
    } else {
        let iface = bus
            .iface
            .clone()
            .unwrap_or_else(|| cfg.bus.interface.clone());
        rttune::netif::check_exists(&rttune::SysRoot::live(), &iface)
            .map_err(|why| Failure::Usage(format!("--iface / bus.interface: {why}")))?;
        Target::Iface(iface)
    };
    let s = Session::open(&target, &cfg).map_err(|e| {
        if e.is_usage() {
            Failure::Usage(e.to_string())
        } else {
            Failure::Runtime(e.to_string())
        }
    })?;
    Ok((s, cfg))
}

/// A probe with at least one subdevice.
fn probe<'a>(s: &'a Session, cfg: &Config) -> Result<Probe<'a>, Failure> {
    let p = Probe::new(s.maindevice(), cfg)?;
    if p.count() == 0 {
        return Err(diag::Error::NoSubdevices.into());
    }
    Ok(p)
}

pub(crate) fn emit(s: &str) {
    // A closed stdout ends the command quietly (SIGPIPE is at its default for these commands).
    let _ = crate::console::stdout(s);
}

pub(crate) fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("plain data serializes");
    s.push('\n');
    s
}

/// Rows of cells as left-aligned columns, two spaces apart.
pub(crate) fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn hex32(v: Option<u32>) -> String {
    v.map_or_else(|| "?".into(), |v| format!("{v:#010x}"))
}

/// A port in a word: `-` not implemented, `up` link and open, `closed` loop closed without
/// link, `up/closed` link but closed, `down` open without link.
pub fn port_word(p: &PortState) -> &'static str {
    if p.kind == PortKind::NotImplemented {
        return "-";
    }
    match (p.link, p.loop_closed) {
        (true, false) => "up",
        (false, true) => "closed",
        (true, true) => "up/closed",
        (false, false) => "down",
    }
}

/// The scan as a table; AL status codes and read errors on indented lines below their row.
pub fn scan_table(entries: &[ScanEntry]) -> String {
    let mut rows = vec![
        [
            "POS", "ADDR", "ALIAS", "STATE", "VENDOR", "PRODUCT", "REVISION", "SERIAL", "PORTS",
            "DC", "SM", "FMMU", "MAILBOX", "NAME",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let mut notes: Vec<(usize, Vec<String>)> = Vec::new();
    for e in entries {
        let state = if e.al_error {
            format!("{}+ERR", e.al_state)
        } else {
            e.al_state.to_string()
        };
        let ports = e
            .ports
            .iter()
            .map(|p| format!("{}:{}", p.port, port_word(p)))
            .collect::<Vec<_>>()
            .join(" ");
        rows.push(vec![
            e.position.to_string(),
            format!("{:#06x}", e.station_address),
            format!("{:#06x}", e.alias),
            state,
            hex32(e.vendor_id),
            hex32(e.product_code),
            hex32(e.revision),
            e.serial.map_or_else(|| "?".into(), |s| s.to_string()),
            if ports.is_empty() { "?".into() } else { ports },
            match (e.dc.supported, e.dc.width_64) {
                (false, _) => "no".into(),
                (true, true) => "64".into(),
                (true, false) => "32".into(),
            },
            e.sync_managers.to_string(),
            e.fmmus.to_string(),
            if e.mailbox_protocols.is_empty() {
                "-".into()
            } else {
                e.mailbox_protocols.join(",")
            },
            e.name.clone().unwrap_or_else(|| "?".into()),
        ]);
        let mut n = Vec::new();
        if e.al_error || e.al_status_code != 0 {
            n.push(format!(
                "AL status code {:#06x}: {}",
                e.al_status_code, e.al_status_text
            ));
        }
        n.extend(e.errors.iter().map(|x| format!("error: {x}")));
        if !n.is_empty() {
            notes.push((rows.len() - 1, n));
        }
    }
    let t = table(&rows);
    let mut out = String::new();
    for (i, line) in t.lines().enumerate() {
        out.push_str(line);
        out.push('\n');
        if let Some((_, n)) = notes.iter().find(|(r, _)| *r == i) {
            for l in n {
                let _ = writeln!(out, "    {l}");
            }
        }
    }
    out
}

/// `rtcat scan`.
pub fn scan(a: ScanArgs) -> Outcome {
    if a.bus.control.is_some() {
        // The master's JSON is printed as it came (the same serialisation of the same
        // `ScanEntry`); the table needs the typed entries.
        let v = remote(&a.bus, &Request::Scan)?;
        emit(&if a.bus.json {
            json(&v)
        } else {
            scan_table(&decode::<Vec<ScanEntry>>(v)?)
        });
        return Ok(());
    }
    let (s, cfg) = open(&a.bus)?;
    let p = probe(&s, &cfg)?;
    let entries = p.scan();
    emit(&if a.bus.json {
        json(&entries)
    } else {
        scan_table(&entries)
    });
    Ok(())
}

/// The layout as IgH's `ethercat pdos` shows it, with each entry's place in the image.
pub fn layout_text(l: &Layout) -> String {
    let mut out = String::new();
    for sd in &l.subdevices {
        let _ = writeln!(
            out,
            "Subdevice {} ({}), address {:#06x}, mapping from {}: inputs {} at byte {}, outputs {} at byte {}",
            sd.position,
            if sd.name.is_empty() { "?" } else { &sd.name },
            sd.address,
            match sd.mapping {
                rtcat_master::layout::MappingSource::Coe => "CoE",
                rtcat_master::layout::MappingSource::Sii => "SII",
            },
            bytes(sd.input_bytes),
            sd.input_offset,
            bytes(sd.output_bytes),
            sd.output_offset,
        );
        for pdo in &l.pdos[sd.pdos.clone()] {
            let _ = writeln!(
                out,
                "  SM{} {} {:#06x}{}",
                pdo.sync_manager,
                match pdo.direction {
                    Direction::Inputs => "TxPDO",
                    Direction::Outputs => "RxPDO",
                },
                pdo.index,
                pdo.name
                    .as_deref()
                    .map(|n| format!(" {n:?}"))
                    .unwrap_or_default()
            );
            // Fixed widths, so that the columns line up across PDOs and subdevices.
            for e in &l.entries[pdo.entries.clone()] {
                let _ = writeln!(
                    out,
                    "    {:<10}  {:<22}  {:<7}  {:<7}  {}",
                    e.address(),
                    format!(
                        "bit {} = byte {}.{}",
                        e.bit_offset,
                        e.bit_offset / 8,
                        e.bit_offset % 8
                    ),
                    format!("{} bit{}", e.bits, if e.bits == 1 { "" } else { "s" }),
                    e.data_type.to_string(),
                    if e.index == 0 {
                        "(gap)"
                    } else {
                        e.name.as_str()
                    }
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "Process image: {} of inputs, {} of outputs",
        bytes(l.input_bytes),
        bytes(l.output_bytes)
    );
    out
}

fn bytes(n: u32) -> String {
    format!("{n} byte{}", if n == 1 { "" } else { "s" })
}

/// `rtcat pdos`.
pub fn pdos(a: PdosArgs) -> Outcome {
    let l = if a.bus.control.is_some() {
        decode::<Layout>(remote(&a.bus, &Request::Pdos)?)?
    } else {
        // With --config, the layout `run` would bring up: the [[device]] mapping applied.
        let (s, cfg) = open(&a.bus)?;
        if a.bus.config.is_some() {
            rtcat_master::session::read_configured_layout(s.maindevice(), &cfg)?
        } else {
            rtcat_master::session::read_layout(s.maindevice())?
        }
    };
    emit(&if a.bus.json {
        json(&l)
    } else {
        layout_text(&l)
    });
    Ok(())
}

fn opt(s: &Option<String>) -> String {
    s.as_deref()
        .map_or_else(|| "-".into(), |s| format!("{s:?}"))
}

/// A decoded SII in words.
pub fn sii_text(position: u16, s: &Sii, truncated: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "=== Subdevice {position} ===");
    let _ = writeln!(
        o,
        "Identity: vendor {:#010x}, product {:#010x}, revision {:#010x}, serial {}",
        s.vendor_id, s.product_code, s.revision, s.serial
    );
    let _ = writeln!(
        o,
        "Alias {:#06x}, EEPROM {} bytes, SII version {}{}",
        s.alias,
        s.eeprom_bytes,
        s.version,
        if truncated {
            " (read cut at the size bound: no end marker)"
        } else {
            ""
        }
    );
    let mbx = |m: &Option<rtcat_master::sii::Mailbox>| match m {
        Some(m) => format!(
            "receive {:#06x}+{}, send {:#06x}+{}",
            m.rx_offset, m.rx_size, m.tx_offset, m.tx_size
        ),
        None => "none".into(),
    };
    let _ = writeln!(
        o,
        "Mailbox: {}; bootstrap: {}",
        mbx(&s.mailbox),
        mbx(&s.bootstrap_mailbox)
    );
    let p = s.protocols.names();
    let _ = writeln!(
        o,
        "Protocols: {}",
        if p.is_empty() {
            "none".into()
        } else {
            p.join(" ")
        }
    );
    let _ = writeln!(o, "Strings ({}):", s.strings.len());
    for (i, st) in s.strings.iter().enumerate() {
        let _ = writeln!(o, "  {:>3} {st:?}", i + 1);
    }
    match &s.general {
        Some(g) => {
            let _ = writeln!(
                o,
                "General: name {}, order {}, group {}, image {}",
                opt(&g.name),
                opt(&g.order),
                opt(&g.group),
                opt(&g.image)
            );
            let _ = writeln!(
                o,
                "  CoE details {:#04x}, FoE details {:#04x}, EoE details {:#04x}, flags {:#04x}, \
                 E-bus current {} mA, physical ports {:#06x}",
                g.coe_details, g.foe_details, g.eoe_details, g.flags, g.ebus_current_ma, g.ports
            );
        }
        None => o.push_str("General: none\n"),
    }
    let f: Vec<String> = s
        .fmmus
        .iter()
        .enumerate()
        .map(|(i, u)| {
            format!(
                "{i}:{}",
                match u {
                    FmmuUsage::Unused => "unused".to_string(),
                    FmmuUsage::Outputs => "outputs".into(),
                    FmmuUsage::Inputs => "inputs".into(),
                    FmmuUsage::SyncManagerStatus => "sm-status".into(),
                    FmmuUsage::Other(v) => format!("{v:#04x}"),
                }
            )
        })
        .collect();
    let _ = writeln!(
        o,
        "FMMUs: {}",
        if f.is_empty() {
            "none".into()
        } else {
            f.join(" ")
        }
    );
    o.push_str("Sync managers:\n");
    for (i, sm) in s.sync_managers.iter().enumerate() {
        let _ = writeln!(
            o,
            "  SM{i}: start {:#06x}, length {}, control {:#04x}, enable {:#04x}, {}",
            sm.start,
            sm.length,
            sm.control,
            sm.enable,
            match sm.usage {
                SmUsage::Unused => "unused".to_string(),
                SmUsage::MailboxOut => "mailbox out".into(),
                SmUsage::MailboxIn => "mailbox in".into(),
                SmUsage::Outputs => "outputs".into(),
                SmUsage::Inputs => "inputs".into(),
                SmUsage::Other(v) => format!("type {v:#04x}"),
            }
        );
    }
    o.push_str("PDOs:\n");
    for pdo in &s.pdos {
        let _ = writeln!(
            o,
            "  {} {:#06x} {}, SM{}, flags {:#06x}, {} bits",
            match pdo.direction {
                Direction::Inputs => "TxPDO",
                Direction::Outputs => "RxPDO",
            },
            pdo.index,
            opt(&pdo.name),
            if pdo.sync_manager == 0xff {
                "-".to_string()
            } else {
                pdo.sync_manager.to_string()
            },
            pdo.flags,
            pdo.bits()
        );
        for e in &pdo.entries {
            let _ = writeln!(
                o,
                "    {:#06x}:{:02x}  {:>2} bit{}  {}  {}",
                e.index,
                e.subindex,
                e.bits,
                if e.bits == 1 { " " } else { "s" },
                rtcat_master::layout::DataType::from_code(e.data_type),
                opt(&e.name)
            );
        }
    }
    if !s.dc.is_empty() {
        o.push_str("DC modes:\n");
        for d in &s.dc {
            let _ = writeln!(
                o,
                "  {}: AssignActivate {:#06x}, SYNC0 cycle {} ns (factor {}), shift {} ns; SYNC1 factor {}, shift {} ns",
                opt(&d.name),
                d.assign_activate,
                d.cycle_time_0,
                d.sync0_cycle_factor,
                d.shift_time_0,
                d.sync1_cycle_factor,
                d.shift_time_1
            );
        }
    }
    for (kind, words) in &s.other_categories {
        let _ = writeln!(o, "Other category: type {kind}, {words} words");
    }
    o
}

/// One subdevice's SII for `--json`.
#[derive(serde::Serialize)]
struct SiiJson<'a> {
    position: u16,
    bytes: usize,
    truncated: bool,
    sii: &'a Sii,
}

/// `rtcat sii`.
pub fn sii(a: SiiArgs) -> Outcome {
    if a.raw && std::io::stdout().is_terminal() {
        return Err(Failure::Usage(
            "--raw writes binary data: redirect stdout to a file or a pipe \
                 (rtcat sii POS --raw > sii.bin)"
                .into(),
        ));
    }
    let (s, cfg) = open(&a.bus)?;
    let p = probe(&s, &cfg)?;
    let positions: Vec<u16> = match a.position {
        Some(pos) => vec![p.check_position(pos)?],
        None => (0..p.count()).collect(),
    };
    let mut images = Vec::with_capacity(positions.len());
    for pos in positions {
        images.push(p.read_sii(pos, None)?);
    }
    if a.raw {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        return out
            .write_all(&images[0].bytes)
            .and_then(|()| out.flush())
            .map_err(|e| Failure::Runtime(format!("stdout: {e}")));
    }
    let mut decoded = Vec::with_capacity(images.len());
    for img in &images {
        decoded.push((img, img.parse()?));
    }
    emit(&if a.bus.json {
        json(
            &decoded
                .iter()
                .map(|(img, s)| SiiJson {
                    position: img.position,
                    bytes: img.bytes.len(),
                    truncated: img.truncated,
                    sii: s,
                })
                .collect::<Vec<_>>(),
        )
    } else {
        decoded
            .iter()
            .map(|(img, s)| sii_text(img.position, s, img.truncated))
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

/// The error counters as a table, one row per implemented port; the processing unit and PDI
/// counters on the subdevice's first row.
pub fn counters_table(all: &[ErrorCounters]) -> String {
    let mut rows = vec![
        [
            "POS",
            "PORT",
            "INVALID",
            "RX-ERR",
            "FORWARDED",
            "LOST-LINK",
            "PU-ERR",
            "PDI-ERR",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let n = |v: u8| {
        if v == diag::counters::SATURATED {
            "255+".to_string()
        } else {
            v.to_string()
        }
    };
    for c in all {
        for (i, p) in c.ports.iter().enumerate() {
            let mut r = vec![
                if i == 0 {
                    c.position.to_string()
                } else {
                    String::new()
                },
                p.port.to_string(),
                n(p.invalid_frame),
                n(p.rx_error),
                n(p.forwarded),
                n(p.lost_link),
            ];
            if i == 0 {
                r.push(n(c.processing_unit));
                r.push(n(c.pdi));
            }
            rows.push(r);
        }
    }
    table(&rows)
}

/// What changed between two readings, one line per counter.
pub fn counter_changes(old: &[ErrorCounters], new: &[ErrorCounters]) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = |pos: u16, what: String, a: u8, b: u8| {
        if a != b {
            let d = i16::from(b) - i16::from(a);
            out.push(format!("pos {pos} {what}: {a} -> {b} ({d:+})"));
        }
    };
    for (o, n) in old.iter().zip(new) {
        for (po, pn) in o.ports.iter().zip(&n.ports) {
            let p = pn.port;
            line(
                n.position,
                format!("port {p} invalid frames"),
                po.invalid_frame,
                pn.invalid_frame,
            );
            line(
                n.position,
                format!("port {p} RX errors"),
                po.rx_error,
                pn.rx_error,
            );
            line(
                n.position,
                format!("port {p} forwarded errors"),
                po.forwarded,
                pn.forwarded,
            );
            line(
                n.position,
                format!("port {p} lost links"),
                po.lost_link,
                pn.lost_link,
            );
        }
        line(
            n.position,
            "processing unit errors".into(),
            o.processing_unit,
            n.processing_unit,
        );
        line(n.position, "PDI errors".into(), o.pdi, n.pdi);
    }
    if old.len() != new.len() {
        out.push(format!(
            "the segment now has {} subdevices (was {})",
            new.len(),
            old.len()
        ));
    }
    out
}

#[derive(serde::Serialize)]
struct Sample<'a> {
    unix_ms: u128,
    subdevices: &'a [ErrorCounters],
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// `rtcat counters`.
pub fn counters(a: CountersArgs) -> Outcome {
    let period = match a.watch {
        None => None,
        Some(s) if s.is_finite() && (0.05..=3600.0).contains(&s) => {
            Some(Duration::from_secs_f64(s))
        }
        Some(s) => {
            return Err(Failure::Usage(format!(
                "--watch {s}: the period must be 0.05..=3600 seconds"
            )));
        }
    };
    // One reading: the bus's own, or the running master poller's last one.
    let mut read: Box<dyn FnMut() -> Result<Vec<ErrorCounters>, Failure>> =
        if a.bus.control.is_some() {
            let bus = &a.bus;
            Box::new(move || {
                let v = remote(bus, &Request::Counters)?;
                decode(v.get("subdevices").cloned().unwrap_or_default())
            })
        } else {
            let (s, cfg) = open(&a.bus)?;
            probe(&s, &cfg)?;
            Box::new(move || {
                Ok(Probe::new(s.maindevice(), &cfg).and_then(|p| p.all_error_counters())?)
            })
        };
    let first = read()?;
    let Some(period) = period else {
        emit(&if a.bus.json {
            json(&first)
        } else {
            counters_table(&first)
        });
        return Ok(());
    };
    // --watch: the first reading in full, then what changed (JSON: one line per reading).
    crate::signals::install(crate::signals::Second::Kills)
        .map_err(|e| Failure::Runtime(format!("signal handlers: {e}")))?;
    let sample = |c: &[ErrorCounters]| {
        let mut l = serde_json::to_string(&Sample {
            unix_ms: unix_ms(),
            subdevices: c,
        })
        .expect("plain data serializes");
        l.push('\n');
        l
    };
    emit(&if a.bus.json {
        sample(&first)
    } else {
        counters_table(&first)
    });
    let mut last = first;
    let stop = crate::signals::handle();
    loop {
        let until = std::time::Instant::now() + period;
        while !stop.is_requested() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20).min(period));
        }
        if stop.is_requested() {
            return Ok(());
        }
        // A bus that fails while watched is reported and read again next period.
        let now = match read() {
            Ok(c) => c,
            Err(Failure::Usage(e) | Failure::Runtime(e)) => {
                crate::say!("rtcat: {e}");
                continue;
            }
            Err(other) => return Err(other),
        };
        if a.bus.json {
            emit(&sample(&now));
        } else {
            let stamp = crate::output::utc_stamp(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            );
            let lines: String = counter_changes(&last, &now)
                .into_iter()
                .map(|l| format!("{stamp}  {l}\n"))
                .collect();
            if !lines.is_empty() {
                emit(&lines);
            }
        }
        last = now;
    }
}

/// A hex dump, 16 bytes a line, addresses from `addr`.
pub fn hex_dump(addr: u32, data: &[u8]) -> String {
    let mut o = String::new();
    for (i, chunk) in data.chunks(16).enumerate() {
        let _ = write!(o, "{:04x}:", addr as usize + 16 * i);
        for b in chunk {
            let _ = write!(o, " {b:02x}");
        }
        o.push('\n');
    }
    o
}

#[derive(serde::Serialize)]
struct RegsJson<'a> {
    position: u32,
    address: u32,
    length: usize,
    /// The bytes in hex, two digits each, in address order.
    hex: &'a str,
}

#[derive(serde::Serialize)]
struct AliasJson {
    position: u32,
    /// The alias the SII had.
    old: u16,
    /// The alias written (SII word 4, with the configuration area's checksum).
    alias: u16,
    /// Register 0x0012 after the ESC reloaded its configuration area.
    register: u16,
}

/// `rtcat alias`: the station alias written into a subdevice's SII (what `ethercat alias`
/// does for IgH). rtcat takes a device's alias as part of what it is (a recovery or a
/// re-initialisation refuses a unit with another alias than it was brought up with), so a spare
/// fitted for a unit whose alias was set gets it here.
pub fn alias(a: AliasArgs) -> Outcome {
    let Ok(alias) = u16::try_from(a.alias) else {
        return Err(Failure::Usage(format!(
            "ALIAS {:#x}: a station alias is 16 bits (0..=0xffff)",
            a.alias
        )));
    };
    let (s, cfg) = open(&a.bus)?;
    let p = probe(&s, &cfg)?;
    let position = p.check_position(a.position)?;
    let (old, register) = p.write_alias(position, alias)?;
    if register != alias {
        return Err(Failure::Runtime(format!(
            "position {position}: SII word 4 holds {alias:#06x}, but register 0x0012 reads \
             {register:#06x} after the reload: power-cycle the device"
        )));
    }
    emit(&if a.bus.json {
        json(&AliasJson {
            position: a.position,
            old,
            alias,
            register,
        })
    } else {
        format!(
            "position {position}: station alias {old:#06x} -> {alias:#06x} (SII word 4 and the \
             checksum in word 7 written; register 0x0012 reads {register:#06x})\n"
        )
    });
    Ok(())
}

/// `rtcat regs`.
pub fn regs(a: RegsArgs) -> Outcome {
    // The range is checked before the bus is opened: a bad argument needs no segment.
    if a.address > 0xffff {
        return Err(Failure::Usage(format!(
            "ADDR {:#x}: registers are 0x0000..=0xffff (a 16-bit address)",
            a.address
        )));
    }
    let len = a.length as usize;
    if len == 0 || len > diag::MAX_REGISTER_READ {
        return Err(Failure::Usage(format!(
            "LEN {len}: must be 1..={}",
            diag::MAX_REGISTER_READ
        )));
    }
    if a.address as usize + len > 0x10000 {
        return Err(Failure::Usage(format!(
            "ADDR {:#06x} + LEN {len} ends at {:#x}, past the 64 KiB register space",
            a.address,
            a.address as usize + len
        )));
    }
    let (s, cfg) = open(&a.bus)?;
    let p = probe(&s, &cfg)?;
    let data = p.registers(a.position, a.address, len)?;
    emit(&if a.bus.json {
        json(&RegsJson {
            position: a.position,
            address: a.address,
            length: len,
            hex: &data.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        })
    } else {
        hex_dump(a.address, &data)
    });
    Ok(())
}
