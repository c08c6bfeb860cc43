//! Writes the deterministic report fixtures (two small ladders and one bench dir) into a directory:
//! `cargo run -p rtlab --example make_fixtures -- app/rtlab/tests/fixtures`.
//! The test `fixtures_are_reproducible` regenerates them and compares byte for byte.

use std::path::Path;

use anyhow::Result;
use rtcat_results::*;

/// Deterministic pseudo-random numbers in [0, 1) (64-bit LCG, top 53 bits).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` samples around `base_ns` with a long tail up to about `tail_ns`.
fn samples(seed: u64, n: usize, base_ns: f64, tail_ns: f64) -> hdrhistogram::Histogram<u64> {
    let mut r = Lcg(seed);
    let mut h = new_histogram();
    for _ in 0..n {
        let u = r.next();
        let v = base_ns * (0.6 + 0.8 * r.next()) + tail_ns * u.powi(12);
        h.saturating_record(v.round().max(1.0) as u64);
    }
    h
}

fn system(kernel: &str, rt: bool) -> SystemInfo {
    SystemInfo {
        hostname: "board".into(),
        kernel_release: kernel.into(),
        kernel_version: if rt {
            "#1 SMP PREEMPT_RT".into()
        } else {
            "#1 SMP PREEMPT".into()
        },
        preempt_rt: rt,
        cmdline: "console=ttyS2,1500000".into(),
        cpu: Some(6),
        txrx_cpu: Some(6),
        policy: Policy::Fifo,
        priority: 80,
        no_rt: false,
        timer_slack_ns: 1,
        governor: Some("performance".into()),
    }
}

#[allow(clippy::too_many_arguments)]
fn bench_dir(
    dir: &Path,
    stage: Option<&str>,
    seed: u64,
    mode: Mode,
    sys: &SystemInfo,
    wake: (f64, f64),
    exec: (f64, f64),
    counters: (u64, u64, u64),
) -> Result<Summary> {
    std::fs::create_dir_all(dir)?;
    let n = 400;
    let w = samples(seed, n, wake.0, wake.1);
    let e = samples(seed ^ 0xABCD, n, exec.0, exec.1);
    write_hdr(&dir.join(WAKE_HDR_FILE), &w)?;
    write_hdr(&dir.join(EXEC_HDR_FILE), &e)?;
    let s = Summary {
        schema: SUMMARY_SCHEMA.into(),
        rtcat_version: "0.1.0".into(),
        mode,
        interface: None,
        stage: stage.map(String::from),
        started_at_unix_ns: 1_764_460_800_000_000_000 + seed * 1_000_000_000,
        duration_s: 0.4,
        cycles: n as u64,
        period_ns: 1_000_000,
        wake_lateness_ns: LatencyStats::from_histogram(&w),
        exec_ns: LatencyStats::from_histogram(&e),
        rtt_ns: None,
        missed_deadlines: counters.0,
        skipped_periods: counters.0,
        wkc: Wkc {
            expected: (mode != Mode::TimerOnly).then_some(9),
            mismatches: counters.1,
        },
        frames_lost: counters.1,
        recoveries: counters.2,
        subdevices: 3,
        pdi_bytes: 132,
        system: sys.clone(),
        stop: None,
        bus: None,
        logging: None,
        axes: None,
        dc: None,
        floor: None,
        availability: None,
        unexpected_devices: None,
    };
    s.write(&dir.join(SUMMARY_FILE))?;
    Ok(s)
}

fn ladder(dir: &Path, kernel: &str, rt: bool, scale: f64, seed0: u64) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let base = system(kernel, rt);
    // the ladder's stages change the recorded setup: s0 plain, s1 pinned FIFO, s2 performance
    let setup = |st: &str| {
        let mut s = base.clone();
        match st {
            "s0" => {
                s.policy = Policy::Other;
                s.priority = 0;
                s.cpu = None;
                s.txrx_cpu = None;
                s.governor = Some("ondemand".into());
                s.timer_slack_ns = 50_000;
            }
            "s1" => s.governor = Some("ondemand".into()),
            _ => {}
        }
        s
    };
    let sys = setup("s0");
    let stages = [
        (
            "s0",
            (106_000.0, 2_500_000.0),
            (38_000.0, 400_000.0),
            (3, 0, 0),
        ),
        ("s1", (11_000.0, 140_000.0), (19_000.0, 90_000.0), (0, 1, 0)),
        ("s2", (2_300.0, 11_000.0), (4_700.0, 20_000.0), (0, 0, 0)),
    ];
    let runs = 2;
    let mut csv = format!("{LADDER_CSV_HEADER}\n");
    for (i, (st, w, e, c)) in stages.iter().enumerate() {
        for k in 1..=runs {
            let seed = seed0 + (i as u64) * 10 + u64::from(k);
            let (w, e) = ((w.0 * scale, w.1 * scale), (e.0 * scale, e.1 * scale));
            let s = bench_dir(
                &dir.join(st).join(format!("run{k}")),
                Some(st),
                seed,
                Mode::Sim,
                &setup(st),
                w,
                e,
                *c,
            )?;
            csv.push_str(&ladder_csv_row(st, k, &s));
            csv.push('\n');
        }
    }
    std::fs::write(dir.join(LADDER_CSV_FILE), csv)?;
    let m = LadderManifest {
        schema: LADDER_SCHEMA.into(),
        created_unix_ns: 1_764_460_000_000_000_000 + seed0,
        system: sys,
        stages: stages.iter().map(|s| s.0.to_string()).collect(),
        runs,
        duration_s: 0.4,
        loaded: true,
    };
    Ok(m.write(&dir.join(MANIFEST_FILE))?)
}

/// Writes all fixtures under `out`.
pub fn make(out: &Path) -> Result<()> {
    ladder(&out.join("stock"), "5.10.160", false, 1.0, 100)?;
    ladder(&out.join("rt"), "5.10.160-rt89", true, 0.35, 200)?;
    let sys = system("6.12.57", false);
    bench_dir(
        &out.join("bench"),
        None,
        300,
        Mode::TimerOnly,
        &sys,
        (50_000.0, 900_000.0),
        (1_000.0, 3_000.0),
        (1, 0, 0),
    )?;
    Ok(())
}

fn main() -> Result<()> {
    let out = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: make_fixtures OUT_DIR"))?;
    make(Path::new(&out))
}
