//! The server: a thread accepting on a Unix stream socket, one thread per connection.
//!
//! - **Creation.** Nothing at the path: the socket is created. A socket of this process's user
//!   that nobody listens on (a master that died) is replaced. A socket somebody still listens on
//!   (another master), a socket of another user, or anything that is not a socket (a file, a
//!   symbolic link, a directory) is refused with an error naming it: a name pre-created by
//!   somebody else must not capture the clients. The socket is bound, handed to the group of
//!   [`ServerConfig::gid`] and set to mode 0660 *before* it listens, so no client can connect
//!   while its mode is still the umask's.
//! - **Limits.** At most [`ServerConfig::max_connections`] connections at once, at most
//!   [`ServerConfig::max_per_process`] of one process and [`ServerConfig::max_per_user`] of one
//!   uid (`SO_PEERCRED`), so that one client's idle connections cannot lock out the others (the
//!   exporter); the next one gets an error line and is closed. Lines of at most [`MAX_LINE`] bytes (a longer one gets an
//!   error and the connection is closed: it cannot be framed), a connection idle for
//!   [`ServerConfig::idle_timeout`] is closed, and a client that does not read its replies is
//!   dropped after [`ServerConfig::write_timeout`].
//! - **Rights.** Whoever can connect (the socket's group) may read. A state-changing request
//!   ([`Request::is_write`]) is checked against [`ServerConfig::writers`] with the peer's
//!   credentials, and every one of them, done, failed or refused, is handed to
//!   [`Provider::record`] with the peer's uid and pid: the master puts it on the record.
//! - **Isolation.** A connection's thread only ever waits on its own socket and on the
//!   [`Provider`]; the provider answers from snapshots and from the master's acyclic queue,
//!   which the cyclic thread serves in its own time budget. A slow or stuck client therefore
//!   holds its own thread, never the master.

use crate::protocol::{Failure, MAX_LINE, Reply, Request};
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use nix::sys::stat::{self, Mode, SFlag};
use nix::unistd::{Gid, Uid};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{ErrorKind, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Descriptors a client may pass with one request; more are closed unread.
pub const MAX_FDS_IN: usize = 2;

/// What answers the requests (the binary implements it over the running master).
pub trait Provider: Send + Sync + 'static {
    /// The data of a successful reply, or why the request failed. Called on a connection's
    /// thread; it may block (an SDO transfer) but must end within its own timeout. Only
    /// requests the peer has the right to make get here.
    fn handle(&self, request: &Request) -> Result<Value, Failure>;

    /// [`Provider::handle`] with the peer's credentials, and file descriptors to pass with the
    /// reply (`SCM_RIGHTS`, unix(7)): the shared process image and writer objects. The default
    /// has no descriptors.
    fn handle_peer(
        &self,
        request: &Request,
        _peer: &Peer,
    ) -> Result<(Value, Vec<OwnedFd>), Failure> {
        self.handle(request).map(|v| (v, Vec::new()))
    }

    /// [`Provider::handle_peer`] for a request that takes a descriptor ([`Request::takes_fd`]),
    /// with the descriptors the peer passed with it (`SCM_RIGHTS`; at most [`MAX_FDS_IN`]). The
    /// default refuses: this provider does not serve such requests.
    fn handle_with_fds(
        &self,
        request: &Request,
        _peer: &Peer,
        _fds: Vec<OwnedFd>,
    ) -> Result<(Value, Vec<OwnedFd>), Failure> {
        Err(Failure::usage(format!(
            "{}: not served by this master",
            request.name()
        )))
    }

    /// A state-changing request was done, failed or refused: put it on the record. Called on
    /// the connection's thread after [`Provider::handle`] (or instead of it, when refused); it
    /// may block for a while, which slows only that client.
    fn record(&self, _peer: &Peer, _request: &Request, _outcome: &Outcome<'_>) {}
}

/// Who is at the other end of a connection: `SO_PEERCRED`, as the kernel took it at
/// `connect()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

/// What became of a state-changing request, for [`Provider::record`].
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// Done.
    Done,
    /// Tried, and failed.
    Failed(&'a Failure),
    /// Not tried: the peer has no right to write.
    Refused(&'a str),
}

/// Who may make state-changing requests (`sdo_write`, `al_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writers {
    /// The master's own user and root only (no `[ipc] write_group`).
    Owner,
    /// Also the members of this group (`[ipc] write_group`): primary group, or a
    /// supplementary group of the peer's uid in the group database.
    Group(u32),
    /// Nobody (`[ipc] writes = false`).
    Nobody,
}

impl Writers {
    /// Whether `peer` may write; why not otherwise.
    pub fn check(&self, peer: &Peer) -> Result<(), String> {
        let own = Uid::effective().as_raw();
        match *self {
            Writers::Nobody => {
                Err("writes are disabled on this master ([ipc] writes = false)".into())
            }
            _ if peer.uid == 0 || peer.uid == own => Ok(()),
            Writers::Owner => Err(format!(
                "uid {} may not write: without [ipc] write_group only the master's user (uid \
                 {own}) and root may",
                peer.uid
            )),
            Writers::Group(g) => {
                if peer.gid == g || in_group(peer.uid, peer.gid, g) {
                    Ok(())
                } else {
                    Err(format!(
                        "uid {} may not write: not a member of [ipc] write_group (gid {g})",
                        peer.uid
                    ))
                }
            }
        }
    }
}

/// Whether `uid` (primary group `gid`) is a member of `group` in the group database.
fn in_group(uid: u32, gid: u32, group: u32) -> bool {
    let Ok(Some(user)) = nix::unistd::User::from_uid(Uid::from_raw(uid)) else {
        return false;
    };
    let Ok(name) = std::ffi::CString::new(user.name) else {
        return false;
    };
    nix::unistd::getgrouplist(&name, Gid::from_raw(gid))
        .is_ok_and(|gs| gs.iter().any(|g| g.as_raw() == group))
}

/// The credentials of the process at the other end of `s`.
pub fn peer_of(s: &UnixStream) -> std::io::Result<Peer> {
    let c =
        socket::getsockopt(s, socket::sockopt::PeerCredentials).map_err(std::io::Error::from)?;
    Ok(Peer {
        pid: c.pid(),
        uid: c.uid(),
        gid: c.gid(),
    })
}

/// Where and how the server listens.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The socket's path.
    pub path: PathBuf,
    /// Group the socket is handed to (`[ipc] group`); None keeps the process's.
    pub gid: Option<u32>,
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections of one process (pid) at once.
    pub max_per_process: usize,
    /// Connections of one user (uid) at once.
    pub max_per_user: usize,
    /// Who may make state-changing requests.
    pub writers: Writers,
    /// A connection without a request for this long is closed.
    pub idle_timeout: Duration,
    /// A reply that cannot be written for this long closes the connection.
    pub write_timeout: Duration,
}

