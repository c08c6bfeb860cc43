//! The routes: the page's assets, login and logout, the live event stream and the JSON API.
//!
//! Every route but the assets and the login needs a session; every POST needs the session's
//! CSRF token in `X-CSRF-Token` and, when the browser sends one, an `Origin` of this host; the
//! writes need the write role and are put on the master's record with the user's name (a
//! `note` request before the write itself) and on the page's event list.

use crate::assets;
use crate::auth::{self, Auth, LoginError, Role, Session};
use crate::http::{self, Request, Response};
use crate::live::{self, Live, lock};
use rtcat_control::{ClientError, FailureKind, Request as Ctl};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Time an SDO request may take (the master's own SDO timeout is shorter).
const SDO_TIMEOUT: Duration = Duration::from_secs(10);
/// Time an object dictionary list may take (one SDO information exchange per object, up to
/// 1024 of them).
const OD_TIMEOUT: Duration = Duration::from_secs(60);
/// Time an axis command may take (it only goes onto the board; a renewal later than the
/// lease is useless).
const AXIS_TIMEOUT: Duration = Duration::from_secs(2);
/// A comment line on an idle event stream this often, so that proxies keep it open and a
/// closed page is noticed.
const KEEPALIVE: Duration = Duration::from_secs(10);

/// What the handlers share.
pub struct App {
    /// Users and sessions.
    pub auth: Arc<Mutex<Auth>>,
    /// The live data.
    pub live: Arc<Live>,
    /// The page's requests (SDO, AL state, notes) go one at a time, each on a connection of
    /// its own (the master serves at most 4 per process; the pollers keep 2).
    pub conn: Mutex<Option<rtcat_control::Client>>,
    /// Axis commands are offered (`--allow-motion`).
    pub motion: bool,
    /// The board's doctor report (`--doctor`).
    pub doctor: std::path::PathBuf,
    /// An FoE upload is being read or sent (one at a time: each holds its file in memory).
    pub upload: std::sync::atomic::AtomicBool,
}

/// The body limit of a request, from its head: [`crate::foe::MAX_BYTES`] and 2 more minutes
/// for an FoE upload of a session with the write role, its CSRF token and a same origin,
/// while no other upload runs (`took` set: the caller gives the slot back with
/// [`upload_done`]); [`http::MAX_BODY`] for everything else.
pub fn body_limit(app: &App, head: &Request, took: &mut bool) -> (usize, Duration) {
    let small = (http::MAX_BODY, Duration::ZERO);
    if head.path != "/api/foe/write" || head.method != "POST" {
        return small;
    }
    let Ok((_, s)) = session(app, head) else {
        return small;
    };
    if csrf(head, &s).is_err() || writer(&s).is_err() {
        return small;
    }
    if app
        .upload
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return small;
    }
    *took = true;
    (crate::foe::MAX_BYTES as usize, Duration::from_secs(120))
}

/// The upload slot [`body_limit`] took is free again.
pub fn upload_done(app: &App) {
    app.upload.store(false, Ordering::Release);
}

/// The lease of a jog or move-to from the page: the page renews it every 100 ms while the
/// button is held, so two lost renewals are tolerated and a third stops the axis.
const AXIS_LEASE_MS: u64 = 300;

