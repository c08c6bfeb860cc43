//! Fork/exec churn: threads that each run `--exec` (default `/bin/true`) in a loop and reap it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;

use super::Ctl;

pub(super) fn fork_worker(c: &Ctl, slot: usize, program: &Path) {
    while !c.done() {
        let child = Command::new(program)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(mut ch) => {
                c.children[slot].store(ch.id() as i32, Ordering::SeqCst);
                let st = ch.wait();
                c.children[slot].store(0, Ordering::SeqCst);
                c.counters.forks.fetch_add(1, Ordering::Relaxed);
                if !matches!(st, Ok(s) if s.success()) {
                    c.counters.fork_failures.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => {
                c.error(format!("fork churn: cannot run {}: {e}", program.display()));
                return;
            }
        }
    }
}
