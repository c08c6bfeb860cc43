//! `rtcat exporter` end to end: the binary against a control socket that answers with the
//! contract's replies (tests/data/exporter/), scraped over TCP, the page parsed by
//! prometheus_client's text parser and compared with the replies (tests/prom_check.py); a
//! master that is down, malformed replies, and the HTTP edges (404, 405, HEAD, bad and oversized
//! requests, slow clients, too many connections).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/exporter")
        .join(name)
}

fn fixture(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(data(name)).unwrap()).unwrap()
}

/// How the fake master answers.
#[derive(Clone)]
enum Master {
    /// The fixtures, with `status` replaced.
    Answers(serde_json::Value),
    /// `{"ok": false, ...}` to every request.
    Refuses,
    /// Accepts and never answers.
    Silent,
    /// The fixtures, but `scan` fails.
    NoScan,
}

/// A control socket answering as `m`; counts the requests.
fn fake_master(path: &Path, m: Master) -> Arc<AtomicUsize> {
    let l = UnixListener::bind(path).unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let (m, n) = (m.clone(), n2.clone());
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                for line in BufReader::new(s).lines() {
                    let Ok(line) = line else { return };
                    n.fetch_add(1, Ordering::SeqCst);
                    let req: serde_json::Value = serde_json::from_str(&line).unwrap();
                    let reply = match (&m, req["cmd"].as_str().unwrap()) {
                        (Master::Silent, _) => {
                            std::thread::sleep(Duration::from_secs(30));
                            return;
                        }
                        (Master::Refuses, _) => serde_json::json!({
                            "ok": false, "kind": "runtime", "error": "the segment is not there"}),
                        (Master::Answers(st), "status") => {
                            serde_json::json!({"ok": true, "data": st})
                        }
                        (Master::Answers(_), "counters") => {
                            serde_json::json!({"ok": true, "data": fixture("counters.json")})
                        }
                        (Master::Answers(_), "scan") => {
                            serde_json::json!({"ok": true, "data": fixture("scan.json")})
                        }
                        (Master::NoScan, "scan") => serde_json::json!({
                            "ok": false, "kind": "runtime", "error": "mailbox busy"}),
                        (Master::NoScan, "status") => {
                            serde_json::json!({"ok": true, "data": fixture("status.json")})
                        }
                        (Master::NoScan, "counters") => {
                            serde_json::json!({"ok": true, "data": fixture("counters.json")})
                        }
                        (_, c) => serde_json::json!({"ok": false, "kind": "usage", "error": c}),
                    };
                    if writeln!(w, "{reply}").is_err() {
                        return;
                    }
                }
            });
        }
    });
    n
}

struct Exporter {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(control: &Path) -> Exporter {
    let mut child = Command::new(BIN)
        .args(["exporter", "--listen", "127.0.0.1:0", "--control"])
        .arg(control)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    // Keep draining stderr so that the exporter never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .parse()
        .unwrap();
    Exporter { child, addr }
}

/// Sends `req` raw and returns (status code, head, body).
fn raw(addr: SocketAddr, req: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(req).unwrap();
    let mut b = Vec::new();
    s.read_to_end(&mut b).unwrap();
    let t = String::from_utf8(b).unwrap();
    let (head, body) = t.split_once("\r\n\r\n").unwrap_or((&t, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_string(), body.to_string())
}

fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n").as_bytes(),
    )
}

