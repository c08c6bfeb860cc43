#!/usr/bin/env bash
# rtcat system test (issue 8): boot the mainline-rt kernel in qemu-system-aarch64 with a Debian
# arm64 root filesystem on which the rtcat arm64 .deb and the rootfs-overlay/ units are installed
# as a user would, and prove that the controller runs from boot. See ci/system/README.md.
#
# Usage: ci/check-system.sh [--out DIR] [--timeout S] [--jobs N] [--rebuild kernel|rootfs|all]
#                            [--build-kernel | --kernel-deb F] ...
#   --out DIR      results (console log, files read back from the guest disk, phases.txt);
#                  default: out/system in the repository
#   --timeout S    wall-clock limit of the guest run (default 1800)
#   --jobs N       kernel build jobs (default: number of CPUs)
#   --rebuild X    ignore the cached kernel Image / base rootfs / both
#   --rootfs-only  only make the cached base rootfs (ci/test.sh starts this in the background
#                  while the image area builds, so the two overlap)
#   --build-kernel boot rtcat's own mainline-rt 6.12 kernel, built here from Debian's
#                  linux-source-6.12 (kernel/build.sh, ~15-40 min on 2 cores when not cached)
#                  instead of Debian's prebuilt PREEMPT_RT kernel (the default: CI's cold runs
#                  cannot afford the build; ci/check-kernel.sh merges and checks rtcat's own
#                  configuration and compiles its stmmac patch under it in every run)
#   --period-us N  guest cycle period (default: the shipped [cycle].period_us, 1 ms)
#   --kernel-deb F boot a kernel package built by kernel/build.sh (e.g. the RK3588 mainline-rt
#                  linux-image-*.deb) instead of the cached QEMU kernel: it is installed in the
#                  guest with apt like the .deb of rtcat, and QEMU boots its /boot/vmlinuz
#   --machine M    the board whose yocto-layer/recipes-rtcat/rtcat-board/files/M/10-rtcat-ethercat.link
#                  names the master's NIC in the guest (default rockchip-rk3588-evb)
#   --no-link      leave that .link file out (a negative control run: the test must FAIL)
#   --ab           run the A/B update test after the system test (ci/system/ab.sh: U-Boot,
#                  RAUC bundles, rollback): the default with Debian's RT kernel, about 10.5 min
#                  more on a quiet 2-core VM (16 loaded); with --build-kernel / --kernel-deb only when asked
#   --no-ab        skip it (or RTCAT_SYSTEST_AB=0 in the environment, e.g. for ci/test.sh)
#   --ab-only      only the A/B update test (the system test's guest is not booted)
#   --icount X     guest clock: SHIFT (default 1) = QEMU -icount shift=SHIFT, one emulated
#                  instruction = 2^SHIFT ns of guest time, so the guest's timing no longer
#                  depends on how fast the host emulates; "off" = wall-clock time (multi-threaded
#                  TCG: on a 2-core host the guest then cannot sustain 1 ms, see README)
#
# Caches (outside the repository, survive between runs on one machine, keyed by a hash of
# their inputs, rebuilt when missing): ${XDG_CACHE_HOME:-$HOME/.cache}/rtcat/system/
#   rootfs-<key>/          debootstrap'd Debian bookworm arm64 (qemu-user-static); by default
#                          with Debian's linux-image-rt-arm64 from bookworm-backports (Linux 6.12
#                          PREEMPT_RT) and its initramfs installed, the version in the key
#   kernel-<key>/Image     with --build-kernel: kernel/build.sh --flavour mainline-rt --series 6.12
#                          --qemu-virt --trim --no-hw plus ci/system/guest-kernel.cfg
# Needs root (debootstrap, chroot, binfmt_misc). Exit status 0 only when every assertion holds.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$RTCAT_TOP"

out="$RTCAT_TOP/out/system"
# the guest run: 546 s on the CI machine with three tries of each window; five tries add up to ~300 s
guest_timeout=1800
jobs=$(nproc)
rebuild=""
period_us=0
icount=1
kernel_deb=""
build_kernel=""
rootfs_only=""
machine=rockchip-rk3588-evb
no_link=""
# the A/B test: "" = the default (on with Debian's kernel, see below), 1 = asked for, 0 = skipped
ab=""
case "${RTCAT_SYSTEST_AB:-}" in "" | 1) ;; 0) ab=0 ;; *) die "RTCAT_SYSTEST_AB='$RTCAT_SYSTEST_AB' is not 0 or 1" ;; esac
ab_only=""
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	--timeout) guest_timeout=${2:?--timeout needs seconds}; shift 2 ;;
	--jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
	--rebuild) rebuild=${2:?--rebuild needs kernel, rootfs or all}; shift 2 ;;
	--period-us) period_us=${2:?--period-us needs microseconds}; shift 2 ;;
	--icount) icount=${2:?--icount needs a shift (0-10) or off}; shift 2 ;;
	--kernel-deb) kernel_deb=${2:?--kernel-deb needs a linux-image-*.deb}; shift 2 ;;
	--build-kernel) build_kernel=1; shift ;;
	--rootfs-only) rootfs_only=1; shift ;;
	--machine) machine=${2:?--machine needs a MACHINE}; shift 2 ;;
	--no-link) no_link=1; shift ;;
	--ab) ab=1; shift ;;
	--no-ab) ab=0; shift ;;
	--ab-only) ab=1; ab_only=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done
