//! The simulator's control socket: fault commands from `rtcat sim-ctl` (or any client) over a
//! UNIX stream socket, one command per line.
//!
//! Protocol: each line (at most [`MAX_LINE`] bytes with its newline) is answered with one line:
//! `ok`, the status text (for `status`), `error: ...` (the command was refused; nothing was
//! applied) or `busy: ...` (well-formed but not taken now; try again). A longer line is answered
//! with an error and the connection is closed; blank lines are ignored.
//!
//! Whoever can connect can inject faults, so the socket is created with mode 0600 (or 0660 and a
//! group, [`Access::Group`]) whatever the umask: it is bound inside a fresh private directory
//! (0700), given its mode and group there and only then linked at the requested path, so it is
//! never reachable with a wider mode. The path is never taken from anything but a stale socket:
//! a regular file, directory, symbolic link or live socket there is refused.
//!
//! One thread serves every client with `poll(2)` over non-blocking connections: a client that
//! sends nothing, or a partial line, or does not read its replies, delays nobody else; it is
//! closed after [`IDLE_TIMEOUT`] without a complete command. At most [`MAX_CLIENTS`] are served
//! at once (the next is answered `busy` and closed), so memory stays bounded whatever clients do.

use crate::faults::{FaultCommand, Faults};
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FchmodatFlags, FileStat, Mode, SFlag, fchmodat, fstat, fstatat, mkdirat};
use nix::unistd::{Gid, UnlinkatFlags, fchownat, linkat, unlinkat};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Longest command line, newline included. Fault commands are a few words; the cap keeps a
/// client from making the simulator buffer (or echo) anything large.
pub const MAX_LINE: usize = 4096;
/// Clients served at once.
pub const MAX_CLIENTS: usize = 16;
/// A client that completes no command (or does not read its reply) for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest reply [`request`] reads (the status line of a 256-device segment is about 5 KiB).
pub const MAX_REPLY: usize = 64 * 1024;
/// How long [`request`] waits for the reply.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// `sun_path` of `struct sockaddr_un` is 108 bytes, with the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;
/// How often the server looks at its stop flags and idle clients.
const POLL_MS: libc::c_int = 100;

/// Who may connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The owner (the user running the simulator) only: mode 0600.
    Owner,
    /// The owner and this group: mode 0660, group set on the socket.
    Group(u32),
}

impl Access {
    pub fn mode(self) -> u32 {
        match self {
            Access::Owner => 0o600,
            Access::Group(_) => 0o660,
        }
    }
}

#[derive(Debug, Error)]
pub enum ControlError {
    /// Something other than a stale socket is at the path: never replaced.
    #[error(
        "control socket {}: {what} is in the way; only a stale socket is replaced (remove it \
         or choose another path)",
        path.display()
    )]
    Occupied { path: PathBuf, what: &'static str },
    /// A socket at the path answers: another simulator serves it.
    #[error(
        "control socket {}: another process is serving this socket; a live socket is not replaced",
        path.display()
    )]
    Live { path: PathBuf },
    #[error("control socket {}: {why}", path.display())]
    BadPath { path: PathBuf, why: String },
    #[error("control socket group {name:?}: no such group")]
    UnknownGroup { name: String },
    #[error("control socket {}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

impl ControlError {
    /// True when the path or group given is wrong (a usage error), false for runtime failures
    /// (permissions, a live socket, the system).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            ControlError::Occupied { .. }
                | ControlError::BadPath { .. }
                | ControlError::UnknownGroup { .. }
        )
    }
}

/// Resolve a group name (or a numeric gid) for [`Access::Group`].
pub fn group_by_name(name: &str) -> Result<u32, ControlError> {
    let unknown = || ControlError::UnknownGroup {
        name: crate::spec::truncated(name, 64),
    };
    if name.is_empty() || name.contains('\0') {
        return Err(unknown());
    }
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        _ => match name.parse::<u32>() {
            Ok(gid) if nix::unistd::Group::from_gid(Gid::from_raw(gid)).is_ok() => Ok(gid),
            _ => Err(unknown()),
        },
    }
}

/// Executes command lines: parses them against the segment and applies them.
#[derive(Debug, Clone)]
pub struct Handler {
    faults: Faults,
    status: Arc<Mutex<String>>,
    devices: usize,
}

