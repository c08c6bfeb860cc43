//! The non-real-time status thread: drains the cyclic thread's event and sample rings to
//! events.log / samples.csv, prints a status line, writes checkpoints of the results, and feeds
//! the systemd watchdog.
//!
//! It never dies of a logging or disk error: a failed write is counted, said once, and the file
//! concerned stops; the watchdog keeps being fed as long as the cycle runs. When the file system
//! runs low, samples.csv stops first, then events.log, so the summary and the histograms (written
//! at every checkpoint and at the end) still fit.

use crate::control::HistShare;
use crate::say;
use crate::sdnotify::Notifier;
use rtcat_control::protocol::{Histo, Histograms};
use rtcat_master::stats::{Event, Live, Recorder, Sample};
use rtcat_results::LoggingHealth;
use safefs::Dir;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// While the first bring-up waits for the segment: extend systemd's start timeout by 10 s every
/// second (generous against a stalled status thread, short enough to stop soon after a hang).
const EXTEND_EVERY: Duration = Duration::from_secs(1);
const EXTEND_START_TIMEOUT: &str = "EXTEND_TIMEOUT_USEC=10000000";

/// Free space kept for the results below which samples.csv stops (events.log stops at half of
/// it): at least this, or four times what the last checkpoint wrote (an atomic rewrite needs the
/// old and the new file side by side).
const MIN_RESERVE: u64 = 256 * 1024;

/// Writes the results of the run so far (a checkpoint); returns the bytes written.
pub type CheckpointFn = Box<dyn FnMut(&Recorder, &LoggingHealth) -> anyhow::Result<u64> + Send>;

pub struct StatusConfig {
    /// The run's output directory (already prepared: previous results moved aside).
    pub dir: Arc<Dir>,
    pub interval: Option<Duration>,
    pub notifier: Option<Arc<Notifier>>,
    /// Print events to stderr as they happen.
    pub echo_events: bool,
    /// Write samples.csv.
    pub samples_csv: bool,
    /// Write a checkpoint this often.
    pub checkpoint: Option<(Duration, CheckpointFn)>,
    /// Publish the run's histograms here (for the control socket), about every
    /// [`PUBLISH_EVERY`].
    pub histograms: Option<Arc<HistShare>>,
    /// Events raised off the cyclic thread (the poller's emergencies), written like the
    /// cyclic thread's.
    pub more_events: Option<mpsc::Receiver<Event>>,
    /// Records of state-changing control requests: written to events.log and to stderr (the
    /// journal), whatever `echo_events` says.
    pub records: Option<mpsc::Receiver<crate::control::Record>>,
}

/// Lines of one kind of event written in a burst before the rate limit applies.
pub const EVENT_BURST: u32 = 100;
/// Lines of one kind of event written per second once the burst is spent.
pub const EVENT_RATE: u32 = 20;
/// How often the count of suppressed lines of a kind is written (also at the end).
pub const SUPPRESSED_EVERY: Duration = Duration::from_secs(10);

/// Per kind of event (the word after `cycle=N`), a token bucket of [`EVENT_BURST`] lines
/// refilled at [`EVENT_RATE`] a second: whatever floods one kind (a member toggling writer
/// slots, a client hammering `al_state`) writes at most that into events.log and the journal,
/// and a line `events_suppressed kind=K count=N` says what was left out.
#[derive(Default)]
struct Limiter {
    kinds: std::collections::HashMap<String, Bucket>,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
    suppressed: u64,
    said: Instant,
}

impl Limiter {
    /// Whether a line of `kind` may be written now (else it is counted).
    fn admit(&mut self, kind: &str, now: Instant) -> bool {
        let b = match self.kinds.get_mut(kind) {
            Some(b) => b,
            None => self.kinds.entry(kind.to_string()).or_insert(Bucket {
                tokens: f64::from(EVENT_BURST),
                refilled: now,
                suppressed: 0,
                said: now,
            }),
        };
        let dt = now.saturating_duration_since(b.refilled).as_secs_f64();
        b.tokens = (b.tokens + dt * f64::from(EVENT_RATE)).min(f64::from(EVENT_BURST));
        b.refilled = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            b.suppressed += 1;
            false
        }
    }

    /// The kinds with suppressed lines to report now (every [`SUPPRESSED_EVERY`], or all of
    /// them when `all`), their counts reset.
    fn due(&mut self, now: Instant, all: bool) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (k, b) in self.kinds.iter_mut() {
            if b.suppressed > 0
                && (all || now.saturating_duration_since(b.said) >= SUPPRESSED_EVERY)
            {
                out.push((k.clone(), b.suppressed));
                b.suppressed = 0;
                b.said = now;
            }
        }
        out.sort();
        out
    }
}

/// The kind of an event line (`{unix_ns} cycle={n} KIND ...`).
fn kind_of(text: &str) -> &str {
    text.split(' ').next().unwrap_or("")
}

