//! `rtcat exporter`: the master's health in the Prometheus text format, for the monitoring a
//! plant already runs.
//!
//! A separate process (its own unit, `rtcat-exporter.service`) so that the master keeps
//! `IPAddressDeny=any` and no TCP socket ever exists in the real-time process: every scrape asks
//! the master over its control socket (`status`, `counters`; `scan` for the device names when
//! the layout's generation changes), and the master answers from its status thread and its
//! background poller, never from the cyclic thread.
//!
//! A master that is down or answers nonsense still gives a 200 page, with `rtcat_up 0` and the
//! failed request counted (`rtcat_exporter_control_errors_total`): the convention for exporters
//! (<https://prometheus.io/docs/instrumenting/writing_exporters/#failed-scrapes>), so that an
//! alert on `rtcat_up == 0` tells a down master from a down exporter (`up == 0`).

pub mod http;
pub mod model;
pub mod render;
pub mod source;

use crate::outcome::{Failure, Kind, Outcome};
use crate::say;
use clap::Args;
use model::{EscCounters, ScanEntry, Status};
use render::{ExporterCounters, Scrape};
use rtcat_control::Request;
use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct ExporterArgs {
    /// The running master's control socket (`rtcat run --control SOCK`, [control] socket)
    #[arg(long, value_name = "SOCK")]
    pub control: PathBuf,
    /// Address and port to serve HTTP on: `127.0.0.1:9780`, `[::]:9780`, `0.0.0.0:9780`
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: std::net::SocketAddr,
}

/// Connections served at once. Prometheus scrapes one target with one connection at a time; a
/// few more let a human's curl or a second Prometheus in, and a client that trickles its
/// request holds one slot for at most [`http::READ_TIMEOUT`]. Beyond it: 503 at once.
pub const MAX_CONNECTIONS: usize = 16;

/// Connections of one peer address at once: a host that opens connections and trickles its
/// requests holds at most this many, and a scrape from any other address still gets in.
pub const MAX_PER_PEER: usize = 4;

/// The connections open per peer address.
type PerPeer = Arc<Mutex<BTreeMap<std::net::IpAddr, usize>>>;

const INDEX: &str = "<!DOCTYPE html>\n<html><head><title>rtcat exporter</title></head><body>\n\
<h1>rtcat exporter</h1>\n<p>The EtherCAT master's metrics: <a href=\"/metrics\">/metrics</a> \
(Prometheus text format 0.0.4).</p>\n</body></html>\n";

/// How often a failed `scan` (for the device names) is asked again.
const SCAN_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

/// What the scrapes share.
#[derive(Default)]
struct Shared {
    own: ExporterCounters,
    names: BTreeMap<u16, String>,
    /// Generation the names were read for.
    names_generation: Option<u32>,
    /// The last failed `scan` (generation, when): it is asked again at most every
    /// [`SCAN_RETRY`], not at every scrape (a scan reads the bus through the master's acyclic
    /// queue).
    scan_failed: Option<(u32, Instant)>,
    /// Whether the last scrape reached the master (a change is said once on stderr).
    last_up: Option<bool>,
}

