//! The floor benchmark over a real wire: `rtcat sim --floor-echo` in one network namespace,
//! `rtcat bench --floor` in the other, joined by a veth pair. Checks what is correct or not
//! whatever the machine (frames counted on both sides, the summary's `floor` section, the echo
//! answering its pings only, the EtherCAT exchange untouched), never the ratio's value. Root only.

use ecsim::netns::{VethPair, root_or_skip};
use rtcat_master::floor::Pinger;
use rtcat_packet::{PacketSocket, floor};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

// Each test runs two processes in busy loops: one test at a time on two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The bar's bound on rtcat ÷ floor at p50 (test profile, `--wait sleep`, pinned). Measured
/// 1.28-1.58 on the shared 2-vCPU VM at load 1.7-3.9 and 2.16 in a quiet CI run (load 0.7): the
/// debug build's exchange costs 25-35 µs more than the floor, a fixed cost that weighs more the
/// quieter (and faster) the machine's floor is (docs/NOTES.md §1.1). 4.0 keeps a margin for a
/// quiet machine and still fails an exchange that costs twice today's; the printed ratio is the
/// finer bar.
const MAX_RATIO_P50: f64 = 4.0;

#[path = "support/sim_proc.rs"]
mod sim_proc;
use sim_proc::SimProc as Sim;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{ALLOCS, TRACK};

fn start_sim(net: &VethPair, dir: &Path) -> Sim {
    Sim::start_with(
        Path::new(BIN),
        net,
        &dir.join("sim.sock"),
        None,
        &["--floor-echo"],
    )
}

/// `key=N` of the simulator's status line.
fn status_field(st: &str, key: &str) -> u64 {
    st.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {st}"))
}

