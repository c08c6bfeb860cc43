//! Handing the image out (format v3): the master's side of the requests of the control socket.
//!
//! Nothing is found by name any more. The image is a sealed memfd the master hands to each
//! client that asks over the control socket (`SCM_RIGHTS`, unix(7)); each writer gets an
//! object of its own, created for it on request, so a reader cannot write anything and a
//! writer can write only its own slot. Who owns which entry is the master's record (here), not
//! a field of shared memory a client could overwrite; the image's entry table shows a copy.
//!
//! A [`Broker`] belongs to one [`crate::Publisher`] (one generation of the image). Its
//! requests run on the control socket's threads, serialised by a mutex the cyclic thread never
//! takes: a new writer object reaches the cyclic thread through a per-slot pointer it swaps
//! (no lock, no allocation, no system call there), and the object it replaces comes back the
//! same way to be unmapped here. Every object handed out has an epoch; the cyclic thread says
//! which epoch of a slot it saw detach, so a request never waits for a cycle.

use crate::format::{MAX_WRITERS, NAME_BYTES, WriterState, w};
use crate::map::Map;
use crate::publisher::check_writer_name;
use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::null_mut;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// Seals of the image: its size is fixed, nobody can add a writable mapping or `write(2)` to it
/// (the master's own mapping, made before, stays writable: `F_SEAL_FUTURE_WRITE`, Linux 5.1,
/// fcntl(2) "File Sealing"), and no seal can be removed or added.
pub fn image_seals() -> SealFlag {
    SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_FUTURE_WRITE
        | SealFlag::F_SEAL_SEAL
}

/// Seals of a writer object: its size is fixed (no truncation, no SIGBUS), writable by its
/// writer.
pub fn writer_seals() -> SealFlag {
    SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL
}

/// Create a sealable memfd of `bytes` bytes (`memfd_create(2)`, close-on-exec).
pub(crate) fn sealable(label: &std::ffi::CStr, bytes: u64) -> nix::Result<OwnedFd> {
    let fd = memfd_create(label, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
    nix::unistd::ftruncate(&fd, bytes as i64)?;
    Ok(fd)
}

/// Add `seals` to `fd`.
pub(crate) fn seal(fd: &OwnedFd, seals: SealFlag) -> nix::Result<()> {
    fcntl(fd.as_fd(), FcntlArg::F_ADD_SEALS(seals)).map(|_| ())
}

/// A writer's object, as the master holds it: the mapping, and who it was handed to.
pub(crate) struct WriterObj {
    pub(crate) map: Map,
    /// `SO_PEERCRED` pid of the process it was handed to.
    pub(crate) pid: u32,
    pub(crate) name: [u8; NAME_BYTES],
    /// Its number among the objects of its slot (from 1).
    pub(crate) epoch: u32,
}

/// What the master knows of an output entry (a row of the entry table).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    /// Driven by the master (an `[[axis]]`).
    pub(crate) master: bool,
    /// Declared for this writer slot.
    pub(crate) declared: Option<usize>,
}

/// The control side's record: who each slot was handed to.
struct Desk {
    names: [[u8; NAME_BYTES]; MAX_WRITERS as usize],
    pids: [u32; MAX_WRITERS as usize],
    uids: [u32; MAX_WRITERS as usize],
    /// Epoch of the last object handed out per slot (0: none yet).
    handed: [u32; MAX_WRITERS as usize],
}

/// Why a request of a client was not granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The request cannot be granted as asked (the client's fault): exit 2 in a CLI.
    #[error("{0}")]
    Usage(String),
    /// The master cannot grant it now (not cycling, out of memory).
    #[error("{0}")]
    Runtime(String),
}

/// A writer object handed to a client.
#[derive(Debug)]
pub struct WriterGrant {
    /// The memfd (sealed: no truncation).
    pub fd: OwnedFd,
    /// The slot.
    pub slot: u32,
    /// Its size.
    pub bytes: u64,
    /// The slot is declared in the master's configuration.
    pub declared: bool,
}