/// Asks the master and renders the page.
fn scrape(control: &Path, shared: &Mutex<Shared>) -> String {
    let t0 = Instant::now();
    let (names_generation, scan_failed) = {
        let g = lock(shared);
        (g.names_generation, g.scan_failed)
    };
    let mut sc = Scrape::default();
    let mut errors: Vec<(&'static str, String)> = Vec::new();
    let mut new_names: Option<(u32, BTreeMap<u16, String>)> = None;
    match source::Control::connect(control) {
        Err(e) => errors.push(("status", e)),
        Ok(mut c) => {
            match c.ask::<Status>(&Request::Status).and_then(|s| {
                model::check_status(&s)
                    .map(|()| s)
                    .map_err(|e| format!("status reply: {e}"))
            }) {
                Ok(s) => sc.status = Some(s),
                Err(e) => errors.push(("status", e)),
            }
            if let Some(st) = &sc.status {
                match c.ask::<EscCounters>(&Request::Counters) {
                    Ok(v) => sc.counters = Some(v),
                    Err(e) => errors.push(("counters", e)),
                }
                let retry = scan_failed
                    .is_none_or(|(g, at)| g != st.generation || at.elapsed() >= SCAN_RETRY);
                if names_generation != Some(st.generation) && retry {
                    match c.ask::<Vec<ScanEntry>>(&Request::Scan) {
                        Ok(v) => {
                            let m = v
                                .into_iter()
                                .filter_map(|e| e.name.map(|n| (e.position, n)))
                                .collect();
                            new_names = Some((st.generation, m));
                        }
                        Err(e) => errors.push(("scan", e)),
                    }
                }
            }
        }
    }
    sc.duration_s = t0.elapsed().as_secs_f64();
    let mut g = lock(shared);
    if errors.iter().any(|(c, _)| *c == "scan")
        && let Some(st) = &sc.status
    {
        g.scan_failed = Some((st.generation, Instant::now()));
    }
    if let Some((generation, names)) = new_names {
        g.names = names;
        g.names_generation = Some(generation);
    }
    sc.names = g.names.clone();
    g.own.scrapes += 1;
    for (cmd, _) in &errors {
        *g.own.errors.entry(cmd).or_insert(0) += 1;
    }
    let up = sc.status.is_some();
    if g.last_up != Some(up) {
        match (up, errors.first()) {
            (false, Some((_, e))) => say!("rtcat exporter: master not reachable: {e}"),
            (false, None) => say!("rtcat exporter: master not reachable"),
            (true, _) => say!("rtcat exporter: master reachable on {}", control.display()),
        }
        g.last_up = Some(up);
    }
    for (cmd, e) in errors.iter().filter(|(c, _)| up && *c != "status") {
        log::debug!("{cmd}: {e}");
    }
    render::render(&sc, &g.own)
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    // A scrape thread that panicked leaves plain counters behind: keep using them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves one connection.
fn serve(mut s: TcpStream, control: &Path, shared: &Mutex<Shared>) {
    let req = match http::read_request(&mut s) {
        Ok(r) => r,
        Err(http::Bad::Gone) => return,
        Err(http::Bad::TooLarge) => {
            let r = http::Response::text(431, "request head too large\n");
            let _ = http::respond(&mut s, &r, false);
            return;
        }
        Err(http::Bad::Malformed(why)) => {
            let _ = http::respond(
                &mut s,
                &http::Response::text(400, format!("{why}\n")),
                false,
            );
            return;
        }
    };
    let head_only = req.method == "HEAD";
    let r = if req.method != "GET" && !head_only {
        let mut r = http::Response::text(405, format!("method {} not allowed\n", req.method));
        r.extra.push(("Allow", "GET, HEAD".into()));
        r
    } else {
        match req.path.as_str() {
            "/metrics" => http::Response {
                status: 200,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                extra: Vec::new(),
                body: scrape(control, shared).into_bytes(),
            },
            "/" => http::Response {
                status: 200,
                content_type: "text/html; charset=utf-8",
                extra: Vec::new(),
                body: INDEX.as_bytes().to_vec(),
            },
            p => http::Response::text(404, format!("{p}: not found (try /metrics)\n")),
        }
    };
    let _ = http::respond(&mut s, &r, head_only);
}

/// Gives back a connection's place (`active` when it had one; the per-peer count always,
/// dropping the entry of a peer with none left).
fn release(per_peer: &PerPeer, from: std::net::IpAddr, active: Option<&AtomicUsize>) {
    let mut m = per_peer.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(a) = active {
        a.fetch_sub(1, Ordering::AcqRel);
        if let Some(n) = m.get_mut(&from) {
            *n = n.saturating_sub(1);
        }
    }
    if m.get(&from) == Some(&0) {
        m.remove(&from);
    }
}

/// Binds `addr`. `[::]` (every address, IPv4 too on Linux: IPV6_V6ONLY is off by default,
/// ipv6(7)) on a kernel built without IPv6 falls back to `0.0.0.0`, every IPv4 address, which is
/// what it means there; the unit's `--listen [::]:9780` then still works.
fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    match TcpListener::bind(addr) {
        Err(e)
            if e.raw_os_error() == Some(libc::EAFNOSUPPORT)
                && addr.ip() == std::net::Ipv6Addr::UNSPECIFIED =>
        {
            let v4 = std::net::SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, addr.port()));
            say!("rtcat exporter: no IPv6 in this kernel; listening on {v4}");
            TcpListener::bind(v4)
        }
        r => r,
    }
}

/// `rtcat exporter`.
pub fn run(a: ExporterArgs) -> Outcome {
    if a.control.as_os_str().is_empty() {
        return Err(Failure::usage(
            "--control: the path of the master's control socket is empty",
        ));
    }
    let listener =
        bind(a.listen).map_err(|e| Failure::Runtime(format!("--listen {}: {e}", a.listen)))?;
    let local = listener.local_addr().map_or(a.listen, |l| l);
    crate::signals::install(crate::signals::Second::Kills)
        .map_err(|e| Failure::Runtime(format!("signal handlers: {e}")))?;
    say!(
        "rtcat exporter: serving http://{local}/metrics for the master on {}",
        a.control.display()
    );
    let notifier = crate::sdnotify::Notifier::from_env();
    notifier.notify("READY=1");
    let control: Arc<PathBuf> = Arc::new(a.control);
    let shared = Arc::new(Mutex::new(Shared::default()));
    let active = Arc::new(AtomicUsize::new(0));
    let per_peer: PerPeer = Arc::default();
    let stop = crate::signals::handle();
    while !stop.is_requested() {
        // Poll so that SIGTERM is seen within 200 ms without an accept() to interrupt.
        let mut fds = [nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(200u16)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                say!("rtcat exporter: poll: {e}");
                return Err(Failure::Said(Kind::Runtime));
            }
        }
        let (s, from) = match listener.accept() {
            Ok((s, from)) => (s, from.ip()),
            // A connection that was reset before accept(), or fds exhausted for a moment: the
            // next one may work.
            Err(e) => {
                log::debug!("accept: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let full = {
            let mut m = per_peer.lock().unwrap_or_else(|p| p.into_inner());
            let mine = m.entry(from).or_insert(0);
            if *mine >= MAX_PER_PEER {
                Some("too many connections from your address")
            } else if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                active.fetch_sub(1, Ordering::AcqRel);
                Some("too many connections")
            } else {
                *mine += 1;
                None
            }
        };
        if let Some(why) = full {
            release(&per_peer, from, None);
            // Answered without waiting: a client that does not read loses its 503, nobody waits.
            let mut s = s;
            let _ = s.set_nonblocking(true);
            let r = http::Response::text(503, format!("{why}\n"));
            let _ = http::respond(&mut s, &r, false);
            continue;
        }
        let (control, shared, active2, per_peer2) = (
            control.clone(),
            shared.clone(),
            active.clone(),
            per_peer.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("http".into())
            .spawn(move || {
                serve(s, &control, &shared);
                release(&per_peer2, from, Some(&active2));
            });
        if let Err(e) = spawned {
            release(&per_peer, from, Some(&active));
            say!("rtcat exporter: cannot start a connection thread: {e}");
        }
    }
    notifier.notify("STOPPING=1");
    Ok(())
}
