//! EtherCAT Slave Information (ESI) files: the XML description of a subdevice defined by
//! ETG.2000 ("EtherCAT Slave Information Specification"). Vendors ship one file per device
//! family; it names the devices (identity, names in several languages), their sync managers and
//! FMMUs, the mailbox protocols, the fixed and optional PDOs with their entries, and for CoE
//! devices the object dictionary (data types and objects with access rights and defaults).
//!
//! [`parse`] / [`read_file`] turn such a file into an [`EsiFile`]; [`Device::config_for`] prints
//! the rtcat `[[device]]` configuration that assigns (and, where the device allows it, maps) a
//! chosen set of PDOs.
//!
//! # Why roxmltree
//! ESI files are read once, whole, and then queried in every direction (a PDO's entries refer to
//! the dictionary, exclusions refer to other PDOs), so a read-only DOM fits better than a
//! streaming reader such as quick-xml, which would need a hand-written state machine per
//! element. roxmltree keeps the byte range of every node and attribute, which gives each error
//! its line; it refuses DTDs by default and has no network or file access (no external
//! entities), so a hostile file can only fail to parse.
//!
//! # What is read and what is not
//! Read: `Vendor`, `Descriptions/Groups`, every `Descriptions/Devices/Device` (several per
//! file; `Type` with `ProductCode`/`RevisionNo`, localized `Name`s, `GroupType`, `Fmmu`, `Sm`,
//! `Mailbox` with its protocols and the CoE flags, `RxPdo`/`TxPdo` with `Fixed`, `Mandatory`,
//! `Sm`, `Exclude` and entries, `Profile/Dictionary` data types and objects) and the names and
//! PDOs of `Descriptions/Modules/Module`, `Slots` of modular devices ([`Device::with_modules`]
//! assembles a module set), module description files (root `EtherCATModule`) and the
//! `InfoReference`s [`read_file`] follows to them. Passive devices (no `ProductCode`, no ESC)
//! are listed apart ([`EsiFile::passive`]). Not supported: slot groups, profile includes
//! (`Profile/DictionaryFile`), `Eeprom`, `Dc` operation modes, enum infos and vendor
//! extensions (`VendorSpecific`): they are skipped, never an error.
//!
//! [`parse_eni`] / [`read_eni`] read an ENI (EtherCAT Network Information, ETG.2100: a whole
//! network as a configuration tool exports it) into an [`EniFile`], and
//! [`EniFile::to_config`] turns it into an rtcat configuration, listing what rtcat does not run.
//!
//! Numbers are accepted in the forms vendor files use: decimal, `#x1A00`, `#X1A00` and `0x1A00`.
//! `DefaultData` is hex as the specification stores it (little-endian for numbers). Text is
//! UTF-8, or ISO-8859-1 / Windows-1252 (decoded as Windows-1252, as the WHATWG encoding standard
//! does) or UTF-16 as the XML declaration or a byte order mark says.
#![deny(missing_docs)]

mod config;
mod eni;
mod eniconfig;
mod parse;
mod text;

pub use config::{ConfigError, MAX_SLOT_POSITIONS, accepts};
pub use eni::{
    BitRange, CoeInitCmd, CyclicCmd, EniFile, EniMailbox, EniProcessData, EniSlave, EniSm,
    MailboxInitCmd, RegisterCmd, parse_eni, read_eni,
};
pub use eniconfig::{EniConfig, EniNote};
pub use parse::{MAX_ATTRIBUTES, MAX_DEPTH, parse, parse_number};

use serde::Serialize;
use std::path::Path;

