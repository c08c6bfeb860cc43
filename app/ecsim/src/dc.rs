//! Distributed clocks of one simulated ESC: a local clock with its own offset and drift, the
//! system time registers, the time control loop that steers the clock to the reference's time
//! and SYNC0 generation with a count of process data that arrived too late.
//!
//! Sources: Beckhoff EtherCAT ESC datasheet section I (technology), chapter 9 "Distributed
//! Clocks" (local time, system time = local time + offset, propagation delay, drift
//! compensation by ARMW/FRMW writes of the reference time to 0x0910, SYNC0 start time and cycle);
//! section II (register description) for 0x0900..0x09A7; ETG.1000.4 §9 (DC).
//!
//! What the simulator models and how (its own choices where the datasheet gives no numbers):
//! - The local clock reads `base + t·(1 + drift)` at simulation time `t` (the moment the frame
//!   reaches the device: `HOP_NS` per device before it), `base` the device's offset.
//! - A write of the system time (0x0910, 4 or 8 bytes) compares the local copy of the system time
//!   with the received time + system time delay (0x0928): Δ = local − (received + delay). The
//!   loop measures the clock's rate error over windows of at least [`RATE_WINDOW_NS`] and
//!   corrects the speed (filtered over `0x0935 + 1` windows), and removes Δ by running the clock
//!   faster or slower: the total speed change is bounded by `1 / speed counter start` (0x0930,
//!   default 0x1000: ±244 ppm), so a time step is never applied at once.
//! - 0x092C reads the mean Δ (filtered over `0x0934 + 1` samples) in the ESC's format: bit 31 set
//!   when the local copy is smaller than the received time, bits 30..0 the magnitude.
//! - SYNC0 ([`Sync0`]): the events lie on `start + k·cycle` of the local system time.

/// Default sync window: |0x092C| below it is "in sync".
pub const DEFAULT_SYNC_WINDOW_NS: u32 = 1000;
/// Largest drift a device may be given (crystals of ESCs are specified at ±25..100 ppm).
pub const MAX_DRIFT_PPM: f64 = 500.0;
/// Largest local clock offset a device may be given, ns (1000 s).
pub const MAX_OFFSET_NS: i64 = 1_000_000_000_000;
/// The rate error is measured over at least this much simulation time, so the 1 ns resolution
/// of the received time does not dominate it.
pub const RATE_WINDOW_NS: u64 = 1_000_000;

/// DC registers beyond the receive times (ESC datasheet section II).
pub mod reg {
    pub const SYSTEM_TIME: usize = 0x0910;
    pub const SYSTEM_TIME_OFFSET: usize = 0x0920;
    pub const SYSTEM_TIME_DELAY: usize = 0x0928;
    pub const SYSTEM_TIME_DIFF: usize = 0x092c;
    pub const SPEED_COUNTER_START: usize = 0x0930;
    pub const SPEED_COUNTER_DIFF: usize = 0x0932;
    pub const DIFF_FILTER_DEPTH: usize = 0x0934;
    pub const SPEED_FILTER_DEPTH: usize = 0x0935;
    pub const CYCLIC_UNIT_CONTROL: usize = 0x0980;
    pub const ACTIVATION: usize = 0x0981;
    pub const SYNC0_STATUS: usize = 0x098e;
    pub const START_TIME: usize = 0x0990;
    pub const SYNC0_CYCLE: usize = 0x09a0;
    pub const SYNC1_CYCLE: usize = 0x09a4;
    /// Simulator only (reserved on a real ESC, reads 0 there): bit 0 in sync (|0x092C| below
    /// the device's sync window), bit 1 SYNC0 running.
    pub const SIM_DC_STATUS: usize = 0x09f0;
    /// Simulator only: 32-bit count of late process data frames.
    pub const SIM_LATE_FRAMES: usize = 0x09f4;
}

/// Reset values of the loop registers (ESC datasheet section II, 0x0930..0x0935).
pub const SPEED_COUNTER_START_RESET: u16 = 0x1000;
pub const DIFF_FILTER_DEPTH_RESET: u8 = 4;
pub const SPEED_FILTER_DEPTH_RESET: u8 = 12;

