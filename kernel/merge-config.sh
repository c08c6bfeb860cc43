#!/usr/bin/env bash
# Merge rtcat's config fragments onto a base defconfig and verify that every requested
# option survived olddefconfig (the silent failure mode of fragments: an option whose
# dependencies are unmet is dropped without a word).
#
# Usage: kernel/merge-config.sh --src KERNEL_TREE --out BUILD_DIR [--base DEFCONFIG]
#                               [--arch arm64] [--cross aarch64-linux-gnu-] FRAGMENT...
#        kernel/merge-config.sh --verify-only CONFIG FRAGMENT...
#
# --base defaults to "defconfig" (mainline arm64); the vendor tree uses rockchip_linux_defconfig.
# A fragment line "CONFIG_X=v" requires exactly that line in the result; "# CONFIG_X is not set"
# requires X to be unset (or absent, when the symbol does not exist in this tree). Two fragments
# asking for different values of one symbol are an error. Exit status: 0 all survived, 1 some did
# not (each is listed with fragment:line, requested and actual value), 2 usage/build error.
set -euo pipefail

src="" out="" base=defconfig arch=arm64 cross=aarch64-linux-gnu- verify_only=""
frags=()
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { printf 'merge-config.sh: error: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case "$1" in
	--src) src=${2:?--src needs a kernel tree}; shift 2 ;;
	--out) out=${2:?--out needs a build dir}; shift 2 ;;
	--base) base=${2:?--base needs a defconfig name}; shift 2 ;;
	--arch) arch=${2:?--arch needs an ARCH}; shift 2 ;;
	--cross) cross=${2?--cross needs a prefix}; shift 2 ;;
	--verify-only) verify_only=${2:?--verify-only needs a .config}; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) die "unknown option '$1'" ;;
	*) frags+=("$1"); shift ;;
	esac
done
[ ${#frags[@]} -gt 0 ] || die "no fragment given"
for i in "${!frags[@]}"; do
	f=${frags[$i]}
	[ -r "$f" ] || die "cannot read fragment $f"
	frags[i]=$(cd "$(dirname "$f")" && pwd)/$(basename "$f")
done

# verify CONFIG FRAGMENT...: prints one line per failed option, returns 1 if any failed.
verify() {
	local config=$1; shift
	python3 "$here/verify-config.py" "$config" "$@"
}

if [ -n "$verify_only" ]; then
	[ -r "$verify_only" ] || die "cannot read $verify_only"
	verify "$verify_only" "${frags[@]}"
	exit $?
fi

[ -n "$src" ] || die "--src is required"
[ -n "$out" ] || die "--out is required"
if [ ! -f "$src/Makefile" ] || [ ! -x "$src/scripts/kconfig/merge_config.sh" ]; then die "$src is not a kernel tree"; fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
mk=(make -s -C "$src" O="$out" ARCH="$arch" CROSS_COMPILE="$cross")

echo "merge-config: $base + ${frags[*]##*/} ($(make -s -C "$src" kernelversion 2>/dev/null || echo '?'))"
"${mk[@]}" "$base" >/dev/null || die "make $base failed"
# merge_config.sh prints every override; keep its log for the curious.
(cd "$out" && "$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "${frags[@]}") \
	>"$out/merge_config.log" 2>&1 || die "merge_config.sh failed (see $out/merge_config.log)"
"${mk[@]}" olddefconfig >"$out/olddefconfig.log" 2>&1 || die "make olddefconfig failed (see $out/olddefconfig.log)"
if verify "$out/.config" "${frags[@]}"; then
	echo "merge-config: every requested option survived ($out/.config)"
else
	echo "merge-config: FAILED: requested options were dropped ($out/.config)" >&2
	exit 1
fi
