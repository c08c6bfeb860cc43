//! SII EEPROM image generated from a device description (ETG1000.6 / ETG2010 layout).
//!
//! The image carries what a master needs to configure a device without a mailbox: identity,
//! strings, the General category, FMMU usage, sync managers and the Tx/Rx PDO lists.

use crate::pdo::{DataType, Direction, PdoSpec};
use crate::spec::DeviceSpec;
use thiserror::Error;

/// Physical address of the output (RxPDO) sync manager buffer.
pub const OUTPUT_SM_ADDR: u16 = 0x1000;
/// Physical address of the input (TxPDO) sync manager buffer.
pub const INPUT_SM_ADDR: u16 = 0x1800;
/// A CoE device's mailboxes: SM0 master -> device at 0x1000, SM1 device -> master at 0x1080,
/// 128 bytes each (a common standard mailbox size; ETG.2000 ESI `<Mailbox>` examples and the
/// Beckhoff terminals use it).
pub const MBX_OUT_ADDR: u16 = 0x1000;
pub const MBX_IN_ADDR: u16 = 0x1080;
pub const MBX_SIZE: u16 = 128;
/// A CoE device's process data SM buffers (SM2 outputs, SM3 inputs), each up to
/// [`crate::spec::MAX_IO_BYTES`] bytes within the process RAM.
pub const COE_OUTPUT_SM_ADDR: u16 = 0x1100;
pub const COE_INPUT_SM_ADDR: u16 = 0x1900;

const CAT_STRINGS: u16 = 10;
const CAT_GENERAL: u16 = 30;
const CAT_FMMU: u16 = 40;
const CAT_SYNCM: u16 = 41;
const CAT_TXPDO: u16 = 50;
const CAT_RXPDO: u16 = 51;
const CAT_DC: u16 = 60;
const CAT_END: u16 = 0xffff;

/// A process-data sync manager as the EEPROM declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PdSm {
    pub index: u8,
    pub start: u16,
    pub len: u16,
    pub control: u8,
    /// 3 = outputs (master writes), 4 = inputs (master reads).
    pub usage: u8,
    /// The SII's enable byte (bit 0 enable, bit 3 in OP only).
    pub enable: u8,
}

/// The process-data sync managers of a device, in SM index order: those of `[[device.sm]]` as
/// listed, each sized by the PDOs assigned to it; otherwise without a mailbox SM0 first; a CoE
/// device SM2 outputs and SM3 inputs, both present even when empty, with the sizes of the
/// default assignment.
pub fn process_data_sms(d: &DeviceSpec) -> Vec<PdSm> {
    if let Some(list) = &d.sms {
        return list
            .iter()
            .enumerate()
            .map(|(k, s)| PdSm {
                index: k as u8,
                start: s.start,
                len: d.sm_bytes(k),
                control: s.control,
                usage: if s.dir == Direction::Outputs { 3 } else { 4 },
                enable: s.enable,
            })
            .collect();
    }
    if d.coe.is_some() {
        return vec![
            PdSm {
                index: 2,
                start: COE_OUTPUT_SM_ADDR,
                len: d.outputs,
                control: 0x64,
                usage: 3,
                enable: 1,
            },
            PdSm {
                index: 3,
                start: COE_INPUT_SM_ADDR,
                len: d.inputs,
                control: 0x20,
                usage: 4,
                enable: 1,
            },
        ];
    }
    let mut sms = Vec::new();
    if d.outputs > 0 {
        sms.push(PdSm {
            index: sms.len() as u8,
            start: OUTPUT_SM_ADDR,
            len: d.outputs,
            control: 0x64, // buffered, master writes, watchdog on
            usage: 3,
            enable: 1,
        });
    }
    if d.inputs > 0 {
        sms.push(PdSm {
            index: sms.len() as u8,
            start: INPUT_SM_ADDR,
            len: d.inputs,
            control: 0x20, // buffered, master reads, AL event
            usage: 4,
            enable: 1,
        });
    }
    sms
}

