/* rtcat_shm.h -- client of rtcat's shared-memory process image (format v3, app/shm/FORMAT.md).
 *
 * Single header, C11 + POSIX.1-2008 + Linux (SO_PEERCRED, memfd seals), libc only. In exactly
 * one translation unit:
 *
 *     #define _POSIX_C_SOURCE 200809L   (before the first #include; for O_CLOEXEC)
 *     #define RTCAT_SHM_IMPLEMENTATION
 *     #include "rtcat_shm.h"
 *
 * The image is handed out by the running master over its control socket (--control SOCK): the
 * client checks the socket's peer (SO_PEERCRED, unix(7)) against the master's uid before it asks
 * anything, and receives the image as a sealed memfd (SCM_RIGHTS), mapped read-only. A writer
 * gets an object of its own the same way; claims are requests the master records. Nothing is
 * looked up in /dev/shm.
 *
 * Everything in the object is untrusted input: every offset and size is checked against the
 * object's real size (fstat) before it is used, the layout JSON is parsed with bounds checks, and
 * a truncated or garbage object gives an error code, never an out-of-bounds access.
 *
 * Ordering (the seqlock of the snapshot and of a writer's staged outputs) follows H.-J. Boehm,
 * "Can seqlocks get along with programming language memory models?" (MSPC 2012): the reader
 * loads seq with acquire, copies the data with relaxed atomic loads, issues an acquire fence and
 * loads seq again; the writer stores seq odd, issues a release fence, stores the data, and stores
 * seq even with release. On arm64 these become LDAR / DMB ISHLD / STLR, so the copy can neither
 * move before the first load of seq nor after the second.
 *
 * Not thread-safe per handle: use one rtcat_shm (and one writer) per thread, or lock.
 */
#ifndef RTCAT_SHM_H
#define RTCAT_SHM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RTCAT_SHM_ABI_VERSION 3u

/* Error codes (negative; 0 is success). rtcat_shm_strerror() names them. */
enum rtcat_shm_error {
    RTCAT_SHM_OK = 0,
    RTCAT_SHM_EINVAL = -1,     /* bad argument (NULL, socket path longer than 107 bytes, ...) */
    RTCAT_SHM_ENOENT = -2,     /* no control socket at that path (no master running?) */
    RTCAT_SHM_EACCES = -3,     /* permission denied (not in the [ipc] group?) */
    RTCAT_SHM_ESYS = -4,       /* another system call failure (errno is kept) */
    RTCAT_SHM_ESHORT = -5,     /* object shorter than its header or than the sizes it declares */
    RTCAT_SHM_EMAGIC = -6,     /* not an rtcat process image (magic) */
    RTCAT_SHM_EABI = -7,       /* ABI version other than 3 */
    RTCAT_SHM_EHEADER = -8,    /* header fields inconsistent or out of bounds */
    RTCAT_SHM_ELAYOUT = -9,    /* layout JSON malformed, or disagreeing with the header */
    RTCAT_SHM_ENOTLIVE = -10,  /* the master has not published yet, or has stopped */
    RTCAT_SHM_EREPLACED = -11, /* re-initialised: detach and attach again */
    RTCAT_SHM_ENOENTRY = -12,  /* no entry of that name */
    RTCAT_SHM_EDIR = -13,      /* an input entry where an output is needed */
    RTCAT_SHM_ENOSLOT = -14,   /* no free writer slot (or the declared one is in use) */
    RTCAT_SHM_EOWNED = -15,    /* the output entry belongs to another writer */
    RTCAT_SHM_ENOTOWNED = -16, /* this writer does not own the entry */
    RTCAT_SHM_EBUSY = -17,     /* no consistent snapshot within the retry budget */
    RTCAT_SHM_ENOMEM = -18,    /* out of memory */
    RTCAT_SHM_ESTALE = -19,    /* the master marked this writer stale, or took its slot */
    RTCAT_SHM_ENOTMASTER = -20, /* the socket's peer does not run as the master's uid: refused */
    RTCAT_SHM_EMASTER = -21,   /* the entry is driven by the master (an [[axis]]) */
    RTCAT_SHM_EREFUSED = -22,  /* the master refused the request (rtcat_shm.last_error says why) */
    RTCAT_SHM_EPROTO = -23     /* the master's reply is malformed, or carries no/unsealed object */
};

/* Object state (header offset 36). */
enum rtcat_shm_state {
    RTCAT_SHM_INIT = 0,
    RTCAT_SHM_LIVE = 1,
    RTCAT_SHM_RECOVERING = 2,
    RTCAT_SHM_REPLACED = 3,
    RTCAT_SHM_STOPPED = 4
};

/* An entry's data type, from the layout's `data_type` (ETG.1000.6 Table 64). */
enum rtcat_shm_type {
    RTCAT_SHM_T_OTHER = 0, /* unknown or not interpreted: read the raw bits */
    RTCAT_SHM_T_BOOL,
    RTCAT_SHM_T_INT8,
    RTCAT_SHM_T_INT16,
    RTCAT_SHM_T_INT32,
    RTCAT_SHM_T_INT64,
    RTCAT_SHM_T_UNSIGNED8,
    RTCAT_SHM_T_UNSIGNED16,
    RTCAT_SHM_T_UNSIGNED32,
    RTCAT_SHM_T_UNSIGNED64,
    RTCAT_SHM_T_REAL32,
    RTCAT_SHM_T_REAL64,
    RTCAT_SHM_T_BITS
};

/* One entry of the layout (index != 0; padding gaps are not listed). */
typedef struct rtcat_shm_entry {
    const char *name;    /* "POSITION:QUALIFIED", e.g. "0:Outputs.Output 1" */
    const char *short_name; /* the entry's own name, without PDO ("Output 1") */
    uint32_t bit_offset; /* in its direction's image */
    uint16_t position;
    uint16_t bits;       /* 1..65535; wider than 64: rtcat_shm_get_bytes / set_bytes */
    uint8_t is_output;
    int type;            /* enum rtcat_shm_type */
    int32_t row;         /* row of the output entry table, -1 for inputs */
} rtcat_shm_entry;

/* An attached object. Fields are read-only for users. */
typedef struct rtcat_shm {
    int fd;
    uint8_t *base;
    size_t size;
    uint32_t generation;
    uint64_t period_ns;
    uint64_t layout_hash;
    uint64_t writer_timeout_cycles;
    uint32_t subdevices, input_bytes, output_bytes, output_entries;
    uint32_t layout_offset, layout_len, entries_offset, writers_offset, max_writers,
        writer_bytes, snapshot_offset, snapshot_bytes, master_pid;
    /* snapshot sub-offsets (from snapshot_offset) */
    uint32_t valid_off, inputs_off, outputs_off;
    rtcat_shm_entry *entries;
    size_t n_entries;
    char *names; /* storage of the entry names */
    int last_errno;
    uint32_t master_uid;
    char socket[108];      /* the master's control socket (sun_path) */
    char last_error[256];  /* the master's message of the last refused request */
} rtcat_shm;

/* One consistent snapshot. Buffers belong to the snapshot (rtcat_shm_snapshot_init/free). */
typedef struct rtcat_shm_snapshot {
    uint64_t seq, cycle, deadline_ns, wake_ns, unix_ns;
    uint16_t wkc, expected_wkc;
    uint8_t frames_lost;
    uint32_t subdevices, input_bytes, output_bytes;
    uint8_t *valid;   /* [subdevices] */
    uint8_t *inputs;  /* [input_bytes] */
    uint8_t *outputs; /* [output_bytes] */
    void *buf;
} rtcat_shm_snapshot;

/* A writer this process holds: its own object (its slot), handed out by the master. */
typedef struct rtcat_shm_writer {
    rtcat_shm *shm;
    uint32_t slot; /* 0-based */
    int declared;  /* the slot was declared in the config (its name is the master's) */
    uint64_t seq;
    uint8_t *base; /* the writer object's mapping */
    size_t size;
    uint8_t *owned; /* [output_entries]: 1 = this writer owns the row (declared or claimed) */
} rtcat_shm_writer;

const char *rtcat_shm_strerror(int err);
const char *rtcat_shm_type_name(int type);

/* Attach to the image of the master whose control socket is `socket_path`, running as
 * `master_uid` (its service user): a socket whose peer runs as any other uid is refused with
 * RTCAT_SHM_ENOTMASTER before anything is asked. The image comes as a sealed memfd with the
 * reply; the header and the layout are validated, the image is mapped read-only. `*s` is zeroed
 * first; on error nothing stays open. */
int rtcat_shm_attach_owned_by(rtcat_shm *s, const char *socket_path, uint32_t master_uid);
/* rtcat_shm_attach_owned_by with this process's effective uid (a master of the same user). */
int rtcat_shm_attach(rtcat_shm *s, const char *socket_path);
void rtcat_shm_detach(rtcat_shm *s);
/* Current state (enum rtcat_shm_state); RTCAT_SHM_REPLACED also when the generation changed. */
int rtcat_shm_state(const rtcat_shm *s);

