# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# The parent, run as Shell -c PARENT corral-parent DIR SH SETSID MODE SI by
# a fresh session leader with default signal dispositions (see detach in
# launch.sh). PARENT is proc.sh, then C set to command.sh, then this file
# (see parentBody in scripts.go). It forks the wrapper (a background
# subshell) and then the command (a foreground subshell), and waits for the
# command. MODE "now" starts the command at once; "armed" prepares an armed
# spare (see spares.sh), and SI then comes with the word go.
#
# Only the parent of a process learns from wait() whether it was killed by
# a signal, and every shell folds that into $? = 128+N, so "exit 143" and
# "killed by SIGTERM" look the same to a shell. The kernel shows the real
# wait status of a zombie in /proc/PID/stat field 52, so the wrapper makes
# sure the command stays a zombie until it has looked: it stops the parent
# (SIGSTOP) right after the command started, so the parent cannot reap.
#
# The command's subshell first writes its identity (its own PID comes from
# /proc/self/stat: $$ in a subshell is the parent's) and waits until the
# parent is stopped (the "gate": a brief spin, then 1ms sleeps, so a loaded
# machine still lets the wrapper run), so even an instant exit is kept.
# Then it execs setsid (it is not a group leader, so setsid never forks)
# and, through it, Shell -c Command (now) or Shell -c command.sh (armed):
# the command is the leader of a new session, a child of the parent, and
# has default signal dispositions because nothing on its way was started
# with `&`. The wrapper is a `&` subshell, and so ignores SIGINT and
# SIGQUIT, which it never passes on. Stdin (the FIFO in, kept open for
# writing by a holder the wrapper starts) is opened only after the gate:
# the open waits for the holder.
#
# The wrapper reports "ok CPID CSTART WPID WSTART" on the launcher's pipe
# (now; the parent lets go of that pipe before it forks the command) or in
# the file armed, then watches the command until it is a zombie, reads its
# wait status, writes the exit file and resumes the parent, which reaps the
# command and exits. Any poll does the same as soon as it sees the zombie
# (see state in state.sh), so the wrapper's watch is not on the path of
# exit detection: it only guarantees that an exit nobody polls for is
# recorded too. Its sleeps grow from 5ms to 100ms, a fork every 100ms per
# long-running process: the trade-off between idle cost and how soon an
# unwatched exit file appears. When a poll has finished first (the exit
# file exists), the wrapper only resumes the parent and ends. The wrapper,
# too, spins a little before it sleeps while it waits for the command's
# pid: a sleep is a fork and at least a millisecond.
#
# Every file is written with one echo, not tmp+mv (a mv is one more fork on
# the way): nobody reads parent, holder, wrapper and armed before the
# wrapper reports, the wrapper takes pid only once it holds both fields,
# and for exit see state in state.sh.
d=$1 sh=$2 ss=$3 mode=$4 si=$5
set -f
p=$$
# The waits below spin on builtins first and sleep only after: a builtin
# look costs microseconds, a sleep is a fork and a millisecond or more. The
# counts are looks:
#   pw_spin, pw_max: the wrapper's wait for the command's pid file. The
#     first 1000 (about a millisecond of [ -f ]) catch a command that
#     starts at once; then 1ms naps, and after 5000 looks (seconds on a
#     loaded machine) the command is reported as never started.
#   ps_spin, ps_max: the wait for the parent to show it is stopped. Each
#     look is a pstat (a read of /proc/PID/stat, ~0.2ms), so 50 of them are
#     about 10ms; the bound of 5000 only ends a wait that a vanished
#     parent would make endless.
#   g_spin, g_max: the command's gate, waiting for the parent file: like
#     pw_spin, then 1ms sleeps. The bound (5000 sleeps, seconds) is far
#     longer than a wrapper takes to stop the parent even on a loaded
#     machine; it only keeps a command whose wrapper died from hanging.
pw_spin=1000 pw_max=5000 ps_spin=50 ps_max=5000 g_spin=1000 g_max=6000
# The wrapper.
# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh, sent before this file)
(
	s=; read -r s </proc/self/stat; w=${s%% *}
	iv=0.001
	nap() { sleep $iv 2>/dev/null || { iv=1; sleep 1; }; }
	pstat "$p"; pst=$p_start
	# Armed: the command reads run, whose only writer is this wrapper,
	# so the command sees EOF, and ends, if the wrapper dies. Opened
	# read-write, so that the open never waits; the command's open
	# waits for this one.
	if [ "$mode" = armed ]; then exec 5<>"$d/run"; fi
	n=0 c= cst=
	while :; do
		[ -f "$d/pid" ] && read -r c cst <"$d/pid"
		[ -n "$cst" ] && break
		n=$((n+1))
		if [ $n -gt $pw_max ] || ! [ -d "/proc/$p" ]; then echo "nocommand"; exit 1; fi
		if [ $n -gt $pw_spin ]; then nap; fi
	done
	kill -STOP "$p"
	# Start returns only once the parent is really stopped: a signal the
	# supervisor sends right after must find the command's death kept.
	n=0
	while pstat "$p" && [ "$p_state" != T ] && [ $n -lt $ps_max ]; do
		n=$((n+1))
		if [ $n -gt $ps_spin ]; then nap; fi
	done
	echo "$p $pst" >"$d/parent"
	pstat "$w"; wst=$p_start
	echo "$w $wst" >"$d/wrapper"
	if [ "$mode" = armed ]; then
		exec >/dev/null
		# go is held open read-write from before the armed file exists
		# to the word go, so no word written to it is ever lost (a FIFO
		# drops its data when its last user closes it). Nothing wakes
		# the wait but a word: a spare nobody uses ends with its
		# engine's Close, or with the sweep of a later start.
		exec 3<>"$d/go"
		echo "ok $c $cst $w $wst" >"$d/armed"
		# shellcheck disable=SC2030 # the wrapper's own si, from the word go; the command has its own
		job= si=
		read -r job si <&3 || job=
		exec 3<&-
		if [ "$job" != go ]; then
			# Not used after all: end the spare.
			kill -KILL "$c" 2>/dev/null
			kill -CONT "$p" 2>/dev/null
			exit 0
		fi
	fi
	h=
	if [ "$si" = 1 ]; then
		# shellcheck disable=SC2217 # the holder must not keep the parent's stdin
		sleep 2147483647 >"$d/in" </dev/null 2>/dev/null 5>&- &
		h=$!
		pstat "$h" && echo "$h $p_start" >"$d/holder"
	fi
	if [ "$mode" = armed ]; then
		echo run >&5
		exec 5>&-
	else
		echo "ok $c $cst $w $wst"
		exec >/dev/null
	fi
	if [ "$iv" != 1 ]; then iv=0.005; fi
	st=
	# Done only once exit holds a whole line: a poll may have created
	# it and not yet written it, and resuming the parent now would let
	# it reap the zombie that a third reader needs to find.
	ex=
	while ! { [ -f "$d/exit" ] && read -r ex <"$d/exit"; }; do
		if ! pstat "$c" || [ "$p_start" != "$cst" ]; then
			# A poll that found the zombie first wrote exit, then resumed
			# the parent, which reaped the command: not lost.
			[ -f "$d/exit" ] || st=lost
			break
		fi
		# Only Z: a process being reaped (X, after a poll wrote exit and
		# resumed the parent) shows a wait status of 0.
		if [ "$p_state" = Z ]; then
			case $p_wstatus in
			''|*[!0-9]*) st=lost ;;
			*) wstatus "$p_wstatus" "$d" ;;
			esac
			break
		fi
		sleep $iv
		case $iv in 0.005) iv=0.01 ;; 0.01) iv=0.02 ;; 0.02) iv=0.05 ;; 0.05) iv=0.1 ;; esac
	done
	# Rewritten in place, never truncated: whoever else writes it
	# writes the same bytes, so nobody ever finds it shorter again.
	# shellcheck disable=SC2034 # ex: only whether read finds a whole line counts
	case $st in
	lost) [ -f "$d/exit" ] || echo lost >"$d/exit" ;;
	?*) { [ -f "$d/exit" ] && read -r ex <"$d/exit"; } || echo "$st" 1<>"$d/exit" ;;
	esac
	kill -CONT "$p" 2>/dev/null
	# The stdin holder has nobody left to hold the FIFO for.
	if [ -n "$h" ]; then kill "$h" 2>/dev/null; fi
	# The limit cgroups go with the tree; one that still holds a member
	# (an escapee) is dropped by a later look at the tree.
	cgsettle "$d"
) </dev/null &
exec >/dev/null
(
	s=; read -r s </proc/self/stat
	c=${s%% *}
	# shellcheck disable=SC2086 # splitting the stat fields is the point
	set -- ${s##*) }
	# Armed: run is open (see the wrapper) before pid says we are here.
	if [ "$mode" = armed ]; then exec 4<"$d/run" || exit 125; fi
	echo "$c ${20}" >"$d/pid" || exit 125
	# The gate: the wrapper writes parent once the parent is stopped.
	n=0
	while ! [ -f "$d/parent" ] && [ -d "/proc/$p" ] && [ $n -lt $g_max ]; do
		n=$((n+1))
		if [ $n -gt $g_spin ]; then sleep 0.001 2>/dev/null || sleep 1; fi
	done
	if [ "$mode" = armed ]; then exec "$ss" "$sh" -c "$C" corral-command "$d" "$sh"; fi
	# shellcheck disable=SC1091 # spec is written per process by corral_launch
	. "$d/spec" || exit 125
	cgjoin "$d" || exit 125
	# shellcheck disable=SC2031 # the command reads the parent's si, not the wrapper's
	if [ "$si" = 1 ]; then exec <"$d/in"; fi
	if [ -n "$wd" ]; then cd "$wd" || exit 126; fi
	# shellcheck disable=SC2154 # tag and cmd come from the spec file sourced above
	if [ $# -eq 0 ]; then export CORRAL_TREE="$tag"; exec "$ss" "$sh" -c "$cmd"; fi
	exec env "$@" "CORRAL_TREE=$tag" "$ss" "$sh" -c "$cmd"
) </dev/null >>"$d/log" 2>&1
