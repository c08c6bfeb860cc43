//! `rtcat foe read|write`: files of a subdevice over FoE ([`rtcat_master::foe`]) on a segment
//! brought to PRE-OP, or with `--boot` in the device's BOOT state (its bootstrap mailbox; back to
//! INIT after). Exit 2 for the user's input (a position beyond the segment, a password or size
//! that does not parse, a local file that cannot be read), 1 for the bus and for the device's
//! refusals (the FoE error code and its meaning: not found, wrong password, too large, ...).
//!
//! With `--sim` the segment lives in this process: a write changes the simulated device until
//! the command ends (`--verify` reads it back within the same process).

use super::bus::{emit, json, open};
use crate::cli::BusArgs;
use crate::outcome::{Failure, Outcome};
use clap::{Args, Subcommand};
use rtcat_master::coe::Timeouts;
use rtcat_master::coe::segment::{self, PreOp};
use rtcat_master::diag;
use rtcat_master::foe::{self, Progress};
use rtcat_master::mailbox::BusMailbox;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Largest local file `foe write` sends.
pub const MAX_WRITE: u64 = 256 << 20;

/// How long an AL state change (INIT, BOOT) may take: a device starting its bootloader is slow.
const STATE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Subcommand, Debug)]
pub enum FoeCmd {
    /// Read a file of the device into FILE (written only once the whole file has arrived)
    Read(FoeReadArgs),
    /// Write FILE to the device (firmware: with --boot). With --sim the write goes to the
    /// simulated segment of this one process, which ends with it
    Write(FoeWriteArgs),
}

/// What both directions take.
#[derive(Args, Debug)]
pub struct FoeFileArgs {
    /// Position of the subdevice
    #[arg(value_name = "POS")]
    pub position: u32,
    /// The local file
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The file's name on the device (default: FILE's name)
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The password the device asks for, decimal or 0x hex, 32 bits (default: 0, none)
    #[arg(long, value_name = "N")]
    pub password: Option<String>,
    /// Take the device to BOOT for the transfer (INIT → BOOT → INIT), as firmware updates need
    #[arg(long)]
    pub boot: bool,
}

#[derive(Args, Debug)]
pub struct FoeReadArgs {
    #[command(flatten)]
    pub file: FoeFileArgs,
    /// Largest file to accept, in bytes (default 64 MiB)
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: Option<u64>,
    #[command(flatten)]
    pub bus: BusArgs,
}

#[derive(Args, Debug)]
pub struct FoeWriteArgs {
    #[command(flatten)]
    pub file: FoeFileArgs,
    /// Read the file back after the write and compare it byte for byte (says so when the
    /// device does not allow reading it)
    #[arg(long)]
    pub verify: bool,
    #[command(flatten)]
    pub bus: BusArgs,
}

/// `rtcat foe`.
pub fn foe(c: FoeCmd) -> Outcome {
    match c {
        FoeCmd::Read(a) => read(a),
        FoeCmd::Write(a) => write(a),
    }
}

/// A 32-bit password, decimal or 0x hex.
pub fn parse_password(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => t.parse::<u32>().ok(),
    };
    v.ok_or_else(|| format!("--password {s:?}: not a 32-bit number (decimal or 0x hex)"))
}

impl FoeFileArgs {
    /// `--password`, 0 when not given.
    fn password(&self) -> Result<u32, Failure> {
        self.password
            .as_deref()
            .map(parse_password)
            .transpose()
            .map_err(Failure::Usage)
            .map(|p| p.unwrap_or(0))
    }
}

/// The device's file name: --name, else FILE's name.
fn device_name(a: &FoeFileArgs) -> Result<String, Failure> {
    let name = match &a.name {
        Some(n) => n.clone(),
        None => a
            .file
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "FILE {}: no file name to use on the device (give --name)",
                    a.file.display()
                ))
            })?,
    };
    if name.is_empty() || name.len() > foe::MAX_NAME {
        return Err(Failure::Usage(format!(
            "--name {name:?}: a device file name has 1..={} bytes",
            foe::MAX_NAME
        )));
    }
    Ok(name)
}

