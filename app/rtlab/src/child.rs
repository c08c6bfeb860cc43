//! Child processes the lab starts (a background `rtcat load`, stress-ng, the ladder's `rtcat
//! bench`): each in its own process group, so that the whole group can be signalled and a
//! terminal's Ctrl-C reaches only the parent, which decides what to forward.

use std::process::{Child, Command, Stdio};

/// Spawns `cmd` in its own process group with stdin from /dev/null, `stdout` and `stderr` as
/// given, and SIGTERM as parent-death signal (prctl(2) PR_SET_PDEATHSIG): a parent that dies
/// does not leave it running.
pub(crate) fn spawn_in_group(
    cmd: &mut Command,
    stdout: Stdio,
    stderr: Stdio,
) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    // SAFETY: set_pdeathsig is one prctl call (async-signal-safe, no allocation); nothing else
    // runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn()
}
