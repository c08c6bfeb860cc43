//! The chain of ESCs: passes each frame through every device in wiring order and applies the
//! addressing and working-counter rules of ETG1000.4 §5.4.
//!
//! The chain is wired port 1 to port 0: a frame enters device 0 at port 0, passes its processing
//! unit, leaves at port 1 for the next device, turns back at the last device (its port 1 is open)
//! and returns through port 1 → port 0 of every device before it, without processing.
//!
//! Error counters (`crc-errors POS PORT N`, ET1100 register description 0x0300..0x0313 and
//! "Error counters" in the EtherCAT slave controller technology section): the device that receives
//! a frame with a bad checksum counts it in the invalid frame counter of that port, marks it and
//! forwards it; every device the marked frame reaches afterwards counts it in the forwarded RX
//! error counter of the port it arrives at; a bad frame arriving at port 0 also counts in the
//! processing unit error counter of every device whose processing unit it passes. So for
//! `crc-errors P 0 N`: device P counts N invalid frames at port 0 and N in its processing unit;
//! devices after P count N forwarded at port 0 and N in their processing unit; every device with a
//! following device counts N forwarded at port 1 (the way back). For `crc-errors P 1 N` (the way
//! back, from device P+1): device P counts N invalid frames at port 1 and devices before P count N
//! forwarded at port 1. The device with invalid frames and no forwarded errors at that port is
//! the one behind the bad link. A `link down` counts one lost link at port 0 of device 0.

use crate::esc::{AlState, Esc};
use crate::faults::{DeviceFault, Faults};
use crate::frame::{self, Cmd, Datagrams, FrameError, get_u16, put_u16};
use crate::spec::SegmentSpec;
use crate::station::StationIndex;

/// End (exclusive) of the station address register.
const STATION_ADDR_END: usize = crate::esc::reg::STATION_ADDR + 2;

/// What happened to one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Processed; send the (modified in place) frame back after `delay_ns`.
    Reply { delay_ns: u64 },
    /// Processed, but the response is lost (fault injection).
    Lost,
    /// Link down: nothing was processed.
    LinkDown,
    /// Not an EtherCAT frame, or a frame coming back from a subdevice: ignored.
    Ignored,
    /// Malformed: dropped and counted.
    Malformed(FrameError),
}

/// Counters of the segment, owned by the processing thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentStats {
    pub frames: u64,
    pub replied: u64,
    pub lost: u64,
    pub link_down_drops: u64,
    pub ignored: u64,
    pub malformed: u64,
    pub datagrams: u64,
    pub wkc_corrupted: u64,
    pub power_cycles: u64,
    pub injected_errors: u64,
}

pub struct Segment {
    spec: SegmentSpec,
    devices: Vec<Esc>,
    faults: Faults,
    stats: SegmentStats,
    datagrams: Datagrams,
    pending: Vec<DeviceFault>,
    rng: u64,
    last_error: Option<FrameError>,
    stations: StationIndex,
    /// Link losses of the fault state already counted at device 0, and the link state last seen.
    link_losses_seen: u32,
    link_was_down: bool,
    /// Per device: without power (`power-off POS`).
    off: Vec<bool>,
    /// Per device: the cable into its port 0 pulled (`unplug POS`; never set for device 0,
    /// whose cable is the master's `link down`).
    cut: Vec<bool>,
    /// Per device: a frame reaches it (every device on its way from the master has power
    /// and cable), and how many do.
    reachable: Vec<bool>,
    reach: usize,
    /// Each device's hop delay to the devices behind it (the loop times of the wiring).
    hops: Vec<u64>,
    /// Where each device is plugged in (position, port; `None`: the master) and, per device
    /// and port, the device behind it ([`crate::spec::wiring`]).
    upstream: Vec<crate::spec::Upstream>,
    children: Vec<[Option<usize>; 4]>,
}

impl Segment {
    /// The chain of `spec`'s devices, powered on (INIT), without faults.
    ///
    /// # Panics
    /// When a device's names do not fit its SII ([`SegmentSpec::check`] refuses such a spec;
    /// one loaded from TOML never has them).
    pub fn new(spec: SegmentSpec) -> Self {
        Self::with_faults(spec, Faults::new())
    }

