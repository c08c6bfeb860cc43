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
//! alias = 0                 # station alias in the EEPROM
//! ```

use serde::Deserialize;
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

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    device: Vec<DeviceEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceEntry {
    #[serde(default = "one")]
    count: u32,
    #[serde(default = "default_name")]
    name: String,
    #[serde(default = "default_vendor")]
    vendor_id: u32,
    #[serde(default = "default_product")]
    product_id: u32,
    #[serde(default = "one")]
    revision: u32,
    #[serde(default)]
    serial: u32,
    #[serde(default)]
    outputs: u16,
    #[serde(default)]
    inputs: u16,
    #[serde(default)]
    dc: bool,
    #[serde(default)]
    alias: u16,
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
fn default_product() -> u32 {
    REFERENCE_PRODUCT
}

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
    pub alias: u16,
}

impl DeviceSpec {
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
                alias: 0,
            })
            .collect();
        Self {
            name: format!("{n}x{outputs}+{inputs}"),
            devices,
        }
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
            for (field, v) in [("outputs", e.outputs), ("inputs", e.inputs)] {
                if v > MAX_IO_BYTES {
                    return Err(SpecError::Invalid(format!(
                        "device[{i}].{field} = {v}: must be 0..={MAX_IO_BYTES} bytes"
                    )));
                }
            }
            if e.outputs == 0 && e.inputs == 0 {
                return Err(SpecError::Invalid(format!(
                    "device[{i}]: outputs and inputs are both 0; a subdevice needs process data"
                )));
            }
            check_name(&format!("device[{i}].name"), &e.name)?;
            // count <= MAX_DEVICES here, so this cannot overflow.
            pdi += e.count as usize * (usize::from(e.outputs) + usize::from(e.inputs));
            if pdi > MAX_PDI_BYTES {
                return Err(SpecError::Invalid(format!(
                    "device[{i}] (count = {}, outputs = {}, inputs = {}): the process image \
                     would be {pdi} bytes, more than the {MAX_PDI_BYTES} rtcat's master runs",
                    e.count, e.outputs, e.inputs
                )));
            }
            for k in 0..e.count {
                devices.push(DeviceSpec {
                    name: e.name.clone(),
                    vendor_id: e.vendor_id,
                    product_id: e.product_id,
                    revision: e.revision,
                    serial: e.serial.wrapping_add(k),
                    outputs: e.outputs,
                    inputs: e.inputs,
                    dc: e.dc,
                    alias: e.alias,
                });
            }
        }
        Ok(Self {
            name: file
                .name
                .unwrap_or_else(|| format!("{} subdevices", devices.len())),
            devices,
        })
    }
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
