//! The client side: attach, snapshots, entries by name, typed values, writers.

use crate::bits::{read_bits, write_bits};
use crate::broker::{image_seals, writer_seals};
use crate::format::{
    ENTRY_BYTES, FLAG_DECLARED, FLAG_MASTER, Geometry, HEADER_BYTES, MAX_OBJECT_BYTES,
    OWNER_MASTER, State, WriterState, e, fnv1a64, h, s, w,
};
use crate::handout::{ask, check_seals};
use crate::map::Map;
use crate::publisher::check_writer_name;
use crate::{Error, Result};
use serde::Deserialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

/// Bounded retries of a snapshot: the master holds the seqlock odd for the few µs of one
/// publication, so thousands of retries mean the reader is starved, not unlucky.
const MAX_RETRIES: u32 = 100_000;

/// Direction of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Subdevice to master.
    Inputs,
    /// Master to subdevice.
    Outputs,
}

/// An entry's CoE data type as the layout JSON names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// BOOL / BIT1.
    Bool,
    /// INTEGER8.
    Int8,
    /// INTEGER16.
    Int16,
    /// INTEGER32.
    Int32,
    /// INTEGER64.
    Int64,
    /// UNSIGNED8.
    Unsigned8,
    /// UNSIGNED16.
    Unsigned16,
    /// UNSIGNED32.
    Unsigned32,
    /// UNSIGNED64.
    Unsigned64,
    /// REAL32.
    Real32,
    /// REAL64.
    Real64,
    /// BIT2..BIT8: an unsigned bit field.
    Bits,
    /// Anything else: read and written as an unsigned bit field.
    Other(u8),
}

impl DataType {
    fn from_json(v: &serde_json::Value) -> DataType {
        match v {
            serde_json::Value::String(s) => match s.as_str() {
                "BOOL" => DataType::Bool,
                "INT8" => DataType::Int8,
                "INT16" => DataType::Int16,
                "INT32" => DataType::Int32,
                "INT64" => DataType::Int64,
                "UNSIGNED8" => DataType::Unsigned8,
                "UNSIGNED16" => DataType::Unsigned16,
                "UNSIGNED32" => DataType::Unsigned32,
                "UNSIGNED64" => DataType::Unsigned64,
                "REAL32" => DataType::Real32,
                "REAL64" => DataType::Real64,
                "BITS" => DataType::Bits,
                _ => DataType::Other(0),
            },
            serde_json::Value::Object(o) => DataType::Other(
                o.get("OTHER")
                    .and_then(|c| c.as_u64())
                    .and_then(|c| u8::try_from(c).ok())
                    .unwrap_or(0),
            ),
            _ => DataType::Other(0),
        }
    }

    fn is_signed(self) -> bool {
        matches!(
            self,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64
        )
    }
}

/// A typed value of an entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// BOOL.
    Bool(bool),
    /// UNSIGNED*, BITS and unknown types.
    Unsigned(u64),
    /// INTEGER*.
    Signed(i64),
    /// REAL32 / REAL64.
    Real(f64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Unsigned(v) => write!(f, "{v}"),
            Value::Signed(v) => write!(f, "{v}"),
            Value::Real(v) => write!(f, "{v}"),
        }
    }
}

impl Value {
    /// As an f64 (booleans 0/1).
    pub fn as_f64(&self) -> f64 {
        match *self {
            Value::Bool(b) => f64::from(u8::from(b)),
            Value::Unsigned(v) => v as f64,
            Value::Signed(v) => v as f64,
            Value::Real(v) => v,
        }
    }

    /// As an i128 when integral (booleans 0/1).
    fn as_int(&self) -> Option<i128> {
        match *self {
            Value::Bool(b) => Some(i128::from(b)),
            Value::Unsigned(v) => Some(i128::from(v)),
            Value::Signed(v) => Some(i128::from(v)),
            Value::Real(_) => None,
        }
    }
}

/// An entry resolved from the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRef {
    /// `POSITION:QUALIFIED` (`0:Outputs.Output 1`).
    pub name: String,
    /// Subdevice position.
    pub position: u16,
    /// Inputs or outputs.
    pub direction: Direction,
    /// Bit offset in its direction's image.
    pub bit_offset: u32,
    /// Length in bits.
    pub bits: u16,
    /// Data type.
    pub data_type: DataType,
    /// Its row in the entry table (outputs only).
    pub row: Option<u32>,
}

