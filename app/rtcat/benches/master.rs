//! rtcat's performance targets, measured side by side in one run (`cargo bench -p rtcat --bench
//! master`; root for parts A and B). Prints ratios; asserts nothing about absolute times.
//!
//! A. `bench --timer-only` vs `cyclictest -m -p80` at the same period on the same CPU, interleaved.
//! B. Our TX/RX (inline and thread) vs ethercrab's stock `tx_rx_task_io_uring` on the same
//!    simulated veth segment: round trip of one cycle, and whether each survives a lost response.
//! C. Execution time as the segment grows (3, 16, 64, 256 subdevices; 256 is a multi-frame image).
//! D. The cost of checkpoints on the cycle: reference segment with a checkpoint every second
//!    (ten times the default rate) vs none, interleaved rounds, wake/exec P99 and their ratio.
//! E. The wait modes (`[cycle] wait`: sleep, busy, hybrid) over AF_PACKET, and AF_XDP
//!    (`--link xdp`, native XDP on veth) sleeping and busy-polling, over veth against the
//!    raw-socket floor (`bench --floor`, `sim --floor-echo`): master SCHED_FIFO 80 on CPU 1, simulator
//!    SCHED_FIFO 70 on CPU 0, the modes interleaved round by round; round trip ÷ floor at p50
//!    and p99, the wait's CPU time per cycle, lost frames, the load average, and the whole
//!    cycle's p99 (wake to end) from a second run of each mode without the floor's ping.

use ecsim::netns::VethPair;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");
const SECS: &str = "5";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn last_cpu() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()) - 1
}

