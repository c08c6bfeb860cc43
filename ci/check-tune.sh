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

step "tune: build rtcat (doctor, tune, and the CPU-list parser) and the benchmark (release)"
cargo build -q --release -p rttune --example bench_doctor
tdir=$(cargo_target_dir)
bench="$tdir/release/examples/bench_doctor"
[ -x "$bench" ] || die "bench_doctor not built"
rtcat=$(host_rtcat) || die "cannot build rtcat"
bin="$rtcat"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cpus=$(cat /sys/devices/system/cpu/online)
online=$("$rtcat" config cpus --members -- "$cpus") || die "/sys/devices/system/cpu/online: '$cpus' is not a CPU list"
read -ra online <<<"$online"
rt=${online[-1]} # the last online CPU
step "tune: doctor --json against this machine (RT CPU $rt)"
set +e
"$bin" doctor --cpu "$rt" --json >"$work/doctor.json"
rc=$?
set -e
python3 ci/py/tune_doctor_json.py "$work/doctor.json" "$rc"
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
	python3 ci/py/tune_coalesce.py "$work/ethtool-c.txt" "$work/d-$ifc.json" "$ifc"
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
	python3 ci/py/tune_forged_journals.py "$bin" "$work"

	step "tune: a closed stdout never panics; apply/restore still finish"
	snap >"$work/before-pipe"
	python3 ci/py/tune_closed_stdout.py "$bin" "$rt" "$work/pipe-state.json"
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
python3 ci/py/tune_bench.py "$work/bench.txt"

step "tune: all checks passed"
