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
    /// A manual command's motion, in place of the program until released (the board).
    manual: Option<Manual>,
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
            manual: None,
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
        if !self.bound_from_drive() {
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
        self.hold_from_limit(limit);
    }

    /// The bound is the drive's to say: `on_bad_cycles = "quick_stop"` without
    /// `hold_bad_cycles`.
    fn bound_from_drive(&self) -> bool {
        self.cfg.on_bad_cycles == crate::axis::BadCycles::QuickStop
            && self.cfg.hold_bad_cycles.is_none()
    }

    /// The bound from the drive's sync error counter limit (`None`: it has none, the default).
    fn hold_from_limit(&mut self, limit: Option<u32>) {
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
            if let Some(m) = &mut self.manual {
                m.restart(at);
            }
            self.commanded = Some(input.position);
        } else if now_enabled {
            self.follow(cx, &io, input.position, set.position);
            let manual = self.manual_step();
            self.setpoint = match (self.user_target, &mut self.seq) {
                _ if manual.is_some() => manual.unwrap_or(self.setpoint),
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
    /// `after_recovery` says whether they are enabled again). The others are not touched. An
    /// axis whose bound is its drive's takes the sync error counter limit the recovery read
    /// (a drive absent at the setup, which joined, or one replaced); without one it keeps its
    /// bound.
    pub fn on_subdevice(&mut self, event: &crate::application::SubdeviceEvent) {
        let crate::application::SubdeviceChange::Back {
            sync_error_limit, ..
        } = event.change
        else {
            return;
        };
        for a in &mut self.axes {
            if a.io.is_some_and(|io| io.position == event.position) {
                a.drive.on_recovery();
                if sync_error_limit.is_some() && a.bound_from_drive() {
                    a.hold_from_limit(sync_error_limit);
                }
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
    /// Writers of the command board take turns (the cycle never takes it).
    writers: std::sync::Mutex<()>,
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
    /// Manual commands and what the cycle made of them.
    slot: Slot,
    counts_per_unit: f64,
    min_position: f64,
    max_position: f64,
    max_velocity: f64,
}

/// One axis in [`AxesReport::live`].
#[derive(Debug, Clone, PartialEq)]
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
    /// Position actual, units.
    pub actual: f64,
    /// The manual command holding the axis ([`manual_name`]; `None`: its program runs).
    pub manual: Option<&'static str>,
    /// `min_position` (−∞ when not configured).
    pub min_position: f64,
    /// `max_position` (+∞ when not configured).
    pub max_position: f64,
    /// `max_velocity`, units/s.
    pub max_velocity: f64,
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
                    actual: f64::from(a.slot.actual.load(Ordering::Relaxed)) / a.counts_per_unit,
                    manual: manual_name(a.slot.mode.load(Ordering::Relaxed)),
                    min_position: a.min_position,
                    max_position: a.max_position,
                    max_velocity: a.max_velocity,
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
            l.slot.actual.store(a.position_actual, Ordering::Relaxed);
            l.slot.mode.store(
                a.manual.as_ref().map_or(0, |m| m.mode.code()),
                Ordering::Relaxed,
            );
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
                    slot: Slot::default(),
                    counts_per_unit: a.cfg.counts_per_unit,
                    min_position: a.cfg.min_position.unwrap_or(f64::NEG_INFINITY),
                    max_position: a.cfg.max_position.unwrap_or(f64::INFINITY),
                    max_velocity: a.cfg.max_velocity,
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
        if let Some(board) = self.report.0.live.get() {
            self.axes.take_commands(board, cx.status.wake_ns);
        }
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

// ---------------------------------------------------------------------------------------------
// Manual commands: the command board (written by the control socket, read by the cycle) and
// the manual motion it drives. Kept apart from the axes' cycle and bad-cycle handling.
// ---------------------------------------------------------------------------------------------

/// A manual command for one axis ([`AxesReport::command`]). A command takes the axis out of its
/// configured program until [`Command::Release`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Command {
    /// Ask for operation enabled.
    Enable,
    /// Switch the power stage off.
    Disable,
    /// Fault reset.
    ResetFault,
    /// Run at `velocity` units/s (signed) while the lease is renewed, within the limits.
    Jog {
        /// Units/s; |velocity| ≤ max_velocity.
        velocity: f64,
    },
    /// Move to `position` units (a planned rest-to-rest move) while the lease is renewed.
    MoveTo {
        /// Units, within min/max_position.
        position: f64,
    },
    /// A planned stop, then hold.
    Stop,
    /// A planned stop, then back to the configured program (from where the axis stands).
    Release,
}

impl Command {
    fn code(self) -> (u32, f64) {
        match self {
            Command::Enable => (1, 0.0),
            Command::Disable => (2, 0.0),
            Command::ResetFault => (3, 0.0),
            Command::Jog { velocity } => (4, velocity),
            Command::MoveTo { position } => (5, position),
            Command::Stop => (6, 0.0),
            Command::Release => (7, 0.0),
        }
    }

    fn of_code(kind: u32, value: f64) -> Option<Command> {
        Some(match kind {
            1 => Command::Enable,
            2 => Command::Disable,
            3 => Command::ResetFault,
            4 => Command::Jog { velocity: value },
            5 => Command::MoveTo { position: value },
            6 => Command::Stop,
            7 => Command::Release,
            _ => return None,
        })
    }

    /// Whether the command moves the axis and so holds only while its lease is renewed.
    pub fn is_motion(self) -> bool {
        matches!(self, Command::Jog { .. } | Command::MoveTo { .. })
    }
}

/// Why [`AxesReport::command`] or [`AxesReport::renew`] refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CommandError {
    /// No axes application publishes to this report (the run has no `[[axis]]`).
    #[error("no axes on this master (no [[axis]] in its configuration)")]
    NoAxes,
    /// No axis of that name.
    #[error("no axis {0:?} on this master")]
    NoSuchAxis(String),
    /// A value outside the axis' configured limits, or not finite.
    #[error("axis {axis:?}: {what}")]
    OutOfLimits {
        /// The axis.
        axis: String,
        /// Which value, and its limit.
        what: String,
    },
    /// The axis is not in a state for the command.
    #[error("axis {axis:?}: {why}")]
    NotNow {
        /// The axis.
        axis: String,
        /// Why.
        why: String,
    },
}

/// Shortest and longest lease of a motion command.
pub const LEASE_NS: std::ops::RangeInclusive<u64> = 20_000_000..=5_000_000_000;

/// One axis' slot on the command board: a seqlock written by the control side (writers take
/// [`ReportInner::writers`] in turn), read by the cycle without a lock: an odd `seq` is a
/// write under way, a `seq` that changed during the read is read again next cycle.
#[derive(Debug, Default)]
struct Slot {
    seq: std::sync::atomic::AtomicU64,
    kind: AtomicU32,
    value: std::sync::atomic::AtomicU64,
    /// CLOCK_MONOTONIC ns until which a motion command holds; renewed on its own.
    lease_until: std::sync::atomic::AtomicU64,
    /// The last `seq` the cycle applied (the cycle's store only).
    seen: std::sync::atomic::AtomicU64,
    /// `ManualMode::code` as the cycle last published it (0: the configured program).
    mode: AtomicU32,
    /// Position actual, counts, as last published.
    actual: AtomicI32,
}

impl Slot {
    /// The command written since the cycle last looked, if any (the cycle's side).
    #[inline]
    fn take(&self) -> Option<Command> {
        use std::sync::atomic::fence;
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 % 2 == 1 || s1 == self.seen.load(Ordering::Relaxed) {
            return None;
        }
        let kind = self.kind.load(Ordering::Relaxed);
        let value = f64::from_bits(self.value.load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != s1 {
            return None; // written meanwhile: read again next cycle
        }
        self.seen.store(s1, Ordering::Relaxed);
        Command::of_code(kind, value)
    }

    /// Put `c` on the slot (the writer's side, one writer at a time).
    fn put(&self, c: Command, lease_until: u64) {
        use std::sync::atomic::fence;
        let (kind, value) = c.code();
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.kind.store(kind, Ordering::Relaxed);
        self.value.store(value.to_bits(), Ordering::Relaxed);
        self.lease_until.store(lease_until, Ordering::Relaxed);
        self.seq.store(s + 2, Ordering::Release);
    }
}

/// What a manual command is doing.
// A planned move is kept in place: boxing it would allocate in the cycle.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy)]
enum ManualMode {
    /// At rest at the setpoint.
    Hold,
    /// Towards `velocity` (units/s) under the acceleration limit.
    Jog { velocity: f64 },
    /// A planned move, `t` s into it.
    Move { plan: crate::motion::Move, t: f64 },
    /// A planned stop (maximum deceleration), then `then`.
    Stop,
}

impl ManualMode {
    fn code(self) -> u32 {
        match self {
            ManualMode::Hold => 1,
            ManualMode::Jog { .. } => 2,
            ManualMode::Move { .. } => 3,
            ManualMode::Stop => 4,
        }
    }
}

/// What follows a planned stop.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Then {
    Hold,
    MoveTo(f64),
    Release,
}

/// The manual motion of one axis (in place of its program while a command holds it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Manual {
    mode: ManualMode,
    then: Then,
    /// The setpoint (units, units/s).
    at: Sample,
    /// The program is to take over again (set by a finished release; the axis clears it).
    released: bool,
}

/// The names of `ManualMode::code` (`None`: the axis runs its configured program).
pub fn manual_name(code: u32) -> Option<&'static str> {
    match code {
        1 => Some("holding"),
        2 => Some("jogging"),
        3 => Some("moving"),
        4 => Some("stopping"),
        _ => None,
    }
}