/// How long a transfer through a running master may take (a firmware image at the mailbox
/// budget's pace: about 100 KiB/s at a 1 ms cycle).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(3600);

/// An FoE transfer through the running master on `--control SOCK` (`foe_read` / `foe_write`,
/// the file's descriptor passed with the request: the master opens no path). A write with
/// `--boot` is a firmware update of one device of the running segment (see the man page).
fn through_master(
    bus: &BusArgs,
    request: &rtcat_control::Request,
    file: &std::fs::File,
) -> Result<serde_json::Value, Failure> {
    use rtcat_control::client::Client;
    use std::os::fd::AsFd;
    let path = bus.control.as_deref().expect("--control");
    let mut c = Client::connect(path)
        .map_err(|e| Failure::Runtime(e.to_string()))?
        .with_timeout(CONTROL_TIMEOUT);
    let r = c
        .request_with_fd(request, file.as_fd())
        .map_err(|e| Failure::Runtime(e.to_string()))?;
    r.into_result().map_err(|f| match f.kind {
        rtcat_control::FailureKind::Usage => Failure::Usage(f.message),
        _ => Failure::Runtime(f.message),
    })
}

/// Progress on stderr when it is a terminal, at most 10 times a second.
struct Meter {
    on: bool,
    label: String,
    start: Instant,
    last: Option<Instant>,
    shown: bool,
}

impl Meter {
    fn new(label: String) -> Meter {
        Meter {
            on: std::io::stderr().is_terminal(),
            label,
            start: Instant::now(),
            last: None,
            shown: false,
        }
    }

    /// The transfer starts now.
    fn begin(&mut self) {
        self.start = Instant::now();
    }

    fn show(&mut self, p: Progress) {
        if !self.on
            || self
                .last
                .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(Instant::now());
        let kib = p.done as f64 / 1024.0;
        let mut line = match p.total {
            Some(t) if t > 0 => format!(
                "{}: {kib:.1} / {:.1} KiB ({:.0} %)",
                self.label,
                t as f64 / 1024.0,
                100.0 * p.done as f64 / t as f64
            ),
            _ => format!("{}: {kib:.1} KiB", self.label),
        };
        let s = self.start.elapsed().as_secs_f64();
        if s > 0.0 {
            line.push_str(&format!(", {:.0} KiB/s", kib / s));
        }
        if let Some((d, e)) = p.busy {
            line.push_str(&format!(", device busy {d}/{e}"));
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{line}");
        let _ = err.flush();
        self.shown = true;
    }

    fn done(&mut self) {
        if self.shown {
            let _ = writeln!(std::io::stderr().lock());
            self.shown = false;
        }
    }
}

/// Run `f` on the FoE client of `position` (in BOOT with `boot`), on the segment `bus` names.
fn on_device<R: Send>(
    bus: &BusArgs,
    position: u32,
    boot: bool,
    f: impl FnOnce(&mut foe::BusClient<'_, '_>) -> Result<R, foe::Error> + Send,
) -> Result<(R, Vec<rtcat_master::coe::Emergency>), Failure> {
    let (s, _cfg) = open(bus)?;
    Ok(segment::with_pre_op(
        s.maindevice(),
        Timeouts::default(),
        move |seg: &PreOp<'_>| {
            let d = seg.device(position)?;
            if !d.sii.protocols.foe {
                return Err(diag::Error::Foe(foe::Error::State {
                    position: d.position,
                    why: d.not_announced("FoE"),
                }));
            }
            let run = |m: &mut BusMailbox<'_>| {
                let r = f(&mut foe::Client::new(m));
                let em = m.take_emergencies();
                r.map(|v| (v, em))
            };
            let r = if boot {
                seg.with_boot_mailbox(position, STATE_TIMEOUT, run)?
            } else {
                seg.with_mailbox(position, run)?
            };
            Ok(r?)
        },
    )?)
}

fn kib_per_s(bytes: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / 1024.0 / secs
    } else {
        0.0
    }
}

#[derive(serde::Serialize)]
struct ReadJson<'a> {
    position: u32,
    name: &'a str,
    file: String,
    bytes: usize,
    seconds: f64,
    kib_per_s: f64,
    boot: bool,
}

