//! The segment brought to OP by rtcat itself, `[bus] bring_up = "rtcat"` (issue 28 item 6,
//! docs/NOTES.md §17.4): ethercrab 0.7.1 only carries the frames.
//!
//! ethercrab's group initialisation is the larger part of a bring-up with real ESC timing and
//! cannot be shortened from outside (§17.1): its scan creates one subdevice after the other and
//! moves each to PRE-OP before the next, with its own uncached SII reads; its process data
//! sizing reads the PDO assignment and every mapping object over CoE again, one subdevice after
//! the other, after rtcat has configured and read them. Here the same steps are done for all
//! subdevices at once and with what rtcat already knows:
//! - the scan ([`crate::scan`]): count, reset, station addresses, identity and SII through the
//!   cache, `[bus] sii_in_flight` subdevices at a time;
//! - the mailbox sync managers of every subdevice, then PRE-OP requested of all and waited for
//!   together ([`states`]);
//! - the `[[device]]` configuration and the layout, as in ethercrab's bring-up
//!   ([`crate::bringup::configure_stations`], `[bus] config_in_flight` at a time);
//! - the process data sync managers and FMMUs computed from the SII and the layout
//!   ([`crate::pd_registers`]: what ethercrab writes, byte for byte, `tests/pd_registers.rs`)
//!   instead of sized over CoE again; SAFE-OP, the SAFE-OP startup SDOs, OP (with the image
//!   exchanged while the subdevices get there: a subdevice wants outputs before OP), each for
//!   all.
//!
//! The cycle is the same for both bring-ups ([`crate::own_cycle`]): the image is laid out as
//! ethercrab lays out its group (from logical address 0, every subdevice's inputs, then every
//! subdevice's outputs), so the expected working counter, the per-subdevice recovery's
//! registers and the shared image do not depend on which bring-up ran.
//!
//! With `[dc]` the clocks are set up after the scan, SYNC0 with the process data and OP is
//! reached with frames on the SYNC0 grid ([`crate::own_dc`]); the static drift compensation
//! runs beside the steps in PRE-OP.
//!
//! The members of groups on a junction's port (`[[group]] behind`) are kept out of the
//! layout's devices at the scan, as [`crate::branch`] keeps them out of ethercrab's group:
//! left in INIT, run by the region ([`crate::region`]), joining through their recovery.

