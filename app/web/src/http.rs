//! HTTP/1.1 on `std::net`, by hand, as the exporter does (`app/rtcat/src/exporter/http.rs`):
//! one request per connection (`Connection: close`, RFC 9112 §9.6), bodies only with
//! `Content-Length` (§6.3; `Transfer-Encoding` is refused with 501), every read bounded in
//! size and time. The page needs a few JSON routes, its assets and one event stream; a framework
//! and an async runtime would be most of the binary and most of what there is to audit.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Longest request head (request line and header fields).
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request body (the largest is an SDO write: 64 bytes as hex in a small object).
pub const MAX_BODY: usize = 16 * 1024;
/// Time a client has to send its whole request (head and body).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to take one write of the response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A request the server understood.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path of the request target, without the query.
    pub path: String,
    /// The query (after `?`), raw.
    pub query: String,
    /// Header fields, names in lower case, in order.
    pub headers: Vec<(String, String)>,
    /// The body (empty without `Content-Length`).
    pub body: Vec<u8>,
}

impl Request {
    /// The first header field `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of cookie `name`.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }

    /// The value of query parameter `name`, raw (no percent-decoding: see
    /// [`Request::query_text`]).
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query
            .split('&')
            .filter_map(|p| p.split_once('=').or(Some((p, ""))))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }

    /// Query parameter `name` percent-decoded (RFC 3986 §2.1) as UTF-8; None when absent or
    /// not valid.
    pub fn query_text(&self, name: &str) -> Option<String> {
        let raw = self.query_param(name)?.as_bytes();
        let mut out = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            match raw[i] {
                b'%' => {
                    let h = raw.get(i + 1..i + 3)?;
                    out.push(u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?);
                    i += 3;
                }
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        String::from_utf8(out).ok()
    }
}

/// Why a request was not understood: the status to answer with.
#[derive(Debug, PartialEq, Eq)]
pub enum Bad {
    /// 400 with the reason.
    Malformed(String),
    /// 431: the head exceeds [`MAX_HEAD`].
    HeadTooLarge,
    /// 413: the body exceeds its limit ([`MAX_BODY`], or a route's own).
    BodyTooLarge(usize),
    /// 501: a transfer coding (chunked bodies are not taken).
    TransferCoding,
    /// The client was too slow or went away: nothing to answer.
    Gone,
}

impl Bad {
    /// The status code and the text of the answer (None: none is sent).
    pub fn answer(&self) -> Option<(u16, String)> {
        Some(match self {
            Bad::Malformed(m) => (400, m.clone()),
            Bad::HeadTooLarge => (431, format!("request head longer than {MAX_HEAD} bytes")),
            Bad::BodyTooLarge(max) => (413, format!("request body longer than {max} bytes")),
            Bad::TransferCoding => (
                501,
                "Transfer-Encoding is not supported: send the body with Content-Length".into(),
            ),
            Bad::Gone => return None,
        })
    }
}

/// Reads one request from `s` within [`READ_TIMEOUT`], its body at most [`MAX_BODY`].
#[cfg(test)]
pub fn read_request(s: &mut impl ReadTimeout) -> Result<Request, Bad> {
    read_request_with(s, |_| (MAX_BODY, Duration::ZERO))
}

/// [`read_request`] with the body's limit and the extra time to read it decided from the
/// head (an upload the session may make: a file for a device).
pub fn read_request_with(
    s: &mut impl ReadTimeout,
    body_limit: impl FnOnce(&Request) -> (usize, Duration),
) -> Result<Request, Bad> {
    let mut deadline = Instant::now() + READ_TIMEOUT;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let (head_end, body_start) = loop {
        if let Some(e) = find_head_end(&buf) {
            break e;
        }
        if buf.len() >= MAX_HEAD {
            return Err(Bad::HeadTooLarge);
        }
        read_some(s, &mut buf, &mut chunk, deadline)?;
    };
    if head_end > MAX_HEAD {
        return Err(Bad::HeadTooLarge);
    }
    let mut req = parse_head(&buf[..head_end])?;
    if req.header("transfer-encoding").is_some() {
        return Err(Bad::TransferCoding);
    }
    let len = match req.header("content-length") {
        None => 0,
        Some(v) => v.trim().parse::<usize>().map_err(|_| {
            Bad::Malformed(format!("Content-Length {:?} is not a number", truncate(v)))
        })?,
    };
    let (max, more) = body_limit(&req);
    if len > max {
        return Err(Bad::BodyTooLarge(max));
    }
    deadline += more;
    let mut body = buf.split_off(body_start);
    while body.len() < len {
        read_some(s, &mut body, &mut chunk, deadline)?;
    }
    body.truncate(len);
    req.body = body;
    Ok(req)
}