fn read(a: FoeReadArgs) -> Outcome {
    let name = device_name(&a.file)?;
    let password = a.file.password()?;
    let max_read = match a.max_bytes {
        None => foe::MAX_READ,
        Some(0) => return Err(Failure::Usage("--max-bytes 0: at least 1 byte".into())),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    };
    // Where the file goes is checked before the bus is opened: a directory that is not there
    // is the user's input, not a bus failure after the transfer.
    let dir = match a.file.file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(Failure::Usage(format!(
            "FILE {}: the directory {} does not exist",
            a.file.file.display(),
            dir.display()
        )));
    }
    let (position, boot) = (a.file.position, a.file.boot);
    let (bytes, secs) = if a.bus.control.is_some() {
        if boot {
            // Only a firmware update (a write) takes one device of a running segment to BOOT.
            return Err(Failure::Usage(
                "foe read --boot with --control: a running master takes a device to BOOT only \
                 to write its firmware; stop the master and read with --iface"
                    .into(),
            ));
        }
        read_through_master(&a, position, &name, password, max_read)?
    } else {
        let mut meter = Meter::new(format!("foe read {name}"));
        let n2 = name.clone();
        let meter_ref = &mut meter;
        let r = on_device(&a.bus, position, boot, move |c| {
            let mut l = c.limits();
            l.max_read = max_read;
            c.set_limits(l);
            // The transfer alone is timed (not the bring-up to PRE-OP or BOOT).
            meter_ref.begin();
            let d = c.read(&n2, password, &mut |p| meter_ref.show(p))?;
            Ok((d, meter_ref.start.elapsed().as_secs_f64()))
        });
        meter.done();
        let ((data, secs), emergencies) = r?;
        super::sdo::say_emergencies(&emergencies);
        store(&a.file.file, &data)?;
        (data.len(), secs)
    };
    emit(&if a.bus.json {
        json(&ReadJson {
            position,
            name: &name,
            file: a.file.file.display().to_string(),
            bytes,
            seconds: secs,
            kib_per_s: kib_per_s(bytes, secs),
            boot,
        })
    } else {
        format!(
            "position {position}: read {} bytes of {name:?} into {} in {secs:.2} s ({:.1} KiB/s)\n",
            bytes,
            a.file.file.display(),
            kib_per_s(bytes, secs)
        )
    });
    Ok(())
}

/// Write `data` to `path` through a temporary file beside it, renamed into place: a transfer
/// that fails leaves no half file and the old content.
fn store(path: &Path, data: &[u8]) -> Result<(), Failure> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".rtcat-foe-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let r = std::fs::write(&tmp, data).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(Failure::Runtime(format!(
            "FILE {}: cannot write it: {e}",
            path.display()
        )));
    }
    Ok(())
}

/// What the read-back after a write found.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "result")]
enum Verified {
    /// Byte for byte the same.
    Identical,
    /// Not the same: where they first differ.
    Differs {
        /// First differing byte (or the shorter length).
        offset: usize,
        /// Bytes read back.
        read: usize,
    },
    /// The device does not allow reading the file back.
    NotReadable {
        /// The device's refusal.
        why: String,
    },
}

#[derive(serde::Serialize)]
struct WriteJson<'a> {
    position: u32,
    name: &'a str,
    file: String,
    bytes: usize,
    seconds: f64,
    kib_per_s: f64,
    boot: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    verify: Option<Verified>,
}