use crate::application::Application;
use crate::bringup::{AnyGroup, Up};
use crate::config::Config;
use crate::devices;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::own_group::{OwnGroup, states};
use crate::pd_registers::{Logical, PdRegisters};
use crate::sii::SmUsage;
use ethercrab::{Command, MainDevice};
use futures_lite::future::block_on;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Write the sync managers of `regs` whose SII usage `mailbox` says (the mailbox's, or the
/// process data's), and (`fmmus`) every FMMU it enables.
fn write_registers(
    md: &MainDevice<'static>,
    (address, position): (u16, u16),
    sii: &crate::sii::Sii,
    regs: &PdRegisters,
    (mailbox, fmmus): (bool, bool),
) -> Result<()> {
    for (n, r) in &regs.sms {
        let is_mailbox = sii
            .sync_managers
            .get(usize::from(*n))
            .is_some_and(|s| matches!(s.usage, SmUsage::MailboxOut | SmUsage::MailboxIn));
        if is_mailbox != mailbox {
            continue;
        }
        // Start, length, control; status is the ESC's; activation.
        block_on(Command::fpwr(address, 0x0800 + 8 * u16::from(*n)).send(md, &r[..7]))
            .map_err(|e| Error::bus(format!("position {position}: SM{n}"), e))?;
    }
    if fmmus {
        for (n, r) in &regs.fmmus {
            block_on(Command::fpwr(address, 0x0600 + 16 * u16::from(*n)).send(md, &r[..]))
                .map_err(|e| Error::bus(format!("position {position}: FMMU{n}"), e))?;
        }
    }
    Ok(())
}

/// What the steps in PRE-OP leave: the layout, which `[[device]]` entry configures each
/// subdevice, the mailbox counters, the region's members, the process data registers written.
struct Prepared {
    layout: Layout,
    chosen: Vec<Option<usize>>,
    counters: Vec<u8>,
    late: Vec<crate::region::Member>,
    registers: Vec<PdRegisters>,
    /// How long writing the process data registers took (ms).
    pd_ms: u128,
}

/// Bring the segment to OP (see the module's description); what [`crate::bringup::bring_up`]
/// returns, with [`AnyGroup::Own`]. `own`: rtcat's own frames, for the DC static drift
/// compensation, which runs beside the steps in PRE-OP.
pub(crate) fn bring_up(
    md: &MainDevice<'static>,
    cfg: &Config,
    app: &mut dyn Application,
    generation: u32,
    topology: Option<crate::hotconnect::Expected<'_>>,
    sii: &crate::sii_cache::SiiCache,
    own: crate::own_frames::OwnBus<'_>,
) -> Result<Up> {
    let timeout = Duration::from_millis(cfg.bus.state_timeout_ms.into());
    let before = sii.counts();
    let t_scan = Instant::now();
    let (all, sii_ms) = crate::scan::scan(md, cfg, sii)?;
    let scan_ms = t_scan.elapsed().as_millis().saturating_sub(sii_ms);
    // Every device in processing order (the DC tree and the wire order are read along it).
    let scanned: crate::branch::Scanned = all.iter().map(|f| (f.address, f.dc)).collect();
    let (found, aside) = keep_aside(cfg, all)?;
    let n = found.len();
    let identities: Vec<(u32, u32, u32)> = found.iter().map(|f| f.identity).collect();
    let aliases: Vec<u16> = found.iter().map(|f| f.alias).collect();
    // A re-initialisation drives only the topology the run started with.
    if let Some((t, hot)) = topology {
        crate::hotconnect::check_topology((&identities, &aliases), t, hot)?;
    }
    // With `[dc]`: the DC subdevices (the first the reference, which cannot be optional).
    let capable = if cfg.dc.enabled {
        let devices: Vec<(bool, String)> = found.iter().map(|f| (f.dc, f.name.clone())).collect();
        crate::bringup::dc_capable(cfg, &devices)?
    } else {
        Vec::new()
    };
    let hot = crate::hotconnect::resolve(
        &cfg.group,
        &cfg.device,
        &crate::hotconnect::found(aliases.iter().copied().zip(identities.iter().copied())),
        capable.first().copied(),
    )?;
    crate::bringup::check_segment(cfg, &identities)?;
    let reference = if cfg.dc.enabled {
        crate::branch::check_reference(&cfg.group, &scanned, &aside)?;
        Some(crate::own_dc::clocks(md, &scanned)?)
    } else {
        None
    };
    let addresses: Vec<u16> = found.iter().map(|f| f.address).collect();
    let names: Vec<String> = found.iter().map(|f| f.name.clone()).collect();
    let stations = states::Stations {
        md,
        addresses: &addresses,
        names: &names,
    };
    let first_absent = topology.map_or(&[][..], |(_, first)| first.absent.as_slice());
    // The DC static drift compensation on a thread of its own while the steps in PRE-OP run
    // (its frames are rtcat's own, the steps' ethercrab's: they do not meet).
    let stop = AtomicBool::new(false);
    let (prepared, synced) = std::thread::scope(|s| {
        let sync = reference.map(|r| {
            let stop = &stop;
            s.spawn(move || {
                let t = Instant::now();
                crate::own_dc::static_sync(own, r, cfg.dc.static_sync_iterations, stop)
                    .map(|lost| (lost, t.elapsed().as_millis()))
            })
        });
        let prepared = (|| -> Result<Prepared> {
            // The mailboxes, then PRE-OP for all.
            let t_pre = Instant::now();
            mailboxes(md, &found)?;
            crate::own_group::sii_owner(md, true)?;
            stations.to_all(crate::al_state::PRE_OP, timeout)?;
            crate::own_group::sii_owner(md, false)?;
            log::info!(
                "bring-up: scan (rtcat) {scan_ms} ms, mailboxes and PRE-OP {} ms",
                t_pre.elapsed().as_millis()
            );
            // The configuration and the layout, as ethercrab's bring-up does them.
            let t_config = Instant::now();
            let (layout, chosen, counters) = crate::bringup::configure_stations(
                md,
                &stations_of(&found),
                &found.iter().map(|f| f.sii.clone()).collect::<Vec<_>>(),
                cfg,
                generation,
                (&hot.absent, first_absent),
            )?;
            crate::bringup::log_sii_and_config(sii, before, sii_ms, t_config.elapsed().as_millis());
            // The image of the subdevices present, as ethercrab refuses its group's.
            let image = crate::own_cycle::Plan::of(&layout, (addresses.clone(), 0), None);
            if image.inputs + image.outputs > crate::limits::MAX_PDI_BYTES {
                return Err(crate::bringup::image_too_long(image.inputs + image.outputs));
            }
            let members: Vec<(usize, usize)> =
                hot.absent.iter().map(|a| (a.group, a.member)).collect();
            let late = crate::region::plan(&layout, n, &chosen, &members)?;
            let mut counters = crate::bringup::configure_app(md, app, &layout, counters)?;
            crate::bringup::write_sync_modes(md, cfg, &layout, &capable, &mut counters)?;
            let t_pd = Instant::now();
            let registers = process_data(
                md,
                &found,
                &layout,
                &crate::bringup::configured_by(cfg, &chosen),
            )?;
            Ok(Prepared {
                layout,
                chosen,
                counters,
                late,
                registers,
                pd_ms: t_pd.elapsed().as_millis(),
            })
        })();
        // A failed step ends the compensation too: the bring-up is over.
        stop.store(prepared.is_err(), Ordering::Relaxed);
        let synced = sync.map(|h| {
            h.join()
                .unwrap_or(Err(Error::Panicked("the DC static drift compensation")))
        });
        (prepared, synced)
    });
    let Prepared {
        layout,
        chosen,
        mut counters,
        late,
        registers,
        pd_ms,
    } = prepared?;
    if let Some(synced) = synced {
        let (lost, ms) = synced?;
        log::info!(
            "bring-up: DC static drift compensation, {} frames ({lost} lost), {ms} ms beside the \
             steps in PRE-OP",
            cfg.dc.static_sync_iterations
        );
        crate::own_dc::sync0(md, cfg, &found, &capable)?;
    }
    let configured = crate::bringup::configured_by(cfg, &chosen);
    let t_up = Instant::now();
    stations.to_all(crate::al_state::SAFE_OP, timeout)?;
    for (pos, f) in found.iter().enumerate() {
        if let Some((d, who)) = configured(pos, &f.name) {
            crate::bringup::with_counted_sdo(md, &mut counters, f.position, f.address, |sdo| {
                devices::write_startup(sdo, &who, d, devices::Transition::SO)
            })?;
        }
    }
    let frames = crate::own_cycle::Plan::of(&layout, (addresses.clone(), 0), reference);
    let image = (frames.start, frames.inputs + frames.outputs);
    into_op(md, cfg, &stations, reference, image)?;
    log::info!(
        "bring-up: process data sizing (rtcat) {pd_ms} ms, SAFE-OP and OP {} ms",
        t_up.elapsed().as_millis()
    );
    let snapshots = if cfg.health.recovery == crate::config::RecoveryPolicy::Subdevice {
        let s = snapshots(&found, &registers, &chosen, &layout);
        if reference.is_some() {
            s.into_iter()
                .map(|s| s.with_running_dc(md))
                .collect::<Result<Vec<_>>>()?
        } else {
            s
        }
    } else {
        Vec::new()
    };
    let (expected_wkc, wkc_shares) = crate::bringup::expected_wkc(cfg, &layout, n)?;
    let order = crate::branch::order(md, &cfg.group, &scanned, &aside, n, &hot)?;
    Ok(Up {
        group: AnyGroup::Own(OwnGroup::new(addresses, names, image)),
        layout,
        expected_wkc,
        wkc_shares,
        // The reference is what the others are compared with.
        dc_positions: capable.get(1..).unwrap_or_default().to_vec(),
        snapshots,
        identities,
        aliases,
        hot,
        late,
        order,
        frames,
    })
}

/// OP for every subdevice of `stations`, the image (`image`: logical start, length; outputs
/// zero) exchanged while they get there, a cycle period apart: a subdevice may go from SAFE-OP
/// to OP only once the master sends it outputs ("before the EtherCAT master switches the
/// EtherCAT slave from Safe-Op to Op it must transfer valid output data": Beckhoff's
/// description of the state machine; Yaskawa's and Kollmorgen's say the same), which
/// ethercrab's `into_op` does not. With DC (`reference`) the reference's system time is read
/// first in each round and the next round starts at the next SYNC0 plus `[dc]`'s shift, as
/// ethercrab's `tx_rx_dc` loop does.
fn into_op(
    md: &MainDevice<'static>,
    cfg: &Config,
    stations: &states::Stations<'_>,
    reference: Option<u16>,
    image: (u32, usize),
) -> Result<()> {
    let timeout = Duration::from_millis(cfg.bus.state_timeout_ms.into());
    stations.to_all_between(crate::al_state::OP, timeout, || {
        let dc_time = reference
            .map(|r| crate::own_dc::system_time(md, r))
            .transpose()?;
        crate::own_group::zero_outputs(md, image)
            .map_err(|e| Error::bus("transition to OP: the process data", e))?;
        Ok(match dc_time {
            Some(t) => crate::own_dc::next_wait(cfg, t),
            None => cfg.cycle.period().as_duration(),
        })
    })
}

/// The scanned subdevices as the configuration names them.
fn stations_of(found: &[crate::scan::Scanned]) -> Vec<crate::mapping::Station> {
    found
        .iter()
        .map(|f| crate::mapping::Station {
            position: f.position,
            address: f.address,
            alias: f.alias,
            name: f.name.clone(),
            identity: crate::layout::Identity {
                vendor_id: f.identity.0,
                product_code: f.identity.1,
                revision: f.identity.2,
                serial: f.serial,
            },
        })
        .collect()
}

/// The scan's devices (`all`) parted: the layout's, numbered by their place among them (the
/// positions the layout, the image and the configuration use), and the members of groups on a
/// junction's port, each with the station address the scan gave it.
fn keep_aside(
    cfg: &Config,
    all: Vec<crate::scan::Scanned>,
) -> Result<(Vec<crate::scan::Scanned>, Vec<crate::branch::Aside>)> {
    let (mut found, members): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|f| !crate::hotconnect::on_a_branch(&cfg.group, f.alias));
    for (i, f) in found.iter_mut().enumerate() {
        f.position = i as u16;
    }
    if members.len() > crate::region::MAX_MEMBERS {
        return Err(Error::Capacity(format!(
            "{} members of groups on a junction's port answered; rtcat runs at most {}",
            members.len(),
            crate::region::MAX_MEMBERS
        )));
    }
    let aside = members
        .iter()
        .map(|f| crate::branch::Aside {
            address: f.address,
            alias: f.alias,
            dc: f.dc,
        })
        .collect();
    Ok((found, aside))
}

