//! The non-real-time status thread: drains the cyclic thread's event and sample rings to
//! events.log / samples.csv, prints a status line, and feeds the systemd watchdog.

use crate::sdnotify::Notifier;
use crate::stats::{Event, Live, Sample};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// While the first bring-up waits for the segment: extend systemd's start timeout by 10 s every
/// second (generous against a stalled status thread, short enough to stop soon after a hang).
const EXTEND_EVERY: Duration = Duration::from_secs(1);
const EXTEND_START_TIMEOUT: &str = "EXTEND_TIMEOUT_USEC=10000000";

pub struct StatusConfig {
    pub out_dir: PathBuf,
    pub interval: Option<Duration>,
    pub notifier: Option<Arc<Notifier>>,
    /// Print events to stderr as they happen.
    pub echo_events: bool,
}

pub struct StatusThread {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<std::io::Result<()>>,
}

fn format_event(e: &Event) -> String {
    format!("{} cycle={} {}", e.unix_ns, e.cycle, e.kind)
}

impl StatusThread {
    pub fn spawn(
        cfg: StatusConfig,
        live: Arc<Live>,
        mut events: rtrb::Consumer<Event>,
        mut samples: Option<rtrb::Consumer<Sample>>,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(&cfg.out_dir)?;
        let mut log = BufWriter::new(File::create(cfg.out_dir.join("events.log"))?);
        let mut csv = match samples {
            Some(_) => {
                let mut w = BufWriter::new(File::create(cfg.out_dir.join("samples.csv"))?);
                writeln!(w, "cycle,wake_lateness_ns,exec_ns,rtt_ns,wkc")?;
                Some(w)
            }
            None => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("rtcat-status".into())
            .spawn(move || -> std::io::Result<()> {
                let start = Instant::now();
                let mut last_print = Instant::now();
                let mut last_dog = Instant::now();
                let mut last_extend: Option<Instant> = None;
                let mut last_cycles = 0u64;
                loop {
                    let stopping = stop2.load(Ordering::Acquire);
                    while let Ok(e) = events.pop() {
                        let line = format_event(&e);
                        writeln!(log, "{line}")?;
                        if cfg.echo_events {
                            eprintln!("rtcat: event {line}");
                        }
                    }
                    if let (Some(c), Some(w)) = (samples.as_mut(), csv.as_mut()) {
                        while let Ok(s) = c.pop() {
                            writeln!(
                                w,
                                "{},{},{},{},{}",
                                s.cycle, s.wake_ns, s.exec_ns, s.rtt_ns, s.wkc
                            )?;
                        }
                    }
                    if stopping {
                        break;
                    }
                    let cycles = live.cycles.load(Ordering::Relaxed);
                    if let Some(iv) = cfg.interval
                        && last_print.elapsed() >= iv
                    {
                        log.flush()?;
                        eprintln!(
                            "rtcat: t={:.0}s cycles={} wake_max={:.1}µs exec_max={:.1}µs missed={} \
                             wkc_mismatch={} lost={} recoveries={} {}",
                            start.elapsed().as_secs_f64(),
                            cycles,
                            live.wake_max_ns.swap(0, Ordering::Relaxed) as f64 / 1000.0,
                            live.exec_max_ns.swap(0, Ordering::Relaxed) as f64 / 1000.0,
                            live.missed.load(Ordering::Relaxed),
                            live.wkc_mismatches.load(Ordering::Relaxed),
                            live.frames_lost.load(Ordering::Relaxed),
                            live.recoveries.load(Ordering::Relaxed),
                            if live.recovering.load(Ordering::Relaxed) == 1 {
                                "RECOVERING"
                            } else if live.healthy.load(Ordering::Relaxed) == 1 {
                                "OK"
                            } else {
                                "DEGRADED"
                            }
                        );
                        last_print = Instant::now();
                    }
                    if let Some(n) = cfg.notifier.as_ref()
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
                    if let Some(n) = cfg.notifier.as_ref() {
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
                log.flush()?;
                if let Some(w) = csv.as_mut() {
                    w.flush()?;
                }
                Ok(())
            })?;
        Ok(StatusThread { stop, handle })
    }

    /// Drain everything left, flush the files, and stop.
    pub fn finish(self) -> std::io::Result<()> {
        self.stop.store(true, Ordering::Release);
        self.handle
            .join()
            .map_err(|_| std::io::Error::other("status thread panicked"))?
    }
}
