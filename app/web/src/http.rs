//! The boundary between hyper and the page's handlers: a hyper request becomes a [`Request`]
//! (its body read under the limits below, the larger limit of an upload decided from the
//! head), a [`Response`] becomes a hyper response with the security header fields. The
//! protocol itself (parsing, framing, the head's size and time limits) is hyper's
//! (`crate::server` sets it up).

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::header::{HeaderName, HeaderValue};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Longest request head (request line and header fields): hyper's read buffer, which answers
/// a longer head with 431.
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request body (the largest is an SDO write: 64 bytes as hex in a small object).
pub const MAX_BODY: usize = 16 * 1024;
/// Time a client has to send its request head, and then its body.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to take one write of the response (a live stream's too).
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

/// Why a request was not taken: the status to answer with.
#[derive(Debug, PartialEq, Eq)]
pub enum Bad {
    /// 400 with the reason.
    Malformed(String),
    /// 413: the body exceeds its limit ([`MAX_BODY`], or a route's own).
    BodyTooLarge(usize),
    /// 501: a transfer coding (chunked bodies are not taken).
    TransferCoding,
    /// 408: the body did not come in time.
    TimedOut,
    /// The client went away: nothing to answer.
    Gone,
}

impl Bad {
    /// The status code and the text of the answer (None: none is sent).
    pub fn answer(&self) -> Option<(u16, String)> {
        Some(match self {
            Bad::Malformed(m) => (400, m.clone()),
            Bad::BodyTooLarge(max) => (413, format!("request body longer than {max} bytes")),
            Bad::TransferCoding => (
                501,
                "Transfer-Encoding is not supported: send the body with Content-Length".into(),
            ),
            Bad::TimedOut => (408, "the request body did not come in time".into()),
            Bad::Gone => return None,
        })
    }
}

/// The request `req` with its body, read within `timeout` plus the extra time `body_limit`
/// gives, and at most as long as the limit it decides from the head (an upload the session
/// may make: a file for a device).
pub async fn read<B>(
    req: hyper::Request<B>,
    timeout: Duration,
    body_limit: impl FnOnce(&Request) -> (usize, Duration),
) -> Result<Request, Bad>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    let (parts, mut body) = req.into_parts();
    let mut headers = Vec::with_capacity(parts.headers.len());
    for (name, value) in &parts.headers {
        let Ok(v) = std::str::from_utf8(value.as_bytes()) else {
            return Err(Bad::Malformed(format!(
                "header field {name}: the value is not UTF-8 text"
            )));
        };
        headers.push((name.as_str().to_string(), v.trim().to_string()));
    }
    let mut req = Request {
        method: parts.method.as_str().into(),
        path: parts.uri.path().into(),
        query: parts.uri.query().unwrap_or("").into(),
        headers,
        body: Vec::new(),
    };
    if req.header("transfer-encoding").is_some() {
        return Err(Bad::TransferCoding);
    }
    let len = match req.header("content-length") {
        None => 0,
        Some(v) => v.parse::<usize>().map_err(|_| {
            Bad::Malformed(format!("Content-Length {:?} is not a number", truncate(v)))
        })?,
    };
    let (max, more) = body_limit(&req);
    if len > max {
        return Err(Bad::BodyTooLarge(max));
    }
    let deadline = tokio::time::Instant::now() + timeout + more;
    let mut data = Vec::with_capacity(len);
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        match tokio::time::timeout_at(deadline, next).await {
            Err(_) => return Err(Bad::TimedOut),
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(Bad::Gone),
            Ok(Some(Ok(frame))) => {
                if let Ok(d) = frame.into_data() {
                    if data.len() + d.len() > len.min(max) {
                        return Err(Bad::BodyTooLarge(max));
                    }
                    data.extend_from_slice(&d);
                }
            }
        }
    }
    if data.len() != len {
        // Fewer bytes than announced and the end of the body: the client went away.
        return Err(Bad::Gone);
    }
    req.body = data;
    Ok(req)
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// A response of a handler; sent with `Connection: close` (one request per connection).
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

    /// The hyper response.
    pub fn into_hyper(self) -> hyper::Response<Body> {
        head(
            self.status,
            self.content_type,
            &self.extra,
            Body::Full(Some(Bytes::from(self.body))),
        )
    }
}

/// Security header fields on every response: no framing (clickjacking), no sniffing, nothing
/// loaded from anywhere but this server, no referrer leaving it.
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    (
        "content-security-policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
];

