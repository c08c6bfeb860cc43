//! File access over EtherCAT (FoE, ETG.1000.5/.6 "FoE"): the device side of a CoE device that
//! lists `[[device.file]]`. Firmware images and parameter files travel through the mailbox in
//! packets; what a master writes is kept by the device (its flash: a power cycle keeps it).
//!
//! Services (the FoE header: opcode, a reserved byte, then a 32-bit field):
//! - read request (1: password, file name) -> DATA 1, 2, ... each acknowledged by the master's
//!   ACK of the same number; a packet shorter than the most a mailbox carries ends the file (an
//!   empty one when the file is a whole number of packets);
//! - write request (2: password, file name) -> ACK 0, then the master's DATA n answered with
//!   ACK n; a short packet ends the file, which then replaces the old content;
//! - ERROR (5: code, text) from the master aborts a transfer;
//! - BUSY (6: done and entire as two u16, then a text) where the file has `busy = N`: the write
//!   request and every N-th DATA packet of a write are answered BUSY once, as a device erasing
//!   or programming its flash does; the master sends the same request again and gets the ACK.
//!
//! Errors (ETG.1000.6 FoE error codes) name what went wrong: 0x8001 not found, 0x8002 access
//! denied (a read-only file written), 0x8003 disk full (beyond the file's `max_bytes`), 0x8004
//! illegal (an opcode out of turn), 0x8005 packet number wrong, 0x8008 bootstrap only (a file
//! the device serves only in BOOT), 0x800A no rights (a wrong password).

use crate::spec::FileSpec;

/// FoE opcodes.
pub mod op {
    pub const READ: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const DATA: u8 = 3;
    pub const ACK: u8 = 4;
    pub const ERROR: u8 = 5;
    pub const BUSY: u8 = 6;
}

/// FoE error codes (ETG.1000.6).
pub mod code {
    pub const NOT_DEFINED: u32 = 0x8000;
    pub const NOT_FOUND: u32 = 0x8001;
    pub const ACCESS_DENIED: u32 = 0x8002;
    pub const DISK_FULL: u32 = 0x8003;
    pub const ILLEGAL: u32 = 0x8004;
    pub const PACKET_NUMBER: u32 = 0x8005;
    pub const BOOTSTRAP_ONLY: u32 = 0x8008;
    pub const NO_RIGHTS: u32 = 0x800a;
}

/// Bytes of the FoE header: opcode, reserved, the 32-bit packet number / password / code.
pub const HEADER: usize = 6;

/// One file of the device and its content now.
#[derive(Debug, Clone)]
struct File {
    spec: FileSpec,
    data: Vec<u8>,
}

#[derive(Debug, Clone)]
enum Transfer {
    /// Sending `file`; `sent` bytes are out, packet `packet` was the last; `last` when that
    /// packet ended the file.
    Read {
        file: usize,
        sent: usize,
        packet: u32,
        last: bool,
    },
    /// Receiving into `buf` for `file`; packet `packet` was the last acknowledged.
    Write {
        file: usize,
        buf: Vec<u8>,
        packet: u32,
    },
}

/// The FoE side of one device.
#[derive(Debug, Clone)]
pub struct FoeServer {
    files: Vec<File>,
    transfer: Option<Transfer>,
    /// The request last answered BUSY (opcode, value): its repeat is served.
    busy_for: Option<(u8, u32)>,
    /// BUSY replies sent.
    busy_sent: u64,
    /// The revision of a firmware image whose write just completed, for the device to take.
    installed: Option<u32>,
}

impl FoeServer {
    pub fn new(files: &[FileSpec]) -> FoeServer {
        FoeServer {
            files: files
                .iter()
                .map(|f| File {
                    spec: f.clone(),
                    data: f.content.clone(),
                })
                .collect(),
            transfer: None,
            busy_for: None,
            busy_sent: 0,
            installed: None,
        }
    }

    /// The revision of a firmware image (`[[device.file]] revision`) whose write completed
    /// since the last call.
    pub fn take_installed(&mut self) -> Option<u32> {
        self.installed.take()
    }

    /// Power-on or INIT: a transfer under way is lost; the files are kept (flash).
    pub fn reset(&mut self) {
        self.transfer = None;
        self.busy_for = None;
    }

    /// BUSY replies sent so far.
    pub fn busy_sent(&self) -> u64 {
        self.busy_sent
    }

    /// Whether request (`opcode`, `value`) on file `file` gets BUSY first: the write request,
    /// and every `busy`-th DATA packet; once each (its repeat is served).
    fn busy_first(&mut self, file: usize, opcode: u8, value: u32) -> Option<Vec<u8>> {
        let every = self.files[file].spec.busy;
        let due = every > 0
            && (opcode == op::WRITE || (opcode == op::DATA && value.is_multiple_of(every)));
        if !due || self.busy_for == Some((opcode, value)) {
            self.busy_for = None;
            return None;
        }
        self.busy_for = Some((opcode, value));
        self.busy_sent += 1;
        let mut p = vec![op::BUSY, 0];
        p.extend_from_slice(&(value.min(u32::from(u16::MAX)) as u16).to_le_bytes());
        p.extend_from_slice(&u16::MAX.to_le_bytes());
        p.extend_from_slice(b"programming flash");
        Some(p)
    }

