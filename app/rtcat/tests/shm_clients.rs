//! The C and Python clients of the shared-memory process image (app/clients/): against
//! `rtcat bench --sim --shm --control` each example drives an output and sees it echoed in an
//! input, the dumps of both agree with the Rust client's snapshot, garbage copies of the master's
//! image handed over a socket are errors (the C client under ASan/UBSan), a socket whose peer is
//! not the master's uid is refused, and the Python command line keeps its exit codes;
//! against the master's publisher (the rtcat-shm crate) driven here, where a test needs what a
//! bench run does not do on demand — publishing back to back (torn reads), a declared writer with
//! a safe value, a replacement — ownership and re-attaching. Skips when `cc` or `python3` is
//! missing — unless `CI` is set, then that is a failure.

#[path = "support/handout.rs"]
mod handout;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn clients() -> PathBuf {
    repo().join("app/clients")
}

/// Whether `cc` and `python3` run; a skip (with the reason) outside CI, a failure in CI.
fn tools() -> bool {
    static OK: OnceLock<Result<(), String>> = OnceLock::new();
    let r = OK.get_or_init(|| {
        for tool in ["cc", "python3"] {
            match Command::new(tool).arg("--version").output() {
                Ok(o) if o.status.success() => {}
                _ => return Err(format!("{tool} is not installed")),
            }
        }
        Ok(())
    });
    match r {
        Ok(()) => true,
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("shm client tests need cc and python3: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: the shm client tests need cc and python3: {e}");
            false
        }
    }
}

/// Builds a C program of app/clients/c once per test binary, with -Werror and ASan/UBSan.
fn c_program(src: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    // One compile at a time, into a temporary name renamed into place: a test that found the
    // executable while the linker of another was still writing it failed to run it with
    // ETXTBSY ("Text file busy", seen in CI's rust area).
    static COMPILING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let exe = dir.path().join(src.replace(['/', '.'], "_"));
    let _one = COMPILING.lock().unwrap_or_else(|e| e.into_inner());
    if !exe.exists() {
        let tmp = exe.with_extension("partial");
        let out = Command::new("cc")
            .args([
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-O1",
                "-g",
            ])
            .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
            .arg("-o")
            .arg(&tmp)
            .arg(clients().join("c").join(src))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cc {src}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &exe).unwrap();
    }
    exe
}

/// A sanitizer report must not look like the clients' own exit 1.
fn sanitized(exe: &Path) -> Command {
    let mut c = Command::new(exe);
    c.env("ASAN_OPTIONS", "exitcode=86:detect_leaks=1").env(
        "UBSAN_OPTIONS",
        "halt_on_error=1:exitcode=87:print_stacktrace=1",
    );
    c
}

fn python(script: &str) -> Command {
    let mut c = Command::new("python3");
    c.arg(clients().join("python").join(script));
    c
}

fn unique(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("rtcat-clients-{}-{tag}-{n}", std::process::id())
}

/// The master's side in-process: the rtcat-shm crate's `Publisher` driven like `rtcat bench --sim`'s echo
/// application — each cycle the outputs get the pattern of app/rtcat/src/echo.rs, the attached
/// writers' entries are merged in (`take_writes`), the cycle is published, and every subdevice
/// computes its inputs from the outputs it received (ecsim::pdi, the simulator's own rule), so
/// they echo the outputs one exchange later. Layout: `rtcat pdos --sim --json` (the reference
/// segment). Runs `secs` seconds at 1 ms, then stores STOPPED; unlinks the object on drop.
/// How the fixture master runs.
struct Opts {
    secs: u32,
    /// None: publish back to back (the torn-read stress).
    period: Option<Duration>,
    timeout_cycles: u64,
    /// A writer declared in the configuration: (writer, the entry it owns, its safe value).
    declared: Option<(String, String, u64)>,
    /// Replace the object (generation 2) at this cycle.
    replace_at: Option<u64>,
    /// An entry the master drives (an [[axis]]'s): no writer may own it.
    master: Option<String>,
}

impl Opts {
    fn new(secs: u32) -> Opts {
        Opts {
            secs,
            period: Some(Duration::from_millis(1)),
            timeout_cycles: 1000,
            declared: None,
            replace_at: None,
            master: None,
        }
    }
}

struct Bench {
    /// The control socket serving the image (`rtcat_shm::testkit`).
    name: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
    _serve: rtcat_shm::testkit::Serve,
    _dir: tempfile::TempDir,
}

/// `rtcat pdos --sim --json`, once per test binary (a bring-up of the simulated segment; retried
/// because on a loaded machine its init timeouts can expire).
fn reference_layout() -> (Vec<u8>, serde_json::Value) {
    static LAYOUT: OnceLock<Vec<u8>> = OnceLock::new();
    let json = LAYOUT.get_or_init(|| {
        let mut last = String::new();
        for _ in 0..3 {
            let out = Command::new(env!("CARGO_BIN_EXE_rtcat"))
                .args(["pdos", "--sim", "--json"])
                .output()
                .unwrap();
            if out.status.success() {
                return out.stdout;
            }
            last = text(&out);
        }
        panic!("rtcat pdos --sim --json: {last}");
    });
    (json.clone(), serde_json::from_slice(json).unwrap())
}

