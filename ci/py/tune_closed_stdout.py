#!/usr/bin/env python3
"""tune (root): a closed stdout never panics doctor, tune plan/apply/status/restore (exit 101 or
"panicked" fails), apply and restore still finish with exit 0, and restore removes its journal.
The caller compares the knobs before and after.

Usage: ci/py/tune_closed_stdout.py RTTUNE_BINARY RT_CPU STATE.json
"""

import os
import subprocess
import sys

binary, rt, state = sys.argv[1], sys.argv[2], sys.argv[3]
groups = ["--group", "default-irq-affinity", "--group", "timer-migration"]
for args in (
    ["doctor", "--cpu", rt],
    ["tune", "plan", "--cpu", rt, "--state", state],
    ["tune", "apply", "--cpu", rt, *groups, "--state", state],
    ["tune", "status", "--cpu", rt, "--state", state],
    ["tune", "restore", "--state", state],
):
    r, w = os.pipe()
    os.close(r)
    p = subprocess.run([binary, *args], stdout=w, stderr=subprocess.PIPE, text=True)
    os.close(w)
    assert p.returncode != 101 and "panicked" not in p.stderr, (args, p.returncode, p.stderr)
    if args[0] == "tune" and args[1] in ("apply", "restore"):
        assert p.returncode == 0, (args, p.returncode, p.stderr)
    print(f"{' '.join(args[:2])} | (closed): exit {p.returncode}")
assert not os.path.exists(state), "restore left its journal"
