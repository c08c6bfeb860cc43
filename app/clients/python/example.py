#!/usr/bin/env python3
"""Example client of rtcat's shared-memory process image: attaches as a writer, claims an
output, writes a counter into it, and prints the input that echoes it.

    python3 app/clients/python/example.py SOCKET [--output ENTRY] [--input ENTRY] [--loops N]

SOCKET is the master's control socket. Defaults fit the simulated reference segment
(`rtcat bench --sim --shm NAME --control SOCKET`), whose
subdevices echo output byte k into input byte k+4 XOR 0x5a. Each line printed is
``cycle=C wrote=V read=R``, R being the input of a snapshot two cycles after the first one
whose outputs show V (taken in cycle T, sent with exchange T+1, echoed in the inputs of T+2).
RTCAT_MASTER_UID=UID in the environment: the uid the master runs as (default: ours); a socket
whose peer runs as another uid is refused. Exit 0, 1 on a runtime error, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rtcat_shm  # noqa: E402 (beside this file)


def run(name: str, out_name: str, in_name: str, loops: int) -> None:
    uid = os.environ.get("RTCAT_MASTER_UID")
    with rtcat_shm.attach_live(name, master_uid=int(uid) if uid else None) as img:
        out, inp = img.entry(out_name), img.entry(in_name)
        period = max(img.period_ns, 100_000) / 1e9
        with img.writer("py-example") as w:
            w.claim(out)
            for i in range(1, loops + 1):
                value = (i * 0x01010101) & ((1 << out.bits) - 1)
                w.write({out: value})
                # The snapshot of cycle T shows the outputs taken in T, sent with exchange T+1,
                # echoed in the inputs of exchange T+2: wait for the first snapshot showing the
                # value, then for one two cycles later.
                shown = 0
                deadline = time.monotonic() + 1000 * period + 1.0
                while True:
                    w.heartbeat()
                    snap = img.read()
                    if not shown and snap.raw(out) == value:
                        shown = snap.cycle
                    if shown and snap.cycle >= shown + 2:
                        print(f"cycle={snap.cycle} wrote={value} read={snap.get(inp)}", flush=True)
                        break
                    if time.monotonic() > deadline:
                        raise rtcat_shm.ShmError("the master did not apply the output")
                    time.sleep(period)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", metavar="SOCKET")
    p.add_argument("--output", default="0:Outputs.Output 1")
    p.add_argument("--input", default="0:Inputs.Input 2")
    p.add_argument("--loops", type=int, default=20)
    args = p.parse_args()
    if not 1 <= args.loops <= 1_000_000:
        p.error("--loops must be 1..1000000")
    try:
        run(args.name, args.output, args.input, args.loops)
    except rtcat_shm.UsageError as e:
        print(f"example: {e}", file=sys.stderr)
        return 2
    except rtcat_shm.ShmError as e:
        print(f"example: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
