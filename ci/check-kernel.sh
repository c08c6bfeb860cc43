#!/usr/bin/env bash
# "cond && ok ... || bad ...": ok/bad only print, so the SC2015 caveat does not apply.
# shellcheck disable=SC2015
# rtcat CI: kernel configuration fragments, stmmac coalescing patches, device-tree overlays and
# boot-argument generation (issues 6 and 18). Runs as root on a fresh Debian 12; installs what it
# needs; caches unpacked kernel trees and build dirs under ${XDG_CACHE_HOME:-~/.cache}/rtcat/ci-kernel.
#
# Every series in kernel/patches/ is checked against the source it targets where CI can reach it
# (Debian packages only): mainline-6.12 on linux-source-6.12, bsp-5.10 on bullseye's 5.10 + RT.
# mainline-6.18 (the mainline-rt image's series) has no Debian package; it was verified outside
# CI against 6.18.39 (kernel/patches/mainline-6.18/VERIFIED.md) and CI applies and compiles it
# on the nearest newer tree Debian has (trixie-backports linux-source-7.x) to catch drift.
#
# Checks:
#  1. kernel/bootargs.sh: output generated from kernel/rt-cpus.env; bad CPU lists rejected (exit 2,
#     field named); shellcheck of the kernel/dts scripts.
#  2. 6.12 (Debian linux-source-6.12): kernel/patch-series.sh picks mainline-6.12 for it; those
#     patches apply (git apply --check), carry Upstream-Status and Signed-off-by, define no
#     STMMAC_FLAG_* bit twice, and checkpatch.pl --strict reports 0 errors/warnings/checks (all
#     series). Negative controls: the 6.18 and 5.10 driver patches must not apply to 6.12.
#  3. Fragments merged onto arm64 defconfig (RK3588 set, QEMU set, Rockchip-only set): every
#     requested option survives; the checker itself must reject PREEMPT_RT without EXPERT.
#  4. stmmac + dwmac-rk compile with the patch under the PREEMPT_RT config (-Werror).
#  5. RK3588 dtbs built from the same tree; overlays compile with dtc -@, apply with fdtoverlay,
#     properties read back with fdtget, dt-validate clean with the patched binding; an
#     out-of-range value and the unpatched binding must both be rejected.
#  6. Newer tree (lowest linux-source-X.Y > 6.18 in Debian trixie-backports): kernel/patch-series.sh
#     and kernel/build.sh refuse it (it has no series of its own); mainline-6.18 applies,
#     checkpatch --strict on it, the fragments survive, stmmac + dwmac-rk compile under
#     PREEMPT_RT (-Werror). Negative control: the 6.12 driver patch must not apply.
#  7. 5.10 variant: Debian bullseye's linux-source-5.10 + its RT patch + our patch (the series
#     patch-series.sh picks for 5.10), fragments verified, stmmac compiled with -Werror; the 6.12
#     driver patch must not apply. 6 and 7 are skipped with a notice only if that Debian archive
#     is unreachable.
#  8. kernel/build.sh's own selection: a 6.12 tree with --series 6.18 is refused.
# Exit status: 0 all checks passed, 1 otherwise.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "$0")/lib.sh"
top=$RTCAT_TOP
cache=${XDG_CACHE_HOME:-$HOME/.cache}/rtcat/ci-kernel
mkdir -p "$cache"
cross=aarch64-linux-gnu-
jobs=$(nproc)
failures=()
t0=$(date +%s)

ok() { printf '  ok   %s\n' "$*"; }
bad() { printf '  FAIL %s\n' "$*" >&2; failures+=("$*"); }
elapsed() { printf '  (%ss)\n' "$(($(date +%s) - t0))"; }
# Never let git apply discover an enclosing repository.
export GIT_CEILING_DIRECTORIES=$cache
P="$top/kernel/patches"

