#!/bin/bash
# The A/B test's guest side (rtcat-systest-ab.service, every boot): reports facts as
# "RTCAT-AB key=value" lines on the serial console and takes the next step of the sequence
# kept on the data partition (/data/ab-systest/step). ci/system/ab.sh boots the disk once;
# the guest reboots itself through U-Boot until the sequence ends with a poweroff:
#   step install-good  (slot A, flashed): refused bundles (untrusted signer, other
#                      compatible, unsigned), then `rauc install` of the good bundle from the
#                      bundle disk into B; reboot
#   step after-good    (slot B): OP and the gate's verdict; a marker in /var/lib/rtcat; the bad
#                      bundle installed from the host over HTTP into A, its attempts set to 1
#                      (a test shortcut); reboot
#   step after-bad     slot A (bad): nothing (the gate fails and reboots); slot B: the rollback
#                      is reported, the marker checked; poweroff
# It reports facts only; ci/system/ab-assert.py decides.
set -uo pipefail
S=/data/ab-systest
B=/mnt/ab-bundles
con=/dev/ttyAMA0
say() { printf 'RTCAT-AB boot=%s %s\n' "${boot:-?}" "$*" | tee -a "$S/report.txt" >"$con"; }
mkdir -p "$S"
boot=$(($(cat "$S/boots" 2>/dev/null || echo 0) + 1))
echo "$boot" >"$S/boots"
step=$(cat "$S/step" 2>/dev/null || echo install-good)
slot=$(sed -n 's/.*\brauc\.slot=\([^ ]*\).*/\1/p' /proc/cmdline)
say "up slot=$slot step=$step image=$(cat /etc/rtcat-systest-image 2>/dev/null) uptime=$(cut -d' ' -f1 /proc/uptime)"
say "env $(fw_printenv BOOT_ORDER BOOT_A_LEFT BOOT_B_LEFT 2>&1 | tr '\n' ' ')"
say "persist $(findmnt -rn -o TARGET,SOURCE /var/lib/rtcat | tr '\n' ' ')"

# wait for the gate's verdict (a failed gate reboots the system from under this script)
for _ in $(seq 600); do
	st=$(systemctl show -p ActiveState --value rtcat-health-gate.service)
	case "$st" in active | failed) break ;; esac
	sleep 1
done
say "gate state=$st result=$(systemctl show -p Result --value rtcat-health-gate.service) uptime=$(cut -d' ' -f1 /proc/uptime)"
say "gate.log $(journalctl -b -u rtcat-health-gate.service -o cat --no-pager 2>/dev/null | grep 'verdict:' | tail -1)"
say "rtcat active=$(systemctl is-active rtcat.service) nrestarts=$(systemctl show -p NRestarts --value rtcat.service)"
status_line() { rauc status --detailed --output-format=shell 2>&1 | grep -E '^RAUC_(BOOT_PRIMARY|SYSTEM_BOOTED_BOOTNAME|SLOT_BOOTNAME_[0-9]|SLOT_BOOT_STATUS_[0-9]|SLOT_STATE_[0-9])=' | tr '\n' ' '; }
say "rauc $(status_line)"
# what `rtcat doctor` tells a technician about the slots (update.slots, issue 30 item 4; the
# slot report does not depend on the RT CPU named)
say "doctor.slots $(rtcat doctor --cpu 0 2>&1 | grep -E '^(PASS|WARN|FAIL|N/A) +update\.slots ' | cut -c1-240)"
[ "$st" = active ] || exit 0
mkdir -p "$B"
if ! mountpoint -q "$B" && ! mount -o ro /dev/vdb "$B"; then
	say "poweroff (no bundle disk)"
	systemctl poweroff
	exit 1
fi

install() { # install NAME SOURCE
	local t0 rc out
	t0=$(cut -d' ' -f1 /proc/uptime)
	say "install.$1 starts source=$2"
	out=$(rauc install "$2" 2>&1)
	rc=$?
	say "install.$1 rc=$rc start=$t0 end=$(cut -d' ' -f1 /proc/uptime) msg=$(printf '%s' "$out" | grep -iE 'error|fail|refus|invalid|compatible|signature|succeeded|installing' | tail -3 | tr '\n' '|')"
	return $rc
}

case "$step" in
install-good)
	install untrusted "$B/untrusted.raucb"
	install othercompat "$B/othercompat.raucb"
	install unsigned "$B/unsigned.raucb"
	echo after-good >"$S/step"
	sync
	if install good "$B/good.raucb"; then
		say "reboot"
		systemctl reboot
	else
		say "poweroff (the good bundle did not install)"
		systemctl poweroff
	fi
	;;
after-good)
	marker=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
	echo "$marker" >/var/lib/rtcat/ab-systest-marker
	say "marker written=$marker results=$(find /var/lib/rtcat -maxdepth 1 -type f -printf '%f:%s ' | tr -s ' ')"
	echo after-bad >"$S/step"
	sync
	if install bad-http "$(cat "$B/url")/bad.raucb"; then
		# A test shortcut: the bad slot gets 1 boot attempt instead of the 3 RAUC gave it (two
		# TCG boots fewer); the rollback is the same mechanism: U-Boot spends the attempt,
		# the counter reaches 0, the other slot boots.
		rauc_env=$(fw_printenv BOOT_ORDER BOOT_A_LEFT BOOT_B_LEFT 2>&1 | tr '\n' ' ')
		other=A
		[ "$slot" != A ] || other=B
		fw_setenv "BOOT_${other}_LEFT" 1
		say "attempts slot=$other rauc: ${rauc_env}test: $(fw_printenv "BOOT_${other}_LEFT" 2>&1)"
		say "reboot"
		systemctl reboot
	else
		say "poweroff (the bad bundle did not install)"
		systemctl poweroff
	fi
	;;
after-bad)
	say "marker read=$(cat /var/lib/rtcat/ab-systest-marker 2>/dev/null) results=$(find /var/lib/rtcat -maxdepth 1 -type f -printf '%f:%s ' | tr -s ' ')"
	say "verdicts $(tail -8 /var/lib/rtcat-health-gate/verdicts.log 2>/dev/null | cut -c1-140 | tr '\n' '|')"
	echo finished >"$S/step"
	sync
	say "poweroff"
	systemctl poweroff
	;;
*)
	say "poweroff (step $step: nothing left to do)"
	systemctl poweroff
	;;
esac