/// `rtcat ARGS --json -`, in the master's namespace of `net` if given.
fn rtcat_json(args: &[&str], net: Option<&VethPair>) -> rtcat_results::Summary {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = match net {
        Some(net) => net.master_cmd(BIN),
        None => Command::new(BIN),
    };
    let out = cmd
        .args(args)
        .args(["--json", "-", "--out"])
        .arg(dir.path())
        .stderr(Stdio::null())
        .output()
        .expect("run rtcat");
    assert!(out.status.success(), "rtcat {args:?} failed");
    serde_json::from_slice(&out.stdout).expect("summary JSON")
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn part_a() {
    println!(
        "\nA. timer-only loop vs cyclictest (1 ms, SCHED_FIFO 80, CPU {}, {SECS} s each, interleaved)",
        last_cpu()
    );
    if Command::new("cyclictest").arg("--help").output().is_err() {
        println!("   skipped: cyclictest not installed (apt-get install rt-tests)");
        return;
    }
    let cpu = last_cpu().to_string();
    println!(
        "   {:>5} {:>12} {:>12} {:>14} {:>14}",
        "round", "rtcat p50", "rtcat p99", "cyclictest p50", "cyclictest p99"
    );
    let (mut r50, mut r99, mut c50, mut c99) = (vec![], vec![], vec![], vec![]);
    let rounds = 5;
    for round in 1..=rounds {
        let s = rtcat_json(
            &[
                "bench",
                "--timer-only",
                "--cpu",
                &cpu,
                "--priority",
                "80",
                "--duration",
                SECS,
            ],
            None,
        );
        let dir = tempfile::tempdir().unwrap();
        let hist = dir.path().join("ct.hist");
        let st = Command::new("cyclictest")
            .args(["-m", "-p80", "-t1", "-i1000", "-q", "-h", "20000"])
            .arg(format!("-a{cpu}"))
            .arg(format!("-D{SECS}s"))
            .arg(format!("--histfile={}", hist.display()))
            .stdout(Stdio::null())
            .status()
            .expect("cyclictest");
        assert!(st.success());
        let text = std::fs::read_to_string(&hist).unwrap();
        let ct = rtlab::cyclictest::parse(&hist, &text).expect("cyclictest histogram");
        let t = &ct.threads[0];
        let (p50, _) = t.quantile_us(0.5);
        let (p99, _) = t.quantile_us(0.99);
        println!(
            "   {round:>5} {:>10.1}µs {:>10.1}µs {:>12}µs {:>12}µs",
            us(s.wake_lateness_ns.p50),
            us(s.wake_lateness_ns.p99),
            p50,
            p99
        );
        r50.push(us(s.wake_lateness_ns.p50));
        r99.push(us(s.wake_lateness_ns.p99));
        c50.push(p50 as f64);
        c99.push(p99 as f64);
    }
    // Medians over the rounds: one disturbed round on a shared VM must not decide the ratio.
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (m_r50, m_r99, m_c50, m_c99) = (
        median(&mut r50),
        median(&mut r99),
        median(&mut c50),
        median(&mut c99),
    );
    println!(
        "   median rtcat/cyclictest: p50 {:.2}x ({m_r50:.1} vs {m_c50:.1} µs), p99 {:.2}x ({m_r99:.1} vs {m_c99:.1} µs); target within 1.05x",
        m_r50 / m_c50.max(1.0),
        m_r99 / m_c99.max(1.0),
    );
}

#[path = "../tests/support/sim_proc.rs"]
mod sim_proc;
use sim_proc::SimProc;

fn start_sim(net: &VethPair, control: &Path) -> SimProc {
    SimProc::start(Path::new(BIN), net, control)
}

/// The stock io_uring task with a minimal 1 ms cyclic loop: per-cycle tx_rx time (ns) and
/// whether the bus still answers after one dropped response.
fn stock_io_uring(net: &VethPair, control: &Path) -> (Vec<u64>, bool) {
    use ethercrab::{MainDevice, MainDeviceConfig, PduStorage, Timeouts};
    use futures_lite::future::block_on;
    let storage: &'static PduStorage<16, { PduStorage::element_size(1100) }> =
        Box::leak(Box::new(PduStorage::new()));
    let (tx, rx, pdu_loop) = storage.try_split().unwrap();
    let iface = net.master_if.clone();
    let _task = VethPair::in_ns(&net.master_ns, move || {
        let _ = ethercrab::std::tx_rx_task_io_uring(&iface, tx, rx);
    })
    .unwrap();
    let timeouts = Timeouts {
        pdu: Duration::from_millis(100),
        eeprom: Duration::from_millis(100),
        ..Timeouts::default()
    };
    let md: &'static MainDevice<'static> = Box::leak(Box::new(MainDevice::new(
        pdu_loop,
        timeouts,
        MainDeviceConfig::default(),
    )));
    let group =
        block_on(md.init_single_group::<4, 256>(ethercrab::std::ethercat_now)).expect("init");
    let group = block_on(group.into_op(md)).expect("OP");
    // Same real-time treatment as rtcat's cyclic thread: pinned, SCHED_FIFO 80, 1 ns slack.
    rtcat_master::rt::pin_to(last_cpu()).expect("pin");
    rtcat_master::rt::set_fifo(80).expect("SCHED_FIFO");
    rtcat_master::rt::set_timer_slack(1).expect("timer slack");
    let mut times = Vec::with_capacity(5000);
    let period = Duration::from_millis(1);
    let end = Instant::now() + Duration::from_secs(SECS.parse().unwrap());
    let mut next = Instant::now() + period;
    while Instant::now() < end {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        next += period;
        let t = Instant::now();
        if block_on(group.tx_rx(md)).is_ok() {
            times.push(t.elapsed().as_nanos() as u64);
        }
    }
    // One lost response, then: does the bus answer again within 2 s?
    let out = Command::new(BIN)
        .args(["sim-ctl", "--control"])
        .arg(control)
        .args(["drop-next", "1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let _ = block_on(group.tx_rx(md));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let group: &'static _ = Box::leak(Box::new(group));
    std::thread::spawn(move || {
        let ok = (0..5).any(|_| block_on(group.tx_rx(md)).is_ok());
        let _ = done_tx.send(ok);
    });
    let survived = done_rx
        .recv_timeout(Duration::from_secs(2))
        .unwrap_or(false);
    (times, survived)
}

fn pct(v: &mut [u64], q: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() as f64 * q) as usize).min(v.len() - 1)]
}

