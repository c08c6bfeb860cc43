#!/usr/bin/env python3
"""Client of rtcat's shared-memory process image (format v3, app/shm/FORMAT.md).

Standard library only. The image is handed out by the running master over its control socket
(``--control SOCK`` / ``[control] socket``): the socket's peer is checked (SO_PEERCRED, unix(7))
against the master's uid before anything is asked, and the image comes back as a sealed memfd
(SCM_RIGHTS), mapped read-only. A writer gets an object of its own the same way; claims are
requests the master records. Nothing is looked up in /dev/shm. As a module::

    import rtcat_shm
    with rtcat_shm.Image.attach("/run/rtcat/control.sock") as img:
        snap = img.read()
        print(snap.cycle, snap.get("0:Inputs.Input 1"))
        with img.writer("hmi") as w:
            w.claim("0:Outputs.Output 1")
            w.write({"0:Outputs.Output 1": 42})

As a program::

    rtcat_shm.py SOCKET --dump                      one snapshot as JSON
    rtcat_shm.py SOCKET --watch [--interval S]      one JSON line per snapshot
    rtcat_shm.py SOCKET --write ENTRY=VALUE --as W  write outputs as writer W
    --master-uid UID: the uid the master runs as (default: ours); a socket whose peer runs as
    any other uid is refused (it is not the master)

Exit status: 0, 1 on a runtime error (no master, not published, refused by the master,
replaced while reading after a re-attach), 2 on a usage error (unknown entry, bad value).

Memory ordering. The snapshot and a writer's staged outputs are seqlocks: the reader loads seq,
copies the data, loads seq again, and uses the copy only if both loads are equal and even. On
x86-64 loads are not reordered with other loads, nor stores with other stores (Intel SDM vol. 3
§8.2.2), so program order is enough there. On arm64 they may be reordered (Arm ARM B2.3): the
copy could read data published after the second load of seq, and the reader would accept a torn
snapshot. CPython's interpreter gives no ordering guarantee of its own, so the reader issues an
acquire fence (DMB ISHLD) after the first load of seq and after the copy, and a writer a release
fence (DMB ISH) after marking seq odd and before marking it even. The fences are libatomic's
``atomic_thread_fence`` through ctypes (libatomic ships with GCC's runtime); without libatomic,
the membarrier(2) system call (MEMBARRIER_CMD_GLOBAL_EXPEDITED: the kernel issues a full barrier
on entry and exit, kernel/sched/membarrier.c) serves as the fence. The 8-byte loads and stores of
seq, heartbeat and state go through ``memoryview.cast('Q')`` / ``cast('I')``, a single aligned
load/store each. No read-modify-write on shared memory is needed: attaching a writer and
claiming entries are requests to the master.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import json
import math
import mmap
import os
import platform
import socket
import stat
import struct
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

ABI_VERSION = 3
HEADER_BYTES = 4096
ENTRY_BYTES = 16
MAGIC = b"RTCATPI\0"
LAYOUT_SCHEMA = "rtcat.layout/1"

STATES = {0: "init", 1: "live", 2: "recovering", 3: "replaced", 4: "stopped"}
INIT, LIVE, RECOVERING, REPLACED, STOPPED = range(5)
W_FREE, W_CLAIMING, W_ATTACHED, W_STALE = range(4)

# Writer slot field offsets.
W_STATE, W_PID, W_HEARTBEAT, W_NAME, W_SEQ, W_APPLIED, W_STAGED = 0, 4, 8, 16, 48, 56, 64
W_NAME_BYTES = 32
S_DATA = 48
# Bounded retries of a snapshot (the master never waits for readers; readers do not wait for
# the master unboundedly either).
READ_TRIES = 100_000

# (header offset, struct format, field) of the fixed header fields.
_HEADER = struct.Struct("<8sIIQQII Q III IIIIIIIIIII Q")
_HEADER_FIELDS = [
    "magic",
    "abi_version",
    "header_bytes",
    "object_bytes",
    "layout_hash",
    "generation",
    "state",
    "period_ns",
    "subdevices",
    "input_bytes",
    "output_bytes",
    "output_entries",
    "layout_offset",
    "layout_len",
    "entries_offset",
    "entry_bytes",
    "writers_offset",
    "max_writers",
    "writer_bytes",
    "snapshot_offset",
    "snapshot_bytes",
    "master_pid",
    "writer_timeout_cycles",
]


class ShmError(Exception):
    """A runtime failure: no such object, a garbage object, replaced, not published."""


class UsageError(ShmError):
    """A usage error: bad object name, unknown entry, value out of range."""


class Replaced(ShmError):
    """The master re-initialised the segment: attach again."""


class NotMaster(ShmError):
    """The control socket's peer does not run as the master's uid: refused (never retried)."""


# fcntl(2) file seals (linux/fcntl.h): what the master seals its objects with.
F_GET_SEALS = 1034
F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_FUTURE_WRITE = 0x1, 0x2, 0x4, 0x10
IMAGE_SEALS = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE
WRITER_SEALS = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW
MAX_REPLY = 64 * 1024


def _ask(path: str, master_uid: int, request: dict[str, object]) -> tuple[dict[str, object], list[int]]:
    """One request on the master's control socket: the peer's uid is checked first (SO_PEERCRED),
    the reply's data and the descriptors passed with it (SCM_RIGHTS) are returned."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    fds: list[int] = []
    try:
        s.settimeout(10.0)
        try:
            s.connect(path)
        except FileNotFoundError:
            raise ShmError(f"{path}: no control socket (is the master running with --control and --shm?)") from None
        except OSError as e:
            raise ShmError(f"{path}: {e.strerror or e}") from None
        cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
        _pid, uid, _gid = struct.unpack("iII", cred)
        if uid != master_uid:
            raise NotMaster(
                f"{path}: its peer runs as uid {uid}, not as the master's uid {master_uid}: "
                "refused, it is not the master"
            )
        s.sendall((json.dumps(request) + "\n").encode())
        buf = b""
        while b"\n" not in buf:
            msg, got, _flags, _addr = socket.recv_fds(s, 4096, 4, socket.MSG_CMSG_CLOEXEC)
            fds.extend(got)
            if not msg:
                raise ShmError(f"{path}: the master closed the connection")
            buf += msg
            if len(buf) > MAX_REPLY:
                raise ShmError(f"{path}: reply longer than 64 KiB")
        reply = json.loads(buf[: buf.index(b"\n")])
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        s.close()
    if not isinstance(reply, dict) or reply.get("ok") is not True:
        for fd in fds:
            os.close(fd)
        why = reply.get("error") if isinstance(reply, dict) else reply
        raise ShmError(f"{path}: {request.get('cmd')}: {why}")
    data = reply.get("data")
    return (data if isinstance(data, dict) else {}), fds


