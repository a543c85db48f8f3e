# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# What a poll learns about a process: its state, its output, its tree.

# state DIR WPID WSTART CPID CSTART sets st to the exit file's content, or
# "running" while the wrapper lives (a zombie wrapper, kept by a stopped
# parent, is dead), or "lost" when the wrapper is gone without an exit
# file, or "gone" when DIR does not exist. It is a function setting a
# variable, not a command substitution, so that polling it forks nothing.
#
# When the command (CPID, identified by CSTART) is a zombie, state finishes
# it as the wrapper would: it reads the wait status from /proc, writes exit
# and resumes the stopped parent. That takes the wrapper's watch interval
# out of exit detection. Only a zombie read while its parent is still
# stopped counts (the parent is looked at after the zombie): once resumed,
# the parent reaps it, and a process being reaped shows state X and a wait
# status of 0. The parent is resumed only after exit was written, so then
# exit is there to be read instead.
#
# exit is written in place (one short write; a tmp file and mv would cost a
# fork) and opened with <>, never truncated, before the parent is resumed;
# the wrapper, too, resumes the parent only once exit holds a whole line.
# So while anyone may find it empty (being written), they then also find
# the zombie still there and derive the same line from it; everyone who
# writes it writes that same line, over the same bytes, so a complete exit
# never looks shorter again; and a wrapper that finds the command reaped
# also finds exit complete and does not call it lost.
#
# The exit file is read before the wrapper is looked at, and again after,
# because the wrapper writes it just before it ends. A line without its
# newline is one being written and counts as none (read fails on it).
#
# Whoever writes exit (or finds the process lost) also ends the stdin
# holder, as the wrapper does when it writes exit: a wrapper killed before
# it got there (a kill of the machinery, a sandbox out of pids) left the
# holder asleep for good.
#
# resume DIR resumes DIR's parent if it is still the stopped one.
resume() {
	r_p= r_pst=
	[ -f "$1/parent" ] && read -r r_p r_pst <"$1/parent"
	# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh)
	[ -n "$r_pst" ] && pstat "$r_p" && [ "$p_start" = "$r_pst" ] && [ "$p_state" = T ] && kill -CONT "$r_p" 2>/dev/null
}
# endholder DIR ends DIR's stdin holder if it still runs.
endholder() {
	r_h= r_hst=
	[ -f "$1/holder" ] && read -r r_h r_hst <"$1/holder"
	[ -n "$r_hst" ] && pstat "$r_h" && [ "$p_start" = "$r_hst" ] && kill "$r_h" 2>/dev/null
	return 0
}
state() {
	st=
	if ! [ -d "$1" ]; then st=gone; return; fi
	{ [ -f "$1/exit" ] && read -r st <"$1/exit"; } || st=
	if [ -n "$st" ]; then return; fi
	if pstat "$4" && [ "$p_start" = "$5" ] && [ "$p_state" = Z ]; then
		# shellcheck disable=SC2154 # p_wstatus is set by pstat (proc.sh)
		case $p_wstatus in
		''|*[!0-9]*) ;;
		*)
			s_w=$p_wstatus r_p= r_pst=
			[ -f "$1/parent" ] && read -r r_p r_pst <"$1/parent"
			if [ -n "$r_pst" ] && pstat "$r_p" && [ "$p_start" = "$r_pst" ] && [ "$p_state" = T ]; then
				wstatus "$s_w" "$1"
				echo "$st" 1<>"$1/exit"
				kill -CONT "$r_p" 2>/dev/null
				endholder "$1"
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
		endholder "$1"
		st=lost
	fi
	return 0
}

