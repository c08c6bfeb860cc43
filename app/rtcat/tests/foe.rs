//! `rtcat foe read|write` against a simulated device that serves files over FoE (ecsim's
//! `[[device.file]]`): a 1 MiB firmware image read and written byte for byte in BOOT, the
//! device's refusals and the user's mistakes with their exit codes and messages, and the library
//! in-process, where a write is seen by a later read (the simulator lives as long as one process):
//! a refusal half-way and a client that gives up both leave the device able to start over, the
//! device is back in PRE-OP (CoE answers) after BOOT, and the throughput is printed.

use ecsim::{Faults, SegmentSpec};
use rtcat_master::coe::Timeouts;
use rtcat_master::coe::segment::{self, PreOp};
use rtcat_master::config::Config;
use rtcat_master::foe::{self, code};
use rtcat_master::{Session, Target};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

const MIB: usize = 1 << 20;

/// A CoE device with files, then a plain I/O terminal: a text file, a parameter file behind a
/// password with a size limit, and a 1 MiB firmware image served only in BOOT.
const SEGMENT: &str = r#"
[[device]]
name = "FW"
product_id = 0x00290001
coe = true
inputs = 2
[[device.file]]
name = "info.txt"
text = "rtcat simulated drive v1"
[[device.file]]
name = "params.bin"
writable = true
max_bytes = 1000
password = 0x1234
[[device.file]]
name = "firmware.bin"
size = 1048576
writable = true
boot = true
[[device.file]]
name = "slow.bin"
writable = true
busy = 3

[[device]]
name = "IO"
product_id = 0x00290002
inputs = 2
outputs = 2
"#;

/// The simulator's content of a `size` file: a counting pattern modulo 251.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// 1 MiB that is not the pattern (an xorshift sequence).
fn image() -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..MIB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("foe-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("segment.toml"), SEGMENT).unwrap();
    // As patient as the sdo tests: they run side by side on a shared machine.
    std::fs::write(
        d.join("patient.toml"),
        "[bus]\ninit_pdu_timeout_ms = 1000\n",
    )
    .unwrap();
    d
}

