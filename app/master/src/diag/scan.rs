//! `rtcat scan`: per subdevice its identity, AL state and status code, ports, DC support,
//! mailbox protocols and SM/FMMU counts, read by position without changing any of them.
//!
//! Registers (Beckhoff ESC datasheet section II): 0x0000 type, 0x0001 revision, 0x0002 build,
//! 0x0004 FMMUs supported, 0x0005 SyncManagers supported, 0x0006 RAM size (KiB), 0x0007 port
//! descriptor, 0x0008 ESC features, 0x0010 configured station address, 0x0012 station alias,
//! 0x0110 DL status, 0x0130 AL status, 0x0134 AL status code.

use super::Probe;
pub use crate::al_state::al_status_text;
use crate::sii;
use serde::{Deserialize, Deserializer, Serialize};

/// Port descriptor register (two bits per port).
pub const PORT_DESCRIPTOR: u16 = 0x0007;
const ESC_INFO: u16 = 0x0000;
const STATION: u16 = 0x0010;
const DL_STATUS: u16 = 0x0110;
const AL_STATUS: u16 = 0x0130;

/// An AL state (register 0x0130 bits 0..3, ETG.1000.6 Table 9).
/// Serialized as the table shows it (`"PREOP"`), as IgH's tool names the states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AlState {
    /// INIT (1).
    #[serde(rename = "INIT")]
    Init,
    /// PRE-OP (2).
    #[serde(rename = "PREOP")]
    PreOp,
    /// BOOT (3).
    #[serde(rename = "BOOT")]
    Boot,
    /// SAFE-OP (4).
    #[serde(rename = "SAFEOP")]
    SafeOp,
    /// OP (8).
    #[serde(rename = "OP")]
    Op,
    /// A value the standard does not define.
    #[serde(rename = "UNKNOWN")]
    Unknown(u8),
}

impl AlState {
    /// From the low nibble of the AL status register.
    pub fn from_bits(v: u8) -> Self {
        match v & 0x0f {
            1 => AlState::Init,
            2 => AlState::PreOp,
            3 => AlState::Boot,
            4 => AlState::SafeOp,
            8 => AlState::Op,
            o => AlState::Unknown(o),
        }
    }
}

impl std::fmt::Display for AlState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AlState::Init => f.write_str("INIT"),
            AlState::PreOp => f.write_str("PREOP"),
            AlState::Boot => f.write_str("BOOT"),
            AlState::SafeOp => f.write_str("SAFEOP"),
            AlState::Op => f.write_str("OP"),
            AlState::Unknown(v) => write!(f, "{v:#x}?"),
        }
    }
}

/// The physical kind of a port (port descriptor 0x0007).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortKind {
    /// Not implemented (00).
    NotImplemented,
    /// Not configured (01, per the SII).
    NotConfigured,
    /// E-Bus (10).
    Ebus,
    /// MII / RMII / RGMII (11).
    Mii,
}

/// One port's state (DL status 0x0110: bits 4+p link, 8+2p loop closed, 9+2p communication).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortState {
    /// Port number 0..=3.
    pub port: u8,
    /// Its kind.
    pub kind: PortKind,
    /// A physical link is detected.
    pub link: bool,
    /// The loop is closed (frames turn back here instead of going out of the port).
    pub loop_closed: bool,
    /// Communication is established on the port.
    pub communication: bool,
}

impl PortState {
    /// The ports from the port descriptor and the DL status.
    pub fn from_registers(descriptor: u8, dl_status: u16) -> Vec<PortState> {
        (0..4u8)
            .map(|p| PortState {
                port: p,
                kind: match (descriptor >> (2 * p)) & 0x03 {
                    0 => PortKind::NotImplemented,
                    1 => PortKind::NotConfigured,
                    2 => PortKind::Ebus,
                    _ => PortKind::Mii,
                },
                link: dl_status & (1 << (4 + p)) != 0,
                loop_closed: dl_status & (1 << (8 + 2 * p)) != 0,
                communication: dl_status & (1 << (9 + 2 * p)) != 0,
            })
            .collect()
    }
}

/// Distributed clock support (ESC features 0x0008 bits 2 and 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DcSupport {
    /// The ESC has distributed clocks.
    pub supported: bool,
    /// Its system time is 64 bits wide (else 32).
    pub width_64: bool,
}

/// The ESC's fixed description (registers 0x0000..0x0009).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscInfo {
    /// ESC type (0x0000).
    pub esc_type: u8,
    /// ESC revision (0x0001).
    pub revision: u8,
    /// Build (0x0002).
    pub build: u16,
    /// FMMUs supported (0x0004).
    pub fmmus: u8,
    /// SyncManagers supported (0x0005).
    pub sync_managers: u8,
    /// Process RAM in KiB (0x0006).
    pub ram_kib: u8,
    /// ESC features (0x0008).
    pub features: u16,
}

