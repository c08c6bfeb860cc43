//! `rtcat sim` as a child process in the segment's network namespace, for the veth tests and the
//! master benchmark (included by both with `#[path]`). Stopped with SIGTERM when dropped.

use ecsim::netns::VethPair;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct SimProc {
    child: Child,
    control: PathBuf,
    bin: PathBuf,
}

impl SimProc {
    /// Start `BIN sim` on the segment end of `net` with its control socket at `control`, at
    /// SCHED_FIFO 70 (like a real ESC, the segment answers whatever else runs), and wait for its
    /// "listening" line: the responder socket exists before the first frame is sent.
    #[allow(dead_code)] // the CoE tests start their segment file with `start_segment`
    pub fn start(bin: &Path, net: &VethPair, control: &Path) -> SimProc {
        Self::start_segment(bin, net, control, None)
    }

    /// As [`SimProc::start`], answering as the segment described in `segment` (a TOML file;
    /// None: the reference segment).
    pub fn start_segment(
        bin: &Path,
        net: &VethPair,
        control: &Path,
        segment: Option<&Path>,
    ) -> SimProc {
        Self::start_with(bin, net, control, segment, &[])
    }

    /// As [`SimProc::start_segment`], with `extra` arguments (`--floor-echo`).
    pub fn start_with(
        bin: &Path,
        net: &VethPair,
        control: &Path,
        segment: Option<&Path>,
        extra: &[&str],
    ) -> SimProc {
        let mut cmd = net.segment_cmd(bin);
        cmd.args(["sim", "--priority", "70", "--iface", &net.segment_if])
            .arg("--control")
            .arg(control)
            .args(extra);
        if let Some(f) = segment {
            cmd.arg("--segment").arg(f);
        }
        let mut child = cmd.stderr(Stdio::piped()).spawn().expect("start rtcat sim");
        let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let t = Instant::now();
        loop {
            let l = lines
                .next()
                .expect("rtcat sim exited before listening")
                .expect("rtcat sim output");
            if l.contains("listening") {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "rtcat sim did not start"
            );
        }
        // keep draining stderr so that the simulator never blocks on a full pipe
        std::thread::spawn(move || for _ in lines {});
        SimProc {
            child,
            control: control.to_path_buf(),
            bin: bin.to_path_buf(),
        }
    }

    /// `rtcat sim-ctl CMD`; panics unless it succeeds. Returns its trimmed stdout.
    #[allow(dead_code)] // the benchmark only starts and stops the simulator
    pub fn ctl(&self, cmd: &str) -> String {
        let out = Command::new(&self.bin)
            .args(["sim-ctl", "--control"])
            .arg(&self.control)
            .args(cmd.split_whitespace())
            .output()
            .expect("run rtcat sim-ctl");
        assert!(
            out.status.success(),
            "sim-ctl {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for SimProc {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}