impl Manual {
    fn holding(at: f64) -> Manual {
        Manual {
            mode: ManualMode::Hold,
            then: Then::Hold,
            at: Sample {
                position: at,
                ..Sample::default()
            },
            released: false,
        }
    }

    /// In place of the program whose last setpoint is `at`: a moving axis first comes to a
    /// planned stop (no step in velocity; under a jerk limit, none in acceleration either).
    fn taking_over(at: Sample, jerk_limited: bool) -> Manual {
        Manual {
            mode: if at.velocity == 0.0 && (!jerk_limited || at.acceleration == 0.0) {
                ManualMode::Hold
            } else {
                ManualMode::Stop
            },
            then: Then::Hold,
            at: Sample {
                acceleration: if jerk_limited { at.acceleration } else { 0.0 },
                ..at
            },
            released: false,
        }
    }

    /// The drive was (re-)enabled at `at`: hold there.
    pub(crate) fn restart(&mut self, at: f64) {
        *self = Manual::holding(at);
    }

    fn bounds(cfg: &AxisConfig) -> (f64, f64) {
        (
            cfg.min_position.unwrap_or(f64::NEG_INFINITY),
            cfg.max_position.unwrap_or(f64::INFINITY),
        )
    }

    /// Apply a motion command (the others are the drive's).
    fn command(&mut self, c: Command, cfg: &AxisConfig) {
        let at_rest = matches!(self.mode, ManualMode::Hold);
        match c {
            Command::Jog { velocity } => {
                let v = cfg.max_velocity;
                self.mode = ManualMode::Jog {
                    velocity: if velocity.is_finite() {
                        velocity.clamp(-v, v)
                    } else {
                        0.0
                    },
                };
                self.then = Then::Hold;
            }
            Command::MoveTo { position } if position.is_finite() => {
                let (lo, hi) = Manual::bounds(cfg);
                let to = position.clamp(lo, hi);
                if at_rest {
                    self.start_move(to, cfg);
                } else {
                    self.mode = ManualMode::Stop;
                    self.then = Then::MoveTo(to);
                }
            }
            Command::Stop | Command::MoveTo { .. } => {
                if !at_rest {
                    self.mode = ManualMode::Stop;
                }
                self.then = Then::Hold;
            }
            Command::Release => {
                if at_rest {
                    self.released = true;
                } else {
                    self.mode = ManualMode::Stop;
                    self.then = Then::Release;
                }
            }
            Command::Enable | Command::Disable | Command::ResetFault => {}
        }
    }