/// Answers one request. SSE streams write to `s` themselves and return None.
pub fn handle(app: &App, req: &Request, peer: IpAddr, s: &mut TcpStream) -> Option<Response> {
    let path = req.path.as_str();
    let method = req.method.as_str();
    if !path.starts_with("/api/") {
        if method != "GET" {
            return Some(
                Response::error(405, format!("{method} {path}: only GET")).with("Allow", "GET"),
            );
        }
        return Some(assets::get(path));
    }
    let want = |m: &str| -> Result<(), Response> {
        if method == m {
            Ok(())
        } else {
            Err(Response::error(405, format!("{method} {path}: use {m}")).with("Allow", m))
        }
    };
    let r = (|| -> Result<Response, Response> {
        if path == "/api/login" {
            want("POST")?;
            return login(app, req, peer);
        }
        if path == "/api/session" {
            // The page asks at load whether it is logged in: no session is an answer, not an
            // error (a 401 here would be an error in every fresh page's console).
            want("GET")?;
            return Ok(match session(app, req) {
                Ok((_, s)) => Response::json(200, &session_json(app, &s)),
                Err(_) => Response::json(200, &json!({"user": null})),
            });
        }
        let (id, session) = session(app, req)?;
        if method == "POST" {
            csrf(req, &session)?;
        }
        match path {
            "/api/logout" => {
                want("POST")?;
                lock(&app.auth).logout(&id);
                // A session's forces end with it.
                let _ = app.live.forces.release(&id, None);
                Ok(
                    Response::json(200, &json!({"ok": true}))
                        .with("Set-Cookie", auth::cookie(None)),
                )
            }
            "/api/live" => {
                want("GET")?;
                stream(app, &id, s);
                // Status 0: answered already (the stream wrote its own head); nothing to send.
                Err(Response::text(0, ""))
            }
            "/api/scan" => {
                want("GET")?;
                let refresh = req.query_param("refresh").is_some();
                Ok(match app.live.scan(refresh) {
                    Some((g, v)) => Response::json(200, &json!({"generation": g, "subdevices": v})),
                    None => Response::json(200, &json!({"generation": null, "subdevices": null})),
                })
            }
            "/api/counters" => {
                want("GET")?;
                Ok(Response::json(200, &app.live.counters()))
            }
            "/api/layout" => {
                want("GET")?;
                let l = app.live.layout();
                Ok(Response {
                    status: 200,
                    content_type: "application/json",
                    extra: Vec::new(),
                    body: l.as_bytes().to_vec(),
                })
            }
            "/api/events" => {
                want("GET")?;
                let after = req
                    .query_param("after")
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0);
                Ok(Response::json(200, &Value::Array(app.live.events(after))))
            }
            "/api/sdo/read" => {
                want("POST")?;
                let o = body(req)?;
                let r = ctl_request(&o, "sdo_read", &["position", "index", "sub"])?;
                control(app, &r, SDO_TIMEOUT).map(|v| Response::json(200, &v))
            }
            "/api/doctor" => {
                want("GET")?;
                Ok(Response::json(200, &crate::doctor::read(&app.doctor)))
            }
            "/api/foe/write" => {
                // The file is the body (any type); where it goes is the query: position,
                // name (percent-encoded) and password.
                want("POST")?;
                writer(&session)?;
                let position = req
                    .query_param("position")
                    .and_then(|p| p.parse::<u16>().ok())
                    .ok_or_else(|| {
                        Response::error(400, "position: a number 0..=65535 in the query")
                    })?;
                let name = req
                    .query_text("name")
                    .filter(|n| !n.is_empty() && n.len() <= 255 && !n.chars().any(char::is_control))
                    .ok_or_else(|| {
                        Response::error(400, "name: the device file's name (1..=255 bytes, percent-encoded) in the query")
                    })?;
                let password = match req.query_param("password") {
                    None | Some("") => 0,
                    Some(p) => p.parse::<u32>().map_err(|_| {
                        Response::error(400, format!("password = {p:?}: a number 0..=4294967295"))
                    })?,
                };
                if req.body.is_empty() {
                    return Err(Response::error(400, "the body is the file: empty"));
                }
                let what = format!(
                    "foe_write position={position} name={name:?} bytes={}",
                    req.body.len()
                );
                note(app, &session, &what)?;
                let out =
                    crate::foe::write(app.live.control(), position, &name, password, &req.body);
                let result = match &out {
                    Ok(_) => "ok".to_string(),
                    Err((_, m)) => format!("failed: {m}"),
                };
                app.live
                    .event("write", format!("{what}: {result}"), Some(&session.user));
                out.map(|v| Response::json(200, &v))
                    .map_err(|(s, m)| Response::error(s, m))
            }
            "/api/foe/read" => {
                // A read, as sdo_read: any role (the control socket's foe_read needs no write
                // right either); on the page's event list with the user, a file being more
                // than a value.
                want("POST")?;
                let o = body(req)?;
                let r = ctl_request(&o, "foe_read", &["position", "name", "password"])?;
                let Ctl::FoeRead {
                    position,
                    name,
                    password,
                } = r
                else {
                    return Err(Response::error(500, "not a foe_read"));
                };
                let out = crate::foe::read(app.live.control(), position, &name, password);
                let result = match &out {
                    Ok(d) => format!("{} bytes", d.len()),
                    Err((_, m)) => format!("failed: {m}"),
                };
                app.live.event(
                    "foe",
                    format!("foe_read position={position} name={name:?}: {result}"),
                    Some(&session.user),
                );
                out.map(|data| Response {
                    status: 200,
                    content_type: "application/octet-stream",
                    extra: Vec::new(),
                    body: data,
                })
                .map_err(|(s, m)| Response::error(s, m))
            }
            "/api/eoe/ip" => {
                want("POST")?;
                let o = body(req)?;
                let r = ctl_request(&o, "eoe_get_ip", &["position"])?;
                control(app, &r, SDO_TIMEOUT).map(|v| Response::json(200, &v))
            }
            "/api/od/list" => {
                want("POST")?;
                let o = body(req)?;
                let r = ctl_request(&o, "od_list", &["position"])?;
                control(app, &r, OD_TIMEOUT).map(|v| Response::json(200, &v))
            }
            "/api/od/object" => {
                want("POST")?;
                let o = body(req)?;
                let r = ctl_request(&o, "od_object", &["position", "index"])?;
                control(app, &r, SDO_TIMEOUT).map(|v| Response::json(200, &v))
            }
            "/api/sdo/write" => {
                want("POST")?;
                writer(&session)?;
                let o = body(req)?;
                let r = ctl_request(&o, "sdo_write", &["position", "index", "sub", "data"])?;
                write(app, &session, &r)
            }
            "/api/axis" => {
                want("POST")?;
                writer(&session)?;
                if !app.motion {
                    return Err(Response::error(
                        403,
                        "axis commands are off on this board (rtcat-web --allow-motion)",
                    ));
                }
                let o = body(req)?;
                let mut r = ctl_request(&o, "axis", &["name", "action", "velocity", "position"])?;
                let renew = match &mut r {
                    Ctl::Axis {
                        action, lease_ms, ..
                    } => {
                        *lease_ms = AXIS_LEASE_MS;
                        *action == rtcat_control::protocol::AxisAction::Renew
                    }
                    _ => false,
                };
                if renew {
                    // The command it renews is on the record with the user; a renewal only
                    // keeps it going. Once the motion stopped (its lease ran out, it arrived,
                    // it was stopped) the master refuses it: an answer for the page (stop
                    // renewing), not a failure.
                    match control(app, &r, AXIS_TIMEOUT) {
                        Ok(_) => Ok(Response::json(200, &json!({"renewed": true}))),
                        Err(e) if e.status == 502 => {
                            let why = serde_json::from_slice::<Value>(&e.body)
                                .ok()
                                .and_then(|v| v["error"].as_str().map(str::to_string))
                                .unwrap_or_default();
                            Ok(Response::json(200, &json!({"renewed": false, "why": why})))
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    write(app, &session, &r)
                }
            }
            "/api/al_state" => {
                want("POST")?;
                writer(&session)?;
                let o = body(req)?;
                let r = ctl_request(&o, "al_state", &["position", "state"])?;
                write(app, &session, &r)
            }
            "/api/pd/force" => {
                want("POST")?;
                writer(&session)?;
                let o = body(req)?;
                let entry = match (o.get("entry"), o.len()) {
                    (Some(Value::String(e)), _)
                        if e.len() <= 200 && o.contains_key("value") && o.len() == 2 =>
                    {
                        e.clone()
                    }
                    _ => {
                        return Err(Response::error(
                            400,
                            "the body is {\"entry\": NAME, \"value\": VALUE}",
                        ));
                    }
                };
                let value = &o["value"];
                note(app, &session, &format!("force {entry}={value}"))?;
                let r = app
                    .live
                    .forces
                    .set(&app.auth, &id, &session.user, &entry, value);
                forced_event(app, &session, &format!("force {entry}={value}"), &r);
                r.map(|()| Response::json(200, &app.live.forces.list()))
                    .map_err(|(s, m)| Response::error(s, m))
            }
            "/api/pd/release" => {
                want("POST")?;
                writer(&session)?;
                let o = body(req)?;
                let entry = match o.get("entry") {
                    None | Some(Value::Null) if o.len() <= 1 => None,
                    Some(Value::String(e)) if o.len() == 1 => Some(e.clone()),
                    _ => {
                        return Err(Response::error(
                            400,
                            "the body is {\"entry\": NAME} or {} (every forced entry)",
                        ));
                    }
                };
                let what = format!("release {}", entry.as_deref().unwrap_or("all"));
                note(app, &session, &what)?;
                let r = app.live.forces.release(&id, entry.as_deref());
                forced_event(app, &session, &what, &r);
                r.map(|()| Response::json(200, &app.live.forces.list()))
                    .map_err(|(s, m)| Response::error(s, m))
            }
            _ => Err(Response::error(404, format!("{path}: no such API route"))),
        }
    })();
    match r {
        Ok(r) => Some(r),
        Err(r) if r.status == 0 => None,
        Err(r) => Some(r),
    }
}

/// The page's session: who, the role, the CSRF token, and whether axis commands are offered.
fn session_json(app: &App, s: &Session) -> Value {
    json!({"user": s.user, "role": s.role, "csrf": s.csrf, "motion": app.motion})
}

fn session(app: &App, req: &Request) -> Result<(String, Session), Response> {
    let Some(id) = req.cookie(auth::COOKIE) else {
        return Err(Response::error(401, "not logged in"));
    };
    match lock(&app.auth).session(id, Instant::now()) {
        Some(s) => Ok((id.to_string(), s)),
        None => Err(Response::error(401, "the session has ended: log in again")
            .with("Set-Cookie", auth::cookie(None))),
    }
}

/// The CSRF check of a POST: the session's token in `X-CSRF-Token`, and an `Origin` (when the
/// browser sends one) naming this host.
fn csrf(req: &Request, s: &Session) -> Result<(), Response> {
    if let (Some(origin), Some(host)) = (req.header("origin"), req.header("host")) {
        let o = origin.split_once("://").map_or(origin, |(_, h)| h);
        if o != host {
            return Err(Response::error(
                403,
                format!(
                    "Origin {origin:?} is not this host ({host:?}): cross-site request refused"
                ),
            ));
        }
    }
    match req.header("x-csrf-token") {
        Some(t) if auth::ct_eq(t.as_bytes(), s.csrf.as_bytes()) => Ok(()),
        Some(_) => Err(Response::error(403, "wrong CSRF token")),
        None => Err(Response::error(403, "missing X-CSRF-Token")),
    }
}

fn writer(s: &Session) -> Result<(), Response> {
    if s.role == Role::Write {
        Ok(())
    } else {
        Err(Response::error(
            403,
            format!(
                "user {} has the read role: writing needs the write role",
                s.user
            ),
        ))
    }
}

fn body(req: &Request) -> Result<Map<String, Value>, Response> {
    let json = req
        .header("content-type")
        .is_some_and(|c| c.split(';').next().unwrap_or("").trim() == "application/json");
    if !json {
        return Err(Response::error(415, "the body must be application/json"));
    }
    match serde_json::from_slice::<Value>(&req.body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(Response::error(400, "the body must be a JSON object")),
        Err(e) => Err(Response::error(400, format!("the body is not JSON: {e}"))),
    }
}

/// The control request `cmd` with the fields `allowed` of `o` (the protocol's parser checks
/// every field and names a bad one).
fn ctl_request(o: &Map<String, Value>, cmd: &str, allowed: &[&str]) -> Result<Ctl, Response> {
    let mut r = Map::new();
    r.insert("cmd".into(), cmd.into());
    for (k, v) in o {
        if !allowed.contains(&k.as_str()) {
            return Err(Response::error(
                400,
                format!("unknown field {k:?} (takes {})", allowed.join(", ")),
            ));
        }
        r.insert(k.clone(), v.clone());
    }
    Ctl::from_value(&Value::Object(r)).map_err(|f| Response::error(400, f.message))
}

/// Sends `r` on the page's connection; a master failure as the status it deserves.
fn control(app: &App, r: &Ctl, timeout: Duration) -> Result<Value, Response> {
    let mut c = lock(&app.conn);
    let r = live::call(&mut c, app.live.control(), r, timeout);
    *c = None;
    r.map_err(|e| match e {
        ClientError::Failed(f) if f.kind == FailureKind::Usage => Response::error(400, f.message),
        ClientError::Failed(f) => Response::error(502, format!("the master: {}", f.message)),
        ClientError::Timeout(_) => Response::error(504, e.to_string()),
        e => Response::error(503, e.to_string()),
    })
}

/// The note naming the user before a write: no record, no write.
fn note(app: &App, s: &Session, what: &str) -> Result<(), Response> {
    let note = Ctl::Note {
        text: format!("rtcat-web user={}: {what}", s.user),
    };
    control(app, &note, SDO_TIMEOUT)
        .map(|_| ())
        .inspect_err(|e| {
            app.live.event(
                "write",
                format!(
                    "refused (the master did not record the user): {what}: {}",
                    String::from_utf8_lossy(&e.body)
                ),
                Some(&s.user),
            );
        })
}

fn forced_event(app: &App, s: &Session, what: &str, r: &Result<(), crate::force::Refused>) {
    let result = match r {
        Ok(()) => "ok".to_string(),
        Err((_, m)) => format!("failed: {m}"),
    };
    app.live
        .event("write", format!("{what}: {result}"), Some(&s.user));
}

/// A write for `s`: the note naming the user first (no record, no write), then the write; both
/// on the master's record, the outcome on the page's event list.
fn write(app: &App, s: &Session, r: &Ctl) -> Result<Response, Response> {
    let what = r.to_line();
    note(app, s, &what)?;
    let out = control(app, r, SDO_TIMEOUT);
    let result = match &out {
        Ok(_) => "ok".to_string(),
        Err(e) => format!("failed: {}", String::from_utf8_lossy(&e.body)),
    };
    app.live
        .event("write", format!("{what}: {result}"), Some(&s.user));
    out.map(|v| Response::json(200, &v))
}

fn login(app: &App, req: &Request, peer: IpAddr) -> Result<Response, Response> {
    let o = body(req)?;
    let field = |k: &str| match o.get(k) {
        Some(Value::String(s)) if s.len() <= 256 => Ok(s.as_str()),
        _ => Err(Response::error(
            400,
            format!("{k}: a string of at most 256 bytes"),
        )),
    };
    let (user, password) = (field("user")?, field("password")?);
    let r = lock(&app.auth).login(peer, user, password, Instant::now());
    match r {
        Ok((id, s)) => {
            app.live
                .event("login", format!("login from {peer}"), Some(&s.user));
            Ok(Response::json(200, &session_json(app, &s))
                .with("Set-Cookie", auth::cookie(Some(&id))))
        }
        Err(LoginError::Wrong) => {
            app.live.event(
                "login",
                format!("failed login as {user:?} from {peer}"),
                None,
            );
            Err(Response::error(401, "wrong user or password"))
        }
        Err(LoginError::Limited(d)) => {
            let secs = d.as_secs().max(1);
            Err(Response::error(
                429,
                format!("too many failed logins: try again in {secs} s"),
            )
            .with("Retry-After", secs.to_string()))
        }
    }
}

/// The live event stream (text/event-stream): one `live` event per poller frame (at most
/// [`live::RATE_HZ`] a second), until the client goes or the session ends.
fn stream(app: &App, id: &str, s: &mut TcpStream) {
    struct Count<'a>(&'a Live);
    impl Drop for Count<'_> {
        fn drop(&mut self) {
            self.0.subscribers.fetch_sub(1, Ordering::Relaxed);
        }
    }
    app.live.subscribers.fetch_add(1, Ordering::Relaxed);
    let _count = Count(&app.live);
    let _ = s.set_write_timeout(Some(http::WRITE_TIMEOUT));
    let h = http::head(
        200,
        "text/event-stream",
        None,
        &[("Cache-Control", "no-store".into())],
    );
    if s.write_all(h.as_bytes()).is_err() {
        return;
    }
    let mut seq = 0;
    loop {
        if lock(&app.auth).session(id, Instant::now()).is_none() {
            let _ = s.write_all(b"event: ended\ndata: {}\n\n");
            return;
        }
        let msg = match app.live.next_frame(seq, KEEPALIVE) {
            Some((n, f)) => {
                seq = n;
                format!("event: live\ndata: {f}\n\n")
            }
            None => ": keepalive\n\n".to_string(),
        };
        if s.write_all(msg.as_bytes()).and_then(|_| s.flush()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    const PEER: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn app() -> App {
        let users = auth::parse(
            std::path::Path::new("c"),
            "viewer read aaaaaaaaaaaa\nengineer write bbbbbbbbbbbb\n",
        )
        .unwrap();
        App {
            auth: Arc::new(Mutex::new(Auth::new(users))),
            // No master there: a request that gets past the checks fails with 503.
            live: Live::new("/nonexistent/rtcat.sock".into(), None),
            conn: Mutex::new(None),
            motion: false,
            doctor: "/nonexistent/doctor.json".into(),
            upload: Default::default(),
        }
    }

    /// A connected stream for `handle` (only the live stream writes to it).
    fn stream() -> TcpStream {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _ = l.accept().unwrap();
        s
    }

    fn req(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Request {
        let mut h: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        h.push(("host".into(), "127.0.0.1:8480".into()));
        Request {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            headers: h,
            body: body.as_bytes().to_vec(),
        }
    }

    fn call(app: &App, r: &Request) -> Response {
        handle(app, r, PEER, &mut stream()).expect("a response")
    }

    /// Logs in: the cookie header value and the CSRF token.
    fn login(app: &App, user: &str, pw: &str) -> (String, String) {
        let body = format!(r#"{{"user":"{user}","password":"{pw}"}}"#);
        let r = call(
            app,
            &req(
                "POST",
                "/api/login",
                &[("content-type", "application/json")],
                &body,
            ),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let cookie = r
            .extra
            .iter()
            .find(|(k, _)| *k == "Set-Cookie")
            .unwrap()
            .1
            .split(';')
            .next()
            .unwrap()
            .to_string();
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        (cookie, v["csrf"].as_str().unwrap().to_string())
    }

    const WRITE: &str = r#"{"position":1,"index":"0x8000","sub":"0x15","data":"0500"}"#;

    fn write(app: &App, headers: &[(&str, &str)]) -> (u16, String) {
        let mut h = vec![("content-type", "application/json")];
        h.extend_from_slice(headers);
        let r = call(app, &req("POST", "/api/sdo/write", &h, WRITE));
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    }

    #[test]
    fn nothing_but_the_page_and_the_login_without_a_session() {
        let a = app();
        assert_eq!(call(&a, &req("GET", "/", &[], "")).status, 200);
        for (m, p) in [
            ("GET", "/api/scan"),
            ("GET", "/api/events"),
            ("GET", "/api/layout"),
        ] {
            assert_eq!(call(&a, &req(m, p, &[], "")).status, 401, "{p}");
        }
        assert_eq!(write(&a, &[("x-csrf-token", "x")]).0, 401);
        assert_eq!(write(&a, &[("cookie", "rtcat_session=forged")]).0, 401);
        let s = call(&a, &req("GET", "/api/session", &[], ""));
        assert_eq!(
            (s.status, s.body.as_slice()),
            (200, &br#"{"user":null}"#[..])
        );
    }

    #[test]
    fn every_post_needs_the_sessions_csrf_token_and_a_same_origin() {
        let a = app();
        let (cookie, token) = login(&a, "engineer", "bbbbbbbbbbbb");
        let c = ("cookie", cookie.as_str());
        let (s, b) = write(&a, &[c]);
        assert_eq!(s, 403, "{b}");
        assert!(b.contains("missing X-CSRF-Token"), "{b}");
        // The token with its last digit changed (a fixed "0" was the token itself one run
        // in 16).
        let last = if token.ends_with('0') { '1' } else { '0' };
        let wrong = format!("{}{last}", &token[..63]);
        let (s, b) = write(&a, &[c, ("x-csrf-token", &wrong)]);
        assert_eq!((s, b.contains("wrong CSRF token")), (403, true), "{b}");
        // Another user's token is no token of this session.
        let (_, other) = login(&a, "viewer", "aaaaaaaaaaaa");
        assert_eq!(write(&a, &[c, ("x-csrf-token", &other)]).0, 403);
        let t = ("x-csrf-token", token.as_str());
        let (s, b) = write(&a, &[c, t, ("origin", "http://evil.example")]);
        assert_eq!((s, b.contains("cross-site")), (403, true), "{b}");
        // With the token and this host's origin, the write reaches the control socket (none
        // here: 503), so it passed every check.
        let (s, b) = write(&a, &[c, t, ("origin", "http://127.0.0.1:8480")]);
        assert_eq!(s, 503, "{b}");
        // Logging out is a POST too; afterwards the session is gone.
        let out = call(&a, &req("POST", "/api/logout", &[c], ""));
        assert_eq!(out.status, 403);
        let out = call(&a, &req("POST", "/api/logout", &[c, t], ""));
        assert_eq!(out.status, 200);
        assert_eq!(write(&a, &[c, t]).0, 401);
    }

    #[test]
    fn writes_need_the_write_role_and_are_on_the_event_list_with_the_user() {
        let a = app();
        let (cookie, token) = login(&a, "viewer", "aaaaaaaaaaaa");
        let (s, b) = write(&a, &[("cookie", &cookie), ("x-csrf-token", &token)]);
        assert_eq!(s, 403, "{b}");
        assert!(b.contains("read role"), "{b}");
        let (cookie, token) = login(&a, "engineer", "bbbbbbbbbbbb");
        write(&a, &[("cookie", &cookie), ("x-csrf-token", &token)]);
        let e = a.live.events(0);
        let w = e
            .iter()
            .find(|e| e["kind"] == "write")
            .expect("the write's event");
        assert_eq!(w["user"], "engineer");
        assert!(w["text"].as_str().unwrap().contains("refused"), "{w}");
    }

    #[test]
    fn axis_commands_need_the_write_role_and_the_motion_switch() {
        let post = |a: &App, who: (&str, &str), body: &str| {
            let (cookie, token) = login(a, who.0, who.1);
            let h = [
                ("cookie", cookie.as_str()),
                ("x-csrf-token", token.as_str()),
                ("content-type", "application/json"),
            ];
            let r = call(a, &req("POST", "/api/axis", &h, body));
            let v: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            (r.status, v["error"].as_str().unwrap_or("").to_string())
        };
        const JOG: &str = r#"{"name":"x","action":"jog","velocity":5}"#;
        const ENG: (&str, &str) = ("engineer", "bbbbbbbbbbbb");
        let mut a = app();
        let (s, b) = post(&a, ("viewer", "aaaaaaaaaaaa"), JOG);
        assert_eq!(s, 403, "{b}");
        assert!(b.contains("read role"), "{b}");
        let (s, b) = post(&a, ENG, JOG);
        assert_eq!(s, 403, "{b}");
        assert!(b.contains("--allow-motion"), "{b}");
        a.motion = true;
        // Past the checks: no master there (503); the command is on the event list.
        let (s, b) = post(&a, ENG, JOG);
        assert_eq!(s, 503, "{b}");
        let e = a.live.events(0);
        assert!(
            e.iter().any(|e| e["kind"] == "write"
                && e["user"] == "engineer"
                && e["text"].as_str().unwrap().contains("\"action\":\"jog\"")),
            "{e:?}"
        );
        // A renewal is not: it only keeps the command going.
        let writes = |a: &App| {
            a.live
                .events(0)
                .iter()
                .filter(|e| e["kind"] == "write")
                .count()
        };
        let n = writes(&a);
        let (s, _) = post(&a, ENG, r#"{"name":"x","action":"renew"}"#);
        assert_eq!(s, 503);
        assert_eq!(writes(&a), n, "a renewal is no event");
        // The page does not choose the lease; bad actions and values are named.
        for (body, want) in [
            (
                r#"{"name":"x","action":"jog","velocity":5,"lease_ms":5000}"#,
                "unknown field \"lease_ms\"",
            ),
            (r#"{"name":"x","action":"fly"}"#, "action = \"fly\""),
            (
                r#"{"name":"x","action":"move_to","position":"far"}"#,
                "position = \"far\"",
            ),
        ] {
            let (s, b) = post(&a, ENG, body);
            assert_eq!(s, 400, "{body}: {b}");
            assert!(b.contains(want), "{body}: {b}");
        }
    }

    #[test]
    fn bad_bodies_and_methods_get_a_4xx_naming_the_problem() {
        let a = app();
        let (cookie, token) = login(&a, "engineer", "bbbbbbbbbbbb");
        let h = |ct: &'static str| {
            vec![
                ("cookie", cookie.clone()),
                ("x-csrf-token", token.clone()),
                ("content-type", ct.to_string()),
            ]
        };
        let post = |ct: &'static str, body: &str| {
            let hs = h(ct);
            let hs: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let r = call(&a, &req("POST", "/api/sdo/write", &hs, body));
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            (r.status, v["error"].as_str().unwrap_or("").to_string())
        };
        for (ct, body, status, want) in [
            ("text/plain", WRITE, 415, "application/json"),
            ("application/json", "{", 400, "not JSON"),
            ("application/json", "[1]", 400, "a JSON object"),
            (
                "application/json",
                r#"{"position":1}"#,
                400,
                "missing field \"data\"",
            ),
            (
                "application/json",
                r#"{"position":1,"index":1,"sub":0,"data":"00","cmd":"al_state"}"#,
                400,
                "unknown field \"cmd\"",
            ),
            (
                "application/json",
                r#"{"position":70000,"index":1,"sub":0,"data":"00"}"#,
                400,
                "position = 70000",
            ),
            (
                "application/json",
                r#"{"position":1,"index":1,"sub":0,"data":"0"}"#,
                400,
                "odd number",
            ),
        ] {
            let (s, b) = post(ct, body);
            assert_eq!(s, status, "{body}: {b}");
            assert!(b.contains(want), "{body}: {b}");
        }
        let hs = h("application/json");
        let hs: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(call(&a, &req("GET", "/api/sdo/write", &hs, "")).status, 405);
        assert_eq!(call(&a, &req("POST", "/", &hs, "")).status, 405);
        assert_eq!(call(&a, &req("GET", "/api/nothing", &hs, "")).status, 404);
        assert_eq!(call(&a, &req("GET", "/nothing.js", &[], "")).status, 404);
    }
}