# report DIR OFF MAX prints st, the log size, and at most MAX log bytes from
# offset OFF. Called right after state, so the size is taken after the
# state: once st says exited, SIZE is final (escapees aside) and a reader
# that reached it is done. An empty log costs no fork (logsize DIR sets
# size). readlog reads only the bytes asked for, whatever the log's size.
# The size is the fifth field of ls -ln, which stats the file: wc -c
# would do, but busybox's reads the whole log to count it, which for a
# command that prints 100 MB cost more CPU than the command (every look
# of a follow). One fork either way, which matters when the sandbox is
# out of pids (a fork bomb); a `stat || wc` there made polls misjudge a
# running command under pids exhaustion (TestDockerForkBombContained).
logsize() {
	size=0
	if [ -s "$1/log" ]; then
		ls_o=$(ls -ln "$1/log" 2>/dev/null) || ls_o=
		# shellcheck disable=SC2086 # split into ls's fields
		set -- $ls_o
		size=${5:-0}
		case $size in *[!0-9]*) size=0 ;; esac
	fi
	size=$((size))
}
report() {
	echo "$st"
	logsize "$1"
	echo "$size"
	if [ "$size" -gt "$2" ] && [ "$3" -gt 0 ]; then readlog "$1/log" "$2" "$3"; fi
	return 0
}

# logtrim DIR OFF HEAD TAIL keeps the log on disk bounded (env.LogKeep;
# TAIL 0: no bound): a reader has every byte before OFF, so the log from
# HEAD (rounded up to a 4 KiB block) to TAIL bytes before OFF (rounded
# down) is dropped by punching a hole in it with util-linux fallocate: the
# size and every offset stay, and the hole reads as zeros. The range is
# recorded first in DIR/omitted, "START END"; its END is where the next
# punch starts. It acts only once a MiB or more can go (a few builtins
# otherwise). A fallocate that cannot punch (busybox's has no -p, or the
# filesystem has no holes) leaves DIR/nopunch, and the whole log is kept.
logtrim() {
	[ "$4" -gt 0 ] 2>/dev/null || return 0
	lt_h=$((($3 + 4095) / 4096 * 4096)) lt_e=$((($2 - $4) / 4096 * 4096))
	[ $((lt_e - lt_h)) -ge 1048576 ] || return 0
	[ -f "$1/nopunch" ] && return 0
	lt_a= lt_b=
	[ -f "$1/omitted" ] && read -r lt_a lt_b <"$1/omitted"
	case $lt_b in '' | *[!0-9]*) lt_b=$lt_h ;; esac
	[ $((lt_e - lt_b)) -ge 1048576 ] || return 0
	# shellcheck disable=SC2154 # fp is set by findprog (launch.sh)
	if findprog fallocate && echo "$lt_h $lt_e" >"$1/omitted" &&
		"$fp" -p -o "$lt_b" -l $((lt_e - lt_b)) "$1/log" >/dev/null 2>&1; then
		return 0
	fi
	if [ -n "$lt_a" ]; then echo "$lt_a $lt_b" >"$1/omitted"; else rm -f "$1/omitted"; fi
	: >"$1/nopunch"
	return 0
}

# readlog FILE OFF MAX prints at most MAX bytes of FILE from byte OFF. Where
# dd counts in bytes (iflag=skip_bytes,count_bytes: GNU coreutils and
# busybox both have it; r_dd caches the answer per shell) it is one dd in
# 64 KiB writes: a log streams at cat's speed. Otherwise dd seeks to the
# 64 KiB block that holds OFF and reads only the blocks the bytes wanted
# span, tail drops the part of the first block before OFF and head cuts the
# end; head writes in small pieces, each a frame on a docker stream. (tail
# -c +N alone reads everything before N in busybox: a reader that follows a
# long log would read it over and over.)
readlog() {
	if [ -z "$r_dd" ]; then
		r_dd=0
		dd if=/dev/null iflag=skip_bytes,count_bytes count=0 2>/dev/null && r_dd=1
	fi
	if [ "$r_dd" = 1 ]; then
		dd if="$1" iflag=skip_bytes,count_bytes skip="$2" count="$3" bs=65536 2>/dev/null
		return 0
	fi
	r_in=$(($2 % 65536))
	dd if="$1" bs=65536 skip=$(($2 / 65536)) count=$(((r_in + $3) / 65536 + 1)) 2>/dev/null | tail -c +$((r_in + 1)) | head -c "$3"
}