/// One subdevice as `rtcat scan` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanEntry {
    /// Position in the segment (0 = next to the master).
    pub position: u16,
    /// Configured station address (0x0010; 0 until a master configured one).
    pub station_address: u16,
    /// Station alias (0x0012, loaded from SII word 0x04).
    pub alias: u16,
    /// Vendor ID (SII word 0x08); `None` when the SII could not be read.
    pub vendor_id: Option<u32>,
    /// Product code (SII word 0x0A).
    pub product_code: Option<u32>,
    /// Revision number (SII word 0x0C).
    pub revision: Option<u32>,
    /// Serial number (SII word 0x0E).
    pub serial: Option<u32>,
    /// Device name (SII General category, else its order number or first string).
    pub name: Option<String>,
    /// AL state.
    pub al_state: AlState,
    /// The error indication bit of AL status (bit 4).
    pub al_error: bool,
    /// AL status code (0x0134).
    pub al_status_code: u16,
    /// Its text (ETG.1000.6 Table 11, [`al_status_text`]).
    pub al_status_text: String,
    /// Ports 0..=3.
    pub ports: Vec<PortState>,
    /// Distributed clocks.
    pub dc: DcSupport,
    /// Mailbox protocols (SII word 0x1C): `CoE`, `FoE`, ...
    #[serde(deserialize_with = "protocol_names")]
    pub mailbox_protocols: Vec<crate::layout::Static>,
    /// SyncManagers supported.
    pub sync_managers: u8,
    /// FMMUs supported.
    pub fmmus: u8,
    /// The ESC's type, revision, build, RAM and features.
    pub esc: EscInfo,
    /// What could not be read (the entry is still shown with what could).
    pub errors: Vec<String>,
}

/// The protocol names of [`sii::MailboxProtocols::names`] read back (a scan a running master
/// sent over its control socket).
fn protocol_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<&'static str>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    names
        .iter()
        .map(|n| {
            ["AoE", "EoE", "CoE", "FoE", "SoE", "VoE"]
                .into_iter()
                .find(|k| k == n)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown mailbox protocol {n:?}")))
        })
        .collect()
}

impl ScanEntry {
    fn blank(position: u16) -> Self {
        ScanEntry {
            position,
            station_address: 0,
            alias: 0,
            vendor_id: None,
            product_code: None,
            revision: None,
            serial: None,
            name: None,
            al_state: AlState::Unknown(0),
            al_error: false,
            al_status_code: 0,
            al_status_text: String::new(),
            ports: Vec::new(),
            dc: DcSupport {
                supported: false,
                width_64: false,
            },
            mailbox_protocols: Vec::new(),
            sync_managers: 0,
            fmmus: 0,
            esc: EscInfo {
                esc_type: 0,
                revision: 0,
                build: 0,
                fmmus: 0,
                sync_managers: 0,
                ram_kib: 0,
                features: 0,
            },
            errors: Vec::new(),
        }
    }
}

impl Probe<'_> {
    /// Scan the subdevice at `position`. A register block or the SII that cannot be read is
    /// named in [`ScanEntry::errors`]; the rest is still filled in.
    pub fn scan_one(&self, position: u16) -> ScanEntry {
        let mut e = ScanEntry::blank(position);
        let mut info = [0u8; 10];
        match self.read(position, ESC_INFO, &mut info) {
            Ok(()) => {
                e.esc = EscInfo {
                    esc_type: info[0],
                    revision: info[1],
                    build: u16::from_le_bytes([info[2], info[3]]),
                    fmmus: info[4],
                    sync_managers: info[5],
                    ram_kib: info[6],
                    features: u16::from_le_bytes([info[8], info[9]]),
                };
                e.fmmus = info[4];
                e.sync_managers = info[5];
                e.dc = DcSupport {
                    supported: e.esc.features & 0x0004 != 0,
                    width_64: e.esc.features & 0x0008 != 0,
                };
            }
            Err(err) => e.errors.push(err.to_string()),
        }
        let mut st = [0u8; 4];
        match self.read(position, STATION, &mut st) {
            Ok(()) => {
                e.station_address = u16::from_le_bytes([st[0], st[1]]);
                e.alias = u16::from_le_bytes([st[2], st[3]]);
            }
            Err(err) => e.errors.push(err.to_string()),
        }
        let mut dl = [0u8; 2];
        match self.read(position, DL_STATUS, &mut dl) {
            Ok(()) => e.ports = PortState::from_registers(info[7], u16::from_le_bytes(dl)),
            Err(err) => e.errors.push(err.to_string()),
        }
        let mut al = [0u8; 6];
        match self.read(position, AL_STATUS, &mut al) {
            Ok(()) => {
                e.al_state = AlState::from_bits(al[0]);
                e.al_error = al[0] & 0x10 != 0;
                e.al_status_code = u16::from_le_bytes([al[4], al[5]]);
                e.al_status_text = al_status_text(e.al_status_code);
            }
            Err(err) => e.errors.push(err.to_string()),
        }
        match self
            .read_sii(
                position,
                Some(&[sii::category::STRINGS, sii::category::GENERAL]),
            )
            .and_then(|img| img.parse())
        {
            Ok(s) => {
                e.vendor_id = Some(s.vendor_id);
                e.product_code = Some(s.product_code);
                e.revision = Some(s.revision);
                e.serial = Some(s.serial);
                e.name = s.device_name().map(str::to_string);
                e.mailbox_protocols = s.protocols.names();
            }
            Err(err) => e.errors.push(format!("SII: {err}")),
        }
        e
    }

    /// Scan every subdevice, in position order.
    pub fn scan(&self) -> Vec<ScanEntry> {
        (0..self.count()).map(|p| self.scan_one(p)).collect()
    }
}
