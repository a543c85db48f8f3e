# shellcheck shell=sh
# Write's script, the one that is not a call of the library: it copies its
# stdin into the stdin FIFO of DIR ($1). The FIFO is opened read-write so
# the open never blocks, even when nobody reads it any more.
d=$1
if [ -f "$d/exit" ]; then echo exited; exit 0; fi
if [ -f "$d/stdin-closed" ] || ! [ -p "$d/in" ]; then echo closed; exit 0; fi
cat 1<>"$d/in" && echo ok