fn part_b() {
    println!("\nB. TX/RX on a veth pair to the simulated reference segment (1 ms, {SECS} s each)");
    if !is_root() {
        println!("   skipped: needs root (network namespaces)");
        return;
    }
    let cpu = last_cpu().to_string();
    println!(
        "   {:<28} {:>12} {:>12} {:>12}  survives a lost response",
        "design", "tx_rx p50", "tx_rx p99", "tx_rx max"
    );
    for (name, mode) in [
        ("rtcat inline (IgH style)", "inline"),
        ("rtcat TX/RX thread", "thread"),
    ] {
        let net = VethPair::create("rtcbench").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ctl = dir.path().join("s.sock");
        let _sim = start_sim(&net, &ctl);
        let s = rtcat_json(
            &[
                "bench",
                "--iface",
                &net.master_if,
                "--cpu",
                &cpu,
                "--txrx",
                mode,
                "--duration",
                SECS,
            ],
            Some(&net),
        );
        // rtcat's exec is wake -> end of the cycle (tx_rx plus WKC/state checks and the
        // application hook), so it slightly over-states the tx_rx time it is compared with.
        println!(
            "   {name:<28} {:>10.1}µs {:>10.1}µs {:>10.1}µs  yes (frames_lost={}, recoveries={})",
            us(s.exec_ns.p50),
            us(s.exec_ns.p99),
            us(s.exec_ns.max),
            s.frames_lost,
            s.recoveries
        );
    }
    let net = VethPair::create("rtcbench").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("s.sock");
    let _sim = start_sim(&net, &ctl);
    let (mut t, survived) = stock_io_uring(&net, &ctl);
    println!(
        "   {:<28} {:>10.1}µs {:>10.1}µs {:>10.1}µs  {}",
        "ethercrab tx_rx_task_io_uring",
        us(pct(&mut t, 0.5)),
        us(pct(&mut t, 0.99)),
        us(*t.iter().max().unwrap_or(&0)),
        if survived {
            "yes"
        } else {
            "NO (hangs after one lost response)"
        }
    );
}