/// Runs prom_check.py on `page`; returns its stderr when it fails.
fn prom_check(dir: &Path, page: &str, args: &[&str]) -> Result<(), String> {
    let f = dir.join("metrics.txt");
    std::fs::write(&f, page).unwrap();
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/prom_check.py"))
        .arg(&f)
        .args(args)
        .output()
        .expect("python3 (with prometheus_client: ci/test.sh installs it)");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn the_page_parses_and_matches_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("control.sock");
    fake_master(&sock, Master::Answers(fixture("status.json")));
    let e = start(&sock);
    let (code, head, page) = get(e.addr, "/metrics");
    assert_eq!(code, 200, "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    let s = |p: &str| data(p).display().to_string();
    let args = [
        "--status",
        &s("status.json"),
        "--counters",
        &s("counters.json"),
        "--scan",
        &s("scan.json"),
    ];
    prom_check(dir.path(), &page, &args).unwrap_or_else(|e| panic!("{e}\n{page}"));
    // The checker itself catches a wrong value (it compares, not only parses).
    let wrong = page.replace("rtcat_cycles_total 12500", "rtcat_cycles_total 12499");
    assert_ne!(wrong, page);
    let e2 = prom_check(dir.path(), &wrong, &args).unwrap_err();
    assert!(e2.contains("rtcat_cycles_total"), "{e2}");
    // ... and a page the parser refuses.
    let broken = page.replace("rtcat_up 1", "rtcat_up one");
    assert!(prom_check(dir.path(), &broken, &args).is_err());
    // The label value with a quote, a backslash and a line feed, escaped; AL status 0x14 is
    // SAFE-OP with the error bit.
    let drive = r#"{position="2",name="Drive \"X\\axis\"\nrev 2"}"#;
    assert!(
        page.contains(&format!("rtcat_subdevice_al_state{drive} 4\n")),
        "{page}"
    );
    assert!(page.contains(&format!("rtcat_subdevice_al_error{drive} 1\n")));
    assert!(page.contains(&format!("rtcat_subdevice_al_status_code{drive} 27\n")));
    // The axis: quick stops and held bad cycles, the drive's 0x60F4 beside the master's own.
    let x = r#"{axis="x",position="2"}"#;
    for (series, v) in [
        ("rtcat_axis_quick_stops_total", "2"),
        ("rtcat_axis_held_cycles_total", "37"),
        ("rtcat_axis_drive_following_error_last_increments", "0"),
        ("rtcat_axis_following_error_last_increments", "-154"),
    ] {
        assert!(
            page.contains(&format!("{series}{x} {v}\n")),
            "{series}\n{page}"
        );
    }
}

#[test]
fn a_master_that_is_down_is_rtcat_up_0_with_a_200() {
    let dir = tempfile::tempdir().unwrap();
    let e = start(&dir.path().join("nobody.sock"));
    for i in 1..=2 {
        let (code, _, page) = get(e.addr, "/metrics");
        assert_eq!(code, 200);
        prom_check(dir.path(), &page, &["--down"]).unwrap_or_else(|e| panic!("{e}\n{page}"));
        let n = value(
            &page,
            "rtcat_exporter_control_errors_total{command=\"status\"}",
        );
        assert_eq!(n, Some(f64::from(i)), "{page}");
    }
}

#[test]
fn a_refusing_or_malformed_master_is_rtcat_up_0() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("refuses.sock");
    fake_master(&sock, Master::Refuses);
    let e = start(&sock);
    let (code, _, page) = get(e.addr, "/metrics");
    assert_eq!(code, 200);
    prom_check(dir.path(), &page, &["--down"]).unwrap_or_else(|e| panic!("{e}\n{page}"));

    // Buckets that are not cumulative: nothing of the reply is rendered.
    let mut st = fixture("status.json");
    st["histograms"]["rtt_ns"]["buckets"][5][1] = serde_json::json!(1);
    let sock = dir.path().join("malformed.sock");
    fake_master(&sock, Master::Answers(st));
    let e = start(&sock);
    let (_, _, page) = get(e.addr, "/metrics");
    prom_check(dir.path(), &page, &["--down"]).unwrap_or_else(|e| panic!("{e}\n{page}"));

    // A counter of the wrong type.
    let mut st = fixture("status.json");
    st["counters"]["cycles"] = serde_json::json!(-1);
    let sock = dir.path().join("negative.sock");
    fake_master(&sock, Master::Answers(st));
    let e = start(&sock);
    let (_, _, page) = get(e.addr, "/metrics");
    prom_check(dir.path(), &page, &["--down"]).unwrap_or_else(|e| panic!("{e}\n{page}"));
}