/// How often the histograms go to [`StatusConfig::histograms`].
pub const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// Exact sums of what the mirror histograms hold (HdrHistogram keeps none).
#[derive(Default)]
struct Sums {
    wake: u64,
    exec: u64,
    rtt: u64,
    /// Of the |phase error| (DC cycles only).
    phase: u64,
}

fn histograms(m: &Recorder, s: &Sums) -> Histograms {
    Histograms {
        wake_ns: Histo::from_hdr(&m.wake, s.wake),
        exec_ns: Histo::from_hdr(&m.exec, s.exec),
        rtt_ns: Histo::from_hdr(&m.rtt, s.rtt),
    }
}

pub struct StatusThread {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<LoggingHealth>,
}

/// One log file that stops (and says why, once) instead of failing the thread.
struct LogFile {
    name: &'static str,
    w: Option<BufWriter<File>>,
    /// Stopped because the disk is nearly full (not an error: counted as dropped).
    low_space: bool,
}

impl LogFile {
    fn open(dir: &Dir, name: &'static str, health: &mut Health) -> LogFile {
        let w = match dir.create(name, 0o644) {
            Ok(f) => Some(BufWriter::new(f)),
            Err(e) => {
                health.error(format!("{e}"));
                None
            }
        };
        LogFile {
            name,
            w,
            low_space: false,
        }
    }

    fn active(&self) -> bool {
        self.w.is_some() && !self.low_space
    }

    /// Write one line; false when the line was not written.
    fn line(&mut self, args: std::fmt::Arguments<'_>, health: &mut Health) -> bool {
        if self.low_space {
            return false;
        }
        let Some(w) = self.w.as_mut() else {
            return false;
        };
        if let Err(e) = w.write_fmt(args).and_then(|()| w.write_all(b"\n")) {
            health.error(format!("{}: {e}", self.name));
            self.w = None;
            return false;
        }
        true
    }

    fn flush(&mut self, health: &mut Health) {
        if let Some(w) = self.w.as_mut()
            && let Err(e) = w.flush()
        {
            health.error(format!("{}: {e}", self.name));
            self.w = None;
        }
    }

    fn stop_for_space(&mut self, health: &mut Health, avail: u64) {
        if self.active() {
            self.flush(health);
            self.low_space = true;
            say!(
                "rtcat: only {} KiB free for the results: {} stops here so the summary and \
                 the histograms still fit",
                avail / 1024,
                self.name
            );
        }
    }
}

/// The logging health of a run, kept by the status thread.
#[derive(Default)]
struct Health {
    h: LoggingHealth,
}

impl Health {
    fn error(&mut self, what: String) {
        self.h.write_errors += 1;
        if self.h.first_error.is_none() {
            say!("rtcat: {what}; the run goes on, this and later failures are counted");
            self.h.first_error = Some(what);
        }
    }

    fn snapshot(&self) -> LoggingHealth {
        let mut h = self.h.clone();
        let (n, first) = crate::console::failures();
        h.write_errors += n;
        if h.first_error.is_none() {
            h.first_error = first;
        }
        h
    }
}

/// The run so far as the status thread sees it: histograms from the sample ring, counters from
/// the live view.
fn mirror_counters(m: &mut Recorder, live: &Live) {
    m.cycles = live.cycles.load(Ordering::Relaxed);
    m.missed_deadlines = live.missed.load(Ordering::Relaxed);
    m.skipped_periods = live.skipped.load(Ordering::Relaxed);
    m.wkc_mismatches = live.wkc_mismatches.load(Ordering::Relaxed);
    m.frames_lost = live.frames_lost.load(Ordering::Relaxed);
    m.recoveries = live.recoveries.load(Ordering::Relaxed);
}

/// The DC part of the status line (empty without DC).
fn dc_status(live: &Live) -> String {
    let dc = &live.dc;
    if dc.enabled.load(Ordering::Relaxed) == 0 {
        return String::new();
    }
    let worst = dc
        .subdevices()
        .iter()
        .filter_map(|d| d.last_ns)
        .max_by_key(|v| v.unsigned_abs());
    format!(
        " dc={} phase={:.1}µs drift={:+.2}ppm diff_max={} sync_window_violations={}",
        dc.lock_state().as_str(),
        dc.phase_error_ns.load(Ordering::Relaxed) as f64 / 1000.0,
        dc.drift_ppb.load(Ordering::Relaxed) as f64 / 1000.0,
        worst.map_or("-".into(), |w| format!("{w}ns")),
        dc.sync_window_violations.load(Ordering::Relaxed)
    )
}

/// Devices the configuration does not place, while there are any.
fn unexpected_status(live: &Live) -> String {
    let u = live.unexpected();
    if u.now == 0 {
        return String::new();
    }
    format!(" unexpected_devices={} from_position={}", u.now, u.first)
}