/// The largest ESI file read. Vendor files that bundle a device family with all its revisions
/// and their dictionaries reach tens of megabytes. The DOM takes about eight times the text (a
/// 27 MB file of 800 devices: 230 MB peak, about 1 s on one core), so 64 MiB leaves room for
/// those and still bounds what a wrong path (a disk image, a log) can cost.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Why an ESI file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read (missing, not a regular file, over [`MAX_FILE_BYTES`]).
    #[error(transparent)]
    Read(#[from] safefs::Error),
    /// The bytes are not text in the encoding the file declares.
    #[error("{file}:{line}: {why}")]
    Encoding {
        /// File name as given.
        file: String,
        /// 1-based line of the first bad byte.
        line: u32,
        /// What is wrong.
        why: String,
    },
    /// Not well-formed XML (an unclosed tag, a bad character, ...).
    #[error("{file}:{line}: not well-formed XML: {why}")]
    Xml {
        /// File name as given.
        file: String,
        /// 1-based line where the parser stopped.
        line: u32,
        /// The XML parser's message.
        why: String,
    },
    /// An `InfoReference` that is not followed: outside the directory tree of the file given,
    /// absolute, over the bounds ([`MAX_REFERENCES`], [`MAX_REFERENCE_DEPTH`], the total size).
    #[error("{file}:{line}: InfoReference {reference:?}: {why}")]
    Reference {
        /// The referencing file's name.
        file: String,
        /// Line of the `InfoReference`.
        line: u32,
        /// The reference as written.
        reference: String,
        /// Why it is refused.
        why: String,
    },
    /// Well-formed XML that is not a valid ESI: a missing element, a bad number, ...
    #[error("{file}:{line}: {path}: {why}")]
    Invalid {
        /// File name as given.
        file: String,
        /// 1-based line of the element or attribute.
        line: u32,
        /// Element path from the enclosing `Device`/`Module` (an ENI's `Slave`; else the
        /// root's child), e.g.
        /// `Device/RxPdo/Entry/Index`; an attribute as `Device/Type@ProductCode`.
        path: String,
        /// What is wrong, with the value.
        why: String,
    },
}

impl Error {
    /// True when the input is at fault (everything but an I/O failure of the system).
    pub fn is_input(&self) -> bool {
        match self {
            Error::Read(e) => e.is_input() || e.io_kind() == Some(std::io::ErrorKind::NotFound),
            _ => true,
        }
    }
}

/// Most `InfoReference` files followed from one file given (all levels together).
pub const MAX_REFERENCES: usize = 64;
/// Deepest chain of references followed (the file given is depth 0; a module file it names is
/// depth 1).
pub const MAX_REFERENCE_DEPTH: usize = 4;

