//! `rtcat run` speaks the systemd notification protocol on one socket: READY=1 once the segment
//! is in OP, WATCHDOG=1 at half of WATCHDOG_USEC while the cycle (or a bring-up) makes progress,
//! STOPPING=1 last, on SIGTERM. Unprivileged (in-process simulated segment, --no-rt).

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

fn recv(sock: &UnixDatagram) -> Option<String> {
    let mut buf = [0u8; 512];
    match sock.recv(&mut buf) {
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(e) => panic!("notify socket: {e}"),
    }
}

#[test]
fn run_notifies_ready_watchdog_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let cfg = dir.path().join("rtcat.toml");
    std::fs::write(
        &cfg,
        format!(
            "[bus]\ninterface = \"eth1\"\n[output]\ndir = {:?}\n",
            dir.path().join("out")
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["run", "--sim", "--no-rt", "--config"])
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "400000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let mut got: Vec<String> = Vec::new();
    let t = Instant::now();
    // READY, then at least two watchdog pings (every 200 ms)
    let pings_after_ready = |got: &[String]| {
        got.iter()
            .skip_while(|m| *m != "READY=1")
            .filter(|m| *m == "WATCHDOG=1")
            .count()
    };
    while t.elapsed() < Duration::from_secs(30) && pings_after_ready(&got) < 2 {
        if let Some(m) = recv(&sock) {
            got.push(m);
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    while let Some(m) = recv(&sock) {
        got.push(m);
    }
    assert!(status.success(), "rtcat run: {status}; messages {got:?}");
    // WATCHDOG=1 may precede READY=1: the watchdog runs from the start and a long bring-up
    // (segment absent, retries) must feed it too.
    assert_eq!(got.iter().filter(|m| *m == "READY=1").count(), 1, "{got:?}");
    let ready = got.iter().position(|m| m == "READY=1").unwrap();
    assert!(
        got[ready..].iter().filter(|m| *m == "WATCHDOG=1").count() >= 2,
        "{got:?}"
    );
    assert_eq!(
        got.last().map(String::as_str),
        Some("STOPPING=1"),
        "{got:?}"
    );
    assert!(
        got.iter().all(
            |m| ["READY=1", "WATCHDOG=1", "STOPPING=1"].contains(&m.as_str())
                || m.starts_with("STATUS=")
                || m.starts_with("EXTEND_TIMEOUT_USEC=")
        ),
        "{got:?}"
    );
}
