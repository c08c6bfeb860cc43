//! Results survive what happens to a real controller: a closed stderr, a full disk, SIGHUP,
//! SIGKILL after a checkpoint, a restart, links planted in the output directory. And the inputs
//! of `bench`/`run` are checked the same way everywhere (exit 2 naming the value).

use rtcat_results::{StopReason, Summary};
use std::io::Read;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn rtcat() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rtcat"))
}

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn require_root(what: &str) -> bool {
    if root() {
        return true;
    }
    assert!(
        std::env::var_os("RTCAT_REQUIRE_ROOT_TESTS").is_none(),
        "{what} needs root"
    );
    eprintln!("skipped: {what} needs root");
    false
}

fn kill(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

/// summary.json valid, and every histogram it names non-empty and readable.
fn check_results(out: &Path) -> Summary {
    let s = Summary::read(&out.join("summary.json")).expect("valid summary.json");
    assert!(s.cycles > 0, "{}", s.cycles);
    for f in ["wake_lateness_ns.hdr", "exec_ns.hdr", "rtt_ns.hdr"] {
        let h = rtcat_results::read_hdr(&out.join(f)).unwrap_or_else(|e| panic!("{f}: {e:#}"));
        assert!(!h.is_empty(), "{f} is empty");
    }
    s
}

fn config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let cfg = dir.join("rtcat.toml");
    std::fs::write(
        &cfg,
        format!(
            "[bus]\ninterface = \"eth1\"\nresponse_timeout_us = 2000\n[cycle]\nperiod_us = 2000\n\
             [rt]\nhold_cpu_dma_latency = false\n[output]\ndir = {:?}\n{extra}",
            dir.join("out")
        ),
    )
    .unwrap();
    cfg
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn closed_stderr_keeps_the_status_thread_and_the_watchdog_alive() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let cfg = config(dir.path(), "status_interval_ms = 100\n");
    let mut child = rtcat()
        .args(["run", "--sim", "--no-rt", "--config"])
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "400000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read a little of stderr, then close it, as `| head -c 300` does.
    let mut err = child.stderr.take().unwrap();
    let mut buf = [0u8; 300];
    err.read_exact(&mut buf).unwrap();
    drop(err);
    // The watchdog goes on being fed for seconds after stderr broke.
    let mut pings = 0;
    let t = Instant::now();
    let mut b = [0u8; 256];
    while t.elapsed() < Duration::from_secs(3) {
        if let Ok(n) = sock.recv(&mut b)
            && &b[..n] == b"WATCHDOG=1"
        {
            pings += 1;
        }
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the master died of a closed stderr"
    );
    assert!(
        pings >= 5,
        "only {pings} watchdog pings in 3 s after stderr closed"
    );
    kill(&child, nix::sys::signal::Signal::SIGTERM);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let s = check_results(&dir.path().join("out"));
    let l = s.logging.expect("logging problems are recorded");
    assert!(l.write_errors > 0);
    assert!(
        l.first_error.as_deref().unwrap_or("").contains("stderr"),
        "{l:?}"
    );
}

