/* Example client of rtcat's shared-memory process image: attaches as a writer, claims an
 * output, writes a counter into it, and prints the input that echoes it.
 *
 *   cc -std=c11 -O2 -o rtcat-shm-example app/clients/c/example.c
 *   ./rtcat-shm-example SOCKET [OUTPUT [INPUT [LOOPS]]]
 *
 * SOCKET is the master's control socket. Defaults fit the simulated reference segment
 * (`rtcat bench --sim --shm NAME --control SOCKET`), whose
 * subdevices echo output byte k into input byte k+4 XOR 0x5a: OUTPUT "0:Outputs.Output 1",
 * INPUT "0:Inputs.Input 2", 20 loops. Each printed line is
 *   cycle=C wrote=V read=R
 * where R is the input of a snapshot two cycles after the first one showing V in the outputs.
 * RTCAT_MASTER_UID=UID in the environment: the uid the master runs as (default: ours); a
 * socket whose peer runs as another uid is refused. Exit 0, 1 on a runtime error (no master,
 * refused, ...), 2 on a usage error.
 */
#define _POSIX_C_SOURCE 200809L
#define RTCAT_SHM_IMPLEMENTATION
#include "rtcat_shm.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
}

static int fail(const char *what, int err) {
    fprintf(stderr, "rtcat-shm-example: %s: %s\n", what, rtcat_shm_strerror(err));
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 5 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s SOCKET [OUTPUT [INPUT [LOOPS]]]\n", argv[0]);
        return 2;
    }
    const char *name = argv[1];
    const char *out_name = argc > 2 ? argv[2] : "0:Outputs.Output 1";
    const char *in_name = argc > 3 ? argv[3] : "0:Inputs.Input 2";
    char *end = NULL;
    long loops = argc > 4 ? strtol(argv[4], &end, 10) : 20;
    if ((end && *end) || loops < 1 || loops > 1000000) {
        fprintf(stderr, "rtcat-shm-example: LOOPS must be 1..1000000, not '%s'\n", argv[4]);
        return 2;
    }

    rtcat_shm shm;
    const char *uid = getenv("RTCAT_MASTER_UID");
    int err = uid && *uid ? rtcat_shm_attach_owned_by(&shm, name, (uint32_t)strtoul(uid, NULL, 10))
                          : rtcat_shm_attach(&shm, name);
    if (err)
        return fail(name, err);
    const rtcat_shm_entry *out = rtcat_shm_find(&shm, out_name);
    const rtcat_shm_entry *in = rtcat_shm_find(&shm, in_name);
    if (!out || !in) {
        fprintf(stderr, "rtcat-shm-example: no entry '%s' in %s\n", !out ? out_name : in_name, name);
        rtcat_shm_detach(&shm);
        return 2;
    }
    rtcat_shm_writer w;
    rtcat_shm_snapshot snap;
    if ((err = rtcat_shm_writer_attach(&shm, "c-example", &w)) != 0) {
        rtcat_shm_detach(&shm);
        return fail("writer attach", err);
    }
    if ((err = rtcat_shm_claim(&w, out)) != 0 || (err = rtcat_shm_snapshot_init(&shm, &snap)) != 0) {
        rtcat_shm_writer_detach(&w);
        rtcat_shm_detach(&shm);
        return fail(out_name, err);
    }
    uint64_t period = shm.period_ns ? shm.period_ns : 1000000u;
    int rc = 0;
    for (long i = 1; i <= loops && rc == 0; i++) {
        uint64_t value = (uint64_t)i * 0x01010101u & (out->bits >= 64 ? UINT64_MAX : ((uint64_t)1 << out->bits) - 1);
        if ((err = rtcat_shm_write_raw(&w, out, value)) != 0) {
            rc = fail("write", err);
            break;
        }
        /* Wait (bounded: 1000 periods) for the first snapshot showing the value in the outputs,
         * then for one two cycles later, whose inputs hold its echo. */
        uint64_t shown = 0;
        int seen = 0;
        for (int t = 0; t < 1000 && !seen; t++) {
            err = rtcat_shm_heartbeat(&w);
            if (err && err != RTCAT_SHM_ESTALE) {
                rc = fail("heartbeat", err);
                break;
            }
            err = rtcat_shm_read(&shm, &snap);
            if (err == RTCAT_SHM_EBUSY || err == RTCAT_SHM_ENOTLIVE) {
                sleep_ns(period);
                continue;
            }
            if (err) {
                rc = fail("read", err);
                break;
            }
            /* The snapshot of cycle T shows the outputs taken in T, sent with exchange T+1,
             * where the subdevice computes its inputs from them, which the master reads in
             * exchange T+2 (ecsim::pdi). applied_cycle cannot tell which write was taken. */
            if (!shown && rtcat_shm_get_raw(&snap, out) == value)
                shown = snap.cycle;
            if (shown && snap.cycle >= shown + 2) {
                printf("cycle=%" PRIu64 " wrote=%" PRIu64 " read=%" PRIu64 "\n", snap.cycle, value,
                       rtcat_shm_get_raw(&snap, in));
                fflush(stdout);
                seen = 1;
            } else {
                sleep_ns(period);
            }
        }
        if (!seen && rc == 0)
            rc = fail("waiting for the master to apply the output", RTCAT_SHM_EBUSY);
    }
    rtcat_shm_snapshot_free(&snap);
    rtcat_shm_writer_detach(&w);
    rtcat_shm_detach(&shm);
    return rc;
}
