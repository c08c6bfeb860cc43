//! The master side: create the image (a sealed memfd, handed out by the [`Broker`]), publish
//! every cycle, take the writers' outputs from their own objects.

use crate::bits::{copy_bits, read_bits, write_bits};
use crate::broker::{Broker, Row, WriterObj, image_seals, seal, sealable};
use crate::format::{
    ABI_VERSION, ENTRY_BYTES, FLAG_DECLARED, FLAG_MASTER, Geometry, HEADER_BYTES, MAGIC,
    MAX_WRITERS, NAME_BYTES, OWNER_MASTER, State, WriterState, e, fnv1a64, h, s, valid_name, w,
};
use crate::map::Map;
use crate::{Error, Result};
use nix::errno::Errno;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

/// One output entry of the layout, as the publisher needs it (the layout's output entries with
/// a non-zero index, in layout order: row `i` of the entry table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutputEntry {
    /// Bit offset in the output image.
    pub bit_offset: u32,
    /// Length in bits.
    pub bits: u16,
    /// The declared writer owning it (index into [`PublisherConfig::writers`]).
    pub writer: Option<usize>,
    /// Its safe value: the raw bits (the low `bits` bits; 0 beyond 64 bits). Used when `hold`
    /// is [`Hold::None`].
    pub safe: u64,
    /// Hold instead of a fixed safe value (a position target holds where the drive is).
    pub hold: Hold,
    /// The master drives this entry itself (an `[[axis]]`): no writer can own it, whatever a
    /// client stores in the entry table, and the publisher never touches its bits.
    pub master: bool,
}

/// What an entry falls back to instead of its fixed safe value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hold {
    /// The fixed `safe` value.
    #[default]
    None,
    /// The value of the input entry at this bit offset (same width: a position target and
    /// its position actual), latched when the entry falls back: the drive stays where it is.
    Input(u32),
    /// The value the entry had in the outputs when it fell back (no actual value mapped).
    Output,
}

/// A writer declared in the master's configuration: it gets slot `k` for `writers[k]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredWriter {
    /// Its name (1..=31 bytes, no NUL).
    pub name: String,
}

/// What an object is created with.
#[derive(Debug, Clone)]
pub struct PublisherConfig<'a> {
    /// The image's label (`[shm] name`): the memfd's name, shown as `/memfd:NAME` in
    /// `/proc/PID/fd` of the master and the clients. Nothing is created under this name.
    pub name: &'a str,
    /// Generation (non-zero; different from the object it replaces).
    pub generation: u32,
    /// Cycle period.
    pub period_ns: u64,
    /// Subdevices.
    pub subdevices: u32,
    /// Input image bytes.
    pub input_bytes: u32,
    /// Output image bytes.
    pub output_bytes: u32,
    /// The layout JSON (`rtcat pdos --json`, with this generation).
    pub layout_json: &'a [u8],
    /// The entry table's rows.
    pub entries: &'a [OutputEntry],
    /// Declared writers (at most [`MAX_WRITERS`]).
    pub writers: &'a [DeclaredWriter],
    /// Cycles without a heartbeat after which a writer is stale (>= 1).
    pub writer_timeout_cycles: u64,
}

/// One cycle's facts for the snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CycleInfo {
    /// Cycle number.
    pub cycle: u64,
    /// Deadline (CLOCK_MONOTONIC ns).
    pub deadline_ns: u64,
    /// Wake-up (CLOCK_MONOTONIC ns).
    pub wake_ns: u64,
    /// Publication time (CLOCK_REALTIME ns).
    pub unix_ns: u64,
    /// Working counter received.
    pub wkc: u16,
    /// Working counter expected.
    pub expected_wkc: u16,
    /// The frame was lost: the inputs are an older cycle's.
    pub frames_lost: bool,
}

/// What happened to a writer slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterEventKind {
    /// A writer attached.
    Attached,
    /// Its heartbeat stopped for `writer_timeout_cycles`: its entries are at their safe values.
    Stale,
    /// Its heartbeat is back.
    Resumed,
    /// It detached (or its slot was taken over).
    Detached,
}

/// One writer event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterEvent {
    /// Slot number.
    pub slot: u8,
    /// The writer's pid as it wrote it.
    pub pid: u32,
    /// Its name (NUL-padded, as in the slot; the configured one for declared slots).
    pub name: [u8; NAME_BYTES],
    /// What happened.
    pub kind: WriterEventKind,
}