/* By "POSITION:QUALIFIED" name, or "POSITION:NAME" when that names exactly one entry of the
 * subdevice. NULL when there is none (or the short name is ambiguous). */
const rtcat_shm_entry *rtcat_shm_find(const rtcat_shm *s, const char *name);

int rtcat_shm_snapshot_init(const rtcat_shm *s, rtcat_shm_snapshot *snap);
void rtcat_shm_snapshot_free(rtcat_shm_snapshot *snap);
/* Copy one consistent snapshot. RTCAT_SHM_EREPLACED / ENOTLIVE / EBUSY on failure; never waits
 * for the master beyond a bounded number of retries. */
int rtcat_shm_read(const rtcat_shm *s, rtcat_shm_snapshot *snap);

/* Entry values in an image (snap->inputs or snap->outputs, by the entry's direction). get_raw
 * gives the low 64 bits of a wider entry; get_bytes all of them (len >= (bits + 7) / 8). */
uint64_t rtcat_shm_get_raw(const rtcat_shm_snapshot *snap, const rtcat_shm_entry *e);
int rtcat_shm_get_bytes(const rtcat_shm_snapshot *snap, const rtcat_shm_entry *e, uint8_t *out,
                        size_t len);
int64_t rtcat_shm_get_int(const rtcat_shm_snapshot *snap, const rtcat_shm_entry *e);
double rtcat_shm_get_real(const rtcat_shm_snapshot *snap, const rtcat_shm_entry *e);

/* Writers: attach as NAME (at most 31 bytes; the master hands out the slot declared in its
 * config for that name, else a free undeclared one), claim output entries (requests the master
 * grants or refuses: RTCAT_SHM_EOWNED, RTCAT_SHM_EMASTER, RTCAT_SHM_EREFUSED), write them, keep
 * the heartbeat. */
int rtcat_shm_writer_attach(rtcat_shm *s, const char *name, rtcat_shm_writer *w);
int rtcat_shm_claim(rtcat_shm_writer *w, const rtcat_shm_entry *e);
int rtcat_shm_release(rtcat_shm_writer *w, const rtcat_shm_entry *e);
/* Stage values: begin, set..., commit. The master takes them at its next cycle. */
void rtcat_shm_write_begin(rtcat_shm_writer *w);
int rtcat_shm_set_raw(rtcat_shm_writer *w, const rtcat_shm_entry *e, uint64_t raw);
int rtcat_shm_set_real(rtcat_shm_writer *w, const rtcat_shm_entry *e, double v);
/* An entry of any width from (bits + 7) / 8 little-endian bytes. */
int rtcat_shm_set_bytes(rtcat_shm_writer *w, const rtcat_shm_entry *e, const uint8_t *in,
                        size_t len);
void rtcat_shm_write_commit(rtcat_shm_writer *w);
/* One entry in one step (begin, set, commit). */
int rtcat_shm_write_raw(rtcat_shm_writer *w, const rtcat_shm_entry *e, uint64_t raw);
/* Increment the heartbeat; call at least once every writer_timeout_cycles periods. Returns
 * RTCAT_SHM_ESTALE when the master has marked the slot STALE (the heartbeat revives it). */
int rtcat_shm_heartbeat(rtcat_shm_writer *w);
/* The last cycle the master took a consistent copy of this writer's staged outputs: that it
 * takes the writes, not which one (find the value in a snapshot's outputs: FORMAT.md, Write). */
uint64_t rtcat_shm_applied_cycle(const rtcat_shm_writer *w);
/* Give the slot back (the master then ends its claims) and unmap the writer's object. */
void rtcat_shm_writer_detach(rtcat_shm_writer *w);

#ifdef __cplusplus
}
#endif

#endif /* RTCAT_SHM_H */

#ifdef RTCAT_SHM_IMPLEMENTATION
#ifndef RTCAT_SHM_IMPLEMENTED
#define RTCAT_SHM_IMPLEMENTED

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* Linux values (linux/fcntl.h, asm-generic/socket.h, linux/socket.h): glibc declares them only
 * with _GNU_SOURCE, which this header does not require. */
#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif
#ifndef SO_PEERCRED
#define SO_PEERCRED 17
#endif
#ifndef MSG_CMSG_CLOEXEC
#define MSG_CMSG_CLOEXEC 0x40000000
#endif
#define RTCAT__SEAL_SEAL 0x1
#define RTCAT__SEAL_SHRINK 0x2
#define RTCAT__SEAL_GROW 0x4
#define RTCAT__SEAL_FUTURE_WRITE 0x10

#if !defined(O_CLOEXEC) || !defined(O_NOFOLLOW)
#error "rtcat_shm.h's implementation needs POSIX.1-2008: #define _POSIX_C_SOURCE 200809L (or _DEFAULT_SOURCE) before the first #include"
#endif

#if !defined(__ORDER_LITTLE_ENDIAN__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rtcat_shm.h reads the little-endian format in place: little-endian hosts only"
#endif

/* Header field offsets (FORMAT.md). */
enum {
    RTCAT__H_MAGIC = 0,
    RTCAT__H_ABI = 8,
    RTCAT__H_HEADER_BYTES = 12,
    RTCAT__H_OBJECT_BYTES = 16,
    RTCAT__H_LAYOUT_HASH = 24,
    RTCAT__H_GENERATION = 32,
    RTCAT__H_STATE = 36,
    RTCAT__H_PERIOD = 40,
    RTCAT__H_SUBDEVICES = 48,
    RTCAT__H_INPUT_BYTES = 52,
    RTCAT__H_OUTPUT_BYTES = 56,
    RTCAT__H_OUTPUT_ENTRIES = 60,
    RTCAT__H_LAYOUT_OFFSET = 64,
    RTCAT__H_LAYOUT_LEN = 68,
    RTCAT__H_ENTRIES_OFFSET = 72,
    RTCAT__H_ENTRY_BYTES = 76,
    RTCAT__H_WRITERS_OFFSET = 80,
    RTCAT__H_MAX_WRITERS = 84,
    RTCAT__H_WRITER_BYTES = 88,
    RTCAT__H_SNAPSHOT_OFFSET = 92,
    RTCAT__H_SNAPSHOT_BYTES = 96,
    RTCAT__H_MASTER_PID = 100,
    RTCAT__H_WRITER_TIMEOUT = 104,
    RTCAT__HEADER_BYTES = 4096,
    RTCAT__ENTRY_BYTES = 16,
    RTCAT__FLAG_MASTER = 2, /* entry-table flag: the master drives the entry (an [[axis]]) */
    RTCAT__W_STATE = 0,
    RTCAT__W_PID = 4,
    RTCAT__W_HEARTBEAT = 8,
    RTCAT__W_NAME = 16,
    RTCAT__W_NAME_BYTES = 32,
    RTCAT__W_SEQ = 48,
    RTCAT__W_APPLIED = 56,
    RTCAT__W_STAGED = 64,
    RTCAT__S_DATA = 48,
    RTCAT__W_FREE = 0,
    RTCAT__W_CLAIMING = 1,
    RTCAT__W_ATTACHED = 2,
    RTCAT__W_STALE = 3,
    /* Readers retry at most this often (a cycle's publication takes microseconds; the master
     * never waits for readers, so a reader must not wait for the master unboundedly either). */
    RTCAT__READ_TRIES = 100000,
    RTCAT__NAME_MAX = 200,
    RTCAT__JSON_DEPTH = 16,
    RTCAT__STR_MAX = 512
};

const char *rtcat_shm_strerror(int err) {
    switch (err) {
    case RTCAT_SHM_OK: return "success";
    case RTCAT_SHM_EINVAL: return "invalid argument (a socket path has at most 107 bytes)";
    case RTCAT_SHM_ENOENT: return "no control socket at that path (is the master running with --control and --shm?)";
    case RTCAT_SHM_EACCES: return "permission denied (the control socket belongs to the [ipc] group)";
    case RTCAT_SHM_ESYS: return "system call failed";
    case RTCAT_SHM_ESHORT: return "object shorter than its header or than the sizes it declares";
    case RTCAT_SHM_EMAGIC: return "not an rtcat process image (bad magic)";
    case RTCAT_SHM_EABI: return "unsupported ABI version (this client reads version 3)";
    case RTCAT_SHM_EHEADER: return "header fields inconsistent or out of bounds";
    case RTCAT_SHM_ELAYOUT: return "layout JSON malformed or disagreeing with the header";
    case RTCAT_SHM_ENOTLIVE: return "the master is not publishing (starting or stopped)";
    case RTCAT_SHM_EREPLACED: return "the object was replaced (re-initialised): attach again";
    case RTCAT_SHM_ENOENTRY: return "no entry of that name";
    case RTCAT_SHM_EDIR: return "not an output entry";
    case RTCAT_SHM_ENOSLOT: return "no free writer slot (or the declared slot of that name is in use)";
    case RTCAT_SHM_EOWNED: return "the entry is owned by another writer";
    case RTCAT_SHM_ENOTOWNED: return "this writer does not own the entry";
    case RTCAT_SHM_EBUSY: return "no consistent snapshot within the retry budget";
    case RTCAT_SHM_ENOMEM: return "out of memory";
    case RTCAT_SHM_ESTALE: return "the master marked this writer stale";
    case RTCAT_SHM_ENOTMASTER: return "the control socket's peer does not run as the master's uid: refused (not the master)";
    case RTCAT_SHM_EMASTER: return "the entry is driven by the master (an [[axis]]): no writer can own it";
    case RTCAT_SHM_EREFUSED: return "the master refused the request (see last_error)";
    case RTCAT_SHM_EPROTO: return "malformed reply of the master, or no sealed object with it";
    default: return "unknown error";
    }
}

