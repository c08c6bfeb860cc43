#!/usr/bin/env python3
"""Check an `rtcat exporter` /metrics page: parse it with prometheus_client's text parser, lint
it the way `promtool check metrics` does (HELP and TYPE for every family, counter names ending in
_total, base units, no duplicate series, well-formed histograms) and compare its values with the
master's control-socket replies it was rendered from.

    prom_check.py METRICS --status STATUS.json [--status-after STATUS.json] [--counters C.json]
                  [--scan SCAN.json] [--down]

With --status-after (a live master), a counter must lie between the two status readings; without
it (a fixture) every value must be equal. --down: the page of an exporter whose master did not
answer (rtcat_up 0). Exit 0 when the page passes, 1 with every finding on stderr otherwise.
"""

import argparse
import json
import math
import re
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.exit("prom_check.py: python3 module prometheus_client missing (pip install prometheus-client)")

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
# Units Prometheus' naming conventions replace by base units (seconds, bytes, ratios).
NON_BASE_UNITS = ("_ns", "_us", "_ms", "_nanoseconds", "_microseconds", "_milliseconds", "_ppm", "_percent")
COUNTERS = {
    "rtcat_cycles_total": "cycles",
    "rtcat_missed_deadlines_total": "missed_deadlines",
    "rtcat_skipped_periods_total": "skipped_periods",
    "rtcat_lost_frames_total": "frames_lost",
    "rtcat_wkc_mismatches_total": "wkc_mismatches",
    "rtcat_not_op_cycles_total": "not_op_cycles",
    "rtcat_rejected_frames_total": "rx_rejected",
    "rtcat_send_errors_total": "send_errors",
    "rtcat_recoveries_total": "recoveries",
    "rtcat_failed_recoveries_total": "failed_recoveries",
    "rtcat_coe_emergencies_total": "emergencies",
}
HISTOGRAMS = {
    "rtcat_wake_lateness_seconds": "wake_ns",
    "rtcat_exec_time_seconds": "exec_ns",
    "rtcat_round_trip_seconds": "rtt_ns",
}
# Time in OP and outages (status `availability`): family -> (key, scale to the family's unit).
AVAILABILITY = {
    "rtcat_time_in_op_seconds_total": ("time_in_op_s", 1.0),
    "rtcat_invalid_data_cycles_total": ("invalid_cycles", 1.0),
    "rtcat_outages_total": ("outages", 1.0),
    "rtcat_outage_seconds_total": ("outage_total_ms", 1e-3),
    "rtcat_outage_max_seconds": ("outage_max_ms", 1e-3),
}
PORT_GAUGES = {
    "rtcat_esc_invalid_frames": "invalid_frame",
    "rtcat_esc_rx_errors": "rx_error",
    "rtcat_esc_forwarded_errors": "forwarded",
    "rtcat_esc_lost_links": "lost_link",
}

findings = []


def fail(msg):
    findings.append(msg)


def lint(text):
    """What the parser lets through but promtool and Prometheus do not."""
    helps, types, seen = {}, {}, set()
    for n, line in enumerate(text.split("\n"), 1):
        if not line:
            continue
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            if name in helps:
                fail(f"line {n}: second HELP for {name}")
            helps[name] = n
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4 or parts[3] not in ("counter", "gauge", "histogram", "summary", "untyped"):
                fail(f"line {n}: bad TYPE line {line!r}")
                continue
            if parts[2] in types:
                fail(f"line {n}: second TYPE for {parts[2]}")
            types[parts[2]] = parts[3]
            continue
        if line.startswith("#"):
            continue
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        if not NAME.match(name):
            fail(f"line {n}: bad metric name {name!r}")
        series = line.rsplit(" ", 1)[0]
        if series in seen:
            fail(f"line {n}: duplicate series {series}")
        seen.add(series)
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                family = name[: -len(suffix)]
        if family not in types or family not in helps:
            fail(f"line {n}: {name} has no HELP and TYPE before it")
    for name, kind in types.items():
        if kind == "counter" and not name.endswith("_total"):
            fail(f"counter {name} does not end in _total")
        if kind != "counter" and name.endswith("_total"):
            fail(f"{kind} {name} ends in _total")
        if any(u in name for u in NON_BASE_UNITS):
            fail(f"{name}: not in base units")
    if not text.endswith("\n"):
        fail("the page does not end with a line feed")