impl Handler {
    /// `devices`: the number of subdevices of the segment, to check positions against.
    pub fn new(faults: Faults, status: Arc<Mutex<String>>, devices: usize) -> Self {
        Self {
            faults,
            status,
            devices,
        }
    }

    /// The reply to one line (without its newline), or None for a blank line. Only a line that
    /// parses completely, with every value in range, changes the fault state.
    pub fn handle(&self, line: &[u8]) -> Option<String> {
        let Ok(text) = std::str::from_utf8(line) else {
            return Some("error: the command line is not UTF-8 text".into());
        };
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        if text == "status" {
            let s = self.status.lock().unwrap_or_else(|e| e.into_inner());
            // One reply is one line, whatever the status text holds.
            return Some(s.replace(['\n', '\r'], " "));
        }
        Some(match FaultCommand::parse_for(text, self.devices) {
            Ok(cmd) => match self.faults.try_apply(cmd) {
                Ok(()) => "ok".into(),
                Err(e) => format!("busy: {e}"),
            },
            Err(e) => format!("error: {e}"),
        })
    }
}

/// A running control socket. Dropping it (or [`ControlServer::shutdown`]) stops the server
/// thread and removes the socket, if the path still names it.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    dir: OwnedFd,
    name: PathBuf,
    dev_ino: (u64, u64),
    stop: Arc<AtomicBool>,
    /// Written to on shutdown: wakes the server's poll at once.
    wake: Option<UnixStream>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ControlServer {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stop serving, wait for the server thread and remove the socket.
    pub fn shutdown(mut self) {
        self.stop_and_remove();
    }

    fn stop_and_remove(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(mut w) = self.wake.take() {
            let _ = w.write(&[1]);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Remove only our socket: a path that was replaced meanwhile is left alone.
        if let Ok(st) = fstatat(&self.dir, self.name.as_path(), AtFlags::AT_SYMLINK_NOFOLLOW)
            && (st.st_dev, st.st_ino) == self.dev_ino
        {
            let _ = unlinkat(&self.dir, self.name.as_path(), UnlinkatFlags::NoRemoveDir);
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop_and_remove();
    }
}

/// Create the control socket at `path` and serve it on a thread until `stop` is set (or the
/// server is dropped).
pub fn serve(
    path: &Path,
    access: Access,
    handler: Handler,
    stop: Arc<AtomicBool>,
) -> Result<ControlServer, ControlError> {
    let bound = bind(path, access)?;
    let own_stop = Arc::new(AtomicBool::new(false));
    let own = own_stop.clone();
    let listener = bound.listener;
    let (wake, woken) = UnixStream::pair().map_err(|source| ControlError::Io {
        path: path.to_path_buf(),
        what: "create the server's wake-up pair",
        source,
    })?;
    let thread = std::thread::Builder::new()
        .name("ecsim-control".into())
        .spawn(move || {
            serve_loop(&listener, &woken, &handler, &|| {
                stop.load(Ordering::Relaxed) || own.load(Ordering::Relaxed)
            })
        })
        .map_err(|source| ControlError::Io {
            path: path.to_path_buf(),
            what: "start the server thread",
            source,
        })?;
    Ok(ControlServer {
        path: path.to_path_buf(),
        dir: bound.dir,
        name: bound.name,
        dev_ino: bound.dev_ino,
        stop: own_stop,
        wake: Some(wake),
        thread: Some(thread),
    })
}

struct Bound {
    listener: UnixListener,
    dir: OwnedFd,
    name: PathBuf,
    dev_ino: (u64, u64),
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

fn what(st: &FileStat) -> &'static str {
    match kind(st) {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symbolic link",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device node",
        SFlag::S_IFSOCK => "a socket",
        _ => "a file of unknown type",
    }
}

/// Removes the private directory (and a socket left in it) on every way out of [`bind`].
struct PrivateDir<'a> {
    parent: &'a OwnedFd,
    name: String,
    fd: Option<OwnedFd>,
}

impl Drop for PrivateDir<'_> {
    fn drop(&mut self) {
        if let Some(fd) = &self.fd {
            let _ = unlinkat(fd, "s", UnlinkatFlags::NoRemoveDir);
        }
        let _ = unlinkat(self.parent, self.name.as_str(), UnlinkatFlags::RemoveDir);
    }
}