#[test]
fn a_hung_master_costs_a_bounded_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("silent.sock");
    fake_master(&sock, Master::Silent);
    let e = start(&sock);
    let t0 = Instant::now();
    let (code, _, page) = get(e.addr, "/metrics");
    assert_eq!(code, 200);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(value(&page, "rtcat_up"), Some(0.0), "{page}");
}

#[test]
fn http_edges() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("control.sock");
    let asked = fake_master(&sock, Master::Answers(fixture("status.json")));
    let e = start(&sock);
    let (code, _, body) = get(e.addr, "/");
    assert_eq!(code, 200);
    assert!(body.contains("/metrics"));
    assert_eq!(get(e.addr, "/nope").0, 404);
    let (code, head, _) = raw(
        e.addr,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(code, 405);
    assert!(head.contains("Allow: GET, HEAD"), "{head}");
    let (code, head, body) = raw(e.addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(code, 200, "{head}");
    assert!(body.is_empty());
    assert_eq!(raw(e.addr, b"GARBAGE\r\n\r\n").0, 400);
    assert_eq!(raw(e.addr, b"GET /metrics HTTP/2.0\r\n\r\n").0, 400);
    let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 20_000));
    assert_eq!(raw(e.addr, &big).0, 431);
    // Only /metrics asks the master (status, counters, and scan once per generation).
    let before = asked.load(Ordering::SeqCst);
    get(e.addr, "/");
    assert_eq!(asked.load(Ordering::SeqCst), before);
    get(e.addr, "/metrics");
    assert_eq!(asked.load(Ordering::SeqCst), before + 2);
}

#[test]
fn a_failed_scan_is_not_asked_at_every_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("control.sock");
    let asked = fake_master(&sock, Master::NoScan);
    let e = start(&sock);
    let (_, _, page) = get(e.addr, "/metrics");
    assert_eq!(asked.load(Ordering::SeqCst), 3, "status, counters, scan");
    assert_eq!(value(&page, "rtcat_up"), Some(1.0));
    assert_eq!(
        value(
            &page,
            "rtcat_exporter_control_errors_total{command=\"scan\"}"
        ),
        Some(1.0)
    );
    assert!(page.contains("rtcat_subdevice_al_state{position=\"0\",name=\"\"} 8"));
    for _ in 0..3 {
        get(e.addr, "/metrics");
    }
    assert_eq!(
        asked.load(Ordering::SeqCst),
        3 + 3 * 2,
        "scan asked again within a minute"
    );
}

#[test]
fn slow_clients_never_block_a_scrape() {
    // A slow client holds its slot for the exporter's read timeout: an attempt whose
    // steps took longer than that on a loaded machine saw the slots come back before it asked,
    // and says nothing about the exporter. It is run again; everything else is asserted once.
    ecsim::noise::within_machine_noise("slow clients and a scrape", |_| slow_clients_run());
}

