package nohup

import (
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/shellquote"
)

// Every script below is a constant. Values reach it only through the
// positional parameters set by a leading `set --` line whose words are all
// produced by shellquote.Quote (see script), so no value is ever parsed as shell code.
// The scripts use only POSIX sh plus setsid, env, sleep, mkfifo, tail, head,
// wc, grep -z and find, and run unchanged under dash, bash and busybox ash.

// script returns body preceded by `set -- args...`, every arg single-quoted.
func script(body string, args ...string) string {
	var b strings.Builder
	b.WriteString("set --")
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(shellquote.Quote(a))
	}
	b.WriteString("\n")
	b.WriteString(body)
	return b.String()
}

// pstatFunc defines pstat PID: it reads /proc/PID/stat and sets p_state
// (field 3), p_pgrp (field 5), p_start (field 22, start time in clock ticks
// since boot) and p_wstatus (field 52, the wait status of a zombie, Linux
// 3.5+). The command name (field 2) may hold spaces and parentheses, so the
// fields are taken after the last ") ". It returns 1 when the process does
// not exist. Only builtins run: the wrapper must not fork while it watches.
const pstatFunc = `pstat() {
	p_line=
	read -r p_line 2>/dev/null </proc/"$1"/stat
	[ -n "$p_line" ] || return 1
	set -- ${p_line##*) }
	p_state=$1 p_pgrp=$3 p_start=${20} p_wstatus=${50}
}
`

// wstatusFunc defines wstatus W: it sets st to the exit file's line for
// the wait status W: "signal N" or "code N".
const wstatusFunc = `wstatus() {
	if [ $(($1 & 127)) -ne 0 ]; then st="signal $(($1 & 127))"; else st="code $((($1 >> 8) & 255))"; fi
}
`

// findSetsidFunc defines findsetsid: it sets ss to the absolute path of
// setsid from PATH, with builtins only (command -v would need a fork to be
// captured), and returns 1 when there is none.
const findSetsidFunc = `findsetsid() {
	ss= f_o=$IFS
	IFS=:
	for f_x in $PATH; do
		f_x=${f_x:-.}/setsid
		if [ -x "$f_x" ] && ! [ -d "$f_x" ]; then ss=$f_x; break; fi
	done
	IFS=$f_o
	[ -n "$ss" ] || return 1
	case $ss in /*) ;; *) ss=$PWD/$ss ;; esac
}
`

// detachFunc defines detach SS SF ARGS...: it runs ARGS as a fresh
// session leader without waiting for it, with setsid -f (util-linux) when
// SF=1, else (or when that setsid refuses -f) with `setsid setsid`
// (busybox: the first setsid makes itself a group leader, so the second
// must fork). It sets nof=" nof" when -f was refused. Never `&`: a command
// started with `&` by a shell without job control inherits SIGINT and
// SIGQUIT ignored, and a POSIX shell cannot undo an ignored-on-entry
// signal, so the user's command would ignore Signal(INT). A setsid that
// refuses -f fails before it forks, so the fallback never starts ARGS
// twice.
const detachFunc = `detach() {
	d_ss=$1 d_sf=$2
	shift 2
	if [ "$d_sf" = 1 ]; then
		"$d_ss" -f "$@" && return 0
		nof=" nof"
	fi
	"$d_ss" "$d_ss" "$@"
}
`

