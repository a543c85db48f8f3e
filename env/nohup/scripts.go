package nohup

import (
	"strconv"
	"strings"
)

// Every script below is a constant. Values reach it only through the
// positional parameters set by a leading `set --` line whose words are all
// produced by quote (see script), so no value is ever parsed as shell code.
// The scripts use only POSIX sh plus setsid, env, sleep, mkfifo, tail, head,
// wc, grep -z and find, and run unchanged under dash, bash and busybox ash.

// script returns body preceded by `set -- args...`, every arg single-quoted.
func script(body string, args ...string) string {
	var b strings.Builder
	b.WriteString("set --")
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(quote(a))
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

// launchBody creates the state directory, starts the wrapper and, for up
// to the sleeps in STEPS, waits for the command to end. Output: one line
// "ok CPID CSTART WPID WSTART" (or an error word), then a report as
// pollBody prints it (state, log size, the first MAX log bytes), so that a
// short command costs one round trip in all.
//
// The command line and the environment go into the file spec (see
// specFile), read only by the command's own shell just before it execs:
// they never appear in the argv of the long-lived wrapper and parent, so
// `ps` shows no secrets and a process scan for a word of the command never
// matches (and kills) the machinery.
//
// `setsid setsid X` is how X is started without `&`: a command started
// with `&` by a shell without job control inherits SIGINT and SIGQUIT
// ignored, and a POSIX shell cannot undo an ignored-on-entry signal, so the
// user's command would ignore Signal(INT). The first setsid makes itself a
// session (and group) leader; the second cannot call setsid() as a group
// leader, so it forks, its parent returns at once (the foreground command
// ends) and the child starts X in a fresh session with default signal
// dispositions.
//
// Every fork counts here (each costs a millisecond or more in a loaded
// sandbox): existence checks are builtins, BaseDir is created only when
// missing, the end is first looked for in a short builtin-only spin, and
// env(1) runs only when Spec.Env is not empty (the gate exports
// CORRAL_TREE itself otherwise).
const launchBody = stateFunc + reportFunc + `set -f
umask 077
unset CDPATH
base=$1 id=$2 wd=$3 si=$4 tag=$5 sh=$6 spec=$7 sweep=$8 W=$9
shift 9
max=$1 steps=$2
if [ -n "$wd" ] && ! [ -d "$wd" ]; then echo nodir; exit 0; fi
command -v setsid >/dev/null 2>&1 || { echo nosetsid; exit 0; }
[ -x "$sh" ] || { echo noshell; exit 0; }
[ -d "$base" ] || mkdir -p "$base" 2>/dev/null
d=$base/$id
mkdir "$d" || { echo nostate; exit 0; }
if [ "$sweep" -gt 0 ]; then
	find "$base" -mindepth 2 -maxdepth 2 -name exit -mmin +"$sweep" 2>/dev/null | while IFS= read -r f; do
		x=${f%/exit}
		[ "$x" = "$base/${x##*/}" ] || continue
		case ${x##*/} in *[!0-9a-f]*) ;; ????????????????????????????????) rm -rf "$x" ;; esac
	done
fi
if [ "$si" = 1 ]; then mkfifo "$d/in" || { echo nofifo; exit 0; }; fi
: >"$d/log"
printf '%s' "$spec" >"$d/spec" || { echo nostate; exit 0; }
r=$(setsid setsid "$sh" -c "$W" corral-wrapper "$d" "$wd" "$si" "$tag" "$sh" </dev/null 2>>"$d/wrapper.err")
case $r in "ok "*) echo "$r" ;; *) echo "nostart $r"; exit 0 ;; esac
set -- $r
c=$2 cst=$3 w=$4 wst=$5
state "$d" "$w" "$wst" "$c" "$cst"
# A quick command ends about when the wrapper reports it: look a few
# times with builtins only before paying a fork per sleep.
n=0
while [ -n "$steps" ] && [ "$st" = running ] && [ $n -lt 100 ]; do
	n=$((n+1))
	state "$d" "$w" "$wst" "$c" "$cst"
done
for s in $steps; do
	[ "$st" = running ] || break
	sleep "$s" 2>/dev/null || break
	state "$d" "$w" "$wst" "$c" "$cst"
done
report "$d" 0 "$max"
`

// wrapperBody is the wrapper: it starts the command, reports its identity,
// watches it until it is a zombie, reads its wait status from /proc and
// writes the exit file.
//
// Only the parent of a process learns from wait() whether it was killed by
// a signal, and every shell folds that into $? = 128+N, so "exit 143" and
// "killed by SIGTERM" look the same to a shell. The kernel shows the real
// wait status of a zombie in /proc/PID/stat field 52, so the wrapper makes
// sure the command stays a zombie until it has looked: the command's parent
// is a small shell (the "parent") that runs it in the foreground (through
// a subshell's exec, so setsid never forks: busybox ash may run applets
// in-process) and that the wrapper stops (SIGSTOP) right after the command
// started, so it cannot reap. The command itself first waits until its
// parent is stopped (the "gate": a brief spin, then 1ms sleeps, so a loaded
// machine still lets the wrapper run), so even an instant exit is kept.
// The wrapper, likewise, spins a little before it sleeps while it waits
// for the command's pid: a sleep is a fork and at least a millisecond.
// After reading the status the wrapper resumes the parent, which reaps the
// command and exits.
//
// Any poll does the same as soon as it sees the zombie (see stateFunc), so
// the wrapper's watch is not on the path of exit detection: it only
// guarantees that an exit nobody polls for is recorded too. Its sleeps grow
// from 5ms to 100ms, a fork every 100ms per long-running process: the
// trade-off between idle cost and how soon an unwatched exit file appears.
// When a poll has finished first (the exit file exists), the wrapper only
// resumes the parent and ends.
//
// Every file is written with one echo, not tmp+mv (a mv is one more fork
// on the way): nobody reads parent, holder and wrapper before the wrapper
// reports "ok", the wrapper takes pid only once it holds both fields, and
// for exit see stateFunc.
const wrapperBody = pstatFunc + `set -f
d=$1 wd=$2 si=$3 tag=$4 sh=$5
P='echo "$$"; exec >/dev/null; src=$1 d=$2 tag=$3 sh=$4 wd=$5 G=$6
(exec setsid "$sh" -c "$G" corral "$sh" "$wd" "$d" "$tag" <"$src" >>"$d/log" 2>&1)
exit $?'
G='sh=$1 wd=$2 d=$3 tag=$4
s=; read -r s </proc/$$/stat; set -- ${s##*) }
echo "$$ ${20}" >"$d/pid" || exit 125
n=0
while [ $n -lt 5000 ]; do
	s=; read -r s 2>/dev/null </proc/$PPID/stat || [ -n "$s" ] || break
	set -- ${s##*) }
	[ "$1" = T ] && break
	n=$((n+1))
	if [ $n -gt 200 ]; then sleep 0.001 2>/dev/null || sleep 1; fi
done
if [ -n "$wd" ]; then cd "$wd" || exit 126; fi
. "$d/spec" || exit 125
if [ $# -eq 0 ]; then export CORRAL_TREE="$tag"; exec "$sh" -c "$cmd"; fi
exec env "$@" "CORRAL_TREE=$tag" "$sh" -c "$cmd"'
iv=0.001
nap() { sleep $iv 2>/dev/null || { iv=1; sleep 1; }; }
src=/dev/null h=
if [ "$si" = 1 ]; then
	src=$d/in
	sleep 2147483647 >"$d/in" </dev/null 2>/dev/null &
	h=$!
	pstat "$h" && echo "$h $p_start" >"$d/holder"
fi
p=$(setsid setsid "$sh" -c "$P" corral-parent "$src" "$d" "$tag" "$sh" "$wd" "$G" </dev/null)
case $p in ''|*[!0-9]*) echo "noparent"; exit 1 ;; esac
pstat "$p"; pst=$p_start
n=0 c= cst=
while :; do
	[ -f "$d/pid" ] && read -r c cst <"$d/pid"
	[ -n "$cst" ] && break
	n=$((n+1))
	if [ $n -gt 5000 ] || ! pstat "$p" || [ "$p_start" != "$pst" ]; then echo "nocommand"; exit 1; fi
	if [ $n -gt 300 ]; then nap; fi
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
pstat $$
echo "$$ $p_start" >"$d/wrapper"
echo "ok $c $cst $$ $p_start"
exec >/dev/null
if [ "$iv" != 1 ]; then iv=0.005; fi
st=
while ! [ -f "$d/exit" ]; do
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
		*) if [ $((p_wstatus & 127)) -ne 0 ]; then st="signal $((p_wstatus & 127))"; else st="code $(((p_wstatus >> 8) & 255))"; fi ;;
		esac
		break
	fi
	sleep $iv
	case $iv in 0.005) iv=0.01 ;; 0.01) iv=0.02 ;; 0.02) iv=0.05 ;; 0.05) iv=0.1 ;; esac
done
if [ -n "$st" ] && ! [ -f "$d/exit" ]; then echo "$st" >"$d/exit"; fi
kill -CONT "$p" 2>/dev/null
# The stdin holder has nobody left to hold the FIFO for.
if [ -n "$h" ]; then kill "$h" 2>/dev/null; fi
`

// stateFunc defines state DIR WPID WSTART CPID CSTART: it sets st to the
// exit file's content, or "running" while the wrapper lives, or "lost"
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
// a fork), before the parent is resumed. So while anyone may find it empty
// (being written), they then also find the zombie still there and derive
// the same line from it; everyone who writes it writes that same line; and
// a wrapper that finds the command reaped also finds exit complete and
// does not call it lost.
//
// The exit file is read before the wrapper is looked at, and again after,
// because the wrapper writes it just before it ends.
const stateFunc = pstatFunc + `resume() {
	r_p= r_pst=
	[ -f "$1/parent" ] && read -r r_p r_pst <"$1/parent"
	[ -n "$r_pst" ] && pstat "$r_p" && [ "$p_start" = "$r_pst" ] && [ "$p_state" = T ] && kill -CONT "$r_p" 2>/dev/null
}
state() {
	st=
	if ! [ -d "$1" ]; then st=gone; return; fi
	[ -f "$1/exit" ] && read -r st <"$1/exit"
	if [ -n "$st" ]; then return; fi
	if pstat "$4" && [ "$p_start" = "$5" ] && [ "$p_state" = Z ]; then
		case $p_wstatus in
		''|*[!0-9]*) ;;
		*)
			s_w=$p_wstatus r_p= r_pst=
			[ -f "$1/parent" ] && read -r r_p r_pst <"$1/parent"
			if [ -n "$r_pst" ] && pstat "$r_p" && [ "$p_start" = "$r_pst" ] && [ "$p_state" = T ]; then
				if [ $((s_w & 127)) -ne 0 ]; then st="signal $((s_w & 127))"; else st="code $(((s_w >> 8) & 255))"; fi
				echo "$st" >"$1/exit"
				kill -CONT "$r_p" 2>/dev/null
				return
			fi ;;
		esac
	fi
	# The parent was resumed meanwhile: by whoever wrote exit first.
	[ -f "$1/exit" ] && read -r st <"$1/exit"
	if [ -n "$st" ]; then return; fi
	if pstat "$2" && [ "$p_start" = "$3" ]; then st=running; return; fi
	[ -f "$1/exit" ] && read -r st <"$1/exit"
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

// pollBody is one long poll of an output reader: it returns as soon as the
// command has ended, or the log has grown past OFF, or after the sleeps in
// STEPS (a list of seconds the Go side computes from Options.LongPoll;
// empty: report at once). Then it reports (see reportFunc): "STATE\nSIZE\n"
// and at most MAX raw bytes from OFF. Waiting inside the sandbox, in small
// steps, detects an exit or new output within one step instead of one
// client poll interval, at one transport round trip per LongPoll when idle.
// A sleep without fractions ends the wait after one second.
const pollBody = stateFunc + reportFunc + `d=$1 wpid=$2 wst=$3 c=$4 cst=$5 off=$6 max=$7 steps=$8
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
`

// waitBody is pollBody for Wait: it waits for the end of the command only
// and prints the state.
const waitBody = stateFunc + `d=$1 wpid=$2 wst=$3 c=$4 cst=$5 steps=$6
set -f
state "$d" "$wpid" "$wst" "$c" "$cst"
for s in $steps; do
	[ "$st" = running ] || break
	sleep "$s" 2>/dev/null || { sleep 1; state "$d" "$wpid" "$wst" "$c" "$cst"; break; }
	state "$d" "$wpid" "$wst" "$c" "$cst"
done
echo "$st"
`

// treeFunc defines tree CPID CSTART TAG: it prints the PIDs of the live
// (non-zombie) processes of the tree: members of the command's process
// group while the command itself still runs (its PID then names the group
// for sure), and every process whose environment holds CORRAL_TREE=TAG
// (setsid and double-fork escapees, which keep the inherited variable).
const treeFunc = pstatFunc + `tree() {
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

// signalBody signals the whole tree. The group is signalled only after the
// identity check and only while the command runs (its PID then still names
// the group); escapees are found by their tag. First output line: "exited"
// when the command has ended (exit file written, or a zombie awaiting it;
// the rest of the tree is signalled all the same), "sent" otherwise.
const signalBody = treeFunc + `d=$1 c=$2 cst=$3 tag=$4 sig=$5
if ! [ -f "$d/exit" ] && pstat "$c" && [ "$p_start" = "$cst" ] && [ "$p_state" != Z ]; then
	echo sent
	kill -"$sig" "-$c" 2>/dev/null
else
	echo exited
fi
for q in $(tree "$c" "$cst" "$tag"); do kill -"$sig" "$q" 2>/dev/null; done
exit 0
`

// survivorsBody prints the live PIDs of the tree, one a line.
const survivorsBody = treeFunc + `tree "$2" "$3" "$4"
exit 0
`

// writeBody copies its stdin into the stdin FIFO. The FIFO is opened
// read-write so the open never blocks, even when nobody reads it any more.
const writeBody = `d=$1
if [ -f "$d/exit" ]; then echo exited; exit 0; fi
if [ -f "$d/stdin-closed" ] || ! [ -p "$d/in" ]; then echo closed; exit 0; fi
cat 1<>"$d/in" && echo ok
`

// closeStdinBody ends the holder that keeps the FIFO's write end open, so
// the command reads EOF once the FIFO is drained.
const closeStdinBody = pstatFunc + `d=$1
: >"$d/stdin-closed"
if [ -f "$d/holder" ]; then
	read -r h hst <"$d/holder"
	if pstat "$h" && [ "$p_start" = "$hst" ]; then kill "$h" 2>/dev/null; fi
fi
echo ok
`

// removeBody deletes the state directory unless the process still runs.
// A wrapper that is just ending may still write exit while rm runs (a poll
// had finished the command first), so rm gets a second try.
const removeBody = stateFunc + `d=$1
state "$d" "$2" "$3" "$4" "$5"
case $st in running) echo running; exit 0 ;; esac
{ rm -rf "$d" 2>/dev/null || rm -rf "$d"; } && echo ok
`

// uidBody prints the sandbox user's ID, for the default BaseDir.
const uidBody = `id -u`

func itoa(n int) string { return strconv.Itoa(n) }

// specFile is the sh snippet the command's shell sources: it sets cmd and
// the positional parameters (KEY=VALUE words for env(1)). Every value is
// quoted; names were checked by env.Spec.Validate.
func specFile(command string, environ []string) string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(quote(command))
	b.WriteString("\nset --")
	for _, kv := range environ {
		b.WriteByte(' ')
		b.WriteString(quote(kv))
	}
	b.WriteString("\n")
	return b.String()
}
