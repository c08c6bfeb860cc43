//! Reading a subdevice's process-data mapping in PRE-OP: its SII (the categories the layout
//! needs, not the whole EEPROM) and, with CoE, the assignment and mapping objects.

use crate::error::{Error, Result};
use crate::layout::{Identity, MappingSource, PdoSource, SubdeviceSource};
use crate::sii::{self, Direction, Sii, SmUsage};
use ethercrab::{Command, MainDevice, SubDevice, SubDeviceRef};
use futures_lite::future::block_on;

pub use crate::limits::MAX_SII_BYTES;

/// Categories the layout needs (the device name comes from ethercrab).
const WANTED: [u16; 4] = [
    sii::category::STRINGS,
    sii::category::SYNC_MANAGER,
    sii::category::TXPDO,
    sii::category::RXPDO,
];

/// What a subdevice ethercrab never configured needs: the FMMU category, which says which FMMU
/// serves which direction ([`crate::pd_registers`]), not the strings (its names in the layout
/// are its `[[device]]` entry's: `crate::absent`), which are most of a terminal's SII.
const WANTED_UNSEEN: [u16; 4] = [
    sii::category::FMMU,
    sii::category::SYNC_MANAGER,
    sii::category::TXPDO,
    sii::category::RXPDO,
];

/// What rtcat's own bring-up needs ([`Categories::Own`]).
const WANTED_OWN: [u16; 6] = [
    sii::category::STRINGS,
    sii::category::GENERAL,
    sii::category::FMMU,
    sii::category::SYNC_MANAGER,
    sii::category::TXPDO,
    sii::category::RXPDO,
];

/// A subdevice as the layout names it: where it is and who it is, whichever scan found it
/// (ethercrab's group or rtcat's own scan, docs/NOTES.md §17.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Station {
    /// Its position.
    pub position: u16,
    /// Its station address.
    pub address: u16,
    /// Its station alias (0x0012).
    pub alias: u16,
    /// Its name.
    pub name: String,
    /// Its identity, with the serial number.
    pub identity: Identity,
}

impl Station {
    /// The subdevice `sd` of ethercrab's group at `position`.
    pub fn of(sd: &SubDevice, position: u16) -> Station {
        let id = sd.identity();
        Station {
            position,
            address: sd.configured_address(),
            alias: sd.alias_address(),
            name: sd.name().to_string(),
            identity: Identity {
                vendor_id: id.vendor_id,
                product_code: id.product_id,
                revision: id.revision,
                serial: id.serial,
            },
        }
    }
}

pub use crate::sii_cache::SiiCache;

/// Read the fixed area and the categories in `wanted` (all categories when `None`) of a
/// subdevice's SII, and return them as one image [`Sii::parse`] reads (the categories skipped
/// are left out of it).
pub fn read_sii(
    md: &MainDevice<'_>,
    sd: &SubDevice,
    position: u16,
    wanted: Option<&[u16]>,
) -> Result<Vec<u8>> {
    let station = (sd.configured_address(), sd.name());
    let read = |word: u16, buf: &mut [u8]| eeprom_read(md, station, position, word, buf);
    Ok(crate::sii_cache::read_image(&read, wanted)?.0)
}

/// Longest an SII command may keep the interface busy (an ET1100 takes about 0.7 ms for 4 words,
/// docs/NOTES.md §7.4; the margin is for a loaded host).
const SII_COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Every frame of the SII reads goes through `pdu_gate`: several devices' EEPROM busy
/// times overlap, one frame at a time.
fn gated<T>(
    what: impl FnOnce() -> std::result::Result<T, ethercrab::error::Error>,
) -> std::result::Result<T, ethercrab::error::Error> {
    crate::pdu_gate::gated(what)
}

