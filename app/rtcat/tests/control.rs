//! The control socket end to end: `rtcat bench --sim --control SOCK` on the CoE example
//! segment, the bus commands with `--control` against the same commands on the idle segment,
//! an SDO write seen by a later read, AL state requests and the recovery they lead to, an
//! emergency of the simulator arriving as an event, and the cycle while a client hammers the
//! socket.

use rtcat_control::protocol::FailureKind;
use rtcat_control::{Client, ClientError, Request};
use serde_json::Value;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "support/slow_drive.rs"]
mod slow_drive;

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

fn coe_segment() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/coe/segment.toml")
}

/// A PDU timeout of 1 s during initialisation: the tests share a loaded machine.
fn patient(dir: &Path) -> PathBuf {
    let p = dir.join("patient.toml");
    std::fs::write(&p, "[bus]\ninit_pdu_timeout_ms = 1000\n").unwrap();
    p
}

/// `rtcat bench` in the background, with its control and fault sockets.
struct Bench {
    child: Option<Child>,
    sock: PathBuf,
    sim: PathBuf,
    out: PathBuf,
}

impl Bench {
    fn start(dir: &Path, secs: u32) -> Bench {
        Bench::start_with(dir, secs, "")
    }

    /// With `config` added to the patient configuration.
    fn start_with(dir: &Path, secs: u32, config: &str) -> Bench {
        Bench::start_on(dir, secs, config, &coe_segment())
    }

