#!/usr/bin/env python3
"""tune (root): forged journals are refused. `tune restore` on a journal that names a file
outside the knobs, records a command line to run, is writable by others, has no boot id or
another boot's id must exit 2 naming the reason, leave the victim file as it was and run no
recorded command (its marker file must not appear).

Usage: ci/py/tune_forged_journals.py RTTUNE_BINARY WORK_DIR
"""

import json
import os
import subprocess
import sys

binary, work = sys.argv[1], sys.argv[2]
with open("/proc/sys/kernel/random/boot_id") as f:
    boot = f.read().strip()
jdir = os.path.join(work, "forged")
os.makedirs(jdir, mode=0o700, exist_ok=True)
state = os.path.join(jdir, "tune-state.json")
victim = os.path.join(work, "victim")
marker = os.path.join(work, "marker")
with open(victim, "w") as f:
    f.write("precious\n")


def entry_file(path):
    return {
        "id": "file:" + path,
        "group": "default-irq-affinity",
        "change": {"kind": "file", "path": path, "original": "ff\n", "target": "bf"},
        "state": "applied",
    }


def victim_text():
    with open(victim) as f:
        return f.read()


service = {
    "id": "service:irqbalance",
    "group": "irqbalance",
    "change": {
        "kind": "service",
        "name": "irqbalance",
        "how": {"how": "signalled", "pid": 4000000, "cmdline": ["/bin/sh", "-c", "touch " + marker]},
    },
    "state": "applied",
}
cases = [
    (
        "a file outside the knobs",
        {"boot_id": boot, "entries": [entry_file(victim)]},
        0o644,
        'entry 0 ("file:' + victim + '")',
    ),
    (
        "a journalled command",
        {"boot_id": boot, "entries": [service]},
        0o644,
        'entry 0 ("service:irqbalance"): recorded command line',
    ),
    ("a journal others can write", {"boot_id": boot, "entries": []}, 0o666, "writable by group or others"),
    ("an empty boot id", {"boot_id": "", "entries": []}, 0o644, "records no boot id"),
    (
        "another boot's id",
        {"boot_id": "0a8f77e2-0000-4000-8000-000000000000", "entries": []},
        0o644,
        "written during another boot",
    ),
]
for what, j, mode, want in cases:
    j = dict(version=1, rt_cpus="0", **j)
    with open(state, "w") as f:
        json.dump(j, f)
    os.chmod(state, mode)
    r = subprocess.run([binary, "tune", "restore", "--state", state], capture_output=True, text=True)
    assert r.returncode == 2, (what, r.returncode, r.stdout, r.stderr)
    assert want in r.stderr, (what, r.stderr)
    assert victim_text() == "precious\n", what
    assert not os.path.exists(marker), what
    print(f"refused: {what}")
