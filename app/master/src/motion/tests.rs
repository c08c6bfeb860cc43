use super::*;
use proptest::prelude::*;

const DT: f64 = 1e-4;

/// Sample a move every DT and check limits, continuity and the end.
fn check(from: f64, to: f64, l: &Limits) -> Result<(), TestCaseError> {
    let m = Move::plan(from, to, l);
    let tol = 1e-6;
    let lim_v = l.velocity * (1.0 + tol) + tol;
    let lim_a = l.acceleration * (1.0 + tol) + tol;
    let mut prev = m.sample(0.0);
    prop_assert!((prev.position - from).abs() < 1e-9);
    prop_assert_eq!(prev.velocity, 0.0);
    let steps = (m.duration() / DT).ceil() as u64 + 2;
    let mut max_dv = 0.0f64;
    for i in 1..=steps {
        let s = m.sample(i as f64 * DT);
        prop_assert!(
            s.velocity.abs() <= lim_v,
            "v {} > {}",
            s.velocity,
            l.velocity
        );
        prop_assert!(
            s.acceleration.abs() <= lim_a,
            "a {} > {}",
            s.acceleration,
            l.acceleration
        );
        // Never beyond the ends (no overshoot) and moving one way only.
        let (lo, hi) = if from <= to { (from, to) } else { (to, from) };
        prop_assert!(
            s.position >= lo - 1e-9 && s.position <= hi + 1e-9,
            "{} outside {lo}..{hi}",
            s.position
        );
        prop_assert!(s.velocity * (to - from) >= -1e-9);
        // Continuity: position moves at most v·dt, velocity at most a·dt per step.
        prop_assert!((s.position - prev.position).abs() <= lim_v * DT + 1e-9);
        let dv = (s.velocity - prev.velocity).abs();
        max_dv = max_dv.max(dv);
        prop_assert!(dv <= lim_a * DT + 1e-6, "velocity jump {dv}");
        if let Some(j) = l.jerk {
            prop_assert!((s.acceleration - prev.acceleration).abs() <= j * DT * (1.0 + tol) + 1e-6);
        }
        prev = s;
    }
    let end = m.sample(m.duration());
    prop_assert_eq!(end.position, to, "ends exactly on the target");
    prop_assert_eq!(end.velocity, 0.0);
    // The polynomial's own end agrees with the target (the last step is no jump).
    let just_before = m.sample(m.duration() - 1e-9);
    prop_assert!((just_before.position - to).abs() < 1e-6 * (1.0 + (to - from).abs()));
    prop_assert!(just_before.velocity.abs() < 1e-3 * l.velocity.max(1.0));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn moves_keep_the_limits_and_end_on_target(
        from in -100.0f64..100.0,
        to in -100.0f64..100.0,
        v in 0.5f64..200.0,
        a in 1.0f64..5000.0,
        j in proptest::option::of(10.0f64..1e5),
    ) {
        check(from, to, &Limits { velocity: v, acceleration: a, jerk: j })?;
    }
}

#[test]
fn trapezoid_durations_are_the_textbook_ones() {
    // d = 10, v = 5, a = 10: accelerate 0.5 s (1.25 units), cruise 1.5 s, decelerate 0.5 s.
    let m = Move::plan(
        0.0,
        10.0,
        &Limits {
            velocity: 5.0,
            acceleration: 10.0,
            jerk: None,
        },
    );
    assert!((m.duration() - 2.5).abs() < 1e-12, "{}", m.duration());
    assert!((m.sample(0.5).position - 1.25).abs() < 1e-12);
    // Short: a triangle reaching sqrt(d·a) = 1 at 0.1 s.
    let m = Move::plan(
        0.0,
        0.1,
        &Limits {
            velocity: 5.0,
            acceleration: 10.0,
            jerk: None,
        },
    );
    assert!((m.duration() - 0.2).abs() < 1e-12);
    assert!((m.sample(0.1).velocity - 1.0).abs() < 1e-12);
}

#[test]
fn double_s_durations_are_the_textbook_ones() {
    // v = 1, a = 1, j = 1 (v·j = a²): Tj = 1, Ta = 2; d = 10 -> Tv = (10 - 2)/1 = 8; T = 12.
    let l = Limits {
        velocity: 1.0,
        acceleration: 1.0,
        jerk: Some(1.0),
    };
    let m = Move::plan(0.0, 10.0, &l);
    assert!((m.duration() - 12.0).abs() < 1e-9, "{}", m.duration());
    // Biagiotti & Melchiorri example 3.9 style: a = 10, j = 30, v = 5, d = 10:
    // Tj = 1/3, Ta = 0.5 + 1/3, Tv = (10 - 5·(0.8333))/5 = 1.1667, T = 2.8333.
    let m = Move::plan(
        0.0,
        10.0,
        &Limits {
            velocity: 5.0,
            acceleration: 10.0,
            jerk: Some(30.0),
        },
    );
    assert!(
        (m.duration() - (2.0 * (0.5 + 1.0 / 3.0) + (10.0 - 5.0 * (0.5 + 1.0 / 3.0)) / 5.0)).abs()
            < 1e-9
    );
}