fn last_component(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Read and parse an ESI file (at most [`MAX_FILE_BYTES`]; FIFOs and devices are refused).
/// Errors name the file by its last path component and the line.
///
/// `InfoReference`s are followed: each names a file relative to the referencing file's
/// directory; the modules of the files read are added to [`EsiFile::modules`] (with their
/// [`Module::source`]). Bounded: at most [`MAX_REFERENCES`] files, [`MAX_REFERENCE_DEPTH`]
/// levels, [`MAX_FILE_BYTES`] for all files together; each is canonicalised (symbolic links
/// resolved) and must lie inside the directory of the file given, else the read fails. A file
/// named twice is read once; a referenced file that does not exist is a warning (the modules it
/// describes are then unknown), not an error.
pub fn read_file(path: &Path) -> Result<EsiFile, Error> {
    let bytes = safefs::read_bounded(path, MAX_FILE_BYTES)?;
    let name = last_component(path);
    let mut file = parse(&bytes, &name)?;
    if file.references.is_empty() {
        return Ok(file);
    }
    let top = std::fs::canonicalize(path).map_err(|e| safefs::Error::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let Some(tree) = top.parent().map(Path::to_path_buf) else {
        return Ok(file);
    };
    let mut total = bytes.len() as u64;
    let mut seen = vec![top.clone()];
    // (referencing file's canonical path, its name, its references, depth of those references)
    let mut pending = vec![(top, name, std::mem::take(&mut file.references), 1usize)];
    let mut followed = 0usize;
    while let Some((from, from_name, refs, depth)) = pending.pop() {
        for r in refs {
            let refuse = |why: String| Error::Reference {
                file: from_name.clone(),
                line: r.line,
                reference: r.file.clone(),
                why,
            };
            let rel = Path::new(r.file.trim());
            if r.file.trim().is_empty() {
                return Err(refuse("empty".into()));
            }
            if rel.is_absolute() {
                return Err(refuse(
                    "an absolute path: references are relative to the referencing file".into(),
                ));
            }
            if depth > MAX_REFERENCE_DEPTH {
                return Err(refuse(format!(
                    "references nest deeper than {MAX_REFERENCE_DEPTH} levels"
                )));
            }
            let dir = from.parent().unwrap_or(&tree);
            let target = match std::fs::canonicalize(dir.join(rel)) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    file.warnings.push(Warning {
                        file: from_name.clone(),
                        line: r.line,
                        path: "InfoReference".into(),
                        why: format!(
                            "{:?} not found beside the file: the modules it describes are unknown",
                            r.file
                        ),
                    });
                    continue;
                }
                Err(e) => return Err(refuse(e.to_string())),
            };
            if !target.starts_with(&tree) {
                return Err(refuse(
                    "it leads outside the directory of the file given (by \"..\" or a \
                     symbolic link): not followed"
                        .into(),
                ));
            }
            if seen.contains(&target) {
                continue;
            }
            followed += 1;
            if followed > MAX_REFERENCES {
                return Err(refuse(format!(
                    "more than {MAX_REFERENCES} referenced files"
                )));
            }
            let left = MAX_FILE_BYTES.saturating_sub(total);
            let b = safefs::read_bounded(&target, left).map_err(|e| {
                if e.is_input() {
                    refuse(format!(
                        "{e} (all files together are limited to {MAX_FILE_BYTES} bytes)"
                    ))
                } else {
                    Error::Read(e)
                }
            })?;
            total += b.len() as u64;
            let sub_name = last_component(&target);
            let mut sub = parse(&b, &sub_name)?;
            for m in &mut sub.modules {
                m.source = Some(sub_name.clone());
            }
            file.modules.append(&mut sub.modules);
            file.warnings.append(&mut sub.warnings);
            let next = std::mem::take(&mut sub.references);
            seen.push(target.clone());
            if !next.is_empty() {
                pending.push((target, sub_name, next, depth + 1));
            }
        }
    }
    Ok(file)
}

/// A parsed ESI file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EsiFile {
    /// The vendor all devices of the file belong to.
    pub vendor: Vendor,
    /// Device groups (`Descriptions/Groups`).
    pub groups: Vec<Group>,
    /// The devices, in file order (revisions of one product are separate devices).
    pub devices: Vec<Device>,
    /// Modules of modular devices (names and PDOs only; see the crate doc).
    pub modules: Vec<Module>,
    /// Passive devices (no `Type@ProductCode` and nothing an EtherCAT slave controller holds:
    /// no sync manager, FMMU, mailbox or PDO): end caps, potential feeds. Listed, never
    /// configured: they do not appear on the bus.
    pub passive: Vec<PassiveDevice>,
    /// What was accepted although the file is not quite valid (e.g. an odd number of hex
    /// digits in `DefaultData`), in file order. The library never prints: the caller shows them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// `InfoReference`s: other files holding parts of the description (module files).
    /// [`read_file`] follows them and adds their modules; [`parse`] only lists them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,
}

/// An `InfoReference`: a file name, relative to the referencing file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reference {
    /// The text as written.
    pub file: String,
    /// Line of the `InfoReference` element.
    pub line: u32,
}

/// A device without an EtherCAT slave controller (`Device` without `Type@ProductCode`, sync
/// managers, FMMUs, mailbox or PDOs): an end cap, a potential feed terminal, a shield terminal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassiveDevice {
    /// `Type` text.
    pub name: String,
    /// Every `Name`, in file order.
    pub names: Vec<LocalName>,
    /// `GroupType`.
    pub group: Option<String>,
    /// Line of the `Device` element.
    pub line: u32,
}

impl PassiveDevice {
    /// The display name: the English `Name` (LcId 1033), else the first, else the `Type`.
    pub fn display_name(&self) -> &str {
        pick_name(&self.names).unwrap_or(&self.name)
    }
}

