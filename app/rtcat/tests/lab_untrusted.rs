//! `report` and `load` on inputs nobody vouches for: every input a regular file below a limit,
//! histogram headers checked before anything is allocated for them, cyclictest columns and values
//! bounded, and a closed stdout/stderr never a panic. Every run has a timeout and (for `report`)
//! an address-space limit, so a regression shows up as a failed test, not a hung or swapping box.

use std::fs;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");
/// Address-space limit of a `report` child: a debug build needs well under 100 MiB.
const AS_LIMIT: u64 = 1 << 30;
const TIMEOUT: Duration = Duration::from_secs(30);

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rtlab/tests/fixtures")
}

#[derive(Debug)]
struct Outcome {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    /// Peak resident set size of the child, KiB (getrusage via wait4).
    maxrss_kib: i64,
    timed_out: bool,
    pid: u32,
}

/// How the child's stdout/stderr are connected.
#[derive(Clone, Copy, PartialEq)]
enum Io {
    Piped,
    /// A pipe whose read end is closed before the child starts (EPIPE on the first write).
    Broken,
}

fn broken_pipe() -> Stdio {
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    Stdio::from(w)
}

/// Runs `rtlab ARGS` in `cwd` with a timeout; `limit_as` caps its address space.
fn run(args: &[&str], cwd: &Path, limit_as: bool, out: Io, err: Io) -> Outcome {
    let mut cmd = Command::new(BIN);
    cmd.args(args).current_dir(cwd).stdin(Stdio::null());
    cmd.stdout(match out {
        Io::Piped => Stdio::piped(),
        Io::Broken => broken_pipe(),
    });
    cmd.stderr(match err {
        Io::Piped => Stdio::piped(),
        Io::Broken => broken_pipe(),
    });
    if limit_as {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: AS_LIMIT,
                    rlim_max: AS_LIMIT,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as i32;
    let reader = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut v);
            }
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let so = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let se = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    // (exited, timed out): the watchdog kills only a child that has not been waited for yet, and
    // the child is reaped only after `exited` is set, so the pid cannot have been reused.
    let state = Arc::new(Mutex::new((false, false)));
    let st = state.clone();
    let watchdog = std::thread::spawn(move || {
        let t0 = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(20));
            let mut s = st.lock().unwrap();
            if s.0 {
                return;
            }
            if t0.elapsed() > TIMEOUT {
                // SAFETY: plain kill(2) of our own unreaped child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                s.1 = true;
                return;
            }
        }
    });
    // SAFETY: waitid/wait4 on our own child with valid out-pointers.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        );
    }
    state.lock().unwrap().0 = true;
    watchdog.join().unwrap();
    let mut status = 0;
    // SAFETY: see above.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4");
    let es = std::process::ExitStatus::from_raw(status);
    std::mem::forget(child); // reaped above
    let timed_out = state.lock().unwrap().1;
    Outcome {
        code: es.code(),
        signal: es.signal(),
        stdout: so.join().unwrap(),
        stderr: se.join().unwrap(),
        maxrss_kib: ru.ru_maxrss,
        timed_out,
        pid: pid as u32,
    }
}

fn report(args: &[&str], cwd: &Path) -> Outcome {
    let mut a = vec!["report"];
    a.extend_from_slice(args);
    run(&a, cwd, true, Io::Piped, Io::Piped)
}

