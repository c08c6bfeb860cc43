//! `rtcat eoe`: a device's IP settings over EoE on the in-process simulator, and — root, over
//! veth — `curl` in the master's namespace reaching a web server that stands behind a simulated
//! drive (the simulator's TAP in the segment's namespace), through `rtcat eoe bridge`.

use ecsim::netns::{VethPair, root_or_skip};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

#[path = "support/sim_proc.rs"]
mod sim_proc;
use sim_proc::SimProc as Sim;

fn segment(dir: &Path, tap: Option<&str>) -> std::path::PathBuf {
    let tap = tap.map(|t| format!("tap = \"{t}\"\n")).unwrap_or_default();
    let p = dir.join("segment.toml");
    std::fs::write(
        &p,
        format!(
            "[[device]]\nname = \"Drive\"\ncoe = true\ninputs = 2\noutputs = 2\n\
             [device.eoe]\nmac = \"02:00:00:00:ec:01\"\n{tap}\
             [[device]]\nname = \"IO\"\ninputs = 1\n"
        ),
    )
    .unwrap();
    p
}

fn rtcat(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(BIN).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn ip_parameters_in_process_and_bad_input_named() {
    let dir = tempfile::tempdir().unwrap();
    let seg = segment(dir.path(), None);
    let seg = seg.to_str().unwrap();
    let (rc, out, err) = rtcat(&[
        "eoe",
        "set-ip",
        "0",
        "--ip",
        "192.168.77.2/24",
        "--gateway",
        "192.168.77.1",
        "--sim",
        "--segment",
        seg,
    ]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        out,
        "position 0: set ip 192.168.77.2, subnet 255.255.255.0, gateway 192.168.77.1\n"
    );
    let (rc, out, err) = rtcat(&["eoe", "get-ip", "0", "--json", "--sim", "--segment", seg]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["mac"], "02:00:00:00:ec:01");
    for (args, want) in [
        (
            vec!["eoe", "set-ip", "0", "--ip", "192.168.77.2"],
            "give the prefix length",
        ),
        (
            vec!["eoe", "set-ip", "0", "--ip", "192.168.77.2/33"],
            "prefix length is 1..=32",
        ),
        (
            vec!["eoe", "set-ip", "0", "--gateway", "x"],
            "--gateway \"x\": not an IPv4 address",
        ),
        (
            vec!["eoe", "set-ip", "0", "--mac", "01:00:00:00:00:01"],
            "--mac",
        ),
        (vec!["eoe", "set-ip", "0"], "nothing to set"),
        (vec!["eoe", "get-ip", "7"], "position"),
        (
            vec!["eoe", "bridge", "0", "--tap", "lo"],
            "--tap: interface lo exists already",
        ),
        (vec!["eoe", "bridge", "0", "--tap", "a/b"], "--tap"),
    ] {
        let mut a = args.clone();
        a.extend(["--sim", "--segment", seg]);
        let (rc, _, err) = rtcat(&a);
        assert_eq!(rc, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// A minimal web server in the segment's namespace: one page, `count` bytes, per request.
fn serve_page(ns: &str, page: Vec<u8>) -> std::net::SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    VethPair::in_ns(ns, move || {
        let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        tx.send(l.local_addr().unwrap()).unwrap();
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req);
            let _ = write!(
                s,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n",
                page.len()
            );
            let _ = s.write_all(&page);
        }
    })
    .unwrap();
    rx.recv_timeout(Duration::from_secs(5)).unwrap()
}

#[test]
fn curl_reaches_a_web_server_behind_a_simulated_drive() {
    if !root_or_skip("curl_reaches_a_web_server_behind_a_simulated_drive") {
        return;
    }
    let net = VethPair::create("eoe").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let k = std::process::id() % 10_000;
    let seg = segment(dir.path(), Some(&format!("eoedev{k}")));
    let _sim = Sim::start_segment(
        Path::new(BIN),
        &net,
        &dir.path().join("sim.sock"),
        Some(&seg),
    );
    let x = (std::process::id() % 200) as u8 + 20;
    let (host, device) = (format!("10.211.{x}.1"), format!("10.211.{x}.2"));
    // 200 000 bytes: TCP segments of up to 1448 bytes, each in 12 or 13 EoE fragments of a
    // 128-byte mailbox.
    let page: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let addr = serve_page(&net.segment_ns, page.clone());

    let mut bridge = net
        .master_cmd(BIN)
        .args(["eoe", "bridge", "0", "--iface", &net.master_if, "--tap"])
        .arg(format!("eoehost{k}"))
        .args([
            "--host-ip",
            &format!("{host}/24"),
            "--device-ip",
            &format!("{device}/24"),
        ])
        .args(["--duration", "30", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(bridge.stderr.take().unwrap()).lines();
    let t0 = Instant::now();
    loop {
        let l = lines.next().expect("rtcat eoe bridge ended early").unwrap();
        if l.contains("bridged to") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "no bridge");
    }
    let url = format!("http://{device}:{}/page.txt", addr.port());
    let t = Instant::now();
    let out = net
        .master_cmd("curl")
        .args(["-sS", "--max-time", "20", "-o", "-", &url])
        .output()
        .expect("curl (apt install curl)");
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "curl over EoE: {} bytes in {secs:.2} s, {:.0} KiB/s (a figure of this machine, not a verdict)",
        out.stdout.len(),
        out.stdout.len() as f64 / 1024.0 / secs
    );
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout.len(), page.len());
    assert!(out.stdout == page, "the page arrived changed");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(bridge.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut json = String::new();
    bridge
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut json)
        .unwrap();
    let st = bridge.wait().unwrap();
    assert!(st.success(), "rtcat eoe bridge: {st}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    // the request, its ACKs and the ARP on one side; ~140 data segments and the ARP on the other
    assert!(v["to_device"].as_u64().unwrap() >= 3, "{v}");
    assert!(v["to_host"].as_u64().unwrap() >= 139, "{v}");
    assert_eq!(v["dropped_from_device"], 0, "{v}");
}

/// `rtcat eoe set-ip|get-ip --control SOCK`: a running master's cycle carries the EoE requests
/// (its mailbox queue); the setting is on the record, a get reads it back, bad input is named
/// before anything is sent.
#[test]
fn ip_parameters_through_a_running_master() {
    use rtcat_control::{Client, Request};
    let dir = tempfile::tempdir().unwrap();
    // As the EoE-during-OP test's segment: an I/O terminal, then the drive.
    let seg = dir.path().join("segment.toml");
    std::fs::write(
        &seg,
        "[[device]]\nname = \"IO\"\ninputs = 2\noutputs = 2\n\
         [[device]]\nname = \"Drive\"\ncoe = true\ninputs = 2\noutputs = 2\n\
         [device.eoe]\nmac = \"02:00:00:00:ec:01\"\n",
    )
    .unwrap();
    let sock = dir.path().join("ctl.sock");
    let out = dir.path().join("out");
    let cfg = dir.path().join("patient.toml");
    std::fs::write(&cfg, "[bus]\ninit_pdu_timeout_ms = 1000\n").unwrap();
    let mut bench = Command::new(BIN)
        .args([
            "bench",
            "--sim",
            "--no-rt",
            "--duration",
            "120",
            "--segment",
        ])
        .arg(&seg)
        .arg("--config")
        .arg(&cfg)
        .arg("--control")
        .arg(&sock)
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        if let Ok(mut c) = Client::connect(&sock)
            && let Ok(s) = c.call(&Request::Status)
            && s["state"] == "op"
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "bench did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = sock.to_str().unwrap();
    let (rc, o, err) = rtcat(&[
        "eoe",
        "set-ip",
        "1",
        "--ip",
        "192.168.78.2/24",
        "--dns-name",
        "drive-0",
        "--control",
        s,
    ]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        o,
        "position 1: set ip 192.168.78.2, subnet 255.255.255.0, dns-name \"drive-0\"\n"
    );
    let (rc, o, err) = rtcat(&["eoe", "get-ip", "1", "--json", "--control", s]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    assert_eq!(
        (&v["ip"], &v["subnet"], &v["mac"], &v["dns_name"]),
        (
            &serde_json::json!("192.168.78.2"),
            &serde_json::json!("255.255.255.0"),
            &serde_json::json!("02:00:00:00:ec:01"),
            &serde_json::json!("drive-0")
        ),
        "{v}"
    );
    // Named before anything is sent; a device without EoE refuses at the device.
    let (rc, _, err) = rtcat(&["eoe", "set-ip", "1", "--ip", "1.2.3.4", "--control", s]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("give the prefix length"), "{err}");
    let (rc, _, err) = rtcat(&["eoe", "get-ip", "5", "--control", s]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("position = 5"), "{err}");
    let (rc, _, err) = rtcat(&["eoe", "get-ip", "0", "--control", s]);
    assert_eq!(rc, 1, "{err}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(bench.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    bench.wait().unwrap();
    let events = std::fs::read_to_string(out.join("events.log")).unwrap();
    let rec: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("eoe_set_ip"))
        .collect();
    assert_eq!(rec.len(), 1, "one record per setting: {rec:?}");
    assert!(
        rec[0].contains("192.168.78.2/24") && rec[0].contains("result=ok"),
        "{}",
        rec[0]
    );
}