/// The mailbox sync managers of every subdevice, as ethercrab writes them (from the SII).
fn mailboxes(md: &MainDevice<'static>, found: &[crate::scan::Scanned]) -> Result<()> {
    for f in found {
        let coe = crate::mapping::has_coe(&f.sii);
        let none = Logical {
            inputs: 0,
            outputs: 0,
        };
        let regs = crate::pd_registers::compute(f.position, &f.sii, coe, &[], none)
            .map_err(|e| Error::SegmentMismatch(e.to_string()))?;
        write_registers(md, (f.address, f.position), &f.sii, &regs, (true, false))?;
    }
    Ok(())
}

/// The process data sync managers and FMMUs of every subdevice, computed from its SII and the
/// layout at its place in the image, after its `[[device]]` sizes (`configured`) are checked
/// against the layout; returns what was written, by position.
fn process_data(
    md: &MainDevice<'static>,
    found: &[crate::scan::Scanned],
    layout: &Layout,
    configured: &crate::bringup::Configured<'_>,
) -> Result<Vec<PdRegisters>> {
    let mut registers = Vec::with_capacity(found.len());
    for (pos, f) in found.iter().enumerate() {
        let s = &layout.subdevices[pos];
        if let Some((d, who)) = configured(pos, &f.name) {
            devices::check_sizes(&who, d, s.input_bytes as usize, s.output_bytes as usize)?;
        }
        let at = Logical::in_group(layout, (f.position, found.len()), 0)
            .ok_or_else(|| Error::SegmentMismatch(format!("position {pos}: not in the layout")))?;
        let bits = crate::pd_registers::sm_bits(layout, f.position);
        let regs = crate::pd_registers::compute(f.position, &f.sii, s.coe, &bits, at)
            .map_err(|e| Error::SegmentMismatch(e.to_string()))?;
        write_registers(md, (f.address, f.position), &f.sii, &regs, (false, true))?;
        registers.push(regs);
    }
    Ok(registers)
}

/// What each subdevice runs with, for its own recovery: the registers written.
fn snapshots(
    found: &[crate::scan::Scanned],
    registers: &[PdRegisters],
    chosen: &[Option<usize>],
    layout: &Layout,
) -> Vec<crate::subdevice_recovery::Snapshot> {
    found
        .iter()
        .zip(registers)
        .enumerate()
        .map(|(pos, (f, regs))| {
            crate::subdevice_recovery::Snapshot::computed(crate::subdevice_recovery::Computed {
                position: f.position,
                address: f.address,
                identity: f.identity,
                alias: f.alias,
                name: f.name.clone(),
                registers: regs,
                device: chosen.get(pos).copied().flatten(),
                coe: layout.subdevices[pos].coe,
                dc_capable: f.dc,
            })
        })
        .collect()
}
