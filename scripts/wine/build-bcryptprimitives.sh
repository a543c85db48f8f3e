#!/usr/bin/env bash
# build-bcryptprimitives.sh OUT_DIR: builds OUT_DIR/bcryptprimitives.dll,
# the stand-in that lets Go >= 1.24 Windows programs start under Wine 8.0
# (see bcryptprimitives.s), with Debian's binutils-mingw-w64-x86-64 alone:
# no C compiler and no mingw import libraries are needed. It takes about
# 0.1 s, so it is built for each run instead of being tracked (the
# repository tracks no binaries: scripts/check-tracked-files.sh).
set -euo pipefail

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUT_DIR" >&2
	exit 2
fi
out=$1
src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bcryptprimitives.s"
tools=x86_64-w64-mingw32
for t in as dlltool ld; do
	command -v "$tools-$t" >/dev/null || {
		echo "build-bcryptprimitives: $tools-$t not found; install binutils-mingw-w64-x86-64 (apt-get install binutils-mingw-w64-x86-64)" >&2
		exit 1
	}
done

mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/bcryptprimitives.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The import library for the one function used, made from a .def file
# because Debian's binutils package ships no mingw import libraries.
cat >"$work/advapi32.def" <<'DEF'
LIBRARY advapi32.dll
EXPORTS
SystemFunction036
DEF
# The export table: ProcessPrng alone, under the DLL's own name.
cat >"$work/bcryptprimitives.def" <<'DEF'
LIBRARY bcryptprimitives.dll
EXPORTS
ProcessPrng
DEF

"$tools-as" -o "$work/bcryptprimitives.o" "$src"
"$tools-dlltool" -d "$work/advapi32.def" -l "$work/libadvapi32.a"
# ld reads the .def file itself (dlltool's export object would carry the
# time of the build): with --no-insert-timestamp, the same source gives the
# same bytes.
"$tools-ld" --dll -e DllMain --subsystem windows --no-insert-timestamp -s \
	-o "$out/bcryptprimitives.dll" "$work/bcryptprimitives.def" "$work/bcryptprimitives.o" "$work/libadvapi32.a"
