//! The command line: the commands and the flags several of them share. Each command's own
//! flags live beside the code that runs it (`cmd/`, `exporter`).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

pub(crate) mod values;

use crate::cmd::bus::{AliasArgs, CountersArgs, PdosArgs, RegsArgs, ScanArgs, SiiArgs};
use crate::cmd::config::ConfigCmd;
use crate::cmd::eoe::EoeCmd;
use crate::cmd::esi::EsiArgs;
use crate::cmd::foe::FoeCmd;
use crate::cmd::gateway::GatewayArgs;
use crate::cmd::lab::{LoadArgs, ReportArgs};
use crate::cmd::ladder::LadderArgs;
use crate::cmd::run::{BenchArgs, RunArgs};
use crate::cmd::sdo::SdoCmd;
use crate::cmd::sim::{SimArgs, SimCtlArgs};
use crate::cmd::tuning::{DoctorArgs, TuneArgs};
use crate::exporter::ExporterArgs;

#[derive(Parser, Debug)]
#[command(
    name = "rtcat",
    version,
    about = "Real-time EtherCAT master for the RK3588, with its tuning toolkit and a simulated segment",
    after_help = "Exit codes: 0 success, 1 runtime failure, 2 bad configuration or usage."
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Service mode: run the master until stopped (systemd Type=notify, watchdog)
    Run(RunArgs),
    /// Run the cyclic loop for a while and report its latencies
    Bench(BenchArgs),
    /// Answer as a simulated EtherCAT segment on a network interface
    Sim(SimArgs),
    /// Send a fault command to a running `rtcat sim` (drop-next N, link down, power-cycle, ...)
    SimCtl(SimCtlArgs),
    /// Validate or print the configuration
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Audit every real-time knob of this system (PASS/WARN/FAIL with the fix)
    Doctor(DoctorArgs),
    /// Apply, restore, show or plan the runtime CPU shield
    Tune(TuneArgs),
    /// Built-in load generator (CPU hogs, memory churn, fork churn, loopback traffic)
    Load(LoadArgs),
    /// Latency tables and plots from result directories and cyclictest histograms
    Report(ReportArgs),
    /// The reference A/B ladder (docs/NOTES.md §1): each stage adds one change (s0 plain .. s4 CPU shield), measured
    /// over several runs, knobs restored after every run
    Ladder(LadderArgs),
    /// List the subdevices: identity, AL state and status code, ports, DC, mailbox, SM/FMMU
    /// (read by position; changes nothing on the segment)
    Scan(ScanArgs),
    /// The process-data layout the application sees (brings the segment to PRE-OP, then INIT)
    Pdos(PdosArgs),
    /// The SII EEPROM decoded (identity, strings, General, FMMU, SM, PDOs, DC), or its raw bytes
    Sii(SiiArgs),
    /// The ESC error counters per port (RX, forwarded, processing unit, PDI, lost link)
    Counters(CountersArgs),
    /// Read ESC registers of one subdevice (APRD) as a hex dump
    Regs(RegsArgs),
    /// Write a subdevice's station alias into its SII (word 4 and the checksum), as IgH's
    /// `ethercat alias` does; with the master stopped
    Alias(AliasArgs),
    /// Read an ESI file (ETG.2000 device description): devices, sync managers, PDOs, objects;
    /// or print the [[device]] configuration for a chosen set of PDOs
    Esi(EsiArgs),
    /// CoE SDO access: read, write, list the object dictionary (brings the segment to PRE-OP,
    /// then back to INIT)
    #[command(subcommand)]
    Sdo(SdoCmd),
    /// FoE file access: read or write a device's file (firmware with --boot; brings the segment
    /// to PRE-OP, then back to INIT)
    #[command(subcommand)]
    Foe(FoeCmd),
    /// Ethernet over EtherCAT: a device's IP settings, or its network bridged to a TAP
    /// interface of this machine (brings the segment to PRE-OP, then back to INIT)
    #[command(subcommand)]
    Eoe(EoeCmd),
    /// The EtherCAT mailbox gateway (ETG.8200, UDP): tools on allowed networks reach the
    /// devices' mailboxes through this machine (brings the segment to PRE-OP, then back to INIT)
    Gateway(GatewayArgs),
    /// Serve the running master's metrics to Prometheus (GET /metrics, text format 0.0.4),
    /// read from its control socket at every scrape
    Exporter(ExporterArgs),
    /// The commissioning page in the browser: runs the rtcat-web program (beside rtcat, or on
    /// PATH) with these arguments (`rtcat web --help` is its help)
    #[command(disable_help_flag = true)]
    Web(WebArgs),
}

/// `rtcat web ARGS…`: everything after `web` goes to rtcat-web.
#[derive(Args, Debug)]
pub struct WebArgs {
    /// rtcat-web's arguments (--control SOCK --listen ADDR:PORT --state-dir DIR)
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<std::ffi::OsString>,
}

/// Where a bus command talks to, and how it prints.
#[derive(Args, Debug, Clone)]
pub struct BusArgs {
    /// EtherCAT interface (default: [bus].interface)
    #[arg(long, value_name = "IF", conflicts_with = "sim")]
    pub iface: Option<String>,
    /// Use the in-process simulated segment (no root, no NIC)
    #[arg(long)]
    pub sim: bool,
    /// Segment description for --sim (default: the reference segment, 3 subdevices)
    #[arg(long, value_name = "FILE", requires = "sim")]
    pub segment: Option<PathBuf>,
    /// Ask the running master on this control socket instead of opening the NIC
    /// (`rtcat run|bench --control SOCK`)
    #[arg(long, value_name = "SOCK", conflicts_with_all = ["iface", "sim"])]
    pub control: Option<PathBuf>,
    /// Configuration file: [bus] interface and timeouts (default: built-in defaults)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Machine-readable output (JSON) instead of the table
    #[arg(long)]
    pub json: bool,
}
