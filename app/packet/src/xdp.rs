//! An AF_XDP link: the master's EtherCAT frames through an XDP socket instead of a packet
//! socket. A small XDP program on the interface ([`bpf::program`]) redirects frames of
//! EtherType 0x88a4 into the socket before the kernel builds an skb for them; everything else
//! goes on to the stack. Frames are sent through the socket's TX ring. With a driver that
//! supports it (stmmac, the RK3588's GMAC driver: `stmmac_xdp.c`) the rings are zero-copy;
//! otherwise the kernel copies (veth, generic XDP) — still without the packet socket layer.
//!
//! Written on libc like the packet socket, no libbpf: the UMEM, the four rings and the bind
//! are the ABI of Documentation/networking/af_xdp.rst and include/uapi/linux/if_xdp.h; the
//! program and its attachment are in [`bpf`]. (xdpilone, the pure-Rust ring crate, was
//! considered: its licence is EUPL-1.2, copyleft, where every other crate rtcat ships is
//! permissive; the part it would replace is the ~150 lines of rings below.)
//!
//! Memory: one UMEM of [`FRAMES`] × [`FRAME_SIZE`] bytes (128 KiB), registered with the kernel,
//! which pins its pages (counted against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK);
//! half of it receives, half sends. Capabilities: CAP_NET_RAW (the socket), CAP_BPF and
//! CAP_NET_ADMIN (map, program, attaching it), or root. See SECURITY.md.
//!
//! The cycle path (`send`, `recv`, `wait`) allocates nothing: fixed rings, a fixed free list,
//! one `sendto` per sent frame (none in zero-copy mode unless the driver asks), no system call
//! per received frame.

pub mod bpf;

use crate::link::Link;
use crate::{MIN_FRAME_LEN, padded, wait_fds};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Size of one UMEM frame (chunk): the kernel's minimum for aligned chunks, room for any
/// Ethernet frame without jumbo.
pub const FRAME_SIZE: usize = 2048;
/// UMEM frames: the first half for the fill/RX side, the second for TX.
pub const FRAMES: usize = 64;
/// Entries of each ring (a power of two).
const RING: u32 = (FRAMES / 2) as u32;
/// Bytes the kernel pins for the UMEM.
pub const UMEM_BYTES: usize = FRAMES * FRAME_SIZE;
// Aligned chunks are a power of two of at least 2048 bytes (xdp_umem_reg); the ring indices are
// masked, so their size is a power of two; the two halves are the whole UMEM.
const _: () = assert!(FRAME_SIZE.is_power_of_two() && FRAME_SIZE >= 2048);
const _: () = assert!(RING.is_power_of_two() && RING as usize * 2 == FRAMES);

const AF_XDP: libc::c_int = 44;

/// How the XDP program is attached (the kernel's XDP modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Native if the driver supports it, else generic.
    Auto,
    /// In the driver (`XDP_FLAGS_DRV_MODE`): the fast path, and zero-copy where the driver can.
    Native,
    /// After the skb is built (`XDP_FLAGS_SKB_MODE`): any interface, always copying.
    Generic,
}

/// Where and how to open an [`XdpSocket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpOptions {
    /// The attach mode.
    pub mode: XdpMode,
    /// The receive queue the socket binds to. Non-IP frames land on queue 0 on the common
    /// NICs (RSS hashes IP headers); the program redirects from this queue only, frames on
    /// other queues pass to the stack.
    pub queue: u32,
}

impl Default for XdpOptions {
    fn default() -> Self {
        XdpOptions {
            mode: XdpMode::Auto,
            queue: 0,
        }
    }
}

/// What an open [`XdpSocket`] got from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpInfo {
    /// The program runs in the driver (false: generic XDP).
    pub native: bool,
    /// The rings are zero-copy (false: the kernel copies each frame).
    pub zero_copy: bool,
}

/// What the kernel counted on an [`XdpSocket`] (`struct xdp_statistics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XdpStatistics {
    /// Frames dropped for other reasons than the two below (too long, for instance).
    pub rx_dropped: u64,
    /// Invalid descriptors in the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors in the TX ring.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame came.
    pub rx_fill_ring_empty: u64,
}

