//! The segment description: which subdevices the simulated chain holds (TOML).
//!
//! ```toml
//! [[device]]
//! count = 3                 # this entry repeats for 3 consecutive positions
//! name = "RZ/T2M-SIM"
//! vendor_id = 0x00000766
//! product_id = 0x00010001
//! revision = 1
//! serial = 1000             # first serial; +1 per repeated device
//! outputs = 22              # bytes of RxPDO (master -> device)
//! inputs = 22               # bytes of TxPDO (device -> master)
//! dc = false                # distributed clocks supported
//! dc_offset_ns = 1012345    # DC devices: local clock at simulation time 0 (default 1 ms per
//!                           # position + 12345 ns)
//! dc_drift_ppm = 0.0        # DC devices: the local clock runs this much fast (-500..=500)
//! dc_sync_window_ns = 1000  # DC devices: |0x092C| below this is "in sync"
//! hop_ns = 500              # ns a frame needs from this device to the next (DC receive times)
//! alias = 0                 # station alias in the EEPROM
//! ```
//!
//! The devices are wired in the order they are listed, each to port 1 of the one before — a
//! line — unless a device is a junction (`ports = 3`: ports 0, 3 and 1, like a coupler whose
//! E-bus is port 3; `ports = 4`: all four) or says where it is plugged in with
//! `upstream = [POSITION, PORT]`. A device plugged in without `upstream` goes to the first free
//! port of the device before it, in the order a frame leaves through them (3, 1, 2). The list
//! must be in processing order (the order the frame reaches them: depth first, ports 3, 1, 2),
//! which is the order of the positions a master counts:
//!
//! ```toml
//! [[device]]                # 0: a coupler with a branch on port 3
//! name = "COUPLER"
//! ports = 3
//! [[device]]                # 1: on the coupler's port 3 (its first free port)
//! name = "TERMINAL"
//! [[device]]                # 2: behind the terminal (port 1)
//! name = "TERMINAL"
//! [[device]]                # 3: on the coupler's port 1, after the branch
//! name = "DRIVE"
//! upstream = [0, 1]
//! ```
//!
//! A device answers at once unless `[device.timing]` gives it the time a real one takes
//! ([`EscTiming`]; all keys in microseconds, 0 = at once, each at most 10 s):
//!
//! ```toml
//! [device.timing]
//! sii_read_us = 680         # one SII command: BUSY this long (ET1100: ~680 µs for 4 words)
//! init_preop_us = 10000     # AL state changes: the AL status keeps the old state this long
//! preop_safeop_us = 20000
//! safeop_op_us = 10000
//! down_us = 2000            # any change to a lower state (OP -> SAFE-OP, -> INIT)
//! mailbox_us = 1000         # a mailbox response appears in SM1 this long after the request
//! slow_object = 0x1010      # a write (SDO download) to this object is answered after
//! slow_object_us = 1500000  # slow_object_us (firmware that acts on it first: storing, flash)
//! sm_watchdog = true        # OP -> SAFE-OP (0x001B) when outputs stop for the watchdog time
//! dc_op_frames = 3          # with SYNC0 running, SAFE-OP -> OP only after this many process
//!                           # data frames on time since SYNC0 started (0x001A otherwise)
//! op_outputs = 1            # SAFE-OP -> OP only after this many frames brought its outputs
//!                           # since SAFE-OP (0x001B otherwise)
//! ```
//!
//! A device may list its PDOs instead of getting the generated default
//! ([`crate::pdo::default_pdos`]); `inputs` / `outputs` may then be left out (they follow from
//! the entries) or must agree with them:
//!
//! ```toml
//! [[device]]
//! name = "EL1008"
//! [[device.txpdo]]          # inputs; [[device.rxpdo]] for outputs
//! index = 0x1a00            # 0x1a00..=0x1bff (rxpdo: 0x1600..=0x17ff)
//! name = "Channel 1"
//! entries = [
//!   { index = 0x6000, sub = 1, type = "BOOL", name = "Input 1" },
//!   { index = 0, bits = 7 },  # padding: index 0, no type, no name
//! ]
//! ```
//!
//! An entry's `bits` may be left out (it is the type's width) or must equal it; the entries of a
//! direction carry whole bytes.
//!
//! `coe = true` makes a device a CoE device: a mailbox, an object dictionary described by
//! `device_type`, `hardware_version`, `software_version`, `pdo_buffer` and `[[device.object]]`
//! (see the `odspec` module's documentation and the crate README), and PDOs that may say
//! `assigned = false`, `assignable`, `mappable` and `max_entries`.
//!
//! `profile = "cia402"` makes a device a CiA 402 servo drive ([`crate::cia402`]): CoE on, the
//! drive's objects and its CSP PDOs unless the device lists its own (`[[device.object]]` of the
//! same index, `rxpdo` / `txpdo`), and the drive model as its application.

use crate::pdo::{
    self, DataType, Direction, MAX_ENTRIES, MAX_ENTRIES_PER_PDO, MAX_PDOS, PdoEntrySpec, PdoSpec,
};
use serde::Deserialize;
use std::borrow::Cow;
use std::path::Path;
use thiserror::Error;

/// Largest process image per direction and device (fits the simulated 8 KiB process RAM).
pub const MAX_IO_BYTES: u16 = 2048;
/// Largest chain a segment file may describe: what rtcat's master can run. ethercrab 0.7 keeps
/// the subdevices it finds in fixed-capacity storage sized by the `MAX_SUBDEVICES` const generic
/// of `MainDevice::init_single_group` (`heapless::Deque<SubDevice, MAX_SUBDEVICES>`); one more
/// subdevice fails the scan with `Error::Capacity(Item::SubDevice)` ("not enough capacity for
/// SubDevice"). rtcat instantiates it with `rtcat::master::MAX_SUBDEVICES`; rtcat's tests check
/// that the two constants agree. (Configured addresses 0x1000 + position stay far below 0xffff.)
pub const MAX_DEVICES: usize = 1024;
/// Largest process image of the whole segment (all inputs + all outputs, bytes): ethercrab's
/// `MAX_PDI` const generic of the same call, which rtcat sets to `rtcat::master::MAX_PDI_BYTES`; a larger
/// image fails the transition to OP ("Process Data Image is too long"). The master sends it as
/// LRWs of at most 1100 bytes, 15 frames at this size, within its 32 PDU frames.
pub const MAX_PDI_BYTES: usize = 16384;
/// Largest segment file read (a segment at [`MAX_DEVICES`] takes a few KiB of TOML).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Longest segment or device name (ethercrab 0.7 keeps a subdevice's name in a
/// `heapless::String<64>`, `subdevice/mod.rs`).
pub const MAX_NAME_CHARS: usize = 64;

#[derive(Debug, Error)]
pub enum SpecError {
    /// The file is missing, unreadable, not a regular file or larger than [`MAX_FILE_BYTES`].
    #[error("segment file {0}")]
    Read(#[source] safefs::Error),
    #[error("segment file {path}: {source}")]
    Parse {
        path: String,
        source: toml::de::Error,
    },
    #[error("segment: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    device: Vec<DeviceEntry>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceEntry {
    #[serde(default = "one")]
    count: u32,
    #[serde(default = "default_name")]
    name: String,
    #[serde(default = "default_vendor")]
    vendor_id: u32,
    /// Absent: the reference product code, or one of its own when the entry describes a device
    /// different from the other defaulted ones (see `check_identities`).
    #[serde(default)]
    product_id: Option<u32>,
    #[serde(default = "one")]
    revision: u32,
    #[serde(default)]
    serial: u32,
    #[serde(default)]
    outputs: Option<u16>,
    #[serde(default)]
    inputs: Option<u16>,
    #[serde(default)]
    dc: bool,
    #[serde(default)]
    dc_offset_ns: Option<i64>,
    #[serde(default)]
    dc_drift_ppm: Option<f64>,
    #[serde(default)]
    dc_sync_window_ns: Option<u32>,
    #[serde(default)]
    hop_ns: Option<u32>,
    #[serde(default)]
    alias: u16,
    #[serde(default)]
    rxpdo: Option<Vec<PdoEntry>>,
    #[serde(default)]
    txpdo: Option<Vec<PdoEntry>>,
    /// CoE: a mailbox and an object dictionary (see [`CoeSpec`]).
    #[serde(default)]
    coe: bool,
    #[serde(default)]
    device_type: Option<u32>,
    #[serde(default)]
    hardware_version: Option<String>,
    #[serde(default)]
    software_version: Option<String>,
    #[serde(default)]
    pdo_buffer: Option<u16>,
    #[serde(default)]
    object: Vec<crate::odspec::ObjectEntry>,
    /// A device profile whose dictionary, PDOs and behaviour the device gets (`"cia402"`).
    #[serde(default)]
    profile: Option<String>,
    /// The process-data sync managers of a device without a mailbox, as its SII lists them
    /// (see [`SmSpec`]); absent: the generated layout.
    #[serde(default)]
    sm: Option<Vec<SmEntry>>,
    /// The time the device takes (see [`EscTiming`]); absent: at once.
    #[serde(default)]
    timing: Option<TimingEntry>,
    /// Ports the ESC implements: 2 (0 and 1), 3 (0, 3, 1) or 4.
    #[serde(default)]
    ports: Option<u8>,
    /// Where the device is plugged in: `[position, port]` of a device before it.
    #[serde(default)]
    upstream: Option<[u32; 2]>,
    /// Files served over FoE (a CoE device only; see [`FileSpec`]).
    #[serde(default)]
    file: Vec<FileEntry>,
    /// Ethernet over EtherCAT (a CoE device only; see [`EoeSpec`]).
    #[serde(default)]
    eoe: Option<EoeEntry>,
}

/// `[device.eoe]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct EoeEntry {
    /// The device's network: a TAP interface the simulator creates in its namespace.
    #[serde(default)]
    tap: Option<String>,
    /// The device's MAC address, `02:00:00:00:00:01` (default: locally administered, from the
    /// position).
    #[serde(default)]
    mac: Option<String>,
}

/// A device that tunnels Ethernet over its mailbox (`[device.eoe]`, see [`crate::eoe`]): its
/// MAC address and the TAP interface its network is, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EoeSpec {
    pub tap: Option<String>,
    pub mac: [u8; 6],
}

/// `device[i].eoe`: a CoE device, a valid interface name, a unicast MAC.
fn eoe(i: usize, e: &DeviceEntry) -> Result<Option<EoeSpec>, SpecError> {
    let Some(x) = &e.eoe else { return Ok(None) };
    let bad = |k: &str, why: String| Err(SpecError::Invalid(format!("device[{i}].eoe.{k}: {why}")));
    if !e.coe && e.profile.is_none() {
        return bad(
            "tap",
            "EoE needs a mailbox: the device must be a CoE device (coe = true)".into(),
        );
    }
    if let Some(t) = &x.tap
        && let Err(m) = safefs::netif::check_name(t)
    {
        return bad("tap", format!("{t:?}: {m}"));
    }
    let mac = match &x.mac {
        None => [0x02, 0x00, 0x00, 0xec, (i >> 8) as u8, i as u8],
        Some(m) => {
            let parts: Vec<&str> = m.split(':').collect();
            let bytes: Option<Vec<u8>> = (parts.len() == 6)
                .then(|| {
                    parts
                        .iter()
                        .map(|p| u8::from_str_radix(p, 16).ok())
                        .collect()
                })
                .flatten();
            match bytes {
                Some(b) if b[0] & 1 == 0 && b.iter().any(|x| *x != 0) => {
                    [b[0], b[1], b[2], b[3], b[4], b[5]]
                }
                _ => {
                    return bad(
                        "mac",
                        format!(
                            "{m:?} is not a unicast MAC address (six hex bytes, aa:bb:cc:dd:ee:ff, first byte even)"
                        ),
                    );
                }
            }
        }
    };
    Ok(Some(EoeSpec {
        tap: x.tap.clone(),
        mac,
    }))
}

/// One `[[device.file]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    name: String,
    /// The content as text; or `size` bytes of a counting pattern (a firmware image).
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    size: Option<u32>,
    #[serde(default)]
    writable: bool,
    #[serde(default)]
    password: u32,
    #[serde(default)]
    boot: bool,
    #[serde(default)]
    max_bytes: Option<u32>,
    /// Answer the write request and every N-th DATA packet of a write with BUSY once (0: never).
    #[serde(default)]
    busy: u32,
    /// Firmware of this revision: a completed write in BOOT installs it (SII word 0x0C).
    #[serde(default)]
    revision: Option<u32>,
}

/// Most files a device lists.
pub const MAX_FILES: usize = 16;
/// Largest FoE file content: 16 MiB (a drive's firmware image).
pub const MAX_FOE_FILE_BYTES: u32 = 16 << 20;

/// A file a device serves over FoE (`[[device.file]]`): its name, content, whether a master
/// may write it (replacing the content, at most `max_bytes`), the password a request must
/// carry (0: none), and whether the device serves it only in BOOT (firmware).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpec {
    pub name: String,
    pub content: Vec<u8>,
    pub writable: bool,
    pub password: u32,
    pub boot: bool,
    pub max_bytes: u32,
    /// BUSY once to the write request and to every `busy`-th DATA packet (0: never).
    pub busy: u32,
    /// A firmware image of this revision: once a write of it completes (in BOOT), the device's
    /// SII says this revision (word 0x0C), as a real device's does after a firmware update.
    pub revision: Option<u32>,
}

