#!/usr/bin/env bash
# Checks the rttune crate (`rtcat doctor` / `rtcat tune`): shellcheck, no machine paths, fmt,
# clippy, MSRV build, unit + fake-tree golden tests, forged-journal and fuzz tests, live root tests
# (doctor on /, apply/restore of default_smp_affinity, workqueue cpumask, cpuidle,
# timer_migration), the CLI against the real machine (JSON schema, exit codes, plan changes
# nothing, forged journals refused with exit 2, no panic on a closed stdout, bad config named), and
# the doctor benchmark on a board-sized fake tree (< 1 s). Exits non-zero on the first failure.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$RTCAT_TOP"

step "tune: install shellcheck, check-jsonschema"
ensure_apt shellcheck ethtool
ensure_pip check-jsonschema check-jsonschema

step "tune: shellcheck"
shellcheck -x ci/check-tune.sh

step "tune: no paths of the build machine in committed files"
if git grep -n -E '/(work|root|tmp)/' -- app/rttune ci/check-tune.sh; then
	die "machine-specific paths committed under app/rttune"
fi

# ci/test.sh runs fmt, clippy and the MSRV check for the whole workspace first and sets
# RTCAT_WORKSPACE_CHECKED; the rttune tests always run here (serially: the live ones share knobs).
if [ -z "${RTCAT_WORKSPACE_CHECKED:-}" ]; then
	step "tune: cargo fmt --check"
	cargo fmt -p rttune --check

	step "tune: cargo clippy --all-targets -D warnings"
	cargo clippy -q -p rttune --all-targets -- -D warnings

	if command -v rustup >/dev/null; then
		step "tune: builds with the MSRV (Rust 1.90)"
		rustup toolchain install 1.90 --profile minimal >/dev/null 2>&1 || die "cannot install Rust 1.90"
		cargo +1.90 check -q -p rttune --all-targets
	else
		printf 'rustup not found: MSRV build skipped\n'
	fi
fi

step "tune: cargo test (unit, fake trees, golden verdicts, live root tests)"
if [ "$(id -u)" -eq 0 ]; then
	RTTUNE_REQUIRE_LIVE=1 cargo test -q -p rttune -- --test-threads=1
else
	printf 'not root: live tests will print why they skip\n'
	cargo test -q -p rttune
fi

step "tune: build the stand-alone front end and the benchmark (release)"
cargo build -q --release -p rttune --examples
tdir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin="$tdir/release/examples/rttune"
bench="$tdir/release/examples/bench_doctor"
if [ ! -x "$bin" ] || [ ! -x "$bench" ]; then die "examples not built"; fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cpus=$(cat /sys/devices/system/cpu/online)
rt=${cpus##*[-,]}
step "tune: doctor --json against this machine (RT CPU $rt)"
set +e
"$bin" doctor --cpu "$rt" --json >"$work/doctor.json"
rc=$?
set -e
python3 - "$work/doctor.json" "$rc" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
assert r["schema"] == "rttune.doctor/1", r["schema"]
ids = [c["id"] for c in r["checks"]]
assert len(ids) == 30 and len(set(ids)) == 30, ids
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
PY
check-jsonschema --schemafile app/rttune/doctor.schema.json "$work/doctor.json"

step "tune: coalescing read by our SIOCETHTOOL ioctl agrees with ethtool -c"
checked=0
for d in /sys/class/net/*; do
	ifc=${d##*/}
	[ "$ifc" = lo ] && continue
	ethtool -c "$ifc" >"$work/ethtool-c.txt" 2>/dev/null || continue
	set +e
	"$bin" doctor --cpu "$rt" --iface "$ifc" --json >"$work/d-$ifc.json"
	set -e
	python3 - "$work/ethtool-c.txt" "$work/d-$ifc.json" "$ifc" <<'PY'
import json, re, sys
et = open(sys.argv[1]).read()
want = {k: re.search(rf"^{k}:\s*(\S+)", et, re.M).group(1) for k in ("rx-usecs", "rx-frames", "tx-usecs", "tx-frames")}
want = {k: ("0" if v == "n/a" else v) for k, v in want.items()}
c = next(c for c in json.load(open(sys.argv[2]))["checks"] if c["id"] == "nic.coalesce")
got = dict(re.findall(r"([rt]x-(?:usecs|frames)) (\d+)", c["observed"]))
assert got == want, (sys.argv[3], got, want, c["observed"])
print(f"{sys.argv[3]}: ioctl {got} == ethtool -c")
PY
	checked=$((checked + 1))
done
[ "$checked" -gt 0 ] || printf 'no interface here supports ethtool -c: cross-check skipped\n'

step "tune: plan changes nothing on this machine"
knobs=(/proc/irq/default_smp_affinity /sys/devices/virtual/workqueue/cpumask /proc/sys/kernel/timer_migration)
snap() { for f in "${knobs[@]}" /sys/devices/system/cpu/cpu"$rt"/cpuidle/state*/disable; do [ -r "$f" ] && printf '%s=%s\n' "$f" "$(cat "$f")"; done; true; }
snap >"$work/before"
"$bin" tune plan --cpu "$rt" --state "$work/state.json" >"$work/plan.txt"
cat "$work/plan.txt"
snap >"$work/after"
diff -u "$work/before" "$work/after" || die "tune plan changed the machine"
[ ! -e "$work/state.json" ] || die "tune plan wrote a state file"
"$bin" tune plan --cpu "$rt" --state "$work/state.json" --json >"$work/plan.json"
check-jsonschema --schemafile app/rttune/tune.schema.json "$work/plan.json"

