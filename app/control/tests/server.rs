//! The server against a fake provider: creation rules, limits, malformed input, and that a
//! stuck client holds only its own connection.

use rtcat_control::protocol::{FailureKind, MAX_LINE};
use rtcat_control::{Client, ClientError, Failure, Provider, Request, Server, ServerConfig};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Fake;

impl Provider for Fake {
    fn handle(&self, r: &Request) -> Result<Value, Failure> {
        match r {
            Request::Status => Ok(json!({"version": 1})),
            Request::SdoRead { position: 9, .. } => Err(Failure::usage("position 9: no subdevice")),
            Request::SdoRead { .. } => {
                // A slow transfer: the other connections go on meanwhile.
                std::thread::sleep(Duration::from_millis(300));
                Ok(json!({"data": "2a00"}))
            }
            _ => Err(Failure::runtime("not here")),
        }
    }
}

fn start(dir: &tempfile::TempDir) -> (Server, std::path::PathBuf) {
    let p = dir.path().join("ctl.sock");
    (
        Server::start(ServerConfig::new(&p, None), Arc::new(Fake)).unwrap(),
        p,
    )
}

#[test]
fn the_socket_is_0660_and_removed_at_stop() {
    let d = tempfile::tempdir().unwrap();
    let (s, p) = start(&d);
    let m = std::fs::symlink_metadata(&p).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o660);
    assert_eq!(m.uid(), nix::unistd::geteuid().as_raw());
    let mut c = Client::connect(&p).unwrap();
    assert_eq!(c.call(&Request::Status).unwrap(), json!({"version": 1}));
    s.stop();
    assert!(std::fs::symlink_metadata(&p).is_err(), "socket left behind");
}

#[test]
fn the_group_is_handed_over() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("g.sock");
    // Our own group (root may hand to any, a user only to its own).
    let gid = nix::unistd::getegid().as_raw();
    let _s = Server::start(ServerConfig::new(&p, Some(gid)), Arc::new(Fake)).unwrap();
    assert_eq!(std::fs::symlink_metadata(&p).unwrap().gid(), gid);
}

#[test]
fn foreign_files_at_the_path_are_refused_and_a_stale_socket_replaced() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("x.sock");
    std::fs::write(&p, b"keep me").unwrap();
    let e = Server::start(ServerConfig::new(&p, None), Arc::new(Fake))
        .err()
        .unwrap();
    assert!(e.is_usage());
    assert!(e.to_string().contains("a regular file owned by uid"), "{e}");
    assert_eq!(std::fs::read(&p).unwrap(), b"keep me");
    std::fs::remove_file(&p).unwrap();

    std::os::unix::fs::symlink(d.path().join("elsewhere"), &p).unwrap();
    let e = Server::start(ServerConfig::new(&p, None), Arc::new(Fake))
        .err()
        .unwrap();
    assert!(e.to_string().contains("a symbolic link"), "{e}");
    std::fs::remove_file(&p).unwrap();

    // A live listener: another master. Refused, left alone.
    let live = UnixListener::bind(&p).unwrap();
    let e = Server::start(ServerConfig::new(&p, None), Arc::new(Fake))
        .err()
        .unwrap();
    assert!(e.to_string().contains("another process listens"), "{e}");
    drop(live);
    // Now stale (nobody listens): replaced.
    assert!(std::fs::symlink_metadata(&p).is_ok());
    let _s = Server::start(ServerConfig::new(&p, None), Arc::new(Fake)).unwrap();
    Client::connect(&p).unwrap().call(&Request::Status).unwrap();

    if nix::unistd::geteuid().is_root() {
        // A stale socket of another user is not ours to remove.
        let q = d.path().join("other.sock");
        drop(UnixListener::bind(&q).unwrap());
        nix::unistd::chown(&q, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let e = Server::start(ServerConfig::new(&q, None), Arc::new(Fake))
            .err()
            .unwrap();
        assert!(e.to_string().contains("a socket owned by uid 65534"), "{e}");
    }
}

