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
	python3 - "$config" "$@" <<'EOF'
import re, sys
config, frags = sys.argv[1], sys.argv[2:]
have = {}
for line in open(config):
    m = re.match(r'^(CONFIG_[A-Za-z0-9_]+)=(.*)$', line.rstrip('\n'))
    if m:
        have[m.group(1)] = m.group(2)
want, bad, checked = {}, [], 0
for frag in frags:
    for n, line in enumerate(open(frag), 1):
        line = line.rstrip('\n')
        m1 = re.match(r'^(CONFIG_[A-Za-z0-9_]+)=(.*)$', line)
        m2 = re.match(r'^# (CONFIG_[A-Za-z0-9_]+) is not set$', line)
        if m1:
            sym, val = m1.group(1), m1.group(2)
        elif m2:
            sym, val = m2.group(1), None
        elif line.strip() == '' or line.startswith('#'):
            continue
        else:
            bad.append(f'{frag}:{n}: not a config line: {line!r}')
            continue
        checked += 1
        if sym in want and want[sym][0] != val:
            bad.append(f'{frag}:{n}: {sym} requested as {val or "not set"} but '
                       f'{want[sym][1]} asks for {want[sym][0] or "not set"}')
        want[sym] = (val, f'{frag}:{n}')
        got = have.get(sym)
        if val is None:
            if got not in (None, 'n'):
                bad.append(f'{frag}:{n}: {sym} requested not set, but is {sym}={got}')
        elif got != val:
            bad.append(f'{frag}:{n}: {sym}={val} requested, but is '
                       f'{sym + "=" + got if got is not None else "not set"} '
                       f'(unmet dependency, missing symbol or lost choice)')
for b in bad:
    print('  MISSING ' + b)
failed = {b.split(': ', 1)[0] for b in bad}
print(f'  {checked} options requested, {checked - len(failed)} survived')
sys.exit(1 if bad else 0)
EOF
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
