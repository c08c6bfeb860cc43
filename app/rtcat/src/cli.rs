//! Command-line interface.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

pub mod lab;
pub mod ladder;
pub mod tuning;
mod values;

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
    Doctor(tuning::DoctorArgs),
    /// Apply, restore, show or plan the runtime CPU shield
    Tune(tuning::TuneArgs),
    /// Built-in load generator (CPU hogs, memory churn, fork churn, loopback traffic)
    Load(lab::LoadArgs),
    /// Latency tables and plots from result directories and cyclictest histograms
    Report(lab::ReportArgs),
    /// The reference A/B ladder (docs/NOTES.md §1): each stage adds one change (s0 plain .. s4 CPU shield), measured
    /// over several runs, knobs restored after every run
    Ladder(ladder::LadderArgs),
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
    /// Read an ESI file (ETG.2000 device description): devices, sync managers, PDOs, objects;
    /// or print the [[device]] configuration for a chosen set of PDOs
    Esi(EsiArgs),
    /// CoE SDO access: read, write, list the object dictionary (brings the segment to PRE-OP,
    /// then back to INIT)
    #[command(subcommand)]
    Sdo(SdoCmd),
    /// Serve the running master's metrics to Prometheus (GET /metrics, text format 0.0.4),
    /// read from its control socket at every scrape
    Exporter(ExporterArgs),
}

#[derive(Args, Debug)]
pub struct ExporterArgs {
    /// The running master's control socket (`rtcat run --control SOCK`, [control] socket)
    #[arg(long, value_name = "SOCK")]
    pub control: PathBuf,
    /// Address and port to serve HTTP on: `127.0.0.1:9780`, `[::]:9780`, `0.0.0.0:9780`
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: std::net::SocketAddr,
}

#[derive(Subcommand, Debug)]
pub enum SdoCmd {
    /// Read (upload) an object entry: its bytes and, when the device describes it, its value
    Read(SdoReadArgs),
    /// Write (download) a value to an object entry. With --sim the write goes to the
    /// simulated segment of this one process, which ends with it
    Write(SdoWriteArgs),
    /// The object dictionary by SDO information: index, object code, type, name
    List(SdoListArgs),
}

#[derive(Args, Debug)]
pub struct SdoReadArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// Object entry, index and subindex in hex (`0x1018:02`; the 0x is optional)
    #[arg(value_name = "INDEX:SUB")]
    pub entry: String,
    /// Print the value as this type: bool u8 u16 u32 u64 i8 i16 i32 i64 f32 f64 string bytes
    #[arg(long = "type", value_name = "T")]
    pub ty: Option<String>,
    /// Complete access: every subindex of the object at once (from SUB, which is 0 or 1)
    #[arg(long)]
    pub complete: bool,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct SdoWriteArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// Object entry, index and subindex in hex (`0x6060:00`)
    #[arg(value_name = "INDEX:SUB")]
    pub entry: String,
    /// bool u8 u16 u32 u64 i8 i16 i32 i64 f32 f64 string bytes
    #[arg(value_name = "TYPE")]
    pub ty: String,
    /// The value: decimal or 0x hex for integers, true/false, text, or hex pairs for bytes
    /// ("01 02 ff")
    #[arg(value_name = "VALUE", allow_hyphen_values = true)]
    pub value: String,
    /// Complete access: write every subindex of the object at once (from SUB, 0 or 1)
    #[arg(long)]
    pub complete: bool,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct SdoListArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// Every subindex too: access, bits, type and name
    #[arg(long)]
    pub entries: bool,
    #[command(flatten)]
    pub bus: BusArgs,
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

