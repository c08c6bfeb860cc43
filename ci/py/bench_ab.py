#!/usr/bin/env python3
"""Two rtcat binaries side by side: `rtcat bench` runs of A (the old) and B (the new) in
interleaved rounds, the order alternating each round (A B, B A, ...) so that a machine getting
busier or quieter over the run weighs on both alike. Prints each run's exec P50/P99 (and wake
lateness P99) from its summary.json, then the medians over the rounds and the ratio B/A.

The verdict depends on the machine's timing: on a shared machine single runs differ by more
than any code change could make; read the medians of several rounds, and repeat the script
when the ratios are near the bound.

Usage: ci/py/bench_ab.py [--rounds N] [--duration S] [--out DIR] A_BINARY B_BINARY [-- BENCH_ARGS...]
       (BENCH_ARGS default: --sim --no-rt, the reference segment)
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_one(binary, duration, args, out):
    js = out / "summary.json"
    cmd = [binary, "bench", *args, "--duration", str(duration), "--out", str(out), "--json", str(js)]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    d = json.loads(js.read_text())
    return {
        "exec_p50": d["exec_ns"]["p50"],
        "exec_p99": d["exec_ns"]["p99"],
        "wake_p99": d["wake_lateness_ns"]["p99"],
        "cycles": d["cycles"],
        "missed": d["missed_deadlines"],
    }


def main():
    argv = sys.argv[1:]
    bench_args = ["--sim", "--no-rt"]
    if "--" in argv:
        k = argv.index("--")
        argv, bench_args = argv[:k], argv[k + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("a")
    ap.add_argument("b")
    o = ap.parse_args(argv)
    out = o.out or Path(tempfile.mkdtemp(prefix="bench-ab-"))
    res = {"A": [], "B": []}
    print(f"A = {o.a}\nB = {o.b}\nbench {' '.join(bench_args)} --duration {o.duration}, {o.rounds} rounds")
    print(f"{'round':>5} {'run':>3} {'exec P50':>9} {'exec P99':>9} {'wake P99':>9} {'cycles':>7} {'missed':>6}")
    for r in range(o.rounds):
        order = ("A", "B") if r % 2 == 0 else ("B", "A")
        for who in order:
            binary = o.a if who == "A" else o.b
            m = run_one(binary, o.duration, bench_args, out / f"{r:02d}-{who}")
            res[who].append(m)
            print(
                f"{r:>5} {who:>3} {m['exec_p50']:>9} {m['exec_p99']:>9} {m['wake_p99']:>9} "
                f"{m['cycles']:>7} {m['missed']:>6}",
                flush=True,
            )
    print("medians over the rounds (ns):")
    for key in ("exec_p50", "exec_p99", "wake_p99"):
        a = statistics.median(m[key] for m in res["A"])
        b = statistics.median(m[key] for m in res["B"])
        print(f"  {key}: A {a:.0f}  B {b:.0f}  B/A {b / a:.3f}")


if __name__ == "__main__":
    main()