[[ $guest_timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout: '$guest_timeout' is not a number of seconds"
[[ $period_us =~ ^[0-9]+$ ]] || die "--period-us: '$period_us' is not a number of microseconds"
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs: '$jobs' is not a positive number"
[[ $icount =~ ^([0-9]|10|off)$ ]] || die "--icount: '$icount' is not a shift 0-10 or off"
if [ -n "$kernel_deb" ]; then
	[ -r "$kernel_deb" ] || die "--kernel-deb: cannot read '$kernel_deb'"
	[ "$(dpkg-deb -f "$kernel_deb" Architecture 2>/dev/null)" = arm64 ] || die "--kernel-deb: '$kernel_deb' is not an arm64 package"
	kernel_deb=$(cd "$(dirname "$kernel_deb")" && pwd)/$(basename "$kernel_deb")
fi
case "$rebuild" in "" | kernel | rootfs | all) ;; *) die "--rebuild: '$rebuild' is not kernel, rootfs or all" ;; esac
[ -z "$ab_only" ] || [ "$ab" != 0 ] || die "--ab-only and --no-ab: nothing to run"
[ -z "$kernel_deb" ] || [ -z "$build_kernel" ] || die "--kernel-deb and --build-kernel: choose one kernel"
# The guest's kernel: Debian's prebuilt PREEMPT_RT package (default), rtcat's own build, or a package.
kernel_src=debian
[ -z "$build_kernel" ] || kernel_src=build
[ -z "$kernel_deb" ] || kernel_src=deb
# The A/B test by default: with Debian's kernel (its slots boot the kernel and initramfs in the
# rootfs through U-Boot), not in a --no-link run (its bad update breaks the board's .link file)
if [ -z "$ab" ]; then
	ab=0
	[ "$kernel_src" != debian ] || [ -n "$no_link" ] || ab=1
fi
[ "$ab" = 1 ] || ab=""
[ -z "$ab" ] || [ -z "$no_link" ] || die "--no-link and the A/B test: the A/B test needs the board's .link file (leave out --ab)"
DEBIAN_RT_KERNEL=linux-image-rt-arm64
BOARD_LINK=yocto-layer/recipes-rtcat/rtcat-board/files/$machine/10-rtcat-ethercat.link
[ -f "$RTCAT_TOP/$BOARD_LINK" ] || die "--machine: no $BOARD_LINK"
[ "$(id -u)" -eq 0 ] || die "the system test needs root (debootstrap, chroot, binfmt_misc)"
[ "$(uname -m)" = x86_64 ] || die "the system test runs on an x86_64 host"

sys="$RTCAT_TOP/ci/system"
# shellcheck source=ci/system/ab.sh
. "$sys/ab.sh"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/rtcat/system
mkdir -p "$out" "$cache"
out=$(cd "$out" && pwd)
AB_ROOT="$out/ab-rootfs"
GUEST_NR_CPUS=4
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
# The base system: systemd as init, udev, ip (the veth "cable"), ethtool (the .deb recommends it), dbus.
ROOTFS_INCLUDE=systemd-sysv,udev,iproute2,ethtool,procps,kmod,dbus
# `nice`: keep the (shared, 2-core) machine usable while compiling and emulating.
NICE=(nice -n 10)

phases=()
t_all=$SECONDS
# phase NAME CMD...: run a phase, record its wall time.
phase() {
	local name=$1 t0=$SECONDS
	shift
	step "$name"
	"$@"
	phases+=("$(printf '%-34s %5ds' "$name" $((SECONDS - t0)))")
	printf '==> %s took %ds\n' "$name" $((SECONDS - t0))
}
print_phases() {
	{
		echo "rtcat system test phases (wall time):"
		printf '  %s\n' "${phases[@]}"
		printf '  %-34s %5ds\n' total $((SECONDS - t_all))
	} | tee "$out/phases.txt"
}

# key FILE...: short hash of the names and contents of the inputs (plus extra strings on stdin)
key() {
	{
		for f in "$@"; do
			printf '== %s\n' "${f#"$RTCAT_TOP"/}"
			cat "$f"
		done
		cat
	} | sha256sum | cut -c1-16
}

