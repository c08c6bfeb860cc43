//! The built-in motion source: rest-to-rest moves under velocity, acceleration and (optionally)
//! jerk limits, and a sequencer that runs a list of moves or a repeating back-and-forth profile.
//!
//! A move is planned once (when it starts) as at most seven segments of constant jerk, the
//! classic double-S profile (L. Biagiotti, C. Melchiorri, "Trajectory Planning for Automatic
//! Machines and Robots", Springer 2008, §3.4 for the zero initial/final velocity case);
//! without a jerk limit it is the trapezoidal profile (§3.2). Sampling it is a closed-form
//! polynomial of the segment the time falls into: no allocation, no iteration beyond seven
//! segments, so it runs in the cyclic thread. Past its end a move returns exactly its target.

/// Limits of a move, in user units (units/s, units/s², units/s³).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Velocity limit (> 0).
    pub velocity: f64,
    /// Acceleration limit (> 0).
    pub acceleration: f64,
    /// Jerk limit (> 0); `None`: trapezoidal.
    pub jerk: Option<f64>,
}

/// Position, velocity and acceleration at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sample {
    /// Position, units.
    pub position: f64,
    /// Velocity, units/s.
    pub velocity: f64,
    /// Acceleration, units/s².
    pub acceleration: f64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Seg {
    t0: f64,
    p0: f64,
    v0: f64,
    a0: f64,
    j: f64,
}

/// One planned rest-to-rest move.
#[derive(Debug, Clone, Copy)]
pub struct Move {
    segs: [Seg; 7],
    n: usize,
    total: f64,
    to: f64,
}

impl Limits {
    /// Whether every move of `min_distance` to `max_distance` units (sampled geometrically)
    /// plans finite: absurd limits (`max_acceleration = 4.7e80`, a jerk of 1e-300) overflow the
    /// profile's formulas, and a plan that is not finite would sample NaN (a target of 0 counts
    /// once converted). The configuration calls this for every axis with built-in motion.
    pub fn check(&self, min_distance: f64, max_distance: f64) -> Result<(), String> {
        const STEPS: u32 = 24;
        let (lo, hi) = (
            min_distance.max(f64::MIN_POSITIVE),
            max_distance.max(min_distance),
        );
        let ratio = (hi / lo).powf(1.0 / f64::from(STEPS));
        let mut d = lo;
        for _ in 0..=STEPS {
            Move::plan_checked(0.0, d.min(hi), self)
                .map_err(|why| format!("a move of {} units: {why}", d.min(hi)))?;
            d *= ratio;
        }
        Ok(())
    }
}

impl Move {
    /// Plan a move from `from` to `to` (at rest at both ends). The limits must be finite and
    /// positive (the configuration checks them, and [`Limits::check`] that they plan finite).
    /// Should a plan still not be finite, the move holds `from`: never a NaN setpoint.
    pub fn plan(from: f64, to: f64, l: &Limits) -> Move {
        Move::plan_checked(from, to, l).unwrap_or(Move {
            segs: [Seg::default(); 7],
            n: 0,
            total: 0.0,
            to: from,
        })
    }

    /// [`Move::plan`], or why the plan is not finite (a duration, a segment's state, or the
    /// position it ends at not being the target).
    pub fn plan_checked(from: f64, to: f64, l: &Limits) -> Result<Move, String> {
        let m = Move::plan_raw(from, to, l);
        if !m.total.is_finite() {
            return Err(format!("the plan is not finite (duration {} s)", m.total));
        }
        let segs = &m.segs[..m.n];
        if segs
            .iter()
            .any(|g| ![g.t0, g.p0, g.v0, g.a0, g.j].iter().all(|x| x.is_finite()))
        {
            return Err("the plan is not finite (a segment overflows)".into());
        }
        // Where the last segment ends must be the target (a plan whose terms cancel
        // catastrophically ends elsewhere and would step at its end).
        let end = segs.last().map_or(from, |g| {
            let u = m.total - g.t0;
            g.p0 + g.v0 * u + g.a0 * u * u / 2.0 + g.j * u * u * u / 6.0
        });
        let tol = 1e-6 * (to - from).abs().max(1e-9);
        if !end.is_finite() || (end - to).abs() > tol {
            return Err(format!(
                "the plan is not finite enough: it ends at {end}, not at {to}"
            ));
        }
        Ok(m)
    }

