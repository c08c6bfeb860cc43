#!/usr/bin/env bash
# Which kernel/patches/ series belongs to a kernel: chosen by the kernel's own version (VERSION
# and PATCHLEVEL of its Makefile, or a version string such as a Yocto recipe's LINUX_VERSION),
# never by what a build path hopes it is building. The stmmac patch is written and checked per
# series (the driver changes between releases: hrtimer_setup() since 6.15, renumbered
# STMMAC_FLAG_* bits), so a kernel without a series of its own is refused.
#
# Usage: kernel/patch-series.sh --flavour mainline-rt|bsp-rt (--tree DIR | --version X.Y[.Z...])
#                               [--name]
# Prints the absolute path of kernel/patches/<mainline|bsp>-<X.Y>/ (with --name: only the
# directory name, e.g. mainline-6.18).
# Exit status: 0 found; 1 no series for that kernel (the message lists the series there are);
# 2 usage error or unreadable/malformed tree or version.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
flavour="" tree="" version="" name_only=""

usage() { printf 'patch-series.sh: error: %s\n' "$*" >&2; exit 2; }

while [ $# -gt 0 ]; do
	case "$1" in
	--flavour) flavour=${2:?--flavour needs mainline-rt or bsp-rt}; shift 2 ;;
	--tree) tree=${2:?--tree needs a kernel tree}; shift 2 ;;
	--version) version=${2:?--version needs X.Y[.Z]}; shift 2 ;;
	--name) name_only=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) usage "unknown argument '$1' (see --help)" ;;
	esac
done

case "$flavour" in
mainline-rt) prefix=mainline ;;
bsp-rt) prefix=bsp ;;
"") usage "--flavour is required (mainline-rt or bsp-rt)" ;;
*) usage "--flavour: '$flavour' is not mainline-rt or bsp-rt" ;;
esac
if [ -n "$tree" ] && [ -n "$version" ]; then usage "give --tree or --version, not both"; fi

if [ -n "$tree" ]; then
	[ -f "$tree/Makefile" ] || usage "--tree: $tree/Makefile does not exist (not a kernel tree)"
	# The first assignments of the top-level Makefile, as kbuild itself reads them.
	v=$(sed -n 's/^VERSION = \([0-9][0-9]*\)$/\1/p' "$tree/Makefile" | head -1)
	p=$(sed -n 's/^PATCHLEVEL = \([0-9][0-9]*\)$/\1/p' "$tree/Makefile" | head -1)
	if [ -z "$v" ] || [ -z "$p" ]; then usage "--tree: $tree/Makefile has no numeric VERSION/PATCHLEVEL"; fi
	what="the kernel in $tree (Linux $v.$p)"
elif [ -n "$version" ]; then
	[[ $version =~ ^([0-9]+)\.([0-9]+)([.+~-].*)?$ ]] || usage "--version: '$version' is not X.Y[.Z...]"
	v=${BASH_REMATCH[1]} p=${BASH_REMATCH[2]}
	what="Linux $version"
else
	usage "--tree DIR or --version X.Y is required"
fi
# Leading zeros would name a different directory than the kernel's own "6.18".
v=$((10#$v)) p=$((10#$p))

name="$prefix-$v.$p"
dir="$here/patches/$name"
if [ ! -d "$dir" ] || ! compgen -G "$dir/*.patch" >/dev/null; then
	have=$(cd "$here/patches" && for d in "$prefix"-*/; do [ -d "$d" ] && printf ' %s' "${d%/}"; done)
	printf 'patch-series.sh: no stmmac patch series for %s (%s): kernel/patches/%s/ does not exist or has no *.patch; series there are:%s. Write and verify a series for %s.%s before building it.\n' \
		"$what" "$flavour" "$name" "${have:- none}" "$v" "$p" >&2
	exit 1
fi
if [ -n "$name_only" ]; then echo "$name"; else echo "$dir"; fi
