//! The CoE server of a simulated device: SDO upload and download (ETG.1000.6 §5.6.2),
//! the SDO information service (§5.6.3) and emergency messages (§5.6.4), on top of the object
//! dictionary ([`crate::od`]).
//!
//! Every function here takes the CoE part of a mailbox (from the CoE header on) and returns
//! the CoE parts of the responses; [`crate::mailbox`] adds the mailbox header.
//!
//! Transfers: expedited (up to 4 bytes), normal (the data in the initiate frame) and segmented
//! (the rest in 7..n byte segments, toggle bit checked) in both directions; complete access
//! (the CA bit) with subindex 0 or 1 as start. As in SOEM and SOES, a complete access transfers
//! subindex 0 as 16 bits (the UNSIGNED8 count and a padding byte, ETG.1000.6 §5.6.2.1) and
//! every other entry with its bit length, packed; BOOL entries therefore take one bit.

use crate::esc::AlState;
use crate::od::{Od, Placement, ValueType, abort, read_bits};
use crate::pdo::{DataType, Direction};

/// CoE services (ETG.1000.6 Table 29).
pub mod service {
    pub const EMERGENCY: u8 = 1;
    pub const SDO_REQUEST: u8 = 2;
    pub const SDO_RESPONSE: u8 = 3;
    pub const SDO_INFO: u8 = 8;
}

/// SDO information opcodes (ETG.1000.6 Table 46).
pub mod info_op {
    pub const OD_LIST_REQ: u8 = 1;
    pub const OD_LIST_RESP: u8 = 2;
    pub const OBJ_DESC_REQ: u8 = 3;
    pub const OBJ_DESC_RESP: u8 = 4;
    pub const ENTRY_DESC_REQ: u8 = 5;
    pub const ENTRY_DESC_RESP: u8 = 6;
    pub const ERROR: u8 = 7;
}

/// The process image a mapped object's value comes from.
#[derive(Debug, Clone, Copy)]
pub struct Image<'a> {
    /// The output SM buffer (what the master last wrote).
    pub outputs: &'a [u8],
    /// The input SM buffer (what the device publishes).
    pub inputs: &'a [u8],
}

#[derive(Debug, Clone)]
struct Upload {
    data: Vec<u8>,
    at: usize,
    toggle: bool,
}

#[derive(Debug, Clone)]
struct Download {
    index: u16,
    sub: u8,
    complete: bool,
    size: usize,
    data: Vec<u8>,
    toggle: bool,
}

/// One device's CoE server state: the dictionary, the transfer in progress, the queued
/// emergencies.
#[derive(Debug, Clone)]
pub struct CoeServer {
    pub od: Od,
    upload: Option<Upload>,
    download: Option<Download>,
}

fn coe_header(service: u8) -> [u8; 2] {
    // Number (bits 0..8) 0, service in bits 12..15 (ETG.1000.6 Table 29).
    [0, service << 4]
}

/// An abort transfer request (ETG.1000.6 §5.6.2.7: sent with the SDO request service).
pub fn abort_frame(index: u16, sub: u8, code: u32) -> Vec<u8> {
    let mut f = coe_header(service::SDO_REQUEST).to_vec();
    f.push(0x80);
    f.extend_from_slice(&index.to_le_bytes());
    f.push(sub);
    f.extend_from_slice(&code.to_le_bytes());
    f
}

/// An emergency message (ETG.1000.6 §5.6.4): error code, error register, 5 bytes of data.
pub fn emergency_frame(code: u16, register: u8, data: [u8; 5]) -> Vec<u8> {
    let mut f = coe_header(service::EMERGENCY).to_vec();
    f.extend_from_slice(&code.to_le_bytes());
    f.push(register);
    f.extend_from_slice(&data);
    f
}

/// Bit writer / reader for complete access packing.
struct Bits {
    buf: Vec<u8>,
    at: usize,
}

impl Bits {
    fn put(&mut self, value: &[u8], bits: usize) {
        for k in 0..bits {
            let bit = value.get(k / 8).is_some_and(|b| b >> (k % 8) & 1 != 0);
            let pos = self.at + k;
            if self.buf.len() <= pos / 8 {
                self.buf.resize(pos / 8 + 1, 0);
            }
            if bit {
                self.buf[pos / 8] |= 1 << (pos % 8);
            }
        }
        self.at += bits;
    }

