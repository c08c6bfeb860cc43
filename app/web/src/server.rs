//! The HTTP server: hyper's HTTP/1.1 (one request per connection) on a single-threaded tokio
//! runtime, with the limits a page on a machine's maintenance port needs — connections at
//! once and per address, the head's size and time (hyper: `max_buf_size`,
//! `header_read_timeout`), the body's (`http::read`), and a time for every write
//! ([`WriteTimeout`]). The handlers block (the control socket, the shared image): they run on
//! tokio's blocking threads, never on the runtime's.

use crate::api::{self, App};
use crate::http::{self, Response};
use crate::live::lock;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The server's limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub connections: usize,
    /// Connections of one address at once.
    pub per_peer: usize,
    /// Time for the request head, and then for its body.
    pub read: Duration,
    /// Time for one write of the response.
    pub write: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            // Five technicians with a live view each and their requests.
            connections: 64,
            per_peer: 16,
            read: http::READ_TIMEOUT,
            write: http::WRITE_TIMEOUT,
        }
    }
}

/// Connections over the limit answered with 503 at once; beyond, they are closed unanswered.
const MAX_REFUSING: usize = 16;
/// Time a refused connection has to send its head and take the 503.
const REFUSE_TIME: Duration = Duration::from_secs(1);

/// The connections open, in all and per address.
#[derive(Default)]
struct Open {
    all: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// One connection's place in [`Open`], given back when dropped.
struct Slot {
    open: Arc<Mutex<Open>>,
    ip: IpAddr,
}

impl Slot {
    fn take(open: &Arc<Mutex<Open>>, ip: IpAddr, limits: &Limits) -> Option<Slot> {
        let mut o = lock(open);
        let per = o.per_peer.get(&ip).copied().unwrap_or(0);
        if o.all >= limits.connections || per >= limits.per_peer {
            return None;
        }
        o.all += 1;
        *o.per_peer.entry(ip).or_insert(0) += 1;
        Some(Slot {
            open: open.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut o = lock(&self.open);
        o.all -= 1;
        if let Some(n) = o.per_peer.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                o.per_peer.remove(&self.ip);
            }
        }
    }
}

/// Serves `listener` for `app` until the program ends (call it on a tokio runtime with I/O
/// and time enabled).
pub async fn run(listener: TcpListener, app: Arc<App>, limits: Limits) {
    let open: Arc<Mutex<Open>> = Arc::default();
    let refusing = Arc::new(AtomicUsize::new(0));
    loop {
        let (s, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(_) => {
                // Out of descriptors or memory, or the client reset first: again shortly
                // (accept would fail at once again, in a busy loop).
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ip = peer.ip();
        let Some(slot) = Slot::take(&open, ip, &limits) else {
            refuse(s, &refusing);
            continue;
        };
        let (app, limits) = (app.clone(), limits.clone());
        tokio::spawn(async move {
            let _slot = slot;
            connection(app, s, ip, &limits).await;
        });
    }
}

fn builder(limits: &Limits) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.read)
        .max_buf_size(http::MAX_HEAD)
        .keep_alive(false);
    b
}

/// Answers a connection over the limit with 503, within [`REFUSE_TIME`].
fn refuse(s: TcpStream, refusing: &Arc<AtomicUsize>) {
    if refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
        refusing.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let refusing = refusing.clone();
    tokio::spawn(async move {
        let limits = Limits {
            read: REFUSE_TIME,
            write: REFUSE_TIME,
            ..Limits::default()
        };
        let io = TokioIo::new(WriteTimeout::new(s, REFUSE_TIME));
        let svc = service_fn(|_| async {
            Ok::<_, io::Error>(
                Response::error(503, "too many connections")
                    .with("Retry-After", "1")
                    .into_hyper(),
            )
        });
        let conn = builder(&limits).serve_connection(io, svc);
        let _ = tokio::time::timeout(REFUSE_TIME, conn).await;
        refusing.fetch_sub(1, Ordering::AcqRel);
    });
}

async fn connection(app: Arc<App>, s: TcpStream, ip: IpAddr, limits: &Limits) {
    let io = TokioIo::new(WriteTimeout::new(s, limits.write));
    let read = limits.read;
    let svc = service_fn(move |req| respond(app.clone(), req, ip, read));
    // Errors: the client went away, was too slow, or sent no HTTP (hyper answered a
    // malformed head with 400 and a too long one with 431 already).
    let _ = builder(limits).serve_connection(io, svc).await;
}

/// The upload slot [`api::body_limit`] may take, given back however the request ends.
struct Upload {
    app: Arc<App>,
    took: bool,
}

impl Drop for Upload {
    fn drop(&mut self) {
        if self.took {
            api::upload_done(&self.app);
        }
    }
}

/// One request: read under the limits, answered by the handlers on a blocking thread.
async fn respond(
    app: Arc<App>,
    req: hyper::Request<Incoming>,
    ip: IpAddr,
    read: Duration,
) -> io::Result<hyper::Response<http::Body>> {
    let mut upload = Upload {
        app: app.clone(),
        took: false,
    };
    let req = http::read(req, read, |head| {
        api::body_limit(&app, head, &mut upload.took)
    })
    .await;
    let req = match req {
        Ok(r) => r,
        Err(bad) => {
            return match bad.answer() {
                Some((status, text)) => Ok(Response::error(status, text).into_hyper()),
                None => Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the client went away",
                )),
            };
        }
    };
    let app2 = app.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let a = api::handle(&app2, &req, ip);
        // The file is sent (or refused): the next upload may come.
        drop((req, upload));
        a
    })
    .await;
    Ok(match answer {
        Ok(api::Answer::Now(r)) => r.into_hyper(),
        Ok(api::Answer::Live(id)) => api::live_stream(app, id),
        Err(_) => Response::error(500, "the request's handler failed").into_hyper(),
    })
}

