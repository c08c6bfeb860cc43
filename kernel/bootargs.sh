#!/usr/bin/env bash
# Generate rtcat's real-time kernel boot arguments from kernel/rt-cpus.env.
#
# Usage: kernel/bootargs.sh [--env FILE] [--rt-cpus LIST] [--housekeeping LIST] [--nr-cpus N]
#                           [--format plain|extlinux|chosen|yocto] [--base "ARGS"] [--dtb FILE]
#                           [--apply-extlinux FILE]
#
#   plain     the arguments on one line (default)
#   extlinux  an extlinux.conf "append" line: --base ARGS (the board's root=/console= arguments)
#             followed by the RT arguments
#   chosen    a device-tree source fragment setting /chosen/bootargs for the vendor boot.img flow;
#             the board's existing bootargs come from --base or from --dtb FILE (fdtget)
#   yocto     a UBOOT_EXTLINUX_KERNEL_ARGS:append line for a Yocto conf/bbappend
#   --apply-extlinux FILE  rewrite every "append" line of FILE in place (idempotent: earlier
#             RT arguments are replaced, everything else is kept; a backup FILE.rtcat-bak is made)
#
# CPU lists use the kernel's syntax: "6", "2-3", "0-5,7". Both lists are validated (syntax,
# ascending ranges, below --nr-cpus, disjoint, CPU0 never isolated) and an invalid one is an
# error naming the field.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
env_file="$here/rt-cpus.env"
rt_cpus="" hk_cpus="" nr_cpus="" format=plain base="" base_set="" dtb="" apply=""

die() { printf 'bootargs.sh: error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
	case "$1" in
	--env) env_file=${2:?--env needs a file}; shift 2 ;;
	--rt-cpus) rt_cpus=${2?--rt-cpus needs a CPU list}; shift 2 ;;
	--housekeeping) hk_cpus=${2?--housekeeping needs a CPU list}; shift 2 ;;
	--nr-cpus) nr_cpus=${2?--nr-cpus needs a number}; shift 2 ;;
	--format) format=${2:?--format needs plain|extlinux|chosen|yocto}; shift 2 ;;
	--base) base=${2?--base needs a string}; base_set=1; shift 2 ;;
	--dtb) dtb=${2:?--dtb needs a file}; shift 2 ;;
	--apply-extlinux) apply=${2:?--apply-extlinux needs a file}; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done

# Read the env file without executing it: only the three known keys, plain values.
read_env() {
	local file=$1 line key val n=0
	[ -r "$file" ] || die "cannot read $file"
	while IFS= read -r line || [ -n "$line" ]; do
		n=$((n + 1))
		line=${line%%#*}
		line=${line//[[:space:]]/}
		[ -z "$line" ] && continue
		[[ $line == *=* ]] || die "$file:$n: expected KEY=VALUE, got '$line'"
		key=${line%%=*} val=${line#*=}
		val=${val#\"} val=${val%\"}
		case "$key" in
		RTCAT_RT_CPUS) env_rt=$val ;;
		RTCAT_HOUSEKEEPING_CPUS) env_hk=$val ;;
		RTCAT_NR_CPUS) env_nr=$val ;;
		*) die "$file:$n: unknown key '$key'" ;;
		esac
	done <"$file"
}
env_rt="" env_hk="" env_nr=""
read_env "$env_file"
[ -n "$rt_cpus" ] || rt_cpus=$env_rt
[ -n "$hk_cpus" ] || hk_cpus=$env_hk
[ -n "$nr_cpus" ] || nr_cpus=$env_nr
[ -n "$rt_cpus" ] || die "RTCAT_RT_CPUS is empty (set it in $env_file or pass --rt-cpus)"
[ -n "$hk_cpus" ] || die "RTCAT_HOUSEKEEPING_CPUS is empty (set it in $env_file or pass --housekeeping)"
[ -n "$nr_cpus" ] || nr_cpus=8
[[ $nr_cpus =~ ^[1-9][0-9]{0,3}$ ]] || die "RTCAT_NR_CPUS/--nr-cpus: '$nr_cpus' is not a CPU count"