/// Something accepted with a repair: the file, the line, the element path and what was done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// File name as given.
    pub file: String,
    /// 1-based line of the element.
    pub line: u32,
    /// Element path, as in [`Error::Invalid`].
    pub path: String,
    /// What was accepted and how it was read.
    pub why: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.line, self.path, self.why
        )
    }
}

/// `Vendor`: the EtherCAT vendor id (assigned by the ETG) and the vendor's name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Vendor {
    /// `Vendor/Id`.
    pub id: u32,
    /// `Vendor/Name` (English if given, else the first).
    pub name: String,
}

/// `Descriptions/Groups/Group`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// `Type`: the key devices refer to with `GroupType`.
    pub type_name: String,
    /// `Name` (English if given, else the first).
    pub name: String,
}

/// A `Name` element with its language (`LcId`, a Windows locale id: 1033 English, 1031 German).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalName {
    /// `LcId`, when given.
    pub lcid: Option<u32>,
    /// The text.
    pub text: String,
}

/// One device (`Descriptions/Devices/Device`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    /// `Type` text: the order code, e.g. `EL3102`; the key `--device` selects by.
    pub name: String,
    /// The file's vendor id (copied here so a device carries its whole identity).
    pub vendor_id: u32,
    /// `Type@ProductCode`.
    pub product_code: u32,
    /// `Type@RevisionNo` (optional in the schema).
    pub revision: Option<u32>,
    /// Every `Name`, in file order.
    pub names: Vec<LocalName>,
    /// `GroupType`.
    pub group: Option<String>,
    /// The sync managers, in order: the index is the SM number.
    pub sync_managers: Vec<Sm>,
    /// `Fmmu` usage texts (`Outputs`, `Inputs`, `MBoxState`), in order.
    pub fmmus: Vec<String>,
    /// `Mailbox`, when the device has one.
    pub mailbox: Option<Mailbox>,
    /// `RxPdo`: master -> device.
    pub rx_pdos: Vec<Pdo>,
    /// `TxPdo`: device -> master.
    pub tx_pdos: Vec<Pdo>,
    /// `Profile/Dictionary`, when the file carries one.
    pub dictionary: Option<Dictionary>,
    /// `Slots`: the device is modular (a bus coupler, a multi-axis drive); its modules are in
    /// [`EsiFile::modules`].
    pub slots: Option<Slots>,
    /// Line of the `Device` element.
    pub line: u32,
}

/// `Device/Slots` of a modular device (ETG.2000 "Slots"; the modular device profile ETG.5001
/// numbers a module's objects by its slot).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slots {
    /// `@MaxSlotCount`, when given.
    pub max_slot_count: Option<u32>,
    /// `@SlotPdoIncrement`: added to a slot-dependent PDO index (`Index@DependOnSlot`) per
    /// slot number (0 when absent).
    pub pdo_increment: u32,
    /// `@SlotIndexIncrement`: added to a slot-dependent entry/object index per slot number (0
    /// when absent).
    pub index_increment: u32,
    /// The `Slot` elements in order.
    pub slots: Vec<Slot>,
}

/// One `Slot`: a position (or, with `MaxInstances` > 1, a run of positions) and the modules it
/// takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slot {
    /// `Name`.
    pub name: String,
    /// `@MinInstances` (default 1 when absent, as for `MaxInstances`).
    pub min_instances: u32,
    /// `@MaxInstances`: the number of slot positions this element stands for.
    pub max_instances: u32,
    /// `@SlotPdoIncrement` of this slot, overriding the device's.
    pub pdo_increment: Option<u32>,
    /// `@SlotIndexIncrement` of this slot, overriding the device's.
    pub index_increment: Option<u32>,
    /// `ModuleIdent`s of the modules the slot accepts, in order.
    pub module_idents: Vec<u32>,
    /// The `ModuleIdent` marked `Default`.
    pub default_ident: Option<u32>,
    /// `ModuleClass` texts (a slot may accept modules by class instead of by ident).
    pub module_classes: Vec<String>,
    /// Line of the `Slot` element.
    pub line: u32,
}

