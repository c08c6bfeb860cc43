//! The control socket's `axis` request end to end: `rtcat bench --sim --control SOCK` on the
//! CiA 402 example (two simulated drives running their configured profiles). A jog held by
//! renewals moves the simulated drive's actual position and stops (planned, then holds) once
//! the renewals stop; values outside the axis' limits, unknown axes and motion while disabled
//! are refused; every command but a renewal is on the record. And the object dictionary by
//! SDO information through the same queue (`od_list`, `od_object`).

use rtcat_control::protocol::{AxisAction, FailureKind};
use rtcat_control::{Client, ClientError, Request};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

/// One bench at a time: the tests share the machine's CPUs, and the jog's distance is counted
/// in cycles (a bench starved of its cycles moves less in a second).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn example(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/cia402")
        .join(file)
}

struct Bench {
    child: Child,
    sock: PathBuf,
    out: PathBuf,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, secs: u32) -> Bench {
    start_on(dir, secs, "")
}

/// With `extra` appended to the example's segment (a table of its last device, which then
/// gets a revision of its own: two devices of one identity must be the same device).
fn start_on(dir: &Path, secs: u32, extra: &str) -> Bench {
    let segment = dir.join("segment.toml");
    let mut seg = std::fs::read_to_string(example("segment.toml")).unwrap();
    if !extra.is_empty() {
        let last = seg.rfind("[[device]]").expect("a device");
        let rev = seg[last..].find("revision = 1").expect("its revision") + last;
        seg.replace_range(rev..rev + "revision = 1".len(), "revision = 2");
        seg.push_str(extra);
    }
    std::fs::write(&segment, seg).unwrap();
    // The example's configuration, patient during initialisation (a loaded machine).
    let mut text = std::fs::read_to_string(example("rtcat.toml")).unwrap();
    text.push_str("\n[bus]\ninit_pdu_timeout_ms = 1000\ninit_eeprom_timeout_ms = 1000\n");
    let cfg = dir.join("rtcat.toml");
    std::fs::write(&cfg, text).unwrap();
    let (sock, out) = (dir.join("ctl.sock"), dir.join("out"));
    let child = Command::new(BIN)
        .args(["bench", "--sim", "--no-rt", "--duration", &secs.to_string()])
        .arg("--segment")
        .arg(&segment)
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
    Bench { child, sock, out }
}

fn axis(c: &mut Client, name: &str, action: AxisAction) -> Result<Value, ClientError> {
    c.call(&Request::Axis {
        name: name.into(),
        action,
        lease_ms: 300,
    })
}

fn x(c: &mut Client) -> Value {
    let s = c.call(&Request::Status).unwrap();
    s["axes"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["name"] == "x").cloned())
        .unwrap_or(Value::Null)
}

