# shellcheck shell=sh disable=SC1007 # NAME= (no value) is how these files empty a variable
# Terminals: the probe for what can give a command one, and Resize. The
# command's side is ptycmd.sh (outside the terminal) and ptyterm.sh
# (inside it).
#
# A process on a terminal is a wrapped process like any other (launch.sh,
# parent.sh) whose command is ptycmd.sh instead of Shell -c Command: the
# recorded command, leader of its own session and group, is util-linux
# script (or, without it, python3 running pty.py), which makes a
# pseudo-terminal, relays stdin (the FIFO) into it and its output into the
# log, and runs ptyterm.sh on it as the leader of the terminal's session;
# ptyterm.sh sets the size, records the terminal's path for Resize and
# execs Shell -c Command. So the group signal reaches script, and the
# CORRAL_TREE scan everything on the terminal.

# corral_ptyprobe prints what gives a command a terminal in this sandbox:
# "script PATH" (util-linux script, which has -e: the command's exit
# code is script's), else "python3 PATH" (a python3 with the pty module,
# for pty.py), else "none WHY" (also when there is no /dev/ptmx to make a
# terminal with). Busybox's script applet has no -e, so it
# does not count. The engine asks once per Env.
corral_ptyprobe() {
	set -f
	if ! [ -c /dev/ptmx ]; then echo "none no /dev/ptmx in the sandbox"; return 0; fi
	if findprog script; then
		# shellcheck disable=SC2154 # fp is set by findprog (launch.sh)
		case $("$fp" -V 2>&1) in
		*util-linux*) echo "script $fp"; return 0 ;;
		esac
		pp_why="$fp is not util-linux script"
	else
		pp_why="no script in PATH"
	fi
	if findprog python3; then
		if "$fp" -I -c 'import pty, select, termios' >/dev/null 2>&1; then echo "python3 $fp"; return 0; fi
		pp_why="$pp_why; $fp has no pty module"
	else
		pp_why="$pp_why; no python3 in PATH"
	fi
	echo "none $pp_why"
	return 0
}

# corral_resize DIR CPID CSTART ROWS COLS sets the window size of the
# terminal of DIR's process, whose path ptyterm.sh wrote to DIR/tty, while
# the command (script, which holds the terminal open, so the path names
# that terminal) still runs. The kernel then sends SIGWINCH to the
# terminal's foreground process group, as a terminal emulator's resize
# does. Output: ok, exited, or "failed WHY". A resize right after the start
# may come before ptyterm.sh wrote the path: it is waited for, briefly.
corral_resize() {
	d=$1 n=0
	while :; do
		# shellcheck disable=SC2154 # p_* are set by pstat (proc.sh)
		if [ -f "$d/exit" ] || ! pstat "$2" || [ "$p_start" != "$3" ] || [ "$p_state" = Z ]; then echo exited; return 0; fi
		# A line without its newline is one being written.
		if [ -f "$d/tty" ] && read -r t <"$d/tty"; then break; fi
		t= n=$((n+1))
		if [ $n -gt 2000 ]; then echo "failed the terminal's path was never recorded"; return 0; fi
		if [ $n -gt 200 ]; then sleep 0.005 2>/dev/null || sleep 1; fi
	done
	case $t in /dev/*) ;; *) echo "failed no terminal: $t"; return 0 ;; esac
	if r_e=$(stty rows "$4" cols "$5" <"$t" 2>&1); then echo ok; else echo "failed $r_e"; fi
	return 0
}