fn bind(path: &Path, access: Access) -> Result<Bound, ControlError> {
    let bad = |why: String| ControlError::BadPath {
        path: path.to_path_buf(),
        why,
    };
    let io = |what: &'static str| {
        move |e: nix::Error| ControlError::Io {
            path: path.to_path_buf(),
            what,
            source: io::Error::from(e),
        }
    };
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(bad(format!(
            "the path is {len} bytes long; a UNIX socket path has at most {MAX_SOCKET_PATH}"
        )));
    }
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(bad("the path contains a NUL byte".into()));
    }
    let name = match path.file_name() {
        Some(n) => PathBuf::from(n),
        None => return Err(bad("the path has no file name".into())),
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = nix::fcntl::open(
        parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        nix::Error::ENOENT | nix::Error::ENOTDIR => {
            bad(format!("directory {} does not exist", parent.display()))
        }
        e => io("open its directory")(e),
    })?;

    take_stale(path, &dir, &name)?;

    // A private directory next to the socket: 0700 (mkdirat applies the umask, which can only
    // narrow it), checked on the opened descriptor so a swapped-in directory is never used.
    let mut private = None;
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = format!(".ctl-{}-{:08x}", std::process::id(), nanos ^ attempt);
        match mkdirat(&dir, tmp.as_str(), Mode::from_bits_truncate(0o700)) {
            Ok(()) => {
                private = Some(PrivateDir {
                    parent: &dir,
                    name: tmp,
                    fd: None,
                });
                break;
            }
            Err(nix::Error::EEXIST) => continue,
            Err(e) => return Err(io("create a private directory next to it")(e)),
        }
    }
    let mut private = private.ok_or_else(|| ControlError::Io {
        path: path.to_path_buf(),
        what: "create a private directory next to it",
        source: io::Error::from(io::ErrorKind::AlreadyExists),
    })?;
    let pfd = openat(
        &dir,
        private.name.as_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io("open the private directory"))?;
    let st = fstat(&pfd).map_err(io("check the private directory"))?;
    if st.st_uid != nix::unistd::geteuid().as_raw() || st.st_mode & 0o077 != 0 {
        return Err(ControlError::Io {
            path: path.to_path_buf(),
            what: "check the private directory",
            source: io::Error::other("it was replaced while starting"),
        });
    }
    // A umask such as 0700 leaves the owner without access: give it back (still private).
    nix::sys::stat::fchmod(&pfd, Mode::from_bits_truncate(0o700))
        .map_err(io("set up the private directory"))?;
    let pfd_raw = pfd.as_raw_fd();
    private.fd = Some(pfd);
    let pfd = private.fd.as_ref().expect("just set");

    // Bind through the descriptor: short whatever the directory's path, and always the
    // directory checked above.
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Stream,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC | nix::sys::socket::SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(io("create the socket"))?;
    let inner = format!("/proc/self/fd/{pfd_raw}/s");
    let addr = nix::sys::socket::UnixAddr::new(inner.as_str()).map_err(io("bind"))?;
    match nix::sys::socket::bind(sock.as_raw_fd(), &addr) {
        // No /proc: the private directory's own path, if it fits a socket address. Should the
        // name no longer lead to the directory checked above, the socket is not found in it
        // below and starting fails.
        Err(nix::Error::ENOENT) => {
            let full = parent.join(&private.name).join("s");
            if full.as_os_str().len() > MAX_SOCKET_PATH {
                return Err(bad(format!(
                    "without /proc the path must leave room for a temporary name: at most {} \
                     bytes",
                    MAX_SOCKET_PATH - (full.as_os_str().len() - len)
                )));
            }
            let addr = nix::sys::socket::UnixAddr::new(&full).map_err(io("bind"))?;
            nix::sys::socket::bind(sock.as_raw_fd(), &addr).map_err(io("bind"))?;
        }
        r => r.map_err(io("bind"))?,
    }
    if let Access::Group(gid) = access {
        fchownat(
            pfd,
            "s",
            None,
            Some(Gid::from_raw(gid)),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(io("set its group"))?;
    }
    // In the private directory, "s" is our socket: nobody else can have replaced it.
    fchmodat(
        pfd,
        "s",
        Mode::from_bits_truncate(access.mode()),
        FchmodatFlags::FollowSymlink,
    )
    .map_err(io("set its mode"))?;
    let st = fstatat(pfd, "s", AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io("check the socket"))?;
    let dev_ino = (st.st_dev, st.st_ino);
    nix::sys::socket::listen(
        &sock,
        nix::sys::socket::Backlog::new(16).map_err(io("listen"))?,
    )
    .map_err(io("listen"))?;
    // A hard link never replaces anything: if something appeared at the path meanwhile, fail.
    // (Without AT_SYMLINK_FOLLOW, linkat does not follow a link at the source.)
    linkat(pfd, "s", &dir, name.as_path(), AtFlags::empty()).map_err(|e| match e {
        nix::Error::EEXIST => ControlError::Occupied {
            path: path.to_path_buf(),
            what: "a file created while starting",
        },
        e => io("create it")(e),
    })?;
    drop(private);
    // SAFETY: `sock` is a listening AF_UNIX stream socket we own.
    let listener = unsafe { UnixListener::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(sock)) };
    Ok(Bound {
        listener,
        dir,
        name,
        dev_ino,
    })
}

