//! Loopback traffic: a TCP stream or UDP datagrams on 127.0.0.1 only, paced to `--net-mbit`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Ctl;

/// Sleeps until `sent` bytes are allowed at `rate` bytes/s since `t0` (in steps of at most 20 ms).
fn pace(c: &Ctl, t0: Instant, sent: u64, rate: f64) -> bool {
    loop {
        if c.done() {
            return false;
        }
        let due = t0 + Duration::from_secs_f64(sent as f64 / rate);
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(20)));
    }
}

/// The socket timeout (50 ms) ran out: not an error, the worker checks its deadline and goes on.
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

pub(super) fn tcp_rx_worker(c: &Ctl, listener: TcpListener) {
    if let Err(e) = listener.set_nonblocking(true) {
        c.error(format!("net: {e}"));
        return;
    }
    let mut conn = loop {
        if c.done() {
            return;
        }
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => {
                c.error(format!("net: accept: {e}"));
                return;
            }
        }
    };
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 64 << 10];
    while !c.done() {
        match conn.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                c.counters
                    .net_received
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if timed_out(&e) => {}
            Err(e) => {
                c.error(format!("net: recv: {e}"));
                return;
            }
        }
    }
}

pub(super) fn tcp_tx_worker(c: &Ctl, addr: std::net::SocketAddr, rate: f64) {
    let mut s = match TcpStream::connect(addr) {
        Ok(s) => s,
        Err(e) => {
            c.error(format!("net: connect {addr}: {e}"));
            return;
        }
    };
    let _ = s.set_write_timeout(Some(Duration::from_millis(50)));
    let buf = vec![0x5Au8; 16 << 10];
    let t0 = Instant::now();
    let mut sent = 0u64;
    while pace(c, t0, sent + buf.len() as u64, rate) {
        match s.write(&buf) {
            Ok(n) => {
                sent += n as u64;
                c.counters.net_sent.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if timed_out(&e) => {}
            Err(e) => {
                c.error(format!("net: send: {e}"));
                return;
            }
        }
    }
}

pub(super) fn udp_rx_worker(c: &Ctl, s: UdpSocket) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 2048];
    while !c.done() {
        if let Ok(n) = s.recv(&mut buf) {
            c.counters
                .net_received
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

pub(super) fn udp_tx_worker(c: &Ctl, to: std::net::SocketAddr, rate: f64) {
    let s = match UdpSocket::bind("127.0.0.1:0") {
        Ok(s) => s,
        Err(e) => {
            c.error(format!("net: bind: {e}"));
            return;
        }
    };
    let buf = vec![0xA5u8; 1472];
    let t0 = Instant::now();
    let mut sent = 0u64;
    while pace(c, t0, sent + buf.len() as u64, rate) {
        match s.send_to(&buf, to) {
            Ok(n) => {
                sent += n as u64;
                c.counters.net_sent.fetch_add(n as u64, Ordering::Relaxed);
            }
            // a full receive buffer on loopback: count as sent-attempt, keep pacing
            Err(_) => sent += buf.len() as u64,
        }
    }
}
