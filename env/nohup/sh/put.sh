# shellcheck shell=sh
# put BASE DIR: the script (sent without lib, like write.sh) that brings a
# command too long for argv into the sandbox (see env.InlineCommandMax):
# it makes DIR, a new process directory under BASE (both mode 0700), and
# copies its stdin, the command, into DIR/command, which the command's
# shell then sources (. DIR/command) instead of running sh -c COMMAND.
# corral_launch finds DIR made and uses it. It prints ok once the whole
# command is there.
base=$1 d=$2
umask 077
# shellcheck disable=SC2174 # only BASE itself must be private; its parents are the sandbox's
[ -d "$base" ] || mkdir -p -m 700 "$base" 2>/dev/null
# A retry (the transport failed mid-way) finds DIR made by the first try:
# its name is new and random, so it is ours.
mkdir -m 700 "$d" 2>/dev/null || [ -d "$d" ] || exit 1
cat >"$d/command" || exit 1
echo ok
