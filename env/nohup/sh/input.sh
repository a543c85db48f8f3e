# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# Input waits: which trees have a member blocked reading its terminal or
# its stdin FIFO, read from /proc inside the sandbox as env/local reads it
# on the machine (see env/local/inputwait_linux.go), with what a shell
# can read: the state, process group, terminal and its foreground group
# (/proc/PID/stat), the system call a member sleeps in and its first
# argument (/proc/PID/syscall), whether that descriptor is the file
# (test -ef, which dash, bash and busybox test have) and the terminal's
# line discipline (stty -g). Its variables are i_*, plus
# t_* of t_members (ports.sh).
#
# A member counts when it sleeps (state S) in a call that reads (read,
# readv, pread64, preadv, preadv2) a descriptor that is:
#
#   - the command's terminal (DIR/tty, written by ptyterm.sh), or
#     /dev/tty in a member whose controlling terminal it is, and the
#     member is in the terminal's foreground group (a background reader
#     would be stopped by SIGTTIN, not wait): the kind is the terminal's,
#     raw with ICANON off, password with ECHO off, else line;
#   - the stdin FIFO (DIR/in) of a command without a terminal: pipe.
#
# A member asleep in poll, select or epoll waits for what inputfd says
# its arguments name. What a poll or select watches is in the process's
# memory, which env/local reads and a shell cannot (/proc/PID/mem needs
# ptrace rights a container lacks), so only the cases the arguments
# settle count; besides, on a terminal in raw mode any of them in the
# foreground group counts as raw: a full-screen program (vi, less) waits
# for keys so. Elsewhere a poll is not taken for a wait: a server polls
# its sockets.
# The system call numbers are the sandbox's architecture's (uname -m:
# x86_64 and aarch64); on another, nothing is flagged.

# corral_inputwaits DIR CPID CSTART TAG... (four words a tree) prints, for
# each tree in argument order, "IDX KIND" (KIND line, raw, password or
# pipe) when a member waits for input, "IDX -" when none does. One pass
# over /proc finds the members of every tree (t_members), one awk reads
# their stat and syscall files, and only a terminal whose member is
# asleep in a read or a poll costs a fork: one stty.
corral_inputwaits() {
	i_n=0 i_set=
	while [ $# -ge 4 ]; do
		eval "i_d$i_n=\$1"
		i_set="$i_set $2 $3 $4"
		i_n=$((i_n + 1))
		shift 4
	done
	case $(uname -m 2>/dev/null) in
	x86_64) i_read=' 0 19 17 295 327 ' i_poll=' 7 271 ' i_sel=' 23 270 ' i_ep=' 232 281 441 ' ;;
	aarch64|arm64) i_read=' 63 65 67 69 286 ' i_poll=' 73 ' i_sel=' 72 ' i_ep=' 22 441 ' ;;
	*) i_read= i_poll= i_sel= i_ep= ;;
	esac
	i_cand=
	if [ -n "$i_read" ] && hasawk; then
		# shellcheck disable=SC2086 # three words a tree, digits and tags
		t_members $i_set
		# shellcheck disable=SC2154 # t_m and t_P are set by t_members (ports.sh)
		i_cand=$(echo "$t_m" | awk -v P="$t_P" -v rd="$i_read" -v pl="$i_poll" -v sl="$i_sel" -v ep="$i_ep" '
			function hex(s,   v, k, c) {
				v = 0; s = tolower(s); sub(/^0x/, "", s)
				for (k = 1; k <= length(s); k++) {
					c = index("0123456789abcdef", substr(s, k, 1))
					if (c == 0) return -1
					v = v * 16 + c - 1
				}
				return v
			}
			{
				for (j = 1; j <= NF; j++) {
					x = $j; sub(/:.*/, "", x); q = $j; sub(/^[^:]*:/, "", q)
					if (x !~ /^[0-9]+$/ || q !~ /^[0-9]+$/ || ($j in seen)) continue
					seen[$j] = 1
					f = P "/" q "/syscall"; l = ""
					getline l < f
					close(f)
					split(l, c, " ")
					if (index(rd, " " c[1] " ")) k = "r"
					else if (index(pl, " " c[1] " ")) k = "p"
					else if (index(sl, " " c[1] " ")) k = "s"
					else if (index(ep, " " c[1] " ")) k = "e"
					else continue
					f = P "/" q "/stat"; s = ""
					while ((getline l < f) > 0) s = s " " l
					close(f)
					if (!sub(/.*\) /, "", s)) continue
					split(s, a, " ")
					if (a[1] != "S") continue
					print x, q, k, hex(c[2]), hex(c[3]), a[3], a[5], a[6]
				}
			}')
	fi
	i_k=0
	while [ "$i_k" -lt "$i_n" ]; do
		eval "i_w$i_k=-"
		i_k=$((i_k + 1))
	done
	# Each candidate: IDX PID CLASS ARG0 ARG1 PGRP TTY TPGID, CLASS r for
	# a read, p a poll, s a select, e an epoll wait.
	while read -r i_x i_q i_c i_a0 i_a1 i_pg i_tty i_tp; do
		[ -n "$i_tp" ] || continue
		i_d= i_w=
		eval "i_d=\$i_d$i_x i_w=\$i_w$i_x"
		[ "$i_w" = - ] || continue
		inputfd "$t_P/$i_q" "$i_c" "$i_a0" "$i_a1"
		i_t=
		if [ -f "$i_d/tty" ]; then read -r i_t <"$i_d/tty" 2>/dev/null; fi
		if [ -n "$i_t" ]; then
			# On the terminal: only its foreground group reads it.
			if [ "$i_tty" = 0 ] || [ "$i_pg" != "$i_tp" ]; then continue; fi
			# shellcheck disable=SC2154 # i_fd is set by inputfd
			if [ -n "$i_fd" ] && ! samefile "$t_P/$i_q/fd/$i_fd" "$i_t" && ! samefile "$t_P/$i_q/fd/$i_fd" /dev/tty; then continue; fi
			if [ -z "$i_fd" ] && [ "$i_c" = r ]; then continue; fi
			i_m=$(stty -g <"$i_t" 2>/dev/null) || continue
			i_m=${i_m#*:}; i_m=${i_m#*:}; i_m=${i_m#*:}; i_m=${i_m%%:*}
			case $i_m in ''|*[!0-9a-fA-F]*) continue ;; esac
			if [ $((0x$i_m & 2)) -eq 0 ]; then i_w=raw
			elif [ -z "$i_fd" ]; then continue
			elif [ $((0x$i_m & 8)) -eq 0 ]; then i_w=password
			else i_w=line
			fi
		else
			if [ -z "$i_fd" ] || ! [ -p "$i_d/in" ] || ! samefile "$t_P/$i_q/fd/$i_fd" "$i_d/in"; then continue; fi
			i_w=pipe
		fi
		eval "i_w$i_x=\$i_w"
	done <<EOF
