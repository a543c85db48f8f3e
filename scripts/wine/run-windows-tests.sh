#!/usr/bin/env bash
# run-windows-tests.sh PKG[=REGEXP]...: cross-compiles the tests of each Go
# package for windows/amd64 and runs them under Wine (only the tests that
# REGEXP matches, when given: a package whose other tests need a POSIX
# system), in a private Wine prefix
# made for this run and removed after it. `make wine-test` runs it; CI
# (.ci/run) installs Wine for it and sets CORRAL_REQUIRE_WINE=1. A package
# fails when a test fails or when its tests leave a process running (a
# tree member that survived). Each phase prints its time.
#
# Needs wine64 (Debian: apt-get install --no-install-recommends wine64) and
# binutils-mingw-w64-x86-64 (for the bcryptprimitives.dll stand-in that Go
# >= 1.24 needs under Wine 8.0: see bcryptprimitives.s). Without them the
# run is skipped, or fails when CORRAL_REQUIRE_WINE=1.
#
# Environment:
#   CORRAL_REQUIRE_WINE=1     fail instead of skipping when Wine is missing
#   CORRAL_WINE_RUN=REGEXP    passed as -test.run
#   CORRAL_WINE_TESTFLAGS=..  more flags for every test binary (split on
#                             spaces), e.g. "-test.count=3 -test.failfast"
#   CORRAL_WINE_TIMEOUT=SECS  -test.timeout of each binary (default 120);
#                             Wine itself is killed a minute later
#   CORRAL_WINE_KEEP=1        keep the prefix and binaries, to debug (the
#                             Wine processes are still ended)
#   WINE64=PATH               the wine64 to use (default: Debian's
#                             /usr/lib/wine/wine64, else wine64 on PATH)
#   GO                        the go command (default go)
#
# Under Wine, Go's os.RemoveAll cannot delete a directory that has files
# (Wine 8.0 lacks FileDispositionInformationEx), so t.TempDir's cleanup
# fails: Windows tests use testTempDir (env/local/tempdir_test.go). The Wine
# processes all end with the prefix's wineserver; WINEDEBUG=-all hides
# Wine's harmless messages about the missing display.
set -euo pipefail
shopt -s extglob