/// A stream whose reads can be bounded in time (a `TcpStream`; a test's in-memory stream).
pub trait ReadTimeout: Read {
    /// Set the read timeout.
    fn set_timeout(&mut self, t: Duration) -> std::io::Result<()>;
}

impl ReadTimeout for TcpStream {
    fn set_timeout(&mut self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
}

fn read_some(
    s: &mut impl ReadTimeout,
    buf: &mut Vec<u8>,
    chunk: &mut [u8],
    deadline: Instant,
) -> Result<(), Bad> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_timeout(left).is_err() {
            return Err(Bad::Gone);
        }
        match s.read(chunk) {
            Ok(0) => return Err(Bad::Gone),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(Bad::Gone),
        }
    }
}

/// Where the head ends and the body starts: the first empty line (CRLF CRLF; a bare LF is
/// accepted as a line terminator, RFC 9112 §2.2).
fn find_head_end(b: &[u8]) -> Option<(usize, usize)> {
    (0..b.len()).find_map(|i| {
        if b[i..].starts_with(b"\r\n\r\n") {
            Some((i, i + 4))
        } else if b[i..].starts_with(b"\n\n") {
            Some((i, i + 2))
        } else {
            None
        }
    })
}

/// Parses a request head (request line and header fields).
pub fn parse_head(head: &[u8]) -> Result<Request, Bad> {
    let text = std::str::from_utf8(head)
        .map_err(|_| Bad::Malformed("the request head is not UTF-8 text".into()))?;
    let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
    let line = lines.next().unwrap_or("");
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
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if !path.starts_with('/') {
        return Err(Bad::Malformed(format!(
            "target {:?} is not an absolute path",
            truncate(target)
        )));
    }
    let mut headers = Vec::new();
    for l in lines {
        if l.is_empty() {
            continue;
        }
        let Some((name, value)) = l.split_once(':') else {
            return Err(Bad::Malformed(format!(
                "header line {:?} has no colon",
                truncate(l)
            )));
        };
        if name.is_empty() || name.contains(' ') {
            return Err(Bad::Malformed(format!("header name {:?}", truncate(name))));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(Request {
        method: method.into(),
        path: path.into(),
        query: query.split('#').next().unwrap_or("").into(),
        headers,
        body: Vec::new(),
    })
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// A response; always sent with `Connection: close`.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Content-Type.
    pub content_type: &'static str,
    /// More header fields.
    pub extra: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A plain-text response.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            extra: Vec::new(),
            body: body.into().into_bytes(),
        }
    }

    /// A JSON response.
    pub fn json(status: u16, v: &serde_json::Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            extra: Vec::new(),
            body: v.to_string().into_bytes(),
        }
    }

    /// A JSON error `{"error": message}`.
    pub fn error(status: u16, message: impl Into<String>) -> Response {
        Response::json(status, &serde_json::json!({ "error": message.into() }))
    }

    /// With one more header field.
    pub fn with(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.extra.push((name, value.into()));
        self
    }
}

/// The reason phrase of a status.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Internal Server Error",
    }
}

/// Security header fields on every response: no framing (clickjacking), no sniffing, nothing
/// loaded from anywhere but this server, no referrer leaving it.
pub const SECURITY_HEADERS: &str = "X-Content-Type-Options: nosniff\r\n\
X-Frame-Options: DENY\r\n\
Referrer-Policy: no-referrer\r\n\
Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'\r\n";

