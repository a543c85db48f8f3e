# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# Per-process limits (env.Limits) through a cgroup the sandbox's user may
# write: one cgroup per process tree, made by the launch before the
# command runs, joined by the command's own shell just before it execs
# (so the command and every process it forks are in it), removed once the
# tree is gone. corral_cgroup and corral_proc stand in for /sys/fs/cgroup
# and /proc, as in oom.sh.
#
# Where the cgroups go, per hierarchy:
#   cgroup v1 (memory, cpu and pids mounted each on its own): under the
#     shell's own cgroup in each, in corral-sh/ID, when all three are
#     writable (root, or a tree chowned to the user);
#   cgroup v2: under the nearest cgroup above the shell's own that hands
#     memory, cpu and pids down (cgroup.subtree_control) and that the user
#     may write, in corral-sh/ID: a delegated subtree, or root's.
# A container's cgroup mount is read-only unless it was made otherwise,
# so there the probe says why not and the limit is refused.

# cgfind sets g_v (v1 or v2) and the base directories the limit cgroups
# go in: g_bm, g_bc and g_bp (v1's memory, cpu and pids) or g_b2 (v2);
# g_v stays empty, with g_why saying why, when no writable cgroup has all
# three controllers. Looked up once per shell (g_done).
cgfind() {
	if [ -n "$g_done" ]; then [ -n "$g_v" ]; return; fi
	g_done=1 g_v= g_why= g_bm= g_bc= g_bp= g_b2= g_root=${corral_cgroup:-/sys/fs/cgroup}
	g_2= g_m= g_c= g_p= g_1=
	{
		while IFS= read -r g_l; do
			g_r=${g_l#*:}
			case $g_l in
			0::*) g_2=${g_r#*:} ;;
			*)
				g_1=1 g_x=${g_r#*:}
				case ,${g_r%%:*}, in *,memory,*) g_m=$g_x ;; esac
				case ,${g_r%%:*}, in *,cpu,*) g_c=$g_x ;; esac
				case ,${g_r%%:*}, in *,pids,*) g_p=$g_x ;; esac
				;;
			esac
		done
	} 2>/dev/null <"${corral_proc:-/proc}/self/cgroup"
	if [ -n "$g_m" ]; then
		# cgroup v1 holds the memory controller, so v2 cannot have it.
		cgv1dir memory "$g_m" && g_bm=$v_b && cgv1dir cpu "$g_c" && g_bc=$v_b && cgv1dir pids "$g_p" && g_bp=$v_b || return 1
		g_v=v1
		return 0
	fi
	if [ -n "$g_1" ] && [ -z "$g_2" ]; then
		g_why="the memory controller is not mounted"
		return 1
	fi
	for g_mt in "$g_root" "$g_root/unified"; do
		[ -f "$g_mt/cgroup.controllers" ] || continue
		g_x=${g_mt}${g_2%/}
		[ -d "$g_x" ] || g_x=$g_mt
		# The shell's own cgroup holds processes, so (unless it is the
		# root) it hands no controller down: look above it.
		[ "$g_x" = "$g_mt" ] || g_x=${g_x%/*}
		while :; do
			g_s=
			read -r g_s 2>/dev/null <"$g_x/cgroup.subtree_control"
			if cgall "$g_s" && [ -w "$g_x" ] && [ -w "$g_x/cgroup.procs" ]; then
				g_b2=$g_x/corral-sh g_v=v2
				return 0
			fi
			[ "$g_x" = "$g_mt" ] && break
			g_x=${g_x%/*}
		done
		g_why="no cgroup v2 above this shell's hands memory, cpu and pids down and is writable by this user; delegate one"
		return 1
	done
	g_why="no cgroup hierarchy with the memory controller is mounted"
	return 1
}

# cgall LIST tells whether the controller LIST (cgroup.subtree_control's
# words) has memory, cpu and pids.
cgall() {
	case " $1 " in *" memory "*) ;; *) return 1 ;; esac
	case " $1 " in *" cpu "*) ;; *) return 1 ;; esac
	case " $1 " in *" pids "*) ;; *) return 1 ;; esac
}

# cgv1dir CONTROLLER PATH sets v_b to the base for CONTROLLER's limit
# cgroups in the v1 hierarchy: corral-sh under PATH, the shell's own cgroup there. A
# PATH that is not under the mount is a container's view, in which the
# mount's root is the shell's own cgroup. Sets g_why and fails when the
# controller is missing or not writable.
cgv1dir() {
	if [ -z "$2" ]; then
		g_why="the cgroup v1 $1 controller is not mounted"
		return 1
	fi
	for v_m in "$g_root/$1" "$g_root/cpu,cpuacct" "$g_root/cpuacct,cpu"; do
		[ -d "$v_m" ] && break
		[ "$1" = cpu ] || break
	done
	v_x=${v_m}${2%/}
	[ -d "$v_x" ] || v_x=$v_m
	if ! [ -d "$v_x" ]; then
		g_why="the cgroup v1 $1 controller is not mounted at $g_root/$1"
		return 1
	fi
	if ! [ -w "$v_x" ]; then
		g_why="cgroup $v_x is not writable by this user"
		return 1
	fi
	v_b=$v_x/corral-sh
}

# corral_cgprobe prints "v1 MEMDIR CPUDIR PIDSDIR", "v2 DIR" (the bases of
# the limit cgroups) or "none WHY".
corral_cgprobe() {
	if ! cgfind; then
		echo "none $g_why"
		return 0
	fi
	if [ "$g_v" = v1 ]; then echo "v1 $g_bm $g_bc $g_bp"; else echo "v2 $g_b2"; fi
}

# cgmake DIR MEM QUOTA PIDS makes DIR's limit cgroups (named after DIR's
# last part) and writes its limits: MEM bytes, QUOTA microseconds of CPU
# per 100 ms, PIDS processes, 0 meaning none. It lists them in DIR/cg, one
# a line, for the command's shell to join, and records in DIR/oom the
# memory cgroup's OOM count (see oommark in oom.sh): the limit's OOM kill
# is then reported as one. It prints a refusal word and fails when a step
# fails, leaving nothing behind.
cgmake() {
	if ! cgfind; then
		echo "nolimits $g_why"
		return 1
	fi
	m_d=$1 m_id=${1##*/} m_why=
	: >"$m_d/cg"
	if [ "$g_v" = v1 ]; then
		m_oom=$g_bm/$m_id/memory.oom_control
		cgone "$m_d" "$g_bm" &&
			cgset "$g_bm/$m_id" memory.limit_in_bytes "$2" &&
			{ [ "$2" = 0 ] || cgopt "$g_bm/$m_id" memory.memsw.limit_in_bytes "$2"; } &&
			cgone "$m_d" "$g_bc" &&
			{ [ "$3" = 0 ] || { cgset "$g_bc/$m_id" cpu.cfs_period_us 100000 && cgset "$g_bc/$m_id" cpu.cfs_quota_us "$3"; }; } &&
			cgone "$m_d" "$g_bp" &&
			cgset "$g_bp/$m_id" pids.max "$4"
	else
		m_oom=$g_b2/$m_id/memory.events
		# The base holds no process, so it may hand the controllers
		# down to the limit cgroups.
		cgone "$m_d" "$g_b2" "+memory +cpu +pids" &&
			cgset "$g_b2/$m_id" memory.max "$2" &&
			{ [ "$2" = 0 ] || { cgopt "$g_b2/$m_id" memory.swap.max 0 && cgopt "$g_b2/$m_id" memory.oom.group 1; }; } &&
			{ [ "$3" = 0 ] || cgset "$g_b2/$m_id" cpu.max "$3 100000"; } &&
			cgset "$g_b2/$m_id" pids.max "$4"
	fi || {
		echo "nolimits $m_why"
		cgdrop "$m_d"
		return 1
	}
	# shellcheck disable=SC2154 # o_n is set by oomcount (proc.sh)
	if oomcount "$m_oom"; then echo "$o_n $m_oom" >"$m_d/oom"; fi
	return 0
}

