//! ENI files: the EtherCAT Network Information of ETG.2100, the XML a configuration tool
//! exports for a whole network (root `EtherCATConfig`, `Config/Master`, one `Config/Slave` per
//! subdevice in bus order, `Config/Cyclic`, `Config/ProcessImage`).
//!
//! Read: per `Slave` its `Info` (name, addresses, identity), `ProcessData` (`Send`/`Recv` bit
//! ranges in the logical image, `Sm0`..`Sm7` with the PDOs assigned, `RxPdo`/`TxPdo` with their
//! entries), `Mailbox` (protocols, `CoE/InitCmds`, the init commands of the other protocols) and
//! its register `InitCmds`; the master's register `InitCmds`; `Cyclic` (`CycleTime` and the
//! datagrams of each `Frame`). Not read (skipped, never an error): `DC`, `ProcessImage`
//! (variable names of the tool's image), `Master/MailboxStates`, `EoE` and other master
//! settings, vendor extensions. What of it rtcat can run is decided by
//! [`EniFile::to_config`](crate::EniFile::to_config), which lists the rest.
//!
//! The same bounds as an ESI file: [`MAX_FILE_BYTES`], [`crate::MAX_ATTRIBUTES`],
//! [`crate::MAX_DEPTH`], the node limit, no DTD; numbers in the ESI forms (decimal, `#x`, `0x`).

use crate::parse::{P, R, child, children, shown, text_of, with_document};
use crate::*;
use roxmltree::Node;

/// A parsed ENI file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EniFile {
    /// `Config/Master/Info/Name`, when given.
    pub master: Option<String>,
    /// `Config/Cyclic/CycleTime` (µs) of the first `Cyclic`, when given.
    pub cycle_time_us: Option<u32>,
    /// The subdevices, in file order.
    pub slaves: Vec<EniSlave>,
    /// `Config/Master/InitCmds`: register commands the tool's master sends at transitions.
    pub master_init_cmds: Vec<RegisterCmd>,
    /// `Config/Cyclic/Frame/Cmd`: the datagrams of the tool's cyclic frames, in order.
    pub cyclic: Vec<CyclicCmd>,
}

/// One `Config/Slave`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EniSlave {
    /// `Info/Name`.
    pub name: String,
    /// `Info/PhysAddr`: the station address the tool assigns.
    pub phys_addr: Option<u16>,
    /// `Info/AutoIncAddr` as a 16-bit value (0 for the first subdevice, 0xFFFF = -1 for the
    /// second, ...).
    pub auto_inc_addr: Option<u16>,
    /// Position in the segment (0 = first): the negated `AutoIncAddr` (ETG.1000.4 auto-increment
    /// addressing: each subdevice increments the address, the one that sees 0 answers), or the
    /// index in the file when the `Info` has none.
    pub position: u16,
    /// `Info/VendorId`.
    pub vendor_id: u32,
    /// `Info/ProductCode`.
    pub product_code: u32,
    /// `Info/RevisionNo`.
    pub revision: Option<u32>,
    /// `Info/SerialNo`.
    pub serial: Option<u32>,
    /// `ProcessData`.
    pub process_data: EniProcessData,
    /// `Mailbox`, when the subdevice has one.
    pub mailbox: Option<EniMailbox>,
    /// `InitCmds`: register commands (ESC setup: addresses, SMs, FMMUs, AL control).
    pub init_cmds: Vec<RegisterCmd>,
    /// Whether the slave has a `DC` element (distributed-clock settings; not read).
    pub has_dc: bool,
    /// Line of the `Slave` element.
    pub line: u32,
}

/// `Slave/ProcessData`.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct EniProcessData {
    /// `Send`: the outputs' place in the tool's logical image.
    pub send: Option<BitRange>,
    /// `Recv`: the inputs' place.
    pub recv: Option<BitRange>,
    /// `Sm0`..`Sm7`: the sync managers carrying process data and the PDOs assigned to them.
    pub sms: Vec<EniSm>,
    /// `RxPdo`: master -> subdevice.
    pub rx_pdos: Vec<Pdo>,
    /// `TxPdo`: subdevice -> master.
    pub tx_pdos: Vec<Pdo>,
}