    fn take(&mut self, bits: usize, bytes: usize) -> Option<Vec<u8>> {
        if self.at + bits > self.buf.len() * 8 {
            return None;
        }
        let v = read_bits(&self.buf, self.at as u32, bits as u16, bytes);
        self.at += bits;
        Some(v)
    }
}

impl CoeServer {
    pub fn new(od: Od) -> Self {
        CoeServer {
            od,
            upload: None,
            download: None,
        }
    }

    /// A power cycle: the dictionary back to its defaults, no transfer in progress.
    pub fn reset(&mut self) {
        self.od.reset();
        self.upload = None;
        self.download = None;
    }

    /// Serve one CoE request (`coe` = the mailbox data, from the CoE header) in `state`; `max`
    /// is the room for the CoE data of one response (mailbox size - 6). Returns the responses
    /// (none for an abort from the client).
    pub fn handle(&mut self, coe: &[u8], state: AlState, max: usize, img: Image) -> Vec<Vec<u8>> {
        if coe.len() < 2 {
            return vec![];
        }
        match coe[1] >> 4 {
            service::SDO_REQUEST => self.sdo(&coe[2..], state, max, img),
            service::SDO_INFO => self.info(&coe[2..], max),
            _ => vec![],
        }
    }

    fn sdo(&mut self, b: &[u8], state: AlState, max: usize, img: Image) -> Vec<Vec<u8>> {
        let Some(&cmd) = b.first() else {
            return vec![abort_frame(0, 0, abort::COMMAND_UNKNOWN)];
        };
        let (index, sub) = if b.len() >= 4 {
            (u16::from_le_bytes([b[1], b[2]]), b[3])
        } else {
            (0, 0)
        };
        let r = match cmd >> 5 {
            1 if b.len() >= 8 => self.download_init(b, index, sub, state),
            0 => self.download_segment(b, state),
            2 if b.len() >= 4 => self.upload_init(cmd & 0x10 != 0, index, sub, max, img),
            3 => self.upload_segment(cmd, max),
            4 => {
                self.upload = None;
                self.download = None;
                return vec![];
            }
            _ => Err((index, sub, abort::COMMAND_UNKNOWN)),
        };
        match r {
            Ok(f) => vec![f],
            Err((i, s, code)) => {
                self.upload = None;
                self.download = None;
                vec![abort_frame(i, s, code)]
            }
        }
    }

    /// The bytes an upload of `index:sub` (or the whole object) returns now.
    pub fn upload_value(
        &self,
        index: u16,
        sub: u8,
        complete: bool,
        img: Image,
    ) -> Result<Vec<u8>, u32> {
        if !complete {
            let e = self.od.readable(index, sub)?;
            return Ok(self.current(index, sub, e.ty, img));
        }
        let o = self.od.object(index).ok_or(abort::NO_OBJECT)?;
        if sub > 1 {
            return Err(abort::NO_SUBINDEX);
        }
        let mut bits = Bits {
            buf: Vec::new(),
            at: 0,
        };
        for e in o.entries.iter().filter(|e| e.sub >= sub) {
            self.od.readable(index, e.sub)?;
            let v = self.current(index, e.sub, e.ty, img);
            let n = if e.sub == 0 && o.code != crate::od::ObjectCode::Var {
                16
            } else {
                usize::from(e.bits(&v))
            };
            bits.put(&v, n);
        }
        Ok(bits.buf)
    }

    /// An entry's value: from the process image when an assigned PDO maps it.
    fn current(&self, index: u16, sub: u8, ty: ValueType, img: Image) -> Vec<u8> {
        if let (
            Some(Placement {
                dir,
                bit_offset,
                bits,
            }),
            Some(n),
        ) = (self.od.placement(index, sub), ty.sdo_bytes())
        {
            let image = match dir {
                Direction::Outputs => img.outputs,
                Direction::Inputs => img.inputs,
            };
            return read_bits(image, bit_offset, bits, n);
        }
        self.od.value(index, sub).unwrap_or(&[]).to_vec()
    }

