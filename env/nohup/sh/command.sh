# shellcheck shell=sh
# The armed command (see spares.sh): a session leader that waits for the
# word run on fd 4 (the FIFO run, whose only writer is the wrapper), then
# runs Shell -c Command as the now-mode command does. Run as Shell -c
# COMMAND corral-command DIR SH, COMMAND being this file, which parent.sh
# gets in C.
d=$1 sh=$2
r=
read -r r <&4
exec 4<&-
# EOF: the wrapper died or ended the spare. Resume the parent so that it
# reaps this process and ends too.
[ "$r" = run ] || { kill -CONT "$PPID" 2>/dev/null; exit 125; }
# shellcheck disable=SC1091 # spec is written per process by corral_launch
. "$d/spec" || exit 125
cgjoin "$d" || exit 125
# shellcheck disable=SC2154 # si, wd, tag and cmd come from the spec file sourced above
if [ "$si" = 1 ]; then exec <"$d/in"; fi
if [ -n "$wd" ]; then cd "$wd" || exit 126; fi
# shellcheck disable=SC2154 # tag and cmd come from the spec file
if [ $# -eq 0 ]; then export CORRAL_TREE="$tag"; exec "$sh" -c "$cmd"; fi
exec env "$@" "CORRAL_TREE=$tag" "$sh" -c "$cmd"
