//! A Linux TAP interface: Ethernet frames between a program and the kernel's network stack
//! (Documentation/networking/tuntap.rst). EoE (ETG.1000.6 §5.7) tunnels Ethernet frames
//! through the EtherCAT mailbox; its two ends are TAPs: the master's, where the board's stack
//! (a browser, ssh, a vendor tool) reaches the devices, and in the simulator the device's, where
//! a real server stands behind a simulated drive.
//!
//! Written on libc rather than a crate: creating a TAP is one `open` and one `TUNSETIFF`, the
//! address and flags are three classic `SIOCSIF*` ioctls, and the crates for it (tun, tun-rs)
//! bring async runtimes and layer-3 options this does not need.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `TUNSETIFF` = `_IOW('T', 202, int)` (include/uapi/linux/if_tun.h).
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `IFF_TAP | IFF_NO_PI`: Ethernet frames without the 4-byte packet-information prefix.
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

/// The largest frame a TAP hands over: a 1500-byte MTU plus the Ethernet header and a VLAN tag.
pub const MAX_TAP_FRAME: usize = 1518;

#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

#[repr(C)]
struct IfReqAddr {
    name: [u8; libc::IFNAMSIZ],
    addr: libc::sockaddr,
    _pad: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<IfReqFlags>() == 40);
const _: () = assert!(std::mem::size_of::<IfReqAddr>() == 40);

/// A TAP interface this program created; it disappears when the `Tap` is dropped (it is not
/// made persistent).
#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    name: String,
}

fn ifname(name: &str) -> io::Result<[u8; libc::IFNAMSIZ]> {
    let ok = !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !ok {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{name:?} is not an interface name (1..15 characters: letters, digits, '-', '_', '.')"
            ),
        ));
    }
    let mut b = [0u8; libc::IFNAMSIZ];
    b[..name.len()].copy_from_slice(name.as_bytes());
    Ok(b)
}

/// An `AF_INET` datagram socket, the handle the `SIOCSIF*` ioctls take.
fn inet_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the fd is owned at once.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(s) })
}

