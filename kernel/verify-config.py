#!/usr/bin/env python3
"""Verify that every option a kernel config fragment requests survived in a .config (the
check of kernel/merge-config.sh, also run by kernel/build.sh and the kernel recipes through
merge-config.sh --verify-only).

A fragment line "CONFIG_X=v" requires exactly that line in the .config; "# CONFIG_X is not set"
requires X to be unset (or absent, when the symbol does not exist in this tree); any other
non-comment line is an error, as are two fragments asking for different values of one symbol.
Prints one "MISSING fragment:line: ..." line per failure and a count; exit status 1 if any.

Usage: kernel/verify-config.py CONFIG FRAGMENT...
"""

import re
import sys

config, frags = sys.argv[1], sys.argv[2:]
have = {}
with open(config) as f:
    lines = f.read().split("\n")
for line in lines:
    m = re.match(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$", line)
    if m:
        have[m.group(1)] = m.group(2)
want, bad, checked = {}, [], 0
for frag in frags:
    with open(frag) as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        m1 = re.match(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$", line)
        m2 = re.match(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$", line)
        if m1:
            sym, val = m1.group(1), m1.group(2)
        elif m2:
            sym, val = m2.group(1), None
        elif line.strip() == "" or line.startswith("#"):
            continue
        else:
            bad.append(f"{frag}:{n}: not a config line: {line!r}")
            continue
        checked += 1
        if sym in want and want[sym][0] != val:
            bad.append(
                f"{frag}:{n}: {sym} requested as {val or 'not set'} but "
                f"{want[sym][1]} asks for {want[sym][0] or 'not set'}"
            )
        want[sym] = (val, f"{frag}:{n}")
        got = have.get(sym)
        if val is None:
            if got not in (None, "n"):
                bad.append(f"{frag}:{n}: {sym} requested not set, but is {sym}={got}")
        elif got != val:
            bad.append(
                f"{frag}:{n}: {sym}={val} requested, but is "
                f"{sym + '=' + got if got is not None else 'not set'} "
                f"(unmet dependency, missing symbol or lost choice)"
            )
for b in bad:
    print("  MISSING " + b)
failed = {b.split(": ", 1)[0] for b in bad}
print(f"  {checked} options requested, {checked - len(failed)} survived")
sys.exit(1 if bad else 0)