impl WriterEvent {
    /// The name up to the first NUL, as far as it is UTF-8.
    pub fn name(&self) -> &str {
        name_str(&self.name)
    }
}

pub(crate) fn name_str(b: &[u8]) -> &str {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    match std::str::from_utf8(&b[..n]) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&b[..e.valid_up_to()]).unwrap_or(""),
    }
}

const MAX_EVENTS: usize = 2 * MAX_WRITERS as usize;

/// The events of one [`Publisher::take_writes`] (a fixed array: no allocation per cycle).
#[derive(Debug, Clone, Copy)]
pub struct WriteEvents {
    ev: [WriterEvent; MAX_EVENTS],
    len: usize,
}

impl WriteEvents {
    fn new() -> Self {
        WriteEvents {
            ev: [WriterEvent {
                slot: 0,
                pid: 0,
                name: [0; NAME_BYTES],
                kind: WriterEventKind::Attached,
            }; MAX_EVENTS],
            len: 0,
        }
    }

    fn push(&mut self, e: WriterEvent) {
        if self.len < MAX_EVENTS {
            self.ev[self.len] = e;
            self.len += 1;
        }
    }

    /// The events, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = &WriterEvent> {
        self.ev[..self.len].iter()
    }

    /// No events.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    Free,
    Attached,
    Stale,
}

/// The master's view of one writer slot (never trusted from the mapping alone).
struct Slot {
    view: View,
    pid: u32,
    heartbeat: u64,
    heartbeat_cycle: u64,
    /// A consistent copy of its staged image has been taken since it attached.
    has_values: bool,
    /// The last consistent copy, and the buffer the next copy goes into.
    taken: Vec<u8>,
    scratch: Vec<u8>,
    declared: Option<[u8; NAME_BYTES]>,
    /// The name it attached with.
    name: [u8; NAME_BYTES],
    /// Its object (created by the broker for the writer it was handed to).
    obj: Option<Box<WriterObj>>,
    /// The writer of `obj` detached: nothing in it is read any more.
    closed: bool,
}

/// The master's side of an object.
pub struct Publisher {
    name: String,
    map: Map,
    broker: Arc<Broker>,
    g: Geometry,
    generation: u32,
    layout_hash: u64,
    entries: Vec<OutputEntry>,
    safe_image: Vec<u8>,
    /// Per entry: its hold value is latched in `safe_image` (reset when a writer's values
    /// apply again).
    latched: Vec<bool>,
    /// Per entry: a held entry (a drive target) a writer has driven since creation; it stays
    /// held when nobody writes it any more, never handed back to the application.
    driven: Vec<bool>,
    driven_any: bool,
    slots: Vec<Slot>,
    timeout: u64,
    seq: u64,
    any_declared: bool,
}

fn sys<'a>(name: &'a str, op: &'static str) -> impl Fn(Errno) -> Error + 'a {
    move |errno| Error::Sys {
        name: name.to_string(),
        op,
        errno,
    }
}

fn cfg_err(
    field: impl Into<String>,
    value: impl std::fmt::Display,
    why: impl Into<String>,
) -> Error {
    Error::Config {
        field: field.into(),
        value: value.to_string(),
        why: why.into(),
    }
}

/// Check a writer name: 1..=31 bytes, no NUL.
pub(crate) fn check_writer_name(n: &str) -> std::result::Result<[u8; NAME_BYTES], &'static str> {
    if n.is_empty() || n.len() >= NAME_BYTES {
        return Err("must be 1..=31 bytes");
    }
    if n.bytes().any(|b| b == 0 || b.is_ascii_control()) {
        return Err("must not contain control characters");
    }
    let mut b = [0u8; NAME_BYTES];
    b[..n.len()].copy_from_slice(n.as_bytes());
    Ok(b)
}

impl Publisher {
    /// Create the image (a memfd labelled `NAME`), fill it, seal it and set it LIVE. Clients
    /// get it from [`Publisher::broker`] over the control socket.
    pub fn create(cfg: &PublisherConfig<'_>) -> Result<Publisher> {
        Self::create_in(cfg)
    }