#[test]
fn a_zero_move_stays_put() {
    let m = Move::plan(
        3.0,
        3.0,
        &Limits {
            velocity: 1.0,
            acceleration: 1.0,
            jerk: Some(1.0),
        },
    );
    assert_eq!(m.duration(), 0.0);
    assert_eq!(m.sample(0.0).position, 3.0);
}

#[test]
fn back_and_forth_visits_both_ends_and_stops_after_its_cycles() {
    let l = Limits {
        velocity: 10.0,
        acceleration: 100.0,
        jerk: Some(2000.0),
    };
    let p = Program::BackAndForth {
        a: 0.0,
        b: 5.0,
        dwell: 0.1,
        cycles: Some(2),
    };
    let mut s = Sequencer::new(p, l, 1.0);
    let dt = 0.001;
    let (mut at_a, mut at_b, mut prev) = (0, 0, 1.0);
    let mut was_at = None;
    for _ in 0..20_000 {
        let x = s.step(dt);
        assert!((x.position - prev).abs() <= 10.0 * dt + 1e-9, "continuous");
        prev = x.position;
        let at = if x.position == 0.0 {
            Some('a')
        } else if x.position == 5.0 {
            Some('b')
        } else {
            None
        };
        if at.is_some() && at != was_at {
            match at {
                Some('a') => at_a += 1,
                _ => at_b += 1,
            }
        }
        was_at = at;
        if s.done() {
            break;
        }
    }
    assert!(s.done());
    assert_eq!((at_a, at_b), (3, 2), "a, b, a, b, a");
    assert_eq!(s.step(dt).position, 0.0);
}

#[test]
fn moves_run_in_turn_and_restart_from_a_new_position() {
    let l = Limits {
        velocity: 10.0,
        acceleration: 100.0,
        jerk: None,
    };
    let p = Program::Moves {
        positions: vec![2.0, -1.0],
        dwell: 0.0,
    };
    let mut s = Sequencer::new(p, l, 0.0);
    let mut reached = Vec::new();
    for _ in 0..10_000 {
        let x = s.step(0.001);
        if x.velocity == 0.0
            && reached.last() != Some(&x.position)
            && (x.position == 2.0 || x.position == -1.0)
        {
            reached.push(x.position);
        }
        if s.done() {
            break;
        }
    }
    assert_eq!(reached, [2.0, -1.0]);
    s.restart(7.0);
    assert!(!s.done());
    let x = s.step(0.001);
    assert!(
        (x.position - 7.0).abs() < 0.01,
        "starts from the new position: {}",
        x.position
    );
}

// Issue 26, item 8: absurd limits never give a plan that is not finite (sampled NaN, a
// target that becomes 0 in counts): the checked plan refuses them, and the plan the cyclic
// thread makes holds its start instead.
#[test]
fn absurd_limits_are_refused_and_never_sampled_as_nan() {
    let e = [1e-300, 1e-10, 1.0, 1e10, 4.7e80, 1e160, 1e300];
    let mut refused = 0;
    for &v in &e {
        for &a in &e {
            for j in std::iter::once(None).chain(e.iter().map(|x| Some(*x))) {
                let l = Limits {
                    velocity: v,
                    acceleration: a,
                    jerk: j,
                };
                for d in [1e-4, 1.0, 1e5] {
                    let m = Move::plan(3.0, 3.0 + d, &l);
                    for k in 0..=20 {
                        let t = if m.duration().is_finite() {
                            m.duration() * f64::from(k) / 20.0
                        } else {
                            f64::from(k)
                        };
                        let s = m.sample(t);
                        assert!(
                            s.position.is_finite() && s.velocity.is_finite(),
                            "{l:?} d={d} t={t}: {s:?}"
                        );
                    }
                    if Move::plan_checked(3.0, 3.0 + d, &l).is_err() {
                        refused += 1;
                        assert_eq!(m.target(), 3.0, "a refused plan holds its start");
                    }
                }
            }
        }
    }
    assert!(refused > 0);
    // A plan whose later segments overflowed to NaN: sampled there (its first segments are
    // finite, so the cyclic thread would get there), it must not give NaN.
    let l = Limits {
        velocity: 1e40,
        acceleration: 1e290,
        jerk: Some(1e270),
    };
    let m = Move::plan(0.0, 250.0, &l);
    for t in [0.0, 1e20, 2e20, 2.5e20, 3e20, 1e21] {
        let s = m.sample(t);
        assert!(s.position.is_finite(), "t={t}: {s:?}");
    }
    assert!(Move::plan_checked(0.0, 250.0, &l).is_err());
    // Sane limits pass, whatever the distance.
    let l = Limits {
        velocity: 100.0,
        acceleration: 1000.0,
        jerk: Some(1e5),
    };
    assert_eq!(l.check(1e-4, 4e5), Ok(()));
    let absurd = Limits {
        velocity: 1.0,
        acceleration: 1e160,
        jerk: Some(1.0),
    };
    let e = absurd.check(1e-4, 4e5).unwrap_err();
    assert!(e.contains("not finite"), "{e}");
}
