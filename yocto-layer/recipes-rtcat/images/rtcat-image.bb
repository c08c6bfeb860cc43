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
                 rtcat-web \
                 rtcat-tune \
                 rtcat-board \
"

# The way in for maintenance (see yocto-layer/README.md): ssh (dropbear) on the maintenance
# port, or a login on the serial console. Neither works without a credential, and the image
# ships none: set RTCAT_AUTHORIZED_KEYS in local.conf to a file of ssh public keys for root,
# and/or give root a password hash with extrausers (EXTRA_USERS_PARAMS). An image with neither
# builds, with a warning: nobody can log in to it.
RTCAT_AUTHORIZED_KEYS ??= ""

# Never irqbalance (it would move IRQs onto the isolated CPU): refuse any package pulling it in.
PACKAGE_EXCLUDE = "${RTCAT_FORBIDDEN_PACKAGES}"

IMAGE_FSTYPES:append = " wic wic.bmap"

# A/B updates (DISTRO_FEATURES "rauc", kas/include/rtcat-ab.yml): RAUC with the health gate and
# the persistent state, two root filesystem slots and a data partition, U-Boot's boot script;
# the ext4 root filesystem is what rtcat-bundle packs. Optional: rauc-hawkbit-updater
# (RTCAT_HAWKBIT = "1", kas/include/rtcat-hawkbit.yml).
RTCAT_AB = "${@bb.utils.contains('DISTRO_FEATURES', 'rauc', '1', '', d)}"
IMAGE_INSTALL:append = " ${@'rauc rtcat-ab' if d.getVar('RTCAT_AB') else ''}"
IMAGE_INSTALL:append = " ${@'rauc-hawkbit-updater' if d.getVar('RTCAT_HAWKBIT') == '1' else ''}"
IMAGE_FSTYPES:append = " ${@'ext4' if d.getVar('RTCAT_AB') else ''}"
# the machine's own layout (meta-rockchip's) when the image is not A/B
RTCAT_WKS_FILE_SINGLE := "${WKS_FILE}"
WKS_FILE = "${@'rtcat-ab.wks.in' if d.getVar('RTCAT_AB') else d.getVar('RTCAT_WKS_FILE_SINGLE')}"
IMAGE_BOOT_FILES:append = " ${@'boot.scr uboot.env' if d.getVar('RTCAT_AB') else ''}"
WKS_FILE_DEPENDS:append = " ${@'rtcat-ab-boot' if d.getVar('RTCAT_AB') else ''}"
do_image_wic[depends] += "${@'rtcat-ab-boot:do_deploy' if d.getVar('RTCAT_AB') else ''}"
RTCAT_AB_SLOT_SIZE ??= "2048M"

ROOTFS_POSTPROCESS_COMMAND += "rtcat_authorized_keys rtcat_rootfs_check"
ROOTFS_POSTPROCESS_COMMAND += "${@'rtcat_ab_fstab' if d.getVar('RTCAT_AB') else ''}"
rtcat_authorized_keys[doc] = "Install RTCAT_AUTHORIZED_KEYS as root's authorized_keys"
rtcat_authorized_keys[vardeps] += "RTCAT_AUTHORIZED_KEYS"

rtcat_authorized_keys() {
    keys="${RTCAT_AUTHORIZED_KEYS}"
    if [ -n "$keys" ]; then
        [ -s "$keys" ] || bbfatal "rtcat-image: RTCAT_AUTHORIZED_KEYS: $keys is missing or empty"
        grep -qE '^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) ' "$keys" ||
            bbfatal "rtcat-image: RTCAT_AUTHORIZED_KEYS: $keys holds no ssh public key"
        install -d -m 0700 ${IMAGE_ROOTFS}${ROOT_HOME}/.ssh
        install -m 0600 "$keys" ${IMAGE_ROOTFS}${ROOT_HOME}/.ssh/authorized_keys
    fi
}
rtcat_rootfs_check[doc] = "Fail the image when rtcat, its units, its user, its config or the EtherCAT port's .link/.network are missing, or irqbalance is present"

