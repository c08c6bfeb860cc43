#!/usr/bin/env python3
"""Assertions of the A/B update test (ci/system/ab.sh, issue 30).

`check` reads the A/B run's directory (console-timed.log: the serial console with the host's
time of every line; guest/: files read back from the data partition, report.txt among them;
http.log: the bundle server's requests) and decides; `self-test` injects defects into this
run's own transcript, one at a time, each of which must make its assertion FAIL (and the
tolerated variations must still pass). The guest reports facts only ("RTCAT-AB boot=N key ..."
lines, ab-guest.sh), on the console and in report.txt.
"""

from __future__ import annotations

import argparse
import copy
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# RAUC's U-Boot backend makes a freshly installed slot primary with 3 attempts (BOOT_x_LEFT,
# its boot-attempts-primary default, which the product keeps); the test then sets the bad
# slot's to 1 (ab-guest.sh, a shortcut that saves two TCG boots): a slot that never passes its
# health gate boots that many times before U-Boot takes the other slot.
RAUC_ATTEMPTS = 3
ATTEMPTS = 1


@dataclass
class Boot:
    """One boot of the guest, as ab-guest.sh reported it."""

    n: int
    t_up: float
    facts: dict[str, str] = field(default_factory=dict)
    lines: list[tuple[float, str]] = field(default_factory=list)

    def fact(self, key: str) -> str:
        return self.facts.get(key, "")


@dataclass
class Run:
    uboot: list[tuple[float, str]]  # (host time, slot) of every U-Boot slot choice
    boots: list[Boot]
    verdicts: list[tuple[float, str, str, str]]  # (host time, good|bad, slot, reason)
    console: str
    qemu_rc: int
    http_log: str
    guest: dict[str, str]
    bundle_bytes: int
    seen: list[tuple[float, Said]]  # the console's report lines with their host times
    said: list[Said]  # the guest's report.txt (read back from the data partition)
    lost: list[str]  # lines of report.txt the console lost


LINE = re.compile(r"^(\d+(?:\.\d+)?) (.*)$")
AB = re.compile(r"RTCAT-AB boot=(\d+) (\S+)(?: (.*))?$")
UBOOT = re.compile(r"rtcat-ab: BOOT_ORDER=.* booting slot (\S+)")
# rtcat doctor's update.slots line (text report) on slot B, with the other slot's boot status
DOCTOR_SLOTS = (
    r"{verdict} +update\.slots +observed: booted B \(rootfs\.1\), marked good .*; "
    r"other A \(rootfs\.0\) boot {other}"
)
VERDICT = re.compile(r"rtcat-health-gate: verdict: (good|bad) slot=(\S+): (.*)$")


Said = tuple[int, str, str]  # (boot, key, rest) of one "RTCAT-AB boot=N key rest" line


def said_of(line: str) -> Said | None:
    a = AB.search(line)
    return (int(a.group(1)), a.group(2), (a.group(3) or "").strip()) if a else None


def parse(d: Path, qemu_rc: int, bundle_bytes: int) -> Run:
    text = (d / "console-timed.log").read_text(errors="replace")
    uboot, verdicts, seen = [], [], []
    for raw in text.splitlines():
        m = LINE.match(raw)
        if not m:
            continue
        t, line = float(m.group(1)), m.group(2)
        if u := UBOOT.search(line):
            uboot.append((t, u.group(1)))
        if v := VERDICT.search(line):
            verdicts.append((t, v.group(1), v.group(2), v.group(3).strip()))
        if s := said_of(line):
            seen.append((t, s))
    guest = {}
    g = d / "guest"
    if g.is_dir():
        for f in g.iterdir():
            guest[f.name] = f.read_text(errors="replace")
    said = [s for ln in guest.get("report.txt", "").splitlines() if (s := said_of(ln))]
    boots, lost = boots_of(seen, said)
    http = (d / "http.log").read_text(errors="replace") if (d / "http.log").exists() else ""
    return Run(uboot, boots, verdicts, text, qemu_rc, http, guest, bundle_bytes, seen, said, lost)