fn raw(p: &std::path::Path) -> (UnixStream, BufReader<UnixStream>) {
    let s = UnixStream::connect(p).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn reply(r: &mut BufReader<UnixStream>) -> Value {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l:?}: {e}"))
}

#[test]
fn malformed_lines_get_usage_replies_and_the_connection_goes_on() {
    let d = tempfile::tempdir().unwrap();
    let (_s, p) = start(&d);
    let (mut w, mut r) = raw(&p);
    for line in [
        &b"{\"cmd\":\"nope\"}\n"[..],
        b"\xff\xfe\n",
        b"\n",
        b"{\"cmd\":\"sdo_read\",\"position\":1}\n",
        b"{\"cmd\":\"sdo_read\",\"position\":9,\"index\":1,\"sub\":0}\n",
    ] {
        w.write_all(line).unwrap();
        let v = reply(&mut r);
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(v["kind"], "usage", "{v}");
        assert!(v["error"].as_str().unwrap().len() > 5);
    }
    w.write_all(b"{\"cmd\":\"status\"}\r\n").unwrap();
    assert_eq!(reply(&mut r)["ok"], true);
    // Two requests in one write: two replies, in order.
    w.write_all(b"{\"cmd\":\"status\"}\n{\"cmd\":\"scan\"}\n")
        .unwrap();
    assert_eq!(reply(&mut r)["ok"], true);
    assert_eq!(reply(&mut r)["kind"], "runtime");
}

#[test]
fn an_overlong_line_is_refused_and_the_connection_closed() {
    let d = tempfile::tempdir().unwrap();
    let (_s, p) = start(&d);
    let (mut w, mut r) = raw(&p);
    let big = vec![b'x'; MAX_LINE + 10];
    // The server may close while we still write: ignore that error.
    let _ = w.write_all(&big);
    let v = reply(&mut r);
    assert_eq!(v["kind"], "usage");
    assert!(
        v["error"].as_str().unwrap().contains("longer than 65536"),
        "{v}"
    );
    let mut rest = Vec::new();
    assert_eq!(r.read_to_end(&mut rest).unwrap_or(0), 0);
}

#[test]
fn at_most_max_connections_and_idle_ones_are_closed() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("lim.sock");
    let mut cfg = ServerConfig::new(&p, None);
    cfg.max_connections = 2;
    cfg.idle_timeout = Duration::from_millis(400);
    let s = Server::start(cfg, Arc::new(Fake)).unwrap();
    let a = raw(&p);
    let b = raw(&p);
    // Wait until both are accepted.
    let t = Instant::now();
    while s.connections() < 2 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_c, mut cr) = raw(&p);
    let v = reply(&mut cr);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("too many connections"),
        "{v}"
    );
    // Idle ones go after the timeout, and a new one is served again.
    let t = Instant::now();
    while s.connections() > 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.connections(), 0);
    drop((a, b));
    Client::connect(&p).unwrap().call(&Request::Status).unwrap();
}