    /// A client shrank the object (ftruncate): the master's mapping was replaced by anonymous
    /// memory (no SIGBUS). Sealed objects cannot be shrunk; this stays as a second line.
    pub fn truncated(&self) -> bool {
        self.map.truncated()
    }

    /// What hands the image and the writer objects to clients.
    pub fn broker(&self) -> Arc<Broker> {
        self.broker.clone()
    }

    fn create_in(cfg: &PublisherConfig<'_>) -> Result<Publisher> {
        valid_name(cfg.name)?;
        let name = cfg.name;
        if cfg.generation == 0 {
            return Err(cfg_err("generation", 0, "must not be 0"));
        }
        if cfg.writer_timeout_cycles == 0 {
            return Err(cfg_err("writer_timeout_cycles", 0, "must be at least 1"));
        }
        if cfg.writers.len() > MAX_WRITERS as usize {
            return Err(cfg_err(
                "writers",
                cfg.writers.len(),
                format!("at most {MAX_WRITERS} declared writers"),
            ));
        }
        let mut declared = Vec::with_capacity(cfg.writers.len());
        for (i, wr) in cfg.writers.iter().enumerate() {
            let b = check_writer_name(&wr.name).map_err(|why| {
                cfg_err(format!("writers[{i}].name"), format!("{:?}", wr.name), why)
            })?;
            if cfg.writers[..i].iter().any(|o| o.name == wr.name) {
                return Err(cfg_err(
                    format!("writers[{i}].name"),
                    format!("{:?}", wr.name),
                    "declared twice",
                ));
            }
            declared.push(b);
        }
        let out_bits = u64::from(cfg.output_bytes) * 8;
        for (i, en) in cfg.entries.iter().enumerate() {
            if en.bits == 0 || u64::from(en.bit_offset) + u64::from(en.bits) > out_bits {
                return Err(cfg_err(
                    format!("entries[{i}]"),
                    format!("bit_offset {} bits {}", en.bit_offset, en.bits),
                    format!(
                        "must be 1 or more bits inside the {}-byte output image",
                        cfg.output_bytes
                    ),
                ));
            }
            if en.master && en.writer.is_some() {
                return Err(cfg_err(
                    format!("entries[{i}].writer"),
                    en.writer.unwrap_or(0),
                    "the master drives this entry: no writer can own it",
                ));
            }
            if let Hold::Input(off) = en.hold
                && u64::from(off) + u64::from(en.bits) > u64::from(cfg.input_bytes) * 8
            {
                return Err(cfg_err(
                    format!("entries[{i}].hold"),
                    format!("input bit_offset {off} bits {}", en.bits),
                    format!("must be inside the {}-byte input image", cfg.input_bytes),
                ));
            }
            if let Some(k) = en.writer
                && k >= cfg.writers.len()
            {
                return Err(cfg_err(
                    format!("entries[{i}].writer"),
                    k,
                    format!("only {} writers are declared", cfg.writers.len()),
                ));
            }
        }
        let layout_len = u32::try_from(cfg.layout_json.len())
            .map_err(|_| cfg_err("layout_json", cfg.layout_json.len(), "longer than 4 GiB"))?;
        let rows = u32::try_from(cfg.entries.len())
            .map_err(|_| cfg_err("entries", cfg.entries.len(), "too many"))?;
        let g = Geometry::new(
            cfg.subdevices,
            cfg.input_bytes,
            cfg.output_bytes,
            rows,
            layout_len,
        )?;

        let label = std::ffi::CString::new(format!("rtcat:{name}"))
            .map_err(|_| cfg_err("name", name, "must not contain NUL"))?;
        let fd = sealable(&label, g.object_bytes).map_err(sys(name, "memfd_create"))?;
        let map = Map::new_guarded(&fd, g.object_bytes as usize).map_err(sys(name, "mmap"))?;

        let layout_hash = fnv1a64(cfg.layout_json);
        let hdr_u32 = |o: usize, v: u32| map.u32(o).store(v, Ordering::Relaxed);
        let hdr_u64 = |o: usize, v: u64| map.u64(o).store(v, Ordering::Relaxed);
        map.store_unaligned(h::MAGIC, &MAGIC);
        hdr_u32(h::ABI, ABI_VERSION);
        hdr_u32(h::HEADER_BYTES, HEADER_BYTES);
        hdr_u64(h::OBJECT_BYTES, g.object_bytes);
        hdr_u64(h::LAYOUT_HASH, layout_hash);
        hdr_u32(h::GENERATION, cfg.generation);
        hdr_u32(h::STATE, State::Init.as_u32());
        hdr_u64(h::PERIOD_NS, cfg.period_ns);
        hdr_u32(h::SUBDEVICES, g.subdevices);
        hdr_u32(h::INPUT_BYTES, g.input_bytes);
        hdr_u32(h::OUTPUT_BYTES, g.output_bytes);
        hdr_u32(h::OUTPUT_ENTRIES, g.output_entries);
        hdr_u32(h::LAYOUT_OFFSET, g.layout_offset);
        hdr_u32(h::LAYOUT_LEN, g.layout_len);
        hdr_u32(h::ENTRIES_OFFSET, g.entries_offset);
        hdr_u32(h::ENTRY_BYTES, ENTRY_BYTES);
        hdr_u32(h::WRITERS_OFFSET, g.writers_offset);
        hdr_u32(h::MAX_WRITERS, g.max_writers);
        hdr_u32(h::WRITER_BYTES, g.writer_bytes);
        hdr_u32(h::SNAPSHOT_OFFSET, g.snapshot_offset);
        hdr_u32(h::SNAPSHOT_BYTES, g.snapshot_bytes);
        hdr_u32(h::MASTER_PID, std::process::id());
        hdr_u64(h::WRITER_TIMEOUT, cfg.writer_timeout_cycles);
        map.store_unaligned(g.layout_offset as usize, cfg.layout_json);

        let mut safe_image = vec![0u8; cfg.output_bytes as usize];
        for (i, en) in cfg.entries.iter().enumerate() {
            let o = g.entry_offset(i);
            map.u32(o + e::BIT_OFFSET)
                .store(en.bit_offset, Ordering::Relaxed);
            map.u16(o + e::BITS).store(en.bits, Ordering::Relaxed);
            let (flags, owner) = match en.writer {
                _ if en.master => (FLAG_MASTER, OWNER_MASTER),
                Some(k) => (FLAG_DECLARED, k as u32 + 1),
                None => (0, 0),
            };
            map.u16(o + e::FLAGS).store(flags, Ordering::Relaxed);
            map.u32(o + e::OWNER).store(owner, Ordering::Relaxed);
            write_bits(
                &mut safe_image,
                en.bit_offset,
                u32::from(en.bits).min(64),
                en.safe,
            );
        }
        let staged = cfg.output_bytes as usize;
        let mut slots = Vec::with_capacity(MAX_WRITERS as usize);
        for k in 0..MAX_WRITERS as usize {
            let d = declared.get(k).copied();
            if let Some(n) = &d {
                map.store_unaligned(g.slot_offset(k) + w::NAME, n);
            }
            slots.push(Slot {
                view: View::Free,
                pid: 0,
                heartbeat: 0,
                heartbeat_cycle: 0,
                has_values: false,
                taken: vec![0; staged],
                scratch: vec![0; staged],
                declared: d,
                name: [0; NAME_BYTES],
                obj: None,
                closed: false,
            });
        }
        // Everything above is visible before a client can see LIVE.
        map.u32(h::STATE)
            .store(State::Live.as_u32(), Ordering::Release);
        // Sealed after our writable mapping exists: from now on nobody can map it writable,
        // write(2) to it or change its size (fcntl(2), F_SEAL_FUTURE_WRITE: Linux 5.1).
        seal(&fd, image_seals()).map_err(sys(name, "F_ADD_SEALS (Linux 5.1 or later)"))?;
        let rows = cfg
            .entries
            .iter()
            .map(|en| Row {
                master: en.master,
                declared: en.writer,
            })
            .collect();
        let mut decl = vec![None; MAX_WRITERS as usize];
        for (k, d) in declared.iter().enumerate() {
            decl[k] = Some(*d);
        }
        let writer_object = u64::from(g.writer_bytes).div_ceil(4096) * 4096;
        let broker = Arc::new(Broker::new(
            fd,
            g.object_bytes,
            cfg.generation,
            writer_object,
            rows,
            decl,
        ));
        Ok(Publisher {
            name: name.to_string(),
            map,
            broker,
            g,
            generation: cfg.generation,
            layout_hash,
            entries: cfg.entries.to_vec(),
            latched: vec![false; cfg.entries.len()],
            driven: vec![false; cfg.entries.len()],
            driven_any: false,
            safe_image,
            slots,
            timeout: cfg.writer_timeout_cycles,
            seq: 0,
            any_declared: cfg.entries.iter().any(|e| e.writer.is_some()),
        })
    }