def boots_of(seen: list[tuple[float, Said]], said: list[Said]) -> tuple[list[Boot], list[str]]:
    """The guest's lines per boot, and the lines the console lost.

    The guest appends every line to report.txt on the data partition before it writes it to
    the console, and the host reads that file back after the power-off: it is the record of
    what the guest said. The console gives each line its host time; a line it lost (one CI
    run lost two of boot 2's; how is not known) keeps its place without a time (nan). Without
    report.txt (not read back) the console is all there is."""
    times: dict[Said, list[float]] = {}
    for t, s in seen:
        times.setdefault(s, []).append(t)
    lines: list[tuple[float, Said]] = []
    lost: list[str] = []
    for s in said:
        ts = times.get(s)
        if ts:
            lines.append((ts.pop(0), s))
        else:
            lines.append((math.nan, s))
            lost.append(f"boot={s[0]} {s[1]} {s[2]}"[:100])
    # console lines of keys report.txt lacks (it was not read back): in boot order; a console
    # line that a kernel message ran into is not taken beside the record's
    recorded = {(n, key) for n, key, _ in said}
    extra = [(t, s) for s, ts in times.items() for t in ts if (s[0], s[1]) not in recorded]
    lines += sorted(extra, key=lambda ts: (ts[1][0], ts[0]))
    boots: dict[int, Boot] = {}
    for t, (n, key, rest) in sorted(lines, key=lambda ts: ts[1][0]):  # stable: keeps each boot's order
        b = boots.setdefault(n, Boot(n, math.nan))
        if math.isnan(b.t_up):
            b.t_up = t
        b.lines.append((t, f"{key} {rest}"))
        b.facts.setdefault(key, rest)
        if key.startswith("install.") and not rest.startswith("starts"):
            b.facts[key] = rest
        elif key.startswith("install."):
            b.facts[key + ".starts"] = str(t)
    return [boots[k] for k in sorted(boots)], lost


def kv(s: str) -> dict[str, str]:
    return dict(re.findall(r"(\w[\w.]*)=(\S*)", s))


def slot_status(rauc: str, bootname: str) -> str:
    """RAUC_SLOT_BOOT_STATUS_<n> of the slot whose RAUC_SLOT_BOOTNAME_<n> is bootname."""
    m = re.search(rf"RAUC_SLOT_BOOTNAME_(\d+)='?{bootname}'?(\s|$)", rauc)
    if not m:
        return ""
    st = re.search(rf"RAUC_SLOT_BOOT_STATUS_{m.group(1)}='?(\w+)", rauc)
    return st.group(1) if st else ""


def rc_of(b: Boot, name: str) -> int | None:
    m = re.match(r"rc=(\d+)", b.fact(f"install.{name}"))
    return int(m.group(1)) if m else None


