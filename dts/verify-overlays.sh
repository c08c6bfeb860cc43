#!/usr/bin/env bash
# Verify rtcat's device-tree overlays against a set of RK3588 board dtbs.
#
# Usage: dts/verify-overlays.sh --dtbs DIR [--bindings KERNEL_TREE | --schema PROCESSED.json]
#                               [--validate-max N] [--out DIR] [OVERLAY.dtso...]
#
# For every overlay (default: dts/*.dtso): compile it with `dtc -@` (warnings are errors); find
# its target node (target-path of each fragment); apply it with fdtoverlay onto every rk3588*.dtb
# under DIR that has that node; read every overlay property back from the result with fdtget and
# compare it with the overlay's value. With --bindings (a PATCHED kernel tree) a processed schema is
# made with dt-mk-schema from the bindings that describe the RK3588 GMAC node (rockchip-dwmac,
# snps,dwmac and what they reference; an unresolved $ref makes validation fail, it never passes
# silently), or --schema gives a ready one (e.g. from all bindings); every merged dtb whose target
# node is enabled is run through dt-validate and any message about the target node fails the check
# (--validate-max N: validate only the first N enabled boards per overlay; dt-validate costs ~4 s
# of CPU per RK3588 dtb).
# Exit status 0 = all good, 1 = a check failed, 2 = usage error.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dtbs="" schema="" bindings="" out="" vmax=0
overlays=()
die() { printf 'verify-overlays.sh: error: %s\n' "$*" >&2; exit 2; }
fail() { printf '  FAIL %s\n' "$*" >&2; failed=1; }

while [ $# -gt 0 ]; do
	case "$1" in
	--dtbs) dtbs=${2:?--dtbs needs a directory}; shift 2 ;;
	--schema) schema=${2:?--schema needs a processed schema file}; shift 2 ;;
	--validate-max) vmax=${2:?--validate-max needs a number}; shift 2 ;;
	--bindings) bindings=${2:?--bindings needs a kernel tree}; shift 2 ;;
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) die "unknown option '$1'" ;;
	*) overlays+=("$1"); shift ;;
	esac