/// The clock of one device as the segment description gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DcClockSpec {
    /// Local time at simulation time 0, ns; `None`: 1 ms per position + 12 345 ns (the
    /// simulator's fixed offsets before clocks were configurable).
    pub offset_ns: Option<i64>,
    /// Drift in parts per billion (`dc_drift_ppm` × 1000): the clock runs `1 + drift` fast.
    pub drift_ppb: i64,
    /// |0x092C| below this is "in sync".
    pub sync_window_ns: u32,
}

impl Default for DcClockSpec {
    fn default() -> Self {
        DcClockSpec {
            offset_ns: None,
            drift_ppb: 0,
            sync_window_ns: DEFAULT_SYNC_WINDOW_NS,
        }
    }
}

/// SYNC0 as configured by the activation write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sync0 {
    /// First event, local system time (0x0990, moved as the comparator sees it, see
    /// [`DcClock::activate`]).
    pub first: u64,
    /// 0x09A0, ns; 0 is a single pulse.
    pub cycle: u64,
}

impl Sync0 {
    /// Number of events strictly before system time `s`.
    fn passed(&self, s: u64) -> u64 {
        if s <= self.first {
            return 0;
        }
        // A cycle of 0 is a single pulse.
        (s - self.first - 1).checked_div(self.cycle).unwrap_or(0) + 1
    }

    /// Event `k` (system time).
    pub fn event(&self, k: u64) -> u64 {
        self.first.wrapping_add(k.wrapping_mul(self.cycle))
    }
}

/// The clock state of one DC device.
#[derive(Debug, Clone)]
pub struct DcClock {
    spec: DcClockSpec,
    /// Local time at simulation time 0 (offset + the hops before the device).
    base: u64,
    drift: f64,
    /// What the loop added to the local copy of the system time so far, ns, as of `at`.
    corr: f64,
    at: u64,
    /// Speed correction the loop applies (fraction).
    rate: f64,
    /// Time error still to be removed by running faster or slower, ns.
    slew: f64,
    /// Start of the current rate measurement window: (simulation time, Δ without the loop).
    anchor: Option<(u64, f64)>,
    /// Filtered Δ (0x092C).
    diff: f64,
    /// Whether a system time write arrived since the last reset (before that 0x092C is 0).
    compared: bool,
    sync0: Option<Sync0>,
    /// Event the last process data was latched at (index into `sync0`).
    latched: Option<u64>,
    late: u64,
    on_time: u64,
    /// Frames on time since SYNC0 was last switched on.
    on_time_since_on: u64,
    /// Events reported through 0x098E so far.
    status_seen: u64,
}

impl DcClock {
    /// The clock of the device at `position`, which frames reach `arrival_ns` after they
    /// reach the first device.
    pub fn new(spec: DcClockSpec, position: usize, arrival_ns: u64) -> Self {
        let offset = spec
            .offset_ns
            .unwrap_or(1_000_000 * (position as i64 + 1) + 12_345);
        DcClock {
            spec,
            base: (offset as u64).wrapping_add(arrival_ns),
            drift: spec.drift_ppb as f64 * 1e-9,
            corr: 0.0,
            at: 0,
            rate: 0.0,
            slew: 0.0,
            anchor: None,
            diff: 0.0,
            compared: false,
            sync0: None,
            latched: None,
            late: 0,
            on_time: 0,
            on_time_since_on: 0,
            status_seen: 0,
        }
    }

    pub fn spec(&self) -> DcClockSpec {
        self.spec
    }

    /// Frames reach the device `delta_ns` later (negative: sooner) than before: what they read
    /// of the local time moves with them (`base` holds the offset plus the arrival).
    pub fn shift(&mut self, delta_ns: i64) {
        self.base = self.base.wrapping_add(delta_ns as u64);
    }

    /// Power-on: the loop and SYNC0 start from their reset state, the loop's correction is
    /// lost; the crystal keeps running (the local time is not restarted).
    pub fn power_on(&mut self) {
        self.reset_loop(true);
        self.corr = 0.0;
        self.sync0 = None;
        self.latched = None;
        self.status_seen = 0;
    }