/// Leave `name` free in `dir`: nothing there, or a stale socket (removed). Anything else is
/// refused.
fn take_stale(path: &Path, dir: &OwnedFd, name: &Path) -> Result<(), ControlError> {
    let st = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(nix::Error::ENOENT) => return Ok(()),
        Err(e) => {
            return Err(ControlError::Io {
                path: path.to_path_buf(),
                what: "look at the path",
                source: e.into(),
            });
        }
        Ok(st) => st,
    };
    if kind(&st) != SFlag::S_IFSOCK {
        return Err(ControlError::Occupied {
            path: path.to_path_buf(),
            what: what(&st),
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(ControlError::Live {
            path: path.to_path_buf(),
        }),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
            // Stale: remove it, if it is still the socket just probed.
            match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(again) if (again.st_dev, again.st_ino) == (st.st_dev, st.st_ino) => {
                    unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).map_err(|e| ControlError::Io {
                        path: path.to_path_buf(),
                        what: "remove the stale socket",
                        source: e.into(),
                    })
                }
                Err(nix::Error::ENOENT) => Ok(()),
                _ => Err(ControlError::Occupied {
                    path: path.to_path_buf(),
                    what: "a file that changed while starting",
                }),
            }
        }
        Err(e) => Err(ControlError::Io {
            path: path.to_path_buf(),
            what: "probe the existing socket",
            source: e,
        }),
    }
}

/// One client: a fixed input buffer of [`MAX_LINE`] bytes and the reply being written.
struct Conn {
    s: UnixStream,
    buf: Box<[u8]>,
    len: usize,
    out: Vec<u8>,
    sent: usize,
    eof: bool,
    close_after_reply: bool,
    /// Closed at this time unless a command completes (and its reply is written) before.
    deadline: Instant,
}

/// Most loop turns one client gets per poll round, so a client streaming commands cannot
/// monopolise the thread.
const TURNS_PER_ROUND: usize = 32;

enum Pump {
    Keep,
    Close,
}

impl Conn {
    fn new(s: UnixStream, now: Instant) -> Self {
        Conn {
            s,
            buf: vec![0u8; MAX_LINE].into_boxed_slice(),
            len: 0,
            out: Vec::new(),
            sent: 0,
            eof: false,
            close_after_reply: false,
            deadline: now + IDLE_TIMEOUT,
        }
    }

    fn wants_write(&self) -> bool {
        self.sent < self.out.len()
    }

    /// Work that does not wait for the socket: a complete line buffered, or end of input seen.
    fn has_pending(&self) -> bool {
        !self.wants_write() && (self.eof || self.buf[..self.len].contains(&b'\n'))
    }

    fn set_reply(&mut self, mut reply: String) {
        reply.push('\n');
        self.out = reply.into_bytes();
        self.sent = 0;
    }