impl Device {
    /// The display name: the English `Name` (LcId 1033), else the first, else the `Type`.
    pub fn display_name(&self) -> &str {
        pick_name(&self.names).unwrap_or(&self.name)
    }

    /// The CoE flags, when the device speaks CoE.
    pub fn coe(&self) -> Option<&Coe> {
        self.mailbox.as_ref().and_then(|m| m.coe.as_ref())
    }

    /// Whether the mailbox lists this protocol (`CoE`, `SoE`, `EoE`, `FoE`, `AoE`, `VoE`).
    pub fn speaks(&self, protocol: &str) -> bool {
        self.mailbox
            .as_ref()
            .is_some_and(|m| m.protocols.iter().any(|p| p.eq_ignore_ascii_case(protocol)))
    }

    /// What rtcat cannot configure about this device's profile, when that is the case: an SoE
    /// drive (Servo Drive over EtherCAT, IEC 61800-7-304: its process data are the AT and MDT
    /// telegrams configured through IDNs, not CoE PDO objects 0x1600/0x1A00), or a device whose
    /// PDO indices lie outside the CoE mapping objects without CoE in its mailbox.
    pub fn unsupported_profile(&self) -> Option<String> {
        let coe_range = |p: &Pdo| (0x1600..=0x1BFF).contains(&p.index);
        if self.speaks("SoE") && !self.speaks("CoE") {
            return Some(
                "this is a SoE (Servo Drive over EtherCAT) device; rtcat supports CoE: it cannot \
                 configure SoE process data (the AT/MDT lists of IDNs S-0-0016 and S-0-0024), so \
                 no [[device]] block is emitted for it"
                    .into(),
            );
        }
        let odd: Vec<String> = self
            .rx_pdos
            .iter()
            .chain(&self.tx_pdos)
            .filter(|p| !coe_range(p))
            .map(|p| format!("0x{:04X}", p.index))
            .collect();
        if !odd.is_empty() && !self.speaks("CoE") {
            let proto = self
                .mailbox
                .as_ref()
                .map(|m| m.protocols.join(", "))
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "no mailbox protocol".into());
            return Some(format!(
                "its PDOs {} are not CoE mapping objects (0x1600..0x17FF, 0x1A00..0x1BFF) and its \
                 mailbox has {proto}; rtcat supports CoE devices (and fixed process data of \
                 devices without a mailbox), so no [[device]] block is emitted for it",
                odd.join(", ")
            ));
        }
        None
    }

    /// The PDO with this index, and whether it is an RxPDO.
    pub fn pdo(&self, index: u16) -> Option<(&Pdo, bool)> {
        self.rx_pdos
            .iter()
            .find(|p| p.index == index)
            .map(|p| (p, true))
            .or_else(|| {
                self.tx_pdos
                    .iter()
                    .find(|p| p.index == index)
                    .map(|p| (p, false))
            })
    }
}

/// English (LcId 1033) if present, else the first name.
pub(crate) fn pick_name(names: &[LocalName]) -> Option<&str> {
    names
        .iter()
        .find(|n| n.lcid == Some(1033))
        .or_else(|| names.first())
        .map(|n| n.text.as_str())
}

/// A sync manager (`Sm`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sm {
    /// `StartAddress`: physical address in the ESC's memory.
    pub start: u16,
    /// `DefaultSize` in bytes, when given.
    pub default_size: Option<u16>,
    /// `MinSize`, when given.
    pub min_size: Option<u16>,
    /// `MaxSize`, when given.
    pub max_size: Option<u16>,
    /// `ControlByte` (register 0x0804 of the SM: mode and direction; ESC datasheet, section
    /// "SyncManager").
    pub control_byte: Option<u8>,
    /// `Enable`.
    pub enable: bool,
    /// The text: `MBoxOut`, `MBoxIn`, `Outputs` or `Inputs` (kept as written).
    pub usage: String,
}

/// `Mailbox`: the protocols the device speaks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mailbox {
    /// Every protocol element present (`AoE`, `EoE`, `CoE`, `FoE`, `SoE`, `VoE`), in order.
    pub protocols: Vec<String>,
    /// `CoE` with its flags.
    pub coe: Option<Coe>,
}

