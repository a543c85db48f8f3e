# shellcheck shell=sh
# Armed spares: a start's directory made ready, with its processes waiting,
# before the start that will use it. The base protocol (launch.sh,
# parent.sh) works without them; corral_launch uses a spare when the
# previous start asked for one (KIND=armed).

# corral_arm DIR SH SF prepares DIR as an armed spare, the next start's
# directory with its parent, wrapper and command already running, each
# waiting: the parent stopped, the wrapper reading the FIFO go, the command
# (already the leader of its own session) reading the FIFO run. A start
# then only writes spec and "go SI" (see corral_launch): the wrapper starts
# the stdin holder when SI=1 and writes run, and the command reads spec and
# execs Shell -c Command. That takes four execs (setsid and the parent's
# shell, setsid and a shell for the command) and a mkdir off the start's
# path.
#
# A resident shell runs it after the start's reply has gone out (see
# Resident in resident.go), so nobody waits for it. The word exit on go,
# instead of go, ends an armed spare's processes (see corral_rmspare). An
# armed spare lives until it is used, its engine's Close removes it, or its
# resident shell ends: the spare is tied to the shell that armed it, whose
# PID and start time it keeps in armer. A resident shell that reads end of
# file (its engine closed it, or the connection or exec carrying it went
# away) or is hung up removes the spares it armed before it exits (see
# residentLoop in resident.go), and the sweep of an engine's first start
# removes every spare whose armer is gone (corral_sweepspares), which
# catches a shell killed outright.
corral_arm() {
	set -f
	unset CDPATH
	# shellcheck disable=SC2034 # detach sets nof; nothing reads it after an arming
	d=$1 sh=$2 sf=$3 nof=
	findsetsid || return 0
	# Whoever makes the directory owns it: a start that made it first
	# runs in it, and then there is nothing to arm.
	mkdir -m 700 "$d" 2>/dev/null || return 0
	# $$ is the resident shell, also in the subshell that runs this.
	# shellcheck disable=SC2154 # p_start is set by pstat (proc.sh)
	pstat "$$" && echo "$$ $p_start" >"$d/armer"
	# shellcheck disable=SC2015,SC2154 # armfail when any step fails, detach too; ss is set by findsetsid, corral_parent by lib
	mkfifo "$d/run" "$d/in" "$d/go" 2>/dev/null && : >"$d/log" &&
		detach "$ss" "$sf" "$sh" -c "$corral_parent" corral-parent "$d" "$sh" "$ss" armed 0 </dev/null >/dev/null 2>>"$d/wrapper.err" ||
		: >"$d/armfail"
	return 0
}

# corral_rmspare DIR removes a spare that was never used (no spec), telling
# an armed one's processes to end first. corral_dropspare DIR is what Close
# uses: the spare may not exist yet (its arming comes after the start's
# reply), so it claims the directory the way the armer would (mkdir) and
# leaves it empty for the sweep, or, when the armer has it, waits for the
# arming to finish and removes the spare. corral_armwait DIR is that wait,
# which the launcher shares: until DIR holds armed or armfail, or is gone;
# a brief spin, then 1ms sleeps, for a few seconds at most.
# corral_endspare DIR is what a resident shell that ends runs for the
# spares it armed: it armed them itself, so a DIR that is not there was
# used and removed, or removed by Close, and is not made again.
corral_rmspare() {
	[ -f "$1/spec" ] && return 0
	if [ -p "$1/go" ]; then echo exit 1<>"$1/go"; fi
	rm -rf "$1" 2>/dev/null
	return 0
}
corral_dropspare() {
	mkdir -m 700 "$1" 2>/dev/null && return 0
	corral_armwait "$1"
	corral_rmspare "$1"
}
corral_endspare() {
	[ -d "$1" ] || return 0
	corral_armwait "$1"
	corral_rmspare "$1"
}
corral_armwait() {
	n=0
	while ! [ -s "$1/armed" ] && ! [ -f "$1/armfail" ] && [ -d "$1" ] && [ $n -lt 2500 ]; do
		n=$((n+1))
		if [ $n -gt 500 ]; then sleep 0.001 2>/dev/null || sleep 1; fi
	done
}

# corral_sweepspares BASE KEEP removes the spares under BASE whose armer
# (the resident shell that armed them) is gone: their engine, or its
# connection, went away without removing them. KEEP is the directory the
# calling start runs in. A spare armed by a live shell, of this engine or
# of another one on the same sandbox, is left alone; one without armer
# (armed before armer existed) is left to the retention sweep.
corral_sweepspares() {
	set +f
	for a in "$1"/*/armer; do
		set -f
		[ -f "$a" ] || continue
		x=${a%/armer}
		[ "$x" = "$2" ] && continue
		[ -f "$x/spec" ] && continue
		s_p=
		s_pst=
		# An armer being written (no whole line yet) is a live arming.
		read -r s_p s_pst <"$a" 2>/dev/null || continue
		[ -n "$s_pst" ] || continue
		# shellcheck disable=SC2154 # p_start is set by pstat (proc.sh)
		if pstat "$s_p" && [ "$p_start" = "$s_pst" ]; then continue; fi
		corral_rmspare "$x"
	done
	set -f
	return 0
}
