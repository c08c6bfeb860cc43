//! `rtlab`: standalone front end of `rtcat load` and `rtcat report` (same arguments), e.g. for
//! building reports on a workstation from result directories copied off the board.

use std::io::Write as _;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "rtlab",
    version,
    about = "rtcat's load generator and latency reports"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bounded load generator (CPU hogs, tmpfs/anon memory churn, fork churn, loopback traffic)
    Load(rtlab::LoadArgs),
    /// Latency tables (md/csv/json) and plots from ladder dirs, bench dirs and cyclictest files
    Report(rtlab::ReportArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match &cli.cmd {
        Cmd::Load(a) => rtlab::run_load(a),
        // SIGPIPE stays ignored (Rust's default) for both: `report` turns a closed stdout into a
        // quiet exit 141, as if killed by SIGPIPE, and ignores a closed stderr, so it still
        // finishes its plots; `load` must stop its workers whatever happens to its output.
        Cmd::Report(a) => rtlab::run_report(a),
    };
    match code {
        Ok(c) => std::process::exit(c),
        Err(e) => {
            // not eprintln!: a closed stderr must not turn an error into a panic
            let _ = writeln!(std::io::stderr(), "rtlab: error: {e:#}");
            std::process::exit(1);
        }
    }
}