// launchFunc is corral_launch BASE ID WD SI TAG SH SPEC SWEEP MAX STEPS
// SF KIND. Output: one line "ok CPID CSTART WPID WSTART" (plus " nof" when
// SF asked for setsid -f and the sandbox's setsid refused it), or an error
// word; then a report as pollFunc prints it (state, log size, the first
// MAX log bytes), so that a short command costs one round trip in all.
//
// BASE/ID is, fastest first: an armed spare (KIND=armed: the previous
// start asked a resident shell to arm it, see armFunc) whose processes are
// alive, which only needs its spec and the word go; or nothing, and then
// the directory is made here. BASE is 0700 and ours, so an existing
// directory there is one of ours. Then the parent is started (see
// parentBody) and, for up to the sleeps in STEPS, the end is waited for.
//
// The command line, directory and environment go into the file spec (see
// specFile), read only by the command's own shell just before it execs:
// they never appear in the argv of the long-lived wrapper and parent, so
// `ps` shows no secrets and a process scan for a word of the command never
// matches (and kills) the machinery.
//
// Every fork counts here (each costs a millisecond or more in a loaded
// sandbox): existence checks and the PATH search for setsid are builtins,
// directories are made only when missing, and the end is first looked for
// in a short builtin-only spin.
const launchFunc = `corral_launch() {
	set -f
	unset CDPATH
	base=$1 id=$2 wd=$3 si=$4 tag=$5 sh=$6 spec=$7 sweep=$8 max=$9
	shift 9
	steps=$1 sf=$2 kind=$3
	if [ -n "$wd" ] && ! [ -d "$wd" ]; then echo nodir; exit 0; fi
	findsetsid || { echo nosetsid; exit 0; }
	[ -x "$sh" ] || { echo noshell; exit 0; }
	d=$base/$id nof= r=
	if [ "$kind" = armed ]; then
		# The previous start asked for BASE/ID to be armed, and a
		# resident shell may be at it right now: whoever makes the
		# directory owns it (mkdir is atomic). If the armer does, wait
		# for the armed file, or for its failure.
		if ! [ -s "$d/armed" ] && ! [ -d "$d" ] && mkdir -m 700 "$d" 2>/dev/null; then
			kind=
		else
			corral_armwait "$d"
			[ -s "$d/armed" ] && read -r r <"$d/armed"
			set -- $r
			# All three must be there: the parent, too, stopped, or
			# nobody keeps the command's zombie for its exit status.
			a_p= a_pst=
			if [ $# -eq 5 ] && pstat "$2" && [ "$p_start" = "$3" ] && [ "$p_state" != Z ] && pstat "$4" && [ "$p_start" = "$5" ] && [ "$p_state" != Z ] &&
				read -r a_p a_pst <"$d/parent" && pstat "$a_p" && [ "$p_start" = "$a_pst" ] && [ "$p_state" = T ]; then
				r="ok $2 $3 $4 $5"
			else
				# Failed, dead or stuck: clear it and start afresh.
				corral_rmspare "$d"
				r=
			fi
		fi
	fi
	if [ -z "$r" ] && ! [ -d "$d" ]; then
		[ -d "$base" ] || mkdir -p -m 700 "$base" 2>/dev/null
		mkdir -m 700 "$d" 2>/dev/null
		[ -d "$d" ] || { echo nostate; exit 0; }
	fi
	if [ "$sweep" -gt 0 ]; then
		find "$base" -mindepth 2 -maxdepth 2 -name exit -mmin +"$sweep" 2>/dev/null | while IFS= read -r f; do
			x=${f%/exit}
			[ "$x" = "$base/${x##*/}" ] || continue
			case ${x##*/} in *[!0-9a-f]*) ;; ????????????????????????????????) rm -rf "$x" ;; esac
		done
		# Spares of engines that ended without using them.
		find "$base" -mindepth 2 -maxdepth 2 -name armed -mmin +"$sweep" 2>/dev/null | while IFS= read -r f; do
			x=${f%/armed}
			[ "$x" = "$base/${x##*/}" ] && [ "$x" != "$d" ] && corral_rmspare "$x"
		done
		find "$base" -mindepth 1 -maxdepth 1 -type d -empty -mmin +"$sweep" -exec rmdir {} + 2>/dev/null
	fi
	printf '%s' "$spec" >"$d/spec" || { echo nostate; exit 0; }
	if [ -n "$r" ]; then
		# Armed: the wrapper starts the stdin holder, then lets the
		# command go.
		echo "go $si" 1<>"$d/go"
		echo "$r"
	else
		if [ "$si" = 1 ]; then mkfifo "$d/in" || { echo nofifo; exit 0; }; fi
		: >"$d/log"
		r=$(detach "$ss" "$sf" "$sh" -c "$corral_parent" corral-parent "$d" "$sh" "$ss" now "$si" </dev/null 2>>"$d/wrapper.err")
		case $r in "ok "*) echo "$r$nof" ;; *) echo "nostart $r"; exit 0 ;; esac
	fi
	set -- $r
	c=$2 cst=$3 w=$4 wst=$5
	# A quick command ends about when the wrapper reports it: look with
	# builtins only for a few milliseconds before paying a fork per
	# sleep. The read builtin takes a system call per byte, so a look at
	# /proc/PID/stat costs ~0.2ms; the spin looks for the cheap sign of
	# an end instead: a zombie (or a reaped process) has no cwd.
	n=0
	while [ -n "$steps" ] && [ -e "/proc/$c/cwd" ] && [ $n -lt 1500 ]; do n=$((n+1)); done
	state "$d" "$w" "$wst" "$c" "$cst"
	for s in $steps; do
		[ "$st" = running ] || break
		sleep "$s" 2>/dev/null || break
		state "$d" "$w" "$wst" "$c" "$cst"
	done
	report "$d" 0 "$max"
	return 0
}
`