/// `device[i].file`: names unique and printable, contents and limits within bounds, a CoE
/// device (FoE travels through its mailbox).
fn files(i: usize, e: &DeviceEntry) -> Result<Vec<FileSpec>, SpecError> {
    if e.file.is_empty() {
        return Ok(Vec::new());
    }
    let bad =
        |k: usize, why: String| Err(SpecError::Invalid(format!("device[{i}].file[{k}]: {why}")));
    if !e.coe && e.profile.is_none() {
        return bad(
            0,
            "FoE needs a mailbox: the device must be a CoE device (coe = true)".into(),
        );
    }
    if e.file.len() > MAX_FILES {
        return bad(
            MAX_FILES,
            format!("{} files: a device lists at most {MAX_FILES}", e.file.len()),
        );
    }
    let mut out: Vec<FileSpec> = Vec::new();
    for (k, f) in e.file.iter().enumerate() {
        check_name(&format!("device[{i}].file[{k}].name"), &f.name)?;
        if out.iter().any(|o| o.name == f.name) {
            return bad(k, format!("name {:?} is listed twice", f.name));
        }
        let content = match (&f.text, f.size) {
            (Some(_), Some(_)) => return bad(k, "give text or size, not both".into()),
            (Some(t), None) => t.clone().into_bytes(),
            (None, Some(n)) => (0..n).map(|b| (b % 251) as u8).collect(),
            (None, None) => Vec::new(),
        };
        let max_bytes = f.max_bytes.unwrap_or(MAX_FOE_FILE_BYTES);
        if content.len() as u64 > u64::from(MAX_FOE_FILE_BYTES) || max_bytes > MAX_FOE_FILE_BYTES {
            return bad(
                k,
                format!("content and max_bytes are at most {MAX_FOE_FILE_BYTES} bytes"),
            );
        }
        if content.len() as u64 > u64::from(max_bytes) {
            return bad(
                k,
                format!(
                    "the content ({} bytes) is larger than max_bytes = {max_bytes}",
                    content.len()
                ),
            );
        }
        if f.revision.is_some() && !(f.boot && f.writable) {
            return bad(
                k,
                "revision is what a firmware write installs: give boot = true and writable = true"
                    .into(),
            );
        }
        out.push(FileSpec {
            name: f.name.clone(),
            content,
            writable: f.writable,
            password: f.password,
            boot: f.boot,
            max_bytes,
            busy: f.busy,
            revision: f.revision,
        });
    }
    Ok(out)
}

/// One `[device.timing]`, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TimingEntry {
    #[serde(default)]
    sii_read_us: u32,
    #[serde(default)]
    init_preop_us: u32,
    #[serde(default)]
    preop_safeop_us: u32,
    #[serde(default)]
    safeop_op_us: u32,
    #[serde(default)]
    down_us: u32,
    #[serde(default)]
    mailbox_us: u32,
    #[serde(default)]
    slow_object: Option<u16>,
    #[serde(default)]
    slow_object_us: u32,
    #[serde(default)]
    sm_watchdog: bool,
    #[serde(default)]
    dc_op_frames: u16,
    #[serde(default)]
    op_outputs: u16,
}

/// Longest time a `[device.timing]` key may give: 10 s (beyond any master's state timeout).
pub const MAX_TIMING_US: u32 = 10_000_000;

/// What a real device takes time for, that the simulator otherwise does at once: bring-up
/// figures measured against the simulator mean something only with these. All 0 by default.
///
/// Figures of real devices (docs/NOTES.md, "ESC timing"): an ET1100's SII read of 4 words takes
/// about 680 µs (ET1100 hardware description, Table 79 "SII EEPROM timing characteristics";
/// 740 µs for EEPROMs of 32 Kbit and more); AL state changes and mailbox answers are the device
/// firmware's and vary from well under a millisecond (simple I/O) to tens of milliseconds
/// (drives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EscTiming {
    /// An SII command (read, write, reload) keeps the interface BUSY this long.
    pub sii_ns: u64,
    /// INIT -> PRE-OP (and -> BOOT).
    pub init_preop_ns: u64,
    /// PRE-OP -> SAFE-OP.
    pub preop_safeop_ns: u64,
    /// SAFE-OP -> OP.
    pub safeop_op_ns: u64,
    /// Any change to a lower state.
    pub down_ns: u64,
    /// From taking a mailbox request to its response in SM1.
    pub mailbox_ns: u64,
    /// A write (SDO download) to this object (index) is answered after
    /// [`EscTiming::slow_object_ns`] instead of `mailbox_ns`: firmware that acts on the value
    /// before it answers (storing parameters, writing flash).
    pub slow_object: Option<u16>,
    /// See [`EscTiming::slow_object`].
    pub slow_object_ns: u64,
    /// The sync-manager watchdog is on: a device in OP whose outputs the master has not
    /// written for the watchdog time (0x0400 divider, 0x0420 time; 100 ms after power-on)
    /// leaves OP for SAFE-OP with AL status code 0x001B, as a device's firmware does on the
    /// ESC's watchdog (ET1100: "Watchdog"; ETG.1000.6 AL status codes).
    pub sm_watchdog: bool,
    /// A device whose SYNC0 runs accepts SAFE-OP -> OP only when at least this many process
    /// data frames reached it on time (between two SYNC0 pulses) since SYNC0 was switched on,
    /// counted when the transition's time ([`EscTiming::safeop_op_ns`]) is over; otherwise it
    /// stays in SAFE-OP with AL status code 0x001A "synchronization error". A drive in DC mode
    /// checks that frames arrive around SYNC0 before it accepts OP (ETG.1020 §21.1). 0: no
    /// check.
    pub dc_op_frames: u16,
    /// A device accepts SAFE-OP -> OP only when at least this many frames brought its outputs
    /// (an LRW or LWR over its output FMMU) since it entered SAFE-OP, counted when the
    /// transition's time is over; otherwise it stays in SAFE-OP with AL status code 0x001B
    /// (sync manager watchdog). "Before the master switches the slave from SAFE-OP to OP it
    /// must transfer valid output data" (Beckhoff's description of the EtherCAT state
    /// machine; Yaskawa's and Kollmorgen's say the same). 0: no check.
    pub op_outputs: u16,
}

impl EscTiming {
    /// The time an AL state change from `from` to `to` (AL status state codes) takes.
    pub fn transition_ns(&self, from: u8, to: u8) -> u64 {
        match (from, to) {
            (f, t) if f == t => 0,
            (1, 2) | (1, 3) => self.init_preop_ns,
            (2, 4) => self.preop_safeop_ns,
            (4, 8) => self.safeop_op_ns,
            _ => self.down_ns,
        }
    }

    /// Whether the device answers everything at once.
    pub fn is_instant(&self) -> bool {
        *self == EscTiming::default()
    }
}

/// `device[i].timing`: every key within [`MAX_TIMING_US`].
fn timing(i: usize, t: Option<TimingEntry>) -> Result<EscTiming, SpecError> {
    let Some(t) = t else {
        return Ok(EscTiming::default());
    };
    for (key, v) in [
        ("sii_read_us", t.sii_read_us),
        ("init_preop_us", t.init_preop_us),
        ("preop_safeop_us", t.preop_safeop_us),
        ("safeop_op_us", t.safeop_op_us),
        ("down_us", t.down_us),
        ("mailbox_us", t.mailbox_us),
        ("slow_object_us", t.slow_object_us),
    ] {
        if v > MAX_TIMING_US {
            return Err(SpecError::Invalid(format!(
                "device[{i}].timing.{key} = {v}: must be at most {MAX_TIMING_US} µs (10 s)"
            )));
        }
    }
    let ns = |us: u32| u64::from(us) * 1000;
    Ok(EscTiming {
        sii_ns: ns(t.sii_read_us),
        init_preop_ns: ns(t.init_preop_us),
        preop_safeop_ns: ns(t.preop_safeop_us),
        safeop_op_ns: ns(t.safeop_op_us),
        down_ns: ns(t.down_us),
        mailbox_ns: ns(t.mailbox_us),
        slow_object: t.slow_object,
        slow_object_ns: ns(t.slow_object_us),
        sm_watchdog: t.sm_watchdog,
        dc_op_frames: t.dc_op_frames,
        op_outputs: t.op_outputs,
    })
}

/// One `[[device.sm]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct SmEntry {
    start: u16,
    control: u8,
    #[serde(default = "enable_default")]
    enable: u8,
    usage: String,
}

fn enable_default() -> u8 {
    1
}

/// A device profile (`profile = "..."`): objects, default PDOs and a device application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// A CiA 402 servo drive ([`crate::cia402`]).
    Cia402,
}

/// `e` with the objects and PDOs of its profile: the profile's PDOs where `e` lists none of a
/// direction, the profile's objects but those whose index `e` lists itself.
fn with_profile(i: usize, e: &DeviceEntry, name: &str) -> Result<DeviceEntry, SpecError> {
    if name != "cia402" {
        return Err(SpecError::Invalid(format!(
            "device[{i}].profile = {:?}: the simulator knows the profile \"cia402\" only",
            truncated(name, 40)
        )));
    }
    let p: DeviceEntry =
        toml::from_str(crate::cia402::PROFILE_TOML).expect("the CiA 402 profile is valid");
    let mut object: Vec<_> = p
        .object
        .into_iter()
        .filter(|o| e.object.iter().all(|x| x.index() != o.index()))
        .collect();
    object.extend(e.object.iter().cloned());
    Ok(DeviceEntry {
        coe: true,
        device_type: e.device_type.or(p.device_type),
        rxpdo: e.rxpdo.clone().or(p.rxpdo),
        txpdo: e.txpdo.clone().or(p.txpdo),
        object,
        ..e.clone()
    })
}

fn e_coe(e: &DeviceEntry) -> crate::odspec::CoeFields<'_> {
    crate::odspec::CoeFields {
        coe: e.coe,
        device_type: e.device_type,
        hardware_version: e.hardware_version.as_deref(),
        software_version: e.software_version.as_deref(),
        pdo_buffer: e.pdo_buffer,
        objects: &e.object,
        profile: e.profile.as_ref().map(|_| Profile::Cia402),
    }
}

/// One `[[device.txpdo]]` / `[[device.rxpdo]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct PdoEntry {
    index: u16,
    name: String,
    entries: Vec<EntryEntry>,
    /// CoE only: in the default assignment (0x1C12 / 0x1C13); default true.
    #[serde(default)]
    assigned: Option<bool>,
    /// CoE only: may be added to or removed from the assignment in PRE-OP; default false.
    #[serde(default)]
    assignable: Option<bool>,
    /// CoE only: its mapping may be written in PRE-OP; default false.
    #[serde(default)]
    mappable: Option<bool>,
    /// CoE only: most entries of a mappable PDO; default 8.
    #[serde(default)]
    max_entries: Option<u8>,
    /// With `[[device.sm]]`: the sync manager (its index in that list) the PDO is assigned to;
    /// default the first one of its direction.
    #[serde(default)]
    sm: Option<u8>,
}

/// One element of a PDO's `entries`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryEntry {
    index: u16,
    #[serde(default)]
    sub: u8,
    #[serde(default)]
    bits: Option<u8>,
    #[serde(default, rename = "type")]
    data_type: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

fn one() -> u32 {
    1
}
fn default_name() -> String {
    "RTCAT-SIM".into()
}
fn default_vendor() -> u32 {
    REFERENCE_VENDOR
}

/// The shipped CoE example (the file is the one source of the example's devices).
const COE_EXAMPLE: &str = include_str!("../../../examples/coe/segment.toml");

/// Renesas' EtherCAT vendor id: the reference segment (docs/NOTES.md §1) is three RZ/T2 subdevices.
pub const REFERENCE_VENDOR: u32 = 0x0000_0766;
/// Product code used for the simulated RZ/T2 subdevice.
pub const REFERENCE_PRODUCT: u32 = 0x0001_0001;

/// One simulated subdevice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    pub name: String,
    pub vendor_id: u32,
    pub product_id: u32,
    pub revision: u32,
    pub serial: u32,
    /// Output bytes (RxPDO, written by the master).
    pub outputs: u16,
    /// Input bytes (TxPDO, read by the master).
    pub inputs: u16,
    pub dc: bool,
    /// The local clock of a DC device (offset, drift, sync window; see [`crate::dc`]).
    pub dc_clock: crate::dc::DcClockSpec,
    /// Nanoseconds a frame needs from this device to the next (processing, forwarding and the
    /// cable; the DC receive times show it), 1..=[`MAX_HOP_NS`].
    pub hop_ns: u32,
    pub alias: u16,
    /// RxPDOs (outputs) listed in the description, whose entries carry exactly `outputs` bytes
    /// ([`SegmentSpec::from_toml`] checks that); `None`: the generated default for `outputs`.
    pub rxpdo: Option<Vec<PdoSpec>>,
    /// TxPDOs (inputs), as `rxpdo` for `inputs`.
    pub txpdo: Option<Vec<PdoSpec>>,
    /// A CoE device: mailbox on SM0/SM1 and an object dictionary; `None`: no mailbox, the
    /// process data SMs are SM0/SM1 (the layout of the segments before CoE).
    pub coe: Option<CoeSpec>,
    /// A device without a mailbox whose SII lists these process-data sync managers, SM0 first,
    /// each with the PDOs assigned to it (`[[device.sm]]`); `None`: the generated layout (SM0
    /// outputs at 0x1000 and SM1 inputs at 0x1800, or SM0 inputs alone).
    pub sms: Option<Vec<SmSpec>>,
    /// The time the device takes for SII commands, AL state changes and mailbox answers
    /// (`[device.timing]`); all 0: at once.
    pub timing: EscTiming,
    /// Ports the ESC implements: 2 (ports 0 and 1), 3 (0, 3 and 1) or 4.
    pub ports: u8,
    /// Where the device is plugged in: the position of a device before it and that device's
    /// port; `None` for the first device, which faces the master.
    pub upstream: Upstream,
    /// Files the device serves over FoE (`[[device.file]]`); empty: no FoE.
    pub files: Vec<FileSpec>,
    /// Ethernet over EtherCAT (`[device.eoe]`).
    pub eoe: Option<EoeSpec>,
}