    fn start_move(&mut self, to: f64, cfg: &AxisConfig) {
        let plan = crate::motion::Move::plan(self.at.position, to, &cfg.limits());
        self.mode = ManualMode::Move { plan, t: 0.0 };
        self.then = Then::Hold;
    }

    /// The lease of a motion command ran out: a planned stop, then hold.
    fn expire(&mut self) {
        if matches!(self.mode, ManualMode::Jog { .. } | ManualMode::Move { .. }) {
            self.mode = ManualMode::Stop;
            self.then = Then::Hold;
        }
    }

    /// One cycle of `dt` s: the next setpoint. Positions stay within min/max_position.
    pub(crate) fn step(&mut self, cfg: &AxisConfig, dt: f64) -> Sample {
        match self.mode {
            ManualMode::Hold => {
                self.at.velocity = 0.0;
                self.at.acceleration = 0.0;
            }
            ManualMode::Jog { velocity } => self.ramp(velocity, cfg, dt),
            ManualMode::Stop => {
                self.ramp(0.0, cfg, dt);
                // at rest: under a jerk limit, with the acceleration back to zero too
                if self.at.velocity == 0.0
                    && (cfg.max_jerk.is_none() || self.at.acceleration == 0.0)
                {
                    self.mode = ManualMode::Hold;
                    match self.then {
                        Then::Hold => {}
                        Then::MoveTo(to) => self.start_move(to, cfg),
                        Then::Release => self.released = true,
                    }
                }
            }
            ManualMode::Move { plan, t } => {
                let t = t + dt;
                self.at = plan.sample(t);
                self.mode = if t >= plan.duration() {
                    ManualMode::Hold
                } else {
                    ManualMode::Move { plan, t }
                };
            }
        }
        let (lo, hi) = Manual::bounds(cfg);
        if self.at.position <= lo || self.at.position >= hi {
            self.at.position = self.at.position.clamp(lo, hi);
        }
        self.at
    }

    /// Towards `target` units/s under the acceleration limit (and the jerk limit where the
    /// axis has one), braking in time for the position limits.
    fn ramp(&mut self, target: f64, cfg: &AxisConfig, dt: f64) {
        if let Some(j) = cfg.max_jerk {
            self.at = jerk_ramp(self.at, target, cfg, j, dt);
            return;
        }
        let a = cfg.max_acceleration;
        let (lo, hi) = Manual::bounds(cfg);
        let p = self.at.position;
        let v0 = self.at.velocity;
        // The fastest v (towards a limit `d` away) from which the axis still stops there at
        // deceleration a once this cycle's step, (v0 + v)/2·dt, is taken:
        // d − (v0 + v)·dt/2 ≥ v²/(2a). Met at rest, it stays met one step of a·dt at a time,
        // so braking never needs more than the acceleration limit.
        let cap = |d: f64, v0: f64| {
            let h = a * dt / 2.0;
            let disc = h * h + 2.0 * a * d.max(0.0) - a * v0 * dt;
            if disc > 0.0 { disc.sqrt() - h } else { 0.0 }
        };
        let mut vt = target.clamp(-cfg.max_velocity, cfg.max_velocity);
        vt = vt.min(cap(hi - p, v0));
        vt = vt.max(-cap(p - lo, -v0));
        let dv = (vt - v0).clamp(-a * dt, a * dt);
        let mut v = v0 + dv;
        let mut p = p + (v0 + v) / 2.0 * dt;
        if p >= hi || p <= lo {
            p = p.clamp(lo, hi);
            v = 0.0;
        }
        if vt == 0.0 && v.abs() < 1e-12 {
            v = 0.0;
        }
        self.at = Sample {
            position: p,
            velocity: v,
            acceleration: if dt > 0.0 { (v - v0) / dt } else { 0.0 },
        };
    }
}