class Checker:
    def __init__(self, run: Run):
        self.r = run
        self.results: list[tuple[str, bool, str]] = []

    def ok(self, name: str, cond: bool, detail: str) -> None:
        self.results.append((name, bool(cond), detail))

    def run(self) -> list[tuple[str, bool, str]]:
        r = self.r
        bs = r.boots
        ups = [(b.n, kv(b.fact("up"))) for b in bs]
        self.ok(
            "ab.poweroff_clean",
            r.qemu_rc == 0 and "reboot: Power down" in r.console,
            f"qemu exit {r.qemu_rc}, power down {'seen' if 'reboot: Power down' in r.console else 'missing'}",
        )
        seq = [(u.get("slot"), u.get("image")) for _, u in ups]
        want = [("A", "flashed"), ("B", "update-good")] + [("A", "update-bad")] * ATTEMPTS + [("B", "update-good")]
        self.ok("ab.boot_sequence", seq == want, f"boots {seq}, want {want}")
        chosen = [s for _, s in r.uboot]
        want_u = ["A", "B"] + ["A"] * ATTEMPTS + ["B"]
        self.ok("ab.uboot_choices", chosen == want_u, f"U-Boot chose {chosen}, want {want_u}")

        first = bs[0] if bs else Boot(0, 0)
        for name, pat in (
            ("untrusted", r"signature|verif|certificate|signer"),
            ("othercompat", r"compatible"),
            ("unsigned", r"signature|bundle|invalid|magic|format|size"),
        ):
            rc = rc_of(first, name)
            msg = first.fact(f"install.{name}")
            self.ok(
                f"ab.refused.{name}",
                rc is not None and rc != 0 and re.search(pat, msg, re.I) is not None,
                f"rauc install {name}.raucb: {msg or 'not reported'}",
            )
        rc = rc_of(first, "good")
        self.ok(
            "ab.install.file",
            rc == 0,
            f"rauc install good.raucb (bundle disk): {first.fact('install.good') or 'not reported'}",
        )

        # boot 2: the new slot, proved by the gate (not waved through as flashed or proven)
        v_by_boot = self.verdicts_by_boot()
        second = bs[1] if len(bs) > 1 else Boot(0, 0)
        v2 = v_by_boot.get(second.n, [])
        self.ok(
            "ab.gate.new_slot_proved",
            any(g == "good" and s == "B" and "held OP" in why for _, g, s, why in v2)
            and kv(second.fact("gate")).get("state") == "active",
            f"boot {second.n} verdicts {[(g, s, why[:60]) for _, g, s, why in v2]}",
        )
        st = second.fact("rauc")
        self.ok(
            "ab.rauc.marked_good",
            re.search(r"RAUC_SYSTEM_BOOTED_BOOTNAME='?B", st) is not None
            and slot_status(st, "B") == "good"
            and re.search(r"RAUC_BOOT_PRIMARY='?rootfs\.1", st) is not None,
            f"boot {second.n}: booted B, its boot status {slot_status(st, 'B') or '-'}; {st[:160]}",
        )
        # doctor's slot report on the proved new slot, and after the rollback (no fallback left)
        d2, dl = second.fact("doctor.slots"), (bs[-1] if bs else Boot(0, 0)).fact("doctor.slots")
        self.ok(
            "ab.doctor.slots",
            re.match(DOCTOR_SLOTS.format(verdict="PASS", other="good"), d2) is not None
            and re.match(DOCTOR_SLOTS.format(verdict="WARN", other="bad"), dl) is not None,
            f"boot {second.n}: {d2[:120] or 'not reported'}; last boot: {dl[:120] or 'not reported'}",
        )
        rc = rc_of(second, "bad-http")
        src = second.fact("install.bad-http.starts") and next(
            (ln for _, ln in second.lines if ln.startswith("install.bad-http starts")), ""
        )
        # Debian's RAUC 1.8 has no streaming: it downloads the bundle whole (200); a RAUC with
        # streaming reads it in ranges (206). Either way the server must have sent it.
        ranged = len(re.findall(r'"GET /bad\.raucb HTTP/1\.[01]" 20[06]', r.http_log))
        self.ok(
            "ab.install.http",
            rc == 0 and "source=http://" in (src or "") and ranged > 0,
            f"rauc install over HTTP: {second.fact('install.bad-http') or 'not reported'}; "
            f"{ranged} GET requests for bad.raucb answered",
        )

        # RAUC made the updated slot primary with its attempts; the test shortened them
        at = second.fact("attempts")
        m_rauc = re.search(r"rauc: BOOT_ORDER=A B BOOT_A_LEFT=(\d+)", at)
        m_test = re.search(r"test: BOOT_A_LEFT=(\d+)", at)
        self.ok(
            "ab.attempts",
            m_rauc is not None
            and int(m_rauc.group(1)) == RAUC_ATTEMPTS
            and m_test is not None
            and int(m_test.group(1)) == ATTEMPTS,
            f"boot {second.n}: {at or 'not reported'} (want A primary with {RAUC_ATTEMPTS} from RAUC, "
            f"{ATTEMPTS} from the test)",
        )

        # the bad slot: every attempt fails its gate, none marks it good
        bad = bs[2 : 2 + ATTEMPTS]
        bad_v = [v for b in bad for v in v_by_boot.get(b.n, [])]
        self.ok(
            "ab.gate.bad_slot_refused",
            len(bad) == ATTEMPTS
            and all(any(g == "bad" and s == "A" for _, g, s, _ in v_by_boot.get(b.n, [])) for b in bad)
            and not any(g == "good" for _, g, _, _ in bad_v),
            f"bad-slot boots {[b.n for b in bad]}: verdicts {[(g, s, why[:50]) for _, g, s, why in bad_v]}",
        )
        last = bs[-1] if bs else Boot(0, 0)
        env = last.fact("env")
        lv = v_by_boot.get(last.n, [])
        self.ok(
            "ab.rollback",
            kv(last.fact("up")).get("slot") == "B"
            and re.search(r"BOOT_A_LEFT=0\b", env) is not None
            and any(g == "good" and s == "B" for _, g, s, _ in lv)
            and re.search(r"RAUC_BOOT_PRIMARY='?rootfs\.1", last.fact("rauc")) is not None
            and "poweroff" in [ln.split()[0] for _, ln in last.lines],
            f"last boot {last.n}: {last.fact('up')}; {env}; verdicts {[(g, s) for _, g, s, _ in lv]}; "
            f"{last.fact('rauc')[:120]}",
        )
        written = kv(second.fact("marker")).get("written", "")
        read = kv(last.fact("marker")).get("read", "")
        disk = self.r.guest.get("ab-systest-marker", "").strip()
        self.ok(
            "ab.results_intact",
            len(written) == 32 and written == read == disk and "summary.json" in self.r.guest,
            f"marker written {written or '-'} in slot B, read {read or '-'} after the rollback, "
            f"on the data partition {disk or '-'}; summary.json "
            f"{'read back' if 'summary.json' in self.r.guest else 'missing'}",
        )
        where = re.compile(r"^/var/lib/rtcat /dev/vda4\[/persist/var/lib/rtcat\]")
        self.ok(
            "ab.persist",
            bool(bs) and all(where.match(b.fact("persist")) for b in bs),
            f"/var/lib/rtcat in {len(bs)} boots: {sorted({b.fact('persist') for b in bs})[:3]}",
        )
        return self.results

    def verdicts_by_boot(self) -> dict[int, list[tuple[float, str, str, str]]]:
        """The gate's verdicts, given to the boot whose 'up' line precedes them."""
        out: dict[int, list] = {}
        ups = sorted((b.t_up, b.n) for b in self.r.boots)
        starts = sorted(t for t, _ in self.r.uboot)
        for v in self.r.verdicts:
            t = v[0]
            # the boot = the last U-Boot choice before the verdict; match it to the guest boot
            # whose 'up' line follows that choice
            k = max((i for i, s in enumerate(starts) if s <= t), default=None)
            if k is None:
                continue
            nxt = starts[k + 1] if k + 1 < len(starts) else float("inf")
            n = next((n for tu, n in ups if starts[k] <= tu < nxt), None)
            if n is not None:
                out.setdefault(n, []).append(v)
        return out


