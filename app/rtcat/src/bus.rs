//! Moving ethercrab's frames: a [`Link`] (the simulated segment in-process, or an AF_PACKET
//! socket) and the [`Bus`] that pumps frames between ethercrab's PduTx/PduRx and the link.
//!
//! Lost and late frames never stop the bus: a response ethercrab no longer waits for is counted
//! and dropped (the stock ethercrab tasks exit on it, upstream issue #293).

use ecsim::SimPort;
use ecsim::wire::{PacketKind, PacketSocket, wait_fds};
use ethercrab::{PduRx, PduTx};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Wake, Waker};
use std::time::Duration;

use crate::clock::now_ns;

/// Largest Ethernet frame handled.
pub const MAX_FRAME: usize = 1536;

/// Something frames can be sent on and received from.
pub trait Link: Send {
    /// Send one complete Ethernet frame.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Receive one frame if one is ready (never blocks).
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Block until a frame may be ready, `extra_fd` is readable, or `timeout` passed.
    fn wait(&mut self, timeout: Duration, extra_fd: Option<RawFd>) -> io::Result<()>;
    /// Short description for logs.
    fn describe(&self) -> String;
}

/// The in-process simulated segment as a link: processing happens inside `send`.
pub struct SimLink {
    pub port: SimPort,
}

impl Link for SimLink {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        self.port.send(frame);
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(self.port.recv(buf))
    }

    fn wait(&mut self, timeout: Duration, extra_fd: Option<RawFd>) -> io::Result<()> {
        let until_due = self
            .port
            .next_due_ns()
            .map(|due| Duration::from_nanos(due.saturating_sub(self.port.now_ns())));
        let t = until_due.map_or(timeout, |d| d.min(timeout));
        match extra_fd {
            Some(fd) => wait_fds(&[fd], Some(t)).map(drop),
            None => {
                std::thread::sleep(t);
                Ok(())
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "in-process simulated segment ({} subdevices)",
            self.port.segment().devices().len()
        )
    }
}

/// An AF_PACKET socket on a real (or veth) interface.
pub struct SocketLink {
    pub sock: PacketSocket,
}

impl Link for SocketLink {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let n = self.sock.send(frame)?;
        if n != frame.len() {
            return Err(io::Error::other(format!(
                "short send: {n} of {} bytes",
                frame.len()
            )));
        }
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            match self.sock.recv(buf)? {
                Some((_, PacketKind::Outgoing)) => continue,
                Some((n, PacketKind::Incoming)) => return Ok(Some(n)),
                None => return Ok(None),
            }
        }
    }

    fn wait(&mut self, timeout: Duration, extra_fd: Option<RawFd>) -> io::Result<()> {
        let fd = self.sock.as_raw_fd();
        match extra_fd {
            Some(e) => wait_fds(&[fd, e], Some(timeout)).map(drop),
            None => wait_fds(&[fd], Some(timeout)).map(drop),
        }
    }

    fn describe(&self) -> String {
        format!("AF_PACKET on {}", self.sock.iface())
    }
}

/// Counters of the bus, readable from any thread.
#[derive(Debug, Default)]
pub struct BusCounters {
    pub sent: AtomicU64,
    pub received: AtomicU64,
    /// Responses ethercrab did not accept (late after a timeout, or unknown index).
    pub rx_rejected: AtomicU64,
    pub send_errors: AtomicU64,
    pub recv_errors: AtomicU64,
    /// Monotonic time of the first frame sent / last frame received in the current cycle.
    pub first_tx_ns: AtomicU64,
    pub last_rx_ns: AtomicU64,
}

/// ethercrab's TX/RX handles plus a link.
pub struct Bus {
    pub tx: PduTx<'static>,
    pub rx: PduRx<'static>,
    pub link: Box<dyn Link>,
    pub counters: Arc<BusCounters>,
    buf: Box<[u8; MAX_FRAME]>,
}

impl Bus {
    pub fn new(tx: PduTx<'static>, rx: PduRx<'static>, link: Box<dyn Link>) -> Self {
        Bus {
            tx,
            rx,
            link,
            counters: Arc::new(BusCounters::default()),
            buf: Box::new([0; MAX_FRAME]),
        }
    }