if [ "$(id -u)" -eq 0 ]; then
	step "tune: CLI apply/status/restore of the VM-safe groups round-trips"
	groups=(--group default-irq-affinity --group workqueue-mask --group c-states --group timer-migration)
	"$bin" tune apply --cpu "$rt" "${groups[@]}" --state "$work/state.json"
	"$bin" tune status --cpu "$rt" "${groups[@]}" --state "$work/state.json" | tee "$work/status.txt"
	grep -q "in effect" "$work/status.txt" || die "status shows nothing in effect"
	"$bin" tune restore --state "$work/state.json" --json >"$work/restore.json"
	cat "$work/restore.json"
	check-jsonschema --schemafile app/rttune/tune.schema.json "$work/restore.json"
	snap >"$work/restored"
	diff -u "$work/before" "$work/restored" || die "restore did not put the machine back"
	[ ! -e "$work/state.json" ] || die "state file left after a full restore"
fi

if [ "$(id -u)" -eq 0 ]; then
	step "tune: forged journals are refused (exit 2) and change nothing; no journalled command runs"
	python3 - "$bin" "$work" <<'PY'
import json, os, subprocess, sys
binary, work = sys.argv[1], sys.argv[2]
boot = open("/proc/sys/kernel/random/boot_id").read().strip()
jdir = os.path.join(work, "forged")
os.makedirs(jdir, mode=0o700, exist_ok=True)
state = os.path.join(jdir, "tune-state.json")
victim = os.path.join(work, "victim")
marker = os.path.join(work, "marker")
with open(victim, "w") as f:
    f.write("precious\n")
def entry_file(path):
    return {"id": "file:" + path, "group": "default-irq-affinity",
            "change": {"kind": "file", "path": path, "original": "ff\n", "target": "bf"},
            "state": "applied"}
service = {"id": "service:irqbalance", "group": "irqbalance",
           "change": {"kind": "service", "name": "irqbalance",
                      "how": {"how": "signalled", "pid": 4000000,
                              "cmdline": ["/bin/sh", "-c", "touch " + marker]}},
           "state": "applied"}
cases = [
    ("a file outside the knobs", {"boot_id": boot, "entries": [entry_file(victim)]}, 0o644,
     'entry 0 ("file:' + victim + '")'),
    ("a journalled command", {"boot_id": boot, "entries": [service]}, 0o644,
     'entry 0 ("service:irqbalance"): recorded command line'),
    ("a journal others can write", {"boot_id": boot, "entries": []}, 0o666,
     "writable by group or others"),
    ("an empty boot id", {"boot_id": "", "entries": []}, 0o644, "records no boot id"),
    ("another boot's id", {"boot_id": "0a8f77e2-0000-4000-8000-000000000000", "entries": []},
     0o644, "written during another boot"),
]
for what, j, mode, want in cases:
    j = dict(version=1, rt_cpus="0", **j)
    with open(state, "w") as f:
        json.dump(j, f)
    os.chmod(state, mode)
    r = subprocess.run([binary, "tune", "restore", "--state", state], capture_output=True, text=True)
    assert r.returncode == 2, (what, r.returncode, r.stdout, r.stderr)
    assert want in r.stderr, (what, r.stderr)
    assert open(victim).read() == "precious\n", what
    assert not os.path.exists(marker), what
    print(f"refused: {what}")
PY

	step "tune: a closed stdout never panics; apply/restore still finish"
	snap >"$work/before-pipe"
	python3 - "$bin" "$rt" "$work/pipe-state.json" <<'PY'
import os, subprocess, sys
binary, rt, state = sys.argv[1], sys.argv[2], sys.argv[3]
groups = ["--group", "default-irq-affinity", "--group", "timer-migration"]
for args in (["doctor", "--cpu", rt], ["tune", "plan", "--cpu", rt, "--state", state],
             ["tune", "apply", "--cpu", rt, *groups, "--state", state],
             ["tune", "status", "--cpu", rt, "--state", state],
             ["tune", "restore", "--state", state]):
    r, w = os.pipe()
    os.close(r)
    p = subprocess.run([binary, *args], stdout=w, stderr=subprocess.PIPE, text=True)
    os.close(w)
    assert p.returncode != 101 and "panicked" not in p.stderr, (args, p.returncode, p.stderr)
    if args[0] == "tune" and args[1] in ("apply", "restore"):
        assert p.returncode == 0, (args, p.returncode, p.stderr)
    print(f"{' '.join(args[:2])} | (closed): exit {p.returncode}")
assert not os.path.exists(state), "restore left its journal"
PY
	snap >"$work/after-pipe"
	diff -u "$work/before-pipe" "$work/after-pipe" || die "apply/restore with a closed stdout did not round-trip"
fi

step "tune: a bad config value is rejected naming the key"
printf '[cycle]\ncpu = 0\n[tune]\nnic_irq_cpu = 99999\n' >"$work/bad.toml"
set +e
"$bin" doctor --config "$work/bad.toml" 2>"$work/err.txt"
rc=$?
set -e
cat "$work/err.txt"
[ "$rc" -eq 2 ] || die "bad config: exit $rc, expected 2"
grep -q "tune.nic_irq_cpu" "$work/err.txt" || die "error does not name tune.nic_irq_cpu"

step "tune: doctor benchmark on a fake RK3588 tree (~300 IRQs, ~500 tasks)"
"$bench" 20 | tee "$work/bench.txt"
python3 - "$work/bench.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
irqs = int(re.search(r"(\d+) IRQs", t).group(1))
tasks = int(re.search(r"(\d+) tasks", t).group(1))
med = float(re.search(r"median ([\d.]+) ms", t).group(1))
assert irqs >= 300 and tasks >= 500, (irqs, tasks)
assert med < 1000, f"doctor median {med} ms >= 1 s"
print(f"benchmark ok: median {med} ms")
PY

step "tune: all checks passed"