# ---- tools ---------------------------------------------------------------------------------
# rootfs: debootstrap + qemu-user (binfmt_misc lets chroot run the arm64 rootfs' programs
# through qemu-aarch64-static).
tools_rootfs() {
	ensure_apt debootstrap qemu-user-static debian-archive-keyring
	if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
		mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
	fi
	if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
		[ -r /usr/lib/binfmt.d/qemu-aarch64.conf ] || die "qemu-user-static did not install /usr/lib/binfmt.d/qemu-aarch64.conf"
		cat /usr/lib/binfmt.d/qemu-aarch64.conf >/proc/sys/fs/binfmt_misc/register
	fi
	grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 || die "binfmt_misc qemu-aarch64 is not enabled"
}
tools() {
	tools_rootfs
	ensure_backports qemu-system-arm
	if ! command -v qemu-system-aarch64 >/dev/null; then
		step "apt-get install -t bookworm-backports qemu-system-arm"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			-o DPkg::Lock::Timeout=1200 -t bookworm-backports qemu-system-arm >/dev/null
	fi
	# image: mkfs.ext4 -d / debugfs (e2fsprogs); the Debian RT kernel's initramfs: depmod and
	# modprobe --show-depends (kmod), cpio, xz (a fresh machine has none of them: seen).
	ensure_apt e2fsprogs dpkg-dev shellcheck kmod cpio xz-utils
	# --build-kernel (kernel/build.sh): the 6.12 source, cross compiler and kernel build tools.
	if [ "$kernel_src" = build ]; then
		ensure_backports linux-source-6.12
		ensure_apt linux-source-6.12 gcc-aarch64-linux-gnu device-tree-compiler bc bison flex \
			libssl-dev libelf-dev make cpio kmod rsync xz-utils perl
	fi
	qemu-system-aarch64 --version | head -1
	[ -z "$ab" ] || ab_tools
	# The host build of rtcat: its CPU-list parser (rtcat config cpus) for the CPU lists here and
	# in assert.py.
	HOST_RTCAT=$(host_rtcat) || die "cargo build -p rtcat failed"
	echo "scripts: shellcheck"
	shellcheck -x ci/check-system.sh "$sys"/*.sh "$sys"/ab/*.sh rootfs-overlay/usr/lib/rtcat/rtcat-health-gate rootfs-overlay/usr/lib/rtcat/rtcat-persist
	for u in "$sys"/*.service; do
		if ! grep -qE '^\[Service\]' "$u" || ! grep -qE '^ExecStart=' "$u"; then die "$u is not a service unit"; fi
	done
}

# ---- 1. boot arguments, scaled to the guest's CPUs -------------------------------------------
# kernel/rt-cpus.env defines the RT CPUs of the board (RTCAT_RT_CPUS, e.g. 6 on 8 CPUs). The
# guest keeps their number and puts them at the top of its 4 vCPUs (RT CPU 3 for one RT CPU);
# every other vCPU does housekeeping. The string itself comes from kernel/bootargs.sh.
cpu_count() { # cpu_count LIST: number of CPUs in a kernel CPU list (dies naming a bad item)
	local members
	members=$("$HOST_RTCAT" config cpus --members -- "$1") || die "kernel/rt-cpus.env: RTCAT_RT_CPUS='$1' is not a CPU list"
	read -ra members <<<"$members"
	echo "${#members[@]}"
}
bootargs() {
	local board_rt n
	board_rt=$(sed -n 's/^RTCAT_RT_CPUS=//p' kernel/rt-cpus.env | tr -d '"')
	[ -n "$board_rt" ] || die "kernel/rt-cpus.env has no RTCAT_RT_CPUS"
	n=$(cpu_count "$board_rt")
	if [ "$n" -lt 1 ] || [ "$n" -ge "$GUEST_NR_CPUS" ]; then die "RTCAT_RT_CPUS='$board_rt' ($n CPUs) cannot be scaled to $GUEST_NR_CPUS vCPUs"; fi
	G_RT=$((GUEST_NR_CPUS - n))
	[ "$n" -gt 1 ] && G_RT="$G_RT-$((GUEST_NR_CPUS - 1))"
	G_HK=0
	[ $((GUEST_NR_CPUS - n - 1)) -gt 0 ] && G_HK="0-$((GUEST_NR_CPUS - n - 1))"
	G_RT_FIRST=${G_RT%%-*}
	G_NIC_IRQ_CPU=$((GUEST_NR_CPUS - n - 1))
	G_BASE="console=ttyAMA0 root=/dev/vda rw rootfstype=ext4 rootwait net.ifnames=0 panic=-1"
	G_APPEND=$(kernel/bootargs.sh --env kernel/rt-cpus.env --rt-cpus "$G_RT" --housekeeping "$G_HK" \
		--nr-cpus "$GUEST_NR_CPUS" --base "$G_BASE")
	echo "board RT CPUs $board_rt -> guest RT CPUs $G_RT, housekeeping $G_HK (of $GUEST_NR_CPUS vCPUs)"
	echo "kernel command line: $G_APPEND"
	printf '%s\n' "$G_APPEND" >"$out/cmdline.txt"
}

# ---- 2. kernel ---------------------------------------------------------------------------------
KIMAGE="" KINITRD="" KREL=""
kernel() {
	local k
	if [ "$kernel_src" = deb ]; then
		echo "kernel from $kernel_deb ($(dpkg-deb -f "$kernel_deb" Package) $(dpkg-deb -f "$kernel_deb" Version)), installed in the image phase"
		KDIR="$out/kernel-from-deb"
		return 0
	fi
	if [ "$kernel_src" = debian ]; then
		arm64_apt
		KPKG=$(debian_rt_package)
		[ -n "$KPKG" ] || die "bookworm-backports has no $DEBIAN_RT_KERNEL for arm64"
		echo "Debian's $DEBIAN_RT_KERNEL (bookworm-backports): $KPKG, unpacked in the guest's rootfs in the image phase"
		return 0
	fi
	local frags=(kernel/fragments/rt-core.cfg kernel/fragments/qemu-virt.cfg kernel/fragments/trim.cfg "$sys/guest-kernel.cfg")
	# Linux 6.12 (Debian's linux-source-6.12): CI reaches Debian's archive only, not kernel.org,
	# so the guest runs the 6.12 series; the mainline-rt image and kernel/build.sh's default
	# are 6.18 (kernel/README.md, "Which series each path builds").
	mapfile -t patches < <(find kernel/patches/mainline-6.12 -type f | sort)
	k=$(aarch64-linux-gnu-gcc --version | head -1 | key kernel/build.sh kernel/patch-series.sh kernel/merge-config.sh kernel/verify-config.py kernel/sources.env "${frags[@]}" "${patches[@]}")
	KDIR="$cache/kernel-$k"
	if [ -f "$KDIR/Image" ] && [ -f "$KDIR/.complete" ] && [ "$rebuild" != kernel ] && [ "$rebuild" != all ]; then
		KREL=$(sed -n 's/^kernel release: //p' "$KDIR/build-info.txt")
		KIMAGE="$KDIR/Image"
		echo "cached: $KIMAGE ($KREL)"
		return 0
	fi
	echo "building the mainline-rt 6.12 kernel (key $k): kernel/build.sh + ci/system/guest-kernel.cfg"
	rm -rf "$KDIR"
	EXTRA_FRAGMENTS="$sys/guest-kernel.cfg" "${NICE[@]}" kernel/build.sh --flavour mainline-rt --series 6.12 \
		--qemu-virt --trim --no-hw --no-deb --jobs "$jobs" --out "$KDIR" >"$out/kernel-build.log" 2>&1 ||
		{ tail -40 "$out/kernel-build.log" >&2; die "kernel build failed (log: $out/kernel-build.log)"; }
	grep -E 'options requested|kernel release|build time' "$out/kernel-build.log" || true
	# keep the Image, config and build-info; the 2 GB build tree is not needed again
	rm -rf "$KDIR/src" "$KDIR/build"
	touch "$KDIR/.complete"
	find "$cache" -maxdepth 1 -name 'kernel-*' ! -name "kernel-$k" -exec rm -rf {} +
	KREL=$(sed -n 's/^kernel release: //p' "$KDIR/build-info.txt")
	KIMAGE="$KDIR/Image"
}

# The arm64 package lists of bookworm(-backports) in a private apt configuration (the host's own
# lists are amd64's): versions, dependencies and downloads of the guest's packages.
arm64_apt() {
	local keyring=signed-by=/usr/share/keyrings/debian-archive-keyring.gpg
	private_apt --arch arm64 "$cache/apt-arm64" "deb [arch=arm64 $keyring] $MIRROR bookworm main" \
		"deb [arch=arm64 $keyring] $MIRROR bookworm-backports main" ||
		{ cat "$cache/apt-arm64/update.log" >&2; die "cannot read Debian's arm64 package lists"; }
}
# debian_rt_package: the kernel image package Debian's linux-image-rt-arm64 (bookworm-backports)
# depends on now, with its version ("NAME=VERSION"); after arm64_apt.
debian_rt_package() {
	local pkg
	pkg=$(apt-cache "${aopt[@]}" depends -t bookworm-backports "$DEBIAN_RT_KERNEL" 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-rt-arm64\)$/\1/p' | head -1)
	[ -n "$pkg" ] || return 0
	echo "$pkg=$(apt-cache "${aopt[@]}" policy "$pkg" | sed -n 's/^ *Candidate: //p')"
}

# install_debian_kernel ROOT NAME=VERSION: Debian's PREEMPT_RT kernel in ROOT, and an initramfs
# that loads virtio_blk and ext4 (modules in this kernel) and switches to /dev/vda. All of it
# natively on the host: the package unpacked (dpkg-deb -x), modules.dep by the host's depmod,
# a busybox initramfs made with cpio. Installing it with apt inside the arm64 chroot, which runs
# depmod and initramfs-tools under qemu-user, took over 10 minutes of a 2-core machine.
install_debian_kernel() {
	local r=$1 pkg=${2%%=*} ver=${2#*=} dl rel init m
	dl=$(mktemp -d)
	(cd "$dl" && apt-get "${aopt[@]}" download "$pkg=$ver" busybox-static >/dev/null) || { rm -rf "$dl"; return 1; }
	# --keep-directory-symlink: the package's ./lib/modules goes through the rootfs' /lib ->
	# usr/lib link (merged /usr) instead of replacing it with a directory
	dpkg-deb --fsys-tarfile "$dl/${pkg}_"*.deb | tar -x --keep-directory-symlink -C "$r"
	[ -L "$r/lib" ] || [ ! -e "$r/usr/lib/aarch64-linux-gnu" ] || { rm -rf "$dl"; echo "unpacking $pkg replaced the rootfs' /lib link" >&2; return 1; }
	rel=$(find "$r/boot" -maxdepth 1 -name 'vmlinuz-*-rt-arm64' -printf '%f\n' | sed 's/^vmlinuz-//' | sort | tail -1)
	[ -n "$rel" ] || { rm -rf "$dl"; echo "$pkg has no /boot/vmlinuz-*-rt-arm64" >&2; return 1; }
	depmod -b "$r" "$rel"
	init="$dl/initramfs"
	mkdir -p "$init"/{bin,dev,lib,proc,sys,newroot}
	dpkg-deb -x "$dl/"busybox-static_*.deb "$dl/bb"
	cp "$dl/bb/bin/busybox" "$init/bin/busybox"
	mknod -m 600 "$init/dev/console" c 5 1
	# the modules and their dependencies, in load order, decompressed (busybox insmod)
	: >"$init/modules"
	# (modprobe takes one module per call: further words are its parameters; -d puts ROOT in
	# the paths it prints)
	for m in virtio_blk ext4; do modprobe -d "$r" -S "$rel" --show-depends "$m"; done |
		sed -n 's/^insmod \([^ ]*\).*/\1/p' | awk '!seen[$0]++' |
		while read -r m; do
			xz -dc "$m" >"$init/lib/$(basename "$m" .xz)"
			basename "$m" .xz >>"$init/modules"
		done
	if ! grep -qx virtio_blk.ko "$init/modules" || ! grep -qx ext4.ko "$init/modules"; then
		rm -rf "$dl"
		echo "virtio_blk/ext4 not found as modules of $rel" >&2
		return 1
	fi
	cat >"$init/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules); do insmod "/lib/$m" || echo "initramfs: insmod $m failed"; done
# root=: /dev/vda for the system test, the booted slot's partition for the A/B test
root=/dev/vda
for a in $(cat /proc/cmdline); do case "$a" in root=*) root=${a#root=} ;; esac; done
i=0
while [ ! -b "$root" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
mount -t ext4 -o rw "$root" /newroot || { echo "initramfs: cannot mount $root"; exec sh; }
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/init
INIT
	chmod 755 "$init/init"
	(cd "$init" && find . | cpio -o -H newc --quiet) | gzip -1 >"$r/boot/initrd.img-$rel"
	echo "$pkg $ver unpacked, depmod, initramfs of $(wc -l <"$init/modules") modules ($(du -h "$r/boot/initrd.img-$rel" | cut -f1))"
	rm -rf "$dl"
	# QEMU boots them from outside the disk image
	rm -rf "$out/kernel" && mkdir -p "$out/kernel"
	cp "$r/boot/vmlinuz-$rel" "$r/boot/initrd.img-$rel" "$out/kernel/"
	KIMAGE="$out/kernel/vmlinuz-$rel" KINITRD="$out/kernel/initrd.img-$rel" KREL=$rel
}

# ---- 3. base root filesystem ---------------------------------------------------------------------
# debootstrap mostly downloads and runs maintainer scripts through qemu-user, the kernel build
# compiles: on a cold cache the two run side by side (started before the kernel, joined after).
ROOTFS_PID=""
rootfs_start() {
	local k
	k=$(printf '%s\n' "$SUITE" "$MIRROR" "$ROOTFS_INCLUDE" "minbase" "$(dpkg-query -W -f='${Version}' debootstrap)" | key)
	ROOTFS="$cache/rootfs-$k"
	if [ -f "$ROOTFS.complete" ] && [ -d "$ROOTFS" ] && [ "$rebuild" != rootfs ] && [ "$rebuild" != all ]; then
		echo "cached: $ROOTFS ($(du -sh "$ROOTFS" | cut -f1))"
		return 0
	fi
	echo "debootstrap $SUITE arm64 (minbase + $ROOTFS_INCLUDE), key $k, in the background (log: $out/debootstrap.log)"
	rm -rf "$ROOTFS" "$ROOTFS.complete"
	(
		t0=$SECONDS
		"${NICE[@]}" debootstrap --arch=arm64 --variant=minbase --include="$ROOTFS_INCLUDE" \
			"$SUITE" "$ROOTFS" "$MIRROR" >"$out/debootstrap.log" 2>&1 || exit 1
		rm -rf "$ROOTFS/var/cache/apt/archives/"*.deb
		echo "debootstrap took $((SECONDS - t0))s" >>"$out/debootstrap.log"
	) &
	ROOTFS_PID=$!
}
rootfs_join() {
	if [ -z "$ROOTFS_PID" ]; then
		echo "cached"
		return 0
	fi
	wait "$ROOTFS_PID" ||
		{ tail -30 "$out/debootstrap.log" >&2; die "debootstrap failed (log: $out/debootstrap.log)"; }
	ROOTFS_PID=""
	tail -1 "$out/debootstrap.log"
	touch "$ROOTFS.complete"
	for old in "$cache"/rootfs-*.complete; do
		[ "$old" = "$ROOTFS.complete" ] || rm -rf "${old%.complete}" "$old"
	done
	du -sh "$ROOTFS" | cut -f1
}

# ---- 4. the rtcat arm64 package -----------------------------------------------------------------
package() {
	rm -rf "$out/deb"
	bash ci/build-deb.sh --arch arm64 --out "$out/deb" >"$out/build-deb.log" 2>&1 ||
		{ tail -30 "$out/build-deb.log" >&2; die "ci/build-deb.sh --arch arm64 failed (log: $out/build-deb.log)"; }
	DEB=$(find "$out/deb" -maxdepth 1 -name 'rtcat_*_arm64.deb' | head -1)
	[ -n "$DEB" ] || die "ci/build-deb.sh produced no rtcat_*_arm64.deb"
	echo "$DEB ($(dpkg-deb -f "$DEB" Version))"
}

# ---- 5. the guest disk image --------------------------------------------------------------------
root=""
cleanup_mounts() {
	if [ -n "$AB_HTTP_PID" ]; then kill "$AB_HTTP_PID" 2>/dev/null || true; fi
	if [ -n "$ROOTFS_PID" ]; then pkill -P "$ROOTFS_PID" 2>/dev/null || true; kill "$ROOTFS_PID" 2>/dev/null || true; fi
	if [ -n "$root" ]; then
		for m in proc sys dev/pts dev; do mountpoint -q "$root/$m" && umount -l "$root/$m"; done
	fi
	return 0
}
trap cleanup_mounts EXIT
inroot() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
image() {
	root="$out/rootfs"
	rm -rf "$root" && cp -a "$ROOTFS" "$root"
	mount -t proc proc "$root/proc"
	mount -t sysfs sys "$root/sys"
	mount --bind /dev "$root/dev"
	mount --bind /dev/pts "$root/dev/pts"

	echo "install the package as a user would: apt-get install ./$(basename "$DEB")"
	cp "$DEB" "$root/tmp/"
	inroot apt-get install -y -q --no-install-recommends "/tmp/$(basename "$DEB")" >"$out/apt-install.log" 2>&1 ||
		{ tail -30 "$out/apt-install.log" >&2; die "apt-get install of the .deb failed in the guest rootfs"; }
	rm -f "$root/tmp/$(basename "$DEB")"
	inroot dpkg -s rtcat | grep -E '^(Status|Version)'

	if [ "$kernel_src" = debian ]; then
		install_debian_kernel "$root" "$KPKG" || die "Debian's RT kernel could not be put in the guest's rootfs"
	fi

	if [ -n "$kernel_deb" ]; then
		echo "install the kernel package as a user would: apt-get install ./$(basename "$kernel_deb")"
		cp "$kernel_deb" "$root/tmp/"
		inroot apt-get install -y -q --no-install-recommends "/tmp/$(basename "$kernel_deb")" >>"$out/apt-install.log" 2>&1 ||
			{ tail -30 "$out/apt-install.log" >&2; die "apt-get install of the kernel package failed in the guest rootfs"; }
		rm -f "$root/tmp/$(basename "$kernel_deb")"
		local vmlinuz
		vmlinuz=$(find "$root/boot" -maxdepth 1 -name 'vmlinuz-*' | sort | tail -1)
		[ -n "$vmlinuz" ] || die "the kernel package installed no /boot/vmlinuz-*"
		rm -rf "$KDIR" && mkdir -p "$KDIR"
		cp "$vmlinuz" "$KDIR/Image"
		KIMAGE="$KDIR/Image"
		KREL=${vmlinuz##*/vmlinuz-}
		echo "boots /boot/$(basename "$vmlinuz"); modules: $(find "$root/lib/modules" -name '*.ko*' | wc -l)"
	fi

	echo "the package's units are the overlay's (byte for byte)"
	local f
	for f in usr/lib/systemd/system/rtcat.service usr/lib/systemd/system/rtcat-tune.service \
		usr/lib/systemd/system/rtcat-exporter.service usr/lib/sysusers.d/rtcat.conf usr/lib/tmpfiles.d/rtcat.conf usr/lib/sysctl.d/60-rtcat.conf \
		usr/lib/udev/rules.d/60-rtcat.rules etc/rtcat/rtcat.toml; do
		cmp -s "rootfs-overlay/$f" "$root/$f" || die "/$f in the .deb differs from rootfs-overlay/$f (or is missing)"
	done
	echo "the package names no interface: no .link or .network file of its own"
	if find "$root/usr/lib/systemd/network" "$root/etc/systemd/network" -name '*rtcat*' 2>/dev/null | grep .; then
		die "the .deb installs network configuration (it must not impose an interface name)"
	fi
	echo "image-only overlay files (the image installs them next to the package): preset, .network, sysctl"
	install -D -m 0644 rootfs-overlay/usr/lib/systemd/system-preset/80-rtcat.preset "$root/usr/lib/systemd/system-preset/80-rtcat.preset"
	for f in usr/lib/systemd/network/10-rtcat-ethercat.network usr/lib/systemd/network/20-rtcat-maintenance.network \
		usr/lib/sysctl.d/61-rtcat-ethercat.conf; do
		install -D -m 0644 "rootfs-overlay/$f" "$root/$f"
	done
	# The board's .link file (rtcat-board in the image) names the master's NIC; the guest's veth
	# gets the ID_PATH of the board's port from a test-only udev rule so that it matches by Path=.
	local id_path
	id_path=$(sed -n 's/^Path=\([^ ]*\).*/\1/p' "$BOARD_LINK" | head -1)
	[[ $id_path =~ ^[A-Za-z0-9:._-]+$ ]] || die "$BOARD_LINK: first Path= '$id_path' is not a literal ID_PATH the guest's cable can take"
	if [ -n "$no_link" ]; then
		echo "NEGATIVE CONTROL RUN: $BOARD_LINK left out; the assertions must FAIL"
	else
		echo "board $machine: $BOARD_LINK (ID_PATH $id_path)"
		install -D -m 0644 "$BOARD_LINK" "$root/usr/lib/systemd/network/10-rtcat-ethercat.link"
	fi
	mkdir -p "$root/etc/udev/rules.d"
	sed "s|@ID_PATH@|$id_path|" "$sys/70-rtcat-systest-cable.rules" >"$root/etc/udev/rules.d/70-rtcat-systest-cable.rules"
	# The .deb ships the exporter disabled; the image's preset enables it, as here.
	inroot systemctl preset rtcat.service rtcat-tune.service rtcat-exporter.service
	inroot systemctl enable systemd-networkd.service

	echo "scale /etc/rtcat/rtcat.toml to the guest: RT CPU $G_RT_FIRST, housekeeping $G_HK, NIC IRQ CPU $G_NIC_IRQ_CPU"
	python3 "$sys/assert.py" scale-config "$root/etc/rtcat/rtcat.toml" \
		--cpu "$G_RT_FIRST" --housekeeping "$G_HK" --nic-irq-cpu "$G_NIC_IRQ_CPU" --period-us "$period_us"
	inroot rtcat config check /etc/rtcat/rtcat.toml

	echo "guest-only test units: veth cable, simulator, reporter"
	install -D -m 0755 "$sys/guest-report.sh" "$root/usr/local/lib/rtcat-systest/guest-report.sh"
	install -D -m 0755 "$sys/cable.sh" "$root/usr/local/lib/rtcat-systest/cable.sh"
	for f in rtcat-systest-veth.service rtcat-systest-sim.service rtcat-systest.service; do
		install -m 0644 "$sys/$f" "$root/etc/systemd/system/$f"
	done
	inroot systemctl enable rtcat-systest-veth.service rtcat-systest-sim.service rtcat-systest.service
	echo "rtcat-systest" >"$root/etc/hostname"
	echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$root/etc/fstab"
	: >"$root/etc/machine-id"
	cleanup_mounts
	rm -f "$out/guest.img"
	# (--ab-only boots no system test guest: its disk is not made)
	[ -n "$ab_only" ] || mkfs.ext4 -q -L rtcat-root -d "$root" "$out/guest.img" 2G
	if [ -n "$ab" ]; then
		# the A/B test makes its slots from the same root filesystem
		rm -rf "$AB_ROOT" && mv "$root" "$AB_ROOT"
	else
		rm -rf "$root"
	fi
	root=""
	echo "$out/guest.img"
}

# ---- 6. boot ------------------------------------------------------------------------------------
boot() {
	local log="$out/console.log" rc=0 qpid qclock=() initrd=()
	[ -z "$KINITRD" ] || initrd=(-initrd "$KINITRD")
	# -icount: guest time advances with the emulated instructions (and jumps ahead while every
	# vCPU idles), one TCG thread runs all vCPUs. Without it the guest's clock is the host's
	# and a 2-core host running 4 emulated vCPUs stalls them for milliseconds.
	[ "$icount" = off ] || qclock=(-icount "shift=$icount,sleep=on,align=off")
	echo "guest clock: ${qclock[*]:-wall clock (multi-threaded TCG)}"
	rm -f "$log"
	: >"$log"
	# Not niced: the guest is the test subject and its vCPU threads carry the 1 ms cycle.
	timeout "$guest_timeout" qemu-system-aarch64 -M virt -cpu cortex-a76 -smp "$GUEST_NR_CPUS" -m 1536 \
		-display none -monitor none -serial "file:$log" -no-reboot -nic none \
		-kernel "$KIMAGE" "${initrd[@]}" -append "$G_APPEND" \
		-drive "if=none,file=$out/guest.img,format=raw,id=hd0" -device virtio-blk-pci,drive=hd0,num-queues=1 \
		-device virtio-rng-pci "${qclock[@]}" &
	qpid=$!
	tail -f -n +1 --pid="$qpid" "$log" | grep --line-buffered -E 'RTCAT-SYSTEST|reboot: |Kernel panic|Failed to start' || true
	wait "$qpid" || rc=$?
	echo "qemu exit status $rc"
	# a timeout is reported by the assertions (poweroff.clean), after reading back what there is
	[ "$rc" -ne 124 ] || echo "the guest did not power off within ${guest_timeout}s (console: $log)" >&2
	QEMU_RC=$rc
}

# ---- 7. read back and assert ------------------------------------------------------------------
readback() {
	local g="$out/guest" f
	rm -rf "$g" && mkdir -p "$g"
	for f in /var/lib/rtcat/summary.json /var/lib/rtcat/events.log /var/lib/rtcat-systest/doctor.json \
		/var/lib/rtcat-systest/doctor.txt /var/lib/rtcat-systest/doctor-unit.json /var/lib/rtcat-systest/tune-status.json \
		/var/lib/rtcat-systest/report.txt /var/lib/rtcat-systest/journal.txt; do
		debugfs -R "dump -p $f $g/$(basename "$f")" "$out/guest.img" 2>/dev/null || true
		[ -s "$g/$(basename "$f")" ] || rm -f "$g/$(basename "$f")"
	done
	ls -l "$g"
}
status=0
check() {
	python3 "$sys/assert.py" check --console "$out/console.log" --guest "$out/guest" \
		--qemu-rc "$QEMU_RC" --cmdline "$G_APPEND" --rt-cpus "$G_RT" --housekeeping "$G_HK" \
		--nr-cpus "$GUEST_NR_CPUS" --config rootfs-overlay/etc/rtcat/rtcat.toml --period-us "$period_us" \
		--rtcat "$HOST_RTCAT" --kernel-release "$KREL" || status=1
}
# The assertions must notice deliberate defects injected into this run's own transcript.
negative_controls() {
	python3 "$sys/assert.py" self-test --console "$out/console.log" --guest "$out/guest" \
		--qemu-rc "$QEMU_RC" --cmdline "$G_APPEND" --rt-cpus "$G_RT" --housekeeping "$G_HK" \
		--nr-cpus "$GUEST_NR_CPUS" --config rootfs-overlay/etc/rtcat/rtcat.toml --period-us "$period_us" \
		--rtcat "$HOST_RTCAT" --kernel-release "$KREL" || status=1
}

if [ -n "$rootfs_only" ]; then
	phase "tools (rootfs)" tools_rootfs
	phase "rootfs (debootstrap arm64) start" rootfs_start
	phase "rootfs (debootstrap arm64) join" rootfs_join
	exit 0
fi
phase "tools" tools
phase "boot args (kernel/bootargs.sh)" bootargs
phase "rootfs (debootstrap arm64) start" rootfs_start
phase "kernel" kernel
phase "rootfs (debootstrap arm64) join" rootfs_join
phase "package (rtcat arm64 .deb)" package
phase "image (install .deb + overlay)" image
if [ -z "$ab_only" ]; then
	phase "boot, run and power off guest" boot
	phase "read back the guest disk" readback
	phase "assertions" check
	phase "negative controls (assertions)" negative_controls
fi
if [ -n "$ab" ]; then
	phase "A/B: slots, bundles, disk" ab_image
	phase "A/B: boot, update, roll back" ab_boot
	phase "A/B: read back the data partition" ab_readback
	phase "A/B: assertions" ab_check
	phase "A/B: negative controls" ab_negative_controls
fi
print_phases
if [ -n "$no_link" ]; then
	# negative control run: the test must have failed
	[ "$status" -ne 0 ] || die "negative control run (--no-link): the system test PASSED without the .link file"
	echo "negative control run (--no-link): the system test failed, as it must"
	exit 0
fi
[ "$status" -eq 0 ] || die "system test FAILED (console: $out/console.log, guest files: $out/guest)"
echo "system test passed"