# applies TREE PATCH: git apply --check succeeds (no fuzz, offsets allowed).
applies() { (cd "$1" && git apply --check "$2" 2>/dev/null); }

# flags_unique HEADER: no two STMMAC_FLAG_* share a bit (a forced hunk could define one twice).
flags_unique() {
	local dup
	dup=$(sed -n 's/^#define \(STMMAC_FLAG_[A-Z0-9_]*\)[[:space:]]*BIT(\([0-9]*\))$/\2/p' "$1" | sort -n | uniq -d)
	[ -z "$dup" ] || { echo "  STMMAC_FLAG_* bit(s) defined twice in $1: $dup" >&2; return 1; }
}

# checkpatch TREE NAME PATCH...: checkpatch.pl --strict of TREE, 0 errors/warnings/checks each.
checkpatch() {
	local tree=$1 what=$2 p res
	shift 2
	for p in "$@"; do
		res=$(cd "$tree" && ./scripts/checkpatch.pl --strict --no-tree --no-color "$p" 2>&1 | grep '^total:' || true)
		case "$res" in "total: 0 errors, 0 warnings, 0 checks,"*) ok "$(basename "$(dirname "$p")")/$(basename "$p") checkpatch --strict ($what): $res" ;;
		*) bad "$(basename "$(dirname "$p")")/$(basename "$p") checkpatch --strict ($what): ${res:-no result}" ;; esac
	done
}


# unpack_deb_source DEB TARBALL DIR VERSION: the kernel tarball inside a linux-source .deb,
# unpacked to DIR once per VERSION.
unpack_deb_source() {
	local deb=$1 tarball=$2 dir=$3 ver=$4
	[ "$(cat "$dir/.rtcat-source" 2>/dev/null)" = "$ver" ] && return 0
	echo "  unpacking $(basename "$deb")"
	rm -rf "$dir.x" "$dir" && dpkg-deb -x "$deb" "$dir.x" && mkdir -p "$dir" &&
		tar -xf "$dir.x/usr/src/$tarball" -C "$dir" --strip-components=1 || return 1
	[ -f "$dir.x/usr/src/linux-patch-5.10-rt.patch.xz" ] && cp "$dir.x/usr/src/linux-patch-5.10-rt.patch.xz" "$dir/.rtcat-rt.patch.xz"
	rm -rf "$dir.x"
	echo "$ver" >"$dir/.rtcat-source"
}

# ---- tools ----------------------------------------------------------------------------------
step "install tools"
ensure_backports linux-source-6.12
ensure_apt linux-source-6.12 gcc-aarch64-linux-gnu device-tree-compiler bc bison flex \
	libssl-dev libelf-dev make cpio kmod rsync xz-utils perl patch shellcheck
# Debian 12's system python refuses pip installs without this (PEP 668).
export PIP_BREAK_SYSTEM_PACKAGES=1
ensure_pip dt-validate dtschema==2026.9
elapsed

# ---- 1. boot args -----------------------------------------------------------------------------
step "1. boot args from kernel/rt-cpus.env; script hygiene"
ba="$top/kernel/bootargs.sh"
rt=$(sed -n 's/^RTCAT_RT_CPUS=//p' "$top/kernel/rt-cpus.env")
hk=$(sed -n 's/^RTCAT_HOUSEKEEPING_CPUS=//p' "$top/kernel/rt-cpus.env")
want="isolcpus=nohz,domain,managed_irq,$rt nohz_full=$rt rcu_nocbs=$rt irqaffinity=$hk cpufreq.default_governor=performance"
got=$("$ba") || true
[ -n "$rt" ] && [ -n "$hk" ] && [ "$got" = "$want" ] && ok "plain: $got" || bad "bootargs plain: got '$got', want '$want'"
got=$("$ba" --format extlinux --base "root=/dev/mmcblk0p2 rw nohz_full=3") || true
[ "$got" = "$(printf '\tappend root=/dev/mmcblk0p2 rw %s' "$want")" ] && ok "extlinux append (old RT args replaced)" ||
	bad "bootargs extlinux: '$got'"