#[test]
fn a_stuck_client_does_not_hold_the_others() {
    let d = tempfile::tempdir().unwrap();
    let (_s, p) = start(&d);
    // Sends half a line and never more; another floods requests and never reads.
    let mut stuck = UnixStream::connect(&p).unwrap();
    stuck.write_all(b"{\"cmd\":\"sta").unwrap();
    let flood = UnixStream::connect(&p).unwrap();
    let f = std::thread::spawn(move || {
        let mut flood = flood;
        flood
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let line = b"{\"cmd\":\"status\"}\n".repeat(1000);
        for _ in 0..200 {
            if flood.write_all(&line).is_err() {
                break;
            }
        }
    });
    let mut c = Client::connect(&p)
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    let t = Instant::now();
    for _ in 0..50 {
        c.call(&Request::Status).unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    f.join().unwrap();
}

#[test]
fn the_client_times_out_and_reports_failures() {
    let d = tempfile::tempdir().unwrap();
    let (_s, p) = start(&d);
    let mut c = Client::connect(&p)
        .unwrap()
        .with_timeout(Duration::from_millis(50));
    let e = c
        .call(&Request::SdoRead {
            position: 0,
            index: 0x1000,
            sub: 0,
        })
        .unwrap_err();
    assert!(matches!(e, ClientError::Timeout(_)), "{e}");
    let mut c = Client::connect(&p).unwrap();
    match c.call(&Request::Pdos).unwrap_err() {
        ClientError::Failed(f) => assert_eq!(f.kind, FailureKind::Runtime),
        e => panic!("{e}"),
    }
    let e = Client::connect(&d.path().join("none.sock")).err().unwrap();
    assert!(e.to_string().contains("none.sock"), "{e}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    // Whatever bytes a client sends: replies (one per line) or a close, never a panic or a
    // hang; and the server still serves afterwards.
    #[test]
    fn any_bytes_get_replies_or_a_close(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2000)) {
        let d = tempfile::tempdir().unwrap();
        let (_s, p) = start(&d);
        let mut w = UnixStream::connect(&p).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = w.write_all(&bytes);
        let _ = w.shutdown(std::net::Shutdown::Write);
        let mut out = String::new();
        let _ = BufReader::new(&w).read_to_string(&mut out);
        let lines = bytes.iter().filter(|&&b| b == b'\n').count();
        let got: Vec<&str> = out.lines().collect();
        proptest::prop_assert_eq!(got.len(), lines);
        for l in got {
            let v: Value = serde_json::from_str(l).unwrap();
            proptest::prop_assert!(v["ok"].is_boolean());
        }
        Client::connect(&p).unwrap().call(&Request::Status).unwrap();
    }
}

/// A provider that keeps the records it is given.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<(rtcat_control::Peer, Request, String)>>);

impl Provider for Recorder {
    fn handle(&self, r: &Request) -> Result<Value, Failure> {
        match r {
            Request::AlState { position: 9, .. } => Err(Failure::usage("position = 9")),
            _ => Ok(json!({})),
        }
    }
    fn record(&self, p: &rtcat_control::Peer, r: &Request, o: &rtcat_control::Outcome<'_>) {
        let o = match o {
            rtcat_control::Outcome::Done => "done".to_string(),
            rtcat_control::Outcome::Failed(f) => format!("failed: {f}"),
            rtcat_control::Outcome::Refused(w) => format!("refused: {w}"),
        };
        self.0.lock().unwrap().push((*p, r.clone(), o));
    }
}

// Issue 26, finding 5: reading and writing are separate rights, checked against the peer's
// SO_PEERCRED, and every state-changing request (done, failed, refused) reaches the record
// with the peer's uid and pid; reads do not.
#[test]
fn writes_are_checked_against_the_peer_and_every_one_is_recorded() {
    use rtcat_control::Writers;
    let d = tempfile::tempdir().unwrap();
    let me = rtcat_control::Peer {
        pid: std::process::id() as i32,
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
    };
    let write = Request::SdoWrite {
        position: 1,
        index: 0x6085,
        sub: 0,
        data: vec![0x10, 0x27, 0, 0],
        timeout_ms: None,
    };
    let fail = Request::AlState {
        position: 9,
        state: rtcat_control::protocol::AlTarget::Init,
    };
    for (writers, want) in [
        (
            Writers::Nobody,
            [
                "refused: writes are disabled",
                "refused: writes are disabled",
            ],
        ),
        (Writers::Owner, ["done", "failed: position = 9"]),
    ] {
        let p = d.path().join(format!("{writers:?}.sock"));
        let mut cfg = ServerConfig::new(&p, None);
        cfg.writers = writers;
        let rec = Arc::new(Recorder::default());
        let _s = Server::start(cfg, rec.clone()).unwrap();
        let mut c = Client::connect(&p).unwrap();
        c.call(&Request::Status).unwrap();
        let r = c.call(&write);
        assert_eq!(r.is_ok(), writers == Writers::Owner, "{writers:?}: {r:?}");
        if let Err(ClientError::Failed(f)) = r {
            assert_eq!(f.kind, FailureKind::Usage);
            assert!(
                f.message.starts_with("sdo_write: writes are disabled"),
                "{f}"
            );
        }
        c.call(&fail).unwrap_err();
        let got = rec.0.lock().unwrap();
        assert_eq!(got.len(), 2, "{writers:?}: {got:?}");
        for ((peer, req, o), (sent, want)) in got.iter().zip([(&write, want[0]), (&fail, want[1])])
        {
            assert_eq!((*peer, req), (me, sent));
            assert!(o.starts_with(want), "{writers:?}: {o}");
        }
    }
}

#[test]
fn the_write_group_is_checked_with_the_peers_groups() {
    use rtcat_control::{Peer, Writers};
    let own = nix::unistd::geteuid().as_raw();
    let other = if own == 65534 { 65533 } else { 65534 };
    let peer = |uid, gid| Peer { pid: 1, uid, gid };
    // The master's own user and root may; nobody may when writes are off.
    assert!(Writers::Owner.check(&peer(own, 12345)).is_ok());
    assert!(Writers::Owner.check(&peer(0, 0)).is_ok());
    let e = Writers::Owner.check(&peer(other, 12345)).unwrap_err();
    assert!(e.contains(&format!("uid {other} may not write")), "{e}");
    assert!(Writers::Nobody.check(&peer(own, 0)).is_err());
    // A member by its primary group may; a non-member may not.
    assert!(Writers::Group(4242).check(&peer(other, 4242)).is_ok());
    let e = Writers::Group(4242).check(&peer(other, 4343)).unwrap_err();
    assert!(
        e.contains("not a member of [ipc] write_group (gid 4242)"),
        "{e}"
    );
}

// Issue 26, finding 7: one process's idle connections cannot take every place; another
// process (the exporter) is still served.
#[test]
fn one_process_cannot_take_every_connection() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("per.sock");
    let mut cfg = ServerConfig::new(&p, None);
    cfg.max_per_process = 3;
    let s = Server::start(cfg, Arc::new(Fake)).unwrap();
    let idle: Vec<_> = (0..3).map(|_| raw(&p)).collect();
    let t = Instant::now();
    while s.connections() < 3 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_x, mut xr) = raw(&p);
    let v = reply(&mut xr);
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains(&format!(
            "too many connections of pid {}",
            std::process::id()
        )),
        "{v}"
    );
    // Another process gets in and is answered.
    let o = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n\
             s.sendall(b'{\"cmd\":\"status\"}\\n')\nprint(s.makefile().readline())",
        )
        .arg(&p)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"ok\":true"), "{o:?}");
    drop(idle);
}

