//! Load generator: bounds (duration, CPU placement, tmpfs size and cleanup), clean end on signal.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rtlab::load::{Backend, ForkLoad, LoadReport, LoadSpec, NetLoad, NetProto, TmpfsLoad};
use rtlab::{LoadHandle, cpus::format_cpu_list};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

/// The CPU the in-process loads are confined to: the first one this process may use.
fn load_cpu() -> usize {
    rtlab::cpus::usable_cpus().unwrap()[0]
}

/// The `Cpus_allowed_list` line every load thread and child must show.
fn allowed_line(cpus: &[usize]) -> String {
    format!("Cpus_allowed_list:\t{}", format_cpu_list(cpus))
}

fn status_field(path: &Path, key: &str) -> Option<String> {
    let s = fs::read_to_string(path).ok()?;
    s.lines().find_map(|l| {
        l.strip_prefix(key)
            .map(|v| v.trim_start_matches(':').trim().to_string())
    })
}

/// A script for the fork churn that appends its CPU affinity to `out` (and sleeps `sleep` s).
fn affinity_script(dir: &Path, out: &Path, sleep: &str) -> PathBuf {
    let p = dir.join("churn.sh");
    fs::write(
        &p,
        format!(
            "#!/bin/sh\ngrep Cpus_allowed_list /proc/self/status >> '{}'\nsleep {sleep}\n",
            out.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// pids of running processes whose command line contains `needle`.
fn procs_with(needle: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(c) = fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&c).contains(needle)
            && pid != std::process::id()
        {
            v.push(pid);
        }
    }
    v
}

fn shm_dirs_of(pid: u32) -> Vec<PathBuf> {
    fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("rtcat-load-{pid}-"))
        })
        .map(|e| e.path())
        .collect()
}

