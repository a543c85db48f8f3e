# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# Finding processes by the tag their supervisor gave them (Spec.Tag), for a
# supervisor that died while a start was under way and so never had the
# process's identity to record (Env.Tagged in tagged.go).

# corral_tagged BASE TAG... prints one line for each process directory of
# BASE whose spec starts with stag='TAG' (see specFile in scripts.go):
#
#	T ID TAG CPID CSTART WPID WSTART TREETAG SI
#
# once the launch recorded the command's and the wrapper's identity, else
# "P ID TAG" (a launch still under way, or one that died before the command
# ran). grep picks the candidates in one fork; each is then checked on the
# spec's first line alone, so a command line that happens to hold the text
# cannot pass for the tag.
corral_tagged() {
	set -f
	t_b=$1
	shift
	[ $# -gt 0 ] || return 0
	# TAGs match [A-Za-z0-9_.-] (checked by Tagged): they split on
	# blanks and hold nothing a pattern or the shell would read.
	t_a=$*
	set --
	for t_t in $t_a; do set -- "$@" -e "stag='$t_t' "; done
	set +f
	# The glob lists the directories without a fork; a BASE with no
	# process yet leaves it unexpanded, which grep skips.
	grep -l -F "$@" "$t_b"/*/spec 2>/dev/null | while IFS= read -r t_s; do
		t_d=${t_s%/spec}
		t_i=${t_d##*/}
		[ "$t_d" = "$t_b/$t_i" ] || continue
		case $t_i in *[!0-9a-f]*) continue ;; ????????????????????????????????) ;; *) continue ;; esac
		t_l=
		read -r t_l <"$t_s" || [ -n "$t_l" ] || continue
		set -f
		for t_t in $t_a; do
			case $t_l in "stag='$t_t' si='"*) ;; *) continue ;; esac
			t_r=${t_l#"stag='$t_t' si='"}
			t_si=${t_r%%"'"*}
			t_r=${t_r#*"' tag='"}
			t_g=${t_r%%"'"*}
			t_c= t_cs= t_w= t_ws=
			[ -f "$t_d/pid" ] && read -r t_c t_cs <"$t_d/pid"
			[ -f "$t_d/wrapper" ] && read -r t_w t_ws <"$t_d/wrapper"
			if [ -n "$t_cs" ] && [ -n "$t_ws" ]; then
				echo "T $t_i $t_t $t_c $t_cs $t_w $t_ws $t_g $t_si"
			else
				echo "P $t_i $t_t"
			fi
			break
		done
		set +f
	done
	return 0
}