    /// As [`Segment::new`], with faults injected through `faults`.
    ///
    /// # Panics
    /// As [`Segment::new`].
    pub fn with_faults(spec: SegmentSpec, faults: Faults) -> Self {
        let n = spec.devices.len();
        let devices: Vec<Esc> = spec
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| Esc::new(d.clone(), i, n))
            .collect();
        // Each device's hop delay (to the devices behind it) places the later devices' receive
        // times. A segment built in code whose `upstream` does not hold is run as a line.
        let hops: Vec<u64> = spec.devices.iter().map(|d| u64::from(d.hop_ns)).collect();
        let upstream = crate::spec::wiring(&spec.devices)
            .unwrap_or_else(|_| (0..n).map(|i| i.checked_sub(1).map(|p| (p, 1))).collect());
        let mut children = vec![[None; 4]; n];
        for (i, up) in upstream.iter().enumerate() {
            if let Some((p, port)) = *up {
                children[p][usize::from(port)] = Some(i);
            }
        }
        let mut seg = Segment {
            spec,
            devices,
            faults,
            stats: SegmentStats::default(),
            datagrams: Datagrams::default(),
            pending: Vec::with_capacity(8),
            rng: 0x9e37_79b9_7f4a_7c15,
            last_error: None,
            stations: StationIndex::default(),
            link_losses_seen: 0,
            link_was_down: false,
            off: vec![false; n],
            cut: vec![false; n],
            reachable: vec![true; n],
            reach: n,
            hops,
            upstream,
            children,
        };
        let wiring = seg.wiring();
        for (dev, arrival) in seg.devices.iter_mut().zip(&wiring.arrival) {
            dev.set_timing(*arrival);
        }
        seg.rewire();
        seg
    }

    pub fn spec(&self) -> &SegmentSpec {
        &self.spec
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    pub fn stats(&self) -> SegmentStats {
        self.stats
    }

    pub fn last_error(&self) -> Option<FrameError> {
        self.last_error
    }

    pub fn devices(&self) -> &[Esc] {
        &self.devices
    }

    pub fn device_mut(&mut self, position: usize) -> Option<&mut Esc> {
        self.devices.get_mut(position)
    }

    /// How many devices a frame reaches now (all of them unless one is without power or
    /// unplugged: then those before it).
    pub fn reachable(&self) -> usize {
        self.reach
    }

    /// Every device as `STATION:STATE`, `!CODE` after it with the AL error flag, `/off`
    /// without power, `/unreachable` when no frame reaches it (the simulator's status line).
    pub fn device_states(&self) -> String {
        let mut out = String::new();
        for (i, d) in self.devices.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&format!("{:#06x}:{}", d.station_address(), d.al_state()));
            if d.al_error() {
                out.push_str(&format!("!{:#06x}", d.al_status_code()));
            }
            if !self.powered(i) {
                out.push_str("/off");
            } else if !self.reaches(i) {
                out.push_str("/unreachable");
            }
        }
        out
    }

    /// Whether frames reach the device at `position` (it and every device on its way from the
    /// master have power and cable).
    pub fn reaches(&self, position: usize) -> bool {
        self.reachable.get(position).copied().unwrap_or(false)
    }

    /// Whether the device at `position` has power (`power-off`/`power-on`).
    pub fn powered(&self, position: usize) -> bool {
        !self.off.get(position).copied().unwrap_or(true)
    }

    /// What the frames reach with the power and cables as they are now, and when.
    fn wiring(&self) -> Wiring {
        let n = self.devices.len();
        let mut w = Wiring {
            reachable: vec![false; n],
            links: vec![[false; 4]; n],
            port_ns: vec![[0; 4]; n],
            arrival: vec![0; n],
        };
        // A device's cable to the one before it carries a link when it is plugged in and both
        // ends have power. (A parent's index is below its children's.)
        let cable = |i: usize| match self.upstream[i] {
            None => true,
            Some((p, _)) => !self.cut[i] && !self.off[p] && !self.off[i],
        };
        for i in 0..n {
            w.reachable[i] = !self.off[i]
                && match self.upstream[i] {
                    None => true,
                    Some((p, _)) => w.reachable[p] && cable(i),
                };
            if i > 0 {
                w.links[i][0] = cable(i);
            }
            for &q in self.devices[i].spec().downstream_ports() {
                let q = usize::from(q);
                w.links[i][q] = self.children[i][q].is_some_and(cable);
            }
        }
        // Loop times, the devices behind first; then each port's return time and the arrival
        // of the device behind it, in the order the frame leaves through the ports.
        let mut loop_ns = vec![0u64; n];
        for d in (0..n).rev() {
            let mut acc = 0;
            for &q in self.devices[d].spec().downstream_ports() {
                let q = usize::from(q);
                if let (true, Some(c)) = (w.links[d][q], self.children[d][q]) {
                    acc += 2 * self.hops[d] + loop_ns[c];
                    w.port_ns[d][q] = acc;
                }
            }
            loop_ns[d] = acc;
        }
        for d in 0..n {
            let mut acc = 0;
            for &q in self.devices[d].spec().downstream_ports() {
                let q = usize::from(q);
                if let (true, Some(c)) = (w.links[d][q], self.children[d][q]) {
                    w.arrival[c] = w.arrival[d] + acc + self.hops[d];
                    acc = w.port_ns[d][q];
                }
            }
        }
        w
    }

    /// Recompute what the frames reach after a device lost or got back its power or cable:
    /// each device's port links (a link that goes down counts in its lost link counter, 0x0310
    /// + port, as an ESC counts it), its ports' return times, its arrival, and `reachable`.
    fn rewire(&mut self) {
        use crate::esc::reg::LOST_LINK;
        let w = self.wiring();
        for (i, dev) in self.devices.iter_mut().enumerate() {
            let mut links = w.links[i];
            if i == 0 {
                // Port 0 of the first device is the master's cable (`track_link`).
                links[0] = dev.port_linked(0);
            }
            if !self.off[i] {
                for (p, &l) in links.iter().enumerate() {
                    if dev.port_linked(p) && !l {
                        dev.count(LOST_LINK + p, 1);
                    }
                }
            }
            dev.set_ports(links, w.port_ns[i]);
            dev.set_arrival(w.arrival[i]);
        }
        self.reach = w.reachable.iter().filter(|r| **r).count();
        self.reachable = w.reachable;
    }

    fn next_random_ppm(&mut self) -> u32 {
        // xorshift64*: reproducible "random" drops.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 % 1_000_000
    }

    fn apply_device_faults(&mut self) {
        self.faults.take_device_faults(&mut self.pending);
        let mut pending = std::mem::take(&mut self.pending);
        for f in pending.drain(..) {
            match f {
                DeviceFault::Error { position, code } => {
                    if let Some(d) = self.devices.get_mut(position) {
                        d.raise_error(AlState::SafeOp, code);
                        self.stats.injected_errors += 1;
                    }
                }
                DeviceFault::PowerCycle => {
                    for d in &mut self.devices {
                        d.power_on();
                    }
                    self.stats.power_cycles += 1;
                    self.rewire();
                }
                DeviceFault::PowerCycleOne { position } => {
                    if let Some(d) = self.devices.get_mut(position) {
                        d.power_on();
                        self.off[position] = false;
                        self.stats.power_cycles += 1;
                        self.rewire();
                    }
                }
                DeviceFault::Power { position, on } => {
                    if position < self.devices.len() && self.off[position] == on {
                        self.off[position] = !on;
                        if on {
                            // Back from no power: reset, INIT, no station address.
                            self.devices[position].power_on();
                            self.stats.power_cycles += 1;
                        }
                        self.rewire();
                    }
                }
                DeviceFault::Replace { position, like } => self.replace(position, like),
                DeviceFault::Cable { position, plugged } => {
                    if position > 0 && position < self.devices.len() {
                        self.cut[position] = !plugged;
                        self.rewire();
                    }
                }
                DeviceFault::CrcErrors {
                    position,
                    port,
                    count,
                } => self.crc_errors(position, usize::from(port), count),
                DeviceFault::Emergency {
                    position,
                    code,
                    register,
                } => {
                    if let Some(d) = self.devices.get_mut(position) {
                        d.queue_emergency(code, register, [0; 5]);
                    }
                }
                DeviceFault::Drive { position, code } => {
                    if let Some(d) = self.devices.get_mut(position) {
                        d.inject_drive_fault(code);
                    }
                }
            }
        }
        self.pending = pending;
    }

    /// The device at `position` swapped for a new one described like the device at `like`: its
    /// identity, SII, dictionary and process data; powered on (INIT). The place keeps its
    /// cable (hop delay), power and DC arrival time; the segment description says what is there
    /// now (`spec()`).
    fn replace(&mut self, position: usize, like: usize) {
        let n = self.devices.len();
        if position >= n || like >= n {
            return;
        }
        let mut spec = self.spec.devices[like].clone();
        spec.hop_ns = self.spec.devices[position].hop_ns;
        spec.upstream = self.spec.devices[position].upstream;
        let arrival = self.wiring().arrival[position];
        let mut dev = Esc::new(spec.clone(), position, n);
        dev.set_timing(arrival);
        // The network behind the place (a TAP) stays with it when the new device tunnels
        // Ethernet too; its IP settings do not.
        let mut eoe = self.devices[position].take_eoe();
        if let Some(e) = &mut eoe {
            e.power_on();
        }
        dev.set_eoe(eoe);
        self.devices[position] = dev;
        self.spec.devices[position] = spec;
        self.stats.power_cycles += 1;
        // Its ports' links and loop time, as for the device it replaced.
        self.rewire();
    }

    /// Create the networks of the devices with `[device.eoe] tap` (TAP interfaces in this
    /// process's network namespace; needs CAP_NET_ADMIN). Their names, or the first failure
    /// naming the device.
    pub fn attach_eoe(&mut self) -> std::io::Result<Vec<String>> {
        let mut names = Vec::new();
        for (i, d) in self.devices.iter_mut().enumerate() {
            d.attach_eoe().map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("device {i} ({}): EoE network: {e}", d.spec().name),
                )
            })?;
            if let Some(t) = d.spec().eoe.as_ref().and_then(|e| e.tap.clone()) {
                names.push(t);
            }
        }
        Ok(names)
    }

    /// `count` frames with a bad checksum arrive at `port` of the device at `position`: the
    /// counters of the whole chain as the module documentation describes.
    fn crc_errors(&mut self, position: usize, port: usize, count: u8) {
        use crate::esc::reg::{EPU_ERROR, FWD_RX_ERROR, RX_ERROR};
        // The counters of a line (ports 0 and 1), over the devices a frame reaches.
        let last = self.reachable.iter().rposition(|r| *r).unwrap_or(0);
        if !self.reachable.get(position).copied().unwrap_or(false) {
            return;
        }
        let Some(dev) = self.devices.get_mut(position) else {
            return;
        };
        if !dev.port_linked(port) {
            return;
        }
        self.stats.injected_errors += 1;
        dev.count(RX_ERROR + 2 * port, count);
        if port == 0 {
            dev.count(EPU_ERROR, count);
            for d in &mut self.devices[position + 1..=last] {
                d.count(FWD_RX_ERROR, count);
                d.count(EPU_ERROR, count);
            }
            // The way back: received at port 1 by every device that has a following one.
            for d in &mut self.devices[..last] {
                d.count(FWD_RX_ERROR + 1, count);
            }
        } else {
            for d in &mut self.devices[..position] {
                d.count(FWD_RX_ERROR + 1, count);
            }
        }
    }

    /// Reflect the `link down` fault in device 0's port 0: its DL status, and one lost link per
    /// loss (also for a loss that ended before this frame).
    fn track_link(&mut self, down: bool) {
        let losses = self.faults.link_losses();
        if losses == self.link_losses_seen && down == self.link_was_down {
            return;
        }
        if let Some(dev) = self.devices.first_mut() {
            let new = losses.wrapping_sub(self.link_losses_seen);
            dev.count(
                crate::esc::reg::LOST_LINK,
                new.min(u32::from(u8::MAX)) as u8,
            );
            dev.set_upstream_link(!down);
        }
        self.link_losses_seen = losses;
        self.link_was_down = down;
    }

    /// Pass one Ethernet frame through the chain, modifying it in place into the response.
    /// `now_ns` is a monotonic time used by the DC model.
    pub fn process(&mut self, frame: &mut [u8], now_ns: u64) -> Disposition {
        self.stats.frames += 1;
        self.apply_device_faults();
        let link_down = self.faults.link_down();
        self.track_link(link_down);
        if frame.len() >= 14
            && u16::from_be_bytes([frame[12], frame[13]]) == frame::ETHERCAT_ETHERTYPE
            && frame[6] & 0x02 != 0
        {
            // Source MAC already has the U/L bit: a response, not a request.
            self.stats.ignored += 1;
            return Disposition::Ignored;
        }
        let mut dgs = std::mem::take(&mut self.datagrams);
        let disposition = match frame::validate(frame, &mut dgs) {
            Err(FrameError::NotEthercat(_)) => {
                self.stats.ignored += 1;
                Disposition::Ignored
            }
            Err(e) => {
                self.stats.malformed += 1;
                self.last_error = Some(e);
                Disposition::Malformed(e)
            }
            // The master's cable is down, or the first device has no power: no link at all.
            Ok(()) if link_down || !self.reachable.first().copied().unwrap_or(false) => {
                self.stats.link_down_drops += 1;
                Disposition::LinkDown
            }
            Ok(()) => {
                self.run_chain(frame, &dgs, now_ns);
                if self.faults.take_corrupt_wkc() {
                    self.stats.wkc_corrupted += 1;
                    for d in dgs.as_slice() {
                        if matches!(d.cmd, Cmd::Lrd | Cmd::Lwr | Cmd::Lrw) {
                            let at = d.wkc_offset();
                            let w = get_u16(frame, at);
                            put_u16(frame, at, w.wrapping_sub(1));
                        }
                    }
                }
                // Like a real ESC: the first device sets the U/L bit of the source MAC.
                frame[6] |= 0x02;
                let ppm = self.faults.drop_ppm();
                let lost = self.faults.take_drop() || (ppm > 0 && self.next_random_ppm() < ppm);
                if lost {
                    self.stats.lost += 1;
                    Disposition::Lost
                } else {
                    self.stats.replied += 1;
                    Disposition::Reply {
                        delay_ns: self.faults.delay_ns(),
                    }
                }
            }
        };
        self.datagrams = dgs;
        disposition
    }

    /// Every datagram of the frame through the chain, in order. Datagram by datagram, not device
    /// by device: each datagram's data is touched by its own processing only, and each device still
    /// sees the datagrams in frame order, so the result is the same; but a configured-address
    /// datagram goes straight to its device instead of being offered to all of them.
    fn run_chain(&mut self, frame: &mut [u8], dgs: &Datagrams, now_ns: u64) {
        self.stats.datagrams += dgs.as_slice().len() as u64;
        // Only the devices the frame reaches take part, in processing order (their positions).
        let Segment {
            devices,
            reachable,
            stations,
            ..
        } = self;
        let reached = |i: &usize| reachable[*i];
        for dev in reached_mut(devices, reachable) {
            dev.tick(now_ns);
        }
        stations.refresh(devices);
        for d in dgs.as_slice() {
            let adp_at = d.header + 2;
            let ado = usize::from(get_u16(frame, d.header + 4));
            let wkc_at = d.wkc_offset();
            let (head, rest) = frame.split_at_mut(d.data);
            let data = &mut rest[..d.len];
            let mut add: u16 = 0;
            match d.cmd {
                Cmd::Nop => {}
                Cmd::Aprd | Cmd::Apwr | Cmd::Aprw | Cmd::Armw => {
                    for dev in reached_mut(devices, reachable) {
                        let adp = get_u16(head, adp_at);
                        put_u16(head, adp_at, adp.wrapping_add(1));
                        add = add.wrapping_add(physical(dev, d.cmd, adp == 0, ado, data, now_ns));
                    }
                }
                Cmd::Fprd | Cmd::Fpwr | Cmd::Fprw => {
                    // only the addressed devices do anything with these
                    let adr = get_u16(head, adp_at);
                    for i in stations.positions(adr).filter(reached) {
                        add = add.wrapping_add(physical(
                            &mut devices[i],
                            d.cmd,
                            true,
                            ado,
                            data,
                            now_ns,
                        ));
                    }
                }
                Cmd::Frmw => {
                    // the addressed device reads, every other one writes
                    let adr = get_u16(head, adp_at);
                    for dev in reached_mut(devices, reachable) {
                        let hit = dev.station_address() == adr;
                        add = add.wrapping_add(physical(dev, d.cmd, hit, ado, data, now_ns));
                    }
                }
                Cmd::Brd | Cmd::Bwr | Cmd::Brw => {
                    for dev in reached_mut(devices, reachable) {
                        let adp = get_u16(head, adp_at);
                        put_u16(head, adp_at, adp.wrapping_add(1));
                        add = add.wrapping_add(physical(dev, d.cmd, true, ado, data, now_ns));
                    }
                }
                Cmd::Lrd | Cmd::Lwr | Cmd::Lrw => {
                    let addr = frame::get_u32(head, d.header + 2);
                    for dev in reached_mut(devices, reachable) {
                        let hit = dev.logical(d.cmd, addr, data);
                        add = add.wrapping_add(match d.cmd {
                            Cmd::Lrw => u16::from(hit.read) + 2 * u16::from(hit.write),
                            _ => u16::from(hit.read || hit.write),
                        });
                    }
                }
            }
            if add > 0 {
                let w = get_u16(frame, wkc_at);
                put_u16(frame, wkc_at, w.wrapping_add(add));
            }
            if writes_station_address(d.cmd, ado, d.len) {
                // a later datagram of this frame may already use the new address
                stations.refresh(devices);
            }
        }
        for dev in reached_mut(devices, reachable) {
            dev.dc_process_data(now_ns);
            dev.end_of_frame(now_ns);
        }
    }

    /// The distributed clock of the device at `position` at simulation time `now_ns` (`None`
    /// for a device without DC or a position beyond the chain).
    pub fn dc_status(&mut self, position: usize, now_ns: u64) -> Option<crate::dc::DcStatus> {
        self.devices.get_mut(position)?.dc_status(now_ns)
    }

    /// Every DC device's clock at `now_ns`.
    pub fn dc_statuses(&mut self, now_ns: u64) -> Vec<crate::dc::DcStatus> {
        self.devices
            .iter_mut()
            .filter_map(|d| d.dc_status(now_ns))
            .collect()
    }

    /// Late process data frames, summed over the DC devices with SYNC0 running.
    pub fn dc_late_frames(&self) -> u64 {
        self.devices
            .iter()
            .filter_map(|d| d.dc_clock())
            .map(|c| c.late())
            .sum()
    }

    /// Configure every device as a master would for cyclic exchange, without a master: station
    /// addresses 0x1000+i, SMs and FMMUs mapping each device's outputs then inputs into one
    /// logical image starting at 0, state OP. Returns the logical ranges (for benchmarks).
    pub fn preconfigure(&mut self) -> Preconfigured {
        let mut logical: u32 = 0;
        let now = 0;
        let mut ranges = Vec::with_capacity(self.devices.len());
        for (i, dev) in self.devices.iter_mut().enumerate() {
            let _ = dev.phys_write(0x0010, &(0x1000u16 + i as u16).to_le_bytes(), now);
            let mut out = 0..0;
            let mut inp = 0..0;
            if dev.spec().coe.is_some() {
                // The mailboxes, as the SII declares them (checked at INIT -> PRE-OP).
                let mut reg = [0u8; 16];
                for (k, (start, control)) in [
                    (crate::sii::MBX_OUT_ADDR, 0x26u8),
                    (crate::sii::MBX_IN_ADDR, 0x22),
                ]
                .into_iter()
                .enumerate()
                {
                    reg[8 * k..8 * k + 2].copy_from_slice(&start.to_le_bytes());
                    reg[8 * k + 2..8 * k + 4].copy_from_slice(&crate::sii::MBX_SIZE.to_le_bytes());
                    reg[8 * k + 4] = control;
                    reg[8 * k + 6] = 1;
                }
                let _ = dev.phys_write(0x0800, &reg, now);
            }
            // Outputs first, then inputs, as one range each (a direction's SMs lie back to back).
            let mut sms = crate::sii::process_data_sms(dev.spec());
            sms.sort_by_key(|sm| sm.usage);
            for sm in sms.iter().filter(|sm| sm.len > 0) {
                let mut reg = [0u8; 8];
                reg[0..2].copy_from_slice(&sm.start.to_le_bytes());
                reg[2..4].copy_from_slice(&sm.len.to_le_bytes());
                reg[4] = sm.control;
                reg[6] = 1;
                let _ = dev.phys_write(0x0800 + 8 * usize::from(sm.index), &reg, now);
                let mut f = [0u8; 16];
                f[0..4].copy_from_slice(&logical.to_le_bytes());
                f[4..6].copy_from_slice(&sm.len.to_le_bytes());
                f[7] = 7;
                f[8..10].copy_from_slice(&sm.start.to_le_bytes());
                f[11] = if sm.usage == 3 { 2 } else { 1 };
                f[12] = 1;
                let _ = dev.phys_write(0x0600 + 16 * usize::from(sm.index), &f, now);
                let r = logical as usize..(logical + u32::from(sm.len)) as usize;
                let range = if sm.usage == 3 { &mut out } else { &mut inp };
                *range = if range.start == range.end {
                    r
                } else {
                    range.start..r.end
                };
                logical += u32::from(sm.len);
            }
            ranges.push((out, inp));
            for st in [2u8, 4, 8] {
                let _ = dev.phys_write(0x0120, &[st, 0], now);
                dev.settle();
            }
        }
        Preconfigured {
            image_len: logical as usize,
            ranges,
        }
    }
}

