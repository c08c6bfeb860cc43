//! The phase lock of the cyclic thread's deadline to the DC reference clock: a PI controller on
//! where each cycle's frame passed the reference clock against the SYNC0 grid (see [`crate::dc`]
//! for the why and the sources). Pure arithmetic on ns: no clock, no bus, no allocation. A leaf,
//! so the cycle and the live counters use it without importing the `[dc]` section's module.

use serde::Deserialize;

/// The phase lock's state, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LockState {
    /// Pulling the phase in: the error has not yet stayed inside the lock window.
    Locking,
    /// The mean |phase error| (≈ 16 cycles) stayed inside [`PhaseLockParams::lock_ns`] for
    /// [`PhaseLockParams::lock_cycles`] cycles.
    Locked,
    /// Was locked, then the mean |phase error| stayed beyond [`PhaseLockParams::lost_ns`] for
    /// [`PhaseLockParams::lost_cycles`] cycles. Becomes `Locked` again by the same rule.
    Lost,
}

impl LockState {
    /// The name used in results and status lines.
    pub fn as_str(self) -> &'static str {
        match self {
            LockState::Locking => "locking",
            LockState::Locked => "locked",
            LockState::Lost => "lost",
        }
    }
}

/// Gains and thresholds of [`PhaseLock`].
///
/// The loop: `e[k]` is the phase error (ns) of cycle k, `d` the drift per cycle (ns) between
/// CLOCK_MONOTONIC and the reference clock, `u[k]` the correction applied to the next deadline.
/// Then `e[k+1] = e[k] + d - u[k]` with `u = kp*e + ki*Σe`: closed-loop poles are the roots of
/// `z² - (2 - kp - ki) z + (1 - kp)`. With kp = 0.1, ki = 0.005 they are `0.948 ± 0.047j`
/// (|z| = 0.949, damping ratio ≈ 0.72): an error decays by e⁻¹ in about 19 cycles, a step is
/// pulled in within about 80 cycles with ≈ 4 % overshoot, and a cycle's jitter `j` moves the
/// next deadline by only `0.1 j`. The integral settles at the drift (zero steady-state error for
/// a constant drift: type-2 loop). SOEM's `ec_sync()` in `test/linux/red_test` uses the same
/// structure with a smaller proportional term (1/100) and a sign-integral; IgH's dc_user example
/// instead moves the reference clock to the master. Lower gains would filter more jitter but
/// lock slower; at 1 ms, 80 cycles is 80 ms of a bring-up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseLockParams {
    /// Proportional gain (per cycle).
    pub kp: f64,
    /// Integral gain (per cycle).
    pub ki: f64,
    /// Largest correction of one deadline, ns: a wild sample (a frame delayed by the kernel)
    /// moves the cycle by at most this.
    pub max_step_ns: i64,
    /// Largest drift the integral may represent, ppm (anti-windup). Quartz oscillators of ESCs
    /// and SoCs are within ±100 ppm (ESC datasheet: 25 MHz ±25 ppm reference).
    pub max_drift_ppm: f64,
    /// Lock window, ns.
    pub lock_ns: i64,
    /// Cycles inside the lock window before `Locked`.
    pub lock_cycles: u32,
    /// Loss threshold, ns.
    pub lost_ns: i64,
    /// Cycles beyond the loss threshold before `Lost`.
    pub lost_cycles: u32,
}

impl PhaseLockParams {
    /// The defaults for a cycle of `period_ns`: thresholds scale with the period (lock window
    /// 2 % of it but at least 5 µs: the wake-up jitter of a tuned RK3588 is a few µs, a
    /// drive's SYNC0 margin with the default shift is half the period; loss at 10 %). Both are
    /// compared with the mean |error| of the last ≈ 16 cycles: locked after 100 cycles with
    /// that mean inside the window, lost after 10 with it beyond the loss threshold.
    pub fn for_period(period_ns: u64) -> Self {
        let p = period_ns as i64;
        PhaseLockParams {
            kp: 0.1,
            ki: 0.005,
            max_step_ns: p / 10,
            max_drift_ppm: 500.0,
            lock_ns: (p / 50).max(5_000),
            lock_cycles: 100,
            lost_ns: (p / 10).max(20_000),
            lost_cycles: 10,
        }
    }
}

/// Cycles of the exponential average behind [`PhaseLock::drift_ppm`].
const DRIFT_AVERAGE_CYCLES: f64 = 256.0;
/// Cycles of the exponential average of |error| the lock state is decided on.
const LOCK_AVERAGE_CYCLES: f64 = 16.0;
/// Cycles of the exponential average of the send delay (deadline → frame handed to the link).
const SEND_DELAY_AVERAGE_CYCLES: f64 = 64.0;

