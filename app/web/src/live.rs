//! What the live views show: one poller thread asks the master for its `status` and reads a
//! snapshot of the shared image at most [`RATE_HZ`] times a second, a slower one asks for the
//! error counters and, when the layout's generation changes, the scan. Each poll becomes one
//! JSON frame every open event stream sends; events (state changes, counters that grew, the
//! writes made through the page) are derived here and kept in a ring.
//!
//! Nothing here can hold the master up: the control socket is answered by the master's control
//! thread from its status copy and its poller (never the cyclic thread), and the shared image is
//! a seqlock its readers retry on, which the cycle never waits for (`app/shm/README.md`).

use rtcat_control::{Client, ClientError, Request};
use rtcat_shm::Value as ShmValue;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Live updates per second at most (the bound: ≤ 10).
pub const RATE_HZ: u32 = 10;
/// Poll period without any open live view.
pub const IDLE_PERIOD: Duration = Duration::from_secs(1);
/// Events kept.
pub const MAX_EVENTS: usize = 1000;
/// Time a control request of the poller may take (status is answered from a copy).
const POLL_TIMEOUT: Duration = Duration::from_secs(2);
/// Time a scan may take (it reads every subdevice through the master's acyclic queue).
const SCAN_TIMEOUT: Duration = Duration::from_secs(60);

/// Milliseconds since the epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Locks, taking over a poisoned lock (a panicked handler must not take the page down).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The state every handler shares.
pub struct Live {
    /// The outputs the page forces.
    pub forces: Arc<crate::force::Forces>,
    control: PathBuf,
    master_uid: Option<u32>,
    /// The latest frame; the event streams wait on it.
    frame: tokio::sync::watch::Sender<Arc<String>>,
    /// Open event streams (the poller slows down without any).
    pub subscribers: AtomicUsize,
    scan: Mutex<Option<(u32, Value)>>,
    scan_wanted: Mutex<bool>,
    counters: Mutex<Value>,
    layout: Mutex<Arc<String>>,
    events: Mutex<(u64, VecDeque<Value>)>,
}

impl Live {
    /// For the master on `control` (shared image attached only when its peer runs as
    /// `master_uid`; None: our own uid).
    pub fn new(control: PathBuf, master_uid: Option<u32>) -> Arc<Live> {
        Arc::new(Live {
            forces: crate::force::Forces::new(control.clone(), master_uid),
            control,
            master_uid,
            frame: tokio::sync::watch::Sender::new(Arc::new(
                json!({"up": false, "error": "not polled yet"}).to_string(),
            )),
            subscribers: AtomicUsize::new(0),
            scan: Mutex::new(None),
            scan_wanted: Mutex::new(true),
            counters: Mutex::new(Value::Null),
            layout: Mutex::new(Arc::new("{\"generation\":null,\"entries\":[]}".into())),
            events: Mutex::new((0, VecDeque::new())),
        })
    }

    /// The control socket's path.
    pub fn control(&self) -> &std::path::Path {
        &self.control
    }

    /// Starts the pollers (threads that run as long as the program).
    pub fn start(self: &Arc<Live>) -> std::io::Result<()> {
        let l = self.clone();
        std::thread::Builder::new()
            .name("poll".into())
            .spawn(move || l.fast_loop())?;
        let l = self.clone();
        std::thread::Builder::new()
            .name("poll-slow".into())
            .spawn(move || l.slow_loop())?;
        Ok(())
    }

    /// The frames from now on (the current one counts as not seen yet).
    pub fn frames(&self) -> tokio::sync::watch::Receiver<Arc<String>> {
        let mut rx = self.frame.subscribe();
        rx.mark_changed();
        rx
    }

    /// The last scan (generation, `rtcat scan --json` array), and asks for a new one if
    /// `refresh`.
    pub fn scan(&self, refresh: bool) -> Option<(u32, Value)> {
        if refresh {
            *lock(&self.scan_wanted) = true;
        }
        lock(&self.scan).clone()
    }

    /// The last error-counter reading.
    pub fn counters(&self) -> Value {
        lock(&self.counters).clone()
    }

    /// The process-data layout: `{"generation": N, "entries": [{name, position, direction,
    /// bits, type}]}`, in the order of the frames' `pd.values`.
    pub fn layout(&self) -> Arc<String> {
        lock(&self.layout).clone()
    }