/// The wiring as the power and cables leave it ([`Segment::wiring`]).
struct Wiring {
    reachable: Vec<bool>,
    /// Per device and port: a link.
    links: Vec<[bool; 4]>,
    /// Per device and port: from the frame's arrival at port 0 to its return at that port.
    port_ns: Vec<[u64; 4]>,
    /// Per device: from the first device's port 0 to this device's.
    arrival: Vec<u64>,
}

/// Logical layout made by [`Segment::preconfigure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preconfigured {
    pub image_len: usize,
    /// Per device: (outputs, inputs) logical byte ranges (empty when absent).
    pub ranges: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
}

impl Preconfigured {
    /// WKC of one LRW covering logical bytes `chunk`: +2 per device whose outputs it touches,
    /// +1 per device whose inputs it touches (a device spanning two frames counts in both).
    pub fn lrw_wkc(&self, chunk: std::ops::Range<usize>) -> u32 {
        let touches = |r: &std::ops::Range<usize>| r.start < chunk.end && chunk.start < r.end;
        self.ranges
            .iter()
            .map(|(o, i)| 2 * u32::from(touches(o)) + u32::from(touches(i)))
            .sum()
    }
}

/// The devices a frame reaches, in processing order.
fn reached_mut<'a>(
    devices: &'a mut [Esc],
    reachable: &'a [bool],
) -> impl Iterator<Item = &'a mut Esc> {
    devices
        .iter_mut()
        .zip(reachable)
        .filter_map(|(d, r)| r.then_some(d))
}

