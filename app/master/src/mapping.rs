//! Reading a subdevice's process-data mapping in PRE-OP: its SII (the categories the layout
//! needs, not the whole EEPROM) and, with CoE, the assignment and mapping objects.

use crate::error::{Error, Result};
use crate::layout::{Identity, MappingSource, PdoSource, SubdeviceSource};
use crate::sii::{self, Direction, Sii, SmUsage};
use ethercrab::{MainDevice, SubDevice, SubDeviceRef};
use futures_lite::future::block_on;

/// Most SII bytes read per subdevice for the layout: far above any real device's categories
/// (EEPROMs are 2..64 KiB), and a bound on what a broken EEPROM can make the master read.
pub const MAX_SII_BYTES: usize = 64 * 1024;

/// Categories the layout needs (the device name comes from ethercrab).
const WANTED: [u16; 4] = [
    sii::category::STRINGS,
    sii::category::SYNC_MANAGER,
    sii::category::TXPDO,
    sii::category::RXPDO,
];

/// The decoded SII of the subdevices read so far in one bring-up, by identity: subdevices with
/// the same vendor, product code and revision share their description (ETG.2010 and the ESI
/// rules tie any change of the PDO description to a new revision number), so a segment of 100
/// identical terminals reads one SII, not 100 — the SII is read a word pair at a time, and this
/// is most of a bring-up's time on large segments.
#[derive(Debug, Default)]
pub struct SiiCache(Vec<((u32, u32, u32), Sii)>);

/// Read the fixed area and the categories in `wanted` (all categories when `None`) of a
/// subdevice's SII, and return them as one image [`Sii::parse`] reads (the categories skipped
/// are left out of it).
pub fn read_sii(
    md: &MainDevice<'_>,
    sd: &SubDevice,
    position: u16,
    wanted: Option<&[u16]>,
) -> Result<Vec<u8>> {
    let read = |word: u16, buf: &mut [u8]| -> Result<()> {
        let n = block_on(sd.eeprom_read_raw(md, word, buf)).map_err(|e| {
            Error::bus(
                format!("SII of the subdevice at position {position}, word {word:#06x}"),
                e,
            )
        })?;
        if n < buf.len() {
            return Err(Error::Layout(crate::layout::LayoutError::Mapping {
                position,
                name: sd.name().to_string(),
                what: format!(
                    "SII ends at word {word:#06x} (read {n} of {} bytes)",
                    buf.len()
                ),
            }));
        }
        Ok(())
    };
    let mut img = vec![0u8; sii::FIXED_AREA_BYTES];
    read(0, &mut img)?;
    let mut word = sii::FIXED_AREA_BYTES / 2;
    loop {
        if 2 * word + 4 > MAX_SII_BYTES {
            break;
        }
        let mut h = [0u8; 4];
        read(word as u16, &mut h)?;
        let kind = u16::from_le_bytes([h[0], h[1]]);
        let words = usize::from(u16::from_le_bytes([h[2], h[3]]));
        if kind == sii::category::END || kind == 0 {
            break;
        }
        if wanted.is_none_or(|w| w.contains(&kind)) {
            let start = img.len();
            if start + 4 + 2 * words > MAX_SII_BYTES {
                break;
            }
            img.extend_from_slice(&h);
            img.resize(start + 4 + 2 * words, 0);
            read((word + 2) as u16, &mut img[start + 4..])?;
        }
        word += 2 + words;
    }
    img.extend_from_slice(&sii::category::END.to_le_bytes());
    img.extend_from_slice(&0u16.to_le_bytes());
    Ok(img)
}

/// The layout of a segment in PRE-OP: every subdevice read with [`read_subdevice`] (one SII
/// read per identity), placed by [`crate::Layout::build`]. The bring-up and `rtcat pdos` both
/// use it, so the command shows exactly what the application gets.
pub fn read_layout<'a>(
    md: &MainDevice<'_>,
    subdevices: impl Iterator<Item = SubDeviceRef<'a, &'a SubDevice>>,
    generation: u32,
) -> Result<crate::Layout> {
    let mut sources = Vec::new();
    let mut cache = SiiCache::default();
    for (position, sd) in subdevices.enumerate() {
        let position = u16::try_from(position).unwrap_or(u16::MAX);
        sources.push(read_subdevice(md, &sd, position, &mut cache)?);
    }
    Ok(crate::Layout::build(generation, &sources)?)
}