    fn upload_init(
        &mut self,
        complete: bool,
        index: u16,
        sub: u8,
        max: usize,
        img: Image,
    ) -> Result<Vec<u8>, (u16, u8, u32)> {
        self.upload = None;
        self.download = None;
        let data = self
            .upload_value(index, sub, complete, img)
            .map_err(|c| (index, sub, c))?;
        let ca = if complete { 0x10 } else { 0 };
        let mut f = coe_header(service::SDO_RESPONSE).to_vec();
        if data.len() <= 4 && !data.is_empty() {
            // Expedited: size indicated, 4 - n unused bytes.
            f.push(0x43 | ca | (((4 - data.len()) as u8) << 2));
            f.extend_from_slice(&index.to_le_bytes());
            f.push(sub);
            f.extend_from_slice(&data);
            f.resize(10, 0);
            return Ok(f);
        }
        f.push(0x41 | ca);
        f.extend_from_slice(&index.to_le_bytes());
        f.push(sub);
        f.extend_from_slice(&(data.len() as u32).to_le_bytes());
        // The initiate response carries as much data as the mailbox holds; the rest follows in
        // upload segments (ETG.1000.6 §5.6.2.4/5.6.2.6).
        let room = max.saturating_sub(10);
        let first = data.len().min(room);
        f.extend_from_slice(&data[..first]);
        if first < data.len() {
            self.upload = Some(Upload {
                data,
                at: first,
                toggle: false,
            });
        }
        Ok(f)
    }

    fn upload_segment(&mut self, cmd: u8, max: usize) -> Result<Vec<u8>, (u16, u8, u32)> {
        let Some(up) = self.upload.as_mut() else {
            return Err((0, 0, abort::COMMAND_UNKNOWN));
        };
        let toggle = cmd & 0x10 != 0;
        if toggle != up.toggle {
            return Err((0, 0, abort::TOGGLE));
        }
        up.toggle = !up.toggle;
        let room = max.saturating_sub(3);
        let n = (up.data.len() - up.at).min(room);
        let chunk = &up.data[up.at..up.at + n];
        up.at += n;
        let last = up.at == up.data.len();
        let mut f = coe_header(service::SDO_RESPONSE).to_vec();
        // Upload segment response: scs 0, toggle, unused bytes of a segment under 7 bytes,
        // last segment flag.
        let unused = 7usize.saturating_sub(n) as u8;
        f.push(u8::from(toggle) << 4 | unused << 1 | u8::from(last));
        f.extend_from_slice(chunk);
        f.resize(f.len().max(3 + 7), 0);
        if last {
            self.upload = None;
        }
        Ok(f)
    }

    fn download_init(
        &mut self,
        b: &[u8],
        index: u16,
        sub: u8,
        state: AlState,
    ) -> Result<Vec<u8>, (u16, u8, u32)> {
        self.upload = None;
        self.download = None;
        let cmd = b[0];
        let complete = cmd & 0x10 != 0;
        let sized = cmd & 0x01 != 0;
        let expedited = cmd & 0x02 != 0;
        let err = |c| (index, sub, c);
        if complete && sub > 1 {
            return Err(err(abort::NO_SUBINDEX));
        }
        let data: Vec<u8> = if expedited {
            let n = if sized {
                4 - usize::from(cmd >> 2 & 3)
            } else {
                // No size: the entry's own size (CiA 301 §7.2.4.3.3).
                if complete {
                    4
                } else {
                    self.od
                        .object(index)
                        .ok_or(err(abort::NO_OBJECT))?
                        .entry(sub)
                        .ok_or(err(abort::NO_SUBINDEX))?
                        .ty
                        .sdo_bytes()
                        .unwrap_or(4)
                        .min(4)
                }
            };
            b[4..4 + n].to_vec()
        } else {
            let size = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
            let here = &b[8..];
            if size > 0xffff {
                return Err(err(abort::LENGTH_TOO_HIGH));
            }
            if here.len() >= size {
                here[..size].to_vec()
            } else {
                // Segments follow: check the target before taking them.
                self.check_target(index, sub, complete, state)
                    .map_err(err)?;
                self.download = Some(Download {
                    index,
                    sub,
                    complete,
                    size,
                    data: here.to_vec(),
                    toggle: false,
                });
                return Ok(download_response(index, sub, complete));
            }
        };
        self.store(index, sub, complete, &data, state)
            .map_err(err)?;
        Ok(download_response(index, sub, complete))
    }

    fn check_target(&self, index: u16, sub: u8, complete: bool, state: AlState) -> Result<(), u32> {
        let o = self.od.object(index).ok_or(abort::NO_OBJECT)?;
        let e = o.entry(sub).ok_or(abort::NO_SUBINDEX)?;
        match e.access {
            crate::od::Access::Ro if !complete => Err(abort::READ_ONLY),
            crate::od::Access::RwPreOp if state != AlState::PreOp => Err(abort::STATE),
            _ => Ok(()),
        }
    }