/// The CoE flags (`Mailbox/CoE` attributes; ETG.2000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Coe {
    /// `SdoInfo`: the SDO information service (object list and descriptions).
    pub sdo_info: bool,
    /// `CompleteAccess`: SDO complete access to whole objects.
    pub complete_access: bool,
    /// `PdoAssign`: 0x1C12/0x1C13 writable.
    pub pdo_assign: bool,
    /// `PdoConfig`: the PDO mappings (0x16xx/0x1Axx) writable.
    pub pdo_config: bool,
    /// `PdoUpload`: the master reads the PDO configuration from the device.
    pub pdo_upload: bool,
}

/// A PDO (`RxPdo` or `TxPdo`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pdo {
    /// `Index` (0x1600.. for RxPDOs, 0x1A00.. for TxPDOs).
    pub index: u16,
    /// `Name`.
    pub name: String,
    /// `Fixed`: the mapping cannot be changed.
    pub fixed: bool,
    /// `Mandatory`: the PDO must be assigned.
    pub mandatory: bool,
    /// `Sm`: the sync manager the PDO is assigned to by default (none: not assigned by default).
    pub sm: Option<u8>,
    /// `Exclude`: PDOs that cannot be assigned together with this one.
    pub excludes: Vec<u16>,
    /// The mapped entries, in order.
    pub entries: Vec<Entry>,
    /// `Index@DependOnSlot`: in a module, the index grows by the slot's PDO increment per slot
    /// number.
    pub depend_on_slot: bool,
    /// Line of the PDO element.
    pub line: u32,
}

impl Pdo {
    /// The PDO's size in bits (the sum of its entries).
    pub fn bits(&self) -> u32 {
        self.entries.iter().map(|e| u32::from(e.bits)).sum()
    }
}

/// A PDO entry: an object mapped into process data (index 0 is padding).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// `Index` (0 = padding).
    pub index: u16,
    /// `SubIndex` (0 when absent).
    pub sub: u8,
    /// `BitLen`.
    pub bits: u16,
    /// `Name` (empty when absent).
    pub name: String,
    /// `DataType` (`BOOL`, `UINT`, `DINT`, ...), when given.
    pub data_type: Option<String>,
    /// `Index@DependOnSlot`: in a module, the index grows by the slot's index increment per
    /// slot number.
    pub depend_on_slot: bool,
}

/// `Profile/Dictionary`: the CoE object dictionary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dictionary {
    /// `DataTypes/DataType`.
    pub data_types: Vec<DataType>,
    /// `Objects/Object`.
    pub objects: Vec<Object>,
}

impl Dictionary {
    /// The object with this index.
    pub fn object(&self, index: u16) -> Option<&Object> {
        self.objects.iter().find(|o| o.index == index)
    }

    /// The data type with this name.
    pub fn data_type(&self, name: &str) -> Option<&DataType> {
        self.data_types.iter().find(|t| t.name == name)
    }
}

/// A data type: a base type (`UINT`, `DINT`, ...), an array or a record (`DT1018`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataType {
    /// `Name`.
    pub name: String,
    /// `BaseType` (arrays).
    pub base_type: Option<String>,
    /// `BitSize`.
    pub bit_size: u32,
    /// `ArrayInfo`: lower bound and element count.
    pub array: Option<ArrayInfo>,
    /// `SubItem`s (records, and arrays described as a record of sub-index 0 + elements).
    pub sub_items: Vec<SubItemType>,
}

/// `ArrayInfo` of an array data type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ArrayInfo {
    /// `LBound`: the sub-index of the first element.
    pub lbound: u32,
    /// `Elements`.
    pub elements: u32,
}

/// A `SubItem` of a data type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubItemType {
    /// `SubIdx` (absent for the element block of an array).
    pub sub_idx: Option<u8>,
    /// `Name`.
    pub name: String,
    /// `Type`.
    pub type_name: String,
    /// `BitSize`.
    pub bit_size: u32,
    /// `BitOffs`.
    pub bit_offset: u32,
    /// `Flags/Access`.
    pub access: Option<Access>,
    /// `Flags/PdoMapping`.
    pub pdo_mapping: Option<PdoMapping>,
}

