# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# The kernel's record of OOM kills, read so that a command the OOM killer
# ended is reported so (see oomkilled in proc.sh). corral_cgroup, unset in
# a sandbox, stands in for /sys/fs/cgroup, and corral_proc for /proc, so
# that a test can point them at crafted files.

# oommark DIR records, in DIR/oom, "COUNT FILE": the count of OOM kills in
# the memory cgroup of this shell, which the command it starts inherits,
# and the file it was read from. Called before the command starts, so an
# OOM kill of an earlier process of the same cgroup is not blamed on it.
# Nothing is recorded where no count is readable.
oommark() {
	oomfile
	# shellcheck disable=SC2154 # o_n is set by oomcount (proc.sh)
	if [ -n "$o_f" ] && oomcount "$o_f"; then echo "$o_n $o_f" >"$1/oom"; fi
	return 0
}

# oomfile sets o_f to the file counting the OOM kills of this shell's
# memory cgroup, "" when there is none: memory.events of the nearest
# cgroup v2, from ours upwards, that has the memory controller (the one
# memory is charged to), else memory.oom_control of our cgroup in the v1
# memory hierarchy. A cgroup path that is not under the mount is a
# container's view, in which the mount's root is our own cgroup. Looked
# up once per shell (o_done): a resident shell never moves.
oomfile() {
	[ -n "$o_done" ] && return 0
	o_done=1 o_f= o_v1= o_v2= o_cg=${corral_cgroup:-/sys/fs/cgroup}
	{
		while IFS= read -r o_l; do
			o_r=${o_l#*:}
			case $o_l in
			0::*) o_v2=${o_r#*:} ;;
			*) case ,${o_r%%:*}, in *,memory,*) o_v1=${o_r#*:} ;; esac ;;
			esac
		done
	} 2>/dev/null <"${corral_proc:-/proc}/self/cgroup"
	for o_m in "$o_cg" "$o_cg/unified"; do
		if [ -z "$o_v2" ] || ! [ -f "$o_m/cgroup.controllers" ]; then continue; fi
		o_x=${o_m}${o_v2%/}
		[ -d "$o_x" ] || o_x=$o_m
		while :; do
			if [ -f "$o_x/memory.events" ]; then o_f=$o_x/memory.events; return 0; fi
			[ "$o_x" = "$o_m" ] && break
			o_x=${o_x%/*}
		done
	done
	if [ -n "$o_v1" ]; then
		o_x=$o_cg/memory${o_v1%/}
		[ -d "$o_x" ] || o_x=$o_cg/memory
		if [ -f "$o_x/memory.oom_control" ]; then o_f=$o_x/memory.oom_control; fi
	fi
	return 0
}