const char *rtcat_shm_type_name(int type) {
    static const char *const names[] = {"OTHER", "BOOL", "INT8", "INT16", "INT32",
                                        "INT64", "UNSIGNED8", "UNSIGNED16", "UNSIGNED32",
                                        "UNSIGNED64", "REAL32", "REAL64", "BITS"};
    if (type < 0 || (size_t)type >= sizeof names / sizeof names[0])
        return "OTHER";
    return names[type];
}

/* Plain little-endian reads of header fields that do not change after LIVE. */
static uint32_t rtcat__u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t rtcat__u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint32_t *rtcat__a32(const rtcat_shm *s, size_t off) {
    return (uint32_t *)(void *)(s->base + off);
}
static uint64_t *rtcat__a64(const rtcat_shm *s, size_t off) {
    return (uint64_t *)(void *)(s->base + off);
}

/* [off, off + len) within [0, size), without overflow. */
static int rtcat__within(uint64_t off, uint64_t len, uint64_t size) {
    return off <= size && len <= size - off;
}

static uint64_t rtcat__pad8(uint64_t n) { return (n + 7u) & ~(uint64_t)7u; }

/* ---- A minimal JSON scanner for the layout ----
 * The layout is `rtcat pdos --json` (serde_json output), but it is read from an object other
 * processes may write, so it is treated as untrusted: every read is bounds-checked, nesting is
 * limited, and numbers must be non-negative integers where a field needs one. A JSON library
 * would be a dependency to vendor beside a single header; the client needs eight fields of one
 * array, so a scanner that parses the grammar (RFC 8259) and keeps those is enough. */
typedef struct {
    const char *p, *end;
} rtcat__js;

static void rtcat__ws(rtcat__js *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int rtcat__lit(rtcat__js *j, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0)
        return -1;
    j->p += n;
    return 0;
}

