//! A simulated segment behind a [`Link`] that lets a test look at every frame the master sends
//! and at the devices after it (registers as the master left them, the simulator's own figures).

use ecsim::{Faults, SimPort};
use rtcat_master::{Link, LinkFactory, Target};
use std::sync::Arc;
use std::time::Duration;

/// Forwards to the simulated line and hands it and the frame to `after` after every frame sent:
/// the test looks at what was sent and at the devices as the master left them.
pub struct Observed {
    inner: SimPort,
    after: Look,
}

/// What [`Observed`] calls after every frame.
pub type Look = Arc<dyn Fn(&mut SimPort, &[u8]) + Send + Sync>;

impl Link for Observed {
    fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
        let r = Link::send(&mut self.inner, frame);
        (self.after)(&mut self.inner, frame);
        r
    }
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        Link::recv(&mut self.inner, buf)
    }
    fn wait(
        &mut self,
        timeout: Duration,
        extra_fd: Option<std::os::fd::RawFd>,
    ) -> std::io::Result<()> {
        self.inner.wait(timeout, extra_fd)
    }
    fn describe(&self) -> String {
        format!("observed {}", self.inner.describe())
    }
}

/// The simulated segment `seg` with `faults` behind an [`Observed`] link.
pub fn observed(
    seg: ecsim::SegmentSpec,
    faults: &Faults,
    after: impl Fn(&mut SimPort, &[u8]) + Send + Sync + 'static,
) -> Target {
    let (faults, after): (_, Look) = (faults.clone(), Arc::new(after));
    Target::Link(LinkFactory::new("observed-sim", move || {
        Ok(Box::new(Observed {
            inner: SimPort::with_faults(seg.clone(), faults.clone()),
            after: after.clone(),
        }) as Box<dyn Link>)
    }))
}
