//! Axes: CiA 402 drives driven by the [`crate::cia402`] profile, for user code and as the
//! built-in application of `[[axis]]`.
//!
//! [`Axes::from_config`] builds one [`Axis`] per `[[axis]]`; inside a user
//! [`Application`], call [`Axes::configure`] from `configure` and [`Axes::cycle`] from `cycle`,
//! and use [`Axes::enable`], [`Axes::disable`], [`Axes::set_target`], [`Axes::state`],
//! [`Axes::following_error`], [`Axes::fault_text`] in between. [`AxesApp`] is the application
//! `rtcat run`/`bench` use when the configuration has axes: it enables every axis and runs the
//! configured moves.
//!
//! Per cycle nothing allocates: entries are resolved in `configure`, the histograms have fixed
//! bounds, the trajectory is sampled in closed form.

use hdrhistogram::Histogram;

use crate::application::{AppError, Application, Cycle, Recovery, Setup};
use crate::axis::AxisConfig;
use crate::cia402::{Drive, DriveIn, Setpoint, State, error_text};
use crate::config::Config;
use crate::image::{Input, Output};
use crate::motion::{Sample, Sequencer};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};

/// The process data entries of one drive, resolved at every bring-up.
#[derive(Debug, Clone, Copy)]
struct Io {
    position: u16,
    controlword: Output<u16>,
    mode: Output<i8>,
    target_position: Option<Output<i32>>,
    target_velocity: Option<Output<i32>>,
    statusword: Input<u16>,
    mode_display: Input<i8>,
    position_actual: Input<i32>,
    following_error: Option<Input<i32>>,
    error_code: Option<Input<u16>>,
}

/// What one axis measured over the run.
#[derive(Debug, Clone)]
pub struct AxisStats {
    /// The highest state reached in the standard's order up to operation enabled.
    pub highest_state: Option<State>,
    /// |following error| in counts, the master's own (the position set-point the drive was
    /// sent in the previous cycle minus the position actual 0x6064 read now), every good cycle
    /// in operation enabled.
    pub following_error: Histogram<u64>,
    /// |following error actual 0x60F4| in counts as the drive reports it, the same cycles
    /// (empty when the drive does not map it).
    pub drive_following_error: Histogram<u64>,
    /// Bad cycles through which the last outputs were held (no quick stop).
    pub held_cycles: u64,
    /// The longest run of bad cycles in a row.
    pub longest_bad_run: u32,
    /// Faults seen.
    pub faults: u32,
    /// The error code of the last fault (0: none).
    pub last_error: u16,
    /// Quick stops commanded because of bad cycles.
    pub quick_stops: u32,
}

/// One axis.
#[derive(Debug, Clone)]
pub struct Axis {
    cfg: AxisConfig,
    drive: Drive,
    io: Option<Io>,
    seq: Option<Sequencer>,
    /// The user's target (units) when set with [`Axes::set_target`]; else the built-in program.
    user_target: Option<f64>,
    setpoint: Sample,
    position_actual: i32,
    /// The master's own following error of the last good cycle in operation enabled, counts.
    following_error: i32,
    /// 0x60F4 of the same cycle (`None`: not mapped, or not in operation enabled).
    drive_following_error: Option<i32>,
    /// The position set-point (counts) sent in the last good cycle in operation enabled.
    commanded: Option<i32>,
    /// Where the bad-cycle bound in effect comes from.
    hold_from: HoldFrom,
    stats: AxisStats,
    period_s: f64,
}

fn rank(s: State) -> u8 {
    match s {
        State::NotReadyToSwitchOn => 0,
        State::SwitchOnDisabled => 1,
        State::ReadyToSwitchOn => 2,
        State::SwitchedOn => 3,
        State::OperationEnabled => 4,
        _ => 0,
    }
}

fn counts(x: f64) -> i32 {
    // Saturating conversion (the config keeps targets inside INTEGER32).
    x.round().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
}

