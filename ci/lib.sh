#!/usr/bin/env bash
# Shared helpers for rtcat's check scripts: install what is missing, say what runs.
# Source it: . "$(dirname "$0")/lib.sh"
set -euo pipefail

RTCAT_TOP=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
export RTCAT_TOP

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
		die "need root to run: $* (run as root or install sudo)"
	fi
}

# cargo_target_dir: where cargo puts this workspace's builds (CARGO_TARGET_DIR or target/).
cargo_target_dir() {
	cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

# host_rtcat: the debug rtcat binary of this tree, for the checks' own use. After ci/test.sh's
# rust area (RTCAT_WORKSPACE_CHECKED) the one `cargo test` built from the same sources is used:
# `cargo build -p rtcat` without the tests' dev-dependency features would recompile most of the
# workspace again (minutes of a cold CI run) for the same code.
host_rtcat() {
	local bin
	bin="$(cargo_target_dir)/debug/rtcat"
	if [ -z "${RTCAT_WORKSPACE_CHECKED:-}" ] || [ ! -x "$bin" ]; then
		cargo build -q --locked -p rtcat >&2 || return 1
	fi
	[ -x "$bin" ] || return 1
	echo "$bin"
}

# private_apt [--arch ARCH] DIR "deb ..." ...: an apt configuration of its own under DIR (its
# options in the array aopt), to look up and download (never install) packages of another
# Debian release or architecture; returns 1 if its lists cannot be fetched (log: DIR/update.log).
private_apt() {
	local archopt=()
	if [ "$1" = --arch ]; then
		archopt=(-o "APT::Architecture=$2" -o "APT::Architectures=$2")
		shift 2
	fi
	local dir=$1
	shift
	mkdir -p "$dir/lists/partial" "$dir/archives/partial"
	printf '%s\n' "$@" >"$dir/sources.list"
	aopt=(-o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir" "${archopt[@]}")
	apt-get "${aopt[@]}" update -qq >"$dir/update.log" 2>&1
}

_apt_updated=""
# ensure_apt PKG...: install the Debian packages that are not installed yet.
ensure_apt() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ -z "$_apt_updated" ] && [ -z "${RTCAT_APT_UPDATED:-}" ]; then
		as_root apt-get update -qq
		_apt_updated=1
		export RTCAT_APT_UPDATED=1
	fi
	step "apt-get install ${missing[*]}"
	# The lock timeout: ci/test.sh prepares the system test's rootfs in the background while
	# another area installs its packages.
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		-o DPkg::Lock::Timeout=1200 "${missing[@]}" >/dev/null
}

# ensure_backports [PKG]: add Debian bookworm-backports to the apt sources (linux-source-6.12 and
# qemu-system-arm 10 live there) unless PKG already has a candidate or the suite is there.
ensure_backports() {
	if [ $# -gt 0 ] && apt-cache policy "$1" 2>/dev/null | grep -q 'Candidate: [0-9]'; then return 0; fi
	grep -rqsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ && return 0
	echo "adding bookworm-backports to the apt sources"
	as_root tee /etc/apt/sources.list.d/rtcat-bookworm-backports.sources >/dev/null <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
	as_root apt-get update -qq
	export RTCAT_APT_UPDATED=1
}

# ensure_pip CMD PKG[==VER]: install a PyPI tool unless its command exists.
ensure_pip() {
	local cmd=$1 pkg=$2
	command -v "$cmd" >/dev/null && return 0
	step "pip install $pkg"
	# A stock Debian python refuses system-wide pip installs (PEP 668) unless told otherwise.
	PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "$pkg"
	hash -r
}
