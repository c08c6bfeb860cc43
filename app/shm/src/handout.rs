//! The client's side of the handout: one request on the master's control socket, after the
//! peer's credentials were checked, with the descriptors that come with the reply.
//!
//! The socket's peer is checked with `SO_PEERCRED` (unix(7): the credentials the kernel took
//! when the master called `listen`) before the request is even sent: a socket at the expected
//! path that is not the master's (anyone can bind one where the master's directory lets them)
//! gets nothing from the client and gives it nothing. The descriptors come with `SCM_RIGHTS`
//! (unix(7)), received close-on-exec.

use crate::{Error, Result};
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, getsockopt, recvmsg, sockopt::PeerCredentials,
};
use std::io::{IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Longest reply read (the replies to the shm requests are a few hundred bytes).
const MAX_REPLY: usize = 64 * 1024;
/// How long a request may take (a writer request waits for the master to take its object).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Connect to `socket`, check that its peer runs as `master_uid`, send `request` (one JSON
/// object), and return the reply's `data` and the descriptors passed with it. A failure reply
/// is an error with the master's message.
pub(crate) fn ask(
    socket: &Path,
    master_uid: u32,
    request: &serde_json::Value,
) -> Result<(serde_json::Value, Vec<OwnedFd>)> {
    let name = socket.display().to_string();
    let io = |op: &'static str| {
        let name = name.clone();
        move |e: std::io::Error| Error::Sys {
            name: name.clone(),
            op,
            errno: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio())),
        }
    };
    let mut s = UnixStream::connect(socket).map_err(io("connect"))?;
    let cred = getsockopt(&s, PeerCredentials).map_err(|errno| Error::Sys {
        name: name.clone(),
        op: "SO_PEERCRED",
        errno,
    })?;
    if cred.uid() != master_uid {
        return Err(Error::NotMaster {
            name,
            uid: cred.uid(),
            master_uid,
        });
    }
    s.set_read_timeout(Some(TIMEOUT)).map_err(io("timeout"))?;
    s.set_write_timeout(Some(TIMEOUT)).map_err(io("timeout"))?;
    let mut line = request.to_string();
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(io("send the request"))?;
    let mut buf = Vec::with_capacity(512);
    let mut fds = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.contains(&b'\n') {
        if buf.len() > MAX_REPLY {
            return Err(protocol(&name, "reply longer than 64 KiB"));
        }
        let mut cmsg = nix::cmsg_space!([RawFd; 4]);
        let mut iov = [IoSliceMut::new(&mut chunk)];
        let msg = recvmsg::<()>(
            s.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(|errno| Error::Sys {
            name: name.clone(),
            op: "recvmsg",
            errno,
        })?;
        for c in msg.cmsgs().map_err(|errno| Error::Sys {
            name: name.clone(),
            op: "recvmsg (control data)",
            errno,
        })? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: descriptors the kernel just installed in this process for us.
                fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        let n = msg.bytes;
        if n == 0 {
            return Err(protocol(&name, "the master closed the connection"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
    let nl = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    let v: serde_json::Value = serde_json::from_slice(&buf[..nl])
        .map_err(|e| protocol(&name, &format!("reply is not JSON: {e}")))?;
    if v.get("ok") == Some(&serde_json::Value::Bool(true)) {
        Ok((v.get("data").cloned().unwrap_or_default(), fds))
    } else {
        let msg = v
            .get("error")
            .and_then(|e| e.as_str())
            .unwrap_or("request failed");
        Err(Error::Refused {
            name,
            request: request
                .get("cmd")
                .and_then(|c| c.as_str())
                .unwrap_or("?")
                .to_string(),
            why: msg.to_string(),
        })
    }
}

fn libc_eio() -> i32 {
    nix::errno::Errno::EIO as i32
}

fn protocol(name: &str, why: &str) -> Error {
    Error::Format {
        name: name.to_string(),
        field: "reply",
        value: String::new(),
        why: why.to_string(),
    }
}

/// Check that `fd` carries at least `seals` (fcntl(2) `F_GET_SEALS`): what the master hands out
/// cannot be shrunk under the client's mappings.
pub(crate) fn check_seals(name: &str, fd: &OwnedFd, seals: nix::fcntl::SealFlag) -> Result<()> {
    let got =
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GET_SEALS).map_err(|errno| Error::Sys {
            name: name.to_string(),
            op: "F_GET_SEALS",
            errno,
        })?;
    let got = nix::fcntl::SealFlag::from_bits_truncate(got);
    if !got.contains(seals) {
        return Err(Error::Format {
            name: name.to_string(),
            field: "seals",
            value: format!("{got:?}"),
            why: format!("the master seals what it hands out with {seals:?}"),
        });
    }
    Ok(())
}
