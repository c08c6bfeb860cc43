//! Bring-up, recovery and shutdown of a segment (as ethercrab's `subdevice_group` holds a
//! group's state transitions): scan to PRE-OP, check the segment against `[segment]`, write the
//! `[[device]]` configuration, read the layout, let the application configure, DC setup, SAFE-OP
//! and OP with their checks; the retrying of a failed bring-up (a recovery is a bring-up on a
//! fresh MainDevice); and the way back (outputs zero, SAFE-OP, PRE-OP, INIT).
//!
//! Per docs/NOTES.md §5: this runs on a normal thread (ethercrab's timer thread inherits the
//! scheduling of the first thread that needs it) with a TX/RX thread moving the frames.

use crate::application::{Application, Setup};
use crate::bus::ThreadRt;
use crate::config::Config;
use crate::devices;
use crate::error::{Error, Result};
use crate::group::{DcGroup, Group, OpGroup, PreOpGroup};
use crate::layout::{Layout, LayoutError};
use crate::limits::{LRW_CHUNK, MAX_PDI_BYTES, MAX_SUBDEVICES};
use crate::stop::Stop;
use ethercrab::{MainDevice, Timeouts};
use futures_lite::future::block_on;
use std::time::Duration;

/// rtcat's own frames on `frames` with the bring-up's PDU timeout (`[bus]
/// init_pdu_timeout_ms`): for a bring-up, and for the per-subdevice recovery's worker.
pub(crate) fn own_bus<'a>(
    frames: &'a crate::own_frames::OwnFrames,
    cfg: &Config,
) -> crate::own_frames::OwnBus<'a> {
    crate::own_frames::OwnBus {
        frames,
        timeout: init_timeouts(cfg).pdu,
    }
}

pub(crate) fn init_timeouts(cfg: &Config) -> Timeouts {
    Timeouts {
        pdu: Duration::from_millis(cfg.bus.init_pdu_timeout_ms.into()),
        eeprom: Duration::from_millis(cfg.bus.init_eeprom_timeout_ms.into()),
        state_transition: Duration::from_millis(cfg.bus.state_timeout_ms.into()),
        ..Timeouts::default()
    }
}

/// The segment in OP: with or without distributed clocks.
pub(crate) enum AnyGroup {
    /// Brought up by ethercrab, no DC: deadlines on CLOCK_MONOTONIC.
    Plain(OpGroup),
    /// Brought up by ethercrab, SYNC0 configured: the phase lock.
    Dc(DcGroup),
    /// Brought up by rtcat (`[bus] bring_up = "rtcat"`, [`crate::own_bringup`]), with or
    /// without DC (see [`Up::has_dc`]).
    Own(crate::own_group::OwnGroup),
}

/// A segment in OP.
pub(crate) struct Up {
    pub(crate) group: AnyGroup,
    pub(crate) layout: Layout,
    pub(crate) expected_wkc: u16,
    /// Each subdevice's share of the working counter (inputs, outputs).
    pub(crate) wkc_shares: Vec<(u32, u32)>,
    /// Positions of the DC subdevices whose system time difference is sampled: all but the
    /// reference clock, whose 0x092C never changes (it is read, never compared; empty without
    /// `[dc]`).
    pub(crate) dc_positions: Vec<u16>,
    /// What each subdevice runs with, for its own recovery (empty with `[health] recovery =
    /// "segment"`).
    pub(crate) snapshots: Vec<crate::subdevice_recovery::Snapshot>,
    /// Vendor, product, revision by position: the topology this bring-up found.
    pub(crate) identities: Vec<(u32, u32, u32)>,
    /// The station aliases (0x0012) by position.
    pub(crate) aliases: Vec<u16>,
    /// Each position's `[[group]]` (hot-connect).
    pub(crate) hot: crate::hotconnect::Membership,
    /// The members of optional groups absent at bring-up (after the others in the layout):
    /// their places in rtcat's own region.
    pub(crate) late: Vec<crate::region::Member>,
    /// The layout's positions in the order a frame meets them with every device present
    /// ([`crate::branch::order`]).
    pub(crate) order: Vec<usize>,
    /// What the cycle's frames carry ([`crate::own_cycle`]): the group's image and stations,
    /// with `[dc]` the reference clock.
    pub(crate) frames: crate::own_cycle::Plan,
}

/// Register access of `configure`, through the MainDevice (configured station addresses).
struct Registers<'a> {
    md: &'a MainDevice<'static>,
    addresses: Vec<u16>,
    /// The mailbox counter of rtcat's last request to each position (its transports continue
    /// after it, `coe::OnDemand::continue_after`).
    counters: Vec<u8>,
}

impl crate::application::RegisterAccess for Registers<'_> {
    fn read(&mut self, position: u16, register: u16, buf: &mut [u8]) -> Result<()> {
        let addr = self.address(position)?;
        let len = u16::try_from(buf.len())
            .map_err(|_| Error::SegmentMismatch(format!("register read of {} bytes", buf.len())))?;
        let r = block_on(ethercrab::Command::fprd(addr, register).receive_slice(self.md, len))
            .map_err(|e| {
                Error::bus(
                    format!("read register {register:#06x} of position {position}"),
                    e,
                )
            })?;
        buf.copy_from_slice(&r[..buf.len()]);
        Ok(())
    }

    fn read_sdo(&mut self, position: u16, index: u16, sub: u8, buf: &mut [u8]) -> Result<usize> {
        let addr = self.address(position)?;
        let fail = |e| {
            Error::Device(Box::new(devices::DeviceError::Sdo {
                who: format!("subdevice at position {position}"),
                action: "read",
                object: format!("{index:#06x}:{sub:02x}"),
                value: String::new(),
                source: Box::new(devices::SdoFailure::Coe(e)),
            }))
        };
        let v = with_counted_sdo(self.md, &mut self.counters, position, addr, |sdo| {
            sdo.client().and_then(|c| c.upload(index, sub))
        })
        .map_err(fail)?;
        let n = v.len().min(buf.len());
        buf[..n].copy_from_slice(&v[..n]);
        Ok(n)
    }

    fn write(&mut self, position: u16, register: u16, data: &[u8]) -> Result<()> {
        let addr = self.address(position)?;
        block_on(ethercrab::Command::fpwr(addr, register).send(self.md, data)).map_err(|e| {
            Error::bus(
                format!("write register {register:#06x} of position {position}"),
                e,
            )
        })
    }
}