impl DeviceSpec {
    /// The ports of this ESC a frame leaves through after its processing unit, in that order
    /// (ETG.1000.4: 0 -> 3 -> 1 -> 2).
    pub fn downstream_ports(&self) -> &'static [u8] {
        match self.ports {
            4 => &[3, 1, 2],
            3 => &[3, 1],
            _ => &[1],
        }
    }
}

/// A process-data sync manager of a device without a mailbox, as a real terminal's SII lists it
/// (ETG.2010 category SyncManager: start, length, control, enable, type): a digital output
/// terminal has SM0 at 0x0F00 (the ESC's digital output register) with control 0x44 (buffered,
/// written by the master, watchdog), a digital input terminal SM0 at 0x1000 with control 0x00
/// (buffered, read by the master); a 16-channel one adds SM1 at 0x0F01 / 0x1001.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmSpec {
    /// Physical start address.
    pub start: u16,
    /// Control register value (mode and direction bits 0..3 must be buffered and the
    /// direction's).
    pub control: u8,
    /// The SII's enable byte (bit 0 enable, bit 3 enable in OP only).
    pub enable: u8,
    /// Outputs (SII type 3) or inputs (type 4).
    pub dir: Direction,
    /// The PDOs assigned to it, in order.
    pub pdos: Vec<u16>,
}

/// Most process-data sync managers a `[[device.sm]]` list holds: ethercrab 0.7 reads a
/// subdevice's SII sync managers into a `heapless::Vec<SyncManager, 8>`.
pub const MAX_SMS: usize = 8;

/// The CoE part of a device description (`coe = true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoeSpec {
    /// 0x1000 device type (`device_type`).
    pub device_type: u32,
    /// 0x1009 / 0x100A (`hardware_version`, `software_version`; default "1.0").
    pub hardware_version: String,
    pub software_version: String,
    /// 0x1C32:05 / 0x1C33:05 minimum cycle time, ns.
    pub min_cycle_ns: u32,
    /// Capacity of each process data sync manager buffer (`pdo_buffer`), bytes: a mapping or
    /// assignment beyond it aborts 0x06040042.
    pub pdo_buffer_bytes: u16,
    /// Every PDO, with its options; the default-assigned ones are also in `rxpdo` / `txpdo`.
    pub pdos: Vec<CoePdo>,
    /// The application objects of `[[device.object]]`.
    pub objects: Vec<crate::od::Object>,
    /// The device profile (`profile`), if any.
    pub profile: Option<Profile>,
}

/// One PDO of a CoE device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoePdo {
    pub dir: Direction,
    /// Index, name and default mapping.
    pub pdo: PdoSpec,
    /// In the default assignment.
    pub assigned: bool,
    /// May be added to / removed from the assignment (0x1C12 / 0x1C13 writable in PRE-OP).
    pub assignable: bool,
    /// Its mapping may be written in PRE-OP.
    pub mappable: bool,
    /// Most entries (the number of subindexes of the mapping object).
    pub max_entries: u8,
}

impl DeviceSpec {
    /// The RxPDOs (outputs) the device's SII lists: the listed ones or the generated default.
    pub fn rx_pdos(&self) -> Cow<'_, [PdoSpec]> {
        match &self.rxpdo {
            Some(l) => Cow::Borrowed(l),
            None => Cow::Owned(pdo::default_pdos(self.outputs, Direction::Outputs)),
        }
    }

    /// The TxPDOs (inputs) the device's SII lists: the listed ones or the generated default.
    pub fn tx_pdos(&self) -> Cow<'_, [PdoSpec]> {
        match &self.txpdo {
            Some(l) => Cow::Borrowed(l),
            None => Cow::Owned(pdo::default_pdos(self.inputs, Direction::Inputs)),
        }
    }

    /// Bytes of process data sync manager `k` of [`DeviceSpec::sms`] carries (its PDOs' bits / 8;
    /// a checked spec carries whole bytes per SM).
    pub fn sm_bytes(&self, k: usize) -> u16 {
        let Some(sm) = self.sms.as_ref().and_then(|l| l.get(k)) else {
            return 0;
        };
        let list = match sm.dir {
            Direction::Outputs => self.rx_pdos(),
            Direction::Inputs => self.tx_pdos(),
        };
        let bits: u32 = list
            .iter()
            .filter(|p| sm.pdos.contains(&p.index))
            .map(PdoSpec::bits)
            .sum();
        (bits / 8) as u16
    }

    /// Working counter this device adds to one LRW of the whole image (+2 outputs, +1 inputs).
    pub fn lrw_wkc(&self) -> u16 {
        (if self.outputs > 0 { 2 } else { 0 }) + (if self.inputs > 0 { 1 } else { 0 })
    }
}

/// The whole chain, in wiring order (position 0 is next to the master).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSpec {
    pub name: String,
    pub devices: Vec<DeviceSpec>,
}

impl SegmentSpec {
    /// The reference segment (docs/NOTES.md §1): 3 subdevices, 132 bytes of process data, WKC 9.
    pub fn reference() -> Self {
        Self::uniform(3, 22, 22)
    }

    /// `n` identical subdevices with the given output/input sizes.
    pub fn uniform(n: usize, outputs: u16, inputs: u16) -> Self {
        let devices = (0..n)
            .map(|i| DeviceSpec {
                name: "RZ/T2M-SIM".into(),
                vendor_id: REFERENCE_VENDOR,
                product_id: REFERENCE_PRODUCT,
                revision: 1,
                serial: 1000 + i as u32,
                outputs,
                inputs,
                dc: false,
                dc_clock: crate::dc::DcClockSpec::default(),
                hop_ns: crate::esc::HOP_NS as u32,
                alias: 0,
                rxpdo: None,
                txpdo: None,
                coe: None,
                sms: None,
                timing: EscTiming::default(),
                ports: 2,
                upstream: None,
                files: Vec::new(),
                eoe: None,
            })
            .collect();
        Self {
            name: format!("{n}x{outputs}+{inputs}"),
            devices,
        }
    }

    /// The CoE example segment (`examples/coe/segment.toml`): DIO8-COE, AI4-COE, SERVO-COE.
    pub fn coe_example() -> Self {
        Self::from_toml(COE_EXAMPLE).expect("the shipped CoE example is valid")
    }

    /// `n` CoE devices (1..=[`MAX_DEVICES`]): the three devices of [`SegmentSpec::coe_example`]
    /// repeated in their order (serial = position + 1), for bring-up and recovery benchmarks
    /// of larger CoE segments.
    pub fn coe_reference(n: usize) -> Self {
        let example = Self::coe_example();
        let devices = (0..n)
            .map(|i| DeviceSpec {
                serial: i as u32 + 1,
                upstream: None,
                ..example.devices[i % example.devices.len()].clone()
            })
            .collect();
        Self {
            name: format!("{n} CoE devices"),
            devices,
        }
    }

    /// Give every device the same `[device.timing]` (bring-up benchmarks of larger segments).
    pub fn with_timing(mut self, timing: EscTiming) -> Self {
        for d in &mut self.devices {
            d.timing = timing;
        }
        self
    }

    /// Switch distributed-clock support on or off for every device.
    pub fn with_dc(mut self, dc: bool) -> Self {
        for d in &mut self.devices {
            d.dc = dc;
        }
        self
    }

    pub fn expected_wkc(&self) -> u32 {
        self.devices.iter().map(|d| u32::from(d.lrw_wkc())).sum()
    }

    pub fn pdi_bytes(&self) -> usize {
        self.devices
            .iter()
            .map(|d| usize::from(d.outputs) + usize::from(d.inputs))
            .sum()
    }

    /// Check a spec built or changed in code as [`SegmentSpec::from_toml`] checks a description:
    /// sizes and process image within the limits, listed PDOs carrying exactly their device's
    /// bytes, every mapping and name valid, the names within the SII strings category. Fields
    /// are named `device[position]`.
    pub fn check(&self) -> Result<(), SpecError> {
        if self.devices.is_empty() || self.devices.len() > MAX_DEVICES {
            return Err(SpecError::Invalid(format!(
                "{} subdevices: a segment has 1..={MAX_DEVICES}",
                self.devices.len()
            )));
        }
        check_name("name", &self.name)?;
        if self.pdi_bytes() > MAX_PDI_BYTES {
            return Err(SpecError::Invalid(format!(
                "the process image is {} bytes, more than the {MAX_PDI_BYTES} rtcat's master runs",
                self.pdi_bytes()
            )));
        }
        for (i, d) in self.devices.iter().enumerate() {
            check_name(&format!("device[{i}].name"), &d.name)?;
            hop_ns(i, Some(d.hop_ns))?;
            if d.outputs == 0 && d.inputs == 0 {
                return Err(SpecError::Invalid(format!(
                    "device[{i}]: outputs and inputs are both 0; a subdevice needs process data"
                )));
            }
            for (dir, bytes, list) in [
                (Direction::Outputs, d.outputs, &d.rxpdo),
                (Direction::Inputs, d.inputs, &d.txpdo),
            ] {
                let listed = list.as_ref().map(|l| {
                    l.iter()
                        .map(|p| PdoEntry {
                            index: p.index,
                            name: p.name.clone(),
                            entries: p
                                .entries
                                .iter()
                                .map(|e| EntryEntry {
                                    index: e.index,
                                    sub: e.sub,
                                    bits: Some(e.bits),
                                    data_type: e.data_type.map(|t| t.name().to_string()),
                                    name: e.name.clone(),
                                })
                                .collect(),
                            assigned: None,
                            assignable: None,
                            mappable: None,
                            max_entries: None,
                            sm: None,
                        })
                        .collect()
                });
                direction(i, dir, Some(bytes), &listed, d.coe.is_some())?;
            }
            check_mapping(i, d)?;
            check_sms(i, d)?;
        }
        Ok(())
    }

