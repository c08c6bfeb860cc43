//! Stand-alone front end with the same arguments as `rtcat doctor` / `rtcat tune`, for trying the
//! library without the rtcat binary: `cargo run -p rttune --example rttune -- doctor --cpu 1`.

use clap::{Parser, Subcommand};
use rttune::{DoctorArgs, RtContext, TuneArgs};
use std::io::Write;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Doctor(DoctorArgs),
    Tune(TuneArgs),
}

fn main() {
    let cli = Cli::parse();
    let config = match &cli.cmd {
        Cmd::Doctor(a) => a.config.clone(),
        Cmd::Tune(a) => a.config.clone(),
    };
    let ctx = match config {
        Some(p) => match RtContext::from_config_file(&p) {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: {e:#}");
                std::process::exit(2);
            }
        },
        None => RtContext::default(),
    };
    let r = match &cli.cmd {
        Cmd::Doctor(a) => rttune::run_doctor(a, &ctx),
        Cmd::Tune(a) => rttune::run_tune(a, &ctx),
    };
    match r {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let code = rttune::cli::exit_code_of(&e);
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            std::process::exit(i32::from(code));
        }
    }
}