# expand FIELD LIST -> prints the CPU numbers one per line, or dies naming FIELD.
expand() {
	local field=$1 list=$2 item a b c
	[[ $list =~ ^[0-9,-]+$ ]] || die "$field: '$list' is not a CPU list (use e.g. 6 or 0-5,7)"
	IFS=, read -ra items <<<"$list"
	[ "${list: -1}" != , ] || die "$field: '$list' ends with a comma"
	for item in "${items[@]}"; do
		if [[ $item =~ ^([0-9]+)$ ]]; then
			a=$((10#${BASH_REMATCH[1]})) b=$a
		elif [[ $item =~ ^([0-9]+)-([0-9]+)$ ]]; then
			a=$((10#${BASH_REMATCH[1]})) b=$((10#${BASH_REMATCH[2]}))
			[ "$a" -le "$b" ] || die "$field: range '$item' is descending"
		else
			die "$field: '$item' in '$list' is neither a CPU nor a range"
		fi
		[ "$b" -lt "$nr_cpus" ] || die "$field: CPU $b in '$list' does not exist (the SoC has $nr_cpus CPUs: 0-$((nr_cpus - 1)))"
		for ((c = a; c <= b; c++)); do echo "$c"; done
	done
}

rt_list=$(expand RTCAT_RT_CPUS "$rt_cpus") || exit 2
hk_list=$(expand RTCAT_HOUSEKEEPING_CPUS "$hk_cpus") || exit 2
mapfile -t rt <<<"$rt_list"
mapfile -t hk <<<"$hk_list"
[ "$(printf '%s\n' "${rt[@]}" | sort -n | uniq -d)" = "" ] || die "RTCAT_RT_CPUS: '$rt_cpus' lists a CPU twice"
[ "$(printf '%s\n' "${hk[@]}" | sort -n | uniq -d)" = "" ] || die "RTCAT_HOUSEKEEPING_CPUS: '$hk_cpus' lists a CPU twice"
for c in "${rt[@]}"; do
	[ "$c" -ne 0 ] || die "RTCAT_RT_CPUS: CPU0 is the boot CPU and cannot be isolated or nohz_full"
	for h in "${hk[@]}"; do
		[ "$c" -ne "$h" ] || die "RTCAT_RT_CPUS and RTCAT_HOUSEKEEPING_CPUS overlap on CPU $c"
	done
done
zero=0
for h in "${hk[@]}"; do [ "$h" -ne 0 ] || zero=1; done
[ "$zero" -eq 1 ] || die "RTCAT_HOUSEKEEPING_CPUS: '$hk_cpus' must include CPU0 (the boot CPU keeps the tick)"

rt_args="isolcpus=nohz,domain,managed_irq,$rt_cpus nohz_full=$rt_cpus rcu_nocbs=$rt_cpus irqaffinity=$hk_cpus cpufreq.default_governor=performance"

# strip_rt ARGS: drop any earlier RT arguments so that regeneration is idempotent.
strip_rt() {
	local out="" w
	for w in $1; do
		case "$w" in
		isolcpus=* | nohz_full=* | rcu_nocbs=* | irqaffinity=* | cpufreq.default_governor=*) ;;
		*) out="$out $w" ;;
		esac
	done
	printf '%s' "${out# }"
}

join() { local s; s="$(strip_rt "$1") $rt_args"; printf '%s' "${s# }"; }

if [ -n "$apply" ]; then
	[ -w "$apply" ] || die "--apply-extlinux: cannot write $apply"
	grep -qiE '^[[:space:]]*append[[:space:]]' "$apply" || die "--apply-extlinux: $apply has no 'append' line"
	cp -p "$apply" "$apply.rtcat-bak"
	tmp=$(mktemp "$apply.XXXXXX")
	while IFS= read -r line || [ -n "$line" ]; do
		if [[ $line =~ ^([[:space:]]*)([aA][pP][pP][eE][nN][dD])[[:space:]]+(.*)$ ]]; then
			printf '%s%s %s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "$(join "${BASH_REMATCH[3]}")"
		else
			printf '%s\n' "$line"
		fi
	done <"$apply" >"$tmp"
	mv "$tmp" "$apply"
	echo "updated $apply (backup: $apply.rtcat-bak)" >&2
	exit 0
fi

case "$format" in
plain) join "$base"; echo ;;
extlinux) printf '\tappend %s\n' "$(join "$base")" ;;
yocto) printf 'UBOOT_EXTLINUX_KERNEL_ARGS:append = " %s"\n' "$rt_args" ;;
chosen)
	if [ -n "$dtb" ]; then
		[ -z "$base_set" ] || die "give either --base or --dtb, not both"
		command -v fdtget >/dev/null || die "--dtb needs fdtget (Debian: device-tree-compiler)"
		[ -r "$dtb" ] || die "--dtb: cannot read $dtb"
		base=$(fdtget -t s "$dtb" /chosen bootargs 2>/dev/null) ||
			die "--dtb: $dtb has no /chosen/bootargs; pass the board's arguments with --base"
	elif [ -z "$base_set" ]; then
		echo "bootargs.sh: note: no --base/--dtb given; /chosen/bootargs will hold only the RT arguments" >&2
	fi
	s=$(join "$base")
	printf '/* generated by kernel/bootargs.sh from kernel/rt-cpus.env: do not edit */\n'
	printf '/ {\n\tchosen {\n\t\tbootargs = "%s";\n\t};\n};\n' "${s//\"/\\\"}"
	;;
*) die "--format: '$format' is not one of plain, extlinux, chosen, yocto" ;;
esac