impl Axis {
    fn new(cfg: AxisConfig, period_s: f64) -> Axis {
        let drive = Drive::new(cfg.mode.mode(), cfg.policy());
        Axis {
            drive,
            io: None,
            seq: None,
            user_target: None,
            setpoint: Sample::default(),
            position_actual: 0,
            following_error: 0,
            drive_following_error: None,
            commanded: None,
            hold_from: match (cfg.on_bad_cycles, cfg.hold_bad_cycles) {
                (crate::axis::BadCycles::Hold, _) => HoldFrom::Unbounded,
                (_, Some(_)) => HoldFrom::Config,
                (_, None) => HoldFrom::Default,
            },
            stats: AxisStats {
                highest_state: None,
                following_error: rtcat_results::new_histogram(),
                drive_following_error: rtcat_results::new_histogram(),
                held_cycles: 0,
                longest_bad_run: 0,
                faults: 0,
                last_error: 0,
                quick_stops: 0,
            },
            period_s,
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AxisConfig {
        &self.cfg
    }

    /// The drive profile (state, policy, last error).
    pub fn drive(&self) -> &Drive {
        &self.drive
    }

    /// The measurements so far.
    pub fn stats(&self) -> &AxisStats {
        &self.stats
    }

    /// The subdevice position the axis is bound to (after `configure`).
    pub fn position(&self) -> Option<u16> {
        self.io.map(|i| i.position)
    }

    /// Position actual, units.
    pub fn actual(&self) -> f64 {
        f64::from(self.position_actual) / self.cfg.counts_per_unit
    }

    /// Following error, units: the master's own (the set-point sent minus the position
    /// actual), whatever the drive reports in 0x60F4.
    pub fn following_error(&self) -> f64 {
        f64::from(self.following_error) / self.cfg.counts_per_unit
    }

    /// The drive's following error actual 0x60F4, units (`None`: not mapped, or not in
    /// operation enabled).
    pub fn drive_following_error(&self) -> Option<f64> {
        self.drive_following_error
            .map(|f| f64::from(f) / self.cfg.counts_per_unit)
    }

    /// Bad cycles in a row held before a quick stop (`None`: `on_bad_cycles = "hold"`, no
    /// bound), and where the figure comes from.
    pub fn hold_bad_cycles(&self) -> (Option<u32>, HoldFrom) {
        match self.drive.policy().on_bad_cycles {
            crate::cia402::OnBadCycles::QuickStopAfter(n) => (Some(n), self.hold_from),
            crate::cia402::OnBadCycles::Hold => (None, HoldFrom::Unbounded),
        }
    }

    fn resolve(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        let c = &self.cfg;
        let p = bound_position(c, setup.subdevices())
            .ok_or_else(|| format!("axis {:?}: no subdevice matches its binding", c.name))?;
        // The axis maps its drive itself unless a [[device]] entry configures it; then that
        // entry's mapping (or the drive's own, without pdo_map) must hold what it needs.
        let named = |e: crate::layout::LayoutError| {
            format!(
                "axis {:?} (position {p}): {e} (a [[device]] entry for this drive keeps its \
                 mapping or the drive's own: delete it and the axis maps the drive itself)",
                c.name
            )
        };
        let (csp, csv) = (
            c.mode == crate::axis::AxisMode::Csp,
            c.mode == crate::axis::AxisMode::Csv,
        );
        self.io = Some(Io {
            position: p,
            controlword: setup.output_at(p, 0x6040, 0).map_err(named)?,
            mode: setup.output_at(p, 0x6060, 0).map_err(named)?,
            target_position: if csp {
                Some(setup.output_at(p, 0x607a, 0).map_err(named)?)
            } else {
                setup.output_at(p, 0x607a, 0).ok()
            },
            target_velocity: if csv {
                Some(setup.output_at(p, 0x60ff, 0).map_err(named)?)
            } else {
                setup.output_at(p, 0x60ff, 0).ok()
            },
            statusword: setup.input_at(p, 0x6041, 0).map_err(named)?,
            mode_display: setup.input_at(p, 0x6061, 0).map_err(named)?,
            position_actual: setup.input_at(p, 0x6064, 0).map_err(named)?,
            following_error: setup.input_at(p, 0x60f4, 0).ok(),
            error_code: setup.input_at(p, 0x603f, 0).ok(),
        });
        self.hold_from_drive(setup, p);
        Ok(())
    }

    /// Without `hold_bad_cycles` (and with `on_bad_cycles = "quick_stop"`), the bound is what
    /// the drive's sync error counter limit 0x10F1:02 tolerates, read now in PRE-OP; a drive
    /// without CoE or without the object (an abort), or with its check off (0), leaves
    /// [`crate::cia402::DEFAULT_HOLD_BAD_CYCLES`].
    fn hold_from_drive(&mut self, setup: &mut Setup<'_>, p: u16) {
        if self.cfg.on_bad_cycles != crate::axis::BadCycles::QuickStop
            || self.cfg.hold_bad_cycles.is_some()
        {
            return;
        }
        let coe = setup.subdevices().iter().any(|s| s.position == p && s.coe);
        let (index, sub) = crate::cia402::SYNC_ERROR_LIMIT;
        let mut b = [0u8; 4];
        let limit = match coe.then(|| setup.read_sdo(p, index, sub, &mut b)) {
            // UNSIGNED16 (the Slave Stack Code) or UNSIGNED32 (ETG.1020): little-endian either way.
            Some(Ok(n)) if (1..=4).contains(&n) => Some(u32::from_le_bytes(b)),
            _ => None,
        };
        let (n, from) = match limit.map(|l| (l, crate::cia402::hold_from_sync_error_limit(l))) {
            Some((l, Some(n))) => (n.min(crate::axis::MAX_HOLD_BAD_CYCLES), HoldFrom::Drive(l)),
            _ => (crate::cia402::DEFAULT_HOLD_BAD_CYCLES, HoldFrom::Default),
        };
        self.drive
            .set_on_bad_cycles(crate::cia402::OnBadCycles::QuickStopAfter(n));
        self.hold_from = from;
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let Some(io) = self.io else { return };
        let good = cx
            .status
            .subdevices
            .get(usize::from(io.position))
            .is_some_and(|s| s.data_valid)
            && !cx.status.frames_lost;
        let input = if good {
            DriveIn {
                statusword: cx.get(&io.statusword),
                mode_display: cx.get(&io.mode_display),
                position: cx.get(&io.position_actual),
                error_code: io.error_code.map_or(0, |e| cx.get(&e)),
            }
        } else {
            DriveIn::default()
        };
        let cpu = self.cfg.counts_per_unit;
        let set = Setpoint {
            position: counts(self.setpoint.position * cpu),
            velocity: counts(self.setpoint.velocity * cpu),
            torque: 0,
        };
        let r = self.drive.step(good, &input, set);
        self.count_bad_cycle(&r);
        if good {
            self.position_actual = input.position;
            if let Some(s) = self.drive.state()
                && (self.stats.highest_state.is_none()
                    || rank(s) > self.stats.highest_state.map_or(0, rank))
            {
                self.stats.highest_state = Some(s);
            }
            if r.fault_now {
                self.stats.faults += 1;
            }
            if self.drive.last_error() != 0 {
                self.stats.last_error = self.drive.last_error();
            }
        }
        let now_enabled = good && self.drive.state() == Some(State::OperationEnabled);
        if r.enabled_now {
            // Start the motion from where the drive stands (no jump).
            let at = f64::from(input.position) / cpu;
            self.setpoint = Sample {
                position: at,
                ..Sample::default()
            };
            if let Some(s) = &mut self.seq {
                s.restart(at);
            }
            if self.user_target.is_some() {
                self.user_target = Some(at);
            }
            self.commanded = Some(input.position);
        } else if now_enabled {
            self.follow(cx, &io, input.position, set.position);
            self.setpoint = match (self.user_target, &mut self.seq) {
                (Some(t), _) => Sample {
                    position: t,
                    ..Sample::default()
                },
                (None, Some(s)) => s.step(self.period_s),
                (None, None) => self.setpoint,
            };
        } else if good {
            self.commanded = None;
            self.following_error = 0;
            self.drive_following_error = None;
        }
        cx.set(&io.controlword, r.out.controlword);
        cx.set(&io.mode, r.out.mode);
        if let Some(t) = io.target_position {
            cx.set(&t, r.out.target_position);
        }
        if let Some(t) = io.target_velocity {
            cx.set(&t, r.out.target_velocity);
        }
    }

    /// The axis' entry of `summary.json`.
    pub fn summary(&self) -> rtcat_results::AxisSummary {
        let h = &self.stats.following_error;
        rtcat_results::AxisSummary {
            name: self.cfg.name.clone(),
            position: self.position(),
            mode: match self.cfg.mode {
                crate::axis::AxisMode::Csp => "csp".into(),
                crate::axis::AxisMode::Csv => "csv".into(),
            },
            state_reached: self.stats.highest_state.map(|s| s.name().to_string()),
            final_state: self.drive.state().map(|s| s.name().to_string()),
            following_error_counts: (!h.is_empty())
                .then(|| rtcat_results::LatencyStats::from_histogram(h)),
            drive_following_error_counts: (!self.stats.drive_following_error.is_empty()).then(
                || rtcat_results::LatencyStats::from_histogram(&self.stats.drive_following_error),
            ),
            hold_bad_cycles: self.hold_bad_cycles().0,
            hold_bad_cycles_from: Some(self.hold_bad_cycles().1.name().to_string()),
            drive_sync_error_limit: match self.hold_from {
                HoldFrom::Drive(l) => Some(l),
                _ => None,
            },
            held_cycles: self.stats.held_cycles,
            longest_bad_run: self.stats.longest_bad_run,
            counts_per_unit: self.cfg.counts_per_unit,
            faults: self.stats.faults,
            last_error_code: (self.stats.last_error != 0).then_some(self.stats.last_error),
            last_error_text: (self.stats.last_error != 0)
                .then(|| error_text(self.stats.last_error).to_string()),
            quick_stops: self.stats.quick_stops,
        }
    }

    /// The bad-cycle counters of one step: held cycles, the longest run, quick stops.
    fn count_bad_cycle(&mut self, r: &crate::cia402::StepOut) {
        if r.held {
            self.stats.held_cycles += 1;
        }
        if r.quick_stop_now {
            self.stats.quick_stops += 1;
        }
        self.stats.longest_bad_run = self.stats.longest_bad_run.max(self.drive.bad_run());
    }

    /// The following error of a good cycle in operation enabled: the master's own, the
    /// position set-point sent in the previous such cycle (`commanded`, which the drive has had
    /// one cycle to follow) minus the position actual read now, and 0x60F4 beside it when the
    /// drive maps it. `set` is the position set-point sent in this cycle.
    fn follow(&mut self, cx: &mut Cycle<'_>, io: &Io, actual: i32, set: i32) {
        if let Some(c) = self.commanded {
            self.following_error = c.saturating_sub(actual);
            self.stats
                .following_error
                .saturating_record(u64::from(self.following_error.unsigned_abs()));
        }
        self.drive_following_error = io.following_error.map(|f| cx.get(&f));
        if let Some(f) = self.drive_following_error {
            self.stats
                .drive_following_error
                .saturating_record(u64::from(f.unsigned_abs()));
        }
        self.commanded = Some(set);
    }
}

/// Where an axis' bound on bad cycles in a row comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldFrom {
    /// `hold_bad_cycles` in the configuration.
    Config,
    /// The drive's sync error counter limit 0x10F1:02 (the value read).
    Drive(u32),
    /// Neither: [`crate::cia402::DEFAULT_HOLD_BAD_CYCLES`].
    Default,
    /// `on_bad_cycles = "hold"`: no bound.
    Unbounded,
}

impl HoldFrom {
    /// As summary.json writes it.
    pub fn name(self) -> &'static str {
        match self {
            HoldFrom::Config => "config",
            HoldFrom::Drive(_) => "drive",
            HoldFrom::Default => "default",
            HoldFrom::Unbounded => "unbounded",
        }
    }
}