    fn plan_raw(from: f64, to: f64, l: &Limits) -> Move {
        let d = (to - from).abs();
        let s = if to >= from { 1.0 } else { -1.0 };
        let (vm, am) = (l.velocity, l.acceleration);
        // (duration, jerk, acceleration at the start) of the segments in the positive sense.
        let mut plan = [(0.0f64, 0.0f64, 0.0f64); 7];
        match l.jerk {
            None => {
                // Trapezoid: accelerate to v (vm, or lower for a short move), cruise, decelerate.
                let v = vm.min((d * am).sqrt());
                let ta = v / am;
                let tv = if v > 0.0 { (d - v * ta) / v } else { 0.0 };
                plan[0] = (ta, 0.0, am);
                plan[1] = (tv.max(0.0), 0.0, 0.0);
                plan[2] = (ta, 0.0, -am);
            }
            Some(jm) => {
                // The peak velocity: vm if the distance allows it, else the largest v whose
                // acceleration and deceleration phases cover d.
                let dist_to = |v: f64| {
                    if v * jm >= am * am {
                        v * (v / am + am / jm)
                    } else {
                        2.0 * v * (v / jm).sqrt()
                    }
                };
                let v = if dist_to(vm) <= d {
                    vm
                } else {
                    let v1 = am / 2.0 * (-am / jm + (am * am / (jm * jm) + 4.0 * d / am).sqrt());
                    if v1 * jm >= am * am {
                        v1
                    } else {
                        (d * d * jm / 4.0).cbrt()
                    }
                };
                let (tj, ta) = if v * jm >= am * am {
                    (am / jm, v / am + am / jm)
                } else {
                    let tj = (v / jm).sqrt();
                    (tj, 2.0 * tj)
                };
                let tv = if v > 0.0 {
                    ((d - dist_to(v)) / v).max(0.0)
                } else {
                    0.0
                };
                let flat = ta - 2.0 * tj;
                plan = [
                    (tj, jm, 0.0),
                    (flat, 0.0, f64::NAN),
                    (tj, -jm, f64::NAN),
                    (tv, 0.0, f64::NAN),
                    (tj, -jm, f64::NAN),
                    (flat, 0.0, f64::NAN),
                    (tj, jm, f64::NAN),
                ];
            }
        }
        let mut segs = [Seg::default(); 7];
        let (mut t, mut p, mut v, mut a) = (0.0, from, 0.0, 0.0);
        let mut n = 0;
        for &(dur, j, a_start) in &plan {
            if dur <= 0.0 {
                continue;
            }
            if !a_start.is_nan() {
                a = s * a_start; // a trapezoid's steps of acceleration
            }
            let jj = s * j;
            segs[n] = Seg {
                t0: t,
                p0: p,
                v0: v,
                a0: a,
                j: jj,
            };
            n += 1;
            p += v * dur + a * dur * dur / 2.0 + jj * dur * dur * dur / 6.0;
            v += a * dur + jj * dur * dur / 2.0;
            a += jj * dur;
            t += dur;
        }
        Move {
            segs,
            n,
            total: t,
            to,
        }
    }

    /// Duration, s.
    pub fn duration(&self) -> f64 {
        self.total
    }

    /// The target.
    pub fn target(&self) -> f64 {
        self.to
    }

