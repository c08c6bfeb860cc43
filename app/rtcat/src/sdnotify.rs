//! systemd notification protocol (READY=1, WATCHDOG=1, STATUS=...) over $NOTIFY_SOCKET.

use std::os::unix::net::UnixDatagram;

pub struct Notifier {
    sock: Option<(UnixDatagram, String)>,
    watchdog_usec: Option<u64>,
}

impl Notifier {
    /// From the environment; inert when not started by systemd with Type=notify.
    pub fn from_env() -> Self {
        let sock = std::env::var("NOTIFY_SOCKET").ok().and_then(|path| {
            let s = UnixDatagram::unbound().ok()?;
            Some((s, path))
        });
        let watchdog_usec = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|v| v.parse().ok());
        Notifier {
            sock,
            watchdog_usec,
        }
    }

    pub fn active(&self) -> bool {
        self.sock.is_some()
    }

    /// How often to send WATCHDOG=1 (half the configured watchdog), if a watchdog is set.
    pub fn watchdog_interval(&self) -> Option<std::time::Duration> {
        self.watchdog_usec
            .map(|us| std::time::Duration::from_micros(us / 2))
    }

    pub fn notify(&self, state: &str) {
        let Some((s, path)) = &self.sock else { return };
        let r = if let Some(abs) = path.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(abs.as_bytes())
                .and_then(|a| s.send_to_addr(state.as_bytes(), &a))
        } else {
            s.send_to(state.as_bytes(), path)
        };
        if let Err(e) = r {
            crate::say!("rtcat: sd_notify {state:?} failed: {e}");
        }
    }
}
