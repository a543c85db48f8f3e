# shellcheck shell=sh
# The calls on a running process: poll, wait, signal, survivors, close
# stdin, remove, and the sandbox user's ID.

# corral_poll DIR WPID WSTART CPID CSTART OFF MAX STEPS HEAD TAIL is one
# long poll of an output reader: it returns as soon as the command has
# ended, or the log has grown past OFF, or after the sleeps in STEPS (a list
# of seconds the Go side computes from Options.LongPoll; empty: report at
# once). Then it reports (see report in state.sh): "STATE\nSIZE\n" and at
# most MAX raw bytes from OFF. The reader has everything before OFF:
# logtrim (HEAD, TAIL) first drops what it may of that. Waiting inside the sandbox, in small steps, detects an
# exit or new output within one step instead of one client poll interval,
# at one transport round trip per LongPoll when idle. A sleep without
# fractions ends the wait after one second.
corral_poll() {
	d=$1 wpid=$2 wst=$3 c=$4 cst=$5 off=$6 max=$7 steps=$8
	set -f
	logtrim "$d" "$off" "$9" "${10}"
	state "$d" "$wpid" "$wst" "$c" "$cst"
	for s in $steps; do
		# shellcheck disable=SC2154 # st is set by state (state.sh)
		[ "$st" = running ] || break
		logsize "$d"
		# shellcheck disable=SC2154 # size is set by logsize (state.sh)
		[ "$size" -gt "$off" ] && break
		sleep "$s" 2>/dev/null || { sleep 1; state "$d" "$wpid" "$wst" "$c" "$cst"; break; }
		state "$d" "$wpid" "$wst" "$c" "$cst"
	done
	report "$d" "$off" "$max"
}

