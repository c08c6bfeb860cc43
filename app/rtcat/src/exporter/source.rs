//! Asking the master: one connection to its control socket per scrape, through
//! `rtcat-control`'s blocking client, every request bounded by [`TIMEOUT`] (a master that hangs
//! costs a scrape that long, never the exporter).

use rtcat_control::{Client, Request};
use serde::de::DeserializeOwned;
use std::path::Path;
use std::time::Duration;

/// Longest wait for one reply. Prometheus' default scrape timeout is 10 s; the three requests of
/// a scrape stay inside it. (`status` and `counters` come from what the master already holds;
/// `scan`, which reads the bus, is asked only when the layout's generation changes.)
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// A connection to the control socket.
pub struct Control {
    client: Client,
}

impl Control {
    pub fn connect(path: &Path) -> Result<Control, String> {
        let client = Client::connect(path).map_err(|e| e.to_string())?;
        Ok(Control {
            client: client.with_timeout(TIMEOUT),
        })
    }

    /// Sends `req` and returns the reply's `data` as `T`.
    pub fn ask<T: DeserializeOwned>(&mut self, req: &Request) -> Result<T, String> {
        let cmd = req.to_value()["cmd"].as_str().unwrap_or("?").to_string();
        let data = self.client.call(req).map_err(|e| format!("{cmd}: {e}"))?;
        parse_data(&data).map_err(|e| format!("{cmd}: {e}"))
    }
}

/// A reply's data as `T`. Read back from its pretty form, one field a line, so that an error's
/// line shows the field it is about (serde names a missing field, but not the key of a value of
/// the wrong type).
pub fn parse_data<T: DeserializeOwned>(data: &serde_json::Value) -> Result<T, String> {
    let text = serde_json::to_string_pretty(data).unwrap_or_default();
    serde_json::from_str(&text).map_err(|e| {
        let at = text
            .lines()
            .nth(e.line().saturating_sub(1))
            .unwrap_or("")
            .trim();
        let at: String = at.trim_end_matches(',').chars().take(120).collect();
        if at.is_empty() || at == "{" || at == "}" {
            format!("reply data: {e}")
        } else {
            format!("reply data: {e} (at `{at}`)")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::model::Status;

    #[test]
    fn a_wrong_field_is_named() {
        let v = serde_json::json!({"version": "one"});
        let e = parse_data::<Status>(&v).unwrap_err();
        assert!(e.contains("\"version\": \"one\""), "{e}");
        let v = serde_json::json!({"version": 1});
        let e = parse_data::<Status>(&v).unwrap_err();
        assert!(e.contains("missing field"), "{e}");
    }
}