    /// Events after number `after` (each has `id`, `t_ms`, `kind`, `text`, and `user` for the
    /// page's writes).
    pub fn events(&self, after: u64) -> Vec<Value> {
        let g = lock(&self.events);
        g.1.iter()
            .filter(|e| e["id"].as_u64().unwrap_or(0) > after)
            .cloned()
            .collect()
    }

    /// Puts an event on the list.
    pub fn event(&self, kind: &str, text: String, user: Option<&str>) {
        let mut g = lock(&self.events);
        g.0 += 1;
        let mut e = json!({"id": g.0, "t_ms": unix_ms(), "kind": kind, "text": text});
        if let Some(u) = user {
            e["user"] = u.into();
        }
        g.1.push_back(e);
        while g.1.len() > MAX_EVENTS {
            g.1.pop_front();
        }
    }

    /// Makes `v` the latest frame.
    pub(crate) fn publish(&self, v: &Value) {
        // Stored even without a receiver; never waits for one.
        self.frame.send_replace(Arc::new(v.to_string()));
    }

    fn fast_loop(self: Arc<Live>) {
        let mut conn: Option<Client> = None;
        let mut image: Option<rtcat_shm::Client> = None;
        let mut next_attach = Instant::now();
        let mut prev = Prev::default();
        let period = Duration::from_secs(1) / RATE_HZ;
        loop {
            let t0 = Instant::now();
            let mut frame = json!({"t_ms": unix_ms()});
            match call(&mut conn, &self.control, &Request::Status, POLL_TIMEOUT) {
                Ok(status) => {
                    prev.observe(&self, &status);
                    frame["up"] = true.into();
                    frame["status"] = status;
                }
                Err(e) => {
                    prev.down(&self, &e.to_string());
                    frame["up"] = false.into();
                    frame["error"] = e.to_string().into();
                }
            }
            if image.is_none() && Instant::now() >= next_attach && frame["up"] == true {
                match self.attach() {
                    Ok(c) => image = Some(c),
                    Err(e) => {
                        frame["pd_error"] = e.into();
                        next_attach = Instant::now() + Duration::from_secs(1);
                    }
                }
            }
            if let Some(c) = image.as_mut() {
                match self.read_image(c) {
                    Ok(pd) => frame["pd"] = pd,
                    Err(e) => {
                        frame["pd_error"] = e.into();
                        image = None;
                        next_attach = Instant::now() + Duration::from_secs(1);
                    }
                }
            }
            frame["counters"] = self.counters();
            frame["forced"] = self.forces.list();
            frame["events"] = lock(&self.events).0.into();
            self.publish(&frame);
            let idle = self.subscribers.load(Ordering::Relaxed) == 0;
            let p = if idle { IDLE_PERIOD } else { period };
            std::thread::sleep(p.saturating_sub(t0.elapsed()));
        }
    }

    fn attach(&self) -> Result<rtcat_shm::Client, String> {
        let c = match self.master_uid {
            Some(uid) => rtcat_shm::Client::attach_owned_by(&self.control, uid),
            None => rtcat_shm::Client::attach(&self.control),
        }
        .map_err(|e| format!("shared image: {e}"))?;
        let entries: Vec<Value> = c
            .entries()
            .iter()
            .map(|e| {
                json!({
                    "name": e.name,
                    "position": e.position,
                    "direction": match e.direction {
                        rtcat_shm::Direction::Inputs => "inputs",
                        rtcat_shm::Direction::Outputs => "outputs",
                    },
                    "bits": e.bits,
                    "type": type_name(e.data_type),
                })
            })
            .collect();
        *lock(&self.layout) =
            Arc::new(json!({"generation": c.generation(), "entries": entries}).to_string());
        Ok(c)
    }

    fn read_image(&self, c: &mut rtcat_shm::Client) -> Result<Value, String> {
        let s = match c.snapshot() {
            Ok(s) => s,
            Err(rtcat_shm::Error::Gone { .. }) => {
                return Err("the layout changed: attaching again".into());
            }
            Err(e) => return Err(format!("shared image: {e}")),
        };
        let values: Vec<Value> = c.entries().iter().map(|e| value_json(s.get(e))).collect();
        Ok(json!({
            "generation": c.generation(),
            "cycle": s.cycle,
            "unix_ns": s.unix_ns,
            "wkc": s.wkc,
            "expected_wkc": s.expected_wkc,
            "valid": s.valid,
            "values": values,
        }))
    }