    fn pump(&mut self, h: &Handler) -> Pump {
        for _ in 0..TURNS_PER_ROUND {
            if self.wants_write() {
                match self.s.write(&self.out[self.sent..]) {
                    Ok(0) => return Pump::Close,
                    Ok(n) => self.sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Pump::Keep,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Pump::Close,
                }
                if !self.wants_write() {
                    self.out = Vec::new();
                    self.sent = 0;
                    if self.close_after_reply {
                        return Pump::Close;
                    }
                    self.deadline = Instant::now() + IDLE_TIMEOUT;
                }
                continue;
            }
            if let Some(i) = self.buf[..self.len].iter().position(|&b| b == b'\n') {
                let reply = h.handle(&self.buf[..i]);
                self.buf.copy_within(i + 1..self.len, 0);
                self.len -= i + 1;
                match reply {
                    Some(r) => self.set_reply(r),
                    None => self.deadline = Instant::now() + IDLE_TIMEOUT,
                }
                continue;
            }
            if self.len == MAX_LINE {
                // Nothing of the line is kept or quoted; the rest of it is never read.
                self.len = 0;
                self.close_after_reply = true;
                self.set_reply(format!(
                    "error: command line longer than {MAX_LINE} bytes; closing the connection"
                ));
                continue;
            }
            if self.eof {
                if self.len == 0 {
                    return Pump::Close;
                }
                // A last line without its newline.
                let reply = h.handle(&self.buf[..self.len]);
                self.len = 0;
                self.close_after_reply = true;
                match reply {
                    Some(r) => self.set_reply(r),
                    None => return Pump::Close,
                }
                continue;
            }
            match self.s.read(&mut self.buf[self.len..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.len += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Pump::Keep,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Pump::Close,
            }
        }
        Pump::Keep
    }
}

/// `pfds[0]` is the listener, `pfds[1]` the wake-up socket, then one per connection.
const FIRST_CONN: usize = 2;

fn serve_loop(
    listener: &UnixListener,
    woken: &UnixStream,
    h: &Handler,
    stopped: &dyn Fn() -> bool,
) {
    let _ = listener.set_nonblocking(true);
    let mut conns: Vec<Conn> = Vec::with_capacity(MAX_CLIENTS);
    let mut pfds: Vec<libc::pollfd> = Vec::with_capacity(MAX_CLIENTS + FIRST_CONN);
    while !stopped() {
        pfds.clear();
        for fd in [listener.as_raw_fd(), woken.as_raw_fd()] {
            pfds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        for c in &conns {
            pfds.push(libc::pollfd {
                fd: c.s.as_raw_fd(),
                events: if c.wants_write() {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                },
                revents: 0,
            });
        }
        let timeout = if conns.iter().any(Conn::has_pending) {
            0
        } else {
            POLL_MS
        };
        // SAFETY: `pfds` is a valid array of pollfd for its length.
        let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // Not expected with valid descriptors; do not spin.
            std::thread::sleep(Duration::from_millis(u64::from(POLL_MS as u32)));
            continue;
        }
        let now = Instant::now();
        if pfds[1].revents != 0 {
            // Only shutdown writes here: look at the stop flags now.
            continue;
        }
        // Serve existing clients first (in order: `pfds[FIRST_CONN..]` matches `conns`).
        let mut k = FIRST_CONN;
        conns.retain_mut(|c| {
            let ready = pfds[k].revents != 0 || c.has_pending();
            k += 1;
            let closed = ready && matches!(c.pump(h), Pump::Close);
            !closed && now < c.deadline
        });
        if pfds[0].revents != 0 {
            loop {
                match listener.accept() {
                    Ok((s, _)) => {
                        if s.set_nonblocking(true).is_err() {
                            continue;
                        }
                        if conns.len() >= MAX_CLIENTS {
                            let mut s = s;
                            let _ = s.write(
                                format!(
                                    "busy: {MAX_CLIENTS} clients are connected; try again later\n"
                                )
                                .as_bytes(),
                            );
                            continue;
                        }
                        conns.push(Conn::new(s, now));
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // EMFILE and the like: the listener stays readable; do not spin on it.
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(50));
                        break;
                    }
                }
            }
        }
    }
}