fn wait_for(c: &mut Client, what: &str, limit: Duration, f: impl Fn(&Value) -> bool) -> Value {
    let t = Instant::now();
    loop {
        let v = x(c);
        if f(&v) {
            return v;
        }
        assert!(t.elapsed() < limit, "timed out waiting for {what}: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn usage(r: Result<Value, ClientError>, want: &str) {
    match r {
        Err(ClientError::Failed(f)) => {
            assert_eq!(f.kind, FailureKind::Usage, "{f:?}");
            assert!(f.message.contains(want), "{} (want {want})", f.message);
        }
        other => panic!("want a usage failure with {want:?}, got {other:?}"),
    }
}

#[test]
fn a_held_jog_moves_the_drive_and_stops_when_the_renewals_stop() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = tempfile::tempdir().unwrap();
    let b = start(d.path(), 40);
    let t = Instant::now();
    let mut c = loop {
        if let Ok(mut c) = Client::connect(&b.sock)
            && c.call(&Request::Status).is_ok_and(|s| s["state"] == "op")
        {
            break c;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "bench did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let v = wait_for(&mut c, "x enabled", Duration::from_secs(20), |v| {
        v["state"] == "operation enabled"
    });
    assert_eq!(v["manual"], Value::Null, "runs its program: {v}");
    assert_eq!(v["max_velocity"], 50.0);
    assert_eq!(
        (v["min_position"].clone(), v["max_position"].clone()),
        (Value::from(-10.0), Value::from(110.0))
    );

    // Refused: beyond the limits, an unknown axis, a renewal with nothing to renew.
    usage(
        axis(&mut c, "x", AxisAction::Jog { velocity: 50.5 }),
        "velocity = 50.5",
    );
    usage(
        axis(&mut c, "x", AxisAction::MoveTo { position: 111.0 }),
        "min/max_position",
    );
    usage(axis(&mut c, "z", AxisAction::Stop), "no axis \"z\"");
    assert!(axis(&mut c, "x", AxisAction::Renew).is_err());

    // Stop: out of its program, it comes to rest and holds.
    axis(&mut c, "x", AxisAction::Stop).unwrap();
    let held = wait_for(&mut c, "x holding", Duration::from_secs(5), |v| {
        v["manual"] == "holding"
    });
    std::thread::sleep(Duration::from_millis(300));
    let p0 = x(&mut c)["actual"].as_f64().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let p1 = x(&mut c)["actual"].as_f64().unwrap();
    assert!((p1 - p0).abs() < 1e-3, "holds: {p0} -> {p1} ({held})");

    // A jog towards the far end, held for 1 s by renewals every 100 ms.
    let dir = if p1 < 50.0 { 1.0 } else { -1.0 };
    axis(
        &mut c,
        "x",
        AxisAction::Jog {
            velocity: dir * 20.0,
        },
    )
    .unwrap();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(100));
        axis(&mut c, "x", AxisAction::Renew).unwrap();
    }
    let moving = x(&mut c);
    assert_eq!(moving["manual"], "jogging", "{moving}");
    let p2 = moving["actual"].as_f64().unwrap();
    // 20 units/s for ~1 s (the ramp takes 40 ms) if the bench gets its cycles; a loaded
    // machine takes some (measured: 5.7 units with three benches at once), so a third of it.
    assert!(
        (p2 - p1) * dir > 6.0,
        "the held jog moved the drive {} units: {p1} -> {p2}",
        p2 - p1
    );
    // No more renewals: within the lease (300 ms) and the planned stop (40 ms) it stops.
    let t_last = Instant::now();
    let v = wait_for(&mut c, "x to stop", Duration::from_secs(3), |v| {
        v["manual"] == "holding"
    });
    let stopped_after = t_last.elapsed();
    assert!(
        stopped_after < Duration::from_millis(1500),
        "stopped {stopped_after:?} after the last renewal ({v})"
    );
    std::thread::sleep(Duration::from_millis(200));
    let p3 = x(&mut c)["actual"].as_f64().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let p4 = x(&mut c)["actual"].as_f64().unwrap();
    assert!((p4 - p3).abs() < 1e-3, "stays: {p3} -> {p4}");
    // It moved no more than the lease allows after the last renewal: 20 units/s × (0.3 s
    // lease + the request's time) + 0.4 units of braking.
    assert!(
        (p3 - p2) * dir < 20.0 * 0.6 + 0.4,
        "ran on {} units after the renewals stopped",
        p3 - p2
    );
    // A late renewal does not restart it.
    assert!(axis(&mut c, "x", AxisAction::Renew).is_err());

    // Disabled, motion is refused; enabled again; released to its program.
    axis(&mut c, "x", AxisAction::Disable).unwrap();
    wait_for(&mut c, "x disabled", Duration::from_secs(5), |v| {
        v["state"] != "operation enabled"
    });
    match axis(&mut c, "x", AxisAction::Jog { velocity: 1.0 }) {
        Err(ClientError::Failed(f)) => {
            assert!(f.message.contains("not in operation enabled"), "{f:?}")
        }
        other => panic!("{other:?}"),
    }
    axis(&mut c, "x", AxisAction::Enable).unwrap();
    wait_for(&mut c, "x enabled again", Duration::from_secs(5), |v| {
        v["state"] == "operation enabled"
    });
    axis(&mut c, "x", AxisAction::Release).unwrap();
    wait_for(
        &mut c,
        "x back to its program",
        Duration::from_secs(5),
        |v| v["manual"].is_null(),
    );
    drop(c);

    // On the record: every command, no renewal that went through.
    // SIGINT: the run ends as an operator's Ctrl-C ends it, its records written out.
    let out = b.out.clone();
    let pid = nix::unistd::Pid::from_raw(b.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let t = Instant::now();
    let mut b = b;
    while b.child.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(30), "bench did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(b);
    let events = std::fs::read_to_string(out.join("events.log")).unwrap_or_default();
    let axis_lines: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("control axis "))
        .collect();
    for want in [
        "\"action\":\"stop\"",
        "\"action\":\"jog\"",
        "\"action\":\"disable\"",
        "\"action\":\"enable\"",
        "\"action\":\"release\"",
        "\"velocity\":50.5",
    ] {
        assert!(
            axis_lines.iter().any(|l| l.contains(want)),
            "{want} not on the record: {axis_lines:#?}"
        );
    }
    let renewals: Vec<_> = axis_lines
        .iter()
        .filter(|l| l.contains("\"renew\""))
        .collect();
    assert!(
        renewals.iter().all(|l| !l.contains("result=ok")),
        "a renewal that went through is not recorded: {renewals:#?}"
    );
}