def figures(r: Run) -> list[str]:
    out = [f"bundle size (good.raucb, verity): {r.bundle_bytes / 1e6:.1f} MB"]
    bs = r.boots
    if len(bs) >= 2:
        t0 = bs[0].facts.get("install.good.starts")
        v2 = [t for t, g, s, why in r.verdicts if g == "good" and s == "B" and "held OP" in why]
        op = [t for t, ln in bs[1].lines if ln.startswith("rtcat active=active") and not math.isnan(t)]
        if t0 and v2 and not math.isnan(float(t0)):
            out.append(
                f"rauc install (file) -> new slot marked good by the gate: {v2[0] - float(t0):.0f} s host time"
                + (f" (rtcat active in OP seen {op[0] - float(t0):.0f} s after the start)" if op else "")
            )
        tb = bs[1].facts.get("install.bad-http.starts")
        tr = [ln for ln in bs[1].lines if ln[1].startswith("reboot") and not math.isnan(ln[0])]
        final_good = [t for t, g, s, _ in r.verdicts if g == "good" and s == "B"]
        if tb and tr and final_good and not math.isnan(float(tb)):
            out.append(
                f"failed update: install over HTTP {tr[0][0] - float(tb):.0f} s; reboot into the bad slot -> "
                f"back in the good slot, marked good: {final_good[-1] - tr[0][0]:.0f} s host time "
                f"({ATTEMPTS} attempt{'s' if ATTEMPTS != 1 else ''})"
            )
    return out


def report(results: list[tuple[str, bool, str]]) -> bool:
    for name, ok, detail in results:
        print(f"  {'PASS' if ok else 'FAIL'} {name}: {detail}")
    n = sum(ok for _, ok, _ in results)
    print(f"A/B: {n}/{len(results)} assertions hold")
    return n == len(results)


# --- negative controls ------------------------------------------------------------------------
def _boot(r: Run, i: int) -> Boot:
    return r.boots[i] if -len(r.boots) <= i < len(r.boots) else Boot(0, 0)