/// The position of the subdevice an axis is bound to (position, alias or identity), if any.
pub fn bound_position(c: &AxisConfig, subs: &[crate::layout::Subdevice]) -> Option<u16> {
    subs.iter()
        .find(|s| {
            if let Some(p) = c.position {
                return s.position == p;
            }
            if let Some(a) = c.alias {
                return s.alias == a;
            }
            Some(s.identity.vendor_id) == c.vendor_id
                && Some(s.identity.product_code) == c.product_id
                && c.revision.is_none_or(|r| r == s.identity.revision)
        })
        .map(|s| s.position)
}

/// The axes of a configuration.
#[derive(Debug, Clone, Default)]
pub struct Axes {
    axes: Vec<Axis>,
}

/// An axis name that is not configured.
#[derive(Debug, thiserror::Error)]
#[error("no axis {0:?} in the configuration")]
pub struct NoSuchAxis(pub String);

impl Axes {
    /// One axis per `[[axis]]` (the built-in program, if any, ready to run once enabled).
    pub fn from_config(cfg: &Config) -> Axes {
        let period_s = cfg.cycle.period().as_secs_f64();
        let axes = cfg
            .axis
            .iter()
            .map(|a| {
                let mut x = Axis::new(a.clone(), period_s);
                x.seq = a.program().map(|p| Sequencer::new(p, a.limits(), 0.0));
                x
            })
            .collect();
        Axes { axes }
    }

