use clap::Parser;
use rtcat::cli::{Cli, Command};
use std::process::ExitCode;

/// Commands that only print end quietly when their reader goes away (`| head`), as coreutils
/// do. (`doctor`, `tune` and `report` handle a closed pipe themselves: `tune apply`/`restore`
/// must finish restoring, `report` its files.)
fn prints_only(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Config(_)
            | Command::Scan(_)
            | Command::Pdos(_)
            | Command::Sii(_)
            | Command::Counters(_)
            | Command::Regs(_)
            | Command::Esi(_)
            | Command::Sdo(_)
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    rtcat::console::install_logger();
    if prints_only(&cli.cmd) {
        rtcat::signals::default_sigpipe();
    }
    rtcat::outcome::exit(rtcat::cmd::run(cli.cmd))
}