/// Whether a physical write datagram can change a station address register (0x0010).
fn writes_station_address(cmd: Cmd, ado: usize, len: usize) -> bool {
    let writes = matches!(
        cmd,
        Cmd::Apwr | Cmd::Aprw | Cmd::Armw | Cmd::Fpwr | Cmd::Fprw | Cmd::Frmw | Cmd::Bwr | Cmd::Brw
    );
    writes && ado < STATION_ADDR_END && ado + len > crate::esc::reg::STATION_ADDR
}

/// Apply one physical-addressed command at one device. Returns the WKC increment.
fn physical(
    dev: &mut Esc,
    cmd: Cmd,
    addressed: bool,
    ado: usize,
    data: &mut [u8],
    now: u64,
) -> u16 {
    // The BWR that latches DC receive times only counts at devices that have DC.
    match cmd {
        Cmd::Aprd | Cmd::Fprd => u16::from(addressed && dev.phys_read(ado, data, false, now)),
        Cmd::Brd => u16::from(dev.phys_read(ado, data, true, now)),
        Cmd::Apwr | Cmd::Fpwr | Cmd::Bwr => u16::from(addressed && dev.phys_write(ado, data, now)),
        // Read-write counts 1 for the read and 2 for the write.
        Cmd::Aprw | Cmd::Fprw => 3 * u16::from(addressed && dev.phys_read_write(ado, data, now)),
        Cmd::Brw => 3 * u16::from(dev.phys_read_write(ado, data, now)),
        // Read-multiple-write: the addressed device reads, every other device writes.
        Cmd::Armw | Cmd::Frmw => {
            if addressed {
                u16::from(dev.phys_read(ado, data, false, now))
            } else {
                u16::from(dev.phys_write(ado, data, now))
            }
        }
        _ => 0,
    }
}