impl EntryRef {
    /// Decode the raw bits as this entry's type.
    pub fn decode(&self, raw: u64) -> Value {
        let bits = u32::from(self.bits).min(64);
        match self.data_type {
            DataType::Bool if bits == 1 => Value::Bool(raw & 1 == 1),
            DataType::Real32 if bits == 32 => Value::Real(f64::from(f32::from_bits(raw as u32))),
            DataType::Real64 if bits == 64 => Value::Real(f64::from_bits(raw)),
            t if t.is_signed() && bits > 0 => {
                // Sign-extend from `bits`.
                let sh = 64 - bits;
                Value::Signed(((raw << sh) as i64) >> sh)
            }
            _ => Value::Unsigned(raw),
        }
    }

    /// Encode a value as this entry's raw bits, refusing what does not fit.
    pub fn encode(&self, v: Value) -> Result<u64> {
        let bits = u32::from(self.bits);
        let bad = |why: String| Error::Value {
            entry: self.name.clone(),
            value: v.to_string(),
            why,
        };
        if bits > 64 {
            return Err(bad(format!("{bits}-bit entries cannot be set as a number")));
        }
        match self.data_type {
            DataType::Real32 if bits == 32 => return Ok(u64::from((v.as_f64() as f32).to_bits())),
            DataType::Real64 if bits == 64 => return Ok(v.as_f64().to_bits()),
            _ => {}
        }
        let Some(i) = v.as_int() else {
            return Err(bad(format!("{:?} takes an integer", self.data_type)));
        };
        let (lo, hi) = if self.data_type.is_signed() {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        };
        if i < lo || i > hi {
            return Err(bad(format!("must be {lo}..={hi} ({bits} bits)")));
        }
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        Ok((i as i64 as u64) & mask)
    }
}

/// One consistent cycle of the process image.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// The seqlock value it was taken at (equal values: the same publication).
    pub seq: u64,
    /// Cycle number.
    pub cycle: u64,
    /// Deadline (CLOCK_MONOTONIC ns).
    pub deadline_ns: u64,
    /// Wake-up (CLOCK_MONOTONIC ns).
    pub wake_ns: u64,
    /// Publication (CLOCK_REALTIME ns).
    pub unix_ns: u64,
    /// Working counter.
    pub wkc: u16,
    /// Expected working counter.
    pub expected_wkc: u16,
    /// The frame was lost: inputs are an older cycle's.
    pub frames_lost: bool,
    /// Per subdevice: its data was valid this cycle.
    pub valid: Vec<bool>,
    /// Input image.
    pub inputs: Vec<u8>,
    /// Output image (as sent with the next exchange).
    pub outputs: Vec<u8>,
    /// Retries this snapshot took (the master was publishing).
    pub retries: u32,
    /// The object's state when it was taken.
    pub state: Option<State>,
}

impl Snapshot {
    /// The raw bits of an entry.
    pub fn raw(&self, e: &EntryRef) -> u64 {
        let img = match e.direction {
            Direction::Inputs => &self.inputs,
            Direction::Outputs => &self.outputs,
        };
        read_bits(img, e.bit_offset, u32::from(e.bits))
    }

    /// The typed value of an entry.
    pub fn get(&self, e: &EntryRef) -> Value {
        e.decode(self.raw(e))
    }
}

#[derive(Deserialize)]
struct JsonLayout {
    entries: Vec<JsonEntry>,
}

#[derive(Deserialize)]
struct JsonEntry {
    position: u16,
    index: u16,
    name: String,
    pdo_name: Option<String>,
    bit_offset: u32,
    bits: u16,
    data_type: serde_json::Value,
    direction: String,
}

struct Inner {
    name: String,
    socket: PathBuf,
    master_uid: u32,
    map: Map,
    g: Geometry,
    generation: u32,
    period_ns: u64,
    writer_timeout_cycles: u64,
    entries: Vec<EntryRef>,
    layout_json: String,
}

/// A program's view of a master's process image.
pub struct Client {
    inner: Arc<Inner>,
}

impl Client {
    /// Attach to the image of the master whose control socket is `socket`, running as this
    /// process's own user ([`Client::attach_owned_by`] with the effective uid).
    pub fn attach(socket: impl AsRef<Path>) -> Result<Client> {
        Client::attach_owned_by(socket, nix::unistd::geteuid().as_raw())
    }