fn ioctl<T>(fd: RawFd, req: libc::c_ulong, arg: &mut T, what: &str) -> io::Result<()> {
    // SAFETY: `arg` is the `struct ifreq` layout the request expects, alive for the call.
    if unsafe { libc::ioctl(fd, req as _, arg as *mut T) } < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

impl Tap {
    /// Create TAP interface `name` (non-blocking reads). Needs CAP_NET_ADMIN. An interface of
    /// that name that exists already is refused, not taken over.
    pub fn create(name: &str) -> io::Result<Tap> {
        let raw = ifname(name)?;
        let c = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: a valid C string.
        if unsafe { libc::if_nametoindex(c.as_ptr()) } != 0 {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("interface {name} exists already: choose another EoE interface name"),
            ));
        }
        let dev: &CStr = c"/dev/net/tun";
        // SAFETY: open(2) of a constant path.
        let fd = unsafe {
            libc::open(
                dev.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("open /dev/net/tun: {e} (the tun module, CAP_NET_ADMIN)"),
            ));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut req = IfReqFlags {
            name: raw,
            flags: IFF_TAP | IFF_NO_PI,
            _pad: [0; 22],
        };
        ioctl(
            fd.as_raw_fd(),
            TUNSETIFF,
            &mut req,
            &format!("TUNSETIFF {name}"),
        )?;
        Ok(Tap {
            fd,
            name: name.to_string(),
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The descriptor, to wait on with poll(2).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// One frame the kernel sent out of the interface, or `None` when none waits.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: read(2) into a buffer of the given length.
        let n = unsafe { libc::read(self.fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(n as usize))
    }

    /// Hand one Ethernet frame to the kernel, as if it had arrived on the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: write(2) of a buffer of the given length.
        let n = unsafe { libc::write(self.fd(), frame.as_ptr().cast(), frame.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Bring the interface up (`IFF_UP`).
    pub fn set_up(&self) -> io::Result<()> {
        let s = inet_socket()?;
        let mut req = IfReqFlags {
            name: ifname(&self.name)?,
            flags: 0,
            _pad: [0; 22],
        };
        ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req, "SIOCGIFFLAGS")?;
        req.flags |= libc::IFF_UP as libc::c_short;
        ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req, "SIOCSIFFLAGS")
    }

    /// Set the interface's MAC address (the interface must be down or the driver must allow it;
    /// a TAP does).
    pub fn set_mac(&self, mac: [u8; 6]) -> io::Result<()> {
        let s = inet_socket()?;
        // SAFETY: sockaddr is plain data; zero is a valid value.
        let mut addr: libc::sockaddr = unsafe { std::mem::zeroed() };
        addr.sa_family = libc::ARPHRD_ETHER;
        for (d, m) in addr.sa_data.iter_mut().zip(mac) {
            *d = m as libc::c_char;
        }
        let mut req = IfReqAddr {
            name: ifname(&self.name)?,
            addr,
            _pad: [0; 8],
        };
        ioctl(
            s.as_raw_fd(),
            libc::SIOCSIFHWADDR,
            &mut req,
            "SIOCSIFHWADDR",
        )
    }

    /// Give the interface an IPv4 address and netmask (replacing the one it has).
    pub fn set_ipv4(&self, ip: [u8; 4], mask: [u8; 4]) -> io::Result<()> {
        let s = inet_socket()?;
        for (req_no, a, what) in [
            (libc::SIOCSIFADDR, ip, "SIOCSIFADDR"),
            (libc::SIOCSIFNETMASK, mask, "SIOCSIFNETMASK"),
        ] {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in and sockaddr have the same size (16 bytes) on Linux.
            let addr: libc::sockaddr = unsafe { std::mem::transmute(sin) };
            let mut req = IfReqAddr {
                name: ifname(&self.name)?,
                addr,
                _pad: [0; 8],
            };
            ioctl(s.as_raw_fd(), req_no, &mut req, what)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_before_any_syscall() {
        for bad in ["", "a/b", "sixteen-chars-xx", "sp ace", "ä"] {
            let e = Tap::create(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}: {e}");
        }
    }

    #[test]
    fn an_existing_interface_is_refused() {
        // `lo` exists in every network namespace.
        let e = Tap::create("lo").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert!(e.to_string().contains("lo exists already"), "{e}");
    }

    /// Needs root (CAP_NET_ADMIN) and /dev/net/tun; CI runs as root.
    #[test]
    fn a_frame_written_by_the_kernel_is_read_back() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let name = format!("rtt{}", std::process::id() % 100_000);
        let tap = Tap::create(&name).unwrap();
        tap.set_mac([0x02, 0, 0, 0, 0x77, 1]).unwrap();
        tap.set_ipv4([10, 201, 77, 1], [255, 255, 255, 0]).unwrap();
        tap.set_up().unwrap();
        // A datagram to a neighbour makes the kernel ARP for it out of the TAP.
        let u = std::net::UdpSocket::bind("10.201.77.1:0").unwrap();
        let mut buf = [0u8; MAX_TAP_FRAME];
        let t0 = std::time::Instant::now();
        let mut arp = None;
        while t0.elapsed() < std::time::Duration::from_secs(5) {
            let _ = u.send_to(b"x", "10.201.77.2:9");
            while let Some(n) = tap.recv(&mut buf).unwrap() {
                if n >= 42 && buf[12..14] == [0x08, 0x06] {
                    arp = Some(buf[..n].to_vec());
                }
            }
            if arp.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let arp = arp.expect("an ARP request out of the TAP");
        // from the MAC set above, asking for 10.201.77.2
        assert_eq!(&arp[6..12], &[0x02, 0, 0, 0, 0x77, 1]);
        assert_eq!(&arp[38..42], &[10, 201, 77, 2]);
        assert!(
            Tap::create(&name).is_err(),
            "the name is taken while the TAP lives"
        );
        drop(tap);
    }
}
