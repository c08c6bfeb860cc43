//! The control socket: its mode whatever the umask, what it refuses to replace, one client never
//! blocking another, line and value limits, and random input over the socket.

use ecsim::control::{self, Access, ControlError, Handler, MAX_LINE};
use ecsim::{FaultState, Faults};
use proptest::prelude::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Rig {
    path: PathBuf,
    faults: Faults,
    server: Option<control::ControlServer>,
}

fn start_at(path: &Path, access: Access, devices: usize) -> Result<Rig, ControlError> {
    let faults = Faults::new();
    let handler = Handler::new(
        faults.clone(),
        Arc::new(Mutex::new("frames=0 devices=[]".into())),
        devices,
    );
    let server = control::serve(path, access, handler, Arc::new(AtomicBool::new(false)))?;
    Ok(Rig {
        path: path.to_path_buf(),
        faults,
        server: Some(server),
    })
}

fn rig(devices: usize) -> (tempfile::TempDir, Rig) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ctl.sock");
    let r = start_at(&p, Access::Owner, devices).unwrap();
    (d, r)
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Restores the umask when dropped (tests of this binary run in parallel; they all create
/// their files with explicit modes, so a momentary umask 000 cannot loosen them).
struct Umask(libc::mode_t);
impl Umask {
    fn set(m: libc::mode_t) -> Self {
        // SAFETY: umask cannot fail.
        Umask(unsafe { libc::umask(m) })
    }
}
impl Drop for Umask {
    fn drop(&mut self) {
        unsafe { libc::umask(self.0) };
    }
}

#[test]
fn socket_is_0600_under_umask_000() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ctl.sock");
    let r = {
        let _u = Umask::set(0);
        start_at(&p, Access::Owner, 3).unwrap()
    };
    assert_eq!(mode(&p), 0o600, "mode {:o}", mode(&p));
    assert!(
        std::fs::symlink_metadata(&p)
            .unwrap()
            .file_type()
            .is_socket_like()
    );
    // Only the socket is left next to it: the private directory is gone.
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("ctl.sock")]);
    assert_eq!(control::request(&p, "clear").unwrap(), "ok");
    drop(r);
}

trait SocketLike {
    fn is_socket_like(&self) -> bool;
}
impl SocketLike for std::fs::FileType {
    fn is_socket_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_socket(self)
    }
}

#[test]
fn group_access_is_0660_with_the_group_under_umask_000() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ctl.sock");
    let gid = nix::unistd::getegid().as_raw();
    let _r = {
        let _u = Umask::set(0);
        start_at(&p, Access::Group(gid), 3).unwrap()
    };
    assert_eq!(mode(&p), 0o660);
    assert_eq!(std::fs::symlink_metadata(&p).unwrap().gid(), gid);
    assert!(control::group_by_name("no-such-group-rtcat").is_err());
    assert!(
        control::group_by_name("no-such-group-rtcat")
            .unwrap_err()
            .is_usage()
    );
}

