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
/// Largest chain the simulator builds (configured addresses 0x1000.. stay below 0xffff).
pub const MAX_DEVICES: usize = 4096;

#[derive(Debug, Error)]
pub enum SpecError {
    #[error("cannot read segment file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
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

/// Renesas' EtherCAT vendor id: the seeds' reference segment is three RZ/T2 subdevices.
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
    /// The reference segment of the seeds: 3 subdevices, 132 bytes of process data, WKC 9.
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

    pub fn load(path: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            SpecError::Parse { source, .. } => SpecError::Parse {
                path: path.display().to_string(),
                source,
            },
            SpecError::Invalid(m) => SpecError::Invalid(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    pub fn from_toml(text: &str) -> Result<Self, SpecError> {
        let file: SegmentFile = toml::from_str(text).map_err(|source| SpecError::Parse {
            path: "<string>".into(),
            source,
        })?;
        if file.device.is_empty() {
            return Err(SpecError::Invalid(
                "no [[device]] entries: a segment needs at least one subdevice".into(),
            ));
        }
        let mut devices = Vec::new();
        for (i, e) in file.device.iter().enumerate() {
            if e.count == 0 {
                return Err(SpecError::Invalid(format!(
                    "device[{i}].count = 0: must be at least 1"
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
            if e.name.is_empty() || e.name.len() > 64 || !e.name.is_ascii() {
                return Err(SpecError::Invalid(format!(
                    "device[{i}].name = {:?}: must be 1..=64 ASCII characters",
                    e.name
                )));
            }
            for k in 0..e.count {
                if devices.len() == MAX_DEVICES {
                    return Err(SpecError::Invalid(format!(
                        "more than {MAX_DEVICES} subdevices in total"
                    )));
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_segment_matches_the_seeds() {
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