/// `struct xdp_desc`: a frame in the UMEM (RX and TX rings).
#[repr(C)]
#[derive(Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    options: u32,
}

/// One mmapped ring shared with the kernel: producer and consumer indices (free-running u32),
/// the flags word (need-wakeup) and `size` entries of `T`.
struct Ring<T> {
    map: *mut libc::c_void,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
}

impl<T: Copy> Ring<T> {
    /// Map the ring at `pgoff` of socket `fd`, laid out as `off` says.
    fn map(fd: RawFd, off: &libc::xdp_ring_offset, pgoff: u64) -> io::Result<Self> {
        let map_len = off.desc as usize + RING as usize * std::mem::size_of::<T>();
        // SAFETY: mapping the kernel's ring of this socket at the offsets it gave.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let at = |o: u64| (map as usize + o as usize) as *mut u8;
        Ok(Ring {
            map,
            map_len,
            producer: at(off.producer) as *const AtomicU32,
            consumer: at(off.consumer) as *const AtomicU32,
            flags: at(off.flags) as *const AtomicU32,
            entries: at(off.desc) as *mut T,
        })
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into the mapping, alive as long as self; the kernel updates it
        // atomically.
        unsafe { &*self.producer }
    }
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as prod.
        unsafe { &*self.consumer }
    }
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as prod.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Producer side (fill, TX): append one entry, false when full.
    fn push(&mut self, v: T) -> bool {
        let p = self.prod().load(Ordering::Relaxed);
        if p.wrapping_sub(self.cons().load(Ordering::Acquire)) >= RING {
            return false;
        }
        // SAFETY: index masked into the ring's `RING` entries; the slot is ours until the
        // producer index below publishes it.
        unsafe {
            self.entries
                .add((p & (RING - 1)) as usize)
                .write_volatile(v)
        };
        self.prod().store(p.wrapping_add(1), Ordering::Release);
        true
    }

    /// Consumer side (RX, completion): take one entry, None when empty.
    fn pop(&mut self) -> Option<T> {
        let c = self.cons().load(Ordering::Relaxed);
        if self.prod().load(Ordering::Acquire) == c {
            return None;
        }
        // SAFETY: the kernel published this slot (producer past it, acquire above).
        let v = unsafe { self.entries.add((c & (RING - 1)) as usize).read_volatile() };
        self.cons().store(c.wrapping_add(1), Ordering::Release);
        Some(v)
    }

    /// Consumer side: something is waiting.
    fn ready(&self) -> bool {
        self.prod().load(Ordering::Acquire) != self.cons().load(Ordering::Relaxed)
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

/// The UMEM: page-aligned anonymous memory the kernel reads frames from and writes them to.
struct Umem {
    ptr: *mut u8,
}

impl Umem {
    fn new() -> io::Result<Self> {
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                UMEM_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Umem { ptr: p as *mut u8 })
    }

    /// The bytes at `addr..addr + len`, None when outside the UMEM (a corrupt descriptor).
    fn slice(&mut self, addr: u64, len: usize) -> Option<&mut [u8]> {
        let a = usize::try_from(addr).ok()?;
        if a.checked_add(len)? > UMEM_BYTES {
            return None;
        }
        // SAFETY: inside our mapping; the kernel does not touch a frame while we own it.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(a), len) })
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once (after the socket: field order below).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, UMEM_BYTES) };
    }
}

/// An AF_XDP socket bound to one queue of one interface, with the XDP program that feeds it
/// attached for as long as it lives.
pub struct XdpSocket {
    // Drop order matters: detach the program (link), then the program and map, then the
    // rings and the socket, the UMEM last.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    rx: Ring<Desc>,
    tx: Ring<Desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    fd: OwnedFd,
    umem: Umem,
    /// TX frames not in flight (UMEM addresses), a stack.
    free_tx: [u64; FRAMES / 2],
    n_free: usize,
    iface: String,
    queue: u32,
    info: XdpInfo,
}

// SAFETY: the raw pointers point into mappings owned by the socket; one thread uses it at a
// time (`&mut self`), as the Link trait requires.
unsafe impl Send for XdpSocket {}

impl std::fmt::Debug for XdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpSocket")
            .field("iface", &self.iface)
            .field("queue", &self.queue)
            .field("info", &self.info)
            .finish()
    }
}