/// The object dictionary by SDO information through the running master's queue (`od_list`,
/// `od_object`), as the commissioning page's Device view shows it.
#[test]
fn the_object_dictionary_of_a_running_drive() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = tempfile::tempdir().unwrap();
    let b = start(d.path(), 30);
    let t = Instant::now();
    let mut c = loop {
        if let Ok(mut c) = Client::connect(&b.sock)
            && c.call(&Request::Status).is_ok_and(|s| s["state"] == "op")
        {
            break c;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "bench did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let t = Instant::now();
    let list = c.call(&Request::OdList { position: 0 }).unwrap();
    eprintln!("od_list in {:?}", t.elapsed());
    let objects = list["objects"].as_array().unwrap();
    let find = |i: u16| objects.iter().find(|o| o["index"] == i).cloned();
    let cw = find(0x6040).unwrap_or_else(|| panic!("0x6040 in the list: {list}"));
    assert!(cw["name"].as_str().is_some_and(|n| !n.is_empty()), "{cw}");
    assert_eq!(cw["object_code"], 7, "{cw}");
    assert!(find(0x1018).is_some(), "{list}");
    assert_eq!(list["described"].as_u64(), Some(objects.len() as u64));
    let id = c
        .call(&Request::OdObject {
            position: 0,
            index: 0x1018,
        })
        .unwrap();
    let entries = id["entries"].as_array().unwrap();
    assert!(entries.len() >= 2, "{id}");
    assert!(
        entries
            .iter()
            .any(|e| e["sub"] == 1 && e["type"] == "u32" && e["access"].is_string()),
        "0x1018:1 (vendor id) is a u32: {id}"
    );
    match c.call(&Request::OdObject {
        position: 0,
        index: 0x7777,
    }) {
        Err(ClientError::Failed(f)) => {
            assert!(f.message.contains("abort 0x06020000"), "{f:?}")
        }
        other => panic!("{other:?}"),
    }
    usage(
        c.call(&Request::OdList { position: 9 }),
        "position = 9: the segment has 2 subdevices",
    );
}

/// A device's EoE IP parameters through the queue (`eoe_get_ip`): the page's link to the device.
#[test]
fn the_eoe_ip_parameters_of_a_running_device() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = tempfile::tempdir().unwrap();
    // The last device (y's drive, position 1) tunnels Ethernet too.
    let b = start_on(
        d.path(),
        30,
        "\n[device.eoe]\nmac = \"02:00:00:00:ec:01\"\n",
    );
    let t = Instant::now();
    let mut c = loop {
        if let Ok(mut c) = Client::connect(&b.sock)
            && c.call(&Request::Status).is_ok_and(|s| s["state"] == "op")
        {
            break c;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "bench did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let v = c.call(&Request::EoeGetIp { position: 1 }).unwrap();
    assert_eq!(v["mac"], "02:00:00:00:ec:01", "{v}");
    assert!(v["ip"].is_null(), "no IP set on the device yet: {v}");
    usage(c.call(&Request::EoeGetIp { position: 5 }), "position = 5");
}
