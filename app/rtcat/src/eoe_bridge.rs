//! `[[eoe]]`: Ethernet over EtherCAT through a running master. Each entry bridges a TAP
//! interface of this machine to the network behind one subdevice (a drive's web page or tuning
//! service reached from the board) while `rtcat run` or `rtcat bench` cycles.
//!
//! Each bridge is a thread of its own on the cycle's acyclic queue
//! ([`rtcat_master::acyclic::QueueMailbox`]): every fragment sent and every look at the device's
//! send mailbox is one queue request, served by the cyclic thread after its own work and within
//! its mailbox budget, never on the cycle's own time. A token bucket (`max_kib_per_s`, mailbox
//! bytes both ways) bounds what a bridge asks of the queue, so SDO traffic of other threads
//! (control socket, gateway, DC sampler) keeps its share; an idle bridge looks at the device
//! every [`IDLE_POLL`] at most.
//!
//! The device's IP parameters are set once the segment is healthy in OP, and again after each
//! recovery the master counts (`Live::recoveries`: one atomic load per turn), since a recovery
//! re-initialises the subdevice (its EoE settings with it) and may configure its mailbox anew
//! (the geometry is read again). A subdevice brought back on its own (per-subdevice recovery)
//! or reset by itself is found by reading its parameters back every [`VERIFY`] (one get IP
//! parameter through the queue): set again when they are gone.

use rtcat_master::eoe::{self, IpParams};
use rtcat_master::invalid::Invalid;
use rtcat_packet::tap::{MAX_TAP_FRAME, Tap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Default of `max_kib_per_s`: a drive's web page or a tuning tool, not a file server.
pub const DEFAULT_MAX_KIB_PER_S: u32 = 256;
/// Longest wait between two looks at an idle device's send mailbox (one status read through the
/// queue each).
pub const IDLE_POLL: Duration = Duration::from_millis(2);
/// How long one queue request waits for its reply.
const QUEUE_TIMEOUT: Duration = Duration::from_secs(1);
/// Frames moved each way per turn before the other direction is looked at.
const BURST: usize = 16;
/// Between two reads of the device's IP parameters (is it still holding them?).
const VERIFY: Duration = Duration::from_secs(5);
/// After a failure (no OP, a device that does not answer): wait before trying again.
const RETRY: Duration = Duration::from_secs(1);

/// One `[[eoe]]` entry as written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EoeConfig {
    /// Position of the subdevice.
    pub position: u32,
    /// Name of the TAP interface to create (refused when it exists).
    pub tap: String,
    /// This machine's address on the TAP, `ADDR/LEN`.
    pub host_ip: Option<String>,
    /// The device's address, `ADDR/LEN` (set over EoE once in OP).
    pub device_ip: Option<String>,
    /// The device's default gateway.
    pub gateway: Option<String>,
    /// The device's DNS server.
    pub dns: Option<String>,
    /// Mailbox bytes per second the bridge may move both ways through the queue.
    #[serde(default = "default_rate")]
    pub max_kib_per_s: u32,
}

fn default_rate() -> u32 {
    DEFAULT_MAX_KIB_PER_S
}

/// One entry, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Position of the subdevice.
    pub position: u16,
    /// The TAP's name.
    pub tap: String,
    /// Address and netmask of this machine on the TAP.
    pub host: Option<([u8; 4], [u8; 4])>,
    /// What is set on the device (nothing set when empty).
    pub device: IpParams,
    /// Bytes per second.
    pub rate: u64,
}

fn addr(key: &str, s: &str) -> Result<[u8; 4], Invalid> {
    s.trim()
        .parse::<Ipv4Addr>()
        .map(|a| a.octets())
        .map_err(|_| Invalid::new(key, format!("{s:?}"), "not an IPv4 address"))
}

fn addr_prefix(key: &str, s: &str) -> Result<([u8; 4], [u8; 4]), Invalid> {
    let Some((a, l)) = s.split_once('/') else {
        return Err(Invalid::new(
            key,
            format!("{s:?}"),
            "give the prefix length too, e.g. \"192.168.10.2/24\"",
        ));
    };
    let len: u32 = match l.parse() {
        Ok(n @ 1..=32) => n,
        _ => {
            return Err(Invalid::new(
                key,
                format!("{s:?}"),
                "the prefix length is 1..=32",
            ));
        }
    };
    let a = addr(key, a).map_err(|_| Invalid::new(key, format!("{s:?}"), "not an IPv4 address"))?;
    if a == [0; 4] || a[0] == 127 || a[0] >= 224 {
        return Err(Invalid::new(
            key,
            format!("{s:?}"),
            "must be a unicast address (not 0.0.0.0, loopback, multicast or broadcast)",
        ));
    }
    Ok((a, (u32::MAX << (32 - len)).to_be_bytes()))
}