    /// Drop what the loop measured (`speed` also the speed correction).
    pub fn reset_loop(&mut self, speed: bool) {
        if speed {
            self.rate = 0.0;
        }
        self.slew = 0.0;
        self.anchor = None;
        self.diff = 0.0;
        self.compared = false;
    }

    /// Largest speed change for speed counter start `start`.
    fn max_rate(start: u16) -> f64 {
        1.0 / f64::from(start.clamp(0x80, 0x7fff))
    }

    /// Run the loop's corrections up to simulation time `t`.
    fn advance(&mut self, t: u64, speed_start: u16) {
        if t <= self.at {
            return;
        }
        let dt = (t - self.at) as f64;
        let room = (Self::max_rate(speed_start) - self.rate.abs()).max(0.0) * dt;
        let step = self.slew.clamp(-room, room);
        self.corr += self.rate * dt + step;
        self.slew -= step;
        self.at = t;
    }

    /// Local time (0x0900.. latches) at simulation time `t`.
    pub fn local(&self, t: u64) -> u64 {
        let d = (t as f64 * self.drift).round() as i64;
        t.wrapping_add(self.base).wrapping_add(d as u64)
    }

    /// The local copy of the system time at `t`: local time + offset + the loop's correction.
    pub fn system(&mut self, t: u64, offset: u64, speed_start: u16) -> u64 {
        self.advance(t, speed_start);
        self.system_now(t, offset)
    }

    fn system_now(&self, t: u64, offset: u64) -> u64 {
        let d = (t as f64 * self.drift + self.corr).round() as i64;
        t.wrapping_add(self.base)
            .wrapping_add(d as u64)
            .wrapping_add(offset)
    }

    /// A system time write at `t`: `received` the reference's time (the low 32 bits only when
    /// `wide` is false), `delay` 0x0928, `depths` (0x0934, 0x0935).
    pub fn compare(&mut self, t: u64, received: u64, wide: bool, regs: LoopRegs) {
        let s = self.system(t, regs.offset, regs.speed_start);
        let want = received.wrapping_add(u64::from(regs.delay));
        let delta = if wide {
            s.wrapping_sub(want) as i64 as f64
        } else {
            (s as u32).wrapping_sub(want as u32) as i32 as f64
        };
        let raw = delta - self.corr;
        match self.anchor {
            None => self.anchor = Some((t, raw)),
            // (A caller's clock that goes back never opens a window.)
            Some((t0, d0)) if t.saturating_sub(t0) >= RATE_WINDOW_NS => {
                let measured = (raw - d0) / (t - t0) as f64;
                let w = 1.0 / (f64::from(regs.speed_depth) + 1.0);
                self.rate += (-measured - self.rate) * w;
                let max = Self::max_rate(regs.speed_start);
                self.rate = self.rate.clamp(-max, max);
                self.anchor = Some((t, raw));
            }
            Some(_) => {}
        }
        self.slew = -delta;
        if self.compared {
            let w = 1.0 / (f64::from(regs.diff_depth) + 1.0);
            self.diff += (delta - self.diff) * w;
        } else {
            self.diff = delta;
            self.compared = true;
        }
    }

    /// 0x092C: bit 31 set when the local copy is behind the received time, bits 30..0 |Δ|.
    pub fn diff_register(&self) -> u32 {
        let m = self.diff.abs().round().min(f64::from(0x7fff_ffffu32)) as u32;
        if self.diff < 0.0 && m > 0 {
            0x8000_0000 | m
        } else {
            m
        }
    }

    /// The mean Δ, signed ns.
    pub fn diff_ns(&self) -> i64 {
        self.diff.round() as i64
    }

    /// Whether |0x092C| is below the sync window (and a comparison happened at all).
    pub fn in_sync(&self) -> bool {
        self.compared && self.diff.abs() < f64::from(self.spec.sync_window_ns)
    }