# tree CPID CSTART TAG [DIR] prints the PIDs of the live (non-zombie)
# processes of the tree: members of the command's process group while the
# command itself still runs (its PID then names the group for sure), every
# process whose environment holds CORRAL_TREE=TAG (setsid and double-fork
# escapees, which keep the inherited variable), and the members of DIR's
# limit cgroup when it has one (which no escapee leaves). It reads corral_proc in
# place of /proc when set (see proc.sh).
tree() {
	t_alive= t_proc=${corral_proc:-/proc}
	if pstat "$1" && [ "$p_start" = "$2" ] && [ "$p_state" != Z ]; then t_alive=1; fi
	{
		if [ -n "$t_alive" ]; then pgscan " $1:0 " pid; fi
		if [ -n "$4" ]; then cgprocs "$4"; fi
		grep -l -s -F -z -x "CORRAL_TREE=$3" "$t_proc"/[0-9]*/environ 2>/dev/null | while IFS= read -r f; do
			q=${f#"$t_proc"/}; echo "${q%/environ}"
		done
	} | sort -u | while read -r q; do
		pstat "$q" && [ "$p_state" != Z ] && echo "$q"
	done
}

# pgscan LEAD [pid] prints " IDX:PID" (or PID alone, with pid) for each
# live process, zombies excluded, whose process group is a PGRP of LEAD's
# " PGRP:IDX " words: one pass over /proc. awk reads a stat file in a few
# system calls; the shell's read takes one per byte in dash and busybox
# ash, some 600 for a stat line, so that the builtin pass over a host of a
# thousand processes took seconds of a loaded machine's CPU, and a look at
# a tree overran its deadline. The builtin pass stays for a sandbox
# without awk (corral_noawk=1 makes a test take it). The name (field 2)
# may hold anything, so the fields are taken after the last ") ", every
# line joined, as pstat takes them.
pgscan() {
	s_P=${corral_proc:-/proc}
	if hasawk; then
		printf '%s\n' "$s_P"/[0-9]*/stat | awk -v lead="$1" -v bare="${2-}" '
			BEGIN {
				n = split(lead, w, " ")
				for (i = 1; i <= n; i++) {
					k = w[i]; sub(/:.*/, "", k)
					v = w[i]; sub(/^[^:]*:/, "", v)
					g[k] = v
				}
			}
			{
				f = $0; s = ""
				while ((getline l < f) > 0) s = s " " l
				close(f)
				if (!sub(/.*\) /, "", s)) next
				split(s, a, " ")
				if (a[1] == "Z" || !(a[3] in g)) next
				q = f; sub(/\/stat$/, "", q); sub(/.*\//, "", q)
				if (bare != "") print q; else print " " g[a[3]] ":" q
			}'
		return 0
	fi
	for f in "$s_P"/[0-9]*/stat; do
		q=${f#"$s_P"/}
		q=${q%/stat}
		if ! pstat "$q" || [ "$p_state" = Z ]; then continue; fi
		# shellcheck disable=SC2154 # p_pgrp is set by pstat (proc.sh)
		case $1 in *" $p_pgrp:"*) ;; *) continue ;; esac
		if [ -n "${2-}" ]; then echo "$q"; continue; fi
		s_x=${1#*" $p_pgrp:"}
		echo " ${s_x%% *}:$q"
	done
	return 0
}

# hasawk tells whether awk may read /proc in place of the builtins: there
# is one, and a test did not set corral_noawk to take the builtin path.
hasawk() { [ -z "${corral_noawk-}" ] && command -v awk >/dev/null 2>&1; }