impl ServerConfig {
    /// The protocol's defaults: 16 connections, 4 per process, 8 per user, 60 s idle timeout,
    /// 5 s write timeout; writes by the master's user and root only.
    pub fn new(path: impl Into<PathBuf>, gid: Option<u32>) -> ServerConfig {
        ServerConfig {
            path: path.into(),
            gid,
            max_connections: 16,
            max_per_process: 4,
            max_per_user: 8,
            writers: Writers::Owner,
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(5),
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Something other than a stale socket of ours is at the path.
    #[error("control socket {}: {what} is in the way; not replaced (remove it if it is not needed)", path.display())]
    Foreign {
        /// The path.
        path: PathBuf,
        /// What is there.
        what: String,
    },
    /// Another process listens on the path.
    #[error("control socket {}: another process listens on it (a second master?)", path.display())]
    InUse {
        /// The path.
        path: PathBuf,
    },
    /// The path does not fit a Unix socket address (108 bytes on Linux, unix(7)).
    #[error("control socket {}: {why}", path.display())]
    BadPath {
        /// The path.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// A system call failed.
    #[error("control socket {}: {op}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the error is the user's (a path that cannot be used as given): exit 2.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::Foreign { .. } | Error::InUse { .. } | Error::BadPath { .. }
        )
    }
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(nix::Error) -> Error + 'a {
    move |e| Error::Io {
        path: path.to_path_buf(),
        op,
        source: std::io::Error::from(e),
    }
}

fn describe(st: &stat::FileStat) -> String {
    let kind = match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symbolic link",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
        SFlag::S_IFSOCK => "a socket",
        _ => "a file of unknown type",
    };
    format!("{kind} owned by uid {}", st.st_uid)
}