fn slow_clients_run() -> Result<(), String> {
    use rtcat::exporter::http::READ_TIMEOUT;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("control.sock");
    fake_master(&sock, Master::Answers(fixture("status.json")));
    let e = start(&sock);
    // Three clients that send half a request line and stop.
    let opened = Instant::now();
    let slow: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(e.addr).unwrap();
            s.write_all(b"GET /met").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    assert_eq!(get(e.addr, "/metrics").0, 200);
    ecsim::noise::ensure(t0.elapsed() < Duration::from_secs(2), || {
        format!("a scrape beside three slow clients took {:?}", t0.elapsed())
    })?;
    // A fourth slow one fills this address's slots: its next connection gets a 503 at once,
    // not a hang.
    let mut s4 = TcpStream::connect(e.addr).unwrap();
    s4.write_all(b"G").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The scrape's connection gives its slot back when its thread ends, which can be after the
    // client has read the whole answer: a fourth slow client that came first was refused (a 503
    // already waits for it) and holds nothing. Then this attempt says nothing about the limit.
    s4.set_nonblocking(true).unwrap();
    let mut peek = [0u8; 16];
    let refused = matches!(s4.read(&mut peek), Ok(n) if n > 0);
    s4.set_nonblocking(false).unwrap();
    ecsim::noise::ensure(!refused, || {
        "the fourth slow client was refused before the scrape's slot was given back".into()
    })?;
    let t0 = Instant::now();
    let status = get(e.addr, "/metrics").0;
    let held = opened.elapsed();
    ecsim::noise::ensure(held < READ_TIMEOUT - Duration::from_secs(1), || {
        format!("the slow clients were {held:?} old when the fifth connection came")
    })?;
    assert_eq!(status, 503, "with four slow clients {held:?} old");
    ecsim::noise::ensure(t0.elapsed() < Duration::from_secs(2), || {
        format!("the 503 took {:?}", t0.elapsed())
    })?;
    drop(slow);
    drop(s4);
    // The slots come back once the slow clients are gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(e.addr, "/metrics").0 != 200 {
        assert!(Instant::now() < deadline, "slots not released");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["exporter", "--control", "/x", "--listen", "localhost"][..],
        &["exporter", "--control", "/x", "--listen", "1.2.3.4:99999"],
        &["exporter", "--control", "", "--listen", "127.0.0.1:0"],
        &["exporter", "--listen", "127.0.0.1:0"],
    ] {
        let o = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
    }
}

#[test]
fn the_fixture_is_the_protocols_status() {
    // The fixture is what the master sends: rtcat-control's own Status type reads it, and its
    // buckets are the protocol's bounds.
    let st: rtcat_control::Status = serde_json::from_value(fixture("status.json")).unwrap();
    assert_eq!(st.version, rtcat_control::protocol::VERSION);
    let bounds: Vec<u64> = st.histograms.wake_ns.buckets.iter().map(|b| b.0).collect();
    assert_eq!(bounds, rtcat_control::protocol::BUCKET_BOUNDS_NS);
    assert!(st.dc.is_some() && st.axes.is_some());
}

/// One request to a control socket, its data as JSON text (the test's own reading of the
/// master, to compare the page with).
fn ask(sock: &Path, req: &rtcat_control::Request) -> String {
    let mut c = rtcat_control::Client::connect(sock)
        .unwrap()
        .with_timeout(Duration::from_secs(20));
    c.call(req).unwrap().to_string()
}