impl Registers<'_> {
    fn address(&self, position: u16) -> Result<u16> {
        self.addresses
            .get(usize::from(position))
            .copied()
            .ok_or_else(|| {
                Error::SegmentMismatch(format!(
                    "position {position}: the segment has {} subdevices",
                    self.addresses.len()
                ))
            })
    }
}

/// The segment scanned and configured by ethercrab, in PRE-OP (a segment larger than the master
/// runs is a [`Error::Capacity`] naming both sizes).
pub(crate) fn scan_to_pre_op(md: &MainDevice<'static>) -> Result<PreOpGroup> {
    // Nothing kept aside without groups on a junction's port: ethercrab's single group.
    crate::branch::scan(md, &[]).map(|(group, _)| group)
}

/// The segment found (the identities by position) against `[segment]`: how many subdevices,
/// and the identities it names.
pub(crate) fn check_segment(cfg: &Config, identities: &[(u32, u32, u32)]) -> Result<()> {
    let n = identities.len();
    if n == 0 {
        return Err(Error::NoSubdevices);
    }
    if let Some(want) = cfg.segment.subdevices
        && usize::from(want) != n
    {
        return Err(Error::SegmentMismatch(format!(
            "segment.subdevices = {want}, but {n} subdevices answered"
        )));
    }
    for d in &cfg.segment.device {
        let &(vendor, product, _) = identities.get(usize::from(d.position)).ok_or_else(|| {
            Error::SegmentMismatch(format!(
                "segment.device position {}: the segment has {n} subdevices",
                d.position
            ))
        })?;
        for (what, got, want) in [
            ("vendor_id", vendor, d.vendor_id),
            ("product_id", product, d.product_id),
        ] {
            if let Some(w) = want
                && w != got
            {
                return Err(Error::SegmentMismatch(format!(
                    "subdevice at position {}: {what} {got:#010x}, configured {w:#010x}",
                    d.position
                )));
            }
        }
    }
    Ok(())
}

/// The SII of every subdevice, `in_flight` at once (each ESC has its own EEPROM interface and
/// busy time): first one subdevice of each identity (a full read, or a check against the
/// cache), then the others (a check against what the first gave).
fn read_siis(
    md: &MainDevice<'static>,
    refs: &[ethercrab::SubDeviceRef<'_, &ethercrab::SubDevice>],
    found: &[devices::Found],
    sii: &crate::sii_cache::SiiCache,
    in_flight: usize,
) -> Result<Vec<Option<crate::sii::Sii>>> {
    let mut firsts: Vec<usize> = Vec::new();
    let mut others: Vec<usize> = Vec::new();
    for (pos, f) in found.iter().enumerate() {
        if found[..pos].iter().any(|o| o.identity == f.identity) {
            others.push(pos);
        } else {
            firsts.push(pos);
        }
    }
    let read = |pos: usize| crate::mapping::sii_of(md, &refs[pos], pos as u16, sii);
    let mut siis: Vec<Option<crate::sii::Sii>> = vec![None; refs.len()];
    for group in [&firsts, &others] {
        for (pos, s) in group.iter().zip(overlapped(in_flight, group, &read)?) {
            siis[*pos] = Some(s);
        }
    }
    Ok(siis)
}

/// The first steps of every bring-up, on the segment in PRE-OP: check it against `[segment]`,
/// write each `[[device]]` entry's PDO configuration and PS startup SDOs, and read the layout it
/// will run with (the SII through `sii`, up to `[bus] sii_in_flight` subdevices at a time; the
/// SDOs up to `[bus] config_in_flight`). Returns the layout, which `[[device]]` entry configures
/// each position, and the mailbox counter of rtcat's last request to each (0: none), which
/// later transports continue after.
pub(crate) fn configure_pre_op(
    md: &MainDevice<'static>,
    group: &PreOpGroup,
    cfg: &Config,
    generation: u32,
    sii: &crate::sii_cache::SiiCache,
    absent: Absents<'_>,
) -> Result<(Layout, Vec<Option<usize>>, Vec<u8>)> {
    let stations: Vec<crate::mapping::Station> = group
        .iter(md)
        .enumerate()
        .map(|(p, sd)| crate::mapping::Station::of(&sd, u16::try_from(p).unwrap_or(u16::MAX)))
        .collect();
    let identities: Vec<(u32, u32, u32)> = stations.iter().map(identity_of).collect();
    check_segment(cfg, &identities)?;
    let found: Vec<devices::Found> = stations.iter().map(found_of).collect();
    let refs: Vec<_> = group.iter(md).collect();
    let before = sii.counts();
    let t_sii = std::time::Instant::now();
    let siis = read_siis(md, &refs, &found, sii, usize::from(cfg.bus.sii_in_flight))?;
    let sii_ms = t_sii.elapsed().as_millis();
    let siis = siis
        .into_iter()
        .enumerate()
        .map(|(p, s)| {
            s.ok_or_else(|| Error::SegmentMismatch(format!("position {p}: no SII read (internal)")))
        })
        .collect::<Result<Vec<_>>>()?;
    let t_config = std::time::Instant::now();
    let r = configure_stations(md, &stations, &siis, cfg, generation, absent)?;
    log_sii_and_config(sii, before, sii_ms, t_config.elapsed().as_millis());
    Ok(r)
}

/// The bring-up's log line of its SII reads (what `sii` counted since `before`) and its
/// configuration: `tests/sii_cache.rs` and `benches/bringup_fast.rs` read it.
pub(crate) fn log_sii_and_config(
    sii: &crate::sii_cache::SiiCache,
    before: crate::sii_cache::Counts,
    sii_ms: u128,
    config_ms: u128,
) {
    let now = sii.counts();
    log::info!(
        "SII cache: {} checked and used, {} read, {} read again (changed); SII {sii_ms} ms, \
         configuration and mapping {config_ms} ms",
        now.hits - before.hits,
        now.misses - before.misses,
        now.invalidated - before.invalidated,
    );
}

/// The members of optional groups absent at this bring-up and at the run's first.
pub(crate) type Absents<'a> = (
    &'a [crate::hotconnect::AbsentMember],
    &'a [crate::hotconnect::AbsentMember],
);

