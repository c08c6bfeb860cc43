//! The chain of ESCs: passes each frame through every device in wiring order and applies the
//! addressing and working-counter rules of ETG1000.4 §5.4.

use crate::esc::{AlState, Esc};
use crate::faults::{DeviceFault, Faults};
use crate::frame::{self, Cmd, Datagrams, FrameError, get_u16, put_u16};
use crate::spec::SegmentSpec;

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
}

impl Segment {
    pub fn new(spec: SegmentSpec) -> Self {
        Self::with_faults(spec, Faults::new())
    }

    pub fn with_faults(spec: SegmentSpec, faults: Faults) -> Self {
        let n = spec.devices.len();
        let devices = spec
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| Esc::new(d.clone(), i, n))
            .collect();
        Segment {
            spec,
            devices,
            faults,
            stats: SegmentStats::default(),
            datagrams: Datagrams::default(),
            pending: Vec::with_capacity(8),
            rng: 0x9e37_79b9_7f4a_7c15,
            last_error: None,
        }
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
        for f in self.pending.drain(..) {
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
                }
            }
        }
    }

    /// Pass one Ethernet frame through the chain, modifying it in place into the response.
    /// `now_ns` is a monotonic time used by the DC model.
    pub fn process(&mut self, frame: &mut [u8], now_ns: u64) -> Disposition {
        self.stats.frames += 1;
        self.apply_device_faults();
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
            Ok(()) if self.faults.link_down() => {
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

    fn run_chain(&mut self, frame: &mut [u8], dgs: &Datagrams, now_ns: u64) {
        self.stats.datagrams += dgs.as_slice().len() as u64;
        for dev in self.devices.iter_mut() {
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
                        let adp = get_u16(head, adp_at);
                        put_u16(head, adp_at, adp.wrapping_add(1));
                        add = physical(dev, d.cmd, adp == 0, ado, data, now_ns);
                    }
                    Cmd::Fprd | Cmd::Fpwr | Cmd::Fprw | Cmd::Frmw => {
                        let hit = get_u16(head, adp_at) == dev.station_address();
                        add = physical(dev, d.cmd, hit, ado, data, now_ns);
                    }
                    Cmd::Brd | Cmd::Bwr | Cmd::Brw => {
                        let adp = get_u16(head, adp_at);
                        put_u16(head, adp_at, adp.wrapping_add(1));
                        add = physical(dev, d.cmd, true, ado, data, now_ns);
                    }
                    Cmd::Lrd | Cmd::Lwr | Cmd::Lrw => {
                        let addr = frame::get_u32(head, d.header + 2);
                        let hit = dev.logical(d.cmd, addr, data);
                        add = match d.cmd {
                            Cmd::Lrw => u16::from(hit.read) + 2 * u16::from(hit.write),
                            _ => u16::from(hit.read || hit.write),
                        };
                    }
                }
                if add > 0 {
                    let w = get_u16(frame, wkc_at);
                    put_u16(frame, wkc_at, w.wrapping_add(add));
                }
            }
            dev.end_of_frame();
        }
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
            for sm in &crate::sii::process_data_sms(dev.spec()) {
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
                if sm.usage == 3 {
                    out = r;
                } else {
                    inp = r;
                }
                logical += u32::from(sm.len);
            }
            ranges.push((out, inp));
            for st in [2u8, 4, 8] {
                let _ = dev.phys_write(0x0120, &[st, 0], now);
            }
        }
        Preconfigured {
            image_len: logical as usize,
            ranges,
        }
    }
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
