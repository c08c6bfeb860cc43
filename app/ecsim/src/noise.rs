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

/// A command's exit inside an attempt: `Ok` when it succeeded, `Err` when it failed on a timeout
/// (a bring-up PDU, a state change or a response that did not come back in time on a loaded
/// machine: the machine's verdict, retried), a panic naming `what` for any other failure (a
/// defect of the code, never retried).
pub fn exited_ok(what: &str, status: std::process::ExitStatus, stderr: &str) -> Result<(), String> {
    if status.success() {
        return Ok(());
    }
    let lower = stderr.to_ascii_lowercase();
    let timed_out = lower.contains("timeout") || lower.contains("timed out");
    assert!(timed_out, "{what}: {status}: {stderr}");
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(format!("{what}: {status} on a timeout: {last}"))
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

    fn exit(code: i32) -> std::process::ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        std::process::ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn a_timeout_is_the_machines_verdict_any_other_failure_a_defect() {
        assert_eq!(exited_ok("b", exit(0), "anything"), Ok(()));
        let e = exited_ok("b", exit(1), "error: bring-up: timeout: PDU\n").unwrap_err();
        assert!(e.contains("timeout: PDU"), "{e}");
        let r = std::panic::catch_unwind(|| exited_ok("b", exit(1), "error: WKC 7, expected 9"));
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("WKC 7"), "{msg}");
    }

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