    /// Read and validate a segment file: a regular file of at most [`MAX_FILE_BYTES`] (a FIFO or
    /// a device such as `/dev/zero` is refused without blocking).
    pub fn load(path: &Path) -> Result<Self, SpecError> {
        let text = safefs::read_to_string_bounded(path, MAX_FILE_BYTES).map_err(SpecError::Read)?;
        Self::from_toml(&text).map_err(|e| match e {
            SpecError::Parse { source, .. } => SpecError::Parse {
                path: path.display().to_string(),
                source,
            },
            SpecError::Invalid(m) => SpecError::Invalid(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parse and validate a segment description. Every error names the offending field
    /// (`device[i].field = value`) and the allowed range.
    pub fn from_toml(text: &str) -> Result<Self, SpecError> {
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(SpecError::Invalid(format!(
                "the description is {} bytes, larger than the limit of {MAX_FILE_BYTES} bytes",
                text.len()
            )));
        }
        let file: SegmentFile = toml::from_str(text).map_err(|source| SpecError::Parse {
            path: "<string>".into(),
            source,
        })?;
        if let Some(n) = &file.name {
            check_name("name", n)?;
        }
        if file.device.is_empty() {
            return Err(SpecError::Invalid(
                "no [[device]] entries: a segment needs at least one subdevice".into(),
            ));
        }
        if file.device.len() > MAX_DEVICES {
            return Err(SpecError::Invalid(format!(
                "{} [[device]] entries: a segment has at most {MAX_DEVICES} subdevices \
                 (what rtcat's master runs)",
                file.device.len()
            )));
        }
        // The entry each device comes from, for messages.
        let mut entries: Vec<usize> = Vec::new();
        let mut devices = Vec::new();
        let mut pdi = 0usize;
        for (i, e) in file.device.iter().enumerate() {
            if e.count == 0 {
                return Err(SpecError::Invalid(format!(
                    "device[{i}].count = 0: must be at least 1"
                )));
            }
            let total = devices.len() as u64 + u64::from(e.count);
            if total > MAX_DEVICES as u64 {
                return Err(SpecError::Invalid(format!(
                    "device[{i}].count = {}: the segment would have {total} subdevices, more \
                     than the {MAX_DEVICES} rtcat's master runs",
                    e.count
                )));
            }
            check_name(&format!("device[{i}].name"), &e.name)?;
            let profiled;
            let e = match &e.profile {
                Some(name) => {
                    profiled = with_profile(i, e, name)?;
                    &profiled
                }
                None => e,
            };
            let (outputs, rxpdo, mut pdos) =
                direction(i, Direction::Outputs, e.outputs, &e.rxpdo, e.coe)?;
            let (inputs, txpdo, tx) = direction(i, Direction::Inputs, e.inputs, &e.txpdo, e.coe)?;
            pdos.extend(tx);
            if outputs == 0 && inputs == 0 {
                return Err(SpecError::Invalid(format!(
                    "device[{i}]: outputs and inputs are both 0; a subdevice needs process data"
                )));
            }
            // count <= MAX_DEVICES here, so this cannot overflow.
            pdi += e.count as usize * (usize::from(outputs) + usize::from(inputs));
            if pdi > MAX_PDI_BYTES {
                return Err(SpecError::Invalid(format!(
                    "device[{i}] (count = {}, outputs = {outputs}, inputs = {inputs}): the \
                     process image would be {pdi} bytes, more than the {MAX_PDI_BYTES} rtcat's \
                     master runs",
                    e.count
                )));
            }
            let first = DeviceSpec {
                name: e.name.clone(),
                vendor_id: e.vendor_id,
                product_id: e.product_id.unwrap_or(REFERENCE_PRODUCT),
                revision: e.revision,
                serial: e.serial,
                outputs,
                inputs,
                dc: e.dc,
                dc_clock: dc_clock(i, e)?,
                hop_ns: hop_ns(i, e.hop_ns)?,
                alias: e.alias,
                rxpdo,
                txpdo,
                coe: None,
                sms: None,
                timing: timing(i, e.timing)?,
                ports: match e.ports {
                    None => 2,
                    Some(p @ 2..=4) => p,
                    Some(p) => {
                        return Err(SpecError::Invalid(format!(
                            "device[{i}].ports = {p}: an ESC has 2, 3 or 4 ports"
                        )));
                    }
                },
                // Resolved with the whole list (`wiring`).
                upstream: None,
                files: files(i, e)?,
                eoe: eoe(i, e)?,
            };
            let first = DeviceSpec {
                coe: crate::odspec::coe_spec(i, e_coe(e), &first, pdos)?,
                ..first
            };
            let first = DeviceSpec {
                sms: sms_of(i, e, &first)?,
                ..first
            };
            check_mapping(i, &first)?;
            check_sms(i, &first)?;
            for k in 0..e.count {
                // `upstream` places the first device of the entry; the others follow it.
                let upstream = match (k, e.upstream) {
                    (0, Some([p, port])) => {
                        Some((p as usize, u8::try_from(port).unwrap_or(u8::MAX)))
                    }
                    _ => None,
                };
                entries.push(i);
                devices.push(DeviceSpec {
                    serial: e.serial.wrapping_add(k),
                    upstream,
                    ..first.clone()
                });
            }
        }
        let defaulted: Vec<bool> = file.device.iter().map(|e| e.product_id.is_none()).collect();
        check_identities(&mut devices, &entries, &defaulted)?;
        let wiring = wiring(&devices).map_err(|(pos, why)| {
            SpecError::Invalid(format!("device[{}] (position {pos}): {why}", entries[pos]))
        })?;
        for (d, up) in devices.iter_mut().zip(wiring) {
            d.upstream = up;
        }
        Ok(Self {
            name: file
                .name
                .unwrap_or_else(|| format!("{} subdevices", devices.len())),
            devices,
        })
    }
}

/// Devices of one identity and revision carry one SII: masters cache it by identity and revision
/// (rtcat's tools and bring-up do). So entries without a `product_id` that describe different
/// devices get product codes of their own (the reference code, then the codes after it, in the
/// order the descriptions first appear; identical descriptions share one), and two entries that
/// name one identity but describe different devices are refused, naming both. The serial
/// number, the station alias and the config area's CRC may differ, as between two real devices
/// of one type.
fn check_identities(
    devices: &mut [DeviceSpec],
    entries: &[usize],
    defaulted: &[bool],
) -> Result<(), SpecError> {
    // The SII as a master compares it, without what differs between devices of one type.
    let comparable = |d: &DeviceSpec, product: bool| -> Result<Vec<u8>, SpecError> {
        let mut img = crate::sii::build_image(d)
            .map_err(|e| SpecError::Invalid(format!("device {}: {e}", d.name)))?;
        img[8..10].fill(0);
        img[14] = 0;
        if !product {
            img[20..24].fill(0);
        }
        img[28..32].fill(0);
        Ok(img)
    };
    // Defaulted entries: one product code per distinct description.
    let mut codes: Vec<(Vec<u8>, u32)> = Vec::new();
    let mut product_of_entry: Vec<Option<u32>> = vec![None; defaulted.len()];
    for pos in 0..devices.len() {
        let entry = entries[pos];
        if !defaulted[entry] {
            continue;
        }
        if product_of_entry[entry].is_none() {
            let img = comparable(&devices[pos], false)?;
            let code = match codes.iter().find(|(i, _)| *i == img) {
                Some((_, c)) => *c,
                None => {
                    let c = REFERENCE_PRODUCT.wrapping_add(codes.len() as u32);
                    codes.push((img, c));
                    c
                }
            };
            product_of_entry[entry] = Some(code);
        }
        devices[pos].product_id = product_of_entry[entry].unwrap_or(REFERENCE_PRODUCT);
    }
    let mut seen: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    for pos in 0..devices.len() {
        let entry = entries[pos];
        if seen.iter().any(|(e, _, _)| *e == entry) {
            continue; // the copies of one entry (`count`) are one description
        }
        let d = &devices[pos];
        let img = comparable(d, true)?;
        for (e, other_pos, other_img) in &seen {
            let other = &devices[*other_pos];
            let same_identity = (other.vendor_id, other.product_id, other.revision)
                == (d.vendor_id, d.product_id, d.revision);
            if same_identity && *other_img != img {
                return Err(SpecError::Invalid(format!(
                    "device[{entry}] ({}) and device[{e}] ({}) have one identity (vendor_id \
                     {:#010x}, product_id {:#010x}, revision {}) but describe different devices: \
                     real devices of one identity and revision share their SII, and a master \
                     caches it by identity; give device[{entry}] a product_id (or revision) of \
                     its own",
                    d.name, other.name, d.vendor_id, d.product_id, d.revision
                )));
            }
        }
        seen.push((entry, pos, img));
    }
    Ok(())
}

/// Where a device is plugged in: the position and port of the device before it (`None`: the
/// master).
pub type Upstream = Option<(usize, u8)>;

/// Where each device is plugged in: its `upstream` where given (checked: a device before it,
/// a port that device has and nothing else uses), else the first free port of the device
/// before it in the order a frame leaves through them; and the list must be the processing
/// order (depth first, ports 3, 1, 2), which is the order of the positions a master counts.
/// The error names the position and why.
pub fn wiring(devices: &[DeviceSpec]) -> Result<Vec<Upstream>, (usize, String)> {
    let n = devices.len();
    let mut children: Vec<[Option<usize>; 4]> = vec![[None; 4]; n];
    let mut out = Vec::with_capacity(n);
    for (i, d) in devices.iter().enumerate() {
        let up = match (i, d.upstream) {
            (0, None) => None,
            (0, Some(_)) => {
                return Err((
                    0,
                    "the first device faces the master: it has no upstream".into(),
                ));
            }
            (_, Some((p, port))) => {
                if p >= i {
                    return Err((
                        i,
                        format!("upstream = [{p}, {port}]: position {p} is not before this one"),
                    ));
                }
                let ports = devices[p].downstream_ports();
                if !ports.contains(&port) {
                    return Err((
                        i,
                        format!(
                            "upstream = [{p}, {port}]: the device at position {p} has no port \
                             {port} to plug into (its ports after 0: {ports:?})"
                        ),
                    ));
                }
                if let Some(other) = children[p][usize::from(port)] {
                    return Err((
                        i,
                        format!(
                            "upstream = [{p}, {port}]: port {port} of position {p} already \
                             leads to position {other}"
                        ),
                    ));
                }
                Some((p, port))
            }
            (_, None) => {
                let p = i - 1;
                let free = devices[p]
                    .downstream_ports()
                    .iter()
                    .copied()
                    .find(|&q| children[p][usize::from(q)].is_none());
                match free {
                    Some(q) => Some((p, q)),
                    None => {
                        return Err((
                            i,
                            format!(
                                "every port of position {p} is taken: say where this device is \
                                 plugged in with upstream = [POSITION, PORT]"
                            ),
                        ));
                    }
                }
            }
        };
        if let Some((p, port)) = up {
            children[p][usize::from(port)] = Some(i);
        }
        out.push(up);
    }
    // Depth first from position 0, ports in the order a frame leaves through them.
    let mut order = Vec::with_capacity(n);
    let mut stack = if n > 0 { vec![0] } else { vec![] };
    while let Some(d) = stack.pop() {
        order.push(d);
        for &port in devices[d].downstream_ports().iter().rev() {
            if let Some(c) = children[d][usize::from(port)] {
                stack.push(c);
            }
        }
    }
    if let Some((k, &d)) = order.iter().enumerate().find(|(k, d)| *k != **d) {
        return Err((
            d,
            format!(
                "a frame reaches this device as the {}th, but it is listed at position {d}: \
                 list the devices in the order a frame reaches them (depth first through \
                 ports 3, 1, 2)",
                k + 1
            ),
        ));
    }
    Ok(out)
}

/// Longest hop a device may be given: 100 µs (20 km of cable).
pub const MAX_HOP_NS: u32 = 100_000;

fn hop_ns(i: usize, v: Option<u32>) -> Result<u32, SpecError> {
    match v {
        None => Ok(crate::esc::HOP_NS as u32),
        Some(v) if (1..=MAX_HOP_NS).contains(&v) => Ok(v),
        Some(v) => Err(SpecError::Invalid(format!(
            "device[{i}].hop_ns = {v}: must be 1..={MAX_HOP_NS} ns"
        ))),
    }
}

/// The clock of `device[i]`: the keys need `dc = true`, and stay in range.
fn dc_clock(i: usize, e: &DeviceEntry) -> Result<crate::dc::DcClockSpec, SpecError> {
    use crate::dc::{DcClockSpec, MAX_DRIFT_PPM, MAX_OFFSET_NS};
    let given = [
        ("dc_offset_ns", e.dc_offset_ns.is_some()),
        ("dc_drift_ppm", e.dc_drift_ppm.is_some()),
        ("dc_sync_window_ns", e.dc_sync_window_ns.is_some()),
    ];
    if !e.dc
        && let Some((key, _)) = given.iter().find(|(_, g)| *g)
    {
        return Err(SpecError::Invalid(format!(
            "device[{i}].{key}: given for a device without distributed clocks (set dc = true)"
        )));
    }
    let mut c = DcClockSpec::default();
    if let Some(v) = e.dc_offset_ns {
        if !(0..=MAX_OFFSET_NS).contains(&v) {
            return Err(SpecError::Invalid(format!(
                "device[{i}].dc_offset_ns = {v}: must be 0..={MAX_OFFSET_NS} ns"
            )));
        }
        c.offset_ns = Some(v);
    }
    if let Some(v) = e.dc_drift_ppm {
        if !v.is_finite() || v.abs() > MAX_DRIFT_PPM {
            return Err(SpecError::Invalid(format!(
                "device[{i}].dc_drift_ppm = {v}: must be -{MAX_DRIFT_PPM}..={MAX_DRIFT_PPM} ppm"
            )));
        }
        c.drift_ppb = (v * 1000.0).round() as i64;
    }
    if let Some(v) = e.dc_sync_window_ns {
        if v == 0 || v > 0x7fff_ffff {
            return Err(SpecError::Invalid(format!(
                "device[{i}].dc_sync_window_ns = {v}: must be 1..=2147483647 ns (0x092C's range)"
            )));
        }
        c.sync_window_ns = v;
    }
    Ok(c)
}

/// The byte count and PDOs of one direction of `device[i]`: the generated default from the byte
/// count, or the listed PDOs, checked, with the byte count they carry.
fn direction(
    i: usize,
    dir: Direction,
    bytes: Option<u16>,
    pdos: &Option<Vec<PdoEntry>>,
    coe: bool,
) -> Result<Direction1, SpecError> {
    let key = dir.key();
    let bytes_key = dir.bytes_key();
    if let Some(v) = bytes
        && v > MAX_IO_BYTES
    {
        return Err(SpecError::Invalid(format!(
            "device[{i}].{bytes_key} = {v}: must be 0..={MAX_IO_BYTES} bytes"
        )));
    }
    let Some(list) = pdos else {
        return Ok((bytes.unwrap_or(0), None, Vec::new()));
    };
    if list.len() > MAX_PDOS {
        return Err(SpecError::Invalid(format!(
            "device[{i}].{key}: {} PDOs, more than the {MAX_PDOS} per direction ethercrab reads",
            list.len()
        )));
    }
    let mut out = Vec::with_capacity(list.len());
    let mut coe_pdos = Vec::new();
    let mut bits: u64 = 0;
    for (p, pdo_entry) in list.iter().enumerate() {
        let at = format!("device[{i}].{key}[{p}]");
        let range = dir.index_range();
        if !range.contains(&pdo_entry.index) {
            return Err(SpecError::Invalid(format!(
                "{at}.index = {:#06x}: {key} mapping objects are {:#06x}..={:#06x}",
                pdo_entry.index,
                range.start(),
                range.end()
            )));
        }
        if let Some(q) = list[..p].iter().position(|o| o.index == pdo_entry.index) {
            return Err(SpecError::Invalid(format!(
                "{at}.index = {:#06x}: already used by device[{i}].{key}[{q}]",
                pdo_entry.index
            )));
        }
        check_name(&format!("{at}.name"), &pdo_entry.name)?;
        let options = [
            ("assigned", pdo_entry.assigned.is_some()),
            ("assignable", pdo_entry.assignable.is_some()),
            ("mappable", pdo_entry.mappable.is_some()),
            ("max_entries", pdo_entry.max_entries.is_some()),
        ];
        if !coe && let Some((key, _)) = options.iter().find(|(_, set)| *set) {
            return Err(SpecError::Invalid(format!(
                "{at}.{key}: only a CoE device (coe = true) has a PDO assignment and mapping"
            )));
        }
        let assigned = pdo_entry.assigned.unwrap_or(true);
        let mappable = pdo_entry.mappable.unwrap_or(false);
        let max_entries = pdo_entry.max_entries.unwrap_or(DEFAULT_MAX_ENTRIES);
        if mappable && (max_entries == 0 || usize::from(max_entries) < pdo_entry.entries.len()) {
            return Err(SpecError::Invalid(format!(
                "{at}.max_entries = {max_entries}: must be 1..=255 and hold the {} entries listed",
                pdo_entry.entries.len()
            )));
        }
        let may_be_empty = mappable && !assigned;
        if (pdo_entry.entries.is_empty() && !may_be_empty)
            || pdo_entry.entries.len() > MAX_ENTRIES_PER_PDO
        {
            return Err(SpecError::Invalid(format!(
                "{at}.entries: {} entries, must be 1..={MAX_ENTRIES_PER_PDO} (the SII entry count \
                 is one byte)",
                pdo_entry.entries.len()
            )));
        }
        let mut entries = Vec::with_capacity(pdo_entry.entries.len());
        for (k, e) in pdo_entry.entries.iter().enumerate() {
            let entry = entry(&format!("{at}.entries[{k}]"), e)?;
            if let Some(name) = &entry.name
                && let Some(j) = entries
                    .iter()
                    .position(|o: &PdoEntrySpec| o.name.as_ref() == Some(name))
            {
                return Err(SpecError::Invalid(format!(
                    "{at}.entries[{k}].name = {name:?}: already the name of {at}.entries[{j}] \
                     (names are unique within a PDO)"
                )));
            }
            if assigned {
                bits += u64::from(entry.bits);
            }
            entries.push(entry);
        }
        let pdo = PdoSpec {
            index: pdo_entry.index,
            name: pdo_entry.name.clone(),
            entries,
        };
        if assigned {
            out.push(pdo.clone());
        }
        if coe {
            coe_pdos.push(CoePdo {
                dir,
                pdo,
                assigned,
                assignable: pdo_entry.assignable.unwrap_or(false),
                mappable,
                max_entries: if mappable {
                    max_entries
                } else {
                    pdo_entry.entries.len() as u8
                },
            });
        }
    }
    let carried = if bits.is_multiple_of(8) && bits / 8 <= u64::from(MAX_IO_BYTES) {
        bits / 8
    } else {
        return Err(SpecError::Invalid(format!(
            "device[{i}].{key}: the entries carry {bits} bits; they must carry whole bytes, at \
             most {MAX_IO_BYTES} ({} bits)",
            8 * MAX_IO_BYTES as u32
        )));
    };
    if let Some(v) = bytes
        && u64::from(v) != carried
    {
        return Err(SpecError::Invalid(format!(
            "device[{i}].{bytes_key} = {v}: the {key} entries carry {bits} bits ({carried} \
             bytes); leave {bytes_key} out or make it {carried}"
        )));
    }
    Ok((carried as u16, Some(out), coe_pdos))
}

/// One direction of a device: its byte count, the PDOs its SII lists (the default assignment)
/// and, for a CoE device, every PDO with its options.
type Direction1 = (u16, Option<Vec<PdoSpec>>, Vec<CoePdo>);

/// Entries a mappable PDO holds when the description does not say.
const DEFAULT_MAX_ENTRIES: u8 = 8;

/// One PDO entry: padding (index 0: `bits`, no type, no name, subindex 0) or a named, typed
/// object whose `bits`, if given, is the type's width.
fn entry(at: &str, e: &EntryEntry) -> Result<PdoEntrySpec, SpecError> {
    let invalid = |m: String| Err(SpecError::Invalid(format!("{at}{m}")));
    if e.index == 0 {
        if let Some(t) = &e.data_type {
            return invalid(format!(
                ".type = {:?}: a padding entry (index = 0) has no type",
                truncated(t, 40)
            ));
        }
        if let Some(n) = &e.name {
            return invalid(format!(
                ".name = {:?}: a padding entry (index = 0) has no name",
                truncated(n, 40)
            ));
        }
        if e.sub != 0 {
            return invalid(format!(
                ".sub = {}: a padding entry (index = 0) has subindex 0",
                e.sub
            ));
        }
        return match e.bits {
            None | Some(0) => invalid(format!(
                ".bits = {}: a padding entry (index = 0) needs bits = 1..=255",
                e.bits.unwrap_or(0)
            )),
            Some(bits) => Ok(PdoEntrySpec {
                index: 0,
                sub: 0,
                bits,
                data_type: None,
                name: None,
            }),
        };
    }
    let Some(type_name) = &e.data_type else {
        return invalid(format!(
            ": index {:#06x} needs a type ({})",
            e.index,
            type_names()
        ));
    };
    let Some(data_type) = DataType::from_name(type_name) else {
        return invalid(format!(
            ".type = {:?}: not a data type; one of {}",
            truncated(type_name, 40),
            type_names()
        ));
    };
    if let Some(bits) = e.bits
        && bits != data_type.bits()
    {
        return invalid(format!(
            ".bits = {bits}: {data_type} is {} bits wide",
            data_type.bits()
        ));
    }
    let Some(name) = &e.name else {
        return invalid(format!(": index {:#06x} needs a name", e.index));
    };
    check_name(&format!("{at}.name"), name)?;
    Ok(PdoEntrySpec {
        index: e.index,
        sub: e.sub,
        bits: data_type.bits(),
        data_type: Some(data_type),
        name: Some(name.clone()),
    })
}

fn type_names() -> String {
    DataType::ALL.map(DataType::name).join(", ")
}

/// Checks across both directions of a device: an object is mapped once, the entry count keeps the
/// SII image bounded, and the names fit the SII strings category.
fn check_mapping(i: usize, d: &DeviceSpec) -> Result<(), SpecError> {
    let lists = [
        (Direction::Outputs, d.rx_pdos()),
        (Direction::Inputs, d.tx_pdos()),
    ];
    let total: usize = lists
        .iter()
        .flat_map(|(_, l)| l.iter())
        .map(|p| p.entries.len())
        .sum();
    if total > MAX_ENTRIES {
        return Err(SpecError::Invalid(format!(
            "device[{i}]: {total} PDO entries, more than the {MAX_ENTRIES} a device may list"
        )));
    }
    let mut seen: Vec<(u16, u8, String)> = Vec::new();
    for (dir, list) in &lists {
        for (p, pdo) in list.iter().enumerate() {
            for (k, e) in pdo.entries.iter().enumerate() {
                if e.is_padding() {
                    continue;
                }
                let at = format!("device[{i}].{}[{p}].entries[{k}]", dir.key());
                if let Some((_, _, first)) =
                    seen.iter().find(|(x, s, _)| (*x, *s) == (e.index, e.sub))
                {
                    return Err(SpecError::Invalid(format!(
                        "{at}: object {:#06x}:{:02x} is already mapped by {first}",
                        e.index, e.sub
                    )));
                }
                seen.push((e.index, e.sub, at));
            }
        }
    }
    crate::sii::Strings::of(d)
        .map(|_| ())
        .map_err(|e| SpecError::Invalid(format!("device[{i}]: {e}")))
}

/// The `[[device.sm]]` list of `device[i]` with each PDO assigned to its SM (`sm = k`, or the
/// first SM of its direction), for a device without a mailbox; `None` without that list.
fn sms_of(i: usize, e: &DeviceEntry, d: &DeviceSpec) -> Result<Option<Vec<SmSpec>>, SpecError> {
    let Some(list) = &e.sm else {
        for (key, pdos) in [("rxpdo", &e.rxpdo), ("txpdo", &e.txpdo)] {
            if let Some(p) = pdos.iter().flatten().position(|p| p.sm.is_some()) {
                return Err(SpecError::Invalid(format!(
                    "device[{i}].{key}[{p}].sm: given without [[device.sm]] (the sync managers \
                     it would name)"
                )));
            }
        }
        return Ok(None);
    };
    if e.coe || e.profile.is_some() {
        return Err(SpecError::Invalid(format!(
            "device[{i}].sm: a CoE device has its mailbox on SM0/SM1 and its process data on \
             SM2/SM3; [[device.sm]] describes a device without a mailbox"
        )));
    }
    if list.is_empty() || list.len() > MAX_SMS {
        return Err(SpecError::Invalid(format!(
            "device[{i}].sm: {} sync managers, must be 1..={MAX_SMS} (what ethercrab reads from \
             an SII)",
            list.len()
        )));
    }
    let mut sms = Vec::with_capacity(list.len());
    for (k, s) in list.iter().enumerate() {
        let dir = match s.usage.as_str() {
            "outputs" => Direction::Outputs,
            "inputs" => Direction::Inputs,
            other => {
                return Err(SpecError::Invalid(format!(
                    "device[{i}].sm[{k}].usage = {:?}: must be \"outputs\" or \"inputs\" (a \
                     device without a mailbox has process-data sync managers only)",
                    truncated(other, 40)
                )));
            }
        };
        sms.push(SmSpec {
            start: s.start,
            control: s.control,
            enable: s.enable,
            dir,
            pdos: Vec::new(),
        });
    }
    for (dir, listed, pdos) in [
        (Direction::Outputs, &e.rxpdo, d.rx_pdos()),
        (Direction::Inputs, &e.txpdo, d.tx_pdos()),
    ] {
        for (p, pdo) in pdos.iter().enumerate() {
            let named = listed.as_ref().and_then(|l| l.get(p)).and_then(|x| x.sm);
            let k = match named {
                Some(k) => {
                    let at = format!("device[{i}].{}[{p}].sm = {k}", dir.key());
                    match sms.get(usize::from(k)) {
                        None => {
                            return Err(SpecError::Invalid(format!(
                                "{at}: the device lists {} sync managers (sm 0..={})",
                                sms.len(),
                                sms.len() - 1
                            )));
                        }
                        Some(s) if s.dir != dir => {
                            return Err(SpecError::Invalid(format!(
                                "{at}: sm[{k}] carries {}",
                                s.dir.bytes_key()
                            )));
                        }
                        Some(_) => usize::from(k),
                    }
                }
                None => sms.iter().position(|s| s.dir == dir).ok_or_else(|| {
                    SpecError::Invalid(format!(
                        "device[{i}].{}[{p}]: no [[device.sm]] with usage = \"{}\" to carry it",
                        dir.key(),
                        dir.bytes_key()
                    ))
                })?,
            };
            sms[k].pdos.push(pdo.index);
        }
    }
    Ok(Some(sms))
}

/// The sync managers of a device without a mailbox ([`DeviceSpec::sms`]) as an ESC takes them:
/// buffered mode and the direction's bits in the control byte, enabled, whole bytes each, within
/// the digital output register (0x0F00..0x0F03) or the process RAM, not overlapping; and, a
/// limit of the simulator's `pdi` rule, one direction's SMs back to back in memory (one image
/// per direction).
fn check_sms(i: usize, d: &DeviceSpec) -> Result<(), SpecError> {
    let Some(sms) = &d.sms else {
        return Ok(());
    };
    if d.coe.is_some() {
        return Err(SpecError::Invalid(format!(
            "device[{i}].sm: a CoE device has its process data on SM2/SM3"
        )));
    }
    if sms.is_empty() || sms.len() > MAX_SMS {
        return Err(SpecError::Invalid(format!(
            "device[{i}].sm: {} sync managers, must be 1..={MAX_SMS}",
            sms.len()
        )));
    }
    for (dir, list) in [
        (Direction::Outputs, d.rx_pdos()),
        (Direction::Inputs, d.tx_pdos()),
    ] {
        for (p, pdo) in list.iter().enumerate() {
            let n = sms
                .iter()
                .filter(|s| s.dir == dir && s.pdos.contains(&pdo.index))
                .count();
            if n != 1 {
                return Err(SpecError::Invalid(format!(
                    "device[{i}].{}[{p}] ({:#06x}): assigned to {n} sync managers of its \
                     direction, must be 1",
                    dir.key(),
                    pdo.index
                )));
            }
        }
    }
    let mut used: Vec<(usize, usize, usize)> = Vec::new();
    for (k, s) in sms.iter().enumerate() {
        let at = format!("device[{i}].sm[{k}]");
        // Control bits 0..1 operation mode (00 buffered), 2..3 direction (01 written by the
        // master, 00 read by it): ESC datasheet section II, SyncManager control 0x0804.
        let want = if s.dir == Direction::Outputs {
            0x04
        } else {
            0x00
        };
        if s.control & 0x0f != want {
            return Err(SpecError::Invalid(format!(
                "{at}.control = {:#04x}: {} need bits 0..3 = {want:#04x} (buffered, {} by the \
                 master)",
                s.control,
                s.dir.bytes_key(),
                if want == 0 { "read" } else { "written" }
            )));
        }
        if s.enable & 1 == 0 {
            return Err(SpecError::Invalid(format!(
                "{at}.enable = {:#04x}: bit 0 (enable) must be set for a process-data SM",
                s.enable
            )));
        }
        let list = match s.dir {
            Direction::Outputs => d.rx_pdos(),
            Direction::Inputs => d.tx_pdos(),
        };
        let bits: u32 = list
            .iter()
            .filter(|p| s.pdos.contains(&p.index))
            .map(PdoSpec::bits)
            .sum();
        if !bits.is_multiple_of(8) {
            return Err(SpecError::Invalid(format!(
                "{at}: its PDOs carry {bits} bits; each sync manager carries whole bytes"
            )));
        }
        let (start, end) = (
            usize::from(s.start),
            usize::from(s.start) + bits as usize / 8,
        );
        let in_dio = (0x0f00..0x0f04).contains(&start) && end <= 0x0f04;
        let in_ram = start >= 0x1000 && end <= crate::esc::MEM_SIZE;
        if !in_dio && !in_ram {
            return Err(SpecError::Invalid(format!(
                "{at}.start = {:#06x}: {} bytes from there must lie in the digital output \
                 register 0x0f00..0x0f03 or the process RAM 0x1000..{:#06x}",
                s.start,
                end - start,
                crate::esc::MEM_SIZE
            )));
        }
        if let Some((j, _, _)) = used.iter().find(|(_, a, b)| start < *b && end > *a) {
            return Err(SpecError::Invalid(format!(
                "{at}.start = {:#06x}: overlaps sm[{j}]",
                s.start
            )));
        }
        if let Some(&(j, _, b)) = used
            .iter()
            .rev()
            .find(|(j, _, _)| sms[*j].dir == s.dir && bits > 0)
            && b != start
        {
            return Err(SpecError::Invalid(format!(
                "{at}.start = {:#06x}: the simulator keeps one {} image, so sm[{k}] must start \
                 where sm[{j}] ends ({b:#06x})",
                s.start,
                s.dir.bytes_key()
            )));
        }
        if bits > 0 {
            used.push((k, start, end));
        }
    }
    Ok(())
}

pub(crate) fn check_name_pub(field: &str, name: &str) -> Result<(), SpecError> {
    check_name(field, name)
}

/// Names end up in the SII EEPROM, status lines and logs: printable ASCII only.
fn check_name(field: &str, name: &str) -> Result<(), SpecError> {
    let printable = name.bytes().all(|b| (0x20..=0x7e).contains(&b));
    if name.is_empty() || name.len() > MAX_NAME_CHARS || !printable {
        return Err(SpecError::Invalid(format!(
            "{field} = {:?}: must be 1..={MAX_NAME_CHARS} printable ASCII characters",
            truncated(name, 80)
        )));
    }
    Ok(())
}

/// At most `max` characters of `s` (for messages that quote input).
pub(crate) fn truncated(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((at, _)) => format!("{}...", &s[..at]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_segment_matches_the_reference_study() {
        let s = SegmentSpec::reference();
        assert_eq!(s.devices.len(), 3);
        assert_eq!(s.pdi_bytes(), 132);
        assert_eq!(s.expected_wkc(), 9);
    }

    #[test]
    fn parses_repeated_entries() {
        let s = SegmentSpec::from_toml(
            "[[device]]\ncount = 2\noutputs = 4\ninputs = 2\nserial = 7\n\
             [[device]]\nname = \"IN\"\ninputs = 8\ndc = true\n",
        )
        .unwrap();
        assert_eq!(s.devices.len(), 3);
        assert_eq!(s.devices[1].serial, 8);
        assert_eq!(s.expected_wkc(), 3 + 3 + 1);
        assert!(s.devices[2].dc);
    }

    /// Two different devices on the default identity would share one SII in a master's cache
    /// (found with an I/O terminal and a CoE drive in `rtcat bench --sim`): each description
    /// gets its own default product code; identical ones keep one; an identity named twice for
    /// different devices is refused with both named.
    #[test]
    fn different_devices_never_share_an_identity() {
        let s = SegmentSpec::from_toml(
            "[[device]]\noutputs = 4\ninputs = 2\n\
             [[device]]\nname = \"IN\"\ninputs = 8\n\
             [[device]]\noutputs = 4\ninputs = 2\nserial = 9\nalias = 3\n",
        )
        .unwrap();
        let p: Vec<u32> = s.devices.iter().map(|d| d.product_id).collect();
        assert_eq!(
            p,
            [REFERENCE_PRODUCT, REFERENCE_PRODUCT + 1, REFERENCE_PRODUCT]
        );
        let e = SegmentSpec::from_toml(
            "[[device]]\nproduct_id = 7\noutputs = 4\n\
             [[device]]\nname = \"IN\"\nproduct_id = 7\ninputs = 8\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("device[1] (IN) and device[0]") && e.contains("product_id"),
            "{e}"
        );
        // An explicit identity the same as a default one, for a different device: refused too.
        let e = SegmentSpec::from_toml(
            "[[device]]\noutputs = 4\n[[device]]\nproduct_id = 0x00010001\ninputs = 8\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("one identity"), "{e}");
    }

    #[test]
    fn errors_name_the_field() {
        let e = SegmentSpec::from_toml("[[device]]\noutputs = 5000\n").unwrap_err();
        assert!(e.to_string().contains("device[0].outputs = 5000"), "{e}");
        let e = SegmentSpec::from_toml("[[device]]\noutptus = 1\n").unwrap_err();
        assert!(e.to_string().contains("outptus"), "{e}");
        let e = SegmentSpec::from_toml("[[device]]\ncount = 0\ninputs = 1\n").unwrap_err();
        assert!(e.to_string().contains("device[0].count"), "{e}");
        let e = SegmentSpec::from_toml("name = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("no [[device]]"), "{e}");
    }
}

#[cfg(test)]
mod sync_managers {
    use super::*;

    const DI: &str = "[[device]]\nname = \"DI\"\n[[device.sm]]\nstart = 0x1000\ncontrol = 0x00\n\
                      usage = \"inputs\"\n[[device.txpdo]]\nindex = 0x1a00\nname = \"C1\"\n\
                      entries = [{ index = 0x6000, sub = 1, type = \"UNSIGNED8\", name = \"In\" }]\n";

    fn refused(text: &str, want: &str) {
        let e = SegmentSpec::from_toml(text).unwrap_err().to_string();
        assert!(e.contains(want), "{want:?} not in {e:?}");
    }

    #[test]
    fn the_example_terminals_assign_their_pdos_per_sm() {
        let s =
            SegmentSpec::from_toml(include_str!("../../../examples/sm01/segment.toml")).unwrap();
        let do16 = &s.devices[2];
        let sms = do16.sms.as_ref().unwrap();
        assert_eq!(sms[0].pdos, (0x1600..0x1608).collect::<Vec<u16>>());
        assert_eq!(sms[1].pdos, (0x1608..0x1610).collect::<Vec<u16>>());
        assert_eq!(
            (do16.sm_bytes(0), do16.sm_bytes(1), do16.outputs),
            (1, 1, 2)
        );
        let di = SegmentSpec::from_toml(DI).unwrap();
        assert_eq!(di.devices[0].sms.as_ref().unwrap()[0].pdos, [0x1a00]);
        assert_eq!(di.expected_wkc(), 1);
    }

    #[test]
    fn bad_sync_managers_name_the_field() {
        refused(
            &DI.replace("control = 0x00", "control = 0x04"),
            "device[0].sm[0].control = 0x04: inputs need bits 0..3 = 0x00",
        );
        refused(
            &DI.replace("usage = \"inputs\"", "usage = \"mailbox\""),
            "device[0].sm[0].usage = \"mailbox\"",
        );
        refused(
            &DI.replace("start = 0x1000", "start = 0x0f80"),
            "device[0].sm[0].start = 0x0f80",
        );
        refused(
            &DI.replace("usage = \"inputs\"", "usage = \"outputs\""),
            "device[0].txpdo[0]: no [[device.sm]] with usage = \"inputs\"",
        );
        refused(
            &DI.replace("name = \"C1\"\n", "name = \"C1\"\nsm = 1\n"),
            "device[0].txpdo[0].sm = 1: the device lists 1 sync managers",
        );
        refused(
            &DI.replace("name = \"DI\"\n", "name = \"DI\"\ncoe = true\n"),
            "device[0].sm: a CoE device has its mailbox on SM0/SM1",
        );
        refused(
            "[[device]]\ninputs = 1\n[[device.txpdo]]\nindex = 0x1a00\nname = \"C\"\nsm = 0\n\
             entries = [{ index = 0x6000, sub = 1, type = \"UNSIGNED8\", name = \"In\" }]\n",
            "device[0].txpdo[0].sm: given without [[device.sm]]",
        );
        // Two input SMs that are not back to back.
        let two = format!(
            "{DI}[[device.sm]]\nstart = 0x1004\ncontrol = 0x00\nusage = \"inputs\"\n\
             [[device.txpdo]]\nindex = 0x1a01\nname = \"C2\"\nsm = 1\n\
             entries = [{{ index = 0x6010, sub = 1, type = \"UNSIGNED8\", name = \"In\" }}]\n"
        );
        refused(
            &two,
            "device[0].sm[1].start = 0x1004: the simulator keeps one inputs image",
        );
        assert!(SegmentSpec::from_toml(&two.replace("0x1004", "0x1001")).is_ok());
    }
}

#[cfg(test)]
mod pdo_lists {
    use super::*;
    use proptest::prelude::*;

    /// One device with inputs given as `entries` (TOML inline tables) in one TxPDO.
    fn with_inputs(extra: &str, entries: &str) -> Result<SegmentSpec, SpecError> {
        SegmentSpec::from_toml(&format!(
            "[[device]]\nname = \"D\"\n{extra}[[device.txpdo]]\nindex = 0x1a00\n\
             name = \"In\"\nentries = [{entries}]\n"
        ))
    }

    #[test]
    fn explicit_entries_set_the_process_data_size() {
        let s = with_inputs(
            "",
            "{ index = 0x6000, sub = 1, type = \"BOOL\", name = \"A\" },\
             { index = 0x6000, sub = 2, bits = 1, type = \"BOOL\", name = \"B\" },\
             { index = 0, bits = 6 }, { index = 0x6001, sub = 1, type = \"INT16\", name = \"C\" }",
        )
        .unwrap();
        let d = &s.devices[0];
        assert_eq!((d.inputs, d.outputs), (3, 0));
        assert!(d.rxpdo.is_none() && d.rx_pdos().is_empty());
        let e = &d.tx_pdos()[0].entries;
        assert_eq!(e.len(), 4);
        assert_eq!(e[1].bits, 1);
        assert_eq!(e[3].data_type, Some(DataType::Int16));
        assert_eq!(e[3].bits, 16);
        assert!(e[2].is_padding() && e[2].name.is_none());
        assert_eq!(s.expected_wkc(), 1);
        // Given sizes must agree; repeated devices share the mapping.
        let s = with_inputs(
            "count = 2\ninputs = 1\noutputs = 2\n",
            "{ index = 0x6000, sub = 1, type = \"UNSIGNED8\", name = \"A\" }",
        )
        .unwrap();
        assert_eq!(s.devices.len(), 2);
        assert_eq!(s.devices[1].txpdo, s.devices[0].txpdo);
        assert_eq!(s.devices[1].rx_pdos()[0].name, "Outputs");
        assert_eq!(s.pdi_bytes(), 6);
    }

    #[test]
    fn the_shipped_io_segment_loads() {
        let s = SegmentSpec::from_toml(include_str!("../../../examples/segment-io.toml")).unwrap();
        let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["EL1008-SIM", "EL2008-SIM", "AIO2-SIM"]);
        let bits = |p: &[PdoSpec]| p.iter().map(PdoSpec::bits).sum::<u32>();
        let d = &s.devices;
        assert_eq!((d[0].inputs, d[0].outputs), (1, 0));
        assert_eq!(d[0].tx_pdos().len(), 8);
        assert_eq!(bits(&d[0].tx_pdos()), 8);
        assert_eq!((d[1].inputs, d[1].outputs), (0, 1));
        assert_eq!(d[1].rx_pdos()[0].entries[0].name.as_deref(), Some("Output"));
        assert!(d[2].tx_pdos().iter().flat_map(|p| &p.entries).any(|e| {
            e.data_type == Some(DataType::Int16) && e.name.as_deref() == Some("Value")
        }));
        assert_eq!(s.expected_wkc(), 1 + 2 + 3);
    }

    #[test]
    fn bad_entries_are_named() {
        let bool_a = "{ index = 0x6000, sub = 1, type = \"BOOL\", name = \"A\" }";
        for (extra, entries, want) in [
            (
                "",
                bool_a,
                "device[0].txpdo: the entries carry 1 bits; they must carry whole bytes",
            ),
            (
                "inputs = 2\n",
                "{ index = 0, bits = 8 }",
                "device[0].inputs = 2: the txpdo entries carry 8 bits (1 bytes)",
            ),
            (
                "",
                "{ index = 0x6000, sub = 1, type = \"BOOLEAN\", name = \"A\" }",
                "device[0].txpdo[0].entries[0].type = \"BOOLEAN\": not a data type; one of BOOL, INT8",
            ),
            (
                "",
                "{ index = 0x6000, sub = 1, bits = 8, type = \"INT16\", name = \"A\" }",
                "device[0].txpdo[0].entries[0].bits = 8: INT16 is 16 bits wide",
            ),
            (
                "",
                "{ index = 0x6000, sub = 1, name = \"A\" }",
                "device[0].txpdo[0].entries[0]: index 0x6000 needs a type",
            ),
            (
                "",
                "{ index = 0x6000, sub = 1, type = \"INT8\" }",
                "device[0].txpdo[0].entries[0]: index 0x6000 needs a name",
            ),
            (
                "",
                &format!(
                    "{{ index = 0x6000, sub = 1, type = \"INT8\", name = \"{}\" }}",
                    "n".repeat(65)
                ),
                "device[0].txpdo[0].entries[0].name = ",
            ),
            (
                "",
                "{ index = 0, bits = 8, name = \"gap\" }",
                "device[0].txpdo[0].entries[0].name = \"gap\": a padding entry (index = 0) has no name",
            ),
            (
                "",
                "{ index = 0, bits = 8, type = \"INT8\" }",
                "device[0].txpdo[0].entries[0].type = \"INT8\": a padding entry",
            ),
            (
                "",
                "{ index = 0, sub = 3, bits = 8 }",
                "device[0].txpdo[0].entries[0].sub = 3: a padding entry (index = 0) has subindex 0",
            ),
            (
                "",
                "{ index = 0 }",
                "device[0].txpdo[0].entries[0].bits = 0: a padding entry",
            ),
            (
                "",
                "",
                "device[0].txpdo[0].entries: 0 entries, must be 1..=255",
            ),
            (
                "",
                &format!("{bool_a}, {bool_a}, {{ index = 0, bits = 6 }}"),
                "device[0].txpdo[0].entries[1].name = \"A\": already the name of device[0].txpdo[0].entries[0]",
            ),
            (
                "",
                "{ index = 0x6000, sub = 1, type = \"INT8\", name = \"A\" }, \
                  { index = 0x6000, sub = 1, type = \"INT8\", name = \"B\" }",
                "device[0].txpdo[0].entries[1]: object 0x6000:01 is already mapped by device[0].txpdo[0].entries[0]",
            ),
            (
                "",
                "{ index = 0x6000, sub = 1, type = \"INT8\", name = \"A\", scale = 2 }",
                "scale",
            ),
            (
                "",
                "{ index = 0x6000, sub = 300, type = \"INT8\", name = \"A\" }",
                "sub",
            ),
        ] {
            let e = with_inputs(extra, entries).unwrap_err().to_string();
            assert!(e.contains(want), "{entries}: {e}");
        }
        let e = SegmentSpec::from_toml(
            "[[device]]\n[[device.rxpdo]]\nindex = 0x1a00\nname = \"X\"\n\
             entries = [{ index = 0x7000, sub = 1, type = \"INT8\", name = \"A\" }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(
                "device[0].rxpdo[0].index = 0x1a00: rxpdo mapping objects are 0x1600..=0x17ff"
            ),
            "{e}"
        );
        let pdo = "[[device.txpdo]]\nindex = 0x1a00\nname = \"X\"\n\
                   entries = [{ index = 0, bits = 8 }]\n";
        let e = SegmentSpec::from_toml(&format!("[[device]]\n{pdo}{pdo}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("device[0].txpdo[1].index = 0x1a00: already used by device[0].txpdo[0]"),
            "{e}"
        );
        let many: String = (0..65)
            .map(|k| {
                format!(
                    "[[device.txpdo]]\nindex = {}\nname = \"X\"\nentries = [{{ index = 0, bits = 8 }}]\n",
                    0x1a00 + k
                )
            })
            .collect();
        let e = SegmentSpec::from_toml(&format!("[[device]]\n{many}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("device[0].txpdo: 65 PDOs, more than the 64"),
            "{e}"
        );
        // The same object in both directions.
        let e = SegmentSpec::from_toml(
            "[[device]]\n[[device.rxpdo]]\nindex = 0x1600\nname = \"O\"\n\
             entries = [{ index = 0x7000, sub = 1, type = \"INT8\", name = \"A\" }]\n\
             [[device.txpdo]]\nindex = 0x1a00\nname = \"I\"\n\
             entries = [{ index = 0x7000, sub = 1, type = \"INT8\", name = \"A\" }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("device[0].txpdo[0].entries[0]: object 0x7000:01 is already mapped by device[0].rxpdo[0].entries[0]"),
            "{e}"
        );
    }

    #[test]
    fn the_shipped_coe_segment_loads_with_the_contract_devices() {
        use crate::od::{Access, Od, ValueType};
        let s = SegmentSpec::coe_example();
        let id: Vec<(&str, u32, u32, u32)> = s
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.vendor_id, d.product_id, d.revision))
            .collect();
        assert_eq!(
            id,
            [
                ("DIO8-COE", REFERENCE_VENDOR, 0x0003_0001, 1),
                ("AI4-COE", REFERENCE_VENDOR, 0x0003_0002, 1),
                ("SERVO-COE", REFERENCE_VENDOR, 0x0003_0003, 1)
            ]
        );
        let sizes: Vec<(u16, u16)> = s.devices.iter().map(|d| (d.outputs, d.inputs)).collect();
        assert_eq!(sizes, [(1, 1), (0, 8), (2, 2)]);
        assert_eq!(s.expected_wkc(), 3 + 1 + 3);
        let od: Vec<Od> = s
            .devices
            .iter()
            .map(|d| Od::build(d, d.coe.as_ref().expect("CoE")))
            .collect();
        let u32_at = |o: &Od, i, k| u32::from_le_bytes(o.value(i, k).unwrap().try_into().unwrap());
        assert_eq!(u32_at(&od[0], 0x1000, 0), 0x1389);
        assert_eq!(u32_at(&od[1], 0x1000, 0), 0x1389);
        assert_eq!(u32_at(&od[2], 0x1000, 0), 0x0002_0192);
        for (o, d) in od.iter().zip(&s.devices) {
            assert_eq!(o.value(0x1008, 0), Some(d.name.as_bytes()));
            assert_eq!(o.value(0x1009, 0), Some(&b"1.0"[..]));
            assert_eq!(o.value(0x100a, 0), Some(&b"1.0"[..]));
            assert_eq!(u32_at(o, 0x1018, 2), d.product_id);
            let types: Vec<u8> = (1..=4).map(|k| o.value(0x1c00, k).unwrap()[0]).collect();
            assert_eq!(types, [1, 2, 3, 4]);
            for i in [0x1c32, 0x1c33] {
                assert!(o.object(i).and_then(|x| x.entry(5)).is_some(), "{i:#x}:05");
            }
        }
        // DIO8: fixed PDOs of 8 BOOLs.
        assert_eq!(od[0].assigned(Direction::Outputs), [0x1600]);
        assert_eq!(od[0].assigned(Direction::Inputs), [0x1a00]);
        assert_eq!(od[0].mapping(0x1a00)[7], (0x6000, 8, 1));
        assert_eq!(od[0].object(0x1c12).unwrap().entries[0].access, Access::Ro);
        assert_eq!(od[0].object(0x1600).unwrap().entries[1].access, Access::Ro);
        assert_eq!(od[0].object(0x7000).unwrap().entries[3].name, "Output 3");
        // AI4: channels 1 and 2 assigned, 4 assignable, fixed mappings of 32 bits.
        assert_eq!(od[1].assigned(Direction::Inputs), [0x1a00, 0x1a01]);
        assert!(od[1].assigned(Direction::Outputs).is_empty());
        assert_eq!(od[1].rules(Direction::Inputs).max_pdos, 4);
        assert_eq!(
            od[1].object(0x1c13).unwrap().entries[0].access,
            Access::RwPreOp
        );
        assert_eq!(
            od[1].mapping(0x1a03),
            [
                (0x6030, 1, 1),
                (0x6030, 2, 1),
                (0, 0, 14),
                (0x6030, 0x11, 16)
            ]
        );
        assert_eq!(od[1].object(0x1a03).unwrap().entries[1].access, Access::Ro);
        let filter = od[1].object(0x8030).unwrap().entry(0x15).unwrap();
        assert_eq!(
            (filter.min, filter.max, filter.access),
            (Some(0), Some(7), Access::Rw)
        );
        assert_eq!(
            od[1].object(0x8000).unwrap().entry(6).unwrap().name,
            "Enable filter"
        );
        // SERVO: controlword / statusword, 4 mappable PDOs of 8 entries, 2 assignable.
        assert_eq!(od[2].mapping(0x1600), [(0x6040, 0, 16)]);
        assert_eq!(od[2].mapping(0x1a00), [(0x6041, 0, 16)]);
        assert!(od[2].mapping(0x1601).is_empty());
        for p in [0x1600, 0x1601, 0x1a00, 0x1a01] {
            let o = od[2].object(p).unwrap();
            assert_eq!(o.max_sub(), 8, "{p:#x}");
            assert_eq!(o.entries[0].access, Access::RwPreOp);
        }
        assert_eq!(od[2].rules(Direction::Outputs).max_pdos, 2);
        for (i, ty, access, map) in [
            (
                0x6040,
                DataType::Unsigned16,
                Access::Rw,
                Some(Direction::Outputs),
            ),
            (
                0x6041,
                DataType::Unsigned16,
                Access::Ro,
                Some(Direction::Inputs),
            ),
            (0x6060, DataType::Int8, Access::Rw, Some(Direction::Outputs)),
            (0x6061, DataType::Int8, Access::Ro, Some(Direction::Inputs)),
            (
                0x607a,
                DataType::Int32,
                Access::Rw,
                Some(Direction::Outputs),
            ),
            (0x6064, DataType::Int32, Access::Ro, Some(Direction::Inputs)),
            (
                0x60ff,
                DataType::Int32,
                Access::Rw,
                Some(Direction::Outputs),
            ),
            (0x606c, DataType::Int32, Access::Ro, Some(Direction::Inputs)),
            (
                0x6071,
                DataType::Int16,
                Access::Rw,
                Some(Direction::Outputs),
            ),
            (0x6077, DataType::Int16, Access::Ro, Some(Direction::Inputs)),
            (0x6085, DataType::Unsigned32, Access::Rw, None),
            (0x6502, DataType::Unsigned32, Access::Ro, None),
        ] {
            let e = od[2].object(i).and_then(|o| o.entry(0)).expect("object");
            assert_eq!(
                (e.ty, e.access, e.mapping),
                (ValueType::Basic(ty), access, map),
                "{i:#x}"
            );
        }
        assert_eq!(u32_at(&od[2], 0x6085, 0), 10_000);
        assert_eq!(u32_at(&od[2], 0x6502, 0), 0x380);
        // The benchmark segment repeats the three.
        let big = SegmentSpec::coe_reference(64);
        assert_eq!(big.devices.len(), 64);
        assert_eq!(big.devices[63].name, "DIO8-COE");
        assert_eq!(big.devices[63].serial, 64);
        big.check().unwrap();
    }

    #[test]
    fn bad_objects_are_named() {
        let dev = "[[device]]\nname = \"D\"\ncoe = true\ninputs = 1\n";
        let obj = |rest: &str| format!("[[device.object]]\nindex = 0x2000\nname = \"X\"\n{rest}");
        for (extra, want) in [
            (
                obj("type = \"UINT9\"\n"),
                "device[0].object[0].type = \"UINT9\": not a data type",
            ),
            (
                obj("type = \"UINT8\"\naccess = \"rx\"\n"),
                "device[0].object[0].access = \"rx\": one of ro, rw, wo, rw_preop",
            ),
            (
                obj("type = \"UINT8\"\ndefault = 256\n"),
                "device[0].object[0].default = 256: outside the range of UNSIGNED8",
            ),
            (
                obj("type = \"INT8\"\nmin = 5\nmax = 1\n"),
                "device[0].object[0]: min = 5 is above max = 1",
            ),
            (
                "[[device.object]]\nindex = 0x1018\nname = \"X\"\ntype = \"UINT8\"\n".into(),
                "device[0].object[0].index = 0x1018: generated by the simulator",
            ),
            (
                obj(
                    "type = \"RECORD\"\n[[device.object.entry]]\nsub = 0\nname = \"Y\"\ntype = \"UINT8\"\n",
                ),
                "device[0].object[0].entry[0].sub = 0: subindex 0",
            ),
            (
                format!("{}{}", obj("type = \"UINT8\"\n"), obj("type = \"UINT8\"\n")),
                "device[0].object[1].index = 0x2000: already device[0].object[0]",
            ),
            (obj("type = \"UINT8\"\nscale = 1\n"), "scale"),
        ] {
            let e = SegmentSpec::from_toml(&format!("{dev}{extra}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
        // A listed object must agree with the PDO entry that maps it.
        let e = SegmentSpec::from_toml(
            "[[device]]\nname = \"D\"\ncoe = true\n\
             [[device.txpdo]]\nindex = 0x1a00\nname = \"I\"\n\
             entries = [{ index = 0x6000, sub = 1, type = \"UNSIGNED8\", name = \"A\" }]\n\
             [[device.object]]\nindex = 0x6000\nname = \"X\"\ntype = \"RECORD\"\n\
             [[device.object.entry]]\nsub = 1\nname = \"Y\"\ntype = \"UINT16\"\npdo_mapping = \"tx\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("object 0x6000:01 must be of type UNSIGNED8 with pdo_mapping = \"tx\""),
            "{e}"
        );
        let e = SegmentSpec::from_toml(
            "[[device]]\ninputs = 1\n[[device.object]]\nindex = 0x2000\nname = \"X\"\ntype = \"UINT8\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("device[0].object: only a CoE device (coe = true)"),
            "{e}"
        );
        let e = SegmentSpec::from_toml(
            "[[device]]\n[[device.txpdo]]\nindex = 0x1a00\nname = \"I\"\nmappable = true\n\
             entries = [{ index = 0, bits = 8 }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("device[0].txpdo[0].mappable: only a CoE device"),
            "{e}"
        );
        let e = SegmentSpec::from_toml(&format!("{dev}pdo_buffer = 0\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("device[0].pdo_buffer = 0"), "{e}");
    }

    #[test]
    fn check_applies_the_rules_of_the_description_to_specs_built_in_code() {
        let mut s = SegmentSpec::reference();
        s.check().unwrap();
        s.devices[1].outputs = 1;
        s.devices[1].inputs = 0;
        s.check().unwrap();
        let mut io =
            SegmentSpec::from_toml(include_str!("../../../examples/segment-io.toml")).unwrap();
        io.check().unwrap();
        io.devices[2].inputs = 9;
        let e = io.check().unwrap_err().to_string();
        assert!(
            e.contains("device[2].inputs = 9: the txpdo entries carry 64 bits (8 bytes)"),
            "{e}"
        );
        io.devices[2].inputs = 8;
        io.devices[2].txpdo.as_mut().unwrap()[0].entries[0].bits = 3;
        let e = io.check().unwrap_err().to_string();
        assert!(
            e.contains("device[2].txpdo[0].entries[0].bits = 3: BOOL is 1 bits wide"),
            "{e}"
        );
        let mut named = SegmentSpec::uniform(1, 4, 4);
        named.devices[0].name = "\n".into();
        assert!(
            named
                .check()
                .unwrap_err()
                .to_string()
                .contains("device[0].name")
        );
        assert!(
            SegmentSpec::uniform(0, 1, 1)
                .check()
                .unwrap_err()
                .to_string()
                .contains("0 subdevices")
        );
    }

    #[test]
    fn strings_beyond_the_sii_limit_are_an_error_not_a_truncation() {
        // 4 PDOs of 64 differently named UNSIGNED8: 256 entry names + name, group, 4 PDO names.
        let pdos: String = (0..4)
            .map(|p| {
                let entries: Vec<String> = (0..64)
                    .map(|k| {
                        format!(
                            "{{ index = {}, sub = {}, type = \"UNSIGNED8\", name = \"E{p}.{k}\" }}",
                            0x6000 + p,
                            k + 1
                        )
                    })
                    .collect();
                format!(
                    "[[device.txpdo]]\nindex = {}\nname = \"P{p}\"\nentries = [{}]\n",
                    0x1a00 + p,
                    entries.join(", ")
                )
            })
            .collect();
        let e = SegmentSpec::from_toml(&format!("[[device]]\nname = \"BIG\"\n{pdos}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("device[0]: 262 distinct strings") && e.contains("at most 255"),
            "{e}"
        );
    }

    /// An entry of a random PDO, mostly valid.
    #[derive(Debug, Clone)]
    enum Kind {
        Typed(String, Option<u8>),
        EightBools,
        Padding(u8),
        NoType,
        DuplicateName,
        DuplicateObject,
    }

    fn kind() -> impl Strategy<Value = Kind> {
        let types = || {
            prop::sample::select(
                DataType::ALL
                    .iter()
                    .filter(|t| t.bits() % 8 == 0)
                    .map(|t| t.name().to_string())
                    .collect::<Vec<_>>(),
            )
        };
        let any_type = prop::sample::select(
            DataType::ALL
                .iter()
                .map(|t| t.name().to_string())
                .chain(["BYTE".to_string(), "bool".to_string()])
                .collect::<Vec<_>>(),
        );
        let padding = prop_oneof![8 => Just(8u8), 8 => Just(16), 1 => 0u8..=255];
        let bad = prop_oneof![
            (any_type, 0u8..70).prop_map(|(t, b)| Kind::Typed(t, Some(b))),
            Just(Kind::NoType),
            Just(Kind::DuplicateName),
            Just(Kind::DuplicateObject),
        ];
        prop_oneof![
            40 => types().prop_map(|t| Kind::Typed(t, None)),
            6 => Just(Kind::EightBools),
            6 => padding.prop_map(Kind::Padding),
            3 => bad,
        ]
    }

    /// The `entries = [...]` of PDO `p` as TOML.
    fn entries_text(p: usize, kinds: &[Kind]) -> String {
        let mut out = Vec::new();
        let mut sub = 0u32;
        for k in kinds {
            let index = 0x6000 + p;
            let mut typed = |t: &str, bits: Option<u8>, sub_at: u32, name: String| {
                let bits = bits.map(|b| format!("bits = {b}, ")).unwrap_or_default();
                out.push(format!(
                    "{{ index = {index}, sub = {sub_at}, {bits}type = \"{t}\", name = \"{name}\" }}"
                ));
            };
            match k {
                Kind::Typed(t, bits) => {
                    sub += 1;
                    typed(t, *bits, sub, format!("E{sub}"));
                }
                Kind::EightBools => {
                    for _ in 0..8 {
                        sub += 1;
                        typed("BOOL", None, sub, format!("E{sub}"));
                    }
                }
                Kind::Padding(b) => out.push(format!("{{ index = 0, bits = {b} }}")),
                Kind::NoType => out.push(format!("{{ index = {index}, sub = 200 }}")),
                Kind::DuplicateName => {
                    sub += 1;
                    typed("UNSIGNED8", None, sub, "E1".into());
                }
                Kind::DuplicateObject => typed("UNSIGNED8", None, 1, "Dup".into()),
            }
        }
        out.join(", ")
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

        /// Random entry lists load, with SM sizes the sum of their bits over 8, or fail with an
        /// error naming the device; never a panic.
        #[test]
        fn random_entry_lists_load_or_are_refused(
            pdos in prop::collection::vec(prop_oneof![
                20 => prop::collection::vec(kind(), 1..8),
                1 => Just(Vec::new()),
            ], 1..4),
            inputs in prop::option::weighted(0.2, 0u16..40),
        ) {
            let mut text = String::from("[[device]]\nname = \"P\"\noutputs = 1\n");
            if let Some(n) = inputs {
                text.push_str(&format!("inputs = {n}\n"));
            }
            for (p, entries) in pdos.iter().enumerate() {
                text.push_str(&format!(
                    "[[device.txpdo]]\nindex = {}\nname = \"PDO {p}\"\nentries = [{}]\n",
                    0x1a00 + p,
                    entries_text(p, entries)
                ));
            }
            match SegmentSpec::from_toml(&text) {
                Ok(s) => {
                    let d = &s.devices[0];
                    let bits: u32 = d.tx_pdos().iter().map(PdoSpec::bits).sum();
                    prop_assert_eq!(bits % 8, 0);
                    prop_assert_eq!(u32::from(d.inputs), bits / 8);
                    let sms = crate::sii::process_data_sms(d);
                    let input_sm = sms.iter().find(|s| s.usage == 4).map_or(0, |s| s.len);
                    prop_assert_eq!(u32::from(input_sm), bits / 8);
                    if let Some(n) = inputs {
                        prop_assert_eq!(d.inputs, n);
                    }
                    for e in d.tx_pdos().iter().flat_map(|p| &p.entries) {
                        match e.data_type {
                            Some(t) => prop_assert_eq!(t.bits(), e.bits),
                            None => prop_assert!(e.is_padding()),
                        }
                    }
                    crate::sii::build_image(d).unwrap();
                    prop_assert!(s.check().is_ok(), "{:?}", s.check());
                }
                Err(e) => {
                    let e = e.to_string();
                    prop_assert!(e.contains("device[0]") || e.contains("TOML"), "{}", e);
                }
            }
        }
    }
}

#[cfg(test)]
mod limits {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn device_limit_is_the_masters() {
        let n = MAX_DEVICES;
        let at = format!("[[device]]\ncount = {n}\ninputs = 2\n");
        assert_eq!(SegmentSpec::from_toml(&at).unwrap().devices.len(), n);
        let over = format!("[[device]]\ncount = {}\ninputs = 2\n", n + 1);
        let e = SegmentSpec::from_toml(&over).unwrap_err().to_string();
        assert!(
            e.contains(&format!("device[0].count = {}", n + 1)) && e.contains(&n.to_string()),
            "{e}"
        );
        let split = format!(
            "[[device]]\ncount = {}\ninputs = 2\n[[device]]\ncount = 57\ninputs = 2\n",
            n - 56
        );
        let e = SegmentSpec::from_toml(&split).unwrap_err().to_string();
        assert!(
            e.contains("device[1].count = 57") && e.contains(&(n + 1).to_string()),
            "{e}"
        );
        let e = SegmentSpec::from_toml("[[device]]\ncount = 4294967295\ninputs = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("device[0].count = 4294967295"), "{e}");
        let many = "[[device]]\ninputs = 1\n".repeat(n + 1);
        let e = SegmentSpec::from_toml(&many).unwrap_err().to_string();
        assert!(e.contains(&format!("{} [[device]] entries", n + 1)), "{e}");
    }

    #[test]
    fn process_image_limit_is_the_masters() {
        let at = "[[device]]\ncount = 8\noutputs = 2048\n";
        assert_eq!(
            SegmentSpec::from_toml(at).unwrap().pdi_bytes(),
            MAX_PDI_BYTES
        );
        let over = format!("{at}[[device]]\ninputs = 1\n");
        let e = SegmentSpec::from_toml(&over).unwrap_err().to_string();
        assert!(
            e.contains("device[1]") && e.contains("16385") && e.contains("16384"),
            "{e}"
        );
    }

    #[test]
    fn names_are_printable_ascii() {
        let e = SegmentSpec::from_toml("[[device]]\nname = \"a\\u0007b\"\ninputs = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("device[0].name"), "{e}");
        let e = SegmentSpec::from_toml(&format!(
            "name = \"{}\"\n[[device]]\ninputs = 1\n",
            "n".repeat(65)
        ))
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("segment: name = "), "{e}");
        assert!(e.len() < 300, "the name is quoted whole: {e}");
    }

    #[test]
    fn text_over_the_size_limit_is_refused() {
        let big = format!(
            "[[device]]\ninputs = 1\n#{}\n",
            "x".repeat(MAX_FILE_BYTES as usize)
        );
        let e = SegmentSpec::from_toml(&big).unwrap_err().to_string();
        assert!(e.contains("limit of 1048576 bytes"), "{e}");
    }

    #[test]
    fn load_refuses_large_files_fifos_and_devices_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let big = d.path().join("big.toml");
        let mut text = String::from("[[device]]\ninputs = 1\n");
        text.push_str(&"# padding\n".repeat(110_000));
        std::fs::write(&big, text).unwrap();
        let e = SegmentSpec::load(&big).unwrap_err().to_string();
        assert!(e.contains("larger than the limit of 1048576 bytes"), "{e}");

        let fifo = d.path().join("fifo.toml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let zero = d.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send((
                SegmentSpec::load(&fifo)
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                SegmentSpec::load(&zero)
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
            ));
        });
        let (f, z) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("load returns");
        assert!(f.unwrap_err().contains("a FIFO"));
        assert!(z.unwrap_err().contains("a character device"));

        let ok = d.path().join("ok.toml");
        std::fs::write(&ok, "[[device]]\ncount = 2\ninputs = 4\n").unwrap();
        assert_eq!(SegmentSpec::load(&ok).unwrap().devices.len(), 2);
    }

    /// A valid document, one field of one entry of which is replaced by a bad value.
    fn field_and_bad_value() -> impl Strategy<Value = (&'static str, String)> {
        prop_oneof![
            (2049u32..=65535).prop_map(|v| ("outputs", v.to_string())),
            (2049u32..=65535).prop_map(|v| ("inputs", v.to_string())),
            (65536u64..=u64::MAX / 2).prop_map(|v| ("inputs", v.to_string())),
            (-1000i64..0).prop_map(|v| ("outputs", v.to_string())),
            ((MAX_DEVICES as u64 + 1)..=u32::MAX as u64).prop_map(|v| ("count", v.to_string())),
            Just(("count", "0".to_string())),
            (4294967296u64..=u64::MAX / 2).prop_map(|v| ("vendor_id", v.to_string())),
            (65536u32..=1 << 30).prop_map(|v| ("alias", v.to_string())),
            Just(("dc", "\"yes\"".to_string())),
            Just(("serial", "1.5".to_string())),
            "[a-z]{65,90}".prop_map(|n| ("name", format!("{n:?}"))),
            Just(("name", "\"\"".to_string())),
            Just(("name", "\"tab\\there\"".to_string())),
            Just(("revision", "[1, 2]".to_string())),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

        /// Any text: an error or a valid segment, never a panic, always within the limits.
        #[test]
        fn random_text_never_panics(text in prop_oneof![
            any::<String>(),
            "[\\[\\]a-z_=0-9\"\n .#-]{0,400}",
            proptest::collection::vec(
                prop_oneof![
                    Just("[[device]]\n".to_string()),
                    "count = [0-9]{1,12}\n",
                    "(outputs|inputs) = -?[0-9]{1,7}\n",
                    "name = \"[ -~]{0,80}\"\n",
                    "dc = (true|false)\n",
                    Just("name = \"seg\"\n".to_string()),
                ],
                0..40,
            ).prop_map(|v| v.concat()),
        ]) {
            match SegmentSpec::from_toml(&text) {
                Ok(s) => {
                    prop_assert!(!s.devices.is_empty() && s.devices.len() <= MAX_DEVICES);
                    prop_assert!(s.pdi_bytes() <= MAX_PDI_BYTES);
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        /// A bad value in one field of one entry: refused, and the error names that field.
        #[test]
        fn a_bad_field_is_named(
            entries in 1usize..4,
            at in 0usize..4,
            (field, bad) in field_and_bad_value(),
        ) {
            let at = at % entries;
            let mut text = String::from("name = \"prop\"\n");
            for i in 0..entries {
                text.push_str("[[device]]\n");
                let fields = [
                    ("count", "2".to_string()),
                    ("name", "\"DEV\"".to_string()),
                    ("vendor_id", "0x766".to_string()),
                    ("revision", "1".to_string()),
                    ("serial", "10".to_string()),
                    ("outputs", "4".to_string()),
                    ("inputs", "4".to_string()),
                    ("dc", "false".to_string()),
                    ("alias", "0".to_string()),
                ];
                for (k, v) in fields {
                    let v = if i == at && k == field { bad.clone() } else { v };
                    text.push_str(&format!("{k} = {v}\n"));
                }
            }
            let e = SegmentSpec::from_toml(&text).unwrap_err().to_string();
            prop_assert!(e.contains(field), "{field} = {bad}: {e}");
        }

        /// Valid documents parse to what they say (at most 29 entries of 4 devices of 64 bytes:
        /// within both limits).
        #[test]
        fn valid_documents_parse(entries in proptest::collection::vec((1u32..=4, 0u16..=32, 1u16..=32), 1..30)) {
            let mut text = String::new();
            for (count, outputs, inputs) in &entries {
                text.push_str(&format!(
                    "[[device]]\ncount = {count}\noutputs = {outputs}\ninputs = {inputs}\n"
                ));
            }
            let s = SegmentSpec::from_toml(&text).unwrap();
            let n: u32 = entries.iter().map(|e| e.0).sum();
            prop_assert_eq!(s.devices.len(), n as usize);
            let pdi: usize = entries
                .iter()
                .map(|(c, o, i)| *c as usize * (usize::from(*o) + usize::from(*i)))
                .sum();
            prop_assert_eq!(s.pdi_bytes(), pdi);
        }
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;

    #[test]
    fn file_descriptions_are_checked_naming_the_file() {
        let dev = "[[device]]\ncoe = true\ninputs = 2\n";
        for (files, why) in [
            (
                "[[device.file]]\nname = \"a\"\n[[device.file]]\nname = \"a\"\n",
                "device[0].file[1]: name \"a\" is listed twice",
            ),
            (
                "[[device.file]]\nname = \"a\"\ntext = \"x\"\nsize = 3\n",
                "device[0].file[0]: give text or size, not both",
            ),
            (
                "[[device.file]]\nname = \"a\"\nsize = 10\nmax_bytes = 5\n",
                "larger than max_bytes = 5",
            ),
            (
                "[[device.file]]\nname = \"a\"\nsize = 16777217\n",
                "at most 16777216 bytes",
            ),
            ("[[device.file]]\nname = \"\"\n", "device[0].file[0].name"),
            (
                "[[device.file]]\nname = \"a\"\nwritable = true\nrevision = 2\n",
                "device[0].file[0]: revision is what a firmware write installs",
            ),
        ] {
            let e = SegmentSpec::from_toml(&format!("{dev}{files}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{files}: {e}");
        }
        let e = SegmentSpec::from_toml("[[device]]\ninputs = 2\n[[device.file]]\nname = \"a\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("FoE needs a mailbox"), "{e}");
        let s = SegmentSpec::from_toml(&format!(
            "{dev}[[device.file]]\nname = \"fw\"\nsize = 300\nboot = true\n"
        ))
        .unwrap();
        let f = &s.devices[0].files[0];
        assert_eq!((f.content.len(), f.boot, f.writable), (300, true, false));
    }
}
