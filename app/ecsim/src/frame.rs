//! EtherCAT frame layout: Ethernet II header, EtherCAT frame header, datagrams.
//!
//! Parsing is split from processing: [`validate`] walks a frame once and either returns the byte
//! ranges of its datagrams or says exactly why the frame is malformed. Only a frame that validated
//! is ever processed, so the processing code can index without re-checking and a bad frame from the
//! wire can never make the simulator panic or half-apply a frame.

use thiserror::Error;

/// EtherType of EtherCAT frames.
pub const ETHERCAT_ETHERTYPE: u16 = 0x88a4;
/// Ethernet II header length (no VLAN tag).
pub const ETH_HEADER_LEN: usize = 14;
/// EtherCAT frame header length (length + type).
pub const ECAT_HEADER_LEN: usize = 2;
/// Datagram header length (cmd, idx, address, length/flags, irq).
pub const DATAGRAM_HEADER_LEN: usize = 10;
/// Working counter length at the end of each datagram.
pub const WKC_LEN: usize = 2;
/// Largest datagram payload the 11-bit length field can express.
pub const MAX_DATAGRAM_DATA: usize = 0x07ff;
/// Maximum number of datagrams the simulator accepts in one frame (a 1500-byte frame holds < 125).
pub const MAX_DATAGRAMS: usize = 128;

/// EtherCAT command codes (ETG1000.4 Table 21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Cmd {
    Nop = 0,
    Aprd = 1,
    Apwr = 2,
    Aprw = 3,
    Fprd = 4,
    Fpwr = 5,
    Fprw = 6,
    Brd = 7,
    Bwr = 8,
    Brw = 9,
    Lrd = 10,
    Lwr = 11,
    Lrw = 12,
    Armw = 13,
    Frmw = 14,
}

impl Cmd {
    pub fn from_u8(v: u8) -> Option<Cmd> {
        Some(match v {
            0 => Cmd::Nop,
            1 => Cmd::Aprd,
            2 => Cmd::Apwr,
            3 => Cmd::Aprw,
            4 => Cmd::Fprd,
            5 => Cmd::Fpwr,
            6 => Cmd::Fprw,
            7 => Cmd::Brd,
            8 => Cmd::Bwr,
            9 => Cmd::Brw,
            10 => Cmd::Lrd,
            11 => Cmd::Lwr,
            12 => Cmd::Lrw,
            13 => Cmd::Armw,
            14 => Cmd::Frmw,
            _ => return None,
        })
    }
}

/// Why a frame was not processed. Counted per reason by the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("frame shorter than the Ethernet + EtherCAT headers ({0} bytes)")]
    TooShort(usize),
    #[error("not an EtherCAT frame (EtherType {0:#06x})")]
    NotEthercat(u16),
    #[error("EtherCAT header type {0} is not 1 (EtherCAT commands)")]
    BadType(u8),
    #[error("EtherCAT length {len} exceeds the {avail} bytes in the frame")]
    LengthOverrun { len: usize, avail: usize },
    #[error("datagram {index} is truncated")]
    TruncatedDatagram { index: usize },
    #[error("datagram {index} has unknown command {cmd}")]
    UnknownCommand { index: usize, cmd: u8 },
    #[error("more than {MAX_DATAGRAMS} datagrams in one frame")]
    TooManyDatagrams,
    #[error("frame has no datagrams")]
    Empty,
}

/// One datagram located inside a validated frame (offsets are absolute in the frame buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramPos {
    pub cmd: Cmd,
    /// Offset of the datagram header.
    pub header: usize,
    /// Offset of the data.
    pub data: usize,
    /// Length of the data.
    pub len: usize,
}

impl DatagramPos {
    pub fn wkc_offset(&self) -> usize {
        self.data + self.len
    }
}

/// Fixed-capacity list of datagram positions: validation allocates nothing.
#[derive(Debug, Clone)]
pub struct Datagrams {
    items: [DatagramPos; MAX_DATAGRAMS],
    count: usize,
}

