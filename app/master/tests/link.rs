//! A link of the user's own (`Target::Link`): the master runs over any `Link`. Here a wrapper
//! around the simulated segment that counts what passes through it, as a user's transport
//! (another socket type, a user-space driver, a recorder) would sit between the master and the
//! wire. Runs without the `sim` feature: nothing of the master's own simulator support is used.

use ecsim::{SegmentSpec, SimPort};
use rtcat_master::{Config, Link, LinkFactory, LinkPorts, RunSpec, Stop, Target, ZeroOutputs};
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Default)]
struct Counts {
    opened: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
}

/// Forwards to the simulated segment (through its own `Link` implementation) and counts.
struct Counting {
    inner: SimPort,
    counts: Arc<Counts>,
}

impl Link for Counting {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.counts.sent.fetch_add(1, Ordering::Relaxed);
        Link::send(&mut self.inner, frame)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let r = Link::recv(&mut self.inner, buf)?;
        if r.is_some() {
            self.counts.received.fetch_add(1, Ordering::Relaxed);
        }
        Ok(r)
    }
    fn wait(&mut self, timeout: Duration, extra_fd: Option<RawFd>) -> io::Result<()> {
        self.inner.wait(timeout, extra_fd)
    }
    fn describe(&self) -> String {
        format!("counting {}", self.inner.describe())
    }
}

#[test]
fn the_master_runs_over_a_link_of_the_users_own() {
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    let factory = LinkFactory::new("counting-sim", move || {
        c.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(Counting {
            inner: SimPort::new(SegmentSpec::reference()),
            counts: c.clone(),
        }) as Box<dyn Link>)
    });
    assert_eq!(factory.name(), "counting-sim");
    let mut spec = RunSpec::new(Config::default(), Target::Link(factory), Stop::new());
    spec.no_rt = true;
    spec.duration = Some(Duration::from_millis(600));
    let out = rtcat_master::run_simple(spec, &mut ZeroOutputs).expect("run");
    assert_eq!(counts.opened.load(Ordering::Relaxed), 1);
    assert_eq!(out.subdevices, 3);
    assert!(out.rec.cycles > 100, "{} cycles", out.rec.cycles);
    assert_eq!(out.rec.wkc_mismatches, 0);
    // Every frame of the bring-up and the cycles went through the user's link, and the
    // segment answered each one it took (none lost on the way: the segment answers at once).
    let sent = counts.sent.load(Ordering::Relaxed);
    assert!(
        sent > out.rec.cycles,
        "{sent} frames for {} cycles",
        out.rec.cycles
    );
    assert_eq!(counts.received.load(Ordering::Relaxed), sent);
    // A link that cannot open fails the run with its name and error.
    let bad = LinkFactory::new("nowhere", || Err(io::Error::other("no such device")));
    let mut spec = RunSpec::new(Config::default(), Target::Link(bad), Stop::new());
    spec.no_rt = true;
    let e = rtcat_master::run_simple(spec, &mut ZeroOutputs)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("nowhere") && e.contains("no such device"), "{e}");
    assert_eq!(
        Counting {
            inner: SimPort::new(SegmentSpec::reference()),
            counts: Arc::default()
        }
        .ports(),
        LinkPorts::Single
    );
}