/// One cycle of a jerk-limited velocity tracker towards `vt` (units/s): the acceleration a1
/// of this cycle is the largest (towards `vt`) from which ramping it back to zero at the jerk
/// limit still ends at `vt` and not past it (that ramp adds a1·|a1|/2J of velocity, exact for
/// the trapezoidal integration here), capped at ±A and changed by at most J·dt per cycle.
/// Deterministic and memoryless: the same state and target give the same step, which the
/// position-limit look-ahead of [`jerk_ramp`] relies on.
fn track(at: Sample, vt: f64, a_max: f64, j: f64, dt: f64) -> Sample {
    let (v0, a0) = (at.velocity, at.acceleration);
    // Mirrored so that the target lies ahead (or here).
    let s = if vt > v0 || (vt == v0 && a0 < 0.0) {
        1.0
    } else {
        -1.0
    };
    let (v0m, a0m, vtm) = (s * v0, s * a0, s * vt);
    // f(a1) = a1·|a1|/2J + a1·dt/2 + c ≤ 0 with v1 = v0 + (a0 + a1)·dt/2: the largest root.
    let c = v0m + a0m * dt / 2.0 - vtm;
    let h = j * dt / 2.0;
    let want = if c <= 0.0 {
        -h + (h * h - 2.0 * j * c).sqrt()
    } else {
        h - (h * h + 2.0 * j * c).sqrt()
    };
    let a1m = want.clamp(a0m - j * dt, a0m + j * dt).clamp(-a_max, a_max);
    let mut v1 = s * (v0m + (a0m + a1m) / 2.0 * dt);
    let mut a1 = s * a1m;
    // At the target (or past it) where the acceleration may stop within one cycle's jerk.
    if s * (v1 - vt) >= -1e-12 && a0.abs() <= j * dt * (1.0 + 1e-12) {
        v1 = vt;
        a1 = 0.0;
    }
    Sample {
        position: at.position + (v0 + v1) / 2.0 * dt,
        velocity: v1,
        acceleration: a1,
    }
}

/// How far past `at`'s position [`track`] towards 0 comes to rest (signed), simulated cycle by
/// cycle so it is exactly what a stop from there does; `None` when it takes more than `n`
/// cycles (never for a state the limits allow; treated as "brake now").
fn stop_point(mut at: Sample, a_max: f64, j: f64, dt: f64, n: usize) -> Option<f64> {
    for _ in 0..n {
        if at.velocity == 0.0 && at.acceleration == 0.0 {
            return Some(at.position);
        }
        at = track(at, 0.0, a_max, j, dt);
    }
    None
}

/// A jog's (or a planned stop's) cycle under the jerk limit `j`: one [`track`] step towards
/// `target`, unless the stop from the state it leads to would pass a position limit; then the
/// first step of that stop instead. By induction the stop from every state reached ends within
/// the limits (it did from rest), so the axis brakes smoothly onto a limit: never by the clamp
/// in `Manual::step`, never over the acceleration or jerk limit.
fn jerk_ramp(at: Sample, target: f64, cfg: &AxisConfig, j: f64, dt: f64) -> Sample {
    let a_max = cfg.max_acceleration;
    let (lo, hi) = Manual::bounds(cfg);
    let vt = target.clamp(-cfg.max_velocity, cfg.max_velocity);
    let next = track(at, vt, a_max, j, dt);
    if next.velocity == 0.0 && next.acceleration == 0.0 {
        return next;
    }
    // Far from both limits (beyond a bound on any stopping distance from `next`), no
    // simulation: v' (the speed once the acceleration is back to zero) for at most
    // |a|/J + v'/A + 2A/J seconds, plus two cycles.
    let a = next.acceleration.abs();
    let v = next.velocity.abs() + a * a / (2.0 * j);
    let reach = v * (a / j + v / a_max + 2.0 * a_max / j + 2.0 * dt);
    let room = if next.velocity > 0.0 || (next.velocity == 0.0 && next.acceleration > 0.0) {
        hi - next.position
    } else {
        next.position - lo
    };
    if room > reach {
        return next;
    }
    // the time bound T = reach / v, twice over, in cycles
    let cycles = (2.0 * reach / v.max(1e-9) / dt).ceil().min(1e6) as usize + 16;
    match stop_point(next, a_max, j, dt, cycles) {
        Some(p) if (lo..=hi).contains(&p) => next,
        _ => track(at, 0.0, a_max, j, dt),
    }
}

