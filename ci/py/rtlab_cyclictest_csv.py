#!/usr/bin/env python3
"""rtlab: a live cyclictest histogram, imported by `rtlab report --format csv`, gives one row of
kind/stage cyclictest with the 300 cycles cyclictest ran and 0 < wake P99 <= wake max.

Usage: ci/py/rtlab_cyclictest_csv.py REPORT.csv
"""

import csv
import sys

with open(sys.argv[1]) as f:
    rows = list(csv.DictReader(f))
assert len(rows) == 1, rows
r = rows[0]
assert r["kind"] == "cyclictest" and r["stage"] == "cyclictest", r
assert int(r["cycles"]) == 300, r["cycles"]
assert 0 < float(r["wake_p99_us"]) <= float(r["wake_max_us"]), r
print("cyclictest import ok")