/// A stream whose every write must make progress within a time (hyper has no write timeout):
/// a client that stops reading loses its connection instead of holding it forever.
pub struct WriteTimeout<S> {
    io: S,
    limit: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteTimeout<S> {
    /// `io` with writes bounded by `limit`.
    pub fn new(io: S, limit: Duration) -> WriteTimeout<S> {
        WriteTimeout {
            io,
            limit,
            sleep: None,
        }
    }

    /// A pending write: an error once the time is over.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took nothing for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn done<T>(&mut self, r: io::Result<T>) -> Poll<io::Result<T>> {
        self.sleep = None;
        Poll::Ready(r)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match Pin::new(&mut me.io).poll_write(cx, b) {
            Poll::Ready(r) => me.done(r),
            Poll::Pending => me.pending(cx),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.io).poll_flush(cx) {
            Poll::Ready(r) => me.done(r),
            Poll::Pending => me.pending(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.io).poll_shutdown(cx) {
            Poll::Ready(r) => me.done(r),
            Poll::Pending => me.pending(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::SocketAddr;
    use std::time::Instant;

    fn start(limits: Limits) -> (SocketAddr, Arc<App>) {
        let app = Arc::new(crate::api::tests::app());
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        l.set_nonblocking(true).unwrap();
        let a = app.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(async move { run(TcpListener::from_std(l).unwrap(), a, limits).await });
        });
        (addr, app)
    }

    fn fast() -> Limits {
        Limits {
            read: Duration::from_millis(300),
            ..Limits::default()
        }
    }

    fn connect(addr: SocketAddr) -> std::net::TcpStream {
        let s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Sends `raw`, reads the answer until the server closes.
    fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
        let mut s = connect(addr);
        s.write_all(raw).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn status(answer: &str) -> u16 {
        answer
            .strip_prefix("HTTP/1.1 ")
            .and_then(|a| a.get(..3))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {answer:?}"))
    }

    #[test]
    fn bad_requests_get_a_4xx_and_good_ones_the_security_fields() {
        let (addr, _app) = start(fast());
        let long = format!(
            "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(http::MAX_HEAD)
        );
        let big = format!(
            "POST /api/login HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
            http::MAX_BODY + 1
        );
        let cases: [(&[u8], u16); 8] = [
            (b"GARBAGE\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n", 400),
            (long.as_bytes(), 431),
            (big.as_bytes(), 413),
            (
                b"POST /api/login HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                501,
            ),
            (b"get / HTTP/1.1\r\nHost: a\r\n\r\n", 405),
            (b"GET /nothing HTTP/1.1\r\nHost: a\r\n\r\n", 404),
        ];
        for (raw, want) in cases {
            let a = exchange(addr, raw);
            let head = String::from_utf8_lossy(&raw[..raw.len().min(60)]);
            assert_eq!(status(&a), want, "{head}: {a}");
        }
        let a = exchange(addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(status(&a), 200);
        let a = a.to_ascii_lowercase();
        for field in [
            "connection: close",
            "x-frame-options: deny",
            "x-content-type-options: nosniff",
            "content-security-policy: default-src 'self'",
            "referrer-policy: no-referrer",
        ] {
            assert!(a.contains(field), "{field}: {a}");
        }
    }

    /// Timing-dependent: the bounds are ten times the limits (a loaded machine).
    #[test]
    fn a_slow_client_loses_its_connection() {
        let (addr, _app) = start(fast());
        for partial in [&b""[..], b"GET / HTTP/1.1\r\nHost: a\r\n"] {
            let t = Instant::now();
            let a = exchange(addr, partial);
            assert!(
                t.elapsed() < Duration::from_secs(3),
                "{:?}: closed after {:?} ({a})",
                String::from_utf8_lossy(partial),
                t.elapsed()
            );
        }
        // A body that does not come: 408 once the time is over.
        let t = Instant::now();
        let a = exchange(
            addr,
            b"POST /api/login HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\nab",
        );
        assert_eq!(status(&a), 408, "{a}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }

    #[test]
    fn connections_beyond_the_limit_get_503_until_one_closes() {
        let (addr, _app) = start(Limits {
            connections: 2,
            ..Limits::default()
        });
        let held: Vec<_> = (0..2)
            .map(|_| {
                let mut s = connect(addr);
                s.write_all(b"GET / HTTP/1.1\r\n").unwrap();
                s
            })
            .collect();
        // The server takes both before the third (accepted in order).
        std::thread::sleep(Duration::from_millis(200));
        let a = exchange(addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(status(&a), 503, "{a}");
        assert!(a.to_ascii_lowercase().contains("retry-after: 1"), "{a}");
        drop(held);
        let t = Instant::now();
        loop {
            let a = exchange(addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
            if status(&a) == 200 {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "slots not given back: {a}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Logs in over HTTP: the cookie (`name=value`) and the CSRF token.
    fn login(addr: SocketAddr) -> (String, String) {
        let body = r#"{"user":"engineer","password":"bbbbbbbbbbbb"}"#;
        let a = exchange(
            addr,
            format!(
                "POST /api/login HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
        assert_eq!(status(&a), 200, "{a}");
        let lower = a.to_ascii_lowercase();
        let at = lower.find("set-cookie: ").expect("a cookie") + 12;
        let cookie = a[at..].split(';').next().unwrap().to_string();
        assert!(
            lower.contains("httponly") && lower.contains("samesite=strict"),
            "{a}"
        );
        let json = &a[a.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        (cookie, v["csrf"].as_str().unwrap().to_string())
    }

    #[test]
    fn the_live_stream_sends_frames_and_ends_with_the_session() {
        let (addr, app) = start(fast());
        let (cookie, csrf) = login(addr);
        let mut s = connect(addr);
        write!(
            s,
            "GET /api/live HTTP/1.1\r\nHost: a\r\nCookie: {cookie}\r\n\r\n"
        )
        .unwrap();
        let mut seen = Vec::new();
        fn wait_for(s: &mut std::net::TcpStream, seen: &mut Vec<u8>, what: &str) {
            let mut chunk = [0u8; 4096];
            while !String::from_utf8_lossy(seen).contains(what) {
                let n = s.read(&mut chunk).unwrap();
                let text = String::from_utf8_lossy(seen);
                assert!(n > 0, "closed before {what:?}: {text}");
                seen.extend_from_slice(&chunk[..n]);
            }
        }
        wait_for(
            &mut s,
            &mut seen,
            "event: live\ndata: {\"error\":\"not polled yet\"",
        );
        assert_eq!(app.live.subscribers.load(Ordering::Relaxed), 1);
        let head = String::from_utf8_lossy(&seen).to_ascii_lowercase();
        assert!(head.contains("content-type: text/event-stream"), "{head}");
        let a = exchange(
            addr,
            format!("POST /api/logout HTTP/1.1\r\nHost: a\r\nCookie: {cookie}\r\nX-CSRF-Token: {csrf}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
        );
        assert_eq!(status(&a), 200, "{a}");
        app.live.publish(&serde_json::json!({"up": true}));
        wait_for(&mut s, &mut seen, "event: ended");
        let t = Instant::now();
        while app.live.subscribers.load(Ordering::Relaxed) != 0 {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the stream's count stays"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn an_upload_takes_the_larger_limit_and_gives_its_slot_back_however_it_ends() {
        let (addr, app) = start(fast());
        let (cookie, csrf) = login(addr);
        let big = http::MAX_BODY * 4;
        let head = |len: usize| {
            format!(
                "POST /api/foe/write?position=0&name=a.bin HTTP/1.1\r\nHost: a\r\nCookie: {cookie}\r\nX-CSRF-Token: {csrf}\r\nContent-Length: {len}\r\n\r\n"
            )
        };
        // Without the token: the small limit.
        let a = exchange(
            addr,
            format!("POST /api/foe/write HTTP/1.1\r\nHost: a\r\nCookie: {cookie}\r\nContent-Length: {big}\r\n\r\n").as_bytes(),
        );
        assert_eq!(status(&a), 413, "{a}");
        // With it: the body is taken while the client sends (half of it, then it goes away).
        let mut s = connect(addr);
        s.write_all(head(big).as_bytes()).unwrap();
        s.write_all(&vec![0u8; big / 2]).unwrap();
        let t = Instant::now();
        while !app.upload.load(Ordering::Acquire) {
            assert!(t.elapsed() < Duration::from_secs(5), "no upload slot taken");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(s);
        while app.upload.load(Ordering::Acquire) {
            assert!(t.elapsed() < Duration::from_secs(5), "the slot stays taken");
            std::thread::sleep(Duration::from_millis(10));
        }
        // A whole one reaches the handler (no master here: 503) and gives the slot back.
        let mut raw = head(big).into_bytes();
        raw.extend(vec![0u8; big]);
        let a = exchange(addr, &raw);
        assert_eq!(status(&a), 503, "{a}");
        assert!(!app.upload.load(Ordering::Acquire));
    }

    /// Timing-dependent: the bound is 25 times the limit.
    #[test]
    fn a_write_the_client_does_not_take_fails_after_the_write_time() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .unwrap();
        let (e, waited) = rt.block_on(async {
            let s = TcpStream::connect(addr).await.unwrap();
            // The peer is accepted and never reads.
            let _peer = l.accept().unwrap();
            let mut w = WriteTimeout::new(s, Duration::from_millis(200));
            let chunk = vec![0u8; 64 * 1024];
            let mut last = Instant::now();
            loop {
                let r = std::future::poll_fn(|cx| Pin::new(&mut w).poll_write(cx, &chunk)).await;
                match r {
                    Ok(_) => last = Instant::now(),
                    Err(e) => return (e, last.elapsed()),
                }
            }
        });
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    }
}