if "$ba" --format chosen --base "console=ttyFIQ0" 2>/dev/null | sed '1s|^|/dts-v1/;\n|' |
	dtc -q -I dts -O dtb -o "$cache/chosen.dtb" - &&
	[ "$(fdtget -t s "$cache/chosen.dtb" /chosen bootargs)" = "console=ttyFIQ0 $want" ]; then
	ok "chosen: compiles with dtc, /chosen/bootargs reads back"
else
	bad "bootargs chosen output does not compile or read back"
fi
got=$("$ba" --format yocto) || true
[ "$got" = "UBOOT_EXTLINUX_KERNEL_ARGS:append = \" $want\"" ] && ok "yocto" || bad "bootargs yocto: '$got'"
while IFS='|' read -r args field; do
	rc=0
	# shellcheck disable=SC2086 # word splitting of the test arguments is intended
	err=$("$ba" $args 2>&1 >/dev/null) || rc=$?
	if [ "$rc" -eq 0 ]; then
		bad "bootargs accepted bad input: $args"
	elif [ "$rc" -ne 2 ] || ! grep -qF -- "$field" <<<"$err"; then
		bad "bootargs $args: expected exit 2 naming $field, got rc=$rc: $err"
	else
		ok "rejects $args ($field)"
	fi
done <<'EOF'
--rt-cpus 0|RTCAT_RT_CPUS
--rt-cpus 8|RTCAT_RT_CPUS
--rt-cpus 6,x|RTCAT_RT_CPUS
--rt-cpus 7-6|RTCAT_RT_CPUS
--housekeeping 1-5,7|RTCAT_HOUSEKEEPING_CPUS
--rt-cpus 5|overlap
--nr-cpus 0|RTCAT_NR_CPUS
--format nope|--format
EOF
printf 'RTCAT_RT_CPUS=6\nRTCAT_BOGUS=1\n' >"$cache/bad.env"
"$ba" --env "$cache/bad.env" >/dev/null 2>&1 && bad "bootargs accepted an unknown key in the env file" ||
	ok "rejects an unknown key in rt-cpus.env"
scripts=("$top"/kernel/*.sh "$top"/dts/*.sh "$top/ci/check-kernel.sh")
shellcheck -x "${scripts[@]}" && ok "shellcheck ${scripts[*]##*/}" || bad "shellcheck"
elapsed

# ---- 2. 6.12 tree and patches -------------------------------------------------------------------
step "2. 6.12 source, patch series selection, patches, checkpatch"
tarball=/usr/src/linux-source-6.12.tar.xz
ver=$(dpkg-query -W -f='${Version}' linux-source-6.12)
pin=$(sed -n 's/^M612_DEB_VERSION=//p' "$top/kernel/sources.env")
[ "$ver" = "$pin" ] && ok "linux-source-6.12 $ver (the pinned version)" ||
	echo "  note linux-source-6.12 is $ver, kernel/sources.env pins $pin (checking against $ver)"
pristine="$cache/linux-6.12"
if [ "$(cat "$pristine/.rtcat-source" 2>/dev/null)" != "$ver" ]; then
	echo "  unpacking $tarball"
	rm -rf "$pristine" && mkdir -p "$pristine"
	tar -xf "$tarball" -C "$pristine" --strip-components=1
	echo "$ver" >"$pristine/.rtcat-source"
