#!/usr/bin/env python3
"""tune: `doctor --json` on this machine: schema rttune.doctor/1, 32 checks with distinct ids,
each with a known verdict, non-empty observed/expected/why, string fix, boolean reboot and a
details list; the summary's FAIL count is the checks' and the exit status is 1 exactly when a
check FAILs.

Usage: ci/py/tune_doctor_json.py DOCTOR.json EXIT_STATUS
"""

import json
import sys

with open(sys.argv[1]) as f:
    r = json.load(f)
rc = int(sys.argv[2])
assert r["schema"] == "rttune.doctor/1", r["schema"]
ids = [c["id"] for c in r["checks"]]
assert len(ids) == 32 and len(set(ids)) == 32, ids
for c in r["checks"]:
    assert c["verdict"] in ("PASS", "WARN", "FAIL", "N/A"), c
    for k in ("observed", "expected", "why", "fix"):
        assert isinstance(c[k], str), (c["id"], k)
    assert c["observed"] and c["expected"] and c["why"], c["id"]
    assert isinstance(c["reboot"], bool) and isinstance(c["details"], list)
fails = sum(c["verdict"] == "FAIL" for c in r["checks"])
assert r["summary"]["fail"] == fails
assert rc == (1 if fails else 0), (rc, fails)
print(f"doctor json ok: {len(ids)} checks, {fails} FAIL, exit {rc}")
