# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# Stats: what process trees cost, read from /proc inside the sandbox.
# Like pstat and tree, the function reads corral_proc in place of /proc
# when set, so that a test can point it at crafted files. Its variables
# are x_*, plus t_* of t_members (ports.sh).

# corral_treestats CPID CSTART TAG... (three words a tree) prints, for
# each tree in argument order, one line
#
#	IDX CPU RSS PIDS READ WRITE IOOK
#
# IDX is the tree's position (0-based); CPU the clock ticks of user and
# system time of its live members and of the children they reaped
# (/proc/PID/stat fields 14 to 17); RSS their resident memory in kB
# (VmRSS of /proc/PID/status); PIDS how many members live, zombies
# excluded; READ and WRITE their storage bytes (read_bytes, write_bytes of
# /proc/PID/io); IOOK 1 when every member's io was read, 0 when one could
# not be (another user's process), and then READ and WRITE leave it out.
# A tree with no member left prints zeros. The trees are found together
# (t_members: one pass over /proc, one grep) and one awk reads every
# member: one round trip of a few forks, whatever the number of trees.
#
# Without awk (see pgscan in state.sh) the members are read with builtins,
# which costs some 600 system calls a file in dash and busybox ash. The
# sums live in variables named after the tree's index (x_c0, x_r0, ...):
# the index is a number this function counts, and every value added is
# checked to be digits, so eval never sees text from /proc.
corral_treestats() {
	t_members "$@"
	if hasawk; then
		# shellcheck disable=SC2154 # t_i, t_m and t_P are set by t_members (ports.sh)
		echo "$t_m" | awk -v n="$t_i" -v P="$t_P" '
			BEGIN { for (i = 0; i < n; i++) { c[i] = 0; r[i] = 0; p[i] = 0; rd[i] = 0; wr[i] = 0; ok[i] = 1 } }
			{
				for (j = 1; j <= NF; j++) {
					x = $j; sub(/:.*/, "", x); q = $j; sub(/^[^:]*:/, "", q)
					if (x !~ /^[0-9]+$/ || q !~ /^[0-9]+$/ || ($j in seen)) continue
					seen[$j] = 1
					f = P "/" q "/stat"; s = ""
					while ((getline l < f) > 0) s = s " " l
					close(f)
					if (!sub(/.*\) /, "", s)) continue
					split(s, a, " ")
					if (a[1] == "Z" || (a[12] a[13] a[14] a[15]) !~ /^[0-9]+$/) continue
					f = P "/" q "/status"; got = 0; rss = 0
					while ((getline l < f) > 0) { got = 1; if (l ~ /^VmRSS:/) { split(l, b, " "); rss = b[2] } }
					close(f)
					if (!got) continue
					if (rss !~ /^[0-9]+$/) rss = 0
					f = P "/" q "/io"; ib = ""; ob = ""
					while ((getline l < f) > 0) {
						split(l, b, " ")
						if (b[1] == "read_bytes:") ib = b[2]; else if (b[1] == "write_bytes:") ob = b[2]
					}
					close(f)
					c[x] += a[12] + a[13] + a[14] + a[15]; r[x] += rss; p[x]++
					if (ib ~ /^[0-9]+$/ && ob ~ /^[0-9]+$/) { rd[x] += ib; wr[x] += ob } else ok[x] = 0
				}
			}
			END { for (i = 0; i < n; i++) printf "%d %.0f %.0f %d %.0f %.0f %d\n", i, c[i], r[i], p[i], rd[i], wr[i], ok[i] }'
		return 0
	fi
	# shellcheck disable=SC2154 # t_i, t_m and t_P are set by t_members (ports.sh)
	x_n=$t_i x_k=0
	while [ "$x_k" -lt "$x_n" ]; do
		eval "x_c$x_k=0 x_r$x_k=0 x_p$x_k=0 x_i$x_k=0 x_o$x_k=0 x_ok$x_k=1"
		x_k=$((x_k + 1))
	done
	x_seen=' '
	# shellcheck disable=SC2154 # see above
	for t_w in $t_m; do
		t_x=${t_w%%:*} q=${t_w#*:}
		case $x_seen in *" $t_x:$q "*) continue ;; esac
		x_seen="$x_seen$t_x:$q "
		# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh)
		if ! pstat "$q" || [ "$p_state" = Z ]; then continue; fi
		case $p_cpu in *[!0-9' ']*) continue ;; esac
		# shellcheck disable=SC2086 # four numbers, checked above
		set -- $p_cpu
		[ $# -eq 4 ] || continue
		# shellcheck disable=SC2034 # x_t is added in an eval below
		x_t=$(($1 + $2 + $3 + $4))
		# x_f stays empty when the file cannot be opened: the process
		# has ended since pstat.
		x_f= x_rss=
		{
			x_f=1
			while read -r x_key x_v; do
				[ "$x_key" = VmRSS: ] && { x_rss=${x_v%% *}; break; }
			done
		} 2>/dev/null <"$t_P/$q/status"
		[ -n "$x_f" ] || continue
		case $x_rss in ''|*[!0-9]*) x_rss=0 ;; esac
		x_rb= x_wb=
		{
			while read -r x_key x_v; do
				case $x_key in
				read_bytes:) x_rb=$x_v ;;
				write_bytes:) x_wb=$x_v ;;
				esac
			done
		} 2>/dev/null <"$t_P/$q/io"
		eval "x_c$t_x=\$((x_c$t_x + x_t)) x_r$t_x=\$((x_r$t_x + x_rss)) x_p$t_x=\$((x_p$t_x + 1))"
		case $x_rb in ''|*[!0-9]*) x_rb= ;; esac
		case $x_wb in ''|*[!0-9]*) x_wb= ;; esac
		if [ -n "$x_rb" ] && [ -n "$x_wb" ]; then
			eval "x_i$t_x=\$((x_i$t_x + x_rb)) x_o$t_x=\$((x_o$t_x + x_wb))"
		else
			eval "x_ok$t_x=0"
		fi
	done
	x_k=0
	while [ "$x_k" -lt "$x_n" ]; do
		eval "x_l=\"\$x_c$x_k \$x_r$x_k \$x_p$x_k \$x_i$x_k \$x_o$x_k \$x_ok$x_k\""
		# shellcheck disable=SC2154 # x_l is set by the eval
		echo "$x_k $x_l"
		x_k=$((x_k + 1))
	done
	return 0
}
