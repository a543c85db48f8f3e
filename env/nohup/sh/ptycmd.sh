# shellcheck shell=sh
# The command of a process on a terminal (see pty.sh): run as Shell -c
# THIS by the command's side of parent.sh or command.sh, in place of Shell
# -c Command, so it is the session leader whose PID, start and exit status
# are recorded. It execs util-linux script, which stays that process:
#
#   script -q -e -f -c TERM /dev/null
#
# -q: no "Script started" lines; -e: script exits with the command's exit
# code (a command killed by signal N ends script with 128+N); -f: flush
# at once; /dev/null: no typescript, the output goes to stdout, the log.
# Stdin is the FIFO (or, without Spec.Stdin, the FIFO nobody writes to):
# script relays it into the terminal and, at its EOF (CloseStdin), types
# the terminal's EOF character.
#
# Where the sandbox has no util-linux script but python3, python3 runs
# pty.py instead, which does the same and ends as the command did (killed
# by the same signal, too).
#
# Script runs TERM with $SHELL -c: SHELL is set to the engine's shell
# here and restored by ptyterm.sh. Values come from the environment (the
# spec's KEY=VALUE words, see ptyEnviron in pty.go), never from this text:
#   CORRAL_PTY_KIND  script or python3 (from corral_ptyprobe)
#   CORRAL_PTY_TOOL  its path
#   CORRAL_PTY_PY    pty.py, for python3
#   CORRAL_PTY_SH    the engine's shell
#   CORRAL_PTY_TERM  ptyterm.sh, the script run on the terminal
#   CORRAL_PTY_CMD, CORRAL_PTY_ROWS, CORRAL_PTY_COLS, CORRAL_PTY_DIR: for
#   ptyterm.sh
CORRAL_PTY_OSHELL=${SHELL-} CORRAL_PTY_HASSHELL=${SHELL+1}
export CORRAL_PTY_OSHELL CORRAL_PTY_HASSHELL
SHELL=$CORRAL_PTY_SH
export SHELL
if [ "$CORRAL_PTY_KIND" = python3 ]; then exec "$CORRAL_PTY_TOOL" -I -c "$CORRAL_PTY_PY"; fi
exec "$CORRAL_PTY_TOOL" -q -e -f -c "$CORRAL_PTY_TERM" /dev/null