fi
got=$("$top/kernel/patch-series.sh" --flavour mainline-rt --tree "$pristine" --name 2>&1) || true
[ "$got" = mainline-6.12 ] && ok "patch-series.sh picks $got for $ver" || bad "patch-series.sh for 6.12 ($ver): '$got', want mainline-6.12"
work="$cache/work-6.12"
rm -rf "$work" && cp -al "$pristine" "$work"
for p in "$P"/mainline-6.12/*.patch; do
	n=$(basename "$p")
	grep -q '^Upstream-Status: ' "$p" && grep -q '^Signed-off-by: ' "$p" && ok "$n: Upstream-Status, Signed-off-by" ||
		bad "$n: lacks Upstream-Status or Signed-off-by"
	if (cd "$work" && git apply --check "$p" && git apply "$p"); then ok "$n applies"; else bad "$n does not apply to 6.12 ($ver)"; fi
done
flags_unique "$work/include/linux/stmmac.h" && ok "6.12 + mainline-6.12: every STMMAC_FLAG_* bit defined once" ||
	bad "6.12 + mainline-6.12: an STMMAC_FLAG_* bit is defined twice"
checkpatch "$pristine" "6.12 script" "$P"/mainline-6.12/*.patch "$P"/mainline-6.18/*.patch "$P"/bsp-5.10/*.patch
for p in "$P"/mainline-6.18/*.patch "$P"/bsp-5.10/*.patch; do
	grep -q '^Upstream-Status: ' "$p" && grep -q '^Signed-off-by: ' "$p" || bad "$(basename "$(dirname "$p")")/$(basename "$p") lacks Upstream-Status or Signed-off-by"
done
# Negative controls: the driver patches of the other series must not go into 6.12, or choosing
# the series by version would not matter (and a wrong choice would not be caught).
for p in "$P"/mainline-6.18/0002-*.patch "$P"/bsp-5.10/0001-*.patch; do
	q="$(basename "$(dirname "$p")")/$(basename "$p")"
	applies "$pristine" "$p" && bad "$q applies to 6.12: the series are not version-specific" ||
		ok "$q does not apply to 6.12 (negative control)"
done
elapsed

# ---- 3. fragments -----------------------------------------------------------------------------
step "3. fragments merged onto arm64 defconfig"
F="$top/kernel/fragments"
build="$cache/build-6.12"
"$top/kernel/merge-config.sh" --src "$work" --out "$build" "$F/rt-core.cfg" "$F/rk3588-ethercat.cfg" "$F/rk3588-mainline.cfg" &&
	ok "RK3588 RT set: every option survived" || bad "RK3588 RT fragments: options dropped"
"$top/kernel/merge-config.sh" --src "$work" --out "$cache/build-6.12-qemu" "$F/rt-core.cfg" "$F/qemu-virt.cfg" "$F/trim.cfg" &&
	ok "QEMU RT set: every option survived" || bad "QEMU fragments: options dropped"
"$top/kernel/merge-config.sh" --src "$work" --out "$cache/build-6.12-rkonly" "$F/rt-core.cfg" "$F/rk3588-ethercat.cfg" \
	"$F/rk3588-mainline.cfg" "$F/trim.cfg" "$F/rockchip-only.cfg" &&
	ok "RK3588 RT set, trimmed, Rockchip only: every option survived" || bad "Rockchip-only fragments: options dropped"
printf 'CONFIG_PREEMPT_RT=y\n' >"$cache/no-expert.cfg"
if "$top/kernel/merge-config.sh" --src "$work" --out "$cache/build-neg" "$cache/no-expert.cfg" >"$cache/neg.log" 2>&1; then
	bad "checker accepted PREEMPT_RT without EXPERT (it is dropped on 6.12)"
else
	grep -q 'CONFIG_PREEMPT_RT=y requested' "$cache/neg.log" && ok "checker rejects PREEMPT_RT without EXPERT" ||
		bad "checker failed for another reason: $(tail -3 "$cache/neg.log")"
fi
elapsed

# ---- 4. compile stmmac under RT -----------------------------------------------------------------
step "4. stmmac + dwmac-rk with the patch, PREEMPT_RT config"
mk=(make -s -C "$work" O="$build" ARCH=arm64 CROSS_COMPILE="$cross" -j"$jobs")
# The work tree is a hard-link copy: unpatched files keep old mtimes, so objects cached from an
# earlier (patched) run would look up to date. Always compile the driver from scratch.
rm -rf "$build/drivers/net/ethernet/stmicro/stmmac"
if grep -q '^CONFIG_PREEMPT_RT=y' "$build/.config" && "${mk[@]}" modules_prepare >"$cache/prep.log" 2>&1 &&
	"${mk[@]}" KCFLAGS=-Werror drivers/net/ethernet/stmicro/stmmac/ >"$cache/stmmac.log" 2>&1; then
	o="$build/drivers/net/ethernet/stmicro/stmmac"
	if grep -qa 'snps,tx-coalesce-frames' "$o/stmmac_platform.o" && [ -f "$o/dwmac-rk.o" ]; then
		ok "compiled (-Werror); stmmac_platform.o parses snps,tx-coalesce-*; dwmac-rk.o built"
	else
		bad "stmmac built, but the patched code or dwmac-rk is missing from the objects"
	fi
else
	tail -20 "$cache/prep.log" "$cache/stmmac.log" 2>/dev/null >&2 || true
	bad "stmmac does not compile with the patch under PREEMPT_RT"
fi
elapsed

# ---- 5. dtbs and overlays -------------------------------------------------------------------------
step "5. RK3588 dtbs, overlays, dt-validate"
mapfile -t dtbs < <(cd "$work/arch/arm64/boot/dts" && find rockchip -maxdepth 1 -name 'rk3588*.dts' | sed 's/\.dts$/.dtb/' | sort)
if "${mk[@]}" DTC_FLAGS=-@ "${dtbs[@]}" >"$cache/dtbs.log" 2>&1; then
	ok "${#dtbs[@]} RK3588 dtbs built (DTC_FLAGS=-@)"
else
	tail -20 "$cache/dtbs.log" >&2
	bad "RK3588 dtbs do not build"
fi
dtbdir="$build/arch/arm64/boot/dts/rockchip"
"$top/dts/verify-overlays.sh" --dtbs "$dtbdir" --bindings "$work" --validate-max 3 --out "$cache/overlays" &&
	ok "overlays apply, read back and validate with the patched binding" || bad "overlay verification"
sed 's/snps,tx-coalesce-frames = <25>/snps,tx-coalesce-frames = <300>/' "$top/dts/rk3588-gmac1-ethercat.dtso" >"$cache/bad-range.dtso"
if "$top/dts/verify-overlays.sh" --dtbs "$dtbdir" --bindings "$work" --validate-max 1 --out "$cache/ov-neg1" "$cache/bad-range.dtso" >"$cache/neg1.log" 2>&1; then
	bad "dt-validate accepted snps,tx-coalesce-frames = 300 (binding maximum is 256)"
else
	grep -q 'greater than the maximum' "$cache/neg1.log" && ok "out-of-range value rejected by dt-validate" ||
		bad "negative overlay failed for another reason: $(tail -3 "$cache/neg1.log")"
fi
if "$top/dts/verify-overlays.sh" --dtbs "$dtbdir" --bindings "$pristine" --validate-max 1 --out "$cache/ov-neg2" "$top/dts/rk3588-gmac1-ethercat.dtso" >"$cache/neg2.log" 2>&1; then
	bad "the UNPATCHED binding accepted the coalescing properties (the check would be vacuous)"
else
	grep -q 'Unevaluated properties are not allowed' "$cache/neg2.log" && ok "unpatched binding rejects the properties (the extension is what makes them valid)" ||
		bad "unpatched-binding run failed for another reason: $(tail -3 "$cache/neg2.log")"
fi
elapsed

# ---- 6. newer tree: mainline-6.18 drift ------------------------------------------------------------
suite=$(sed -n 's/^CHECK_NEWER_DEB_SUITE=//p' "$top/kernel/sources.env")
step "6. mainline-6.18 on the lowest linux-source newer than 6.18 in Debian $suite"
nw="$cache/newer-apt"
vn="" pkg="" reach=""
if private_apt "$nw" "deb http://deb.debian.org/debian $suite main"; then
	reach=1
	# linux-source-X.Y packages of that suite; the lowest X.Y above 6.18 is the nearest to it.
	xy=$(apt-cache "${aopt[@]}" search --names-only '^linux-source-[0-9]+\.[0-9]+$' | sed -n 's/^linux-source-\([0-9.]*\) .*/\1/p' |
		awk -F. '$1 > 6 || ($1 == 6 && $2 > 18)' | sort -V | head -1)
	if [ -n "$xy" ]; then
		pkg=linux-source-$xy
		vn=$(apt-cache "${aopt[@]}" policy "$pkg" | sed -n 's/^  Candidate: //p')
	fi