def d_final_slot_a(r: Run) -> None:
    b = _boot(r, -1)
    b.facts["up"] = b.facts.get("up", "").replace("slot=B", "slot=A")


def d_untrusted_accepted(r: Run) -> None:
    _boot(r, 0).facts["install.untrusted"] = "rc=0 msg=Installing|succeeded|"


def d_othercompat_accepted(r: Run) -> None:
    _boot(r, 0).facts["install.othercompat"] = "rc=0 msg=succeeded|"


def d_unsigned_accepted(r: Run) -> None:
    _boot(r, 0).facts["install.unsigned"] = "rc=0 msg=succeeded|"


def d_no_gate_proof(r: Run) -> None:
    r.verdicts = [v for v in r.verdicts if not (v[1] == "good" and "held OP" in v[3])]


def d_gate_good_on_bad_slot(r: Run) -> None:
    if len(r.boots) > 2:
        r.verdicts.append((r.boots[2].t_up + 0.1, "good", "A", "rtcat held OP for 10s"))
        r.verdicts.sort()


def d_one_attempt_missing(r: Run) -> None:
    if len(r.boots) > 2:
        t = r.boots[2].t_up
        r.boots.pop(2)
        r.uboot = [u for u in r.uboot if not (u[1] == "A" and abs(u[0] - t) < 120 and u[0] <= t)][:] or r.uboot


def d_extra_attempt(r: Run) -> None:
    """The bad slot booted once more than its attempts (the counter not honoured)."""
    if len(r.boots) > 2:
        b = copy.deepcopy(r.boots[2])
        r.boots.insert(3, b)
        r.uboot.insert(3, (b.t_up - 1, "A"))


def d_not_primary(r: Run) -> None:
    """RAUC left the updated slot behind the booted one."""
    b = _boot(r, 1)
    b.facts["attempts"] = b.facts.get("attempts", "").replace("BOOT_ORDER=A B", "BOOT_ORDER=B A")


def d_marker_changed(r: Run) -> None:
    b = _boot(r, -1)
    b.facts["marker"] = "read=00000000000000000000000000000000"


def d_marker_gone_from_disk(r: Run) -> None:
    r.guest.pop("ab-systest-marker", None)


def d_not_served(r: Run) -> None:
    r.http_log = re.sub(r'"GET /bad\.raucb HTTP/1\.[01]" 20[06]', '"GET /bad.raucb HTTP/1.1" 404', r.http_log)


def d_no_poweroff(r: Run) -> None:
    r.qemu_rc = 124


def d_counter_not_spent(r: Run) -> None:
    b = _boot(r, -1)
    b.facts["env"] = b.facts.get("env", "").replace("BOOT_A_LEFT=0", "BOOT_A_LEFT=2")


def d_not_marked_good(r: Run) -> None:
    b = _boot(r, 1)
    b.facts["rauc"] = re.sub(r"(BOOT_STATUS_\d+=)'good'", r"\1'bad'", b.facts.get("rauc", ""))


def d_not_persistent(r: Run) -> None:
    b = _boot(r, 1)
    b.facts["persist"] = "/var/lib/rtcat /dev/vda3"


def d_doctor_blind(r: Run) -> None:
    b = _boot(r, 1)
    b.facts["doctor.slots"] = b.facts.get("doctor.slots", "").replace("marked good", "not marked yet")


def d_http_failed(r: Run) -> None:
    _boot(r, 1).facts["install.bad-http"] = "rc=1 msg=error|"