/// An object of the dictionary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Object {
    /// `Index`.
    pub index: u16,
    /// `Name` (English if given, else the first).
    pub name: String,
    /// `Type`: a data type name.
    pub type_name: String,
    /// `BitSize`.
    pub bit_size: u32,
    /// `Info/DefaultData`, `DefaultValue` or `DefaultString`.
    pub default: Option<DefaultValue>,
    /// `Flags/Access`.
    pub access: Option<Access>,
    /// `Flags/PdoMapping`.
    pub pdo_mapping: Option<PdoMapping>,
    /// `Info/SubItem`: names and defaults of the sub-indices, in order.
    pub sub_items: Vec<ObjectSubItem>,
}

/// `Info/SubItem` of an object: a sub-index's name and default.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectSubItem {
    /// `Name`.
    pub name: String,
    /// `Info/DefaultData`, `DefaultValue` or `DefaultString`.
    pub default: Option<DefaultValue>,
}

/// A default as the file gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DefaultValue {
    /// `DefaultData`: the raw bytes (little-endian for numbers), serialized as hex.
    Data(#[serde(serialize_with = "hex")] Vec<u8>),
    /// `DefaultValue`: a number as written (decimal or `#x`).
    Value(String),
    /// `DefaultString`.
    String(String),
}

impl DefaultValue {
    /// The default as an unsigned number: `DefaultData` read little-endian (at most 8 bytes),
    /// or `DefaultValue` parsed.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            DefaultValue::Data(b) if !b.is_empty() && b.len() <= 8 => Some(
                b.iter()
                    .rev()
                    .fold(0u64, |acc, &x| (acc << 8) | u64::from(x)),
            ),
            DefaultValue::Value(v) => parse_number(v),
            _ => None,
        }
    }
}

fn hex<S: serde::Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    s.serialize_str(&h)
}

/// Access rights of an object or sub-item (`Flags/Access`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Access {
    /// `ro`, `rw` or `wo`.
    pub kind: AccessKind,
    /// `ReadRestrictions`: the states in which reading is allowed (`PreOP`, `PreOP_SafeOP`,
    /// `PreOP_OP`, `SafeOP`, `SafeOP_OP`, `OP`), when restricted.
    pub read_restrictions: Option<String>,
    /// `WriteRestrictions`: the states in which writing is allowed, when restricted.
    pub write_restrictions: Option<String>,
}

/// `ro`, `rw` or `wo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessKind {
    /// Read only.
    Ro,
    /// Read and write.
    Rw,
    /// Write only.
    Wo,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = match self.kind {
            AccessKind::Ro => "ro",
            AccessKind::Rw => "rw",
            AccessKind::Wo => "wo",
        };
        f.write_str(k)?;
        if let Some(w) = &self.write_restrictions {
            write!(f, " (write {w})")?;
        }
        if let Some(r) = &self.read_restrictions {
            write!(f, " (read {r})")?;
        }
        Ok(())
    }
}

/// `Flags/PdoMapping`: into which PDO direction an object may be mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PdoMapping {
    /// `R`: RxPDOs (outputs).
    R,
    /// `T`: TxPDOs (inputs).
    T,
    /// `RT` / `TR`: both.
    RT,
}

/// A module of a modular device (`Descriptions/Modules/Module` of an ESI file, or `Modules/Module`
/// of a module description file whose root is `EtherCATModule`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Module {
    /// `Type` text.
    pub name: String,
    /// `Type@ModuleIdent`.
    pub ident: Option<u32>,
    /// `Type@ModuleClass`, when given.
    pub class: Option<String>,
    /// The file the module was read from (its last path component), when it came from a file
    /// an `InfoReference` named.
    pub source: Option<String>,
    /// `Name` (English if given, else the first).
    pub display_name: String,
    /// `RxPdo`.
    pub rx_pdos: Vec<Pdo>,
    /// `TxPdo`.
    pub tx_pdos: Vec<Pdo>,
}
