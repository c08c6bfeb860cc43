//! Format v3: constants, header offsets, the geometry of the areas and its validation.

use crate::Error;

/// `"RTCATPI\0"` at offset 0.
pub const MAGIC: [u8; 8] = *b"RTCATPI\0";
/// The format version this crate reads and writes.
pub const ABI_VERSION: u32 = 3;
/// Bytes reserved for the header.
pub const HEADER_BYTES: u32 = 4096;
/// Bytes of one entry-table row.
pub const ENTRY_BYTES: u32 = 16;
/// Writer slots in the object.
pub const MAX_WRITERS: u32 = 16;
/// Bytes of a writer's name field (NUL-padded; at most 31 bytes of name).
pub const NAME_BYTES: usize = 32;
/// Entry-table flag: the entry's owner is declared in the master's configuration.
pub const FLAG_DECLARED: u16 = 1;
/// Entry-table flag: the master drives the entry itself (an `[[axis]]`); no writer may own it.
pub const FLAG_MASTER: u16 = 2;
/// The entry-table `owner` of an entry the master drives: never 0, so a claim's CAS fails; the
/// master ignores the field for such entries whatever a client stores in it.
pub const OWNER_MASTER: u32 = u32::MAX;
/// Bytes of a writer slot before its staged image.
pub(crate) const SLOT_HEAD: u32 = 64;
/// Bytes of the snapshot before the validity bytes.
pub(crate) const SNAP_HEAD: u32 = 48;
/// Largest object either side accepts (a 256-subdevice segment with 4 KiB of process data
/// each needs about 18 MiB; this only bounds what a garbage header can make a client map).
pub const MAX_OBJECT_BYTES: u64 = 1 << 30;

/// Header field offsets.
pub(crate) mod h {
    pub const MAGIC: usize = 0;
    pub const ABI: usize = 8;
    pub const HEADER_BYTES: usize = 12;
    pub const OBJECT_BYTES: usize = 16;
    pub const LAYOUT_HASH: usize = 24;
    pub const GENERATION: usize = 32;
    pub const STATE: usize = 36;
    pub const PERIOD_NS: usize = 40;
    pub const SUBDEVICES: usize = 48;
    pub const INPUT_BYTES: usize = 52;
    pub const OUTPUT_BYTES: usize = 56;
    pub const OUTPUT_ENTRIES: usize = 60;
    pub const LAYOUT_OFFSET: usize = 64;
    pub const LAYOUT_LEN: usize = 68;
    pub const ENTRIES_OFFSET: usize = 72;
    pub const ENTRY_BYTES: usize = 76;
    pub const WRITERS_OFFSET: usize = 80;
    pub const MAX_WRITERS: usize = 84;
    pub const WRITER_BYTES: usize = 88;
    pub const SNAPSHOT_OFFSET: usize = 92;
    pub const SNAPSHOT_BYTES: usize = 96;
    pub const MASTER_PID: usize = 100;
    pub const WRITER_TIMEOUT: usize = 104;
}

/// Snapshot field offsets (from `snapshot_offset`).
pub(crate) mod s {
    pub const SEQ: usize = 0;
    pub const CYCLE: usize = 8;
    pub const DEADLINE: usize = 16;
    pub const WAKE: usize = 24;
    pub const UNIX: usize = 32;
    /// u16 wkc, u16 expected_wkc, u8 frames_lost, 3 zero bytes: one little-endian u64.
    pub const WKC_WORD: usize = 40;
}

/// Writer slot field offsets (from the slot's start).
pub(crate) mod w {
    pub const STATE: usize = 0;
    pub const PID: usize = 4;
    pub const HEARTBEAT: usize = 8;
    pub const NAME: usize = 16;
    pub const SEQ: usize = 48;
    pub const APPLIED: usize = 56;
    pub const STAGED: usize = 64;
}