    fn slow_loop(self: Arc<Live>) {
        // One connection for counters and scans: the master serves at most 4 connections per
        // process (ServerConfig::max_per_process), and the shared image's requests and the
        // page's own need the others.
        let mut conn: Option<Client> = None;
        let mut scanned_gen: Option<u32> = None;
        loop {
            let t0 = Instant::now();
            match call(&mut conn, &self.control, &Request::Counters, POLL_TIMEOUT) {
                Ok(v) => *lock(&self.counters) = v,
                Err(_) => *lock(&self.counters) = Value::Null,
            }
            let latest = self.frame.borrow().clone();
            let generation = serde_json::from_str::<Value>(&latest)
                .ok()
                .and_then(|f| f["status"]["generation"].as_u64())
                .map(|g| g as u32);
            let wanted = std::mem::take(&mut *lock(&self.scan_wanted));
            if let Some(g) = generation
                && (wanted || scanned_gen != Some(g))
            {
                if let Some(c) = conn.take() {
                    conn = Some(c.with_timeout(SCAN_TIMEOUT));
                }
                let r = call(&mut conn, &self.control, &Request::Scan, SCAN_TIMEOUT);
                if let Some(c) = conn.take() {
                    conn = Some(c.with_timeout(POLL_TIMEOUT));
                }
                match r {
                    Ok(v) => {
                        *lock(&self.scan) = Some((g, v));
                        scanned_gen = Some(g);
                    }
                    Err(e) => self.event("error", format!("scan failed: {e}"), None),
                }
            }
            std::thread::sleep(Duration::from_secs(1).saturating_sub(t0.elapsed()));
        }
    }
}

/// One request on a kept connection (connecting again after a failure).
pub fn call(
    conn: &mut Option<Client>,
    path: &std::path::Path,
    req: &Request,
    timeout: Duration,
) -> Result<Value, ClientError> {
    if conn.is_none() {
        *conn = Some(Client::connect(path)?.with_timeout(timeout));
    }
    let c = conn.as_mut().expect("connected above");
    let r = c.call(req);
    if let Err(e) = &r
        && !matches!(e, ClientError::Failed(_))
    {
        // The connection's state is unknown after a timeout or an I/O error: a new one.
        *conn = None;
    }
    r
}

/// The layout JSON's name of a data type.
fn type_name(t: rtcat_shm::DataType) -> String {
    use rtcat_shm::DataType as D;
    match t {
        D::Bool => "BOOL".into(),
        D::Int8 => "INT8".into(),
        D::Int16 => "INT16".into(),
        D::Int32 => "INT32".into(),
        D::Int64 => "INT64".into(),
        D::Unsigned8 => "UNSIGNED8".into(),
        D::Unsigned16 => "UNSIGNED16".into(),
        D::Unsigned32 => "UNSIGNED32".into(),
        D::Unsigned64 => "UNSIGNED64".into(),
        D::Real32 => "REAL32".into(),
        D::Real64 => "REAL64".into(),
        D::Bits => "BITS".into(),
        D::Other(c) => format!("OTHER({c:#04x})"),
    }
}

/// A value as JSON: integers beyond 2^53 as strings (a JavaScript number would round them).
fn value_json(v: ShmValue) -> Value {
    const SAFE: u64 = 1 << 53;
    match v {
        ShmValue::Bool(b) => b.into(),
        ShmValue::Unsigned(u) if u < SAFE => u.into(),
        ShmValue::Signed(i) if i.unsigned_abs() < SAFE => i.into(),
        ShmValue::Real(f) if f.is_finite() => f.into(),
        other => other.to_string().into(),
    }
}

/// What the previous poll saw, to tell the changes as events.
#[derive(Default)]
struct Prev {
    up: Option<bool>,
    state: Option<String>,
    al: Vec<(u64, u64, u64)>,
    /// Counter values last told as events, and when.
    counters: Option<(Value, Instant)>,
    axes: Vec<(String, String)>,
}

/// A counter that grows is told at most this often (a loaded machine misses deadlines every
/// second; the list would be nothing else).
const COUNTER_EVENTS_EVERY: Duration = Duration::from_secs(5);

/// Counters whose growth is an event.
const WATCHED: [&str; 7] = [
    "missed_deadlines",
    "frames_lost",
    "wkc_mismatches",
    "recoveries",
    "failed_recoveries",
    "emergencies",
    "send_errors",
];

impl Prev {
    fn down(&mut self, live: &Live, why: &str) {
        if self.up != Some(false) {
            live.event("master", format!("master unreachable: {why}"), None);
        }
        self.up = Some(false);
    }

