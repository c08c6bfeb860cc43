//! Distributed clocks in rtcat's own bring-up (`[bus] bring_up = "rtcat"` with `[dc]`,
//! docs/NOTES.md §17.4): what ethercrab 0.7.1's DC initialisation (`dc::configure_dc`,
//! `run_dc_static_sync`), its `configure_dc_sync` and its OP transition with `tx_rx_dc` write,
//! in the same order and to the same registers; the delays are rtcat's own measurement
//! ([`crate::tree::delays`], right through devices without DC, where ethercrab's are not:
//! §7.4), and the offsets take them into account.
//!
//! - [`clocks`], in INIT after the scan: one frame latches every device's receive times
//!   (ETG.1000.4 §6.8.2); each DC device's propagation delay (0x0928) and system time offset
//!   (0x0920) written in one datagram, the offset such that its system time is the
//!   reference's as the frame passed it plus its delay (ethercrab leaves the delay to the
//!   control loop).
//! - [`static_sync`], the static drift compensation: `[dc] static_sync_iterations` FRMWs of
//!   the reference's system time (0x0910), one a frame, as ethercrab and SOEM send them — on a
//!   thread of its own through rtcat's own frames, beside the steps in PRE-OP (ethercrab's
//!   runs after its scan).
//! - [`sync0`], in PRE-OP with the process data configured: every DC device with a SYNC mode
//!   gets SYNC0 off, the start time (the reference's system time plus
//!   [`crate::dc::SYNC0_START_DELAY`], on the SYNC0 grid; the same for all), the cycle time and
//!   its activation (AssignActivate's high byte, 0x0981).
//! - OP (`own_bringup`): process data exchanged while the subdevices get there, with DC the
//!   reference's time read first ([`system_time`]) and the next frame at the next SYNC0 plus
//!   `[dc]`'s shift ([`next_wait`]): a drive in DC mode checks that frames arrive around SYNC0
//!   before it accepts OP (ETG.1020 §21.1).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::scan::Scanned;
use ethercrab::{Command, MainDevice};
use futures_lite::future::block_on;
use std::time::Duration;

/// DC system time (ETG.1000.4 §6.9.2), SYNC activation, start time, SYNC0 cycle time.
const SYSTEM_TIME: u16 = 0x0910;
const SYNC_ACTIVATION: u16 = 0x0981;
const START_TIME: u16 = 0x0990;
const SYNC0_CYCLE: u16 = 0x09a0;

/// The system time offset of a device whose local time was `local` when a frame passed it,
/// `delay` behind the reference whose system time was then `reference`: its system time is
/// the reference's when the frame passed the reference, plus the time the frame took to it.
fn offset(reference: u64, delay: u32, local: u64) -> u64 {
    reference.wrapping_add(u64::from(delay)).wrapping_sub(local)
}

/// The clocks of every DC device of the scan (`scanned`: each device's station address and
/// whether it has DC, in processing order; the first with DC the reference) set against the
/// master's time and one another (see the module's description); returns the reference's
/// station address.
pub(crate) fn clocks(md: &MainDevice<'static>, scanned: &crate::branch::Scanned) -> Result<u16> {
    let who = "DC clocks";
    let l = crate::dc_delays::latch(md, scanned, who)?;
    let delays = crate::tree::delays(&l.dl, &l.dc, &l.times)
        .map_err(|e| Error::SegmentMismatch(format!("DC propagation delays: {e}")))?;
    // The time ethercrab gives the reference (its `ethercat_now`): the grid the cycle locks
    // to is the reference's system time, whatever its origin.
    let now = ethercrab::std::ethercat_now();
    let mut reference = None;
    for (i, (&(address, _), delay)) in scanned.iter().zip(&delays).enumerate() {
        let Some(delay) = *delay else { continue };
        reference.get_or_insert(address);
        let offset = offset(now, delay, l.local[i]);
        crate::dc_delays::write_offset_and_delay(md, address, (offset, delay)).map_err(|e| {
            Error::bus(
                format!("{who}: offset and delay of the device at scan position {i}"),
                e,
            )
        })?;
    }
    reference.ok_or_else(|| {
        Error::SegmentMismatch(
            "dc.enabled = true, but no subdevice of the segment has a distributed clock".into(),
        )
    })
}

/// Static drift compensation frames lost in a row after which the reference is taken for gone.
const LOST_IN_A_ROW: u32 = 10;

