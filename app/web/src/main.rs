//! `rtcat-web`: the commissioning page of a running rtcat master (issue 32).
//!
//! A program of its own, never in the real-time process: it asks the master over its control
//! socket and reads the shared image, as any other client does, and serves the page, its live
//! stream and a small JSON API over HTTP to logged-in users (`auth`). TLS is a reverse proxy's
//! job in front of it (docs/SECURITY.md); it listens on loopback by default.
//!
//! Exit status: 0 never (it serves until stopped), 1 on a runtime failure (the port taken, the
//! credential file unreadable), 2 on a usage error.

mod api;
mod assets;
mod auth;
mod doctor;
mod foe;
mod force;
mod http;
mod live;

use clap::Parser;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Connections served at once: five technicians with a live view each and their requests.
const MAX_CONNECTIONS: usize = 64;
/// Connections of one address at once.
const MAX_PER_PEER: usize = 16;

#[derive(Parser, Debug)]
#[command(
    name = "rtcat-web",
    version,
    about = "The commissioning page of a running rtcat master: bus, process data, timing, SDOs and events in the browser"
)]
struct Args {
    /// The running master's control socket (`rtcat run --control SOCK`, [control] socket)
    #[arg(long, value_name = "SOCK", default_value = "/run/rtcat/control.sock")]
    control: PathBuf,
    /// Address and port to serve HTTP on (put a TLS reverse proxy in front for other hosts)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8480")]
    listen: SocketAddr,
    /// Directory of the credential file (created at first start, mode 0600)
    #[arg(long, value_name = "DIR", default_value = "/var/lib/rtcat-web")]
    state_dir: PathBuf,
    /// The uid the master runs as (the shared image is read only from a socket whose peer runs
    /// as it); default: the owner of the control socket
    #[arg(long, value_name = "UID")]
    master_uid: Option<u32>,
    /// Offer axis commands (enable, disable, fault reset, jog and move-to behind hold-to-run)
    /// to the write role. Off by default: motion from a browser is the machine builder's
    /// decision, per board (the `[web]` switch: set it in the unit's drop-in)
    #[arg(long)]
    allow_motion: bool,
    /// The board's `rtcat doctor --json` report, shown on the Timing view (written by an
    /// unprivileged timer; rtcat-web's sandbox hides what doctor inspects)
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/run/rtcat-doctor/doctor.json"
    )]
    doctor: PathBuf,
}

fn main() {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            std::process::exit(if usage { 2 } else { 0 });
        }
    };
    if let Err(e) = run(args) {
        eprintln!("rtcat-web: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&args.state_dir)
        .map_err(|e| format!("state directory {}: {e}", args.state_dir.display()))?;
    let cred = args.state_dir.join("credentials");
    let (users, created) = auth::load_or_create(&cred).map_err(|e| e.to_string())?;
    if created {
        eprintln!(
            "rtcat-web: created {} with the users viewer (read) and engineer (write); read the passwords there as root",
            cred.display()
        );
    }
    let master_uid = args
        .master_uid
        .or_else(|| std::fs::metadata(&args.control).ok().map(|m| m.uid()));
    let listener =
        TcpListener::bind(args.listen).map_err(|e| format!("listen on {}: {e}", args.listen))?;
    let live = live::Live::new(args.control.clone(), master_uid);
    live.start().map_err(|e| format!("start the poller: {e}"))?;
    let app = Arc::new(api::App {
        auth: Arc::new(Mutex::new(auth::Auth::new(users))),
        live,
        conn: Mutex::new(None),
        motion: args.allow_motion,
        doctor: args.doctor.clone(),
        upload: Default::default(),
    });
    eprintln!(
        "rtcat-web: serving http://{} for the master on {}",
        listener.local_addr().map_err(|e| e.to_string())?,
        args.control.display(),
    );
    let open: Arc<Mutex<(usize, HashMap<IpAddr, usize>)>> = Arc::default();
    for conn in listener.incoming() {
        let Ok(s) = conn else { continue };
        let Ok(peer) = s.peer_addr() else { continue };
        let ip = peer.ip();
        {
            let mut o = live::lock(&open);
            let per = o.1.get(&ip).copied().unwrap_or(0);
            if o.0 >= MAX_CONNECTIONS || per >= MAX_PER_PEER {
                drop(o);
                busy(s);
                continue;
            }
            o.0 += 1;
            *o.1.entry(ip).or_insert(0) += 1;
        }
        let (app2, open2) = (app.clone(), open.clone());
        let spawned = std::thread::Builder::new()
            .name("http".into())
            .spawn(move || {
                serve(&app2, s, ip);
                let mut o = live::lock(&open2);
                o.0 -= 1;
                if let Some(n) = o.1.get_mut(&ip) {
                    *n -= 1;
                    if *n == 0 {
                        o.1.remove(&ip);
                    }
                }
            });
        if spawned.is_err() {
            let mut o = live::lock(&open);
            o.0 -= 1;
            if let Some(n) = o.1.get_mut(&ip) {
                *n -= 1;
            }
        }
    }
    Ok(())
}

fn busy(mut s: TcpStream) {
    let _ = http::send(
        &mut s,
        &http::Response::error(503, "too many connections").with("Retry-After", "1"),
    );
}

fn serve(app: &api::App, mut s: TcpStream, ip: IpAddr) {
    let mut upload = false;
    let req = http::read_request_with(&mut s, |head| api::body_limit(app, head, &mut upload));
    let req = match req {
        Ok(r) => r,
        Err(bad) => {
            if upload {
                api::upload_done(app);
            }
            if let Some((status, text)) = bad.answer() {
                let _ = http::send(&mut s, &http::Response::error(status, text));
            }
            return;
        }
    };
    let r = api::handle(app, &req, ip, &mut s);
    // The file is sent (or refused): the next upload may come.
    drop(req);
    if upload {
        api::upload_done(app);
    }
    if let Some(r) = r {
        let _ = http::send(&mut s, &r);
    }
}
