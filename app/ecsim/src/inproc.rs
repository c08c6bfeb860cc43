//! In-process transport: a TX/RX driver that hands ethercrab's frames straight to the simulated
//! chain. No root, no NIC.
//!
//! [`InprocDriver::poll`] does one pass (send every queued frame, deliver every due response) and
//! can be called inline by the thread that awaits the response, with no hand-off between threads;
//! [`InprocDriver::run`] is the same pass in a loop on a thread of its own, woken by ethercrab.

use crate::port::{MAX_FRAME, SimPort};
use ethercrab::{PduRx, PduTx};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::thread::{self, Thread};
use std::time::Duration;

/// Counters of the driver itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    pub sent: u64,
    pub received: u64,
    /// Responses ethercrab refused (typically a late response to a frame that already timed out).
    pub rx_errors: u64,
}

pub struct InprocDriver<'sto> {
    tx: PduTx<'sto>,
    rx: PduRx<'sto>,
    port: SimPort,
    buf: Box<[u8; MAX_FRAME]>,
    stats: DriverStats,
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

impl<'sto> InprocDriver<'sto> {
    pub fn new(tx: PduTx<'sto>, rx: PduRx<'sto>, port: SimPort) -> Self {
        Self {
            tx,
            rx,
            port,
            buf: Box::new([0; MAX_FRAME]),
            stats: DriverStats::default(),
        }
    }

    pub fn port(&self) -> &SimPort {
        &self.port
    }

    pub fn port_mut(&mut self) -> &mut SimPort {
        &mut self.port
    }

    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// Register the waker ethercrab calls when a frame is ready to send.
    pub fn replace_waker(&self, waker: &Waker) {
        self.tx.replace_waker(waker);
    }

    /// True once the MainDevice released the PDU loop (`release_all`).
    pub fn should_exit(&self) -> bool {
        self.tx.should_exit()
    }

    /// One pass: every sendable frame into the segment, every due response back to ethercrab.
    /// Returns whether anything moved.
    pub fn poll(&mut self) -> bool {
        let mut moved = false;
        while let Some(frame) = self.tx.next_sendable_frame() {
            let port = &mut self.port;
            // The segment consumes the frame whatever happens to it: the wire "sent" it.
            let _ = frame.send_blocking(|data| {
                port.send(data);
                Ok(data.len())
            });
            self.stats.sent += 1;
            moved = true;
        }
        while let Some(n) = self.port.recv(&mut self.buf[..]) {
            self.stats.received += 1;
            if self.rx.receive_frame(&self.buf[..n]).is_err() {
                self.stats.rx_errors += 1;
            }
            moved = true;
        }
        moved
    }

    /// Drive the loop on the current thread until the MainDevice releases it; gives the handles
    /// back (reset for reuse) so a new MainDevice can be built on them after a re-initialisation.
    pub fn run(mut self) -> (PduTx<'sto>, PduRx<'sto>, SimPort) {
        let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
        loop {
            self.tx.replace_waker(&waker);
            if self.tx.should_exit() {
                break;
            }
            if self.poll() {
                continue;
            }
            match self.port.next_due_ns() {
                Some(due) => {
                    let now = self.port.now_ns();
                    thread::park_timeout(Duration::from_nanos(due.saturating_sub(now)));
                }
                None => thread::park(),
            }
        }
        (self.tx.release(), self.rx.release(), self.port)
    }
}