    fn download_segment(&mut self, b: &[u8], state: AlState) -> Result<Vec<u8>, (u16, u8, u32)> {
        let Some(dl) = self.download.as_mut() else {
            return Err((0, 0, abort::COMMAND_UNKNOWN));
        };
        let cmd = b[0];
        let toggle = cmd & 0x10 != 0;
        if toggle != dl.toggle {
            return Err((dl.index, dl.sub, abort::TOGGLE));
        }
        dl.toggle = !dl.toggle;
        let payload = &b[1..];
        // A segment of under 7 bytes is sent as 7 with the unused count (bits 1..3).
        let n = if payload.len() <= 7 {
            7usize
                .saturating_sub(usize::from(cmd >> 1 & 7))
                .min(payload.len())
        } else {
            payload.len()
        };
        dl.data.extend_from_slice(&payload[..n]);
        let last = cmd & 0x01 != 0;
        if dl.data.len() > dl.size {
            let (i, s) = (dl.index, dl.sub);
            return Err((i, s, abort::LENGTH_TOO_HIGH));
        }
        let mut f = coe_header(service::SDO_RESPONSE).to_vec();
        f.push(0x20 | u8::from(toggle) << 4);
        f.resize(10, 0);
        if last {
            let dl = self.download.take().expect("in progress");
            if dl.data.len() != dl.size {
                return Err((dl.index, dl.sub, abort::LENGTH_MISMATCH));
            }
            self.store(dl.index, dl.sub, dl.complete, &dl.data, state)
                .map_err(|c| (dl.index, dl.sub, c))?;
        }
        Ok(f)
    }

    /// Write a downloaded value: one entry, or (complete access) every entry from `sub` on,
    /// all or nothing.
    fn store(
        &mut self,
        index: u16,
        sub: u8,
        complete: bool,
        data: &[u8],
        state: AlState,
    ) -> Result<(), u32> {
        if !complete {
            return self.od.write(index, sub, data, state);
        }
        let o = self.od.object(index).ok_or(abort::NO_OBJECT)?.clone();
        let mut bits = Bits {
            buf: data.to_vec(),
            at: 0,
        };
        let mut values = Vec::new();
        for e in o.entries.iter().filter(|e| e.sub >= sub) {
            let n = e.ty.sdo_bytes().ok_or(abort::LENGTH_MISMATCH)?;
            let width = if e.sub == 0 && o.code != crate::od::ObjectCode::Var {
                16
            } else {
                usize::from(e.bits(&[]))
            };
            let v = bits.take(width, n.max(2)).ok_or(abort::LENGTH_TOO_LOW)?;
            values.push((e.sub, v[..n].to_vec()));
        }
        if bits.at.div_ceil(8) < data.len() {
            return Err(abort::LENGTH_TOO_HIGH);
        }
        let saved = self.od.clone();
        // Subindex 0 of a PDO object last: its entries change only while it is 0.
        let count = values.iter().position(|(s, _)| *s == 0);
        if let Some(k) = count {
            let zero = vec![0u8; values[k].1.len()];
            let r = self.od.write(index, 0, &zero, state);
            if let Err(c) = r
                && c != abort::READ_ONLY
            {
                self.od = saved;
                return Err(c);
            }
        }
        for (s, v) in values.iter().filter(|(s, _)| *s != 0) {
            if let Err(c) = self.od.write(index, *s, v, state) {
                self.od = saved;
                return Err(c);
            }
        }
        if let Some(k) = count {
            let (_, v) = &values[k];
            if let Err(c) = self.od.write(index, 0, v, state) {
                // A read-only count may be "written" with its own value.
                if !(c == abort::READ_ONLY && self.od.value(index, 0) == Some(v.as_slice())) {
                    self.od = saved;
                    return Err(c);
                }
            }
        }
        Ok(())
    }