/// Entry row field offsets (from the row's start).
pub(crate) mod e {
    pub const BIT_OFFSET: usize = 0;
    pub const BITS: usize = 4;
    pub const FLAGS: usize = 6;
    pub const OWNER: usize = 8;
}

/// The object's `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Being created.
    Init,
    /// Published every cycle.
    Live,
    /// The master re-initialises the segment; the last snapshot stays readable.
    Recovering,
    /// Replaced by a new object of the same name (the layout changed): re-attach.
    Replaced,
    /// The master stopped.
    Stopped,
    /// A value the format does not define.
    Unknown(u32),
}

impl State {
    /// From the header's value.
    pub fn from_u32(v: u32) -> State {
        match v {
            0 => State::Init,
            1 => State::Live,
            2 => State::Recovering,
            3 => State::Replaced,
            4 => State::Stopped,
            x => State::Unknown(x),
        }
    }

    /// The header's value.
    pub fn as_u32(self) -> u32 {
        match self {
            State::Init => 0,
            State::Live => 1,
            State::Recovering => 2,
            State::Replaced => 3,
            State::Stopped => 4,
            State::Unknown(x) => x,
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            State::Init => f.write_str("INIT"),
            State::Live => f.write_str("LIVE"),
            State::Recovering => f.write_str("RECOVERING"),
            State::Replaced => f.write_str("REPLACED"),
            State::Stopped => f.write_str("STOPPED"),
            State::Unknown(x) => write!(f, "unknown state {x}"),
        }
    }
}

/// A writer slot's `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterState {
    /// Free.
    Free,
    /// A writer is attaching.
    Claiming,
    /// Attached: its staged outputs are taken.
    Attached,
    /// Its heartbeat stopped: its entries are at their safe values.
    Stale,
}

impl WriterState {
    /// The slot's value (None: garbage).
    pub fn from_u32(v: u32) -> Option<WriterState> {
        Some(match v {
            0 => WriterState::Free,
            1 => WriterState::Claiming,
            2 => WriterState::Attached,
            3 => WriterState::Stale,
            _ => return None,
        })
    }

    /// The slot's value.
    pub fn as_u32(self) -> u32 {
        match self {
            WriterState::Free => 0,
            WriterState::Claiming => 1,
            WriterState::Attached => 2,
            WriterState::Stale => 3,
        }
    }
}

/// FNV-1a 64 (the header's `layout_hash`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Whether `name` is a valid object name: `[A-Za-z0-9_.-]{1,200}`, not starting with `.`
/// (the name becomes a file in /dev/shm: no `/`, no `..`, no hidden files).
pub fn valid_name(name: &str) -> Result<(), Error> {
    let why = if name.is_empty() {
        "must not be empty"
    } else if name.len() > 200 {
        "longer than 200 bytes"
    } else if name.starts_with('.') {
        "must not start with '.'"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        "only A-Z a-z 0-9 _ . - are allowed"
    } else {
        return Ok(());
    };
    Err(Error::Name {
        name: name.to_string(),
        why,
    })
}

pub(crate) fn pad8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

fn align64(n: u64) -> u64 {
    n.div_ceil(64) * 64
}

/// Where everything is in an object: computed by the master from the segment, or read from a
/// header and checked against the object's size by a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Subdevices (validity bytes).
    pub subdevices: u32,
    /// Input image bytes.
    pub input_bytes: u32,
    /// Output image bytes.
    pub output_bytes: u32,
    /// Entry-table rows.
    pub output_entries: u32,
    /// Layout JSON offset.
    pub layout_offset: u32,
    /// Layout JSON bytes.
    pub layout_len: u32,
    /// Entry table offset.
    pub entries_offset: u32,
    /// Writer slots offset.
    pub writers_offset: u32,
    /// Writer slots.
    pub max_writers: u32,
    /// Bytes of one writer slot.
    pub writer_bytes: u32,
    /// Snapshot offset.
    pub snapshot_offset: u32,
    /// Snapshot bytes.
    pub snapshot_bytes: u32,
    /// Object bytes.
    pub object_bytes: u64,
}

