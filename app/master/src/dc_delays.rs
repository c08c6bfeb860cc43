//! The DC propagation delays rtcat measures itself (issue 28 item 7: "a device without DC
//! between DC devices, the propagation delay must still be right").
//!
//! ethercrab 0.7.1 takes each DC device's delay from its parent's receive times and reads a
//! parent without a DC unit as all zeros, so every DC device behind a device without DC loses
//! that part (docs/NOTES.md §7.4: delays 0, 0, 0, 300 ns for arrivals 0, 700, 1000, 1300 ns).
//! After ethercrab's DC initialisation one latch over the whole segment gives every delay again
//! ([`crate::tree::delays`]); where ethercrab's differs by more than its rounding, the delay
//! (0x0928) is written and the system time offset (0x0920) moved by the same amount: the clocks
//! were synchronised against the old delay, so each copy of the system time was off by the
//! difference.

use crate::error::{Error, Result};
use ethercrab::{Command, MainDevice};
use futures_lite::future::block_on;

/// What one frame latched in every device, in processing order.
pub(crate) struct Latch {
    /// DL status (0x0110).
    pub(crate) dl: Vec<u16>,
    /// Whether the device has a DC unit.
    pub(crate) dc: Vec<bool>,
    /// Receive times of ports 0..3 (0x0900..0x090F); zeros for a device without DC.
    pub(crate) times: Vec<[u32; 4]>,
    /// The local time the frame reached the processing unit (0x0918, 64 bit); 0 without DC.
    pub(crate) local: Vec<u64>,
}

/// Latch the receive times of every device with one frame (a write to 0x0900, ETG.1000.4
/// §6.8.2) and read them with each device's DL status (the ports' times and the processing
/// unit's, 0x0900..0x091F, in one read). `devices`: station address and DC
/// support of every device, in processing order; `who` names the caller in errors.
pub(crate) fn latch(md: &MainDevice<'static>, devices: &[(u16, bool)], who: &str) -> Result<Latch> {
    block_on(Command::bwr(0x0900).ignore_wkc().send(md, 0u32))
        .map_err(|e| Error::bus(format!("{who}: DC latch"), e))?;
    let mut l = Latch {
        dl: Vec::with_capacity(devices.len()),
        dc: Vec::with_capacity(devices.len()),
        times: Vec::with_capacity(devices.len()),
        local: Vec::with_capacity(devices.len()),
    };
    for (i, &(address, dc)) in devices.iter().enumerate() {
        l.dl.push(
            block_on(Command::fprd(address, 0x0110).receive::<u16>(md))
                .map_err(|e| Error::bus(format!("{who}: DL status of position {i}"), e))?,
        );
        l.dc.push(dc);
        let (times, local) = if dc {
            // 0x0900..0x090F the ports, 0x0910 the system time, 0x0918 the processing unit.
            let r = block_on(Command::fprd(address, 0x0900).receive::<[u32; 8]>(md))
                .map_err(|e| Error::bus(format!("{who}: receive times of position {i}"), e))?;
            let local = u64::from(r[6]) | (u64::from(r[7]) << 32);
            ([r[0], r[1], r[2], r[3]], local)
        } else {
            ([0; 4], 0)
        };
        l.times.push(times);
        l.local.push(local);
    }
    Ok(l)
}

/// Write a DC device's system time offset (0x0920, 8 bytes) and propagation delay (0x0928,
/// 4) in one datagram: its control loop never compares with one moved and the other not.
pub(crate) fn write_offset_and_delay(
    md: &MainDevice<'static>,
    address: u16,
    (offset, delay): (u64, u32),
) -> std::result::Result<(), ethercrab::error::Error> {
    let mut regs = [0u8; 12];
    regs[..8].copy_from_slice(&offset.to_le_bytes());
    regs[8..].copy_from_slice(&delay.to_le_bytes());
    block_on(Command::fpwr(address, 0x0920).send(md, &regs[..]))
}

/// ethercrab's delay and rtcat's may differ by the rounding of their halves.
const ROUNDING_NS: u32 = 2;

/// One delay rtcat wrote over ethercrab's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrected {
    pub(crate) position: u16,
    pub(crate) was: u32,
    pub(crate) now: u32,
}

/// Measure every DC device's delay and write those ethercrab got wrong (after its DC
/// initialisation, before SYNC0 is configured). `devices` as for [`latch`]. A segment whose
/// delays cannot be measured (a device without DC that branches before a DC device) keeps
/// ethercrab's, with a warning naming the place.
pub(crate) fn correct(md: &MainDevice<'static>, devices: &[(u16, bool)]) -> Result<Vec<Corrected>> {
    let who = "DC propagation delays";
    let l = latch(md, devices, who)?;
    let delays = match crate::tree::delays(&l.dl, &l.dc, &l.times) {
        Ok(d) => d,
        Err(e) => {
            log::warn!("{who}: {e}; ethercrab's are kept");
            return Ok(Vec::new());
        }
    };
    let mut out = Vec::new();
    for (i, (&(address, _), delay)) in devices.iter().zip(delays).enumerate() {
        let Some(now) = delay else { continue };
        let failed =
            |reg: u16| move |e| Error::bus(format!("{who}: {reg:#06x} of position {i}"), e);
        let was =
            block_on(Command::fprd(address, 0x0928).receive::<u32>(md)).map_err(failed(0x0928))?;
        if was.abs_diff(now) <= ROUNDING_NS {
            continue;
        }
        let offset = block_on(Command::fprd(address, 0x0920).receive::<u64>(md))
            .map_err(failed(0x0920))?
            .wrapping_add_signed(i64::from(now) - i64::from(was));
        write_offset_and_delay(md, address, (offset, now)).map_err(failed(0x0920))?;
        log::info!("{who}: position {i} {now} ns (ethercrab's {was} ns)");
        out.push(Corrected {
            position: i as u16,
            was,
            now,
        });
    }
    Ok(out)
}
