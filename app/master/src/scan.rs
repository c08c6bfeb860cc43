//! rtcat's own scan of the segment (issue 28 item 6, docs/NOTES.md §17.4): what ethercrab
//! 0.7.1's `MainDevice::init` does before its groups, without its per-device waits.
//!
//! ethercrab creates each subdevice one after the other (`SubDevice::new`: identity, name and
//! mailbox from the SII through its own uncached reader) and moves each one to PRE-OP before
//! the next (`configure_mailboxes`, "TODO: Move PRE-OP transition out of this"): about 29 ms
//! per simulated drive with real ESC timing, 0.9-1.5 s for 32 (§17.1). Here every step is done
//! for all subdevices at once: the count (BRD), the reset (the same registers ethercrab
//! blanks, broadcast), the station addresses, every subdevice in INIT and its SII given to the
//! master (0x0500, as ethercrab's `set_eeprom_mode`), then the identity and the SII categories of every
//! subdevice through rtcat's overlapped SII reader and its cache ([`crate::sii_cache`]: checked
//! against each device's shape, never trusted blindly), `[bus] sii_in_flight` at a time. The
//! mailbox sync managers, PRE-OP and everything after are [`crate::own_bringup`]'s.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::sii::Sii;
use ethercrab::{Command, MainDevice};
use futures_lite::future::block_on;

/// First station address: ethercrab's (`BASE_SUBDEVICE_ADDRESS`), so that every address the
/// rest of the master gives or assumes (the region's range above, `crate::region::STATION_BASE`)
/// holds for both scans.
pub(crate) const STATION_BASE: u16 = 0x1000;

/// A subdevice as the scan found it.
#[derive(Debug, Clone)]
pub(crate) struct Scanned {
    pub(crate) position: u16,
    /// The station address the scan gave it.
    pub(crate) address: u16,
    /// Its station alias (0x0012, loaded from SII word 4).
    pub(crate) alias: u16,
    /// Vendor, product, revision (SII words 0x08..0x0D).
    pub(crate) identity: (u32, u32, u32),
    /// Serial number (SII words 0x0E, 0x0F).
    pub(crate) serial: u32,
    /// Its name: the SII's (General's name, its order number, or its first string).
    pub(crate) name: String,
    /// The SII categories the bring-up needs ([`crate::mapping::Categories::Own`]).
    pub(crate) sii: Sii,
    /// It has a distributed clock (ESC features 0x0008 bit 2).
    pub(crate) dc: bool,
}

/// What the scan reads of a subdevice before its SII categories: alias, DC support, identity,
/// serial number.
type Head = (u16, bool, (u32, u32, u32), u32);

/// What a failed step was, with the device where there is one.
fn bus(what: impl Into<String>) -> impl FnOnce(ethercrab::error::Error) -> Error {
    move |e| Error::bus(what, e)
}

/// Every subdevice back to INIT with its FMMUs, sync managers and DC registers blank, as
/// ethercrab's `reset_subdevices` leaves them (ETG.1000.4 Tables 57, 59; ETG.1020 §22.2.4 for
/// the DC control loop's parameters), each register by broadcast.
fn reset(md: &MainDevice<'static>) -> Result<()> {
    let bwr = |reg: u16, data: &[u8], what: &str| {
        block_on(Command::bwr(reg).ignore_wkc().send(md, data))
            .map_err(bus(format!("reset: {what} ({reg:#06x})")))
    };
    // INIT with the error acknowledged.
    bwr(0x0120, &[0x11, 0x00], "AL control")?;
    // One FMMU and one SM at a time: some ESCs cannot blank the whole area in one write.
    for n in 0..16u16 {
        bwr(0x0600 + 16 * n, &[0; 16], "FMMU")?;
    }
    for n in 0..16u16 {
        bwr(0x0800 + 8 * n, &[0; 8], "sync manager")?;
    }
    for (reg, len, what) in [
        (0x0910u16, 8usize, "DC system time"),
        (0x0920, 8, "DC system time offset"),
        (0x0928, 4, "DC propagation delay"),
        (0x092C, 4, "DC system time difference"),
        (0x0981, 1, "DC SYNC activation"),
        (0x0990, 4, "DC start time"),
        (0x09A0, 4, "DC SYNC0 cycle time"),
        (0x09A4, 4, "DC SYNC1 cycle time"),
    ] {
        bwr(reg, &[0; 8][..len], what)?;
    }
    // The DC control loop reset (parameter 3 first), the reference clock adjusted to the
    // master's (ETG.1020 §22.2.4), as ethercrab sets it.
    bwr(
        0x0934,
        &0x0c00u16.to_le_bytes(),
        "DC control loop parameter 3",
    )?;
    bwr(
        0x0930,
        &0x1000u16.to_le_bytes(),
        "DC control loop parameter 1",
    )?;
    Ok(())
}

