#!/usr/bin/env python3
"""rtlab: the contract with rtcat. `rtlab report --format json` of an `rtcat bench --sim` result
directory shows the bench's own figures: the cycle count (> 500), the wake-lateness P99 and the
pooled sample count of summary.json.

Usage: ci/py/rtlab_bench_report.py REPORT.json SUMMARY.json
"""

import json
import sys

with open(sys.argv[1]) as f:
    r = json.load(f)
with open(sys.argv[2]) as f:
    s = json.load(f)
st = r["sources"][0]["stages"][0]
assert st["cycles"] == s["cycles"] > 500, (st["cycles"], s["cycles"])
assert st["wake_p99_ns"]["mean"] == s["wake_lateness_ns"]["p99"], st
assert st["pooled_wake_ns"]["count"] == s["wake_lateness_ns"]["count"], st
print("rtcat bench -> report ok:", st["cycles"], "cycles, wake P99", st["wake_p99_ns"]["mean"] / 1000, "us")