done
if [ -z "$dtbs" ] || [ ! -d "$dtbs" ]; then die "--dtbs must name a directory with rk3588*.dtb files"; fi
if [ -n "$schema" ] && [ -n "$bindings" ]; then die "give --bindings or --schema, not both"; fi
[ ${#overlays[@]} -gt 0 ] || overlays=("$top"/dts/*.dtso)
[ -z "$schema" ] || [ -r "$schema" ] || die "--schema: cannot read $schema"
[[ $vmax =~ ^[0-9]+$ ]] || die "--validate-max: '$vmax' is not a number"
for t in dtc fdtoverlay fdtget; do command -v "$t" >/dev/null || die "$t not found (Debian: device-tree-compiler)"; done
if [ -n "$schema$bindings" ]; then
	command -v dt-validate >/dev/null || die "dt-validate not found (pip install dtschema)"
fi
if [ -z "$out" ]; then
	out=$(mktemp -d)
	trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

if [ -n "$bindings" ]; then
	b="$bindings/Documentation/devicetree/bindings/net"
	[ -f "$b/rockchip-dwmac.yaml" ] || die "--bindings: $bindings has no net/rockchip-dwmac.yaml"
	rm -rf "$out/bindings" && mkdir -p "$out/bindings/net"
	for f in rockchip-dwmac.yaml snps,dwmac.yaml ethernet-controller.yaml ethernet-phy.yaml mdio.yaml; do
		cp "$b/$f" "$out/bindings/net/"
	done
	dt-doc-validate "$out/bindings/net/snps,dwmac.yaml" ||
		{ fail "snps,dwmac.yaml does not pass dt-doc-validate (meta-schema)"; }
	schema="$out/processed-schema.json"
	dt-mk-schema -j -o "$schema" "$out/bindings" 2>"$out/dt-mk-schema.log" ||
		die "dt-mk-schema failed: $(cat "$out/dt-mk-schema.log")"
fi

mapfile -t boards < <(find "$dtbs" -name 'rk3588*.dtb' ! -name '*-rtcat-*' | sort)
[ ${#boards[@]} -gt 0 ] || die "no rk3588*.dtb under $dtbs"

failed=0
to_validate=()   # merged dtbs to validate
declare -A node_of   # merged dtb -> target node name (for filtering dt-validate output)

for dtso in "${overlays[@]}"; do
	name=$(basename "$dtso" .dtso)
	dtbo="$out/$name.dtbo"
	echo "overlay $name"
	if ! dtc -@ -I dts -O dtb -o "$dtbo" "$dtso" 2>"$out/$name.dtc.log" || [ -s "$out/$name.dtc.log" ]; then
		cat "$out/$name.dtc.log" >&2
		fail "$name: dtc -@ reported errors or warnings"
		continue
	fi
	mapfile -t frags < <(fdtget -l "$dtbo" / | grep '^fragment@')
	[ ${#frags[@]} -gt 0 ] || { fail "$name: no fragment in overlay"; continue; }
	applied=0 enabled=0
	for b in "${boards[@]}"; do
		bname=$(basename "$b" .dtb)
		ok=1
		for fr in "${frags[@]}"; do
			path=$(fdtget -t s "$dtbo" "/$fr" target-path 2>/dev/null) ||
				{ fail "$name: /$fr has no target-path (overlays must target by path)"; ok=0; break; }
			fdtget "$b" "$path" compatible >/dev/null 2>&1 || { ok=0; break; }
		done
		[ "$ok" -eq 1 ] || continue
		merged="$out/$bname-rtcat-$name.dtb"
		if ! fdtoverlay -i "$b" -o "$merged" "$dtbo" 2>"$out/$bname.$name.log"; then
			fail "$name on $bname: fdtoverlay: $(cat "$out/$bname.$name.log")"
			continue
		fi
		applied=$((applied + 1))
		for fr in "${frags[@]}"; do
			path=$(fdtget -t s "$dtbo" "/$fr" target-path)
			for prop in $(fdtget -p "$dtbo" "/$fr/__overlay__"); do
				want=$(fdtget -t x "$dtbo" "/$fr/__overlay__" "$prop")
				got=$(fdtget -t x "$merged" "$path" "$prop" 2>/dev/null) || got="<missing>"
				[ "$want" = "$got" ] || fail "$name on $bname: $path $prop is $got, overlay sets $want"
			done
			status=$(fdtget -t s "$merged" "$path" status 2>/dev/null || echo okay)
			if [ "$status" = okay ] || [ "$status" = ok ]; then
				enabled=$((enabled + 1))
				[ "$vmax" -eq 0 ] || [ "$enabled" -le "$vmax" ] || continue
				to_validate+=("$merged")
				node_of[$merged]=${path##*/}
			fi
		done
	done
	echo "  applied onto $applied dtbs, properties read back; target enabled on $enabled"
	[ "$applied" -gt 0 ] || fail "$name: applied onto no dtb (target node not found in any board)"
done

if [ -n "$schema" ] && [ ${#to_validate[@]} -gt 0 ]; then
	echo "dt-validate ${#to_validate[@]} merged dtbs (target node enabled) against $(basename "$schema")"
	# One run loads the (large) schema once. Other nodes of upstream dtbs have their own,
	# unrelated findings; only messages about our target nodes count.
	dt-validate -s "$schema" "${to_validate[@]}" >"$out/dt-validate.log" 2>&1 || true
	for m in "${to_validate[@]}"; do
		hits=$(grep -F "$(basename "$m"): ${node_of[$m]} " "$out/dt-validate.log" || true)
		if [ -n "$hits" ]; then
			printf '%s\n' "$hits" >&2
			fail "$(basename "$m"): dt-validate rejects ${node_of[$m]}"
		fi
	done
	[ "$failed" -eq 0 ] && echo "  no schema errors on the target nodes"
fi

if [ "$failed" -ne 0 ]; then
	echo "verify-overlays: FAILED" >&2
	exit 1
fi
echo "verify-overlays: OK"