    /// The axes, in configuration order.
    pub fn axes(&self) -> &[Axis] {
        &self.axes
    }

    /// The index of the axis called `name` (look it up once, outside the cycle).
    pub fn index(&self, name: &str) -> Result<usize, NoSuchAxis> {
        self.axes
            .iter()
            .position(|a| a.cfg.name == name)
            .ok_or_else(|| NoSuchAxis(name.to_string()))
    }

    /// Resolve every axis' entries (call from [`Application::configure`]).
    pub fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        for a in &mut self.axes {
            a.resolve(setup)?;
        }
        Ok(())
    }

    /// Step every axis (call from [`Application::cycle`] before writing other outputs).
    pub fn cycle(&mut self, cx: &mut Cycle<'_>) {
        for a in &mut self.axes {
            a.cycle(cx);
        }
    }

    /// The segment is re-initialised (call from [`Application::on_recovery`]).
    pub fn on_recovery(&mut self) {
        for a in &mut self.axes {
            a.drive.on_recovery();
        }
    }

    /// One subdevice was brought back on its own (call from [`Application::on_subdevice`]):
    /// the axes on that drive start over as after a recovery (their drive went through INIT;
    /// `after_recovery` says whether they are enabled again). The others are not touched.
    pub fn on_subdevice(&mut self, event: &crate::application::SubdeviceEvent) {
        if !matches!(
            event.change,
            crate::application::SubdeviceChange::Back { .. }
        ) {
            return;
        }
        for a in &mut self.axes {
            if a.io.is_some_and(|io| io.position == event.position) {
                a.drive.on_recovery();
            }
        }
    }

    /// Ask axis `i` for operation enabled.
    pub fn enable(&mut self, i: usize) {
        self.axes[i].drive.enable();
    }

    /// Ask axis `i` to switch its power stage off.
    pub fn disable(&mut self, i: usize) {
        self.axes[i].drive.disable();
    }

    /// Ask for a fault reset of axis `i`.
    pub fn reset_fault(&mut self, i: usize) {
        self.axes[i].drive.reset_fault();
    }

    /// Command axis `i` to `units` (CSP), replacing its built-in program; clamped to the
    /// configured position limits. The caller keeps within the velocity/acceleration limits.
    /// Enabling resets the target to the actual position (no jump): set it once enabled.
    pub fn set_target(&mut self, i: usize, units: f64) {
        let a = &mut self.axes[i];
        let lo = a.cfg.min_position.unwrap_or(f64::NEG_INFINITY);
        let hi = a.cfg.max_position.unwrap_or(f64::INFINITY);
        a.user_target = Some(units.clamp(lo, hi));
    }

    /// The state of axis `i` (`None` before its first valid statusword).
    pub fn state(&self, i: usize) -> Option<State> {
        self.axes[i].drive.state()
    }

    /// The following error of axis `i`, units.
    pub fn following_error(&self, i: usize) -> f64 {
        self.axes[i].following_error()
    }

    /// The last fault of axis `i` as text (`None`: no fault seen).
    pub fn fault_text(&self, i: usize) -> Option<&'static str> {
        let e = self.axes[i].drive.last_error();
        (e != 0).then(|| error_text(e))
    }

    /// Whether every built-in program has ended.
    pub fn programs_done(&self) -> bool {
        self.axes
            .iter()
            .all(|a| a.seq.as_ref().is_none_or(Sequencer::done))
    }
}

