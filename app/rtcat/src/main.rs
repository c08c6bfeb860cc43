use clap::Parser;
use rtcat::cli::{Cli, Command, ConfigCmd};
use rtcat::config::{Config, EXAMPLE};
use std::process::ExitCode;

/// Exit code for bad configuration or usage.
const EXIT_CONFIG: u8 = 2;

fn context_for(config: Option<&std::path::Path>) -> Result<rttune::RtContext, ExitCode> {
    match config {
        None => Ok(rttune::RtContext::default()),
        Some(p) => match Config::load(p) {
            Ok(c) => Ok(c.rt_context()),
            Err(e) => {
                rtcat::say!("rtcat: {e}");
                Err(ExitCode::from(EXIT_CONFIG))
            }
        },
    }
}

/// doctor/tune report knob failures in their output; an error out of them says by its kind
/// whether it was bad input (exit 2: an offline CPU, a bad CPU list, an unreadable root, a
/// refused journal) or a runtime failure (exit 1: a journal that cannot be written, stdout).
fn tune_code(r: Result<i32, rttune::CommandError>) -> ExitCode {
    match r {
        Ok(c) => ExitCode::from(c.clamp(0, 255) as u8),
        Err(e) => {
            rtcat::say!("rtcat: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn code(r: anyhow::Result<i32>) -> ExitCode {
    match r {
        Ok(c) => ExitCode::from(c.clamp(0, 255) as u8),
        Err(e) => {
            rtcat::say!("rtcat: {e:#}");
            ExitCode::from(1)
        }
    }
}

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
    match cli.cmd {
        Command::Run(a) => rtcat::runner::run_command(a),
        Command::Bench(a) => rtcat::runner::bench_command(a),
        Command::Sim(a) => code(rtcat::simcmd::run_sim(&a)),
        Command::SimCtl(a) => code(rtcat::simcmd::run_ctl(&a)),
        Command::Config(ConfigCmd::Check { file, bus }) => {
            match (file.or_else(|| bus.config.clone()), &bus.config) {
                (Some(f), Some(c)) if &f != c => {
                    rtcat::say!(
                        "rtcat: config check: two files given ({} and --config {}): give one",
                        f.display(),
                        c.display()
                    );
                    ExitCode::from(EXIT_CONFIG)
                }
                (Some(f), _) => rtcat::sdocmd::check(&f, bus),
                (None, _) => ExitCode::from(EXIT_CONFIG),
            }
        }
        Command::Config(ConfigCmd::FromBus { bus }) => rtcat::sdocmd::from_bus(bus),
        Command::Config(ConfigCmd::FromEni { file, out }) => {
            rtcat::sdocmd::from_eni(&file, out.as_deref())
        }
        Command::Config(ConfigCmd::Example) => {
            print!("{EXAMPLE}");
            ExitCode::SUCCESS
        }
        Command::Config(ConfigCmd::Cpus {
            list,
            json,
            members,
        }) => match rtlab::cpus::parse_cpu_list(&list) {
            Ok(cpus) => {
                let canon = rtlab::cpus::format_cpu_list(&cpus);
                if json {
                    let v = serde_json::json!({"list": canon, "count": cpus.len(), "cpus": cpus});
                    println!("{v}");
                } else if members {
                    let m: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
                    println!("{}", m.join(" "));
                } else {
                    println!("{canon}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                rtcat::say!("rtcat: CPU list {list:?}: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        },
        Command::Doctor(a) => match context_for(a.config.as_deref()) {
            Ok(ctx) => tune_code(rttune::run_doctor(&a.options(), &ctx)),
            Err(c) => c,
        },
        Command::Tune(a) => match context_for(a.config.as_deref()) {
            Ok(ctx) => tune_code(rttune::run_tune(&a.options(), &ctx)),
            Err(c) => c,
        },
        Command::Load(a) => rtcat::labcmd::load(&a),
        Command::Report(a) => code(rtlab::run_report(&a.options())),
        Command::Ladder(a) => rtcat::labcmd::ladder(&a),
        Command::Scan(a) => rtcat::buscmd::scan(a),
        Command::Pdos(a) => rtcat::buscmd::pdos(a),
        Command::Sii(a) => rtcat::buscmd::sii(a),
        Command::Counters(a) => rtcat::buscmd::counters(a),
        Command::Regs(a) => rtcat::buscmd::regs(a),
        Command::Esi(a) => rtcat::esicmd::run(&a),
        Command::Sdo(c) => rtcat::sdocmd::sdo(c),
        Command::Exporter(a) => rtcat::exporter::run(a),
    }
}
