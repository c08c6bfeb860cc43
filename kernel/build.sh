#!/usr/bin/env bash
# Standalone build of rtcat's real-time kernels: fetch the pinned source, apply the patches,
# merge and verify the config fragments, build Image + dtbs + modules + overlays and package
# Debian kernel packages (bindeb-pkg).
#
# Usage: kernel/build.sh --flavour mainline-rt|bsp-rt [options]
#   --out DIR           results (default: ./rtcat-kernel-FLAVOUR); the build tree is DIR/build
#   --series X.Y        mainline-rt: which pinned source to fetch: 6.18 (default, MAINLINE_SERIES
#                       in sources.env; Linux 6.18.39 from kernel.org, the series of the
#                       mainline-rt image) or 6.12 (Debian's linux-source-6.12; what the QEMU
#                       system test builds)
#   --src DIR           use this kernel tree instead of fetching the pinned one (it is copied,
#                       never modified; the patches must apply to it)
#   --qemu-virt         add fragments/qemu-virt.cfg (virtio blk/net/pci, PL011) for
#                       qemu-system-aarch64 -M virt
#   --trim              add fragments/trim.cfg (no DRM, sound, media, WLAN, BT, ...) to build faster
#   --rockchip-only     add fragments/rockchip-only.cfg (mainline-rt: no other SoC families)
#   --no-hw             leave out the RK3588 hardware fragments (e.g. a QEMU-only kernel)
#   --no-deb            build Image, dtbs and modules only, no Debian packages
#   --localversion STR  LOCALVERSION (default: -rtcat-rt for mainline-rt, -rtcat for bsp-rt,
#                       whose tree already appends -rt89)
#   --jobs N            parallel jobs (default: number of CPUs)
#   --config-only       stop after the verified .config (fast; what CI checks)
# The stmmac patch series is chosen by the version of the tree that is built (VERSION.PATCHLEVEL
# of its Makefile, kernel/patch-series.sh): kernel/patches/mainline-X.Y or bsp-X.Y. A tree with no
# series of its own is refused, never patched with another series.
# Environment: EXTRA_FRAGMENTS="a.cfg b.cfg" extra fragments, verified like the others;
#              RTCAT_KERNEL_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/rtcat) for downloads/sources;
#              RTCAT_KERNEL_TARBALL=FILE: a linux-6.18.39.tar.xz fetched beforehand, instead of
#              downloading it (checked against the same sha256 and commit id).
#
# Results in --out: Image, dtbs/ (RK3588 dtbs), overlays/*.dtbo, config, linux-*.deb (unless
# --no-deb), build-info.txt (source pin, patches, fragments, versions). Exit non-zero on any error,
# including a requested config option that did not survive.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
flavour="" series="" out="" src="" qemu="" trim="" rkonly="" hw=1 deb=1 localversion="" config_only=""
jobs=$(nproc)
cache=${RTCAT_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rtcat}
cross=${CROSS_COMPILE:-aarch64-linux-gnu-}

die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 2; }
fail() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }
step() { printf '\n==> %s\n' "$*"; }

while [ $# -gt 0 ]; do
	case "$1" in
	--flavour) flavour=${2:?--flavour needs mainline-rt or bsp-rt}; shift 2 ;;
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	--series) series=${2:?--series needs 6.18 or 6.12}; shift 2 ;;
	--src) src=${2:?--src needs a kernel tree}; shift 2 ;;
	--qemu-virt) qemu=1; shift ;;
	--trim) trim=1; shift ;;
	--rockchip-only) rkonly=1; shift ;;
	--no-hw) hw=""; shift ;;
	--no-deb) deb=""; shift ;;
	--localversion) localversion=${2?--localversion needs a string}; shift 2 ;;
	--jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
	--config-only) config_only=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

# pin KEY: value of KEY in sources.env (read, not sourced).
pin() {
	local v
	v=$(sed -n "s/^$1=//p" "$here/sources.env" | tail -1)
	v=${v#\"} v=${v%\"}
	[ -n "$v" ] || die "sources.env has no $1"
	printf '%s' "$v"
}

case "$flavour" in
mainline-rt) defconfig=$(pin MAINLINE_DEFCONFIG) ;;
bsp-rt) defconfig=$(pin BSP_DEFCONFIG) ;;
"") die "--flavour is required (mainline-rt or bsp-rt)" ;;
*) die "--flavour: '$flavour' is not mainline-rt or bsp-rt" ;;
esac
if [ "$flavour" = mainline-rt ]; then
	# --series picks the pinned source to fetch; with --src, what the tree must be (if given).
	case "$series" in "" | 6.18 | 6.12) ;; *) die "--series: '$series' is not 6.18 or 6.12 (the pinned mainline sources)" ;; esac
	[ -n "$series" ] || [ -n "$src" ] || series=$(pin MAINLINE_SERIES)