# cgone DIR BASE [SUBTREE] makes BASE when missing (writing SUBTREE into
# its cgroup.subtree_control, for v2) and the limit cgroup BASE/ID, ID
# being DIR's last part, and lists that in DIR/cg. A base is removed once
# empty (see cgdrop), so it may go between the two: then once more.
cgone() {
	# shellcheck disable=SC2034 # c_try only counts
	for c_try in 1 2; do
		if ! [ -d "$2" ] && ! mkdir "$2" 2>/dev/null && ! [ -d "$2" ]; then
			m_why="cannot make cgroup $2"
			return 1
		fi
		if [ -n "$3" ]; then
			c_s=
			read -r c_s 2>/dev/null <"$2/cgroup.subtree_control"
			cgall "$c_s" || echo "$3" >"$2/cgroup.subtree_control" 2>/dev/null || {
				m_why="cannot hand memory, cpu and pids down in $2"
				return 1
			}
		fi
		if mkdir "$2/${1##*/}" 2>/dev/null; then
			echo "$2/${1##*/}" >>"$1/cg"
			return 0
		fi
	done
	m_why="cannot make cgroup $2/${1##*/}"
	return 1
}

# cgset CG FILE VALUE writes VALUE into CG/FILE, skipping a value of 0 (no
# limit: the file's default stays).
cgset() {
	[ "$3" = 0 ] && return 0
	echo "$3" >"$1/$2" 2>/dev/null && return 0
	m_why="cannot set $2 to $3 in $1"
	return 1
}

# cgopt CG FILE VALUE writes VALUE into CG/FILE if the kernel has that file
# (it lacks the swap files when swap accounting is off).
cgopt() {
	[ -f "$1/$2" ] || return 0
	echo "$3" >"$1/$2" 2>/dev/null && return 0
	m_why="cannot set $2 to $3 in $1"
	return 1
}

# cgprocs DIR prints the PIDs in DIR's first limit cgroup: the whole tree,
# whatever it did to its environment or session.
cgprocs() {
	[ -f "$1/cg" ] || return 0
	c_g=
	read -r c_g <"$1/cg" || return 0
	[ -n "$c_g" ] || return 0
	{ while read -r c_q; do echo "$c_q"; done; } 2>/dev/null <"$c_g/cgroup.procs"
	return 0
}
