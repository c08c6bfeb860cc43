#!/usr/bin/env python3
"""tune: the interrupt coalescing doctor reads with its own SIOCETHTOOL ioctl (check
nic.coalesce) is what `ethtool -c` prints for rx/tx usecs and frames ("n/a" counts as 0).

Usage: ci/py/tune_coalesce.py ETHTOOL_C.txt DOCTOR.json IFACE
"""

import json
import re
import sys

with open(sys.argv[1]) as f:
    et = f.read()
want = {k: re.search(rf"^{k}:\s*(\S+)", et, re.M).group(1) for k in ("rx-usecs", "rx-frames", "tx-usecs", "tx-frames")}
want = {k: ("0" if v == "n/a" else v) for k, v in want.items()}
with open(sys.argv[2]) as f:
    c = next(c for c in json.load(f)["checks"] if c["id"] == "nic.coalesce")
got = dict(re.findall(r"([rt]x-(?:usecs|frames)) (\d+)", c["observed"]))
assert got == want, (sys.argv[3], got, want, c["observed"])
print(f"{sys.argv[3]}: ioctl {got} == ethtool -c")