/// Make the path free for our socket: nothing there, or a stale socket of ours (removed).
fn clear(path: &Path) -> Result<(), Error> {
    let st = match stat::lstat(path) {
        Ok(st) => st,
        Err(nix::Error::ENOENT) => return Ok(()),
        Err(e) => return Err(io(path, "lstat")(e)),
    };
    let is_socket = st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFSOCK.bits();
    if !is_socket || st.st_uid != Uid::effective().as_raw() {
        return Err(Error::Foreign {
            path: path.into(),
            what: describe(&st),
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(Error::InUse { path: path.into() }),
        Err(_) => nix::unistd::unlink(path).map_err(io(path, "remove the stale socket")),
    }
}

/// Create, hand over, restrict, then listen: see the module documentation.
fn create(cfg: &ServerConfig) -> Result<(UnixListener, (u64, u64)), Error> {
    let path = cfg.path.as_path();
    let addr = UnixAddr::new(path).map_err(|_| Error::BadPath {
        path: path.into(),
        why: "longer than a Unix socket path may be (107 bytes)".into(),
    })?;
    clear(path)?;
    let fd: OwnedFd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io(path, "socket"))?;
    socket::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr).map_err(io(path, "bind"))?;
    let done = (|| {
        // Ours, just bound: a socket of our uid (a swap of the name between bind and here
        // would show as something else).
        let st = stat::lstat(path).map_err(io(path, "lstat"))?;
        if st.st_mode & SFlag::S_IFMT.bits() != SFlag::S_IFSOCK.bits()
            || st.st_uid != Uid::effective().as_raw()
        {
            return Err(Error::Foreign {
                path: path.into(),
                what: describe(&st),
            });
        }
        if let Some(g) = cfg.gid {
            nix::unistd::fchownat(
                nix::fcntl::AT_FDCWD,
                path,
                None,
                Some(Gid::from_raw(g)),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(io(path, "hand the socket to [ipc] group"))?;
        }
        stat::fchmodat(
            nix::fcntl::AT_FDCWD,
            path,
            Mode::from_bits_truncate(0o660),
            stat::FchmodatFlags::FollowSymlink,
        )
        .map_err(io(path, "chmod 0660"))?;
        socket::listen(
            &fd,
            socket::Backlog::new(16).expect("16 is a valid backlog"),
        )
        .map_err(io(path, "listen"))?;
        Ok((st.st_dev, st.st_ino))
    })();
    match done {
        Ok(id) => {
            let l = UnixListener::from(fd);
            l.set_nonblocking(true).map_err(|source| Error::Io {
                path: path.into(),
                op: "set non-blocking",
                source,
            })?;
            Ok((l, id))
        }
        Err(e) => {
            let _ = nix::unistd::unlink(path);
            Err(e)
        }
    }
}

/// A running server; stopping it (or dropping it) closes every connection and removes the
/// socket (when it is still the one it created).
pub struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
    id: (u64, u64),
    active: Arc<AtomicUsize>,
}

/// How often the threads look at the stop flag.
const TICK: Duration = Duration::from_millis(50);