fn write(a: FoeWriteArgs) -> Outcome {
    let name = device_name(&a.file)?;
    let password = a.file.password()?;
    let path = &a.file.file;
    let meta = std::fs::metadata(path)
        .map_err(|e| Failure::Usage(format!("FILE {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(Failure::Usage(format!(
            "FILE {}: not a regular file",
            path.display()
        )));
    }
    if meta.len() > MAX_WRITE {
        return Err(Failure::Usage(format!(
            "FILE {}: {} bytes; rtcat foe writes at most {MAX_WRITE} bytes",
            path.display(),
            meta.len()
        )));
    }
    let data =
        std::fs::read(path).map_err(|e| Failure::Usage(format!("FILE {}: {e}", path.display())))?;
    let (position, boot, verify) = (a.file.position, a.file.boot, a.verify);
    if a.bus.control.is_some() {
        let (secs, verified) = write_through_master(&a, position, &name, password, &data)?;
        return say_written(&a, &name, data.len(), secs, verified);
    }
    let mut meter = Meter::new(format!("foe write {name}"));
    let (n2, d2) = (name.clone(), &data);
    let meter_ref = &mut meter;
    let r = on_device(&a.bus, position, boot, move |c| {
        // The transfer alone is timed (not the bring-up, not the read-back).
        meter_ref.begin();
        c.write(&n2, password, d2, &mut |p| meter_ref.show(p))?;
        let secs = meter_ref.start.elapsed().as_secs_f64();
        if !verify {
            return Ok((secs, None));
        }
        let v = match c.read(&n2, password, &mut |_| {}) {
            Ok(back) if back == *d2 => Verified::Identical,
            Ok(back) => Verified::Differs {
                offset: back
                    .iter()
                    .zip(d2.iter())
                    .position(|(x, y)| x != y)
                    .unwrap_or(back.len().min(d2.len())),
                read: back.len(),
            },
            Err(e @ foe::Error::Device { .. }) => Verified::NotReadable { why: e.to_string() },
            Err(e) => return Err(e),
        };
        Ok((secs, Some(v)))
    });
    meter.done();
    let ((secs, verified), emergencies) = r?;
    super::sdo::say_emergencies(&emergencies);
    if a.bus.sim {
        crate::say!(
            "rtcat: note: --sim: written to this process's simulated segment, which ends with \
             the command"
        );
    }
    say_written(&a, &name, data.len(), secs, verified)
}

/// What a write did, on stdout (and the note on --sim).
fn say_written(
    a: &FoeWriteArgs,
    name: &str,
    bytes: usize,
    secs: f64,
    verified: Option<Verified>,
) -> Outcome {
    let (position, boot, path) = (a.file.position, a.file.boot, &a.file.file);
    let rate = kib_per_s(bytes, secs);
    if a.bus.json {
        emit(&json(&WriteJson {
            position,
            name,
            file: path.display().to_string(),
            bytes,
            seconds: secs,
            kib_per_s: rate,
            boot,
            verify: verified.clone(),
        }));
    } else {
        let check = match &verified {
            None => String::new(),
            Some(Verified::Identical) => "; read back: identical".into(),
            Some(Verified::NotReadable { .. }) => "; not verified (see above)".into(),
            Some(Verified::Differs { offset, read }) => {
                format!("; read back {read} bytes, DIFFERENT from byte {offset}")
            }
        };
        emit(&format!(
            "position {position}: wrote {} bytes to {name:?} in {secs:.2} s ({rate:.1} KiB/s){check}\n",
            bytes
        ));
    }
    match verified {
        Some(Verified::NotReadable { why }) => {
            crate::say!(
                "rtcat: written, but not verified: the device does not allow reading it back: {why}"
            );
            Ok(())
        }
        Some(Verified::Differs { offset, read }) => Err(Failure::Runtime(format!(
            "position {position}: {name:?}: the device holds {read} bytes that differ from FILE \
             {} ({} bytes) from byte {offset} on",
            path.display(),
            bytes
        ))),
        _ => Ok(()),
    }
}