    /// Attach to the image of the master whose control socket is `socket`, running as
    /// `master_uid` (the service user): the socket's peer (`SO_PEERCRED`) is checked before
    /// anything is asked, the image comes as a sealed memfd with the reply (`SCM_RIGHTS`) and
    /// is mapped read-only. The header is checked against the object's size, the layout JSON
    /// against its hash and the entry table: a garbage object is an error, never a crash.
    pub fn attach_owned_by(socket: impl AsRef<Path>, master_uid: u32) -> Result<Client> {
        let socket = socket.as_ref();
        let name = &socket.display().to_string();
        let (_, fds) = ask(socket, master_uid, &json!({"cmd": "shm_image"}))?;
        let Some(fd) = fds.into_iter().next() else {
            return Err(Error::Format {
                name: name.to_string(),
                field: "reply",
                value: "no descriptor".into(),
                why: "the reply to shm_image carries the image (SCM_RIGHTS)".into(),
            });
        };
        Client::from_image(fd, socket, master_uid)
    }

    /// A client of an image descriptor obtained some other way (a supervisor that asked the
    /// master and passed it on): the seals and the contents are checked as by
    /// [`Client::attach_owned_by`], where it comes from is the caller's word. Writers and
    /// [`Client::reattach`] ask the master at `socket`, as `master_uid`.
    pub fn from_image(
        fd: std::os::fd::OwnedFd,
        socket: impl AsRef<Path>,
        master_uid: u32,
    ) -> Result<Client> {
        let socket = socket.as_ref();
        let name = &socket.display().to_string();
        let sys = |op: &'static str| {
            move |errno| Error::Sys {
                name: name.to_string(),
                op,
                errno,
            }
        };
        check_seals(name, &fd, image_seals())?;
        let st = nix::sys::stat::fstat(&fd).map_err(sys("fstat"))?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        let fmt = |field, value: String, why: String| Error::Format {
            name: name.to_string(),
            field,
            value,
            why,
        };
        if size < u64::from(HEADER_BYTES) || size > MAX_OBJECT_BYTES {
            return Err(fmt(
                "object size",
                size.to_string(),
                format!("must be {HEADER_BYTES}..={MAX_OBJECT_BYTES} bytes"),
            ));
        }
        let map = Map::new(&fd, size as usize, false).map_err(sys("mmap"))?;
        // The master stores LIVE (release) only once the header and everything it describes
        // are written: read the state first (acquire), the header after it.
        let state = State::from_u32(map.u32(h::STATE).load(Ordering::Acquire));
        if state == State::Init {
            return Err(Error::NotPublished {
                name: name.to_string(),
                state,
            });
        }
        let mut hdr = vec![0u8; HEADER_BYTES as usize];
        map.load_unaligned(0, &mut hdr);
        let g = Geometry::from_header(name, &hdr, size)?;
        let u32_at = |o: usize| u32::from_le_bytes(hdr[o..o + 4].try_into().expect("4"));
        let u64_at = |o: usize| u64::from_le_bytes(hdr[o..o + 8].try_into().expect("8"));
        let mut json = vec![0u8; g.layout_len as usize];
        map.load_unaligned(g.layout_offset as usize, &mut json);
        let hash = u64_at(h::LAYOUT_HASH);
        if fnv1a64(&json) != hash {
            return Err(fmt(
                "layout_hash",
                format!("{hash:#018x}"),
                format!("the layout JSON hashes to {:#018x}", fnv1a64(&json)),
            ));
        }
        let layout_json = String::from_utf8(json).map_err(|e| Error::Layout {
            name: name.to_string(),
            why: e.to_string(),
        })?;
        let parsed: JsonLayout = serde_json::from_str(&layout_json).map_err(|e| Error::Layout {
            name: name.to_string(),
            why: e.to_string(),
        })?;
        let mut entries = Vec::with_capacity(parsed.entries.len());
        let mut row = 0u32;
        for (i, je) in parsed.entries.iter().enumerate() {
            if je.index == 0 {
                continue;
            }
            let direction = match je.direction.as_str() {
                "inputs" => Direction::Inputs,
                "outputs" => Direction::Outputs,
                d => {
                    return Err(Error::Layout {
                        name: name.to_string(),
                        why: format!("entries[{i}].direction = {d:?}: not inputs/outputs"),
                    });
                }
            };
            let image_bits = 8 * u64::from(match direction {
                Direction::Inputs => g.input_bytes,
                Direction::Outputs => g.output_bytes,
            });
            if je.bits == 0 || u64::from(je.bit_offset) + u64::from(je.bits) > image_bits {
                return Err(Error::Layout {
                    name: name.to_string(),
                    why: format!(
                        "entries[{i}] ({}): bits {} at {} outside the {}-bit image",
                        je.name, je.bits, je.bit_offset, image_bits
                    ),
                });
            }
            let r = if direction == Direction::Outputs {
                if row >= g.output_entries {
                    return Err(fmt(
                        "output_entries",
                        g.output_entries.to_string(),
                        "fewer rows than output entries in the layout".into(),
                    ));
                }
                let o = g.entry_offset(row as usize);
                let (bo, bits) = (
                    map.u32(o + e::BIT_OFFSET).load(Ordering::Relaxed),
                    map.u16(o + e::BITS).load(Ordering::Relaxed),
                );
                if bo != je.bit_offset || bits != je.bits {
                    return Err(fmt(
                        "entry table",
                        format!("row {row}: bit_offset {bo} bits {bits}"),
                        format!(
                            "the layout says bit_offset {} bits {} for {}",
                            je.bit_offset, je.bits, je.name
                        ),
                    ));
                }
                row += 1;
                Some(row - 1)
            } else {
                None
            };
            let qualified = match &je.pdo_name {
                Some(p) => format!("{p}.{}", je.name),
                None => je.name.clone(),
            };
            entries.push(EntryRef {
                name: format!("{}:{qualified}", je.position),
                position: je.position,
                direction,
                bit_offset: je.bit_offset,
                bits: je.bits,
                data_type: DataType::from_json(&je.data_type),
                row: r,
            });
        }
        if row != g.output_entries {
            return Err(fmt(
                "output_entries",
                g.output_entries.to_string(),
                format!("the layout has {row} output entries"),
            ));
        }
        Ok(Client {
            inner: Arc::new(Inner {
                name: name.to_string(),
                socket: socket.to_path_buf(),
                master_uid,
                map,
                g,
                generation: u32_at(h::GENERATION),
                period_ns: u64_at(h::PERIOD_NS),
                writer_timeout_cycles: u64_at(h::WRITER_TIMEOUT),
                entries,
                layout_json,
            }),
        })
    }

    /// Attach again when the object was replaced (or the master restarted): Ok(true) when a new
    /// object (another generation) is attached, Ok(false) when the current one is still it.
    /// Writers of the old object keep the old object; attach them again.
    pub fn reattach(&mut self) -> Result<bool> {
        let fresh = Client::attach_owned_by(&self.inner.socket, self.inner.master_uid)?;
        if fresh.inner.generation == self.inner.generation && self.state() != State::Replaced {
            return Ok(false);
        }
        *self = fresh;
        Ok(true)
    }

    /// The control socket's path, as text (what errors name).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The object's current state.
    pub fn state(&self) -> State {
        State::from_u32(self.inner.map.u32(h::STATE).load(Ordering::Acquire))
    }

    /// The generation attached.
    pub fn generation(&self) -> u32 {
        self.inner.generation
    }

    /// The cycle period.
    pub fn period_ns(&self) -> u64 {
        self.inner.period_ns
    }

    /// Cycles without a heartbeat after which a writer goes stale.
    pub fn writer_timeout_cycles(&self) -> u64 {
        self.inner.writer_timeout_cycles
    }

    /// The geometry of the object.
    pub fn geometry(&self) -> &Geometry {
        &self.inner.g
    }

    /// The layout JSON (`rtcat pdos --json`).
    pub fn layout_json(&self) -> &str {
        &self.inner.layout_json
    }

    /// Every entry of the layout (padding excluded), in layout order.
    pub fn entries(&self) -> &[EntryRef] {
        &self.inner.entries
    }

    /// The master's pid as written in the header.
    pub fn master_pid(&self) -> u32 {
        self.inner.map.u32(h::MASTER_PID).load(Ordering::Relaxed)
    }

    /// The entry `POSITION:QUALIFIED` (`0:Outputs.Output 1`), or `POSITION:NAME` when that
    /// names exactly one entry of the subdevice.
    pub fn entry(&self, name: &str) -> Result<EntryRef> {
        let all = &self.inner.entries;
        if let Some(e) = all.iter().find(|e| e.name == name) {
            return Ok(e.clone());
        }
        let err = |why: String| Error::Entry {
            entry: name.to_string(),
            why,
        };
        let Some((pos, rest)) = name.split_once(':') else {
            return Err(err(
                "expected POSITION:NAME (e.g. \"0:Outputs.Output 1\")".into()
            ));
        };
        let pos: u16 = pos
            .parse()
            .map_err(|_| err(format!("position {pos:?} is not a number")))?;
        let hits: Vec<&EntryRef> = all
            .iter()
            .filter(|e| {
                e.position == pos
                    && e.name.split_once(':').is_some_and(|(_, q)| {
                        q == rest || q.rsplit_once('.').is_some_and(|(_, n)| n == rest)
                    })
            })
            .collect();
        match hits.as_slice() {
            [one] => Ok((*one).clone()),
            [] => {
                let names: Vec<&str> = all
                    .iter()
                    .filter(|e| e.position == pos)
                    .map(|e| e.name.as_str())
                    .take(12)
                    .collect();
                Err(err(if names.is_empty() {
                    format!("no subdevice {pos} with entries")
                } else {
                    format!("no such entry; subdevice {pos} has {}", names.join(", "))
                }))
            }
            many => Err(err(format!(
                "ambiguous: {}",
                many.iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// A consistent snapshot (allocates; see [`Client::snapshot_into`]).
    pub fn snapshot(&self) -> Result<Snapshot> {
        let mut s = Snapshot::default();
        self.snapshot_into(&mut s)?;
        Ok(s)
    }

    /// A consistent snapshot into `out` (no allocation once `out` has the sizes): the seqlock
    /// reader of FORMAT.md, retried at most 100 000 times. A REPLACED object is an
    /// error ([`Error::Gone`]): call [`Client::reattach`].
    pub fn snapshot_into(&self, out: &mut Snapshot) -> Result<()> {
        let i = &*self.inner;
        let (m, g) = (&i.map, &i.g);
        let base = g.snapshot_offset as usize;
        let state = self.state();
        if state == State::Replaced {
            return Err(Error::Gone {
                name: i.name.clone(),
                state,
            });
        }
        out.valid.resize(g.subdevices as usize, false);
        out.inputs.resize(g.input_bytes as usize, 0);
        out.outputs.resize(g.output_bytes as usize, 0);
        let seq = m.u64(base + s::SEQ);
        for retries in 0..=MAX_RETRIES {
            let s1 = seq.load(Ordering::Acquire);
            if s1 == 0 {
                return Err(Error::NotPublished {
                    name: i.name.clone(),
                    state,
                });
            }
            if s1 % 2 == 1 {
                backoff(retries);
                continue;
            }
            out.cycle = m.u64(base + s::CYCLE).load(Ordering::Relaxed);
            out.deadline_ns = m.u64(base + s::DEADLINE).load(Ordering::Relaxed);
            out.wake_ns = m.u64(base + s::WAKE).load(Ordering::Relaxed);
            out.unix_ns = m.u64(base + s::UNIX).load(Ordering::Relaxed);
            let word = m.u64(base + s::WKC_WORD).load(Ordering::Relaxed);
            let vo = g.valid_offset();
            for (k, v) in out.valid.iter_mut().enumerate() {
                *v = m.u8(vo + k).load(Ordering::Relaxed) == 1;
            }
            m.load_bytes(g.inputs_offset(), &mut out.inputs);
            m.load_bytes(g.outputs_offset(), &mut out.outputs);
            // The loads above complete before seq is read again.
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s1 {
                out.seq = s1;
                out.wkc = word as u16;
                out.expected_wkc = (word >> 16) as u16;
                out.frames_lost = (word >> 32) as u8 != 0;
                out.retries = retries;
                out.state = Some(state);
                return Ok(());
            }
            backoff(retries);
        }
        Err(Error::Busy {
            name: i.name.clone(),
            retries: MAX_RETRIES,
        })
    }

    /// Attach a writer called `name` (1..=31 bytes): the master hands this process an object
    /// of its own (its slot; the one declared for that name, else a free one; a stale slot of
    /// the same name and user is taken over). Needs the write right on the control socket.
    pub fn attach_writer(&self, name: &str) -> Result<Writer> {
        let i = &*self.inner;
        let err = |why: String| Error::Writer {
            name: i.name.clone(),
            writer: name.to_string(),
            why,
        };
        if matches!(self.state(), State::Replaced | State::Stopped) {
            return Err(err(format!("the object is {}", self.state())));
        }
        check_writer_name(name).map_err(|why| err(why.to_string()))?;
        let (data, fds) = ask(
            &i.socket,
            i.master_uid,
            &json!({"cmd": "shm_writer", "name": name}),
        )?;
        let slot = data.get("slot").and_then(|v| v.as_u64());
        let bytes = data.get("bytes").and_then(|v| v.as_u64());
        let generation = data.get("generation").and_then(|v| v.as_u64());
        let (Some(slot), Some(bytes), Some(fd)) = (slot, bytes, fds.into_iter().next()) else {
            return Err(err("the reply carries no slot, size or object".into()));
        };
        if generation != Some(u64::from(i.generation)) {
            return Err(err(format!(
                "the master's image is generation {generation:?}, this client holds {}: re-attach",
                i.generation
            )));
        }
        if slot >= u64::from(i.g.max_writers) {
            return Err(err(format!("slot {slot} out of range")));
        }
        check_seals(&i.name, &fd, writer_seals())?;
        let st = nix::sys::stat::fstat(&fd).map_err(|errno| Error::Sys {
            name: i.name.clone(),
            op: "fstat (writer object)",
            errno,
        })?;
        let need = u64::from(w::STAGED as u32) + u64::from(i.g.output_bytes);
        if bytes < need
            || u64::try_from(st.st_size).unwrap_or(0) != bytes
            || bytes > MAX_OBJECT_BYTES
        {
            return Err(err(format!(
                "writer object of {} bytes (reply: {bytes}): must be at least {need}",
                st.st_size
            )));
        }
        let map = Map::new(&fd, bytes as usize, true).map_err(|errno| Error::Sys {
            name: i.name.clone(),
            op: "mmap (writer object)",
            errno,
        })?;
        let slot = slot as usize;
        let me = slot as u32 + 1;
        let declared_rows: Vec<u32> = (0..i.g.output_entries)
            .filter(|&r| {
                let o = i.g.entry_offset(r as usize);
                i.map.u16(o + e::FLAGS).load(Ordering::Relaxed) & FLAG_DECLARED != 0
                    && i.map.u32(o + e::OWNER).load(Ordering::Relaxed) == me
            })
            .collect();
        let hb = map
            .u64(w::HEARTBEAT)
            .load(Ordering::Relaxed)
            .wrapping_add(1);
        map.u64(w::HEARTBEAT).store(hb, Ordering::Release);
        Ok(Writer {
            inner: self.inner.clone(),
            name: name.to_string(),
            slot,
            map,
            staged: vec![0; i.g.output_bytes as usize],
            seq: 0,
            heartbeat: hb,
            declared: !declared_rows.is_empty()
                || data.get("declared").and_then(|v| v.as_bool()) == Some(true),
            owned: declared_rows,
        })
    }
}

fn backoff(retries: u32) {
    if retries < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// A writer: owns output entries, stages their values in its own object, keeps the heartbeat.
/// Detaches on drop (the master then ends its claims).
pub struct Writer {
    inner: Arc<Inner>,
    name: String,
    slot: usize,
    /// Its own object (only this writer and the master map it).
    map: Map,
    staged: Vec<u8>,
    seq: u64,
    heartbeat: u64,
    /// Rows it owns: declared for it, or claimed.
    owned: Vec<u32>,
    declared: bool,
}

impl Writer {
    fn err(&self, why: String) -> Error {
        Error::Writer {
            name: self.inner.name.clone(),
            writer: self.name.clone(),
            why,
        }
    }

    fn row_of(&self, e: &EntryRef) -> Result<u32> {
        match (e.direction, e.row) {
            (Direction::Outputs, Some(r)) if r < self.inner.g.output_entries => Ok(r),
            _ => Err(Error::Entry {
                entry: e.name.clone(),
                why: "not an output entry of this object".into(),
            }),
        }
    }

    /// The slot number.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Whether the master declared this writer in its configuration.
    pub fn is_declared(&self) -> bool {
        self.declared
    }

    /// The slot's state (STALE when the master found the heartbeat stopped).
    pub fn state(&self) -> Option<WriterState> {
        WriterState::from_u32(self.map.u32(w::STATE).load(Ordering::Acquire))
    }

    /// The last cycle the master took a consistent copy of this writer's staged outputs: proof
    /// that the master is taking this writer's writes, not of which write it took (look for the
    /// value in a snapshot's outputs for that: FORMAT.md, Write).
    pub fn applied_cycle(&self) -> u64 {
        self.map.u64(w::APPLIED).load(Ordering::Relaxed)
    }

    /// Own an output entry: a request to the master, which keeps the record (already owned by
    /// this writer: Ok; driven by the master, declared for or claimed by another writer: an
    /// error naming it).
    pub fn claim(&mut self, e: &EntryRef) -> Result<()> {
        let row = self.row_of(e)?;
        if self.owned.contains(&row) {
            return Ok(());
        }
        let flags = self
            .inner
            .map
            .u16(self.inner.g.entry_offset(row as usize) + e::FLAGS)
            .load(Ordering::Relaxed);
        let owner = self
            .inner
            .map
            .u32(self.inner.g.entry_offset(row as usize) + e::OWNER)
            .load(Ordering::Relaxed);
        if flags & FLAG_MASTER != 0 || owner == OWNER_MASTER {
            return Err(self.err(format!(
                "{} is driven by the master (an [[axis]]): no writer can own it",
                e.name
            )));
        }
        let i = &*self.inner;
        ask(
            &i.socket,
            i.master_uid,
            &json!({"cmd": "shm_claim", "slot": self.slot, "row": row}),
        )
        .map_err(|er| match er {
            Error::Refused { why, .. } => self.err(format!("{}: {why}", e.name)),
            other => other,
        })?;
        self.owned.push(row);
        Ok(())
    }

    /// Stage values of owned entries and publish them at once (the master takes all or none of
    /// them in one cycle). Counts as a heartbeat.
    pub fn write(&mut self, values: &[(&EntryRef, Value)]) -> Result<()> {
        let mut raws = Vec::with_capacity(values.len());
        for (e, v) in values {
            let row = self.row_of(e)?;
            if !self.owned.contains(&row) {
                return Err(self.err(format!(
                    "{} is not owned by this writer (claim it first)",
                    e.name
                )));
            }
            raws.push(e.encode(*v)?);
        }
        for ((e, _), raw) in values.iter().zip(raws) {
            write_bits(&mut self.staged, e.bit_offset, u32::from(e.bits), raw);
        }
        let m = &self.map;
        let seq = m.u64(w::SEQ);
        self.seq = self.seq.wrapping_add(1) | 1;
        seq.store(self.seq, Ordering::Relaxed);
        fence(Ordering::Release);
        m.store_bytes(w::STAGED, &self.staged);
        self.seq = self.seq.wrapping_add(1);
        seq.store(self.seq, Ordering::Release);
        self.heartbeat();
        Ok(())
    }

    /// Tell the master this writer is alive (at least once per `writer_timeout_cycles`).
    pub fn heartbeat(&mut self) {
        self.heartbeat = self.heartbeat.wrapping_add(1);
        self.map
            .u64(w::HEARTBEAT)
            .store(self.heartbeat, Ordering::Release);
    }

    /// Give up an entry claimed with [`Writer::claim`] (declared entries stay).
    pub fn release(&mut self, e: &EntryRef) -> Result<()> {
        let row = self.row_of(e)?;
        let i = &*self.inner;
        ask(
            &i.socket,
            i.master_uid,
            &json!({"cmd": "shm_release", "slot": self.slot, "row": row}),
        )?;
        let declared = i
            .map
            .u16(i.g.entry_offset(row as usize) + e::FLAGS)
            .load(Ordering::Relaxed)
            & FLAG_DECLARED
            != 0;
        if !declared {
            self.owned.retain(|&r| r != row);
        }
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // The master sees FREE, says so, ends the claims and never reads this object again.
        self.map
            .u32(w::STATE)
            .store(WriterState::Free.as_u32(), Ordering::Release);
    }
}

// ENTRY_BYTES is part of the geometry check; keep the import honest.
const _: () = assert!(ENTRY_BYTES == 16);
