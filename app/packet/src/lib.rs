//! A raw AF_PACKET socket for EtherCAT frames (EtherType 0x88a4) bound to one interface: the
//! wire transport of the rtcat master and of the simulator's responder (`ecsim::wire`), in one
//! place so both see the network the same way.
//!
//! Written on libc rather than a crate: the two calls that matter on the real-time path
//! (`send`, non-blocking `recvfrom` with `MSG_TRUNC` and the packet type) must allocate nothing
//! and make no syscall beyond the one, which the general-purpose crates (pnet, socket2's
//! generic `recv_from` with an address buffer) do not promise.
#![deny(missing_docs)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// EtherType of EtherCAT frames (ETG.1000.4).
pub const ETHERCAT_ETHERTYPE: u16 = 0x88a4;
/// Ethernet II header: destination, source, EtherType.
pub const ETH_HEADER_LEN: usize = 14;
/// EtherCAT frame header (length and type).
pub const ECAT_HEADER_LEN: usize = 2;
/// Datagram header: command, index, address, length, IRQ.
pub const DATAGRAM_HEADER_LEN: usize = 10;
/// Working counter after each datagram's data.
pub const WKC_LEN: usize = 2;

/// The shortest Ethernet frame without its FCS (IEEE 802.3 §3.2.8: 64 bytes with the FCS).
/// Most NICs pad shorter frames in hardware; veth and some drivers send them as they are, and
/// an Ethernet receiver (an ESC's port among them) drops such a runt. Most bring-up frames
/// (one register datagram: 14 + 2 + 10 + 2..8 + 2 bytes) are shorter.
pub const MIN_FRAME_LEN: usize = 60;

/// `frame`, or a copy padded with zeros in `buf` when it is shorter than [`MIN_FRAME_LEN`]
/// (the EtherCAT header's length field tells a receiver where the datagrams end).
pub fn padded<'a>(frame: &'a [u8], buf: &'a mut [u8; MIN_FRAME_LEN]) -> &'a [u8] {
    if frame.len() >= MIN_FRAME_LEN {
        return frame;
    }
    buf[..frame.len()].copy_from_slice(frame);
    buf[frame.len()..].fill(0);
    &buf[..]
}

pub mod floor;
pub mod link;
pub mod tap;
pub mod xdp;

pub use link::{Link, LinkPorts};

/// A raw AF_PACKET socket bound to one interface, receiving only EtherCAT frames.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
    iface: String,
}

/// Where a received frame came from (`sll_pkttype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketKind {
    /// A frame from the wire.
    Incoming,
    /// A frame this host sent (seen by other sockets on the interface).
    Outgoing,
}

impl PacketSocket {
    /// Open a non-blocking raw socket for EtherType 0x88a4 on `iface`. Needs CAP_NET_RAW.
    pub fn open(iface: &str) -> io::Result<Self> {
        Self::open_ethertype(iface, ETHERCAT_ETHERTYPE)
    }

    /// As [`PacketSocket::open`], receiving only frames of `ethertype` (the floor benchmark's
    /// [`floor::ETHERTYPE`]: the same socket and kernel path, none of the EtherCAT traffic).
    pub fn open_ethertype(iface: &str, ethertype: u16) -> io::Result<Self> {
        let cname = CString::new(iface).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL")
        })?;
        // SAFETY: plain libc calls with valid arguments; the fd is owned right after creation.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("network interface {iface:?} does not exist"),
            ));
        }
        let proto = ethertype.to_be() as i32;
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                proto,
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::EPERM) {
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "raw socket on {iface}: {e}; needs CAP_NET_RAW (run as root, or \
                         `setcap cap_net_raw+ep` on the binary, or AmbientCapabilities=CAP_NET_RAW)"
                    ),
                )
            } else {
                e
            });
        }
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ethertype.to_be();
        sll.sll_ifindex = ifindex;
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            fd,
            ifindex,
            iface: iface.to_string(),
        })
    }

    /// The interface the socket is bound to.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The kernel index of that interface.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Send one complete Ethernet frame, padded with zeros to the Ethernet minimum
    /// ([`MIN_FRAME_LEN`]) when shorter; returns the bytes of `frame` sent.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        let mut pad = [0u8; MIN_FRAME_LEN];
        let wire = padded(frame, &mut pad);
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                wire.as_ptr() as *const libc::c_void,
                wire.len(),
                0,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok((n as usize).min(frame.len()))
        }
    }

    /// Receive one frame without blocking: `Ok(None)` when nothing is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, PacketKind)>> {
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                &mut sll as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                &mut len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        // MSG_TRUNC: n is the real length; a frame longer than the buffer is cut to it.
        let kind = if sll.sll_pkttype == libc::PACKET_OUTGOING {
            PacketKind::Outgoing
        } else {
            PacketKind::Incoming
        };
        Ok(Some(((n as usize).min(buf.len()), kind)))
    }

    /// Wait until the socket is readable or `timeout` passed (None = forever). EINTR returns
    /// early with `Ok(false)`.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        wait_fds(&[self.fd.as_raw_fd()], timeout).map(|r| r.is_some())
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// ppoll on several fds for POLLIN; returns the index of the first readable one.
pub fn wait_fds(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Option<usize>> {
    let mut pfds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 4];
    let n = fds.len().min(pfds.len());
    for (p, &fd) in pfds.iter_mut().zip(fds) {
        p.fd = fd;
        p.events = libc::POLLIN;
    }
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    let rc = unsafe { libc::ppoll(pfds.as_mut_ptr(), n as libc::nfds_t, tsp, std::ptr::null()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(pfds[..n].iter().position(|p| p.revents != 0))
}

/// Errors that mean "the link is down right now", not "the socket is broken".
pub fn is_link_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETDOWN) | Some(libc::ENXIO) | Some(libc::ENOBUFS) | Some(libc::EAGAIN)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_frames_are_padded_with_zeros_long_ones_sent_as_they_are() {
        let mut buf = [0xaau8; MIN_FRAME_LEN];
        let short = [1u8; 30];
        let p = padded(&short, &mut buf);
        assert_eq!(p.len(), MIN_FRAME_LEN);
        assert_eq!(&p[..30], &short[..]);
        assert!(p[30..].iter().all(|&b| b == 0));
        let long = [2u8; 61];
        let mut buf = [0u8; MIN_FRAME_LEN];
        assert_eq!(padded(&long, &mut buf).as_ptr(), long.as_ptr());
        let exact = [3u8; MIN_FRAME_LEN];
        assert_eq!(padded(&exact, &mut buf).len(), MIN_FRAME_LEN);
    }
}
