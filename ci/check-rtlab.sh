#!/usr/bin/env bash
# Checks the rtlab crate (rtcat load / rtcat report) and rtcat-results (the result types): format, lints, tests (with
# stress-ng installed so its backend is tested too), a live cyclictest histogram through the report,
# an end-to-end load run and a report with plots. Exits non-zero on the first failure.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$RTCAT_TOP"

step "rtlab: install stress-ng, rt-tests (cyclictest), shellcheck"
ensure_apt stress-ng rt-tests shellcheck

step "rtlab: shellcheck"
shellcheck -x ci/check-rtlab.sh app/rtlab/assets/make-font-subset.sh

step "rtlab: no paths of the build machine in committed files"
if git grep -n -E '/(work|root|tmp)/' -- app/rtlab app/results; then
	die "machine-specific paths committed under app/rtlab or app/results"
fi

step "rtlab: font licence shipped with the embedded font"
[ -s app/rtlab/assets/DejaVuSans-subset.ttf ] || die "embedded font missing"
grep -q "bitstream-vera" app/rtlab/assets/LICENSE-DejaVu.txt || die "font licence missing"

# ci/test.sh runs fmt, clippy, the MSRV check and every test for the whole workspace first and
# sets RTCAT_WORKSPACE_CHECKED; run standalone, this script does the rtlab part itself.
if [ -z "${RTCAT_WORKSPACE_CHECKED:-}" ]; then
	step "rtlab: cargo fmt --check"
	cargo fmt -p rtlab -p rtcat-results --check

	step "rtlab: cargo clippy --all-targets -D warnings"
	cargo clippy -q -p rtlab -p rtcat-results --all-targets -- -D warnings

	step "rtlab: builds with the MSRV (Rust 1.90)"
	if command -v rustup >/dev/null; then
		rustup toolchain install 1.90 --profile minimal >/dev/null 2>&1 || die "cannot install Rust 1.90"
		cargo +1.90 build -q -p rtlab -p rtcat-results --all-targets
	else
		die "rustup missing: cannot check the MSRV"
	fi

	step "rtlab: cargo test (stress-ng backend required)"
	RTLAB_REQUIRE_STRESS_NG=1 cargo test -q -p rtlab -p rtcat-results
	# the command-line tests of load, report and ladder run the rtcat binary
	RTLAB_REQUIRE_STRESS_NG=1 cargo test -q -p rtcat --test lab_load --test lab_report \
		--test lab_untrusted --test ladder
fi

step "rtlab: build rtcat (load, report and ladder are its subcommands)"
bin=$(host_rtcat) || die "cannot build rtcat"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step "rtlab: live cyclictest histogram (this machine's rt-tests) through the report"
cyclictest -q -t 1 -i 1000 -l 300 -h 400 --histfile="$work/ct-hist.txt" >/dev/null
"$bin" report "$work/ct-hist.txt" --format csv >"$work/ct.csv"
cat "$work/ct.csv"
python3 ci/py/rtlab_cyclictest_csv.py "$work/ct.csv"

# the first CPU this shell may use (CI machines may restrict the cpuset)
cpu0=$(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')

step "rtlab: end-to-end load (2 s, CPU $cpu0 only, every kind of load)"
"$bin" load --cpus "$cpu0" --cpu-hogs 1 --mem tmpfs,anon --tmpfs-mb 4 --anon-mb 8 --fork-churn \
	--net udp --net-mbit 8 --duration 2 --json "$work/load.json" --quiet
python3 ci/py/rtlab_load_json.py "$work/load.json"
if compgen -G "/dev/shm/rtcat-load-*" >/dev/null; then
	ls -d /dev/shm/rtcat-load-* >&2
	die "load left tmpfs directories behind"
fi

step "rtlab: report with plots on the fixtures"
(cd app/rtlab/tests/fixtures &&
	"$bin" report stock rt bench cyclictest-2t.txt cyclictest-histfile.txt --plots "$work/plots") >"$work/report.md"
diff -u app/rtlab/tests/golden/report.md "$work/report.md" || die "report differs from the golden table"
n_svg=$(find "$work/plots" -name '*.svg' | wc -l)
n_png=$(find "$work/plots" -name '*.png' | wc -l)
echo "plots: $n_svg SVG, $n_png PNG"
if [ "$n_svg" -ne 15 ] || [ "$n_png" -ne 15 ]; then
	die "expected 15 SVG + 15 PNG plots"
fi

step "rtlab: untrusted inputs (crafted .hdr, FIFO, link to /dev/zero) refused within limits"
cp -r app/rtlab/tests/fixtures/bench "$work/crafted"
# a 40-byte V2 header claiming a 4 GiB payload
python3 ci/py/rtlab_crafted_hdr.py "$work/crafted/wake_lateness_ns.hdr"
rc=0
(ulimit -v 1048576 && timeout 20 "$bin" report "$work/crafted") >/dev/null 2>"$work/crafted.err" || rc=$?
cat "$work/crafted.err"
[ "$rc" -eq 1 ] || die "crafted .hdr: exit status $rc, expected 1 within 1 GiB of address space"
grep -q "payload of 4294967295 bytes" "$work/crafted.err" || die "crafted .hdr: the length is not named"
cp -r app/rtlab/tests/fixtures/stock "$work/fifo"
rm "$work/fifo/ladder.csv"
mkfifo "$work/fifo/ladder.csv"
ln -sf /dev/zero "$work/fifo/s0/run1/summary.json"
rc=0
timeout 20 "$bin" report "$work/fifo" >/dev/null 2>"$work/fifo.err" || rc=$?
cat "$work/fifo.err"
[ "$rc" -eq 1 ] || die "FIFO as ladder.csv: exit status $rc, expected 1 (124: it hung)"
grep -q "ladder.csv: not a regular file (a FIFO)" "$work/fifo.err" || die "FIFO not named"
rm "$work/fifo/ladder.csv"
cp app/rtlab/tests/fixtures/stock/ladder.csv "$work/fifo/"
rc=0
timeout 20 "$bin" report "$work/fifo" >/dev/null 2>"$work/fifo.err" || rc=$?
[ "$rc" -eq 1 ] || die "link to /dev/zero: exit status $rc, expected 1 (124: it hung)"
grep -q "summary.json: is a symbolic link (not followed)" "$work/fifo.err" || die "link not named"

step "rtlab: a closed stdout ends report and load quietly (no panic)"
# The read end is closed before the command starts, so its first write fails with EPIPE (with
# `| head -c 10` the table may fit in the pipe before head exits).
python3 ci/py/rtlab_closed_stdout.py "$bin" "$cpu0"

step "rtlab: contract with rtcat (bench output read by report; load refuses a bad duration)"
"$bin" bench --sim --no-rt --duration 2 --out "$work/bench" >"$work/bench.log" 2>&1 ||
	{ cat "$work/bench.log" >&2; die "rtcat bench --sim failed"; }
"$bin" report "$work/bench" --format json >"$work/bench-report.json"
python3 ci/py/rtlab_bench_report.py "$work/bench-report.json" "$work/bench/summary.json"
"$bin" load --cpus "$cpu0" --duration 0 2>"$work/load-err.txt" && die "rtcat load accepted --duration 0"
grep -q -- "--duration:" "$work/load-err.txt" || die "rtcat load: bad --duration not named"

echo
echo "rtlab: all checks passed"
