//! The blocking client: one connection, one request at a time, every wait bounded.

use crate::protocol::{Failure, Reply, Request};
use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest reply line the client takes (a scan of a large segment is some 100 KiB).
pub const MAX_REPLY: usize = 16 << 20;

/// Default time a request may take: a scan reads every register and SII word through the
/// master's acyclic queue, about one read per cycle, and a segment of many subdevices takes
/// seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a request got no reply.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Could not connect.
    #[error("control socket {}: {source} (is the master running with --control?)", path.display())]
    Connect {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Reading or writing failed.
    #[error("control socket: {0}")]
    Io(#[source] std::io::Error),
    /// No reply within the timeout.
    #[error("control socket: no reply within {} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// The master closed the connection.
    #[error("control socket: the master closed the connection")]
    Closed,
    /// A reply that is not the protocol's.
    #[error("control socket: malformed reply: {0}")]
    BadReply(String),
    /// The master answered with a failure.
    #[error("{0}")]
    Failed(Failure),
}

/// A connection to a master's control socket.
pub struct Client {
    stream: UnixStream,
    buf: Vec<u8>,
    timeout: Duration,
}

impl Client {
    /// Connect to the socket at `path` ([`DEFAULT_TIMEOUT`] per request).
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.into(),
            source,
        })?;
        Ok(Client {
            stream,
            buf: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Set the time a request may take.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// Send `request` and wait for its reply.
    pub fn request(&mut self, request: &Request) -> Result<Reply, ClientError> {
        self.request_line(&request.to_line())
    }

    /// Send one raw line (no newline) and wait for the reply.
    pub fn request_line(&mut self, line: &str) -> Result<Reply, ClientError> {
        self.request_line_fd(line, None)
    }

    /// Send `request` with the descriptor `fd` passed along (`SCM_RIGHTS`, unix(7)): a file
    /// this process opened, which the master reads or writes instead of opening a path
    /// ([`Request::takes_fd`]). Waits for the reply.
    pub fn request_with_fd(
        &mut self,
        request: &Request,
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> Result<Reply, ClientError> {
        self.request_line_fd(&request.to_line(), Some(fd))
    }

    fn request_line_fd(
        &mut self,
        line: &str,
        fd: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<Reply, ClientError> {
        use std::os::fd::AsRawFd;
        let end = Instant::now() + self.timeout;
        self.stream
            .set_write_timeout(Some(self.timeout.max(Duration::from_millis(1))))
            .map_err(ClientError::Io)?;
        let mut l = line.to_string();
        l.push('\n');
        let mut bytes = l.as_bytes();
        if let Some(fd) = fd {
            // The descriptor rides with the line's first byte; the rest follows as stream data.
            let raw = [fd.as_raw_fd()];
            let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&raw)];
            let iov = [std::io::IoSlice::new(&bytes[..1])];
            nix::sys::socket::sendmsg::<()>(
                self.stream.as_raw_fd(),
                &iov,
                &cmsg,
                nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
                None,
            )
            .map_err(|e| ClientError::Io(e.into()))?;
            bytes = &bytes[1..];
        }
        self.stream.write_all(bytes).map_err(|e| {
            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
                ClientError::Timeout(self.timeout)
            } else {
                ClientError::Io(e)
            }
        })?;
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                return serde_json::from_slice(&line[..nl])
                    .map_err(|e| ClientError::BadReply(e.to_string()));
            }
            if self.buf.len() > MAX_REPLY {
                return Err(ClientError::BadReply(format!(
                    "reply longer than {MAX_REPLY} bytes"
                )));
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Timeout(self.timeout));
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(ClientError::Io)?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(ClientError::Timeout(self.timeout));
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(ClientError::Io(e)),
            }
        }
    }

    /// Send `request`; its data, or the master's failure as [`ClientError::Failed`].
    pub fn call(&mut self, request: &Request) -> Result<Value, ClientError> {
        self.request(request)?
            .into_result()
            .map_err(ClientError::Failed)
    }
}
