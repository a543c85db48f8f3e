# shellcheck shell=sh
# Run by script (see ptycmd.sh) as $SHELL -c THIS (by pty.py as
# $CORRAL_PTY_SH -c THIS) on the new terminal, as
# the leader of its session: the terminal is its controlling terminal,
# stdin, stdout and stderr, and its process group is the terminal's
# foreground group (a shell without job control keeps its children in
# it), which gets SIGWINCH on a resize. It sets the window size, writes
# the terminal's path to DIR/tty for corral_resize (pty.sh), restores
# SHELL, drops the CORRAL_PTY_* variables and execs Shell -c Command.
stty rows "$CORRAL_PTY_ROWS" cols "$CORRAL_PTY_COLS" 2>/dev/null
tty >"$CORRAL_PTY_DIR/tty" 2>/dev/null
c=$CORRAL_PTY_CMD s=$CORRAL_PTY_SH
if [ -n "$CORRAL_PTY_HASSHELL" ]; then SHELL=$CORRAL_PTY_OSHELL; else unset SHELL; fi
unset CORRAL_PTY_KIND CORRAL_PTY_PY CORRAL_PTY_TOOL CORRAL_PTY_SH CORRAL_PTY_TERM CORRAL_PTY_CMD CORRAL_PTY_ROWS CORRAL_PTY_COLS CORRAL_PTY_DIR CORRAL_PTY_OSHELL CORRAL_PTY_HASSHELL
exec "$s" -c "$c"
