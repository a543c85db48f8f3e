# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# Ports: the TCP sockets in the LISTEN state that a process tree, or the
# whole sandbox, holds; a wait inside the sandbox until the tree listens on
# a port; and one HTTP request from inside the sandbox. The shell only
# gathers: it sends the raw /proc/net/tcp rows and which process holds
# which socket inode, and Go decodes addresses and ports (see ports.go).
# Like pstat and tree, the functions read corral_proc in place of /proc
# when set, so that a test can point them at crafted files.

# l_report NET PIDS... prints, for the network namespace whose /proc
# directory is NET (/proc/net, /proc/PID/net):
#
#	R ROW          each row of NET/tcp and NET/tcp6 in the LISTEN state (0A)
#	H PID INODE    each socket among those rows held by one of PIDS (an
#	               open file descriptor of it; "all" for every process)
#	C PID COMMAND  the command line of each PID of an H line (its name when
#	               the command line is empty), NULs and newlines as spaces
#
# The holders are found with stat -L on /proc/PID/fd/*: the file names
# come from the glob, never from what a process opened, so a file named
# like a socket cannot pass for one. Descriptors of processes the sandbox
# user cannot read are skipped (their sockets have no H line). Nothing
# beyond one grep runs while nothing listens.
l_report() {
	l_net=$1
	shift
	l_who=$*
	l_rows=$(grep -h ' 0A ' "$l_net/tcp" "$l_net/tcp6" 2>/dev/null)
	[ -n "$l_rows" ] || return 0
	l_P=${corral_proc:-/proc} l_inos=' ' l_ifs=$IFS l_hp=' '
	# Rows hold no pattern characters; -f makes sure of it.
	set -f
	IFS='
'
	for l_r in $l_rows; do
		IFS=$l_ifs
		# shellcheck disable=SC2086 # splitting the row's fields is the point
		set -- $l_r
		[ "$4" = 0A ] || continue
		echo "R $l_r"
		l_inos="$l_inos${10} "
	done
	IFS=$l_ifs
	set +f
	[ "$l_inos" != ' ' ] || return 0
	if [ "$l_who" = all ]; then
		printf '%s\n' "$l_P"/[0-9]*/fd/*
	else
		for q in $l_who; do printf '%s\n' "$l_P/$q"/fd/*; done
	fi | xargs stat -L -c '%F %i %n' 2>/dev/null | grep '^socket ' | {
		while IFS= read -r l_f; do
			# shellcheck disable=SC2086 # "socket INODE /proc/PID/fd/N"
			set -- $l_f
			case $l_inos in *" $2 "*) ;; *) continue ;; esac
			q=${3#"$l_P"/}
			q=${q%%/*}
			echo "H $q $2"
			case $l_hp in *" $q "*) ;; *) l_hp="$l_hp$q " ;; esac
		done
		for q in $l_hp; do
			l_c=$(tr '\0\n' '  ' <"$l_P/$q/cmdline" 2>/dev/null)
			[ -n "$l_c" ] || { read -r l_c <"$l_P/$q/comm"; } 2>/dev/null
			echo "C $q $l_c"
		done
	}
	return 0
}

# corral_listeners CPID CSTART TAG prints l_report's lines for the tree
# (see tree in state.sh), read in the network namespace of the command
# while it runs, else of another process of the tree. A tree that spans
# several namespaces is seen in that one only.
corral_listeners() {
	l_pids=$(tree "$1" "$2" "$3")
	[ -n "$l_pids" ] || return 0
	l_n=
	for q in $l_pids; do
		[ "$q" = "$1" ] && l_n=$q
		[ -n "$l_n" ] || l_n=$q
	done
	# shellcheck disable=SC2086 # one PID a word
	l_report "${corral_proc:-/proc}/$l_n/net" $l_pids
}

# corral_listeners_all prints l_report's lines for every process of the
# sandbox's own network namespace (the one this shell is in).
corral_listeners_all() {
	l_report "${corral_proc:-/proc}/net" all
}

# t_members CPID CSTART TAG... (three words a tree) sets t_m to the live
# members of each tree as " IDX:PID" words (IDX 0-based, in argument
# order), running commands first; a PID may appear more than once. A tree
# is tree's (state.sh): the command's process group while the command
# runs, and the processes tagged CORRAL_TREE=TAG. One pass over /proc
# (pgscan, state.sh) finds the groups and one grep the tags, whatever the
# number of trees. It sets t_P to the /proc directory.
t_members() {
	t_P=${corral_proc:-/proc} t_lead=' ' t_first= t_tags= t_i=0
	while [ $# -ge 3 ]; do
		# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh)
		if pstat "$1" && [ "$p_start" = "$2" ] && [ "$p_state" != Z ]; then
			t_lead="$t_lead$1:$t_i " t_first="$t_first $t_i:$1"
		fi
		t_tags="$t_tags CORRAL_TREE=$3:$t_i"
		t_i=$((t_i + 1))
		shift 3
	done
	# The members as IDX:PID words, running commands first (they name
	# their tree's namespace).
	t_m=$t_first$(
		if [ "$t_lead" != ' ' ]; then pgscan "$t_lead"; fi
		set --
		for t_t in $t_tags; do set -- "$@" -e "${t_t%:*}"; done
		[ $# -gt 0 ] || exit 0
		grep -H -s -F -z -x "$@" "$t_P"/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | while IFS= read -r f; do
			q=${f#"$t_P"/}
			q=${q%%/*}
			t_v=${f##*:}
			for t_t in $t_tags; do
				[ "${t_t%:*}" = "$t_v" ] || continue
				pstat "$q" && [ "$p_state" != Z ] && echo " ${t_t##*:}:$q"
				break
			done
		done
	)
}

# corral_treelisteners CPID CSTART TAG... (three words a tree) prints
# what corral_listeners would for each of several trees, in one look:
#
#	M IDX PID      a live process of tree IDX (0-based, in argument order)
#	N IDX NS       tree IDX's sockets are read in network namespace NS
#	R NS ROW       each row of NS's tcp and tcp6 in the LISTEN state
#	H PID INODE    each socket among those rows held by a process of a tree
#
# A tree is tree's (state.sh): the command's process group while the
# command runs, and the processes tagged CORRAL_TREE=TAG. Its namespace is
# its command's while that runs, else another member's, as in
# corral_listeners; NS is the namespace's inode, or p and the PID it is
# read through when that cannot be read. One pass over /proc (pgscan)
# finds the groups, one grep the tags, one stat the namespaces, one
# grep the rows of every namespace and one stat the descriptors: no fork
# per tree, so that listing every process with its ports is one round trip
# of a few forks. No command lines are sent.
corral_treelisteners() {
	t_members "$@"
	[ -n "$t_m" ] || return 0
	t_seen=' ' t_reps=' ' t_nsf=
	for t_w in $t_m; do
		t_x=${t_w%%:*} q=${t_w#*:}
		case $t_seen in *" $t_x:$q "*) continue ;; esac
		t_seen="$t_seen$t_x:$q "
		echo "M $t_x $q"
		case $t_reps in *" $t_x:"*) ;; *) t_reps="$t_reps$t_x:$q " t_nsf="$t_nsf $t_P/$q/ns/net" ;; esac
	done
	# shellcheck disable=SC2086 # one path a word
	t_ns=" $(stat -L -c '%i:%n' $t_nsf 2>/dev/null | tr '\n' ' ')"
	t_done=' ' t_nets= t_keys=' '
	for t_w in $t_reps; do
		t_x=${t_w%%:*} q=${t_w#*:}
		case $t_ns in
		*":$t_P/$q/ns/net "*) t_k=${t_ns%%":$t_P/$q/ns/net "*}; t_k=${t_k##* } ;;
		*) t_k=p$q ;;
		esac
		echo "N $t_x $t_k"
		case $t_done in *" $t_k "*) continue ;; esac
		t_done="$t_done$t_k "
		t_keys="$t_keys$q:$t_k "
		t_nets="$t_nets $t_P/$q/net/tcp $t_P/$q/net/tcp6"
	done
	# One grep reads every namespace's rows, each file in a few large
	# reads. Never a shell's read: bash reads a file in small pieces and
	# seeks back after each line, and every seek makes the kernel print
	# /proc/net/tcp again from the start, so a row is skipped when sockets
	# come or go before it in the meantime (a third of the looks missed a
	# listener here while another program opened and closed ports).
	t_inos=' '
	# shellcheck disable=SC2086 # one path a word
	t_rows=$(grep -H ' 0A ' $t_nets 2>/dev/null)
	set -f
	t_ifs=$IFS
	IFS='
'
	for t_r in $t_rows; do
		IFS=$t_ifs
		# "$t_P/PID/net/tcp:ROW" or tcp6; t_P may hold colons, PIDs do not.
		t_r=${t_r#"$t_P"/}
		q=${t_r%%/*}
		t_r=${t_r#*/net/tcp}
		t_r=${t_r#6}
		t_r=${t_r#:}
		case $t_keys in *" $q:"*) ;; *) continue ;; esac
		t_k=${t_keys#*" $q:"}
		t_k=${t_k%% *}
		# shellcheck disable=SC2086 # splitting the row's fields is the point
		set -- $t_r
		[ "$4" = 0A ] || continue
		echo "R $t_k $t_r"
		t_inos="$t_inos${10} "
	done
	IFS=$t_ifs
	set +f
	[ "$t_inos" != ' ' ] || return 0
	# One stat for every descriptor of the trees: the names come from the
	# glob (see l_report).
	set --
	for t_w in $t_seen; do set -- "$@" "$t_P/${t_w#*:}"/fd/*; done
	stat -L -c '%F %i %n' "$@" 2>/dev/null | while IFS= read -r t_f; do
		case $t_f in "socket "*) ;; *) continue ;; esac
		# shellcheck disable=SC2086 # "socket INODE /proc/PID/fd/N"
		set -- $t_f
		case $t_inos in *" $2 "*) ;; *) continue ;; esac
		q=${3#"$t_P"/}
		echo "H ${q%%/*} $2"
	done
	return 0
}

# corral_waitport DIR CPID CSTART TAG PORTS BUDGET ID WAITED waits inside
# the sandbox until the tree listens on one of PORTS (four upper-case hex
# digits each, as /proc/net/tcp writes them, separated by spaces). Then it
# prints "F" and corral_listeners's lines; after BUDGET ms without it, "T"
# (the caller opens another wait, so that a wait whose caller vanished
# does not loop forever). Each look is one grep for a LISTEN row of a
# wanted port (rows in that state have an all-zero remote address) in the
# tree's network namespace; only when one is there does it ask who holds
# it (corral_listeners), and a port held by a process outside the tree is
# looked at again only every 100 ms. It looks every 10 ms for the first
# 5 s of the wait (WAITED ms had passed before this call), then every
# 20 ms, 50 ms after 30 s and 200 ms after 2 min: a server that starts
# slowly costs fewer forks. A sleep without fractions falls back to 1 s.
#
# ID names the wait for corral_unfollow, as corral_follow's does.
corral_waitport() {
	d=$1 c=$2 cst=$3 tag=$4 w_ports=$5 budget=$6 f_id=$7 w_waited=$8
	CORRAL_FOLLOW=$f_id
	export CORRAL_FOLLOW
	# shellcheck disable=SC2154 # p_start is set by pstat (proc.sh)
	pstat $$ && echo "$$ $p_start" >"$d/follow-$f_id" 2>/dev/null
	set --
	for w_p in $w_ports; do
		set -- "$@" -e ":$w_p 00000000:0000 0A " -e ":$w_p 00000000000000000000000000000000:0000 0A "
	done
	w_P=${corral_proc:-/proc} w_pid= w_pst= spent=0 w_whole=
	while :; do
		# The namespace is read through a process of the tree: the command
		# while it lives, else any other (escapees of a leader that
		# exited), found again when that one ends.
		# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh)
		if [ -z "$w_pid" ] || ! pstat "$w_pid" || [ "$p_start" != "$w_pst" ] || [ "$p_state" = Z ]; then
			w_pid=
			if pstat "$c" && [ "$p_start" = "$cst" ] && [ "$p_state" != Z ]; then
				w_pid=$c w_pst=$p_start
			else
				for q in $(tree "$c" "$cst" "$tag"); do
					pstat "$q" && w_pid=$q w_pst=$p_start && break
				done
			fi
		fi
		w_ms=10
		if [ -n "$w_pid" ] && w_rows=$(grep -h -F "$@" "$w_P/$w_pid/net/tcp" "$w_P/$w_pid/net/tcp6" 2>/dev/null); then
			if w_fast "$w_rows"; then
				echo F
				printf '%s\n' "$w_out"
				rm -f "$d/follow-$f_id"
				return 0
			fi
			w_out=$(corral_listeners "$c" "$cst" "$tag")
			if w_owned "$w_out"; then
				echo F
				printf '%s\n' "$w_out"
				rm -f "$d/follow-$f_id"
				return 0
			fi
			w_ms=100
		fi
		w_t=$((w_waited + spent))
		if [ "$w_t" -ge 120000 ]; then w_ms=200
		elif [ "$w_t" -ge 30000 ] && [ "$w_ms" -lt 50 ]; then w_ms=50
		elif [ "$w_t" -ge 5000 ] && [ "$w_ms" -lt 20 ]; then w_ms=20; fi
		if [ "$spent" -ge "$budget" ]; then echo T; rm -f "$d/follow-$f_id"; return 0; fi
		case $w_ms in ??) w_s=0.0$w_ms ;; *) w_s=0.$w_ms ;; esac
		if [ -n "$w_whole" ] || ! sleep "$w_s" 2>/dev/null; then w_whole=1 w_ms=1000; sleep 1; fi
		spent=$((spent + w_ms))
	done
}

# w_fast ROWS succeeds when a process of the command's process group
# holds the socket of one of ROWS (LISTEN rows of wanted ports), and sets
# w_out to l_report's R and H lines for those rows. It is the wait's quick
# answer: one stat for the whole group, where corral_listeners takes a
# dozen forks (80-160 ms inside a busy container); a holder that left the
# group (setsid) is found by corral_listeners after it.
w_fast() {
	w_out= f_ifs=$IFS f_fds=
	# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh)
	pstat "$c" && [ "$p_start" = "$cst" ] && [ "$p_state" != Z ] || return 1
	for f in "$w_P"/[0-9]*/stat; do
		q=${f#"$w_P"/}
		q=${q%/stat}
		# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh)
		pstat "$q" && [ "$p_pgrp" = "$c" ] && [ "$p_state" != Z ] && f_fds="$f_fds $w_P/$q/fd/*"
	done
	[ -n "$f_fds" ] || return 1
	# shellcheck disable=SC2086 # the globs expand here, one word a descriptor
	f_st=$(stat -L -c '%F %i %n' $f_fds 2>/dev/null | grep '^socket ')
	[ -n "$f_st" ] || return 1
	set -f
	IFS='
'
	for f_r in $1; do
		IFS=$f_ifs
		# shellcheck disable=SC2086 # splitting the row's fields is the point
		set -- $f_r
		[ "$4" = 0A ] || continue
		f_ino=${10}
		IFS='
'
		for f_l in $f_st; do
			IFS=$f_ifs
			# shellcheck disable=SC2086 # "socket INODE /proc/PID/fd/N"
			set -- $f_l
			[ "$2" = "$f_ino" ] || continue
			q=${3#"$w_P"/}
			q=${q%%/*}
			f_c=$(tr '\0\n' '  ' <"$w_P/$q/cmdline" 2>/dev/null)
			[ -n "$f_c" ] || { read -r f_c <"$w_P/$q/comm"; } 2>/dev/null
			w_out="${w_out}R $f_r
H $q $f_ino
C $q $f_c
"
			break
		done
	done
	IFS=$f_ifs
	set +f
	[ -n "$w_out" ]
}

# w_owned LINES succeeds when LINES (corral_listeners's) hold an R row of
# one of w_ports whose socket an H line gives to the tree.
w_owned() {
	o_h=' ' o_ifs=$IFS
	IFS='
'
	for o_l in $1; do
		case $o_l in "H "*) o_h="$o_h${o_l##* } " ;; esac
	done
	for o_l in $1; do
		IFS=$o_ifs
		case $o_l in "R "*) ;; *) continue ;; esac
		# shellcheck disable=SC2086 # splitting the row's fields is the point
		set -- $o_l
		case " $w_ports " in *" ${3##*:} "*) ;; *) continue ;; esac
		case $o_h in *" ${11} "*) IFS=$o_ifs; return 0 ;; esac
	done
	IFS=$o_ifs
	return 1
}

# corral_checkurl URL SECONDS makes one GET request to URL with the first
# HTTP client the sandbox has, and prints the client's name on a line,
# then what it said (at most 8 KiB), from which Go takes the status: curl
# prints the code; wget -S and the python3 fallback print the status line
# ("HTTP/1.1 200 OK"). Redirects are not followed (busybox wget has no
# option for that: it follows them, and its first status line is the
# original answer's). Certificates are not checked: a readiness check asks
# whether the server answers, and dev servers use self-signed ones.
# "none" when there is no client. busybox 1.35's wget crashes when -S
# meets -q or -T, so its progress lines come too, and timeout(1) bounds
# it.
corral_checkurl() {
	if command -v curl >/dev/null 2>&1; then
		echo curl
		curl -sS -k -o /dev/null -w '%{http_code}\n' --max-time "$2" "$1" 2>&1 | head -c 8192
	elif command -v wget >/dev/null 2>&1 && wget --version >/dev/null 2>&1; then
		echo wget
		wget -S -O /dev/null -t 1 -T "$2" --max-redirect=0 --no-check-certificate "$1" 2>&1 | head -c 8192
	elif command -v wget >/dev/null 2>&1; then
		echo busybox-wget
		c_t=
		command -v timeout >/dev/null 2>&1 && c_t=timeout
		${c_t:+"$c_t"} ${c_t:+"$2"} wget -S -O /dev/null --no-check-certificate "$1" 2>&1 | head -c 8192
	elif command -v python3 >/dev/null 2>&1; then
		echo python3
		python3 -c "$c_py" "$1" "$2" 2>&1 | head -c 8192
	else
		echo none
	fi
	return 0
}

# c_py is the python3 fallback of corral_checkurl: http.client follows no
# redirects.
c_py='import sys, ssl, http.client as h, urllib.parse as p
u = p.urlsplit(sys.argv[1])
k = {"context": ssl._create_unverified_context()} if u.scheme == "https" else {}
C = h.HTTPSConnection if u.scheme == "https" else h.HTTPConnection
c = C(u.hostname, u.port, timeout=float(sys.argv[2]), **k)
c.request("GET", (u.path or "/") + ("?" + u.query if u.query else ""))
print("HTTP/1.1 %d" % c.getresponse().status)'