    /// Send every frame ethercrab queued. A send error leaves the frame to ethercrab's timeout.
    pub fn pump_tx(&mut self) -> usize {
        let mut n = 0;
        while let Some(frame) = self.tx.next_sendable_frame() {
            let link = &mut self.link;
            let r = frame.send_blocking(|data| {
                link.send(data)
                    .map(|_| data.len())
                    .map_err(|_| ethercrab::error::Error::SendFrame)
            });
            match r {
                Ok(_) => {
                    if self.counters.first_tx_ns.load(Ordering::Relaxed) == 0 {
                        self.counters.first_tx_ns.store(now_ns(), Ordering::Relaxed);
                    }
                    self.counters.sent.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                Err(_) => {
                    // The claim was released; retrying now would spin on a dead link.
                    self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
        n
    }

    /// Hand every received frame to ethercrab.
    pub fn pump_rx(&mut self) -> usize {
        let mut n = 0;
        loop {
            match self.link.recv(&mut self.buf[..]) {
                Ok(Some(len)) => {
                    n += 1;
                    self.counters.received.fetch_add(1, Ordering::Relaxed);
                    self.counters.last_rx_ns.store(now_ns(), Ordering::Relaxed);
                    if self.rx.receive_frame(&self.buf[..len]).is_err() {
                        self.counters.rx_rejected.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(None) => return n,
                Err(_) => {
                    self.counters.recv_errors.fetch_add(1, Ordering::Relaxed);
                    return n;
                }
            }
        }
    }
}

impl BusCounters {
    /// Forget the per-cycle round-trip timestamps.
    #[inline]
    pub fn start_cycle(&self) {
        self.first_tx_ns.store(0, Ordering::Relaxed);
        self.last_rx_ns.store(0, Ordering::Relaxed);
    }

    /// Round trip of the current cycle: first frame out to last frame in.
    #[inline]
    pub fn cycle_rtt_ns(&self) -> Option<u64> {
        let a = self.first_tx_ns.load(Ordering::Relaxed);
        let b = self.last_rx_ns.load(Ordering::Relaxed);
        (a != 0 && b >= a).then(|| b - a)
    }
}

/// Wakes a parked thread (the cyclic thread in `txrx = "thread"` mode).
pub struct ThreadWaker(pub std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Wakes the TX/RX thread through an eventfd (usable from any thread, no allocation).
struct EventFdWaker(std::os::fd::OwnedFd);

impl Wake for EventFdWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to an eventfd we own.
        unsafe {
            libc::write(
                self.0.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }
}

fn new_eventfd() -> io::Result<std::os::fd::OwnedFd> {
    // SAFETY: eventfd returns a new fd or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// A TX/RX thread: pumps frames until stopped, then gives the bus back.
pub struct TxRxThread {
    stop: Arc<AtomicBool>,
    waker: Waker,
    handle: std::thread::JoinHandle<Bus>,
}

/// How a TX/RX thread is set up.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadRt {
    pub cpu: Option<usize>,
    pub fifo_priority: Option<u8>,
}

impl TxRxThread {
    pub fn spawn(mut bus: Bus, rt: ThreadRt) -> anyhow::Result<Self> {
        let efd = Arc::new(EventFdWaker(new_eventfd()?));
        let efd_raw = efd.0.as_raw_fd();
        let waker = Waker::from(efd.clone());
        // Register before the thread starts: a frame queued in between must wake it, not a
        // waker left over from an earlier phase.
        bus.tx.replace_waker(&waker);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let waker2 = waker.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
        let handle = std::thread::Builder::new()
            .name("rtcat-txrx".into())
            .spawn(move || {
                let setup = (|| -> anyhow::Result<()> {
                    if let Some(cpu) = rt.cpu {
                        crate::rt::pin_to(cpu)?;
                    }
                    if let Some(p) = rt.fifo_priority {
                        crate::rt::set_fifo(p)?;
                    }
                    Ok(())
                })();
                let ok = setup.is_ok();
                let _ = ready_tx.send(setup);
                if !ok {
                    return bus;
                }
                let _keep = efd;
                let mut drain = [0u8; 8];
                while !stop2.load(Ordering::Acquire) && !bus.tx.should_exit() {
                    bus.tx.replace_waker(&waker2);
                    bus.pump_tx();
                    bus.pump_rx();
                    let _ = bus.link.wait(Duration::from_millis(5), Some(efd_raw));
                    // SAFETY: reading the eventfd counter into an 8-byte buffer.
                    unsafe { libc::read(efd_raw, drain.as_mut_ptr() as *mut libc::c_void, 8) };
                }
                bus
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = handle.join();
                return Err(e.context("TX/RX thread setup"));
            }
            Err(_) => anyhow::bail!("TX/RX thread died during setup"),
        }
        Ok(TxRxThread {
            stop,
            waker,
            handle,
        })
    }

    /// Stop the thread and take the bus back.
    pub fn stop(self) -> Bus {
        self.stop.store(true, Ordering::Release);
        self.waker.wake_by_ref();
        // A panic in the TX/RX loop is a bug; propagate it.
        self.handle.join().expect("TX/RX thread panicked")
    }
}
