//! A descriptor the running master hands out, asked for without the client library (as a
//! member that bypasses it would): one raw request on the control socket, the descriptor from
//! the reply (SCM_RIGHTS, unix(7)). Included with `#[path]` by shm_clients.rs and shm_e2e.rs.

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
use std::io::Write as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::path::Path;

/// Send `request` (one JSON line) to the control socket at `sock` and return the last
/// descriptor the reply carries; panics naming the reply when it carries none.
pub fn handed(sock: &Path, request: &str) -> OwnedFd {
    let mut s = std::os::unix::net::UnixStream::connect(sock).unwrap();
    writeln!(s, "{request}").unwrap();
    let (mut line, mut fds) = (Vec::new(), Vec::new());
    while !line.contains(&b'\n') {
        let mut buf = [0u8; 512];
        let mut cmsg = nix::cmsg_space!([RawFd; 2]);
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let m = recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty()).unwrap();
        for c in m.cmsgs().unwrap() {
            if let ControlMessageOwned::ScmRights(r) = c {
                // SAFETY: descriptors the kernel just installed for us.
                fds.extend(r.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        let n = m.bytes;
        assert!(n > 0, "the master closed the connection");
        line.extend_from_slice(&buf[..n]);
    }
    fds.pop()
        .unwrap_or_else(|| panic!("no descriptor: {}", String::from_utf8_lossy(&line)))
}