def _one_fd(path: str, what: str, fds: list[int], seals: int) -> int:
    """The one descriptor of a reply, with at least ``seals`` (F_GET_SEALS)."""
    if not fds:
        raise ShmError(f"{path}: the reply to {what} carries no descriptor")
    for extra in fds[1:]:
        os.close(extra)
    fd = fds[0]
    try:
        import fcntl

        try:
            got = fcntl.fcntl(fd, F_GET_SEALS)
        except OSError as e:
            raise ShmError(f"{path}: {what}: not a sealed memory file ({e.strerror})") from None
        if got & seals != seals:
            raise ShmError(f"{path}: {what}: seals {got:#x}, the master seals with {seals:#x}")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ShmError(f"{path}: {what}: not a memory file")
    except BaseException:
        os.close(fd)
        raise
    return fd


FLAG_MASTER = 2  # entry-table flag: the master drives the entry (an [[axis]])


def _pad8(n: int) -> int:
    return (n + 7) & ~7


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64 (the layout hash of the header)."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class _Atomics:
    """Fences through libatomic (see the module's docstring)."""

    ACQUIRE, RELEASE, ACQ_REL, SEQ_CST = 2, 3, 4, 5

    def __init__(self) -> None:
        self._fence = None
        self._membarrier = None
        self.tso = platform.machine() in ("x86_64", "AMD64", "i686", "i386")
        path = ctypes.util.find_library("atomic")
        for name in ([path] if path else []) + ["libatomic.so.1"]:
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                continue
            try:
                self._fence = lib.atomic_thread_fence
                self._fence.argtypes = [ctypes.c_int]
                self._fence.restype = None
            except AttributeError:
                self._fence = None
            break
        if self._fence is None and not self.tso:
            libc = ctypes.CDLL(None, use_errno=True)
            nr = {"aarch64": 283, "armv7l": 389, "riscv64": 283}.get(platform.machine())
            if nr is not None:
                # MEMBARRIER_CMD_QUERY = 0, MEMBARRIER_CMD_GLOBAL_EXPEDITED = 2.
                supported = libc.syscall(nr, 0, 0, 0)
                if supported >= 0 and supported & 2:
                    self._membarrier = (libc.syscall, nr)

    def fence(self, order: int) -> None:
        if self._fence is not None:
            self._fence(order)
        elif self._membarrier is not None:
            call, nr = self._membarrier
            call(nr, 2, 0, 0)
        elif not self.tso:
            raise ShmError(
                f"no memory fence on {platform.machine()}: install libatomic (GCC's runtime) "
                "or use a kernel with membarrier(2)"
            )
        # x86-64: loads are ordered with loads and stores with stores; nothing to do.