# corral_wait DIR WPID WSTART CPID CSTART STEPS is corral_poll for Wait: it
# waits for the end of the command only and prints the state.
corral_wait() {
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

# corral_states [DIR WPID WSTART CPID CSTART]... prints the state of each
# process, a line each, in order: corral_wait without steps for many
# processes in one call (concurrent Attach calls share one, see
# attach.go).
corral_states() {
	set -f
	while [ $# -ge 5 ]; do
		state "$1" "$2" "$3" "$4" "$5"
		echo "$st"
		shift 5
	done
}

# corral_signal DIR CPID CSTART TAG SIG signals the whole tree. The group is
# signalled only after the identity check and only while the command runs
# (its PID then still names the group); escapees are found by their tag.
# First output line: "exited" when the command has ended (exit file
# written, or a zombie awaiting it; the rest of the tree is signalled all
# the same), "sent" otherwise.
corral_signal() {
	d=$1 c=$2 cst=$3 tag=$4 sig=$5
	# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh)
	if ! [ -f "$d/exit" ] && pstat "$c" && [ "$p_start" = "$cst" ] && [ "$p_state" != Z ]; then
		echo sent
		kill -"$sig" "-$c" 2>/dev/null
	else
		echo exited
	fi
	for q in $(tree "$c" "$cst" "$tag" "$d"); do kill -"$sig" "$q" 2>/dev/null; done
	return 0
}

# corral_survivors DIR CPID CSTART TAG prints the live PIDs of the tree, one
# a line; once none is left of an ended tree, its limit cgroups go.
corral_survivors() {
	s_t=$(tree "$2" "$3" "$4" "$1")
	if [ -n "$s_t" ]; then echo "$s_t"; elif [ -f "$1/exit" ]; then cgdrop "$1"; fi
	return 0
}

# corral_closestdin DIR ends the holder that keeps the FIFO's write end
# open, so the command reads EOF once the FIFO is drained.
corral_closestdin() {
	d=$1
	: >"$d/stdin-closed"
	if [ -f "$d/holder" ]; then
		read -r h hst <"$d/holder"
		if pstat "$h" && [ "$p_start" = "$hst" ]; then kill "$h" 2>/dev/null; fi
	fi
	echo ok
}

# corral_remove DIR WPID WSTART CPID CSTART deletes the state directory
# unless the process still runs. A wrapper that is just ending may still
# write exit while rm runs (a poll had finished the command first), so rm
# gets a second try.
corral_remove() {
	d=$1
	state "$d" "$2" "$3" "$4" "$5"
	case $st in running) echo running; return 0 ;; esac
	cgdrop "$d"
	{ rm -rf "$d" 2>/dev/null || rm -rf "$d"; } && echo ok
}

# corral_uid prints the sandbox user's ID, for the default BaseDir.
corral_uid() { id -u; }

# corral_follow DIR WPID WSTART CPID CSTART OFF DATA BUDGET ID IDLE follows a
# running process on one stream, so that output and the exit reach the
# reader as they happen rather than one round trip per chunk. It prints
# frames: "D N" and then exactly N log bytes from OFF on (DATA=1 only; the
# log only grows, so N bytes are there to read; "X" at once where dd cannot
# count in bytes: the reader polls instead), "E STATE" once the command
# has ended and the log was sent up to the size seen after its exit, and
# "T" after BUDGET ms without output (the reader opens another follow, so
# that an idle follower gives its transport session back now and then and
# one whose reader vanished does not loop forever). Between looks it
# sleeps 5 ms, growing by half per idle look to 20 ms, then 50 ms after 1 s
# of quiet, 200 ms after 5 s and 500 ms after 30 s (IDLE, the last
# argument, is the quiet time before this follow, counted by the reader
# across follows): an exit is seen within one step, at two forks (sleep,
# wc) per look, so twenty idle servers cost about eighty forks a second
# instead of thousands. A sleep without fractions falls back to 1 s.
# After a frame of less than 64 KiB it waits 5 ms, so that a command that
# prints a line at a time costs a frame per 5 ms, not a busy loop.
#
# ID names the follow for corral_unfollow: the shell records its PID in
# DIR/follow-ID and exports CORRAL_FOLLOW=ID to its children, and removes
# the file when it ends by itself.
#
# HEAD and TAIL (the last two arguments) bound the log on disk: once a
# frame was sent, logtrim (state.sh) drops what it may of what was sent.
corral_follow() {
	d=$1 wpid=$2 wst=$3 c=$4 cst=$5 off=$6 data=$7 budget=$8 f_id=$9
	shift 9
	idle=$1 f_lh=$2 f_lt=$3 spent=0
	set -f
	CORRAL_FOLLOW=$f_id
	export CORRAL_FOLLOW
	# shellcheck disable=SC2154 # p_start is set by pstat (proc.sh)
	pstat $$ && echo "$$ $p_start" >"$d/follow-$f_id" 2>/dev/null
	ms=5 f_whole=
	f_capfor
	[ "$idle" -lt 1000 ] || ms=$f_cap
	if [ "$data" = 1 ] && ! dd if=/dev/null iflag=skip_bytes,count_bytes count=0 2>/dev/null; then
		echo X
		rm -f "$d/follow-$f_id"
		return 0
	fi
	while :; do
		state "$d" "$wpid" "$wst" "$c" "$cst"
		f_n=0
		if [ "$data" = 1 ] && [ "$st" != gone ]; then
			logsize "$d"
			f_n=$((size - off))
			# A header and its bytes come from one subshell that execs dd:
			# a fork that fails (the pids limit reached) sends neither,
			# never a header without its bytes, and is tried again.
			if [ "$f_n" -gt 0 ] && (
				echo "D $f_n"
				exec dd if="$d/log" iflag=skip_bytes,count_bytes skip="$off" count="$f_n" bs=65536 2>/dev/null
			); then
				off=$size ms=5 idle=0 spent=0
				logtrim "$d" "$off" "$f_lh" "$f_lt"
				[ "$st" = running ] || { echo "E $st"; rm -f "$d/follow-$f_id"; return 0; }
				[ "$f_n" -lt 65536 ] && { sleep 0.005 2>/dev/null || :; }
				continue
			fi
		fi
		if [ "$st" != running ] && [ "$f_n" -le 0 ]; then echo "E $st"; rm -f "$d/follow-$f_id"; return 0; fi
		if [ "$spent" -ge "$budget" ]; then echo T; rm -f "$d/follow-$f_id"; return 0; fi
		case $ms in ?) s=0.00$ms ;; ??) s=0.0$ms ;; *) s=0.$ms ;; esac
		if [ -n "$f_whole" ] || ! sleep "$s" 2>/dev/null; then f_whole=1 ms=1000; sleep 1; fi
		idle=$((idle + ms)) spent=$((spent + ms))
		if [ "$ms" -lt 1000 ]; then
			ms=$((ms * 3 / 2))
			f_capfor
			[ "$ms" -gt "$f_cap" ] && ms=$f_cap
		fi
	done
}

# f_capfor sets f_cap, the longest sleep of a follow (ms) after idle ms
# without output: looks cost forks, and a process that has been quiet for
# long is most likely a server that will stay so.
f_capfor() {
	if [ "$idle" -lt 1000 ]; then f_cap=20
	elif [ "$idle" -lt 5000 ]; then f_cap=50
	elif [ "$idle" -lt 30000 ]; then f_cap=200
	else f_cap=500; fi
}

# corral_unfollow DIR ID ends the follow ID whose reader went away before it
# ended: a transport may leave the script running when its stream is
# closed (docker keeps an exec running after its client disconnects, and
# one blocked writing to a stream nobody reads blocks for good). The shell
# goes first, so that it forks nothing new; then its children, found by
# the variable they inherited.
corral_unfollow() {
	u_f=$1/follow-$2 u_p='' u_st=''
	[ -f "$u_f" ] && read -r u_p u_st <"$u_f"
	[ -n "$u_st" ] && pstat "$u_p" && [ "$p_start" = "$u_st" ] && kill -9 "$u_p" 2>/dev/null
	grep -l -s -F -z -x "CORRAL_FOLLOW=$2" /proc/[0-9]*/environ 2>/dev/null | while IFS= read -r q; do
		q=${q#/proc/}
		kill -9 "${q%/environ}" 2>/dev/null
	done
	rm -f "$u_f"
	return 0
}