/// An input error: exit 1 within the timeout, no panic, stderr containing every `want`.
fn assert_refused(o: &Outcome, want: &[&str]) {
    assert!(!o.timed_out, "hung (killed after {TIMEOUT:?}): {o:?}");
    // e.g. SIGABRT: an allocation beyond the address-space limit
    assert_eq!(o.signal, None, "killed by a signal: {o:?}");
    assert_eq!(o.code, Some(1), "exit status: {o:?}");
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert!(o.stdout.is_empty(), "printed a table: {}", o.stdout);
    for w in want {
        assert!(o.stderr.contains(w), "stderr {:?} lacks {w:?}", o.stderr);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A V2 histogram header (40 bytes) with the given fields.
fn hdr_header(payload_len: u32, sigfig: u32, low: u64, high: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0x1c84_9313u32.to_be_bytes()); // V2 cookie
    b.extend_from_slice(&payload_len.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes()); // normalizing index offset
    b.extend_from_slice(&sigfig.to_be_bytes());
    b.extend_from_slice(&low.to_be_bytes());
    b.extend_from_slice(&high.to_be_bytes());
    b.extend_from_slice(&1.0f64.to_be_bytes()); // integer to double conversion ratio
    b
}

#[test]
fn hdr_claiming_4_gib_is_refused_before_allocating() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("bench");
    copy_dir(&fixtures().join("bench"), &d);
    let hdr = hdr_header(u32::MAX, 3, 1, 60_000_000_000);
    assert_eq!(hdr.len(), 40);
    fs::write(d.join("wake_lateness_ns.hdr"), &hdr).unwrap();
    let o = report(&["bench"], tmp.path());
    assert_refused(
        &o,
        &[
            "bench/wake_lateness_ns.hdr: not a valid HdrHistogram V2 file",
            "payload of 4294967295 bytes",
            "0 bytes follow",
        ],
    );
    // the whole report (fixture summary, the other histogram) stays far below 4 GiB
    assert!(o.maxrss_kib < 100 * 1024, "peak RSS {} KiB", o.maxrss_kib);
    eprintln!("peak RSS of the refused 4 GiB .hdr: {} KiB", o.maxrss_kib);
}

#[test]
fn hdr_lengths_and_ranges_are_checked_against_the_file() {
    let good = fs::read(fixtures().join("bench/exec_ns.hdr")).unwrap();
    let declared = u32::from_be_bytes(good[4..8].try_into().unwrap()) as usize;
    assert_eq!(declared, good.len() - 40);
    let mut big_range = hdr_header(0, 5, 1, u64::MAX / 4);
    big_range.truncate(40);
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        (
            "truncated",
            good[..good.len() - 3].to_vec(),
            vec!["payload of", "bytes follow the 40-byte header"],
        ),
        (
            "trailing bytes",
            [good.clone(), vec![0, 0, 0]].concat(),
            vec!["payload of", "bytes follow the 40-byte header"],
        ),
        (
            "shorter than a header",
            good[..17].to_vec(),
            vec!["17 bytes, shorter than"],
        ),
        (
            "range beyond the bound",
            big_range,
            vec!["highest trackable value 4611686018427387903 ns is above"],
        ),
        (
            "compressed",
            [&0x1c84_9314u32.to_be_bytes()[..], &good[4..]].concat(),
            vec!["DEFLATE-compressed"],
        ),
        (
            "not a histogram",
            b"{\"schema\": \"rtcat.summary/1\", \"rtcat_version\": \"0.1.0\"}\n".to_vec(),
            vec!["cookie"],
        ),
    ];
    for (name, bytes, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("bench");
        copy_dir(&fixtures().join("bench"), &d);
        fs::write(d.join("exec_ns.hdr"), &bytes).unwrap();
        let o = report(&["bench"], tmp.path());
        let mut w = vec!["bench/exec_ns.hdr: not a valid HdrHistogram V2 file"];
        w.extend(want);
        assert_refused(&o, &w);
        eprintln!("{name}: {}", o.stderr.trim());
    }
}

/// A cyclictest histogram with `cols` threads and `rows` buckets, every sample in bucket 1.
fn cyclictest_text(cols: usize, rows: usize, max_us: &str) -> String {
    let mut t = String::from("# Histogram\n");
    for b in 0..rows {
        t.push_str(&format!("{b:06}"));
        for _ in 0..cols {
            t.push_str(if b == 1 { " 1" } else { " 0" });
        }
        t.push('\n');
    }
    let line = |name: &str, v: &str| {
        let mut l = format!("# {name}:");
        for _ in 0..cols {
            l.push(' ');
            l.push_str(v);
        }
        l.push('\n');
        l
    };
    t += &line("Total", "1");
    t += &line("Min Latencies", "1");
    t += &line("Avg Latencies", "1");
    t += &line("Max Latencies", max_us);
    t += &line("Histogram Overflows", "0");
    t
}

