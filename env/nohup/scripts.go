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

// launchBody creates the state directory and starts the wrapper. Output,
// one line: "ok CPID CSTART WPID WSTART" or an error word.
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
const launchBody = `set -f
umask 077
unset CDPATH
base=$1 id=$2 wd=$3 si=$4 tag=$5 sh=$6 spec=$7 sweep=$8 W=$9
if [ -n "$wd" ] && ! [ -d "$wd" ]; then echo nodir; exit 0; fi
command -v setsid >/dev/null 2>&1 || { echo nosetsid; exit 0; }
[ -x "$sh" ] || { echo noshell; exit 0; }
mkdir -p "$base" 2>/dev/null
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
case $r in "ok "*) echo "$r" ;; *) echo "nostart $r" ;; esac
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
// After reading the status the wrapper resumes the parent, which reaps the
// command and exits.
const wrapperBody = pstatFunc + `set -f
d=$1 wd=$2 si=$3 tag=$4 sh=$5
P='echo "$$"; exec >/dev/null; src=$1 d=$2 tag=$3 sh=$4 wd=$5 G=$6
(exec setsid "$sh" -c "$G" corral "$sh" "$wd" "$d" "$tag" <"$src" >>"$d/log" 2>&1)
exit $?'
G='sh=$1 wd=$2 d=$3 tag=$4
s=; read -r s </proc/$$/stat; set -- ${s##*) }
echo "$$ ${20}" >"$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid" || exit 125
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
exec env "$@" "CORRAL_TREE=$tag" "$sh" -c "$cmd"'
if sleep 0.001 2>/dev/null; then iv=0.002; else iv=1; fi
src=/dev/null h=
if [ "$si" = 1 ]; then
	src=$d/in
	sleep 2147483647 >"$d/in" </dev/null 2>/dev/null &
	h=$!
	pstat "$h" && echo "$h $p_start" >"$d/holder.tmp" && mv "$d/holder.tmp" "$d/holder"
fi
p=$(setsid setsid "$sh" -c "$P" corral-parent "$src" "$d" "$tag" "$sh" "$wd" "$G" </dev/null)
case $p in ''|*[!0-9]*) echo "noparent"; exit 1 ;; esac
pstat "$p"; pst=$p_start
n=0
while ! [ -f "$d/pid" ]; do
	n=$((n+1))
	if [ $n -gt 5000 ] || ! pstat "$p" || [ "$p_start" != "$pst" ]; then echo "nocommand"; exit 1; fi
	sleep $iv
done
kill -STOP "$p"
# Start returns only once the parent is really stopped: a signal the
# supervisor sends right after must find the command's death kept.
n=0
while pstat "$p" && [ "$p_state" != T ] && [ $n -lt 5000 ]; do n=$((n+1)); sleep $iv; done
echo "$p $pst" >"$d/parent.tmp" && mv "$d/parent.tmp" "$d/parent"
read -r c cst <"$d/pid"
pstat $$
echo "$$ $p_start" >"$d/wrapper.tmp" && mv "$d/wrapper.tmp" "$d/wrapper"
echo "ok $c $cst $$ $p_start"
exec >/dev/null
if [ "$iv" != 1 ]; then iv=0.005; fi
while :; do
	if ! pstat "$c" || [ "$p_start" != "$cst" ]; then st=lost; break; fi
	if [ "$p_state" = Z ] || [ "$p_state" = X ]; then
		case $p_wstatus in
		''|*[!0-9]*) st=lost ;;
		*) if [ $((p_wstatus & 127)) -ne 0 ]; then st="signal $((p_wstatus & 127))"; else st="code $(((p_wstatus >> 8) & 255))"; fi ;;
		esac
		break
	fi
	sleep $iv
	case $iv in 0.005) iv=0.01 ;; 0.01) iv=0.02 ;; 0.02) iv=0.05 ;; 0.05) iv=0.1 ;; 0.1) iv=0.2 ;; esac
done
echo "$st" >"$d/exit.tmp" && mv "$d/exit.tmp" "$d/exit"
kill -CONT "$p" 2>/dev/null
# The stdin holder has nobody left to hold the FIFO for.
if [ -n "$h" ]; then kill "$h" 2>/dev/null; fi
`

// stateFunc defines state DIR WPID WSTART: it prints the exit file's
// content, or "running" while the wrapper lives, or "lost" when the
// wrapper is gone without an exit file, or "gone" when DIR does not exist.
// The exit file is read before the wrapper is looked at, and again after,
// because the wrapper writes it just before it ends.
const stateFunc = pstatFunc + `state() {
	if ! [ -d "$1" ]; then echo gone; return; fi
	e=; [ -f "$1/exit" ] && read -r e <"$1/exit"
	if [ -n "$e" ]; then echo "$e"; return; fi
	if pstat "$2" && [ "$p_start" = "$3" ]; then echo running; return; fi
	[ -f "$1/exit" ] && read -r e <"$1/exit"
	if [ -z "$e" ] && [ -f "$1/parent" ]; then
		# Lost: resume the stopped parent so it reaps the command.
		read -r e_p e_pst <"$1/parent"
		pstat "$e_p" && [ "$p_start" = "$e_pst" ] && [ "$p_state" = T ] && kill -CONT "$e_p" 2>/dev/null
	fi
	echo "${e:-lost}"
}
`

// pollBody reports the state and the log size, then sends at most MAX log
// bytes from offset OFF. Output: "STATE\nSIZE\n" then the raw bytes. The
// state is taken before the size, so once it says exited, SIZE is final
// (escapees aside) and a reader that reached it is done.
const pollBody = stateFunc + `d=$1 wpid=$2 wst=$3 off=$4 max=$5
state "$d" "$wpid" "$wst"
size=$(wc -c <"$d/log" 2>/dev/null) || size=0
echo $size
if [ "$size" -gt "$off" ]; then tail -c +$((off+1)) "$d/log" | head -c "$max"; fi
`

// statusBody prints the state only (Wait, Attach, Remove).
const statusBody = stateFunc + `state "$1" "$2" "$3"
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
const removeBody = stateFunc + `d=$1
case $(state "$d" "$2" "$3") in running) echo running; exit 0 ;; esac
rm -rf "$d" && echo ok
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
