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
# armed spare lives until it is used, its engine's Close removes it, or a
# sweep finds it older than the retention; the processes of a spare whose
# engine vanished without Close wait (asleep, on a FIFO) until then.
corral_arm() {
	set -f
	unset CDPATH
	# shellcheck disable=SC2034 # detach sets nof; nothing reads it after an arming
	d=$1 sh=$2 sf=$3 nof=
	findsetsid || return 0
	# Whoever makes the directory owns it: a start that made it first
	# runs in it, and then there is nothing to arm.
	mkdir -m 700 "$d" 2>/dev/null || return 0
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
corral_armwait() {
	n=0
	while ! [ -s "$1/armed" ] && ! [ -f "$1/armfail" ] && [ -d "$1" ] && [ $n -lt 2500 ]; do
		n=$((n+1))
		if [ $n -gt 500 ]; then sleep 0.001 2>/dev/null || sleep 1; fi
	done
}