impl Server {
    /// Create the socket and start serving `provider` on it.
    pub fn start(cfg: ServerConfig, provider: Arc<dyn Provider>) -> Result<Server, Error> {
        let (listener, id) = create(&cfg)?;
        let stop = Arc::new(AtomicBool::new(false));
        let active = Arc::new(AtomicUsize::new(0));
        let (s, a) = (stop.clone(), active.clone());
        let path = cfg.path.clone();
        let thread = std::thread::Builder::new()
            .name("rtcat-control".into())
            .spawn(move || accept_loop(listener, cfg, provider, s, a))
            .map_err(|source| Error::Io {
                path: path.clone(),
                op: "start the server thread",
                source,
            })?;
        Ok(Server {
            stop,
            thread: Some(thread),
            path,
            id,
            active,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Stop serving, close the connections, remove the socket.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Ok(st) = stat::lstat(self.path.as_path())
            && (st.st_dev, st.st_ino) == self.id
        {
            let _ = nix::unistd::unlink(self.path.as_path());
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The open connections: in total, and per process and per user.
#[derive(Default)]
struct Open {
    per_pid: HashMap<i32, usize>,
    per_uid: HashMap<u32, usize>,
}

/// Gives back a connection's place when its thread ends.
struct Slot {
    active: Arc<AtomicUsize>,
    open: Arc<Mutex<Open>>,
    peer: Peer,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
        let mut o = self.open.lock().unwrap_or_else(|p| p.into_inner());
        dec(&mut o.per_pid, self.peer.pid);
        dec(&mut o.per_uid, self.peer.uid);
    }
}

fn dec<K: std::hash::Hash + Eq>(m: &mut HashMap<K, usize>, k: K) {
    if let Some(n) = m.get_mut(&k) {
        *n -= 1;
        if *n == 0 {
            m.remove(&k);
        }
    }
}

/// Take a place for `peer`, or say which limit it hit.
fn admit(
    cfg: &ServerConfig,
    active: &Arc<AtomicUsize>,
    open: &Arc<Mutex<Open>>,
    peer: Peer,
) -> Result<Slot, String> {
    let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
    let pid = o.per_pid.get(&peer.pid).copied().unwrap_or(0);
    let uid = o.per_uid.get(&peer.uid).copied().unwrap_or(0);
    if active.load(Ordering::Acquire) >= cfg.max_connections {
        return Err(format!(
            "too many connections (at most {} at once); try again later",
            cfg.max_connections
        ));
    }
    if pid >= cfg.max_per_process {
        return Err(format!(
            "too many connections of pid {} (at most {} per process)",
            peer.pid, cfg.max_per_process
        ));
    }
    if uid >= cfg.max_per_user {
        return Err(format!(
            "too many connections of uid {} (at most {} per user)",
            peer.uid, cfg.max_per_user
        ));
    }
    *o.per_pid.entry(peer.pid).or_insert(0) += 1;
    *o.per_uid.entry(peer.uid).or_insert(0) += 1;
    active.fetch_add(1, Ordering::AcqRel);
    Ok(Slot {
        active: active.clone(),
        open: open.clone(),
        peer,
    })
}

fn accept_loop(
    listener: UnixListener,
    cfg: ServerConfig,
    provider: Arc<dyn Provider>,
    stop: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
) {
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let open = Arc::new(Mutex::new(Open::default()));
    while !stop.load(Ordering::Acquire) {
        threads.retain(|t| !t.is_finished());
        match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_write_timeout(Some(cfg.write_timeout));
                let Ok(peer) = peer_of(&stream) else {
                    continue;
                };
                let slot = match admit(&cfg, &active, &open, peer) {
                    Ok(slot) => slot,
                    Err(why) => {
                        let r = Reply::fail(&Failure::runtime(why));
                        // Non-blocking: a client that does not read loses the line, nobody waits.
                        let _ = stream.set_nonblocking(true);
                        let _ = stream.write_all(format!("{}\n", r.to_line()).as_bytes());
                        continue;
                    }
                };
                let (p, s, c) = (provider.clone(), stop.clone(), cfg.clone());
                match std::thread::Builder::new()
                    .name("rtcat-control-conn".into())
                    .spawn(move || {
                        let _slot = slot;
                        serve(stream, &c, p.as_ref(), &s, &peer);
                    }) {
                    Ok(t) => threads.push(t),
                    // The closure (with its slot) is dropped: the count is right again.
                    Err(_) => continue,
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                std::thread::sleep(TICK);
            }
            // EMFILE and the like: wait and try again rather than spin.
            Err(_) => std::thread::sleep(TICK),
        }
    }
    for t in threads {
        let _ = t.join();
    }
}

/// Serve one connection until it closes, idles out, misbehaves, or the server stops.
fn serve(
    mut stream: UnixStream,
    cfg: &ServerConfig,
    provider: &dyn Provider,
    stop: &AtomicBool,
    peer: &Peer,
) {
    if stream.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    // Descriptors the peer passed (`SCM_RIGHTS`), for the next line that ends: a client sends
    // them with its request line's bytes.
    let mut passed: Vec<OwnedFd> = Vec::new();
    let mut last = Instant::now();
    loop {
        // Every complete line in the buffer first.
        while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let line = &line[..line.len() - 1];
            let received = std::mem::take(&mut passed);
            let (reply, fds) = answer_with(line, provider, peer, &cfg.writers, received);
            let sent = if fds.is_empty() {
                write_line(&mut stream, &reply)
            } else {
                write_line_fds(&stream, &reply, &fds)
            };
            if sent.is_err() {
                return;
            }
            last = Instant::now();
        }
        if buf.len() > MAX_LINE {
            let r = Reply::fail(&Failure::usage(format!(
                "request line longer than {MAX_LINE} bytes; closing the connection"
            )));
            let _ = write_line(&mut stream, &r);
            return;
        }
        if stop.load(Ordering::Acquire) || last.elapsed() >= cfg.idle_timeout {
            return;
        }
        match read_with_fds(&stream, &mut chunk, &mut passed) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}

/// Read what the peer sent, and the descriptors it passed with it (kept in `passed`, at most
/// [`MAX_FDS_IN`]; any more are closed). `MSG_CMSG_CLOEXEC`: a passed descriptor never leaks
/// into a program the master runs.
fn read_with_fds(
    stream: &UnixStream,
    chunk: &mut [u8],
    passed: &mut Vec<OwnedFd>,
) -> std::io::Result<usize> {
    use std::os::fd::{AsRawFd, FromRawFd, RawFd};
    let mut cmsg = nix::cmsg_space!([RawFd; 4]);
    let mut iov = [std::io::IoSliceMut::new(chunk)];
    let m = socket::recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        socket::MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    let n = m.bytes;
    if let Ok(cmsgs) = m.cmsgs() {
        for c in cmsgs {
            if let socket::ControlMessageOwned::ScmRights(fds) = c {
                for fd in fds {
                    // SAFETY: the kernel just installed this descriptor for this process.
                    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                    if passed.len() < MAX_FDS_IN {
                        passed.push(fd);
                    }
                }
            }
        }
    }
    Ok(n)
}

fn write_line(stream: &mut UnixStream, r: &Reply) -> std::io::Result<()> {
    let mut s = r.to_line();
    s.push('\n');
    stream.write_all(s.as_bytes())
}

/// The reply line with the descriptors attached to its first byte (`SCM_RIGHTS`; the rest of the
/// line follows as plain stream data). The descriptors are closed here once sent.
fn write_line_fds(stream: &UnixStream, r: &Reply, fds: &[OwnedFd]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut s = r.to_line();
    s.push('\n');
    let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let cmsg = [socket::ControlMessage::ScmRights(&raw)];
    let bytes = s.as_bytes();
    let iov = [std::io::IoSlice::new(&bytes[..1])];
    socket::sendmsg::<()>(
        stream.as_raw_fd(),
        &iov,
        &cmsg,
        socket::MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(std::io::Error::from)?;
    let mut w = stream;
    w.write_all(&bytes[1..])
}

/// The reply to one line of `peer`: parsed, checked against `writers` when it changes state,
/// answered by `provider`, and put on the record when it changes state.
pub fn answer(line: &[u8], provider: &dyn Provider, peer: &Peer, writers: &Writers) -> Reply {
    answer_fds(line, provider, peer, writers).0
}

/// [`answer`] with the descriptors the provider passes with the reply.
pub fn answer_fds(
    line: &[u8],
    provider: &dyn Provider,
    peer: &Peer,
    writers: &Writers,
) -> (Reply, Vec<OwnedFd>) {
    answer_with(line, provider, peer, writers, Vec::new())
}

/// [`answer_fds`] with the descriptors the peer passed with the line (`received`): given to the
/// provider for a request that takes them, closed otherwise.
pub fn answer_with(
    line: &[u8],
    provider: &dyn Provider,
    peer: &Peer,
    writers: &Writers,
    received: Vec<OwnedFd>,
) -> (Reply, Vec<OwnedFd>) {
    let line = match std::str::from_utf8(line) {
        Ok(l) => l.strip_suffix('\r').unwrap_or(l),
        Err(e) => {
            return (
                Reply::fail(&Failure::usage(format!(
                    "request line is not UTF-8 (byte {})",
                    e.valid_up_to()
                ))),
                Vec::new(),
            );
        }
    };
    let req = match Request::parse(line) {
        Ok(req) => req,
        Err(f) => return (Reply::fail(&f), Vec::new()),
    };
    let handle = |req: &Request, received: Vec<OwnedFd>| {
        if req.takes_fd() {
            if received.is_empty() {
                return Err(Failure::usage(format!(
                    "{}: pass the file's descriptor with the request (SCM_RIGHTS)",
                    req.name()
                )));
            }
            provider.handle_with_fds(req, peer, received)
        } else {
            drop(received);
            provider.handle_peer(req, peer)
        }
    };
    if !req.is_write() {
        return match handle(&req, received) {
            Ok((data, fds)) => (Reply::ok(data), fds),
            Err(f) => (Reply::fail(&f), Vec::new()),
        };
    }
    if let Err(why) = writers.check(peer) {
        provider.record(peer, &req, &Outcome::Refused(&why));
        return (
            Reply::fail(&Failure::usage(format!("{}: {why}", req.name()))),
            Vec::new(),
        );
    }
    let r = handle(&req, received);
    match &r {
        Ok(_) => provider.record(peer, &req, &Outcome::Done),
        Err(f) => provider.record(peer, &req, &Outcome::Failed(f)),
    }
    match r {
        Ok((data, fds)) => (Reply::ok(data), fds),
        Err(f) => (Reply::fail(&f), Vec::new()),
    }
}