$i_cand
EOF
	i_k=0
	while [ "$i_k" -lt "$i_n" ]; do
		eval "echo \"\$i_k \$i_w$i_k\""
		i_k=$((i_k + 1))
	done
	return 0
}

# samefile A B tells whether A and B are the same file (device and inode,
# symbolic links followed: /proc/PID/fd/N is the file the descriptor has
# open). test -ef is not POSIX, but dash, bash and busybox test have it,
# and make shell-check runs the library under each.
# shellcheck disable=SC3013
samefile() { [ "$1" -ef "$2" ]; }

# inputfd DIR CLASS ARG0 ARG1 sets i_fd to the descriptor a member (its
# /proc directory DIR) asleep in a call of CLASS waits to read, when the
# call's arguments tell: a read's first argument; 0 for a select of one
# descriptor (nfds 1: only descriptor 0 is in its sets), for a poll of one
# by a process that holds no socket (what it polls is in its memory, and
# busybox ash's read polls its stdin first), and for an epoll wait whose
# set (DIR/fdinfo/EPFD) holds descriptor 0. Else i_fd is empty.
inputfd() {
	i_fd=
	case $2 in
	r) i_fd=$3 ;;
	s) if [ "$3" = 1 ]; then i_fd=0; fi ;;
	p)
		[ "$4" = 1 ] || return 0
		for i_f in "$1"/fd/*; do
			if [ -S "$i_f" ]; then return 0; fi
		done
		i_fd=0
		;;
	e)
		# shellcheck disable=SC2034 # i_r takes the rest of the line
		while read -r i_k i_v i_r; do
			if [ "$i_k" = tfd: ] && [ "$i_v" = 0 ]; then i_fd=0; break; fi
		done <"$1/fdinfo/$3" 2>/dev/null
		;;
	esac
	return 0
}
