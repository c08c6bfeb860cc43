//! Asking the master: one connection to its control socket per scrape, one JSON line per
//! request (`{"cmd": "status"}`), one reply line each (`{"ok": true, "data": ...}` or
//! `{"ok": false, "kind": ..., "error": ...}`), as the control protocol defines them.
//!
//! Everything here is bounded: the connect, every read and write (a master that hangs costs a
//! scrape [`TIMEOUT`], never the exporter), and the reply's length.

use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest wait for one reply. Prometheus' default scrape timeout is 10 s; three requests stay
/// well inside it.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// Longest reply line accepted: the `scan` of 256 subdevices is some 300 KiB of JSON.
pub const MAX_REPLY: u64 = 8 << 20;

/// A connection to the control socket.
pub struct Control {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Control {
    pub fn connect(path: &Path) -> Result<Control, String> {
        let s = UnixStream::connect(path)
            .map_err(|e| format!("control socket {}: {e}", path.display()))?;
        let set = |s: &UnixStream| -> std::io::Result<()> {
            s.set_read_timeout(Some(TIMEOUT))?;
            s.set_write_timeout(Some(TIMEOUT))
        };
        set(&s).map_err(|e| format!("control socket {}: {e}", path.display()))?;
        let writer = s
            .try_clone()
            .map_err(|e| format!("control socket {}: {e}", path.display()))?;
        Ok(Control {
            path: path.to_owned(),
            reader: BufReader::new(s),
            writer,
        })
    }

    /// Sends `{"cmd": CMD}` and returns the reply's `data` as `T`.
    pub fn ask<T: DeserializeOwned>(&mut self, cmd: &str) -> Result<T, String> {
        let at = || format!("control socket {} ({cmd})", self.path.display());
        let mut req = serde_json::json!({ "cmd": cmd }).to_string();
        req.push('\n');
        self.writer
            .write_all(req.as_bytes())
            .map_err(|e| format!("{}: sending the request: {e}", at()))?;
        let mut line = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_REPLY + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("{}: reading the reply: {e}", at()))?;
        if n == 0 {
            return Err(format!("{}: the master closed the connection", at()));
        }
        if line.last() != Some(&b'\n') {
            return Err(if n as u64 > MAX_REPLY {
                format!("{}: reply longer than {MAX_REPLY} bytes", at())
            } else {
                format!("{}: the reply ended without a line feed", at())
            });
        }
        parse_reply(&line).map_err(|e| format!("{}: {e}", at()))
    }
}

/// The reply line's `data` as `T`, or the master's error.
pub fn parse_reply<T: DeserializeOwned>(line: &[u8]) -> Result<T, String> {
    #[derive(serde::Deserialize)]
    struct Reply {
        ok: bool,
        #[serde(default)]
        data: serde_json::Value,
        #[serde(default)]
        kind: Option<String>,
        #[serde(default)]
        error: Option<String>,
    }
    let r: Reply =
        serde_json::from_slice(line).map_err(|e| format!("reply is not a reply object: {e}"))?;
    if !r.ok {
        return Err(format!(
            "the master refused ({}): {}",
            r.kind.as_deref().unwrap_or("no kind"),
            r.error.as_deref().unwrap_or("no error text")
        ));
    }
    // Read back from its pretty form, one field a line, so that an error's line shows the field
    // it is about (serde names a missing field, but not the key of a value of the wrong type).
    let text = serde_json::to_string_pretty(&r.data).unwrap_or_default();
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
        let e = parse_reply::<Status>(br#"{"ok": true, "data": {"version": "one"}}"#).unwrap_err();
        assert!(e.contains("version"), "{e}");
        let e = parse_reply::<Status>(br#"{"ok": false, "kind": "runtime", "error": "boom"}"#)
            .unwrap_err();
        assert!(e.contains("runtime") && e.contains("boom"), "{e}");
        let e = parse_reply::<Status>(b"[1,2]").unwrap_err();
        assert!(e.contains("not a reply"), "{e}");
    }
}
