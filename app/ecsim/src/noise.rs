//! Verdicts the test machine's scheduling decides, given more than one run (test support).
//!
//! Some checks are about the machine as much as the code: how many frames miss their response
//! timeout, how fast a phase lock converges, how many deadlines a debug build keeps on a shared
//! 2-vCPU VM whose host stalls its vCPUs for milliseconds now and then (seen on a CI machine: 9
//! of 735 frames of a threaded run late, all in the run's last 300 cycles). Such a verdict gets
//! [`ATTEMPTS`] runs and passes when one does; every failed attempt is printed with
//! its reason, and the test fails with all of them. A defect of the code fails every attempt.
//! Correctness checks (data, WKC, states) stay plain asserts inside the attempt: a panic there is
//! not retried.

/// How many runs a machine-dependent verdict gets.
pub const ATTEMPTS: u32 = 3;

/// A machine-dependent verdict inside an attempt: `Err(why())` when `ok` does not hold.
pub fn ensure(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(why()) }
}

/// Run `attempt(i)` for i = 1.. until it returns `Ok`, at most [`ATTEMPTS`] times; panics with
/// every attempt's reason when none passed.
pub fn within_machine_noise<T>(what: &str, mut attempt: impl FnMut(u32) -> Result<T, String>) -> T {
    let mut reasons = Vec::new();
    for i in 1..=ATTEMPTS {
        match attempt(i) {
            Ok(v) => {
                if !reasons.is_empty() {
                    eprintln!("{what}: passed at attempt {i} of {ATTEMPTS}");
                }
                return v;
            }
            Err(r) => {
                eprintln!("{what}: attempt {i} of {ATTEMPTS} failed: {r}");
                reasons.push(format!("attempt {i}: {r}"));
            }
        }
    }
    panic!(
        "{what}: failed in all {ATTEMPTS} attempts\n{}",
        reasons.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_passes_at_the_first_good_attempt() {
        let mut n = 0;
        let v = within_machine_noise("t", |i| {
            n += 1;
            if i < 2 {
                Err(format!("bad {i}"))
            } else {
                Ok(i)
            }
        });
        assert_eq!((v, n), (2, 2));
    }

    #[test]
    fn a_verdict_that_never_passes_fails_with_every_reason() {
        let r = std::panic::catch_unwind(|| {
            within_machine_noise::<()>("t", |i| Err(format!("bad {i}")))
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("failed in all 3 attempts"), "{msg}");
        for i in 1..=3 {
            assert!(msg.contains(&format!("attempt {i}: bad {i}")), "{msg}");
        }
    }
}