    /// 0x0932: the speed correction, scaled so that its bound is ±(start − 0x7F) as the
    /// datasheet gives the register's range.
    pub fn speed_diff_register(&self, speed_start: u16) -> u16 {
        let span = f64::from(speed_start.clamp(0x80, 0x7fff) - 0x7f);
        ((self.rate / Self::max_rate(speed_start)) * span).round() as i16 as u16
    }

    /// The speed correction the loop applies now, ppm.
    pub fn correction_ppm(&self) -> f64 {
        self.rate * 1e6
    }

    /// The drift the device was given, ppm.
    pub fn drift_ppm(&self) -> f64 {
        self.drift * 1e6
    }

    /// 0x0981 written at `t`: SYNC0 runs when cyclic operation (bit 0) and SYNC0 (bit 1) are on.
    /// The ESC compares the start time with its system time; a start time already past is met
    /// again only when the low 32 bits of the system time wrap (the datasheet's warning to
    /// write a start time in the future), which the simulator reproduces.
    pub fn activate(&mut self, t: u64, activation: u8, start: u64, cycle: u32, regs: LoopRegs) {
        self.latched = None;
        self.status_seen = 0;
        self.on_time_since_on = 0;
        if activation & 0x03 != 0x03 {
            self.sync0 = None;
            return;
        }
        let now = self.system(t, regs.offset, regs.speed_start);
        let mut first = start;
        if first < now {
            let wraps = (now - first).div_ceil(1 << 32);
            first = first.wrapping_add(wraps << 32);
        }
        self.sync0 = Some(Sync0 {
            first,
            cycle: u64::from(cycle),
        });
    }

    pub fn sync0(&self) -> Option<Sync0> {
        self.sync0
    }

    /// 0x098E read at `t`: bit 0 set when a SYNC0 event happened since the previous read.
    pub fn sync0_status(&mut self, t: u64, regs: LoopRegs) -> u8 {
        let Some(s0) = self.sync0 else {
            return 0;
        };
        let s = self.system(t, regs.offset, regs.speed_start);
        let n = s0.passed(s.wrapping_add(1));
        let fresh = n > self.status_seen;
        self.status_seen = n;
        u8::from(fresh)
    }

    /// Process data reached the device at `t` (its outputs, or the inputs of a device without
    /// outputs): late when a SYNC0 event passed between the event the previous frame was latched
    /// at and this arrival, i.e. on time only in (previous SYNC0, this SYNC0].
    pub fn process_data(&mut self, t: u64, regs: LoopRegs) {
        let Some(s0) = self.sync0 else {
            return;
        };
        let s = self.system(t, regs.offset, regs.speed_start);
        let k = s0.passed(s);
        match self.latched {
            Some(l) if k > l + 1 => self.late += 1,
            _ => {
                self.on_time += 1;
                self.on_time_since_on += 1;
            }
        }
        self.latched = Some(k);
    }

    pub fn late(&self) -> u64 {
        self.late
    }

    pub fn on_time(&self) -> u64 {
        self.on_time
    }

    /// Process data frames on time since SYNC0 was last switched on.
    pub fn on_time_since_on(&self) -> u64 {
        self.on_time_since_on
    }
}

/// The register values the loop needs, read by the ESC from its memory.
#[derive(Debug, Clone, Copy)]
pub struct LoopRegs {
    pub offset: u64,
    pub delay: u32,
    pub speed_start: u16,
    pub diff_depth: u8,
    pub speed_depth: u8,
}

/// What a test or `sim-ctl status` reads of one DC device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcStatus {
    pub position: usize,
    /// Local time and local copy of the system time when a frame sent at the simulation time
    /// asked for reaches the device (the hops before it later than the first device).
    pub local_ns: u64,
    pub system_ns: u64,
    pub drift_ppm: f64,
    /// The loop's speed correction, ppm.
    pub correction_ppm: f64,
    /// 0x092C as the register holds it, and as signed ns.
    pub diff_register: u32,
    pub diff_ns: i64,
    pub in_sync: bool,
    pub sync0: Option<Sync0>,
    pub late: u64,
    pub on_time: u64,
}