    /// The object name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The generation it was created with.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// FNV-1a 64 of its layout JSON.
    pub fn layout_hash(&self) -> u64 {
        self.layout_hash
    }

    /// Its geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.g
    }

    /// Store the object's state (LIVE, RECOVERING, STOPPED; see [`Publisher::replace`]).
    pub fn set_state(&self, st: State) {
        self.map.u32(h::STATE).store(st.as_u32(), Ordering::Release);
    }

    /// Mark the image REPLACED (a new one follows, with another generation; clients ask the
    /// control socket for it).
    pub fn replace(self) -> Result<()> {
        self.set_state(State::Replaced);
        Ok(())
    }

    /// Publish one cycle (seqlock writer side): no allocation, no system call.
    #[inline]
    pub fn publish(
        &mut self,
        info: &CycleInfo,
        inputs: &[u8],
        outputs: &[u8],
        valid: impl IntoIterator<Item = bool>,
    ) {
        let m = &self.map;
        let base = self.g.snapshot_offset as usize;
        let seq = m.u64(base + s::SEQ);
        self.seq = self.seq.wrapping_add(1) | 1;
        seq.store(self.seq, Ordering::Relaxed);
        // Orders the odd seq before every data store below (the classic seqlock writer; on
        // arm64 a `dmb ish`, on x86-64 a compiler barrier only).
        fence(Ordering::Release);
        m.u64(base + s::CYCLE).store(info.cycle, Ordering::Relaxed);
        m.u64(base + s::DEADLINE)
            .store(info.deadline_ns, Ordering::Relaxed);
        m.u64(base + s::WAKE).store(info.wake_ns, Ordering::Relaxed);
        m.u64(base + s::UNIX).store(info.unix_ns, Ordering::Relaxed);
        let word = u64::from(info.wkc)
            | u64::from(info.expected_wkc) << 16
            | u64::from(info.frames_lost) << 32;
        m.u64(base + s::WKC_WORD).store(word, Ordering::Relaxed);
        let vb = m.bytes(self.g.valid_offset(), self.g.subdevices as usize);
        for (b, v) in vb.iter().zip(valid) {
            b.store(u8::from(v), Ordering::Relaxed);
        }
        let n_in = inputs.len().min(self.g.input_bytes as usize);
        m.store_bytes(self.g.inputs_offset(), &inputs[..n_in]);
        let n_out = outputs.len().min(self.g.output_bytes as usize);
        m.store_bytes(self.g.outputs_offset(), &outputs[..n_out]);
        self.seq = self.seq.wrapping_add(1);
        // Release: a reader that sees this even value sees every store above.
        seq.store(self.seq, Ordering::Release);
    }

    /// [`Publisher::take_writes_held`] without the input image: a [`Hold::Input`] entry holds
    /// its output value instead of the actual value.
    pub fn take_writes(&mut self, outputs: &mut [u8], cycle: u64) -> WriteEvents {
        self.take_writes_held(outputs, &[], cycle)
    }

    /// Merge the writers' owned entries into `outputs` (bit-exactly, nothing else), follow the
    /// heartbeats, put stale writers' entries at their safe values (a held entry at the value
    /// of `inputs` or `outputs` latched when it fell back). Entries the master drives are never
    /// touched. No allocation, no system call; everything read from the object is clamped.
    pub fn take_writes_held(
        &mut self,
        outputs: &mut [u8],
        inputs: &[u8],
        cycle: u64,
    ) -> WriteEvents {
        let mut events = WriteEvents::new();
        let m = &self.map;
        let b = &*self.broker;
        let mut active = false;
        for (k, slot) in self.slots.iter_mut().enumerate() {
            let image_slot = self.g.slot_offset(k);
            // A new object for this slot, from the broker (a swap: no lock, no allocation). A
            // plain load first: the locked exchange only when there is something to take.
            let fresh = if b.incoming[k].load(Ordering::Relaxed).is_null() {
                std::ptr::null_mut()
            } else {
                b.incoming[k].swap(std::ptr::null_mut(), Ordering::AcqRel)
            };
            if !fresh.is_null() {
                if slot.view != View::Free {
                    events.push(WriterEvent {
                        slot: k as u8,
                        pid: slot.pid,
                        name: slot.name,
                        kind: WriterEventKind::Detached,
                    });
                }
                // SAFETY: the broker handed this box over; nobody else refers to it now.
                let new = unsafe { Box::from_raw(fresh) };
                if let Some(old) = slot.obj.replace(new) {
                    // Unmapped by the broker on its thread, not here (munmap is a system call).
                    let prev = b.retired[k].swap(Box::into_raw(old), Ordering::AcqRel);
                    if !prev.is_null() {
                        // The broker drains `retired` before it hands a new object in: never.
                        // SAFETY: an owned box nobody refers to.
                        drop(unsafe { Box::from_raw(prev) });
                    }
                }
                slot.view = View::Free;
                slot.closed = false;
                slot.has_values = false;
                b.seen[k].store(slot.obj.as_ref().map_or(0, |o| o.epoch), Ordering::Release);
            }
            let Some(obj) = slot.obj.as_deref().filter(|_| !slot.closed) else {
                continue;
            };
            let om = &obj.map;
            let state = WriterState::from_u32(om.u32(w::STATE).load(Ordering::Acquire));
            let live = matches!(state, Some(WriterState::Attached | WriterState::Stale));
            let ev = |kind, pid, name| WriterEvent {
                slot: k as u8,
                pid,
                name,
                kind,
            };
            let mirror = |st: WriterState, pid: u32, name: &[u8; NAME_BYTES]| {
                m.u32(image_slot + w::PID).store(pid, Ordering::Relaxed);
                m.store_bytes(image_slot + w::NAME, name);
                m.u32(image_slot + w::STATE)
                    .store(st.as_u32(), Ordering::Release);
                b.view[k].store(st.as_u32(), Ordering::Release);
            };
            if !live {
                // The writer detached (stored FREE, or anything but ATTACHED/STALE, in its
                // object; perhaps before this cycle saw it attached): its claims end, and its
                // object is never read again.
                if slot.view != View::Free {
                    events.push(ev(WriterEventKind::Detached, slot.pid, slot.name));
                }
                slot.view = View::Free;
                slot.has_values = false;
                slot.closed = true;
                // Its claims end, unless a new writer already has the slot (a takeover the
                // next cycle picks up): those are the new writer's.
                if b.incoming[k].load(Ordering::Acquire).is_null() {
                    b.release_all(k);
                }
                b.freed[k].store(obj.epoch, Ordering::Release);
                for (i, en) in self.entries.iter().enumerate() {
                    if en.writer.is_none()
                        && !en.master
                        && m.u32(self.g.entry_offset(i) + e::OWNER)
                            .load(Ordering::Relaxed)
                            == k as u32 + 1
                    {
                        m.u32(self.g.entry_offset(i) + e::OWNER)
                            .store(0, Ordering::Relaxed);
                    }
                }
                let name = slot.declared.unwrap_or([0; NAME_BYTES]);
                mirror(WriterState::Free, 0, &name);
                continue;
            }
            if slot.view == View::Free {
                // A new object: the master created it ATTACHED; a STALE the writer stored is
                // taken as ATTACHED (its heartbeat decides).
                slot.view = View::Attached;
                slot.pid = obj.pid;
                slot.heartbeat = om.u64(w::HEARTBEAT).load(Ordering::Relaxed);
                slot.heartbeat_cycle = cycle;
                slot.has_values = false;
                slot.name = slot.declared.unwrap_or(obj.name);
                mirror(WriterState::Attached, obj.pid, &slot.name);
                events.push(ev(WriterEventKind::Attached, obj.pid, slot.name));
            }
            active = true;
            let pid = slot.pid;
            let hb = om.u64(w::HEARTBEAT).load(Ordering::Relaxed);
            if hb != slot.heartbeat {
                slot.heartbeat = hb;
                slot.heartbeat_cycle = cycle;
                if slot.view == View::Stale {
                    let _ = om.u32(w::STATE).compare_exchange(
                        WriterState::Stale.as_u32(),
                        WriterState::Attached.as_u32(),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                    slot.view = View::Attached;
                    mirror(WriterState::Attached, pid, &slot.name);
                    events.push(ev(WriterEventKind::Resumed, pid, slot.name));
                }
            } else if slot.view == View::Attached
                && cycle.saturating_sub(slot.heartbeat_cycle) >= self.timeout
            {
                let _ = om.u32(w::STATE).compare_exchange(
                    WriterState::Attached.as_u32(),
                    WriterState::Stale.as_u32(),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
                slot.view = View::Stale;
                mirror(WriterState::Stale, pid, &slot.name);
                events.push(ev(WriterEventKind::Stale, pid, slot.name));
            }
            if slot.view == View::Attached {
                let seq = om.u64(w::SEQ);
                let s1 = seq.load(Ordering::Acquire);
                if s1 != 0 && s1.is_multiple_of(2) {
                    om.load_bytes(w::STAGED, &mut slot.scratch);
                    // The copy's loads complete before seq is read again (seqlock reader).
                    fence(Ordering::Acquire);
                    if seq.load(Ordering::Relaxed) == s1 {
                        std::mem::swap(&mut slot.taken, &mut slot.scratch);
                        slot.has_values = true;
                        // Only a consistent copy counts: a cycle that kept the older values
                        // (the writer was mid-write) must not look like it took the new ones.
                        om.u64(w::APPLIED).store(cycle, Ordering::Relaxed);
                        m.u64(image_slot + w::APPLIED)
                            .store(cycle, Ordering::Relaxed);
                    }
                }
            }
        }
        // No writer attached: only the declared writers' entries (at their safe values) and the
        // held drive targets to do.
        if !active && !self.any_declared && !self.driven_any {
            return events;
        }
        for (i, en) in self.entries.iter().enumerate() {
            // The master's own record decides, never the entry table (a member can write it).
            if en.master {
                continue;
            }
            let owner = match en.writer {
                Some(k) => k as u32 + 1,
                None => {
                    // The broker's record; the image's entry table shows a copy of it.
                    let o = b.owners[i].load(Ordering::Relaxed);
                    let shown = m.u32(self.g.entry_offset(i) + e::OWNER);
                    if shown.load(Ordering::Relaxed) != o {
                        shown.store(o, Ordering::Relaxed);
                    }
                    o
                }
            };
            let slot = (1..=MAX_WRITERS)
                .contains(&owner)
                .then(|| &self.slots[owner as usize - 1]);
            let bits = u32::from(en.bits);
            let safe = match slot {
                Some(s) if s.view == View::Attached && s.has_values => false,
                Some(s) if s.view == View::Stale => true,
                // A declared writer that is not (yet) writing: its entries are safe.
                Some(_) if en.writer.is_some() => true,
                // Nobody writes it: the application's — except a drive target a writer drove,
                // which stays held (handing it back would be a step command).
                _ if en.hold != Hold::None && self.driven[i] => true,
                _ => {
                    self.latched[i] = false;
                    continue;
                }
            };
            if !safe {
                let taken = &slot.expect("a writer's values").taken;
                self.latched[i] = false;
                copy_bits(outputs, taken, en.bit_offset, bits);
                if en.hold != Hold::None {
                    // Its last value out: what a target without an actual value holds.
                    copy_bits(&mut self.safe_image, taken, en.bit_offset, bits);
                    self.driven[i] = true;
                    self.driven_any = true;
                }
                continue;
            }
            if !self.latched[i] && en.hold != Hold::None {
                // Latched once, when the entry falls back: the drive is held where it is now,
                // not chased (a sagging axis would follow its own actual value).
                let n = bits.min(64);
                let v = match en.hold {
                    Hold::Input(off)
                        if u64::from(off) + u64::from(n) <= inputs.len() as u64 * 8 =>
                    {
                        read_bits(inputs, off, n)
                    }
                    // No actual value: the last value a writer got out, else what goes out.
                    _ if self.driven[i] => read_bits(&self.safe_image, en.bit_offset, n),
                    _ => read_bits(outputs, en.bit_offset, n),
                };
                write_bits(&mut self.safe_image, en.bit_offset, n, v);
            }
            self.latched[i] = true;
            copy_bits(outputs, &self.safe_image, en.bit_offset, bits);
        }
        events
    }
}