/// The interface name rules of the kernel (and of [`Tap::create`]).
fn tap_name(key: &str, name: &str) -> Result<(), Invalid> {
    let ok = !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(Invalid::new(
            key,
            format!("{name:?}"),
            "not an interface name (1..15 characters: letters, digits, '-', '_', '.')",
        ))
    }
}

impl EoeConfig {
    fn checked(&self, i: usize) -> Result<Link, Invalid> {
        let key = |k: &str| format!("eoe[{i}].{k}");
        let max = rtcat_master::limits::MAX_SUBDEVICES as u64 - 1;
        Invalid::range(&key("position"), self.position.into(), 0, max, "")?;
        tap_name(&key("tap"), &self.tap)?;
        let host = self
            .host_ip
            .as_deref()
            .map(|s| addr_prefix(&key("host_ip"), s))
            .transpose()?;
        let mut device = IpParams::default();
        if let Some(s) = &self.device_ip {
            let (a, m) = addr_prefix(&key("device_ip"), s)?;
            if host.is_some_and(|(h, _)| h == a) {
                return Err(Invalid::new(
                    key("device_ip"),
                    format!("{s:?}"),
                    "is the host_ip: the device needs an address of its own",
                ));
            }
            device.ip = Some(a);
            device.subnet = Some(m);
        }
        device.gateway = self
            .gateway
            .as_deref()
            .map(|s| addr(&key("gateway"), s))
            .transpose()?;
        device.dns = self
            .dns
            .as_deref()
            .map(|s| addr(&key("dns"), s))
            .transpose()?;
        Invalid::range(
            &key("max_kib_per_s"),
            self.max_kib_per_s.into(),
            1,
            100_000,
            " KiB/s",
        )?;
        Ok(Link {
            position: self.position as u16,
            tap: self.tap.clone(),
            host,
            device,
            rate: u64::from(self.max_kib_per_s) * 1024,
        })
    }
}

/// Every entry checked, and no TAP or position twice.
pub fn checked(entries: &[EoeConfig]) -> Result<Vec<Link>, Invalid> {
    let mut out: Vec<Link> = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let l = e.checked(i)?;
        if let Some(j) = out.iter().position(|o| o.tap == l.tap) {
            return Err(Invalid::new(
                format!("eoe[{i}].tap"),
                format!("{:?}", l.tap),
                format!("is eoe[{j}].tap too: one TAP per device"),
            ));
        }
        if let Some(j) = out.iter().position(|o| o.position == l.position) {
            return Err(Invalid::new(
                format!("eoe[{i}].position"),
                l.position,
                format!("is eoe[{j}].position too: one bridge per device"),
            ));
        }
        out.push(l);
    }
    Ok(out)
}

/// What a bridge did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    /// Frames sent to the device.
    pub to_device: u64,
    /// Frames of the device given to the TAP.
    pub to_host: u64,
    /// Frames of the device dropped (fragments out of order, nobody took them in time).
    pub dropped_from_device: u64,
    /// Frames from the TAP too long for EoE.
    pub too_long: u64,
    /// Times the IP parameters were set (the first and after each recovery).
    pub ip_set: u64,
    /// Queue or device failures that restarted the bridge's session.
    pub failures: u64,
}

/// The running bridges.
pub struct Running {
    stop: Arc<AtomicBool>,
    threads: Vec<(Link, std::thread::JoinHandle<Counts>)>,
}

/// How a TAP could not be made: the name is taken, or the system refused.
#[derive(Debug, thiserror::Error)]
#[error("eoe[{index}].tap = {tap:?}: {source}")]
pub struct TapError {
    index: usize,
    tap: String,
    source: std::io::Error,
}