/// The PI controller locking the cyclic thread's deadline to the DC grid. Plain numbers, no
/// allocation, no system call: it runs in the cycle.
#[derive(Debug, Clone)]
pub struct PhaseLock {
    params: PhaseLockParams,
    period: i64,
    target: i64,
    integral: f64,
    drift: f64,
    carry: f64,
    max_integral: f64,
    state: LockState,
    run: u32,
    last_error: i64,
    last_grid_error: i64,
    send_delay: Option<f64>,
    mean_abs: f64,
    /// Corrections applied since the lock was last acquired (ns, controller sign) and cycles.
    locked_sum: f64,
    locked_cycles: u64,
}

impl PhaseLock {
    /// A controller for a SYNC0 period of `period_ns`, holding the frame at `target_ns` after a
    /// SYNC0 pulse (the configured shift).
    pub fn new(period_ns: u64, target_ns: u64, params: PhaseLockParams) -> Self {
        let period = period_ns.max(1) as i64;
        PhaseLock {
            params,
            period,
            target: (target_ns as i64).rem_euclid(period),
            integral: 0.0,
            drift: 0.0,
            carry: 0.0,
            max_integral: params.max_drift_ppm * 1e-6 * period as f64,
            state: LockState::Locking,
            run: 0,
            last_error: 0,
            last_grid_error: 0,
            send_delay: None,
            // Start "far": a first small error must not count as a held lock at once.
            mean_abs: (period / 2) as f64,
            locked_sum: 0.0,
            locked_cycles: 0,
        }
    }

    /// Forget the state (recovery: the DC grid is configured anew).
    pub fn reset(&mut self) {
        self.integral = 0.0;
        self.drift = 0.0;
        self.carry = 0.0;
        self.state = LockState::Locking;
        self.run = 0;
        self.last_error = 0;
        self.last_grid_error = 0;
        self.send_delay = None;
        self.mean_abs = (self.period / 2) as f64;
        self.locked_sum = 0.0;
        self.locked_cycles = 0;
    }

    /// Phase error of a frame that passed the reference clock at DC time `dc_time_ns`: signed,
    /// in `(-period/2, period/2]`; positive = the frame is late against its place on the grid.
    pub fn phase_error(&self, dc_time_ns: u64) -> i64 {
        let phase = (dc_time_ns % self.period as u64) as i64;
        let mut e = (phase - self.target).rem_euclid(self.period);
        if e > self.period / 2 {
            e -= self.period;
        }
        e
    }

    /// Feed one cycle: the DC time its frame passed the reference clock at (ethercrab's
    /// `CycleInfo::dc_system_time`) and its send delay (ns from the cycle's deadline to the
    /// frame handed to the link: wake-up lateness plus building the frame); returns the
    /// correction in ns to add to the next absolute deadline (negative = wake earlier).
    ///
    /// The frame's error (what is reported, [`Self::last_error_ns`]) is the deadline's place on
    /// the DC grid plus the send delay. The deadline is what the controller moves, so it and the
    /// lock state work on the deadline's error: the frame's minus this cycle's send delay
    /// beyond its running mean ([`Self::mean_send_delay_ns`]). A late wake-up or a slow frame
    /// (an interrupt, a preempted vCPU: hundreds of µs on a shared VM) then moves neither the
    /// next deadline nor the drift estimate nor the lock state, and the mean frame, not the
    /// mean deadline, sits at the target. CLOCK_MONOTONIC and the DC differ by ppm: over a
    /// send delay, ns.
    pub fn update(&mut self, dc_time_ns: u64, send_delay_ns: u64) -> i64 {
        self.last_error = self.phase_error(dc_time_ns);
        let d = send_delay_ns.min(self.period as u64) as f64;
        let mean = *self.send_delay.get_or_insert(d);
        let e = self.phase_error(dc_time_ns.wrapping_add_signed((mean - d).round() as i64));
        self.last_grid_error = e;
        // The mean follows the usual delay: a delay more than the lock window above it (the
        // outliers this is for) counts only up to there.
        let lim = mean + self.params.lock_ns as f64;
        self.send_delay = Some(mean + (d.min(lim) - mean) / SEND_DELAY_AVERAGE_CYCLES);
        let was_locked = self.state == LockState::Locked;
        self.track(e);
        let p = &self.params;
        // Locked, an error beyond the lock window is most likely one late wake-up or a frame
        // held in the kernel, not the clocks: it counts only up to the window, so a single
        // outlier kicks neither the cycle nor the drift estimate. If it persists the lock is
        // lost after `lost_cycles` and the full error is used again.
        let ef = if was_locked {
            e.clamp(-p.lock_ns, p.lock_ns)
        } else {
            e
        } as f64;
        // Far from the grid (pull-in) the integral stays put: the proportional term alone
        // brings the phase within `lost_ns` (its steady error d/kp is 5 µs at 500 ppm, 1 ms),
        // so the integral learns the drift, not the initial phase.
        let ki = if e.abs() <= p.lost_ns { p.ki } else { 0.0 };
        let integral = (self.integral + ki * ef).clamp(-self.max_integral, self.max_integral);
        let u = p.kp * ef + integral;
        let step = p.max_step_ns as f64;
        // Anti-windup: the integral only moves while the output is not saturated.
        if u.abs() <= step {
            self.integral = integral;
        }
        // The integral carries ki × each cycle's jitter (at 1 ms, 3 µs of jitter is 15 ppm of
        // noise): the reported drift is its exponential average over ≈ 256 cycles.
        self.drift += (self.integral - self.drift) / DRIFT_AVERAGE_CYCLES;
        // Deadlines are whole ns, and at 1 ms one ns per cycle is 1 ppm: the fraction is carried
        // to the next cycle so the average correction is the controller's, not its rounding.
        let want = u.clamp(-step, step) + self.carry;
        let out = want.round();
        self.carry = want - out;
        if self.state == LockState::Locked {
            if !was_locked {
                self.locked_sum = 0.0;
                self.locked_cycles = 0;
            }
            self.locked_sum += out;
            self.locked_cycles += 1;
        }
        -(out as i64)
    }