static int rtcat__hex4(rtcat__js *j, uint32_t *v) {
    *v = 0;
    if (j->end - j->p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

/* A string; decoded into out[cap] (NUL-terminated) when out is not NULL. */
static int rtcat__str(rtcat__js *j, char *out, size_t cap) {
    size_t n = 0;
    rtcat__ws(j);
    if (j->p >= j->end || *j->p != '"')
        return -1;
    j->p++;
    for (;;) {
        uint8_t buf[4];
        size_t len = 1;
        if (j->p >= j->end)
            return -1;
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"')
            break;
        if (c < 0x20)
            return -1;
        buf[0] = c;
        if (c >= 0x80) {
            /* UTF-8 (RFC 3629 §4): no overlongs, no surrogates, nothing above U+10FFFF. */
            size_t more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
            uint32_t cp = c >= 0xf0 ? c & 0x07u : c >= 0xe0 ? c & 0x0fu : c & 0x1fu;
            if (c < 0xc2 || c > 0xf4 || (size_t)(j->end - j->p) < more)
                return -1;
            for (size_t i = 0; i < more; i++) {
                unsigned char cc = (unsigned char)j->p[i];
                if ((cc & 0xc0) != 0x80)
                    return -1;
                cp = cp << 6 | (cc & 0x3fu);
                buf[i + 1] = cc;
            }
            if ((more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) || cp > 0x10ffff ||
                (cp >= 0xd800 && cp < 0xe000))
                return -1;
            j->p += more;
            len = more + 1;
        }
        if (c == '\\') {
            if (j->p >= j->end)
                return -1;
            char e = *j->p++;
            switch (e) {
            case '"': buf[0] = '"'; break;
            case '\\': buf[0] = '\\'; break;
            case '/': buf[0] = '/'; break;
            case 'b': buf[0] = '\b'; break;
            case 'f': buf[0] = '\f'; break;
            case 'n': buf[0] = '\n'; break;
            case 'r': buf[0] = '\r'; break;
            case 't': buf[0] = '\t'; break;
            case 'u': {
                uint32_t cp, lo;
                if (rtcat__hex4(j, &cp))
                    return -1;
                if (cp >= 0xd800 && cp < 0xdc00) {
                    if (rtcat__lit(j, "\\u") || rtcat__hex4(j, &lo) || lo < 0xdc00 || lo >= 0xe000)
                        return -1;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xdc00 && cp < 0xe000) {
                    return -1;
                }
                if (cp == 0)
                    return -1; /* a NUL would cut the C string */
                if (cp < 0x80) {
                    buf[0] = (uint8_t)cp;
                } else if (cp < 0x800) {
                    buf[0] = (uint8_t)(0xc0 | cp >> 6);
                    buf[1] = (uint8_t)(0x80 | (cp & 0x3f));
                    len = 2;
                } else if (cp < 0x10000) {
                    buf[0] = (uint8_t)(0xe0 | cp >> 12);
                    buf[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
                    buf[2] = (uint8_t)(0x80 | (cp & 0x3f));
                    len = 3;
                } else {
                    buf[0] = (uint8_t)(0xf0 | cp >> 18);
                    buf[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
                    buf[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
                    buf[3] = (uint8_t)(0x80 | (cp & 0x3f));
                    len = 4;
                }
                break;
            }
            default: return -1;
            }
        }
        if (out) {
            if (n + len >= cap)
                return -1;
            memcpy(out + n, buf, len);
        }
        n += len;
    }
    if (out)
        out[n] = 0;
    return 0;
}

/* A non-negative integer (no fraction, no exponent) up to max. */
static int rtcat__uint(rtcat__js *j, uint64_t max, uint64_t *v) {
    rtcat__ws(j);
    *v = 0;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return -1;
    if (*j->p == '0' && j->end - j->p > 1 && j->p[1] >= '0' && j->p[1] <= '9')
        return -1;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        uint64_t d = (uint64_t)(*j->p++ - '0');
        if (*v > (max - d) / 10)
            return -1;
        *v = *v * 10 + d;
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return -1;
    return 0;
}

static int rtcat__skip(rtcat__js *j, int depth);

static int rtcat__digits(rtcat__js *j) {
    const char *start = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
        j->p++;
    return j->p == start ? -1 : 0;
}

/* RFC 8259 §6: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int rtcat__skip_number(rtcat__js *j) {
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p < j->end && *j->p == '0')
        j->p++;
    else if (rtcat__digits(j))
        return -1;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (rtcat__digits(j))
            return -1;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (rtcat__digits(j))
            return -1;
    }
    return 0;
}

/* Calls each(key) for every member of an object; each() parses or skips the value. */
typedef int (*rtcat__member_fn)(rtcat__js *j, const char *key, void *ctx, int depth);

static int rtcat__object(rtcat__js *j, int depth, rtcat__member_fn each, void *ctx) {
    char key[64];
    if (depth > RTCAT__JSON_DEPTH)
        return -1;
    rtcat__ws(j);
    if (j->p >= j->end || *j->p != '{')
        return -1;
    j->p++;
    rtcat__ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 0;
    }
    for (;;) {
        /* Keys longer than any we read are skipped (not an error: another field). */
        const char *kstart = j->p;
        if (rtcat__str(j, key, sizeof key)) {
            j->p = kstart;
            if (rtcat__str(j, NULL, 0))
                return -1;
            key[0] = 0;
        }
        rtcat__ws(j);
        if (j->p >= j->end || *j->p != ':')
            return -1;
        j->p++;
        if (each ? each(j, key, ctx, depth + 1) : rtcat__skip(j, depth + 1))
            return -1;
        rtcat__ws(j);
        if (j->p >= j->end)
            return -1;
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == '}') {
            j->p++;
            return 0;
        }
        return -1;
    }
}

static int rtcat__skip(rtcat__js *j, int depth) {
    if (depth > RTCAT__JSON_DEPTH)
        return -1;
    rtcat__ws(j);
    if (j->p >= j->end)
        return -1;
    switch (*j->p) {
    case '{': return rtcat__object(j, depth, NULL, NULL);
    case '[':
        j->p++;
        rtcat__ws(j);
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return 0;
        }
        for (;;) {
            if (rtcat__skip(j, depth + 1))
                return -1;
            rtcat__ws(j);
            if (j->p >= j->end)
                return -1;
            if (*j->p == ',') {
                j->p++;
                continue;
            }
            if (*j->p == ']') {
                j->p++;
                return 0;
            }
            return -1;
        }
    case '"': return rtcat__str(j, NULL, 0);
    case 't': return rtcat__lit(j, "true");
    case 'f': return rtcat__lit(j, "false");
    case 'n': return rtcat__lit(j, "null");
    default: return rtcat__skip_number(j);
    }
}

/* One entry of the layout's "entries" array, as parsed. */
typedef struct {
    uint64_t position, index, bit_offset, bits;
    int type, is_output, have;
    char name[RTCAT__STR_MAX];
    char pdo_name[RTCAT__STR_MAX];
    int has_pdo_name;
} rtcat__jentry;

enum {
    RTCAT__HAVE_POSITION = 1,
    RTCAT__HAVE_INDEX = 2,
    RTCAT__HAVE_BIT_OFFSET = 4,
    RTCAT__HAVE_BITS = 8,
    RTCAT__HAVE_NAME = 16,
    RTCAT__HAVE_DIRECTION = 32,
    RTCAT__HAVE_TYPE = 64,
    RTCAT__HAVE_ALL = 127
};

static int rtcat__type_of(const char *s) {
    static const char *const names[] = {"BOOL", "INT8", "INT16", "INT32", "INT64", "UNSIGNED8",
                                        "UNSIGNED16", "UNSIGNED32", "UNSIGNED64", "REAL32", "REAL64",
                                        "BITS"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0)
            return (int)i + 1;
    return RTCAT_SHM_T_OTHER;
}

static int rtcat__entry_member(rtcat__js *j, const char *key, void *ctx, int depth) {
    rtcat__jentry *e = (rtcat__jentry *)ctx;
    char buf[32];
    if (strcmp(key, "position") == 0) {
        e->have |= RTCAT__HAVE_POSITION;
        return rtcat__uint(j, 0xffff, &e->position);
    }
    if (strcmp(key, "index") == 0) {
        e->have |= RTCAT__HAVE_INDEX;
        return rtcat__uint(j, 0xffff, &e->index);
    }
    if (strcmp(key, "bit_offset") == 0) {
        e->have |= RTCAT__HAVE_BIT_OFFSET;
        return rtcat__uint(j, 0xffffffffu, &e->bit_offset);
    }
    if (strcmp(key, "bits") == 0) {
        e->have |= RTCAT__HAVE_BITS;
        return rtcat__uint(j, 0xffff, &e->bits);
    }
    if (strcmp(key, "name") == 0) {
        e->have |= RTCAT__HAVE_NAME;
        return rtcat__str(j, e->name, sizeof e->name);
    }
    if (strcmp(key, "pdo_name") == 0) {
        rtcat__ws(j);
        if (j->p < j->end && *j->p == 'n') {
            e->has_pdo_name = 0;
            return rtcat__lit(j, "null");
        }
        e->has_pdo_name = 1;
        return rtcat__str(j, e->pdo_name, sizeof e->pdo_name);
    }
    if (strcmp(key, "direction") == 0) {
        e->have |= RTCAT__HAVE_DIRECTION;
        if (rtcat__str(j, buf, sizeof buf))
            return -1;
        if (strcmp(buf, "outputs") == 0)
            e->is_output = 1;
        else if (strcmp(buf, "inputs") == 0)
            e->is_output = 0;
        else
            return -1;
        return 0;
    }
    if (strcmp(key, "data_type") == 0) {
        /* "UNSIGNED32", or {"OTHER": code} for a type the master does not interpret. */
        e->have |= RTCAT__HAVE_TYPE;
        rtcat__ws(j);
        if (j->p < j->end && *j->p == '"') {
            if (rtcat__str(j, buf, sizeof buf))
                return -1;
            e->type = rtcat__type_of(buf);
            return 0;
        }
        e->type = RTCAT_SHM_T_OTHER;
        return rtcat__skip(j, depth);
    }
    return rtcat__skip(j, depth);
}

typedef struct {
    rtcat_shm *s;
    int saw_entries, saw_schema, saw_subdevices;
    uint64_t subdevices;
    uint64_t input_bytes, output_bytes;
    int saw_sizes;
    size_t names_len, names_cap;
    int err;
} rtcat__jtop;

static int rtcat__add_entry(rtcat__jtop *t, const rtcat__jentry *je) {
    rtcat_shm *s = t->s;
    char name[2 * RTCAT__STR_MAX + 16];
    int n;
    if ((je->have & RTCAT__HAVE_ALL) != RTCAT__HAVE_ALL)
        return -1;
    if (je->index == 0)
        return 0; /* a padding gap: no row, no name */
    if (je->bits < 1)
        return -1;
    uint64_t image = je->is_output ? s->output_bytes : s->input_bytes;
    if (je->bit_offset + je->bits > image * 8)
        return -1;
    if (je->has_pdo_name)
        n = snprintf(name, sizeof name, "%u:%s.%s", (unsigned)je->position, je->pdo_name, je->name);
    else
        n = snprintf(name, sizeof name, "%u:%s", (unsigned)je->position, je->name);
    if (n < 0 || (size_t)n >= sizeof name)
        return -1;
    /* Names are stored as offsets into s->names until the end (realloc moves it). */
    if (t->names_len + (size_t)n + 1 > t->names_cap) {
        size_t cap = t->names_cap ? t->names_cap * 2 : 4096;
        while (cap < t->names_len + (size_t)n + 1)
            cap *= 2;
        char *p = (char *)realloc(s->names, cap);
        if (!p) {
            t->err = RTCAT_SHM_ENOMEM;
            return -1;
        }
        s->names = p;
        t->names_cap = cap;
    }
    if ((s->n_entries & (s->n_entries + 1)) == 0 || s->entries == NULL) {
        /* grow at 0, 1, 3, 7, ... entries: capacity 2^k */
        size_t cap = (s->n_entries + 1) * 2;
        rtcat_shm_entry *p = (rtcat_shm_entry *)realloc(s->entries, cap * sizeof *p);
        if (!p) {
            t->err = RTCAT_SHM_ENOMEM;
            return -1;
        }
        s->entries = p;
    }
    memcpy(s->names + t->names_len, name, (size_t)n + 1);
    rtcat_shm_entry *e = &s->entries[s->n_entries];
    e->name = (const char *)(uintptr_t)t->names_len;
    e->short_name = (const char *)(uintptr_t)(t->names_len + (size_t)n - strlen(je->name));
    e->bit_offset = (uint32_t)je->bit_offset;
    e->position = (uint16_t)je->position;
    e->bits = (uint16_t)je->bits;
    e->is_output = (uint8_t)je->is_output;
    e->type = je->type;
    e->row = -1;
    t->names_len += (size_t)n + 1;
    s->n_entries++;
    return 0;
}

static int rtcat__top_member(rtcat__js *j, const char *key, void *ctx, int depth) {
    rtcat__jtop *t = (rtcat__jtop *)ctx;
    if (strcmp(key, "schema") == 0) {
        char buf[64];
        if (rtcat__str(j, buf, sizeof buf))
            return -1;
        t->saw_schema = 1;
        return strcmp(buf, "rtcat.layout/1") == 0 ? 0 : -1;
    }
    if (strcmp(key, "input_bytes") == 0) {
        t->saw_sizes |= 1;
        return rtcat__uint(j, 0xffffffffu, &t->input_bytes);
    }
    if (strcmp(key, "output_bytes") == 0) {
        t->saw_sizes |= 2;
        return rtcat__uint(j, 0xffffffffu, &t->output_bytes);
    }
    if (strcmp(key, "subdevices") == 0) {
        /* Counted: the snapshot's valid[] has one byte per subdevice of the layout. */
        rtcat__ws(j);
        if (j->p >= j->end || *j->p != '[')
            return -1;
        j->p++;
        rtcat__ws(j);
        t->saw_subdevices = 1;
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return 0;
        }
        for (;;) {
            if (rtcat__skip(j, depth + 1))
                return -1;
            t->subdevices++;
            rtcat__ws(j);
            if (j->p >= j->end)
                return -1;
            if (*j->p == ',') {
                j->p++;
                continue;
            }
            if (*j->p == ']') {
                j->p++;
                return 0;
            }
            return -1;
        }
    }
    if (strcmp(key, "entries") != 0)
        return rtcat__skip(j, depth);
    if (t->saw_entries)
        return -1;
    t->saw_entries = 1;
    rtcat__ws(j);
    if (j->p >= j->end || *j->p != '[')
        return -1;
    j->p++;
    rtcat__ws(j);
    if (j->p < j->end && *j->p == ']') {
        j->p++;
        return 0;
    }
    for (;;) {
        /* The entry buffer is large (two names): heap, not stack. */
        rtcat__jentry *je = (rtcat__jentry *)calloc(1, sizeof *je);
        if (!je) {
            t->err = RTCAT_SHM_ENOMEM;
            return -1;
        }
        int r = rtcat__object(j, depth + 1, rtcat__entry_member, je);
        if (r == 0)
            r = rtcat__add_entry(t, je);
        free(je);
        if (r)
            return -1;
        rtcat__ws(j);
        if (j->p >= j->end)
            return -1;
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == ']') {
            j->p++;
            return 0;
        }
        return -1;
    }
}