fn part_c() {
    println!("\nC. execution time vs segment size (in-process simulated segment, {SECS} s each)");
    let root = is_root();
    let cpu = last_cpu().to_string();
    println!(
        "   {:>10} {:>8} {:>12} {:>12} {:>12}",
        "subdevices", "bytes", "exec mean", "exec p99", "rtt mean"
    );
    let mut pts = Vec::new();
    for n in [3usize, 16, 64, 256] {
        let dir = tempfile::tempdir().unwrap();
        let seg = dir.path().join("seg.toml");
        std::fs::write(
            &seg,
            format!("[[device]]\ncount = {n}\noutputs = 22\ninputs = 22\n"),
        )
        .unwrap();
        let period = if n >= 64 { "4000" } else { "1000" };
        let mut args = vec![
            "bench",
            "--sim",
            "--period-us",
            period,
            "--duration",
            SECS,
            "--segment",
        ];
        let segs = seg.display().to_string();
        args.push(&segs);
        if root {
            args.extend(["--cpu", &cpu]);
        } else {
            args.push("--no-rt");
        }
        let s = rtcat_json(&args, None);
        println!(
            "   {n:>10} {:>8} {:>10.1}µs {:>10.1}µs {:>10.1}µs",
            s.pdi_bytes,
            s.exec_ns.mean / 1000.0,
            us(s.exec_ns.p99),
            s.rtt_ns.map_or(0.0, |r| r.mean / 1000.0)
        );
        pts.push((n as f64, s.pdi_bytes as f64, s.exec_ns.mean));
    }
    // Least-squares slope of exec mean over subdevices (and over bytes: 44 bytes per device).
    let k = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.2));
    let (mx, my) = (sx / k, sy / k);
    let slope = pts.iter().map(|p| (p.0 - mx) * (p.2 - my)).sum::<f64>()
        / pts.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
    println!(
        "   growth: {:.0} ns per subdevice, {:.1} ns per process-data byte (least squares over the four sizes)",
        slope,
        slope / 44.0
    );
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn part_d() {
    let rounds = 5;
    println!(
        "\nD. checkpoint cost: reference segment, 1 ms, checkpoint every 1 s vs none, {rounds} interleaved rounds of {SECS} s"
    );
    let root = is_root();
    let cpu = last_cpu().to_string();
    let dir = tempfile::tempdir().unwrap();
    let cfg = |every: u32| {
        let p = dir.path().join(format!("ck{every}.toml"));
        std::fs::write(&p, format!("[output]\ncheckpoint_s = {every}\n")).unwrap();
        p.display().to_string()
    };
    let (with, without) = (cfg(1), cfg(0));
    println!(
        "   {:>5} {:>14} {:>14} {:>14} {:>14}",
        "round", "wake p99 ck", "wake p99 none", "exec p99 ck", "exec p99 none"
    );
    let (mut wc, mut wn, mut ec, mut en) = (vec![], vec![], vec![], vec![]);
    for round in 1..=rounds {
        let one = |c: &str| {
            let mut args = vec!["bench", "--sim", "--duration", SECS, "--config", c];
            if root {
                args.extend(["--cpu", &cpu]);
            } else {
                args.push("--no-rt");
            }
            rtcat_json(&args, None)
        };
        let a = one(&with);
        let b = one(&without);
        println!(
            "   {round:>5} {:>12.1}µs {:>12.1}µs {:>12.1}µs {:>12.1}µs",
            us(a.wake_lateness_ns.p99),
            us(b.wake_lateness_ns.p99),
            us(a.exec_ns.p99),
            us(b.exec_ns.p99)
        );
        wc.push(a.wake_lateness_ns.p99);
        wn.push(b.wake_lateness_ns.p99);
        ec.push(a.exec_ns.p99);
        en.push(b.exec_ns.p99);
    }
    let (wc, wn, ec, en) = (
        median(&mut wc),
        median(&mut wn),
        median(&mut ec),
        median(&mut en),
    );
    println!(
        "   medians: wake p99 {:.1} vs {:.1} µs (ratio {:.2}), exec p99 {:.1} vs {:.1} µs (ratio {:.2}){}",
        us(wc),
        us(wn),
        wc as f64 / wn.max(1) as f64,
        us(ec),
        us(en),
        ec as f64 / en.max(1) as f64,
        if root {
            ""
        } else {
            " — not root: SCHED_OTHER, unpinned"
        }
    );
}

