//! The exporter's HTTP/1.1 responder, written by hand on `std::net`: it serves two GET routes to
//! Prometheus, with no TLS, no request bodies, no keep-alive and no chunking, which is a few
//! dozen lines of RFC 9112 — less to audit than an HTTP crate and its dependencies in a binary
//! that runs next to the real-time master. TLS or authentication, when a plant needs them, go
//! in front of it (a reverse proxy), as Prometheus' own exporters recommend.
//!
//! What it relies on of RFC 9112: the request line `method SP request-target SP HTTP-version`
//! (§3), header fields up to the empty line (§2.1, §5), and `Connection: close` ending the
//! exchange after one response (§9.6), so no message framing of a request body is needed (a GET
//! has none, RFC 9110 §9.3.1). Bounded: the request head ([`MAX_HEAD`]), the time to send it
//! ([`READ_TIMEOUT`], for the whole head, so a client trickling bytes cannot hold a slot
//! longer), the time to take the response, and the connections served at once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Longest request head (request line and header fields) accepted; Prometheus sends some 300
/// bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// Time a client has to send its whole request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a client has to take the response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A request the responder understood.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path of the request target, without the query.
    pub path: String,
}

/// Why a request was not understood: the status to answer with.
#[derive(Debug, PartialEq, Eq)]
pub enum Bad {
    /// 400: not an HTTP/1.x request line.
    Malformed(String),
    /// 431: the head exceeds [`MAX_HEAD`].
    TooLarge,
    /// The client was too slow or went away: nothing to answer.
    Gone,
}

/// Reads one request head from `s` (at most [`MAX_HEAD`] bytes within [`READ_TIMEOUT`]).
pub fn read_request(s: &mut TcpStream) -> Result<Request, Bad> {
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = find_head_end(&buf) {
            return parse_head(&buf[..end]);
        }
        if buf.len() >= MAX_HEAD {
            return Err(Bad::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            return Err(Bad::Gone);
        }
        let want = chunk.len().min(MAX_HEAD + 4 - buf.len());
        match s.read(&mut chunk[..want]) {
            Ok(0) => return Err(Bad::Gone),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(Bad::Gone),
        }
    }
}

/// Where the head ends: the first empty line (CRLF CRLF; a bare LF is accepted as a line
/// terminator, RFC 9112 §2.2).
fn find_head_end(b: &[u8]) -> Option<usize> {
    (0..b.len()).find(|&i| b[i..].starts_with(b"\r\n\r\n") || b[i..].starts_with(b"\n\n"))
}

/// Parses the request line of a head (header fields are not needed: nothing here depends on
/// them).
pub fn parse_head(head: &[u8]) -> Result<Request, Bad> {
    let text = std::str::from_utf8(head)
        .map_err(|_| Bad::Malformed("the request head is not text".into()))?;
    let line = text.split('\n').next().unwrap_or("").trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Bad::Malformed(format!(
            "request line {:?} is not `METHOD TARGET HTTP/1.x`",
            truncate(line)
        )));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Bad::Malformed(format!(
            "version {:?} is not HTTP/1.x",
            truncate(version)
        )));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(Bad::Malformed(format!("method {:?}", truncate(method))));
    }
    // origin-form (`/metrics?x`) or absolute-form (`http://host/metrics`, RFC 9112 §3.2.2).
    let path = match target.find("://") {
        Some(i) => {
            let rest = &target[i + 3..];
            rest.find('/').map_or("/", |j| &rest[j..])
        }
        None => target,
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    if !path.starts_with('/') {
        return Err(Bad::Malformed(format!("target {:?}", truncate(target))));
    }
    Ok(Request {
        method: method.into(),
        path: path.into(),
    })
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// A response; always sent with `Connection: close`.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub extra: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            extra: Vec::new(),
            body: body.into().into_bytes(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// Writes `r` (without the body for HEAD) and closes the exchange.
pub fn respond(s: &mut TcpStream, r: &Response, head_only: bool) -> std::io::Result<()> {
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let mut h = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    for (k, v) in &r.extra {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    s.write_all(h.as_bytes())?;
    if !head_only {
        s.write_all(&r.body)?;
    }
    s.flush()?;
    // Half-close, then the socket is dropped: the client reads to the end without a reset.
    let _ = s.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        let r = parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n").unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/metrics"));
        let r = parse_head(b"GET http://h:9/metrics HTTP/1.0").unwrap();
        assert_eq!(r.path, "/metrics");
        assert!(matches!(
            parse_head(b"GET /metrics"),
            Err(Bad::Malformed(_))
        ));
        assert!(matches!(
            parse_head(b"GET /metrics SPDY/3"),
            Err(Bad::Malformed(_))
        ));
        assert!(matches!(
            parse_head(b"get / HTTP/1.1"),
            Err(Bad::Malformed(_))
        ));
        assert!(matches!(
            parse_head(b"GET metrics HTTP/1.1"),
            Err(Bad::Malformed(_))
        ));
        assert!(matches!(parse_head(&[0xff, 0xfe]), Err(Bad::Malformed(_))));
    }

    #[test]
    fn the_head_ends_at_the_empty_line() {
        assert_eq!(
            find_head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"),
            Some(20)
        );
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