fn status_line(start: Instant, cycles: u64, live: &Live) -> String {
    format!(
        "rtcat: t={:.0}s cycles={} wake_max={:.1}µs exec_max={:.1}µs missed={} \
         wkc_mismatch={} lost={} recoveries={} rejected={} send_errors={}{}{} {}",
        start.elapsed().as_secs_f64(),
        cycles,
        live.wake_max_ns.swap(0, Ordering::Relaxed) as f64 / 1000.0,
        live.exec_max_ns.swap(0, Ordering::Relaxed) as f64 / 1000.0,
        live.missed.load(Ordering::Relaxed),
        live.wkc_mismatches.load(Ordering::Relaxed),
        live.frames_lost.load(Ordering::Relaxed),
        live.recoveries.load(Ordering::Relaxed),
        live.rx_rejected.load(Ordering::Relaxed),
        live.send_errors.load(Ordering::Relaxed),
        dc_status(live),
        unexpected_status(live),
        if live.recovering.load(Ordering::Relaxed) == 1 {
            "RECOVERING"
        } else if live.healthy.load(Ordering::Relaxed) == 1 {
            "OK"
        } else {
            "DEGRADED"
        }
    )
}

impl StatusThread {
    pub fn spawn(
        cfg: StatusConfig,
        live: Arc<Live>,
        mut events: rtrb::Consumer<Event>,
        mut samples: rtrb::Consumer<Sample>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("rtcat-status".into())
            .spawn(move || {
                let StatusConfig {
                    dir,
                    interval,
                    notifier,
                    echo_events,
                    samples_csv,
                    mut checkpoint,
                    histograms: share,
                    more_events,
                    records,
                } = cfg;
                let mut limiter = Limiter::default();
                let mut sums = Sums::default();
                let mut last_publish: Option<Instant> = None;
                let mut health = Health::default();
                let mut log = LogFile::open(&dir, "events.log", &mut health);
                let mut csv = samples_csv.then(|| {
                    let mut f = LogFile::open(&dir, "samples.csv", &mut health);
                    f.line(
                        format_args!("cycle,wake_lateness_ns,exec_ns,rtt_ns,wkc"),
                        &mut health,
                    );
                    f
                });
                let mut mirror = Recorder::new();
                let mut reserve = MIN_RESERVE;
                let start = Instant::now();
                let mut last_print = Instant::now();
                let mut last_dog = Instant::now();
                let mut last_checkpoint = Instant::now();
                let mut last_extend: Option<Instant> = None;
                let mut last_cycles = 0u64;
                // The shutdown line closes the record: it is held until the last pass, after
                // the counts of what was suppressed.
                let mut last_line: Option<String> = None;
                loop {
                    let stopping = stop2.load(Ordering::Acquire);
                    // Space first: what is about to be written must not take the results' room.
                    if log.active() || csv.as_ref().is_some_and(LogFile::active) {
                        match dir.available_bytes() {
                            Ok(avail) => {
                                if avail < 2 * reserve
                                    && let Some(c) = csv.as_mut()
                                {
                                    c.stop_for_space(&mut health, avail);
                                }
                                if avail < reserve {
                                    log.stop_for_space(&mut health, avail);
                                }
                            }
                            Err(e) => health.error(format!("free space: {e}")),
                        }
                    }
                    let more = std::iter::from_fn(|| more_events.as_ref()?.try_recv().ok());
                    let cyclic = std::iter::from_fn(|| events.pop().ok());
                    let now = Instant::now();
                    for e in cyclic.chain(more) {
                        let text = e.kind.to_string();
                        if !limiter.admit(kind_of(&text), now) {
                            continue;
                        }
                        let line = format!("{} cycle={} {text}", e.unix_ns, e.cycle);
                        if kind_of(&text) == "shutdown" {
                            last_line = Some(line);
                            continue;
                        }
                        if !log.line(format_args!("{line}"), &mut health) {
                            health.h.events_dropped += 1;
                        }
                        if echo_events {
                            say!("rtcat: event {line}");
                        }
                    }
                    while let Some(r) = records.as_ref().and_then(|r| r.try_recv().ok()) {
                        if !limiter.admit(kind_of(&r.text), now) {
                            continue;
                        }
                        let line = format!("{} cycle={} {}", r.unix_ns, r.cycle, r.text);
                        if !log.line(format_args!("{line}"), &mut health) {
                            health.h.events_dropped += 1;
                        }
                        say!("rtcat: {}", r.text);
                    }
                    for (kind, n) in limiter.due(now, stopping) {
                        let line = format!(
                            "{} cycle={} events_suppressed kind={kind} count={n}",
                            rtcat_master::clock::unix_ns(),
                            live.cycles.load(Ordering::Relaxed)
                        );
                        if !log.line(format_args!("{line}"), &mut health) {
                            health.h.events_dropped += 1;
                        }
                        say!("rtcat: {line} (more than {EVENT_RATE}/s of one kind)");
                    }
                    if stopping && let Some(line) = last_line.take() {
                        if !log.line(format_args!("{line}"), &mut health) {
                            health.h.events_dropped += 1;
                        }
                        if echo_events {
                            say!("rtcat: event {line}");
                        }
                    }
                    let dc_on = live.dc.enabled.load(Ordering::Relaxed) == 1;
                    while let Ok(s) = samples.pop() {
                        if dc_on {
                            mirror.record_phase(s.phase_error_ns);
                            sums.phase = sums.phase.saturating_add(s.phase_error_ns.unsigned_abs());
                        }
                        mirror.wake.saturating_record(s.wake_ns);
                        mirror.exec.saturating_record(s.exec_ns);
                        sums.wake = sums.wake.saturating_add(s.wake_ns);
                        sums.exec = sums.exec.saturating_add(s.exec_ns);
                        if s.rtt_ns > 0 {
                            mirror.rtt.saturating_record(s.rtt_ns);
                            sums.rtt = sums.rtt.saturating_add(s.rtt_ns);
                        }
                        if let Some(c) = csv.as_mut()
                            && !c.line(
                                format_args!(
                                    "{},{},{},{},{}",
                                    s.cycle, s.wake_ns, s.exec_ns, s.rtt_ns, s.wkc
                                ),
                                &mut health,
                            )
                        {
                            health.h.samples_dropped += 1;
                        }
                    }
                    if let Some(h) = share.as_ref()
                        && last_publish.is_none_or(|t| t.elapsed() >= PUBLISH_EVERY)
                    {
                        h.publish(
                            histograms(&mirror, &sums),
                            (!mirror.phase.is_empty())
                                .then(|| Histo::from_hdr(&mirror.phase, sums.phase)),
                        );
                        last_publish = Some(Instant::now());
                    }
                    if stopping {
                        break;
                    }
                    let cycles = live.cycles.load(Ordering::Relaxed);
                    if let Some(iv) = interval
                        && last_print.elapsed() >= iv
                    {
                        log.flush(&mut health);
                        say!("{}", status_line(start, cycles, &live));
                        last_print = Instant::now();
                    }
                    if let Some((every, write)) = checkpoint.as_mut()
                        && last_checkpoint.elapsed() >= *every
                        && cycles > 0
                    {
                        log.flush(&mut health);
                        if let Some(c) = csv.as_mut() {
                            c.flush(&mut health);
                        }
                        mirror_counters(&mut mirror, &live);
                        match write(&mirror, &health.snapshot()) {
                            Ok(bytes) => reserve = reserve.max(4 * bytes),
                            Err(e) => health.error(format!("checkpoint: {e:#}")),
                        }
                        last_checkpoint = Instant::now();
                    }
                    if let Some(n) = notifier.as_ref()
                        && let Some(iv) = n.watchdog_interval()
                        && last_dog.elapsed() >= iv
                    {
                        // Only a master that makes progress (cycles, or a recovery under way)
                        // feeds the watchdog; a hung one gets restarted by systemd.
                        if cycles != last_cycles || live.recovering.load(Ordering::Relaxed) == 1 {
                            n.notify("WATCHDOG=1");
                        }
                        last_cycles = cycles;
                        last_dog = Instant::now();
                    }
                    if let Some(n) = notifier.as_ref() {
                        // Waiting for a segment that is not there yet (service mode): READY=1
                        // only comes in OP, so keep pushing systemd's start timeout out instead
                        // of being killed and restarted every TimeoutStartSec.
                        let waiting = cycles == 0 && live.recovering.load(Ordering::Relaxed) == 1;
                        if waiting && last_extend.is_none_or(|t| t.elapsed() >= EXTEND_EVERY) {
                            n.notify(EXTEND_START_TIMEOUT);
                            n.notify("STATUS=waiting for the EtherCAT segment to come up");
                            last_extend = Some(Instant::now());
                        } else if !waiting && last_extend.take().is_some() {
                            n.notify("STATUS=segment in OP, cycling");
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                log.flush(&mut health);
                if let Some(c) = csv.as_mut() {
                    c.flush(&mut health);
                }
                dir.sync();
                health.snapshot()
            })?;
        Ok(StatusThread { stop, handle })
    }

    /// Drain everything left, flush the files, stop, and say how logging went.
    pub fn finish(self) -> LoggingHealth {
        self.stop.store(true, Ordering::Release);
        self.handle.join().unwrap_or_else(|_| LoggingHealth {
            first_error: Some("status thread panicked".into()),
            write_errors: 1,
            ..LoggingHealth::default()
        })
    }
}