fn dir_bytes(d: &Path) -> u64 {
    fs::read_dir(d)
        .map(|r| {
            r.flatten()
                .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn in_process_load_respects_every_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let aff_out = tmp.path().join("aff.txt");
    let script = affinity_script(tmp.path(), &aff_out, "0");
    let spec = LoadSpec {
        duration: Duration::from_millis(1500),
        cpus: vec![load_cpu()],
        cpu_hogs: 2,
        tmpfs: Some(TmpfsLoad {
            dir: "/dev/shm".into(),
            mib: 4,
        }),
        anon_mib: Some(8),
        fork_churn: Some(ForkLoad {
            workers: 1,
            program: script,
        }),
        net: Some(NetLoad {
            proto: NetProto::Tcp,
            mbit_per_s: 10,
        }),
        backend: Backend::Builtin,
    };
    let t0 = Instant::now();
    let h = LoadHandle::start(&spec).unwrap();
    let tids = h.worker_tids();
    // 2 hogs + tmpfs + anon + 1 fork worker + net rx + net tx
    assert_eq!(tids.len(), 7);
    for tid in &tids {
        let st = PathBuf::from(format!("/proc/self/task/{tid}/status"));
        assert_eq!(
            status_field(&st, "Cpus_allowed_list").as_deref(),
            Some(format_cpu_list(&[load_cpu()]).as_str()),
            "thread {tid}"
        );
    }
    let dir = h.tmpfs_dir().unwrap().to_path_buf();
    assert!(dir.starts_with("/dev/shm"));
    let mut max_seen = 0;
    while t0.elapsed() < Duration::from_millis(1200) {
        max_seen = max_seen.max(dir_bytes(&dir));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(max_seen > 0, "tmpfs churn wrote nothing");
    assert!(
        max_seen <= 4 << 20,
        "tmpfs churn held {max_seen} bytes > 4 MiB"
    );
    let rep = h.wait().unwrap();
    let elapsed = t0.elapsed().as_secs_f64();
    assert!(
        (1.5..3.0).contains(&elapsed),
        "ran {elapsed} s for a 1.5 s load"
    );
    assert_eq!(rep.stopped_by, "duration");
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert!(
        !dir.exists(),
        "tmpfs directory {} left behind",
        dir.display()
    );
    assert!(
        rep.hog_loops > 0 && rep.tmpfs_bytes_written > 0 && rep.anon_passes > 0 && rep.forks > 0
    );
    assert_eq!(rep.fork_failures, 0);
    // 10 Mbit/s for 1.5 s = 1.875 MB (+ one 16 KiB write of pacing slack)
    assert!(
        rep.net_bytes_sent > 0 && rep.net_bytes_sent <= 1_875_000 + 16_384,
        "sent {}",
        rep.net_bytes_sent
    );
    let aff = fs::read_to_string(&aff_out).unwrap();
    assert!(aff.lines().count() as u64 >= 1);
    assert!(
        aff.lines()
            .all(|l| l.trim_end() == allowed_line(&[load_cpu()])),
        "fork churn children ran elsewhere: {aff}"
    );
}

#[test]
fn stop_ends_a_long_load_early_and_udp_is_bounded() {
    let spec = LoadSpec {
        duration: Duration::from_secs(60),
        cpus: vec![load_cpu()],
        cpu_hogs: 1,
        tmpfs: None,
        anon_mib: None,
        fork_churn: None,
        net: Some(NetLoad {
            proto: NetProto::Udp,
            mbit_per_s: 8,
        }),
        backend: Backend::Builtin,
    };
    let h = LoadHandle::start(&spec).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let rep = h.stop().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "stop took {:?}",
        t.elapsed()
    );
    assert_eq!(rep.stopped_by, "stop");
    assert!(rep.elapsed_s < 2.0);
    // 8 Mbit/s = 1 MB/s; ~0.5 s
    assert!(
        rep.net_bytes_sent > 0 && rep.net_bytes_sent < 1_000_000,
        "sent {}",
        rep.net_bytes_sent
    );
}

fn run_cli_and_signal(signal: nix::sys::signal::Signal, name: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let aff_out = tmp.path().join("aff.txt");
    let script = affinity_script(tmp.path(), &aff_out, "0.3");
    let usable = rtlab::cpus::usable_cpus().unwrap();
    assert!(
        usable.len() >= 2,
        "this test needs 2 usable CPUs (one stands for the RT CPU)"
    );
    let rt_cpu = *usable.last().unwrap();
    let rest: Vec<usize> = usable[..usable.len() - 1].to_vec();
    let rt_arg = rt_cpu.to_string();
    let child = Command::new(BIN)
        .args([
            "load",
            "--exclude-cpu",
            rt_arg.as_str(),
            "--cpu-hogs",
            "1",
            "--mem",
            "tmpfs,anon",
            "--tmpfs-mb",
            "4",
        ])
        .args([
            "--anon-mb",
            "8",
            "--fork-churn",
            "--fork-workers",
            "2",
            "--exec",
        ])
        .arg(&script)
        .args(["--duration", "30", "--json", "-", "--quiet"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(900));
    assert_eq!(shm_dirs_of(pid).len(), 1, "no tmpfs dir while running");
    // the load's threads never run on the excluded CPU 1
    for t in fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.starts_with("load-") {
            assert_eq!(
                status_field(&t.path().join("status"), "Cpus_allowed_list").as_deref(),
                Some(format_cpu_list(&rest).as_str()),
                "{comm}"
            );
        }
    }
    assert!(
        !procs_with(&script.display().to_string()).is_empty(),
        "no churn child running"
    );
    let t = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?} to stop on {name}",
        t.elapsed()
    );
    assert_eq!(out.status.code(), Some(0), "exit status on {name}");
    let rep: LoadReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rep.stopped_by, name);
    assert!(rep.forks > 0 && rep.hog_loops > 0);
    assert!(shm_dirs_of(pid).is_empty(), "tmpfs dir left after {name}");
    assert!(
        procs_with(&script.display().to_string()).is_empty(),
        "churn child left after {name}"
    );
    let aff = fs::read_to_string(&aff_out).unwrap();
    assert!(
        aff.lines().all(|l| l.trim_end() == allowed_line(&rest)),
        "{aff}"
    );
}

