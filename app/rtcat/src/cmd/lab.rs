//! `rtcat load` and `rtcat report`: their flags, converted into [`rtlab::LoadOptions`] and
//! [`rtlab::ReportOptions`], and the two commands with this binary's signal handlers.

use crate::cli::values::value_enum;
use crate::outcome::{Failure, Outcome};
use crate::signals;
use clap::Args;
use rtlab::load::{MemKind, NetProto};
use rtlab::report::Format;
use std::path::PathBuf;

value_enum!(MemArg(MemKind) {
    MemKind::Tmpfs => "tmpfs": "Write churn on files in a tmpfs (`--tmpfs-dir`)",
    MemKind::Anon => "anon": "Map, touch and unmap anonymous memory",
});

value_enum!(NetArg(NetProto) {
    NetProto::Tcp => "tcp",
    NetProto::Udp => "udp",
});

value_enum!(FormatArg(Format) {
    Format::Md => "md",
    Format::Csv => "csv",
    Format::Json => "json",
});

/// Arguments of `rtcat load`.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// How long the load runs, in seconds (it always ends by itself)
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub duration: f64,
    /// Number of CPU hog threads (default without any load option: one per chosen CPU, plus
    /// tmpfs and anon churn and fork churn, i.e. the reference load mix)
    #[arg(long, value_name = "N")]
    pub cpu_hogs: Option<usize>,
    /// Memory churn: tmpfs, anon, or both (comma-separated or repeated)
    #[arg(long, value_enum, value_delimiter = ',', value_name = "KIND")]
    pub mem: Vec<MemArg>,
    /// Short-lived process churn: fork, exec `--exec`, exit, reap, in a loop
    #[arg(long)]
    pub fork_churn: bool,
    /// Threads doing fork churn
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub fork_workers: usize,
    /// Program the fork churn executes (no arguments)
    #[arg(long, value_name = "PATH", default_value = "/bin/true")]
    pub exec: PathBuf,
    /// Loopback traffic on 127.0.0.1 (tcp or udp)
    #[arg(long, value_enum, value_name = "PROTO")]
    pub net: Option<NetArg>,
    /// Bound of the loopback traffic in Mbit/s
    #[arg(long, value_name = "MBIT", default_value_t = 100)]
    pub net_mbit: u32,
    /// tmpfs directory for the write churn (a private subdirectory is created and removed)
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    pub tmpfs_dir: PathBuf,
    /// Most MiB the tmpfs churn holds at any time (at most half of the free space)
    #[arg(long, value_name = "MIB", default_value_t = 32)]
    pub tmpfs_mb: u64,
    /// MiB of anonymous memory churned per pass
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub anon_mb: u64,
    /// CPUs the load may use (cpulist like 0-5,7, or "all"); default: all but --exclude-cpu
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// CPUs the load must not use (the RT CPU); default: [cycle].cpu and txrx_cpu of --config
    #[arg(long, value_name = "LIST")]
    pub exclude_cpu: Option<String>,
    /// rtcat config naming the RT CPU when neither --cpus nor --exclude-cpu is given
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Use stress-ng (if installed) with equivalent options instead of the built-in load
    #[arg(long)]
    pub stress_ng: bool,
    /// Write the load report as JSON to FILE ("-" for stdout)
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<String>,
    /// Print nothing but errors (and the JSON report when asked for)
    #[arg(long, short)]
    pub quiet: bool,
}

impl LoadArgs {
    pub fn options(&self) -> rtlab::LoadOptions {
        rtlab::LoadOptions {
            duration: self.duration,
            cpu_hogs: self.cpu_hogs,
            mem: self.mem.iter().map(|m| m.0).collect(),
            fork_churn: self.fork_churn,
            fork_workers: self.fork_workers,
            exec: self.exec.clone(),
            net: self.net.map(|n| n.0),
            net_mbit: self.net_mbit,
            tmpfs_dir: self.tmpfs_dir.clone(),
            tmpfs_mb: self.tmpfs_mb,
            anon_mb: self.anon_mb,
            cpus: self.cpus.clone(),
            exclude_cpu: self.exclude_cpu.clone(),
            config: self.config.clone(),
            stress_ng: self.stress_ng,
            json: self.json.clone(),
            quiet: self.quiet,
        }
    }
}

/// Arguments of `rtcat report`.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Ladder directories, bench output directories or cyclictest histogram files
    #[arg(value_name = "DIR", required = true)]
    pub inputs: Vec<PathBuf>,
    /// Table format
    #[arg(long, value_enum, default_value = "md")]
    pub format: FormatArg,
    /// Write plots (SVG and PNG) into DIR (created if missing)
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Label of each input in order (default: the input's file name); give one per input
    #[arg(long, value_name = "NAME")]
    pub label: Vec<String>,
    /// Size of each plot in pixels
    #[arg(long, value_name = "WxH", default_value = "1000x600")]
    pub plot_size: String,
    /// Write the table to FILE instead of stdout
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Report an interrupted ladder: runs that were never measured (no run directory or no
    /// summary.json, and no ladder.csv row) are left out and listed; anything malformed still fails
    #[arg(long)]
    pub allow_partial: bool,
}

impl ReportArgs {
    pub fn options(&self) -> rtlab::ReportOptions {
        rtlab::ReportOptions {
            inputs: self.inputs.clone(),
            format: self.format.0,
            plots: self.plots.clone(),
            label: self.label.clone(),
            plot_size: self.plot_size.clone(),
            out: self.out.clone(),
            allow_partial: self.allow_partial,
        }
    }
}

/// `rtcat load`: the first stop signal ends the load cleanly (workers joined, tmpfs files
/// removed, the report written), a second one kills the process (an impatient Ctrl-C Ctrl-C).
pub fn load(a: &LoadArgs) -> Outcome {
    signals::install(signals::Second::Kills)?;
    Failure::from_status(rtlab::run_load(&a.options(), &signals::Process)?)
}

/// `rtcat report`.
pub fn report(a: &ReportArgs) -> Outcome {
    Failure::from_status(rtlab::run_report(&a.options())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn parse<I: IntoIterator<Item = String>>(args: I) -> rtlab::LoadOptions {
        Cli::try_parse_from(std::iter::once("load".to_string()).chain(args))
            .unwrap()
            .load
            .options()
    }

    /// What a ladder's background load hands its `rtcat load` child comes back as the same spec.
    #[test]
    fn spec_round_trips_through_args() {
        let args = [
            "--cpus",
            "0",
            "--cpu-hogs",
            "3",
            "--mem",
            "tmpfs,anon",
            "--tmpfs-mb",
            "8",
            "--fork-churn",
            "--net",
            "udp",
            "--net-mbit",
            "5",
            "--duration",
            "2.5",
        ];
        let spec = parse(args.map(String::from)).to_spec().unwrap();
        assert_eq!(spec.cpu_hogs, 3);
        assert_eq!(spec.tmpfs.as_ref().unwrap().mib, 8);
        let back = parse(spec.to_args()).to_spec().unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn defaults_are_the_librarys() {
        let d = rtlab::LoadOptions::default();
        let p = parse(std::iter::empty());
        assert_eq!(format!("{p:?}"), format!("{d:?}"));
        #[derive(Parser)]
        struct R {
            #[command(flatten)]
            report: ReportArgs,
        }
        let r = R::try_parse_from(["report", "x"]).unwrap().report.options();
        let d = rtlab::ReportOptions {
            inputs: vec!["x".into()],
            ..rtlab::ReportOptions::default()
        };
        assert_eq!(format!("{r:?}"), format!("{d:?}"));
    }
}