#[derive(Args, Debug)]
pub struct ScanArgs {
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct PdosArgs {
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct SiiArgs {
    /// Position of the subdevice (default: all)
    #[arg(value_name = "POS")]
    pub position: Option<u32>,
    /// Write the image's bytes to stdout (needs POS; refused on a terminal)
    #[arg(long, requires = "position", conflicts_with = "json")]
    pub raw: bool,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct CountersArgs {
    /// Read again every SECONDS (default 1) and print what changed, until SIGINT/SIGTERM
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "1")]
    pub watch: Option<f64>,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct RegsArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// Register address, 0..=0xffff (hex with 0x, or decimal)
    #[arg(value_name = "ADDR", value_parser = parse_number)]
    pub address: u32,
    /// Bytes to read, 1..=4096, ADDR + LEN at most 0x10000
    #[arg(value_name = "LEN", value_parser = parse_number)]
    pub length: u32,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct EsiArgs {
    /// The ESI file (XML)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The whole model as JSON instead of the listing
    #[arg(long, conflicts_with = "emit_config")]
    pub json: bool,
    /// Choose the device by its type name (the `Type` text, e.g. EL3102)
    #[arg(long, value_name = "NAME", conflicts_with = "product")]
    pub device: Option<String>,
    /// Choose the device by its product code (decimal, 0x.. or #x..)
    #[arg(long, value_name = "ID", value_parser = parse_esi_number)]
    pub product: Option<u32>,
    /// Choose the revision (a file often carries several revisions of a product)
    #[arg(long, value_name = "REV", value_parser = parse_esi_number)]
    pub revision: Option<u32>,
    /// Print the rtcat [[device]] block assigning these PDOs (e.g. 0x1600 0x1A00); a modular
    /// device's modules (--slot) add theirs, a device without a mailbox needs none (its SII's)
    #[arg(long, value_name = "PDO", num_args = 0.., value_parser = parse_pdo_index)]
    pub emit_config: Option<Vec<u16>>,
    /// Put a module into a slot of a modular device: slot number = module type name or
    /// ModuleIdent (repeat per slot; with --emit-config)
    #[arg(long, value_name = "N=MODULE", requires = "emit_config", value_parser = parse_slot)]
    pub slot: Vec<(u32, String)>,
}

/// `N=MODULE`: a slot number and a module's type name or ident.
pub fn parse_slot(s: &str) -> Result<(u32, String), String> {
    let (n, m) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not N=MODULE (a slot number, '=', a module)"))?;
    let n = rtcat_esi::parse_number(n)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("{s:?}: {n:?} is not a slot number"))?;
    let m = m.trim();
    if m.is_empty() {
        return Err(format!("{s:?}: no module after '='"));
    }
    Ok((n, m.to_string()))
}

/// A number as ESI files and their users write it: decimal, `0x..` or `#x..`.
pub fn parse_esi_number(s: &str) -> Result<u32, String> {
    rtcat_esi::parse_number(s)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("{s:?} is not a 32-bit number (decimal, 0x.. or #x..)"))
}

/// A PDO index: any 16-bit number here. Whether it is a CoE mapping object (RxPDOs
/// 0x1600..0x17FF, TxPDOs 0x1A00..0x1BFF, ETG.1000.6) is checked against the chosen device, so
/// that a device of another profile (an SoE drive's AT/MDT) is named for what it is.
pub fn parse_pdo_index(s: &str) -> Result<u16, String> {
    match rtcat_esi::parse_number(s) {
        Some(v) => u16::try_from(v).map_err(|_| {
            format!("{s:?} is not a PDO index (RxPDOs 0x1600..0x17FF, TxPDOs 0x1A00..0x1BFF)")
        }),
        None => Err(format!("{s:?} is not a number (decimal, 0x.. or #x..)")),
    }
}

