//! `rtcat sim` (the simulated segment on a network interface) and `rtcat sim-ctl`.
//!
//! Exit codes as everywhere in rtcat: 2 for bad input (interface name, segment file, control
//! path or group, fault command), 1 for runtime failures (interface missing, no raw socket,
//! control socket unreachable). Output never panics on a closed stdout/stderr: `rtcat sim` runs
//! for hours, often with its stderr piped to something that may go away.

use crate::outcome::{Failure, Outcome};
use anyhow::Context;
use clap::Args;
use ecsim::control::{self, Access, Handler};
use ecsim::{SegmentSpec, SimPort};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

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
    /// power-cycle [POS] | power-off POS | power-on POS | unplug POS | plug POS |
    /// replace POS LIKE |
    /// corrupt-wkc N | crc-errors POS PORT N | emergency POS CODE [REGISTER] |
    /// drive-fault POS following-error|over-current|CODE | clear | status
    #[arg(required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// One line on stderr; a closed or broken stderr is not a reason to stop serving.
fn say(msg: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// A usage error (exit 2).
fn usage(msg: std::fmt::Arguments) -> Outcome {
    Err(Failure::usage(msg))
}

/// `rtcat sim`.
pub fn sim(a: &SimArgs) -> Outcome {
    if let Err(e) = rttune::netif::check_name(&a.iface) {
        return usage(format_args!("--iface: {e}"));
    }
    if let Some(cpu) = a.cpu {
        let online = rttune::facts::online_cpus(&rttune::SysRoot::live());
        // An unreadable list (no sysfs) is left to sched_setaffinity to judge.
        if !online.is_empty() && !online.contains(cpu) {
            return usage(format_args!(
                "--cpu {cpu}: not an online CPU (online: {})",
                rtcat_master::rt::online_cpus().unwrap_or_else(|| "unknown".into())
            ));
        }
    }
    let spec = match &a.segment {
        Some(p) => match SegmentSpec::load(p) {
            Ok(s) => s,
            Err(e) => return usage(format_args!("{e}")),
        },
        None => SegmentSpec::reference(),
    };
    let access = match &a.control_group {
        Some(g) => match control::group_by_name(g) {
            Ok(gid) => Access::Group(gid),
            Err(e) => return usage(format_args!("--control-group: {e}")),
        },
        None => Access::Owner,
    };
    crate::signals::install(crate::signals::Second::Kills)?;
    say(format_args!(
        "rtcat sim: {} subdevices, {} bytes of process data, expected WKC {} on {}",
        spec.devices.len(),
        spec.pdi_bytes(),
        spec.expected_wkc(),
        a.iface
    ));
    let devices = spec.devices.len();
    let mut port = SimPort::new(spec);
    // The networks behind EoE devices (`[device.eoe] tap`): TAPs in this namespace.
    let taps = port
        .segment_mut()
        .attach_eoe()
        .context("EoE ([device.eoe] tap)")?;
    if !taps.is_empty() {
        say(format_args!("rtcat sim: EoE networks {}", taps.join(", ")));
    }
    let status = Arc::new(Mutex::new(String::from("starting")));
    let stop = Arc::new(AtomicBool::new(false));
    // The control socket first: a wrong path is a usage error found before touching the network.
    // Dropped on every way out, which removes the socket.
    let control = match &a.control {
        Some(path) => match control::serve(
            path,
            access,
            Handler::new(port.faults().clone(), status.clone(), devices),
            stop.clone(),
        ) {
            Ok(c) => Some(c),
            Err(e) if e.is_usage() => return usage(format_args!("--control: {e}")),
            Err(e) => return Err(anyhow::Error::from(e).into()),
        },
        None => None,
    };
    let mut responder = ecsim::wire::Responder::with_status(&a.iface, port, status)
        .with_context(|| format!("answer on {}", a.iface))?;
    if a.floor_echo {
        responder = responder
            .with_floor_echo()
            .with_context(|| format!("the floor echo on {}", a.iface))?;
    }
    let echo = responder.floor_echo_counts();
    // The responder runs on this thread: give it the requested placement and priority.
    if let Some(cpu) = a.cpu {
        rtcat_master::rt::pin_to(cpu).context("--cpu")?;
    }
    if let Some(p) = a.priority {
        rtcat_master::rt::set_fifo(p).context("--priority")?;
    }
    say(format_args!("rtcat sim: listening on {}", a.iface));
    // The responder polls `stop`; mirror the signal flag into it.
    let stop_watch = stop.clone();
    let watcher = std::thread::spawn(move || {
        while !crate::signals::stop_requested() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        stop_watch.store(true, std::sync::atomic::Ordering::Release);
    });
    let port = responder.run(&stop);
    crate::signals::request_stop();
    let _ = watcher.join();
    if let Some(c) = control {
        c.shutdown();
    }
    let port = port.map_err(anyhow::Error::from)?;
    let st = port.stats();
    say(format_args!(
        "rtcat sim: stopped; frames {} replied {} lost {} malformed {} ignored {}",
        st.frames, st.replied, st.lost, st.malformed, st.ignored
    ));
    if let Some(e) = echo {
        say(format_args!(
            "rtcat sim: floor echo: echoed {} ignored {}",
            e.echoed.load(std::sync::atomic::Ordering::Relaxed),
            e.ignored.load(std::sync::atomic::Ordering::Relaxed)
        ));
    }
    Ok(())
}

/// `rtcat sim-ctl`.
pub fn ctl(a: &SimCtlArgs) -> Outcome {
    let line = a.command.join(" ");
    if line.len() >= control::MAX_LINE {
        return usage(format_args!(
            "the command is {} bytes; a command line has less than {}",
            line.len(),
            control::MAX_LINE
        ));
    }
    if line.trim() != "status" {
        // Validate locally first so a typo gets the parser's message, not a socket round trip.
        // (Positions are checked by the simulator, which knows the segment.)
        if let Err(e) = line.parse::<ecsim::FaultCommand>() {
            return usage(format_args!("{e}"));
        }
    }
    let reply = control::request(&a.control, &line).map_err(anyhow::Error::from)?;
    if let Some(why) = reply.strip_prefix("error: ") {
        return usage(format_args!("refused by the simulator: {why}"));
    }
    if reply.starts_with("busy: ") {
        return Err(Failure::Runtime(reply));
    }
    match writeln!(std::io::stdout().lock(), "{reply}") {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::Runtime(format!("write the reply to stdout: {e}")))
        }
        _ => Ok(()),
    }
}
