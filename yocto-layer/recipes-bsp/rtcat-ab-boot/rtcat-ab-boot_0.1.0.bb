# nooelint: oelint.var.bbclassextend,oelint.var.suggestedvar.CVE_PRODUCT - a boot script of the target, written here (no upstream product)
SUMMARY = "rtcat A/B boot script for U-Boot (RAUC boot selection)"
DESCRIPTION = "boot.scr implementing RAUC's U-Boot contract (BOOT_ORDER, BOOT_A_LEFT, BOOT_B_LEFT) \
               with the environment in uboot.env on the FAT boot partition, and that file's \
               initial contents; both deployed for the wic image's boot partition."
HOMEPAGE = "https://github.com/rtcat/rtcat"
BUGTRACKER = "https://github.com/rtcat/rtcat/issues"
SECTION = "bootloaders"
LICENSE = "MIT"
# nooelint: oelint.var.licenseremotefile - the script is the layer's own (MIT, the layer's licence)
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"

DEPENDS = "u-boot-tools-native"

SRC_URI = "file://boot.cmd.in"

S = "${UNPACKDIR}"

inherit deploy nopackages

# The partition device prefix in Linux (root=PREFIX2 or PREFIX3) and the environment's size
# (rtcat-ab's fw_env.config says the same).
RTCAT_AB_ROOT_PREFIX ??= "/dev/mmcblk0p"
RTCAT_AB_ENV_SIZE ??= "0x4000"

do_compile() {
    sed -e 's|@ARGS@|${RTCAT_BOOTARGS}|' -e 's|@ROOT_PREFIX@|${RTCAT_AB_ROOT_PREFIX}|' \
        -e 's|@ENV_SIZE@|${RTCAT_AB_ENV_SIZE}|g' ${S}/boot.cmd.in >${B}/boot.cmd
    if grep -n '@[A-Z_]*@' ${B}/boot.cmd; then
        bbfatal "rtcat-ab-boot: a placeholder of boot.cmd.in is left"
    fi
    mkimage -A arm64 -T script -C none -n "rtcat A/B" -d ${B}/boot.cmd ${B}/boot.scr
    printf 'BOOT_ORDER=A B\nBOOT_A_LEFT=3\nBOOT_B_LEFT=3\n' >${B}/env.txt
    mkenvimage -s ${RTCAT_AB_ENV_SIZE} -o ${B}/uboot.env ${B}/env.txt
}

do_deploy() {
    install -m 0644 ${B}/boot.scr ${B}/uboot.env ${DEPLOYDIR}/
}
addtask deploy after do_compile before do_build

COMPATIBLE_MACHINE = "^(rock-5b|rockchip-rk3588-evb)$"