    /// The SDO information service (ETG.1000.6 §5.6.3).
    fn info(&mut self, b: &[u8], max: usize) -> Vec<Vec<u8>> {
        if b.len() < 4 {
            return vec![info_error(abort::COMMAND_UNKNOWN)];
        }
        let op = b[0] & 0x7f;
        let body = &b[4..];
        let room = max.saturating_sub(6);
        match op {
            info_op::OD_LIST_REQ if body.len() >= 2 => {
                let list = u16::from_le_bytes([body[0], body[1]]);
                let mut data = list.to_le_bytes().to_vec();
                if list == 0 {
                    for l in 1..=5 {
                        data.extend_from_slice(&(self.od_list(l).len() as u16).to_le_bytes());
                    }
                } else if list <= 5 {
                    for i in self.od_list(list) {
                        data.extend_from_slice(&i.to_le_bytes());
                    }
                } else {
                    return vec![info_error(abort::VALUE_RANGE)];
                }
                fragments(info_op::OD_LIST_RESP, &data, room.max(2) & !1)
            }
            info_op::OBJ_DESC_REQ if body.len() >= 2 => {
                let index = u16::from_le_bytes([body[0], body[1]]);
                let Some(o) = self.od.object(index) else {
                    return vec![info_error(abort::NO_OBJECT)];
                };
                // VAR: its type; ARRAY: the type of its elements; RECORD: the complex data type
                // of its structure (CiA 301 §7.4.7.1 / ETG.1000.6 Table 63: 0x0021 PDO_MAPPING,
                // 0x0023 IDENTITY); an application record defines none of its own (0).
                let ty = match o.code {
                    crate::od::ObjectCode::Record => match index {
                        0x1018 => 0x0023,
                        0x1600..=0x17ff | 0x1a00..=0x1bff => 0x0021,
                        _ => 0x0000,
                    },
                    _ => o
                        .entries
                        .get(1)
                        .or(o.entries.first())
                        .map_or(0, |e| e.ty.code()),
                };
                let mut data = index.to_le_bytes().to_vec();
                data.extend_from_slice(&ty.to_le_bytes());
                data.push(o.max_sub());
                data.push(o.code as u8);
                data.extend_from_slice(o.name.as_bytes());
                fragments(info_op::OBJ_DESC_RESP, &data, room)
            }
            info_op::ENTRY_DESC_REQ if body.len() >= 4 => {
                let index = u16::from_le_bytes([body[0], body[1]]);
                let (sub, value_info) = (body[2], body[3]);
                let Some(o) = self.od.object(index) else {
                    return vec![info_error(abort::NO_OBJECT)];
                };
                let Some(e) = o.entry(sub) else {
                    return vec![info_error(abort::NO_SUBINDEX)];
                };
                let mut data = index.to_le_bytes().to_vec();
                data.push(sub);
                data.push(value_info);
                data.extend_from_slice(&e.ty.code().to_le_bytes());
                let v = self.od.value(index, sub).unwrap_or(&[]);
                data.extend_from_slice(&e.bits(v).to_le_bytes());
                // Object access (ETG.1000.6 Table 47): bits 0..5 read / write per state, 6
                // RxPDO mappable, 7 TxPDO mappable, 8 backup, 9 setting.
                let mut access = e.access.flags();
                match e.mapping {
                    Some(Direction::Outputs) => access |= 0x40,
                    Some(Direction::Inputs) => access |= 0x80,
                    None => {}
                }
                if e.backup {
                    access |= 0x100;
                }
                if e.setting {
                    access |= 0x200;
                }
                data.extend_from_slice(&access.to_le_bytes());
                if value_info & 0x08 != 0 {
                    data.extend_from_slice(&0u32.to_le_bytes());
                }
                let bytes = e.ty.sdo_bytes().unwrap_or(e.default.len());
                if value_info & 0x10 != 0 {
                    data.extend_from_slice(&e.default);
                }
                for (bit, bound) in [(0x20u8, e.min), (0x40, e.max)] {
                    if value_info & bit != 0 {
                        let b = match (bound, e.ty) {
                            (Some(v), _) => (v as u128).to_le_bytes()[..bytes.min(16)].to_vec(),
                            (None, ValueType::Basic(t)) => {
                                let (lo, hi) = range_of(t);
                                let v = if bit == 0x20 { lo } else { hi };
                                v[..bytes.min(8)].to_vec()
                            }
                            _ => vec![0; bytes],
                        };
                        data.extend_from_slice(&b);
                    }
                }
                data.extend_from_slice(e.name.as_bytes());
                fragments(info_op::ENTRY_DESC_RESP, &data, room)
            }
            _ => vec![info_error(abort::COMMAND_UNKNOWN)],
        }
    }

