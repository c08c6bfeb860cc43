/* Test tool of the C client: for each NAME (a master's control socket), attach, take a snapshot
 * and print it as one JSON line in the form of `rtcat_shm.py NAME --dump` (entry name -> value by
 * data type), or `{"name": NAME, "error": CODE, "text": ...}` when attaching or reading fails. With --write, it
 * also exercises the writer path (attach, claim every output entry, write, detach) on each object,
 * which must fail cleanly on a garbage one. Exit 0 when every object was read, else 1. Run under
 * ASan/UBSan by app/rtcat/tests/shm_clients.rs against real and deliberately broken objects.
 * RTCAT_MASTER_UID in the environment: the uid the master runs as (attach refuses a socket
 * whose peer runs as another uid). */
#define _POSIX_C_SOURCE 200809L
#define RTCAT_SHM_IMPLEMENTATION
#include "../rtcat_shm.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* RTCAT_MASTER_UID=UID: attach only through a socket whose peer runs as UID (default: ours). */
static int attach(rtcat_shm *s, const char *name) {
    const char *uid = getenv("RTCAT_MASTER_UID");
    if (uid && *uid)
        return rtcat_shm_attach_owned_by(s, name, (uint32_t)strtoul(uid, NULL, 10));
    return rtcat_shm_attach(s, name);
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void value(const rtcat_shm_snapshot *snap, const rtcat_shm_entry *e) {
    uint64_t raw = rtcat_shm_get_raw(snap, e);
    if (e->bits > 64) {
        uint8_t buf[8192];
        printf("\"0x");
        if (rtcat_shm_get_bytes(snap, e, buf, sizeof buf) == RTCAT_SHM_OK)
            for (unsigned i = 0; i < (e->bits + 7u) / 8u; i++)
                printf("%02x", buf[i]);
        putchar('"');
        return;
    }
    switch (e->type) {
    case RTCAT_SHM_T_BOOL:
        if (e->bits == 1) {
            printf(raw ? "true" : "false");
            return;
        }
        break;
    case RTCAT_SHM_T_INT8:
    case RTCAT_SHM_T_INT16:
    case RTCAT_SHM_T_INT32:
    case RTCAT_SHM_T_INT64: printf("%" PRId64, rtcat_shm_get_int(snap, e)); return;
    case RTCAT_SHM_T_UNSIGNED8:
    case RTCAT_SHM_T_UNSIGNED16:
    case RTCAT_SHM_T_UNSIGNED32:
    case RTCAT_SHM_T_UNSIGNED64:
    case RTCAT_SHM_T_BITS: printf("%" PRIu64, raw); return;
    case RTCAT_SHM_T_REAL32:
    case RTCAT_SHM_T_REAL64:
        if (e->bits == 32 || e->bits == 64) {
            printf("%.17g", rtcat_shm_get_real(snap, e));
            return;
        }
        break;
    default: break;
    }
    printf("\"0x");
    for (unsigned i = 0; i < (e->bits + 7u) / 8u; i++)
        printf("%02x", (unsigned)(raw >> (8 * i) & 0xff));
    putchar('"');
}

static int probe(const char *name, int write) {
    rtcat_shm s;
    rtcat_shm_snapshot snap;
    int err = attach(&s, name);
    if (!err) {
        err = rtcat_shm_snapshot_init(&s, &snap);
        if (!err) {
            err = rtcat_shm_read(&s, &snap);
            /* A stopped master leaves its last snapshot: read it anyway. */
            if (err)
                rtcat_shm_snapshot_free(&snap);
        }
        if (err)
            rtcat_shm_detach(&s);
    }
    if (err) {
        printf("{\"name\":");
        json_str(name);
        printf(",\"error\":%d,\"text\":", err);
        json_str(rtcat_shm_strerror(err));
        printf("}\n");
        return 1;
    }
    printf("{\"cycle\":%" PRIu64 ",\"generation\":%" PRIu32 ",\"wkc\":%u,\"valid\":[", snap.cycle,
           s.generation, (unsigned)snap.wkc);
    for (uint32_t i = 0; i < snap.subdevices; i++)
        printf("%s%s", i ? "," : "", snap.valid[i] == 1 ? "true" : "false");
    for (int dir = 0; dir < 2; dir++) {
        int first = 1;
        printf(dir ? "},\"outputs\":{" : "],\"inputs\":{");
        for (size_t i = 0; i < s.n_entries; i++) {
            const rtcat_shm_entry *e = &s.entries[i];
            if (e->is_output != dir)
                continue;
            if (!first)
                putchar(',');
            first = 0;
            json_str(e->name);
            putchar(':');
            value(&snap, e);
        }
    }
    printf("}}\n");
    if (write) {
        rtcat_shm_writer w;
        if (rtcat_shm_writer_attach(&s, "probe", &w) == RTCAT_SHM_OK) {
            for (size_t i = 0; i < s.n_entries; i++)
                if (s.entries[i].is_output && rtcat_shm_claim(&w, &s.entries[i]) == RTCAT_SHM_OK)
                    rtcat_shm_write_raw(&w, &s.entries[i], 0x5555555555555555ull);
            rtcat_shm_heartbeat(&w);
            rtcat_shm_writer_detach(&w);
        }
    }
    rtcat_shm_snapshot_free(&snap);
    rtcat_shm_detach(&s);
    return 0;
}

/* --torn NAME N: snapshots in a tight loop until N distinct publications were seen (at most
 * 10 s); each must be one cycle's image. The bench
 * application writes output byte k of subdevice p as (c * 31 + p + k) mod 256 for one c per
 * cycle (app/rtcat/src/echo.rs), so a snapshot mixing two publications shows two values of c.
 * Prints `reads=N distinct=D torn=T backwards=B`; exit 1 when T or B is not 0. */
static int torn(const char *name, long n) {
    rtcat_shm s;
    rtcat_shm_snapshot snap;
    int err = attach(&s, name);
    if (err || (err = rtcat_shm_snapshot_init(&s, &snap)) != 0) {
        fprintf(stderr, "probe: %s: %s\n", name, rtcat_shm_strerror(err));
        return 1;
    }
    long torn_count = 0, backwards = 0, distinct = 0, reads = 0;
    uint64_t last_seq = 0, last_cycle = 0;
    uint32_t per = s.subdevices ? s.output_bytes / s.subdevices : 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (distinct >= n || t1.tv_sec - t0.tv_sec >= 10)
            break;
        err = rtcat_shm_read(&s, &snap);
        if (err == RTCAT_SHM_EBUSY || err == RTCAT_SHM_ENOTLIVE)
            continue;
        if (err)
            break;
        reads++;
        if (snap.seq < last_seq || snap.cycle < last_cycle)
            backwards++;
        if (snap.seq != last_seq)
            distinct++;
        last_seq = snap.seq;
        last_cycle = snap.cycle;
        if (per == 0)
            continue;
        uint8_t c31 = snap.outputs[0]; /* c * 31 of subdevice 0, byte 0 */
        for (uint32_t b = 0; b < s.output_bytes; b++) {
            uint32_t p = b / per, k = b % per;
            if (snap.outputs[b] != (uint8_t)(c31 + p + k)) {
                torn_count++;
                break;
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("reads=%ld distinct=%ld torn=%ld backwards=%ld ns_per_read=%.0f\n", reads, distinct,
           torn_count, backwards, reads ? ns / (double)reads : 0.0);
    rtcat_shm_snapshot_free(&snap);
    rtcat_shm_detach(&s);
    return torn_count || backwards || reads == 0 ? 1 : 0;
}

/* --claim NAME WRITER ENTRY VALUE: attach as WRITER, claim ENTRY, write VALUE, wait (10 s at
 * most) until a snapshot shows it; prints `declared=D slot=S` or the error; detaches. */
static int claim(const char *name, const char *writer, const char *entry, uint64_t v) {
    rtcat_shm s;
    rtcat_shm_writer w;
    rtcat_shm_snapshot snap;
    memset(&w, 0, sizeof w);
    int err = attach(&s, name);
    if (err) {
        printf("error %s\n", rtcat_shm_strerror(err));
        return 1;
    }
    const rtcat_shm_entry *e = rtcat_shm_find(&s, entry);
    if (!e || (err = rtcat_shm_writer_attach(&s, writer, &w)) != 0 ||
        (err = rtcat_shm_claim(&w, e)) != 0 || (err = rtcat_shm_write_raw(&w, e, v)) != 0 ||
        (err = rtcat_shm_snapshot_init(&s, &snap)) != 0) {
        printf("error %s\n", e ? rtcat_shm_strerror(err) : "no such entry");
        if (w.shm)
            rtcat_shm_writer_detach(&w);
        rtcat_shm_detach(&s);
        return 1;
    }
    int seen = 0;
    for (int i = 0; i < 10000 && !seen; i++) {
        struct timespec ms = {0, 1000000};
        rtcat_shm_heartbeat(&w);
        seen = rtcat_shm_read(&s, &snap) == RTCAT_SHM_OK && rtcat_shm_get_raw(&snap, e) == v;
        nanosleep(&ms, NULL);
    }
    printf("declared=%d slot=%u seen=%d\n", w.declared, (unsigned)w.slot, seen);
    rtcat_shm_snapshot_free(&snap);
    rtcat_shm_writer_detach(&w);
    rtcat_shm_detach(&s);
    return seen ? 0 : 1;
}

/* --until-replaced NAME: read until the master replaces the object (10 s at most). */
static int until_replaced(const char *name) {
    rtcat_shm s;
    rtcat_shm_snapshot snap;
    int err = attach(&s, name);
    if (err || (err = rtcat_shm_snapshot_init(&s, &snap)) != 0) {
        printf("error %s\n", rtcat_shm_strerror(err));
        return 1;
    }
    uint32_t gen = s.generation;
    for (int i = 0; i < 10000; i++) {
        struct timespec ms = {0, 1000000};
        err = rtcat_shm_read(&s, &snap);
        if (err == RTCAT_SHM_EREPLACED)
            break;
        nanosleep(&ms, NULL);
    }
    rtcat_shm_snapshot_free(&snap);
    rtcat_shm_detach(&s);
    if (err != RTCAT_SHM_EREPLACED) {
        printf("not replaced: %s\n", rtcat_shm_strerror(err));
        return 1;
    }
    /* The new object, under the same name, another generation. */
    for (int i = 0; i < 1000 && (err = attach(&s, name)) != 0; i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    if (err) {
        printf("re-attach: %s\n", rtcat_shm_strerror(err));
        return 1;
    }
    printf("replaced generation %u -> %u\n", (unsigned)gen, (unsigned)s.generation);
    rtcat_shm_detach(&s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "--claim") == 0)
        return claim(argv[2], argv[3], argv[4], strtoull(argv[5], NULL, 0));
    if (argc == 3 && strcmp(argv[1], "--until-replaced") == 0)
        return until_replaced(argv[2]);
    int rc = 0, write = 0;
    if (argc == 4 && strcmp(argv[1], "--torn") == 0)
        return torn(argv[2], strtol(argv[3], NULL, 10));
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--write") == 0) {
            write = 1;
            continue;
        }
        rc |= probe(argv[i], write);
    }
    fflush(stdout);
    return argc < 2 ? 2 : rc;
}