impl Running {
    /// Create every TAP (with the host's address, up) and start its bridge on `client`.
    pub fn start(
        links: Vec<Link>,
        client: Arc<rtcat_master::acyclic::SdoClient>,
        live: Arc<rtcat_master::stats::Live>,
    ) -> Result<Running, TapError> {
        let stop = Arc::new(AtomicBool::new(false));
        // Every TAP first: a taken name fails the start before any thread runs.
        let mut taps = Vec::with_capacity(links.len());
        for (index, l) in links.iter().enumerate() {
            let err = |source| TapError {
                index,
                tap: l.tap.clone(),
                source,
            };
            let tap = Tap::create(&l.tap).map_err(err)?;
            if let Some((ip, mask)) = l.host {
                tap.set_ipv4(ip, mask).map_err(err)?;
            }
            tap.set_up().map_err(err)?;
            taps.push(tap);
        }
        let mut threads = Vec::with_capacity(links.len());
        for (l, tap) in links.into_iter().zip(taps) {
            let (stop2, client, live, l2) = (stop.clone(), client.clone(), live.clone(), l.clone());
            let h = std::thread::Builder::new()
                .name(format!("rtcat-eoe-{}", l.position))
                .spawn(move || bridge(&l2, &tap, &client, &live, &stop2))
                .map_err(|source| TapError {
                    index: threads.len(),
                    tap: l.tap.clone(),
                    source,
                })?;
            threads.push((l, h));
        }
        Ok(Running { stop, threads })
    }

    /// Stop every bridge (their TAPs disappear) and return what each did.
    pub fn stop(mut self) -> Vec<(Link, Counts)> {
        self.stop.store(true, Ordering::Relaxed);
        std::mem::take(&mut self.threads)
            .into_iter()
            .map(|(l, h)| (l, h.join().unwrap_or_default()))
            .collect()
    }
}

impl Drop for Running {
    /// A run that ends early (an error before [`Running::stop`]) stops the bridges too.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Mailbox bytes a bridge may still move now; refilled at `rate` per second up to a burst of
/// 50 ms (at least one full mailbox).
struct Bucket {
    rate: u64,
    burst: f64,
    level: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: u64, mailbox: usize) -> Bucket {
        let burst = (rate as f64 * 0.05).max(mailbox as f64);
        Bucket {
            rate,
            burst,
            level: burst,
            at: Instant::now(),
        }
    }

    /// Take `n` bytes, waiting first while the bucket is empty.
    fn take(&mut self, n: usize, stop: &AtomicBool) {
        loop {
            let now = Instant::now();
            self.level = (self.level
                + now.duration_since(self.at).as_secs_f64() * self.rate as f64)
                .min(self.burst);
            self.at = now;
            if self.level >= 0.0 || stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_secs_f64(
                (-self.level / self.rate as f64).min(0.05),
            ));
        }
        self.level -= n as f64;
    }
}

/// Wait up to `d` for a frame on the TAP.
fn wait_tap(tap: &Tap, d: Duration) {
    let mut p = libc::pollfd {
        fd: tap.fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call.
    unsafe { libc::poll(&mut p, 1, d.as_millis().max(1) as i32) };
}

fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20).min(end - Instant::now()));
    }
}

/// The bridge's thread: sessions (geometry read, IP set, frames moved) until stopped; a new
/// session after a recovery or a failure.
fn bridge(
    l: &Link,
    tap: &Tap,
    client: &rtcat_master::acyclic::SdoClient,
    live: &rtcat_master::stats::Live,
    stop: &AtomicBool,
) -> Counts {
    let mut c = Counts::default();
    let mut buf = vec![0u8; MAX_TAP_FRAME];
    let mut logged_failure = false;
    let mut last_generation = None;
    while !stop.load(Ordering::Relaxed) {
        if live.healthy.load(Ordering::Relaxed) == 0 {
            sleep_unless(stop, Duration::from_millis(20));
            continue;
        }
        let generation = live.recoveries.load(Ordering::Relaxed);
        // Seen by the session (it ends at the change) or, when a request failed first during
        // the recovery, here: either way the new session sets the parameters again.
        if last_generation.is_some_and(|g| g != generation) {
            log::info!(
                "eoe: position {}: the master recovered the segment; IP parameters again",
                l.position
            );
        }
        if last_generation.is_some() && c.ip_set > 0 && l.device != IpParams::default() {
            log::info!(
                "eoe: position {}: a new session: IP parameters again",
                l.position
            );
        }
        last_generation = Some(generation);
        match session(l, tap, client, live, stop, generation, &mut c, &mut buf) {
            Ok(()) => logged_failure = false,
            // The run ends: a request cut short by the master's stop is no failure.
            Err(_) if stop.load(Ordering::Relaxed) => {}
            Err(e) => {
                c.failures += 1;
                // Once per streak: a device that stays silent does not flood the log. A
                // request cut short by a recovery under way is expected: not a warning.
                if live.healthy.load(Ordering::Relaxed) == 0 {
                    log::debug!("eoe[{}] position {}: {e} (recovery)", l.tap, l.position);
                } else if !logged_failure {
                    log::warn!("eoe[{}] position {}: {e}; trying again", l.tap, l.position);
                    logged_failure = true;
                }
                sleep_unless(stop, RETRY);
            }
        }
    }
    c
}