// armFunc is corral_arm DIR SH SF: it prepares DIR as an armed spare, the
// next start's directory with its parent, wrapper and command already
// running, each waiting: the parent stopped, the wrapper reading the FIFO
// go, the command (already the leader of its own session) reading the FIFO
// run. A start then only writes spec and "go SI" (see launchFunc): the
// wrapper starts the stdin holder when SI=1 and writes run, and the command
// reads spec and execs Shell -c Command. That takes four execs (setsid and
// the parent's shell, setsid and a shell for the command) and a mkdir off
// the start's path.
//
// A resident shell runs it after the start's reply has gone out (see
// Resident), so nobody waits for it. The word exit on go, instead of go,
// ends an armed spare's processes (see rmSpareFunc). An armed spare lives
// until it is used, its engine's Close removes it, or a sweep finds it
// older than the retention; the processes of a spare whose engine
// vanished without Close wait (asleep, on a FIFO) until then.
const armFunc = `corral_arm() {
	set -f
	unset CDPATH
	d=$1 sh=$2 sf=$3 nof=
	findsetsid || return 0
	# Whoever makes the directory owns it: a start that made it first
	# runs in it, and then there is nothing to arm.
	mkdir -m 700 "$d" 2>/dev/null || return 0
	mkfifo "$d/run" "$d/in" "$d/go" 2>/dev/null && : >"$d/log" &&
		detach "$ss" "$sf" "$sh" -c "$corral_parent" corral-parent "$d" "$sh" "$ss" armed 0 </dev/null >/dev/null 2>>"$d/wrapper.err" ||
		: >"$d/armfail"
	return 0
}
`

// rmSpareFunc defines corral_rmspare DIR, which removes a spare that was
// never used (no spec), telling an armed one's processes to end first, and
// corral_dropspare DIR, which Close uses: the spare may not exist yet (its
// arming comes after the start's reply), so it claims the directory the
// way the armer would (mkdir) and leaves it empty for the sweep, or, when
// the armer has it, waits for the arming to finish and removes the spare.
// corral_armwait DIR is that wait, which the launcher shares: until DIR
// holds armed or armfail, or is gone; a brief spin, then 1ms sleeps, for
// a few seconds at most.
const rmSpareFunc = `corral_rmspare() {
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
`

