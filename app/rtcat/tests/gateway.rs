//! `rtcat gateway` (ETG.8200): a UDP client speaking the gateway protocol reads an object of a
//! simulated device (a CoE upload) through rtcat; refusals are mailbox error replies or
//! silence, never a stop.

use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

/// A gateway datagram: the EtherCAT header (type 5) and a mailbox to `station`.
fn datagram(station: u16, kind: u8, data: &[u8]) -> Vec<u8> {
    let mut m = (data.len() as u16).to_le_bytes().to_vec();
    m.extend_from_slice(&station.to_le_bytes());
    m.extend_from_slice(&[0, kind]);
    m.extend_from_slice(data);
    let mut d = ((5u16 << 12) | m.len() as u16).to_le_bytes().to_vec();
    d.extend_from_slice(&m);
    d
}

#[test]
fn a_udp_client_reads_an_object_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join("segment.toml");
    std::fs::write(
        &seg,
        "[[device]]\nname = \"IO\"\ninputs = 1\n\
         [[device]]\nname = \"Drive\"\ncoe = true\ninputs = 2\nvendor_id = 0x12345678\n",
    )
    .unwrap();
    let mut gw = Command::new(BIN)
        .args([
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--allow",
            "127.0.0.1",
            "--json",
        ])
        .args(["--duration", "60", "--sim", "--segment"])
        .arg(&seg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(gw.stderr.take().unwrap()).lines();
    let t0 = Instant::now();
    let addr = loop {
        let l = lines.next().expect("rtcat gateway ended early").unwrap();
        if let Some(a) = l.split("listening on ").nth(1) {
            break a.trim().to_string();
        }
        assert!(t0.elapsed() < Duration::from_secs(20));
    };
    std::thread::spawn(move || for _ in lines {});
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1500];

    // CoE SDO upload request of 0x1018:01 to station 0x1001 (position 1).
    c.send_to(
        &datagram(0x1001, 3, &[0, 0x20, 0x40, 0x18, 0x10, 0x01, 0, 0, 0, 0]),
        &addr,
    )
    .unwrap();
    let n = c.recv(&mut buf).expect("the device's answer");
    let r = &buf[..n];
    assert_eq!(
        u16::from_le_bytes([r[0], r[1]]) >> 12,
        5,
        "a mailbox datagram: {r:02x?}"
    );
    assert_eq!(usize::from(u16::from_le_bytes([r[0], r[1]]) & 0x7ff), n - 2);
    assert_eq!(
        u16::from_le_bytes([r[4], r[5]]),
        0x1001,
        "from the station asked"
    );
    assert_eq!(r[7] & 0x0f, 3, "CoE");
    assert_eq!(r[10] >> 5, 2, "an upload response: {r:02x?}");
    assert_eq!(
        u32::from_le_bytes(r[14..18].try_into().unwrap()),
        0x12345678
    );

    // A station with no mailbox, and one that does not exist: mailbox error replies.
    for (station, code) in [(0x1000u16, 0x0002u16), (0x1007, 0x0003)] {
        c.send_to(
            &datagram(station, 3, &[0, 0x20, 0x40, 0x18, 0x10, 1, 0, 0, 0, 0]),
            &addr,
        )
        .unwrap();
        let n = c.recv(&mut buf).expect("an error reply");
        assert_eq!(
            buf[7] & 0x0f,
            0,
            "a mailbox error reply: {:02x?}",
            &buf[..n]
        );
        assert_eq!(u16::from_le_bytes([buf[10], buf[11]]), code);
    }
    // Malformed: no answer, and the gateway goes on.
    c.send_to(&[0x05, 0x50, 0xff], &addr).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        c.recv(&mut buf).is_err(),
        "nothing answers a malformed datagram"
    );
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.send_to(
        &datagram(0x1001, 3, &[0, 0x20, 0x40, 0x18, 0x10, 0x02, 0, 0, 0, 0]),
        &addr,
    )
    .unwrap();
    assert!(c.recv(&mut buf).is_ok(), "still serving");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(gw.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut out = String::new();
    gw.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(gw.wait().unwrap().success());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["answered"], 2, "{v}");
    assert_eq!(v["error_replies"], 2, "{v}");
    assert_eq!(v["dropped_malformed"], 1, "{v}");
}

#[test]
fn bad_arguments_are_named() {
    for (args, want) in [
        (
            vec!["--listen", "nowhere", "--allow", "127.0.0.1"],
            "--listen \"nowhere\"",
        ),
        (
            vec!["--listen", "127.0.0.1:0", "--allow", "10.0.0.0/40"],
            "--allow",
        ),
    ] {
        let o = Command::new(BIN)
            .arg("gateway")
            .args(&args)
            .arg("--sim")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

/// `[gateway]` in a running master: the same request during OP, through the cyclic thread's
/// queue, while the cycle goes on.
#[test]
fn a_running_master_serves_the_gateway_during_op() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join("segment.toml");
    std::fs::write(
        &seg,
        "[[device]]\nname = \"IO\"\ninputs = 1\n\
         [[device]]\nname = \"Drive\"\ncoe = true\ninputs = 2\nvendor_id = 0x12345678\n",
    )
    .unwrap();
    let cfg = dir.path().join("rtcat.toml");
    std::fs::write(
        &cfg,
        "[gateway]\nlisten = \"127.0.0.1:0\"\nallow = [\"127.0.0.1\"]\n",
    )
    .unwrap();
    let mut m = Command::new(BIN)
        .args(["bench", "--sim", "--no-rt", "--duration", "60", "--segment"])
        .arg(&seg)
        .arg("--config")
        .arg(&cfg)
        .arg("--out")
        .arg(dir.path().join("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(m.stderr.take().unwrap()).lines();
    let t0 = Instant::now();
    let addr = loop {
        let l = lines.next().expect("rtcat bench ended early").unwrap();
        if let Some(a) = l.split("mailbox gateway listening on ").nth(1) {
            break a.trim().to_string();
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no gateway");
    };
    std::thread::spawn(move || for _ in lines {});
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 1500];
    // The master may still be on its way to OP: the queue is served once it cycles.
    let t0 = Instant::now();
    let n = loop {
        c.send_to(
            &datagram(0x1001, 3, &[0, 0x20, 0x40, 0x18, 0x10, 0x01, 0, 0, 0, 0]),
            &addr,
        )
        .unwrap();
        if let Ok(n) = c.recv(&mut buf) {
            break n;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no answer during OP"
        );
    };
    let r = &buf[..n];
    assert_eq!(u16::from_le_bytes([r[4], r[5]]), 0x1001);
    assert_eq!(r[10] >> 5, 2, "an upload response: {r:02x?}");
    assert_eq!(
        u32::from_le_bytes(r[14..18].try_into().unwrap()),
        0x12345678
    );
    // A station with no mailbox: an error reply, during OP too.
    c.send_to(
        &datagram(0x1000, 3, &[0, 0x20, 0x40, 0x18, 0x10, 1, 0, 0, 0, 0]),
        &addr,
    )
    .unwrap();
    let n = c.recv(&mut buf).expect("an error reply");
    assert_eq!(
        (buf[7] & 0x0f, u16::from_le_bytes([buf[10], buf[11]])),
        (0, 2),
        "{:02x?}",
        &buf[..n]
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(m.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // bench stopped by SIGTERM ends as the signal says (128 + 15), having written its results.
    assert_eq!(m.wait().unwrap().code(), Some(143));
    assert!(dir.path().join("out/summary.json").exists());
}