impl Geometry {
    /// The layout of a new object (areas in the order of FORMAT.md, 64-aligned).
    pub fn new(
        subdevices: u32,
        input_bytes: u32,
        output_bytes: u32,
        output_entries: u32,
        layout_len: u32,
    ) -> Result<Geometry, Error> {
        let layout_offset = u64::from(HEADER_BYTES);
        let entries_offset = align64(layout_offset + u64::from(layout_len));
        let writers_offset =
            align64(entries_offset + u64::from(output_entries) * u64::from(ENTRY_BYTES));
        let writer_bytes = align64(u64::from(SLOT_HEAD) + pad8(u64::from(output_bytes)));
        let snapshot_offset = align64(writers_offset + u64::from(MAX_WRITERS) * writer_bytes);
        let snapshot_bytes = Self::min_snapshot_bytes(subdevices, input_bytes, output_bytes);
        let object_bytes = (snapshot_offset + snapshot_bytes).div_ceil(4096) * 4096;
        if object_bytes > MAX_OBJECT_BYTES {
            return Err(Error::Config {
                field: "object size".into(),
                value: object_bytes.to_string(),
                why: format!("larger than {MAX_OBJECT_BYTES} bytes"),
            });
        }
        // Below MAX_OBJECT_BYTES (2^30) every offset fits a u32.
        Ok(Geometry {
            subdevices,
            input_bytes,
            output_bytes,
            output_entries,
            layout_offset: layout_offset as u32,
            layout_len,
            entries_offset: entries_offset as u32,
            writers_offset: writers_offset as u32,
            max_writers: MAX_WRITERS,
            writer_bytes: writer_bytes as u32,
            snapshot_offset: snapshot_offset as u32,
            snapshot_bytes: snapshot_bytes as u32,
            object_bytes,
        })
    }

    fn min_snapshot_bytes(subdevices: u32, input_bytes: u32, output_bytes: u32) -> u64 {
        u64::from(SNAP_HEAD)
            + pad8(u64::from(subdevices))
            + pad8(u64::from(input_bytes))
            + pad8(u64::from(output_bytes))
    }

    /// Offset of the validity bytes.
    pub fn valid_offset(&self) -> usize {
        self.snapshot_offset as usize + SNAP_HEAD as usize
    }

    /// Offset of the input image in the snapshot.
    pub fn inputs_offset(&self) -> usize {
        self.valid_offset() + pad8(u64::from(self.subdevices)) as usize
    }

    /// Offset of the output image in the snapshot.
    pub fn outputs_offset(&self) -> usize {
        self.inputs_offset() + pad8(u64::from(self.input_bytes)) as usize
    }

    /// Offset of writer slot `k`.
    pub fn slot_offset(&self, k: usize) -> usize {
        self.writers_offset as usize + k * self.writer_bytes as usize
    }

    /// Offset of entry row `i`.
    pub fn entry_offset(&self, i: usize) -> usize {
        self.entries_offset as usize + i * ENTRY_BYTES as usize
    }