impl Default for Datagrams {
    fn default() -> Self {
        Self {
            items: [DatagramPos {
                cmd: Cmd::Nop,
                header: 0,
                data: 0,
                len: 0,
            }; MAX_DATAGRAMS],
            count: 0,
        }
    }
}

impl Datagrams {
    pub fn as_slice(&self) -> &[DatagramPos] {
        &self.items[..self.count]
    }
}

#[inline]
pub fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Validate a complete Ethernet II frame and locate its datagrams into `out`.
pub fn validate(frame: &[u8], out: &mut Datagrams) -> Result<(), FrameError> {
    out.count = 0;
    if frame.len() < ETH_HEADER_LEN + ECAT_HEADER_LEN {
        return Err(FrameError::TooShort(frame.len()));
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    if ethertype != ETHERCAT_ETHERTYPE {
        return Err(FrameError::NotEthercat(ethertype));
    }
    let hdr = get_u16(frame, ETH_HEADER_LEN);
    let ecat_len = usize::from(hdr & 0x07ff);
    let ftype = (hdr >> 12) as u8;
    if ftype != 1 {
        return Err(FrameError::BadType(ftype));
    }
    let start = ETH_HEADER_LEN + ECAT_HEADER_LEN;
    let avail = frame.len() - start;
    if ecat_len > avail {
        return Err(FrameError::LengthOverrun {
            len: ecat_len,
            avail,
        });
    }
    let end = start + ecat_len;
    let mut pos = start;
    loop {
        let index = out.count;
        if index == MAX_DATAGRAMS {
            return Err(FrameError::TooManyDatagrams);
        }
        if pos + DATAGRAM_HEADER_LEN > end {
            return Err(FrameError::TruncatedDatagram { index });
        }
        let cmd_raw = frame[pos];
        let cmd = Cmd::from_u8(cmd_raw).ok_or(FrameError::UnknownCommand {
            index,
            cmd: cmd_raw,
        })?;
        let len_flags = get_u16(frame, pos + 6);
        let len = usize::from(len_flags & 0x07ff);
        let more = len_flags & 0x8000 != 0;
        let data = pos + DATAGRAM_HEADER_LEN;
        if data + len + WKC_LEN > end {
            return Err(FrameError::TruncatedDatagram { index });
        }
        out.items[index] = DatagramPos {
            cmd,
            header: pos,
            data,
            len,
        };
        out.count += 1;
        pos = data + len + WKC_LEN;
        if !more {
            break;
        }
    }
    if out.count == 0 {
        return Err(FrameError::Empty);
    }
    Ok(())
}

/// Builds EtherCAT frames; used by tests and benchmarks (the master side is ethercrab's job).
#[derive(Debug, Clone)]
pub struct FrameBuilder {
    buf: Vec<u8>,
    last_header: Option<usize>,
}

/// The MAC address ethercrab sends from.
pub const MAINDEVICE_MAC: [u8; 6] = [0x10; 6];

impl Default for FrameBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameBuilder {
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(1514);
        buf.extend_from_slice(&[0xff; 6]);
        buf.extend_from_slice(&MAINDEVICE_MAC);
        buf.extend_from_slice(&ETHERCAT_ETHERTYPE.to_be_bytes());
        buf.extend_from_slice(&[0, 0x10]);
        Self {
            buf,
            last_header: None,
        }
    }

    /// Append a datagram; `address` is ADP | ADO << 16 for physical commands, the logical address
    /// for logical ones.
    pub fn datagram(mut self, cmd: Cmd, idx: u8, address: u32, data: &[u8]) -> Self {
        assert!(data.len() <= MAX_DATAGRAM_DATA, "datagram data too long");
        if let Some(h) = self.last_header {
            let lf = get_u16(&self.buf, h + 6) | 0x8000;
            put_u16(&mut self.buf, h + 6, lf);
        }
        let h = self.buf.len();
        self.buf.push(cmd as u8);
        self.buf.push(idx);
        self.buf.extend_from_slice(&address.to_le_bytes());
        self.buf
            .extend_from_slice(&(data.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(data);
        self.buf.extend_from_slice(&[0, 0]);
        self.last_header = Some(h);
        self
    }

    /// Finish: set the EtherCAT length and pad to the Ethernet minimum of 60 bytes.
    pub fn build(mut self) -> Vec<u8> {
        let len = self.buf.len() - ETH_HEADER_LEN - ECAT_HEADER_LEN;
        put_u16(
            &mut self.buf,
            ETH_HEADER_LEN,
            (len as u16 & 0x07ff) | 0x1000,
        );
        if self.buf.len() < 60 {
            self.buf.resize(60, 0);
        }
        self.buf
    }
}

/// Physical address helper: ADP in the low half, ADO in the high half.
pub fn phys(adp: u16, ado: u16) -> u32 {
    u32::from(adp) | (u32::from(ado) << 16)
}

/// Read back a datagram's data and WKC from a processed frame (tests and benchmarks).
pub fn datagram_result(frame: &[u8], n: usize) -> Option<(Vec<u8>, u16)> {
    let mut d = Datagrams::default();
    validate(frame, &mut d).ok()?;
    let p = d.as_slice().get(n)?;
    Some((
        frame[p.data..p.data + p.len].to_vec(),
        get_u16(frame, p.wkc_offset()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_output_validates() {
        let f = FrameBuilder::new()
            .datagram(Cmd::Brd, 1, phys(0, 0), &[0, 0])
            .datagram(Cmd::Lrw, 2, 0x1000, &[1, 2, 3])
            .build();
        let mut d = Datagrams::default();
        validate(&f, &mut d).unwrap();
        assert_eq!(d.as_slice().len(), 2);
        assert_eq!(d.as_slice()[1].cmd, Cmd::Lrw);
        assert_eq!(d.as_slice()[1].len, 3);
    }

    #[test]
    fn rejects_each_malformation() {
        let mut d = Datagrams::default();
        assert_eq!(validate(&[0; 10], &mut d), Err(FrameError::TooShort(10)));
        let mut f = FrameBuilder::new()
            .datagram(Cmd::Fprd, 1, 0, &[0; 4])
            .build();
        f[12] = 0x08;
        f[13] = 0x00;
        assert_eq!(validate(&f, &mut d), Err(FrameError::NotEthercat(0x0800)));
        let mut f = FrameBuilder::new()
            .datagram(Cmd::Fprd, 1, 0, &[0; 4])
            .build();
        f[ETH_HEADER_LEN + 1] = 0x20;
        assert_eq!(validate(&f, &mut d), Err(FrameError::BadType(2)));
        let mut f = FrameBuilder::new()
            .datagram(Cmd::Fprd, 1, 0, &[0; 4])
            .build();
        f[ETH_HEADER_LEN + ECAT_HEADER_LEN] = 0x42;
        assert_eq!(
            validate(&f, &mut d),
            Err(FrameError::UnknownCommand {
                index: 0,
                cmd: 0x42
            })
        );
        let f = FrameBuilder::new()
            .datagram(Cmd::Fprd, 1, 0, &[0; 40])
            .build();
        assert_eq!(
            validate(&f[..30], &mut d),
            Err(FrameError::LengthOverrun { len: 52, avail: 14 })
        );
        // A datagram length that runs past the EtherCAT length.
        let mut f = FrameBuilder::new()
            .datagram(Cmd::Fprd, 1, 0, &[0; 4])
            .build();
        put_u16(&mut f, ETH_HEADER_LEN + ECAT_HEADER_LEN + 6, 0x07ff);
        assert_eq!(
            validate(&f, &mut d),
            Err(FrameError::TruncatedDatagram { index: 0 })
        );
    }
}
