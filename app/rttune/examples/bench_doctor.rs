//! Doctor on a fake RK3588 tree of board size (~300 IRQs, ~500 tasks): prints per-run timings.
//! `cargo run --release -p rttune --example bench_doctor [-- RUNS]`

use rttune::config::TuneSection;
use rttune::cpuset::CpuSet;
use rttune::doctor::{self, Doctor};
use rttune::testkit::{FakeHost, FakeTree, TreeSpec};
use std::time::Instant;

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = std::env::temp_dir().join(format!("rttune-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let t = FakeTree::rk3588(
        &dir,
        &TreeSpec {
            extra_irqs: 286,
            extra_tasks: 250,
            ..TreeSpec::default()
        },
    );
    let root = t.sysroot();
    let host = FakeHost::new(&root);
    let procs = rttune::facts::read_processes(&root);
    let ntasks = rttune::facts::read_tasks(&root, &procs).len();
    let nirqs = rttune::facts::read_irqs(&root)
        .map(|v| v.len())
        .unwrap_or(0);
    let mut times = Vec::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let r = doctor::run(&Doctor {
            root: &root,
            host: &host,
            rt: CpuSet::single(6),
            iface: Some("eth1".into()),
            tune: TuneSection::default(),
            journal: None,
            wait: None,
            priority: None,
        })
        .expect("doctor");
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        assert_eq!(r.checks.len(), 32);
    }
    let _ = std::fs::remove_dir_all(&dir);
    times.sort_by(|a, b| a.total_cmp(b));
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    println!(
        "doctor on fake tree: {nirqs} IRQs, {} processes, {ntasks} tasks; {runs} runs: min {:.1} ms, median {:.1} ms, mean {:.1} ms, max {:.1} ms",
        procs.len(),
        times[0],
        times[times.len() / 2],
        mean,
        times[times.len() - 1]
    );
}