/// CRC-8 (poly 0x07, init 0xff) over the first 14 bytes of the config area (ETG2010 §2.2).
pub fn config_crc(bytes: &[u8]) -> u8 {
    let mut crc: u8 = 0xff;
    for &b in bytes {
        crc ^= b;
        for _ in 0..8 {
            crc = if crc & 0x80 != 0 {
                (crc << 1) ^ 0x07
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn push_category(img: &mut Vec<u8>, kind: u16, mut data: Vec<u8>) {
    if data.len() % 2 == 1 {
        data.push(0);
    }
    img.extend_from_slice(&kind.to_le_bytes());
    img.extend_from_slice(&((data.len() / 2) as u16).to_le_bytes());
    img.extend_from_slice(&data);
}

/// Most strings the SII strings category holds: its count is one byte (ETG.2010, category
/// Strings: the number of strings, then each as a length byte and that many bytes).
pub const MAX_STRINGS: usize = 255;
/// Longest string of the strings category (its length is one byte).
pub const MAX_STRING_BYTES: usize = 255;
/// The group string of every simulated device.
pub const GROUP: &str = "rtcat-sim";

/// A device description whose strings do not fit the SII strings category.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SiiError {
    #[error(
        "{count} distinct strings (device name, group, PDO and entry names): the SII strings \
         category holds at most {MAX_STRINGS}"
    )]
    TooManyStrings { count: usize },
    #[error("the string {text:?} is {len} bytes: an SII string holds at most {MAX_STRING_BYTES}")]
    StringTooLong { text: String, len: usize },
}

/// The strings category of a device: each distinct string once, referenced by its 1-based
/// index (0 = no string).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Strings {
    list: Vec<String>,
}

impl Strings {
    /// The strings of `d`: 1 = device name (order and name), 2 = group, then the PDO and entry
    /// names in the order the PDO categories list them (outputs first).
    pub fn of(d: &DeviceSpec) -> Result<Strings, SiiError> {
        let mut s = Strings::default();
        s.add(&d.name)?;
        s.add(GROUP)?;
        for pdo in d.rx_pdos().iter().chain(d.tx_pdos().iter()) {
            s.add(&pdo.name)?;
            for e in &pdo.entries {
                if let Some(n) = &e.name {
                    s.add(n)?;
                }
            }
        }
        if s.list.len() > MAX_STRINGS {
            return Err(SiiError::TooManyStrings {
                count: s.list.len(),
            });
        }
        Ok(s)
    }

    fn add(&mut self, text: &str) -> Result<(), SiiError> {
        if text.len() > MAX_STRING_BYTES {
            return Err(SiiError::StringTooLong {
                text: crate::spec::truncated(text, 64),
                len: text.len(),
            });
        }
        if !self.list.iter().any(|t| t == text) {
            self.list.push(text.to_string());
        }
        Ok(())
    }

    /// 1-based index of `text`, 0 when absent (or for `None`).
    pub fn index(&self, text: Option<&str>) -> u8 {
        text.and_then(|t| self.list.iter().position(|s| s == t))
            .map_or(0, |i| i as u8 + 1)
    }

    /// Number of strings.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The category data: count, then each string as length and bytes.
    fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.list.len() as u8];
        for s in &self.list {
            out.push(s.len() as u8);
            out.extend_from_slice(s.as_bytes());
        }
        out
    }
}

/// The PDO list of one direction (ETG.2010 TxPDO/RxPDO category): per PDO an 8-byte header
/// (index, entry count, SM, synchronisation, name, flags), then 8 bytes per entry (index,
/// subindex, name, data type, bit length, flags).
/// `sm` gives the SM a PDO (by index) is assigned to.
fn pdo_category(pdos: &[PdoSpec], sm: impl Fn(u16) -> u8, strings: &Strings) -> Vec<u8> {
    let mut out = Vec::new();
    for pdo in pdos {
        out.extend_from_slice(&pdo.index.to_le_bytes());
        out.push(pdo.entries.len() as u8);
        out.push(sm(pdo.index));
        out.push(0); // synchronisation
        out.push(strings.index(Some(&pdo.name)));
        out.extend_from_slice(&0u16.to_le_bytes()); // flags
        for e in &pdo.entries {
            out.extend_from_slice(&e.index.to_le_bytes());
            out.push(e.sub);
            out.push(strings.index(e.name.as_deref()));
            out.push(e.data_type.map_or(0, DataType::code));
            out.push(e.bits);
            out.extend_from_slice(&0u16.to_le_bytes());
        }
    }
    out
}

