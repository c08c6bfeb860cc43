# nooelint: oelint.var.suggestedvar.CVE_PRODUCT - an image, not a software product; its packages carry their own
SUMMARY = "rtcat controller image"
DESCRIPTION = "Minimal systemd image of the rtcat real-time EtherCAT controller: PREEMPT_RT \
               kernel with the CPU isolation boot arguments, rtcat-tune applying the run-time \
               shield, rtcat started on boot, ethtool and rt-tests for diagnosis; no irqbalance. \
               Produces a wic image with a bmap."
HOMEPAGE = "https://github.com/rtcat/rtcat"
BUGTRACKER = "https://github.com/rtcat/rtcat/issues"
SECTION = "images"
LICENSE = "MIT"

# The bsp-rt flavour adds the vendor BSP's image class through IMAGE_CLASSES (conf/distro/rtcat-os.conf).
inherit core-image

IMAGE_FEATURES += "ssh-server-dropbear"
IMAGE_LINGUAS = ""

IMAGE_INSTALL = "packagegroup-core-boot \
                 ${CORE_IMAGE_EXTRA_INSTALL} \
                 ethtool \
                 rt-tests \
                 rtcat \
                 rtcat-tune \
"

# Never irqbalance (it would move IRQs onto the isolated CPU): refuse any package pulling it in.
PACKAGE_EXCLUDE = "${RTCAT_FORBIDDEN_PACKAGES}"

IMAGE_FSTYPES:append = " wic wic.bmap"

ROOTFS_POSTPROCESS_COMMAND += "rtcat_rootfs_check"
rtcat_rootfs_check[doc] = "Fail the image when rtcat, its units, its user or its config are missing, or irqbalance is present"

# Fail the image when the product would not come up as intended.
rtcat_rootfs_check() {
    for f in ${bindir}/rtcat ${sysconfdir}/rtcat/rtcat.toml ${systemd_system_unitdir}/rtcat.service \
             ${systemd_system_unitdir}/rtcat-tune.service; do
        [ -e "${IMAGE_ROOTFS}$f" ] || bbfatal "rtcat-image: $f is missing from the rootfs"
    done
    for unit in rtcat.service rtcat-tune.service; do
        [ -L "${IMAGE_ROOTFS}${sysconfdir}/systemd/system/multi-user.target.wants/$unit" ] ||
            bbfatal "rtcat-image: $unit is not enabled"
    done
    for pkg in ${RTCAT_FORBIDDEN_PACKAGES}; do
        if [ -e "${IMAGE_ROOTFS}${systemd_system_unitdir}/$pkg.service" ] ||
           [ -e "${IMAGE_ROOTFS}${sbindir}/$pkg" ]; then
            bbfatal "rtcat-image: $pkg is in the rootfs"
        fi
    done
    grep -q '^rtcat:' ${IMAGE_ROOTFS}${sysconfdir}/passwd || bbfatal "rtcat-image: no rtcat user"
}
