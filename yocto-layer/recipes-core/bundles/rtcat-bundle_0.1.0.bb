# nooelint: oelint.var.bbclassextend,oelint.var.suggestedvar.CVE_PRODUCT,oelint.var.mandatoryvar.SRC_URI - a bundle of the target image (its packages carry their own CVE products), made from the deploy directory by the bundle class
SUMMARY = "rtcat update bundle (RAUC): the rtcat-image root filesystem for slot A or B"
DESCRIPTION = "A signed verity bundle of rtcat-image's ext4 root filesystem, installable with \
               'rauc install' from a file or streamed over HTTP(S)."
HOMEPAGE = "https://github.com/rtcat/rtcat"
BUGTRACKER = "https://github.com/rtcat/rtcat/issues"
SECTION = "images"
LICENSE = "MIT"

inherit bundle

RAUC_BUNDLE_COMPATIBLE = "rtcat-${MACHINE}"
RAUC_BUNDLE_VERSION = "${DISTRO_VERSION}"
RAUC_BUNDLE_DESCRIPTION = "rtcat-image for ${MACHINE}"
RAUC_BUNDLE_FORMAT = "verity"
RAUC_BUNDLE_SLOTS = "rootfs"
RAUC_SLOT_rootfs = "rtcat-image"
RAUC_SLOT_rootfs[fstype] = "ext4"
# RAUC_KEY_FILE / RAUC_CERT_FILE: the rtcat-dev-keys class (development) or the product's own
