//! The cost of the application API in the cycle, measured side by side in one run
//! (`cargo bench -p rtcat-master --features sim --bench api`; as root for SCHED_FIFO and locked
//! memory, otherwise the figures are noisier). Prints ratios; asserts nothing about times.
//!
//! Three applications on the in-process simulated reference segment (3 subdevices, 132 bytes),
//! 1 ms, interleaved rounds of a few seconds each, execution time (wake to end of cycle):
//! - `bytes`: written like the hook before the application API — called per subdevice with its
//!   input and output bytes, it writes a pattern into every output byte;
//! - `named`: typed accessors resolved by name in `configure`, one input read and one output
//!   written per subdevice, and the same pattern into the remaining bytes;
//! - `zero`: `ZeroOutputs`, the least an application can do.
//!
//! The master's own part (copying each subdevice's inputs into the image and its outputs back)
//! is in all three; the ratios show what the named, typed access costs over raw bytes.

#[path = "support/exec_run.rs"]
mod exec_run;

use ecsim::SegmentSpec;
use exec_run::{median, not_root_note};
use rtcat_master::{AppError, Application, Cycle, Input, Output, Setup, ZeroOutputs};

const ROUNDS: usize = 5;
const SECS: f64 = 3.0;

#[derive(Default)]
struct Bytes;

impl Application for Bytes {
    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let c = cx.status.cycle as u8;
        for p in 0..cx.image.subdevices() {
            for (k, b) in cx.image.outputs_of_mut(p).iter_mut().enumerate() {
                *b = c.wrapping_add(k as u8);
            }
        }
    }
}

#[derive(Default)]
struct Named {
    io: Vec<(Input<u32>, Output<u32>)>,
    sum: u64,
}

impl Application for Named {
    fn configure(&mut self, setup: &mut Setup<'_>) -> Result<(), AppError> {
        self.io.clear();
        for p in 0..setup.subdevices().len() as u16 {
            self.io.push((
                setup.input_at(p, 0x6000, 2)?,
                setup.output_at(p, 0x7000, 1)?,
            ));
        }
        Ok(())
    }

    fn cycle(&mut self, cx: &mut Cycle<'_>) {
        let c = cx.status.cycle as u8;
        for p in 0..cx.image.subdevices() {
            for (k, b) in cx.image.outputs_of_mut(p).iter_mut().enumerate().skip(4) {
                *b = c.wrapping_add(k as u8);
            }
        }
        for (i, o) in &self.io {
            let v = cx.get(i);
            self.sum = self.sum.wrapping_add(u64::from(v));
            cx.set(o, v.wrapping_add(1));
        }
    }
}

fn exec(app: &mut dyn Application, root: bool) -> (u64, u64, u64) {
    let spec = exec_run::spec(exec_run::config(1000), SegmentSpec::reference(), SECS, root);
    let out = rtcat_master::run_simple(spec, app).expect("run");
    let e = &out.rec.exec;
    (
        e.value_at_quantile(0.5),
        e.value_at_quantile(0.99),
        out.rec.cycles,
    )
}

fn main() {
    let root = exec_run::root();
    println!(
        "application API: exec time (µs) on the simulated reference segment, 1 ms, {SECS} s per \
         run, {ROUNDS} interleaved rounds{}",
        not_root_note(root)
    );
    println!(
        "   {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "round", "bytes p50", "bytes p99", "named p50", "named p99", "zero p50", "zero p99"
    );
    let (mut b50, mut b99, mut n50, mut n99, mut z50, mut z99) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for round in 1..=ROUNDS {
        let b = exec(&mut Bytes, root);
        let n = exec(&mut Named::default(), root);
        let z = exec(&mut ZeroOutputs, root);
        println!(
            "   {round:>5} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
            b.0 as f64 / 1e3,
            b.1 as f64 / 1e3,
            n.0 as f64 / 1e3,
            n.1 as f64 / 1e3,
            z.0 as f64 / 1e3,
            z.1 as f64 / 1e3
        );
        b50.push(b.0);
        b99.push(b.1);
        n50.push(n.0);
        n99.push(n.1);
        z50.push(z.0);
        z99.push(z.1);
    }
    let (b50, b99, n50, n99, z50, z99) = (
        median(b50),
        median(b99),
        median(n50),
        median(n99),
        median(z50),
        median(z99),
    );
    println!(
        "   median of rounds: named/bytes p50 {:.3}, p99 {:.3}; zero/bytes p50 {:.3}, p99 {:.3}",
        n50 as f64 / b50 as f64,
        n99 as f64 / b99 as f64,
        z50 as f64 / b50 as f64,
        z99 as f64 / b99 as f64
    );
}