_atomics: _Atomics | None = None


def _atom() -> _Atomics:
    global _atomics
    if _atomics is None:
        _atomics = _Atomics()
    return _atomics


@dataclass(frozen=True)
class Entry:
    """One entry of the layout (padding gaps are not entries)."""

    name: str  # "POSITION:QUALIFIED"
    short_name: str  # the entry's own name
    position: int
    bit_offset: int
    bits: int
    data_type: str  # "UNSIGNED32", ..., "OTHER"
    is_output: bool
    row: int  # output entry table row, -1 for inputs


def _get_bits(img: bytes, bit_offset: int, bits: int) -> int:
    first, last = bit_offset // 8, (bit_offset + bits - 1) // 8
    raw = int.from_bytes(img[first : last + 1], "little")
    return (raw >> (bit_offset % 8)) & ((1 << bits) - 1)


def _set_bits(img: bytearray, bit_offset: int, bits: int, value: int) -> None:
    first, last = bit_offset // 8, (bit_offset + bits - 1) // 8
    raw = int.from_bytes(img[first : last + 1], "little")
    mask = ((1 << bits) - 1) << (bit_offset % 8)
    raw = (raw & ~mask) | ((value << (bit_offset % 8)) & mask)
    img[first : last + 1] = raw.to_bytes(last - first + 1, "little")


_SIGNED = {"INT8", "INT16", "INT32", "INT64"}
_UNSIGNED = {"UNSIGNED8", "UNSIGNED16", "UNSIGNED32", "UNSIGNED64", "BITS"}