/// `Send`/`Recv`: `BitStart` and `BitLength`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BitRange {
    /// `BitStart`.
    pub start: u32,
    /// `BitLength`.
    pub length: u32,
}

/// `ProcessData/SmN`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EniSm {
    /// N.
    pub number: u8,
    /// `Type` (`Outputs`, `Inputs`), as written.
    pub kind: String,
    /// The `Pdo` indices, in order: the assignment.
    pub pdos: Vec<u16>,
    /// Line of the element.
    pub line: u32,
}

/// `Slave/Mailbox`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EniMailbox {
    /// `Protocol` texts (`CoE`, `FoE`, `EoE`, `SoE`, ...), in order.
    pub protocols: Vec<String>,
    /// `CoE/InitCmds/InitCmd`, in order.
    pub coe_init_cmds: Vec<CoeInitCmd>,
    /// Init commands of the other protocols (`SoE/InitCmds/InitCmd`, `EoE/InitCmds/InitCmd`,
    /// ...), in order.
    pub other_init_cmds: Vec<MailboxInitCmd>,
}

/// A CoE init command: an SDO transfer at state transitions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CoeInitCmd {
    /// `Transition`s: `IP`, `PS`, `SO`, `SP`, `OS`, `PI`, `SI`, `OI`, `IB`, `BI`, ... as
    /// written (the first letter the state left, the second the one entered).
    pub transitions: Vec<String>,
    /// `Ccs`, as written (see [`CoeInitCmd::is_write`]).
    pub ccs: u8,
    /// `Index`.
    pub index: u16,
    /// `SubIndex`.
    pub sub: u8,
    /// `Data`: hex, two digits per byte.
    pub data: Vec<u8>,
    /// `@CompleteAccess`: the whole object from `SubIndex` on.
    pub complete_access: bool,
    /// `Comment`.
    pub comment: String,
    /// `Disabled` = 1: the tool keeps the command but does not send it.
    pub disabled: bool,
    /// `Timeout`: how long the device may take to answer, in ms (0 or absent: the master's
    /// default).
    pub timeout_ms: u32,
    /// Line of the `InitCmd`.
    pub line: u32,
}

impl CoeInitCmd {
    /// Whether the command writes (an SDO download). The `Ccs` value is used both ways in the
    /// wild: ETG.1000.6 numbers an SDO download request 1 (configuration tools export startup
    /// writes so), ETG.2100's InitCmd table says 2 for a write (SOEM's ENI reader follows it).
    /// A command carrying data is a write either way; one without data is an upload.
    pub fn is_write(&self) -> bool {
        matches!(self.ccs, 1 | 2) && !self.data.is_empty()
    }
}

/// An init command of another mailbox protocol (SoE, EoE, FoE, AoE, ...).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MailboxInitCmd {
    /// The protocol element (`SoE`, ...).
    pub protocol: String,
    /// `Transition`s.
    pub transitions: Vec<String>,
    /// `Comment`.
    pub comment: String,
    /// Line of the `InitCmd`.
    pub line: u32,
}

/// A register init command (`InitCmds/InitCmd` of a `Slave` or the `Master`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegisterCmd {
    /// `Transition`s.
    pub transitions: Vec<String>,
    /// `Cmd`: the datagram's command (ETG.1000.4: 1 APRD, 2 APWR, 4 FPRD, 5 FPWR, 7 BRD, 8 BWR,
    /// 12 LRW, ...).
    pub cmd: u8,
    /// `Adp` (position or station address), when given.
    pub adp: Option<u16>,
    /// `Ado`: the register.
    pub ado: Option<u16>,
    /// `Data` bytes, or `DataLength` when the command carries no data.
    pub len: usize,
    /// `Comment`.
    pub comment: String,
    /// Line of the `InitCmd`.
    pub line: u32,
}

/// A datagram of a cyclic frame (`Cyclic/Frame/Cmd`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CyclicCmd {
    /// 0-based number of the `Frame` over all `Cyclic` elements.
    pub frame: u32,
    /// `Cmd` (10 LRD, 11 LWR, 12 LRW, 7 BRD, ...).
    pub cmd: u8,
    /// `Addr` (logical address, or ADP/ADO as one 32-bit value).
    pub addr: Option<u32>,
    /// `DataLength`.
    pub data_length: Option<u32>,
    /// `Cnt`: the expected working counter.
    pub cnt: Option<u32>,
    /// Line of the `Cmd`.
    pub line: u32,
}