#[cfg(test)]
mod chain_order_tests {
    //! The datagram-by-datagram chain (with the station index) against the plain model it
    //! replaces: every device offered every datagram, device by device.
    use super::*;
    use crate::frame::{FrameBuilder, phys};
    use proptest::prelude::*;

    fn reference_chain(devices: &mut [Esc], frame: &mut [u8], dgs: &Datagrams, now_ns: u64) {
        for dev in devices.iter_mut() {
            for d in dgs.as_slice() {
                let adp_at = d.header + 2;
                let ado = usize::from(get_u16(frame, d.header + 4));
                let wkc_at = d.wkc_offset();
                let (head, rest) = frame.split_at_mut(d.data);
                let data = &mut rest[..d.len];
                let add = match d.cmd {
                    Cmd::Nop => 0,
                    Cmd::Aprd | Cmd::Apwr | Cmd::Aprw | Cmd::Armw => {
                        let adp = get_u16(head, adp_at);
                        put_u16(head, adp_at, adp.wrapping_add(1));
                        physical(dev, d.cmd, adp == 0, ado, data, now_ns)
                    }
                    Cmd::Fprd | Cmd::Fpwr | Cmd::Fprw | Cmd::Frmw => {
                        let hit = get_u16(head, adp_at) == dev.station_address();
                        physical(dev, d.cmd, hit, ado, data, now_ns)
                    }
                    Cmd::Brd | Cmd::Bwr | Cmd::Brw => {
                        let adp = get_u16(head, adp_at);
                        put_u16(head, adp_at, adp.wrapping_add(1));
                        physical(dev, d.cmd, true, ado, data, now_ns)
                    }
                    Cmd::Lrd | Cmd::Lwr | Cmd::Lrw => {
                        let hit = dev.logical(d.cmd, frame::get_u32(head, d.header + 2), data);
                        match d.cmd {
                            Cmd::Lrw => u16::from(hit.read) + 2 * u16::from(hit.write),
                            _ => u16::from(hit.read || hit.write),
                        }
                    }
                };
                let w = get_u16(frame, wkc_at);
                put_u16(frame, wkc_at, w.wrapping_add(add));
            }
            dev.dc_process_data(now_ns);
            dev.end_of_frame(now_ns);
        }
    }

    const CMDS: [Cmd; 15] = [
        Cmd::Nop,
        Cmd::Aprd,
        Cmd::Apwr,
        Cmd::Aprw,
        Cmd::Fprd,
        Cmd::Fpwr,
        Cmd::Fprw,
        Cmd::Brd,
        Cmd::Bwr,
        Cmd::Brw,
        Cmd::Lrd,
        Cmd::Lwr,
        Cmd::Lrw,
        Cmd::Armw,
        Cmd::Frmw,
    ];
    /// Registers worth hitting: station address, AL control/status, error counters (cleared on
    /// write), DC times, loop, SYNC0 and status, FMMU, SM, PDI.
    const ADOS: [u16; 18] = [
        0x0010, 0x0011, 0x0120, 0x0130, 0x0300, 0x030c, 0x0310, 0x0900, 0x0910, 0x0920, 0x092c,
        0x0981, 0x098e, 0x09f0, 0x0600, 0x0800, 0x1000, 0x1100,
    ];
    const STATIONS: [u16; 6] = [0, 0x1000, 0x1001, 0x1002, 0x1003, 0x2000];

    fn datagram() -> impl Strategy<Value = (usize, u16, usize, u16, Vec<u8>)> {
        (
            0..CMDS.len(),
            // auto-increment position (as 0, -1, -2 ...) or station index
            0u16..6,
            0..ADOS.len(),
            0u16..200,
            proptest::collection::vec(any::<u8>(), 1..24),
        )
    }