/// `e` with the step that failed and what to do about it.
fn explain(iface: &str, step: &str, e: io::Error) -> io::Error {
    let errno = e.raw_os_error();
    let hint = match errno {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " — needs CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF (or root; see SECURITY.md)"
        }
        Some(libc::EAFNOSUPPORT) => " — the kernel was built without CONFIG_XDP_SOCKETS",
        Some(libc::ENOSYS) => " — the kernel was built without CONFIG_BPF_SYSCALL",
        Some(libc::EOPNOTSUPP) => " — the driver does not support this XDP mode",
        Some(libc::EBUSY) | Some(libc::EEXIST) => {
            " — already in use: another XDP program on the interface (`ip link show dev IF` \
             shows it; another rtcat master, or a leftover of another tool: `ip link set dev IF \
             xdp off`), or another AF_XDP socket on the queue"
        }
        Some(libc::ENOMEM) | Some(libc::ENOBUFS) => {
            " — cannot pin the UMEM: raise RLIMIT_MEMLOCK (LimitMEMLOCK=) or grant CAP_IPC_LOCK"
        }
        _ => "",
    }
    .replace("IF", iface);
    io::Error::new(
        e.kind(),
        format!(
            "AF_XDP on {iface}: {step}: {e}{hint}; [bus] link = \"packet\" uses AF_PACKET instead"
        ),
    )
}