/// The name of a datagram command (the command field of ETG.1000.4's EtherCAT datagram).
pub(crate) fn command_name(cmd: u8) -> &'static str {
    match cmd {
        0 => "NOP",
        1 => "APRD",
        2 => "APWR",
        3 => "APRW",
        4 => "FPRD",
        5 => "FPWR",
        6 => "FPRW",
        7 => "BRD",
        8 => "BWR",
        9 => "BRW",
        10 => "LRD",
        11 => "LWR",
        12 => "LRW",
        13 => "ARMW",
        14 => "FRMW",
        _ => "?",
    }
}

/// Parse an ENI file from its bytes; `file` names it in errors.
pub fn parse_eni(bytes: &[u8], file: &str) -> Result<EniFile, Error> {
    with_document(bytes, file, |p| p.eni())
}

/// Read and parse an ENI file (at most [`MAX_FILE_BYTES`]; FIFOs and devices are refused).
pub fn read_eni(path: &Path) -> Result<EniFile, Error> {
    let bytes = safefs::read_bounded(path, MAX_FILE_BYTES)?;
    parse_eni(&bytes, &last_component(path))
}

impl<'a, 'i> P<'a, 'i> {
    fn eni(&self) -> R<EniFile> {
        let root = self.doc.root_element();
        match root.tag_name().name() {
            "EtherCATConfig" => {}
            "EtherCATInfo" | "EtherCATModule" => {
                return Err(self.invalid(
                    root,
                    "this is an ESI device description, not an ENI network description: \
                     `rtcat esi` reads it",
                ));
            }
            other => {
                return Err(self.invalid(
                    root,
                    format!(
                        "the root element is {}, not EtherCATConfig: not an ENI file",
                        shown(other)
                    ),
                ));
            }
        }
        let config = self.req(root, "Config")?;
        let master = child(config, "Master");
        let mut slaves = Vec::new();
        for (k, s) in children(config, "Slave").enumerate() {
            slaves.push(self.slave(s, k)?);
        }
        // Two slaves at one position: which one is on the bus would be a guess.
        let mut seen: Vec<(u16, usize)> = slaves.iter().map(|s| s.position).zip(0..).collect();
        seen.sort_unstable();
        for w in seen.windows(2) {
            if w[0].0 == w[1].0 {
                let s = &slaves[w[1].1];
                return Err(Error::Invalid {
                    file: self.file.to_string(),
                    line: s.line,
                    path: "Slave/Info/AutoIncAddr".into(),
                    why: format!(
                        "position {} is taken by the slave at line {} too",
                        s.position, slaves[w[0].1].line
                    ),
                });
            }
        }
        let mut cyclic = Vec::new();
        let mut cycle_time_us = None;
        let mut frame = 0u32;
        for c in children(config, "Cyclic") {
            if cycle_time_us.is_none() {
                cycle_time_us = self
                    .opt_number(c, "CycleTime", u64::from(u32::MAX))?
                    .map(|v| v as u32);
            }
            for f in children(c, "Frame") {
                for cmd in children(f, "Cmd") {
                    cyclic.push(CyclicCmd {
                        frame,
                        cmd: self.req_number(cmd, "Cmd", 0xFF)? as u8,
                        addr: self
                            .opt_number(cmd, "Addr", u64::from(u32::MAX))?
                            .map(|v| v as u32),
                        data_length: self
                            .opt_number(cmd, "DataLength", u64::from(u32::MAX))?
                            .map(|v| v as u32),
                        cnt: self
                            .opt_number(cmd, "Cnt", u64::from(u32::MAX))?
                            .map(|v| v as u32),
                        line: self.line(cmd.range().start),
                    });
                }
                frame += 1;
            }
        }
        Ok(EniFile {
            master: master
                .and_then(|m| child(m, "Info"))
                .and_then(|i| child(i, "Name"))
                .map(text_of),
            cycle_time_us,
            slaves,
            master_init_cmds: match master.and_then(|m| child(m, "InitCmds")) {
                Some(ic) => self.register_cmds(ic)?,
                None => Vec::new(),
            },
            cyclic,
        })
    }