elif [ -n "$series" ]; then
	die "--series: only for --flavour mainline-rt (bsp-rt is the pinned 5.10 vendor tree)"
fi
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs: '$jobs' is not a positive number"
if [ -z "$localversion" ]; then
	if [ "$flavour" = mainline-rt ]; then localversion=-rtcat-rt; else localversion=-rtcat; fi
fi
[[ $localversion =~ ^[-+.a-z0-9]*$ ]] || die "--localversion: '$localversion' may only hold a-z 0-9 - + ."
out=${out:-$PWD/rtcat-kernel-$flavour}
mkdir -p "$out" "$cache"
out=$(cd "$out" && pwd)

frags=("$here/fragments/rt-core.cfg")
if [ -n "$hw" ]; then
	frags+=("$here/fragments/rk3588-ethercat.cfg")
	[ "$flavour" = mainline-rt ] && frags+=("$here/fragments/rk3588-mainline.cfg")
fi
[ -n "$qemu" ] && frags+=("$here/fragments/qemu-virt.cfg")
[ -n "$trim" ] && frags+=("$here/fragments/trim.cfg")
if [ -n "$rkonly" ]; then
	[ "$flavour" = mainline-rt ] || die "--rockchip-only: the fragment uses mainline symbol names (mainline-rt only)"
	frags+=("$here/fragments/rockchip-only.cfg")
fi
for f in ${EXTRA_FRAGMENTS:-}; do
	[ -r "$f" ] || die "EXTRA_FRAGMENTS: cannot read $f"
	frags+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done

