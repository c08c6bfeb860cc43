//! Forcing outputs from the page: rtcat-web attaches a shared-image writer of its own
//! (`rtcat-web`) when a user with the write role first sets an output, claims each output it is
//! asked to set, and writes the values at every heartbeat. The master's ownership rules decide:
//! an entry driven by the master (an axis' controlword, targets), declared for another writer
//! or owned by another writer is refused by the master, not by this program.
//!
//! The forces belong to one session: when it ends (logout, idle timeout) or rtcat-web stops,
//! they end — released, or, if rtcat-web dies or stalls, the master sets the entries to their
//! safe values once the writer's heartbeat stops for `[shm] writer_timeout_cycles`
//! (app/shm/README.md, "Heartbeat").

use crate::auth::Auth;
use crate::live::lock;
use rtcat_shm::{Client, Direction, EntryRef, Value, Writer};
use serde_json::{Value as Json, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The writer's name in the master's records and events.
pub const WRITER: &str = "rtcat-web";

/// What is forced, by whom.
struct Held {
    client: Client,
    writer: Writer,
    values: Vec<(EntryRef, Value)>,
    session: String,
    user: String,
}

/// The page's forces (none, or one session's).
pub struct Forces {
    control: PathBuf,
    master_uid: Option<u32>,
    held: Mutex<Option<Held>>,
}

/// Why a force was not done: the HTTP status and the reason.
pub type Refused = (u16, String);

impl Forces {
    /// For the master on `control`.
    pub fn new(control: PathBuf, master_uid: Option<u32>) -> Arc<Forces> {
        Arc::new(Forces {
            control,
            master_uid,
            held: Mutex::new(None),
        })
    }

    /// What is forced now: `[{entry, value, user}]`.
    pub fn list(&self) -> Json {
        match &*lock(&self.held) {
            Some(h) => h
                .values
                .iter()
                .map(|(e, v)| json!({"entry": e.name, "value": v.to_string(), "user": h.user}))
                .collect(),
            None => json!([]),
        }
    }

    /// Sets output `entry` to `value` for `session` (of `user`), attaching the writer and
    /// starting its heartbeat first if needed.
    pub fn set(
        self: &Arc<Forces>,
        auth: &Arc<Mutex<Auth>>,
        session: &str,
        user: &str,
        entry: &str,
        value: &Json,
    ) -> Result<(), Refused> {
        let mut g = lock(&self.held);
        if let Some(h) = g.as_ref()
            && h.session != session
        {
            return Err((
                409,
                format!(
                    "outputs are forced by {} in another session: released when it ends",
                    h.user
                ),
            ));
        }
        if g.is_none() {
            let client = match self.master_uid {
                Some(uid) => Client::attach_owned_by(&self.control, uid),
                None => Client::attach(&self.control),
            }
            .map_err(|e| (503, format!("shared image: {e}")))?;
            let writer = client
                .attach_writer(WRITER)
                .map_err(|e| (403, format!("shared image: {e}")))?;
            *g = Some(Held {
                client,
                writer,
                values: Vec::new(),
                session: session.into(),
                user: user.into(),
            });
            let (f, a) = (self.clone(), auth.clone());
            std::thread::Builder::new()
                .name("force".into())
                .spawn(move || f.beat(&a))
                .map_err(|e| (503, format!("heartbeat thread: {e}")))?;
        }
        let h = g.as_mut().expect("attached above");
        let r = apply(h, entry, value);
        if r.is_err() && h.values.is_empty() {
            // Nothing forced: no writer kept attached for nothing.
            *g = None;
        }
        r
    }

    /// Releases `entry` (None: every entry) of `session`'s forces.
    pub fn release(&self, session: &str, entry: Option<&str>) -> Result<(), Refused> {
        let mut g = lock(&self.held);
        let Some(h) = g.as_mut() else {
            return Ok(());
        };
        if h.session != session {
            return Err((
                409,
                format!("outputs are forced by {} in another session", h.user),
            ));
        }
        let mut result = Ok(());
        let mut keep = Vec::new();
        for (e, v) in std::mem::take(&mut h.values) {
            if entry.is_none_or(|n| n == e.name) {
                if let Err(er) = h.writer.release(&e) {
                    result = Err((502, format!("release {}: {er}", e.name)));
                }
            } else {
                keep.push((e, v));
            }
        }
        h.values = keep;
        if h.values.is_empty() {
            // Dropping the writer marks its object FREE: the master ends its claims.
            *g = None;
        }
        result
    }

    /// The heartbeat: writes the values four times per writer timeout (the master's rule for
    /// staying live), and releases everything when the forcing session has ended.
    fn beat(self: Arc<Forces>, auth: &Mutex<Auth>) {
        let mut checked = Instant::now();
        loop {
            let period = {
                let mut g = lock(&self.held);
                let Some(h) = g.as_mut() else { return };
                if write_all(h).is_err() {
                    // The image was replaced (new layout) or the master went away: the forces
                    // end (a new layout asks for new claims anyway).
                    *g = None;
                    return;
                }
                let c = &h.client;
                Duration::from_nanos(
                    (c.period_ns()
                        .saturating_mul(c.writer_timeout_cycles().max(1))
                        / 4)
                    .clamp(1_000_000, 250_000_000),
                )
            };
            if checked.elapsed() >= Duration::from_secs(1) {
                checked = Instant::now();
                let session = lock(&self.held).as_ref().map(|h| h.session.clone());
                if let Some(s) = session
                    && lock(auth).session_alive(&s, Instant::now()).is_none()
                {
                    let _ = self.release(&s, None);
                }
            }
            std::thread::sleep(period);
        }
    }
}

/// Claims `entry` (if not yet) and writes every forced value with its new one.
fn apply(h: &mut Held, entry: &str, value: &Json) -> Result<(), Refused> {
    let e = h
        .client
        .entries()
        .iter()
        .find(|e| e.name == entry)
        .cloned()
        .ok_or_else(|| (400, format!("entry {entry:?}: no such entry in the image")))?;
    if e.direction != Direction::Outputs {
        return Err((400, format!("entry {entry:?} is an input")));
    }
    let v = parse_value(value).map_err(|m| (400, format!("value {value}: {m}")))?;
    e.encode(v).map_err(|er| (400, er.to_string()))?;
    if !h.values.iter().any(|(x, _)| x.name == e.name) {
        h.writer
            .claim(&e)
            .map_err(|er| (403, format!("the master refused the claim: {er}")))?;
        h.values.push((e.clone(), v));
    }
    for (x, old) in h.values.iter_mut() {
        if x.name == e.name {
            *old = v;
        }
    }
    write_all(h).map_err(|er| (502, er))
}

fn write_all(h: &mut Held) -> Result<(), String> {
    if h.values.is_empty() {
        h.writer.heartbeat();
        return Ok(());
    }
    let vals: Vec<(&EntryRef, Value)> = h.values.iter().map(|(e, v)| (e, *v)).collect();
    h.writer.write(&vals).map_err(|e| e.to_string())
}

/// A JSON value as an entry value: true/false, an integer, a number, or a string of one
/// (`"0x10"` allowed).
fn parse_value(v: &Json) -> Result<Value, String> {
    match v {
        Json::Bool(b) => Ok(Value::Bool(*b)),
        Json::Number(n) => {
            if let Some(u) = n.as_u64() {
                Ok(Value::Unsigned(u))
            } else if let Some(i) = n.as_i64() {
                Ok(Value::Signed(i))
            } else {
                Ok(Value::Real(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        Json::String(s) => {
            let s = s.trim();
            match s {
                "true" => return Ok(Value::Bool(true)),
                "false" => return Ok(Value::Bool(false)),
                _ => {}
            }
            if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                return u64::from_str_radix(h, 16)
                    .map(Value::Unsigned)
                    .map_err(|_| "not a hex number".into());
            }
            if let Ok(u) = s.parse::<u64>() {
                Ok(Value::Unsigned(u))
            } else if let Ok(i) = s.parse::<i64>() {
                Ok(Value::Signed(i))
            } else {
                s.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite())
                    .map(Value::Real)
                    .ok_or_else(|| "not a number, true or false".into())
            }
        }
        _ => Err("must be a number, a boolean or a string".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_or_name_the_problem() {
        assert_eq!(parse_value(&json!(true)), Ok(Value::Bool(true)));
        assert_eq!(parse_value(&json!(5)), Ok(Value::Unsigned(5)));
        assert_eq!(parse_value(&json!(-5)), Ok(Value::Signed(-5)));
        assert_eq!(parse_value(&json!(1.5)), Ok(Value::Real(1.5)));
        assert_eq!(parse_value(&json!("0x10")), Ok(Value::Unsigned(16)));
        assert_eq!(parse_value(&json!(" -7 ")), Ok(Value::Signed(-7)));
        assert!(parse_value(&json!("abc")).is_err());
        assert!(parse_value(&json!("NaN")).is_err());
        assert!(parse_value(&json!(null)).is_err());
        assert!(parse_value(&json!([1])).is_err());
    }
}
