//! A device's file read over FoE for the page (`foe_read` of the control socket): the master
//! writes the file into a descriptor the client passes; rtcat-web passes a memfd of its own
//! (nothing on a disk, no path the master opens) and answers with its bytes.

use rtcat_control::{Client, ClientError, Request};
use std::io::{Read, Seek};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

/// Largest file handed to the page (rtcat-web's unit has MemoryMax=128M).
pub const MAX_BYTES: u64 = 32 << 20;
/// How long a transfer may take (the master's own FoE timeout is per packet).
const TIMEOUT: Duration = Duration::from_secs(120);

/// Why a read gave no file: the HTTP status and the text.
pub type Failed = (u16, String);

/// The bytes of `name` on the device at `position`, read through the master at `control`.
pub fn read(control: &Path, position: u16, name: &str, password: u32) -> Result<Vec<u8>, Failed> {
    let req = Request::FoeRead {
        position,
        name: name.to_string(),
        password,
    };
    let fd =
        nix::sys::memfd::memfd_create(c"rtcat-web-foe", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .map_err(|e| (500, format!("memfd_create: {e}")))?;
    let mut c = Client::connect(control)
        .map_err(|e| (503, e.to_string()))?
        .with_timeout(TIMEOUT);
    let reply = c
        .request_with_fd(&req, fd.as_fd())
        .and_then(|r| r.into_result().map_err(ClientError::Failed))
        .map_err(|e| match e {
            ClientError::Failed(f) if f.kind == rtcat_control::FailureKind::Usage => {
                (400, f.message)
            }
            ClientError::Failed(f) => (502, format!("the master: {}", f.message)),
            ClientError::Timeout(_) => (504, e.to_string()),
            e => (503, e.to_string()),
        })?;
    drop(reply);
    let mut f = std::fs::File::from(fd);
    f.rewind()
        .map_err(|e| (500, format!("the file's memfd: {e}")))?;
    let mut data = Vec::new();
    f.take(MAX_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|e| (500, format!("the file's memfd: {e}")))?;
    if data.len() as u64 > MAX_BYTES {
        return Err((
            413,
            format!("{name}: larger than {MAX_BYTES} bytes, more than the page hands out"),
        ));
    }
    Ok(data)
}

/// Write `data` to `name` on the device at `position` through the master at `control`: the
/// bytes go into a memfd whose descriptor the master reads.
pub fn write(
    control: &Path,
    position: u16,
    name: &str,
    password: u32,
    data: &[u8],
) -> Result<serde_json::Value, Failed> {
    use std::io::Write;
    // A file of the running device, not a firmware update (BOOT): that is `rtcat foe write
    // --boot --control`'s, one device at a time with its own checks.
    let req = Request::FoeWrite {
        position,
        name: name.to_string(),
        password,
        boot: false,
    };
    let fd =
        nix::sys::memfd::memfd_create(c"rtcat-web-foe", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .map_err(|e| (500, format!("memfd_create: {e}")))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(data)
        .and_then(|()| f.rewind())
        .map_err(|e| (500, format!("the file's memfd: {e}")))?;
    let mut c = Client::connect(control)
        .map_err(|e| (503, e.to_string()))?
        .with_timeout(TIMEOUT);
    c.request_with_fd(&req, f.as_fd())
        .and_then(|r| r.into_result().map_err(ClientError::Failed))
        .map_err(|e| match e {
            ClientError::Failed(f) if f.kind == rtcat_control::FailureKind::Usage => {
                (400, f.message)
            }
            ClientError::Failed(f) => (502, format!("the master: {}", f.message)),
            ClientError::Timeout(_) => (504, e.to_string()),
            e => (503, e.to_string()),
        })
}