// parentBody is the parent, run as Shell -c parentBody corral-parent DIR
// SH SETSID MODE SI by a fresh session leader with default signal
// dispositions (see detachFunc). It forks the wrapper (a background
// subshell) and then the command (a foreground subshell), and waits for
// the command. MODE "now" starts the command at once; "armed" prepares an
// armed spare (see armFunc), and SI then comes with the word go.
//
// Only the parent of a process learns from wait() whether it was killed by
// a signal, and every shell folds that into $? = 128+N, so "exit 143" and
// "killed by SIGTERM" look the same to a shell. The kernel shows the real
// wait status of a zombie in /proc/PID/stat field 52, so the wrapper makes
// sure the command stays a zombie until it has looked: it stops the parent
// (SIGSTOP) right after the command started, so the parent cannot reap.
//
// The command's subshell first writes its identity (its own PID comes from
// /proc/self/stat: $$ in a subshell is the parent's) and waits until the
// parent is stopped (the "gate": a brief spin, then 1ms sleeps, so a
// loaded machine still lets the wrapper run), so even an instant exit is
// kept. Then it execs setsid (it is not a group leader, so setsid never
// forks) and, through it, Shell -c Command (now) or Shell -c commandBody
// (armed): the command is the leader of a new session, a child of the
// parent, and has default signal dispositions because nothing on its way
// was started with `&`. The wrapper is a `&` subshell, and so ignores
// SIGINT and SIGQUIT, which it never passes on. Stdin (the FIFO in, kept
// open for writing by a holder the wrapper starts) is opened only after
// the gate: the open waits for the holder.
//
// The wrapper reports "ok CPID CSTART WPID WSTART" on the launcher's pipe
// (now; the parent lets go of that pipe before it forks the command) or in
// the file armed, then watches the command until it is a zombie, reads its
// wait status, writes the exit file and resumes the parent, which reaps
// the command and exits. Any poll does the same as soon as it sees the
// zombie (see stateFunc), so the wrapper's watch is not on the path of exit
// detection: it only guarantees that an exit nobody polls for is recorded
// too. Its sleeps grow from 5ms to 100ms, a fork every 100ms per
// long-running process: the trade-off between idle cost and how soon an
// unwatched exit file appears. When a poll has finished first (the exit
// file exists), the wrapper only resumes the parent and ends. The wrapper,
// too, spins a little before it sleeps while it waits for the command's
// pid: a sleep is a fork and at least a millisecond.
//
// Every file is written with one echo, not tmp+mv (a mv is one more fork
// on the way): nobody reads parent, holder, wrapper and armed before the
// wrapper reports, the wrapper takes pid only once it holds both fields,
// and for exit see stateFunc.
var parentBody = pstatFunc + wstatusFunc + "C=" + shellquote.Quote(commandBody) + "\n" + `d=$1 sh=$2 ss=$3 mode=$4 si=$5
set -f
p=$$
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
		if [ $n -gt 5000 ] || ! [ -d "/proc/$p" ]; then echo "nocommand"; exit 1; fi
		if [ $n -gt 1000 ]; then nap; fi
	done
	kill -STOP "$p"
	# Start returns only once the parent is really stopped: a signal the
	# supervisor sends right after must find the command's death kept.
	n=0
	while pstat "$p" && [ "$p_state" != T ] && [ $n -lt 5000 ]; do
		n=$((n+1))
		if [ $n -gt 50 ]; then nap; fi
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
			*) wstatus "$p_wstatus" ;;
			esac
			break
		fi
		sleep $iv
		case $iv in 0.005) iv=0.01 ;; 0.01) iv=0.02 ;; 0.02) iv=0.05 ;; 0.05) iv=0.1 ;; esac
	done
	# Rewritten in place, never truncated: whoever else writes it
	# writes the same bytes, so nobody ever finds it shorter again.
	case $st in
	lost) [ -f "$d/exit" ] || echo lost >"$d/exit" ;;
	?*) { [ -f "$d/exit" ] && read -r ex <"$d/exit"; } || echo "$st" 1<>"$d/exit" ;;
	esac
	kill -CONT "$p" 2>/dev/null
	# The stdin holder has nobody left to hold the FIFO for.
	if [ -n "$h" ]; then kill "$h" 2>/dev/null; fi
) </dev/null &
exec >/dev/null
(
	s=; read -r s </proc/self/stat
	c=${s%% *}
	set -- ${s##*) }
	# Armed: run is open (see the wrapper) before pid says we are here.
	if [ "$mode" = armed ]; then exec 4<"$d/run" || exit 125; fi
	echo "$c ${20}" >"$d/pid" || exit 125
	# The gate: the wrapper writes parent once the parent is stopped.
	n=0
	while ! [ -f "$d/parent" ] && [ -d "/proc/$p" ] && [ $n -lt 6000 ]; do
		n=$((n+1))
		if [ $n -gt 1000 ]; then sleep 0.001 2>/dev/null || sleep 1; fi
	done
	if [ "$mode" = armed ]; then exec "$ss" "$sh" -c "$C" corral-command "$d" "$sh"; fi
	. "$d/spec" || exit 125
	if [ "$si" = 1 ]; then exec <"$d/in"; fi
	if [ -n "$wd" ]; then cd "$wd" || exit 126; fi
	if [ $# -eq 0 ]; then export CORRAL_TREE="$tag"; exec "$ss" "$sh" -c "$cmd"; fi
	exec env "$@" "CORRAL_TREE=$tag" "$ss" "$sh" -c "$cmd"
) </dev/null >>"$d/log" 2>&1
`