fn main() {
    // `cargo bench -p rtcat --bench master -- A C` runs only those parts (cargo adds --bench).
    let parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let want = |p: &str| parts.is_empty() || parts.iter().any(|a| a.eq_ignore_ascii_case(p));
    println!(
        "rtcat master benchmarks ({} CPUs, {})",
        last_cpu() + 1,
        if is_root() { "root" } else { "not root" }
    );
    if want("C") {
        part_c();
    }
    if want("A") {
        part_a();
    }
    if want("B") {
        part_b();
    }
    if want("D") {
        part_d();
    }
    if want("E") {
        part_e();
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// One mode's figures of one round.
struct WaitRound {
    ratio_p50: f64,
    ratio_p99: f64,
    rtt_p50: u64,
    rtt_p99: u64,
    floor_p50: u64,
    floor_p99: u64,
    cpu_ns: u64,
    /// Wake to end of the cycle, from the run without the floor (whose ping is in its cycle).
    cycle_p99: u64,
    lost: u64,
}

fn part_e() {
    let rounds: usize = std::env::var("RTCAT_WAIT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    println!(
        "\nE. wait modes and AF_XDP vs the raw-socket floor over veth (1 ms, {SECS} s each, {rounds} interleaved rounds)"
    );
    if !is_root() {
        println!("   skipped: needs root (network namespaces)");
        return;
    }
    // The master on CPU 1 and the simulator on CPU 0 (both, on a 1-CPU machine).
    let (mcpu, scpu) = if last_cpu() >= 1 {
        ("1", "0")
    } else {
        ("0", "0")
    };
    let net = VethPair::create("rtcwait").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _sim = SimProc::start_with(
        Path::new(BIN),
        &net,
        &dir.path().join("s.sock"),
        None,
        &["--floor-echo", "--cpu", scpu],
    );
    println!("   load average before: {}", loadavg());
    println!(
        "   {:>5} {:<11} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>9} {:>10} {:>5}",
        "round",
        "link/wait",
        "rtt p50",
        "rtt p99",
        "floor p50",
        "floor p99",
        "÷ p50",
        "÷ p99",
        "CPU/cycle",
        "cycle p99",
        "lost"
    );
    // (label, [bus] link, [cycle] wait): AF_PACKET's three waits, AF_XDP asleep and polling.
    let modes = [
        ("sleep", "packet", "sleep"),
        ("busy", "packet", "busy"),
        ("hybrid", "packet", "hybrid"),
        ("xdp-sleep", "xdp", "sleep"),
        ("xdp-busy", "xdp", "busy"),
    ];
    let mut all: Vec<Vec<WaitRound>> = modes.iter().map(|_| vec![]).collect();
    for round in 0..rounds {
        // A different mode first in every round: whatever drifts over the run hits all alike.
        for k in 0..modes.len() {
            let i = (round + k) % modes.len();
            let run = |floor: bool| {
                let (_, link, wait) = modes[i];
                let mut args = vec!["bench", "--iface", &net.master_if, "--wait", wait];
                args.extend(["--link", link]);
                args.extend(["--cpu", mcpu, "--priority", "80", "--duration", SECS]);
                if floor {
                    args.push("--floor");
                }
                rtcat_json(&args, Some(&net))
            };
            let s = run(true);
            let plain = run(false);
            let f = s.floor.as_ref().expect("a floor section");
            let rtt = s.rtt_ns.as_ref().expect("a round trip");
            let r = WaitRound {
                ratio_p50: f.ratio_p50.unwrap_or(f64::NAN),
                ratio_p99: f.ratio_p99.unwrap_or(f64::NAN),
                rtt_p50: rtt.p50,
                rtt_p99: rtt.p99,
                floor_p50: f.rtt_ns.p50,
                floor_p99: f.rtt_ns.p99,
                cpu_ns: s
                    .bus
                    .as_ref()
                    .and_then(|b| b.wait.as_ref())
                    .map_or(0, |w| w.cpu_ns_per_cycle),
                cycle_p99: plain.exec_ns.p99,
                lost: s.frames_lost + plain.frames_lost,
            };
            println!(
                "   {:>5} {:<11} {:>7.1}µs {:>7.1}µs {:>7.1}µs {:>7.1}µs {:>7.2} {:>7.2} {:>7.1}µs {:>8.1}µs {:>5}",
                round + 1,
                modes[i].0,
                us(r.rtt_p50),
                us(r.rtt_p99),
                us(r.floor_p50),
                us(r.floor_p99),
                r.ratio_p50,
                r.ratio_p99,
                us(r.cpu_ns),
                us(r.cycle_p99),
                r.lost
            );
            all[i].push(r);
        }
    }
    println!("   load average after: {}", loadavg());
    // Medians over the rounds: one disturbed round on a shared machine must not decide.
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("   medians over the rounds:");
    for (i, (m, _, _)) in modes.iter().enumerate() {
        let col = |f: &dyn Fn(&WaitRound) -> f64| med(&mut all[i].iter().map(f).collect());
        println!(
            "   {m:<11} rtcat ÷ floor p50 {:.2}, p99 {:.2}; rtt p50 {:.1} µs, p99 {:.1} µs; wait CPU {:.1} µs/cycle; cycle p99 {:.1} µs; lost {}",
            col(&|r| r.ratio_p50),
            col(&|r| r.ratio_p99),
            col(&|r| us(r.rtt_p50)),
            col(&|r| us(r.rtt_p99)),
            col(&|r| us(r.cpu_ns)),
            col(&|r| us(r.cycle_p99)),
            all[i].iter().map(|r| r.lost).sum::<u64>()
        );
    }
}