#[test]
fn cyclictest_with_100000_columns_is_refused_with_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    // 10 buckets x 100 000 threads: 2 MB of text, a valid histogram otherwise
    fs::write(
        tmp.path().join("wide.txt"),
        cyclictest_text(100_000, 10, "1"),
    )
    .unwrap();
    let o = report(&["wide.txt"], tmp.path());
    assert_refused(
        &o,
        &["wide.txt: line 2: 100000 count columns", "at most 1024"],
    );
    assert!(o.maxrss_kib < 100 * 1024, "peak RSS {} KiB", o.maxrss_kib);
    eprintln!(
        "peak RSS of the refused 100 000-column file: {} KiB",
        o.maxrss_kib
    );
}

#[test]
fn cyclictest_overflowing_max_is_an_error_naming_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    // 18446744073709552 µs * 1000 wraps around u64 to 384 ns (0.384 µs)
    let mut t = cyclictest_text(2, 4, "3");
    t = t.replace(
        "# Max Latencies: 3 3",
        "# Max Latencies: 3 18446744073709552",
    );
    fs::write(tmp.path().join("ovf.txt"), t).unwrap();
    let o = report(&["ovf.txt"], tmp.path());
    assert_refused(
        &o,
        &[
            "ovf.txt: line 9: # Max Latencies: column 2: 18446744073709552 µs",
            "60 s",
        ],
    );
    // a count that does not fit in 64 bits either
    let t = cyclictest_text(1, 3, "2").replace("000001 1", "000001 99999999999999999999");
    fs::write(tmp.path().join("big.txt"), t).unwrap();
    let o = report(&["big.txt"], tmp.path());
    assert_refused(
        &o,
        &[
            "big.txt: line 3: histogram row: \"99999999999999999999\" (column 2) does not fit in 64 bits",
        ],
    );
    // counts that fit alone but whose sum does not
    let t = cyclictest_text(1, 3, "2")
        .replace("000000 0", "000000 18446744073709551615")
        .replace("# Total: 1", "# Total: 0");
    fs::write(tmp.path().join("sum.txt"), t).unwrap();
    let o = report(&["sum.txt"], tmp.path());
    assert_refused(
        &o,
        &["sum.txt: thread 0: the histogram rows hold more than"],
    );
}

/// Replaces `name` in `dir` by a FIFO or a link to /dev/zero.
fn plant(dir: &Path, name: &str, kind: &str) {
    let p = dir.join(name);
    let _ = fs::remove_file(&p);
    match kind {
        "fifo" => nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap(),
        "zero" => std::os::unix::fs::symlink("/dev/zero", &p).unwrap(),
        _ => unreachable!(),
    }
}

#[test]
fn fifos_and_links_to_dev_zero_are_refused_without_hanging() {
    for kind in ["fifo", "zero"] {
        for file in [
            "manifest.json",
            "ladder.csv",
            "s0/run1/summary.json",
            "s1/run2/wake_lateness_ns.hdr",
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let d = tmp.path().join("stock");
            copy_dir(&fixtures().join("stock"), &d);
            plant(&d, file, kind);
            let o = report(&["stock"], tmp.path());
            let what = if kind == "fifo" {
                "not a regular file (a FIFO)"
            } else {
                "is a symbolic link (not followed)"
            };
            assert_refused(&o, &[&format!("stock/{file}: {what}")]);
        }
        // a cyclictest file named on the command line: the link is the user's choice and is
        // followed, but what it leads to must be a regular file
        let tmp = tempfile::tempdir().unwrap();
        plant(tmp.path(), "ct.txt", kind);
        let o = report(&["ct.txt"], tmp.path());
        let what = if kind == "fifo" {
            "a FIFO"
        } else {
            "a character device"
        };
        assert_refused(&o, &[&format!("ct.txt: not a regular file ({what})")]);
    }
}

#[test]
fn oversized_inputs_name_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("bench");
    copy_dir(&fixtures().join("bench"), &d);
    let s = fs::read_to_string(d.join("summary.json")).unwrap();
    // valid JSON, padded with whitespace beyond 1 MiB
    fs::write(d.join("summary.json"), s + &" ".repeat(1 << 20)).unwrap();
    let o = report(&["bench"], tmp.path());
    assert_refused(
        &o,
        &["bench/summary.json: larger than the limit of 1048576 bytes"],
    );
    let f = fs::File::create(tmp.path().join("huge.txt")).unwrap();
    f.set_len(1 << 30).unwrap(); // sparse: 1 GiB of zeros, no disk used
    let o = report(&["huge.txt"], tmp.path());
    assert_refused(&o, &["huge.txt: larger than the limit of 16777216 bytes"]);
    assert!(o.maxrss_kib < 100 * 1024, "peak RSS {} KiB", o.maxrss_kib);
}

