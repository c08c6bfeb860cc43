# rtcat mainline-rt flavour: linux-yocto-rt (PREEMPT_RT merged in mainline) on the RK3588 machines
# of Yocto's meta-rockchip (rock-5b, rock-5a, orangepi-5-plus, nanopc-t6), booted via extlinux.
# The RT boot arguments reach extlinux.conf through UBOOT_EXTLINUX_KERNEL_ARGS (conf/distro/rtcat-os.conf).
#
# Config fragments and the stmmac patches come from the rtcat repository's kernel/ (never copied):
#   kernel/fragments/{rt-core,rk3588-ethercat,rk3588-mainline}.cfg
#   kernel/patches/${RTCAT_MAINLINE_PATCHES}/*.patch
# Everything is conditional on the mainline-rt flavour, so the bsp-rt stack is not affected.

# meta-rockchip's machine list, kmeta and COMPATIBLE_MACHINE for linux-yocto*, as its own
# linux-yocto_%.bbappend does.
require ${@'recipes-kernel/linux/linux-rockchip.inc' if d.getVar('RTCAT_KERNEL_FLAVOUR') == 'mainline-rt' else ''}

FILESEXTRAPATHS:prepend:rtcat-mainline-rt := "${RTCAT_TOPDIR}/kernel:"

RTCAT_KERNEL_FRAGMENTS:rtcat-mainline-rt ?= "rt-core.cfg rk3588-ethercat.cfg rk3588-mainline.cfg"
# The patch series written for 6.12; linux-yocto-rt of wrynose is 6.18.
RTCAT_MAINLINE_PATCHES:rtcat-mainline-rt ?= "mainline-6.12"

SRC_URI:append:rtcat-mainline-rt = " \
    ${@rtcat.kernel_fragments(d, d.getVar('RTCAT_KERNEL_FRAGMENTS'))} \
    ${@rtcat.kernel_files(d, 'patches/' + d.getVar('RTCAT_MAINLINE_PATCHES'), '.patch')} \
"

# Fail the build (do_kernel_configcheck) when an option of our fragments did not survive,
# e.g. PREEMPT_RT silently dropped for a missing dependency.
KMETA_AUDIT_WERROR:rtcat-mainline-rt = "1"