/// Send one command line to a control socket and return the first line of the answer (at most
/// [`MAX_REPLY`] bytes read, [`REQUEST_TIMEOUT`] to answer).
pub fn request(path: &Path, command: &str) -> io::Result<String> {
    if command.contains('\n') || command.len() >= MAX_LINE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a command is one line of less than {MAX_LINE} bytes"),
        ));
    }
    let ctx =
        |e: io::Error| io::Error::new(e.kind(), format!("control socket {}: {e}", path.display()));
    let mut s = UnixStream::connect(path).map_err(ctx)?;
    s.set_read_timeout(Some(REQUEST_TIMEOUT)).map_err(ctx)?;
    s.set_write_timeout(Some(REQUEST_TIMEOUT)).map_err(ctx)?;
    // A server that refuses us (busy) may close before reading: its reply is still there.
    let sent = s
        .write_all(format!("{command}\n").as_bytes())
        .and_then(|()| s.shutdown(std::net::Shutdown::Write));
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match s.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if !reply.is_empty() && e.raw_os_error() == Some(libc::ECONNRESET) => break,
            Err(e) => return Err(ctx(sent.err().unwrap_or(e))),
        };
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
        if reply.contains(&b'\n') {
            break;
        }
        if reply.len() > MAX_REPLY {
            return Err(ctx(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("reply longer than {MAX_REPLY} bytes"),
            )));
        }
    }
    if reply.is_empty() {
        sent.map_err(ctx)?;
        return Err(ctx(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed without a reply",
        )));
    }
    let end = reply
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(reply.len());
    Ok(String::from_utf8_lossy(&reply[..end])
        .trim_end()
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultState;
    use proptest::prelude::*;

    fn handler(devices: usize) -> (Handler, Faults) {
        let f = Faults::new();
        let h = Handler::new(
            f.clone(),
            Arc::new(Mutex::new("frames=1\nsecond".into())),
            devices,
        );
        (h, f)
    }

    #[test]
    fn replies() {
        let (h, f) = handler(3);
        assert_eq!(h.handle(b"  "), None);
        assert_eq!(h.handle(b"status").unwrap(), "frames=1 second");
        assert_eq!(h.handle(b"drop-next 4\r").unwrap(), "ok");
        assert_eq!(f.snapshot().drop_next, 4);
        assert!(h.handle(b"\xff\xfe").unwrap().contains("not UTF-8"));
        let e = h.handle(b"subdevice-error 99999 1").unwrap();
        assert!(e.starts_with("error: ") && e.contains("0..=2"), "{e}");
        for _ in 0..crate::faults::MAX_PENDING_DEVICE_FAULTS {
            assert_eq!(h.handle(b"power-cycle").unwrap(), "ok");
        }
        assert!(h.handle(b"power-cycle").unwrap().starts_with("busy: "));
    }

    /// Words a command line may be made of: real command names, good and bad arguments.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            prop_oneof![
                Just("drop-next"),
                Just("drop-fraction"),
                Just("delay-us"),
                Just("link"),
                Just("subdevice-error"),
                Just("crc-errors"),
                Just("emergency"),
                Just("power-cycle"),
                Just("corrupt-wkc"),
                Just("clear"),
                Just("status"),
                Just("up"),
                Just("down"),
                Just("0x"),
                Just("-1"),
                Just("nan"),
            ]
            .prop_map(String::from),
            any::<u64>().prop_map(|v| v.to_string()),
            (0u32..10).prop_map(|v| v.to_string()),
            any::<f64>().prop_map(|v| v.to_string()),
            (0u32..0x20000).prop_map(|v| format!("0x{v:x}")),
            "[ -~]{0,12}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

        /// Random bytes: one line of reply at most, and no fault applied unless it says ok.
        #[test]
        fn random_lines_never_panic_or_apply_when_refused(
            line in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..200),
                proptest::collection::vec(word(), 0..5).prop_map(|w| w.join(" ").into_bytes()),
            ],
            devices in 0usize..5,
        ) {
            let (h, f) = handler(devices);
            let before = f.snapshot();
            let reply = h.handle(&line);
            let after = f.snapshot();
            if let Some(r) = &reply {
                prop_assert!(!r.contains('\n') && !r.contains('\r'), "{r:?}");
                prop_assert!(r.len() < 400, "{} bytes", r.len());
            }
            match reply.as_deref() {
                Some("ok") => {
                    // Accepted: exactly what the parser says, within the segment.
                    let text = std::str::from_utf8(&line).unwrap();
                    let cmd = FaultCommand::parse_for(text.trim(), devices);
                    prop_assert!(cmd.is_ok(), "accepted {text:?}: {cmd:?}");
                    if let Ok(FaultCommand::SubdeviceError { position, .. }) = cmd {
                        prop_assert!(position < devices);
                    }
                    if let Ok(FaultCommand::Emergency { position, .. }) = cmd {
                        prop_assert!(position < devices);
                    }
                    if let Ok(FaultCommand::CrcErrors { position, port, count }) = cmd {
                        prop_assert!(position < devices && (count >= 1));
                        prop_assert!(port == 0 || (port == 1 && position + 1 < devices));
                    }
                }
                _ => prop_assert_eq!(before, after, "refused line {:?} changed the state", line),
            }
            prop_assert_eq!(before, FaultState::default());
        }
    }
}