    fn slave(&self, s: Node<'a, 'i>, k: usize) -> R<EniSlave> {
        let info = self.req(s, "Info")?;
        let u32max = u64::from(u32::MAX);
        let auto_inc_addr = self.auto_inc(info)?;
        let position = match auto_inc_addr {
            Some(a) => 0u16.wrapping_sub(a),
            None => u16::try_from(k).map_err(|_| {
                self.invalid(
                    s,
                    format!("slave {k}: more than 65536 slaves in one network"),
                )
            })?,
        };
        let process_data = match child(s, "ProcessData") {
            Some(pd) => self.process_data(pd)?,
            None => EniProcessData::default(),
        };
        let mailbox = match child(s, "Mailbox") {
            Some(m) => Some(self.mailbox(m)?),
            None => None,
        };
        Ok(EniSlave {
            name: child(info, "Name").map(text_of).unwrap_or_default(),
            phys_addr: self.opt_number(info, "PhysAddr", 0xFFFF)?.map(|v| v as u16),
            auto_inc_addr,
            position,
            vendor_id: self.req_number(info, "VendorId", u32max)? as u32,
            product_code: self.req_number(info, "ProductCode", u32max)? as u32,
            revision: self
                .opt_number(info, "RevisionNo", u32max)?
                .map(|v| v as u32),
            serial: self.opt_number(info, "SerialNo", u32max)?.map(|v| v as u32),
            process_data,
            mailbox,
            init_cmds: match child(s, "InitCmds") {
                Some(ic) => self.register_cmds(ic)?,
                None => Vec::new(),
            },
            has_dc: child(s, "DC").is_some(),
            line: self.line(s.range().start),
        })
    }

    /// `AutoIncAddr`: tools write the 16-bit value (65535) or the signed one (-1).
    fn auto_inc(&self, info: Node<'a, 'i>) -> R<Option<u16>> {
        self.address(info, "AutoIncAddr")
    }

    /// A 16-bit address child written unsigned (65535) or signed (-1); empty is absent.
    fn address(&self, parent: Node<'a, 'i>, name: &'static str) -> R<Option<u16>> {
        let Some(n) = child(parent, name).filter(|n| !text_of(*n).is_empty()) else {
            return Ok(None);
        };
        let t = text_of(n);
        if let Some(neg) = t.strip_prefix('-') {
            return match parse_number(neg) {
                Some(v) if v <= 0x8000 => Ok(Some(0u16.wrapping_sub(v as u16))),
                _ => Err(self.invalid(
                    n,
                    format!("{} is not a 16-bit address (-32768..=65535)", shown(&t)),
                )),
            };
        }
        Ok(Some(self.number(n, 0xFFFF)? as u16))
    }