/// The identity (vendor, product, revision) of `s`.
pub(crate) fn identity_of(s: &crate::mapping::Station) -> (u32, u32, u32) {
    (
        s.identity.vendor_id,
        s.identity.product_code,
        s.identity.revision,
    )
}

/// `s` as the `[[device]]` matchers see it.
fn found_of(s: &crate::mapping::Station) -> devices::Found {
    devices::Found {
        position: s.position,
        alias: s.alias,
        identity: identity_of(s),
    }
}

/// [`configure_pre_op`] of the subdevices `stations` with their SII `siis`, whoever scanned
/// them (ethercrab's group, or [`crate::scan`]): in PRE-OP, each `[[device]]` entry's PDO
/// configuration and PS startup SDOs written, `[bus] config_in_flight` subdevices at a time,
/// and the layout read.
pub(crate) fn configure_stations(
    md: &MainDevice<'static>,
    stations: &[crate::mapping::Station],
    siis: &[crate::sii::Sii],
    cfg: &Config,
    generation: u32,
    (absent, first_absent): Absents<'_>,
) -> Result<(Layout, Vec<Option<usize>>, Vec<u8>)> {
    let n = stations.len();
    // [[device]]: which entry applies to which subdevice, then its PDO configuration and PS
    // startup SDOs, written now in PRE-OP so that everything read below follows them.
    // The members of optional groups absent at bring-up, as they are expected: a `[[device]]`
    // entry that selects one of them selects a subdevice (its mapping is their layout's).
    let expected: Vec<devices::Found> = stations
        .iter()
        .map(found_of)
        .chain(absent.iter().map(|a| a.expected))
        .collect();
    let chosen = devices::resolve(&cfg.device, &expected)?;
    let configured = configured_by(cfg, &chosen);
    // Then every subdevice, `[bus] config_in_flight` at a time: its `[[device]]` PDO
    // configuration and PS startup SDOs, written now in PRE-OP so that what is read next
    // follows them, then the mapping in effect, read from the sources the SMs are sized from
    // and compared with what was configured (a subdevice may ignore a write without aborting
    // it). Without CoE (the SII says) nothing is written and the configuration is compared
    // with the SII. Every transfer goes through rtcat's CoE client, whose frames pass
    // `pdu_gate` one at a time while the devices' mailbox answers overlap; one transport per
    // subdevice, so its counter runs on through all of them (and on into the later ones).
    let one = |pos: usize| -> Result<(crate::layout::SubdeviceSource, u8)> {
        let st = &stations[pos];
        let Some(sii_here) = siis.get(pos) else {
            return Err(Error::SegmentMismatch(format!(
                "position {}: no SII read (internal)",
                st.position
            )));
        };
        let mut sdo =
            crate::coe::OnDemand::new(md, st.position, st.address, crate::coe::Timeouts::default());
        let this = configured(pos, &st.name);
        if let Some((d, who)) = &this {
            let coe = crate::mapping::has_coe(sii_here);
            devices::apply_pre_op(&mut sdo, who, d, coe)?;
        }
        let mut src = crate::mapping::read_subdevice_with(st, sii_here, &mut sdo)?;
        if let Some((d, who)) = &this {
            devices::check_and_name(&mut sdo, who, d, &mut src)?;
        }
        Ok((src, sdo.counter()))
    };
    let all: Vec<usize> = (0..n).collect();
    let (sources, counters): (Vec<_>, Vec<_>) =
        overlapped(usize::from(cfg.bus.config_in_flight), &all, &one)?
            .into_iter()
            .unzip();
    let mut sources = sources;
    // Its borrow of `chosen` ends here (returned below).
    drop(configured);
    let places = |list: &[crate::hotconnect::AbsentMember]| -> Vec<crate::absent::Place> {
        list.iter()
            .map(|a| (a.group, a.member, a.expected.position))
            .collect()
    };
    crate::absent::place(
        &cfg.group,
        &cfg.device,
        &mut sources,
        (&places(first_absent), &places(absent)),
    )
    .map_err(|e| Error::SegmentMismatch(e.to_string()))?;
    Ok((Layout::build(generation, &sources)?, chosen, counters))
}

/// The mailbox counter ethercrab 0.7.1 sends first to a subdevice its scan found: its own
/// count per subdevice starts at 1 (`SubDevice::mailbox_counter`), and it sends nothing over
/// the mailbox before sizing the process data.
const ETHERCRAB_FIRST_COUNTER: u8 = 1;

/// Before ethercrab's own CoE requests (the process data sizing in `into_pre_op_pdi`): a device
/// may ignore a mailbox whose counter repeats the previous one (ETG.1000.4 §5.6: the repeat of
/// a request whose answer was lost), and ethercrab neither sees rtcat's counter nor sends
/// again. Where rtcat's last request to a subdevice carried the counter ethercrab sends first,
/// one more request (0x1000:00, the device type every CoE device has; an abort moves the count
/// on as well, and any failure is ethercrab's to meet next) moves the count on.
fn hand_over_counters(
    md: &MainDevice<'static>,
    cfg: &Config,
    layout: &Layout,
    counters: &mut [u8],
) -> Result<()> {
    let due: Vec<usize> = (0..counters.len())
        .filter(|&p| counters[p] == ETHERCRAB_FIRST_COUNTER)
        .collect();
    let one = |pos: usize| -> Result<u8> {
        let Some(s) = layout.subdevices.get(pos) else {
            return Ok(ETHERCRAB_FIRST_COUNTER);
        };
        let mut sdo =
            crate::coe::OnDemand::new(md, s.position, s.address, crate::coe::Timeouts::default())
                .continue_after(ETHERCRAB_FIRST_COUNTER);
        if let Err(e) = sdo.client().and_then(|c| c.upload(0x1000, 0)) {
            log::debug!(
                "position {}: 0x1000:00 before ethercrab's requests: {e}",
                s.position
            );
        }
        Ok(sdo.counter())
    };
    let done = overlapped(usize::from(cfg.bus.config_in_flight), &due, &one)?;
    for (&p, c) in due.iter().zip(done) {
        counters[p] = c;
    }
    Ok(())
}