/// One session: ends Ok when stopped or when the master counted a recovery.
#[allow(clippy::too_many_arguments)]
fn session(
    l: &Link,
    tap: &Tap,
    client: &rtcat_master::acyclic::SdoClient,
    live: &rtcat_master::stats::Live,
    stop: &AtomicBool,
    generation: u64,
    c: &mut Counts,
    buf: &mut [u8],
) -> Result<(), String> {
    let mut mbx = client
        .queue_mailbox(l.position, QUEUE_TIMEOUT)
        .map_err(|e| format!("mailbox: {e}"))?;
    let mut bucket = Bucket::new(l.rate, usize::from(mbx_size(&mbx)));
    let mut e = eoe::Client::new(&mut mbx);
    if l.device != IpParams::default() {
        e.set_ip(&l.device).map_err(|e| e.to_string())?;
        c.ip_set += 1;
        log::info!("eoe: position {} ({}): set {}", l.position, l.tap, l.device);
    }
    let dropped0 = e.dropped();
    let mut verify = (l.device != IpParams::default()).then(|| Instant::now() + VERIFY);
    let r = (|| {
        while !stop.load(Ordering::Relaxed) {
            if live.recoveries.load(Ordering::Relaxed) != generation {
                return Ok(());
            }
            // A subdevice recovered on its own (per-subdevice recovery) or reset by itself
            // leaves no count here: what it holds is read back now and then, and set again
            // when it lost it.
            if verify.is_some_and(|t| Instant::now() >= t) {
                verify = match e.get_ip() {
                    Ok(got) if holds(&got, &l.device) => Some(Instant::now() + VERIFY),
                    Ok(got) => {
                        log::info!(
                            "eoe: position {}: the device holds {got}; IP parameters again",
                            l.position
                        );
                        e.set_ip(&l.device).map_err(|e| e.to_string())?;
                        c.ip_set += 1;
                        Some(Instant::now() + VERIFY)
                    }
                    // A device that does not answer get IP parameter: not looked at again.
                    Err(eoe::Error::Device { .. }) => None,
                    Err(err) => return Err(err.to_string()),
                };
            }
            let mut busy = false;
            for _ in 0..BURST {
                bucket.take(mailbox_poll_cost(), stop);
                let Some(f) = e.poll().map_err(|e| e.to_string())? else {
                    break;
                };
                busy = true;
                // A frame the host's stack refuses (a full queue) is lost as on any wire.
                if tap.send(&f).is_ok() {
                    c.to_host += 1;
                }
            }
            for _ in 0..BURST {
                match tap.recv(buf) {
                    Ok(Some(n)) if n <= eoe::MAX_FRAME => {
                        e.send_frame_paced(&buf[..n], |m| bucket.take(m, stop))
                            .map_err(|e| e.to_string())?;
                        c.to_device += 1;
                        busy = true;
                    }
                    Ok(Some(_)) => {
                        c.too_long += 1;
                        busy = true;
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            if !busy {
                wait_tap(tap, IDLE_POLL);
            }
        }
        Ok(())
    })();
    c.dropped_from_device += e.dropped() - dropped0;
    r
}

/// Whether the device holds every parameter the bridge set.
fn holds(got: &IpParams, want: &IpParams) -> bool {
    (want.ip.is_none() || got.ip == want.ip)
        && (want.subnet.is_none() || got.subnet == want.subnet)
        && (want.gateway.is_none() || got.gateway == want.gateway)
        && (want.dns.is_none() || got.dns == want.dns)
}

fn mbx_size(m: &rtcat_master::acyclic::QueueMailbox<'_>) -> u16 {
    use rtcat_master::mailbox::Transport;
    m.geometry().rx_size.max(m.geometry().tx_size)
}

/// What a look at the send mailbox costs in the bucket: its status byte, and (counted as a
/// frame's fragment when one is there) the mailbox; a flat 64 bytes keeps idle looks cheap but
/// not free.
fn mailbox_poll_cost() -> usize {
    64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Result<Vec<Link>, String> {
        #[derive(serde::Deserialize)]
        struct F {
            eoe: Vec<EoeConfig>,
        }
        let f: F = toml::from_str(text).map_err(|e| e.to_string())?;
        checked(&f.eoe).map_err(|e| e.to_string())
    }

    #[test]
    fn a_valid_entry_gives_the_device_its_parameters() {
        let l = cfg(
            "[[eoe]]\nposition = 3\ntap = \"eoe-drive\"\nhost_ip = \"192.168.77.1/24\"\n\
             device_ip = \"192.168.77.2/24\"\ngateway = \"192.168.77.1\"\ndns = \"1.1.1.1\"\n",
        )
        .unwrap();
        assert_eq!(l.len(), 1);
        let l = &l[0];
        assert_eq!(l.position, 3);
        assert_eq!(l.host, Some(([192, 168, 77, 1], [255, 255, 255, 0])));
        assert_eq!(l.device.ip, Some([192, 168, 77, 2]));
        assert_eq!(l.device.subnet, Some([255, 255, 255, 0]));
        assert_eq!(l.device.gateway, Some([192, 168, 77, 1]));
        assert_eq!(l.device.dns, Some([1, 1, 1, 1]));
        assert_eq!(l.rate, u64::from(DEFAULT_MAX_KIB_PER_S) * 1024);
        // Only the TAP: nothing set on the device.
        let l = cfg("[[eoe]]\nposition = 0\ntap = \"t0\"\nmax_kib_per_s = 10\n").unwrap();
        assert_eq!(l[0].device, IpParams::default());
        assert_eq!(l[0].rate, 10 * 1024);
    }

    #[test]
    fn bad_entries_are_named_by_their_key() {
        let base = "[[eoe]]\nposition = 1\ntap = \"eoe1\"\n";
        for (extra, want) in [
            (
                "device_ip = \"10.0.0.2\"\n",
                "eoe[0].device_ip = \"10.0.0.2\": give the prefix length",
            ),
            (
                "device_ip = \"10.0.0.2/33\"\n",
                "eoe[0].device_ip = \"10.0.0.2/33\": the prefix length is 1..=32",
            ),
            (
                "host_ip = \"10.0.0.256/24\"\n",
                "eoe[0].host_ip = \"10.0.0.256/24\": not an IPv4 address",
            ),
            (
                "host_ip = \"224.0.0.1/24\"\n",
                "eoe[0].host_ip = \"224.0.0.1/24\": must be a unicast address",
            ),
            (
                "host_ip = \"10.0.0.2/24\"\ndevice_ip = \"10.0.0.2/24\"\n",
                "eoe[0].device_ip = \"10.0.0.2/24\": is the host_ip",
            ),
            (
                "gateway = \"x\"\n",
                "eoe[0].gateway = \"x\": not an IPv4 address",
            ),
            (
                "dns = \"1.2.3\"\n",
                "eoe[0].dns = \"1.2.3\": not an IPv4 address",
            ),
            (
                "max_kib_per_s = 0\n",
                "eoe[0].max_kib_per_s = 0: must be 1..=100000",
            ),
        ] {
            let e = cfg(&format!("{base}{extra}")).unwrap_err();
            assert!(e.contains(want), "{extra}: {e}");
        }
        for (text, want) in [
            (
                "[[eoe]]\nposition = 1\ntap = \"a/b\"\n",
                "eoe[0].tap = \"a/b\": not an interface name",
            ),
            (
                "[[eoe]]\nposition = 1\ntap = \"sixteen-chars-xx\"\n",
                "eoe[0].tap",
            ),
            ("[[eoe]]\nposition = 1\ntap = \"\"\n", "eoe[0].tap = \"\""),
            (
                "[[eoe]]\nposition = 70000\ntap = \"t\"\n",
                "eoe[0].position = 70000: must be 0..=",
            ),
            (
                "[[eoe]]\nposition = 1\ntap = \"t\"\n[[eoe]]\nposition = 2\ntap = \"t\"\n",
                "eoe[1].tap = \"t\": is eoe[0].tap too",
            ),
            (
                "[[eoe]]\nposition = 1\ntap = \"t\"\n[[eoe]]\nposition = 1\ntap = \"u\"\n",
                "eoe[1].position = 1: is eoe[0].position too",
            ),
            ("[[eoe]]\nposition = 1\n", "missing field `tap`"),
            (
                "[[eoe]]\nposition = 1\ntap = \"t\"\nspeed = 3\n",
                "unknown field `speed`",
            ),
        ] {
            let e = cfg(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn the_bucket_holds_a_bridge_to_its_rate() {
        let stop = AtomicBool::new(false);
        let mut b = Bucket::new(100 * 1024, 128);
        let t = Instant::now();
        // 50 ms of burst, then 30 KiB more at 100 KiB/s: about 300 ms.
        let burst = b.burst as usize;
        for _ in 0..(burst + 30 * 1024) / 128 {
            b.take(128, &stop);
        }
        let s = t.elapsed().as_secs_f64();
        assert!(s > 0.25, "{s} s: the bucket did not hold back");
        assert!(s < 2.0, "{s} s: far slower than the rate");
    }
}
