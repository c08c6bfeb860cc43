//! What the master sends its frames over: the [`Link`] trait, and its AF_PACKET implementation
//! on [`PacketSocket`]. The simulator's in-process segment implements it in `ecsim` (`SimPort`);
//! a user's own transport (another socket type, a user-space driver, a test double) implements
//! it the same way and runs with `rtcat_master::Target::Link`.
//!
//! Here rather than in the master so that the simulator, which the master's `sim` feature
//! depends on, can implement it without depending on the master.

use crate::{PacketKind, PacketSocket, wait_fds};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// A transport for whole Ethernet frames between the master and one segment.
///
/// The master calls it from one thread at a time (the TX/RX thread during bring-up, the cyclic
/// thread while cycling), so the methods take `&mut self`; it must be `Send` to move between
/// them. On the real-time path `send`, `recv` and `wait` must not allocate, lock or print (the
/// AF_PACKET link makes exactly one system call in each).
///
/// What each method must do:
/// - [`Link::send`]: put one complete Ethernet frame (destination MAC to the end of the
///   EtherCAT payload, no FCS; ethercrab's frames, 60 bytes or more once padded) on the wire,
///   or fail. It must not block for long: a frame the wire cannot take now is an error (the
///   master counts it and ethercrab's timeout ends the exchange). Padding short frames to the
///   Ethernet minimum is the link's job where the wire needs it.
/// - [`Link::recv`]: never block. Copy one received frame into `buf` and return its length, or
///   `Ok(None)` when none is waiting. A frame longer than `buf` is cut to it (the length
///   returned is at most `buf.len()`); the master's reply filter refuses it. Frames this host
///   sent itself (a packet socket sees them too) must not be returned. The busy and hybrid
///   waits (`[cycle] wait`) call it in a tight loop, so it should be cheap when nothing came.
/// - [`Link::wait`]: block until a frame may be ready, `extra_fd` (a file descriptor of the
///   master: the TX/RX thread's wake-up eventfd) is readable, or `timeout` passed. Returning
///   early is allowed (the master reads and waits again); returning late delays the cycle, so
///   the timeout must be honoured to the µs where the platform can.
/// - [`Link::describe`]: a short human description for logs ("AF_PACKET on eth1").
/// - [`Link::ports`]: which ports are behind the link (see [`LinkPorts`]).
///
/// **A second port (cable redundancy)** belongs inside one link: a redundant link owns both
/// ports, sends every frame on both, and returns one merged reply per frame (each datagram's data
/// from the port whose half of the ring processed it, the working counters added), so the rest
/// of the master sees one segment either way; [`Link::ports`] then reports both ports' state.
/// rtcat does not build one yet (docs/NOTES.md §1.3).
pub trait Link: Send {
    /// Send one complete Ethernet frame.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Receive one frame if one is ready (never blocks).
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Block until a frame may be ready, `extra_fd` is readable, or `timeout` passed.
    fn wait(&mut self, timeout: Duration, extra_fd: Option<RawFd>) -> io::Result<()>;
    /// Short description for logs.
    fn describe(&self) -> String;
    /// The ports behind this link: one, unless the link implements redundancy.
    fn ports(&self) -> LinkPorts {
        LinkPorts::Single
    }
}

/// The ports behind a [`Link`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkPorts {
    /// One port: frames leave and return through it (an open ring returns them at its end).
    Single,
    /// Two ports of a redundant link, with whether each has carrier: the ring is whole when
    /// frames sent on one come back on the other.
    Redundant {
        /// The primary port has carrier.
        primary_up: bool,
        /// The secondary port has carrier.
        secondary_up: bool,
    },
}

/// AF_PACKET on a real (or veth) interface: one `send`, one non-blocking `recvfrom` per frame
/// (our own outgoing copies skipped), `ppoll` on the socket (and the master's fd) to wait.
impl Link for PacketSocket {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let n = PacketSocket::send(self, frame)?;
        if n != frame.len() {
            return Err(io::Error::other(format!(
                "short send: {n} of {} bytes",
                frame.len()
            )));
        }
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            match PacketSocket::recv(self, buf)? {
                Some((_, PacketKind::Outgoing)) => continue,
                Some((n, PacketKind::Incoming)) => return Ok(Some(n)),
                None => return Ok(None),
            }
        }
    }

    fn wait(&mut self, timeout: Duration, extra_fd: Option<RawFd>) -> io::Result<()> {
        let fd = self.as_raw_fd();
        match extra_fd {
            Some(e) => wait_fds(&[fd, e], Some(timeout)).map(drop),
            None => wait_fds(&[fd], Some(timeout)).map(drop),
        }
    }

    fn describe(&self) -> String {
        format!("AF_PACKET on {}", self.iface())
    }
}