/// `buf.len()` bytes of the SII from `word` on, through the ESC's SII interface (0x0502 control
/// and status, 0x0504 address, 0x0508 data; ETG.1000.4 §6.4, ET1100 register description):
/// read command, busy polled, 4 or 8 bytes (status bit 6) taken per command.
fn eeprom_read(
    md: &MainDevice<'_>,
    (addr, name): (u16, &str),
    position: u16,
    word: u16,
    buf: &mut [u8],
) -> Result<()> {
    let at = |w: u16| format!("SII of the subdevice at position {position}, word {w:#06x}");
    let mut w = word;
    let mut done = 0;
    while done < buf.len() {
        let [lo, hi] = w.to_le_bytes();
        gated(|| block_on(Command::fpwr(addr, 0x0502).send(md, &[0x00, 0x01, lo, hi, 0, 0])))
            .map_err(|e| Error::bus(at(w), e))?;
        let start = std::time::Instant::now();
        // Polled back to back as ethercrab does (its `wait_loop_delay` is 0): a sleep of even
        // 150 µs costs far more than that on a loaded host, and the gate already lets the other
        // devices' frames in between.
        let status = loop {
            let s = gated(|| {
                block_on(Command::fprd(addr, 0x0502).receive_slice(md, 2))
                    .map(|r| u16::from_le_bytes([r[0], r[1]]))
            })
            .map_err(|e| Error::bus(at(w), e))?;
            if s & 0x8000 == 0 {
                break s;
            }
            if start.elapsed() > SII_COMMAND_TIMEOUT {
                return Err(Error::SegmentMismatch(format!(
                    "{}: the SII interface stayed busy for {} ms",
                    at(w),
                    SII_COMMAND_TIMEOUT.as_millis()
                )));
            }
        };
        // Checksum, device information and write errors (0x0502 bits 11, 12, 14); bit 13 is
        // not an error on every ESC (ethercrab 0.7.1 ignores it too).
        if status & 0x5800 != 0 {
            return Err(Error::Layout(crate::layout::LayoutError::Mapping {
                position,
                name: name.to_string(),
                what: format!("SII read of word {w:#06x}: status {status:#06x}"),
            }));
        }
        let chunk: u16 = if status & 0x0040 != 0 { 8 } else { 4 };
        let n = usize::from(chunk).min(buf.len() - done);
        gated(|| {
            block_on(Command::fprd(addr, 0x0508).receive_slice(md, chunk)).map(|r| {
                buf[done..done + n].copy_from_slice(&r[..n]);
            })
        })
        .map_err(|e| Error::bus(at(w), e))?;
        done += n;
        w = w.wrapping_add(chunk / 2);
    }
    Ok(())
}

/// The layout of a segment in PRE-OP: every subdevice read with [`read_subdevice`] (one full
/// SII read per identity), placed by [`crate::Layout::build`]. The bring-up and `rtcat pdos` both
/// use it, so the command shows exactly what the application gets.
pub fn read_layout<'a>(
    md: &MainDevice<'_>,
    subdevices: impl Iterator<Item = SubDeviceRef<'a, &'a SubDevice>>,
    generation: u32,
) -> Result<crate::Layout> {
    let mut sources = Vec::new();
    let cache = SiiCache::default();
    for (position, sd) in subdevices.enumerate() {
        let position = u16::try_from(position).unwrap_or(u16::MAX);
        sources.push(read_subdevice(md, &sd, position, &cache)?);
    }
    Ok(crate::Layout::build(generation, &sources)?)
}

/// The subdevice at `position` as the layout needs it: identity, name, and the PDOs it will
/// run with.
pub fn read_subdevice(
    md: &MainDevice<'_>,
    sd: &SubDeviceRef<'_, &SubDevice>,
    position: u16,
    cache: &SiiCache,
) -> Result<SubdeviceSource> {
    let sii = sii_of(md, sd, position, cache)?;
    let mut sdo = crate::coe::OnDemand::new(
        md,
        position,
        sd.configured_address(),
        crate::coe::Timeouts::default(),
    );
    read_subdevice_with(&Station::of(sd, position), &sii, &mut sdo)
}

/// [`read_subdevice`] with the subdevice's SII already at hand, its CoE objects read through
/// `sdo` (rtcat's client: its frames behind `pdu_gate`, so several subdevices may be
/// read on threads side by side).
pub fn read_subdevice_with(
    st: &Station,
    sii: &Sii,
    sdo: &mut crate::coe::OnDemand<'_>,
) -> Result<SubdeviceSource> {
    let coe = has_coe(sii);
    let pdos = pdos_with(
        sdo,
        &format!("subdevice at position {} ({})", st.position, st.name),
        sii,
    )?;
    Ok(SubdeviceSource {
        address: st.address,
        alias: st.alias,
        name: st.name.clone(),
        identity: st.identity,
        coe,
        mapping: if coe {
            MappingSource::Coe
        } else {
            MappingSource::Sii
        },
        pdos,
    })
}

/// The SII categories the layout needs of the subdevice at `position`: from `cache` when an
/// image of the same identity is there and the device's shape matches it (see
/// [`crate::sii_cache`]), otherwise read in full and kept.
pub fn sii_of(md: &MainDevice<'_>, sd: &SubDevice, position: u16, cache: &SiiCache) -> Result<Sii> {
    let id = sd.identity();
    let key = (id.vendor_id, id.product_id, id.revision);
    let station = (sd.configured_address(), sd.name());
    sii_with(md, station, position, (key, &WANTED), cache)
}

/// Which categories a subdevice's SII is read for by its station address ([`sii_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Categories {
    /// A subdevice ethercrab's group does not have (a hot-connect member absent at bring-up):
    /// with its FMMU category, without the strings (its names are its `[[device]]` entry's).
    Unseen,
    /// rtcat's own bring-up ([`crate::own_bringup`]): the layout's, the FMMU category for the
    /// registers it writes, General for the device's name.
    Own,
}