/// The master's side of the requests for one image (see the module documentation).
pub struct Broker {
    image: OwnedFd,
    image_bytes: u64,
    generation: u32,
    writer_bytes: u64,
    pub(crate) rows: Vec<Row>,
    declared: Vec<Option<[u8; NAME_BYTES]>>,
    /// Per row: `slot + 1` of the writer that claimed it (0: nobody). Written here, read by
    /// the cyclic thread; declared and master entries are not in it.
    pub(crate) owners: Vec<AtomicU32>,
    /// A new writer object for the cyclic thread to take (it swaps in null).
    pub(crate) incoming: [AtomicPtr<WriterObj>; MAX_WRITERS as usize],
    /// The object the cyclic thread replaced, to be unmapped here.
    pub(crate) retired: [AtomicPtr<WriterObj>; MAX_WRITERS as usize],
    /// Per slot, the master's view ([`WriterState`] value; FREE until the cyclic thread sees a
    /// writer).
    pub(crate) view: [AtomicU32; MAX_WRITERS as usize],
    /// Per slot, the epoch of the object the cyclic thread holds.
    pub(crate) seen: [AtomicU32; MAX_WRITERS as usize],
    /// Per slot, the epoch of the last object whose writer detached.
    pub(crate) freed: [AtomicU32; MAX_WRITERS as usize],
    desk: Mutex<Desk>,
}

// SAFETY: the raw pointers are owned boxes handed between threads with atomic swaps.
unsafe impl Send for Broker {}
// SAFETY: as above.
unsafe impl Sync for Broker {}

impl Broker {
    pub(crate) fn new(
        image: OwnedFd,
        image_bytes: u64,
        generation: u32,
        writer_bytes: u64,
        rows: Vec<Row>,
        declared: Vec<Option<[u8; NAME_BYTES]>>,
    ) -> Broker {
        let n = rows.len();
        Broker {
            image,
            image_bytes,
            generation,
            writer_bytes,
            rows,
            declared,
            owners: (0..n).map(|_| AtomicU32::new(0)).collect(),
            incoming: [const { AtomicPtr::new(null_mut()) }; MAX_WRITERS as usize],
            retired: [const { AtomicPtr::new(null_mut()) }; MAX_WRITERS as usize],
            view: [const { AtomicU32::new(0) }; MAX_WRITERS as usize],
            seen: [const { AtomicU32::new(0) }; MAX_WRITERS as usize],
            freed: [const { AtomicU32::new(0) }; MAX_WRITERS as usize],
            desk: Mutex::new(Desk {
                names: [[0; NAME_BYTES]; MAX_WRITERS as usize],
                pids: [0; MAX_WRITERS as usize],
                uids: [0; MAX_WRITERS as usize],
                handed: [0; MAX_WRITERS as usize],
            }),
        }
    }

    /// The image's generation.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The image's size in bytes.
    pub fn image_bytes(&self) -> u64 {
        self.image_bytes
    }

    /// A descriptor of the image for a client (sealed: read-only mappings only, fixed size).
    pub fn image(&self) -> std::io::Result<OwnedFd> {
        self.image.try_clone()
    }

    fn desk(&self) -> std::sync::MutexGuard<'_, Desk> {
        self.desk.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot as this side knows it: free (never handed out, or its last writer detached),
    /// stale (the cyclic thread holds its last object and found its heartbeat stopped), or
    /// held (attached, or handed out and not taken by the cyclic thread yet).
    fn slot_state(&self, desk: &Desk, k: usize) -> WriterState {
        let h = desk.handed[k];
        if h == 0 || self.freed[k].load(Ordering::Acquire) == h {
            WriterState::Free
        } else if self.seen[k].load(Ordering::Acquire) == h
            && WriterState::from_u32(self.view[k].load(Ordering::Acquire))
                == Some(WriterState::Stale)
        {
            WriterState::Stale
        } else {
            WriterState::Attached
        }
    }