// commandBody is the armed command: a session leader that waits for the
// word run on fd 4 (the FIFO run, whose only writer is the wrapper),
// then runs Shell -c
// Command as the now-mode command does. Run as Shell -c commandBody
// corral-command DIR SH.
const commandBody = `d=$1 sh=$2
r=
read -r r <&4
exec 4<&-
# EOF: the wrapper died or ended the spare. Resume the parent so that it
# reaps this process and ends too.
[ "$r" = run ] || { kill -CONT "$PPID" 2>/dev/null; exit 125; }
. "$d/spec" || exit 125
if [ "$si" = 1 ]; then exec <"$d/in"; fi
if [ -n "$wd" ]; then cd "$wd" || exit 126; fi
if [ $# -eq 0 ]; then export CORRAL_TREE="$tag"; exec "$sh" -c "$cmd"; fi
exec env "$@" "CORRAL_TREE=$tag" "$sh" -c "$cmd"
`

// stateFunc defines state DIR WPID WSTART CPID CSTART: it sets st to the
// exit file's content, or "running" while the wrapper lives (a zombie wrapper,
// kept by a stopped parent, is dead), or "lost"
// when the wrapper is gone without an exit file, or "gone" when DIR does
// not exist. It is a function setting a variable, not a command
// substitution, so that polling it forks nothing.
//
// When the command (CPID, identified by CSTART) is a zombie, state
// finishes it as the wrapper would: it reads the wait status from /proc,
// writes exit and resumes the stopped parent. That takes the wrapper's
// watch interval out of exit detection. Only a zombie read while its
// parent is still stopped counts (the parent is looked at after the
// zombie): once resumed, the parent reaps it, and a process being reaped
// shows state X and a wait status of 0. The parent is resumed only after
// exit was written, so then exit is there to be read instead.
//
// exit is written in place (one short write; a tmp file and mv would cost
// a fork) and opened with <>, never truncated, before the parent is
// resumed; the wrapper, too, resumes the parent only once exit holds a
// whole line. So while anyone may find it empty (being written), they then
// also find the zombie still there and derive the same line from it;
// everyone who writes it writes that same line, over the same bytes, so a
// complete exit never looks shorter again; and a wrapper that finds the
// command reaped also finds exit complete and does not call it lost.
//
// The exit file is read before the wrapper is looked at, and again after,
// because the wrapper writes it just before it ends. A line without its
// newline is one being written and counts as none (read fails on it).
const stateFunc = `resume() {
	r_p= r_pst=
	[ -f "$1/parent" ] && read -r r_p r_pst <"$1/parent"
	[ -n "$r_pst" ] && pstat "$r_p" && [ "$p_start" = "$r_pst" ] && [ "$p_state" = T ] && kill -CONT "$r_p" 2>/dev/null
}
state() {
	st=
	if ! [ -d "$1" ]; then st=gone; return; fi
	{ [ -f "$1/exit" ] && read -r st <"$1/exit"; } || st=
	if [ -n "$st" ]; then return; fi
	if pstat "$4" && [ "$p_start" = "$5" ] && [ "$p_state" = Z ]; then
		case $p_wstatus in
		''|*[!0-9]*) ;;
		*)
			s_w=$p_wstatus r_p= r_pst=
			[ -f "$1/parent" ] && read -r r_p r_pst <"$1/parent"
			if [ -n "$r_pst" ] && pstat "$r_p" && [ "$p_start" = "$r_pst" ] && [ "$p_state" = T ]; then
				wstatus "$s_w"
				echo "$st" 1<>"$1/exit"
				kill -CONT "$r_p" 2>/dev/null
				return
			fi ;;
		esac
	fi
	# The parent was resumed meanwhile: by whoever wrote exit first.
	{ [ -f "$1/exit" ] && read -r st <"$1/exit"; } || st=
	if [ -n "$st" ]; then return; fi
	if pstat "$2" && [ "$p_start" = "$3" ] && [ "$p_state" != Z ]; then st=running; return; fi
	{ [ -f "$1/exit" ] && read -r st <"$1/exit"; } || st=
	if [ -z "$st" ]; then
		# Lost: resume the stopped parent so it reaps the command.
		resume "$1"
		st=lost
	fi
	return 0
}
`