/// The static drift compensation: `iterations` FRMWs of the reference's system time (at
/// station `reference`), one a frame, through rtcat's own frames (`own`), so that it runs
/// beside the rest of the bring-up without meeting ethercrab's PDU indices
/// ([`crate::pdu_gate`]); until `stop`. A lost frame is one sample fewer for the loops (and
/// counted); [`LOST_IN_A_ROW`] in a row fail it. Returns the frames lost.
pub(crate) fn static_sync(
    own: crate::own_frames::OwnBus<'_>,
    reference: u16,
    iterations: u32,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<u32> {
    let mut batch = crate::own_frames::Batch::new();
    batch.frmw(reference, SYSTEM_TIME, 8);
    let (mut lost, mut in_a_row) = (0u32, 0u32);
    for _ in 0..iterations {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        match own.exchange(&batch) {
            Ok(_) => in_a_row = 0,
            Err(e) => {
                lost += 1;
                in_a_row += 1;
                if in_a_row >= LOST_IN_A_ROW {
                    return Err(e.into_error(format!(
                        "DC static drift compensation: {in_a_row} frames in a row lost \
                         (FRMW of 0x0910 at station {reference:#06x})"
                    )));
                }
            }
        }
    }
    Ok(lost)
}

/// The first SYNC0 pulse: `system_time` plus `delay`, down to the SYNC0 grid of `period` ns (as
/// ethercrab's `configure_dc_sync` computes it).
fn start_time(system_time: u64, delay: u64, period: u64) -> u64 {
    (system_time + delay) / period * period
}

/// SYNC0 on every DC subdevice of `found` (positions `capable`, the first the reference) with
/// a SYNC mode in `[dc]` (see the module's description).
pub(crate) fn sync0(
    md: &MainDevice<'static>,
    cfg: &Config,
    found: &[Scanned],
    capable: &[u16],
) -> Result<()> {
    let at = |p: u16| &found[usize::from(p)];
    let reference = at(capable[0]).address;
    let system_time = block_on(Command::fprd(reference, SYSTEM_TIME).receive::<u64>(md))
        .map_err(|e| Error::bus("SYNC0: the reference's system time", e))?;
    let period = cfg.dc.sync0_period(cfg.cycle.period()).as_nanos();
    let delay = crate::dc::SYNC0_START_DELAY.as_nanos() as u64;
    let start = start_time(system_time, delay, period);
    for &p in capable {
        let aa = cfg.dc.assign_activate(p);
        if aa == 0 {
            continue;
        }
        let f = at(p);
        let write = |reg: u16, data: &[u8]| {
            block_on(Command::fpwr(f.address, reg).send(md, data)).map_err(|e| {
                Error::bus(format!("SYNC0 of position {p} ({}): {reg:#06x}", f.name), e)
            })
        };
        write(SYNC_ACTIVATION, &[0])?;
        write(START_TIME, &start.to_le_bytes())?;
        // 8 bytes, as ethercrab writes it: the SYNC1 cycle time (0x09A4) 0.
        write(SYNC0_CYCLE, &period.to_le_bytes())?;
        write(SYNC_ACTIVATION, &[(aa >> 8) as u8])?;
    }
    Ok(())
}

/// The reference's system time, read as the cycle reads it: an FRMW of 0x0910 at station
/// `reference`, which the other clocks take as theirs.
pub(crate) fn system_time(md: &MainDevice<'static>, reference: u16) -> Result<u64> {
    block_on(
        Command::frmw(reference, SYSTEM_TIME)
            .ignore_wkc()
            .receive::<u64>(md),
    )
    .map_err(|e| Error::bus("FRMW of the DC system time (0x0910)", e))
}

/// How long from a frame that read the reference's `system_time` until the next one should
/// leave: the next SYNC0 plus `[dc]`'s shift (ethercrab's `next_cycle_wait`).
pub(crate) fn next_wait(cfg: &Config, system_time: u64) -> Duration {
    let period = cfg.dc.sync0_period(cfg.cycle.period()).as_nanos();
    let shift = cfg.dc.sync0_shift_ns(cfg.cycle.period());
    wait_after(system_time, period, shift)
}

/// [`next_wait`] of a SYNC0 `period` and `shift` (ns).
fn wait_after(system_time: u64, period: u64, shift: u64) -> Duration {
    Duration::from_nanos(period - system_time % period + shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_behind_the_reference_reads_the_reference_s_time_plus_its_delay() {
        // The reference's system time 5_000 when the frame passed it; this device's local clock
        // read 1_000 when the frame reached it 700 ns later: its system time then is 5_700.
        let o = offset(5_000, 700, 1_000);
        assert_eq!(1_000u64.wrapping_add(o), 5_700);
        // A local clock ahead of the system time: the offset wraps, the sum does not.
        let o = offset(5_000, 0, 9_000);
        assert_eq!(9_000u64.wrapping_add(o), 5_000);
    }

    #[test]
    fn sync0_starts_on_the_grid_and_the_frame_leaves_at_the_shift() {
        assert_eq!(start_time(1_234_567, 100_000_000, 1_000_000), 101_000_000);
        assert_eq!(start_time(999_999, 1, 1_000_000), 1_000_000);
        // 300 µs into a 1 ms period, shift 500 µs: the next SYNC0 in 700 µs, then 500 µs.
        assert_eq!(
            wait_after(10_300_000, 1_000_000, 500_000),
            Duration::from_micros(1_200)
        );
    }
}