impl Axes {
    /// Apply the board's commands and leases to the axes (the cycle's side: atomics only).
    fn take_commands(&mut self, board: &[AxisLive], now_ns: u64) {
        for (a, l) in self.axes.iter_mut().zip(board) {
            if let Some(c) = l.slot.take() {
                a.manual_command(c);
            }
            if let Some(m) = &mut a.manual
                && now_ns > l.slot.lease_until.load(Ordering::Relaxed)
            {
                m.expire();
            }
        }
    }
}

impl Axis {
    fn manual_command(&mut self, c: Command) {
        match c {
            Command::Enable => self.drive.enable(),
            Command::Disable => self.drive.disable(),
            Command::ResetFault => self.drive.reset_fault(),
            _ => {}
        }
        let at = self.setpoint;
        let jerk_limited = self.cfg.max_jerk.is_some();
        let m = self
            .manual
            .get_or_insert_with(|| Manual::taking_over(at, jerk_limited));
        if matches!(c, Command::Disable) {
            // The power stage goes off: nothing moves, the next enable starts at the actual.
            *m = Manual::holding(at.position);
        }
        m.command(c, &self.cfg);
    }

    /// The manual setpoint of this cycle, if a manual command holds the axis; a finished
    /// release hands the axis back to its program (restarted where it stands).
    fn manual_step(&mut self) -> Option<Sample> {
        let m = self.manual.as_mut()?;
        let s = m.step(&self.cfg, self.period_s);
        if m.released {
            self.manual = None;
            if let Some(q) = &mut self.seq {
                q.restart(s.position);
            }
        }
        Some(s)
    }
}

impl AxesReport {
    fn board(&self) -> Result<&[AxisLive], CommandError> {
        self.0
            .live
            .get()
            .map(Vec::as_slice)
            .ok_or(CommandError::NoAxes)
    }

    fn axis(&self, name: &str) -> Result<&AxisLive, CommandError> {
        self.board()?
            .iter()
            .find(|a| a.name == name)
            .ok_or_else(|| CommandError::NoSuchAxis(name.to_string()))
    }

    /// Put `c` on axis `name`'s board for the cycle to take; a motion command holds until
    /// `lease_ns` from now unless [`AxesReport::renew`]ed. Values are checked against the
    /// axis' configured limits (the cycle clamps them again), motion wants operation enabled.
    pub fn command(&self, name: &str, c: Command, lease_ns: u64) -> Result<(), CommandError> {
        let a = self.axis(name)?;
        let out = |what: String| CommandError::OutOfLimits {
            axis: name.to_string(),
            what,
        };
        match c {
            Command::Jog { velocity }
                if !velocity.is_finite() || velocity.abs() > a.max_velocity =>
            {
                return Err(out(format!(
                    "velocity = {velocity}: must be within ±{} units/s (max_velocity)",
                    a.max_velocity
                )));
            }
            Command::MoveTo { position }
                if !position.is_finite()
                    || position < a.min_position
                    || position > a.max_position =>
            {
                return Err(out(format!(
                    "position = {position}: must be within {}..={} units (min/max_position)",
                    a.min_position, a.max_position
                )));
            }
            _ => {}
        }
        if c.is_motion()
            && a.state.load(Ordering::Relaxed) != state_code(Some(State::OperationEnabled))
        {
            return Err(CommandError::NotNow {
                axis: name.to_string(),
                why: "not in operation enabled: enable it first".into(),
            });
        }
        let lease = lease_ns.clamp(*LEASE_NS.start(), *LEASE_NS.end());
        let _w = self.0.writers.lock().unwrap_or_else(|e| e.into_inner());
        a.slot.put(c, crate::clock::now_ns().saturating_add(lease));
        Ok(())
    }

    /// Extend the lease of axis `name`'s running motion command to `lease_ns` from now. Refused
    /// when no motion command runs (its lease ran out, or it ended): motion never restarts from
    /// a renewal.
    pub fn renew(&self, name: &str, lease_ns: u64) -> Result<(), CommandError> {
        let a = self.axis(name)?;
        let mode = a.slot.mode.load(Ordering::Relaxed);
        let pending = a.slot.seq.load(Ordering::Acquire) != a.slot.seen.load(Ordering::Relaxed);
        if !pending && !matches!(mode, 2 | 3) {
            return Err(CommandError::NotNow {
                axis: name.to_string(),
                why: format!(
                    "no motion to renew (it is {})",
                    manual_name(mode).unwrap_or("running its program")
                ),
            });
        }
        let lease = lease_ns.clamp(*LEASE_NS.start(), *LEASE_NS.end());
        a.slot.lease_until.store(
            crate::clock::now_ns().saturating_add(lease),
            Ordering::Relaxed,
        );
        Ok(())
    }
}

#[cfg(test)]
mod board_tests {
    use super::*;

    const DT: f64 = 0.001;
    const MS: u64 = 1_000_000;

    /// Axis x with trapezoidal manual ramps (no jerk limit).
    fn cfg() -> Config {
        cfg_with("")
    }

    const J: f64 = 10000.0;

    /// Axis x under the jerk limit `J`.
    fn jerk_cfg() -> Config {
        cfg_with("max_jerk = 10000.0")
    }