/// What [`AxesApp`] shares with other threads (the control socket, the results): each axis'
/// live state while the run goes on — relaxed atomics the cyclic thread stores every cycle, no
/// lock, no allocation on its side — and the axes' summaries when the run ends.
#[derive(Debug, Clone, Default)]
pub struct AxesReport(std::sync::Arc<ReportInner>);

#[derive(Debug, Default)]
struct ReportInner {
    summaries: std::sync::Mutex<Vec<rtcat_results::AxisSummary>>,
    live: std::sync::OnceLock<Vec<AxisLive>>,
}

/// One axis as the cyclic thread last published it.
#[derive(Debug)]
struct AxisLive {
    name: String,
    /// Position of its drive; `u32::MAX` before the first bring-up.
    position: AtomicU32,
    /// 0: no state known; else [`State`] index + 1 (see [`state_code`]).
    state: AtomicU32,
    faults: AtomicU32,
    quick_stops: AtomicU32,
    following_error: AtomicI32,
    /// 0x60F4; `i64::MIN`: none.
    drive_following_error: AtomicI64,
    held_cycles: AtomicU64,
    last_error: AtomicU32,
}

/// One axis in [`AxesReport::live`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AxisLiveView {
    /// `[[axis]] name`.
    pub name: String,
    /// Position of its drive (None before the first bring-up).
    pub position: Option<u16>,
    /// CiA 402 state as last read (None: no valid statusword yet).
    pub state: Option<State>,
    /// Faults seen so far.
    pub faults: u32,
    /// Quick stops commanded because of bad cycles.
    pub quick_stops: u32,
    /// The master's own following error of the last good cycle (counts; 0 when not in
    /// operation enabled).
    pub following_error: i32,
    /// The drive's 0x60F4 of the same cycle (None: not mapped, or not in operation enabled).
    pub drive_following_error: Option<i32>,
    /// Bad cycles held so far (the last set-point kept, no quick stop).
    pub held_cycles: u64,
    /// The error code of the last fault (0: none).
    pub last_error: u16,
}