/// A hyper response: the status, the content type, `Connection: close`, the security header
/// fields and `extra`, with `body`.
pub fn head(
    status: u16,
    content_type: &str,
    extra: &[(&str, String)],
    body: Body,
) -> hyper::Response<Body> {
    let mut r = hyper::Response::new(body);
    *r.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    let fields = [("content-type", content_type), ("connection", "close")]
        .into_iter()
        .chain(SECURITY_HEADERS)
        .map(|(k, v)| (k, v.to_string()))
        .chain(extra.iter().map(|(k, v)| (*k, v.clone())));
    for (k, v) in fields {
        // Header values are ours; a line break in one would split the response: removed
        // (a value hyper still refuses is left out rather than failing the response).
        let v: String = v.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(&v),
        ) {
            h.append(k, v);
        }
    }
    r
}

/// A response body: all at once, or a stream (the live view's events) that ends when its
/// sender goes.
pub enum Body {
    /// The whole body (None once sent).
    Full(Option<Bytes>),
    /// Chunks as they come.
    Stream(tokio::sync::mpsc::Receiver<Bytes>),
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(rx) => rx.poll_recv(cx).map(|c| c.map(|c| Ok(Frame::data(c)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Stream(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn request(target: &str, headers: &[(&str, &str)], body: &[u8]) -> hyper::Request<Body> {
        let mut b = hyper::Request::builder().method("POST").uri(target);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Body::Full(Some(Bytes::copy_from_slice(body))))
            .unwrap()
    }

    fn small(_: &Request) -> (usize, Duration) {
        (MAX_BODY, Duration::ZERO)
    }

    #[test]
    fn a_route_may_take_a_larger_body_decided_from_the_head_and_query_text_is_decoded() {
        let body = vec![b'x'; MAX_BODY + 10];
        let len = body.len().to_string();
        let target = "/api/foe/write?name=fw%20v2%2Fa.bin&p=%zz";
        let h = [("content-length", len.as_str())];
        let e = run(read(request(target, &h, &body), READ_TIMEOUT, small));
        assert_eq!(e.unwrap_err(), Bad::BodyTooLarge(MAX_BODY));
        let r = run(read(request(target, &h, &body), READ_TIMEOUT, |h| {
            assert_eq!(h.path, "/api/foe/write");
            (MAX_BODY * 2, Duration::from_secs(1))
        }))
        .unwrap();
        assert_eq!(r.body.len(), MAX_BODY + 10);
        assert_eq!(r.query_text("name").as_deref(), Some("fw v2/a.bin"));
        assert_eq!(r.query_text("p"), None, "not a percent escape");
        assert_eq!(r.query_text("q"), None);
    }

    #[test]
    fn a_post_with_a_body_and_cookies() {
        let h = [
            ("cookie", "a=b; rtcat_session=abc"),
            ("content-length", "5"),
        ];
        let r = run(read(
            request("/api/sdo/read?x=1", &h, b"hello"),
            READ_TIMEOUT,
            small,
        ))
        .unwrap();
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
    fn bodies_beyond_the_limit_or_not_as_announced_are_refused() {
        let big = (MAX_BODY + 1).to_string();
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a [u8], Bad);
        let cases: [Case; 4] = [
            (
                &[("content-length", &big)],
                b"",
                Bad::BodyTooLarge(MAX_BODY),
            ),
            (
                &[("transfer-encoding", "chunked")],
                b"",
                Bad::TransferCoding,
            ),
            (&[("content-length", "9")], b"abc", Bad::Gone),
            // More than announced is not taken either.
            (
                &[("content-length", "2")],
                b"abc",
                Bad::BodyTooLarge(MAX_BODY),
            ),
        ];
        for (h, body, want) in cases {
            let got = run(read(request("/", h, body), READ_TIMEOUT, small));
            assert_eq!(got.unwrap_err(), want, "{h:?}");
        }
        assert_eq!(Bad::TransferCoding.answer().unwrap().0, 501);
        assert_eq!(Bad::TimedOut.answer().unwrap().0, 408);
    }

    #[test]
    fn a_body_that_does_not_come_in_time_is_refused() {
        let (_tx, rx) = tokio::sync::mpsc::channel(1);
        let mut req = hyper::Request::new(Body::Stream(rx));
        req.headers_mut()
            .insert("content-length", HeaderValue::from_static("3"));
        let t = std::time::Instant::now();
        let got = run(read(req, Duration::from_millis(100), small));
        assert_eq!(got.unwrap_err(), Bad::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn header_values_cannot_split_the_response_and_security_fields_are_on_every_one() {
        let r = Response::text(200, "x")
            .with("X-A", "a\r\nSet-Cookie: x=1")
            .into_hyper();
        assert!(r.headers().get("set-cookie").is_none());
        assert_eq!(r.headers()["x-a"], "aSet-Cookie: x=1");
        assert_eq!(r.headers()["x-frame-options"], "DENY");
        assert_eq!(r.headers()["connection"], "close");
        assert_eq!(r.body().size_hint().exact(), Some(1));
    }
}
