//! `rtcat sim` and `rtcat sim-ctl` as a user runs them: exit codes (2 for bad input, 1 for
//! runtime failures), messages naming the value, the control socket's path and mode, and no
//! panic on a closed stdout/stderr. The segment-format limits equal the master's.

use ecsim::control::{self, Access, Handler};
use ecsim::netns::{VethPair, root_or_skip};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An interface name that is valid but (almost certainly) not present.
const NO_IF: &str = "rtcatnoif0";

fn rtcat() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rtcat"))
}

/// Run with a deadline: a command that hangs (a FIFO read, a blocked accept) fails the test.
fn run(mut c: Command) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("{c:?} did not return within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn sim_with_segment(seg: &Path) -> Output {
    let mut c = rtcat();
    c.args(["sim", "--iface", NO_IF, "--segment"]).arg(seg);
    run(c)
}

#[test]
fn master_limits_equal_the_segment_formats() {
    // The segment format refuses exactly what the master cannot run.
    assert_eq!(
        ecsim::spec::MAX_DEVICES,
        rtcat_master::master::MAX_SUBDEVICES
    );
    assert_eq!(
        ecsim::spec::MAX_PDI_BYTES,
        rtcat_master::master::MAX_PDI_BYTES
    );
}

/// The master runs a segment at both limits; one subdevice or one byte more is refused up
/// front (exit 2), not by a failed scan.
#[test]
fn a_segment_at_the_limits_runs_and_one_beyond_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let n = ecsim::spec::MAX_DEVICES;
    for (name, toml, wkc) in [
        (
            "devices",
            format!("[[device]]\ncount = {n}\noutputs = 2\ninputs = 2\n"),
            3 * n,
        ),
        // 8 x 2048 output bytes in 15 LRWs of at most 1100 bytes: a device counts +2 in every
        // frame its area touches; the 7 inner device boundaries all fall inside frames, so
        // 15 + 7 = 22 (frame, device) pairs: 44.
        (
            "pdi",
            "[[device]]\ncount = 8\noutputs = 2048\n".to_string(),
            44,
        ),
    ] {
        let seg = d.path().join(format!("{name}.toml"));
        std::fs::write(&seg, &toml).unwrap();
        let out = d.path().join(format!("out-{name}"));
        let mut c = rtcat();
        c.args(["bench", "--sim", "--no-rt", "--duration", "1", "--segment"])
            .arg(&seg)
            .arg("--out")
            .arg(&out);
        // A whole segment at the device limit takes minutes to bring up in a debug build:
        // tests/limits.rs runs it (with long timeouts); here only the image limit runs.
        if name == "pdi" {
            let o = run(c);
            let text = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{name}: {text}");
            assert!(
                text.contains(&format!("WKC expected {wkc} mismatches 0")),
                "{name}: {text}"
            );
        }

        let over = d.path().join(format!("{name}-over.toml"));
        std::fs::write(&over, format!("{toml}[[device]]\ninputs = 1\n")).unwrap();
        let mut c = rtcat();
        c.args(["bench", "--sim", "--no-rt", "--duration", "1", "--segment"])
            .arg(&over)
            .arg("--out")
            .arg(d.path().join("unused"));
        let o = run(c);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains("rtcat's master runs"), "{}", stderr(&o));
    }
}

#[test]
fn bad_segments_exit_2_naming_the_problem() {
    let d = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        (write("toml.toml", "[[device]\n"), "segment file"),
        (
            write("range.toml", "[[device]]\noutputs = 9999\n"),
            "device[0].outputs = 9999",
        ),
        (
            write("type.toml", "[[device]]\ninputs = \"many\"\n"),
            "inputs",
        ),
        (
            write("count.toml", "[[device]]\ncount = 1025\ninputs = 1\n"),
            "device[0].count = 1025",
        ),
        (write("unknown.toml", "[[device]]\ninptus = 1\n"), "inptus"),
        (
            write(
                "large.toml",
                &format!("[[device]]\ninputs = 1\n#{}\n", "x".repeat(1 << 20)),
            ),
            "larger than the limit of 1048576 bytes",
        ),
        (d.path().join("missing.toml"), "missing.toml"),
        (d.path().to_path_buf(), "not a regular file"),
    ];
    for (seg, want) in &cases {
        let o = sim_with_segment(seg);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{}: {}",
            seg.display(),
            stderr(&o)
        );
        assert!(stderr(&o).contains(want), "{want}: {}", stderr(&o));
    }
    // A FIFO nobody writes to and a link to /dev/zero: refused at once, not read forever.
    let fifo = d.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let zero = d.path().join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for (seg, want) in [(&fifo, "a FIFO"), (&zero, "a character device")] {
        let t = Instant::now();
        let o = sim_with_segment(seg);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
        assert!(t.elapsed() < Duration::from_secs(10));
    }
}

