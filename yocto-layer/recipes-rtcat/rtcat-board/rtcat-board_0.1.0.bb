# nooelint: oelint.var.bbclassextend - boot-time configuration of one target machine only
SUMMARY = "rtcat: the name of this machine's EtherCAT port"
DESCRIPTION = "The systemd .link file that names the port wired to the EtherCAT segment ecat0 on \
               this machine, matched by the port's hardware path. One file per machine, in \
               files/<MACHINE>/10-rtcat-ethercat.link; the rest of the image (rtcat.toml, the \
               .network files) uses the name ecat0 on every machine."
HOMEPAGE = "https://github.com/rtcat/rtcat"
BUGTRACKER = "https://github.com/rtcat/rtcat/issues"
SECTION = "net"
LICENSE = "MIT | Apache-2.0"
LIC_FILES_CHKSUM = "file://LICENSE-MIT;md5=fa51284d74db0f37dae874ef847b4ca0 \
                    file://LICENSE-APACHE;md5=3b83ef96387f14655fc854ddc3c6bd57"

# The licence texts from the rtcat repository; the .link file from files/${MACHINE}/ of this
# recipe (bitbake's FILESPATH tries the MACHINE override first).
# nooelint: oelint.vars.fileextrapaths,oelint.vars.outofcontext - the licences are the repository's, not layer files
FILESEXTRAPATHS:prepend := "${RTCAT_TOPDIR}:"

SRC_URI = "file://LICENSE-MIT;subdir=rtcat \
           file://LICENSE-APACHE;subdir=rtcat \
           file://10-rtcat-ethercat.link;subdir=rtcat \
"

S = "${UNPACKDIR}/rtcat"

# Only a machine's own file counts: a board without one is skipped with a message saying what
# to add, instead of silently inheriting another board's port (or a SoC-wide guess).
# nooelint: oelint.task.noanonpython - the skip must happen at parse time, naming the missing file
python __anonymous() {
    import os
    machine = d.getVar("MACHINE")
    f = os.path.join(d.getVar("THISDIR"), "files", machine, "10-rtcat-ethercat.link")
    bb.parse.mark_dependency(d, f)
    if not os.path.isfile(f):
        raise bb.parse.SkipRecipe("no EtherCAT port is defined for MACHINE %s: add %s (see the "
                                  "other machines' files and yocto-layer/README.md)" % (machine, f))
}

# One file per machine: the package is machine-specific.
PACKAGE_ARCH = "${MACHINE_ARCH}"

do_configure[noexec] = "1"
do_compile[noexec] = "1"

do_install() {
    # The name is the image's, not the board's: fail a board file that names the port otherwise.
    grep -qx "Name=${RTCAT_ETHERCAT_IFACE}" ${S}/10-rtcat-ethercat.link ||
        bbfatal "rtcat-board: files/${MACHINE}/10-rtcat-ethercat.link must set Name=${RTCAT_ETHERCAT_IFACE}"
    grep -q '^\[Match\]' ${S}/10-rtcat-ethercat.link ||
        bbfatal "rtcat-board: files/${MACHINE}/10-rtcat-ethercat.link has no [Match] section"
    install -d ${D}${systemd_unitdir}/network
    install -m 0644 ${S}/10-rtcat-ethercat.link ${D}${systemd_unitdir}/network/
}
do_install[vardeps] += "RTCAT_ETHERCAT_IFACE"

FILES:${PN} += "${systemd_unitdir}/network/10-rtcat-ethercat.link"

# udev applies .link files (net_setup_link builtin).
RDEPENDS:${PN} = "udev"

CVE_PRODUCT = "rtcat"