    /// The state `t` seconds after the start (the target, at rest, from the end on).
    pub fn sample(&self, t: f64) -> Sample {
        if t >= self.total || self.n == 0 {
            return Sample {
                position: self.to,
                velocity: 0.0,
                acceleration: 0.0,
            };
        }
        let t = t.max(0.0);
        let mut k = 0;
        while k + 1 < self.n && self.segs[k + 1].t0 <= t {
            k += 1;
        }
        let g = &self.segs[k];
        let u = t - g.t0;
        Sample {
            position: g.p0 + g.v0 * u + g.a0 * u * u / 2.0 + g.j * u * u * u / 6.0,
            velocity: g.v0 + g.a0 * u + g.j * u * u / 2.0,
            acceleration: g.a0 + g.j * u,
        }
    }
}

/// What the sequencer runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Program {
    /// These positions in turn, each reached at rest, `dwell` seconds between moves.
    Moves {
        /// The positions, units.
        positions: Vec<f64>,
        /// Rest between moves, s.
        dwell: f64,
    },
    /// Between `a` and `b` (starting with a move to `a`), `dwell` seconds at each end, `cycles`
    /// times there and back (`None`: until stopped).
    BackAndForth {
        /// First end, units.
        a: f64,
        /// Other end, units.
        b: f64,
        /// Rest at each end, s.
        dwell: f64,
        /// Round trips; `None`: forever.
        cycles: Option<u32>,
    },
}

/// Runs a [`Program`] from a start position; [`Sequencer::step`] once per cycle.
#[derive(Debug, Clone)]
pub struct Sequencer {
    program: Program,
    limits: Limits,
    /// Index of the move now running (counted from the start).
    index: u64,
    mv: Move,
    t: f64,
    dwell_left: f64,
    done: bool,
}

impl Sequencer {
    /// A sequencer at rest at `position` that starts with the program's first move.
    pub fn new(program: Program, limits: Limits, position: f64) -> Sequencer {
        let mut s = Sequencer {
            program,
            limits,
            index: 0,
            mv: Move::plan(position, position, &limits),
            t: 0.0,
            dwell_left: 0.0,
            done: false,
        };
        s.restart(position);
        s
    }

    /// Start the program again from `position` (after enabling: the drive's actual position).
    pub fn restart(&mut self, position: f64) {
        self.index = 0;
        self.done = false;
        self.dwell_left = 0.0;
        self.begin(position);
    }

    fn target_of(&self, i: u64) -> Option<f64> {
        match &self.program {
            Program::Moves { positions, .. } => usize::try_from(i)
                .ok()
                .and_then(|i| positions.get(i).copied()),
            Program::BackAndForth { a, b, cycles, .. } => {
                if cycles.is_some_and(|c| i > 2 * u64::from(c)) {
                    None
                } else if i.is_multiple_of(2) {
                    Some(*a)
                } else {
                    Some(*b)
                }
            }
        }
    }

    fn begin(&mut self, from: f64) {
        match self.target_of(self.index) {
            Some(to) => {
                self.mv = Move::plan(from, to, &self.limits);
                self.t = 0.0;
            }
            None => {
                self.mv = Move::plan(from, from, &self.limits);
                self.done = true;
            }
        }
    }

    fn dwell(&self) -> f64 {
        match &self.program {
            Program::Moves { dwell, .. } | Program::BackAndForth { dwell, .. } => *dwell,
        }
    }

    /// Whether the program has ended (the last target reached).
    pub fn done(&self) -> bool {
        self.done
    }

    /// Advance by `dt` seconds and return the setpoint.
    pub fn step(&mut self, dt: f64) -> Sample {
        if self.done {
            return self.mv.sample(f64::INFINITY);
        }
        if self.dwell_left > 0.0 {
            self.dwell_left -= dt;
            if self.dwell_left > 0.0 {
                return self.mv.sample(f64::INFINITY);
            }
            self.index += 1;
            let at = self.mv.target();
            self.begin(at);
            return self.mv.sample(0.0);
        }
        self.t += dt;
        let s = self.mv.sample(self.t);
        if self.t >= self.mv.duration() {
            self.dwell_left = self.dwell().max(f64::MIN_POSITIVE);
        }
        s
    }
}

#[cfg(test)]
mod tests;