DEFECTS = [
    ("final boot in the bad slot", d_final_slot_a, "ab.boot_sequence"),
    ("untrusted signer accepted", d_untrusted_accepted, "ab.refused.untrusted"),
    ("other compatible accepted", d_othercompat_accepted, "ab.refused.othercompat"),
    ("unsigned bundle accepted", d_unsigned_accepted, "ab.refused.unsigned"),
    ("new slot marked good without holding OP", d_no_gate_proof, "ab.gate.new_slot_proved"),
    ("bad slot marked good", d_gate_good_on_bad_slot, "ab.gate.bad_slot_refused"),
    ("one bad attempt fewer", d_one_attempt_missing, "ab.boot_sequence"),
    ("one bad attempt more", d_extra_attempt, "ab.boot_sequence"),
    ("updated slot not made primary by RAUC", d_not_primary, "ab.attempts"),
    ("results marker changed", d_marker_changed, "ab.results_intact"),
    ("results marker gone from the data partition", d_marker_gone_from_disk, "ab.results_intact"),
    ("bundle never served by the host", d_not_served, "ab.install.http"),
    ("install over HTTP failed", d_http_failed, "ab.install.http"),
    ("guest did not power off", d_no_poweroff, "ab.poweroff_clean"),
    ("bad slot's attempts not spent", d_counter_not_spent, "ab.rollback"),
    ("results on the slot, not the data partition", d_not_persistent, "ab.persist"),
    ("new slot not marked good in RAUC", d_not_marked_good, "ab.rauc.marked_good"),
    ("doctor does not see the gate's verdict", d_doctor_blind, "ab.doctor.slots"),
]


def self_test(run: Run) -> bool:
    base = {n: ok for n, ok, _ in Checker(copy.deepcopy(run)).run()}
    good = True
    bad_base = [n for n, ok in base.items() if not ok]
    if bad_base:
        print(f"  (the run itself fails {bad_base}: those controls cannot show anything)")
    for label, defect, name in DEFECTS:
        r = copy.deepcopy(run)
        defect(r)
        res = {n: ok for n, ok, _ in Checker(r).run()}
        detected = not res.get(name, True)
        if not base.get(name, False):
            print(f"  SKIP {label}: {name} fails without the defect")
            good = False
            continue
        print(f"  {'detected' if detected else 'MISSED  '} {label} -> {name}")
        good &= detected
    # tolerated: the console lost lines the guest's report.txt holds (the run that lost boot
    # 2's install result and attempts), or report.txt was not read back (the console is whole)
    for label, seen, said in (
        ("the console lost every second line", [ts for i, ts in enumerate(run.seen) if i % 2], run.said),
        ("report.txt not read back", run.seen, []),
    ):
        if label.startswith("report") and run.lost:
            # the console alone is not whole in this run: nothing this variation can show
            print(f"  n/a  {label}: the console lost {len(run.lost)} lines in this run")
            continue
        if not seen:
            print(f"  SKIP {label}: no report line on the console")
            good = False
            continue
        r = copy.deepcopy(run)
        r.boots, r.lost = boots_of(seen, said)
        res = {n: ok for n, ok, _ in Checker(r).run()}
        same = res == base
        print(f"  {'tolerated' if same else 'BROKEN   '} {label}: verdicts {'unchanged' if same else 'changed'}")
        good &= same
    # tolerated: the console's host times shifted (a slower host) changes no verdict
    r = copy.deepcopy(run)
    r.boots = [Boot(b.n, b.t_up * 2, b.facts, [(t * 2, ln) for t, ln in b.lines]) for b in r.boots]
    r.uboot = [(t * 2, s) for t, s in r.uboot]
    r.verdicts = [(t * 2, g, s, w) for t, g, s, w in r.verdicts]
    res = {n: ok for n, ok, _ in Checker(r).run()}
    same = res == base
    print(
        f"  {'tolerated' if same else 'BROKEN   '} a host twice as slow (every time doubled): "
        f"verdicts {'unchanged' if same else 'changed'}"
    )
    good &= same
    print(f"A/B negative controls: {'all detected' if good else 'NOT all detected'}")
    return good


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["check", "self-test"])
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--qemu-rc", required=True, type=int)
    ap.add_argument("--bundle-bytes", required=True, type=int)
    a = ap.parse_args()
    log = a.dir / "console-timed.log"
    if not log.exists():
        print(f"error: {log} does not exist", file=sys.stderr)
        return 2
    run = parse(a.dir, a.qemu_rc, a.bundle_bytes)
    if a.mode == "self-test":
        return 0 if self_test(run) else 1
    if run.lost:
        print(f"  note: the console lost {len(run.lost)} of the guest's lines (taken from its report.txt):")
        for ln in run.lost:
            print(f"    {ln}")
    ok = report(Checker(run).run())
    figs = figures(run)
    (a.dir / "figures.txt").write_text("".join(f + "\n" for f in figs))
    for f in figs:
        print(f"  figure: {f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