static uint64_t rtcat__fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int rtcat__parse_layout(rtcat_shm *s) {
    const uint8_t *json = s->base + s->layout_offset;
    if (rtcat__fnv1a64(json, s->layout_len) != s->layout_hash)
        return RTCAT_SHM_ELAYOUT;
    rtcat__js j = {(const char *)json, (const char *)json + s->layout_len};
    rtcat__jtop t;
    memset(&t, 0, sizeof t);
    t.s = s;
    if (rtcat__object(&j, 0, rtcat__top_member, &t))
        return t.err ? t.err : RTCAT_SHM_ELAYOUT;
    rtcat__ws(&j);
    if (j.p != j.end || !t.saw_entries || !t.saw_schema || t.saw_sizes != 3 ||
        !t.saw_subdevices || t.subdevices != s->subdevices ||
        t.input_bytes != s->input_bytes || t.output_bytes != s->output_bytes)
        return RTCAT_SHM_ELAYOUT;
    /* Names from offsets to pointers; output rows in layout order; rows must match the table. */
    uint32_t row = 0;
    for (size_t i = 0; i < s->n_entries; i++) {
        rtcat_shm_entry *e = &s->entries[i];
        e->name = s->names + (uintptr_t)e->name;
        e->short_name = s->names + (uintptr_t)e->short_name;
        if (!e->is_output)
            continue;
        if (row >= s->output_entries)
            return RTCAT_SHM_ELAYOUT;
        const uint8_t *r = s->base + s->entries_offset + (size_t)row * RTCAT__ENTRY_BYTES;
        uint16_t bits;
        memcpy(&bits, r + 4, 2);
        if (rtcat__u32(r) != e->bit_offset || bits != e->bits)
            return RTCAT_SHM_ELAYOUT;
        e->row = (int32_t)row++;
    }
    if (row != s->output_entries)
        return RTCAT_SHM_ELAYOUT;
    return RTCAT_SHM_OK;
}

/* Header checks: everything the client later dereferences lies inside the object. */
static int rtcat__check_header(rtcat_shm *s) {
    const uint8_t *h = s->base;
    if (s->size < RTCAT__HEADER_BYTES)
        return RTCAT_SHM_ESHORT;
    if (memcmp(h + RTCAT__H_MAGIC, "RTCATPI\0", 8) != 0)
        return RTCAT_SHM_EMAGIC;
    if (rtcat__u32(h + RTCAT__H_ABI) != RTCAT_SHM_ABI_VERSION)
        return RTCAT_SHM_EABI;
    if (rtcat__u32(h + RTCAT__H_HEADER_BYTES) != RTCAT__HEADER_BYTES)
        return RTCAT_SHM_EHEADER;
    uint64_t object_bytes = rtcat__u64(h + RTCAT__H_OBJECT_BYTES);
    if (object_bytes > s->size)
        return RTCAT_SHM_ESHORT;
    s->layout_hash = rtcat__u64(h + RTCAT__H_LAYOUT_HASH);
    s->generation = rtcat__u32(h + RTCAT__H_GENERATION);
    s->period_ns = rtcat__u64(h + RTCAT__H_PERIOD);
    s->subdevices = rtcat__u32(h + RTCAT__H_SUBDEVICES);
    s->input_bytes = rtcat__u32(h + RTCAT__H_INPUT_BYTES);
    s->output_bytes = rtcat__u32(h + RTCAT__H_OUTPUT_BYTES);
    s->output_entries = rtcat__u32(h + RTCAT__H_OUTPUT_ENTRIES);
    s->layout_offset = rtcat__u32(h + RTCAT__H_LAYOUT_OFFSET);
    s->layout_len = rtcat__u32(h + RTCAT__H_LAYOUT_LEN);
    s->entries_offset = rtcat__u32(h + RTCAT__H_ENTRIES_OFFSET);
    s->writers_offset = rtcat__u32(h + RTCAT__H_WRITERS_OFFSET);
    s->max_writers = rtcat__u32(h + RTCAT__H_MAX_WRITERS);
    s->writer_bytes = rtcat__u32(h + RTCAT__H_WRITER_BYTES);
    s->snapshot_offset = rtcat__u32(h + RTCAT__H_SNAPSHOT_OFFSET);
    s->snapshot_bytes = rtcat__u32(h + RTCAT__H_SNAPSHOT_BYTES);
    s->master_pid = rtcat__u32(h + RTCAT__H_MASTER_PID);
    s->writer_timeout_cycles = rtcat__u64(h + RTCAT__H_WRITER_TIMEOUT);
    /* From here on only object_bytes counts (the mapping may be page-rounded beyond it). */
    uint64_t size = object_bytes;
    if (rtcat__u32(h + RTCAT__H_ENTRY_BYTES) != RTCAT__ENTRY_BYTES)
        return RTCAT_SHM_EHEADER;
    /* Section offsets: aligned (the atomics in them must be), after the header, inside. */
    if (s->entries_offset % 8 || s->writers_offset % 8 || s->snapshot_offset % 8 ||
        s->writer_bytes % 8)
        return RTCAT_SHM_EHEADER;
    if (s->layout_offset < RTCAT__HEADER_BYTES || s->entries_offset < RTCAT__HEADER_BYTES ||
        s->writers_offset < RTCAT__HEADER_BYTES || s->snapshot_offset < RTCAT__HEADER_BYTES)
        return RTCAT_SHM_EHEADER;
    if (!rtcat__within(s->layout_offset, s->layout_len, size) ||
        !rtcat__within(s->entries_offset, (uint64_t)s->output_entries * RTCAT__ENTRY_BYTES, size) ||
        !rtcat__within(s->writers_offset, (uint64_t)s->max_writers * s->writer_bytes, size) ||
        !rtcat__within(s->snapshot_offset, s->snapshot_bytes, size))
        return RTCAT_SHM_ESHORT;
    if (s->max_writers > 0 && s->writer_bytes < RTCAT__W_STAGED + rtcat__pad8(s->output_bytes))
        return RTCAT_SHM_EHEADER;
    /* In u64: the u32 fields cannot overflow it, and end <= snapshot_bytes (a u32) keeps every
     * sub-offset, and every later index, inside the snapshot. */
    uint64_t inputs_off = RTCAT__S_DATA + rtcat__pad8(s->subdevices);
    uint64_t outputs_off = inputs_off + rtcat__pad8(s->input_bytes);
    uint64_t end = outputs_off + rtcat__pad8(s->output_bytes);
    if (end > s->snapshot_bytes)
        return RTCAT_SHM_EHEADER;
    s->valid_off = RTCAT__S_DATA;
    s->inputs_off = (uint32_t)inputs_off;
    s->outputs_off = (uint32_t)outputs_off;
    return RTCAT_SHM_OK;
}

/* ---- the handout: one request on the master's control socket ---- */

/* What a reply says (the fields the client needs). */
typedef struct {
    int ok, saw_ok;
    uint64_t slot, bytes, generation;
    int declared;
    char error[256];
} rtcat__reply;

static int rtcat__data_member(rtcat__js *j, const char *key, void *ctx, int depth) {
    rtcat__reply *r = (rtcat__reply *)ctx;
    if (strcmp(key, "slot") == 0)
        return rtcat__uint(j, 0xffffffffu, &r->slot);
    if (strcmp(key, "bytes") == 0)
        return rtcat__uint(j, (uint64_t)1 << 40, &r->bytes);
    if (strcmp(key, "generation") == 0)
        return rtcat__uint(j, 0xffffffffu, &r->generation);
    if (strcmp(key, "declared") == 0) {
        rtcat__ws(j);
        r->declared = j->p < j->end && *j->p == 't';
        return rtcat__skip(j, depth);
    }
    return rtcat__skip(j, depth);
}

static int rtcat__reply_member(rtcat__js *j, const char *key, void *ctx, int depth) {
    rtcat__reply *r = (rtcat__reply *)ctx;
    if (strcmp(key, "ok") == 0) {
        rtcat__ws(j);
        r->saw_ok = 1;
        r->ok = j->p < j->end && *j->p == 't';
        return rtcat__skip(j, depth);
    }
    if (strcmp(key, "data") == 0) {
        rtcat__ws(j);
        if (j->p < j->end && *j->p == '{')
            return rtcat__object(j, depth, rtcat__data_member, r);
        return rtcat__skip(j, depth);
    }
    if (strcmp(key, "error") == 0) {
        const char *start = j->p;
        if (rtcat__str(j, r->error, sizeof r->error) == 0)
            return 0;
        j->p = start; /* longer than the buffer: keep a prefix-less note, skip it */
        snprintf(r->error, sizeof r->error, "(message too long)");
        return rtcat__skip(j, depth);
    }
    return rtcat__skip(j, depth);
}