/// The head of a response (status line and header fields, ending with the empty line).
pub fn head(
    status: u16,
    content_type: &str,
    len: Option<usize>,
    extra: &[(&str, String)],
) -> String {
    let mut h = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nConnection: close\r\n{SECURITY_HEADERS}",
        reason(status)
    );
    if let Some(n) = len {
        h.push_str(&format!("Content-Length: {n}\r\n"));
    }
    for (k, v) in extra {
        // Header values are ours; a line break in one would split the response.
        let v: String = v.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str("\r\n");
    h
}

/// Sends `r` (errors: the client went away; nothing to do).
pub fn send(s: &mut TcpStream, r: &Response) -> std::io::Result<()> {
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let h = head(r.status, r.content_type, Some(r.body.len()), &r.extra);
    s.write_all(h.as_bytes())?;
    s.write_all(&r.body)?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    struct Mem(Cursor<Vec<u8>>);
    impl Read for Mem {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(b)
        }
    }
    impl ReadTimeout for Mem {
        fn set_timeout(&mut self, _: Duration) -> std::io::Result<()> {
            Ok(())
        }
    }
    fn read(b: &[u8]) -> Result<Request, Bad> {
        read_request(&mut Mem(Cursor::new(b.to_vec())))
    }

    #[test]
    fn a_route_may_take_a_larger_body_decided_from_the_head_and_query_text_is_decoded() {
        let body = "x".repeat(MAX_BODY + 10);
        let text = format!(
            "POST /api/foe/write?name=fw%20v2%2Fa.bin&p=%zz HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_eq!(
            read(text.as_bytes()).unwrap_err(),
            Bad::BodyTooLarge(MAX_BODY)
        );
        let r = read_request_with(&mut Mem(Cursor::new(text.into_bytes())), |h| {
            assert_eq!(h.path, "/api/foe/write");
            (MAX_BODY * 2, Duration::from_secs(1))
        })
        .unwrap();
        assert_eq!(r.body.len(), MAX_BODY + 10);
        assert_eq!(r.query_text("name").as_deref(), Some("fw v2/a.bin"));
        assert_eq!(r.query_text("p"), None, "not a percent escape");
        assert_eq!(r.query_text("q"), None);
    }

    #[test]
    fn a_post_with_a_body_and_cookies() {
        let r = read(b"POST /api/sdo/read?x=1 HTTP/1.1\r\nHost: a\r\nCookie: a=b; rtcat_session=abc\r\nContent-Length: 5\r\n\r\nhello").unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/api/sdo/read")
        );
        assert_eq!(r.query_param("x"), Some("1"));
        assert_eq!(r.cookie("rtcat_session"), Some("abc"));
        assert_eq!(r.cookie("c"), None);
        assert_eq!(r.body, b"hello");
    }

    #[test]
    fn bad_requests_get_a_status_not_a_panic() {
        let cases: [(&[u8], u16); 7] = [
            (b"GARBAGE\r\n\r\n", 400),
            (b"GET / HTTP/2\r\n\r\n", 400),
            (b"get / HTTP/1.1\r\n\r\n", 400),
            (b"GET nopath HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                501,
            ),
        ];
        for (raw, want) in cases {
            let e = read(raw).unwrap_err();
            assert_eq!(
                e.answer().unwrap().0,
                want,
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        let big = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert_eq!(
            read(big.as_bytes()).unwrap_err(),
            Bad::BodyTooLarge(MAX_BODY)
        );
        let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(read(long.as_bytes()).unwrap_err(), Bad::HeadTooLarge);
        assert_eq!(read(b"GET / HTTP/1.1\r\n").unwrap_err(), Bad::Gone);
        // A body shorter than announced: the client went away.
        assert_eq!(
            read(b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc").unwrap_err(),
            Bad::Gone
        );
    }

    #[test]
    fn header_values_cannot_split_the_response() {
        let h = head(
            200,
            "text/plain",
            Some(0),
            &[("X-A", "a\r\nSet-Cookie: x=1".into())],
        );
        assert!(!h.contains("\r\nSet-Cookie"));
    }
}
