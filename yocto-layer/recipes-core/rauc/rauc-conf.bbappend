# rtcat: the system.conf of each machine (files/<MACHINE>/system.conf) and the keyring: the
# certificate of the bundle signer, RAUC_CERT_FILE (the development key pair made at build time
# by the rtcat-dev-keys class, or the product's own, see yocto-layer/README.md "A/B updates").
FILESEXTRAPATHS:prepend:rtcat-os := "${THISDIR}/files:"

RAUC_KEYRING_FILE:rtcat-os = "ca.cert.pem"
RAUC_KEYRING_URI:rtcat-os = "file://${RAUC_CERT_FILE};downloadfilename=ca.cert.pem"