    /// The content of the file `name` now.
    pub fn file(&self, name: &str) -> Option<&[u8]> {
        self.files
            .iter()
            .find(|f| f.spec.name == name)
            .map(|f| f.data.as_slice())
    }

    /// Serve one FoE request (the mailbox data after its header). `boot`: the device is in
    /// BOOT; `room`: bytes of mailbox data a response may carry. Returns the FoE responses
    /// (none after the master's last ACK of a read or its ERROR).
    pub fn handle(&mut self, req: &[u8], boot: bool, room: usize) -> Vec<Vec<u8>> {
        let Some((&opcode, rest)) = req.split_first() else {
            return vec![error(code::ILLEGAL, "empty FoE request")];
        };
        let value = rest
            .get(1..5)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
        let Some(value) = value else {
            self.transfer = None;
            return vec![error(code::ILLEGAL, "FoE header too short")];
        };
        let body = &req[HEADER..];
        let chunk = room.saturating_sub(HEADER).max(1);
        match opcode {
            op::READ | op::WRITE => {
                self.transfer = None;
                let name = String::from_utf8_lossy(body);
                let name = name.trim_end_matches('\0');
                let Some(i) = self.files.iter().position(|f| f.spec.name == name) else {
                    return vec![error(code::NOT_FOUND, "file not found")];
                };
                let f = &self.files[i];
                if f.spec.boot && !boot {
                    return vec![error(code::BOOTSTRAP_ONLY, "only in BOOT")];
                }
                if value != f.spec.password {
                    return vec![error(code::NO_RIGHTS, "wrong password")];
                }
                if opcode == op::WRITE {
                    if !f.spec.writable {
                        return vec![error(code::ACCESS_DENIED, "read-only file")];
                    }
                    if let Some(b) = self.busy_first(i, opcode, value) {
                        return vec![b];
                    }
                    self.transfer = Some(Transfer::Write {
                        file: i,
                        buf: Vec::new(),
                        packet: 0,
                    });
                    return vec![ack(0)];
                }
                self.transfer = Some(Transfer::Read {
                    file: i,
                    sent: 0,
                    packet: 0,
                    last: false,
                });
                self.next_data(chunk)
            }
            op::ACK => match self.transfer {
                Some(Transfer::Read { packet, last, .. }) if value == packet => {
                    if last {
                        self.transfer = None;
                        Vec::new()
                    } else {
                        self.next_data(chunk)
                    }
                }
                Some(Transfer::Read { .. }) => {
                    self.transfer = None;
                    vec![error(code::PACKET_NUMBER, "packet number wrong")]
                }
                _ => vec![error(code::ILLEGAL, "no read under way")],
            },
            op::DATA => {
                // The next packet of a write may find the device busy (once).
                if let Some(Transfer::Write { file, packet, .. }) = &self.transfer
                    && value == packet.wrapping_add(1)
                {
                    let f = *file;
                    if let Some(b) = self.busy_first(f, op::DATA, value) {
                        return vec![b];
                    }
                }
                self.data(value, body, chunk)
            }
            op::ERROR => {
                self.transfer = None;
                Vec::new()
            }
            _ => {
                self.transfer = None;
                vec![error(code::ILLEGAL, "unknown FoE opcode")]
            }
        }
    }

    /// A DATA packet of a write.
    fn data(&mut self, value: u32, body: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        match &mut self.transfer {
            Some(Transfer::Write { file, buf, packet }) if value == packet.wrapping_add(1) => {
                let max = self.files[*file].spec.max_bytes as usize;
                if buf.len() + body.len() > max {
                    self.transfer = None;
                    return vec![error(code::DISK_FULL, "file too large")];
                }
                buf.extend_from_slice(body);
                *packet = value;
                let done = body.len() < chunk;
                if done {
                    let (file, buf) = (*file, std::mem::take(buf));
                    self.files[file].data = buf;
                    self.installed = self.files[file].spec.revision.or(self.installed);
                    self.transfer = None;
                }
                vec![ack(value)]
            }
            Some(Transfer::Write { .. }) => {
                self.transfer = None;
                vec![error(code::PACKET_NUMBER, "packet number wrong")]
            }
            _ => vec![error(code::ILLEGAL, "no write under way")],
        }
    }

    /// The next DATA packet of the read under way.
    fn next_data(&mut self, chunk: usize) -> Vec<Vec<u8>> {
        let Some(Transfer::Read {
            file,
            sent,
            packet,
            last,
        }) = &mut self.transfer
        else {
            return Vec::new();
        };
        let data = &self.files[*file].data;
        let n = chunk.min(data.len() - *sent);
        *packet += 1;
        let mut p = vec![op::DATA, 0];
        p.extend_from_slice(&packet.to_le_bytes());
        p.extend_from_slice(&data[*sent..*sent + n]);
        *sent += n;
        *last = n < chunk;
        vec![p]
    }
}

fn ack(packet: u32) -> Vec<u8> {
    let mut p = vec![op::ACK, 0];
    p.extend_from_slice(&packet.to_le_bytes());
    p
}

fn error(code: u32, text: &str) -> Vec<u8> {
    let mut p = vec![op::ERROR, 0];
    p.extend_from_slice(&code.to_le_bytes());
    p.extend_from_slice(text.as_bytes());
    p
}