def decode(entry: Entry, raw: int) -> bool | int | float | str:
    """A raw bit field as its data type: BOOL -> bool, integers, REAL32/64 -> float, else hex."""
    t, bits = entry.data_type, entry.bits
    if bits > 64:
        return "0x" + raw.to_bytes((bits + 7) // 8, "little").hex()
    if t == "BOOL" and bits == 1:
        return bool(raw)
    if t in _SIGNED:
        return raw - (1 << bits) if raw >> (bits - 1) & 1 else raw
    if t in _UNSIGNED:
        return raw
    if t == "REAL32" and bits == 32:
        return struct.unpack("<f", raw.to_bytes(4, "little"))[0]
    if t == "REAL64" and bits == 64:
        return struct.unpack("<d", raw.to_bytes(8, "little"))[0]
    return "0x" + raw.to_bytes((bits + 7) // 8, "little").hex()


def encode(entry: Entry, value: object) -> int:
    """A value (bool, int, float, or a string of one) as the entry's raw bit field."""
    t, bits = entry.data_type, entry.bits
    if isinstance(value, str):
        text = value.strip()
        if t == "BOOL" and text.lower() in ("true", "false"):
            value = text.lower() == "true"
        elif t in ("REAL32", "REAL64"):
            try:
                value = float(text)
            except ValueError:
                raise UsageError(f"{entry.name}: '{value}' is not a number ({t})") from None
        else:
            try:
                value = int(text, 0)
            except ValueError:
                raise UsageError(f"{entry.name}: '{value}' is not an integer ({t}, {bits} bits)") from None
    if t in ("REAL32", "REAL64") and bits in (32, 64):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise UsageError(f"{entry.name}: {value!r} is not a number ({t})")
        f = float(value)
        if bits == 32 and math.isfinite(f) and abs(f) > 3.4028234663852886e38:
            raise UsageError(f"{entry.name}: {value} does not fit REAL32")
        return int.from_bytes(struct.pack("<f" if bits == 32 else "<d", f), "little")
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, int):
        raise UsageError(f"{entry.name}: {value!r} is not an integer ({t}, {bits} bits)")
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t in _SIGNED else (0, (1 << bits) - 1)
    if not lo <= value <= hi:
        raise UsageError(f"{entry.name}: {value} is out of range {lo}..{hi} ({t}, {bits} bits)")
    return value & ((1 << bits) - 1)


@dataclass
class Snapshot:
    """One consistent cycle of the process image."""

    seq: int
    cycle: int
    deadline_ns: int
    wake_ns: int
    unix_ns: int
    wkc: int
    expected_wkc: int
    frames_lost: bool
    valid: list[bool]
    inputs: bytes
    outputs: bytes
    image: Image

    def raw(self, entry: Entry | str) -> int:
        e = self.image.entry(entry) if isinstance(entry, str) else entry
        return _get_bits(self.outputs if e.is_output else self.inputs, e.bit_offset, e.bits)

    def get(self, entry: Entry | str) -> bool | int | float | str:
        e = self.image.entry(entry) if isinstance(entry, str) else entry
        return decode(e, self.raw(e))

    def to_json(self) -> dict[str, object]:
        img = self.image
        return {
            "cycle": self.cycle,
            "generation": img.generation,
            "state": STATES.get(img.state(), "replaced"),
            "wkc": self.wkc,
            "expected_wkc": self.expected_wkc,
            "frames_lost": self.frames_lost,
            "unix_ns": self.unix_ns,
            "valid": self.valid,
            "inputs": {e.name: self.get(e) for e in img.entries if not e.is_output},
            "outputs": {e.name: self.get(e) for e in img.entries if e.is_output},
        }


def _check_within(what: str, off: int, length: int, size: int) -> None:
    if off < HEADER_BYTES or off + length > size:
        raise ShmError(f"garbage object: {what} at {off}+{length} is outside the object ({size} bytes)")


class Image:
    """An attached process image. Use ``Image.attach(name)``; close it (or use ``with``)."""

    def __init__(self, name: str, fd: int, mm: mmap.mmap, writable: bool) -> None:
        self.name = name
        self._fd = fd
        self.master_uid = os.geteuid()  # set by attach: the uid a re-attach requires
        self._mm = mm
        self.writable = writable
        self._q = memoryview(mm)[: len(mm) - len(mm) % 8].cast("Q")
        self._i = memoryview(mm)[: len(mm) - len(mm) % 4].cast("I")
        self.entries: list[Entry] = []
        self._by_name: dict[str, Entry] = {}
        try:
            self._parse()
        except BaseException:
            # The views export the mapping: release them so that the caller can close it.
            self._q.release()
            self._i.release()
            raise

    @classmethod
    def attach(cls, socket_path: str, master_uid: int | None = None) -> Image:
        """Attach to the image of the master whose control socket is ``socket_path``, running as
        ``master_uid`` (default: our effective uid)."""
        if master_uid is None:
            master_uid = os.geteuid()
        _, fds = _ask(socket_path, master_uid, {"cmd": "shm_image"})
        fd = _one_fd(socket_path, "shm_image", fds, IMAGE_SEALS)
        try:
            st = os.fstat(fd)
            if st.st_size < HEADER_BYTES:
                raise ShmError(f"{socket_path}: garbage image: {st.st_size} bytes, shorter than the 4096-byte header")
            mm = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(fd)
            raise
        try:
            img = cls(socket_path, fd, mm, False)
            img.master_uid = master_uid
            return img
        except BaseException:
            mm.close()
            os.close(fd)
            raise

    def close(self) -> None:
        if self._mm is None:
            return
        self._q.release()
        self._i.release()
        # A ctypes view (writers) keeps an export on the mapping; then leave it to the GC.
        with contextlib.suppress(BufferError):
            self._mm.close()
        os.close(self._fd)
        self._mm = None

    def __enter__(self) -> Image:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- header and layout --

    def _parse(self) -> None:
        mm = self._mm
        size = len(mm)
        h = dict(zip(_HEADER_FIELDS, _HEADER.unpack_from(mm, 0), strict=True))
        if h["magic"] != MAGIC:
            raise ShmError(f"{self.name}: not an rtcat process image (magic {h['magic']!r})")
        if h["abi_version"] != ABI_VERSION:
            raise ShmError(f"{self.name}: ABI version {h['abi_version']}, this client reads version {ABI_VERSION}")
        if h["header_bytes"] != HEADER_BYTES or h["entry_bytes"] != ENTRY_BYTES:
            raise ShmError(
                f"{self.name}: garbage header (header_bytes {h['header_bytes']}, entry_bytes {h['entry_bytes']})"
            )
        if h["object_bytes"] > size:
            raise ShmError(f"{self.name}: garbage object: object_bytes {h['object_bytes']} > file size {size}")
        size = h["object_bytes"]
        state = h["state"]
        if state == INIT:
            raise ShmError(f"{self.name}: not published yet (state init)")
        if state == REPLACED:
            raise Replaced(f"{self.name}: replaced by a re-initialisation")
        for k in ("entries_offset", "writers_offset", "snapshot_offset", "writer_bytes"):
            if h[k] % 8:
                raise ShmError(f"{self.name}: garbage header: {k} {h[k]} is not 8-aligned")
        _check_within("layout", h["layout_offset"], h["layout_len"], size)
        _check_within("entry table", h["entries_offset"], h["output_entries"] * ENTRY_BYTES, size)
        _check_within("writer slots", h["writers_offset"], h["max_writers"] * h["writer_bytes"], size)
        _check_within("snapshot", h["snapshot_offset"], h["snapshot_bytes"], size)
        if h["max_writers"] and h["writer_bytes"] < W_STAGED + h["output_bytes"]:
            raise ShmError(f"{self.name}: garbage header: writer_bytes {h['writer_bytes']} < 64 + output_bytes")
        self.valid_off = S_DATA
        self.inputs_off = S_DATA + _pad8(h["subdevices"])
        self.outputs_off = self.inputs_off + _pad8(h["input_bytes"])
        self.data_end = self.outputs_off + _pad8(h["output_bytes"])
        if self.data_end > h["snapshot_bytes"]:
            raise ShmError(f"{self.name}: garbage header: snapshot_bytes {h['snapshot_bytes']} < {self.data_end}")
        self.h = h
        self.generation: int = h["generation"]
        self.period_ns: int = h["period_ns"]
        self.subdevices: int = h["subdevices"]
        self.input_bytes: int = h["input_bytes"]
        self.output_bytes: int = h["output_bytes"]
        self.writer_timeout_cycles: int = h["writer_timeout_cycles"]
        raw = bytes(mm[h["layout_offset"] : h["layout_offset"] + h["layout_len"]])
        if fnv1a64(raw) != h["layout_hash"]:
            raise ShmError(f"{self.name}: garbage object: layout hash mismatch")
        try:
            layout = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise ShmError(f"{self.name}: layout JSON: {e}") from None
        self.layout = layout
        self._entries_from(layout)

    def _entries_from(self, layout: object) -> None:
        bad = f"{self.name}: layout JSON"
        if not isinstance(layout, dict) or layout.get("schema") != LAYOUT_SCHEMA:
            raise ShmError(f"{bad}: schema is not {LAYOUT_SCHEMA}")
        if layout.get("input_bytes") != self.input_bytes or layout.get("output_bytes") != self.output_bytes:
            raise ShmError(f"{bad}: image sizes disagree with the header")
        subdevices = layout.get("subdevices")
        if not isinstance(subdevices, list) or len(subdevices) != self.subdevices:
            raise ShmError(f"{bad}: subdevices disagree with the header's {self.subdevices}")
        entries = layout.get("entries")
        if not isinstance(entries, list):
            raise ShmError(f"{bad}: no entries array")
        row = 0
        for i, e in enumerate(entries):
            try:
                pos, index, bit_offset, bits = e["position"], e["index"], e["bit_offset"], e["bits"]
                name, pdo, direction, dt = e["name"], e.get("pdo_name"), e["direction"], e["data_type"]
                ok = (
                    all(isinstance(v, int) and not isinstance(v, bool) for v in (pos, index, bit_offset, bits))
                    and isinstance(name, str)
                    and (pdo is None or isinstance(pdo, str))
                    and direction in ("inputs", "outputs")
                )
            except (KeyError, TypeError):
                ok = False
            if not ok:
                raise ShmError(f"{bad}: entries[{i}] is malformed")
            if index == 0:
                continue
            out = direction == "outputs"
            image = self.output_bytes if out else self.input_bytes
            if not (1 <= bits <= 0xFFFF and bit_offset >= 0 and bit_offset + bits <= image * 8):
                raise ShmError(f"{bad}: entries[{i}] (bit {bit_offset}, {bits} bits) is outside the image")
            data_type = dt if isinstance(dt, str) else "OTHER"
            qualified = f"{pdo}.{name}" if pdo is not None else name
            ent = Entry(f"{pos}:{qualified}", name, pos, bit_offset, bits, data_type, out, row if out else -1)
            if out:
                if row >= self.h["output_entries"]:
                    raise ShmError(f"{bad}: more output entries than the entry table's {self.h['output_entries']}")
                r = self.h["entries_offset"] + row * ENTRY_BYTES
                tbo, tbits = struct.unpack_from("<IH", self._mm, r)
                if (tbo, tbits) != (bit_offset, bits):
                    raise ShmError(f"{bad}: entries[{i}] disagrees with entry table row {row}")
                row += 1
            self.entries.append(ent)
            self._by_name.setdefault(ent.name, ent)
        if row != self.h["output_entries"]:
            raise ShmError(f"{bad}: {row} output entries, the entry table has {self.h['output_entries']}")

    def entry(self, name: str) -> Entry:
        """By "POSITION:QUALIFIED", or "POSITION:NAME" when that names one entry of the subdevice."""
        e = self._by_name.get(name)
        if e is not None:
            return e
        pos, sep, short = name.partition(":")
        found = [x for x in self.entries if sep and str(x.position) == pos and x.short_name == short]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise UsageError(f"entry '{name}' is ambiguous: {', '.join(x.name for x in found)}")
        close = [x.name for x in self.entries if short and short in x.name][:5]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UsageError(f"no entry '{name}' in /{self.name}{hint}")

    def state(self) -> int:
        """The object's state; REPLACED also when the generation changed."""
        if self._i[8] != self.generation:
            return REPLACED
        st = self._i[9]
        return st if st <= STOPPED else REPLACED

    # -- snapshots --

    def read(self) -> Snapshot:
        """One consistent snapshot (bounded retries; never blocks the master)."""
        a = _atom()
        base = self.h["snapshot_offset"]
        qseq = base // 8
        mm = self._mm
        for _ in range(READ_TRIES):
            st = self.state()
            if st == REPLACED:
                raise Replaced(f"{self.name}: replaced by a re-initialisation")
            s1 = self._q[qseq]
            a.fence(a.ACQUIRE)
            if s1 == 0:
                raise ShmError(f"{self.name}: nothing published yet (state {STATES[st]})")
            if s1 & 1:
                continue
            head = bytes(mm[base + 8 : base + 48])
            data = bytes(mm[base + S_DATA : base + self.data_end])
            a.fence(a.ACQUIRE)
            if self._q[qseq] != s1:
                continue
            cycle, deadline, wake, unix, wkc, ewkc, lost = struct.unpack_from("<QQQQHHB", head)
            v0 = 0
            i0 = self.inputs_off - S_DATA
            o0 = self.outputs_off - S_DATA
            return Snapshot(
                seq=s1,
                cycle=cycle,
                deadline_ns=deadline,
                wake_ns=wake,
                unix_ns=unix,
                wkc=wkc,
                expected_wkc=ewkc,
                frames_lost=bool(lost),
                valid=[b == 1 for b in data[v0 : v0 + self.subdevices]],
                inputs=data[i0 : i0 + self.input_bytes],
                outputs=data[o0 : o0 + self.output_bytes],
                image=self,
            )
        raise ShmError(f"{self.name}: no consistent snapshot in {READ_TRIES} tries")

    def writer(self, name: str) -> Writer:
        return Writer(self, name)


class Writer:
    """A writer held by this process: its own object (its slot) handed out by the master;
    claims are requests the master records; write and heartbeat touch only the own object."""

    def __init__(self, image: Image, name: str) -> None:
        raw = name.encode("utf-8")
        if not raw or len(raw) >= W_NAME_BYTES or b"\0" in raw or any(c < 32 for c in raw):
            raise UsageError(f"writer name '{name}': 1..31 bytes, no control characters")
        self.image = image
        self.name = name
        self._staged = bytearray(image.output_bytes)
        self._seq = 0
        self._mm: mmap.mmap | None = None
        data, fds = _ask(image.name, image.master_uid, {"cmd": "shm_writer", "name": name})
        fd = _one_fd(image.name, "shm_writer", fds, WRITER_SEALS)
        try:
            slot, size = data.get("slot"), data.get("bytes")
            if data.get("generation") != image.h["generation"]:
                raise Replaced(f"{image.name}: the master's image is generation {data.get('generation')}, attach again")
            if not isinstance(slot, int) or not 0 <= slot < image.h["max_writers"]:
                raise ShmError(f"{image.name}: writer slot {slot!r} out of range")
            if not isinstance(size, int) or size < W_STAGED + image.output_bytes or os.fstat(fd).st_size != size:
                raise ShmError(f"{image.name}: writer object of {os.fstat(fd).st_size} bytes (reply {size!r})")
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, access=mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        self.slot = slot
        self._q = memoryview(self._mm)[: size - size % 8].cast("Q")
        self._i = memoryview(self._mm)[: size - size % 4].cast("I")
        me = slot + 1
        # Declared for this writer by the master's configuration: owned from the start.
        self._owned = {
            r
            for r in range(image.h["output_entries"])
            if self._row_flags(r) & 1 and image._i[self._owner_off(r) // 4] == me
        }
        self.declared = bool(self._owned) or data.get("declared") is True
        self._q[W_HEARTBEAT // 8] = (self._q[W_HEARTBEAT // 8] + 1) & (2**64 - 1)

    def _owner_off(self, row: int) -> int:
        return self.image.h["entries_offset"] + row * ENTRY_BYTES + 8

    def _row_flags(self, row: int) -> int:
        return struct.unpack_from("<H", self.image._mm, self.image.h["entries_offset"] + row * ENTRY_BYTES + 6)[0]

    def _entry(self, entry: Entry | str) -> Entry:
        e = self.image.entry(entry) if isinstance(entry, str) else entry
        if not e.is_output:
            raise UsageError(f"{e.name} is an input: only outputs can be written")
        return e

    def claim(self, entry: Entry | str) -> Entry:
        """Own an output entry (a request the master grants or refuses); its current value is
        staged first, so that claiming does not change the output."""
        e = self._entry(entry)
        if e.row in self._owned:
            return e
        if self._row_flags(e.row) & FLAG_MASTER:
            raise ShmError(f"{e.name} is driven by the master (an [[axis]]): no writer can own it")
        with contextlib.suppress(ShmError):
            self._stage({e: self.image.read().raw(e)})
        try:
            _ask(self.image.name, self.image.master_uid, {"cmd": "shm_claim", "slot": self.slot, "row": e.row})
        except NotMaster:
            raise
        except ShmError as err:
            raise ShmError(f"{e.name}: {err}") from None
        self._owned.add(e.row)
        return e

    def release(self, entry: Entry | str) -> None:
        """Give a claimed entry up (a declared one stays)."""
        e = self._entry(entry)
        _ask(self.image.name, self.image.master_uid, {"cmd": "shm_release", "slot": self.slot, "row": e.row})
        if not self._row_flags(e.row) & 1:
            self._owned.discard(e.row)

    def _stage(self, raws: dict[Entry, int]) -> None:
        if self._mm is None:
            raise ShmError(f"{self.image.name}: writer '{self.name}' detached")
        for e, r in raws.items():
            _set_bits(self._staged, e.bit_offset, e.bits, r)
        a = _atom()
        self._seq += 1
        self._q[W_SEQ // 8] = self._seq
        a.fence(a.RELEASE)
        self._mm[W_STAGED : W_STAGED + self.image.output_bytes] = bytes(self._staged)
        a.fence(a.RELEASE)
        self._seq += 1
        self._q[W_SEQ // 8] = self._seq

    def write(self, values: dict[Entry | str, object], raw: bool = False) -> None:
        """Stage values (entry -> value, encoded by its data type) in one seqlock write."""
        encoded = {}
        for k, v in values.items():
            e = self._entry(k)
            if e.row not in self._owned:
                raise ShmError(f"{e.name} is not owned by writer '{self.name}' (claim it first)")
            encoded[e] = v if raw and isinstance(v, int) else encode(e, v)
        self._stage(encoded)

    def heartbeat(self) -> int:
        """Increment the heartbeat; returns the slot state (W_ATTACHED, W_STALE, ...)."""
        if self._mm is None:
            raise ShmError(f"{self.image.name}: writer '{self.name}' detached")
        q = W_HEARTBEAT // 8
        self._q[q] = (self._q[q] + 1) & (2**64 - 1)
        if self.image.state() == REPLACED:
            raise Replaced(f"{self.image.name}: replaced by a re-initialisation")
        return self._i[W_STATE // 4]

    def applied_cycle(self) -> int:
        """The last cycle the master took a consistent copy of this writer's staged outputs:
        that it takes the writes, not which one (a value is out once a snapshot's outputs show it)."""
        return self._q[W_APPLIED // 8] if self._mm is not None else 0

    def detach(self) -> None:
        """Give the slot back: the master sees FREE and ends the claims."""
        if self._mm is None:
            return
        a = _atom()
        a.fence(a.RELEASE)
        self._i[W_STATE // 4] = W_FREE
        self._q.release()
        self._i.release()
        self._mm.close()
        self._mm = None

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()


def attach_live(name: str, timeout_s: float = 5.0, master_uid: int | None = None) -> Image:
    """Attach, retrying while the object is missing, not yet published or replaced (an object
    that is not the master's is refused at once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            img = Image.attach(name, master_uid)
        except (UsageError, NotMaster):
            raise
        except ShmError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
            continue
        try:
            img.read()
            return img
        except ShmError:
            img.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def read_retrying(img: Image, timeout_s: float = 5.0) -> tuple[Image, Snapshot]:
    """A snapshot, re-attaching when the object is replaced."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return img, img.read()
        except Replaced:
            img.close()
            img = attach_live(img.name, max(0.0, deadline - time.monotonic()), img.master_uid)


def _parse_assignments(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise UsageError(f"--write '{item}': expected ENTRY=VALUE")
        out.append((name, value))
    return out


def _emit(snap: Snapshot) -> None:
    print(json.dumps(snap.to_json(), separators=(",", ":")), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Read or write rtcat's shared-memory process image.")
    p.add_argument("name", metavar="SOCKET", help="the master's control socket (--control SOCK / [control] socket)")
    p.add_argument("--dump", action="store_true", help="print one snapshot as JSON")
    p.add_argument("--watch", action="store_true", help="print one JSON line per snapshot until interrupted")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between --watch lines (default 1)")
    p.add_argument("--count", type=int, default=0, help="stop --watch after this many lines (default: never)")
    p.add_argument("--write", action="append", default=[], metavar="ENTRY=VALUE", help="write an output entry")
    p.add_argument("--as", dest="writer", metavar="NAME", help="writer name for --write (1..31 bytes)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the master (default 5)")
    p.add_argument(
        "--master-uid", type=int, default=None, help="uid the master runs as (default: ours); other owners are refused"
    )
    args = p.parse_args(argv)
    if not (args.dump or args.watch or args.write):
        p.error("nothing to do: give --dump, --watch or --write")
    if args.write and not args.writer:
        p.error("--write needs --as NAME (the writer's name)")
    if args.interval <= 0 or not math.isfinite(args.interval) or args.count < 0 or args.timeout < 0:
        p.error("--interval must be > 0, --count and --timeout >= 0")
    try:
        assignments = _parse_assignments(args.write)
        img = attach_live(args.name, args.timeout, args.master_uid)
        try:
            writer = None
            if assignments:
                entries = {img.entry(n): v for n, v in assignments}
                for e, v in entries.items():
                    encode(e, v)  # usage errors before asking for a slot
                writer = img.writer(args.writer)
                for e in entries:
                    writer.claim(e)
                writer.write(dict(entries.items()))
                _wait_applied(img, writer, entries, args.timeout)
            if args.dump or (writer and not args.watch):
                img, snap = read_retrying(img, args.timeout)
                _emit(snap)
            if args.watch:
                _watch(img, writer, args)
            if writer:
                writer.detach()
        finally:
            img.close()
    except UsageError as e:
        print(f"rtcat_shm: {e}", file=sys.stderr)
        return 2
    except ShmError as e:
        print(f"rtcat_shm: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        # The reader of our output went away (`--watch | head`): stop quietly, as cat does.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the interpreter's final flush)
        return 1
    return 0


def _wait_applied(img: Image, writer: Writer, entries: dict[Entry, str], timeout_s: float) -> None:
    """Until the master took the staged values and a snapshot shows them in the outputs."""
    start = writer.applied_cycle()
    deadline = time.monotonic() + timeout_s
    want = {e: encode(e, v) for e, v in entries.items()}
    while time.monotonic() < deadline:
        writer.heartbeat()
        snap = img.read()
        if writer.applied_cycle() > start and all(snap.raw(e) == r for e, r in want.items()):
            return
        time.sleep(max(img.period_ns, 100_000) / 1e9)
    raise ShmError(f"{img.name}: the master did not apply the outputs within {timeout_s} s")


def _watch(img: Image, writer: Writer | None, args: argparse.Namespace) -> None:
    """JSON lines until interrupted (or --count); a writer keeps its heartbeat in between."""
    n = 0
    # Four heartbeats per writer timeout keep the slot ATTACHED with margin.
    beat = max(img.period_ns * max(img.writer_timeout_cycles, 1) / 4e9, 0.001)
    for line in _ticks(args.interval, beat if writer else args.interval):
        if writer:
            writer.heartbeat()
        if not line:
            continue
        if writer:
            snap = img.read()  # a replaced object ends the writer's session (exit 1)
        else:
            img, snap = read_retrying(img, args.timeout)
        _emit(snap)
        n += 1
        if args.count and n >= args.count:
            return


def _ticks(interval: float, beat: float) -> Iterator[bool]:
    """True once per interval, False at each heartbeat in between."""
    next_line = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= next_line:
            next_line += interval
            yield True
        else:
            time.sleep(min(beat, next_line - now))
            yield False


if __name__ == "__main__":
    sys.exit(main())