    fn build(dgs: &[(usize, u16, usize, u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = FrameBuilder::new();
        for (i, (c, a, o, logical, data)) in dgs.iter().enumerate() {
            let cmd = CMDS[*c];
            let address = match cmd {
                Cmd::Lrd | Cmd::Lwr | Cmd::Lrw => u32::from(*logical),
                Cmd::Aprd | Cmd::Apwr | Cmd::Aprw | Cmd::Armw => {
                    phys(0u16.wrapping_sub(*a), ADOS[*o])
                }
                _ => phys(STATIONS[usize::from(*a)], ADOS[*o]),
            };
            b = b.datagram(cmd, i as u8, address, data);
        }
        b.build()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

        #[test]
        fn same_frames_and_devices_as_offering_every_datagram_to_every_device(
            preconfigured in any::<bool>(),
            dc in any::<bool>(),
            frames in proptest::collection::vec(proptest::collection::vec(datagram(), 1..8), 1..12),
        ) {
            let make = || {
                let mut seg = Segment::new(SegmentSpec::uniform(4, 6, 4).with_dc(dc));
                if preconfigured {
                    seg.preconfigure();
                }
                // Counters to read and clear.
                seg.crc_errors(1, 0, 9);
                seg.crc_errors(2, 1, 3);
                seg
            };
            let (mut seg, mut reference) = (make(), make().devices);
            for (t, dgs) in frames.iter().enumerate() {
                let now = 1_000_000 * t as u64;
                let mut a = build(dgs);
                let mut b = a.clone();
                let mut pos = Datagrams::default();
                frame::validate(&b, &mut pos).unwrap();
                seg.run_chain(&mut a, &pos, now);
                reference_chain(&mut reference, &mut b, &pos, now);
                prop_assert_eq!(&a, &b, "frame {} differs", t);
                for (i, (x, y)) in seg.devices.iter().zip(&reference).enumerate() {
                    prop_assert!(x.mem() == y.mem(), "device {} memory differs after frame {}", i, t);
                    prop_assert_eq!(x.pd_counter(), y.pd_counter());
                }
            }
        }
    }
}

#[cfg(test)]
mod wiring_tests {
    //! One device's power and cable (`power-off`/`power-on`, `power-cycle POS`,
    //! `unplug`/`plug`): what a frame reaches, the DL status and lost-link counters of the
    //! ports that lost their link, and which devices keep their state.
    use super::*;
    use crate::faults::FaultCommand;
    use crate::frame::{FrameBuilder, datagram_result, phys};

    const DL_STATUS: u16 = crate::esc::reg::DL_STATUS as u16;
    const LOST_LINK: u16 = crate::esc::reg::LOST_LINK as u16;

    fn segment(n: usize) -> Segment {
        let mut s = Segment::new(SegmentSpec::uniform(n, 2, 2));
        s.preconfigure();
        s
    }

    fn apply(s: &mut Segment, cmd: &str) {
        let n = s.devices().len();
        s.faults()
            .try_apply(FaultCommand::parse_for(cmd, n).unwrap())
            .unwrap();
    }

    /// One datagram through the chain: its data and WKC (None when nothing came back).
    fn one(s: &mut Segment, cmd: Cmd, address: u32, len: usize) -> Option<(Vec<u8>, u16)> {
        one_at(s, cmd, address, &vec![0; len], 0)
    }

    /// One datagram carrying `data` through the chain at simulation time `now`.
    pub(super) fn one_at(
        s: &mut Segment,
        cmd: Cmd,
        address: u32,
        data: &[u8],
        now: u64,
    ) -> Option<(Vec<u8>, u16)> {
        let mut f = FrameBuilder::new().datagram(cmd, 1, address, data).build();
        match s.process(&mut f, now) {
            Disposition::Reply { .. } => datagram_result(&f, 0),
            _ => None,
        }
    }

    fn count(s: &mut Segment) -> Option<u16> {
        one(s, Cmd::Brd, 0, 2).map(|(_, w)| w)
    }

    fn al_state(s: &mut Segment, station: u16) -> Option<u8> {
        one(s, Cmd::Fprd, phys(station, 0x0130), 2).map(|(d, _)| d[0] & 0x0f)
    }

    fn dl_status(s: &Segment, pos: usize) -> u16 {
        get_u16(s.devices()[pos].mem(), usize::from(DL_STATUS))
    }

    fn lost_links(s: &Segment, pos: usize) -> [u8; 2] {
        let r = s.devices()[pos].mem();
        let at = usize::from(LOST_LINK);
        [r[at], r[at + 1]]
    }

    #[test]
    fn an_unplugged_cable_hides_the_devices_behind_it_until_it_is_plugged_back() {
        let mut s = segment(4);
        assert_eq!(count(&mut s), Some(4));
        apply(&mut s, "unplug 2");
        assert_eq!(
            count(&mut s),
            Some(2),
            "devices 2 and 3 are behind the cable"
        );
        assert_eq!(s.reachable(), 2);
        // Device 1 closed its port 1 (DL status bit 5 link, bit 10 loop closed, bit 11
        // communication: ET1100 register description 0x0110) and counted the lost link there;
        // device 2 counted it at port 0.
        assert_eq!(
            dl_status(&s, 1) & 0x0c20,
            0x0400,
            "{:#06x}",
            dl_status(&s, 1)
        );
        assert_eq!(lost_links(&s, 1), [0, 1]);
        assert_eq!(lost_links(&s, 2), [1, 0]);
        assert_eq!(lost_links(&s, 3), [0, 0], "the link between 2 and 3 stayed");
        // Nothing reaches them: no answer from station 0x1002.
        assert_eq!(
            one(&mut s, Cmd::Fprd, phys(0x1002, 0x0130), 2).unwrap().1,
            0
        );
        assert_eq!(
            s.device_states(),
            "0x1000:8 0x1001:8 0x1002:8/unreachable 0x1003:8/unreachable"
        );
        apply(&mut s, "plug 2");
        assert_eq!(count(&mut s), Some(4));
        // Powered all along: they kept their address and state (OP from preconfigure).
        assert_eq!(al_state(&mut s, 0x1002), Some(8));
        assert_eq!(al_state(&mut s, 0x1003), Some(8));
        assert_eq!(
            dl_status(&s, 1) & 0x0c20,
            0x0820,
            "port 1 open with a link again"
        );
    }

    #[test]
    fn a_device_without_power_cuts_the_line_and_comes_back_reset() {
        let mut s = segment(3);
        apply(&mut s, "power-off 1");
        assert_eq!(count(&mut s), Some(1));
        assert!(!s.powered(1));
        assert_eq!(lost_links(&s, 0), [0, 1]);
        assert_eq!(
            lost_links(&s, 2),
            [1, 0],
            "device 2 lost its link to the device without power"
        );
        assert_eq!(
            s.device_states(),
            "0x1000:8 0x1001:8/off 0x1002:8/unreachable"
        );
        apply(&mut s, "power-on 1");
        assert_eq!(count(&mut s), Some(3));
        // Device 1 starts over: INIT, no station address; device 2 kept both.
        assert_eq!(s.devices()[1].station_address(), 0);
        assert_eq!(s.devices()[1].al_state(), 1);
        assert_eq!(al_state(&mut s, 0x1002), Some(8));
        assert_eq!(al_state(&mut s, 0x1000), Some(8));
        // Power-on of a device that has power changes nothing.
        apply(&mut s, "power-on 2");
        assert_eq!(al_state(&mut s, 0x1002), Some(8));
    }

    #[test]
    fn the_first_device_without_power_is_no_link_at_all() {
        let mut s = segment(2);
        apply(&mut s, "power-off 0");
        assert_eq!(count(&mut s), None);
        assert_eq!(s.stats().link_down_drops, 1);
        apply(&mut s, "power-on 0");
        assert_eq!(count(&mut s), Some(2));
    }

    #[test]
    fn power_cycle_of_one_device_resets_only_it() {
        let mut s = segment(3);
        apply(&mut s, "power-cycle 1");
        assert_eq!(count(&mut s), Some(3), "an instant cycle loses no device");
        assert_eq!(s.devices()[1].station_address(), 0);
        assert_eq!(s.devices()[1].al_state(), 1);
        assert_eq!(al_state(&mut s, 0x1000), Some(8));
        assert_eq!(al_state(&mut s, 0x1002), Some(8));
        assert_eq!(s.stats().power_cycles, 1);
    }

    #[test]
    fn the_return_loop_of_the_last_reachable_device_is_closed() {
        // DC receive times: a device's port 1 time is its port 0 time plus the loop behind it,
        // and the device where the frame turns back has no port 1 time.
        let mut s = segment(3);
        apply(&mut s, "unplug 2");
        count(&mut s);
        assert!(!s.devices()[1].port_linked(1));
        assert!(s.devices()[0].port_linked(1));
        apply(&mut s, "plug 2");
        count(&mut s);
        assert!(s.devices()[1].port_linked(1));
    }

    #[test]
    fn a_replaced_device_is_another_identity_in_the_same_place() {
        let mut s = Segment::new(SegmentSpec::coe_example());
        s.preconfigure();
        let product = |s: &Segment, pos: usize| s.spec().devices[pos].product_id;
        assert_ne!(product(&s, 2), product(&s, 0));
        apply(&mut s, "replace 2 0");
        assert_eq!(count(&mut s), Some(3), "the line is whole");
        assert_eq!(
            product(&s, 2),
            product(&s, 0),
            "the description says what is there"
        );
        assert_eq!(s.devices()[2].spec().name, "DIO8-COE");
        // New and powered on: INIT without a station address; its neighbours untouched.
        assert_eq!(s.devices()[2].station_address(), 0);
        assert_eq!(s.devices()[2].al_state(), 1);
        assert_eq!(al_state(&mut s, 0x1001), Some(8));
        assert!(s.devices()[1].port_linked(1));
    }

    const JUNCTION: &str = "\
        [[device]]\nname = \"COUPLER\"\noutputs = 1\ninputs = 1\nports = 3\n\
        [[device]]\nname = \"A\"\noutputs = 1\ninputs = 1\n\
        [[device]]\nname = \"B\"\noutputs = 1\ninputs = 1\n\
        [[device]]\nname = \"X\"\noutputs = 1\ninputs = 1\nupstream = [0, 1]\n";

    #[test]
    fn a_branch_unplugged_at_a_junction_leaves_the_line_behind_it_running() {
        let mut s = Segment::new(SegmentSpec::from_toml(JUNCTION).unwrap());
        s.preconfigure();
        // The coupler: ports 0, 3 and 1 with a link and open (DL status bits 4/9, 7/15, 5/11),
        // port 2 closed; port descriptor: ports 0, 1 and 3 implemented.
        assert_eq!(s.devices()[0].mem()[0x0007], 0xcf);
        assert_eq!(dl_status(&s, 0) & 0xfff0, 0x1000 | 0x8a00 | 0x00b0);
        assert_eq!(count(&mut s), Some(4));
        apply(&mut s, "unplug 1");
        // The branch is gone; X behind the coupler's port 1 still answers, at the same station.
        assert_eq!(count(&mut s), Some(2));
        assert_eq!(al_state(&mut s, 0x1003), Some(8));
        assert_eq!(
            one(&mut s, Cmd::Fprd, phys(0x1001, 0x0130), 2).unwrap().1,
            0
        );
        assert_eq!(dl_status(&s, 0) & 0x4080, 0x4000, "port 3 closed, no link");
        assert_eq!(lost_links(&s, 0), [0, 0]);
        assert_eq!(
            s.devices()[0].mem()[0x0313],
            1,
            "the lost link counted at port 3"
        );
        // A logical datagram is answered by the reachable devices in order: the coupler and X.
        apply(&mut s, "plug 1");
        assert_eq!(count(&mut s), Some(4));
        apply(&mut s, "power-off 3");
        assert_eq!(
            count(&mut s),
            Some(3),
            "the branch stays when the line behind port 1 goes"
        );
    }

    #[test]
    fn wiring_that_a_frame_cannot_take_is_refused_naming_the_device() {
        let base = "[[device]]\noutputs = 1\ninputs = 1\nports = 3\n\
                    [[device]]\noutputs = 1\ninputs = 1\n";
        for (extra, why) in [
            ("upstream = [0, 2]", "has no port 2"),
            (
                "upstream = [0, 3]",
                "port 3 of position 0 already leads to position 1",
            ),
            ("upstream = [5, 1]", "position 5 is not before this one"),
            ("ports = 5", "an ESC has 2, 3 or 4 ports"),
        ] {
            let toml = format!("{base}[[device]]\noutputs = 1\ninputs = 1\n{extra}\n");
            let e = SegmentSpec::from_toml(&toml).unwrap_err().to_string();
            assert!(e.contains(why), "{extra}: {e}");
            assert!(e.contains("device[2]"), "{extra}: {e}");
        }
        // Plugged into the coupler's port 1 before its port 3 is listed: not processing order.
        let toml = "[[device]]\noutputs = 1\ninputs = 1\nports = 3\n\
                    [[device]]\noutputs = 1\ninputs = 1\nupstream = [0, 1]\n\
                    [[device]]\noutputs = 1\ninputs = 1\nupstream = [0, 3]\n";
        let e = SegmentSpec::from_toml(toml).unwrap_err().to_string();
        assert!(
            e.contains("list the devices in the order a frame reaches them"),
            "{e}"
        );
        let e = SegmentSpec::from_toml("[[device]]\noutputs = 1\nupstream = [0, 1]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("the first device faces the master"), "{e}");
    }

    #[test]
    fn wiring_commands_name_what_is_wrong() {
        for (cmd, why) in [
            ("unplug 0", "position 0's cable is the master's"),
            ("plug 0", "position 0's cable is the master's"),
            ("unplug 3", "outside the segment"),
            ("power-off 7", "outside the segment"),
            ("power-on", "missing position"),
            ("power-cycle 1 2", "expected 2 word(s)"),
            ("unplug x", "not a non-negative integer"),
            ("replace 1 3", "outside the segment"),
            ("replace 1", "missing position"),
        ] {
            let e = FaultCommand::parse_for(cmd, 3).unwrap_err();
            assert!(e.to_string().contains(why), "{cmd}: {e}");
        }
        assert_eq!(
            FaultCommand::parse_for("power-cycle", 3).unwrap(),
            FaultCommand::PowerCycle
        );
        assert_eq!(
            FaultCommand::parse_for("power-cycle 2", 3).unwrap(),
            FaultCommand::PowerCycleOne { position: 2 }
        );
    }
}

#[cfg(test)]
mod timing_tests {
    //! `[device.timing]`: a device that takes the time a real one takes for an AL state change,
    //! an SII command and a mailbox answer — and none without it.
    use super::wiring_tests::one_at;
    use super::*;
    use crate::frame::phys;

    const MS: u64 = 1_000_000;

    fn timed(extra: &str) -> Segment {
        let toml = format!(
            "[[device]]\nname = \"T\"\noutputs = 2\ninputs = 2\n{extra}\n[device.timing]\n\
             sii_read_us = 680\ninit_preop_us = 5000\npreop_safeop_us = 20000\n\
             safeop_op_us = 10000\ndown_us = 2000\nmailbox_us = 3000\n"
        );
        Segment::new(SegmentSpec::from_toml(&toml).unwrap())
    }

    fn al_status(s: &mut Segment, now: u64) -> u8 {
        one_at(s, Cmd::Aprd, phys(0, 0x0130), &[0, 0], now)
            .unwrap()
            .0[0]
    }

    fn request(s: &mut Segment, state: u8, now: u64) {
        assert_eq!(
            one_at(s, Cmd::Apwr, phys(0, 0x0120), &[state, 0], now)
                .unwrap()
                .1,
            1
        );
    }

    #[test]
    fn an_al_state_change_takes_the_device_its_time() {
        let mut s = timed("");
        request(&mut s, 2, 0);
        assert_eq!(
            al_status(&mut s, 4 * MS),
            1,
            "still INIT 4 ms after the request"
        );
        assert_eq!(al_status(&mut s, 5 * MS), 2, "PRE-OP after 5 ms");
        // Down is quicker, and a request while one is under way replaces it.
        request(&mut s, 1, 6 * MS);
        assert_eq!(al_status(&mut s, 7 * MS), 2);
        request(&mut s, 2, 7 * MS);
        assert_eq!(
            al_status(&mut s, 9 * MS),
            2,
            "PRE-OP -> PRE-OP is no change"
        );
        assert_eq!(
            al_status(&mut s, 30 * MS),
            2,
            "the INIT request was replaced"
        );
    }

    #[test]
    fn an_sii_command_keeps_the_interface_busy_for_the_eeprom_access() {
        let mut s = timed("");
        // Read command (0x0100 in the control word) at word 0x0008.
        one_at(
            &mut s,
            Cmd::Apwr,
            phys(0, 0x0502),
            &[0x00, 0x01, 0x08, 0x00],
            0,
        )
        .unwrap();
        let busy = |s: &mut Segment, now| {
            one_at(s, Cmd::Aprd, phys(0, 0x0502), &[0, 0], now)
                .unwrap()
                .0[1]
                & 0x80
                != 0
        };
        assert!(busy(&mut s, 100_000));
        assert!(busy(&mut s, 600_000));
        assert!(!busy(&mut s, 700_000), "done after 680 µs");
    }

    #[test]
    fn without_timing_everything_is_at_once() {
        let mut s = Segment::new(SegmentSpec::uniform(1, 2, 2));
        request(&mut s, 2, 0);
        assert_eq!(al_status(&mut s, 0), 2);
        one_at(
            &mut s,
            Cmd::Apwr,
            phys(0, 0x0502),
            &[0x00, 0x01, 0x08, 0x00],
            0,
        )
        .unwrap();
        let status = |s: &mut Segment| {
            one_at(s, Cmd::Aprd, phys(0, 0x0502), &[0, 0], 0).unwrap().0[1] & 0x80
        };
        assert_eq!(status(&mut s), 0x80, "busy for one status read");
        assert_eq!(status(&mut s), 0);
    }

    #[test]
    fn the_sm_watchdog_takes_a_device_whose_outputs_stop_to_safe_op() {
        let toml = "[[device]]\noutputs = 2\ninputs = 2\n[device.timing]\nsm_watchdog = true\n\
                    [[device]]\noutputs = 2\ninputs = 2\n";
        let mut s = Segment::new(SegmentSpec::from_toml(toml).unwrap());
        let image = s.preconfigure().image_len;
        let lrw = |s: &mut Segment, now| one_at(s, Cmd::Lrw, 0, &vec![0; image], now).unwrap().1;
        let status = |s: &mut Segment, pos: u16, now| {
            let (d, _) = one_at(s, Cmd::Fprd, phys(0x1000 + pos, 0x0130), &[0; 6], now).unwrap();
            (d[0], u16::from_le_bytes([d[4], d[5]]))
        };
        assert_eq!(lrw(&mut s, 0), 6);
        assert_eq!(
            lrw(&mut s, 90 * MS),
            6,
            "90 ms between writes: within 100 ms"
        );
        assert_eq!(status(&mut s, 0, 95 * MS), (0x08, 0));
        // 150 ms without outputs: the watched device leaves OP; the other one (no watchdog
        // configured in the simulator) stays.
        assert_eq!(status(&mut s, 0, 240 * MS), (0x14, 0x001b));
        assert_eq!(status(&mut s, 1, 240 * MS), (0x08, 0));
        // A master that writes 0 to the SM watchdog time switches it off.
        let mut s = Segment::new(SegmentSpec::from_toml(toml).unwrap());
        s.preconfigure();
        one_at(&mut s, Cmd::Fpwr, phys(0x1000, 0x0420), &[0, 0], 0).unwrap();
        assert_eq!(lrw(&mut s, 0), 6);
        assert_eq!(status(&mut s, 0, 10_000 * MS), (0x08, 0));
    }

    #[test]
    fn timing_keys_are_bounded_and_named() {
        for (key, v) in [("mailbox_us", 10_000_001u64), ("safeop_op_us", 99_000_000)] {
            let toml =
                format!("[[device]]\noutputs = 1\ninputs = 1\n[device.timing]\n{key} = {v}\n");
            let e = SegmentSpec::from_toml(&toml).unwrap_err().to_string();
            assert!(e.contains(&format!("device[0].timing.{key} = {v}")), "{e}");
        }
        let e = SegmentSpec::from_toml(
            "[[device]]\noutputs = 1\ninputs = 1\n[device.timing]\nsii_us = 1\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("sii_us"), "{e}");
    }

    #[test]
    fn a_preconfigured_timed_segment_is_in_op() {
        let mut s = timed("");
        s.preconfigure();
        assert_eq!(s.devices()[0].al_state(), 8);
    }
}