/// A read through the running master: into a temporary file beside FILE (its descriptor
/// passed), renamed into place once the whole file has arrived. Bytes and seconds.
fn read_through_master(
    a: &FoeReadArgs,
    position: u32,
    name: &str,
    password: u32,
    max_read: usize,
) -> Result<(usize, f64), Failure> {
    let path = &a.file.file;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".rtcat-foe-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let f = std::fs::File::create(&tmp).map_err(|e| {
        Failure::Usage(format!(
            "FILE {}: cannot write beside it: {e}",
            path.display()
        ))
    })?;
    let position = u16::try_from(position)
        .map_err(|_| Failure::Usage(format!("POS {position}: at most {}", u16::MAX)))?;
    let r = through_master(
        &a.bus,
        &rtcat_control::Request::FoeRead {
            position,
            name: name.to_string(),
            password,
        },
        &f,
    )
    .and_then(|v| {
        let bytes = v["bytes"].as_u64().unwrap_or(0) as usize;
        if bytes > max_read {
            return Err(Failure::Runtime(format!(
                "position {position}: {name:?} has {bytes} bytes, more than --max-bytes {max_read}"
            )));
        }
        std::fs::rename(&tmp, path)
            .map_err(|e| Failure::Runtime(format!("FILE {}: {e}", path.display())))?;
        Ok((bytes, v["seconds"].as_f64().unwrap_or(0.0)))
    });
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// A write through the running master (FILE's descriptor passed), and with --verify a read
/// back into an unlinked temporary file compared byte for byte. Seconds and the verdict.
fn write_through_master(
    a: &FoeWriteArgs,
    position: u32,
    name: &str,
    password: u32,
    data: &[u8],
) -> Result<(f64, Option<Verified>), Failure> {
    use std::io::{Read, Seek};
    let path = &a.file.file;
    let position = u16::try_from(position)
        .map_err(|_| Failure::Usage(format!("POS {position}: at most {}", u16::MAX)))?;
    let f = std::fs::File::open(path)
        .map_err(|e| Failure::Usage(format!("FILE {}: {e}", path.display())))?;
    let req = |read: bool| {
        let (name, password) = (name.to_string(), password);
        if read {
            rtcat_control::Request::FoeRead {
                position,
                name,
                password,
            }
        } else {
            rtcat_control::Request::FoeWrite {
                position,
                name,
                password,
                boot: a.file.boot,
            }
        }
    };
    let v = through_master(&a.bus, &req(false), &f)?;
    let secs = v["seconds"].as_f64().unwrap_or(0.0);
    if a.file.boot {
        let after = v["after"].as_str().unwrap_or("not read");
        if v["back_in_op"].as_bool() == Some(true) {
            crate::say!(
                "rtcat: position {position}: back in OP after the update (identity {} before, \
                 {after} now)",
                v["before"].as_str().unwrap_or("?")
            );
        } else {
            crate::say!(
                "rtcat: position {position}: written and handed back, not in OP yet: its \
                 recovery goes on (see events.log)"
            );
        }
    }
    if !a.verify {
        return Ok((secs, None));
    }
    // The read-back lands in a file nobody else can open (unlinked at once).
    let tmp = std::env::temp_dir().join(format!("rtcat-foe-verify-{}", std::process::id()));
    let mut back_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| Failure::Runtime(format!("{}: {e}", tmp.display())))?;
    let _ = std::fs::remove_file(&tmp);
    let verified = match through_master(&a.bus, &req(true), &back_file) {
        Ok(_) => {
            let mut back = Vec::new();
            back_file
                .rewind()
                .and_then(|()| back_file.read_to_end(&mut back))
                .map_err(|e| Failure::Runtime(format!("the file read back: {e}")))?;
            if back == data {
                Verified::Identical
            } else {
                Verified::Differs {
                    offset: back
                        .iter()
                        .zip(data.iter())
                        .position(|(x, y)| x != y)
                        .unwrap_or(back.len().min(data.len())),
                    read: back.len(),
                }
            }
        }
        Err(Failure::Runtime(why)) => Verified::NotReadable { why },
        Err(f) => return Err(f),
    };
    Ok((secs, Some(verified)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_parse_as_decimal_or_hex_and_name_the_bad_value() {
        assert_eq!(parse_password("0"), Ok(0));
        assert_eq!(parse_password("4660"), Ok(0x1234));
        assert_eq!(parse_password("0x1234"), Ok(0x1234));
        assert_eq!(parse_password("0XFFFFFFFF"), Ok(u32::MAX));
        let e = parse_password("0x1_0000_0000").unwrap_err();
        assert!(e.contains("\"0x1_0000_0000\""), "{e}");
        assert!(parse_password("4294967296").is_err());
        assert!(parse_password("-1").is_err());
        assert!(parse_password("").is_err());
    }
}
