//! The in-process segment as the master's link ([`rtcat_packet::link::Link`]): processing
//! happens inside `send`, the response is there once due (`delay-us`), and `wait` sleeps until
//! the oldest queued response is due (or the master's fd is readable, or the timeout).

use crate::port::SimPort;
use rtcat_packet::link::Link;
use rtcat_packet::wait_fds;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

impl Link for SimPort {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        // A frame the segment drops (a fault, a full queue) is lost on the wire: no error.
        SimPort::send(self, frame);
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(SimPort::recv(self, buf))
    }

    fn wait(&mut self, timeout: Duration, extra_fd: Option<RawFd>) -> io::Result<()> {
        let until_due = self
            .next_due_ns()
            .map(|due| Duration::from_nanos(due.saturating_sub(self.now_ns())));
        let t = until_due.map_or(timeout, |d| d.min(timeout));
        match extra_fd {
            Some(fd) => wait_fds(&[fd], Some(t)).map(drop),
            None => {
                std::thread::sleep(t);
                Ok(())
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "in-process simulated segment ({} subdevices)",
            self.segment().devices().len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentSpec;
    use crate::faults::{FaultCommand, Faults};
    use crate::frame::{Cmd, FrameBuilder, phys};

    /// Through the trait object: a frame sent is answered (source MAC marked as processed), a
    /// delayed answer is not there before it is due and `wait` sleeps until it is.
    #[test]
    fn the_segment_answers_through_the_link_trait() {
        let faults = Faults::new();
        let mut link: Box<dyn Link> = Box::new(SimPort::with_faults(
            SegmentSpec::reference(),
            faults.clone(),
        ));
        assert!(
            link.describe().contains("3 subdevices"),
            "{}",
            link.describe()
        );
        assert_eq!(link.ports(), rtcat_packet::link::LinkPorts::Single);
        let frame = FrameBuilder::new()
            .datagram(Cmd::Brd, 1, phys(0, 0x0130), &[0, 0])
            .build();
        let mut buf = [0u8; 1536];
        link.send(&frame).unwrap();
        let n = link.recv(&mut buf).unwrap().expect("answered at once");
        assert_eq!(n, frame.len());
        assert_eq!(buf[6] & 0x02, 0x02, "processed by the segment");
        assert_eq!(link.recv(&mut buf).unwrap(), None);

        faults.apply(FaultCommand::DelayUs(20_000));
        link.send(&frame).unwrap();
        assert_eq!(link.recv(&mut buf).unwrap(), None, "not due yet");
        let t = std::time::Instant::now();
        link.wait(Duration::from_secs(5), None).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(15),
            "{:?}",
            t.elapsed()
        );
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
        assert_eq!(link.recv(&mut buf).unwrap(), Some(frame.len()));
    }
}