/// The simulator's status once `key` reached `want` (it refreshes every 100 ms), or as it is
/// after 2 s.
fn status_when(sim: &Sim, key: &str, want: u64) -> String {
    let t = Instant::now();
    loop {
        let st = sim.ctl("status");
        if status_field(&st, key) >= want || t.elapsed() > Duration::from_secs(2) {
            return st;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn floor_bench_over_veth_measures_both_and_echoes_only_pings() {
    if !root_or_skip("floor_bench_over_veth") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net = VethPair::create("rtcatfl").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(&net, dir.path());

    // Frames of the floor's EtherType without its marker are not echoed (counted as ignored).
    let master_if = net.master_if.clone();
    let stray = VethPair::in_ns(&net.master_ns, move || {
        let sock = PacketSocket::open_ethertype(&master_if, floor::ETHERTYPE).unwrap();
        let mut f = [0u8; 60];
        floor::write_ping(&mut f, 1);
        f[floor::MIN_LEN - 9] ^= 0xff; // the marker's last byte
        for _ in 0..3 {
            sock.send(&f).unwrap();
        }
        // Nothing comes back but our own frames.
        let mut buf = [0u8; 1514];
        let end = Instant::now() + Duration::from_millis(300);
        let mut answers = 0;
        while Instant::now() < end {
            sock.wait_readable(Some(Duration::from_millis(50))).unwrap();
            while let Some((_, kind)) = sock.recv(&mut buf).unwrap() {
                answers += u32::from(kind == rtcat_packet::PacketKind::Incoming);
            }
        }
        answers
    })
    .unwrap()
    .join()
    .unwrap();
    assert_eq!(stray, 0, "the echo answered frames without the marker");
    let st = status_when(&sim, "floor_ignored", 3);
    assert_eq!(status_field(&st, "floor_ignored"), 3, "{st}");
    assert_eq!(status_field(&st, "floor_echoed"), 0, "{st}");

    // Every attempt's pings reach the echo: the count is checked over all attempts.
    let mut pinged = 0u64;
    ecsim::noise::within_machine_noise("floor bench over veth", |i| {
        let out = dir.path().join(format!("out{i}"));
        let o = net
            .master_cmd(BIN)
            .args([
                "bench",
                "--iface",
                &net.master_if,
                "--check-echo",
                "--floor",
            ])
            .args([
                "--duration",
                "2",
                "--period-us",
                "1000",
                "--json",
                "-",
                "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        ecsim::noise::exited_ok("rtcat bench --floor", o.status, &stderr)?;
        let s =
            rtcat_results::Summary::parse(&String::from_utf8_lossy(&o.stdout), Path::new("stdout"))
                .expect("summary on stdout");
        let f = s.floor.clone().expect("a floor section");
        pinged += f.pings;
        // The EtherCAT exchange is untouched: every WKC right, the data echoed, and not one
        // ping or echo reached the master's socket (another EtherType or source: rejected as
        // such; a late reply of its own, `not_awaited`, is the machine's doing).
        assert_eq!(s.wkc.mismatches, 0);
        let by = &s.bus.as_ref().unwrap().rx_rejected_by_reason;
        for why in [
            "not_ethercat",
            "foreign_source",
            "unprocessed",
            "bad_length",
        ] {
            assert_eq!(by.get(why).copied(), Some(0), "{why}: {stderr}");
        }
        let rtt = s.rtt_ns.expect("rtcat's round trip");
        assert!(rtt.count > 0);
        // The floor's section: consistent counts, ordered percentiles, the ratios of the two.
        assert_eq!(f.rtt_ns.count + f.lost, f.pings, "{f:?}");
        assert_eq!(f.errors, 0, "{f:?}");
        assert!(f.rtt_ns.count > 0, "{f:?}");
        let l = &f.rtt_ns;
        assert!(l.min <= l.p50 && l.p50 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max);
        // The ratios of the two (to the last digits JSON keeps).
        for (r, a, b) in [(f.ratio_p50, rtt.p50, l.p50), (f.ratio_p99, rtt.p99, l.p99)] {
            let want = a as f64 / b as f64;
            assert!(
                r.is_some_and(|r| (r - want).abs() < 1e-9 * want),
                "{r:?} vs {a}/{b}"
            );
        }
        // The ping is the cyclic frame's size: 132 bytes of process data in an LRW at least.
        assert!(
            (14 + 2 + 10 + 132 + 2..=1514).contains(&f.frame_bytes),
            "{f:?}"
        );
        let txt = std::fs::read_to_string(out.join("summary.txt")).unwrap();
        assert!(txt.contains("rtcat / floor"), "{txt}");
        assert!(txt.contains("data errors 0"), "{txt}");
        assert!(out.join(rtcat_master::floor::HDR_FILE).is_file());
        let back = rtcat_results::read_hdr(&out.join(rtcat_master::floor::HDR_FILE)).unwrap();
        assert_eq!(back.len(), f.rtt_ns.count);
        // One ping per cycle but the first (and any that ran past mid-period), each answered
        // before its cycle ended: the machine's verdict.
        ecsim::noise::ensure(
            f.pings * 10 >= s.cycles * 9
                && f.lost * 100 <= f.pings
                && s.frames_lost * 100 <= s.cycles,
            || {
                format!(
                    "{} cycles ({} lost), {} pings, {} lost",
                    s.cycles, s.frames_lost, f.pings, f.lost
                )
            },
        )
    });
    // Both ends counted the same pings; the simulator answered EtherCAT all along.
    let st = status_when(&sim, "floor_echoed", pinged);
    assert_eq!(status_field(&st, "floor_echoed"), pinged, "{st}");
    assert_eq!(status_field(&st, "floor_ignored"), 3, "{st}");
    assert!(status_field(&st, "replied") > 0, "{st}");
}

#[test]
fn the_ping_loop_allocates_nothing() {
    if !root_or_skip("floor_ping_alloc") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net = VethPair::create("rtcatfa").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sim = start_sim(&net, dir.path());
    let master_if = net.master_if.clone();
    let (replies, allocs) = VethPair::in_ns(&net.master_ns, move || {
        let mut p = Pinger::open(&master_if).unwrap();
        let ping = |p: &mut Pinger| {
            let until = rtcat_master::clock::now_ns() + 50_000_000;
            p.ping(200, until).unwrap().is_some()
        };
        for _ in 0..20 {
            ping(&mut p);
        }
        let before = ALLOCS.load(Ordering::Relaxed);
        TRACK.with(|t| t.set(true));
        let replies = (0..500).filter(|_| ping(&mut p)).count();
        TRACK.with(|t| t.set(false));
        (replies, ALLOCS.load(Ordering::Relaxed) - before)
    })
    .unwrap()
    .join()
    .unwrap();
    assert_eq!(allocs, 0, "allocations in 500 pings");
    // Pings that came back went through the whole path (receive, match, stamp).
    assert!(replies > 0, "no ping came back");
    let st = status_when(&sim, "floor_echoed", 520);
    assert_eq!(status_field(&st, "floor_echoed"), 520, "{st}");
}

/// Issue 33's bar: rtcat's round trip ÷ the bare ping's over veth, pinned as the issue measured
/// (master SCHED_FIFO 80 on CPU 1, the simulator SCHED_FIFO 70 on CPU 0), printed with the build
/// it measured. Both wait in `ppoll` (`--wait sleep`), so the ratio is the exchange's own cost
/// on both ends, not the wait mode's gain. The bound is the machine's verdict (three tries):
/// generous, because this test runs the test profile's unoptimised binary on a shared VM
/// (docs/NOTES.md §1.1, "The regression of issue 33"). `ci/test.sh rust` runs it with
/// `--ignored --nocapture` after the workspace's tests, so its figures are in the log.
#[test]
#[ignore = "issue 33's bar: ci/test.sh runs it with --ignored --nocapture to print the ratio"]
fn round_trip_over_the_floor_pinned() {
    if !root_or_skip("round_trip_over_the_floor_pinned") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let (mcpu, scpu) = if two { ("1", "0") } else { ("0", "0") };
    let net = VethPair::create("rtcatfb").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _sim = Sim::start_with(
        Path::new(BIN),
        &net,
        &dir.path().join("sim.sock"),
        None,
        &["--floor-echo", "--cpu", scpu],
    );
    // The profile's directory (`debug` for the test profile, `release`, ...), never the path.
    let build = Path::new(BIN)
        .parent()
        .and_then(|d| d.file_name())
        .map_or("?".into(), |d| d.to_string_lossy().into_owned());
    ecsim::noise::within_machine_noise("rtcat ÷ floor over veth", |i| {
        let out = dir.path().join(format!("bar{i}"));
        let o = net
            .master_cmd(BIN)
            .args([
                "bench",
                "--iface",
                &net.master_if,
                "--floor",
                "--wait",
                "sleep",
            ])
            .args(["--cpu", mcpu, "--priority", "80", "--duration", "3"])
            .args(["--json", "-", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        ecsim::noise::exited_ok("rtcat bench --floor", o.status, &stderr)?;
        let s =
            rtcat_results::Summary::parse(&String::from_utf8_lossy(&o.stdout), Path::new("stdout"))
                .expect("summary on stdout");
        assert_eq!(s.wkc.mismatches, 0);
        let f = s.floor.as_ref().expect("a floor section");
        let rtt = s.rtt_ns.as_ref().expect("rtcat's round trip");
        let (p50, p99) = (
            f.ratio_p50.expect("p50 ratio"),
            f.ratio_p99.expect("p99 ratio"),
        );
        println!(
            "issue 33 bar (build target/{build}, try {i}): rtcat ÷ floor p50 {p50:.2}, p99 {p99:.2}; \
             rtt p50 {:.1} µs, p99 {:.1} µs; floor p50 {:.1} µs, p99 {:.1} µs; lost {} + {}; load {}",
            rtt.p50 as f64 / 1e3,
            rtt.p99 as f64 / 1e3,
            f.rtt_ns.p50 as f64 / 1e3,
            f.rtt_ns.p99 as f64 / 1e3,
            s.frames_lost,
            f.lost,
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
        ecsim::noise::ensure(p50 <= MAX_RATIO_P50, || {
            format!("rtcat ÷ floor p50 {p50:.2} > {MAX_RATIO_P50} (p99 {p99:.2})")
        })
    });
}