#[test]
fn bad_arguments_exit_2_and_a_missing_interface_exits_1() {
    for (iface, want) in [
        ("a234567890123456", "at most 15"),
        ("a:b", "':'"),
        (".", "not an interface name"),
        ("", "cannot be empty"),
        ("a b", "whitespace"),
    ] {
        let mut c = rtcat();
        c.args(["sim", "--iface", iface]);
        let o = run(c);
        assert_eq!(o.status.code(), Some(2), "{iface:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--iface") && stderr(&o).contains(want),
            "{iface:?}: {}",
            stderr(&o)
        );
    }
    let mut c = rtcat();
    c.args(["sim", "--iface", NO_IF, "--cpu", "99999"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--cpu 99999"), "{}", stderr(&o));

    let d = tempfile::tempdir().unwrap();
    let mut c = rtcat();
    c.args(["sim", "--iface", NO_IF, "--control"])
        .arg(d.path().join("c.sock"))
        .args(["--control-group", "no-such-group-rtcat"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-group-rtcat"), "{}", stderr(&o));

    // A valid name that is not there is a runtime failure; its control socket is cleaned up.
    let sock = d.path().join("c.sock");
    let mut c = rtcat();
    c.args(["sim", "--iface", NO_IF, "--control"]).arg(&sock);
    let o = run(c);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(NO_IF), "{}", stderr(&o));
    assert!(!sock.exists(), "control socket left behind");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

#[test]
fn control_path_replaces_only_a_stale_socket() {
    let d = tempfile::tempdir().unwrap();
    let sim_at = |p: &Path| {
        let mut c = rtcat();
        c.args(["sim", "--iface", NO_IF, "--control"]).arg(p);
        run(c)
    };
    let file = d.path().join("file");
    std::fs::write(&file, "precious").unwrap();
    let o = sim_at(&file);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("a regular file"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");

    let link = d.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let o = sim_at(&link);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("a symbolic link"), "{}", stderr(&o));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");

    let o = sim_at(d.path());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // A live socket (someone's server) is a runtime conflict: exit 1, and it keeps serving.
    let live = d.path().join("live.sock");
    let listener = UnixListener::bind(&live).unwrap();
    let o = sim_at(&live);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("another process"), "{}", stderr(&o));
    let _c = UnixStream::connect(&live).expect("the live socket still answers");
    drop(listener);

    // Stale now: replaced (then the missing interface fails the run, which removes it).
    let o = sim_at(&live);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(NO_IF), "{}", stderr(&o));
    assert!(!live.exists());
}

/// A control socket served in-process, as `rtcat sim` serves it, for `sim-ctl`.
fn server(dir: &Path) -> (control::ControlServer, ecsim::Faults) {
    let faults = ecsim::Faults::new();
    let s = control::serve(
        &dir.join("ctl.sock"),
        Access::Owner,
        Handler::new(faults.clone(), Arc::new(Mutex::new("frames=0".into())), 3),
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap();
    (s, faults)
}

fn ctl(sock: &Path, args: &[&str]) -> Output {
    let mut c = rtcat();
    c.args(["sim-ctl", "--control"]).arg(sock).args(args);
    run(c)
}

#[test]
fn sim_ctl_exit_codes() {
    let d = tempfile::tempdir().unwrap();
    let (s, faults) = server(d.path());
    let sock = s.path().to_path_buf();

    let o = ctl(&sock, &["drop-next", "3"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ok\n");
    assert_eq!(faults.snapshot().drop_next, 3);
    let o = ctl(&sock, &["status"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "frames=0\n");

    for (args, want) in [
        (vec!["explode"], "unknown command"),
        (
            vec!["drop-fraction", "2"],
            "fraction 2 must be within 0..=1",
        ),
        (vec!["delay-us", "99999999"], "delay 99999999 us"),
        // Only the simulator knows the segment: refused by it, still a usage error.
        (
            vec!["subdevice-error", "99999", "1"],
            "position 99999 is outside the segment: positions 0..=2",
        ),
    ] {
        let o = ctl(&sock, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
    let long = "x".repeat(5000);
    let o = ctl(&sock, &["status", &long]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(faults.snapshot().pending_device_faults, 0);

    // Unreachable socket: runtime failure.
    let o = ctl(&d.path().join("nothing.sock"), &["clear"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing.sock"), "{}", stderr(&o));

    // Every client slot held: busy, a runtime condition.
    let held: Vec<UnixStream> = (0..control::MAX_CLIENTS)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let o = ctl(&sock, &["clear"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("busy"), "{}", stderr(&o));
    drop(held);
}

/// A pipe whose reading end is closed: writes fail with EPIPE.
fn broken_pipe() -> std::os::fd::OwnedFd {
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    w
}

#[test]
fn closed_stdout_or_stderr_never_panics() {
    let d = tempfile::tempdir().unwrap();
    let (s, _faults) = server(d.path());
    let o = rtcat()
        .args(["sim-ctl", "--control"])
        .arg(s.path())
        .arg("status")
        .stdout(Stdio::from(broken_pipe()))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    // Exit quietly: 0 (EPIPE ignored) or killed by SIGPIPE, never a panic (101).
    assert_ne!(o.status.code(), Some(101), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));

    let bad = d.path().join("bad.toml");
    std::fs::write(&bad, "[[device]]\noutputs = 9999\n").unwrap();
    for args in [
        vec!["sim", "--iface", NO_IF, "--segment", bad.to_str().unwrap()],
        vec!["sim", "--iface", NO_IF],
        vec!["sim-ctl", "--control", "/nonexistent/ctl.sock", "explode"],
        vec!["sim-ctl", "--control", "/nonexistent/ctl.sock", "clear"],
    ] {
        let o = rtcat()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(broken_pipe()))
            .status()
            .unwrap();
        assert!(matches!(o.code(), Some(1 | 2)), "{args:?}: {o:?}");
    }
}

/// The whole simulator under umask 000 on a veth pair (root only): the socket is 0600, sim-ctl
/// works through it, an out-of-range position is refused, and SIGTERM removes the socket.
#[test]
fn sim_socket_is_0600_under_umask_000() {
    if !root_or_skip("sim_socket_is_0600_under_umask_000") {
        return;
    }
    let net = VethPair::create("rtsimcli").expect("veth pair");
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("sim.sock");
    let mut cmd = net.segment_cmd(env!("CARGO_BIN_EXE_rtcat"));
    cmd.args(["sim", "--iface", &net.segment_if, "--control"])
        .arg(&sock)
        .stderr(Stdio::piped());
    // SAFETY: umask is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let mut child = Sim(cmd.spawn().unwrap());
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let t = Instant::now();
    loop {
        let l = lines.next().expect("rtcat sim exited").unwrap();
        if l.contains("listening") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20));
    }
    std::thread::spawn(move || for _ in lines {});
    let m = std::fs::symlink_metadata(&sock).unwrap();
    assert!(m.file_type().is_socket());
    assert_eq!(m.permissions().mode() & 0o7777, 0o600);
    let o = ctl(&sock, &["subdevice-error", "99999", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("positions 0..=2"), "{}", stderr(&o));
    let o = ctl(&sock, &["subdevice-error", "2", "0x1b"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(child.stop().code(), Some(0));
    assert!(!sock.exists(), "socket removed at exit");
}

/// The simulator process: stopped with SIGTERM however the test ends.
struct Sim(std::process::Child);

impl Sim {
    fn stop(&mut self) -> std::process::ExitStatus {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        self.0.wait().unwrap()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}
