# nooelint: oelint.var.bbclassextend - boot-time configuration of the target only
SUMMARY = "rtcat A/B updates: health gate and persistent state"
DESCRIPTION = "rtcat-health-gate.service marks the booted RAUC slot good once rtcat has held OP \
               (else the board reboots and U-Boot's boot counter rolls back); rtcat-persist.service \
               keeps /etc/rtcat, /var/lib/rtcat, the SSH host keys and the machine-id on the data \
               partition across updates; fw_env.config for RAUC's U-Boot backend."
HOMEPAGE = "https://github.com/rtcat/rtcat"
BUGTRACKER = "https://github.com/rtcat/rtcat/issues"
SECTION = "admin"
LICENSE = "MIT | Apache-2.0"
LIC_FILES_CHKSUM = "file://LICENSE-MIT;md5=fa51284d74db0f37dae874ef847b4ca0 \
                    file://LICENSE-APACHE;md5=3b83ef96387f14655fc854ddc3c6bd57"

# Installed from rootfs-overlay/ of the rtcat repository (the QEMU system test installs the same files).
# nooelint: oelint.vars.fileextrapaths,oelint.vars.outofcontext - the sources are the repository around the layer, not layer files
FILESEXTRAPATHS:prepend := "${RTCAT_TOPDIR}:"

SRC_URI = "file://LICENSE-MIT;subdir=rtcat \
           file://LICENSE-APACHE;subdir=rtcat \
           file://rootfs-overlay/usr/lib/rtcat/rtcat-health-gate;subdir=rtcat \
           file://rootfs-overlay/usr/lib/rtcat/rtcat-persist;subdir=rtcat \
           file://rootfs-overlay/usr/lib/systemd/system/rtcat-health-gate.service;subdir=rtcat \
           file://rootfs-overlay/usr/lib/systemd/system/rtcat-persist.service;subdir=rtcat \
           file://rootfs-overlay/etc/rtcat/health-gate.conf;subdir=rtcat \
"

S = "${UNPACKDIR}/rtcat"

inherit allarch systemd

# U-Boot's environment file on the boot partition (rtcat-ab-boot's boot.scr reads and writes it).
RTCAT_AB_ENV_SIZE ??= "0x4000"

do_configure[noexec] = "1"
do_compile[noexec] = "1"

do_install() {
    install -d ${D}${nonarch_libdir}/rtcat ${D}${systemd_system_unitdir} ${D}${sysconfdir}/rtcat \
               ${D}/uboot ${D}/data
    install -m 0755 ${S}/rootfs-overlay/usr/lib/rtcat/rtcat-health-gate ${D}${nonarch_libdir}/rtcat/
    install -m 0755 ${S}/rootfs-overlay/usr/lib/rtcat/rtcat-persist ${D}${nonarch_libdir}/rtcat/
    install -m 0644 ${S}/rootfs-overlay/usr/lib/systemd/system/rtcat-health-gate.service ${D}${systemd_system_unitdir}/
    install -m 0644 ${S}/rootfs-overlay/usr/lib/systemd/system/rtcat-persist.service ${D}${systemd_system_unitdir}/
    install -m 0644 ${S}/rootfs-overlay/etc/rtcat/health-gate.conf ${D}${sysconfdir}/rtcat/
    printf '# U-Boot environment (rtcat-ab-boot boot.scr): a file on the FAT boot partition\n/uboot/uboot.env 0x0 %s\n' \
        "${RTCAT_AB_ENV_SIZE}" >${D}${sysconfdir}/fw_env.config
}

SYSTEMD_SERVICE:${PN} = "rtcat-health-gate.service rtcat-persist.service"
SYSTEMD_AUTO_ENABLE:${PN} = "enable"

FILES:${PN} += "${nonarch_libdir}/rtcat ${systemd_system_unitdir}/rtcat-health-gate.service \
                ${systemd_system_unitdir}/rtcat-persist.service /uboot /data"
CONFFILES:${PN} = "${sysconfdir}/rtcat/health-gate.conf ${sysconfdir}/fw_env.config"

RDEPENDS:${PN} = "bash libubootenv-bin rauc rtcat util-linux-findmnt util-linux-mountpoint"

CVE_PRODUCT = "rtcat"
