#!/bin/bash
# rtcat system test (QEMU guest only): the EtherCAT "cable", a veth pair.
#
#   cable.sh up MAC PEER    create the pair: the segment's end PEER (brought up), the master's
#                           end with address MAC and no name of ours: the kernel names it
#                           (veth0, ...) and udev renames it through the board's .link file,
#                           as it renames a board's NIC. Prints the name it ends up with.
#   cable.sh down PEER      remove the pair
#
# The test never names the master's end: a .link file that does not give it the configured
# [bus].interface leaves rtcat without its NIC, and the test fails.
set -euo pipefail
case "${1:-}" in
up)
	mac=${2:?MAC} peer=${3:?PEER}
	ip link add address "$mac" type veth peer name "$peer"
	ip link set "$peer" up
	# the add event has been through udev's rules (80-net-setup-link.rules) once settle returns
	udevadm settle --timeout=30
	# the master's end is the interface whose peer is PEER ("N: NAME@PEER: ...")
	ip -o link show | sed -n "s/^[0-9]*: \([^@:]*\)@$peer: .*/\1/p"
	;;
down)
	ip link del "${2:?PEER}"
	;;
*)
	echo "usage: cable.sh up MAC PEER | down PEER" >&2
	exit 2
	;;
esac