    /// On the simulated segment of `segment`.
    fn start_on(dir: &Path, secs: u32, config: &str, segment: &Path) -> Bench {
        let cfg = patient(dir);
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        text.push_str(config);
        std::fs::write(&cfg, text).unwrap();
        let sock = dir.join("ctl.sock");
        let sim = dir.join("sim.sock");
        let out = dir.join("out");
        let child = Command::new(BIN)
            .args(["bench", "--sim", "--no-rt", "--duration", &secs.to_string()])
            .arg("--segment")
            .arg(segment)
            .arg("--config")
            .arg(&cfg)
            .arg("--control")
            .arg(&sock)
            .arg("--sim-control")
            .arg(&sim)
            .arg("--out")
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let b = Bench {
            child: Some(child),
            sock,
            sim,
            out,
        };
        // Up when the socket answers and the master cycles with a first poll done.
        let t = Instant::now();
        loop {
            if let Ok(mut c) = Client::connect(&b.sock)
                && let Ok(s) = c.call(&Request::Status)
                && s["state"] == "op"
                && c.call(&Request::Counters).is_ok()
            {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "bench did not come up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        b
    }

    fn client(&self) -> Client {
        Client::connect(&self.sock).unwrap()
    }

    fn status(&self) -> Value {
        self.client().call(&Request::Status).unwrap()
    }

    /// The simulator's fault socket (`rtcat sim-ctl`).
    fn fault(&self, cmd: &str) {
        let o = Command::new(BIN)
            .args(["sim-ctl", "--control"])
            .arg(&self.sim)
            .args(cmd.split(' '))
            .output()
            .unwrap();
        assert!(o.status.success(), "sim-ctl {cmd}: {o:?}");
    }

    /// Wait for the run to end; its stderr and summary.json.
    fn finish(mut self) -> (String, Value) {
        let child = self.child.take().unwrap();
        let o = wait(child, Duration::from_secs(60));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        let s = std::fs::read_to_string(self.out.join("summary.json")).unwrap();
        (err, serde_json::from_str(&s).unwrap())
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn wait(mut child: Child, limit: Duration) -> Output {
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn rtcat(args: &[&str], extra: &[&std::ffi::OsStr]) -> Output {
    let child = Command::new(BIN)
        .args(args)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait(child, Duration::from_secs(60))
}

fn ok_json(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `args` with `--control SOCK`, and with `--sim --segment F` on the idle segment.
fn both(b: &Bench, dir: &Path, args: &[&str]) -> (Value, Value) {
    let remote = rtcat(args, &["--control".as_ref(), b.sock.as_os_str()]);
    let cfg = patient(dir);
    let seg = coe_segment();
    let direct = rtcat(
        args,
        &[
            "--sim".as_ref(),
            "--segment".as_ref(),
            seg.as_os_str(),
            "--config".as_ref(),
            cfg.as_os_str(),
        ],
    );
    (ok_json(&remote), ok_json(&direct))
}

/// Drop the fields a running master changes on the segment it runs: the AL state (OP there,
/// INIT on the idle segment), the configured station address (0 until a master sets it), and
/// the DL status of the ports (communication is established once frames flow).
fn without_run_state(mut v: Value) -> Value {
    for e in v.as_array_mut().unwrap() {
        let o = e.as_object_mut().unwrap();
        for k in ["al_state", "station_address"] {
            assert!(o.remove(k).is_some(), "{k}");
        }
    }
    v
}

#[test]
fn bus_commands_over_the_socket_give_what_they_give_on_the_idle_segment() {
    let d = tempfile::tempdir().unwrap();
    let b = Bench::start(d.path(), 25);
    assert_eq!(
        std::fs::symlink_metadata(&b.sock)
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o660
    );

    let (remote, direct) = both(&b, d.path(), &["scan", "--json"]);
    assert_eq!(remote.as_array().unwrap().len(), 3);
    assert!(
        remote
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["al_state"] == "OP"),
        "{remote}"
    );
    assert_eq!(without_run_state(remote), without_run_state(direct));

    let (remote, direct) = both(&b, d.path(), &["pdos", "--json"]);
    assert_eq!(remote, direct);

    let (remote, direct) = both(&b, d.path(), &["counters", "--json"]);
    assert_eq!(remote, direct);

    for entry in ["0x1018:01", "0x1018:02", "0x1018:04"] {
        let (remote, direct) = both(
            &b,
            d.path(),
            &["sdo", "read", "1", entry, "--type", "u32", "--json"],
        );
        assert_eq!(remote, direct, "{entry}");
    }
    let (remote, direct) = both(
        &b,
        d.path(),
        &["sdo", "read", "1", "0x8000:15", "--type", "u16", "--json"],
    );
    assert_eq!(remote, direct);
    assert_eq!(remote["value"], "0x0000");

    // A write is seen by a later read (the segment lives as long as the bench).
    let sock = b.sock.as_os_str();
    let w = rtcat(
        &["sdo", "write", "1", "0x8000:15", "u16", "5", "--control"],
        &[sock],
    );
    assert!(w.status.success(), "{w:?}");
    let r = rtcat(
        &[
            "sdo",
            "read",
            "1",
            "0x8000:15",
            "--type",
            "u16",
            "--control",
        ],
        &[sock],
    );
    assert_eq!(String::from_utf8_lossy(&r.stdout), "0x0005\n", "{r:?}");
    // The device's own checks still apply, and exit 1 with the abort text.
    let w = rtcat(
        &["sdo", "write", "1", "0x8000:15", "u16", "8", "--control"],
        &[sock],
    );
    assert_eq!(w.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&w.stderr).contains("Value range of parameter exceeded"),
        "{w:?}"
    );
    // A position beyond the segment is the user's input (exit 2), named.
    let r = rtcat(&["sdo", "read", "7", "0x1018:01", "--control"], &[sock]);
    assert_eq!(r.status.code(), Some(2), "{r:?}");
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("position = 7"),
        "{r:?}"
    );
    // A command that needs the bus itself says so.
    let r = rtcat(&["sii", "--control"], &[sock]);
    assert_eq!(r.status.code(), Some(2), "{r:?}");

    // Counters through the poller: CRC errors at position 1 appear within a poll round.
    b.fault("crc-errors 1 0 5");
    let t = Instant::now();
    loop {
        let c = b.client().call(&Request::Counters).unwrap();
        if c["subdevices"][1]["ports"][0]["invalid_frame"] == 5 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{c}");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(b);
}

#[test]
fn an_emergency_arrives_as_an_event_and_is_counted_while_a_client_hammers_the_socket() {
    let d = tempfile::tempdir().unwrap();
    let b = Bench::start(d.path(), 12);
    let sock = b.sock.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    // The hammer: status and SDO reads back to back, on two connections.
    let hammer: Vec<_> = (0..2)
        .map(|i| {
            let (sock, stop) = (sock.clone(), s2.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&sock).unwrap();
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = if i == 0 {
                        Request::Status
                    } else {
                        // Position 1: only the poller reads the mailbox of position 2.
                        Request::SdoRead {
                            position: 1,
                            index: 0x1018,
                            sub: 1,
                        }
                    };
                    match c.call(&r) {
                        Ok(_) => n += 1,
                        // The run ended under the hammer.
                        Err(ClientError::Closed | ClientError::Io(_)) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                n
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    b.fault("emergency 2 0x8611 0x21");
    let t = Instant::now();
    loop {
        let s = b.status();
        if s["counters"]["emergencies"] == 1 {
            assert_eq!(s["subdevice_states"][2]["emergencies"], 1, "{s}");
            assert_eq!(s["subdevice_states"][0]["emergencies"], 0, "{s}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = b.status();
    assert_eq!(s["version"], 1);
    assert_eq!(s["subdevices"], 3);
    let h = &s["histograms"]["exec_ns"];
    assert!(h["count"].as_u64().unwrap() > 100, "{h}");
    assert!(
        h["sum"].as_u64().unwrap() >= h["count"].as_u64().unwrap(),
        "{h}"
    );
    assert_eq!(h["buckets"].as_array().unwrap().len(), 15);
    assert!(
        s["subdevice_states"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["al_state"] == 8)
    );
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let served: Vec<u64> = hammer.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(served.iter().all(|&n| n > 10), "{served:?}");
    let out = b.out.clone();
    let (err, summary) = b.finish();
    // Logged with the code's text, and in events.log.
    assert!(
        err.contains("emergency 0x8611") && err.contains("following error"),
        "{err}"
    );
    let events = std::fs::read_to_string(out.join("events.log")).unwrap();
    assert!(
        events.contains(
            "emergency position=2 code=0x8611 error_register=0x21 data=0000000000 text=\"following error\""
        ),
        "{events}"
    );
    // The cycle does not see the socket: no frame lost, no wrong working counter.
    assert_eq!(summary["frames_lost"], 0, "{summary}");
    assert_eq!(summary["wkc"]["mismatches"], 0, "{summary}");
    assert_eq!(summary["recoveries"], 0, "{summary}");
}

#[test]
fn al_state_requests_take_the_subdevice_out_of_op_and_the_health_logic_brings_it_back() {
    let d = tempfile::tempdir().unwrap();
    let b = Bench::start(d.path(), 15);
    let mut c = b.client();
    let r = c
        .call(&Request::AlState {
            position: 1,
            state: rtcat_control::protocol::AlTarget::SafeOp,
        })
        .unwrap();
    assert_eq!(r["requested"], "safe-op");
    let t = Instant::now();
    loop {
        // Brought back on its own ([health] recovery = "subdevice"): one outage of position 1
        // in the status' availability, over; the others never out.
        let s = b.status();
        let a = &s["availability"];
        if a["subdevices"][1]["outages"].as_u64().unwrap_or(0) >= 1
            && a["subdevices"][1]["out_now"] == false
            && s["state"] == "op"
        {
            assert!(s["counters"]["not_op_cycles"].as_u64().unwrap() > 0, "{s}");
            assert_eq!(a["subdevices"][0]["outages"], 0, "{s}");
            assert_eq!(a["subdevices"][2]["invalid_cycles"], 0, "{s}");
            assert_eq!(a["segment"]["outages"], 1, "{s}");
            assert_eq!(s["counters"]["recoveries"], 0, "{s}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Bad input is named and the connection goes on.
    let e = c
        .call(&Request::AlState {
            position: 3,
            state: rtcat_control::protocol::AlTarget::Op,
        })
        .unwrap_err();
    match e {
        ClientError::Failed(f) => {
            assert_eq!(f.kind, FailureKind::Usage);
            assert!(f.message.contains("position = 3"), "{}", f.message);
        }
        e => panic!("{e}"),
    }
    let r = c
        .request_line(r#"{"cmd":"al_state","position":0,"state":"boot"}"#)
        .unwrap();
    assert!(r.error.unwrap().contains("state = \"boot\""));
    drop(b);
}

#[test]
fn a_foreign_file_at_the_socket_path_is_refused_with_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ctl.sock");
    std::fs::File::create(&p)
        .unwrap()
        .write_all(b"not a socket")
        .unwrap();
    let o = rtcat(
        &["bench", "--sim", "--no-rt", "--duration", "1", "--control"],
        &[
            p.as_os_str(),
            "--out".as_ref(),
            d.path().join("out").as_os_str(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("a regular file"),
        "{o:?}"
    );
    assert_eq!(std::fs::read(&p).unwrap(), b"not a socket");
    let o = rtcat(
        &[
            "bench",
            "--sim",
            "--no-rt",
            "--duration",
            "1",
            "--control",
            "rel.sock",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("absolute path"),
        "{o:?}"
    );
    let o = rtcat(
        &["scan", "--control"],
        &[d.path().join("none.sock").as_os_str()],
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
}

/// The lines of events.log that record a control request (`control CMD uid=...`).
fn records(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("events.log"))
        .unwrap()
        .lines()
        .filter(|l| l.contains(" control "))
        .map(str::to_string)
        .collect()
}

// Issue 26, finding 5: an sdo_write and an al_state are on the record (events.log and the
// journal) with the requester's uid and pid, the target, the value and the result.
#[test]
fn state_changes_are_on_the_record_with_uid_pid_target_value_and_result() {
    let d = tempfile::tempdir().unwrap();
    let b = Bench::start(d.path(), 4);
    let mut c = b.client();
    // A program acting for its own users (rtcat-web) names the user first (issue 32).
    c.call(&Request::Note {
        text: "rtcat-web user=engineer: sdo_write".into(),
    })
    .unwrap();
    c.call(&Request::SdoWrite {
        position: 1,
        index: 0x8000,
        sub: 0x15,
        data: vec![0x05, 0x00],
        timeout_ms: None,
    })
    .unwrap();
    c.call(&Request::SdoWrite {
        position: 7,
        index: 0x6085,
        sub: 0,
        data: vec![0xe8, 0x03, 0, 0],
        timeout_ms: None,
    })
    .unwrap_err();
    c.call(&Request::AlState {
        position: 1,
        state: rtcat_control::protocol::AlTarget::SafeOp,
    })
    .unwrap();
    // Reads are not recorded.
    c.call(&Request::Status).unwrap();
    let out = b.out.clone();
    let (err, _) = b.finish();
    let r = records(&out);
    let me = format!(
        "uid={} pid={}",
        nix::unistd::getuid().as_raw(),
        std::process::id()
    );
    assert_eq!(r.len(), 4, "{r:#?}");
    let want = [
        format!("control note {me} text=\"rtcat-web user=engineer: sdo_write\" result=ok"),
        format!("control sdo_write {me} position=1 index=0x8000 sub=21 data=0500 result=ok"),
        format!(
            "control sdo_write {me} position=7 index=0x6085 sub=0 data=e8030000 result=failed \
             kind=usage error=\"position = 7"
        ),
        format!("control al_state {me} position=1 state=safe-op result=ok"),
    ];
    for (line, want) in r.iter().zip(&want) {
        assert!(line.contains(want.as_str()), "{line}\nwant {want}");
        // The journal (stderr) has it too.
        let tail = line.split_once(" control ").unwrap().1;
        assert!(err.contains(&format!("rtcat: control {tail}")), "{err}");
    }
}

// Issue 26, findings 5 and 7: with `[ipc] writes = false` a write is refused and recorded as
// refused; a client flooding refused writes leaves a bounded events.log that counts what it
// left out.
#[test]
fn refused_writes_are_recorded_and_a_flood_is_rate_limited_with_a_count() {
    let d = tempfile::tempdir().unwrap();
    let b = Bench::start_with(d.path(), 4, "[ipc]\nwrites = false\n");
    let mut c = b.client();
    let n = 2000;
    for _ in 0..n {
        match c.call(&Request::AlState {
            position: 1,
            state: rtcat_control::protocol::AlTarget::Init,
        }) {
            Err(ClientError::Failed(f)) => {
                assert_eq!(f.kind, FailureKind::Usage);
                assert!(f.message.contains("writes are disabled"), "{}", f.message);
            }
            r => panic!("{r:?}"),
        }
    }
    // The subdevice stayed in OP: nothing was done.
    assert_eq!(b.status()["counters"]["not_op_cycles"], 0);
    let out = b.out.clone();
    let _ = b.finish();
    let r = records(&out);
    assert!(
        r[0].contains("result=refused error=\"writes are disabled"),
        "{}",
        r[0]
    );
    // A burst, then the rate: far fewer lines than requests, and the rest counted.
    assert!(r.len() <= 100 + 20 * 10, "{} lines", r.len());
    let log = std::fs::read_to_string(out.join("events.log")).unwrap();
    let suppressed: u64 = log
        .lines()
        .filter_map(|l| l.split_once("events_suppressed kind=control count="))
        .map(|(_, n)| n.trim().parse::<u64>().unwrap())
        .sum();
    assert_eq!(r.len() as u64 + suppressed, n, "{log}");
    // The record still ends with the shutdown line, after the last count.
    let last = log.lines().last().unwrap_or("");
    assert!(last.contains("shutdown outputs=0 segment=INIT"), "{last}");
}

/// A write the drive answers after 3 s (its 0x6085, as firmware that stores a value first)
/// through the running master: `--timeout-ms 5000` writes it (read back), the queue's default
/// second fails it (exit 1: 1 s, and 1 s more for the transport's repeat of a first request),
/// and the record says how long the write was allowed.
#[test]
fn a_slow_write_through_the_socket_waits_as_long_as_timeout_ms_says() {
    let d = tempfile::tempdir().unwrap();
    let path = slow_drive::segment(d.path(), 3_000_000);
    let b = Bench::start_on(d.path(), 15, "", &path);
    let sock = b.sock.as_os_str();
    let write = |extra: &[&str]| {
        let mut args = vec!["sdo", "write", "2", "0x6085:00", "u32", "50000"];
        args.extend_from_slice(extra);
        args.push("--control");
        rtcat(&args, &[sock])
    };
    let w = write(&["--timeout-ms", "5000"]);
    assert!(w.status.success(), "{w:?}");
    let r = rtcat(
        &[
            "sdo",
            "read",
            "2",
            "0x6085:00",
            "--type",
            "u32",
            "--control",
        ],
        &[sock],
    );
    assert_eq!(String::from_utf8_lossy(&r.stdout), "0x0000c350\n", "{r:?}");
    let w = write(&[]);
    assert_eq!(w.status.code(), Some(1), "{w:?}");
    let out = b.out.clone();
    b.finish();
    let r = records(&out);
    assert!(
        r.iter()
            .any(|l| l.contains("sdo_write") && l.contains("timeout_ms=5000 result=ok")),
        "{r:#?}"
    );
    assert!(
        r.iter().any(|l| l.contains("sdo_write")
            && !l.contains("timeout_ms")
            && l.contains("result=failed")),
        "{r:#?}"
    );
}
