#!/usr/bin/env python3
"""rtlab: a closed stdout ends `report` and `load` quietly. The read end of the pipe is closed
before the command starts, so its first write fails with EPIPE (with `| head -c 10` the table may
fit in the pipe before head exits): report dies of SIGPIPE (exit 141 as the shell counts it,
nothing on stderr), load --json - finishes with exit 0 and no panic.

Usage: ci/py/rtlab_closed_stdout.py RTLAB_BINARY CPU   (from the top of the repository)
"""

import os
import subprocess
import sys

binary, cpu = sys.argv[1], sys.argv[2]


def closed_stdout(args, cwd=None):
    r, w = os.pipe()
    os.close(r)
    p = subprocess.run([binary] + args, stdout=w, stderr=subprocess.PIPE, cwd=cwd, timeout=60)
    os.close(w)
    return p.returncode, p.stderr.decode()


rc, err = closed_stdout(["report", "stock", "rt", "bench", "cyclictest-2t.txt"], "app/rtlab/tests/fixtures")
print("report into a closed pipe: exit", rc, repr(err))
assert rc == 141 and err == "", (rc, err)
rc, err = closed_stdout(["load", "--cpus", cpu, "--cpu-hogs", "1", "--duration", "0.3", "--json", "-"])
print("load --json - into a closed pipe: exit", rc)
assert rc == 0 and "panicked" not in err, (rc, err)