/* Send `req` (one JSON line, '\n' included) to the master at s->socket after checking the peer's
 * uid; parse the reply into *r and return the descriptor passed with it in *fd (or -1). */
static int rtcat__ask(rtcat_shm *s, const char *req, rtcat__reply *r, int *fd) {
    struct sockaddr_un a;
    char buf[4096];
    size_t len = 0;
    int err = RTCAT_SHM_OK;
    *fd = -1;
    memset(r, 0, sizeof *r);
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (strlen(s->socket) >= sizeof a.sun_path)
        return RTCAT_SHM_EINVAL;
    memcpy(a.sun_path, s->socket, strlen(s->socket));
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0) {
        s->last_errno = errno;
        return RTCAT_SHM_ESYS;
    }
    struct timeval tv = {10, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(c, (struct sockaddr *)&a, sizeof a) != 0) {
        s->last_errno = errno;
        err = errno == ENOENT || errno == ECONNREFUSED ? RTCAT_SHM_ENOENT
              : errno == EACCES                        ? RTCAT_SHM_EACCES
                                                       : RTCAT_SHM_ESYS;
        goto out;
    }
    /* struct ucred (unix(7)): pid, uid, gid; declared by glibc only with _GNU_SOURCE. */
    struct {
        int32_t pid;
        uint32_t uid, gid;
    } cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cl != sizeof cred) {
        s->last_errno = errno;
        err = RTCAT_SHM_ESYS;
        goto out;
    }
    if (cred.uid != s->master_uid) {
        err = RTCAT_SHM_ENOTMASTER;
        goto out;
    }
    size_t n = strlen(req);
    for (size_t done = 0; done < n;) {
        ssize_t w = send(c, req + done, n - done, MSG_NOSIGNAL);
        if (w <= 0) {
            s->last_errno = errno;
            err = RTCAT_SHM_ESYS;
            goto out;
        }
        done += (size_t)w;
    }
    while (!memchr(buf, '\n', len)) {
        if (len >= sizeof buf) {
            err = RTCAT_SHM_EPROTO;
            goto out;
        }
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(4 * sizeof(int))];
        } cbuf;
        struct iovec iov = {buf + len, sizeof buf - len};
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = cbuf.b;
        m.msg_controllen = sizeof cbuf.b;
        ssize_t got = recvmsg(c, &m, MSG_CMSG_CLOEXEC);
        if (got < 0) {
            s->last_errno = errno;
            err = RTCAT_SHM_ESYS;
            goto out;
        }
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
            if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int f;
                memcpy(&f, CMSG_DATA(h) + i * sizeof(int), sizeof f);
                if (*fd < 0)
                    *fd = f;
                else
                    close(f); /* one object per reply: anything more is closed */
            }
        }
        if (got == 0) {
            err = RTCAT_SHM_EPROTO;
            goto out;
        }
        len += (size_t)got;
    }
    {
        rtcat__js j = {buf, (const char *)memchr(buf, '\n', len)};
        if (rtcat__object(&j, 0, rtcat__reply_member, r) || !r->saw_ok) {
            err = RTCAT_SHM_EPROTO;
            goto out;
        }
    }
    if (!r->ok) {
        snprintf(s->last_error, sizeof s->last_error, "%s", r->error);
        err = RTCAT_SHM_EREFUSED;
    }
out:
    close(c);
    if (err && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    return err;
}

/* The descriptor carries at least `seals` and is a regular (memory) file of `*size` bytes. */
static int rtcat__check_fd(rtcat_shm *s, int fd, int seals, size_t *size) {
    struct stat st;
    int got = fcntl(fd, F_GET_SEALS);
    if (got < 0 || (got & seals) != seals)
        return RTCAT_SHM_EPROTO;
    if (fstat(fd, &st) != 0) {
        s->last_errno = errno;
        return RTCAT_SHM_ESYS;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uint64_t)st.st_size > SIZE_MAX / 2)
        return RTCAT_SHM_EPROTO;
    *size = (size_t)st.st_size;
    return RTCAT_SHM_OK;
}

int rtcat_shm_attach(rtcat_shm *s, const char *socket_path) {
    return rtcat_shm_attach_owned_by(s, socket_path, (uint32_t)geteuid());
}

int rtcat_shm_attach_owned_by(rtcat_shm *s, const char *socket_path, uint32_t master_uid) {
    rtcat__reply r;
    int err;
    if (!s)
        return RTCAT_SHM_EINVAL;
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (!socket_path || !socket_path[0] || strlen(socket_path) >= sizeof s->socket)
        return RTCAT_SHM_EINVAL;
    memcpy(s->socket, socket_path, strlen(socket_path));
    s->master_uid = master_uid;
    err = rtcat__ask(s, "{\"cmd\":\"shm_image\"}\n", &r, &s->fd);
    if (err)
        goto fail;
    if (s->fd < 0) {
        err = RTCAT_SHM_EPROTO;
        goto fail;
    }
    err = rtcat__check_fd(s, s->fd,
                          RTCAT__SEAL_SEAL | RTCAT__SEAL_SHRINK | RTCAT__SEAL_GROW |
                              RTCAT__SEAL_FUTURE_WRITE,
                          &s->size);
    if (err)
        goto fail;
    if (s->size < RTCAT__HEADER_BYTES) {
        err = RTCAT_SHM_ESHORT;
        goto fail;
    }
    void *m = mmap(NULL, s->size, PROT_READ, MAP_SHARED, s->fd, 0);
    if (m == MAP_FAILED) {
        s->last_errno = errno;
        s->size = 0;
        err = RTCAT_SHM_ESYS;
        goto fail;
    }
    s->base = (uint8_t *)m;
    /* The layout is complete only once the master set LIVE (or later states). */
    uint32_t state = __atomic_load_n(rtcat__a32(s, RTCAT__H_STATE), __ATOMIC_ACQUIRE);
    err = rtcat__check_header(s);
    if (err)
        goto fail;
    if (state == RTCAT_SHM_INIT) {
        err = RTCAT_SHM_ENOTLIVE;
        goto fail;
    }
    if (state == RTCAT_SHM_REPLACED) {
        err = RTCAT_SHM_EREPLACED;
        goto fail;
    }
    err = rtcat__parse_layout(s);
    if (err)
        goto fail;
    return RTCAT_SHM_OK;
fail: {
    char keep[sizeof s->last_error];
    memcpy(keep, s->last_error, sizeof keep);
    rtcat_shm_detach(s);
    memcpy(s->last_error, keep, sizeof keep);
    return err;
}
}

void rtcat_shm_detach(rtcat_shm *s) {
    if (!s)
        return;
    if (s->base)
        munmap(s->base, s->size);
    if (s->fd >= 0)
        close(s->fd);
    free(s->entries);
    free(s->names);
    int e = s->last_errno;
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->last_errno = e;
}

int rtcat_shm_state(const rtcat_shm *s) {
    if (!s || !s->base)
        return RTCAT_SHM_STOPPED;
    uint32_t st = __atomic_load_n(rtcat__a32(s, RTCAT__H_STATE), __ATOMIC_ACQUIRE);
    if (__atomic_load_n(rtcat__a32(s, RTCAT__H_GENERATION), __ATOMIC_RELAXED) != s->generation)
        return RTCAT_SHM_REPLACED;
    return st <= RTCAT_SHM_STOPPED ? (int)st : RTCAT_SHM_REPLACED;
}

const rtcat_shm_entry *rtcat_shm_find(const rtcat_shm *s, const char *name) {
    if (!s || !name)
        return NULL;
    for (size_t i = 0; i < s->n_entries; i++)
        if (strcmp(s->entries[i].name, name) == 0)
            return &s->entries[i];
    /* "POSITION:NAME" when it names exactly one entry of that subdevice (FORMAT.md). */
    const char *colon = strchr(name, ':');
    if (!colon)
        return NULL;
    size_t plen = (size_t)(colon - name) + 1;
    const rtcat_shm_entry *found = NULL;
    for (size_t i = 0; i < s->n_entries; i++) {
        const rtcat_shm_entry *e = &s->entries[i];
        if (strncmp(e->name, name, plen) == 0 && strcmp(e->short_name, colon + 1) == 0) {
            if (found)
                return NULL; /* ambiguous: name it with its PDO */
            found = e;
        }
    }
    return found;
}

