#!/usr/bin/env bash
# Build the rtcat Debian packages (amd64 natively, arm64 cross-compiled) with cargo-deb.
#
# Usage: ci/build-deb.sh [--arch amd64|arm64|all] [--out DIR] [--with-cross]
#   --arch        which packages to build (default: all)
#   --out         where the .deb files go (default: out/deb in the repository)
#   --with-cross  compile with cross (Cross.toml, needs docker or podman) instead of the host
#                 toolchain, then package the result with cargo-deb --no-build
#
# Installs what it needs: cargo-deb (pinned), the aarch64 Rust target, Debian's
# gcc-aarch64-linux-gnu + libc6-dev-arm64-cross as the cross linker (binutils for stripping and
# the dbgsym split), and cross (pinned) with --with-cross.
# Honours CARGO_TARGET_DIR. Prints the wall time of each build.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "$0")/lib.sh"

CARGO_DEB_VERSION=3.8.0
CROSS_VERSION=0.2.5
arch=all
with_cross=""
out="$RTCAT_TOP/out/deb"

while [ $# -gt 0 ]; do
	case "$1" in
	--arch) arch=${2:?--arch needs amd64, arm64 or all}; shift 2 ;;
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	--with-cross) with_cross=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done
case "$arch" in
amd64) arches=(amd64) ;;
arm64) arches=(arm64) ;;
all) arches=(amd64 arm64) ;;
*) die "--arch: '$arch' is not one of amd64, arm64, all" ;;
esac
[ "$(uname -m)" = x86_64 ] || die "this script builds on an x86_64 host (amd64 natively, arm64 cross)"

cd "$RTCAT_TOP"

# The Debian changelog must describe the version being packaged.
crate_version=$(cargo metadata --no-deps --format-version 1 |
	python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "rtcat"))')
changelog_version=$(sed -n '1s/^rtcat (\([^)]*\)).*/\1/p' ci/deb/changelog)
[ "$changelog_version" = "$crate_version-1" ] ||
	die "ci/deb/changelog: top entry is '$changelog_version' but app/rtcat is version $crate_version (expected '$crate_version-1'); add a changelog entry"

step "tools"
if ! cargo deb --version 2>/dev/null | grep -qF "$CARGO_DEB_VERSION"; then
	step "cargo install cargo-deb $CARGO_DEB_VERSION"
	cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
fi
cargo deb --version
ensure_apt dpkg-dev
if [[ " ${arches[*]} " == *" arm64 "* ]]; then
	ensure_apt gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu
	rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
		rustup target add aarch64-unknown-linux-gnu
	export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
	export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
fi

# add_md5sums DEB: cargo-deb writes no DEBIAN/md5sums; add it (debsums, dpkg --verify) and
# repack with the same compression and root ownership.
add_md5sums() {
	local deb=$1 tmp
	tmp=$(mktemp -d)
	dpkg-deb -R "$deb" "$tmp/pkgroot"
	(cd "$tmp/pkgroot" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
		xargs -0 md5sum >DEBIAN/md5sums)
	chmod 644 "$tmp/pkgroot/DEBIAN/md5sums"
	dpkg-deb --root-owner-group -Zxz -b "$tmp/pkgroot" "$deb" >/dev/null
	rm -rf "$tmp"
}

if [ -n "$with_cross" ]; then
	if ! cross --version 2>/dev/null | grep -qF "cross $CROSS_VERSION"; then
		step "cargo install cross $CROSS_VERSION"
		cargo install --locked --quiet cross --version "$CROSS_VERSION"
	fi
	command -v docker >/dev/null || command -v podman >/dev/null ||
		die "--with-cross needs docker or podman (cross runs the build in a container)"
fi

mkdir -p "$out"
for a in "${arches[@]}"; do
	case "$a" in
	amd64) triple=x86_64-unknown-linux-gnu ;;
	arm64) triple=aarch64-unknown-linux-gnu ;;
	esac
	step "cargo deb -p rtcat --target $triple ($a)"
	start=$(date +%s)
	# --profile dist: the shipping profile (thin LTO, Cargo.toml). --dbgsym: it keeps line tables
	# (debug = 1); they go into a separate rtcat-dbgsym .ddeb for crash analysis and the binary
	# in the .deb is stripped.
	# rtcat-web (the commissioning page) is an asset of the rtcat package: built first, as
	# cargo-deb builds only the package it packs.
	if [ -n "$with_cross" ]; then
		cross build -p rtcat -p rtcat-web --profile dist --locked --target "$triple"
		cargo deb -p rtcat --profile dist --target "$triple" --output "$out" --no-build --dbgsym --compress-debug-symbols=zlib
	else
		cargo build -p rtcat-web --profile dist --locked --target "$triple"
		cargo deb -p rtcat --profile dist --target "$triple" --output "$out" --locked --dbgsym --compress-debug-symbols=zlib
	fi
	add_md5sums "$out/rtcat_${changelog_version}_${a}.deb"
	echo "built $a in $(($(date +%s) - start)) s"
done

step "packages"
for a in "${arches[@]}"; do
	deb="$out/rtcat_${changelog_version}_${a}.deb"
	[ -f "$deb" ] || die "expected $deb was not produced"
	[ "$(dpkg-deb -f "$deb" Architecture)" = "$a" ] || die "$deb: Architecture is not $a"
	echo "$deb"
done
