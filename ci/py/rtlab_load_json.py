#!/usr/bin/env python3
"""rtlab: the JSON report of a 2 s end-to-end `rtlab load` with every kind of load (CPU hog,
tmpfs and anonymous memory, fork churn, 8 Mbit/s UDP): stopped by its duration after 2-3 s,
every worker did work, the UDP sender kept to its rate, no errors.

Usage: ci/py/rtlab_load_json.py LOAD.json
"""

import json
import sys

with open(sys.argv[1]) as f:
    r = json.load(f)
keys = ("stopped_by", "elapsed_s", "hog_loops", "tmpfs_bytes_written", "anon_passes", "forks", "net_bytes_sent")
print({k: r[k] for k in keys})
assert r["stopped_by"] == "duration" and 2.0 <= r["elapsed_s"] < 3.0, r
assert r["hog_loops"] > 0 and r["tmpfs_bytes_written"] > 0 and r["anon_passes"] > 0 and r["forks"] > 0, r
assert 0 < r["net_bytes_sent"] <= 2 * 1_000_000 + 1472, r  # 8 Mbit/s for 2 s
assert not r["errors"], r["errors"]
print("load ok")
