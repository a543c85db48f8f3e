# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# The /proc primitives, shared by the library (lib in scripts.go) and the
# parent's script (parent.sh). Only builtins run in them: the wrapper must
# not fork while it watches.
#
# corral_proc, unset in a sandbox, stands in for /proc in pstat and tree,
# so that a test can point them at crafted files.

# pstat PID reads /proc/PID/stat and sets p_state (field 3), p_pgrp (field
# 5), p_start (field 22, start time in clock ticks since boot), p_wstatus
# (field 52, the wait status of a zombie, Linux 3.5+) and p_cpu (fields 14
# to 17: utime, stime, cutime and cstime, in clock ticks, as four words).
# It returns 1 when the process does not exist.
#
# The command name (field 2) may hold spaces, parentheses and newlines (any
# process can rename itself), so every line is read and the fields are
# taken after the last ") ": nothing after the name holds a parenthesis.
# Reading only the first line would make a name with a newline hide its
# process from the group kill and call a command that renames itself lost.
# When the name holds no newline, the loop costs one more system call.
pstat() {
	p_line= p_l=
	{
		read -r p_line
		while read -r p_l; do p_line="$p_line $p_l"; done
	} 2>/dev/null <"${corral_proc:-/proc}/$1/stat"
	[ -n "$p_line" ] || return 1
	# shellcheck disable=SC2086 # splitting the stat fields is the point
	set -- ${p_line##*) }
	# shellcheck disable=SC2034 # pstat's results, read by its callers in other files
	p_state=$1 p_pgrp=$3 p_start=${20} p_wstatus=${50} p_cpu="${12} ${13} ${14} ${15}"
}

# wstatus W DIR sets st to the exit file's line for the wait status W:
# "signal N" or "code N", followed by " oom" when the OOM killer ended the
# command (see oomkilled).
wstatus() {
	# shellcheck disable=SC2034 # wstatus's result, read by its callers
	if [ $(($1 & 127)) -ne 0 ]; then st="signal $(($1 & 127))"; else st="code $((($1 >> 8) & 255))"; fi
	case $st in "signal 9"|"code 137") oomkilled "$2" && st="$st oom" ;; esac
	return 0
}

# oomkilled DIR tells whether the OOM killer ended DIR's command, which
# ended by SIGKILL (or with the 137 a shell reports for its child's): the
# kernel's count of OOM kills in the command's memory cgroup, recorded at
# the start in DIR/oom as "COUNT FILE" (see oommark in oom.sh), has risen.
# The count is read as the exit is seen, by whoever writes exit first.
# Its variables are k_*: o_f is oomfile's, kept for the shell's life.
oomkilled() {
	k_b= k_f=
	{ [ -f "$1/oom" ] && read -r k_b k_f <"$1/oom"; } || return 1
	case $k_b in ''|*[!0-9]*) return 1 ;; esac
	oomcount "$k_f" && [ "$o_n" -gt "$k_b" ]
}

# oomcount FILE sets o_n to the oom_kill count in FILE (cgroup v2
# memory.events, v1 memory.oom_control), and returns 1 when it has none.
oomcount() {
	o_n= o_k= o_v=
	{
		while read -r o_k o_v; do
			if [ "$o_k" = oom_kill ]; then o_n=$o_v; break; fi
		done
	} 2>/dev/null <"$1"
	case $o_n in ''|*[!0-9]*) o_n=; return 1 ;; esac
}
