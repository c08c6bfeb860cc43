# rtcat: the updater's configuration from one file, RTCAT_HAWKBIT_CONFIG (kas/include/rtcat-hawkbit.yml),
# else the layer's template (files/config.conf, which names no real server).
FILESEXTRAPATHS:prepend:rtcat-os := "${THISDIR}/files:"
SRC_URI:append:rtcat-os = " file://config.conf"

do_install:append:rtcat-os() {
    cfg="${RTCAT_HAWKBIT_CONFIG}"
    [ -n "$cfg" ] || cfg=${UNPACKDIR}/config.conf
    [ -s "$cfg" ] || bbfatal "rauc-hawkbit-updater: RTCAT_HAWKBIT_CONFIG=$cfg is missing or empty"
    install -m 0600 -o rauc-hawkbit -g rauc-hawkbit "$cfg" ${D}${sysconfdir}/${BPN}/config.conf
}
