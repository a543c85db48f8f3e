#!/usr/bin/env bash
# check-tracked-files.sh: fails when git tracks an executable binary (ELF,
# PE, Mach-O) or a file larger than 1 MB, unless it is named in ALLOWED
# below with the reason. Binaries belong to builds, never to the
# repository: one committed Windows executable once made up most of the
# pack. Run by `make test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

max=$((1024 * 1024))
# path<TAB>why: keep this list short.
ALLOWED=(
)

allowed() {
	local f=$1 entry
	for entry in "${ALLOWED[@]+"${ALLOWED[@]}"}"; do
		[[ ${entry%%$'\t'*} == "$f" ]] && return 0
	done
	return 1
}

bad=()
while IFS= read -r -d '' f; do
	[[ -f $f ]] || continue # deleted in the work tree, not yet committed
	allowed "$f" && continue
	size=$(stat -c %s -- "$f")
	if ((size > max)); then
		bad+=("$f: $size bytes, over 1 MB")
		continue
	fi
	magic=$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')
	case $magic in
	7f454c46) bad+=("$f: an ELF executable or object") ;;
	4d5a*) bad+=("$f: a Windows (PE) executable") ;;
	feedface | feedfacf | cefaedfe | cffaedfe | cafebabe) bad+=("$f: a Mach-O binary") ;;
	esac
done < <(git ls-files -z)

if ((${#bad[@]} > 0)); then
	echo "tracked-files: git tracks files that must not be in the repository:"
	printf '  %s\n' "${bad[@]}"
	echo "remove them (git rm --cached FILE) and ignore the build output in .gitignore;"
	echo "a file that must stay goes on ALLOWED in scripts/check-tracked-files.sh with its reason"
	exit 1
fi
echo "tracked-files: ok (no executable binaries, nothing over 1 MB)"