#[test]
fn load_config_that_is_a_fifo_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    plant(tmp.path(), "rtcat.toml", "fifo");
    let o = run(
        &["load", "--config", "rtcat.toml", "--duration", "0.2"],
        tmp.path(),
        false,
        Io::Piped,
        Io::Piped,
    );
    assert!(!o.timed_out, "hung: {o:?}");
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr
            .contains("--config: rtcat.toml: not a regular file (a FIFO)"),
        "{}",
        o.stderr
    );
}

#[test]
fn report_into_a_closed_pipe_exits_quietly() {
    let fx = fixtures();
    let args = ["report", "stock", "rt", "bench", "cyclictest-2t.txt"];
    for (out, err) in [(Io::Broken, Io::Piped), (Io::Broken, Io::Broken)] {
        let o = run(&args, &fx, true, out, err);
        assert!(!o.timed_out, "{o:?}");
        assert_ne!(o.code, Some(101), "panicked: {o:?}");
        // quietly, with the status a shell shows for a command killed by SIGPIPE (128 + 13)
        assert_eq!(o.code, Some(141), "{o:?}");
        assert!(o.stderr.is_empty(), "{}", o.stderr);
    }
    // stdout fine, stderr closed: the plots' message is lost, the table and the exit status are not
    let tmp = tempfile::tempdir().unwrap();
    let plots = tmp.path().join("p");
    let o = run(
        &["report", "bench", "--plots", plots.to_str().unwrap()],
        &fx,
        true,
        Io::Piped,
        Io::Broken,
    );
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.starts_with("# rtcat latency report"), "{o:?}");
    assert!(plots.join("wake-percentiles.svg").is_file());
    // an error message into a closed stderr: still exit 1, no panic
    let o = run(&["report", "nonexistent"], &fx, true, Io::Piped, Io::Broken);
    assert_eq!(o.code, Some(1), "{o:?}");
}

fn shm_dirs_of(pid: u32) -> usize {
    fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("rtcat-load-{pid}-"))
        })
        .count()
}

#[test]
fn load_with_closed_stdout_and_stderr_stops_its_workers_and_exits_cleanly() {
    let cpu = rtlab::cpus::usable_cpus().unwrap()[0].to_string();
    let tmp = tempfile::tempdir().unwrap();
    for (args, out, err) in [
        // progress and the report on stderr, both into a closed pipe
        (
            vec!["--mem", "tmpfs", "--tmpfs-mb", "1"],
            Io::Piped,
            Io::Broken,
        ),
        // the JSON report on stdout into a closed pipe
        (
            vec!["--cpu-hogs", "1", "--json", "-", "--quiet"],
            Io::Broken,
            Io::Piped,
        ),
        (
            vec!["--cpu-hogs", "1", "--json", "-"],
            Io::Broken,
            Io::Broken,
        ),
    ] {
        let mut a = vec!["load", "--cpus", &cpu, "--duration", "0.5"];
        a.extend(args.iter().copied());
        let t0 = Instant::now();
        let o = run(&a, tmp.path(), false, out, err);
        assert!(!o.timed_out, "{o:?}");
        assert_ne!(o.code, Some(101), "panicked: {o:?}");
        assert_eq!(o.code, Some(0), "{a:?}: {o:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{a:?}");
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
        assert_eq!(shm_dirs_of(o.pid), 0, "{a:?}: tmpfs directory left behind");
    }
}