#[test]
fn cli_ends_cleanly_on_sigint() {
    run_cli_and_signal(nix::sys::signal::Signal::SIGINT, "SIGINT");
}

#[test]
fn cli_ends_cleanly_on_sigterm() {
    run_cli_and_signal(nix::sys::signal::Signal::SIGTERM, "SIGTERM");
}

/// The first signal asks the load to stop (it waits up to 3 s for a fork-churn child); a second
/// one, while it waits, ends the process at once with that signal, as for `rtcat bench`.
#[test]
fn a_second_signal_kills_a_stopping_load() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("slow.sh");
    fs::write(&script, "#!/bin/sh\nexec sleep 30\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let cpu = rtlab::cpus::usable_cpus().unwrap()[0].to_string();
    let mut child = Command::new(BIN)
        .args(["load", "--cpus", cpu.as_str(), "--fork-churn", "--exec"])
        .arg(&script)
        .args(["--duration", "60", "--quiet"])
        // its own group, so that the churn child is cleaned up with it below
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !procs_with(&script.display().to_string()).is_empty(),
        "no churn child running"
    );
    let t = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let st = child.wait().unwrap();
    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    assert_eq!(st.signal(), Some(libc::SIGINT), "{st:?}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
}

#[test]
fn cli_duration_bound_and_usage_errors() {
    let cpu_arg = load_cpu().to_string();
    let t = Instant::now();
    let out = Command::new(BIN)
        .args([
            "load",
            "--cpus",
            &cpu_arg,
            "--cpu-hogs",
            "1",
            "--duration",
            "1",
            "--json",
            "-",
            "--quiet",
        ])
        .output()
        .unwrap();
    let el = t.elapsed().as_secs_f64();
    assert_eq!(out.status.code(), Some(0));
    assert!((1.0..2.5).contains(&el), "1 s load took {el} s");
    let rep: LoadReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rep.stopped_by, "duration");
    assert!((1.0..1.5).contains(&rep.elapsed_s), "{}", rep.elapsed_s);

    let out = Command::new(BIN)
        .args([
            "load",
            "--cpus",
            &cpu_arg,
            "--tmpfs-mb",
            "0",
            "--mem",
            "tmpfs",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tmpfs-mb: 0 is not in"), "{err}");
    let out = Command::new(BIN)
        .args([
            "load",
            "--cpus",
            &cpu_arg,
            "--mem",
            "tmpfs",
            "--tmpfs-dir",
            "/proc",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tmpfs-dir: /proc is not a tmpfs"));
}

/// One hog and 2 MiB of tmpfs churn on the load CPU, built in.
fn hog_and_tmpfs(duration: Duration) -> LoadSpec {
    LoadSpec {
        duration,
        cpus: vec![load_cpu()],
        cpu_hogs: 1,
        tmpfs: Some(TmpfsLoad {
            dir: "/dev/shm".into(),
            mib: 2,
        }),
        anon_mib: None,
        fork_churn: None,
        net: None,
        backend: Backend::Builtin,
    }
}

#[test]
fn spawned_child_load_reports_back() {
    let spec = hog_and_tmpfs(Duration::from_secs(20));
    let h = LoadHandle::spawn(Path::new(BIN), &spec).unwrap();
    let pid = h.child_pid().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        status_field(Path::new(&format!("/proc/{pid}/status")), "Name").as_deref(),
        Some("rtcat")
    );
    let rep = h.stop().unwrap();
    assert_eq!(rep.stopped_by, "stop");
    assert!(rep.hog_loops > 0 && rep.tmpfs_bytes_written > 0, "{rep:?}");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists() || {
            let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            !s.contains("rtcat")
        }
    );
    assert!(shm_dirs_of(pid).is_empty());
}

/// The child of `LoadHandle::spawn` has SIGTERM as its parent-death signal: when the thread that
/// spawned it ends without stopping it, the child stops as on Ctrl-C (tmpfs files removed).
#[test]
fn child_load_stops_when_the_spawning_thread_ends() {
    let spec = hog_and_tmpfs(Duration::from_secs(60));
    let pid = std::thread::spawn(move || {
        let h = LoadHandle::spawn(Path::new(BIN), &spec).unwrap();
        let pid = h.child_pid().unwrap();
        // until the child's tmpfs directory exists, its signal handlers are in place
        let t0 = Instant::now();
        while shm_dirs_of(pid).is_empty() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!shm_dirs_of(pid).is_empty(), "the child load did not start");
        // neither stop() nor Drop: only the parent-death signal can end it now
        std::mem::forget(h);
        pid
    })
    .join()
    .unwrap();
    let t0 = Instant::now();
    let ended = loop {
        let state = status_field(Path::new(&format!("/proc/{pid}/status")), "State");
        if state.is_none_or(|s| s.starts_with('Z')) {
            break true;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid_t = nix::unistd::Pid::from_raw(pid as i32);
    if !ended {
        let _ = nix::sys::signal::killpg(pid_t, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = nix::sys::wait::waitpid(pid_t, None);
    assert!(
        ended,
        "the child load still runs 10 s after its parent thread ended"
    );
    assert!(shm_dirs_of(pid).is_empty());
}

#[test]
fn stress_ng_backend_is_placed_and_stopped() {
    let have = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("stress-ng").is_file()))
        .unwrap_or(false);
    if !have {
        assert!(
            std::env::var_os("RTLAB_REQUIRE_STRESS_NG").is_none(),
            "stress-ng required but not installed"
        );
        eprintln!("SKIPPED: stress-ng not installed");
        return;
    }
    let spec = LoadSpec {
        duration: Duration::from_secs(30),
        cpus: vec![load_cpu()],
        cpu_hogs: 1,
        tmpfs: Some(TmpfsLoad {
            dir: "/dev/shm".into(),
            mib: 4,
        }),
        anon_mib: Some(8),
        fork_churn: None,
        net: None,
        backend: Backend::StressNg,
    };
    let h = LoadHandle::start(&spec).unwrap();
    let pid = h.child_pid().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let group: Vec<u32> = fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|p| {
            fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit(')')
                        .next()
                        .and_then(|r| r.split_whitespace().nth(2).map(String::from))
                })
                .is_some_and(|pg| pg == pid.to_string())
        })
        .collect();
    assert!(group.len() >= 3, "stress-ng workers: {group:?}");
    for p in &group {
        let st = PathBuf::from(format!("/proc/{p}/status"));
        if let Some(a) = status_field(&st, "Cpus_allowed_list") {
            assert_eq!(a, format_cpu_list(&[load_cpu()]), "stress-ng process {p}");
        }
    }
    let t = Instant::now();
    let rep = h.stop().unwrap();
    assert!(t.elapsed() < Duration::from_secs(11));
    assert_eq!(rep.backend, "stress-ng");
    std::thread::sleep(Duration::from_millis(100));
    for p in &group {
        let alive =
            fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| !s.contains(") Z "));
        assert!(!alive, "stress-ng process {p} still running");
    }
}

fn status_kib(pid: u32, key: &str) -> u64 {
    status_field(Path::new(&format!("/proc/{pid}/status")), key)
        .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn anon_churn_stays_within_its_size() {
    let cpu = load_cpu().to_string();
    let child = Command::new(BIN)
        .args([
            "load",
            "--cpus",
            &cpu,
            "--mem",
            "anon",
            "--anon-mb",
            "32",
            "--duration",
            "1.5",
            "--quiet",
        ])
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(1000));
    let hwm = status_kib(pid, "VmHWM");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    // the churn touched its 32 MiB (peak RSS above it) but never held much more than one mapping
    assert!(
        hwm > 32 * 1024,
        "peak RSS {hwm} kB: the anon churn did not touch its 32 MiB"
    );
    assert!(
        hwm < (32 + 24) * 1024,
        "peak RSS {hwm} kB: more than one 32 MiB mapping plus the program"
    );
}