#[test]
fn a_regular_file_directory_or_symlink_is_never_replaced() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("file");
    std::fs::write(&file, "precious").unwrap();
    let e = start_at(&file, Access::Owner, 3).unwrap_err();
    assert!(
        e.is_usage() && e.to_string().contains("a regular file"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");

    let dir = d.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    let e = start_at(&dir, Access::Owner, 3).unwrap_err();
    assert!(e.is_usage() && e.to_string().contains("a directory"), "{e}");
    assert!(dir.is_dir());

    // A link to a stale socket is still a link: neither it nor its target is touched.
    let target = d.path().join("stale");
    drop(UnixListener::bind(&target).unwrap());
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = start_at(&link, Access::Owner, 3).unwrap_err();
    assert!(
        e.is_usage() && e.to_string().contains("a symbolic link"),
        "{e}"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(target.exists());

    let e = start_at(&d.path().join("missing/ctl.sock"), Access::Owner, 3).unwrap_err();
    assert!(
        e.is_usage() && e.to_string().contains("does not exist"),
        "{e}"
    );
}

#[test]
fn a_live_socket_is_refused_and_keeps_working() {
    let (_d, r) = rig(3);
    let e = start_at(&r.path, Access::Owner, 3).unwrap_err();
    assert!(matches!(e, ControlError::Live { .. }), "{e}");
    assert!(!e.is_usage());
    assert_eq!(control::request(&r.path, "link down").unwrap(), "ok");
    assert!(r.faults.snapshot().link_down);

    // Someone else's live socket (not ours) is refused the same way.
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("other.sock");
    let _other = UnixListener::bind(&p).unwrap();
    assert!(matches!(
        start_at(&p, Access::Owner, 3).unwrap_err(),
        ControlError::Live { .. }
    ));
}

#[test]
fn a_stale_socket_is_replaced() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ctl.sock");
    drop(UnixListener::bind(&p).unwrap());
    let old_ino = std::fs::symlink_metadata(&p).unwrap().ino();
    // A second name keeps the stale socket's inode allocated: the file system could otherwise
    // give the new socket the number just freed, and the comparison below would prove nothing.
    std::fs::hard_link(&p, d.path().join("stale.keep")).unwrap();
    let r = start_at(&p, Access::Owner, 3).unwrap();
    assert_ne!(std::fs::symlink_metadata(&p).unwrap().ino(), old_ino);
    assert_eq!(control::request(&p, "clear").unwrap(), "ok");
    drop(r);
    assert!(!p.exists(), "removed when the server stops");
}

#[test]
fn stopping_leaves_a_replaced_path_alone() {
    let (_d, mut r) = rig(3);
    std::fs::remove_file(&r.path).unwrap();
    std::fs::write(&r.path, "someone else's").unwrap();
    r.server.take().unwrap().shutdown();
    assert_eq!(std::fs::read_to_string(&r.path).unwrap(), "someone else's");
}

#[test]
fn an_idle_client_does_not_delay_another() {
    let (_d, r) = rig(3);
    // One client connected and silent, one mid-line, one that never reads its replies.
    let _idle = UnixStream::connect(&r.path).unwrap();
    let mut partial = UnixStream::connect(&r.path).unwrap();
    partial.write_all(b"drop-ne").unwrap();
    let mut deaf = UnixStream::connect(&r.path).unwrap();
    for _ in 0..200 {
        deaf.write_all(b"status\n").unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    assert_eq!(control::request(&r.path, "drop-next 2").unwrap(), "ok");
    let took = t.elapsed();
    // Was ~5 s (the old server read one client at a time, 5 s timeout); a noisy 2-core VM
    // answers in milliseconds.
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    assert_eq!(r.faults.snapshot().drop_next, 2);
    // The partial line completes later and is executed.
    partial.write_all(b"xt 3\n").unwrap();
    let mut line = String::new();
    partial
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    BufReader::new(&partial).read_line(&mut line).unwrap();
    assert_eq!(line, "ok\n");
    assert_eq!(r.faults.snapshot().drop_next, 3);
}

#[test]
fn many_clients_are_bounded_and_the_next_one_is_told() {
    let (_d, r) = rig(3);
    let held: Vec<UnixStream> = (0..control::MAX_CLIENTS)
        .map(|_| UnixStream::connect(&r.path).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let reply = control::request(&r.path, "clear").unwrap();
    assert!(reply.starts_with("busy:"), "{reply}");
    drop(held);
    let t = Instant::now();
    loop {
        match control::request(&r.path, "clear") {
            Ok(r) if r == "ok" => break,
            _ => assert!(t.elapsed() < Duration::from_secs(5), "slots never freed"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn positions_are_checked_against_the_segment() {
    let (_d, r) = rig(3);
    let e = control::request(&r.path, "subdevice-error 99999 1").unwrap();
    assert!(
        e.starts_with("error:") && e.contains("99999") && e.contains("0..=2"),
        "{e}"
    );
    let e = control::request(&r.path, "subdevice-error 3 1").unwrap();
    assert!(e.starts_with("error:") && e.contains("position 3"), "{e}");
    assert_eq!(r.faults.snapshot(), FaultState::default());
    for (cmd, names) in [
        ("crc-errors 3 0 1", "position 3 is outside the segment"),
        ("crc-errors 2 1 1", "port 1 of subdevice 2 has no link"),
        ("crc-errors 0 7 1", "port 7 must be 0..=3"),
        ("crc-errors 0 0 300", "count 300 must be 1..=255"),
    ] {
        let e = control::request(&r.path, cmd).unwrap();
        assert!(e.starts_with("error:") && e.contains(names), "{cmd}: {e}");
    }
    assert_eq!(r.faults.snapshot(), FaultState::default());
    assert_eq!(
        control::request(&r.path, "subdevice-error 2 0x1b").unwrap(),
        "ok"
    );
    assert_eq!(control::request(&r.path, "crc-errors 1 0 9").unwrap(), "ok");
    assert_eq!(r.faults.snapshot().pending_device_faults, 2);
}

#[test]
fn values_out_of_bounds_are_errors_naming_the_value() {
    let (_d, r) = rig(3);
    for (cmd, names) in [
        ("drop-fraction 1.5", "1.5"),
        ("drop-fraction NaN", "NaN"),
        ("delay-us 99999999", "99999999"),
        ("drop-next 4000000000", "4000000000"),
        ("corrupt-wkc 2000000", "2000000"),
    ] {
        let e = control::request(&r.path, cmd).unwrap();
        assert!(e.starts_with("error:") && e.contains(names), "{cmd}: {e}");
    }
    assert_eq!(r.faults.snapshot(), FaultState::default());
}

#[test]
fn a_line_over_the_cap_is_refused_without_echo_and_closed() {
    let (_d, r) = rig(3);
    let mut s = UnixStream::connect(&r.path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let long = format!("drop-next {}\n", "7".repeat(MAX_LINE));
    let _ = s.write_all(long.as_bytes());
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.starts_with("error: command line longer than 4096 bytes"),
        "{reply}"
    );
    assert!(reply.len() < 200, "{} bytes of reply", reply.len());
    assert!(!reply.contains("7777"), "the line is echoed: {reply}");
    assert_eq!(reply.lines().count(), 1, "closed after the error");
    assert_eq!(r.faults.snapshot(), FaultState::default());
    // Just under the cap is a normal (refused) command.
    let near = format!("drop-next {}", "7".repeat(MAX_LINE - 20));
    let e = control::request(&r.path, &near).unwrap();
    assert!(e.starts_with("error:") && e.len() < 300, "{e}");
}

#[test]
fn several_commands_on_one_connection_get_one_reply_each() {
    let (_d, r) = rig(3);
    let mut s = UnixStream::connect(&r.path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"drop-next 1\n\n  \nexplode\nstatus\r\nlink down")
        .unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], "ok");
    assert!(lines[1].starts_with("error:") && lines[1].contains("explode"));
    assert!(lines[2].starts_with("frames="));
    assert_eq!(lines[3], "ok");
    let st = r.faults.snapshot();
    assert!(st.link_down && st.drop_next == 1);
}

fn send_raw(path: &Path, bytes: &[u8]) -> String {
    let mut s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may close early (over-long line): a failed write is fine, the reply counts.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8(out).expect("replies are UTF-8")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random bytes over the socket: the server survives, every reply is one well-formed line,
    /// and the fault state changes only if some line was accepted.
    #[test]
    fn random_bytes_never_break_the_server_or_apply_an_invalid_line(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..600),
            proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b' '), any::<u8>()], 0..9000),
            "[a-z0-9 .\\-\n]{0,200}".prop_map(String::into_bytes),
        ]
    ) {
        let (_d, r) = rig(3);
        let out = send_raw(&r.path, &bytes);
        for l in out.lines() {
            prop_assert!(
                l == "ok" || l.starts_with("error: ") || l.starts_with("busy: ")
                    || l.starts_with("frames="),
                "reply {l:?}"
            );
            prop_assert!(l.len() < 400, "long reply {}", l.len());
        }
        if !out.lines().any(|l| l == "ok") {
            prop_assert_eq!(r.faults.snapshot(), FaultState::default());
        }
        // Still serving.
        prop_assert_eq!(control::request(&r.path, "clear").unwrap(), "ok");
    }
}