impl Bench {
    fn start_with(tag: &str, secs: u32, period: Option<Duration>) -> Bench {
        Bench::start_opts(
            tag,
            Opts {
                period,
                ..Opts::new(secs)
            },
        )
    }

    fn start_opts(tag: &str, opts: Opts) -> Bench {
        use std::sync::atomic::{AtomicBool, Ordering};
        let Opts {
            secs,
            period,
            timeout_cycles,
            declared,
            replace_at,
            master,
        } = opts;
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join(format!("{}.sock", unique(tag)));
        let name = sock.display().to_string();
        let hub = rtcat_shm::Hub::new();
        let serve = rtcat_shm::testkit::Serve::start(&sock, hub.clone()).unwrap();
        let (json, layout) = reference_layout();
        let n = |v: &serde_json::Value| v.as_u64().unwrap() as u32;
        let subs: Vec<(usize, usize, usize, usize)> = layout["subdevices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let f = |k: &str| n(&s[k]) as usize;
                (
                    f("input_offset"),
                    f("input_bytes"),
                    f("output_offset"),
                    f("output_bytes"),
                )
            })
            .collect();
        let rows: Vec<rtcat_shm::OutputEntry> = layout["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["direction"] == "outputs" && e["index"] != 0)
            .map(|e| {
                let qualified = format!(
                    "{}:{}.{}",
                    e["position"],
                    e["pdo_name"].as_str().unwrap(),
                    e["name"].as_str().unwrap()
                );
                let mine = declared.as_ref().filter(|d| d.1 == qualified);
                rtcat_shm::OutputEntry {
                    bit_offset: n(&e["bit_offset"]),
                    bits: n(&e["bits"]) as u16,
                    writer: mine.map(|_| 0),
                    safe: mine.map_or(0, |d| d.2),
                    master: master.as_deref() == Some(qualified.as_str()),
                    ..Default::default()
                }
            })
            .collect();
        let writers: Vec<rtcat_shm::DeclaredWriter> = declared
            .iter()
            .map(|d| rtcat_shm::DeclaredWriter { name: d.0.clone() })
            .collect();
        let (ib, ob) = (n(&layout["input_bytes"]), n(&layout["output_bytes"]));
        let nsubs = subs.len() as u32;
        let create = move |generation| {
            let p = rtcat_shm::Publisher::create(&rtcat_shm::PublisherConfig {
                name: "clients",
                generation,
                period_ns: 1_000_000,
                subdevices: nsubs,
                input_bytes: ib,
                output_bytes: ob,
                layout_json: &json,
                entries: &rows,
                writers: &writers,
                writer_timeout_cycles: timeout_cycles,
            })
            .unwrap();
            hub.set(Some(p.broker()));
            p
        };
        let mut publisher = create(1);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut inputs, mut outputs) = (vec![0u8; ib as usize], vec![0u8; ob as usize]);
            let t0 = Instant::now();
            let mut cycle = 0u64;
            while !stop2.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(secs.into())
            {
                cycle += 1;
                if replace_at == Some(cycle) {
                    // A re-initialisation that changes the object: REPLACED, a new generation.
                    publisher.replace().unwrap();
                    publisher = create(2);
                }
                for (p, &(_, _, oo, ol)) in subs.iter().enumerate() {
                    for k in 0..ol {
                        // echo.rs: pattern(cycle + 1, position, k)
                        outputs[oo + k] = ((cycle + 1) as u8)
                            .wrapping_mul(31)
                            .wrapping_add(p as u8)
                            .wrapping_add(k as u8);
                    }
                }
                let _ = publisher.take_writes(&mut outputs, cycle);
                let info = rtcat_shm::CycleInfo {
                    cycle,
                    wkc: 9,
                    expected_wkc: 9,
                    unix_ns: 1,
                    ..Default::default()
                };
                publisher.publish(&info, &inputs, &outputs, subs.iter().map(|_| true));
                for &(io, il, oo, ol) in &subs {
                    let (o, i) = (&outputs[oo..oo + ol], &mut inputs[io..io + il]);
                    ecsim::pdi::device_inputs(cycle as u32, o, i);
                }
                match period {
                    Some(p) => std::thread::sleep(p),
                    None => std::hint::spin_loop(),
                }
            }
            publisher.set_state(rtcat_shm::State::Stopped);
            cycle
        });
        Bench {
            name,
            stop,
            thread: Some(thread),
            _serve: serve,
            _dir: dir,
        }
    }
}