fn run(d: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args)
        .arg("--sim")
        .arg("--segment")
        .arg(d.join("segment.toml"))
        .arg("--config")
        .arg(d.join("patient.toml"));
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{c:?} did not return within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_1_mib_firmware_image_is_read_and_written_byte_for_byte_in_boot() {
    let d = dir("image");
    let out = d.join("fw.bin");
    let o = run(
        &d,
        &[
            "foe",
            "read",
            "0",
            out.to_str().unwrap(),
            "--name",
            "firmware.bin",
            "--boot",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with("position 0: read 1048576 bytes of \"firmware.bin\""),
        "{}",
        text(&o.stdout)
    );
    assert!(
        std::fs::read(&out).unwrap() == pattern(MIB),
        "the image read differs"
    );
    // Written and read back within the one process (--verify), byte for byte.
    let new = d.join("firmware.bin");
    std::fs::write(&new, image()).unwrap();
    let o = run(
        &d,
        &[
            "foe",
            "write",
            "0",
            new.to_str().unwrap(),
            "--boot",
            "--verify",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["bytes"], MIB);
    assert_eq!(v["name"], "firmware.bin");
    assert_eq!(v["verify"]["result"], "identical", "{v}");
    assert!(v["kib_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn refusals_and_mistakes_name_the_value_with_their_exit_codes() {
    let d = dir("errors");
    let big = d.join("big.bin");
    std::fs::write(&big, vec![7u8; 2000]).unwrap();
    let small = d.join("params.bin");
    std::fs::write(&small, vec![7u8; 600]).unwrap();
    let x = d.join("x");
    let x = x.to_str().unwrap();
    let (big, small) = (big.to_str().unwrap(), small.to_str().unwrap());
    let cases: &[(&[&str], i32, &str)] = &[
        // The device's refusals: runtime (1), the FoE code and what it means.
        (
            &["foe", "write", "0", small, "--password", "0x1235"],
            1,
            "FoE error 0x800a, no rights: the password is wrong",
        ),
        (
            &["foe", "read", "0", x, "--name", "nothing.bin"],
            1,
            "FoE error 0x8001, not found",
        ),
        (
            &[
                "foe",
                "write",
                "0",
                big,
                "--name",
                "params.bin",
                "--password",
                "4660",
            ],
            1,
            "the device refused it after 928 of 2000 bytes: FoE error 0x8003, disk full: the file is \
             larger than the device takes",
        ),
        (
            &["foe", "read", "0", x, "--name", "firmware.bin"],
            1,
            "FoE error 0x8008, bootstrap only",
        ),
        (
            &["foe", "write", "0", small, "--name", "info.txt"],
            1,
            "FoE error 0x8002, access denied",
        ),
        (
            &[
                "foe",
                "read",
                "0",
                x,
                "--name",
                "firmware.bin",
                "--boot",
                "--max-bytes",
                "5000",
            ],
            1,
            "the file is larger than 5000 bytes",
        ),
        (
            &["foe", "read", "1", x, "--name", "a"],
            1,
            "IO does not announce FoE in its SII (mailbox protocols none)",
        ),
        (
            &["foe", "read", "1", x, "--name", "a", "--boot"],
            1,
            "IO does not announce FoE",
        ),
        // The user's input: 2, naming the value.
        (&["foe", "read", "2", x], 2, "position 2: the segment has 2"),
        (
            &["foe", "read", "0", x, "--password", "0x100000000"],
            2,
            "--password \"0x100000000\": not a 32-bit number",
        ),
        (
            &["foe", "write", "0", "/nonexistent/fw.bin"],
            2,
            "FILE /nonexistent/fw.bin:",
        ),
        (
            &["foe", "read", "0", "/nonexistent/fw.bin"],
            2,
            "the directory /nonexistent does not exist",
        ),
        (
            &["foe", "read", "0", x, "--max-bytes", "0"],
            2,
            "--max-bytes 0",
        ),
    ];
    for (args, want, msg) in cases {
        let o = run(&d, args);
        let e = text(&o.stderr);
        assert_eq!(o.status.code(), Some(*want), "{args:?}: {e}");
        assert!(e.contains(msg), "{args:?}: {e}");
    }
    // A read that failed left no file behind.
    assert!(!Path::new(x).exists());
    // The parameter file within its size and with its password: written and verified.
    let o = run(
        &d,
        &[
            "foe",
            "write",
            "0",
            small,
            "--password",
            "0x1234",
            "--verify",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).ends_with("read back: identical\n"),
        "{}",
        text(&o.stdout)
    );
}

// ---------------------------------------------------------------- the library, in-process

fn on_segment<R: Send>(f: impl FnOnce(&PreOp<'_>) -> rtcat_master::diag::Result<R> + Send) -> R {
    let mut cfg = Config::default();
    cfg.bus.init_pdu_timeout_ms = 1000;
    let s = Session::open(
        &Target::Sim {
            spec: SegmentSpec::from_toml(SEGMENT).unwrap(),
            faults: Faults::new(),
        },
        &cfg,
    )
    .unwrap();
    segment::with_pre_op(s.maindevice(), Timeouts::default(), f).unwrap()
}

const STATE: Duration = Duration::from_secs(10);

#[test]
fn in_boot_1_mib_goes_both_ways_and_the_device_comes_back_to_pre_op() {
    let img = image();
    let (w, r) = on_segment(|seg| {
        let (w, r) = seg.with_boot_mailbox(0, STATE, |m| {
            let mut c = foe::Client::new(m);
            let t = Instant::now();
            c.write("firmware.bin", 0, &img, &mut |_| {}).unwrap();
            let w = t.elapsed();
            let t = Instant::now();
            let back = c.read("firmware.bin", 0, &mut |_| {}).unwrap();
            let r = t.elapsed();
            assert!(back == img, "the image read back differs");
            (w, r)
        })?;
        // Back in PRE-OP: CoE answers again, FoE of a file not only for BOOT too.
        let mut c = seg.client(0)?;
        assert_eq!(c.upload(0x1008, 0)?, b"FW");
        drop(c);
        let info = seg.with_mailbox(0, |m| foe::Client::new(m).read("info.txt", 0, &mut |_| {}))?;
        assert_eq!(info.unwrap(), b"rtcat simulated drive v1");
        // The new image is the device's flash: a second BOOT session reads it.
        let again = seg.with_boot_mailbox(0, STATE, |m| {
            foe::Client::new(m).read("firmware.bin", 0, &mut |_| {})
        })?;
        assert!(again.unwrap() == img);
        Ok((w, r))
    });
    let kib = |d: Duration| MIB as f64 / 1024.0 / d.as_secs_f64();
    // The figure (with --nocapture): in-process simulator, 128-byte mailbox (116 bytes a
    // packet), a build of this profile.
    println!(
        "FoE 1 MiB in-process: write {:.1} KiB/s ({:.2} s), read {:.1} KiB/s ({:.2} s)",
        kib(w),
        w.as_secs_f64(),
        kib(r),
        r.as_secs_f64()
    );
}

#[test]
fn after_a_refusal_or_a_client_giving_up_half_way_the_device_starts_over() {
    on_segment(|seg| {
        seg.with_mailbox(0, |m| {
            let mut c = foe::Client::new(m);
            // The device refuses half-way (beyond its 1000 bytes)...
            let e = c
                .write("params.bin", 0x1234, &[9u8; 2000], &mut |_| {})
                .unwrap_err();
            assert_eq!(e.code(), Some(code::DISK_FULL), "{e}");
            // ... and takes a file that fits right after.
            let small = pattern(777);
            c.write("params.bin", 0x1234, &small, &mut |_| {}).unwrap();
            assert_eq!(c.read("params.bin", 0x1234, &mut |_| {}).unwrap(), small);
            // The client gives up a read (its limit): the device is told and serves the next.
            let mut l = c.limits();
            l.max_read = 300;
            c.set_limits(l);
            assert!(matches!(
                c.read("params.bin", 0x1234, &mut |_| {}),
                Err(foe::Error::TooLarge { limit: 300, .. })
            ));
            l.max_read = foe::MAX_READ;
            c.set_limits(l);
            assert_eq!(c.read("params.bin", 0x1234, &mut |_| {}).unwrap(), small);
        })?;
        Ok(())
    });
}

/// A device that programs its flash as it goes: the write request and every third packet are
/// answered BUSY once; the client repeats them and the file arrives whole.
#[test]
fn a_busy_device_gets_each_request_again_and_the_file_arrives_whole() {
    let data: Vec<u8> = (0..2000u32).map(|i| (i * 31 % 256) as u8).collect();
    let back = on_segment(|seg| {
        let r = seg.with_mailbox(0, |m| {
            let mut c = foe::Client::new(m);
            let mut busy_seen = 0;
            c.write("slow.bin", 0, &data, &mut |p| {
                if p.busy.is_some() {
                    busy_seen += 1;
                }
            })?;
            assert!(
                busy_seen >= 2,
                "BUSY replies seen by the client: {busy_seen}"
            );
            c.read("slow.bin", 0, &mut |_| {})
        })?;
        Ok(r.unwrap())
    });
    assert!(back == data, "the file read back differs");
}

// ---------------------------------------------------------------- over a wire (veth, root)

#[path = "support/sim_proc.rs"]
mod sim_proc;

/// The same 1 MiB image over a real wire: `rtcat sim` in one network namespace, `rtcat foe` in
/// the other. Written in BOOT, then read back by a second command (the simulator keeps it).
#[test]
fn over_veth_1_mib_is_written_in_boot_and_read_back_by_another_command() {
    use ecsim::netns::{VethPair, root_or_skip};
    if !root_or_skip("over_veth_1_mib_is_written_in_boot_and_read_back_by_another_command") {
        return;
    }
    let d = dir("veth");
    let net = VethPair::create("foe").unwrap();
    let _sim = sim_proc::SimProc::start_segment(
        Path::new(BIN),
        &net,
        &d.join("sim.sock"),
        Some(&d.join("segment.toml")),
    );
    let img = image();
    let src = d.join("new.bin");
    std::fs::write(&src, &img).unwrap();
    let foe = |args: &[&str]| {
        let o = net
            .master_cmd(BIN)
            .args(args)
            .args(["--iface", &net.master_if, "--json", "--config"])
            .arg(d.join("patient.toml"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let w = foe(&[
        "foe",
        "write",
        "0",
        src.to_str().unwrap(),
        "--name",
        "firmware.bin",
        "--boot",
    ]);
    assert_eq!(w["bytes"], MIB);
    let back = d.join("back.bin");
    let r = foe(&[
        "foe",
        "read",
        "0",
        back.to_str().unwrap(),
        "--name",
        "firmware.bin",
        "--boot",
    ]);
    assert_eq!(r["bytes"], MIB);
    assert!(
        std::fs::read(&back).unwrap() == img,
        "the image read back over veth differs"
    );
    // The figure (with --nocapture): this machine's veth, a 128-byte mailbox.
    println!(
        "FoE 1 MiB over veth: write {:.0} KiB/s, read {:.0} KiB/s",
        w["kib_per_s"].as_f64().unwrap(),
        r["kib_per_s"].as_f64().unwrap()
    );
}

// ---------------------------------------------------------------- through a running master

/// `rtcat foe --control SOCK`: the running master's cycle carries the transfer (its mailbox
/// queue); the file's descriptor goes with the request, the master opens no path. The cycle's
/// data stays valid, the write is on the record once (without the password).
#[test]
fn through_a_running_master_files_go_both_ways_and_the_write_is_on_the_record() {
    use rtcat_control::{Client, Request};
    let d = dir("control");
    let sock = d.join("ctl.sock");
    let out = d.join("out");
    let mut bench = Command::new(BIN)
        .args([
            "bench",
            "--sim",
            "--no-rt",
            "--duration",
            "120",
            "--segment",
        ])
        .arg(d.join("segment.toml"))
        .arg("--config")
        .arg(d.join("patient.toml"))
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
    let foe = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .arg("--control")
            .arg(&sock)
            .output()
            .unwrap()
    };
    let params: Vec<u8> = (0..900u32).map(|i| (i * 7 % 256) as u8).collect();
    let src = d.join("params.bin");
    std::fs::write(&src, &params).unwrap();
    let o = foe(&[
        "foe",
        "write",
        "0",
        src.to_str().unwrap(),
        "--password",
        "0x1234",
        "--verify",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["bytes"], 900);
    assert_eq!(v["verify"]["result"], "identical", "{v}");
    let back = d.join("back.bin");
    let o = foe(&[
        "foe",
        "read",
        "0",
        back.to_str().unwrap(),
        "--name",
        "params.bin",
        "--password",
        "4660",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(&back).unwrap(), params);
    // The device's refusal: exit 1, named; nothing left beside FILE.
    let o = foe(&[
        "foe",
        "read",
        "0",
        back.to_str().unwrap(),
        "--name",
        "params.bin",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("no rights"), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read(&back).unwrap(),
        params,
        "the earlier file is kept"
    );
    // Only a write takes one device of the running segment to BOOT.
    let o = foe(&[
        "foe",
        "read",
        "0",
        back.to_str().unwrap(),
        "--name",
        "firmware.bin",
        "--boot",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--iface"), "{}", text(&o.stderr));
    // A firmware update of position 0 while position 1 cycles on (per-subdevice recovery is
    // the default): parked, written in BOOT, back in OP with its identity.
    let fw: Vec<u8> = image()[..100_000].to_vec();
    let fw_path = d.join("fw.bin");
    std::fs::write(&fw_path, &fw).unwrap();
    let o = foe(&[
        "foe",
        "write",
        "0",
        fw_path.to_str().unwrap(),
        "--name",
        "firmware.bin",
        "--boot",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["bytes"].as_u64(), v["boot"].as_bool()),
        (Some(100_000), Some(true))
    );
    assert!(
        text(&o.stderr).contains("back in OP after the update"),
        "{}",
        text(&o.stderr)
    );
    // Running again starts over the same way (the device was handed back, in OP).
    let o = foe(&[
        "foe",
        "write",
        "0",
        fw_path.to_str().unwrap(),
        "--name",
        "firmware.bin",
        "--boot",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // One update at a time: a second one while the first runs is refused, the first goes on.
    let big = d.join("fw-big.bin");
    std::fs::write(&big, &image()[..400_000]).unwrap();
    let first = Command::new(BIN)
        .args(["foe", "write", "0"])
        .arg(&big)
        .args(["--name", "firmware.bin", "--boot", "--control"])
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Under way once position 0's data is out (parked).
    let t = Instant::now();
    loop {
        let s = Client::connect(&sock)
            .unwrap()
            .call(&Request::Status)
            .unwrap();
        if s["availability"]["subdevices"][0]["out_now"] == true {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never parked: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = foe(&[
        "foe",
        "write",
        "0",
        fw_path.to_str().unwrap(),
        "--name",
        "firmware.bin",
        "--boot",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("another firmware update is under way"),
        "{}",
        text(&o.stderr)
    );
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(bench.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    bench.wait().unwrap();
    let events = std::fs::read_to_string(out.join("events.log")).unwrap();
    let rec: Vec<&str> = events.lines().filter(|l| l.contains("foe_write")).collect();
    assert_eq!(rec.len(), 5, "one record per transfer: {rec:?}");
    assert!(
        rec[0].contains("name=\"params.bin\"") && !rec[0].contains("4660"),
        "{}",
        rec[0]
    );
    assert!(
        rec[1].contains("name=\"firmware.bin\" boot=true") && rec[1].contains("result=ok"),
        "{}",
        rec[1]
    );
    // The application was told: out for the update, back for the same reason, twice.
    let of = |what: &str| {
        events
            .lines()
            .filter(|l| l.contains(what) && l.contains("position=0 "))
            .count()
    };
    assert_eq!(of("subdevice_parked"), 3, "{events}");
    assert_eq!(
        events
            .lines()
            .filter(
                |l| l.contains("subdevice_back position=0 ") && l.contains("cause=firmware_update")
            )
            .count(),
        3,
        "{events}"
    );
    assert_eq!(of("subdevice_lost"), 0, "{events}");
    // Position 1's data stayed valid throughout (the segment's working counter did not: 0 was
    // out of OP for the updates).
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let subs = &s["availability"]["subdevices"];
    // (A frame lost to the machine invalidates its cycle for everyone.)
    assert!(
        subs[1]["invalid_cycles"].as_u64() <= s["frames_lost"].as_u64(),
        "{s}"
    );
    assert!(subs[0]["invalid_cycles"].as_u64() > Some(0), "{s}");
    assert_eq!(s["recoveries"], 0, "{s}");
}