/// Build the EEPROM image (byte-addressed; the SII interface is word-addressed). Fails only when
/// the strings do not fit ([`Strings::of`]), which a loaded [`crate::SegmentSpec`] never has.
pub fn build_image(d: &DeviceSpec) -> Result<Vec<u8>, SiiError> {
    let strings = Strings::of(d)?;
    let mut img = vec![0u8; 0x80];
    // Config area: PDI control 0x0005 (SPI-less "digital I/O" style), alias in word 4.
    img[0..2].copy_from_slice(&0x0005u16.to_le_bytes());
    img[8..10].copy_from_slice(&d.alias.to_le_bytes());
    let crc = config_crc(&img[0..14]);
    img[14] = crc;
    img[16..20].copy_from_slice(&d.vendor_id.to_le_bytes());
    img[20..24].copy_from_slice(&d.product_id.to_le_bytes());
    img[24..28].copy_from_slice(&d.revision.to_le_bytes());
    img[28..32].copy_from_slice(&d.serial.to_le_bytes());
    // Words 0x18..0x1c: the standard mailbox (receive offset and size, send offset and size)
    // and the mailbox protocols, bit 1 EoE, bit 2 CoE, bit 3 FoE (ETG.2010 Table 2); zero without a
    // mailbox. A device with files also has a bootstrap mailbox (words 0x14..0x17, used in
    // BOOT), the same as its standard one.
    if d.coe.is_some() {
        let foe = !d.files.is_empty();
        let protocols =
            0x0004 | if foe { 0x0008 } else { 0 } | if d.eoe.is_some() { 0x0002 } else { 0 };
        for (w, v) in [
            (0x18, MBX_OUT_ADDR),
            (0x19, MBX_SIZE),
            (0x1a, MBX_IN_ADDR),
            (0x1b, MBX_SIZE),
            (0x1c, protocols),
        ] {
            img[2 * w..2 * w + 2].copy_from_slice(&v.to_le_bytes());
        }
        if foe {
            for (w, v) in [
                (0x14, MBX_OUT_ADDR),
                (0x15, MBX_SIZE),
                (0x16, MBX_IN_ADDR),
                (0x17, MBX_SIZE),
            ] {
                img[2 * w..2 * w + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    // Word 0x3f: version 1. Word 0x3e: size, set below.
    img[0x7e..0x80].copy_from_slice(&1u16.to_le_bytes());

    push_category(&mut img, CAT_STRINGS, strings.encode());

    let mut general = vec![0u8; 32];
    general[0] = 2; // group
    general[2] = 1; // order
    general[3] = 1; // name
    if d.coe.is_some() {
        // CoE details (ETG.2010 Table 5): SDO, SDO information, PDO assign, PDO configuration,
        // complete access.
        general[5] = 0x01 | 0x02 | 0x04 | 0x08 | 0x20;
    }
    general[11] = 0x01; // flags: enable SAFE-OP
    general[14] = 2; // group index (compatibility copy)
    general[16..18].copy_from_slice(&0x0011u16.to_le_bytes()); // ports 0 and 1: MII
    push_category(&mut img, CAT_GENERAL, general);

    let sms = process_data_sms(d);
    let mut fmmu: Vec<u8> = sms
        .iter()
        .map(|s| if s.usage == 3 { 1 } else { 2 })
        .collect();
    if d.coe.is_some() {
        fmmu.push(3); // mailbox state
    }
    push_category(&mut img, CAT_FMMU, fmmu);

    let mut syncm = Vec::new();
    if d.coe.is_some() {
        // SM0 mailbox out (mailbox mode, ECAT writes, PDI interrupt), SM1 mailbox in.
        for (start, control, usage) in [(MBX_OUT_ADDR, 0x26u8, 1u8), (MBX_IN_ADDR, 0x22, 2)] {
            syncm.extend_from_slice(&start.to_le_bytes());
            syncm.extend_from_slice(&MBX_SIZE.to_le_bytes());
            syncm.extend_from_slice(&[control, 0, 1, usage]);
        }
    }
    for s in &sms {
        syncm.extend_from_slice(&s.start.to_le_bytes());
        syncm.extend_from_slice(&s.len.to_le_bytes());
        syncm.push(s.control);
        syncm.push(0); // status
        syncm.push(s.enable);
        syncm.push(s.usage);
    }
    push_category(&mut img, CAT_SYNCM, syncm);

    // One category per direction, each PDO naming the SM it is assigned to (SM0 and SM1 of a
    // 16-channel terminal carry PDOs of the same direction).
    for (dir, kind, usage, pdos) in [
        (Direction::Outputs, CAT_RXPDO, 3, d.rx_pdos()),
        (Direction::Inputs, CAT_TXPDO, 4, d.tx_pdos()),
    ] {
        if pdos.is_empty() {
            continue;
        }
        let sm_of = |index: u16| match &d.sms {
            Some(list) => list
                .iter()
                .position(|s| s.dir == dir && s.pdos.contains(&index))
                .map_or(0xff, |k| k as u8),
            None => sms
                .iter()
                .find(|s| s.usage == usage)
                .map_or(0xff, |s| s.index),
        };
        push_category(&mut img, kind, pdo_category(&pdos, sm_of, &strings));
    }
    if d.dc {
        // One DC operation mode: SYNC0 with the cycle time given by the master.
        let mut dc = vec![0u8; 24];
        dc[12] = 0x00; // assign activate
        dc[13] = 0x03;
        push_category(&mut img, CAT_DC, dc);
    }
    img.extend_from_slice(&CAT_END.to_le_bytes());
    img.extend_from_slice(&0u16.to_le_bytes());

    // Round up to a whole kbit-multiple size (at least 2 KiB) and record it in word 0x3e.
    let kbit = img.len().div_ceil(128).max(16);
    img.resize(kbit * 128, 0xff);
    img[0x7c..0x7e].copy_from_slice(&((kbit - 1) as u16).to_le_bytes());
    Ok(img)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SegmentSpec;

    #[test]
    fn crc_matches_etg2010_example() {
        // ETG2010 example: config area of an EK1100 0x0C80 0x6E00 ... gives a known CRC; here we
        // check the algorithm against the standard CRC-8/0x07 init 0xff test vector instead.
        assert_eq!(config_crc(b"123456789"), 0xfb);
    }

    /// The categories of an image: (type, data).
    fn categories(img: &[u8]) -> Vec<(u16, &[u8])> {
        let mut at = 0x80;
        let mut out = Vec::new();
        loop {
            let kind = u16::from_le_bytes([img[at], img[at + 1]]);
            if kind == 0xffff {
                return out;
            }
            let words = u16::from_le_bytes([img[at + 2], img[at + 3]]) as usize;
            out.push((kind, &img[at + 4..at + 4 + words * 2]));
            at += 4 + words * 2;
        }
    }

    fn decode_strings(data: &[u8]) -> Vec<String> {
        let mut at = 1;
        (0..data[0])
            .map(|_| {
                let len = usize::from(data[at]);
                let s = String::from_utf8(data[at + 1..at + 1 + len].to_vec()).unwrap();
                at += 1 + len;
                s
            })
            .collect()
    }

    /// (PDO index, name index, [(index, sub, name index, type, bits)]) of a PDO category.
    type Decoded = Vec<(u16, u8, Vec<(u16, u8, u8, u8, u8)>)>;
    fn decode_pdos(data: &[u8]) -> Decoded {
        let mut out = Vec::new();
        let mut at = 0;
        while at + 8 <= data.len() {
            let index = u16::from_le_bytes([data[at], data[at + 1]]);
            let n = usize::from(data[at + 2]);
            let name = data[at + 5];
            at += 8;
            let entries = (0..n)
                .map(|k| {
                    let e = &data[at + 8 * k..at + 8 * k + 8];
                    (u16::from_le_bytes([e[0], e[1]]), e[2], e[3], e[4], e[5])
                })
                .collect();
            at += 8 * n;
            out.push((index, name, entries));
        }
        out
    }

    /// The PDO category the simulator wrote before PDOs and entries had names (and with 3-byte
    /// tails typed UNSIGNED32): the default must keep its layout.
    fn unnamed_pdo_category(bytes: u16, sm: u8, pdo_base: u16, obj_base: u16) -> Vec<u8> {
        let mut out = Vec::new();
        let mut remaining = bytes;
        let mut pdo_n = 0u16;
        while remaining > 0 {
            let mut entries = Vec::new();
            while remaining > 0 && entries.len() < 64 {
                let size = remaining.min(4) as u8;
                entries.push(size);
                remaining -= u16::from(size);
            }
            out.extend_from_slice(&(pdo_base + pdo_n).to_le_bytes());
            out.extend_from_slice(&[entries.len() as u8, sm, 0, 0, 0, 0]);
            for (i, size) in entries.iter().enumerate() {
                out.extend_from_slice(&(obj_base + pdo_n).to_le_bytes());
                let ty = match size {
                    1 => 0x05,
                    2 => 0x06,
                    _ => 0x07,
                };
                out.extend_from_slice(&[i as u8 + 1, 0, ty, size * 8, 0, 0]);
            }
            pdo_n += 1;
        }
        out
    }

    #[test]
    fn default_pdos_keep_the_unnamed_layout_and_gain_names() {
        for (outputs, inputs) in [(22, 22), (1, 0), (0, 3), (7, 255), (257, 4), (2048, 2048)] {
            let d = &SegmentSpec::uniform(1, outputs, inputs).devices[0];
            let img = build_image(d).unwrap();
            let cats = categories(&img);
            let strings = decode_strings(cats.iter().find(|c| c.0 == CAT_STRINGS).unwrap().1);
            assert_eq!(strings[..2], [d.name.clone(), GROUP.to_string()]);
            let name = |i: u8| strings[usize::from(i) - 1].clone();
            for (kind, bytes, base, obj, noun) in [
                (CAT_RXPDO, outputs, 0x1600, 0x7000, "Output"),
                (CAT_TXPDO, inputs, 0x1a00, 0x6000, "Input"),
            ] {
                let Some((_, data)) = cats.iter().find(|c| c.0 == kind) else {
                    assert_eq!(bytes, 0);
                    continue;
                };
                let sm = data[3];
                let mut unnamed = data.to_vec();
                for (pdo_index, name_at, entries) in decode_pdos(data) {
                    assert!(name(name_at).starts_with(noun), "{}", name(name_at));
                    for (k, e) in entries.iter().enumerate() {
                        assert_eq!(name(e.2), format!("{noun} {}", k + 1), "{pdo_index:#x}");
                    }
                }
                // Masking the names (and the UNSIGNED24 of a 3-byte tail) gives the old bytes.
                let mut at = 0;
                while at < unnamed.len() {
                    let n = usize::from(unnamed[at + 2]);
                    unnamed[at + 5] = 0;
                    for k in 0..n {
                        let e = at + 8 + 8 * k;
                        unnamed[e + 3] = 0;
                        if unnamed[e + 4] == 0x16 {
                            assert_eq!(unnamed[e + 5], 24);
                            unnamed[e + 4] = 0x07;
                        }
                    }
                    at += 8 + 8 * n;
                }
                assert_eq!(
                    unnamed,
                    unnamed_pdo_category(bytes, sm, base, obj),
                    "{outputs}+{inputs}"
                );
            }
        }
    }

    #[test]
    fn explicit_pdos_are_written_with_their_names_types_and_padding() {
        let s = SegmentSpec::from_toml(
            "[[device]]\nname = \"IO\"\n\
             [[device.txpdo]]\nindex = 0x1a01\nname = \"Channel 1\"\n\
             entries = [{ index = 0x6000, sub = 1, type = \"BOOL\", name = \"Input 1\" },\
                        { index = 0, bits = 7 },\
                        { index = 0x6010, sub = 2, type = \"INT16\", name = \"Value\" }]\n\
             [[device.rxpdo]]\nindex = 0x1600\nname = \"Value\"\n\
             entries = [{ index = 0x7000, sub = 1, type = \"REAL64\", name = \"Setpoint\" }]\n",
        )
        .unwrap();
        let d = &s.devices[0];
        assert_eq!((d.inputs, d.outputs), (3, 8));
        let img = build_image(d).unwrap();
        let cats = categories(&img);
        let strings = decode_strings(cats.iter().find(|c| c.0 == CAT_STRINGS).unwrap().1);
        // "Value" is both a PDO and an entry name: stored once.
        assert_eq!(
            strings,
            ["IO", GROUP, "Value", "Setpoint", "Channel 1", "Input 1"]
        );
        let tx = decode_pdos(cats.iter().find(|c| c.0 == CAT_TXPDO).unwrap().1);
        assert_eq!(
            tx,
            [(
                0x1a01,
                5,
                vec![
                    (0x6000, 1, 6, 0x01, 1),
                    (0, 0, 0, 0, 7),
                    (0x6010, 2, 3, 0x03, 16)
                ]
            )]
        );
        let rx = decode_pdos(cats.iter().find(|c| c.0 == CAT_RXPDO).unwrap().1);
        assert_eq!(rx, [(0x1600, 3, vec![(0x7000, 1, 4, 0x11, 64)])]);
        let sms = process_data_sms(d);
        assert_eq!((sms[0].len, sms[1].len), (8, 3));
    }

    #[test]
    fn a_generated_mapping_follows_sizes_changed_in_code() {
        // Code that builds a spec and then changes a device's sizes (as rtcat's limit tests
        // do) gets the SII of the new sizes.
        let mut d = SegmentSpec::uniform(1, 512, 512).devices[0].clone();
        d.outputs = 1;
        d.inputs = 0;
        let img = build_image(&d).unwrap();
        let cats = categories(&img);
        assert!(cats.iter().all(|c| c.0 != CAT_TXPDO));
        let rx = decode_pdos(cats.iter().find(|c| c.0 == CAT_RXPDO).unwrap().1);
        assert_eq!(rx.len(), 1);
        assert_eq!(rx[0].2, [(0x7000, 1, 4, 0x05, 8)]);
    }

    #[test]
    fn strings_that_do_not_fit_are_errors() {
        let mut d = SegmentSpec::uniform(1, 0, 1).devices[0].clone();
        let mut pdos = d.tx_pdos().into_owned();
        pdos[0].entries[0].name = Some("x".repeat(256));
        d.txpdo = Some(pdos.clone());
        assert!(matches!(
            build_image(&d),
            Err(SiiError::StringTooLong { len: 256, .. })
        ));
        pdos[0].entries = (0..=253)
            .map(|k| crate::pdo::PdoEntrySpec {
                index: 0x6000,
                sub: k as u8,
                bits: 8,
                data_type: Some(DataType::Unsigned8),
                name: Some(format!("In {k}")),
            })
            .collect();
        d.txpdo = Some(pdos.clone());
        // name, group, PDO name and 254 entries: 257.
        assert_eq!(
            build_image(&d).unwrap_err(),
            SiiError::TooManyStrings { count: 257 }
        );
        pdos[0].entries.truncate(252);
        d.txpdo = Some(pdos);
        assert_eq!(Strings::of(&d).unwrap().len(), MAX_STRINGS);
        build_image(&d).unwrap();
    }

    #[test]
    fn a_coe_device_announces_its_mailbox_and_sync_managers() {
        let s = SegmentSpec::coe_example();
        let word = |img: &[u8], w: usize| u16::from_le_bytes([img[2 * w], img[2 * w + 1]]);
        for d in &s.devices {
            let img = build_image(d).unwrap();
            // Standard mailbox: receive 0x1000/128, send 0x1080/128; protocols: CoE.
            let mbx: Vec<u16> = (0x18..=0x1c).map(|w| word(&img, w)).collect();
            assert_eq!(mbx, [0x1000, 128, 0x1080, 128, 0x0004], "{}", d.name);
            let cats = categories(&img);
            let general = cats.iter().find(|c| c.0 == CAT_GENERAL).unwrap().1;
            assert_eq!(
                general[5], 0x2f,
                "SDO, SDO info, PDO assign/config, complete access"
            );
            let fmmu = cats.iter().find(|c| c.0 == CAT_FMMU).unwrap().1;
            assert_eq!(&fmmu[..3], &[1, 2, 3]);
            let sm = cats.iter().find(|c| c.0 == CAT_SYNCM).unwrap().1;
            let sms: Vec<(u16, u16, u8, u8)> = sm
                .chunks(8)
                .map(|c| {
                    (
                        u16::from_le_bytes([c[0], c[1]]),
                        u16::from_le_bytes([c[2], c[3]]),
                        c[4],
                        c[7],
                    )
                })
                .collect();
            assert_eq!(
                sms,
                [
                    (0x1000, 128, 0x26, 1),
                    (0x1080, 128, 0x22, 2),
                    (COE_OUTPUT_SM_ADDR, d.outputs, 0x64, 3),
                    (COE_INPUT_SM_ADDR, d.inputs, 0x20, 4)
                ],
                "{}",
                d.name
            );
            // The TxPDO category lists the default assignment on SM3.
            let tx = cats.iter().find(|c| c.0 == CAT_TXPDO).unwrap().1;
            let pdos = decode_pdos(tx);
            assert_eq!(pdos.len(), d.tx_pdos().len());
            assert_eq!(tx[3], 3);
        }
        // Without CoE: no mailbox, as before.
        let img = build_image(&SegmentSpec::reference().devices[0]).unwrap();
        assert!((0x18..=0x1c).all(|w| word(&img, w) == 0));
    }

    #[test]
    fn image_has_identity_and_categories() {
        let d = &SegmentSpec::reference().devices[0];
        let img = build_image(d).unwrap();
        assert_eq!(
            u32::from_le_bytes(img[16..20].try_into().unwrap()),
            d.vendor_id
        );
        assert_eq!(img.len() % 128, 0);
        let seen: Vec<u16> = categories(&img).iter().map(|c| c.0).collect();
        assert_eq!(seen, vec![10, 30, 40, 41, 51, 50]);
    }
}
