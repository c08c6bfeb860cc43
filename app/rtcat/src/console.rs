//! Messages on stderr that never panic: `eprintln!` panics when stderr is closed or broken (a
//! `| head`, a dropped ssh session), which in the master would stop the status thread and with it
//! the systemd watchdog. Failed writes are counted instead; the results say how many.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

static FAILED: AtomicU64 = AtomicU64::new(0);
static FIRST_ERROR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Write one line to stderr; on failure count it and remember the first error.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    if let Err(err) = e.write_fmt(args).and_then(|()| e.write_all(b"\n")) {
        FAILED.fetch_add(1, Ordering::Relaxed);
        let _ = FIRST_ERROR.set(format!("stderr: {err}"));
    }
}

/// Write text (no newline added) to stderr, like [`line`].
pub fn text(s: &str) {
    if let Err(err) = std::io::stderr().lock().write_all(s.as_bytes()) {
        FAILED.fetch_add(1, Ordering::Relaxed);
        let _ = FIRST_ERROR.set(format!("stderr: {err}"));
    }
}

/// Write text to stdout; `false` when stdout is closed or broken (the caller decides whether
/// that matters).
pub fn stdout(s: &str) -> bool {
    let mut o = std::io::stdout().lock();
    o.write_all(s.as_bytes()).and_then(|()| o.flush()).is_ok()
}

/// Failed stderr writes so far, and the first error.
pub fn failures() -> (u64, Option<String>) {
    (FAILED.load(Ordering::Relaxed), FIRST_ERROR.get().cloned())
}

/// `say!("...", args)`: a line on stderr that never panics.
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => { $crate::console::line(format_args!($($t)*)) };
}

/// The `log` records of the libraries (the master's bring-up and recovery failures), as
/// `rtcat: message` lines on stderr that never panic.
struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info && !m.target().starts_with("ethercrab")
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            line(format_args!("rtcat: {}", r.args()));
        }
    }

    fn flush(&self) {}
}

/// Send the libraries' log records to stderr (once per process).
pub fn install_logger() {
    static LOGGER: Logger = Logger;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}