impl Bench {
    /// Until the fixture master stopped (STOPPED, its last snapshot kept).
    fn finish(&mut self) {
        if let Some(t) = self.thread.take() {
            assert!(t.join().unwrap() > 100, "the fixture ran too few cycles");
        }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `rtcat bench --sim --shm NAME --control SOCK` for `secs` seconds: the real master publishing
/// the reference segment, whose subdevices echo output byte k into input byte k+4 XOR 0x5a
/// (ecsim::pdi). `name` is the control socket clients attach through.
struct Master {
    child: Kill,
    name: String,
    _dir: tempfile::TempDir,
}

impl Master {
    fn start(tag: &str, secs: u32) -> Master {
        let dir = tempfile::tempdir().unwrap();
        let name = dir.path().join("c.sock").display().to_string();
        let cfg = dir.path().join("rtcat.toml");
        // A 2 ms period with a whole period of response timeout: scheduling noise on a shared
        // machine does not look like a lost frame (as in e2e_sim.rs).
        std::fs::write(
            &cfg,
            "[cycle]\nperiod_us = 2000\n[bus]\nresponse_timeout_us = 2000\n\
             [rt]\nhold_cpu_dma_latency = false\n[shm]\nwriter_timeout_cycles = 500\n",
        )
        .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtcat"));
        cmd.args([
            "bench",
            "--sim",
            "--shm",
            &unique(tag),
            "--control",
            &name,
            "--duration",
            &secs.to_string(),
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--out")
        .arg(dir.path().join("out"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
        if !nix::unistd::geteuid().is_root() {
            cmd.arg("--no-rt");
        }
        let mut m = Master {
            child: Kill(cmd.spawn().unwrap()),
            name,
            _dir: dir,
        };
        let t0 = Instant::now();
        // LIVE with a first snapshot: the bring-up of the simulated segment takes a moment.
        while !m.published() {
            if let Some(st) = m.child.0.try_wait().unwrap() {
                let err = m.stderr();
                panic!(
                    "rtcat bench --shm {} ended ({st}) before publishing: {err}",
                    m.name
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{} not published within 30 s",
                m.name
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        m
    }

    fn published(&self) -> bool {
        rtcat_shm::Client::attach(&self.name)
            .is_ok_and(|c| c.state() == rtcat_shm::State::Live && c.snapshot().is_ok())
    }

    fn stderr(&mut self) -> String {
        let mut err = String::new();
        if let Some(e) = self.child.0.stderr.as_mut() {
            let _ = std::io::Read::read_to_string(e, &mut err);
        }
        err
    }

    /// The image's bytes now, through the descriptor the master hands out.
    fn image(&self) -> Vec<u8> {
        let fd = image_fd(Path::new(&self.name));
        let len = nix::sys::stat::fstat(&fd).unwrap().st_size as usize;
        let mut b = vec![0u8; len];
        std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::from(fd), &mut b, 0).unwrap();
        b
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
    }
}

/// The image's descriptor as a client gets it: `shm_image` on the control socket, the
/// descriptor from the reply (SCM_RIGHTS).
fn image_fd(sock: &Path) -> OwnedFd {
    handout::handed(sock, r#"{"cmd":"shm_image"}"#)
}

/// A sealed memfd holding `bytes` (as the master seals its image).
fn sealed(bytes: &[u8]) -> OwnedFd {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let fd = memfd_create(c"test", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
    std::os::unix::fs::FileExt::write_all_at(
        &std::fs::File::from(fd.try_clone().unwrap()),
        bytes,
        0,
    )
    .unwrap();
    nix::fcntl::fcntl(
        &fd,
        nix::fcntl::FcntlArg::F_ADD_SEALS(rtcat_shm::image_seals()),
    )
    .unwrap();
    fd
}

/// A client process, killed when the test ends (a failed assertion included).
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `cycle=C wrote=V read=R` lines: R must be V's echo (input byte k+4 = output byte k ^ 0x5a).
fn check_echo_lines(o: &Output, loops: usize) {
    assert!(o.status.success(), "{}", text(o));
    let lines: Vec<_> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), loops, "{}", text(o));
    let mut last_cycle = 0;
    for l in &lines {
        let f: Vec<u64> = l
            .split(' ')
            .map(|kv| kv.split_once('=').unwrap().1.parse().unwrap())
            .collect();
        let (cycle, wrote, read) = (f[0], f[1], f[2]);
        assert_eq!(
            read,
            wrote ^ 0x5a5a_5a5a,
            "{l}: the input does not echo the output"
        );
        assert!(cycle > last_cycle, "{l}");
        last_cycle = cycle;
    }
}

#[test]
fn c_example_drives_an_output_and_sees_it_echoed() {
    if !tools() {
        return;
    }
    let exe = c_program("example.c");
    let bench = Master::start("c-example", 60);
    let o = sanitized(&exe)
        .args([&bench.name, "0:Outputs.Output 1", "0:Inputs.Input 2", "10"])
        .output()
        .unwrap();
    check_echo_lines(&o, 10);
    // Another subdevice, and a 16-bit output echoed into the bytes after the counter.
    let o = sanitized(&exe)
        .args([&bench.name, "2:Outputs.Output 1", "2:Inputs.Input 2", "3"])
        .output()
        .unwrap();
    check_echo_lines(&o, 3);
}

#[test]
fn python_example_drives_an_output_and_sees_it_echoed() {
    if !tools() {
        return;
    }
    let bench = Master::start("py-example", 60);
    let o = python("example.py")
        .args([&bench.name, "--loops", "10"])
        .output()
        .unwrap();
    check_echo_lines(&o, 10);
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

#[test]
fn dumps_of_c_python_and_rust_agree_on_the_stopped_object() {
    if !tools() {
        return;
    }
    let mut bench = Bench::start_with("dump", 2, Some(Duration::from_millis(1)));
    bench.finish();
    // A stopped image keeps its last snapshot (and is handed out while the master's socket
    // serves): all three read the same one.
    let py = json(
        &python("rtcat_shm.py")
            .args([&bench.name, "--dump"])
            .output()
            .unwrap(),
    );
    let c = json(
        &sanitized(&c_program("tests/probe.c"))
            .arg(&bench.name)
            .output()
            .unwrap(),
    );
    assert_eq!(py["state"], "stopped");
    for k in ["cycle", "generation", "wkc", "valid", "inputs", "outputs"] {
        assert_eq!(py[k], c[k], "{k}: Python and C disagree");
    }
    assert!(py["cycle"].as_u64().unwrap() > 100, "{py}");
    // The Rust client, entry by entry.
    let shm = rtcat_shm::Client::attach(&bench.name).unwrap();
    let snap = shm.snapshot().unwrap();
    assert_eq!(py["cycle"].as_u64().unwrap(), snap.cycle);
    assert_eq!(
        py["generation"].as_u64().unwrap(),
        u64::from(shm.generation())
    );
    assert_eq!(py["valid"], serde_json::json!(snap.valid));
    let mut names = 0;
    for (dir, d) in [
        ("inputs", rtcat_shm::Direction::Inputs),
        ("outputs", rtcat_shm::Direction::Outputs),
    ] {
        let map = py[dir].as_object().unwrap();
        let ours: Vec<_> = shm.entries().iter().filter(|e| e.direction == d).collect();
        for e in &ours {
            let want = match snap.get(e) {
                rtcat_shm::Value::Bool(b) => serde_json::json!(b),
                rtcat_shm::Value::Unsigned(v) => serde_json::json!(v),
                rtcat_shm::Value::Signed(v) => serde_json::json!(v),
                rtcat_shm::Value::Real(v) => serde_json::json!(v),
            };
            assert_eq!(map[&e.name], want, "{}", e.name);
        }
        assert_eq!(map.len(), ours.len(), "{dir}");
        names += ours.len();
    }
    // The names are those of the layout `rtcat pdos --sim --json` lists.
    let (_, layout) = reference_layout();
    let expect = layout["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["index"] != 0)
        .count();
    assert_eq!(names, expect);
    assert!(py["inputs"]["0:Inputs.Input 1"].is_u64());
    assert!(py["outputs"]["2:Outputs.Output 6"].as_u64().unwrap() <= 0xffff);
}

#[test]
fn snapshots_are_never_torn() {
    if !tools() {
        return;
    }
    // Back to back: a publication is always under way, the readers race it all the time.
    let bench = Bench::start_with("torn", 60, None);
    let o = sanitized(&c_program("tests/probe.c"))
        .args(["--torn", &bench.name, "5000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "C reader: {}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).to_string();
    let distinct: u64 = line
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("distinct="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        distinct > 500,
        "the reads saw too few cycles to mean anything: {line}"
    );
    // The same check through the Python client.
    let o = Command::new("python3")
        .arg("-c")
        .arg(TORN_PY)
        .arg(clients().join("python"))
        .arg(&bench.name)
        .output()
        .unwrap();
    assert!(o.status.success(), "Python reader: {}", text(&o));
    eprintln!("C: {line}Python: {}", String::from_utf8_lossy(&o.stdout));
}

/// Same rule as probe.c's --torn: every output byte of a snapshot from one cycle's pattern.
const TORN_PY: &str = r#"
import sys, time
sys.path.insert(0, sys.argv[1])
import rtcat_shm
img = rtcat_shm.attach_live(sys.argv[2])
per = img.output_bytes // img.subdevices
torn = back = 0
seen = set()
last = (0, 0)
t0 = time.monotonic()
while len(seen) < 2000 and time.monotonic() - t0 < 10:
    s = img.read()
    if (s.seq, s.cycle) < last:
        back += 1
    last = (s.seq, s.cycle)
    seen.add(s.seq)
    c31 = s.outputs[0]
    if any(b != (c31 + i // per + i % per) & 0xFF for i, b in enumerate(s.outputs)):
        torn += 1
print(f"distinct={len(seen)} torn={torn} backwards={back}")
sys.exit(1 if torn or back or len(seen) < 100 else 0)
"#;

/// Deterministic garbage: xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn fnv1a64(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Broken copies of a real object: truncations, bad magic/ABI, huge sizes and offsets, and the
/// layout JSON mangled with its hash fixed up, so that the parser itself sees the garbage.
fn garbage(good: &[u8]) -> Vec<Vec<u8>> {
    let u32_at = |off: usize| u32::from_le_bytes(good[off..off + 4].try_into().unwrap()) as usize;
    let (lo, ll) = (u32_at(64), u32_at(68));
    let mut v = Vec::new();
    for len in [0, 1, 100, 4095, 4096, lo + ll / 2, good.len() - 1] {
        v.push(good[..len.min(good.len())].to_vec());
    }
    let mut with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.to_vec();
        f(&mut b);
        v.push(b);
    };
    with(&|b| b[0] = b'X');
    with(&|b| put32(b, 8, 2));
    with(&|b| put32(b, 12, 0));
    with(&|b| put64(b, 16, u64::MAX));
    with(&|b| put64(b, 16, 1 << 40));
    with(&|b| put64(b, 24, 0));
    with(&|b| put32(b, 36, 0));
    with(&|b| put32(b, 36, 3));
    for field in [48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 96] {
        for val in [u32::MAX, u32::MAX - 7, 0x8000_0000, 0, 1, 4096, 4097] {
            with(&|b| put32(b, field, val));
        }
    }
    // Entry table rows that disagree with the layout; owners out of range (writer path).
    let eo = u32_at(72);
    with(&|b| put32(b, eo, 12345));
    with(&|b| put32(b, eo + 8, u32::MAX));
    let json_variants: [&[u8]; 8] = [
        b"",
        b"{",
        b"[]",
        b"{\"schema\":\"rtcat.layout/1\",\"entries\":[{\"position\":0,\"index\":1,\"name\":\"\\ud800\"}]}",
        b"{\"entries\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
        b"{\"schema\":\"rtcat.layout/1\",\"input_bytes\":1e999,\"entries\":[]}",
        b"\"\\u0000\"",
        b"{\"schema\":\"rtcat.layout/1\",\"entries\":[{\"bits\":99999999999999999999999}]}",
    ];
    for j in json_variants {
        with(&|b| {
            let n = j.len().min(ll);
            b[lo..lo + n].copy_from_slice(&j[..n]);
            b[lo + n..lo + ll].fill(b' ');
            let h = fnv1a64(&b[lo..lo + ll]);
            put64(b, 24, h);
        });
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for k in 0..400 {
        let mut b = good.to_vec();
        let flips = 1 + (rng.next() % 8) as usize;
        for _ in 0..flips {
            // Header fields, or the layout's bytes (hash fixed: the parser sees them).
            let off = if k % 2 == 0 {
                (rng.next() % 112) as usize
            } else {
                lo + (rng.next() as usize % ll)
            };
            b[off] = rng.next() as u8;
        }
        if k % 2 == 1 {
            let h = fnv1a64(&b[lo..lo + ll]);
            put64(&mut b, 24, h);
        }
        v.push(b);
    }
    v
}

#[test]
fn garbage_objects_are_errors_not_crashes() {
    if !tools() {
        return;
    }
    let bench = Master::start("garbage", 60);
    let good = bench.image();
    let cases = garbage(&good);
    // Served in turn by a fake master of our uid: each client attach gets the next one.
    let mut fds: Vec<OwnedFd> = cases.iter().map(|b| sealed(b)).collect();
    // Not what the master hands out: the intact bytes unsealed (a client must not map what can
    // be shrunk under it), and a pipe (must not block, not a memory file).
    let unsealed =
        nix::sys::memfd::memfd_create(c"t", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
    std::os::unix::fs::FileExt::write_all_at(
        &std::fs::File::from(unsealed.try_clone().unwrap()),
        &good,
        0,
    )
    .unwrap();
    let (pipe, _w) = nix::unistd::pipe().unwrap();
    let specials = 2;
    fds.push(unsealed);
    fds.push(pipe);
    fds.push(sealed(&good)); // the intact one, last: it must still read
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("fake.sock");
    let _fake = rtcat_shm::testkit::Serve::fixed(&sock, fds).unwrap();
    let n = cases.len() + specials + 1;
    let all: Vec<String> = vec![sock.display().to_string(); n];
    let o = sanitized(&c_program("tests/probe.c"))
        .arg("--write")
        .args(&all)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "C probe: {}", text(&o));
    assert!(o.stderr.is_empty(), "sanitizer report: {}", text(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), all.len(), "one line per object: {}", text(&o));
    let errors = lines.iter().filter(|l| l.get("error").is_some()).count();
    // Every structural mutation is refused; random flips may leave an object readable.
    assert!(
        errors >= cases.len() - 400 + specials,
        "{errors} errors of {}",
        lines.len()
    );
    assert!(
        lines.last().unwrap().get("cycle").is_some(),
        "the intact object: {:?}",
        lines.last()
    );
    // The special descriptors by the C client's error: unsealed, or not a memory file.
    for l in &lines[cases.len()..cases.len() + specials] {
        assert_eq!(l["error"], -23, "RTCAT_SHM_EPROTO: {l}");
    }

    // Python: only ShmError, never another exception, for every object.
    let o = Command::new("python3")
        .arg("-c")
        .arg(GARBAGE_PY)
        .arg(clients().join("python"))
        .args(&all)
        .output()
        .unwrap();
    assert!(o.status.success(), "Python: {}", text(&o));
    let s = String::from_utf8_lossy(&o.stdout);
    let py_errors: usize = s.trim().strip_prefix("errors=").unwrap().parse().unwrap();
    assert!(py_errors >= cases.len() - 400 + specials, "{s}");
}

const GARBAGE_PY: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
import rtcat_shm
errors = 0
for name in sys.argv[2:]:
    try:
        with rtcat_shm.Image.attach(name) as img:
            img.read().to_json()
            with img.writer("probe") as w:
                for e in img.entries:
                    if e.is_output:
                        w.claim(e)
                        w.write({e: 0})
                w.heartbeat()
    except rtcat_shm.ShmError:
        errors += 1
print(f"errors={errors}")
"#;

#[test]
fn python_command_line_writes_and_keeps_its_exit_codes() {
    if !tools() {
        return;
    }
    let bench = Master::start("cli", 60);
    let run = |args: &[&str]| python("rtcat_shm.py").args(args).output().unwrap();
    // --write: taken by the master, shown in the outputs, echoed two cycles later in the inputs.
    let d = json(&run(&[
        &bench.name,
        "--write",
        "1:Outputs.Output 1=0x11223344",
        "--as",
        "cli",
    ]));
    assert_eq!(d["outputs"]["1:Outputs.Output 1"], 0x1122_3344);
    let o = run(&[
        &bench.name,
        "--write",
        "1:Output 1=287454020",
        "--as",
        "cli",
        "--watch",
        "--interval",
        "0.05",
        "--count",
        "5",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["outputs"]["1:Outputs.Output 1"], 287_454_020);
    assert_eq!(
        last["inputs"]["1:Inputs.Input 2"],
        287_454_020u64 ^ 0x5a5a_5a5a
    );
    // Usage errors: 2, naming what is wrong.
    for (args, what) in [
        (
            vec![
                bench.name.as_str(),
                "--write",
                "0:Outputs.Nope=1",
                "--as",
                "x",
            ],
            "0:Outputs.Nope",
        ),
        (
            vec![
                bench.name.as_str(),
                "--write",
                "0:Outputs.Output 6=70000",
                "--as",
                "x",
            ],
            "70000",
        ),
        (
            vec![
                bench.name.as_str(),
                "--write",
                "0:Inputs.Input 1=1",
                "--as",
                "x",
            ],
            "is an input",
        ),
        (
            vec![bench.name.as_str(), "--write", "0:Outputs.Output 1=1"],
            "--as",
        ),
        (
            vec![
                bench.name.as_str(),
                "--write",
                "0:Outputs.Output 1=1",
                "--as",
                &"w".repeat(40),
            ],
            "writer name",
        ),
        (vec![bench.name.as_str()], "nothing to do"),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(what),
            "{args:?}: {}",
            text(&o)
        );
    }
    // Runtime errors: 1.
    let o = run(&[&unique("absent"), "--dump", "--timeout", "0.2"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no control socket"));
}

#[test]
fn c_header_compiles_alone_and_twice() {
    if !tools() {
        return;
    }
    // Declarations without the implementation in one unit, the implementation in another, and
    // the header included twice: a program of two units links.
    let dir = tempfile::tempdir().unwrap();
    let h = clients().join("c/rtcat_shm.h");
    let a = dir.path().join("a.c");
    let b = dir.path().join("b.c");
    std::fs::write(&a, format!("#include \"{0}\"\n#include \"{0}\"\nconst char *f(void) {{ return rtcat_shm_strerror(RTCAT_SHM_ENOENT); }}\n", h.display())).unwrap();
    std::fs::write(&b, format!("#define _POSIX_C_SOURCE 200809L\n#define RTCAT_SHM_IMPLEMENTATION\n#include \"{0}\"\n#include \"{0}\"\n#include <stdio.h>\nconst char *f(void);\nint main(void) {{ puts(f()); return 0; }}\n", h.display())).unwrap();
    let exe = dir.path().join("ab");
    let o = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-Wshadow",
            "-Wconversion",
            "-Wsign-conversion",
            "-o",
        ])
        .arg(&exe)
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = Command::new(&exe).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("no control socket"));
}

/// Ownership across clients and the declared writer's life: the declared entry is at its safe
/// value until its writer writes, nobody else can claim it, it goes back to the safe value when
/// the writer's heartbeat stops (and when it detaches), and a writer of the same name takes the
/// slot again; a claimed entry belongs to one writer at a time, whichever client it uses.
#[test]
fn ownership_is_exclusive_and_declared_entries_go_safe() {
    if !tools() {
        return;
    }
    let bench = Bench::start_opts(
        "owners",
        Opts {
            timeout_cycles: 100,
            declared: Some(("plc".into(), "1:Outputs.Output 3".into(), 0xdead)),
            ..Opts::new(60)
        },
    );
    let o = Command::new("python3")
        .arg("-c")
        .arg(OWNERS_PY)
        .arg(clients().join("python"))
        .arg(&bench.name)
        .output()
        .unwrap();
    assert!(o.status.success(), "Python: {}", text(&o));
    let probe = c_program("tests/probe.c");
    // The C client: the declared slot for "plc" (slot 0), and no claim on its entry for others.
    let o = sanitized(&probe)
        .args([
            "--claim",
            &bench.name,
            "plc",
            "1:Outputs.Output 3",
            "0x1234",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("declared=1 slot=0 seen=1"),
        "{}",
        text(&o)
    );
    let o = sanitized(&probe)
        .args([
            "--claim",
            &bench.name,
            "intruder",
            "1:Outputs.Output 3",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("owned by another writer"),
        "{}",
        text(&o)
    );
    // An undeclared entry: C claims it while Python holds it -> refused; after Python's detach, C gets it.
    let mut py = Command::new("python3")
        .arg(clients().join("python/rtcat_shm.py"))
        .args([
            &bench.name,
            "--write",
            "2:Outputs.Output 2=5",
            "--as",
            "holder",
            "--watch",
        ])
        .args(["--interval", "0.05", "--count", "200"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map(Kill)
        .unwrap();
    // Its first line: the claim is in place.
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(py.0.stdout.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(first.contains("\"2:Outputs.Output 2\":5"), "{first}");
    let o = sanitized(&probe)
        .args([
            "--claim",
            &bench.name,
            "c-writer",
            "2:Outputs.Output 2",
            "6",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("owned by another writer"),
        "{}",
        text(&o)
    );
    drop(py);
    let t0 = Instant::now();
    while slot_state(&bench.name, "holder") != Some(3) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the killed writer's slot never went STALE"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Killed without detaching: its slot goes STALE, its claim stays (FORMAT.md: until a writer of
    // that name takes the slot over). A writer of the same name takes it over and detaches.
    let o = python("rtcat_shm.py")
        .args([
            &bench.name,
            "--write",
            "2:Outputs.Output 2=7",
            "--as",
            "holder",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "take-over: {}", text(&o));
    let o = sanitized(&probe)
        .args([
            "--claim",
            &bench.name,
            "c-writer",
            "2:Outputs.Output 2",
            "6",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("declared=0"),
        "{}",
        text(&o)
    );
}

/// The state of the writer slot named `name` (FORMAT.md: 3 = STALE), as the master shows it in
/// the image's copy of the writer slots.
fn slot_state(sock: &str, name: &str) -> Option<u32> {
    let fd = image_fd(Path::new(sock));
    let len = nix::sys::stat::fstat(&fd).ok()?.st_size as usize;
    let mut b = vec![0u8; len];
    std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::from(fd), &mut b, 0).ok()?;
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let (off, n, size) = (
        u32_at(80) as usize,
        u32_at(84) as usize,
        u32_at(88) as usize,
    );
    (0..n).map(|k| off + k * size).find_map(|slot| {
        let raw = &b[slot + 16..slot + 48];
        let len = raw.iter().position(|&c| c == 0).unwrap_or(32);
        (&raw[..len] == name.as_bytes()).then(|| u32_at(slot))
    })
}

const OWNERS_PY: &str = r#"
import sys, time
sys.path.insert(0, sys.argv[1])
import rtcat_shm as r
img = r.attach_live(sys.argv[2])
e3 = img.entry("1:Outputs.Output 3")

def until(cond, what, writer=None, limit=10.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if writer:
            writer.heartbeat()
        if cond(img.read()):
            return
        time.sleep(0.002)
    sys.exit(f"timeout: {what}")

until(lambda s: s.raw(e3) == 0xDEAD, "the declared entry at its safe value before its writer")
other = img.writer("hmi")
assert not other.declared
try:
    other.claim(e3)
    sys.exit("an undeclared writer claimed the declared entry")
except r.ShmError as e:
    assert "plc" in str(e), e
plc = img.writer("plc")
assert plc.declared and plc.slot == 0, (plc.declared, plc.slot)
plc.claim(e3)
plc.write({e3: 7})
until(lambda s: s.raw(e3) == 7, "the declared writer's value", plc)
# Heartbeat stops: STALE after writer_timeout_cycles, the safe value again.
until(lambda s: s.raw(e3) == 0xDEAD, "the safe value of a stale writer")
assert plc._i[r.W_STATE // 4] == r.W_STALE
until(lambda s: s.raw(e3) == 7, "the value again once the heartbeat is back", plc)
off = img.h["writers_offset"] + plc.slot * img.h["writer_bytes"]
plc.detach()
until(lambda s: s.raw(e3) == 0xDEAD, "the safe value after the declared writer detached")
# A declared slot keeps its name (FORMAT.md): only "plc" may take it again.
assert bytes(img._mm[off + r.W_NAME : off + r.W_NAME + 4]) == b"plc\0", "the declared slot lost its name"
t0 = time.monotonic()
while True:  # the master frees the slot at its next cycle
    try:
        again = img.writer("plc")
        break
    except r.ShmError:
        if time.monotonic() - t0 > 5:
            raise
        time.sleep(0.01)
assert again.slot == 0 and again.declared
again.detach()
other.detach()
print("ok")
"#;

/// A re-initialisation replaces the object: the C client reports it and re-attaches to the new
/// generation; the Python `--watch` re-attaches by itself and goes on.
#[test]
fn clients_follow_a_replaced_object() {
    if !tools() {
        return;
    }
    let probe = c_program("tests/probe.c"); // built before the clock of the fixture runs
    let bench = Bench::start_opts(
        "replace",
        Opts {
            replace_at: Some(3000),
            ..Opts::new(60)
        },
    );
    let mut py = python("rtcat_shm.py")
        .args([
            &bench.name,
            "--watch",
            "--interval",
            "0.02",
            "--timeout",
            "10",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map(Kill)
        .unwrap();
    let o = sanitized(&probe)
        .args(["--until-replaced", &bench.name])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("replaced generation 1 -> 2"),
        "{}",
        text(&o)
    );
    let mut gens = Vec::new();
    let mut r = std::io::BufReader::new(py.0.stdout.take().unwrap());
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        let mut l = String::new();
        if std::io::BufRead::read_line(&mut r, &mut l).unwrap() == 0 {
            break;
        }
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        gens.push(v["generation"].as_u64().unwrap());
        if gens.last() == Some(&2) {
            break;
        }
    }
    drop(py);
    assert!(
        gens.first() == Some(&1) && gens.last() == Some(&2),
        "generations {gens:?}"
    );
}

/// Issue 26: the image comes only from the genuine master. A socket whose peer does not run
/// as the master's uid is refused by all three clients before they ask anything — here a fake
/// master of our uid serving a verbatim copy of a genuine image (valid header, layout,
/// snapshot), the clients told that the master runs as another uid. And an entry the master
/// drives (an [[axis]]'s, flag bit 1) is refused by the C and Python writers and by the master.
#[test]
fn a_socket_that_is_not_the_masters_is_refused_by_all_three_clients() {
    if !tools() {
        return;
    }
    let bench = Master::start("forged", 60);
    let good = bench.image();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("fake.sock");
    let _fake = rtcat_shm::testkit::Serve::fixed(&sock, vec![sealed(&good)]).unwrap();
    let fake = sock.display().to_string();
    let ours = nix::unistd::geteuid().as_raw();
    let other = if ours == 65534 { 65533 } else { 65534 };
    // Rust.
    let e = rtcat_shm::Client::attach_owned_by(&fake, other)
        .err()
        .expect("the Rust client refuses it");
    assert!(
        matches!(e, rtcat_shm::Error::NotMaster { uid, master_uid, .. } if uid == ours && master_uid == other),
        "{e}"
    );
    // C.
    let o = sanitized(&c_program("tests/probe.c"))
        .env("RTCAT_MASTER_UID", other.to_string())
        .arg(&fake)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "C probe: {}", text(&o));
    let l: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(l["error"], -20, "RTCAT_SHM_ENOTMASTER: {l}");
    // Python, as a program.
    let t0 = Instant::now();
    let o = python("rtcat_shm.py")
        .args([fake.as_str(), "--dump", "--timeout", "5"])
        .args(["--master-uid", &other.to_string()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "Python: {}", text(&o));
    assert!(
        text(&o).contains("it is not the master") && o.stdout.is_empty(),
        "Python: {}",
        text(&o)
    );
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "refused at once, not retried"
    );
    // The check is no blanket refusal: the fake served by our uid is read when we are told the
    // master is us, and the genuine master is read by all three.
    assert!(rtcat_shm::Client::attach(&fake).is_ok());
    assert!(rtcat_shm::Client::attach(&bench.name).is_ok());
    let o = sanitized(&c_program("tests/probe.c"))
        .arg(&bench.name)
        .output()
        .unwrap();
    assert!(o.status.success(), "C probe: {}", text(&o));
    let o = python("rtcat_shm.py")
        .args([bench.name.as_str(), "--dump"])
        .output()
        .unwrap();
    assert!(o.status.success(), "Python: {}", text(&o));
}

#[test]
fn an_entry_the_master_drives_is_refused_by_every_writer() {
    if !tools() {
        return;
    }
    let row0 = "0:Outputs.Output 1";
    let bench = Bench::start_opts(
        "axis",
        Opts {
            master: Some(row0.into()),
            ..Opts::new(60)
        },
    );
    let o = sanitized(&c_program("tests/probe.c"))
        .args(["--claim", bench.name.as_str(), "w", row0, "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "C probe: {}", text(&o));
    assert!(text(&o).contains("driven by the master"), "C: {}", text(&o));
    let o = python("rtcat_shm.py")
        .args([
            bench.name.as_str(),
            "--write",
            &format!("{row0}=1"),
            "--as",
            "w",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "Python: {}", text(&o));
    assert!(
        text(&o).contains("driven by the master"),
        "Python: {}",
        text(&o)
    );
}