#[test]
fn bench_into_a_closed_pipe_writes_every_result() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut child = rtcat()
        .args(["bench", "--sim", "--no-rt", "--duration", "3", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = child.stderr.take().unwrap();
    let mut buf = [0u8; 100];
    err.read_exact(&mut buf).unwrap();
    drop(err);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let s = check_results(&out);
    assert_eq!(s.stop.unwrap().reason, StopReason::Duration);
}

#[test]
fn sighup_and_sigquit_stop_like_sigterm_with_the_shell_exit_code() {
    use nix::sys::signal::Signal;
    for (sig, code, name) in [
        (Signal::SIGHUP, 129, "SIGHUP"),
        (Signal::SIGQUIT, 131, "SIGQUIT"),
        (Signal::SIGINT, 130, "SIGINT"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut child = rtcat()
            .args(["bench", "--sim", "--no-rt", "--duration", "60", "--out"])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("events.log", Duration::from_secs(20), || {
            out.join("events.log").exists()
        });
        std::thread::sleep(Duration::from_millis(1500));
        kill(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{name}: {status:?}");
        let s = check_results(&out);
        let stop = s.stop.unwrap();
        assert_eq!(stop.reason, StopReason::Signal, "{name}");
        assert_eq!(stop.signal.as_deref(), Some(name));
        assert_eq!(stop.requested_duration_s, Some(60.0));
        assert!(s.duration_s < 60.0);
    }
}

#[test]
fn sigkill_after_a_checkpoint_leaves_a_valid_summary() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "checkpoint_s = 1\n");
    let out = dir.path().join("out");
    let mut child = rtcat()
        .args(["run", "--sim", "--no-rt", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("a checkpoint", Duration::from_secs(30), || {
        Summary::read(&out.join("summary.json")).is_ok_and(|s| s.cycles > 200)
    });
    kill(&child, nix::sys::signal::Signal::SIGKILL);
    child.wait().unwrap();
    let s = check_results(&out);
    let stop = s.stop.unwrap();
    assert_eq!(stop.reason, StopReason::Running, "a checkpoint says so");
    assert_eq!(stop.requested_duration_s, None);
    assert_eq!(s.subdevices, 3);
    assert_eq!(s.wkc.expected, Some(9));
    // No temporary file of an atomic write is left behind.
    for e in std::fs::read_dir(&out).unwrap() {
        let n = e.unwrap().file_name().into_string().unwrap();
        assert!(!n.contains(".tmp"), "{n}");
    }
}

#[test]
fn a_restart_keeps_the_previous_runs_results() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let bench = |secs: &str| {
        let st = rtcat()
            .args(["bench", "--sim", "--no-rt", "--duration", secs, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    };
    bench("1");
    let first = std::fs::read(out.join("summary.json")).unwrap();
    let first_ev = std::fs::read(out.join("events.log")).unwrap();
    bench("1");
    let runs: Vec<_> = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(std::fs::read(runs[0].join("summary.json")).unwrap(), first);
    assert_eq!(std::fs::read(runs[0].join("events.log")).unwrap(), first_ev);
    check_results(&runs[0]);
    check_results(&out);
    assert_ne!(std::fs::read(out.join("summary.json")).unwrap(), first);
}

#[test]
fn planted_symlinks_in_the_output_directory_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // A previous run's file names, all pointing at the victim; and a link for the next run's.
    let runs = out.join("runs");
    std::fs::create_dir(&runs).unwrap();
    for f in ["summary.txt", "events.log", "exec_ns.hdr"] {
        std::os::unix::fs::symlink(&victim, out.join(f)).unwrap();
    }
    let json = dir.path().join("j.json");
    std::os::unix::fs::symlink(&victim, &json).unwrap();
    let st = rtcat()
        .args(["bench", "--sim", "--no-rt", "--duration", "1", "--json"])
        .arg(&json)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    check_results(&out);
    // The output directory itself as a link is refused.
    let lout = dir.path().join("lout");
    std::os::unix::fs::symlink(dir.path(), &lout).unwrap();
    let st = rtcat()
        .args(["bench", "--sim", "--no-rt", "--duration", "1", "--out"])
        .arg(&lout)
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&st.stderr).contains("symbolic link"));
}

/// A tmpfs with room for little more than the results: samples.csv stops first, and
/// summary.json and the histograms are complete.
#[test]
fn a_nearly_full_disk_stops_the_logs_first() {
    if !require_root("mounting a tmpfs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=768k", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    struct Umount<'a>(&'a Path);
    impl Drop for Umount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _u = Umount(&mnt);
    let out = mnt.join("out");
    let st = rtcat()
        .args([
            "bench",
            "--sim",
            "--no-rt",
            "--samples",
            "--duration",
            "12",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let s = check_results(&out);
    let l = s.logging.expect("the stopped samples are recorded");
    assert!(l.samples_dropped > 0, "{l:?}");
    assert!(
        String::from_utf8_lossy(&st.stderr).contains("samples.csv stops here"),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let csv = std::fs::read_to_string(out.join("samples.csv")).unwrap();
    assert!(
        csv.lines().count() > 100,
        "samples.csv written until space ran low"
    );
}

#[test]
fn inputs_are_checked_the_same_way_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "bench",
                "--sim",
                "--no-rt",
                "--cpu",
                "999",
                "--duration",
                "1",
            ],
            "CPU 999 is not online",
        ),
        (
            vec![
                "bench",
                "--timer-only",
                "--no-rt",
                "--cpu",
                "999",
                "--duration",
                "1",
            ],
            "CPU 999 is not online",
        ),
        (
            vec!["bench", "--iface", "abcdefghijklmnop", "--duration", "1"],
            "at most 15",
        ),
        (vec!["bench", "--iface", "a:b", "--duration", "1"], "':'"),
        (vec!["bench", "--iface", "..", "--duration", "1"], "\"..\""),
    ];
    for (args, want) in cases {
        let st = rtcat()
            .args(&args)
            .arg("--out")
            .arg(dir.path().join("o"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&st.stderr);
        assert_eq!(st.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    for iface in ["a\\u0000b", ".", "..", "a:b", "a/b", "abcdefghijklmnop"] {
        let f = dir.path().join("c.toml");
        std::fs::write(&f, format!("[bus]\ninterface = \"{iface}\"\n")).unwrap();
        let st = rtcat().args(["config", "check"]).arg(&f).output().unwrap();
        let err = String::from_utf8_lossy(&st.stderr);
        assert_eq!(st.status.code(), Some(2), "{iface}: {err}");
        assert!(err.contains("bus.interface"), "{iface}: {err}");
    }
    // A configuration that is a FIFO or a link to /dev/zero is refused at once.
    let fifo = dir.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let zero = dir.path().join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let big = dir.path().join("big.toml");
    std::fs::write(&big, "#".repeat(2 << 20)).unwrap();
    for (f, want) in [
        (&fifo, "FIFO"),
        (&zero, "character device"),
        (&big, "limit of 1048576 bytes"),
    ] {
        let t = Instant::now();
        for cmd in [&["config", "check"][..], &["run", "--sim", "--config"][..]] {
            let st = rtcat().args(cmd).arg(f).output().unwrap();
            let err = String::from_utf8_lossy(&st.stderr);
            assert_eq!(st.status.code(), Some(2), "{cmd:?} {f:?}: {err}");
            assert!(err.contains(want), "{cmd:?} {f:?}: {err}");
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no hang on {f:?}");
    }
}

#[test]
fn printing_commands_end_quietly_on_a_closed_pipe() {
    for args in [
        &["config", "example"][..],
        &["doctor", "--cpu", "0"][..],
        &["tune", "plan", "--cpu", "0"][..],
        &["--help"][..],
    ] {
        let mut child = rtcat()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Closed before the child writes anything (it is still starting up): every write it
        // makes meets a pipe without a reader.
        drop(child.stdout.take());
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        assert_ne!(status.code(), Some(101), "{args:?} panicked: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

// Issue 26, finding 6: another writer fills the file system while the run goes on; the space
// the final results need was kept when the run started, so summary.json is the final one,
// complete, not the last checkpoint.
#[test]
fn a_file_system_filled_by_another_writer_still_gets_the_final_summary() {
    if !require_root("mounting a tmpfs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    struct Umount<'a>(&'a Path);
    impl Drop for Umount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _u = Umount(&mnt);
    let out = mnt.join("out");
    let cfg = config(dir.path(), "checkpoint_s = 1\n");
    let child = rtcat()
        .args(["bench", "--sim", "--no-rt", "--duration", "5", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the first checkpoint is there, the other writer takes every free byte.
    wait_for("a checkpoint", Duration::from_secs(20), || {
        out.join("summary.json").exists()
    });
    let mut filler = std::fs::File::create(mnt.join("filler")).unwrap();
    let block = vec![0x5au8; 4096];
    while std::io::Write::write_all(&mut filler, &block).is_ok() {}
    let _ = filler.sync_all();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let s = check_results(&out);
    let stop = s.stop.expect("a stop record");
    assert_eq!(stop.reason, StopReason::Duration, "{err}");
    assert!(s.duration_s >= 4.5, "{}", s.duration_s);
    assert!(!out.join(".final-reserve").exists());
}

// Issue 26, item 8: the results directory and its files have fixed modes whatever the umask.
#[test]
fn results_have_fixed_modes_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    for umask in ["000", "077"] {
        let out = dir.path().join(format!("u{umask}/a/out"));
        for _ in 0..2 {
            // Twice: the second run moves the first one's files into runs/<time>/.
            let o = Command::new("sh")
                .arg("-c")
                .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
                .arg(env!("CARGO_BIN_EXE_rtcat"))
                .args(["bench", "--sim", "--no-rt", "--duration", "1", "--out"])
                .arg(&out)
                .output()
                .unwrap();
            assert!(o.status.success(), "{o:?}");
        }
        for d in [out.parent().unwrap(), &out, &out.join("runs")] {
            assert_eq!(mode(d), 0o755, "umask {umask}: {}", d.display());
        }
        for f in ["summary.json", "summary.txt", "events.log", "exec_ns.hdr"] {
            assert_eq!(mode(&out.join(f)), 0o644, "umask {umask}: {f}");
        }
    }
}