// reportFunc defines report DIR OFF MAX: it prints st, the log size, and
// at most MAX log bytes from offset OFF. Called right after state, so the
// size is taken after the state: once st says exited, SIZE is final
// (escapees aside) and a reader that reached it is done. An empty log
// costs no fork.
const reportFunc = `logsize() {
	size=0
	if [ -s "$1/log" ]; then size=$(wc -c <"$1/log" 2>/dev/null) || size=0; fi
	size=$((size))
}
report() {
	echo "$st"
	logsize "$1"
	echo "$size"
	if [ "$size" -gt "$2" ] && [ "$3" -gt 0 ]; then tail -c +$(($2+1)) "$1/log" | head -c "$3"; fi
	return 0
}
`

// pollFunc is corral_poll, one long poll of an output reader: it returns as soon as the
// command has ended, or the log has grown past OFF, or after the sleeps in
// STEPS (a list of seconds the Go side computes from Options.LongPoll;
// empty: report at once). Then it reports (see reportFunc): "STATE\nSIZE\n"
// and at most MAX raw bytes from OFF. Waiting inside the sandbox, in small
// steps, detects an exit or new output within one step instead of one
// client poll interval, at one transport round trip per LongPoll when idle.
// A sleep without fractions ends the wait after one second.
const pollFunc = `corral_poll() {
	d=$1 wpid=$2 wst=$3 c=$4 cst=$5 off=$6 max=$7 steps=$8
	set -f
	state "$d" "$wpid" "$wst" "$c" "$cst"
	for s in $steps; do
		[ "$st" = running ] || break
		logsize "$d"
		[ "$size" -gt "$off" ] && break
		sleep "$s" 2>/dev/null || { sleep 1; state "$d" "$wpid" "$wst" "$c" "$cst"; break; }
		state "$d" "$wpid" "$wst" "$c" "$cst"
	done
	report "$d" "$off" "$max"
}
`

// waitFunc is corral_wait: pollFunc for Wait: it waits for the end of the command only
// and prints the state.
const waitFunc = `corral_wait() {
	d=$1 wpid=$2 wst=$3 c=$4 cst=$5 steps=$6
	set -f
	state "$d" "$wpid" "$wst" "$c" "$cst"
	for s in $steps; do
		[ "$st" = running ] || break
		sleep "$s" 2>/dev/null || { sleep 1; state "$d" "$wpid" "$wst" "$c" "$cst"; break; }
		state "$d" "$wpid" "$wst" "$c" "$cst"
	done
	echo "$st"
}
`

// treeFunc defines tree CPID CSTART TAG: it prints the PIDs of the live
// (non-zombie) processes of the tree: members of the command's process
// group while the command itself still runs (its PID then names the group
// for sure), and every process whose environment holds CORRAL_TREE=TAG
// (setsid and double-fork escapees, which keep the inherited variable).
const treeFunc = `tree() {
	t_alive=
	if pstat "$1" && [ "$p_start" = "$2" ] && [ "$p_state" != Z ]; then t_alive=1; fi
	{
		if [ -n "$t_alive" ]; then
			for f in /proc/[0-9]*/stat; do
				q=${f#/proc/}; q=${q%/stat}
				pstat "$q" && [ "$p_pgrp" = "$1" ] && echo "$q"
			done
		fi
		grep -l -s -F -z -x "CORRAL_TREE=$3" /proc/[0-9]*/environ 2>/dev/null | while IFS=/ read -r _ _ q _; do echo "$q"; done
	} | sort -u | while read -r q; do
		pstat "$q" && [ "$p_state" != Z ] && echo "$q"
	done
}
`