need=(make gcc "${cross}gcc" bc bison flex perl python3 dtc openssl rsync cpio kmod git xz sha256sum)
[ -n "$deb" ] && need+=(dpkg-buildpackage dh)
missing=()
for t in "${need[@]}"; do command -v "$t" >/dev/null || missing+=("$t"); done
[ ${#missing[@]} -eq 0 ] || die "missing tools: ${missing[*]} (Debian: apt-get install build-essential gcc-aarch64-linux-gnu bc bison flex libssl-dev libelf-dev device-tree-compiler rsync cpio kmod dpkg-dev debhelper)"

# ---- 1. source --------------------------------------------------------------------------------
# Linux 6.18.y from kernel.org: sha256 and the commit id git archive stored in the tarball.
fetch_618() {
	local ver url sha commit dir t got
	ver=$(pin M618_VERSION) url=$(pin M618_TARBALL_URL) sha=$(pin M618_TARBALL_SHA256) commit=$(pin M618_COMMIT)
	dir="$cache/src-linux-$ver"
	if [ ! -f "$dir/.rtcat-unpacked" ]; then
		t="$cache/linux-$ver.tar.xz"
		if [ -n "${RTCAT_KERNEL_TARBALL:-}" ]; then
			[ -r "$RTCAT_KERNEL_TARBALL" ] || die "RTCAT_KERNEL_TARBALL: cannot read $RTCAT_KERNEL_TARBALL"
			cp "$RTCAT_KERNEL_TARBALL" "$t.part" && mv "$t.part" "$t"
		elif [ ! -f "$t" ]; then
			step "downloading $url" >&2
			if command -v curl >/dev/null; then
				curl -fL --retry 3 --proto '=https' -o "$t.part" "$url" >&2 || fail "download of $url failed"
			elif command -v wget >/dev/null; then
				wget -q -O "$t.part" "$url" >&2 || fail "download of $url failed"
			else
				die "neither curl nor wget: download $url and set RTCAT_KERNEL_TARBALL to it"
			fi
			mv "$t.part" "$t"
		fi
		got=$(sha256sum "$t" | cut -d' ' -f1)
		if [ "$got" != "$sha" ]; then
			rm -f "$t"
			fail "$(basename "$t"): sha256 $got, kernel/sources.env pins $sha (M618_TARBALL_SHA256); file removed"
		fi
		# git get-tar-commit-id reads the pax header only; xz is cut off with SIGPIPE after it.
		got=$({ xz -dc "$t" 2>/dev/null || true; } | git get-tar-commit-id 2>/dev/null || true)
		if [ -z "$got" ]; then
			echo "build.sh: warning: $(basename "$t") carries no git commit id; relying on its sha256" >&2
		elif [ "$got" != "$commit" ]; then
			rm -f "$t"
			fail "$(basename "$t") was made from commit $got, not $commit (M618_COMMIT, v$ver); file removed"
		fi
		step "unpacking $(basename "$t")" >&2
		rm -rf "$dir" && mkdir -p "$dir"
		tar -xf "$t" -C "$dir" --strip-components=1
		touch "$dir/.rtcat-unpacked"
	fi
	echo "$dir"
}

# Linux 6.12 as Debian ships it (linux-source-6.12, pinned package version and tarball sha256).
fetch_612() {
	local pkg ver suite tarball sha dir deb
	pkg=$(pin M612_DEB_PACKAGE) ver=$(pin M612_DEB_VERSION) suite=$(pin M612_DEB_SUITE)
	tarball=$(pin M612_TARBALL) sha=$(pin M612_TARBALL_SHA256)
	dir="$cache/src-$pkg-$ver"
	if [ ! -f "$dir/.rtcat-unpacked" ]; then
		local t="$cache/$tarball.$ver"
		if [ ! -f "$t" ]; then
			if [ -f "/usr/src/$tarball" ] && [ "$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null)" = "$ver" ]; then
				cp "/usr/src/$tarball" "$t.part"
			else
				step "downloading $pkg=$ver (Debian $suite)" >&2
				command -v apt-get >/dev/null || die "no apt-get: download $pkg $ver from Debian $suite, put /usr/src/$tarball at $t"
				(cd "$cache" && apt-get download "$pkg=$ver" >&2) ||
					die "apt-get download $pkg=$ver failed (is $suite in the apt sources?)"
				deb=$(find "$cache" -maxdepth 1 -name "${pkg}_*.deb" | head -1)
				rm -rf "$cache/deb-x" && dpkg-deb -x "$deb" "$cache/deb-x"
				mv "$cache/deb-x/usr/src/$tarball" "$t.part" && rm -rf "$cache/deb-x" "$deb"
			fi
			mv "$t.part" "$t"
		fi
		echo "$sha  $t" | sha256sum -c --quiet - || fail "$t does not match M612_TARBALL_SHA256"
		step "unpacking $tarball" >&2
		rm -rf "$dir" && mkdir -p "$dir"
		tar -xf "$t" -C "$dir" --strip-components=1
		touch "$dir/.rtcat-unpacked"
	fi
	echo "$dir"
}

fetch_bsp() {
	local url branch commit dir
	url=$(pin BSP_GIT_URL) branch=$(pin BSP_GIT_BRANCH) commit=$(pin BSP_GIT_COMMIT)
	dir="$cache/src-bsp-$commit"
	if [ ! -f "$dir/.rtcat-unpacked" ]; then
		command -v git >/dev/null || die "git is needed to fetch $url"
		step "fetching $url $branch @ $commit (shallow)" >&2
		rm -rf "$dir" && git init -q "$dir"
		git -C "$dir" fetch --depth 1 "$url" "$commit" ||
			die "git fetch of $commit from $url failed"
		git -C "$dir" -c advice.detachedHead=false checkout -q FETCH_HEAD
		[ "$(git -C "$dir" rev-parse HEAD)" = "$commit" ] || die "fetched tree is not at $commit"
		touch "$dir/.rtcat-unpacked"
	fi
	echo "$dir"
}

if [ -n "$src" ]; then
	if [ ! -f "$src/Makefile" ] || [ ! -d "$src/arch/arm64" ]; then die "--src: $src is not a kernel tree"; fi
	pristine=$(cd "$src" && pwd)
	srcpin="local tree $pristine"
elif [ "$flavour" = mainline-rt ] && [ "$series" = 6.18 ]; then
	pristine=$(fetch_618 | tail -1)
	srcpin="kernel.org linux-$(pin M618_VERSION).tar.xz sha256 $(pin M618_TARBALL_SHA256) commit $(pin M618_COMMIT)"
elif [ "$flavour" = mainline-rt ]; then
	pristine=$(fetch_612 | tail -1)
	srcpin="Debian $(pin M612_DEB_PACKAGE) $(pin M612_DEB_VERSION) sha256 $(pin M612_TARBALL_SHA256)"
else
	pristine=$(fetch_bsp | tail -1)
	srcpin="$(pin BSP_GIT_URL) $(pin BSP_GIT_BRANCH) @ $(pin BSP_GIT_COMMIT)"
fi

# The patch series of the tree's own version (not of the flavour's expectation).
patchdir=$("$here/patch-series.sh" --flavour "$flavour" --tree "$pristine") ||
	fail "refusing to build $srcpin: no patch series for its version (above)"
treeseries=${patchdir##*-}
if [ "$flavour" = mainline-rt ] && [ -n "$series" ] && [ "$treeseries" != "$series" ]; then
	fail "--series $series, but $srcpin is Linux $treeseries (give --series $treeseries or another --src)"
fi
echo "kernel series: $treeseries, patches: kernel/patches/$(basename "$patchdir")/"

# ---- 2. patched work tree (hard-link copy: patches replace files, the pristine tree stays) -----
work="$out/src"
step "patched source tree $work"
rm -rf "$work"
cp -al "$pristine" "$work" 2>/dev/null || cp -a "$pristine" "$work"
rm -rf "$work/.git"
mapfile -t patches < <(find "$patchdir" -name '*.patch' | sort)
[ ${#patches[@]} -gt 0 ] || die "no patches in $patchdir"
# GIT_CEILING_DIRECTORIES: never let git apply see an enclosing repository (it would then
# silently skip paths outside the current directory).
export GIT_CEILING_DIRECTORIES
GIT_CEILING_DIRECTORIES=$(dirname "$work")
for p in "${patches[@]}"; do
	(cd "$work" && git apply --check "$p") || die "$(basename "$p") does not apply to $srcpin"
	(cd "$work" && git apply "$p")
	echo "  applied $(basename "$p")"
done

# ---- 3. config ---------------------------------------------------------------------------------
build="$out/build"
step "config: $defconfig + ${frags[*]##*/}"
"$here/merge-config.sh" --src "$work" --out "$build" --base "$defconfig" --cross "$cross" "${frags[@]}"
"$work/scripts/config" --file "$build/.config" --set-str LOCALVERSION "$localversion" --disable LOCALVERSION_AUTO
make -s -C "$work" O="$build" ARCH=arm64 CROSS_COMPILE="$cross" olddefconfig
# syncconfig writes include/config/auto.conf, which kernelrelease reads LOCALVERSION from
make -s -C "$work" O="$build" ARCH=arm64 CROSS_COMPILE="$cross" syncconfig
"$here/merge-config.sh" --verify-only "$build/.config" "${frags[@]}"
cp "$build/.config" "$out/config"
krel=$(make -s -C "$work" O="$build" ARCH=arm64 CROSS_COMPILE="$cross" kernelrelease)
echo "  kernel release: $krel"

{
	echo "flavour: $flavour"
	echo "kernel release: $krel"
	echo "source: $srcpin"
	echo "series: $treeseries (kernel/patches/$(basename "$patchdir")/)"
	echo "patches: ${patches[*]##*/}"
	echo "fragments: ${frags[*]##*/}"
	echo "base defconfig: $defconfig"
	echo "compiler: $("${cross}gcc" --version | head -1)"
	echo "rtcat commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >"$out/build-info.txt"

if [ -n "$config_only" ]; then
	echo "config only: $out/config"
	exit 0
fi

# ---- 4. build ----------------------------------------------------------------------------------
# The build machine's user and host name would otherwise end up in /proc/version and in the
# packages' Maintainer field.
export KBUILD_BUILD_USER=${KBUILD_BUILD_USER:-rtcat} KBUILD_BUILD_HOST=${KBUILD_BUILD_HOST:-rtcat-build}
export DEBFULLNAME=${DEBFULLNAME:-rtcat kernel build} DEBEMAIL=${DEBEMAIL:-rtcat@example.org}
mk=(make -C "$work" O="$build" ARCH=arm64 CROSS_COMPILE="$cross" -j"$jobs")
step "building Image, modules, dtbs ($jobs jobs)"
start=$(date +%s)
"${mk[@]}" Image modules dtbs
echo "build time: $(($(date +%s) - start)) s" | tee -a "$out/build-info.txt"
cp "$build/arch/arm64/boot/Image" "$out/Image"
rm -rf "$out/dtbs" && mkdir -p "$out/dtbs"
find "$build/arch/arm64/boot/dts/rockchip" -name 'rk3588*.dtb' -exec cp {} "$out/dtbs/" \; 2>/dev/null || true

step "overlays"
rm -rf "$out/overlays" && mkdir -p "$out/overlays"
for o in "$top"/dts/*.dtso; do
	dtc -@ -q -I dts -O dtb -o "$out/overlays/$(basename "$o" .dtso).dtbo" "$o"
	echo "  $(basename "$o" .dtso).dtbo"
done

if [ -n "$deb" ]; then
	step "Debian packages (bindeb-pkg)"
	rm -f "$out"/linux-*.deb "$out"/linux-*.buildinfo "$out"/linux-*.changes
	# The linux-headers package carries host tools built for arm64, which needs the arm64
	# libssl-dev (dpkg --add-architecture arm64). Without it, build linux-image and
	# linux-libc-dev only (the kernel's own build profile) instead of failing at the very end.
	if ! dpkg-query -W -f='${Status}' libssl-dev:arm64 2>/dev/null | grep -q 'install ok installed'; then
		echo "libssl-dev:arm64 not installed: no linux-headers package (profile pkg.linux-upstream.nokernelheaders)"
		export DEB_BUILD_PROFILES="${DEB_BUILD_PROFILES:+$DEB_BUILD_PROFILES }pkg.linux-upstream.nokernelheaders"
	fi
	"${mk[@]}" KDEB_PKGVERSION="$(make -s -C "$work" kernelversion)-1" bindeb-pkg
	find "$out" -maxdepth 1 -name "linux-*.deb" | sort | tee -a "$out/build-info.txt"
fi
step "done: $out"