fn state_code(s: Option<State>) -> u32 {
    s.and_then(|s| State::ALL.iter().position(|&x| x == s))
        .map_or(0, |i| i as u32 + 1)
}

impl AxesReport {
    /// The axes' summaries as [`AxesApp`] left them at the end of the run (empty before).
    pub fn summaries(&self) -> Vec<rtcat_results::AxisSummary> {
        self.0
            .summaries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Each axis as the cyclic thread last published it (empty until an [`AxesApp`] uses this
    /// report).
    pub fn live(&self) -> Vec<AxisLiveView> {
        let Some(l) = self.0.live.get() else {
            return Vec::new();
        };
        l.iter()
            .map(|a| {
                let p = a.position.load(Ordering::Relaxed);
                let s = a.state.load(Ordering::Relaxed) as usize;
                AxisLiveView {
                    name: a.name.clone(),
                    position: u16::try_from(p).ok(),
                    state: s.checked_sub(1).and_then(|i| State::ALL.get(i).copied()),
                    faults: a.faults.load(Ordering::Relaxed),
                    quick_stops: a.quick_stops.load(Ordering::Relaxed),
                    following_error: a.following_error.load(Ordering::Relaxed),
                    drive_following_error: i32::try_from(
                        a.drive_following_error.load(Ordering::Relaxed),
                    )
                    .ok(),
                    held_cycles: a.held_cycles.load(Ordering::Relaxed),
                    last_error: a.last_error.load(Ordering::Relaxed) as u16,
                }
            })
            .collect()
    }

    fn set_summaries(&self, s: Vec<rtcat_results::AxisSummary>) {
        *self.0.summaries.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    /// Publish every axis (the cyclic thread: relaxed stores only).
    #[inline]
    fn publish(&self, axes: &Axes) {
        let Some(live) = self.0.live.get() else {
            return;
        };
        for (l, a) in live.iter().zip(&axes.axes) {
            l.position
                .store(a.position().map_or(u32::MAX, u32::from), Ordering::Relaxed);
            l.state
                .store(state_code(a.drive.state()), Ordering::Relaxed);
            l.faults.store(a.stats.faults, Ordering::Relaxed);
            l.quick_stops.store(a.stats.quick_stops, Ordering::Relaxed);
            l.following_error
                .store(a.following_error, Ordering::Relaxed);
            l.drive_following_error.store(
                a.drive_following_error.map_or(i64::MIN, i64::from),
                Ordering::Relaxed,
            );
            l.held_cycles.store(a.stats.held_cycles, Ordering::Relaxed);
            l.last_error
                .store(u32::from(a.stats.last_error), Ordering::Relaxed);
        }
    }
}

/// The built-in application of `[[axis]]`: every axis enabled, the configured moves run;
/// the outputs of other subdevices are held at zero.
#[derive(Debug, Default)]
pub struct AxesApp {
    /// The axes.
    pub axes: Axes,
    report: AxesReport,
}

impl AxesApp {
    /// The application for `cfg`'s axes; they are published to `report` every cycle and
    /// their summaries go there at shutdown. A report serves one application: a second one
    /// given the same report publishes nothing live.
    pub fn from_config(cfg: &Config, report: AxesReport) -> AxesApp {
        let mut axes = Axes::from_config(cfg);
        for i in 0..axes.axes.len() {
            axes.enable(i);
        }
        let _ = report.0.live.set(
            axes.axes
                .iter()
                .map(|a| AxisLive {
                    name: a.cfg.name.clone(),
                    position: AtomicU32::new(u32::MAX),
                    state: AtomicU32::new(0),
                    faults: AtomicU32::new(0),
                    quick_stops: AtomicU32::new(0),
                    following_error: AtomicI32::new(0),
                    drive_following_error: AtomicI64::new(i64::MIN),
                    held_cycles: AtomicU64::new(0),
                    last_error: AtomicU32::new(0),
                })
                .collect(),
        );
        AxesApp { axes, report }
    }
}

impl Axes {
    /// Every axis' entry of `summary.json`.
    pub fn summaries(&self) -> Vec<rtcat_results::AxisSummary> {
        self.axes.iter().map(Axis::summary).collect()
    }
}

impl Application for AxesApp {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.axes.configure(setup)
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        cx.image.outputs_mut().fill(0);
        self.axes.cycle(cx);
        self.report.publish(&self.axes);
    }

    fn on_recovery(&mut self, _r: &Recovery) {
        self.axes.on_recovery();
    }

    fn on_subdevice(&mut self, event: &crate::application::SubdeviceEvent) {
        self.axes.on_subdevice(event);
    }

    fn shutdown(&mut self, _reason: &crate::application::ShutdownReason) {
        // At the end of the run, off the cycle: allocating and locking are fine here.
        self.report.publish(&self.axes);
        self.report.set_summaries(self.axes.summaries());
    }
}

#[cfg(test)]
mod tests;