def families(text):
    out = {}
    try:
        for f in text_string_to_metric_families(text):
            out[f.name] = f
    except ValueError as e:
        fail(f"prometheus_client parser: {e}")
    return out


def series(fams, name):
    """Samples called NAME (any family), as {frozenset(labels): value}."""
    out = {}
    for f in fams.values():
        for s in f.samples:
            if s.name == name:
                out[frozenset(s.labels.items())] = s.value
    return out


def one(fams, name):
    s = series(fams, name)
    if len(s) != 1:
        fail(f"{name}: {len(s)} series, want 1")
        return None
    return next(iter(s.values()))


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def within(name, v, lo, hi):
    if v is None:
        return
    if not (lo <= v <= hi or close(v, lo) or close(v, hi)):
        fail(f"{name} = {v}, want {lo}" + ("" if lo == hi else f"..{hi}"))


def check_histogram(fams, name, before, after, live, labels=frozenset(), scale=1e-9):
    buckets = {
        dict(k)["le"]: v for k, v in series(fams, name + "_bucket").items() if (k - {("le", dict(k)["le"])}) == labels
    }
    count = series(fams, name + "_count").get(labels)
    total = series(fams, name + "_sum").get(labels)
    if count is None or total is None or "+Inf" not in buckets:
        fail(f"{name}{dict(labels)}: _count, _sum or the +Inf bucket missing")
        return
    if buckets["+Inf"] != count:
        fail(f"{name}: +Inf bucket {buckets['+Inf']} != _count {count}")
    finite = sorted((float(le), v) for le, v in buckets.items() if le != "+Inf")
    for (_, a), (le, b) in zip(finite, finite[1:], strict=False):
        if b < a:
            fail(f"{name}: bucket le={le} ({b}) below the previous one ({a})")
    within(name + "_count", count, before["count"], after["count"])
    if live:
        return
    within(name + "_sum", total, before["sum"] * scale, before["sum"] * scale)
    want = [(le * scale, n) for le, n in before["buckets"]]
    if len(want) != len(finite):
        fail(f"{name}: {len(finite)} finite buckets, status has {len(want)}")
    for (le, v), (wle, wv) in zip(finite, want, strict=False):
        if not close(le, wle) or v != wv:
            fail(f"{name}: bucket le={le} = {v}, want le={wle} = {wv}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metrics")
    ap.add_argument("--status")
    ap.add_argument("--status-after")
    ap.add_argument("--counters")
    ap.add_argument("--scan")
    ap.add_argument("--down", action="store_true")
    a = ap.parse_args()
    with open(a.metrics, encoding="utf-8") as f:
        text = f.read()
    lint(text)
    fams = families(text)
    if a.down:
        within("rtcat_up", one(fams, "rtcat_up"), 0, 0)
        if series(fams, "rtcat_cycles_total"):
            fail("a master that is down still has rtcat_cycles_total")
        err = series(fams, "rtcat_exporter_control_errors_total").get(frozenset({("command", "status")}))
        if not err:
            fail("the failed status request is not counted")
    else:
        check_up(fams, a)
    for m in findings:
        print(f"prom_check.py: {m}", file=sys.stderr)
    print(f"prom_check.py: {len(fams)} families, {len(findings)} findings")
    return 1 if findings else 0


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_up(fams, a):
    st = load(a.status)
    after = load(a.status_after) if a.status_after else st
    live = a.status_after is not None
    names = {e["position"]: e.get("name") or "" for e in load(a.scan)} if a.scan else {}
    within("rtcat_up", one(fams, "rtcat_up"), 1, 1)
    for name, key in COUNTERS.items():
        within(name, one(fams, name), st["counters"][key], after["counters"][key])
    within("rtcat_generation", one(fams, "rtcat_generation"), st["generation"], after["generation"])
    within("rtcat_cycle_period_seconds", one(fams, "rtcat_cycle_period_seconds"), st["period_ns"] * 1e-9,
           st["period_ns"] * 1e-9)  # fmt: skip
    within("rtcat_subdevices", one(fams, "rtcat_subdevices"), st["subdevices"], after["subdevices"])
    within("rtcat_uptime_seconds", one(fams, "rtcat_uptime_seconds"), st["uptime_s"], after["uptime_s"])
    states = series(fams, "rtcat_master_state")
    if sum(states.values()) != 1:
        fail(f"rtcat_master_state: {sum(states.values())} states at 1, want exactly one")
    if not live and states.get(frozenset({("state", st["state"])})) != 1:
        fail(f"rtcat_master_state{{state={st['state']!r}}} is not 1")
    for name, key in HISTOGRAMS.items():
        check_histogram(fams, name, st["histograms"][key], after["histograms"][key], live)
    per_subdevice = {
        "rtcat_subdevice_al_state": lambda sd: sd["al_state"] & 0x0F,
        "rtcat_subdevice_al_error": lambda sd: (sd["al_state"] >> 4) & 1,
        "rtcat_subdevice_al_status_code": lambda sd: sd.get("al_status_code", 0),
        "rtcat_subdevice_coe_emergencies_total": lambda sd: sd.get("emergencies", 0),
    }
    sds = st.get("subdevice_states", [])
    for name, want in per_subdevice.items():
        got = series(fams, name)
        for sd in sds:
            labels = frozenset({("position", str(sd["position"])), ("name", names.get(sd["position"], ""))})
            if labels not in got:
                fail(f"{name}{dict(labels)} missing (have {[dict(k) for k in got]})")
            elif not live and got[labels] != want(sd):
                fail(f"{name}{dict(labels)} = {got[labels]}, want {want(sd)}")
        if len(got) != len(sds):
            fail(f"{name}: {len(got)} series, status has {len(sds)}")
    check_availability(fams, st.get("availability"), after.get("availability"), names)
    check_unexpected(fams, st.get("unexpected_devices"), after.get("unexpected_devices"))
    if a.counters:
        check_counters(fams, load(a.counters), names, live)
    dc = st.get("dc")
    if dc and not live:
        within("rtcat_dc_locked", one(fams, "rtcat_dc_locked"), float(dc["locked"]), float(dc["locked"]))
        within("rtcat_dc_drift_ratio", one(fams, "rtcat_dc_drift_ratio"), dc["drift_ppm"] * 1e-6,
               dc["drift_ppm"] * 1e-6)  # fmt: skip
        v = dc["sync_window_violations"]
        within("rtcat_dc_sync_window_violations_total", one(fams, "rtcat_dc_sync_window_violations_total"), v, v)
        check_histogram(fams, "rtcat_dc_phase_error_seconds", dc["phase_error_abs_ns"], dc["phase_error_abs_ns"], live)
        diff = series(fams, "rtcat_dc_system_time_difference_seconds")
        for d in dc.get("system_time_difference_ns", []):
            labels = frozenset({("position", str(d["position"])), ("name", names.get(d["position"], ""))})
            within(f"rtcat_dc_system_time_difference_seconds{dict(labels)}", diff.get(labels), d["ns"] * 1e-9,
                   d["ns"] * 1e-9)  # fmt: skip
    elif not dc and series(fams, "rtcat_dc_locked"):
        fail("rtcat_dc_locked without DC in the status")
    for ax in (st.get("axes") or []) if not live else []:
        base = frozenset({("axis", ax["name"]), ("position", str(ax["position"]))})
        state = series(fams, "rtcat_axis_state")
        if state.get(base | {("state", ax["state"])}) != 1:
            fail(f"rtcat_axis_state{dict(base)} state {ax['state']!r} is not 1")
        if sum(v for k, v in state.items() if base <= k) != 1:
            fail(f"rtcat_axis_state{dict(base)}: not exactly one state at 1")
        f = ax["faults"]
        within("rtcat_axis_faults_total", series(fams, "rtcat_axis_faults_total").get(base), f, f)
        fe = ax.get("following_error", 0)
        last = series(fams, "rtcat_axis_following_error_last_increments").get(base)
        if last is None:
            fail(f"rtcat_axis_following_error_last_increments{dict(base)} missing")
        within("rtcat_axis_following_error_last_increments", last, fe, fe)
        counters = (("rtcat_axis_quick_stops_total", "quick_stops"), ("rtcat_axis_held_cycles_total", "held_cycles"))
        for name, key in counters:
            v = ax.get(key, 0)
            within(name, series(fams, name).get(base), v, v)
        dfe = ax.get("drive_following_error")
        got = series(fams, "rtcat_axis_drive_following_error_last_increments").get(base)
        if dfe is None and got is not None:
            fail(f"rtcat_axis_drive_following_error_last_increments{dict(base)} without 0x60F4 in the status")
        if dfe is not None:
            within("rtcat_axis_drive_following_error_last_increments", got, dfe, dfe)
        h = ax["following_error_abs"]
        check_histogram(fams, "rtcat_axis_following_error_increments", h, h, live, base, scale=1)