    fn cfg_with(extra: &str) -> Config {
        Config::parse(
            &format!(
                r#"
[cycle]
period_us = 1000
[[axis]]
name = "x"
position = 0
counts_per_unit = 10000.0
min_position = -10.0
max_position = 110.0
max_velocity = 50.0
max_acceleration = 500.0
{extra}
profile = {{ from = 0.0, to = 100.0, dwell_s = 0.2 }}
"#
            ),
            "board.toml",
        )
        .expect("config")
    }

    /// The app with axis x in operation enabled at `at` under a manual hold (as the cycle
    /// would have left it), its state published.
    fn enabled(at: f64) -> (AxesApp, AxesReport) {
        enabled_with(at, &cfg())
    }

    fn enabled_with(at: f64, cfg: &Config) -> (AxesApp, AxesReport) {
        let report = AxesReport::default();
        let mut app = AxesApp::from_config(cfg, report.clone());
        app.axes.axes[0].setpoint.position = at;
        let live = &report.0.live.get().unwrap()[0];
        live.state
            .store(state_code(Some(State::OperationEnabled)), Ordering::Relaxed);
        (app, report)
    }

    /// One cycle at `now` of the board and axis x's manual motion (what `AxesApp::cycle`
    /// and `Axis::cycle` do with them), publishing the mode.
    fn cycle(app: &mut AxesApp, now: u64) -> Option<Sample> {
        let board = app.report.0.live.get().unwrap();
        app.axes.take_commands(board, now);
        let s = app.axes.axes[0].manual_step();
        if let Some(s) = s {
            app.axes.axes[0].setpoint = s;
        }
        board[0].slot.mode.store(
            app.axes.axes[0]
                .manual
                .as_ref()
                .map_or(0, |m| m.mode.code()),
            Ordering::Relaxed,
        );
        s
    }

    #[test]
    fn a_command_is_taken_once_and_not_while_being_written() {
        let s = Slot::default();
        assert_eq!(s.take(), None);
        s.put(Command::Jog { velocity: -2.5 }, 7);
        assert_eq!(s.take(), Some(Command::Jog { velocity: -2.5 }));
        assert_eq!(s.take(), None, "taken once");
        assert_eq!(s.lease_until.load(Ordering::Relaxed), 7);
        s.put(Command::Stop, 8);
        // A writer half-way (odd sequence): not taken until it is done.
        s.seq.fetch_add(1, Ordering::Relaxed);
        assert_eq!(s.take(), None);
        s.seq.fetch_add(1, Ordering::Relaxed);
        assert_eq!(s.take(), Some(Command::Stop));
    }

    #[test]
    fn values_outside_the_limits_and_motion_when_not_enabled_are_refused() {
        let (_app, report) = enabled(0.0);
        let e = report
            .command("x", Command::Jog { velocity: 50.1 }, 300 * MS)
            .unwrap_err();
        assert!(e.to_string().contains("velocity = 50.1"), "{e}");
        for p in [110.5, -10.5, f64::NAN, f64::INFINITY] {
            let e = report
                .command("x", Command::MoveTo { position: p }, 300 * MS)
                .unwrap_err();
            assert!(e.to_string().contains("min/max_position"), "{p}: {e}");
        }
        assert_eq!(
            report.command("z", Command::Stop, 0),
            Err(CommandError::NoSuchAxis("z".into()))
        );
        assert_eq!(
            AxesReport::default().command("x", Command::Stop, 0),
            Err(CommandError::NoAxes)
        );
        report.0.live.get().unwrap()[0]
            .state
            .store(state_code(Some(State::SwitchOnDisabled)), Ordering::Relaxed);
        let e = report
            .command("x", Command::Jog { velocity: 1.0 }, 300 * MS)
            .unwrap_err();
        assert!(e.to_string().contains("not in operation enabled"), "{e}");
        report.command("x", Command::Enable, 0).expect("enable");
    }

    #[test]
    fn a_jog_ramps_under_the_acceleration_limit_and_stops_at_max_position() {
        let c = cfg();
        let a = &c.axis[0];
        let mut m = Manual::holding(100.0);
        m.command(Command::Jog { velocity: 50.0 }, a);
        let mut last = m.at;
        for _ in 0..2000 {
            let s = m.step(a, DT);
            assert!(s.position <= 110.0, "past max_position: {s:?}");
            assert!(s.velocity <= 50.0 + 1e-9, "{s:?}");
            assert!(
                (s.velocity - last.velocity).abs() <= 500.0 * DT + 1e-9,
                "acceleration over the limit: {last:?} -> {s:?}"
            );
            last = s;
        }
        assert!((last.position - 110.0).abs() < 1e-9, "{last:?}");
        assert_eq!(last.velocity, 0.0);
        // The other way, at a velocity over the limit (the cycle clamps it too).
        m.command(Command::Jog { velocity: -1e9 }, a);
        let mut top = 0.0f64;
        for _ in 0..5000 {
            let s = m.step(a, DT);
            top = top.max(s.velocity.abs());
            assert!(s.position >= -10.0, "{s:?}");
        }
        assert!(top <= 50.0 + 1e-9, "{top}");
        assert!((m.at.position + 10.0).abs() < 1e-9, "{:?}", m.at);
    }