/// Stack of a configuration worker: the CoE client's buffers and ethercrab's futures, with
/// room to spare (the bring-up thread itself gets [`crate::limits::SETUP_STACK`]).
const WORKER_STACK: usize = 8 << 20;

/// `f` for every item of `items`, at most `in_flight` at a time on scoped threads (each blocks
/// on its own bus requests; `f` must create and consume its frames behind `pdu_gate`, or
/// ethercrab 0.7.1 may lose responses). The results
/// in the order of `items`; on failures the first failing item's error (by that order, so the
/// same device is named as in a sequential run), and no new item is started after one failed.
/// With `in_flight` 1 (or one item) everything runs on this thread, one after another.
pub(crate) fn overlapped<T: Send>(
    in_flight: usize,
    items: &[usize],
    f: &(dyn Fn(usize) -> Result<T> + Sync),
) -> Result<Vec<T>> {
    let workers = in_flight.min(items.len());
    if workers <= 1 {
        return items.iter().map(|&i| f(i)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let results: std::sync::Mutex<Vec<Option<Result<T>>>> =
        std::sync::Mutex::new((0..items.len()).map(|_| None).collect());
    let work = || {
        use std::sync::atomic::Ordering::Relaxed;
        while !failed.load(Relaxed) {
            let k = next.fetch_add(1, Relaxed);
            let Some(&item) = items.get(k) else { break };
            let r = f(item);
            if r.is_err() {
                failed.store(true, Relaxed);
            }
            results.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(r);
        }
    };
    std::thread::scope(|s| {
        let mut spawned = 0;
        for w in 0..workers {
            let b = std::thread::Builder::new()
                .name(format!("rtcat-config-{w}"))
                .stack_size(WORKER_STACK);
            if b.spawn_scoped(s, work).is_ok() {
                spawned += 1;
            }
        }
        // No thread could be made: do it here.
        if spawned == 0 {
            work();
        }
    });
    let mut out = Vec::with_capacity(items.len());
    for r in results.into_inner().unwrap_or_else(|p| p.into_inner()) {
        match r {
            Some(Ok(v)) => out.push(v),
            Some(Err(e)) => return Err(e),
            // Not started because an item before or after it failed: that error follows.
            None => {}
        }
    }
    if out.len() == items.len() {
        Ok(out)
    } else {
        Err(Error::SegmentMismatch(
            "configuration stopped without an error (internal)".into(),
        ))
    }
}

/// `[[group]]`: which group each device found belongs to, the members absent, and what this
/// version refuses ([`crate::hotconnect::resolve`]).
fn membership(
    md: &MainDevice<'static>,
    group: &PreOpGroup,
    cfg: &Config,
    identities: &[(u32, u32, u32)],
) -> Result<crate::hotconnect::Membership> {
    let dc_reference = cfg
        .dc
        .enabled
        .then(|| group.iter(md).position(|sd| sd.dc_support().any()))
        .flatten()
        .and_then(|p| u16::try_from(p).ok());
    let found = group
        .iter(md)
        .zip(identities)
        .map(|(sd, id)| (sd.alias_address(), *id));
    crate::hotconnect::resolve(
        &cfg.group,
        &cfg.device,
        &crate::hotconnect::found(found),
        dc_reference,
    )
}

/// The working counter a cycle expects of the `n` subdevices ethercrab's image holds (the
/// present ones) and the shares [`Layout::wkc_of`] gives; `[segment] expected_wkc` must agree.
pub(crate) fn expected_wkc(
    cfg: &Config,
    layout: &Layout,
    n: usize,
) -> Result<(u16, Vec<(u32, u32)>)> {
    let (derived, wkc_shares) = layout.wkc_of(n, LRW_CHUNK);
    let expected = match cfg.segment.expected_wkc {
        Some(w) if w != derived => {
            return Err(Error::SegmentMismatch(format!(
                "segment.expected_wkc = {w}, but the mapping found gives {derived} \
                 ({n} subdevices, {} bytes of process data)",
                layout.pdi_bytes()
            )));
        }
        Some(w) => w,
        None => derived,
    };
    let expected_wkc = u16::try_from(expected)
        .map_err(|_| Error::Capacity(format!("expected WKC {expected} is above 65535")))?;
    Ok((expected_wkc, wkc_shares))
}

/// Scan, check against the configuration, read the mapping, let the application configure,
/// and walk the segment to OP (rtcat's own frames are not needed: ethercrab's group carries
/// all).
pub(crate) fn bring_up(
    md: &MainDevice<'static>,
    cfg: &Config,
    app: &mut dyn Application,
    generation: u32,
    topology: Option<crate::hotconnect::Expected<'_>>,
    sii: &crate::sii_cache::SiiCache,
    _own: crate::own_frames::OwnBus<'_>,
) -> Result<Up> {
    let t_scan = std::time::Instant::now();
    // Members of groups on a junction's port are kept out of ethercrab's group (`branch`).
    let (group, aside) = crate::branch::scan(md, &cfg.group)?;
    log::info!(
        "bring-up: scan to PRE-OP (ethercrab) {} ms",
        t_scan.elapsed().as_millis()
    );
    let n = group.len();
    let identities: Vec<(u32, u32, u32)> = group
        .iter(md)
        .map(|sd| {
            let id = sd.identity();
            (id.vendor_id, id.product_id, id.revision)
        })
        .collect();
    let aliases: Vec<u16> = group.iter(md).map(|sd| sd.alias_address()).collect();
    // A re-initialisation drives only the topology the run started with: never outputs
    // remapped onto a device inserted, removed or swapped in between.
    if let Some((t, hot)) = topology {
        crate::hotconnect::check_topology((&identities, &aliases), t, hot)?;
    }
    let hot = membership(md, &group, cfg, &identities)?;
    let scanned = crate::branch::scanned(md, &group, &aside);
    if cfg.dc.enabled {
        crate::branch::check_reference(&cfg.group, &scanned, &aside)?;
    }
    let order = crate::branch::order(md, &cfg.group, &scanned, &aside, n, &hot)?;
    // A member absent at the run's first bring-up keeps the layout entries it was given then,
    // present or not (the application and the shared image keep theirs).
    let first_absent = topology.map_or(&[][..], |(_, first)| first.absent.as_slice());
    let (layout, chosen, counters) = configure_pre_op(
        md,
        &group,
        cfg,
        generation,
        sii,
        (&hot.absent, first_absent),
    )?;
    // rtcat's own region: where the absent members' data will be exchanged.
    let members: Vec<(usize, usize)> = hot.absent.iter().map(|a| (a.group, a.member)).collect();
    let late = crate::region::plan(&layout, n, &chosen, &members)?;
    let configured = configured_by(cfg, &chosen);
    let mut counters = configure_app(md, app, &layout, counters)?;

    let pdi_too_long = |stage: &'static str| {
        move |e| match e {
            ethercrab::error::Error::PdiTooLong { desired_length, .. } => {
                image_too_long(desired_length)
            }
            e => Error::bus(stage, e),
        }
    };
    let group = if cfg.dc.enabled {
        let mut group = group;
        let dc_positions =
            configure_dc_pre_op(md, cfg, (&mut group, &scanned), &layout, &mut counters)?;
        hand_over_counters(md, cfg, &layout, &mut counters)?;
        let group = block_on(group.into_pre_op_pdi(md))
            .map_err(pdi_too_long("PRE-OP with process data"))?;
        let group =
            block_on(group.configure_dc_sync(md, cfg.dc.dc_configuration(cfg.cycle.period())))
                .map_err(|e| Error::bus("DC SYNC0 configuration (configure_dc_sync)", e))?;
        let group =
            block_on(group.into_safe_op(md)).map_err(|e| Error::bus("transition to SAFE-OP", e))?;
        write_startup_so(md, &group, &configured, &mut counters)?;
        let group = dc_into_op(md, cfg, group)?;
        check_image(md, &group, &layout, &configured)?;
        let snapshots = snapshots_for(md, cfg, &group, &layout, &chosen, true, (&hot, sii))?;
        // ethercrab's reference clock: the first DC subdevice (`configure_dc_pre_op`).
        let frames = frames_plan(md, &group, &layout, dc_positions.first().copied());
        // The reference (the first) is what the others are compared with.
        (
            AnyGroup::Dc(group),
            dc_positions[1..].to_vec(),
            snapshots,
            frames,
        )
    } else {
        // Timed apart for the bring-up's log: ethercrab sizes the process data (over CoE, one
        // subdevice after another) in `into_pre_op_pdi`, then the AL transitions.
        let t_pdi = std::time::Instant::now();
        hand_over_counters(md, cfg, &layout, &mut counters)?;
        let group = block_on(group.into_pre_op_pdi(md))
            .map_err(pdi_too_long("PRE-OP with process data"))?;
        let pdi_ms = t_pdi.elapsed().as_millis();
        let t_up = std::time::Instant::now();
        let group =
            block_on(group.into_safe_op(md)).map_err(pdi_too_long("transition to SAFE-OP"))?;
        write_startup_so(md, &group, &configured, &mut counters)?;
        let group = block_on(group.into_op(md)).map_err(|e| Error::bus("transition to OP", e))?;
        log::info!(
            "bring-up: process data sizing (ethercrab) {pdi_ms} ms, SAFE-OP and OP {} ms",
            t_up.elapsed().as_millis()
        );
        check_image(md, &group, &layout, &configured)?;
        let snapshots = snapshots_for(md, cfg, &group, &layout, &chosen, false, (&hot, sii))?;
        let frames = frames_plan(md, &group, &layout, None);
        (AnyGroup::Plain(group), Vec::new(), snapshots, frames)
    };
    let (group, dc_positions, snapshots, frames) = group;
    let (expected_wkc, wkc_shares) = expected_wkc(cfg, &layout, n)?;
    Ok(Up {
        group,
        layout,
        expected_wkc,
        wkc_shares,
        dc_positions,
        snapshots,
        identities,
        aliases,
        hot,
        late,
        order,
        frames,
    })
}

/// A process image of `len` bytes (inputs + outputs) beyond what the master runs.
pub(crate) fn image_too_long(len: usize) -> Error {
    Error::Capacity(format!(
        "the segment's process image is {len} bytes (inputs + outputs); rtcat runs at most \
         {MAX_PDI_BYTES}"
    ))
}

/// The application's `configure` on the segment in PRE-OP with `layout`: its register and SDO
/// access by the layout's station addresses, each subdevice's mailbox counter continuing after
/// `counters` (returned as the application left them).
pub(crate) fn configure_app(
    md: &MainDevice<'static>,
    app: &mut dyn Application,
    layout: &Layout,
    counters: Vec<u8>,
) -> Result<Vec<u8>> {
    let mut regs = Registers {
        md,
        addresses: layout.subdevices.iter().map(|s| s.address).collect(),
        counters,
    };
    app.configure(&mut Setup {
        layout,
        registers: &mut regs,
    })
    .map_err(|e| match e.downcast::<LayoutError>() {
        Ok(l) => Error::Entry(*l),
        Err(e) => Error::Application(e.to_string()),
    })?;
    Ok(regs.counters)
}

/// What the cycle's frames carry for `group` in OP ([`crate::own_cycle`]): its image from the
/// logical address ethercrab lays it out at (the layout's sizes, which [`check_image`] found
/// equal to ethercrab's), its station addresses, and the station address of the reference
/// clock at position `dc_reference`.
fn frames_plan<DC>(
    md: &MainDevice<'static>,
    group: &Group<DC>,
    layout: &Layout,
    dc_reference: Option<u16>,
) -> crate::own_cycle::Plan {
    let addresses: Vec<u16> = group.iter(md).map(|sd| sd.configured_address()).collect();
    let reference = dc_reference.and_then(|p| addresses.get(usize::from(p)).copied());
    let start = crate::subdevice_recovery::ETHERCRAB_PDI_START;
    crate::own_cycle::Plan::of(layout, (addresses, start), reference)
}

/// The registers each subdevice runs with, for `[health] recovery = "subdevice"`.
fn snapshots_for<DC>(
    md: &MainDevice<'static>,
    cfg: &Config,
    group: &Group<DC>,
    layout: &Layout,
    chosen: &[Option<usize>],
    dc: bool,
    optional: (&crate::hotconnect::Membership, &crate::sii_cache::SiiCache),
) -> Result<Vec<crate::subdevice_recovery::Snapshot>> {
    if cfg.health.recovery != crate::config::RecoveryPolicy::Subdevice {
        return Ok(Vec::new());
    }
    crate::subdevice_recovery::snapshot(md, group, layout, chosen, dc, optional)
}

/// Which `[[device]]` entry configures the subdevice at a position (and how it is named).
pub(crate) type Configured<'c> =
    dyn Fn(usize, &str) -> Option<(&'c devices::DeviceConfig, String)> + 'c;

/// [`Configured`] of `chosen`: the `[[device]]` entry (by index into `cfg.device`) each
/// position's subdevice was matched to.
pub(crate) fn configured_by<'c>(
    cfg: &'c Config,
    chosen: &'c [Option<usize>],
) -> impl Fn(usize, &str) -> Option<(&'c devices::DeviceConfig, String)> + 'c {
    move |pos: usize, name: &str| {
        chosen[pos].map(|i| {
            let d = &cfg.device[i];
            (d, devices::who(pos as u16, name, i, d))
        })
    }
}

/// `f` with rtcat's CoE client of the subdevice at `position` (station `address`): its mailbox
/// counter continues after `counters[position]` (0: none sent yet) and is stored back there
/// whatever `f` returns, so the next transport to it counts on.
pub(crate) fn with_counted_sdo<T>(
    md: &MainDevice<'static>,
    counters: &mut [u8],
    position: u16,
    address: u16,
    f: impl FnOnce(&mut crate::coe::OnDemand<'_>) -> T,
) -> T {
    let slot = usize::from(position);
    let mut sdo = crate::coe::OnDemand::new(md, position, address, crate::coe::Timeouts::default())
        .continue_after(counters.get(slot).copied().unwrap_or(0));
    let r = f(&mut sdo);
    if let Some(c) = counters.get_mut(slot) {
        *c = sdo.counter();
    }
    r
}

/// The SAFE-OP startup SDOs of the configured devices.
fn write_startup_so<S, DC>(
    md: &MainDevice<'static>,
    group: &ethercrab::SubDeviceGroup<MAX_SUBDEVICES, MAX_PDI_BYTES, ethercrab::DefaultLock, S, DC>,
    configured: &Configured<'_>,
    counters: &mut [u8],
) -> Result<()>
where
    S: ethercrab::subdevice_group::HasPdi,
{
    for (pos, sd) in group.iter(md).enumerate() {
        if let Some((d, who)) = configured(pos, sd.name()) {
            with_counted_sdo(md, counters, pos as u16, sd.configured_address(), |sdo| {
                devices::write_startup(sdo, &who, d, devices::Transition::SO)
            })?;
        }
    }
    Ok(())
}

/// The process image in OP against the layout read in PRE-OP.
fn check_image<DC>(
    md: &MainDevice<'static>,
    group: &Group<DC>,
    layout: &Layout,
    configured: &Configured<'_>,
) -> Result<()> {
    for (pos, (sd, s)) in group.iter(md).zip(&layout.subdevices).enumerate() {
        let io = sd.io_raw();
        let (i, o) = (io.inputs().len(), io.outputs().len());
        if let Some((d, who)) = configured(pos, sd.name()) {
            devices::check_sizes(&who, d, i, o)?;
        }
        if i != s.input_bytes as usize || o != s.output_bytes as usize {
            return Err(LayoutError::SizeMismatch {
                position: s.position,
                name: s.name.clone(),
                layout_in: s.input_bytes,
                layout_out: s.output_bytes,
                image_in: i,
                image_out: o,
            }
            .into());
        }
    }
    Ok(())
}

/// `[dc]` in PRE-OP with ethercrab's group: the delays rtcat measures, the checks of
/// [`dc_capable`], every DC subdevice's SYNC mode (`set_dc_sync`, applied by
/// `configure_dc_sync`) and the CoE sync modes ([`write_sync_modes`]). Returns the positions
/// of the DC subdevices.
fn configure_dc_pre_op(
    md: &MainDevice<'static>,
    cfg: &Config,
    (group, scanned): (&mut PreOpGroup, &crate::branch::Scanned),
    layout: &Layout,
    counters: &mut [u8],
) -> Result<Vec<u16>> {
    // Over every device of the scan: the members kept out of ethercrab's group are in the
    // tree the receive times are read along.
    crate::dc_delays::correct(md, scanned)?;
    let devices: Vec<(bool, String)> = group
        .iter(md)
        .map(|sd| (sd.dc_support().any(), sd.name().to_string()))
        .collect();
    let capable = dc_capable(cfg, &devices)?;
    for (pos, mut sd) in group.iter_mut(md).enumerate() {
        let position = pos as u16;
        if capable.contains(&position) {
            sd.set_dc_sync(cfg.dc.dc_sync(position));
        }
    }
    write_sync_modes(md, cfg, layout, &capable, counters)?;
    Ok(capable)
}

/// The positions of the subdevices with a distributed clock (`devices`: whether each has one,
/// its name; by position), checked against `[dc]`: a SYNC mode only for a device with a clock,
/// at least one clock, and the reference clock the first of them — ethercrab 0.7.1 takes the
/// first DC subdevice (`dc::configure_dc`) and offers no way to choose another; rtcat's own
/// bring-up takes the same, so that both run a segment alike.
pub(crate) fn dc_capable(cfg: &Config, devices: &[(bool, String)]) -> Result<Vec<u16>> {
    let dc = &cfg.dc;
    let mut capable = Vec::new();
    for (pos, (has, name)) in devices.iter().enumerate() {
        let position = pos as u16;
        if *has {
            capable.push(position);
        } else if let Some(i) = dc.device.iter().position(|d| d.position == position)
            && dc.device[i].assign_activate != 0
        {
            return Err(Error::SegmentMismatch(format!(
                "dc.device[{i}].assign_activate = {:#06x}: the subdevice at position {position} \
                 ({name}) has no distributed clock",
                dc.device[i].assign_activate,
            )));
        }
    }
    let Some(&first) = capable.first() else {
        return Err(Error::SegmentMismatch(
            "dc.enabled = true, but no subdevice of the segment has a distributed clock".into(),
        ));
    };
    if let Some(r) = dc.reference
        && r != first
    {
        return Err(Error::SegmentMismatch(format!(
            "dc.reference = {r}: the reference clock is the first subdevice with a distributed \
             clock, position {first}; another one is not supported"
        )));
    }
    Ok(capable)
}

/// `[dc] coe_sync_mode`, in PRE-OP: 0x1C32:01 / 0x1C33:01 of every CoE subdevice among
/// `capable` with a SYNC mode, for each direction it has process data in.
pub(crate) fn write_sync_modes(
    md: &MainDevice<'static>,
    cfg: &Config,
    layout: &Layout,
    capable: &[u16],
    counters: &mut [u8],
) -> Result<()> {
    let dc = &cfg.dc;
    if !dc.coe_sync_mode {
        return Ok(());
    }
    // "Synchronization type" (UINT16) = 2: DC SYNC0 (ETG.1020 §21.1.2; the drive then latches
    // its outputs and samples its inputs on SYNC0, not on the frame).
    for &p in capable.iter().filter(|&&p| dc.assign_activate(p) != 0) {
        let s = &layout.subdevices[usize::from(p)];
        if !s.coe {
            continue;
        }
        with_counted_sdo(md, counters, p, s.address, |sdo| {
            for (object, present) in [(0x1c32u16, s.output_bytes > 0), (0x1c33, s.input_bytes > 0)]
            {
                if present {
                    sdo.client()
                        .and_then(|c| c.download(object, 1, &2u16.to_le_bytes()))
                        .map_err(|e| sync_mode_error(p, &s.name, object, e))?;
                }
            }
            Ok::<_, Error>(())
        })?;
    }
    Ok(())
}

fn sync_mode_error(position: u16, name: &str, object: u16, e: crate::coe::Error) -> Error {
    Error::Device(Box::new(devices::DeviceError::Sdo {
        who: format!("subdevice at position {position} ({name}), dc.coe_sync_mode"),
        action: "write",
        object: format!("{object:#06x}:01"),
        value: " = 2 (u16, DC SYNC0)".into(),
        source: Box::new(devices::SdoFailure::Coe(e)),
    }))
}

/// SAFE-OP to OP with SYNC0 running: request OP and keep exchanging process data (paced on
/// the DC grid by `next_cycle_wait`) until every subdevice is in OP. A drive in DC mode checks
/// that frames arrive around SYNC0 before it accepts OP (ETG.1020 §21.1, AL status 0x002C/0x001A
/// otherwise); ethercrab's `tx_rx_dc` example does the same.
fn dc_into_op(
    md: &MainDevice<'static>,
    cfg: &Config,
    group: ethercrab::SubDeviceGroup<
        MAX_SUBDEVICES,
        MAX_PDI_BYTES,
        ethercrab::DefaultLock,
        ethercrab::subdevice_group::SafeOp,
        ethercrab::subdevice_group::HasDc,
    >,
) -> Result<DcGroup> {
    let group =
        block_on(group.request_into_op(md)).map_err(|e| Error::bus("transition to OP", e))?;
    let timeout = Duration::from_millis(cfg.bus.state_timeout_ms.into());
    let start = std::time::Instant::now();
    loop {
        let r = block_on(group.tx_rx_dc(md)).map_err(|e| Error::bus("transition to OP", e))?;
        if r.all_op() {
            return Ok(group);
        }
        if start.elapsed() > timeout {
            let not: Vec<String> = r
                .subdevice_states
                .iter()
                .enumerate()
                .filter(|(_, s)| **s != ethercrab::SubDeviceState::Op)
                .map(|(i, s)| format!("{i} ({s})"))
                .collect();
            return Err(Error::SegmentMismatch(format!(
                "transition to OP with distributed clocks: not in OP after {} ms \
                 (bus.state_timeout_ms): position {}",
                timeout.as_millis(),
                not.join(", ")
            )));
        }
        std::thread::sleep(r.extra.next_cycle_wait);
    }
}

/// The TX/RX thread of bring-ups, recoveries and the shutdown: on the frames' CPU (the cycle's
/// unless `[cycle] txrx_cpu` says otherwise), not real-time.
pub(crate) fn setup_txrx(cfg: &Config, no_rt: bool) -> ThreadRt {
    ThreadRt {
        cpu: if no_rt {
            None
        } else {
            cfg.cycle.txrx_cpu.or(cfg.cycle.cpu)
        },
        fifo_priority: None,
    }
}

/// What [`bring_up_retrying`] returns: the (possibly re-created) MainDevice, and the segment with
/// the number of attempts it took, or the last error.
pub(crate) type Retried = (MainDevice<'static>, Result<(Up, u32)>);

/// A bring-up: ethercrab's ([`bring_up`]) or rtcat's own (`own_bringup::bring_up`), as
/// `[bus] bring_up` says (the run chooses, `master`).
pub(crate) type BringUpFn = fn(
    &MainDevice<'static>,
    &Config,
    &mut dyn Application,
    u32,
    Option<crate::hotconnect::Expected<'_>>,
    &crate::sii_cache::SiiCache,
    crate::own_frames::OwnBus<'_>,
) -> Result<Up>;

/// Bring the segment up with `bring_up`, retrying after `[health] recovery_backoff_ms` until it
/// works, a stop is requested, `deadline_ns` passes, or `[health] max_failed_recoveries`
/// attempts failed in a row (0 = never give up). Each failure goes to `on_failure(attempt,
/// error)`.
pub(crate) fn bring_up_retrying(
    (mut md, bring_up, own): (
        MainDevice<'static>,
        BringUpFn,
        crate::own_frames::OwnBus<'_>,
    ),
    cfg: &Config,
    app: &mut dyn Application,
    stop: &Stop,
    deadline_ns: Option<u64>,
    tries: &mut Attempts,
    mut on_failure: impl FnMut(u32, &Error),
) -> Retried {
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        tries.generation = tries.generation.wrapping_add(1);
        tries.load_sii(cfg);
        let e = match bring_up(
            &md,
            cfg,
            app,
            tries.generation,
            tries
                .topology
                .as_ref()
                .map(|(ids, aliases)| ((&ids[..], &aliases[..]), &tries.hot)),
            &tries.sii,
            own,
        ) {
            Ok(up) => {
                tries.failed_in_a_row = 0;
                tries.save_sii(cfg);
                return (md, Ok((up, attempts)));
            }
            Err(e) => e,
        };
        tries.failed_in_a_row += 1;
        on_failure(attempts, &e);
        let max = cfg.health.max_failed_recoveries;
        if max > 0 && tries.failed_in_a_row >= max {
            return (
                md,
                Err(Error::GaveUp {
                    attempts: max,
                    last: Box::new(e),
                }),
            );
        }
        if stop.is_requested() || deadline_ns.is_some_and(|d| crate::clock::now_ns() >= d) {
            return (md, Err(Error::Stopped(Box::new(e))));
        }
        std::thread::sleep(Duration::from_millis(cfg.health.recovery_backoff_ms.into()));
        // Start over from a clean PDU loop for the next attempt.
        // SAFETY: bring_up failed, so no group of this MainDevice exists.
        let pl = unsafe { md.release() };
        md = MainDevice::new(pl, init_timeouts(cfg), cfg.maindevice_config());
    }
}

/// Outputs to zero, then SAFE-OP, then INIT. Errors are reported, not fatal: results still get
/// written.
fn shut_down<DC>(md: &MainDevice<'static>, group: Group<DC>) -> Result<()> {
    for sd in group.iter(md) {
        sd.outputs_raw_mut().fill(0);
    }
    block_on(group.tx_rx(md)).map_err(|e| Error::bus("last cycle with zero outputs", e))?;
    let g = block_on(group.into_safe_op(md)).map_err(|e| Error::bus("OP -> SAFE-OP", e))?;
    let g = block_on(g.into_pre_op(md)).map_err(|e| Error::bus("SAFE-OP -> PRE-OP", e))?;
    block_on(g.into_init(md)).map_err(|e| Error::bus("PRE-OP -> INIT", e))?;
    Ok(())
}

/// The run's first bring-up: identities (vendor, product, revision) and station aliases by
/// position.
pub(crate) type FirstTopology = (Vec<(u32, u32, u32)>, Vec<u16>);

/// The bring-ups of a run: the layout generation of the last one, and the failures in a row
/// (`[health] max_failed_recoveries`).
#[derive(Debug, Default)]
pub(crate) struct Attempts {
    pub(crate) generation: u32,
    pub(crate) failed_in_a_row: u32,
    /// The topology of the run's first bring-up (identities and station aliases by position),
    /// which every re-initialisation must find again.
    pub(crate) topology: Option<FirstTopology>,
    /// The `[[group]]` membership of that first bring-up (an optional group away is not a
    /// changed topology).
    pub(crate) hot: crate::hotconnect::Membership,
    /// The SII images read so far (and loaded from `[bus] sii_cache`), checked against each
    /// device before use.
    pub(crate) sii: crate::sii_cache::SiiCache,
    sii_loaded: bool,
}

impl Attempts {
    /// Load `[bus] sii_cache` once per run (a file that cannot be used is logged and ignored).
    pub(crate) fn load_sii(&mut self, cfg: &Config) {
        if self.sii_loaded {
            return;
        }
        self.sii_loaded = true;
        if let Some(p) = &cfg.bus.sii_cache {
            self.sii = crate::sii_cache::SiiCache::load(p);
        }
    }

    /// After a bring-up that read something new: write `[bus] sii_cache` (a failure is logged;
    /// the next start then reads the SII from the devices again).
    pub(crate) fn save_sii(&self, cfg: &Config) {
        if let Some(p) = &cfg.bus.sii_cache
            && self.sii.is_dirty()
            && let Err(e) = self.sii.save(p)
        {
            log::warn!("SII cache {}: not written ({e})", p.display());
        }
    }
}

impl Up {
    /// Say what the segment is to the status thread: its size, image, expected working counter
    /// and which subdevices the DC lock compares (the lock starts over at every bring-up).
    pub(crate) fn publish(&self, live: &crate::stats::Live) {
        live.set_layout(
            self.layout.subdevices.len(),
            self.layout.pdi_bytes(),
            self.expected_wkc,
        );
        live.dc.set_segment(self.has_dc(), &self.dc_positions);
    }

    /// SYNC0 configured: the cycle's frames read the reference's system time, and the
    /// cycle's deadlines are locked to it.
    pub(crate) fn has_dc(&self) -> bool {
        self.frames.dc_reference.is_some()
    }
}

impl AnyGroup {
    /// Shut this group down (outputs to zero, SAFE-OP, INIT); `state_timeout` bounds each
    /// state change of rtcat's own.
    pub(crate) fn shut_down(self, md: &MainDevice<'static>, state_timeout: Duration) -> Result<()> {
        match self {
            AnyGroup::Plain(g) => shut_down(md, g),
            AnyGroup::Dc(g) => shut_down(md, g),
            AnyGroup::Own(g) => g.shut_down(md, state_timeout),
        }
    }
}
