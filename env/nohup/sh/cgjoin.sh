# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# The parts of the limit cgroups (see cgroup.sh) that the wrapper and the
# command's shell need too, so this file goes into them as well as lib.

# cgjoin DIR moves this shell into DIR's limit cgroups (none when DIR/cg
# is absent: no limit asked). Builtins only: echo writes the shell's own
# PID (0 means the writer) into cgroup.procs, and what the shell then
# execs and forks stays there. It says on stderr (the log) what failed.
cgjoin() {
	[ -f "$1/cg" ] || return 0
	while IFS= read -r j_g; do
		[ -n "$j_g" ] || continue
		echo 0 2>/dev/null >"$j_g/cgroup.procs" || {
			echo "corral: cannot join the limit cgroup $j_g" >&2
			return 1
		}
	done <"$1/cg"
}

# cgdrop DIR removes DIR's limit cgroups that are empty, with their base
# when nothing else is in it (the next limited start makes it again), and
# DIR/cg once none is left; it fails while one is left. A cgroup whose
# last member was just killed may hold it a moment longer, until its
# parent reaps it: the wrapper waits for that (cgsettle). One with a live
# member (an escapee) stays for whoever sees the tree gone next (a
# survivors look, the removal).
cgdrop() {
	[ -f "$1/cg" ] || return 0
	c_left=
	while IFS= read -r c_g; do
		[ -n "$c_g" ] || continue
		if rmdir "$c_g" 2>/dev/null || ! [ -d "$c_g" ]; then
			rmdir "${c_g%/*}" 2>/dev/null
		else
			c_left=1
		fi
	done <"$1/cg"
	[ -z "$c_left" ] || return 1
	rm -f "$1/cg"
}

# cgsettle DIR is cgdrop, tried for up to a second while what is left has
# no live member.
cgsettle() {
	c_n=0
	while ! cgdrop "$1" && [ $c_n -lt 100 ]; do
		c_g=
		read -r c_g <"$1/cg" 2>/dev/null
		# shellcheck disable=SC2034 # a line read is a live member
		{ [ -n "$c_g" ] && read -r c_q <"$c_g/cgroup.procs"; } 2>/dev/null && return 0
		c_n=$((c_n + 1))
		sleep 0.01 2>/dev/null || return 0
	done
	return 0
}