    fn observe(&mut self, live: &Live, s: &Value) {
        if self.up != Some(true) {
            live.event("master", "master reachable".into(), None);
        }
        self.up = Some(true);
        let state = s["state"].as_str().unwrap_or("?").to_string();
        if self.state.as_ref() != Some(&state) {
            live.event("master", format!("master state {state}"), None);
            self.state = Some(state);
        }
        let al: Vec<(u64, u64, u64)> = s["subdevice_states"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|d| {
                        (
                            d["position"].as_u64().unwrap_or(0),
                            d["al_state"].as_u64().unwrap_or(0),
                            d["al_status_code"].as_u64().unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        for d in &al {
            if !self.al.contains(d) {
                live.event(
                    "al",
                    format!(
                        "subdevice {}: AL state {} status code {:#06x}",
                        d.0,
                        al_name(d.1),
                        d.2
                    ),
                    None,
                );
            }
        }
        self.al = al;
        let c = &s["counters"];
        let now = Instant::now();
        match &self.counters {
            Some((p, t)) if now.duration_since(*t) >= COUNTER_EVENTS_EVERY => {
                for k in WATCHED {
                    let (a, b) = (p[k].as_u64().unwrap_or(0), c[k].as_u64().unwrap_or(0));
                    if b > a {
                        live.event("counter", format!("{k} +{} (now {b})", b - a), None);
                    }
                }
                self.counters = Some((c.clone(), now));
            }
            Some(_) => {}
            None => self.counters = Some((c.clone(), now)),
        }
        let axes: Vec<(String, String)> = s["axes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        (
                            x["name"].as_str().unwrap_or("?").to_string(),
                            x["state"].as_str().unwrap_or("?").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        for x in &axes {
            if !self.axes.contains(x) {
                live.event("axis", format!("axis {}: {}", x.0, x.1), None);
            }
        }
        self.axes = axes;
    }
}

/// The name of an AL state code (ETG.1000.6 Table 9; bit 4 is the error flag).
pub fn al_name(code: u64) -> String {
    let s = match code & 0x0f {
        1 => "INIT",
        2 => "PRE-OP",
        3 => "BOOT",
        4 => "SAFE-OP",
        8 => "OP",
        _ => "?",
    };
    if code & 0x10 != 0 {
        format!("{s}+ERROR")
    } else {
        s.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_become_events_once() {
        let live = Live::new("/nonexistent".into(), None);
        let mut p = Prev::default();
        let s = |al: u64, missed: u64| {
            json!({"state": "op", "subdevice_states": [{"position": 0, "al_state": al, "al_status_code": 0}],
                   "counters": {"missed_deadlines": missed}})
        };
        p.observe(&live, &s(8, 0));
        let n = live.events(0).len();
        assert_eq!(n, 3, "{:?}", live.events(0));
        p.observe(&live, &s(8, 0));
        assert_eq!(live.events(0).len(), n, "nothing changed, no event");
        p.observe(&live, &s(0x14, 2));
        // A counter's growth is told once per COUNTER_EVENTS_EVERY.
        assert_eq!(live.events(0).len(), n + 1);
        p.counters.as_mut().unwrap().1 -= COUNTER_EVENTS_EVERY;
        p.observe(&live, &s(0x14, 2));
        let e = live.events(n as u64);
        let texts: Vec<&str> = e.iter().map(|e| e["text"].as_str().unwrap()).collect();
        assert_eq!(
            texts,
            [
                "subdevice 0: AL state SAFE-OP+ERROR status code 0x0000",
                "missed_deadlines +2 (now 2)"
            ]
        );
        p.down(&live, "gone");
        p.down(&live, "gone");
        assert_eq!(live.events(0).len(), n + 3);
    }

    #[test]
    fn big_integers_stay_exact() {
        assert_eq!(
            value_json(ShmValue::Unsigned(u64::MAX)),
            json!("18446744073709551615")
        );
        assert_eq!(value_json(ShmValue::Signed(-5)), json!(-5));
        assert_eq!(value_json(ShmValue::Bool(true)), json!(true));
        assert_eq!(value_json(ShmValue::Real(f64::NAN)), json!("NaN"));
    }

    #[test]
    fn the_event_ring_is_bounded() {
        let live = Live::new("/nonexistent".into(), None);
        for i in 0..MAX_EVENTS + 10 {
            live.event("x", i.to_string(), Some("u"));
        }
        let e = live.events(0);
        assert_eq!(e.len(), MAX_EVENTS);
        assert_eq!(e[0]["id"], 11);
        assert_eq!(e[0]["user"], "u");
    }
}