/// Passes a memfd holding its peer's pid with `shm_image`.
struct Fds;

impl Provider for Fds {
    fn handle(&self, _: &Request) -> Result<Value, Failure> {
        Err(Failure::runtime("descriptors only"))
    }

    fn handle_peer(
        &self,
        r: &Request,
        peer: &rtcat_control::Peer,
    ) -> Result<(Value, Vec<std::os::fd::OwnedFd>), Failure> {
        match r {
            Request::ShmImage => {
                let fd =
                    nix::sys::memfd::memfd_create(c"t", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                        .unwrap();
                let mut f = std::fs::File::from(fd);
                write!(f, "{}", peer.pid).unwrap();
                Ok((json!({"pid": peer.pid}), vec![f.into()]))
            }
            _ => Err(Failure::usage("no")),
        }
    }
}

#[test]
fn descriptors_travel_with_the_reply_and_the_peer_is_known() {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fd.sock");
    let _s = Server::start(ServerConfig::new(&p, None), Arc::new(Fds)).unwrap();
    let mut s = UnixStream::connect(&p).unwrap();
    s.write_all(b"{\"cmd\":\"shm_image\"}\n").unwrap();
    let (mut line, mut fds) = (Vec::new(), Vec::<OwnedFd>::new());
    while !line.contains(&b'\n') {
        let mut buf = [0u8; 512];
        let mut cmsg = nix::cmsg_space!([RawFd; 2]);
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let m = recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty()).unwrap();
        for c in m.cmsgs().unwrap() {
            if let ControlMessageOwned::ScmRights(r) = c {
                fds.extend(r.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        let n = m.bytes;
        assert!(n > 0, "closed");
        line.extend_from_slice(&buf[..n]);
    }
    let v: Value = serde_json::from_slice(&line[..line.len() - 1]).unwrap();
    assert_eq!(v["data"]["pid"], json!(std::process::id()));
    assert_eq!(fds.len(), 1, "one descriptor with the reply");
    // The same open file as the master's: read from the start.
    let mut b = [0u8; 16];
    let n =
        std::os::unix::fs::FileExt::read_at(&std::fs::File::from(fds.pop().unwrap()), &mut b, 0)
            .unwrap();
    assert_eq!(&b[..n], std::process::id().to_string().as_bytes());
    // A request without descriptors on the same connection still gets a plain line.
    s.write_all(b"{\"cmd\":\"status\"}\n").unwrap();
    let mut r = BufReader::new(s);
    let v = reply(&mut r);
    assert_eq!(v["ok"], json!(false));
}

/// Reads the descriptor passed with `foe_read` (its content's length), and writes into it for
/// `foe_write`: what a master does with a client's file.
struct TakesFds;

impl Provider for TakesFds {
    fn handle(&self, _: &Request) -> Result<Value, Failure> {
        Ok(json!({"plain": true}))
    }

    fn handle_with_fds(
        &self,
        r: &Request,
        _peer: &rtcat_control::Peer,
        fds: Vec<std::os::fd::OwnedFd>,
    ) -> Result<(Value, Vec<std::os::fd::OwnedFd>), Failure> {
        let mut f = std::fs::File::from(fds.into_iter().next().unwrap());
        match r {
            Request::FoeWrite { name, .. } => {
                let mut s = String::new();
                f.read_to_string(&mut s).unwrap();
                Ok((json!({"name": name, "read": s}), Vec::new()))
            }
            _ => {
                write!(f, "from the master").unwrap();
                Ok((json!({"wrote": true}), Vec::new()))
            }
        }
    }
}

#[test]
fn a_descriptor_travels_with_a_request_and_is_required_where_it_is_taken() {
    use std::os::fd::AsFd;
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("in.sock");
    let cfg = ServerConfig::new(&p, None);
    let _s = Server::start(cfg, Arc::new(TakesFds)).unwrap();
    let src = d.path().join("src.txt");
    std::fs::write(&src, "the client's file").unwrap();
    let f = std::fs::File::open(&src).unwrap();
    let w = Request::FoeWrite {
        position: 0,
        name: "x.bin".into(),
        password: 0,
        boot: false,
    };
    let mut c = Client::connect(&p).unwrap();
    let v = c
        .request_with_fd(&w, f.as_fd())
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(v["read"], "the client's file");
    // The other way: the master writes into the client's file.
    let dst = d.path().join("dst.txt");
    let out = std::fs::File::create(&dst).unwrap();
    let r = Request::FoeRead {
        position: 0,
        name: "x.bin".into(),
        password: 0,
    };
    c.request_with_fd(&r, out.as_fd())
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(std::fs::read_to_string(&dst).unwrap(), "from the master");
    // Without the descriptor: a usage failure naming what is missing; the connection goes on.
    let e = c.call(&r).unwrap_err().to_string();
    assert!(e.contains("pass the file's descriptor"), "{e}");
    // A descriptor with a request that takes none is closed, the request served.
    let v = c
        .request_with_fd(&Request::Status, f.as_fd())
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(v["plain"], true);
}
