//! The commands: each module holds one command's (or one family's) flags beside the code that
//! runs it, and returns an [`Outcome`](crate::outcome::Outcome); [`run`] dispatches.

pub mod bus;
pub mod config;
pub mod eoe;
pub mod esi;
pub mod foe;
pub mod gateway;
pub mod lab;
pub mod ladder;
pub mod run;
pub mod sdo;
pub mod sim;
pub mod tuning;

use crate::cli::Command;
use crate::outcome::Outcome;

/// Run one command.
pub fn run(cmd: Command) -> Outcome {
    match cmd {
        Command::Run(a) => run::run(a),
        Command::Bench(a) => run::bench(a),
        Command::Sim(a) => sim::sim(&a),
        Command::SimCtl(a) => sim::ctl(&a),
        Command::Config(c) => config::run(c),
        Command::Doctor(a) => tuning::doctor(&a),
        Command::Tune(a) => tuning::tune(&a),
        Command::Load(a) => lab::load(&a),
        Command::Report(a) => lab::report(&a),
        Command::Ladder(a) => ladder::run(&a),
        Command::Scan(a) => bus::scan(a),
        Command::Pdos(a) => bus::pdos(a),
        Command::Sii(a) => bus::sii(a),
        Command::Counters(a) => bus::counters(a),
        Command::Regs(a) => bus::regs(a),
        Command::Alias(a) => bus::alias(a),
        Command::Esi(a) => esi::run(&a),
        Command::Sdo(c) => sdo::sdo(c),
        Command::Foe(c) => foe::foe(c),
        Command::Eoe(c) => eoe::eoe(c),
        Command::Gateway(a) => gateway::gateway(a),
        Command::Exporter(a) => crate::exporter::run(a),
        Command::Web(a) => web(a),
    }
}

/// `rtcat web`: the commissioning page is a program of its own (app/web), so that the rtcat
/// binary has no HTTP server or page in it; this runs it in place of this process, the one
/// beside the rtcat binary first (the .deb and the image install both in /usr/bin).
fn web(a: crate::cli::WebArgs) -> Outcome {
    use std::os::unix::process::CommandExt;
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("rtcat-web")))
        .filter(|p| p.is_file());
    let prog = beside.unwrap_or_else(|| "rtcat-web".into());
    let e = std::process::Command::new(&prog).args(&a.args).exec();
    Err(crate::outcome::Failure::runtime(format!(
        "cannot run {}: {e} (install rtcat-web, or build it: cargo build --release -p rtcat-web)",
        prog.display()
    )))
}
