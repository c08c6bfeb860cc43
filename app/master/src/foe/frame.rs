//! FoE mailboxes as bytes: the request builders and the reply parser, pure functions over
//! slices (no bus), unit-tested and fuzzed.
//!
//! Layout (ETG.1000.5 §5.3 / ETG.1000.6 §5.3 "FoE", little-endian): the mailbox header (type 4,
//! [`crate::mailbox`]), then the FoE header of 6 bytes: opcode (u8), a reserved byte, and a
//! 32-bit field whose meaning depends on the opcode: the password of a read or write request
//! (followed by the file name), the packet number of DATA (followed by the data) and ACK, the
//! error code of ERROR (followed by an optional text). BUSY carries `done` and `entire` (u16
//! each: the device's progress on what keeps it busy) followed by an optional text.

use crate::mailbox::{self, kind};
use thiserror::Error;

/// Bytes of the FoE header.
pub const HEADER: usize = 6;

/// Mailbox header + FoE header: where a packet's data starts, and what a mailbox of `n` bytes
/// leaves for data (`n - OVERHEAD`).
pub const OVERHEAD: usize = mailbox::HEADER + HEADER;

/// FoE opcodes.
pub mod opcode {
    /// Read request (RRQ).
    pub const READ: u8 = 1;
    /// Write request (WRQ).
    pub const WRITE: u8 = 2;
    /// A packet of file data.
    pub const DATA: u8 = 3;
    /// Acknowledge of a packet (or of a write request: packet 0).
    pub const ACK: u8 = 4;
    /// Error: the transfer is over.
    pub const ERROR: u8 = 5;
    /// Busy: repeat the last request later.
    pub const BUSY: u8 = 6;
}

/// FoE error codes (ETG.1000.5 / ETG.1000.6, FoE error codes).
pub mod code {
    /// Not defined (the text says more).
    pub const NOT_DEFINED: u32 = 0x8000;
    /// Not found.
    pub const NOT_FOUND: u32 = 0x8001;
    /// Access denied.
    pub const ACCESS_DENIED: u32 = 0x8002;
    /// Disk full.
    pub const DISK_FULL: u32 = 0x8003;
    /// Illegal (an opcode out of turn).
    pub const ILLEGAL: u32 = 0x8004;
    /// Packet number wrong.
    pub const PACKET_NUMBER: u32 = 0x8005;
    /// Already exists.
    pub const ALREADY_EXISTS: u32 = 0x8006;
    /// No user.
    pub const NO_USER: u32 = 0x8007;
    /// Bootstrap only.
    pub const BOOTSTRAP_ONLY: u32 = 0x8008;
    /// Not bootstrap.
    pub const NOT_BOOTSTRAP: u32 = 0x8009;
    /// No rights.
    pub const NO_RIGHTS: u32 = 0x800a;
    /// Program error.
    pub const PROGRAM_ERROR: u32 = 0x800b;
}

/// What an FoE error code means, and for the common ones what to do.
pub fn error_text(code: u32) -> &'static str {
    match code {
        code::NOT_DEFINED => "not defined (see the device's text)",
        code::NOT_FOUND => "not found: the device has no file of that name",
        code::ACCESS_DENIED => "access denied: the device does not allow this on that file",
        code::DISK_FULL => "disk full: the file is larger than the device takes",
        code::ILLEGAL => "illegal request (a request out of turn)",
        code::PACKET_NUMBER => "packet number wrong",
        code::ALREADY_EXISTS => "already exists",
        code::NO_USER => "no user",
        code::BOOTSTRAP_ONLY => "bootstrap only: the device serves this file in BOOT (--boot)",
        code::NOT_BOOTSTRAP => "not in bootstrap: the device does not serve this file in BOOT",
        code::NO_RIGHTS => "no rights: the password is wrong or missing (--password)",
        code::PROGRAM_ERROR => "program error",
        _ => "unknown FoE error code",
    }
}

fn foe(buf: &mut [u8], op: u8, value: u32, body: &[u8]) -> usize {
    let len = OVERHEAD + body.len();
    let b = &mut buf[..len];
    mailbox::header(b, HEADER + body.len(), kind::FOE);
    b[6] = op;
    b[7] = 0;
    b[8..12].copy_from_slice(&value.to_le_bytes());
    b[OVERHEAD..].copy_from_slice(body);
    len
}

// Each builder writes into the caller's buffer and returns the request's length; it panics
// when `buf` is shorter than the request (the client checks the lengths against the mailbox
// before it builds).

/// Read request: the password and the file name.
pub fn read_request(buf: &mut [u8], password: u32, name: &[u8]) -> usize {
    foe(buf, opcode::READ, password, name)
}

/// Write request: the password and the file name.
pub fn write_request(buf: &mut [u8], password: u32, name: &[u8]) -> usize {
    foe(buf, opcode::WRITE, password, name)
}

/// DATA packet `packet` with its bytes.
pub fn data(buf: &mut [u8], packet: u32, bytes: &[u8]) -> usize {
    foe(buf, opcode::DATA, packet, bytes)
}

/// ACK of packet `packet`.
pub fn ack(buf: &mut [u8], packet: u32) -> usize {
    foe(buf, opcode::ACK, packet, &[])
}

