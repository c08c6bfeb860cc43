//! `rtcat bench --sim --shm NAME --control SOCK` end to end, with the Rust client library as
//! another program would use it: it owns an output entry, sees its values echoed by the
//! simulated segment in the inputs, goes stale (its entry at the configured safe value, an
//! event), resumes, detaches; the master's echo check stays clean (it checks the outputs
//! actually sent, client entries included) and the results carry the writer events and the
//! record of the requests. The image is handed out over the socket: nothing in /dev/shm, and
//! nothing handed out can be resized.

#[path = "support/handout.rs"]
mod handout;

use handout::handed;
use rtcat_shm::{Client, Error, State, Value, WriterState};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SAFE: u64 = 0x77;

/// `rtcat bench --sim --shm NAME --control OUT/../c.sock --duration SECS --out OUT` (`--no-rt`
/// unless root); the socket's path is returned with the command.
fn bench(name: &str, secs: &str, out: &std::path::Path) -> (Command, String) {
    let sock = out.with_file_name("c.sock").display().to_string();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtcat"));
    cmd.args(["bench", "--sim", "--shm", name, "--control", &sock])
        .args(["--duration", secs, "--out"])
        .arg(out);
    if !nix::unistd::geteuid().is_root() {
        cmd.arg("--no-rt");
    }
    (cmd, sock)
}

