//! Two network namespaces joined by a veth pair, for tests that need a real wire (root only).
//!
//! `VethPair::create("x")` makes namespaces `x-m<pid>-<k>` (master side, interface `ecm<pid>x<k>`)
//! and `x-s<pid>-<k>` (segment side, `ecs<pid>x<k>`), both ends up, no IP addresses; dropping it deletes both
//! namespaces (which removes the pair).

use std::io;
use std::process::Command;

fn netns_exec(ns: &str, program: &std::ffi::OsStr) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

#[derive(Debug)]
pub struct VethPair {
    pub master_ns: String,
    pub segment_ns: String,
    pub master_if: String,
    pub segment_if: String,
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        io::Error::new(e.kind(), format!("cannot run `ip` (install iproute2): {e}"))
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

impl VethPair {
    pub fn create(prefix: &str) -> io::Result<Self> {
        // Unique per process and per pair: tests of one binary run in parallel.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let v = VethPair {
            master_ns: format!("{prefix}-m{pid}-{k}"),
            segment_ns: format!("{prefix}-s{pid}-{k}"),
            master_if: format!("ecm{}x{k}", pid % 100_000),
            segment_if: format!("ecs{}x{k}", pid % 100_000),
        };
        // Leftovers of a crashed earlier run with the same pid.
        let _ = ip(&["netns", "del", &v.master_ns]);
        let _ = ip(&["netns", "del", &v.segment_ns]);
        ip(&["netns", "add", &v.master_ns])?;
        ip(&["netns", "add", &v.segment_ns])?;
        ip(&[
            "link",
            "add",
            &v.master_if,
            "netns",
            &v.master_ns,
            "type",
            "veth",
            "peer",
            "name",
            &v.segment_if,
            "netns",
            &v.segment_ns,
        ])?;
        ip(&["-n", &v.master_ns, "link", "set", &v.master_if, "up"])?;
        ip(&["-n", &v.segment_ns, "link", "set", &v.segment_if, "up"])?;
        Ok(v)
    }

    /// `program` run in the master's namespace (`ip netns exec`); add its arguments.
    pub fn master_cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        netns_exec(&self.master_ns, program.as_ref())
    }

    /// `program` run in the segment's namespace (`ip netns exec`); add its arguments.
    pub fn segment_cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        netns_exec(&self.segment_ns, program.as_ref())
    }

    /// Run `f` on a new thread that lives in namespace `ns` (sockets it opens stay there).
    pub fn in_ns<T: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<std::thread::JoinHandle<T>> {
        let path = format!("/run/netns/{ns}");
        let file = std::fs::File::open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            let r = nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET);
            let ok = r.is_ok();
            let _ = tx.send(r.map_err(io::Error::from));
            if !ok {
                panic!("setns failed");
            }
            f()
        });
        rx.recv()
            .map_err(|_| io::Error::other("namespace thread died"))??;
        Ok(h)
    }

    /// Take the segment-side link down or up (a cable pull on the wire).
    pub fn set_segment_link(&self, up: bool) -> io::Result<()> {
        ip(&[
            "-n",
            &self.segment_ns,
            "link",
            "set",
            &self.segment_if,
            if up { "up" } else { "down" },
        ])
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.master_ns]);
        let _ = ip(&["netns", "del", &self.segment_ns]);
    }
}

/// Whether tests needing root may run; when `RTCAT_REQUIRE_ROOT_TESTS` is set (CI as root) a
/// missing privilege is a failure rather than a skip.
pub fn root_or_skip(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("RTCAT_REQUIRE_ROOT_TESTS").is_none(),
        "{test} needs root but RTCAT_REQUIRE_ROOT_TESTS is set"
    );
    eprintln!("{test}: skipped (needs root for network namespaces)");
    false
}
