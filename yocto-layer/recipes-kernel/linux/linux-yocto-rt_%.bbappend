# rtcat mainline-rt flavour: linux-yocto-rt (PREEMPT_RT merged in mainline) on the RK3588 machines
# of Yocto's meta-rockchip (rock-5b, rock-5a, orangepi-5-plus, nanopc-t6), booted via extlinux.
# The RT boot arguments reach extlinux.conf through UBOOT_EXTLINUX_KERNEL_ARGS (conf/distro/rtcat-os.conf).
#
# Config fragments and the stmmac patches come from the rtcat repository's kernel/ (never copied):
#   kernel/fragments/{rt-core,rk3588-ethercat,rk3588-mainline}.cfg
#   kernel/patches/${RTCAT_MAINLINE_PATCHES}/*.patch, the series of LINUX_VERSION: Yocto wrynose's
#   linux-yocto-rt is 6.18 (6.18.39 at the pinned openembedded-core commit) -> mainline-6.18, the
#   series kernel/build.sh and the kernel workflow build too (kernel/README.md)
# Everything is conditional on the mainline-rt flavour, so the bsp-rt stack is not affected.

# meta-rockchip's machine list, kmeta and COMPATIBLE_MACHINE for linux-yocto*, as its own
# linux-yocto_%.bbappend does.
require ${@'recipes-kernel/linux/linux-rockchip.inc' if d.getVar('RTCAT_KERNEL_FLAVOUR') == 'mainline-rt' else ''}

FILESEXTRAPATHS:prepend:rtcat-mainline-rt := "${RTCAT_TOPDIR}/kernel:"

# rauc.cfg: loop, squashfs, dm-verity, NBD for `rauc install` (the A/B image, kas/include/rtcat-ab.yml).
RTCAT_KERNEL_FRAGMENTS:rtcat-mainline-rt ?= "rt-core.cfg rk3588-ethercat.cfg rk3588-mainline.cfg rauc.cfg"
# Chosen by version (kernel/patch-series.sh, as kernel/build.sh does); a LINUX_VERSION without a
# series of its own stops the parse instead of patching it with another release's series.
RTCAT_MAINLINE_PATCHES:rtcat-mainline-rt ?= "${@rtcat.kernel_patch_series(d, 'mainline-rt')}"
RTCAT_KERNEL_PATCHES:rtcat-mainline-rt = "${RTCAT_MAINLINE_PATCHES}"

SRC_URI:append:rtcat-mainline-rt = " \
    ${@rtcat.kernel_fragments(d, d.getVar('RTCAT_KERNEL_FRAGMENTS'))} \
    ${@rtcat.kernel_files(d, 'patches/' + d.getVar('RTCAT_MAINLINE_PATCHES'), '.patch')} \
"

# Fail the build (do_kernel_configcheck) when an option of our fragments did not survive,
# e.g. PREEMPT_RT silently dropped for a missing dependency.
KMETA_AUDIT_WERROR:rtcat-mainline-rt = "1"

# The source's own version must be the series' (before do_patch), and every fragment line must
# hold in the final .config (do_rtcat_configcheck, kernel/merge-config.sh --verify-only).
require ${@'rtcat-kernel-checks.inc' if d.getVar('RTCAT_KERNEL_FLAVOUR') == 'mainline-rt' else ''}