    #[test]
    fn a_jog_stops_when_its_lease_runs_out_and_a_renewal_keeps_it_going() {
        let (mut app, report) = enabled(0.0);
        let t0 = 1_000 * MS;
        // Commands put "now" (the clock's), the cycle runs on its own clock from t0: give the
        // lease in the cycle's terms.
        report
            .command("x", Command::Jog { velocity: 20.0 }, 300 * MS)
            .unwrap();
        let slot = &report.0.live.get().unwrap()[0].slot;
        slot.lease_until.store(t0 + 300 * MS, Ordering::Relaxed);
        let mut now = t0;
        let mut s = Sample::default();
        // 250 ms: accelerating (20 units/s reached after 40 ms), still moving.
        for _ in 0..250 {
            now += MS;
            s = cycle(&mut app, now).expect("manual");
        }
        assert_eq!(s.velocity, 20.0, "{s:?}");
        assert!(report.live()[0].manual == Some("jogging"));
        // A renewal at 250 ms: still going at 500 ms.
        report.renew("x", 300 * MS).unwrap();
        slot.lease_until.store(now + 300 * MS, Ordering::Relaxed);
        for _ in 0..250 {
            now += MS;
            s = cycle(&mut app, now).unwrap();
        }
        assert_eq!(s.velocity, 20.0, "renewed: {s:?}");
        // No renewal: the lease ends 300 ms after the last one, then a planned stop at the
        // acceleration limit (20/500 s = 40 ms), then hold.
        let mut stopped_at = None;
        for k in 0..400u64 {
            now += MS;
            let p = s;
            s = cycle(&mut app, now).unwrap();
            assert!((s.velocity - p.velocity).abs() <= 500.0 * DT + 1e-9);
            if s.velocity == 0.0 && stopped_at.is_none() {
                stopped_at = Some(k);
            }
        }
        let k = stopped_at.expect("stopped") as f64;
        assert!(
            (50.0..=50.0 + 41.0).contains(&k),
            "stopped {k} ms after the renewal's lease (50 ms left) instead of 40 ms later"
        );
        let held = s.position;
        for _ in 0..100 {
            now += MS;
            s = cycle(&mut app, now).unwrap();
        }
        assert_eq!(s.position, held, "holds");
        assert_eq!(report.live()[0].manual, Some("holding"));
        // A late renewal does not restart it.
        let e = report.renew("x", 300 * MS).unwrap_err();
        assert!(e.to_string().contains("no motion to renew"), "{e}");
    }

    #[test]
    fn a_move_stops_short_when_its_lease_ends_and_reaches_its_target_when_held() {
        let (mut app, report) = enabled(0.0);
        let slot = &report.0.live.get().unwrap()[0].slot;
        let mut now = 1_000 * MS;
        report
            .command("x", Command::MoveTo { position: 30.0 }, 300 * MS)
            .unwrap();
        slot.lease_until.store(now + 200 * MS, Ordering::Relaxed);
        let mut s = Sample::default();
        for _ in 0..2000 {
            now += MS;
            s = cycle(&mut app, now).unwrap();
        }
        assert!(
            s.position > 0.5 && s.position < 20.0,
            "stopped short: {s:?}"
        );
        assert_eq!(s.velocity, 0.0);
        // Held to the end (renewed every 100 ms): exactly the target, at rest.
        report
            .command("x", Command::MoveTo { position: 30.0 }, 300 * MS)
            .unwrap();
        for k in 0..3000u64 {
            if k % 100 == 0 {
                slot.lease_until.store(now + 300 * MS, Ordering::Relaxed);
            }
            now += MS;
            s = cycle(&mut app, now).unwrap();
        }
        assert_eq!(s.position, 30.0, "{s:?}");
        assert_eq!(report.live()[0].manual, Some("holding"));
    }

    #[test]
    fn a_command_takes_a_moving_axis_over_without_a_step_in_velocity() {
        let (mut app, report) = enabled(0.0);
        app.axes.axes[0].setpoint = Sample {
            position: 40.0,
            velocity: 45.0,
            acceleration: 0.0,
        };
        report.command("x", Command::Stop, 0).unwrap();
        let mut last = app.axes.axes[0].setpoint;
        let now = 1_000 * MS;
        for k in 0..200 {
            let s = cycle(&mut app, now + k * MS).unwrap();
            assert!(
                (s.velocity - last.velocity).abs() <= 500.0 * DT + 1e-9,
                "{last:?} -> {s:?}"
            );
            last = s;
        }
        assert_eq!(last.velocity, 0.0);
        // 45²/(2·500) = 2.0 units of braking.
        assert!((last.position - 42.0).abs() < 0.05, "{last:?}");
    }