/// The subdevices on the segment, in position order: counted, reset, given station addresses
/// [`STATION_BASE`] + position, their alias, DC support, identity and SII (through `cache`)
/// read, up to `[bus] sii_in_flight` subdevices at a time; with the time the SII took (ms).
pub(crate) fn scan(
    md: &MainDevice<'static>,
    cfg: &Config,
    cache: &crate::sii_cache::SiiCache,
) -> Result<(Vec<Scanned>, u128)> {
    let n = crate::diag::count_subdevices(md).map_err(|e| Error::SegmentMismatch(e.to_string()))?;
    if n == 0 {
        return Err(Error::NoSubdevices);
    }
    if usize::from(n) > crate::limits::MAX_SUBDEVICES {
        return Err(Error::Capacity(format!(
            "the segment has {n} subdevices; rtcat runs at most {}",
            crate::limits::MAX_SUBDEVICES
        )));
    }
    reset(md)?;
    for i in 0..n {
        let address = STATION_BASE + i;
        block_on(Command::apwr(i, 0x0010).send(md, address))
            .map_err(bus(format!("position {i}: station address")))?;
    }
    // Every subdevice in INIT (one coming down from OP takes its time), the SII the master's.
    let addresses: Vec<u16> = (0..n).map(|i| STATION_BASE + i).collect();
    let timeout = std::time::Duration::from_millis(cfg.bus.state_timeout_ms.into());
    crate::own_group::states::Stations {
        md,
        addresses: &addresses,
        names: &[],
    }
    .to_all(crate::al_state::INIT, timeout)?;
    crate::own_group::sii_owner(md, false)?;
    let positions: Vec<usize> = (0..usize::from(n)).collect();
    let in_flight = usize::from(cfg.bus.sii_in_flight);
    // Registers and identity of every device (on several threads: each frame behind
    // `pdu_gate`, as the overlapped reads require).
    let first = |i: usize| -> Result<Head> {
        let i = i as u16;
        let address = STATION_BASE + i;
        let read = |reg: u16, what: &str| {
            crate::pdu_gate::gated(|| block_on(Command::fprd(address, reg).receive::<u16>(md)))
                .map_err(bus(format!("position {i}: {what}")))
        };
        let alias = read(0x0012, "station alias")?;
        let features = read(0x0008, "ESC features")?;
        let (v, p, r, s) = crate::mapping::sii_identity(md, address, i)?;
        Ok((alias, features & 0x0004 != 0, (v, p, r), s))
    };
    let t_sii = std::time::Instant::now();
    let heads = crate::bringup::overlapped(in_flight, &positions, &first)?;
    // The SII: one device of each identity first (read or checked), then the others (checked
    // against what the first left in the cache).
    let (mut firsts, mut others) = (Vec::new(), Vec::new());
    for (i, h) in heads.iter().enumerate() {
        if heads[..i].iter().any(|o| o.2 == h.2) {
            others.push(i);
        } else {
            firsts.push(i);
        }
    }
    let read = |i: usize| -> Result<Sii> {
        let position = i as u16;
        let id = heads[i].2;
        let fallback = format!("{:#x}:{:#x}", id.0, id.1);
        crate::mapping::sii_at(
            md,
            (STATION_BASE + position, &fallback),
            position,
            (id, crate::mapping::Categories::Own),
            cache,
        )
    };
    let mut siis: Vec<Option<Sii>> = vec![None; usize::from(n)];
    for list in [&firsts, &others] {
        for (&i, s) in list
            .iter()
            .zip(crate::bringup::overlapped(in_flight, list, &read)?)
        {
            siis[i] = Some(s);
        }
    }
    let sii_ms = t_sii.elapsed().as_millis();
    let found = heads
        .into_iter()
        .zip(siis)
        .enumerate()
        .map(|(i, ((alias, dc, identity, serial), sii))| {
            let position = i as u16;
            let sii = sii.ok_or_else(|| {
                Error::SegmentMismatch(format!("position {position}: no SII read (internal)"))
            })?;
            let name = sii.device_name().map_or_else(
                || format!("{:#x}:{:#x}", identity.0, identity.1),
                str::to_string,
            );
            Ok(Scanned {
                position,
                address: STATION_BASE + position,
                alias,
                identity,
                serial,
                name,
                sii,
                dc,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((found, sii_ms))
}