fn wait_for(what: &str, secs: f64, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn bench_sim_shm_client_drives_an_output_and_sees_it_echoed() {
    let name = format!("rtcat-e2e-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rtcat.toml");
    // A 2 ms period with a whole period of response timeout: scheduling noise on a shared
    // machine does not look like a lost frame (as in e2e_sim.rs).
    std::fs::write(
        &cfg,
        format!(
            "[cycle]\nperiod_us = 2000\n[bus]\nresponse_timeout_us = 2000\n\
             [rt]\nhold_cpu_dma_latency = false\n\
             [shm]\nwriter_timeout_cycles = 100\n\
             [[shm.safe]]\nentry = \"0:Outputs.Output 1\"\nvalue = {SAFE}\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    let (mut cmd, sock) = bench(&name, "3", &out);
    let child = cmd
        .arg("--config")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let mut client = None;
    wait_for(
        "the object to be LIVE with a snapshot",
        10.0,
        || match Client::attach(&sock) {
            Ok(c) if c.state() == State::Live && c.snapshot().is_ok() => {
                client = Some(c);
                true
            }
            Ok(_) | Err(Error::Sys { .. } | Error::NotPublished { .. } | Error::Refused { .. }) => {
                false
            }
            Err(e) => panic!("{e}"),
        },
    );
    let client = client.unwrap();
    // Nothing of the image is a file in /dev/shm: it is handed out over the socket (0660).
    assert!(!std::path::Path::new("/dev/shm").join(&name).exists());
    let mode = std::fs::metadata(&sock).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o660
    );
    assert_eq!(client.geometry().subdevices, 3);
    let (o1, i2) = (
        client.entry("0:Outputs.Output 1").unwrap(),
        client.entry("0:Inputs.Input 2").unwrap(),
    );
    let mut w = client.attach_writer("e2e").unwrap();
    w.claim(&o1).unwrap();
    // The simulated device's input byte k >= 4 is output byte k - 4 XOR 0x5a (ecsim::pdi).
    let echo = |v: u64| v ^ 0x5a5a_5a5a;
    let drive = |w: &mut rtcat_shm::Writer, v: u64| {
        w.write(&[(&o1, Value::Unsigned(v))]).unwrap();
        wait_for("the value echoed in the inputs", 2.0, || {
            let s = client.snapshot().unwrap();
            s.raw(&o1) == v && s.raw(&i2) == echo(v) && s.valid.iter().all(|&v| v)
        });
    };
    for v in [0x1234_5678u64, 0xdead_beef, 0x0102_0304] {
        drive(&mut w, v);
    }
    // No heartbeat for longer than writer_timeout_cycles: stale, the entry at its safe value.
    wait_for("the writer to go stale", 2.0, || {
        w.state() == Some(WriterState::Stale)
    });
    wait_for("the safe value echoed", 2.0, || {
        let s = client.snapshot().unwrap();
        s.raw(&o1) == SAFE && s.raw(&i2) == echo(SAFE)
    });
    w.heartbeat();
    wait_for("the writer to resume", 2.0, || {
        w.state() == Some(WriterState::Attached)
    });
    drive(&mut w, 0x0a0b_0c0d);
    drop(w);

    let res = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(res.status.success(), "{stderr}");
    assert!(
        stderr.contains("data errors 0"),
        "echo check of the sent outputs: {stderr}"
    );
    assert_eq!(client.state(), State::Stopped, "STOPPED at a clean exit");
    let events = std::fs::read_to_string(out.join("events.log")).unwrap();
    for what in [
        "shm_writer attached slot=0",
        "shm_writer stale outputs=safe slot=0",
        "shm_writer resumed slot=0",
        "shm_writer detached slot=0",
    ] {
        assert!(events.contains(what), "{what} in events.log:\n{events}");
    }
    assert!(events.contains("name=\"e2e\""), "{events}");
    assert!(!events.contains("data_mismatch"), "{events}");
    // The writer's attach and its claim are on the record, with who asked.
    let me = format!("uid={} pid={}", nix::unistd::geteuid(), std::process::id());
    for what in [
        format!("control shm_writer {me} name=\"e2e\" result=ok"),
        format!(
            "control shm_claim {me} slot=0 row={} result=ok",
            o1.row.unwrap()
        ),
    ] {
        assert!(events.contains(&what), "{what} in events.log:\n{events}");
    }
}

#[test]
fn bad_shm_names_and_keys_are_usage_errors() {
    let rtcat = env!("CARGO_BIN_EXE_rtcat");
    let r = Command::new(rtcat)
        .args(["bench", "--sim", "--shm", "../etc", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(e.contains("shm.name = \"../etc\""), "{e}");
    // The image is handed out over the control socket only: --shm without one is refused.
    let r = Command::new(rtcat)
        .args(["bench", "--sim", "--shm", "x", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(e.contains("--control"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[shm]\nname = \"x\"\nwriter_timeout_cycles = 0\n").unwrap();
    let r = Command::new(rtcat)
        .args(["config", "check"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(e.contains("shm.writer_timeout_cycles = 0"), "{e}");
}

#[test]
fn an_unknown_entry_is_a_clear_bring_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        "[bus]\ninit_pdu_timeout_ms = 200\n[shm]\n\
         [[shm.writer]]\nname = \"plc\"\nentries = [\"0:Outputs.Output 9\"]\n",
    )
    .unwrap();
    let name = format!("rtcat-e2e-bad-{}", std::process::id());
    let r = Command::new(env!("CARGO_BIN_EXE_rtcat"))
        .args(["bench", "--sim", "--no-rt", "--shm", &name, "--control"])
        .arg(dir.path().join("c.sock"))
        .args(["--duration", "1", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{e}");
    assert!(
        e.contains("shm.writer[0].entries[0] = \"0:Outputs.Output 9\"")
            && e.contains("0:Outputs.Output 1"),
        "{e}"
    );
}

/// Issue 26: the name is no address any more. A file planted in /dev/shm under it (by anyone)
/// changes nothing: the run reaches its end, the clients get the image over the socket, the
/// file is left alone.
#[test]
fn a_file_planted_under_the_name_changes_nothing() {
    let name = format!("rtcat-e2e-squat-{}", std::process::id());
    let path = format!("/dev/shm/{name}");
    std::fs::write(&path, b"planted").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (mut cmd, sock) = bench(&name, "3", &out);
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the image over the socket", 10.0, || {
        Client::attach(&sock).is_ok_and(|c| c.state() == State::Live && c.snapshot().is_ok())
    });
    let res = child.wait_with_output().unwrap();
    let planted = std::fs::read(&path);
    let _ = std::fs::remove_file(&path);
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert_eq!(planted.unwrap(), b"planted", "left alone");
}

/// Issue 26: nothing a client holds can be resized. The image and a writer's object refuse
/// ftruncate (EPERM, their seals); the master keeps cycling to its end with its shutdown
/// sequence and results.
#[test]
fn truncating_what_is_handed_out_fails_and_the_master_keeps_cycling() {
    let name = format!("rtcat-e2e-trunc-{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (mut cmd, sock) = bench(&name, "3", &out);
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the object to be LIVE", 10.0, || {
        Client::attach(&sock).is_ok_and(|c| c.state() == State::Live && c.snapshot().is_ok())
    });
    let image = handed(std::path::Path::new(&sock), r#"{"cmd":"shm_image"}"#);
    let writer = handed(
        std::path::Path::new(&sock),
        r#"{"cmd":"shm_writer","name":"shrinker"}"#,
    );
    for fd in [&image, &writer] {
        for len in [0, 1 << 20] {
            assert_eq!(
                nix::unistd::ftruncate(fd, len),
                Err(nix::errno::Errno::EPERM)
            );
        }
    }
    let c = Client::attach(&sock).unwrap();
    let before = c.snapshot().unwrap().cycle;
    wait_for("the master to keep cycling", 2.0, || {
        c.snapshot().is_ok_and(|s| s.cycle > before + 100)
    });
    let res = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr);
    assert!(res.status.success(), "{stderr}");
    let events = std::fs::read_to_string(out.join("events.log")).unwrap();
    assert!(!events.contains("shm_truncated"), "{events}");
    assert!(
        events.contains("shutdown outputs=0 segment=INIT"),
        "{events}"
    );
    assert!(out.join("summary.json").exists());
}