/// A number in decimal or with a `0x` prefix in hex.
pub fn parse_number(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a number (decimal, or hex with 0x)"))
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Configuration file
    #[arg(long, value_name = "FILE", default_value = crate::config::DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// Results directory (default: [output].dir)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run unprivileged on purpose: SCHED_OTHER, unpinned, no locked memory (said in the results)
    #[arg(long)]
    pub no_rt: bool,
    /// Use the in-process simulated segment instead of [bus].interface (testing)
    #[arg(long)]
    pub sim: bool,
    /// Serve the control socket here (JSON lines; see `rtcat scan --control`); overrides
    /// [control] socket
    #[arg(long, value_name = "SOCK")]
    pub control: Option<PathBuf>,
    /// Share the process image, labelled NAME, handed out over the control socket (needs
    /// --control or [control] socket; overrides [shm].name)
    #[arg(long, value_name = "NAME")]
    pub shm: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TxRxArg {
    Inline,
    Thread,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Use the in-process simulated segment (no root, no NIC)
    #[arg(long, conflicts_with_all = ["timer_only", "iface"])]
    pub sim: bool,
    /// Segment description for --sim (default: the reference segment, 3 subdevices, WKC 9)
    #[arg(long, value_name = "FILE", requires = "sim")]
    pub segment: Option<PathBuf>,
    /// The loop without a bus (comparable with cyclictest)
    #[arg(long, conflicts_with = "iface")]
    pub timer_only: bool,
    /// EtherCAT interface (default: [bus].interface)
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// Configuration file (default: built-in defaults)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// How long to run, in seconds
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub duration: f64,
    /// Write the summary JSON here ("-" for stdout)
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Directory for all artefacts (summary.json, histograms, events.log, samples.csv)
    #[arg(long, value_name = "DIR", default_value = "rtcat-bench")]
    pub out: PathBuf,
    /// Run unprivileged on purpose: SCHED_OTHER, unpinned, no locked memory (said in the results)
    #[arg(long)]
    pub no_rt: bool,
    /// Cycle period in µs (overrides [cycle].period_us)
    #[arg(long, value_name = "US")]
    pub period_us: Option<u32>,
    /// CPU of the cyclic thread (overrides [cycle].cpu)
    #[arg(long, value_name = "N")]
    pub cpu: Option<usize>,
    /// SCHED_FIFO priority (overrides [cycle].priority)
    #[arg(long, value_name = "P")]
    pub priority: Option<u8>,
    /// Who moves frames (overrides [cycle].txrx)
    #[arg(long, value_enum)]
    pub txrx: Option<TxRxArg>,
    /// Write samples.csv (one row per cycle)
    #[arg(long)]
    pub samples: bool,
    /// Ladder stage id recorded in the results
    #[arg(long, value_name = "ID", hide = true)]
    pub stage: Option<String>,
    /// Check that inputs echo outputs (the simulated segment's behaviour; default with --sim)
    #[arg(long)]
    pub check_echo: bool,
    /// Print health events to stderr as they happen
    #[arg(long)]
    pub verbose: bool,
    /// Serve the control socket here (JSON lines; see `rtcat scan --control`); overrides
    /// [control] socket
    #[arg(long, value_name = "SOCK", conflicts_with = "timer_only")]
    pub control: Option<PathBuf>,
    /// With --sim: accept the simulator's fault commands (`rtcat sim-ctl`) on this socket
    #[arg(long, value_name = "PATH", requires = "sim", hide = true)]
    pub sim_control: Option<PathBuf>,
    /// Share the process image, labelled NAME, handed out over the control socket (needs
    /// --control or [control] socket; overrides [shm].name)
    #[arg(long, value_name = "NAME", conflicts_with = "timer_only")]
    pub shm: Option<String>,
    /// Also measure the floor: every cycle, at mid-period, a bare ping of the cyclic frame's size
    /// on the same thread, answered by `rtcat sim --floor-echo`; prints both round trips and
    /// their ratio (docs/NOTES.md §1.1). Needs an interface (not --sim or --timer-only)
    #[arg(long, conflicts_with_all = ["sim", "timer_only"])]
    pub floor: bool,
}

#[derive(Args, Debug)]
pub struct SimArgs {
    /// Interface to answer on (e.g. one end of a veth pair)
    #[arg(long, value_name = "IF")]
    pub iface: String,
    /// Segment description (default: the reference segment)
    #[arg(long, value_name = "FILE")]
    pub segment: Option<PathBuf>,
    /// UNIX socket accepting fault commands (see `rtcat sim-ctl`); created 0600, it replaces
    /// only a stale socket
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// Let this group use the control socket too (mode 0660)
    #[arg(long, value_name = "NAME", requires = "control")]
    pub control_group: Option<String>,
    /// Answer from a SCHED_FIFO thread at this priority (a real ESC answers in hardware, whatever
    /// the host is doing); needs CAP_SYS_NICE
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u8).range(1..=99))]
    pub priority: Option<u8>,
    /// Pin the responder to this CPU
    #[arg(long, value_name = "N")]
    pub cpu: Option<usize>,
    /// Also be the echo of `rtcat bench --floor`: return its pings (their own EtherType and
    /// marker) as received, MAC addresses swapped, from the responder's thread
    #[arg(long)]
    pub floor_echo: bool,
}

#[derive(Args, Debug)]
pub struct SimCtlArgs {
    /// The control socket of the running `rtcat sim`
    #[arg(long, value_name = "PATH")]
    pub control: PathBuf,
    /// drop-next N | drop-fraction F | delay-us N | link up|down | subdevice-error POS CODE |
    /// power-cycle | corrupt-wkc N | crc-errors POS PORT N | emergency POS CODE [REGISTER] |
    /// drive-fault POS following-error|over-current|CODE | clear | status
    #[arg(required = true, num_args = 1..)]
    pub command: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Validate a configuration file (exit 2 with the offending key on error); with --sim or
    /// --iface also compare it with the bus (count, identity, order, mapping: exit 2 naming
    /// every difference)
    Check {
        /// The configuration (or --config FILE)
        #[arg(value_name = "FILE", required_unless_present = "config")]
        file: Option<PathBuf>,
        #[command(flatten)]
        bus: BusArgs,
    },
    /// Print the example configuration (every key, commented)
    Example,
    /// Read every subdevice's PDO assignment and mapping (brings the segment to PRE-OP) and
    /// print the [[device]] configuration that reproduces it, commented, ready to edit
    FromBus {
        #[command(flatten)]
        bus: BusArgs,
    },
    /// Turn an ENI (EtherCAT network information, ETG.2100: a whole network as a vendor's
    /// configuration tool exports it) into an rtcat.toml: topology, a [[device]] per
    /// subdevice with its PDO assignment, mapping and startup SDOs. What rtcat does not run is
    /// listed on stderr and as comments
    FromEni {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Write the configuration to this file instead of stdout
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Normalise a kernel CPU list (`0-3,5`): its canonical form, count and members (exit 2
    /// naming the bad item). The one parser the CI scripts ask instead of their own.
    Cpus {
        #[arg(value_name = "LIST", allow_hyphen_values = true)]
        list: String,
        /// Print `{"list": "0-3,5", "count": 5, "cpus": [0, 1, 2, 3, 5]}` instead of the list
        #[arg(long, conflicts_with = "members")]
        json: bool,
        /// Print the members on one line (`0 1 2 3 5`), for shell scripts
        #[arg(long)]
        members: bool,
    },
}