/// [`sii_of`] by station address and name, with the identity read from the SII: the
/// categories `which` says. `cache` must serve only reads of one kind (an image kept without
/// the FMMU category would be taken for one with it).
pub(crate) fn sii_at(
    md: &MainDevice<'_>,
    (address, name): (u16, &str),
    position: u16,
    (identity, which): ((u32, u32, u32), Categories),
    cache: &SiiCache,
) -> Result<Sii> {
    let wanted: &[u16] = match which {
        Categories::Unseen => &WANTED_UNSEEN,
        Categories::Own => &WANTED_OWN,
    };
    sii_with(md, (address, name), position, (identity, wanted), cache)
}

/// Vendor, product, revision and serial number from the SII of the subdevice at station
/// `address` (words 0x08..0x0F, ETG.2010 Table 2).
pub(crate) fn sii_identity(
    md: &MainDevice<'_>,
    address: u16,
    position: u16,
) -> Result<(u32, u32, u32, u32)> {
    let mut b = [0u8; 16];
    eeprom_read(md, (address, "?"), position, 0x08, &mut b)?;
    let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    Ok((w(0), w(4), w(8), w(12)))
}

/// The SII categories `wanted` of the subdevice at station `address`, through `cache`.
fn sii_with(
    md: &MainDevice<'_>,
    (address, name): (u16, &str),
    position: u16,
    (identity, wanted): ((u32, u32, u32), &[u16]),
    cache: &SiiCache,
) -> Result<Sii> {
    let read = |word: u16, buf: &mut [u8]| eeprom_read(md, (address, name), position, word, buf);
    cache
        .get_or_read(identity, &read, wanted)
        .map_err(|e| match e {
            Error::SegmentMismatch(what) => Error::Layout(crate::layout::LayoutError::Mapping {
                position,
                name: name.to_string(),
                what,
            }),
            e => e,
        })
}

/// Whether a subdevice talks CoE (a mailbox and the CoE protocol bit): its PDOs are then read
/// and configured over CoE, otherwise they are the SII's.
pub fn has_coe(sii: &Sii) -> bool {
    sii.protocols.coe && sii.mailbox.is_some()
}

/// The PDOs a subdevice runs with: over CoE when it has it ([`has_coe`]), else the SII's.
pub(crate) fn pdos_with(
    sdo: &mut crate::coe::OnDemand<'_>,
    who: &str,
    sii: &Sii,
) -> Result<Vec<PdoSource>> {
    if has_coe(sii) {
        coe_pdos(sdo, who, sii)
    } else {
        Ok(SubdeviceSource::pdos_from_sii(sii))
    }
}

/// The PDOs of a CoE subdevice: for every process-data sync manager n, the assignment object
/// 0x1C10 + n and the mapping objects it lists (ETG.1000.6 §5.6.7.4), as ethercrab 0.7.1 reads
/// them to size the SMs (`SubDevice::configure_pdos_coe`).
fn coe_pdos(sdo: &mut crate::coe::OnDemand<'_>, who: &str, sii: &Sii) -> Result<Vec<PdoSource>> {
    let mut read = |index: u16, sub: u8, width: usize| -> Result<u32> {
        sdo.client()
            .and_then(|c| c.upload_uint(index, sub, width))
            .map_err(|e| {
                Error::Device(Box::new(crate::devices::DeviceError::Sdo {
                    who: who.to_string(),
                    action: "read",
                    object: format!("{index:#06x}:{sub:02x}"),
                    value: String::new(),
                    source: Box::new(crate::devices::SdoFailure::Coe(e)),
                }))
            })
    };
    let mut out = Vec::new();
    for (n, sm) in sii.sync_managers.iter().enumerate() {
        let direction = match sm.usage {
            SmUsage::Outputs => Direction::Outputs,
            SmUsage::Inputs => Direction::Inputs,
            _ => continue,
        };
        let assign = 0x1c10 + n as u16;
        let count = read(assign, 0, 1)? as u8;
        for i in 1..=count {
            let pdo = read(assign, i, 2)? as u16;
            let entries = read(pdo, 0, 1)? as u8;
            let mut list = Vec::with_capacity(usize::from(entries));
            for k in 1..=entries {
                let m = read(pdo, k, 4)?;
                let (index, sub, bits) = ((m >> 16) as u16, (m >> 8) as u8, m as u8);
                let (name, dt) = SubdeviceSource::describe_from_sii(sii, index, sub);
                list.push((index, sub, bits, name, dt));
            }
            let name = sii
                .pdos
                .iter()
                .find(|p| p.index == pdo)
                .and_then(|p| p.name.clone());
            out.push(PdoSource {
                index: pdo,
                name,
                sync_manager: n as u8,
                direction,
                entries: list,
            });
        }
    }
    Ok(out)
}