/// A directory anyone may write (like a result directory handed to another user) with a link
/// planted at `name` pointing to `victim`.
fn planted(tmp: &Path, name: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let victim = tmp.join("victim");
    fs::write(&victim, "precious").unwrap();
    let open = tmp.join("open");
    fs::create_dir_all(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::symlink(&victim, open.join(name)).unwrap();
    (open, victim)
}

#[test]
fn outputs_never_write_through_a_planted_link() {
    let fx = fixtures();
    // --out: refused, the file the link points to untouched
    let tmp = tempfile::tempdir().unwrap();
    let (open, victim) = planted(tmp.path(), "report.md");
    let out = open.join("report.md");
    let o = report(&["bench", "--out", out.to_str().unwrap()], &fx);
    assert_refused(
        &o,
        &[
            "--out:",
            "report.md: a symbolic link in a directory others can write",
        ],
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");

    // --plots: files are written through the directory handle, a planted link is replaced
    let tmp = tempfile::tempdir().unwrap();
    let (open, victim) = planted(tmp.path(), "wake-percentiles.svg");
    let o = report(&["bench", "--plots", open.to_str().unwrap()], &fx);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    let md = fs::symlink_metadata(open.join("wake-percentiles.svg")).unwrap();
    assert!(md.is_file(), "the link is still there");

    // load --json FILE: the same rule as --out
    let tmp = tempfile::tempdir().unwrap();
    let (open, victim) = planted(tmp.path(), "load.json");
    let cpu = rtlab::cpus::usable_cpus().unwrap()[0].to_string();
    let json = open.join("load.json");
    let o = run(
        &[
            "load",
            "--cpus",
            &cpu,
            "--cpu-hogs",
            "1",
            "--duration",
            "0.2",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ],
        tmp.path(),
        false,
        Io::Piped,
        Io::Piped,
    );
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stderr.contains("--json: ")
            && o.stderr
                .contains("a symbolic link in a directory others can write"),
        "{}",
        o.stderr
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
}

#[test]
fn tmpfs_churn_directory_is_private_whatever_the_umask() {
    let cpu = rtlab::cpus::usable_cpus().unwrap()[0].to_string();
    let mut cmd = Command::new(BIN);
    cmd.args(["load", "--cpus", &cpu, "--mem", "tmpfs", "--tmpfs-mb", "1"])
        .args(["--duration", "3", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: umask is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    let dir = loop {
        let found = fs::read_dir("/dev/shm").unwrap().flatten().find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("rtcat-load-{pid}-"))
        });
        if let Some(e) = found {
            break e.path();
        }
        assert!(t0.elapsed() < Duration::from_secs(2), "no tmpfs directory");
        std::thread::sleep(Duration::from_millis(10));
    };
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(mode, 0o700, "{} under umask 000", dir.display());
}

#[test]
fn a_ladder_of_many_runs_costs_histograms_per_stage_not_per_run() {
    // 2 stages x 300 runs, every run a hard link to the fixture's s0/run1 files
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("big");
    fs::create_dir(&d).unwrap();
    let fx = fixtures().join("stock");
    let mut m: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(fx.join("manifest.json")).unwrap()).unwrap();
    let runs = 300u32;
    m["stages"] = serde_json::json!(["s0", "s1"]);
    m["runs"] = runs.into();
    fs::write(d.join("manifest.json"), m.to_string()).unwrap();
    let csv = fs::read_to_string(fx.join("ladder.csv")).unwrap();
    let mut out = String::from(csv.lines().next().unwrap());
    out.push('\n');
    for st in ["s0", "s1"] {
        let row = csv
            .lines()
            .find(|l| l.starts_with(&format!("{st},1,")))
            .unwrap();
        for k in 1..=runs {
            let rd = d.join(st).join(format!("run{k}"));
            fs::create_dir_all(&rd).unwrap();
            for f in ["summary.json", "wake_lateness_ns.hdr", "exec_ns.hdr"] {
                fs::hard_link(fx.join(st).join("run1").join(f), rd.join(f)).unwrap();
            }
            out.push_str(&row.replacen(&format!("{st},1,"), &format!("{st},{k},"), 1));
            out.push('\n');
        }
    }
    fs::write(d.join("ladder.csv"), out).unwrap();
    let o = report(&["big", "--format", "json"], tmp.path());
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["sources"][0]["stages"][1]["runs"], runs);
    // two histograms per run would be 600 x 2 x 216 KiB = 253 MiB
    assert!(o.maxrss_kib < 100 * 1024, "peak RSS {} KiB", o.maxrss_kib);
    eprintln!(
        "peak RSS of a 2 x {runs}-run ladder report: {} KiB",
        o.maxrss_kib
    );
}