if [[ $# -eq 0 ]]; then
	echo "usage: $0 PKG... (e.g. ./env/local)" >&2
	exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GO=${GO:-go}

skip() {
	if [[ ${CORRAL_REQUIRE_WINE:-} == 1 ]]; then
		echo "wine-test: FAIL: $* (CORRAL_REQUIRE_WINE=1)" >&2
		exit 1
	fi
	echo "wine-test: SKIP: $*; the Windows tests did not run"
	exit 0
}

# Debian puts wine64 under /usr/lib/wine and not on PATH; other systems
# have it on PATH. wineserver sits beside it.
wine=
if [[ -n ${WINE64:-} ]]; then
	[[ -x $WINE64 ]] || skip "WINE64=$WINE64 is not an executable; unset it or point it at wine64"
	wine=$WINE64
fi
for w in /usr/lib/wine/wine64 "$(command -v wine64 || true)"; do
	[[ -z $wine && -n $w && -x $w ]] && wine=$w
done
[[ -n $wine ]] || skip "wine64 not found (Debian: apt-get install --no-install-recommends wine64)"
wineserver=
for w in "$(dirname "$wine")/wineserver" "$(command -v wineserver || true)"; do
	[[ -n $w && -x $w ]] && { wineserver=$w; break; }
done
[[ -n $wineserver ]] || skip "wineserver not found beside $wine; reinstall wine64"
for t in as dlltool ld; do
	command -v "x86_64-w64-mingw32-$t" >/dev/null ||
		skip "x86_64-w64-mingw32-$t not found (Debian: apt-get install binutils-mingw-w64-x86-64)"
done

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
t_all=$(now)

# The prefix takes about 700 MB: under /tmp (or TMPDIR), removed at exit.
root=$(mktemp -d "${TMPDIR:-/tmp}/corral-wine.XXXXXX")
export WINEPREFIX="$root/prefix" WINEDEBUG=-all
# No Mono (mscoree) or Gecko (mshtml): nothing here needs them, and
# wineboot would otherwise look for them to install. No menu builder:
# it writes desktop menu entries into the user's home.
export WINEDLLOVERRIDES="mscoree,mshtml=;winemenubuilder.exe=d"
# wine runs with a home of its own: Wine links the prefix's user folders
# to the home's (Documents, Desktop...) and writes XDG files there. The go
# command keeps the real home (its build cache is there).
mkdir -p "$root/home"
winenv=(env -u XDG_CONFIG_HOME -u XDG_DATA_HOME -u XDG_CACHE_HOME "HOME=$root/home")
wine() { "${winenv[@]}" "$wine" "$@"; }
cleanup() {
	local rc=$?
	# Ends every process of this prefix (test binaries, their children,
	# Wine's services), then waits for the server to go.
	"$wineserver" -k 2>/dev/null || true
	"$wineserver" -w 2>/dev/null || true
	if [[ ${CORRAL_WINE_KEEP:-} == 1 ]]; then
		echo "wine-test: kept $root (CORRAL_WINE_KEEP=1); remove it with rm -rf"
	else
		rm -rf "$root" || echo "wine-test: could not remove $root; remove it by hand" >&2
	fi
	echo "wine-test: total $(since "$t_all")"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "wine-test: $(wine --version) in $WINEPREFIX"
t=$(now)
# wineboot prints a line about syswow64 (no 32-bit Wine: not needed).
wine wineboot --init >"$root/wineboot.log" 2>&1 || {
	cat "$root/wineboot.log" >&2
	echo "wine-test: FAIL: wineboot --init failed (log above)" >&2
	exit 1
}
sys32="$WINEPREFIX/drive_c/windows/system32"
[[ -d $sys32 ]] || { echo "wine-test: FAIL: wineboot made no $sys32" >&2; exit 1; }
echo "wine-test: wineboot $(since "$t")"

t=$(now)
bash "$here/build-bcryptprimitives.sh" "$root/dll"
cp "$root/dll/bcryptprimitives.dll" "$sys32/"
echo "wine-test: bcryptprimitives.dll $(since "$t")"

# Each package's test binary, with its directory: go test runs a test
# binary in its package's directory, and so does this (Wine sees the
# Linux file system as drive Z:).
t=$(now)
mkdir -p "$root/bin"
names=() dirs=() exes=() runs=()
for arg in "$@"; do
	pkg=${arg%%=*} run=
	[[ $arg == *=* ]] && run=${arg#*=}
	dir=$(GOOS=windows GOARCH=amd64 "$GO" list -f '{{.Dir}}' "$pkg")
	ip=$(GOOS=windows GOARCH=amd64 "$GO" list -f '{{.ImportPath}}' "$pkg")
	exe="$root/bin/$(printf '%s' "$ip" | tr '/.' '__').test.exe"
	GOOS=windows GOARCH=amd64 "$GO" test -c -o "$exe" "$pkg"
	if [[ ! -f $exe ]]; then
		echo "wine-test: $ip has no tests for windows; nothing to run"
		continue
	fi
	names+=("$ip") dirs+=("$dir") exes+=("$exe") runs+=("$run")
done
echo "wine-test: cross-compile $(since "$t")"

secs=${CORRAL_WINE_TIMEOUT:-120}
[[ $secs =~ ^[0-9]+$ ]] || { echo "wine-test: CORRAL_WINE_TIMEOUT=$secs: give whole seconds, e.g. 120" >&2; exit 2; }
flags=(-test.v "-test.timeout=${secs}s")
[[ -n ${CORRAL_WINE_RUN:-} ]] && flags+=("-test.run=$CORRAL_WINE_RUN")
# shellcheck disable=SC2206 # split on spaces on purpose: a list of flags
[[ -n ${CORRAL_WINE_TESTFLAGS:-} ]] && flags+=(${CORRAL_WINE_TESTFLAGS})

# left_running prints "PID COMMAND LINE" of every process of this prefix
# that is not Wine's own: what a test binary left running (a tree member
# that survived a kill, a helper never waited for). Every process of the
# prefix carries WINEPREFIX in its Linux environment, even one started
# with an environment of its own, and shows its Windows command line.
left_running() {
	local dir cmd stat
	local -a a
	shopt -s nocasematch
	for dir in /proc/[0-9]*; do
		grep -qzxF "WINEPREFIX=$WINEPREFIX" "$dir/environ" 2>/dev/null || continue
		{ stat=$(<"$dir/stat"); } 2>/dev/null || continue
		[[ ${stat##*) } == Z* ]] && continue
		mapfile -d '' -t a 2>/dev/null <"$dir/cmdline" || continue
		cmd="${a[*]}"
		cmd="${cmd%"${cmd##*[! ]}"}" # Wine pads the command line with spaces
		case $cmd in
		*/wineserver* | "C:\\windows\\system32\\"@(services|explorer|winedevice|svchost|plugplay|rpcss|conhost|wineboot|rundll32).exe*) continue ;;
		esac
		printf '%s %s\n' "${dir#/proc/}" "${cmd:0:200}"
	done
	shopt -u nocasematch
}

failed=()
for i in "${!exes[@]}"; do
	t=$(now)
	pflags=("${flags[@]}")
	[[ -n ${runs[$i]} && -z ${CORRAL_WINE_RUN:-} ]] && pflags+=("-test.run=${runs[$i]}")
	echo "wine-test: running ${names[$i]} ${pflags[*]}"
	# timeout: a hung Wine must not hang CI when the test's own timeout
	# cannot fire (the test binary stuck inside Wine).
	if (cd "${dirs[$i]}" && timeout -k 10s "$((secs + 60))s" "${winenv[@]}" "$wine" "${exes[$i]}" "${pflags[@]}"); then
		echo "ok   ${names[$i]} (under Wine) $(since "$t")"
	else
		rc=$?
		echo "FAIL ${names[$i]} (under Wine, exit $rc) $(since "$t")"
		failed+=("${names[$i]}")
	fi
	# The tests leave nothing running: a survivor fails the run even when
	# no test looked for it. Processes being killed get 5 s to go.
	for _ in $(seq 10); do
		left=$(left_running)
		[[ -z $left ]] && break
		sleep 0.5
	done
	if [[ -n $left ]]; then
		echo "FAIL ${names[$i]} (under Wine): these processes are still running after the tests; find the test that starts them and end them where it ends:"
		printf '%s\n' "$left" | sed 's/^/  /'
		[[ " ${failed[*]} " == *" ${names[$i]} "* ]] || failed+=("${names[$i]}")
	fi
done

if ((${#failed[@]} > 0)); then
	echo "wine-test: FAIL: ${failed[*]}: the Windows tests failed under Wine (output above)" >&2
	exit 1
fi
echo "wine-test: ok (${#exes[@]} package(s))"