# Fail the image when the product would not come up as intended.
rtcat_rootfs_check() {
    for f in ${bindir}/rtcat ${sysconfdir}/rtcat/rtcat.toml ${systemd_system_unitdir}/rtcat.service \
             ${systemd_system_unitdir}/rtcat-tune.service ${systemd_system_unitdir}/rtcat-exporter.service; do
        [ -e "${IMAGE_ROOTFS}$f" ] || bbfatal "rtcat-image: $f is missing from the rootfs"
    done
    for unit in rtcat.service rtcat-tune.service rtcat-exporter.service; do
        [ -L "${IMAGE_ROOTFS}${sysconfdir}/systemd/system/multi-user.target.wants/$unit" ] ||
            bbfatal "rtcat-image: $unit is not enabled"
    done
    for pkg in ${RTCAT_FORBIDDEN_PACKAGES}; do
        if [ -e "${IMAGE_ROOTFS}${systemd_system_unitdir}/$pkg.service" ] ||
           [ -e "${IMAGE_ROOTFS}${sbindir}/$pkg" ]; then
            bbfatal "rtcat-image: $pkg is in the rootfs"
        fi
    done
    # The commissioning page is installed, not started: it opens a TCP port (loopback; TLS and the
    # maintenance interface by a reverse proxy, docs/SECURITY.md).
    [ -e "${IMAGE_ROOTFS}${bindir}/rtcat-web" ] || bbfatal "rtcat-image: ${bindir}/rtcat-web is missing from the rootfs"
    [ ! -e "${IMAGE_ROOTFS}${sysconfdir}/systemd/system/multi-user.target.wants/rtcat-web.service" ] ||
        bbfatal "rtcat-image: rtcat-web.service is enabled (it must be off by default)"
    grep -q '^rtcat:' ${IMAGE_ROOTFS}${sysconfdir}/passwd || bbfatal "rtcat-image: no rtcat user"
    grep -Eq '^rtcat-clients:[^:]*:[0-9]+:(.*,)?rtcat(,|$)' ${IMAGE_ROOTFS}${sysconfdir}/group ||
        bbfatal "rtcat-image: no rtcat-clients group with the rtcat user in it"
    # Exactly one .link file names the EtherCAT port (the machine's, from rtcat-board), and the
    # port's .network file is there: a second one would make the name depend on sort order.
    links=$(grep -lx "Name=${RTCAT_ETHERCAT_IFACE}" ${IMAGE_ROOTFS}${sysconfdir}/systemd/network/*.link \
            ${IMAGE_ROOTFS}${systemd_unitdir}/network/*.link 2>/dev/null | wc -l)
    [ "$links" -eq 1 ] ||
        bbfatal "rtcat-image: $links .link files name the EtherCAT port ${RTCAT_ETHERCAT_IFACE}, want exactly 1 (rtcat-board)"
    for f in ${systemd_unitdir}/network/10-rtcat-ethercat.link ${systemd_unitdir}/network/10-rtcat-ethercat.network \
             ${systemd_unitdir}/network/20-rtcat-maintenance.network; do
        [ -e "${IMAGE_ROOTFS}$f" ] || bbfatal "rtcat-image: $f is missing from the rootfs"
    done
    if [ ! -s ${IMAGE_ROOTFS}${ROOT_HOME}/.ssh/authorized_keys ] && grep -q '^root:[*!]' ${IMAGE_ROOTFS}${sysconfdir}/shadow; then
        bbwarn "rtcat-image: root has no password and no ssh key: nobody can log in (set RTCAT_AUTHORIZED_KEYS or EXTRA_USERS_PARAMS)"
    fi
}

rtcat_ab_fstab[doc] = "The A/B image's boot partition (U-Boot's environment) and data partition in /etc/fstab"

rtcat_ab_fstab() {
    [ -e ${IMAGE_ROOTFS}${sysconfdir}/fw_env.config ] || bbfatal "rtcat-image: A/B without fw_env.config (rtcat-ab): RAUC cannot reach the boot counter"
    printf '%s\n' "# A/B (wic/rtcat-ab.wks.in): 1 boot (boot.scr, uboot.env), 4 data (rtcat-persist)" \
        "PARTLABEL=boot /uboot vfat defaults,sync 0 0" "PARTLABEL=data /data ext4 defaults 0 2" \
        >>${IMAGE_ROOTFS}${sysconfdir}/fstab
}
