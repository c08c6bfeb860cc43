# nooelint: oelint.var.bbclassextend - a target kernel
SUMMARY = "Rockchip 5.10.160-rt89 vendor kernel (PREEMPT_RT) for rtcat's GMAC boards"
DESCRIPTION = "The Rockchip 5.10.160 BSP kernel with the kernel.org 5.10 RT patch forward-ported \
               (5.10.160-rt89), the rtcat stmmac interrupt-coalescing patch, the rtcat config \
               fragments, the GMAC EtherCAT overlay and the CPU isolation boot arguments in \
               /chosen/bootargs. For boards that wire an RK3588 GMAC to the EtherCAT segment \
               (vendor EVBs), on the Rockchip vendor BSP layer."
HOMEPAGE = "https://github.com/orangepi-xunlong/linux-orangepi"
BUGTRACKER = "https://github.com/rtcat/rtcat/issues"
SECTION = "kernel"
LICENSE = "GPL-2.0-only"
LIC_FILES_CHKSUM = "file://COPYING;md5=6bc538ed5bd9a7fc9398086aedcd7e46"

DEPENDS += "dtc-native"

# The vendor BSP layer's kernel machinery: linux-yocto.inc (fragments in SRC_URI are merged),
# linux-rockchip.inc (rockchip boot.img/zboot.img, defconfig merging of rk3588_linux.config).
# nooelint: oelint.file.requirenotfound - in openembedded-core (meta/), a declared dependency
require recipes-kernel/linux/linux-yocto.inc
# Only in the bsp-rt stack: Yocto's meta-rockchip (mainline-rt stack) has a different file of
# the same name, and this recipe is skipped there (SKIP_RECIPE in conf/distro/rtcat-os.conf).
# In the Rockchip vendor BSP layer (see kas/rk3588-evb-bsp-rt.yml).
require ${@'recipes-kernel/linux/linux-rockchip.inc' if d.getVar('RTCAT_KERNEL_FLAVOUR') == 'bsp-rt' else ''}

LINUX_VERSION = "5.10.160"
LINUX_KERNEL_TYPE = "preempt-rt"
PV = "${LINUX_VERSION}+git"

# Rockchip 5.10.160 (base tag linux-5.10-stan-rkr1) + patch-5.10.180-rt89 forward port, as
# published on the Orange Pi RK35xx RT branch (uname -r: 5.10.160-rt89).
# From the rtcat repository (never copied): config fragments shared with mainline-rt, the
# stmmac coalescing patch series for the 5.10 vendor driver, and the GMAC EtherCAT overlay.
SRC_URI = "git://github.com/orangepi-xunlong/linux-orangepi.git;protocol=https;branch=orange-pi-5.10-rk35xx-rt"
SRC_URI:append:rtcat-bsp-rt = " \
    ${@rtcat.kernel_fragments(d, d.getVar('RTCAT_KERNEL_FRAGMENTS'))} \
    ${@rtcat.kernel_files(d, 'patches/' + d.getVar('RTCAT_BSP_PATCHES'), '.patch')} \
    file://${RTCAT_GMAC_OVERLAY} \
"
SRCREV = "9f9e9d18574d0914c0d192a90c3babfe1fd63c95"

# nooelint: oelint.vars.fileextrapaths,oelint.vars.outofcontext - the sources are kernel/ and dts/ of the repository around the layer
FILESEXTRAPATHS:prepend := "${RTCAT_TOPDIR}/kernel:${RTCAT_TOPDIR}/dts:"
# rauc.cfg: loop, squashfs, dm-verity, NBD for `rauc install` (the A/B image, kas/include/rtcat-ab.yml).
RTCAT_KERNEL_FRAGMENTS ?= "rt-core.cfg rk3588-ethercat.cfg rauc.cfg"
# The series of LINUX_VERSION (kernel/patch-series.sh): bsp-5.10.
RTCAT_BSP_PATCHES ?= "${@rtcat.kernel_patch_series(d, 'bsp-rt')}"
RTCAT_KERNEL_PATCHES = "${RTCAT_BSP_PATCHES}"
# GMAC wired to the EtherCAT segment: rk3588-gmac0-ethercat.dtso or rk3588-gmac1-ethercat.dtso.
RTCAT_GMAC_OVERLAY ?= "rk3588-gmac1-ethercat.dtso"

# The tree's own defconfig, as kernel/build.sh uses it (kernel/sources.env BSP_DEFCONFIG).
KBUILD_DEFCONFIG = "rockchip_linux_defconfig"
KERNEL_VERSION_SANITY_SKIP = "1"
COMPATIBLE_MACHINE = "rockchip-rk3588-evb"

# Patches are taken from kernel/ explicitly (above), not from the BSP's auto-patch directory.
PATCHPATH = ""

# The vendor U-Boot boots with the DTB's /chosen/bootargs (plus its own root= arguments). Before
# the kernel packs the DTBs into boot.img, build them, apply the GMAC overlay and append the RT
# arguments that kernel/bootargs.sh generates from kernel/rt-cpus.env to /chosen/bootargs.
# kbuild does not rebuild a DTB whose sources and command did not change, so boot.img gets ours.
do_compile:prepend() {
    dtc -@ -I dts -O dtb -o ${B}/rtcat-gmac-ethercat.dtbo ${UNPACKDIR}/${RTCAT_GMAC_OVERLAY}
    for dtbf in ${KERNEL_DEVICETREE}; do
        oe_runmake -C ${B} "$dtbf"
        dtb="${B}/arch/${ARCH}/boot/dts/$dtbf"
        [ -f "$dtb" ] || bbfatal "rtcat: $dtb was not built"
        fdtoverlay -i "$dtb" -o "$dtb.rtcat" ${B}/rtcat-gmac-ethercat.dtbo
        mv "$dtb.rtcat" "$dtb"
        base=$(fdtget -t s "$dtb" /chosen bootargs 2>/dev/null || true)
        args=$(bash ${RTCAT_TOPDIR}/kernel/bootargs.sh --format plain --rt-cpus "${RTCAT_RT_CPUS}" \
               --housekeeping "${RTCAT_HOUSEKEEPING_CPUS}" --nr-cpus "${RTCAT_NR_CPUS}" --base "$base")
        fdtput -p -t s "$dtb" /chosen bootargs "$args"
        [ "$(fdtget -t s "$dtb" /chosen bootargs)" = "$args" ] || bbfatal "rtcat: /chosen/bootargs of $dtb not set"
        bbnote "rtcat: $dtbf /chosen/bootargs = $args"
    done
}
do_compile[vardeps] += "RTCAT_BOOTARGS RTCAT_GMAC_OVERLAY"

# The source's own version must be the series' (before do_patch), and every fragment line must
# hold in the final .config (do_rtcat_configcheck, kernel/merge-config.sh --verify-only).
require rtcat-kernel-checks.inc

CVE_PRODUCT = "linux_kernel"