    /// Read a header (the first [`HEADER_BYTES`] of an object of `file_bytes`) and check every
    /// area against the object: what a client does before it touches anything else.
    pub fn from_header(name: &str, hdr: &[u8], file_bytes: u64) -> Result<Geometry, Error> {
        let bad = |field: &'static str, value: &dyn std::fmt::Display, why: String| Error::Format {
            name: name.to_string(),
            field,
            value: value.to_string(),
            why,
        };
        if (hdr.len() as u64) < u64::from(HEADER_BYTES) || file_bytes < u64::from(HEADER_BYTES) {
            return Err(bad(
                "object size",
                &file_bytes,
                format!("smaller than the {HEADER_BYTES}-byte header"),
            ));
        }
        let u32_at = |o: usize| u32::from_le_bytes(hdr[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(hdr[o..o + 8].try_into().expect("8 bytes"));
        if hdr[..8] != MAGIC {
            return Err(bad(
                "magic",
                &format!("{:02x?}", &hdr[..8]),
                "not an rtcat process image (\"RTCATPI\\0\")".into(),
            ));
        }
        let abi = u32_at(h::ABI);
        if abi != ABI_VERSION {
            return Err(bad(
                "abi_version",
                &abi,
                format!("this client reads version {ABI_VERSION}"),
            ));
        }
        let hb = u32_at(h::HEADER_BYTES);
        if hb != HEADER_BYTES {
            return Err(bad("header_bytes", &hb, format!("must be {HEADER_BYTES}")));
        }
        let object_bytes = u64_at(h::OBJECT_BYTES);
        if object_bytes > file_bytes || object_bytes > MAX_OBJECT_BYTES {
            return Err(bad(
                "object_bytes",
                &object_bytes,
                format!("larger than the object ({file_bytes} bytes) or than {MAX_OBJECT_BYTES}"),
            ));
        }
        let eb = u32_at(h::ENTRY_BYTES);
        if eb != ENTRY_BYTES {
            return Err(bad("entry_bytes", &eb, format!("must be {ENTRY_BYTES}")));
        }
        let mw = u32_at(h::MAX_WRITERS);
        if mw == 0 || mw > 1024 {
            return Err(bad("max_writers", &mw, "must be 1..=1024".into()));
        }
        let g = Geometry {
            subdevices: u32_at(h::SUBDEVICES),
            input_bytes: u32_at(h::INPUT_BYTES),
            output_bytes: u32_at(h::OUTPUT_BYTES),
            output_entries: u32_at(h::OUTPUT_ENTRIES),
            layout_offset: u32_at(h::LAYOUT_OFFSET),
            layout_len: u32_at(h::LAYOUT_LEN),
            entries_offset: u32_at(h::ENTRIES_OFFSET),
            writers_offset: u32_at(h::WRITERS_OFFSET),
            max_writers: mw,
            writer_bytes: u32_at(h::WRITER_BYTES),
            snapshot_offset: u32_at(h::SNAPSHOT_OFFSET),
            snapshot_bytes: u32_at(h::SNAPSHOT_BYTES),
            object_bytes,
        };
        let inside = |field: &'static str, off: u32, len: u64, align: u32| {
            let end = u64::from(off) + len;
            if off < HEADER_BYTES || end > object_bytes || !off.is_multiple_of(align) {
                Err(bad(
                    field,
                    &off,
                    format!(
                        "area of {len} bytes must start after the header, {align}-aligned, \
                         and end inside the object ({object_bytes} bytes)"
                    ),
                ))
            } else {
                Ok(())
            }
        };
        inside("layout_offset", g.layout_offset, u64::from(g.layout_len), 1)?;
        inside(
            "entries_offset",
            g.entries_offset,
            u64::from(g.output_entries) * u64::from(ENTRY_BYTES),
            8,
        )?;
        let min_slot = u64::from(SLOT_HEAD) + u64::from(g.output_bytes);
        if u64::from(g.writer_bytes) < min_slot || !g.writer_bytes.is_multiple_of(8) {
            return Err(bad(
                "writer_bytes",
                &g.writer_bytes,
                format!("must be a multiple of 8 and at least 64 + output_bytes = {min_slot}"),
            ));
        }
        inside(
            "writers_offset",
            g.writers_offset,
            u64::from(g.max_writers) * u64::from(g.writer_bytes),
            8,
        )?;
        let min_snap = Self::min_snapshot_bytes(g.subdevices, g.input_bytes, g.output_bytes);
        if u64::from(g.snapshot_bytes) < min_snap {
            return Err(bad(
                "snapshot_bytes",
                &g.snapshot_bytes,
                format!("must be at least {min_snap} for these sizes"),
            ));
        }
        inside(
            "snapshot_offset",
            g.snapshot_offset,
            u64::from(g.snapshot_bytes),
            8,
        )?;
        Ok(g)
    }
}