    #[test]
    fn release_hands_the_axis_back_to_its_program_and_disable_holds_it() {
        let (mut app, report) = enabled(5.0);
        report.command("x", Command::Disable, 0).unwrap();
        let now = 1_000 * MS;
        assert_eq!(cycle(&mut app, now).map(|s| s.position), Some(5.0));
        assert!(app.axes.axes[0].manual.is_some(), "out of its program");
        report.command("x", Command::Release, 0).unwrap();
        cycle(&mut app, now + MS);
        assert!(app.axes.axes[0].manual.is_none(), "back to its program");
        assert_eq!(cycle(&mut app, now + 2 * MS), None);
    }

    /// Every step of `s` from `last` within the limits: velocity, acceleration, jerk, and
    /// integrated (a clamped position would not be).
    fn smooth(last: Sample, s: Sample, ctx: &str) {
        assert!(s.velocity.abs() <= 50.0 + 1e-9, "{ctx}: {s:?}");
        assert!(s.acceleration.abs() <= 500.0 + 1e-9, "{ctx}: {s:?}");
        assert!(
            (s.acceleration - last.acceleration).abs() <= J * DT * (1.0 + 1e-9),
            "{ctx}: jerk over the limit: {last:?} -> {s:?}"
        );
        // (the last cycle of a ramp lands on the target velocity exactly: a rounding of less
        // than one cycle's jerk)
        assert!(
            (s.velocity - last.velocity - (s.acceleration + last.acceleration) / 2.0 * DT).abs()
                <= J * DT * DT,
            "{ctx}: {last:?} -> {s:?}"
        );
        assert!(
            (s.position - last.position - (s.velocity + last.velocity) / 2.0 * DT).abs() < 1e-9,
            "{ctx}: not integrated (clamped?): {last:?} -> {s:?}"
        );
    }

    #[test]
    fn a_jog_under_a_jerk_limit_changes_its_acceleration_smoothly_and_brakes_onto_the_limit() {
        let c = jerk_cfg();
        let a = &c.axis[0];
        for (from, v, limit) in [
            (100.0, 50.0, 110.0),
            (90.0, -1e9, -10.0),
            (80.0, 3.0, 110.0),
        ] {
            let mut m = Manual::holding(from);
            m.command(Command::Jog { velocity: v }, a);
            let mut last = m.at;
            let mut top = 0.0f64;
            for k in 0..20_000 {
                let s = m.step(a, DT);
                smooth(last, s, &format!("jog {v} from {from}, cycle {k}"));
                assert!((-10.0..=110.0).contains(&s.position), "{s:?}");
                top = top.max(s.velocity.abs());
                last = s;
            }
            assert_eq!((last.velocity, last.acceleration), (0.0, 0.0), "{last:?}");
            // braking starts as late as the stop allows: it ends within a cycle's travel
            assert!(
                (last.position - limit).abs() < top * DT,
                "jog {v}: at rest at {} (limit {limit})",
                last.position
            );
        }
    }

    #[test]
    fn a_jog_under_a_jerk_limit_reaches_its_velocity_and_stops_in_the_s_curve_time() {
        let (mut app, report) = enabled_with(0.0, &jerk_cfg());
        let slot = &report.0.live.get().unwrap()[0].slot;
        let mut now = 1_000 * MS;
        report
            .command("x", Command::Jog { velocity: 40.0 }, 300 * MS)
            .unwrap();
        slot.lease_until.store(now + 200 * MS, Ordering::Relaxed);
        let mut last = app.axes.axes[0].setpoint;
        let mut reached = None;
        let mut stopped = None;
        for k in 0..500u64 {
            now += MS;
            let s = cycle(&mut app, now).expect("manual");
            smooth(last, s, &format!("cycle {k}"));
            if s.velocity == 40.0 && reached.is_none() {
                reached = Some(k + 1);
            }
            if k > 200 && s.velocity == 0.0 && s.acceleration == 0.0 && stopped.is_none() {
                stopped = Some(k + 1 - 200);
            }
            last = s;
        }
        // 40 units/s ≥ A²/J = 25: A/J + v/A = 50 + 80 = 130 ms to reach it (a trapezoid: 80
        // ms), as long to stop again after the lease; the tracker's discrete ramp within ±3.
        let (r, st) = (
            reached.expect("reached") as f64,
            stopped.expect("stopped") as f64,
        );
        assert!((127.0..=133.0).contains(&r), "reached 40 after {r} ms");
        assert!(
            (127.0..=133.0).contains(&st),
            "stopped {st} ms after the lease"
        );
        assert_eq!(report.live()[0].manual, Some("holding"));
    }

    #[test]
    fn a_command_takes_an_accelerating_axis_over_without_a_step_in_acceleration() {
        let (mut app, report) = enabled_with(0.0, &jerk_cfg());
        app.axes.axes[0].setpoint = Sample {
            position: 40.0,
            velocity: 30.0,
            acceleration: 400.0,
        };
        report.command("x", Command::Stop, 0).unwrap();
        let mut last = app.axes.axes[0].setpoint;
        let now = 1_000 * MS;
        for k in 0..400 {
            let s = cycle(&mut app, now + k * MS).unwrap();
            smooth(last, s, &format!("cycle {k}"));
            last = s;
        }
        assert_eq!((last.velocity, last.acceleration), (0.0, 0.0));
        assert_eq!(report.live()[0].manual, Some("holding"));
    }
}
