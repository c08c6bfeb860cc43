# nooelint: oelint.var.bbclassextend - boot-time configuration of the target only
SUMMARY = "rtcat CPU shield and NIC tuning at boot"
DESCRIPTION = "rtcat-tune.service runs 'rtcat tune apply' before the EtherCAT master starts and \
               'rtcat tune restore' when it stops; plus the sysctl, limits and network snippets of \
               a real-time EtherCAT controller and the systemd preset that keeps irqbalance off."
HOMEPAGE = "https://github.com/rtcat/rtcat"
BUGTRACKER = "https://github.com/rtcat/rtcat/issues"
SECTION = "net"
LICENSE = "MIT | Apache-2.0"
LIC_FILES_CHKSUM = "file://LICENSE-MIT;md5=fa51284d74db0f37dae874ef847b4ca0 \
                    file://LICENSE-APACHE;md5=3b83ef96387f14655fc854ddc3c6bd57"

# Installed from rootfs-overlay/ of the rtcat repository (shared with the Debian package).
# nooelint: oelint.vars.fileextrapaths,oelint.vars.outofcontext - the sources are the repository around the layer, not layer files
FILESEXTRAPATHS:prepend := "${RTCAT_TOPDIR}:"

SRC_URI = "file://LICENSE-MIT;subdir=rtcat \
           file://LICENSE-APACHE;subdir=rtcat \
           file://rootfs-overlay/usr/lib/systemd/system/rtcat-tune.service;subdir=rtcat \
           file://rootfs-overlay/usr/lib/systemd/system-preset/80-rtcat.preset;subdir=rtcat \
           file://rootfs-overlay/usr/lib/systemd/network/10-rtcat-ethercat.network;subdir=rtcat \
           file://rootfs-overlay/usr/lib/systemd/network/20-rtcat-maintenance.network;subdir=rtcat \
           file://rootfs-overlay/usr/lib/sysctl.d/60-rtcat.conf;subdir=rtcat \
           file://rootfs-overlay/usr/lib/sysctl.d/61-rtcat-ethercat.conf;subdir=rtcat \
           file://rootfs-overlay/etc/security/limits.d/rtcat.conf;subdir=rtcat \
"

S = "${UNPACKDIR}/rtcat"

inherit allarch systemd

do_configure[noexec] = "1"
do_compile[noexec] = "1"

do_install() {
    install -d ${D}${systemd_system_unitdir} ${D}${systemd_unitdir}/system-preset ${D}${systemd_unitdir}/network \
               ${D}${nonarch_libdir}/sysctl.d ${D}${sysconfdir}/security/limits.d ${D}${sysconfdir}/systemd/system
    install -m 0644 ${S}/rootfs-overlay/usr/lib/systemd/system/rtcat-tune.service ${D}${systemd_system_unitdir}/
    install -m 0644 ${S}/rootfs-overlay/usr/lib/systemd/system-preset/80-rtcat.preset ${D}${systemd_unitdir}/system-preset/
    # The EtherCAT port ecat0 without IP, every other wired port as the way in for maintenance.
    # The port's name comes from the machine's .link file (rtcat-board).
    install -m 0644 ${S}/rootfs-overlay/usr/lib/systemd/network/10-rtcat-ethercat.network ${D}${systemd_unitdir}/network/
    install -m 0644 ${S}/rootfs-overlay/usr/lib/systemd/network/20-rtcat-maintenance.network ${D}${systemd_unitdir}/network/
    install -m 0644 ${S}/rootfs-overlay/usr/lib/sysctl.d/60-rtcat.conf ${D}${nonarch_libdir}/sysctl.d/
    install -m 0644 ${S}/rootfs-overlay/usr/lib/sysctl.d/61-rtcat-ethercat.conf ${D}${nonarch_libdir}/sysctl.d/
    install -m 0644 ${S}/rootfs-overlay/etc/security/limits.d/rtcat.conf ${D}${sysconfdir}/security/limits.d/
    # irqbalance would move IRQs onto the isolated CPU: masked, should any layer bring it in.
    ln -sf /dev/null ${D}${sysconfdir}/systemd/system/irqbalance.service
}

SYSTEMD_SERVICE:${PN} = "rtcat-tune.service"
SYSTEMD_AUTO_ENABLE:${PN} = "enable"

FILES:${PN} += "${systemd_system_unitdir}/rtcat-tune.service \
                ${systemd_unitdir}/system-preset/80-rtcat.preset \
                ${systemd_unitdir}/network/10-rtcat-ethercat.network \
                ${systemd_unitdir}/network/20-rtcat-maintenance.network \
                ${nonarch_libdir}/sysctl.d/60-rtcat.conf \
                ${nonarch_libdir}/sysctl.d/61-rtcat-ethercat.conf \
                ${sysconfdir}/systemd/system/irqbalance.service \
"

RDEPENDS:${PN} = "ethtool rtcat"

CVE_PRODUCT = "rtcat"
