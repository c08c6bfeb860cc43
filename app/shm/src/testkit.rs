//! A minimal server of the shm requests, for tests: the master serves them on its control
//! socket (`rtcat-control`, with its limits, rights and record); tests of this crate and of the
//! master's wrapper serve a [`Hub`] without the whole master. One connection at a time, one
//! thread, no rights checked: never a production server.

use crate::broker::{Ask, Hub, Refusal};
use nix::sys::socket::{ControlMessage, MsgFlags, getsockopt, sendmsg, sockopt::PeerCredentials};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What a [`Serve`] hands out.
enum Source {
    /// The image and writer objects of a hub (the master's answers).
    Hub(Hub),
    /// These descriptors as "the image", one per `shm_image` request in turn (a test that feeds
    /// clients garbage); every other request is refused.
    Fixed(Vec<std::os::fd::OwnedFd>, std::sync::atomic::AtomicUsize),
}

/// Serves a hub (or fixed descriptors) at a socket path until dropped.
pub struct Serve {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Serve {
    /// Bind `path` and serve `hub` on it.
    pub fn start(path: &Path, hub: Hub) -> std::io::Result<Serve> {
        Serve::with(path, Source::Hub(hub))
    }

    /// Bind `path` and hand out `fds` as the image, one per `shm_image` request in turn.
    pub fn fixed(path: &Path, fds: Vec<std::os::fd::OwnedFd>) -> std::io::Result<Serve> {
        Serve::with(
            path,
            Source::Fixed(fds, std::sync::atomic::AtomicUsize::new(0)),
        )
    }

    fn with(path: &Path, src: Source) -> std::io::Result<Serve> {
        let _ = std::fs::remove_file(path);
        let l = UnixListener::bind(path)?;
        l.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                match l.accept() {
                    Ok((c, _)) => {
                        let _ = c.set_nonblocking(false);
                        let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                        one(&c, &src);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Ok(Serve {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn one(c: &std::os::unix::net::UnixStream, src: &Source) {
    let Ok(cred) = getsockopt(c, PeerCredentials) else {
        return;
    };
    let mut r = BufReader::new(c);
    let mut line = String::new();
    while r.read_line(&mut line).is_ok_and(|n| n > 0) {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        line.clear();
        let num = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(u64::MAX) as u32;
        let name = v.get("name").and_then(|x| x.as_str()).unwrap_or("");
        let ask = match v.get("cmd").and_then(|x| x.as_str()) {
            Some("shm_image") => Ask::Image,
            Some("shm_writer") => Ask::Writer(name),
            Some("shm_claim") => Ask::Claim {
                slot: num("slot"),
                row: num("row"),
            },
            Some("shm_release") => Ask::Release {
                slot: num("slot"),
                row: num("row"),
            },
            _ => {
                let _ = (&*c).write_all(b"{\"ok\":false,\"error\":\"unknown\"}\n");
                continue;
            }
        };
        let answer = match src {
            Source::Hub(hub) => hub.answer(&ask, cred.pid() as u32, cred.uid()),
            Source::Fixed(fds, next) if ask == Ask::Image && !fds.is_empty() => {
                let k = next.fetch_add(1, Ordering::Relaxed) % fds.len();
                fds[k]
                    .try_clone()
                    .map(|fd| (serde_json::json!({"generation": 0, "bytes": 0}), Some(fd)))
                    .map_err(|e| Refusal::Runtime(e.to_string()))
            }
            Source::Fixed(..) => Err(Refusal::Usage("a fixed image only".into())),
        };
        let (reply, fd) = match answer {
            Ok((data, fd)) => (serde_json::json!({"ok": true, "data": data}), fd),
            Err(Refusal::Usage(m) | Refusal::Runtime(m)) => {
                (serde_json::json!({"ok": false, "error": m}), None)
            }
        };
        let text = format!("{reply}\n");
        match fd {
            Some(fd) => {
                let raw = [fd.as_raw_fd()];
                let iov = [std::io::IoSlice::new(&text.as_bytes()[..1])];
                let cm = [ControlMessage::ScmRights(&raw)];
                if sendmsg::<()>(c.as_raw_fd(), &iov, &cm, MsgFlags::MSG_NOSIGNAL, None).is_err() {
                    return;
                }
                let _ = (&*c).write_all(&text.as_bytes()[1..]);
            }
            None => {
                let _ = (&*c).write_all(text.as_bytes());
            }
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
