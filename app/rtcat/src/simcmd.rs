//! `rtcat sim` (the simulated segment on a network interface) and `rtcat sim-ctl`.

use crate::cli::{SimArgs, SimCtlArgs};
use anyhow::{Context, Result};
use ecsim::{SegmentSpec, SimPort};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub fn run_sim(a: &SimArgs) -> Result<i32> {
    crate::signals::install()?;
    let spec = match &a.segment {
        Some(p) => SegmentSpec::load(p)?,
        None => SegmentSpec::reference(),
    };
    eprintln!(
        "rtcat sim: {} subdevices, {} bytes of process data, expected WKC {} on {}",
        spec.devices.len(),
        spec.pdi_bytes(),
        spec.expected_wkc(),
        a.iface
    );
    let responder = ecsim::wire::Responder::new(&a.iface, SimPort::new(spec))
        .with_context(|| format!("answer on {}", a.iface))?;
    // The responder runs on this thread: give it the requested placement and priority.
    if let Some(cpu) = a.cpu {
        crate::rt::pin_to(cpu).context("--cpu")?;
    }
    if let Some(p) = a.priority {
        crate::rt::set_fifo(p).context("--priority")?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let control = match &a.control {
        Some(path) => Some(ecsim::wire::serve_control(
            path,
            responder.faults(),
            responder.status_handle(),
            stop.clone(),
        )?),
        None => None,
    };
    eprintln!("rtcat sim: listening on {}", a.iface);
    // The responder polls `stop`; mirror the signal flag into it.
    let stop_watch = stop.clone();
    let watcher = std::thread::spawn(move || {
        while !crate::signals::stop_requested() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        stop_watch.store(true, std::sync::atomic::Ordering::Release);
    });
    let port = responder.run(&stop)?;
    crate::signals::request_stop();
    let _ = watcher.join();
    if let Some(c) = control {
        let _ = c.join();
    }
    if let Some(p) = &a.control {
        let _ = std::fs::remove_file(p);
    }
    let st = port.stats();
    eprintln!(
        "rtcat sim: stopped; frames {} replied {} lost {} malformed {} ignored {}",
        st.frames, st.replied, st.lost, st.malformed, st.ignored
    );
    Ok(0)
}

pub fn run_ctl(a: &SimCtlArgs) -> Result<i32> {
    let line = a.command.join(" ");
    if line != "status" {
        // Validate locally first so a typo gets the parser's message, not a socket round trip.
        line.parse::<ecsim::FaultCommand>()?;
    }
    let reply = ecsim::wire::control_request(&a.control, &line)?;
    println!("{reply}");
    Ok(if reply.starts_with("error") { 2 } else { 0 })
}