def check_unexpected(fams, u, u_after):
    """Devices the configuration does not place: one gauge (and the first one's position while
    there are any), between the status before and after the scrape."""
    got = series(fams, "rtcat_unexpected_devices")
    first = series(fams, "rtcat_unexpected_devices_first_position")
    if not u or not u_after:
        if got or first:
            fail("rtcat_unexpected_devices without unexpected_devices in the status")
        return
    lo, hi = sorted((u["count"], u_after["count"]))
    within("rtcat_unexpected_devices", one(fams, "rtcat_unexpected_devices"), lo, hi)
    if first and "first_position" not in u and "first_position" not in u_after:
        fail("rtcat_unexpected_devices_first_position without a first position in the status")


def check_availability(fams, av, av_after, names):
    """Each availability family: the segment's series and one per subdevice, between the status
    before and after the scrape."""
    if not av or not av_after:
        if any(series(fams, name) for name in AVAILABILITY):
            fail("availability families without availability in the status")
        return
    scopes = [(frozenset({("scope", "segment")}), av["segment"], av_after["segment"])]
    for s0, s1 in zip(av["subdevices"], av_after["subdevices"], strict=False):
        pos = s0["position"]
        labels = frozenset({("scope", "subdevice"), ("position", str(pos)), ("name", names.get(pos, ""))})
        scopes.append((labels, s0, s1))
    for name, (key, scale) in AVAILABILITY.items():
        got = series(fams, name)
        for labels, s0, s1 in scopes:
            if labels not in got:
                fail(f"{name}{dict(labels)} missing (have {[dict(k) for k in got]})")
            else:
                within(f"{name}{dict(labels)}", got[labels], s0[key] * scale, s1[key] * scale)


def check_counters(fams, c, names, live):
    for name, key in PORT_GAUGES.items():
        got = series(fams, name)
        want = {}
        for sd in c["subdevices"]:
            for p in sd["ports"]:
                labels = frozenset(
                    {
                        ("position", str(sd["position"])),
                        ("name", names.get(sd["position"], "")),
                        ("port", str(p["port"])),
                    }
                )
                want[labels] = p[key]
        if set(got) != set(want):
            fail(f"{name}: series {sorted(map(dict, got), key=str)}, want {sorted(map(dict, want), key=str)}")
        elif not live:
            for k, v in want.items():
                within(f"{name}{dict(k)}", got[k], v, v)
    polled = one(fams, "rtcat_esc_counters_polled_timestamp_seconds")
    if polled is not None and not live:
        within(
            "rtcat_esc_counters_polled_timestamp_seconds",
            polled,
            c["polled_unix_ns"] * 1e-9,
            c["polled_unix_ns"] * 1e-9,
        )


if __name__ == "__main__":
    sys.exit(main())