int rtcat_shm_snapshot_init(const rtcat_shm *s, rtcat_shm_snapshot *snap) {
    if (!s || !snap || !s->base)
        return RTCAT_SHM_EINVAL;
    memset(snap, 0, sizeof *snap);
    size_t n = s->snapshot_bytes - RTCAT__S_DATA;
    snap->buf = calloc(1, n ? n : 8);
    if (!snap->buf)
        return RTCAT_SHM_ENOMEM;
    uint8_t *b = (uint8_t *)snap->buf;
    snap->subdevices = s->subdevices;
    snap->input_bytes = s->input_bytes;
    snap->output_bytes = s->output_bytes;
    snap->valid = b;
    snap->inputs = b + (s->inputs_off - s->valid_off);
    snap->outputs = b + (s->outputs_off - s->valid_off);
    return RTCAT_SHM_OK;
}

void rtcat_shm_snapshot_free(rtcat_shm_snapshot *snap) {
    if (!snap)
        return;
    free(snap->buf);
    memset(snap, 0, sizeof *snap);
}

/* Relaxed word copy of a racing region (8-aligned, length a multiple of 8). */
static void rtcat__copy_relaxed(uint8_t *dst, const uint8_t *src, size_t n) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v = __atomic_load_n((const uint64_t *)(const void *)(src + i), __ATOMIC_RELAXED);
        memcpy(dst + i, &v, 8);
    }
}

int rtcat_shm_read(const rtcat_shm *s, rtcat_shm_snapshot *snap) {
    if (!s || !s->base || !snap || !snap->buf || snap->input_bytes != s->input_bytes ||
        snap->output_bytes != s->output_bytes || snap->subdevices != s->subdevices)
        return RTCAT_SHM_EINVAL;
    const uint8_t *sn = s->base + s->snapshot_offset;
    uint64_t *seqp = rtcat__a64(s, s->snapshot_offset);
    size_t data = s->outputs_off + rtcat__pad8(s->output_bytes) - s->valid_off;
    for (int tries = 0; tries < RTCAT__READ_TRIES; tries++) {
        int st = rtcat_shm_state(s);
        if (st == RTCAT_SHM_REPLACED)
            return RTCAT_SHM_EREPLACED;
        if (st == RTCAT_SHM_INIT)
            return RTCAT_SHM_ENOTLIVE;
        uint64_t s1 = __atomic_load_n(seqp, __ATOMIC_ACQUIRE);
        if (s1 & 1)
            continue;
        uint64_t hdr[5];
        rtcat__copy_relaxed((uint8_t *)hdr, sn + 8, 40);
        rtcat__copy_relaxed((uint8_t *)snap->buf, sn + s->valid_off, data);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        uint64_t s2 = __atomic_load_n(seqp, __ATOMIC_RELAXED);
        if (s1 != s2)
            continue;
        if (s1 == 0)
            return RTCAT_SHM_ENOTLIVE; /* nothing published yet */
        snap->seq = s1;
        snap->cycle = hdr[0];
        snap->deadline_ns = hdr[1];
        snap->wake_ns = hdr[2];
        snap->unix_ns = hdr[3];
        snap->wkc = (uint16_t)(hdr[4] & 0xffff);
        snap->expected_wkc = (uint16_t)(hdr[4] >> 16 & 0xffff);
        snap->frames_lost = (uint8_t)(hdr[4] >> 32 & 0xff);
        return RTCAT_SHM_OK;
    }
    return RTCAT_SHM_EBUSY;
}

/* Little-endian bit field: image bit i is bit i%8 of byte i/8 (ETG.1000.4 process data). */
static uint64_t rtcat__get_bits(const uint8_t *img, uint32_t bit_offset, unsigned bits) {
    uint64_t v = 0;
    for (unsigned i = 0; i < bits;) {
        uint32_t b = bit_offset + i;
        unsigned shift = b % 8, take = 8 - shift;
        if (take > bits - i)
            take = bits - i;
        uint64_t chunk = (uint64_t)(img[b / 8] >> shift) & ((1u << take) - 1u);
        v |= chunk << i;
        i += take;
    }
    return v;
}

static void rtcat__set_bits(uint8_t *img, uint32_t bit_offset, unsigned bits, uint64_t v) {
    for (unsigned i = 0; i < bits;) {
        uint32_t b = bit_offset + i;
        unsigned shift = b % 8, take = 8 - shift;
        if (take > bits - i)
            take = bits - i;
        uint8_t mask = (uint8_t)(((1u << take) - 1u) << shift);
        uint8_t *p = img + b / 8;
        uint8_t old = __atomic_load_n(p, __ATOMIC_RELAXED);
        uint8_t nv = (uint8_t)((old & ~mask) | ((uint8_t)((v >> i) << shift) & mask));
        __atomic_store_n(p, nv, __ATOMIC_RELAXED);
        i += take;
    }
}

uint64_t rtcat_shm_get_raw(const rtcat_shm_snapshot *snap, const rtcat_shm_entry *e) {
    if (!snap || !e || !snap->buf)
        return 0;
    uint32_t bytes = e->is_output ? snap->output_bytes : snap->input_bytes;
    if ((uint64_t)e->bit_offset + e->bits > (uint64_t)bytes * 8)
        return 0;
    return rtcat__get_bits(e->is_output ? snap->outputs : snap->inputs, e->bit_offset,
                           e->bits > 64 ? 64u : e->bits);
}

int rtcat_shm_get_bytes(const rtcat_shm_snapshot *snap, const rtcat_shm_entry *e, uint8_t *out,
                        size_t len) {
    if (!snap || !e || !snap->buf || !out)
        return RTCAT_SHM_EINVAL;
    uint32_t bytes = e->is_output ? snap->output_bytes : snap->input_bytes;
    size_t n = (e->bits + 7u) / 8u;
    if ((uint64_t)e->bit_offset + e->bits > (uint64_t)bytes * 8 || len < n)
        return RTCAT_SHM_EINVAL;
    const uint8_t *img = e->is_output ? snap->outputs : snap->inputs;
    for (size_t i = 0; i < n; i++) {
        unsigned take = e->bits - 8u * (unsigned)i < 8u ? e->bits - 8u * (unsigned)i : 8u;
        out[i] = (uint8_t)rtcat__get_bits(img, e->bit_offset + 8u * (uint32_t)i, take);
    }
    return RTCAT_SHM_OK;
}

int64_t rtcat_shm_get_int(const rtcat_shm_snapshot *snap, const rtcat_shm_entry *e) {
    uint64_t v = rtcat_shm_get_raw(snap, e);
    if (e && e->bits > 0 && e->bits < 64 && (v >> (e->bits - 1) & 1))
        v |= ~(uint64_t)0 << e->bits;
    int64_t r;
    memcpy(&r, &v, 8);
    return r;
}

double rtcat_shm_get_real(const rtcat_shm_snapshot *snap, const rtcat_shm_entry *e) {
    uint64_t v = rtcat_shm_get_raw(snap, e);
    if (e && e->bits == 32) {
        uint32_t w = (uint32_t)v;
        float f;
        memcpy(&f, &w, 4);
        return f;
    }
    if (e && e->bits == 64) {
        double d;
        memcpy(&d, &v, 8);
        return d;
    }
    return (double)v;
}

/* ---- writers ---- */

static uint32_t *rtcat__owner(const rtcat_shm *s, int32_t row) {
    return rtcat__a32(s, s->entries_offset + (size_t)row * RTCAT__ENTRY_BYTES + 8);
}

static uint16_t rtcat__row_flags(const rtcat_shm *s, int32_t row) {
    uint16_t f;
    memcpy(&f, s->base + s->entries_offset + (size_t)row * RTCAT__ENTRY_BYTES + 6, 2);
    return f;
}

/* A writer's name as a JSON string body: 1..31 bytes, printable ASCII except '"' and '\\'
 * (the master accepts any text without control characters; this client keeps it simple). */
static int rtcat__writer_name_ok(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= RTCAT__W_NAME_BYTES)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] > 0x7e || name[i] == '"' ||
            name[i] == '\\')
            return 0;
    return 1;
}

