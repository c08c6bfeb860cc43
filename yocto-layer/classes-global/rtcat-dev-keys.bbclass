# rtcat-dev-keys: a development key pair for RAUC bundles, made at build time (never committed).
#
# INHERIT += "rtcat-dev-keys" (kas/include/rtcat-ab.yml does): when the build starts and
# ${RTCAT_DEV_KEY_DIR} has no key pair yet, openssl makes a self-signed RSA-4096 certificate and
# its key there (in the build directory, outside the source tree); RAUC_KEY_FILE and
# RAUC_CERT_FILE point at them unless the configuration set them already. The certificate is
# also the devices' keyring (rauc-conf.bbappend), so a development image accepts only bundles of
# the same build directory. A product signs with its own key instead: set RAUC_KEY_FILE (a file
# or a PKCS#11 URI) and RAUC_CERT_FILE in its configuration (yocto-layer/README.md, "A/B
# updates"): this class then makes nothing.

RTCAT_DEV_KEY_DIR ??= "${TOPDIR}/rtcat-dev-keys"
RAUC_KEY_FILE ??= "${RTCAT_DEV_KEY_DIR}/development.key.pem"
RAUC_CERT_FILE ??= "${RTCAT_DEV_KEY_DIR}/development.cert.pem"

python rtcat_dev_keys() {
    import os
    import subprocess
    keydir = e.data.getVar("RTCAT_DEV_KEY_DIR")
    key = e.data.getVar("RAUC_KEY_FILE")
    cert = e.data.getVar("RAUC_CERT_FILE")
    if not key.startswith(keydir + "/") or not cert.startswith(keydir + "/"):
        return  # the product's own key pair
    if os.path.isfile(key) and os.path.isfile(cert):
        return
    os.makedirs(keydir, mode=0o700, exist_ok=True)
    cmd = ["openssl", "req", "-x509", "-newkey", "rsa:4096", "-nodes", "-sha256", "-days", "3650",
           "-subj", "/O=rtcat development/CN=rtcat development bundle signer (NOT FOR PRODUCTS)",
           "-keyout", key, "-out", cert]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        bb.fatal("rtcat-dev-keys: openssl could not make the development key pair: %s" % r.stderr.strip())
    os.chmod(key, 0o600)
    bb.warn("rtcat-dev-keys: made a DEVELOPMENT key pair for RAUC bundles in %s; products use their own (yocto-layer/README.md)" % keydir)
}
addhandler rtcat_dev_keys
rtcat_dev_keys[eventmask] = "bb.event.ConfigParsed"
