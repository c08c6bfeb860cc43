#!/usr/bin/env python3
"""tune: the doctor benchmark ran on a board-sized fake tree (>= 300 IRQs, >= 500 tasks) and its
median run took less than 1 s.

Usage: ci/py/tune_bench.py BENCH_OUTPUT.txt
"""

import re
import sys

with open(sys.argv[1]) as f:
    t = f.read()
irqs = int(re.search(r"(\d+) IRQs", t).group(1))
tasks = int(re.search(r"(\d+) tasks", t).group(1))
med = float(re.search(r"median ([\d.]+) ms", t).group(1))
assert irqs >= 300 and tasks >= 500, (irqs, tasks)
assert med < 1000, f"doctor median {med} ms >= 1 s"
print(f"benchmark ok: median {med} ms")