fn setsockopt<T>(fd: &OwnedFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a valid T of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn getsockopt<T>(fd: &OwnedFd, opt: libc::c_int, v: &mut T) -> io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a valid, writable T of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            opt,
            v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl XdpSocket {
    /// Open an AF_XDP socket on `iface` with `opt`, load and attach the program. Errors name
    /// the step, the reason, and the fallback (`[bus] link = "packet"`).
    pub fn open(iface: &str, opt: XdpOptions) -> io::Result<Self> {
        let cname = CString::new(iface).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL")
        })?;
        // SAFETY: a valid C string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("network interface {iface:?} does not exist"),
            ));
        }
        let ex = |step: &str| {
            let step = step.to_string();
            move |e| explain(iface, &step, e)
        };
        // SAFETY: plain socket call; the fd is owned at once.
        let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(ex("socket")(io::Error::last_os_error()));
        }
        // SAFETY: a new fd nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem = Umem::new().map_err(ex("UMEM memory"))?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: UMEM_BYTES as u64,
            chunk_size: FRAME_SIZE as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(&fd, libc::XDP_UMEM_REG, &reg).map_err(ex("registering the UMEM"))?;
        for ring in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(&fd, ring, &RING).map_err(ex("sizing the rings"))?;
        }
        // SAFETY: plain old data, all zeros valid.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        getsockopt(&fd, libc::XDP_MMAP_OFFSETS, &mut off).map_err(ex("ring offsets"))?;
        let raw = fd.as_raw_fd();
        let mut fill = Ring::<u64>::map(raw, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING)
            .map_err(ex("mapping the fill ring"))?;
        let comp = Ring::<u64>::map(raw, &off.cr, libc::XDP_UMEM_PGOFF_COMPLETION_RING)
            .map_err(ex("mapping the completion ring"))?;
        let rx = Ring::<Desc>::map(raw, &off.rx, libc::XDP_PGOFF_RX_RING as u64)
            .map_err(ex("mapping the RX ring"))?;
        let tx = Ring::<Desc>::map(raw, &off.tx, libc::XDP_PGOFF_TX_RING as u64)
            .map_err(ex("mapping the TX ring"))?;
        // The first half of the UMEM to the kernel for receiving, the second half ours to send.
        for i in 0..FRAMES / 2 {
            fill.push((i * FRAME_SIZE) as u64);
        }
        let mut free_tx = [0u64; FRAMES / 2];
        for (i, a) in free_tx.iter_mut().enumerate() {
            *a = ((FRAMES / 2 + i) * FRAME_SIZE) as u64;
        }
        // Flags 0: zero-copy if the driver can, copy otherwise (xsk_bind); need-wakeup lets a
        // zero-copy driver skip the TX kick.
        let sxdp = libc::sockaddr_xdp {
            sxdp_family: AF_XDP as u16,
            sxdp_flags: libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: opt.queue,
            sxdp_shared_umem_fd: 0,
        };
        // A socket closed a moment ago (a master restarted, or killed) still holds the queue
        // until the kernel's deferred release of its buffer pool runs: EBUSY for a few ms.
        let bound_by = std::time::Instant::now() + Duration::from_secs(1);
        let rc = loop {
            // SAFETY: a valid sockaddr_xdp of the size passed.
            let rc = unsafe {
                libc::bind(
                    raw,
                    &sxdp as *const libc::sockaddr_xdp as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            let busy = rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY);
            if !busy || std::time::Instant::now() > bound_by {
                break rc;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            let step = if e.raw_os_error() == Some(libc::EINVAL) {
                format!(
                    "binding to queue {} (does the interface have it?)",
                    opt.queue
                )
            } else {
                format!("binding to queue {}", opt.queue)
            };
            return Err(ex(&step)(e));
        }
        let mut xo = libc::xdp_options { flags: 0 };
        getsockopt(&fd, libc::XDP_OPTIONS, &mut xo).map_err(ex("socket options"))?;
        let map =
            bpf::create_xskmap(opt.queue.saturating_add(1)).map_err(ex("creating the XSKMAP"))?;
        bpf::set_xsk(&map, opt.queue, raw).map_err(ex("putting the socket in the XSKMAP"))?;
        let prog = bpf::load_program(&map).map_err(ex("loading the XDP program"))?;
        let (link, native) = match opt.mode {
            XdpMode::Native => (
                bpf::attach(&prog, ifindex, bpf::XDP_FLAGS_DRV_MODE)
                    .map_err(ex("attaching the program (native)"))?,
                true,
            ),
            XdpMode::Generic => (
                bpf::attach(&prog, ifindex, bpf::XDP_FLAGS_SKB_MODE)
                    .map_err(ex("attaching the program (generic)"))?,
                false,
            ),
            XdpMode::Auto => match bpf::attach(&prog, ifindex, bpf::XDP_FLAGS_DRV_MODE) {
                Ok(l) => (l, true),
                // No native support in the driver: EOPNOTSUPP (older kernels: EINVAL).
                Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => (
                    bpf::attach(&prog, ifindex, bpf::XDP_FLAGS_SKB_MODE)
                        .map_err(ex("attaching the program (native refused, generic)"))?,
                    false,
                ),
                Err(e) => return Err(ex("attaching the program (native)")(e)),
            },
        };
        Ok(XdpSocket {
            _link: link,
            _prog: prog,
            _map: map,
            rx,
            tx,
            fill,
            comp,
            fd,
            umem,
            free_tx,
            n_free: FRAMES / 2,
            iface: iface.to_string(),
            queue: opt.queue,
            info: XdpInfo {
                native,
                zero_copy: xo.flags & libc::XDP_OPTIONS_ZEROCOPY != 0,
            },
        })
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Native or generic, zero-copy or not.
    pub fn info(&self) -> XdpInfo {
        self.info
    }

    /// The kernel's counters of this socket (`XDP_STATISTICS`): frames it dropped and why.
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        // SAFETY: plain old data, all zeros valid.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        getsockopt(&self.fd, libc::XDP_STATISTICS, &mut st)?;
        Ok(XdpStatistics {
            rx_dropped: st.rx_dropped,
            rx_invalid_descs: st.rx_invalid_descs,
            tx_invalid_descs: st.tx_invalid_descs,
            rx_ring_full: st.rx_ring_full,
            rx_fill_ring_empty: st.rx_fill_ring_empty_descs,
        })
    }

    /// Take back the TX frames the kernel has sent.
    fn reclaim(&mut self) {
        while let Some(addr) = self.comp.pop() {
            if self.n_free < self.free_tx.len() {
                self.free_tx[self.n_free] = addr;
                self.n_free += 1;
            }
        }
    }

    /// Tell the kernel to transmit (copy mode always needs it; zero-copy when it asks).
    fn kick(&self) -> io::Result<()> {
        if self.info.zero_copy && !self.tx.needs_wakeup() {
            return Ok(());
        }
        // SAFETY: an empty sendto on our socket.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            // Busy or out of buffers: the descriptor stays in the TX ring and goes with the
            // next kick; the master's timeout covers a reply that comes too late.
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => Ok(()),
                _ => Err(e),
            };
        }
        Ok(())
    }
}