    fn track(&mut self, e: i64) {
        // The state follows the mean |error| of the last ≈ 16 cycles, not single cycles: one
        // late wake-up (a loaded CPU, an interrupt) neither prevents nor breaks the lock, an
        // error that persists does.
        self.mean_abs += (e.unsigned_abs() as f64 - self.mean_abs) / LOCK_AVERAGE_CYCLES;
        let p = &self.params;
        let m = self.mean_abs;
        let inside = m <= p.lock_ns as f64;
        let outside = m > p.lost_ns as f64;
        match self.state {
            LockState::Locking | LockState::Lost => {
                self.run = if inside { self.run + 1 } else { 0 };
                if self.run >= p.lock_cycles {
                    self.state = LockState::Locked;
                    self.run = 0;
                }
            }
            LockState::Locked => {
                self.run = if outside { self.run + 1 } else { 0 };
                if self.run >= p.lost_cycles {
                    self.state = LockState::Lost;
                    self.run = 0;
                }
            }
        }
    }

    /// Mean |phase error| of the last ≈ 16 cycles (exponential average), ns: what the lock
    /// state is decided on.
    pub fn mean_abs_error_ns(&self) -> f64 {
        self.mean_abs
    }

    /// The lock state.
    pub fn state(&self) -> LockState {
        self.state
    }

    /// The last frame's phase error, ns (where SYNC0 saw it: the deadline's error plus the
    /// send delay's deviation from its mean).
    pub fn last_error_ns(&self) -> i64 {
        self.last_error
    }

    /// The last deadline's phase error, ns (the frame's minus the send delay's deviation from
    /// its mean): what the controller and the lock state work on.
    pub fn last_grid_error_ns(&self) -> i64 {
        self.last_grid_error
    }

    /// The running mean of the send delay (deadline → frame handed to the link), ns.
    pub fn mean_send_delay_ns(&self) -> f64 {
        self.send_delay.unwrap_or(0.0)
    }

    /// The drift of the reference clock against the master's clock, ppm: positive = the
    /// reference clock runs fast (the master wakes earlier). Once locked, the mean correction
    /// per cycle since the lock was acquired: over n cycles `Σ correction = n·drift + e₀ − eₙ`
    /// with both errors inside the lock window, so it is exact to `2 · lock_ns / n` (at 1 ms
    /// after 10 s: 4 ppb·10³ = 4 ppm worst case, far less in practice) and does not carry the
    /// jitter the integral does. Before that, the integral's average over ≈ 256 cycles.
    pub fn drift_ppm(&self) -> f64 {
        let per_cycle = if self.locked_cycles >= 256 {
            self.locked_sum / self.locked_cycles as f64
        } else {
            self.drift
        };
        per_cycle / self.period as f64 * 1e6
    }
}