/// The subdevice at `position` as the layout needs it: identity, name, and the PDOs it will
/// run with.
pub fn read_subdevice(
    md: &MainDevice<'_>,
    sd: &SubDeviceRef<'_, &SubDevice>,
    position: u16,
    cache: &mut SiiCache,
) -> Result<SubdeviceSource> {
    let id = sd.identity();
    let sii = sii_of(md, sd, position, cache)?;
    let coe = has_coe(&sii);
    let pdos = if coe {
        coe_pdos(sd, position, &sii)?
    } else {
        SubdeviceSource::pdos_from_sii(&sii)
    };
    Ok(SubdeviceSource {
        address: sd.configured_address(),
        alias: sd.alias_address(),
        name: sd.name().to_string(),
        identity: Identity {
            vendor_id: id.vendor_id,
            product_code: id.product_id,
            revision: id.revision,
            serial: id.serial,
        },
        coe,
        mapping: if coe {
            MappingSource::Coe
        } else {
            MappingSource::Sii
        },
        pdos,
    })
}

/// The SII categories the layout needs of the subdevice at `position`, from `cache` when a
/// subdevice of the same identity was read before.
pub fn sii_of(
    md: &MainDevice<'_>,
    sd: &SubDeviceRef<'_, &SubDevice>,
    position: u16,
    cache: &mut SiiCache,
) -> Result<Sii> {
    let id = sd.identity();
    let key = (id.vendor_id, id.product_id, id.revision);
    if let Some((_, s)) = cache.0.iter().find(|(k, _)| *k == key) {
        return Ok(s.clone());
    }
    let img = read_sii(md, sd, position, Some(&WANTED))?;
    let s = Sii::parse(&img).map_err(|e| {
        Error::Layout(crate::layout::LayoutError::Mapping {
            position,
            name: sd.name().to_string(),
            what: e.to_string(),
        })
    })?;
    cache.0.push((key, s.clone()));
    Ok(s)
}

/// Whether a subdevice talks CoE (a mailbox and the CoE protocol bit): its PDOs are then read
/// and configured over CoE, otherwise they are the SII's.
pub fn has_coe(sii: &Sii) -> bool {
    sii.protocols.coe && sii.mailbox.is_some()
}

/// The PDOs of a CoE subdevice: for every process-data sync manager n, the assignment object
/// 0x1C10 + n and the mapping objects it lists (ETG.1000.6 §5.6.7.4), as ethercrab 0.7.1 reads
/// them to size the SMs (`SubDevice::configure_pdos_coe`).
fn coe_pdos(sd: &SubDeviceRef<'_, &SubDevice>, position: u16, sii: &Sii) -> Result<Vec<PdoSource>> {
    let sdo = |what: String, e: ethercrab::error::Error| {
        Error::bus(format!("subdevice at position {position}: {what}"), e)
    };
    let mut out = Vec::new();
    for (n, sm) in sii.sync_managers.iter().enumerate() {
        let direction = match sm.usage {
            SmUsage::Outputs => Direction::Outputs,
            SmUsage::Inputs => Direction::Inputs,
            _ => continue,
        };
        let assign = 0x1c10 + n as u16;
        let count: u8 = block_on(sd.sdo_read(assign, 0))
            .map_err(|e| sdo(format!("SDO {assign:#06x}:00"), e))?;
        for i in 1..=count {
            let pdo: u16 = block_on(sd.sdo_read(assign, i))
                .map_err(|e| sdo(format!("SDO {assign:#06x}:{i:02x}"), e))?;
            let entries: u8 =
                block_on(sd.sdo_read(pdo, 0)).map_err(|e| sdo(format!("SDO {pdo:#06x}:00"), e))?;
            let mut list = Vec::with_capacity(usize::from(entries));
            for k in 1..=entries {
                let m: u32 = block_on(sd.sdo_read(pdo, k))
                    .map_err(|e| sdo(format!("SDO {pdo:#06x}:{k:02x}"), e))?;
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
