//! Wire transport: [`Responder`] answers EtherCAT frames on an interface as the simulated chain,
//! so a master on the other end of a veth pair sees a real wire. The socket is `rtcat-packet`'s,
//! the master's own, so both ends see the network the same way.

use crate::faults::Faults;
use crate::port::{MAX_FRAME, SimPort};
use rtcat_packet::{MIN_FRAME_LEN, PacketKind, PacketSocket, floor, is_link_error, wait_fds};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Answers EtherCAT frames on an interface as the simulated chain.
pub struct Responder {
    sock: PacketSocket,
    port: SimPort,
    status: Arc<Mutex<String>>,
    link_errors: u64,
    /// Frames shorter than the Ethernet minimum, dropped unanswered as an ESC's port drops
    /// them (a master that does not pad is seen to fail here, as on a real segment).
    runts: u64,
    /// The floor benchmark's echo (`with_floor_echo`).
    echo: Option<Echo>,
}

/// The floor benchmark's echo: its own socket for [`floor::ETHERTYPE`], served by the
/// responder's thread (same CPU, same priority) between EtherCAT frames.
struct Echo {
    sock: PacketSocket,
    counts: Arc<EchoCounts>,
}

/// What the floor echo did, readable from any thread.
#[derive(Debug, Default)]
pub struct EchoCounts {
    /// Pings returned.
    pub echoed: AtomicU64,
    /// Frames of the floor's EtherType without its marker, not returned.
    pub ignored: AtomicU64,
}

impl Responder {
    pub fn new(iface: &str, port: SimPort) -> io::Result<Self> {
        Self::with_status(iface, port, Arc::new(Mutex::new(String::from("starting"))))
    }

    /// As [`Responder::new`], refreshing `status` (e.g. one a control socket already serves).
    pub fn with_status(iface: &str, port: SimPort, status: Arc<Mutex<String>>) -> io::Result<Self> {
        Ok(Self {
            sock: PacketSocket::open(iface)?,
            port,
            status,
            link_errors: 0,
            runts: 0,
            echo: None,
        })
    }

    /// Also return the floor benchmark's pings ([`rtcat_packet::floor`]) as received, MAC
    /// addresses swapped, with no EtherCAT processing.
    pub fn with_floor_echo(mut self) -> io::Result<Self> {
        let sock = PacketSocket::open_ethertype(self.sock.iface(), floor::ETHERTYPE)?;
        self.echo = Some(Echo {
            sock,
            counts: Arc::default(),
        });
        Ok(self)
    }

    /// The floor echo's counters (None without the echo).
    pub fn floor_echo_counts(&self) -> Option<Arc<EchoCounts>> {
        self.echo.as_ref().map(|e| e.counts.clone())
    }

    pub fn faults(&self) -> Faults {
        self.port.faults().clone()
    }

    /// A text status, refreshed every 100 ms while running (served on the control socket).
    pub fn status_handle(&self) -> Arc<Mutex<String>> {
        self.status.clone()
    }

    fn refresh_status(&mut self) {
        let st = self.port.stats();
        let now = self.port.now_ns();
        let dc = crate::dc::status_field(&self.port.segment_mut().dc_statuses(now));
        let states = self.port.segment().device_states();
        let text = format!(
            "frames={} replied={} lost={} link_down_drops={} malformed={} ignored={} \
             wkc_corrupted={} power_cycles={} link_errors={} runts={} devices=[{states}]{dc}",
            st.frames,
            st.replied,
            st.lost,
            st.link_down_drops,
            st.malformed,
            st.ignored,
            st.wkc_corrupted,
            st.power_cycles,
            self.link_errors,
            self.runts,
        );
        let text = match &self.echo {
            Some(e) => format!(
                "{text} floor_echoed={} floor_ignored={}",
                e.counts.echoed.load(Ordering::Relaxed),
                e.counts.ignored.load(Ordering::Relaxed)
            ),
            None => text,
        };
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }

    /// Serve until `stop` is set. Returns the port (with its counters) at the end.
    pub fn run(mut self, stop: &AtomicBool) -> io::Result<SimPort> {
        let mut buf = vec![0u8; MAX_FRAME + 64];
        let mut last_status = std::time::Instant::now();
        self.refresh_status();
        while !stop.load(Ordering::Relaxed) {
            let timeout = match self.port.next_due_ns() {
                Some(due) => Duration::from_nanos(due.saturating_sub(self.port.now_ns())),
                None => Duration::from_millis(100),
            };
            match self.echo.as_ref().map(|e| e.sock.as_raw_fd()) {
                Some(echo_fd) => {
                    wait_fds(&[self.sock.as_raw_fd(), echo_fd], Some(timeout))?;
                    self.serve_echo(&mut buf)?;
                }
                None => {
                    self.sock.wait_readable(Some(timeout))?;
                }
            }
            loop {
                match self.sock.recv(&mut buf) {
                    Ok(Some((_, PacketKind::Outgoing))) => continue,
                    Ok(Some((n, PacketKind::Incoming))) if n < MIN_FRAME_LEN => self.runts += 1,
                    Ok(Some((n, PacketKind::Incoming))) => {
                        self.port.send(&buf[..n]);
                    }
                    Ok(None) => break,
                    // The interface went down (cable pulled): the socket reports it once and
                    // resumes by itself when the link is back. Keep serving.
                    Err(e) if is_link_error(&e) => {
                        self.link_errors += 1;
                        std::thread::sleep(Duration::from_millis(5));
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            while let Some(n) = self.port.recv(&mut buf) {
                if let Err(e) = self.sock.send(&buf[..n]) {
                    // The link went away under us: the frame is lost, keep going.
                    if !is_link_error(&e) {
                        return Err(e);
                    }
                    self.link_errors += 1;
                }
            }
            if last_status.elapsed() >= Duration::from_millis(100) {
                self.refresh_status();
                last_status = std::time::Instant::now();
            }
        }
        self.refresh_status();
        Ok(self.port)
    }

    /// Return every queued ping (the echo's whole job: swap, send).
    fn serve_echo(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let Some(e) = &mut self.echo else {
            return Ok(());
        };
        loop {
            match e.sock.recv(buf) {
                Ok(Some((_, PacketKind::Outgoing))) => continue,
                Ok(Some((n, PacketKind::Incoming))) => {
                    if !floor::echo_in_place(&mut buf[..n]) {
                        e.counts.ignored.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    match e.sock.send(&buf[..n]) {
                        Ok(_) => {
                            e.counts.echoed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(err) if is_link_error(&err) => self.link_errors += 1,
                        Err(err) => return Err(err),
                    }
                }
                Ok(None) => return Ok(()),
                Err(err) if is_link_error(&err) => {
                    self.link_errors += 1;
                    return Ok(());
                }
                Err(err) => return Err(err),
            }
        }
    }
}