    fn process_data(&self, pd: Node<'a, 'i>) -> R<EniProcessData> {
        let range = |name: &'static str| -> R<Option<BitRange>> {
            let Some(n) = child(pd, name) else {
                return Ok(None);
            };
            Ok(Some(BitRange {
                start: self.req_number(n, "BitStart", u64::from(u32::MAX))? as u32,
                length: self.req_number(n, "BitLength", u64::from(u32::MAX))? as u32,
            }))
        };
        let mut sms = Vec::new();
        for c in pd.children().filter(|c| c.is_element()) {
            let name = c.tag_name().name();
            let Some(n) = name.strip_prefix("Sm").and_then(|d| d.parse::<u8>().ok()) else {
                continue;
            };
            if n > 7 {
                return Err(self.invalid(c, "an ESC has at most 8 sync managers (Sm0..Sm7)"));
            }
            let mut pdos = Vec::new();
            for p in children(c, "Pdo") {
                pdos.push(self.number(p, 0xFFFF)? as u16);
            }
            sms.push(EniSm {
                number: n,
                kind: child(c, "Type").map(text_of).unwrap_or_default(),
                pdos,
                line: self.line(c.range().start),
            });
        }
        Ok(EniProcessData {
            send: range("Send")?,
            recv: range("Recv")?,
            sms,
            rx_pdos: self.pdos(pd, "RxPdo")?,
            tx_pdos: self.pdos(pd, "TxPdo")?,
        })
    }

    fn transitions(&self, cmd: Node<'a, 'i>) -> R<Vec<String>> {
        let t: Vec<String> = children(cmd, "Transition").map(text_of).collect();
        if t.is_empty() {
            return Err(Error::Invalid {
                file: self.file.to_string(),
                line: self.line(cmd.range().start),
                path: format!("{}/Transition", crate::parse::path_of(cmd)),
                why: "missing (when is the command sent?)".into(),
            });
        }
        for (n, v) in children(cmd, "Transition").zip(&t) {
            let ok = v.len() == 2 && v.bytes().all(|b| b"IPSOB".contains(&b));
            if !ok {
                return Err(self.invalid(
                    n,
                    format!(
                        "{} is not a transition (two of the states I, P, S, O, B: IP, PS, SO, ...)",
                        shown(v)
                    ),
                ));
            }
        }
        Ok(t)
    }

    /// `Data`: hex, two digits per byte, blanks ignored. Strict: the bytes are written to a
    /// device.
    fn hex(&self, d: Node<'a, 'i>) -> R<Vec<u8>> {
        let t: String = text_of(d).chars().filter(|c| !c.is_whitespace()).collect();
        if !t.bytes().all(|b| b.is_ascii_hexdigit()) || !t.len().is_multiple_of(2) {
            return Err(self.invalid(
                d,
                format!("{} is not hex data (two digits per byte)", shown(&t)),
            ));
        }
        Ok((0..t.len())
            .step_by(2)
            .filter_map(|i| u8::from_str_radix(&t[i..i + 2], 16).ok())
            .collect())
    }

    fn mailbox(&self, m: Node<'a, 'i>) -> R<EniMailbox> {
        let mut coe_init_cmds = Vec::new();
        let mut other_init_cmds = Vec::new();
        for proto in m.children().filter(|c| c.is_element()) {
            let tag = proto.tag_name().name();
            let Some(ics) = child(proto, "InitCmds") else {
                continue;
            };
            for ic in children(ics, "InitCmd") {
                if tag != "CoE" {
                    other_init_cmds.push(MailboxInitCmd {
                        protocol: tag.to_string(),
                        transitions: self.transitions(ic)?,
                        comment: child(ic, "Comment").map(text_of).unwrap_or_default(),
                        line: self.line(ic.range().start),
                    });
                    continue;
                }
                coe_init_cmds.push(CoeInitCmd {
                    transitions: self.transitions(ic)?,
                    ccs: self.opt_number(ic, "Ccs", 0xFF)?.unwrap_or(1) as u8,
                    index: self.req_number(ic, "Index", 0xFFFF)? as u16,
                    sub: self.opt_number(ic, "SubIndex", 0xFF)?.unwrap_or(0) as u8,
                    data: match child(ic, "Data") {
                        Some(d) => self.hex(d)?,
                        None => Vec::new(),
                    },
                    complete_access: self.attr_bool(ic, "CompleteAccess")?,
                    comment: child(ic, "Comment").map(text_of).unwrap_or_default(),
                    disabled: match child(ic, "Disabled") {
                        Some(d) => matches!(text_of(d).as_str(), "1" | "true"),
                        None => false,
                    },
                    timeout_ms: self.opt_number(ic, "Timeout", 0xFFFF_FFFF)?.unwrap_or(0) as u32,
                    line: self.line(ic.range().start),
                });
            }
        }
        Ok(EniMailbox {
            protocols: children(m, "Protocol").map(text_of).collect(),
            coe_init_cmds,
            other_init_cmds,
        })
    }

    fn register_cmds(&self, ics: Node<'a, 'i>) -> R<Vec<RegisterCmd>> {
        let mut v = Vec::new();
        for ic in children(ics, "InitCmd") {
            let len = match child(ic, "Data") {
                Some(d) => self.hex(d)?.len(),
                None => self.opt_number(ic, "DataLength", 0xFFFF)?.unwrap_or(0) as usize,
            };
            v.push(RegisterCmd {
                transitions: self.transitions(ic)?,
                cmd: self.req_number(ic, "Cmd", 0xFF)? as u8,
                adp: self.address(ic, "Adp")?,
                ado: self.opt_number(ic, "Ado", 0xFFFF)?.map(|v| v as u16),
                len,
                comment: child(ic, "Comment").map(text_of).unwrap_or_default(),
                line: self.line(ic.range().start),
            });
        }
        Ok(v)
    }
}