/// ERROR with a code and a text: the master ends a transfer.
pub fn error(buf: &mut [u8], code: u32, text: &[u8]) -> usize {
    foe(buf, opcode::ERROR, code, text)
}

/// An FoE mailbox from the device, decoded; the bytes borrow from the mailbox buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// A packet of the file.
    Data {
        /// Packet number (1, 2, ...).
        packet: u32,
        /// Its bytes.
        data: &'a [u8],
    },
    /// The device acknowledges packet `packet` (0: the write request).
    Ack {
        /// Packet number.
        packet: u32,
    },
    /// The device ends the transfer.
    Error {
        /// Error code.
        code: u32,
        /// Its text (may be empty; not necessarily UTF-8).
        text: &'a [u8],
    },
    /// The device is busy: the master repeats its last request.
    Busy {
        /// Progress of what keeps the device busy.
        done: u16,
        /// Of this much.
        entire: u16,
        /// Text (may be empty).
        text: &'a [u8],
    },
    /// An opcode a device does not send to a master (a request, or unknown).
    Other {
        /// The opcode.
        opcode: u8,
    },
}

/// What is wrong with an FoE mailbox read from the device.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The mailbox header is broken.
    #[error("{0}")]
    Mailbox(String),
    /// Not an FoE mailbox.
    #[error("mailbox type {0:#x}, not FoE")]
    NotFoe(u8),
    /// Shorter than the FoE header.
    #[error("{0} bytes of FoE, shorter than the 6-byte FoE header")]
    Short(usize),
}

/// Decode an FoE mailbox read from SM1 (header included). Never panics, whatever the bytes.
pub fn parse(buf: &[u8]) -> Result<Reply<'_>, ParseError> {
    let p = mailbox::payload(buf).map_err(ParseError::Mailbox)?;
    let k = buf[5] & 0x0f;
    if k != kind::FOE {
        return Err(ParseError::NotFoe(k));
    }
    if p.len() < HEADER {
        return Err(ParseError::Short(p.len()));
    }
    let value = u32::from_le_bytes([p[2], p[3], p[4], p[5]]);
    let body = &p[HEADER..];
    Ok(match p[0] {
        opcode::DATA => Reply::Data {
            packet: value,
            data: body,
        },
        opcode::ACK => Reply::Ack { packet: value },
        opcode::ERROR => Reply::Error {
            code: value,
            // Devices pad the text with NULs.
            text: trim_nul(body),
        },
        opcode::BUSY => Reply::Busy {
            done: u16::from_le_bytes([p[2], p[3]]),
            entire: u16::from_le_bytes([p[4], p[5]]),
            text: trim_nul(body),
        },
        opcode => Reply::Other { opcode },
    })
}

fn trim_nul(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_have_the_layout_of_the_standard() {
        let mut b = [0u8; 64];
        let n = read_request(&mut b, 0x1234_5678, b"fw.bin");
        assert_eq!(
            &b[..n],
            &[
                12, 0, 0, 0, 0, 0x04, 1, 0, 0x78, 0x56, 0x34, 0x12, b'f', b'w', b'.', b'b', b'i',
                b'n'
            ]
        );
        let n = data(&mut b, 7, &[9, 8]);
        assert_eq!(&b[..n], &[8, 0, 0, 0, 0, 4, 3, 0, 7, 0, 0, 0, 9, 8]);
        let n = ack(&mut b, 0x0102);
        assert_eq!(&b[..n], &[6, 0, 0, 0, 0, 4, 4, 0, 2, 1, 0, 0]);
        let n = error(&mut b, code::ILLEGAL, b"x");
        assert_eq!(&b[..n], &[7, 0, 0, 0, 0, 4, 5, 0, 4, 0x80, 0, 0, b'x']);
        let n = write_request(&mut b, 0, b"");
        assert_eq!(&b[..n], &[6, 0, 0, 0, 0, 4, 2, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn replies_decode() {
        let mut b = [0u8; 64];
        let n = data(&mut b, 3, b"abc");
        assert_eq!(
            parse(&b[..n]),
            Ok(Reply::Data {
                packet: 3,
                data: b"abc"
            })
        );
        let n = error(&mut b, code::NOT_FOUND, b"no such file\0\0");
        assert_eq!(
            parse(&b[..n]),
            Ok(Reply::Error {
                code: code::NOT_FOUND,
                text: b"no such file"
            })
        );
        let busy = [8, 0, 0, 0, 0, 4, 6, 0, 3, 0, 10, 0, b'e', b'r'];
        assert_eq!(
            parse(&busy),
            Ok(Reply::Busy {
                done: 3,
                entire: 10,
                text: b"er"
            })
        );
        // Padding after the length the header gives is not data.
        let mut padded = b[..n].to_vec();
        padded.resize(128, 0xee);
        assert!(matches!(parse(&padded), Ok(Reply::Error { .. })));
        assert_eq!(parse(&[2, 0, 0, 0, 0, 4, 3, 0]), Err(ParseError::Short(2)));
        assert_eq!(
            parse(&[6, 0, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0]),
            Err(ParseError::NotFoe(3))
        );
        assert!(matches!(parse(&[1, 2]), Err(ParseError::Mailbox(_))));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_without_panic(buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160)) {
            if let Ok(Reply::Data { data, .. }) = parse(&buf) {
                proptest::prop_assert!(data.len() + OVERHEAD <= buf.len());
            }
        }
    }
}