impl AsRawFd for XdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// AF_XDP: `send` copies the frame into a free TX frame of the UMEM, queues it and kicks the
/// kernel (one `sendto`; none in zero-copy mode unless the driver asks); `recv` copies a frame
/// out of the RX ring and gives its UMEM frame straight back to the fill ring (no system call);
/// `wait` is `ppoll` on the socket (readable when the RX ring is not empty).
impl Link for XdpSocket {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let mut pad = [0u8; MIN_FRAME_LEN];
        let wire = padded(frame, &mut pad);
        if wire.len() > FRAME_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "frame of {} bytes is longer than an AF_XDP frame ({FRAME_SIZE})",
                    wire.len()
                ),
            ));
        }
        self.reclaim();
        if self.n_free == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "AF_XDP TX: all frames in flight",
            ));
        }
        let addr = self.free_tx[self.n_free - 1];
        let Some(dst) = self.umem.slice(addr, wire.len()) else {
            return Err(io::Error::other("AF_XDP TX: frame outside the UMEM"));
        };
        dst.copy_from_slice(wire);
        let desc = Desc {
            addr,
            len: wire.len() as u32,
            options: 0,
        };
        if !self.tx.push(desc) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "AF_XDP TX ring full",
            ));
        }
        self.n_free -= 1;
        self.kick()
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(d) = self.rx.pop() else {
            // A zero-copy driver may wait for a wake-up before it refills: give it one.
            if self.fill.needs_wakeup() {
                // SAFETY: an empty non-blocking recvfrom on our socket.
                unsafe {
                    libc::recvfrom(
                        self.fd.as_raw_fd(),
                        std::ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                };
            }
            return Ok(None);
        };
        let n = (d.len as usize).min(buf.len());
        let copied = match self.umem.slice(d.addr, n) {
            Some(src) => {
                buf[..n].copy_from_slice(src);
                true
            }
            None => false,
        };
        // The frame's chunk back to the kernel (the address carries the headroom offset).
        self.fill.push(d.addr & !(FRAME_SIZE as u64 - 1));
        if copied {
            Ok(Some(n))
        } else {
            Err(io::Error::other("AF_XDP RX: descriptor outside the UMEM"))
        }
    }

    fn wait(&mut self, timeout: Duration, extra_fd: Option<RawFd>) -> io::Result<()> {
        if self.rx.ready() {
            return Ok(());
        }
        let fd = self.fd.as_raw_fd();
        match extra_fd {
            Some(e) => wait_fds(&[fd, e], Some(timeout)).map(drop),
            None => wait_fds(&[fd], Some(timeout)).map(drop),
        }
    }

    fn describe(&self) -> String {
        format!(
            "AF_XDP on {} queue {} ({}, {})",
            self.iface,
            self.queue,
            if self.info.native {
                "native"
            } else {
                "generic"
            },
            if self.info.zero_copy {
                "zero-copy"
            } else {
                "copy"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_outside_the_umem_is_refused_not_followed() {
        let mut u = Umem::new().unwrap();
        assert_eq!(u.slice(0, FRAME_SIZE).map(|s| s.len()), Some(FRAME_SIZE));
        let last = (UMEM_BYTES - FRAME_SIZE) as u64;
        assert!(u.slice(last, FRAME_SIZE).is_some());
        assert!(u.slice(last + 1, FRAME_SIZE).is_none(), "past the end");
        assert!(u.slice(UMEM_BYTES as u64, 0).is_some(), "empty at the end");
        assert!(u.slice(u64::MAX, 1).is_none(), "overflow");
        assert!(u.slice(0, usize::MAX).is_none(), "overflow");
    }

    #[test]
    fn a_received_address_maps_back_to_its_chunk() {
        // A received frame's address (chunk + headroom) maps back to its chunk.
        let chunk = 5 * FRAME_SIZE as u64;
        assert_eq!((chunk + 256) & !(FRAME_SIZE as u64 - 1), chunk);
    }
}