// signalFunc (corral_signal) signals the whole tree. The group is signalled only after the
// identity check and only while the command runs (its PID then still names
// the group); escapees are found by their tag. First output line: "exited"
// when the command has ended (exit file written, or a zombie awaiting it;
// the rest of the tree is signalled all the same), "sent" otherwise.
const signalFunc = `corral_signal() {
	d=$1 c=$2 cst=$3 tag=$4 sig=$5
	if ! [ -f "$d/exit" ] && pstat "$c" && [ "$p_start" = "$cst" ] && [ "$p_state" != Z ]; then
		echo sent
		kill -"$sig" "-$c" 2>/dev/null
	else
		echo exited
	fi
	for q in $(tree "$c" "$cst" "$tag"); do kill -"$sig" "$q" 2>/dev/null; done
	return 0
}
`

// survivorsFunc (corral_survivors) prints the live PIDs of the tree, one a line.
const survivorsFunc = `corral_survivors() {
	tree "$2" "$3" "$4"
	return 0
}
`

// writeBody copies its stdin into the stdin FIFO. The FIFO is opened
// read-write so the open never blocks, even when nobody reads it any more.
const writeBody = `d=$1
if [ -f "$d/exit" ]; then echo exited; exit 0; fi
if [ -f "$d/stdin-closed" ] || ! [ -p "$d/in" ]; then echo closed; exit 0; fi
cat 1<>"$d/in" && echo ok
`

// closeStdinFunc (corral_closestdin) ends the holder that keeps the FIFO's write end open, so
// the command reads EOF once the FIFO is drained.
const closeStdinFunc = `corral_closestdin() {
	d=$1
	: >"$d/stdin-closed"
	if [ -f "$d/holder" ]; then
		read -r h hst <"$d/holder"
		if pstat "$h" && [ "$p_start" = "$hst" ]; then kill "$h" 2>/dev/null; fi
	fi
	echo ok
}
`

// removeFunc (corral_remove) deletes the state directory unless the process still runs.
// A wrapper that is just ending may still write exit while rm runs (a poll
// had finished the command first), so rm gets a second try.
const removeFunc = `corral_remove() {
	d=$1
	state "$d" "$2" "$3" "$4" "$5"
	case $st in running) echo running; return 0 ;; esac
	{ rm -rf "$d" 2>/dev/null || rm -rf "$d"; } && echo ok
}
`

// uidFunc prints the sandbox user's ID, for the default BaseDir.
const uidFunc = `corral_uid() { id -u; }
`

// lib is every function the engine calls, plus the parent's script in
// corral_parent. A call is one line naming a function with quoted
// arguments (see call); a LibTransport loads lib once per shell it keeps,
// other transports get lib and call in one script.
var lib = pstatFunc + wstatusFunc + stateFunc + reportFunc + treeFunc + findSetsidFunc + detachFunc + launchFunc + armFunc +
	rmSpareFunc + pollFunc + waitFunc + signalFunc + survivorsFunc + closeStdinFunc + removeFunc + uidFunc +
	"corral_parent=" + shellquote.Quote(parentBody) + "\n"

// call returns the line that runs fn with args, every arg single-quoted.
func call(fn string, args ...string) string {
	var b strings.Builder
	b.WriteString(fn)
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(shellquote.Quote(a))
	}
	b.WriteString("\n")
	return b.String()
}

func itoa(n int) string { return strconv.Itoa(n) }

// specFile is the sh snippet the command's shell sources: it sets cmd and
// the positional parameters (KEY=VALUE words for env(1)). Every value is
// quoted; names were checked by env.Spec.Validate.
func specFile(command, dir, si, tag string, environ []string) string {
	var b strings.Builder
	b.WriteString("wd=")
	b.WriteString(shellquote.Quote(dir))
	b.WriteString(" si=")
	b.WriteString(shellquote.Quote(si))
	b.WriteString(" tag=")
	b.WriteString(shellquote.Quote(tag))
	b.WriteString("\ncmd=")
	b.WriteString(shellquote.Quote(command))
	b.WriteString("\nset --")
	for _, kv := range environ {
		b.WriteByte(' ')
		b.WriteString(shellquote.Quote(kv))
	}
	b.WriteString("\n")
	return b.String()
}
