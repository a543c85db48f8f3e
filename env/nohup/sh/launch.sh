# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# Starting a process: corral_launch and what it needs to get a fresh
# session leader going.

# findprog NAME sets fp to the absolute path of NAME from PATH, with
# builtins only (command -v would need a fork to be captured), and
# returns 1 when there is none.
findprog() {
	fp= f_o=$IFS
	IFS=:
	for f_x in $PATH; do
		f_x=${f_x:-.}/$1
		if [ -x "$f_x" ] && ! [ -d "$f_x" ]; then fp=$f_x; break; fi
	done
	IFS=$f_o
	[ -n "$fp" ] || return 1
	case $fp in /*) ;; *) fp=$PWD/$fp ;; esac
}

# findsetsid sets ss to setsid's path (see findprog).
findsetsid() {
	ss=
	findprog setsid && ss=$fp
}

# detach SS SF ARGS... runs ARGS as a fresh session leader without waiting
# for it, with setsid -f (util-linux) when SF=1, else (or when that setsid
# refuses -f) with `setsid setsid` (busybox: the first setsid makes itself
# a group leader, so the second must fork). It sets nof=" nof" when -f was
# refused. Never `&`: a command started with `&` by a shell without job
# control inherits SIGINT and SIGQUIT ignored, and a POSIX shell cannot
# undo an ignored-on-entry signal, so the user's command would ignore
# Signal(INT). A setsid that refuses -f fails before it forks, so the
# fallback never starts ARGS twice.
detach() {
	d_ss=$1 d_sf=$2
	shift 2
	if [ "$d_sf" = 1 ]; then
		"$d_ss" -f "$@" && return 0
		nof=" nof"
	fi
	"$d_ss" "$d_ss" "$@"
}

# corral_launch BASE ID WD SI TAG SH SPEC SWEEP MAX STEPS SF KIND LIM.
# LIM is "-", or the limits as "MEM QUOTA PIDS" (see cgmake). Output:
# one line "ok CPID CSTART WPID WSTART" (plus " nof" when SF asked for
# setsid -f and the sandbox's setsid refused it), or an error word; then a
# report as corral_poll prints it (state, log size, the first MAX log
# bytes), so that a short command costs one round trip in all.
#
# BASE/ID is, fastest first: an armed spare (KIND=armed: the previous start
# asked a resident shell to arm it, see corral_arm in spares.sh) whose
# processes are alive, which only needs its spec and the word go; or
# nothing, and then the directory is made here. BASE is 0700 and ours, so
# an existing directory there is one of ours. Then the parent is started
# (see parent.sh) and, for up to the sleeps in STEPS, the end is waited
# for.
#
# The command line, directory and environment go into the file spec (see
# specFile in scripts.go), read only by the command's own shell just before
# it execs: they never appear in the argv of the long-lived wrapper and
# parent, so `ps` shows no secrets and a process scan for a word of the
# command never matches (and kills) the machinery.
#
# Every fork counts here (each costs a millisecond or more in a loaded
# sandbox): existence checks and the PATH search for setsid are builtins,
# directories are made only when missing, and the end is first looked for
# in a short builtin-only spin.
corral_launch() {
	set -f
	unset CDPATH
	# shellcheck disable=SC2034 # TAG is in the spec; the argument keeps the call's layout
	base=$1 id=$2 wd=$3 si=$4 tag=$5 sh=$6 spec=$7 sweep=$8 max=$9
	shift 9
	steps=$1 sf=$2 kind=$3 lim=$4
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
			# shellcheck disable=SC2086 # splitting the armed line into its fields is the point
			set -- $r
			# All three must be there: the parent, too, stopped, or
			# nobody keeps the command's zombie for its exit status.
			a_p= a_pst=
			# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh)
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
		# shellcheck disable=SC2174 # only BASE itself must be private; its parents are the sandbox's
		[ -d "$base" ] || mkdir -p -m 700 "$base" 2>/dev/null
		mkdir -m 700 "$d" 2>/dev/null
		[ -d "$d" ] || { echo nostate; exit 0; }
	fi
	# SWEEP: minutes of retention for exit files and unused spares, or -1
	# to sweep only the spares whose resident shell is gone.
	if [ "$sweep" != 0 ]; then corral_sweepspares "$base" "$d"; fi
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
	oommark "$d"
	# shellcheck disable=SC2086 # LIM is three numbers, split on purpose
	if [ "$lim" != - ] && ! cgmake "$d" $lim; then exit 0; fi
	if [ -n "$r" ]; then
		# Armed: the wrapper starts the stdin holder, then lets the
		# command go.
		echo "go $si" 1<>"$d/go"
		echo "$r"
	else
		if [ "$si" = 1 ]; then mkfifo "$d/in" || { echo nofifo; exit 0; }; fi
		: >"$d/log"
		# shellcheck disable=SC2154 # corral_parent is set by lib (scripts.go)
		r=$(detach "$ss" "$sf" "$sh" -c "$corral_parent" corral-parent "$d" "$sh" "$ss" now "$si" </dev/null 2>>"$d/wrapper.err")
		case $r in "ok "*) echo "$r$nof" ;; *) echo "nostart $r"; exit 0 ;; esac
	fi
	# shellcheck disable=SC2086 # splitting the ok line into its fields is the point
	set -- $r
	c=$2 cst=$3 w=$4 wst=$5
	# A quick command ends about when the wrapper reports it: look with
	# builtins only for a few milliseconds before paying a fork per
	# sleep. The read builtin takes a system call per byte, so a look at
	# /proc/PID/stat costs ~0.2ms; the spin looks for the cheap sign of
	# an end instead: a zombie (or a reaped process) has no cwd.
	# l_spin bounds it: one look is a stat and a few microseconds of
	# shell, so 1500 looks are 2-5ms under dash, bash or busybox ash,
	# longer than a quick command takes to end and short against the
	# first sleep of STEPS.
	l_spin=1500
	n=0
	while [ -n "$steps" ] && [ -e "/proc/$c/cwd" ] && [ $n -lt $l_spin ]; do n=$((n+1)); done
	state "$d" "$w" "$wst" "$c" "$cst"
	for s in $steps; do
		# shellcheck disable=SC2154 # st is set by state (state.sh)
		[ "$st" = running ] || break
		sleep "$s" 2>/dev/null || break
		state "$d" "$w" "$wst" "$c" "$cst"
	done
	report "$d" 0 "$max"
	return 0
}