/// The DC part of the `sim-ctl status` line: empty without DC devices, else
/// ` dc=P:DIFF:SYNC:LATE:CYCLE,...` per DC device: position, 0x092C as signed ns, `1` in sync
/// or `0`, late process data frames, SYNC0 cycle in ns (`-` while SYNC0 is off). No brackets:
/// parsers of the line take `devices=[...]` up to the last `]`.
pub fn status_field(devices: &[DcStatus]) -> String {
    if devices.is_empty() {
        return String::new();
    }
    let items: Vec<String> = devices
        .iter()
        .map(|d| {
            let cycle = d
                .sync0
                .map_or_else(|| "-".to_string(), |s| s.cycle.to_string());
            format!(
                "{}:{}:{}:{}:{}",
                d.position,
                d.diff_ns,
                u8::from(d.in_sync),
                d.late,
                cycle
            )
        })
        .collect();
    format!(" dc={}", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> LoopRegs {
        LoopRegs {
            offset: 0,
            delay: 0,
            speed_start: SPEED_COUNTER_START_RESET,
            diff_depth: 0,
            speed_depth: 0,
        }
    }

    #[test]
    fn events_strictly_before_a_time() {
        let s = Sync0 {
            first: 1000,
            cycle: 100,
        };
        assert_eq!(
            [0, 1000, 1001, 1100, 1101, 1300].map(|t| s.passed(t)),
            [0, 0, 1, 1, 2, 3]
        );
        let single = Sync0 {
            first: 1000,
            cycle: 0,
        };
        assert_eq!([1000, 1001, u64::MAX].map(|t| single.passed(t)), [0, 1, 1]);
    }

    #[test]
    fn difference_register_is_sign_and_magnitude() {
        let mut c = DcClock::new(DcClockSpec::default(), 0, 500);
        // Local copy 250 ns ahead of the received time: bit 31 clear.
        let t = 10_000;
        let s = c.system(t, 0, SPEED_COUNTER_START_RESET);
        c.compare(t, s - 250, true, regs());
        assert_eq!(c.diff_register(), 250);
        let mut c = DcClock::new(DcClockSpec::default(), 0, 500);
        let s = c.system(t, 0, SPEED_COUNTER_START_RESET);
        c.compare(t, s + 250, true, regs());
        assert_eq!(c.diff_register(), 0x8000_0000 | 250);
        // A 32-bit comparison across the wrap of the low word.
        let mut c = DcClock::new(DcClockSpec::default(), 0, 500);
        let s = c.system(t, 0, SPEED_COUNTER_START_RESET);
        c.compare(t, u64::from((s as u32).wrapping_add(40)), false, regs());
        assert_eq!(c.diff_ns(), -40);
    }

    #[test]
    fn the_speed_change_is_bounded_by_the_speed_counter_start() {
        let mut c = DcClock::new(DcClockSpec::default(), 0, 500);
        let s = c.system(0, 0, SPEED_COUNTER_START_RESET);
        // 1 ms behind: the clock may run at most 1/0x1000 fast, ~244 ns per ms.
        c.compare(0, s + 1_000_000, true, regs());
        let after = c.system(1_000_000, 0, SPEED_COUNTER_START_RESET);
        let gained = after as i64 - (s as i64 + 1_000_000);
        assert_eq!(gained, 244, "{gained}");
    }

    #[test]
    fn status_field_is_empty_without_dc_and_bracket_free() {
        assert_eq!(status_field(&[]), "");
        let d = DcStatus {
            position: 2,
            local_ns: 0,
            system_ns: 0,
            drift_ppm: 0.0,
            correction_ppm: 0.0,
            diff_register: 0x8000_0007,
            diff_ns: -7,
            in_sync: true,
            sync0: Some(Sync0 {
                first: 0,
                cycle: 1_000_000,
            }),
            late: 3,
            on_time: 9,
        };
        let e = DcStatus {
            position: 4,
            sync0: None,
            in_sync: false,
            ..d
        };
        assert_eq!(status_field(&[d, e]), " dc=2:-7:1:3:1000000,4:-7:0:3:-");
    }
}
