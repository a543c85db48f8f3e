#!/usr/bin/env bash
# build-test-image.sh builds the image corral's Docker tests run in,
# corral-test-busybox:latest, without any registry: a root filesystem made
# from Debian's busybox-static, imported with `docker import`, plus
# util-linux `script` (with the shared libraries and the loader ldd lists)
# so that commands can get a terminal (env/nohup's PTY support needs it:
# busybox's script applet has no -e, and Debian's build has none at all).
#
# Idempotent and quick: the image carries a label with a hash of this recipe
# (this script, the busybox binary, and script with its libraries); when an
# image with the same hash exists, nothing is done. Concurrent runs are serialised with flock.
#
# Usage: scripts/build-test-image.sh [--force]
# Environment: CORRAL_TEST_IMAGE overrides the image name.
set -euo pipefail

image="${CORRAL_TEST_IMAGE:-corral-test-busybox:latest}"
label="dev.corral.test-image.recipe"
force=0
[[ "${1:-}" == "--force" ]] && force=1

log() { printf 'build-test-image: %s\n' "$*" >&2; }

if ! command -v docker >/dev/null 2>&1; then
	log "docker CLI not found; install docker.io (apt-get install -y docker.io)"
	exit 1
fi
if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
	log "the Docker engine is not reachable (DOCKER_HOST=${DOCKER_HOST:-unset}); start it (e.g. dockerd or systemctl start docker)"
	exit 1
fi

# is_static FILE: the rootfs has no libc, so only a static busybox works.
is_static() { [[ -x "$1" ]] && (ldd "$1" 2>&1 || true) | grep -q 'not a dynamic executable'; }

busybox_bin=""
for candidate in /bin/busybox /usr/bin/busybox; do
	if is_static "$candidate"; then
		busybox_bin="$candidate"
		break
	fi
done
if [[ -z "$busybox_bin" ]]; then
	log "installing busybox-static (needs root and Debian's package archive)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 install -y busybox-static >/dev/null ||
		{ apt-get -o DPkg::Lock::Timeout=600 update >/dev/null && apt-get -o DPkg::Lock::Timeout=600 install -y busybox-static >/dev/null; }
	busybox_bin=/bin/busybox
fi

# util-linux script and what it loads: each absolute path ldd prints (the
# libraries and the loader).
script_bin="$(command -v script || true)"
if [[ -z "$script_bin" ]] || ! "$script_bin" -V 2>&1 | grep -q util-linux; then
	log "util-linux script not found (Debian: apt-get install bsdutils)"
	exit 1
fi
script_bin="$(readlink -f "$script_bin")"
mapfile -t script_libs < <(ldd "$script_bin" | grep -o '/[^ ]*' | sort -u)

script_path="$(readlink -f "${BASH_SOURCE[0]}")"
recipe_files=("$script_path" "$busybox_bin" "$script_bin")
for lib in "${script_libs[@]}"; do recipe_files+=("$(readlink -f "$lib")"); done
recipe="$(cat "${recipe_files[@]}" | sha256sum | cut -c1-32)"

lock_dir="${TMPDIR:-/tmp}"
exec 9>"$lock_dir/corral-build-test-image.lock"
flock 9

current="$(docker image inspect --format "{{index .Config.Labels \"$label\"}}" "$image" 2>/dev/null || true)"
if [[ $force -eq 0 && "$current" == "$recipe" ]]; then
	log "$image is up to date (recipe $recipe)"
	exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/corral-rootfs.XXXXXX")"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,home/user,proc,sys,dev,workspace,var/tmp}
chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp"
chmod 0700 "$rootfs/root"
cp "$busybox_bin" "$rootfs/bin/busybox"
# Install the applet links inside a chroot so they point at /bin/busybox
# (not at the host's path) and land in their canonical directories.
chroot "$rootfs" /bin/busybox --install -s
# Debian's busybox-static has no nohup applet; this is what nohup does when
# its output is already redirected (as the wrapped-process engine does).
if [[ ! -e "$rootfs/usr/bin/nohup" ]]; then
	printf '#!/bin/sh\n# nohup shim: ignore SIGHUP, then run the command.\ntrap "" HUP\nexec "$@"\n' >"$rootfs/usr/bin/nohup"
	chmod 0755 "$rootfs/usr/bin/nohup"
fi
# util-linux script at /usr/bin/script, its libraries and loader at the
# paths ldd names (a path that is a symlink on the host as the file it
# resolves to: the rootfs has no other copy to point at).
install -D -m 0755 "$script_bin" "$rootfs/usr/bin/script"
for lib in "${script_libs[@]}"; do
	install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
done
for applet in sh ps sleep setsid nohup kill stty wc head tail yes cat mkfifo mv id env dd tty script; do
	if ! chroot "$rootfs" /bin/sh -c "command -v $applet" >/dev/null; then
		log "busybox lacks applet $applet"
		exit 1
	fi
done
cat >"$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$rootfs/etc/group" <<'GROUP'
root:x:0:
user:x:1000:
nogroup:x:65534:
GROUP
chown 1000:1000 "$rootfs/home/user"
chmod 0777 "$rootfs/workspace"

tar --numeric-owner -C "$rootfs" -c . |
	docker import \
		--change "LABEL $label=$recipe" \
		--change 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["/bin/sh"]' \
		- "$image" >/dev/null
log "built $image (recipe $recipe)"