    /// A writer object for `name`, asked by the process `pid` of user `uid` (`SO_PEERCRED`):
    /// the slot declared for that name, else a free one; a STALE slot of the same name and
    /// user (a writer restarting after a crash) is taken over with its claims.
    pub fn attach_writer(&self, name: &str, pid: u32, uid: u32) -> Result<WriterGrant, Refusal> {
        let want = check_writer_name(name)
            .map_err(|why| Refusal::Usage(format!("writer name {name:?}: {why}")))?;
        let mut desk = self.desk();
        let n = MAX_WRITERS as usize;
        let mine = |k: usize| self.declared[k] == Some(want) || desk.names[k] == want;
        // The slot of this name (declared, or held by this name before): at most one.
        let chosen = (0..n).find(|&k| mine(k));
        if let Some(k) = chosen {
            match self.slot_state(&desk, k) {
                WriterState::Attached | WriterState::Claiming => {
                    return Err(Refusal::Usage(format!(
                        "writer {name:?} is already attached in slot {k} (pid {})",
                        desk.pids[k]
                    )));
                }
                WriterState::Stale
                    if self.declared[k].is_none() && desk.uids[k] != uid && uid != 0 =>
                {
                    return Err(Refusal::Usage(format!(
                        "writer {name:?} (slot {k}, stale) belongs to uid {}, not to uid {uid}",
                        desk.uids[k]
                    )));
                }
                _ => {}
            }
        }
        let k = match chosen {
            Some(k) => k,
            None => (0..n)
                .find(|&k| {
                    self.declared[k].is_none() && self.slot_state(&desk, k) == WriterState::Free
                })
                .ok_or_else(|| {
                    Refusal::Runtime(format!(
                        "no free writer slot (all {n} in use or declared for other names)"
                    ))
                })?,
        };
        // The object the cyclic thread gave back last time.
        let old = self.retired[k].swap(null_mut(), Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: a box the cyclic thread no longer refers to (it swapped it out).
            drop(unsafe { Box::from_raw(old) });
        }
        let rt = |op: &str, e: nix::Error| Refusal::Runtime(format!("writer object: {op}: {e}"));
        let fd = sealable(c"rtcat-writer", self.writer_bytes).map_err(|e| rt("memfd_create", e))?;
        let map = Map::new_guarded(&fd, self.writer_bytes as usize).map_err(|e| rt("mmap", e))?;
        seal(&fd, writer_seals()).map_err(|e| rt("F_ADD_SEALS", e))?;
        map.u32(w::PID).store(pid, Ordering::Relaxed);
        map.store_bytes(w::NAME, &want);
        map.u32(w::STATE)
            .store(WriterState::Attached.as_u32(), Ordering::Release);
        let epoch = desk.handed[k].wrapping_add(1).max(1);
        let obj = Box::into_raw(Box::new(WriterObj {
            map,
            pid,
            name: want,
            epoch,
        }));
        // A previous object the cyclic thread has not taken yet (a takeover within a cycle):
        // never seen by it, dropped here.
        let pending = self.incoming[k].swap(obj, Ordering::AcqRel);
        if !pending.is_null() {
            // SAFETY: swapped out before the cyclic thread took it: ours.
            drop(unsafe { Box::from_raw(pending) });
        }
        desk.handed[k] = epoch;
        desk.names[k] = want;
        desk.pids[k] = pid;
        desk.uids[k] = uid;
        Ok(WriterGrant {
            fd,
            slot: k as u32,
            bytes: self.writer_bytes,
            declared: self.declared[k].is_some(),
        })
    }

    fn check_holder(
        &self,
        desk: &Desk,
        slot: u32,
        row: u32,
        pid: u32,
    ) -> Result<(usize, usize), Refusal> {
        let k = slot as usize;
        if k >= MAX_WRITERS as usize {
            return Err(Refusal::Usage(format!(
                "slot {slot}: there are {MAX_WRITERS} writer slots"
            )));
        }
        if self.slot_state(desk, k) == WriterState::Free || desk.pids[k] != pid {
            return Err(Refusal::Usage(format!(
                "slot {slot} is not a writer this process (pid {pid}) holds"
            )));
        }
        let r = row as usize;
        if r >= self.rows.len() {
            return Err(Refusal::Usage(format!(
                "row {row}: the entry table has {} rows",
                self.rows.len()
            )));
        }
        Ok((k, r))
    }

    fn who(&self, desk: &Desk, k: usize) -> String {
        let n = self.declared[k].unwrap_or(desk.names[k]);
        format!("writer {:?} (slot {k})", crate::publisher::name_str(&n))
    }

