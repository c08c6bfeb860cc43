#!/usr/bin/env bash
# rtcat's one test command: every check the project relies on. Installs what is missing (as root,
# or through sudo), then runs the Rust checks (fmt, clippy, MSRV, tests — including the veth /
# network-namespace tests, which need root), each area's checks (rtlab, tune, web, kernel, image) and
# the QEMU system test.
#
#   ci/test.sh            everything
#   ci/test.sh rust       only the Rust workspace checks
#   ci/test.sh rtlab|tune|web|kernel|image|system   one area (after `rust`, or standalone)
#
# `system` boots the mainline-rt kernel with the arm64 .deb in qemu-system-aarch64 (root): about
# 5 minutes with its caches warm, longer on a cold machine (kernel build and debootstrap, cached
# under ~/.cache/rtcat/system; see ci/system/README.md), then the A/B update test (U-Boot, RAUC
# bundles, rollback: about 10.5 min more on a quiet 2-core VM, 16 loaded; RTCAT_SYSTEST_AB=0 skips it). It runs last: it
# reuses the arm64 build of `image`.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$RTCAT_TOP"

MSRV=1.90
areas=("$@")
[ ${#areas[@]} -eq 0 ] && areas=(rust rtlab tune web kernel image system)

times=()
timed() {
	local name=$1
	shift
	local t0=$SECONDS
	"$@"
	printf '==> %s took %ds\n' "$name" $((SECONDS - t0))
	times+=("$name $((SECONDS - t0))s")
}
t_start=$SECONDS

rust_checks() {
	step "rust: toolchain components and the $MSRV toolchain (MSRV)"
	# iproute2: veth tests; rt-tests: cyclictest import; stress-ng: the load backend tests;
	# curl: a web page behind a simulated drive over EoE (app/rtcat/tests/eoe.rs).
	ensure_apt iproute2 ethtool rt-tests stress-ng curl
	# prometheus_client: the exporter's tests parse /metrics with its text parser (app/rtcat/tests/exporter.rs).
	python3 -c 'import prometheus_client' 2>/dev/null ||
		PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "prometheus-client==0.21.1"
	rustup component add rustfmt clippy >/dev/null 2>&1 || true
	rustup toolchain install "$MSRV" --profile minimal >/dev/null

	step "rust: cargo fmt --check"
	cargo fmt --all --check

	step "rust: cargo clippy --all-targets -D warnings"
	cargo clippy --locked --workspace --all-targets -- -D warnings

	step "rust: the README's first command builds (rtcat without its default features: no plots)"
	cargo clippy --locked -p rtcat --no-default-features -- -D warnings

	step "rust: cargo +$MSRV check --locked (MSRV)"
	cargo "+$MSRV" check --locked --workspace --all-targets

	step "rust: the master's import graph (issue 27: no file in an import circle)"
	python3 ci/py/rust_modgraph.py --no-circles app/master/src

	step "rust: library docs (missing_docs is denied in the crates; rustdoc warnings too)"
	RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps -q -p rtcat-master -p rtcat-results -p rtcat-packet -p rtcat-esi -p rtcat-shm -p rtcat-control

	step "rust: what the shipped binary and the master library are built from"
	# The master without its 'sim' feature must not contain the simulator, and the rtcat binary
	# must not contain the test kits (rttune's testkit, ecsim's netns).
	if cargo tree --locked -p rtcat-master -e normal --prefix none | grep -q '^ecsim '; then
		die "rtcat-master depends on ecsim without the sim feature"
	fi
	# The master's configuration is the master's (issue 27): [output] and [tune] belong to the
	# binary, so the library does not pull in the tuner (and with it caps).
	if cargo tree --locked -p rtcat-master -e normal --prefix none --features sim | grep -E -q '^(rttune|caps) '; then
		die "rtcat-master depends on rttune (or its caps)"
	fi
	# The command-line flags are the binary's alone: no library of ours builds clap
	# (ethercrab-wire-derive's own build-time dependency on clap is not ours). `cargo tree -i`
	# fails when clap is not in a library's graph at all: then there is nothing to find.
	for lib in rtcat-master rtlab rttune; do
		if cargo tree --locked -p "$lib" -e normal --prefix none -i clap --depth 1 2>/dev/null | grep -E -q '^(rttune|rtlab|rtcat-master|rtcat-results|rtcat-packet|safefs) '; then
			die "$lib builds clap through one of rtcat's crates"
		fi
	done
	# The client crates other programs link (the shared image's Rust client, the control
	# socket's protocol and client) carry neither ethercrab nor the master.
	for lib in rtcat-shm rtcat-control; do
		if cargo tree --locked -p "$lib" -e normal --prefix none | grep -E -q '^(ethercrab|rtcat-master) '; then
			die "$lib depends on ethercrab or rtcat-master"
		fi
	done
	if cargo tree --locked -p rtcat -e normal,features --prefix none | grep -E -q '"(testkit|netns)"'; then
		die "the rtcat binary is built with a test kit feature (testkit, netns)"
	fi

	step "rust: cargo test (root-only tests are required when running as root)"
	if [ "$(id -u)" -eq 0 ]; then
		export RTCAT_REQUIRE_ROOT_TESTS=1
	fi
	# rttune's tests run serially in ci/check-tune.sh (its live tests change shared knobs).
	# --no-fail-fast: one CI run reports every failing test binary, not the first.
	RTLAB_REQUIRE_STRESS_NG=1 cargo test --locked --no-fail-fast --workspace --exclude rttune

	step "rust: issue 33's bar, rtcat's round trip ÷ the bare ping over veth (pinned, test profile)"
	# The test binary the workspace's run just built (same flags: nothing is rebuilt); about 10 s,
	# 30 s when the machine makes it retry. Root only (network namespaces); it prints its figures.
	if [ "$(id -u)" -eq 0 ]; then
		cargo test --locked --no-fail-fast --workspace --exclude rttune --test floor_veth \
			round_trip_over_the_floor_pinned -- --ignored --nocapture
	fi
	export RTCAT_WORKSPACE_CHECKED=1
}

# The system test's base rootfs (debootstrap through qemu-user: downloads and one emulated CPU)
# is prepared in the background while the image area runs, once the timing-sensitive tests
# are behind us; the system area waits for it.
rootfs_pid=""
rootfs_log="$RTCAT_TOP/out/system-rootfs.log"
rootfs_background() {
	[[ " ${areas[*]} " == *" system "* ]] && [ "$(id -u)" -eq 0 ] || return 0
	ensure_apt debootstrap qemu-user-static debian-archive-keyring
	mkdir -p "$(dirname "$rootfs_log")"
	step "system: the guest's base rootfs, prepared in the background (log: out/system-rootfs.log)"
	bash ci/check-system.sh --rootfs-only >"$rootfs_log" 2>&1 &
	rootfs_pid=$!
}
rootfs_wait() {
	[ -n "$rootfs_pid" ] || return 0
	local t0=$SECONDS
	wait "$rootfs_pid" || { tail -40 "$rootfs_log" >&2; die "preparing the system test's rootfs failed (log: $rootfs_log)"; }
	rootfs_pid=""
	echo "system: background rootfs ready (waited $((SECONDS - t0))s)"
}

for a in "${areas[@]}"; do
	case $a in
	rust) timed rust rust_checks ;;
	rtlab) timed rtlab bash ci/check-rtlab.sh ;;
	tune) timed tune bash ci/check-tune.sh ;;
	web) timed web bash ci/check-web.sh ;;
	kernel) timed kernel bash ci/check-kernel.sh ;;
	image)
		rootfs_background
		timed image bash ci/check-image.sh
		;;
	system)
		rootfs_wait
		timed system bash ci/check-system.sh
		;;
	*) die "unknown area $a (rust, rtlab, tune, web, kernel, image, system)" ;;
	esac
done
# The closing line: every area's wall time and the total (CI's limit is 90 minutes).
summary=$(printf '%s, ' "${times[@]}")
printf '\nall checks passed: %s (total %dm%02ds)\n' "${summary%, }" $(((SECONDS - t_start) / 60)) $(((SECONDS - t_start) % 60))