    /// The object indexes of an OD list type (ETG.1000.6 Table 50): 1 all, 2 RxPDO-mappable,
    /// 3 TxPDO-mappable, 4 stored for device replacement, 5 startup parameters.
    fn od_list(&self, list: u16) -> Vec<u16> {
        self.od
            .objects()
            .filter(|o| match list {
                1 => true,
                2 => o
                    .entries
                    .iter()
                    .any(|e| e.mapping == Some(Direction::Outputs)),
                3 => o
                    .entries
                    .iter()
                    .any(|e| e.mapping == Some(Direction::Inputs)),
                4 => o.entries.iter().any(|e| e.backup),
                5 => o.entries.iter().any(|e| e.setting),
                _ => false,
            })
            .map(|o| o.index)
            .collect()
    }
}

fn range_of(t: DataType) -> ([u8; 8], [u8; 8]) {
    let (lo, hi) = crate::odspec::type_range(t);
    let enc = |v: i128| -> [u8; 8] {
        match t {
            DataType::Real32 | DataType::Real64 => [0; 8],
            _ => (v as i64).to_le_bytes(),
        }
    };
    (enc(lo), enc(hi))
}

fn download_response(index: u16, sub: u8, complete: bool) -> Vec<u8> {
    let mut f = coe_header(service::SDO_RESPONSE).to_vec();
    f.push(0x60 | if complete { 0x10 } else { 0 });
    f.extend_from_slice(&index.to_le_bytes());
    f.push(sub);
    f.resize(10, 0);
    f
}

/// An SDO information error request (opcode 7) with an abort code.
fn info_error(code: u32) -> Vec<u8> {
    let mut f = coe_header(service::SDO_INFO).to_vec();
    f.extend_from_slice(&[info_op::ERROR, 0, 0, 0]);
    f.extend_from_slice(&code.to_le_bytes());
    f
}

/// An SDO information response in fragments of at most `room` data bytes: every fragment but
/// the last has the incomplete bit; "fragments left" counts down to 0.
fn fragments(op: u8, data: &[u8], room: usize) -> Vec<Vec<u8>> {
    let room = room.max(1);
    let chunks: Vec<&[u8]> = if data.is_empty() {
        vec![&[][..]]
    } else {
        data.chunks(room).collect()
    };
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(k, c)| {
            let left = (n - 1 - k) as u16;
            let mut f = coe_header(service::SDO_INFO).to_vec();
            f.push(op | if left > 0 { 0x80 } else { 0 });
            f.push(0);
            f.extend_from_slice(&left.to_le_bytes());
            f.extend_from_slice(c);
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::SegmentSpec;
    use proptest::prelude::*;

    fn servers() -> Vec<CoeServer> {
        SegmentSpec::coe_example()
            .devices
            .iter()
            .map(|d| CoeServer::new(Od::build(d, d.coe.as_ref().expect("CoE"))))
            .collect()
    }

    fn request() -> impl Strategy<Value = Vec<u8>> {
        let index = prop::sample::select(vec![
            0x1000u16, 0x1008, 0x1018, 0x1c00, 0x1c12, 0x1c13, 0x1600, 0x1601, 0x1a00, 0x1a03,
            0x1c32, 0x6000, 0x6040, 0x6060, 0x6085, 0x8000, 0x5555,
        ]);
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..122),
            (
                any::<u8>(),
                index,
                any::<u8>(),
                prop::collection::vec(any::<u8>(), 0..20),
                prop::sample::select(vec![2u8, 8])
            )
                .prop_map(|(cmd, i, sub, rest, service)| {
                    let mut r = vec![0, service << 4, cmd];
                    r.extend_from_slice(&i.to_le_bytes());
                    r.push(sub % 0x20);
                    r.extend_from_slice(&rest);
                    r
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, .. ProptestConfig::default() })]

        /// Any sequence of CoE requests in any state: no panic, every response fits the mailbox,
        /// and an SDO request always gets exactly one answer (an abort from the client none).
        #[test]
        fn random_requests_are_answered_within_the_mailbox(
            reqs in prop::collection::vec(request(), 1..12),
            state in prop::sample::select(vec![AlState::PreOp, AlState::SafeOp, AlState::Op]),
        ) {
            let img = Image { outputs: &[0x11; 16], inputs: &[0x22; 16] };
            for mut s in servers() {
                for r in &reqs {
                    let out = s.handle(r, state, 122, img);
                    for f in &out {
                        prop_assert!(f.len() <= 122, "{} bytes: {:02x?}", f.len(), f);
                    }
                    if r.len() >= 3 && r[1] >> 4 == service::SDO_REQUEST && r[2] >> 5 != 4 {
                        prop_assert_eq!(out.len(), 1);
                    }
                }
            }
        }
    }
}