#[test]
fn live_against_bench_sim_control() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("control.sock");
    let mut bench = Command::new(BIN)
        .args(["bench", "--sim", "--no-rt", "--duration", "20", "--out"])
        .arg(dir.path().join("out"))
        .arg("--control")
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _kill = KillOnDrop(&mut bench);
    // The master is up once its status says op with cycles counted.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(Instant::now() < deadline, "the master never reached op");
        if let Ok(mut c) = rtcat_control::Client::connect(&sock)
            && let Ok(v) = c.call(&rtcat_control::Request::Status)
            && v["state"] == "op"
            && v["counters"]["cycles"].as_u64() > Some(0)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The poller reads the ESC counters off the cyclic path, after the first cycles: on a busy
    // machine "no reading yet" can outlast the first status in op. Wait for its first reading
    // (the exporter's page is compared with it).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut c = rtcat_control::Client::connect(&sock).unwrap();
        match c.call(&rtcat_control::Request::Counters) {
            Ok(_) => break,
            Err(e) if e.to_string().contains("no reading yet") => {
                assert!(
                    Instant::now() < deadline,
                    "the poller never read the counters"
                )
            }
            Err(e) => panic!("counters: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let e = start(&sock);
    let w = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let scan = w("scan.json", ask(&sock, &rtcat_control::Request::Scan));
    let counters = w(
        "counters.json",
        ask(&sock, &rtcat_control::Request::Counters),
    );
    let before = w("before.json", ask(&sock, &rtcat_control::Request::Status));
    let (code, _, page) = get(e.addr, "/metrics");
    let after = w("after.json", ask(&sock, &rtcat_control::Request::Status));
    assert_eq!(code, 200);
    let args = [
        "--status",
        &before,
        "--status-after",
        &after,
        "--counters",
        &counters,
        "--scan",
        &scan,
    ];
    prom_check(dir.path(), &page, &args).unwrap_or_else(|e| panic!("{e}\n{page}"));
    assert_eq!(value(&page, "rtcat_up"), Some(1.0), "{page}");
    // The reference segment: 3 subdevices in OP, each port of each counted.
    assert_eq!(value(&page, "rtcat_subdevices"), Some(3.0));
    assert_eq!(
        page.matches("rtcat_subdevice_al_state{").count(),
        3,
        "{page}"
    );
    assert!(
        page.contains("rtcat_esc_rx_errors{position=\"0\""),
        "{page}"
    );
}

struct KillOnDrop<'a>(&'a mut Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP connection to `addr` from the local address `from` (any of 127.0.0.0/8 reaches the
/// loopback): another peer, as the exporter sees it.
fn connect_from(from: std::net::Ipv4Addr, addr: SocketAddr) -> TcpStream {
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, SockaddrIn};
    let fd = socket::socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    let src = SockaddrIn::from(std::net::SocketAddrV4::new(from, 0));
    socket::bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &src).unwrap();
    let SocketAddr::V4(to) = addr else {
        panic!("{addr}")
    };
    socket::connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(to)).unwrap();
    TcpStream::from(fd)
}

// Issue 26, finding 7: clients trickling one header byte per second (reconnecting whenever
// they are dropped) hold at most their address's slots, each for at most the header deadline:
// every scrape from elsewhere gets its page.
#[test]
fn tricklers_do_not_make_scrapes_fail() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("control.sock");
    fake_master(&sock, Master::Answers(fixture("status.json")));
    let e = start(&sock);
    let addr = e.addr;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tricklers: Vec<_> = (0..8)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let mut s = connect_from(std::net::Ipv4Addr::new(127, 0, 0, 2), addr);
                    for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" {
                        if stop.load(Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut codes = Vec::new();
    for _ in 0..20 {
        codes.push(get(addr, "/metrics").0);
        std::thread::sleep(Duration::from_millis(250));
    }
    stop.store(true, Ordering::Relaxed);
    assert!(codes.iter().all(|c| *c == 200), "{codes:?}");
    for t in tricklers {
        t.join().unwrap();
    }
}

// Issue 26, finding 7: eight idle connections of one client to the master's control socket do
// not take the exporter's: it still reports rtcat_up 1.
#[test]
fn idle_control_connections_do_not_silence_the_exporter() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("control.sock");
    let mut bench = Command::new(BIN)
        .args(["bench", "--sim", "--no-rt", "--duration", "20", "--out"])
        .arg(dir.path().join("out"))
        .arg("--control")
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _kill = KillOnDrop(&mut bench);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(Instant::now() < deadline, "the master never reached op");
        if let Ok(mut c) = rtcat_control::Client::connect(&sock)
            && let Ok(v) = c.call(&rtcat_control::Request::Status)
            && v["state"] == "op"
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let idle: Vec<_> = (0..8)
        .map(|_| std::os::unix::net::UnixStream::connect(&sock).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let e = start(&sock);
    for _ in 0..3 {
        let (code, _, page) = get(e.addr, "/metrics");
        assert_eq!(code, 200);
        assert_eq!(value(&page, "rtcat_up"), Some(1.0), "{page}");
    }
    drop(idle);
}