    /// The writer of `slot` (held by process `pid`) owns entry-table row `row` from now on.
    /// Refused for an entry the master drives, one declared for another writer, and one
    /// another writer claimed.
    pub fn claim(&self, slot: u32, row: u32, pid: u32) -> Result<(), Refusal> {
        let desk = self.desk();
        let (k, r) = self.check_holder(&desk, slot, row, pid)?;
        let me = k as u32 + 1;
        let en = self.rows[r];
        if en.master {
            return Err(Refusal::Usage(format!(
                "row {row} is driven by the master (an [[axis]]): no writer can own it"
            )));
        }
        match en.declared {
            Some(d) if d == k => return Ok(()),
            Some(d) => {
                return Err(Refusal::Usage(format!(
                    "row {row} is declared for {}",
                    self.who(&desk, d)
                )));
            }
            None => {}
        }
        match self.owners[r].compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            Err(o) if o == me => Ok(()),
            Err(o) => Err(Refusal::Usage(format!(
                "row {row} is owned by {}",
                self.who(&desk, o as usize - 1)
            ))),
        }
    }

    /// Give up a claimed row (a declared one stays).
    pub fn release(&self, slot: u32, row: u32, pid: u32) -> Result<(), Refusal> {
        let desk = self.desk();
        let (k, r) = self.check_holder(&desk, slot, row, pid)?;
        let _ =
            self.owners[r].compare_exchange(k as u32 + 1, 0, Ordering::AcqRel, Ordering::Relaxed);
        Ok(())
    }

    /// Called by the cyclic thread when the writer of slot `k` went away: its claims end.
    pub(crate) fn release_all(&self, k: usize) {
        let me = k as u32 + 1;
        for o in &self.owners {
            let _ = o.compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        for p in self.incoming.iter().chain(self.retired.iter()) {
            let b = p.swap(null_mut(), Ordering::AcqRel);
            if !b.is_null() {
                // SAFETY: owned boxes nobody else refers to any more.
                drop(unsafe { Box::from_raw(b) });
            }
        }
    }
}

/// Where the control socket finds the broker of the image published now (the master replaces
/// the image when the layout changes): set at every bring-up, read per request.
#[derive(Clone, Default)]
pub struct Hub(std::sync::Arc<Mutex<Option<std::sync::Arc<Broker>>>>);

impl Hub {
    /// An empty hub (no image yet).
    pub fn new() -> Hub {
        Hub::default()
    }

    /// Publish `b` as the current image's broker (None: no image).
    pub fn set(&self, b: Option<std::sync::Arc<Broker>>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = b;
    }

    /// The current image's broker.
    pub fn get(&self) -> Option<std::sync::Arc<Broker>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A request of the control socket about the image (the control protocol's `shm_image`,
/// `shm_writer`, `shm_claim`, `shm_release`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask<'a> {
    /// The image.
    Image,
    /// A writer object for this name.
    Writer(&'a str),
    /// Claim a row for a slot.
    Claim {
        /// Writer slot.
        slot: u32,
        /// Entry-table row.
        row: u32,
    },
    /// Release a row of a slot.
    Release {
        /// Writer slot.
        slot: u32,
        /// Entry-table row.
        row: u32,
    },
}

impl Hub {
    /// Answer `ask` of the process `pid` of user `uid` (`SO_PEERCRED`): the reply's data and the
    /// descriptor to pass with it.
    pub fn answer(
        &self,
        ask: &Ask<'_>,
        pid: u32,
        uid: u32,
    ) -> Result<(serde_json::Value, Option<OwnedFd>), Refusal> {
        use serde_json::json;
        let b = self.get().ok_or_else(|| {
            Refusal::Runtime(
                "no shared image on this master ([shm] name / --shm not set, or not brought up yet)"
                    .into(),
            )
        })?;
        match *ask {
            Ask::Image => {
                let fd = b
                    .image()
                    .map_err(|e| Refusal::Runtime(format!("image: dup: {e}")))?;
                Ok((
                    json!({"generation": b.generation(), "bytes": b.image_bytes()}),
                    Some(fd),
                ))
            }
            Ask::Writer(name) => {
                let g = b.attach_writer(name, pid, uid)?;
                Ok((
                    json!({"slot": g.slot, "bytes": g.bytes, "declared": g.declared,
                           "generation": b.generation()}),
                    Some(g.fd),
                ))
            }
            Ask::Claim { slot, row } => {
                b.claim(slot, row, pid)?;
                Ok((json!({"slot": slot, "row": row}), None))
            }
            Ask::Release { slot, row } => {
                b.release(slot, row, pid)?;
                Ok((json!({"slot": slot, "row": row}), None))
            }
        }
    }
}
