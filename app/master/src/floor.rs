//! `rtcat bench --floor`: the yardstick of the cycle's round trip (docs/NOTES.md §1.1).
//!
//! Every cycle, after the master's own exchange and the application, the cyclic thread sleeps to
//! the middle of the period and sends one bare ping of the cyclic frame's size
//! ([`rtcat_packet::floor`]) on its own AF_PACKET socket of `rtcat-packet`, then waits for the
//! echo (`rtcat sim --floor-echo`) the way the inline exchange waits: read, `ppoll`, read. Both
//! round trips start from a timer wake on the same thread, CPU and priority, one after the other
//! in every cycle, so whatever the machine does hits both alike.
//!
//! Nothing on that path allocates: the frames and the histogram (fixed bounds, saturating) are
//! made before the first cycle; the histogram goes to the report when the application is dropped.

use crate::clock::{now_ns, sleep_until};
use crate::stats::Live;
use crate::{Application, Cycle, Layer};
use hdrhistogram::Histogram;
use rtcat_packet::{PacketKind, PacketSocket, floor};
use rtcat_results::{FloorSummary, LatencyStats, new_histogram, write_hdr_to};
use safefs::Dir;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Largest ping: an untagged Ethernet II frame.
pub const MAX_PING: usize = 1514;

/// One end of the floor benchmark: sends pings and waits for their echo.
pub struct Pinger {
    sock: PacketSocket,
    frame: Box<[u8; MAX_PING]>,
    buf: Box<[u8; MAX_PING]>,
    seq: u64,
}

impl Pinger {
    /// A socket for the floor's EtherType on `iface` (CAP_NET_RAW).
    pub fn open(iface: &str) -> io::Result<Self> {
        Ok(Pinger {
            sock: PacketSocket::open_ethertype(iface, floor::ETHERTYPE)?,
            frame: Box::new([0; MAX_PING]),
            buf: Box::new([0; MAX_PING]),
            seq: 0,
        })
    }

    /// One ping of `len` bytes (clamped to [`floor::MIN_LEN`]..=[`MAX_PING`]): its round trip in
    /// ns (send to reply taken, stamped as the bus stamps the exchange), or None when no reply
    /// came by `until_ns` (monotonic).
    pub fn ping(&mut self, len: usize, until_ns: u64) -> io::Result<Option<u64>> {
        self.seq += 1;
        let frame = &mut self.frame[..len.clamp(floor::MIN_LEN, MAX_PING)];
        floor::write_ping(frame, self.seq);
        let t0 = now_ns();
        self.sock.send(frame)?;
        loop {
            while let Some((n, kind)) = self.sock.recv(&mut self.buf[..])? {
                // A late reply to an earlier ping (its cycle gave up on it) is skipped.
                if kind == PacketKind::Incoming && floor::is_reply(&self.buf[..n], self.seq) {
                    return Ok(Some(now_ns() - t0));
                }
            }
            let now = now_ns();
            if now >= until_ns {
                return Ok(None);
            }
            self.sock
                .wait_readable(Some(Duration::from_nanos(until_ns - now)))?;
        }
    }
}

/// What the floor measured, read after the run.
#[derive(Default)]
pub struct FloorReport {
    /// Pings sent.
    pub pings: AtomicU64,
    /// Pings without a reply before the end of their cycle.
    pub lost: AtomicU64,
    /// Send or receive errors of the floor's socket (the ping of that cycle is not counted).
    pub errors: AtomicU64,
    /// The size pinged with (the cyclic frame's, last seen).
    pub frame_bytes: AtomicU64,
    /// The round trips, handed over when the application is dropped.
    pub rtt: Mutex<Option<Histogram<u64>>>,
}

/// The floor's histogram file in the results directory, beside `rtt_ns.hdr`.
pub const HDR_FILE: &str = "floor_rtt_ns.hdr";

impl FloorReport {
    /// The results' `floor` section, with the ratios of rtcat's round trip `rtcat` over it.
    pub fn summary(&self, rtcat: Option<&LatencyStats>) -> FloorSummary {
        let rtt = self.rtt.lock().unwrap_or_else(|e| e.into_inner());
        let stats = rtt.as_ref().map_or_else(
            || LatencyStats::from_histogram(&new_histogram()),
            LatencyStats::from_histogram,
        );
        FloorSummary::new(
            self.frame_bytes.load(Ordering::Relaxed),
            [&self.pings, &self.lost, &self.errors].map(|n| n.load(Ordering::Relaxed)),
            stats,
            rtcat,
        )
    }

    /// Write [`HDR_FILE`] (nothing when the application never handed its histogram over).
    pub fn write_hdr(&self, dir: &Dir) -> rtcat_results::Result<()> {
        match &*self.rtt.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(h) => write_hdr_to(dir, HDR_FILE, h),
            None => Ok(()),
        }
    }
}

/// The bench's application with a floor ping after it in every cycle.
pub struct FloorPing {
    inner: Box<dyn Application>,
    pinger: Pinger,
    live: Arc<Live>,
    period_ns: u64,
    hist: Option<Histogram<u64>>,
    report: Arc<FloorReport>,
}

impl FloorPing {
    /// Wrap `inner`; `live` gives the cyclic frame's size (published by the bus every cycle).
    pub fn new(
        inner: Box<dyn Application>,
        pinger: Pinger,
        live: Arc<Live>,
        period_ns: u64,
        report: Arc<FloorReport>,
    ) -> Self {
        FloorPing {
            inner,
            pinger,
            live,
            period_ns,
            hist: Some(new_histogram()),
            report,
        }
    }
}

// A layer: configure, on_recovery and shutdown go to the inner application unchanged.
impl Layer for FloorPing {
    fn inner(&mut self) -> &mut dyn Application {
        self.inner.as_mut()
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        self.inner.cycle(cx);
        // 0 before the first cycle's frame was sent: nothing to size the ping after yet.
        let len = self.live.cycle_frame_bytes.load(Ordering::Relaxed) as usize;
        if len == 0 {
            return;
        }
        let half = self.period_ns / 2;
        let start = cx.status.deadline_ns + half;
        // Leave a tenth of the period for the next wake.
        let until = cx.status.deadline_ns + self.period_ns - self.period_ns / 10;
        if now_ns() >= start {
            // The cycle ran past mid-period: the ping would not start from a wake. Skipped.
            return;
        }
        sleep_until(start);
        let r = &self.report;
        r.frame_bytes.store(len as u64, Ordering::Relaxed);
        match self.pinger.ping(len, until) {
            Ok(Some(rtt)) => {
                r.pings.fetch_add(1, Ordering::Relaxed);
                if let Some(h) = &mut self.hist {
                    h.saturating_record(rtt);
                }
            }
            Ok(None) => {
                r.pings.fetch_add(1, Ordering::Relaxed);
                r.lost.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                r.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for FloorPing {
    fn drop(&mut self) {
        *self.report.rtt.lock().unwrap_or_else(|e| e.into_inner()) = self.hist.take();
    }
}