int rtcat_shm_writer_attach(rtcat_shm *s, const char *name, rtcat_shm_writer *w) {
    char req[96];
    rtcat__reply r;
    int fd = -1, err;
    if (!s || !s->base || !w || !rtcat__writer_name_ok(name))
        return RTCAT_SHM_EINVAL;
    memset(w, 0, sizeof *w);
    if (rtcat_shm_state(s) == RTCAT_SHM_REPLACED)
        return RTCAT_SHM_EREPLACED;
    snprintf(req, sizeof req, "{\"cmd\":\"shm_writer\",\"name\":\"%s\"}\n", name);
    err = rtcat__ask(s, req, &r, &fd);
    if (err == RTCAT_SHM_EREFUSED && strstr(s->last_error, "slot"))
        return RTCAT_SHM_ENOSLOT;
    if (err)
        return err;
    size_t size = 0;
    if (fd < 0)
        return RTCAT_SHM_EPROTO;
    err = rtcat__check_fd(s, fd, RTCAT__SEAL_SEAL | RTCAT__SEAL_SHRINK | RTCAT__SEAL_GROW, &size);
    if (!err && r.generation != s->generation)
        err = RTCAT_SHM_EREPLACED;
    if (!err && (r.slot >= s->max_writers || size != r.bytes ||
                 size < RTCAT__W_STAGED + rtcat__pad8(s->output_bytes)))
        err = RTCAT_SHM_EPROTO;
    void *m = MAP_FAILED;
    if (!err) {
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            s->last_errno = errno;
            err = RTCAT_SHM_ESYS;
        }
    }
    close(fd); /* the mapping keeps the object */
    if (err)
        return err;
    w->owned = (uint8_t *)calloc(s->output_entries ? s->output_entries : 1, 1);
    if (!w->owned) {
        munmap(m, size);
        return RTCAT_SHM_ENOMEM;
    }
    w->shm = s;
    w->base = (uint8_t *)m;
    w->size = size;
    w->slot = (uint32_t)r.slot;
    w->declared = r.declared;
    /* Entries the master's configuration declares for this writer: owned from the start. */
    for (uint32_t row = 0; row < s->output_entries; row++)
        if ((rtcat__row_flags(s, (int32_t)row) & 1) &&
            __atomic_load_n(rtcat__owner(s, (int32_t)row), __ATOMIC_RELAXED) == w->slot + 1)
            w->owned[row] = 1;
    w->seq = 0; /* nothing staged yet: the master takes nothing before the first commit */
    __atomic_fetch_add((uint64_t *)(void *)(w->base + RTCAT__W_HEARTBEAT), 1, __ATOMIC_RELAXED);
    return RTCAT_SHM_OK;
}

static int rtcat__check_out(const rtcat_shm_writer *w, const rtcat_shm_entry *e) {
    if (!w || !w->shm || !w->shm->base || !w->base || !e)
        return RTCAT_SHM_EINVAL;
    if (!e->is_output || e->row < 0 || (uint32_t)e->row >= w->shm->output_entries)
        return RTCAT_SHM_EDIR;
    return RTCAT_SHM_OK;
}

static int rtcat__claim_req(rtcat_shm_writer *w, const char *cmd, int32_t row) {
    char req[96];
    rtcat__reply r;
    int fd = -1;
    snprintf(req, sizeof req, "{\"cmd\":\"%s\",\"slot\":%u,\"row\":%d}\n", cmd, w->slot, row);
    int err = rtcat__ask(w->shm, req, &r, &fd);
    if (fd >= 0)
        close(fd);
    if (err == RTCAT_SHM_EREFUSED) {
        if (strstr(w->shm->last_error, "driven by the master"))
            return RTCAT_SHM_EMASTER;
        if (strstr(w->shm->last_error, "owned by") || strstr(w->shm->last_error, "declared for"))
            return RTCAT_SHM_EOWNED;
    }
    return err;
}

int rtcat_shm_claim(rtcat_shm_writer *w, const rtcat_shm_entry *e) {
    int err = rtcat__check_out(w, e);
    if (err)
        return err;
    rtcat_shm *s = w->shm;
    if (w->owned[e->row])
        return RTCAT_SHM_OK; /* declared for this writer, or claimed before */
    if (rtcat__row_flags(s, e->row) & RTCAT__FLAG_MASTER)
        return RTCAT_SHM_EMASTER;
    /* Stage the entry's current output value first, so that claiming does not change it. */
    rtcat_shm_snapshot snap;
    if (rtcat_shm_snapshot_init(s, &snap) == RTCAT_SHM_OK) {
        if (rtcat_shm_read(s, &snap) == RTCAT_SHM_OK) {
            w->owned[e->row] = 1; /* for the staging write only */
            rtcat_shm_write_raw(w, e, rtcat_shm_get_raw(&snap, e));
            w->owned[e->row] = 0;
        }
        rtcat_shm_snapshot_free(&snap);
    }
    err = rtcat__claim_req(w, "shm_claim", e->row);
    if (!err)
        w->owned[e->row] = 1;
    return err;
}

int rtcat_shm_release(rtcat_shm_writer *w, const rtcat_shm_entry *e) {
    int err = rtcat__check_out(w, e);
    if (err)
        return err;
    if (!w->owned[e->row])
        return RTCAT_SHM_ENOTOWNED;
    err = rtcat__claim_req(w, "shm_release", e->row);
    if (!err && !(rtcat__row_flags(w->shm, e->row) & 1))
        w->owned[e->row] = 0;
    return err;
}

void rtcat_shm_write_begin(rtcat_shm_writer *w) {
    if (!w || !w->base)
        return;
    uint64_t *seq = (uint64_t *)(void *)(w->base + RTCAT__W_SEQ);
    w->seq |= 1;
    __atomic_store_n(seq, w->seq, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

void rtcat_shm_write_commit(rtcat_shm_writer *w) {
    if (!w || !w->base)
        return;
    uint64_t *seq = (uint64_t *)(void *)(w->base + RTCAT__W_SEQ);
    w->seq = (w->seq | 1) + 1;
    __atomic_store_n(seq, w->seq, __ATOMIC_RELEASE);
}

int rtcat_shm_set_raw(rtcat_shm_writer *w, const rtcat_shm_entry *e, uint64_t raw) {
    int err = rtcat__check_out(w, e);
    if (err)
        return err;
    if (!w->owned[e->row])
        return RTCAT_SHM_ENOTOWNED;
    if ((uint64_t)e->bit_offset + e->bits > (uint64_t)w->shm->output_bytes * 8 || e->bits > 64)
        return RTCAT_SHM_EINVAL;
    rtcat__set_bits(w->base + RTCAT__W_STAGED, e->bit_offset, e->bits, raw);
    return RTCAT_SHM_OK;
}

int rtcat_shm_set_bytes(rtcat_shm_writer *w, const rtcat_shm_entry *e, const uint8_t *in,
                        size_t len) {
    int err = rtcat__check_out(w, e);
    if (err)
        return err;
    if (!w->owned[e->row])
        return RTCAT_SHM_ENOTOWNED;
    size_t n = (e->bits + 7u) / 8u;
    if (!in || len < n || (uint64_t)e->bit_offset + e->bits > (uint64_t)w->shm->output_bytes * 8)
        return RTCAT_SHM_EINVAL;
    uint8_t *staged = w->base + RTCAT__W_STAGED;
    for (size_t i = 0; i < n; i++) {
        unsigned take = e->bits - 8u * (unsigned)i < 8u ? e->bits - 8u * (unsigned)i : 8u;
        rtcat__set_bits(staged, e->bit_offset + 8u * (uint32_t)i, take, in[i]);
    }
    return RTCAT_SHM_OK;
}

int rtcat_shm_set_real(rtcat_shm_writer *w, const rtcat_shm_entry *e, double v) {
    if (e && e->bits == 32) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        return rtcat_shm_set_raw(w, e, u);
    }
    if (e && e->bits == 64) {
        uint64_t u;
        memcpy(&u, &v, 8);
        return rtcat_shm_set_raw(w, e, u);
    }
    return RTCAT_SHM_EINVAL;
}

int rtcat_shm_write_raw(rtcat_shm_writer *w, const rtcat_shm_entry *e, uint64_t raw) {
    int err = rtcat__check_out(w, e);
    if (err)
        return err;
    rtcat_shm_write_begin(w);
    err = rtcat_shm_set_raw(w, e, raw);
    rtcat_shm_write_commit(w);
    return err;
}

int rtcat_shm_heartbeat(rtcat_shm_writer *w) {
    if (!w || !w->shm || !w->shm->base || !w->base)
        return RTCAT_SHM_EINVAL;
    __atomic_fetch_add((uint64_t *)(void *)(w->base + RTCAT__W_HEARTBEAT), 1, __ATOMIC_RELAXED);
    uint32_t state =
        __atomic_load_n((uint32_t *)(void *)(w->base + RTCAT__W_STATE), __ATOMIC_ACQUIRE);
    if (rtcat_shm_state(w->shm) == RTCAT_SHM_REPLACED)
        return RTCAT_SHM_EREPLACED;
    if (state != RTCAT__W_ATTACHED)
        return RTCAT_SHM_ESTALE;
    return RTCAT_SHM_OK;
}

uint64_t rtcat_shm_applied_cycle(const rtcat_shm_writer *w) {
    if (!w || !w->base)
        return 0;
    return __atomic_load_n((uint64_t *)(void *)(w->base + RTCAT__W_APPLIED), __ATOMIC_ACQUIRE);
}

void rtcat_shm_writer_detach(rtcat_shm_writer *w) {
    if (!w || !w->base)
        return;
    /* FREE in the writer's own object: the master says so, ends the claims and never reads the
     * object again. */
    __atomic_store_n((uint32_t *)(void *)(w->base + RTCAT__W_STATE), RTCAT__W_FREE,
                     __ATOMIC_RELEASE);
    munmap(w->base, w->size);
    free(w->owned);
    memset(w, 0, sizeof *w);
}

#endif /* RTCAT_SHM_IMPLEMENTED */
#endif /* RTCAT_SHM_IMPLEMENTATION */