fi
if [ -z "$reach" ]; then
	echo "  SKIP Debian $suite is not reachable from here ($(tail -1 "$nw/update.log"))"
elif [ -z "$vn" ] || [ "$vn" = "(none)" ]; then
	bad "Debian $suite has no linux-source-X.Y newer than 6.18 (choose another CHECK_NEWER_DEB_SUITE)"
else
	pn="$cache/linux-newer"
	if [ "$(cat "$pn/.rtcat-source" 2>/dev/null)" != "$pkg $vn" ]; then
		rm -rf "$nw/debs" && mkdir -p "$nw/debs"
		(cd "$nw/debs" && apt-get "${aopt[@]}" download "$pkg=$vn" >/dev/null 2>&1) || bad "could not download $pkg=$vn"
		deb=$(find "$nw/debs" -maxdepth 1 -name "${pkg}_*_all.deb" | head -1)
		{ [ -n "$deb" ] && unpack_deb_source "$deb" "$pkg.tar.xz" "$pn" "$pkg $vn"; } || bad "could not unpack $pkg $vn"
		rm -rf "$nw/debs"
	fi
	if [ "$(cat "$pn/.rtcat-source" 2>/dev/null)" = "$pkg $vn" ]; then
		echo "  $pkg $vn (Linux $(make -s -C "$pn" kernelversion))"
		# It has no series of its own: the selection must refuse it, in the script and in build.sh.
		rc=0 && msg=$("$top/kernel/patch-series.sh" --flavour mainline-rt --tree "$pn" 2>&1) || rc=$?
		[ "$rc" -eq 1 ] && grep -q "no stmmac patch series for .*Linux $xy" <<<"$msg" &&
			ok "patch-series.sh refuses Linux $xy (no kernel/patches/mainline-$xy)" || bad "patch-series.sh on Linux $xy: rc=$rc: $msg"
		rc=0 && msg=$("$top/kernel/build.sh" --flavour mainline-rt --src "$pn" --config-only --no-deb --out "$cache/bs-newer" 2>&1) || rc=$?
		[ "$rc" -eq 1 ] && grep -q 'refusing to build' <<<"$msg" &&
			ok "build.sh refuses to build Linux $xy with another series" || bad "build.sh --src Linux $xy: rc=$rc: $(tail -2 <<<"$msg")"
		p612=("$P"/mainline-6.12/0002-*.patch)
		applies "$pn" "${p612[0]}" && bad "mainline-6.12/$(basename "${p612[0]}") applies to $xy: the series are not version-specific" ||
			ok "mainline-6.12/$(basename "${p612[0]}") does not apply to $xy (negative control)"
		wn="$cache/work-newer"
		rm -rf "$wn" && cp -al "$pn" "$wn"
		for p in "$P"/mainline-6.18/*.patch; do
			if (cd "$wn" && git apply --check "$p" && git apply "$p"); then ok "mainline-6.18/$(basename "$p") applies to $xy ($vn)"; else
				bad "mainline-6.18/$(basename "$p") no longer applies to $xy ($vn): the driver moved on; check 6.18.y and port"
			fi
		done
		flags_unique "$wn/include/linux/stmmac.h" && ok "$xy + mainline-6.18: every STMMAC_FLAG_* bit defined once" ||
			bad "$xy + mainline-6.18: an STMMAC_FLAG_* bit is defined twice"
		checkpatch "$pn" "$xy script" "$P"/mainline-6.18/*.patch
		bn="$cache/build-newer"
		"$top/kernel/merge-config.sh" --src "$wn" --out "$bn" "$F/rt-core.cfg" "$F/rk3588-ethercat.cfg" "$F/rk3588-mainline.cfg" &&
			ok "$xy: RK3588 RT set: every option survived" || bad "$xy: RK3588 RT fragments: options dropped"
		"$top/kernel/merge-config.sh" --src "$wn" --out "$cache/build-newer-qemu" "$F/rt-core.cfg" "$F/qemu-virt.cfg" "$F/trim.cfg" &&
			ok "$xy: QEMU RT set: every option survived" || bad "$xy: QEMU fragments: options dropped"
		"$top/kernel/merge-config.sh" --src "$wn" --out "$cache/build-newer-rkonly" "$F/rt-core.cfg" "$F/rk3588-ethercat.cfg" \
			"$F/rk3588-mainline.cfg" "$F/trim.cfg" "$F/rockchip-only.cfg" &&
			ok "$xy: RK3588 RT set, trimmed, Rockchip only: every option survived" || bad "$xy: Rockchip-only fragments: options dropped"
		mkn=(make -s -C "$wn" O="$bn" ARCH=arm64 CROSS_COMPILE="$cross" -j"$jobs")
		rm -rf "$bn/drivers/net/ethernet/stmicro/stmmac"
		if grep -q '^CONFIG_PREEMPT_RT=y' "$bn/.config" && "${mkn[@]}" modules_prepare >"$cache/prep-newer.log" 2>&1 &&
			"${mkn[@]}" KCFLAGS=-Werror drivers/net/ethernet/stmicro/stmmac/ >"$cache/stmmac-newer.log" 2>&1 &&
			grep -qa 'snps,tx-coalesce-frames' "$bn/drivers/net/ethernet/stmicro/stmmac/stmmac_platform.o" &&
			[ -f "$bn/drivers/net/ethernet/stmicro/stmmac/dwmac-rk.o" ]; then
			ok "$xy-rt: stmmac + dwmac-rk compiled with mainline-6.18 (-Werror)"
		else
			tail -20 "$cache/prep-newer.log" "$cache/stmmac-newer.log" 2>/dev/null >&2 || true
			bad "$xy-rt: stmmac does not compile with mainline-6.18"
		fi
	fi
fi
elapsed

# ---- 7. 5.10 variant ------------------------------------------------------------------------------
step "7. 5.10 variant on Debian bullseye's linux-source-5.10 + RT"
bw="$cache/bullseye-apt"
v510=""
if private_apt "$bw" "deb http://deb.debian.org/debian bullseye main" "deb http://deb.debian.org/debian-security bullseye-security main"; then
	v510=$(apt-cache "${aopt[@]}" policy linux-source-5.10 | sed -n 's/^  Candidate: //p')
fi
if [ -z "$v510" ] || [ "$v510" = "(none)" ]; then
	echo "  SKIP Debian bullseye's linux-source-5.10 is not reachable from here ($(tail -1 "$bw/update.log"))"
else
	deb="$cache/linux-source-5.10_${v510}_all.deb"
	if [ ! -f "$deb" ]; then
		(cd "$cache" && apt-get "${aopt[@]}" download "linux-source-5.10=$v510" >/dev/null 2>&1) ||
			bad "could not download linux-source-5.10=$v510"
	fi
	p510="$cache/linux-5.10"
	[ -f "$deb" ] && { unpack_deb_source "$deb" linux-source-5.10.tar.xz "$p510" "$v510" || bad "could not unpack linux-source-5.10 $v510"; }
	if [ "$(cat "$p510/.rtcat-source" 2>/dev/null)" = "$v510" ]; then
		got=$("$top/kernel/patch-series.sh" --flavour bsp-rt --tree "$p510" --name 2>&1) || true
		[ "$got" = bsp-5.10 ] && ok "patch-series.sh picks $got for 5.10" || bad "patch-series.sh for 5.10: '$got', want bsp-5.10"
		w510="$cache/work-5.10"
		rm -rf "$w510" && cp -al "$p510" "$w510"
		if (cd "$w510" && xzcat .rtcat-rt.patch.xz | patch -p1 -s --no-backup-if-mismatch); then
			ok "Debian 5.10 RT patch applied ($(cat "$w510/localversion-rt" 2>/dev/null))"
		else
			bad "Debian's 5.10 RT patch does not apply to linux-source-5.10 $v510"
		fi
		for p in "$P"/mainline-6.12/0002-*.patch "$P"/mainline-6.18/0002-*.patch; do
			q="$(basename "$(dirname "$p")")/$(basename "$p")"
			applies "$w510" "$p" && bad "$q applies to 5.10: the series are not version-specific" ||
				ok "$q does not apply to 5.10 (negative control)"
		done
		for p in "$P"/bsp-5.10/*.patch; do
			if (cd "$w510" && git apply --check "$p" && git apply "$p"); then
				ok "$(basename "$p") applies to 5.10 ($v510, RT)"
			else
				bad "$(basename "$p") does not apply to Debian 5.10 $v510"
			fi
		done
		b510="$cache/build-5.10"
		"$top/kernel/merge-config.sh" --src "$w510" --out "$b510" "$F/rt-core.cfg" "$F/rk3588-ethercat.cfg" &&
			ok "5.10-rt: every option survived" || bad "5.10-rt fragments: options dropped"
		mk5=(make -s -C "$w510" O="$b510" ARCH=arm64 CROSS_COMPILE="$cross" -j"$jobs")
		rm -rf "$b510/drivers/net/ethernet/stmicro/stmmac"
		if "${mk5[@]}" modules_prepare >"$cache/prep510.log" 2>&1 &&
			"${mk5[@]}" KCFLAGS=-Werror drivers/net/ethernet/stmicro/stmmac/ >"$cache/stmmac510.log" 2>&1 &&
			grep -qa 'snps,tx-coalesce-frames' "$b510/drivers/net/ethernet/stmicro/stmmac/stmmac_platform.o"; then
			ok "5.10-rt: stmmac + dwmac-rk compiled with the patch (-Werror)"
		else
			tail -20 "$cache/prep510.log" "$cache/stmmac510.log" 2>/dev/null >&2 || true
			bad "5.10-rt: stmmac does not compile with the patch"
		fi
	fi
fi
elapsed

# ---- 8. build.sh: the series of the tree, not of the request -------------------------------------
step "8. kernel/build.sh selects by the tree's version"
rc=0 && msg=$("$top/kernel/build.sh" --flavour mainline-rt --series 6.18 --src "$pristine" --config-only --no-deb --out "$cache/bs-612" 2>&1) || rc=$?
[ "$rc" -eq 1 ] && grep -q -- '--series 6.18, but .* is Linux 6.12' <<<"$msg" &&
	ok "build.sh --series 6.18 refuses a 6.12 tree" || bad "build.sh --series 6.18 --src <6.12>: rc=$rc: $(tail -2 <<<"$msg")"
elapsed

# ---- result -----------------------------------------------------------------------------------
echo
if [ ${#failures[@]} -gt 0 ]; then
	echo "check-kernel: ${#failures[@]} check(s) FAILED:" >&2
	printf '  - %s\n' "${failures[@]}" >&2
	exit 1
fi
echo "check-kernel: all checks passed in $(($(date +%s) - t0)) s"
