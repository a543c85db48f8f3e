#!/usr/bin/env bash
# build.sh builds what the single-node test cluster runs that Debian does
# not package: kube-apiserver, kube-scheduler, kubelet and kubectl from the
# module k8s.io/kubernetes, the pause program, and two images (pause, and
# the test image: busybox-static) as docker-archive tarballs, so that no
# registry is ever needed. Only the Go module proxy is used.
#
# Everything lands in a cache by version,
#   ${CORRAL_K8S_CACHE:-$HOME/.cache/corral/k8s}/VERSION/{bin,images}/,
# and a complete cache entry is reused at no cost: the binaries are keyed by
# VERSION alone (they depend on nothing else), the pause program and images
# by a hash of their inputs (this script and the host's busybox and script),
# so editing the image recipe does not rebuild Kubernetes.
#
# Usage: scripts/k8s/build.sh [VERSION]   (default v1.34.4)
# Prints the cache directory on stdout; progress goes to stderr.
set -euo pipefail

version="${1:-${CORRAL_K8S_VERSION:-v1.34.4}}"
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || {
	echo "build.sh: VERSION must look like v1.34.4, not '$version'" >&2
	exit 2
}
minor="${BASH_REMATCH[1]}"
patch="${BASH_REMATCH[2]}"
cache="${CORRAL_K8S_CACHE:-$HOME/.cache/corral/k8s}/$version"
bin="$cache/bin"
images="$cache/images"
GO="${GO:-go}"

log() { printf 'k8s build: %s\n' "$*" >&2; }

mkdir -p "$cache"
# Two builds of one version (CI's background build and a make k8s-up) would
# race on the same files: the second waits and then finds a cache hit.
exec 8>"$cache/.lock"
flock 8

work="$(mktemp -d "${TMPDIR:-/tmp}/corral-k8s-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

kube_bins=(kube-apiserver kube-scheduler kubelet kubectl)

build_kubernetes() {
	local started=$SECONDS gomod
	log "building ${kube_bins[*]} $version from the module proxy (cold: about 6-7 min on 2 cores)"
	gomod="$("$GO" mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
	[[ -f $gomod ]] || {
		log "go mod download k8s.io/kubernetes@$version gave no go.mod"
		exit 1
	}
	local mod="$work/kube"
	mkdir -p "$mod"
	# go install refuses k8s.io/kubernetes (its go.mod has replace
	# directives); a module of our own that requires it, with its staging
	# modules replaced by their published v0.MINOR.PATCH and its go and
	# godebug lines, builds the same code.
	{
		echo "module corral.local/k8sbuild"
		echo
		grep -E '^(go|godebug) ' "$gomod"
		echo
		echo "require k8s.io/kubernetes $version"
		echo
		echo "replace ("
		sed -n '/^replace (/,/^)/p' "$gomod" |
			sed -n "s|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*|\t\1 => \1 v0.$minor.$patch|p"
		echo ")"
	} >"$mod/go.mod"
	{
		echo "//go:build tools"
		echo
		echo "// Package tools makes go mod tidy keep the commands' dependencies."
		echo "package tools"
		echo
		echo "import ("
		for b in "${kube_bins[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$b\""; done
		echo ")"
	} >"$mod/tools.go"
	(cd "$mod" && GOFLAGS=-mod=mod "$GO" mod tidy >&2)
	log "go mod tidy: $((SECONDS - started)) s"
	# Without -X every binary reports v0.0.0-master, and the kubelet's
	# version is what the API server's skew checks read.
	local pkg=k8s.io/component-base/version
	local ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	local pkgs=()
	for b in "${kube_bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
	mkdir -p "$work/out"
	(cd "$mod" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$ldflags" -o "$work/out/" "${pkgs[@]}")
	mkdir -p "$bin"
	for b in "${kube_bins[@]}"; do mv -f "$work/out/$b" "$bin/$b"; done
	echo "$version" >"$bin/.kubernetes-complete"
	log "built ${kube_bins[*]} in $((SECONDS - started)) s"
}

# image_inputs finds what the images are made of (busybox-static, util-linux
# script and its libraries) and hashes it with this script into recipe. It
# runs after the Kubernetes build, so that CI can start that build before
# its apt step has installed busybox-static.
image_inputs() {
	is_static() { [[ -x "$1" ]] && (ldd "$1" 2>&1 || true) | grep -q 'not a dynamic executable'; }

	busybox_bin=""
	for candidate in /bin/busybox /usr/bin/busybox; do
		if is_static "$candidate"; then
			busybox_bin="$candidate"
			break
		fi
	done
	[[ -n $busybox_bin ]] || {
		log "missing: a static busybox (Debian: apt-get install busybox-static)"
		exit 1
	}
	script_bin="$(readlink -f "$(command -v script || echo /nonexistent)")"
	[[ -x $script_bin ]] || {
		log "missing: util-linux script (Debian: apt-get install bsdutils)"
		exit 1
	}
	mapfile -t script_libs < <(ldd "$script_bin" | grep -o '/[^ ]*' | sort -u)
	recipe_files=("$(readlink -f "${BASH_SOURCE[0]}")" "$busybox_bin" "$script_bin")
	for lib in "${script_libs[@]}"; do recipe_files+=("$(readlink -f "$lib")"); done
	recipe="$(cat "${recipe_files[@]}" | sha256sum | cut -c1-32)"
}

# The pause container is PID 1 of every pod (shareProcessNamespace: true):
# it must reap orphans or they stay zombies, and end on TERM or INT.
build_pause() {
	mkdir -p "$work/pause"
	cat >"$work/pause/main.go" <<'GO'
// Command pause is the sandbox's PID 1: it reaps every child that exits
// and ends on SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
GO
	printf 'module pause\n\ngo 1.22\n' >"$work/pause/go.mod"
	mkdir -p "$bin"
	(cd "$work/pause" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$GO" build -trimpath -ldflags "-s -w" -o "$bin/pause" .)
}

# docker_archive ROOTFS NAME:TAG OUT CMD_JSON: a docker-archive tarball
# (manifest.json, the config, one layer) that `ctr images import` reads.
docker_archive() {
	local rootfs=$1 ref=$2 out=$3 cmd=$4 d layer_sha config config_sha
	d="$(mktemp -d "$work/img.XXXXXX")"
	tar --numeric-owner --sort=name --mtime=@0 -C "$rootfs" -cf "$d/layer.tar" .
	layer_sha="$(sha256sum "$d/layer.tar" | cut -d' ' -f1)"
	config="{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/usr/sbin:/usr/bin:/sbin:/bin\"],\"Cmd\":$cmd,\"Labels\":{\"dev.corral.test\":\"true\",\"dev.corral.test-image.recipe\":\"$recipe\"}},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer_sha\"]}}"
	printf '%s' "$config" >"$d/config.json"
	config_sha="$(sha256sum "$d/config.json" | cut -d' ' -f1)"
	mv "$d/config.json" "$d/$config_sha.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$config_sha" "$ref" >"$d/manifest.json"
	tar --numeric-owner --sort=name --mtime=@0 -C "$d" -cf "$out.tmp" manifest.json "$config_sha.json" layer.tar
	mv -f "$out.tmp" "$out"
}

build_images() {
	local r="$work/pause-rootfs"
	mkdir -p "$r" "$images"
	cp "$bin/pause" "$r/pause"
	docker_archive "$r" corral-k8s/pause:1 "$images/pause.tar" '["/pause"]'

	# The test image: like scripts/build-test-image.sh's for Docker
	# (busybox-static with its applets, a nohup shim, util-linux script for
	# PTYs), so that the same tests can run in a pod.
	r="$work/test-rootfs"
	mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,home/user,proc,sys,dev,workspace,var/tmp}
	chmod 1777 "$r/tmp" "$r/var/tmp"
	chmod 0700 "$r/root"
	cp "$busybox_bin" "$r/bin/busybox"
	chroot "$r" /bin/busybox --install -s
	if [[ ! -e "$r/usr/bin/nohup" ]]; then
		printf '#!/bin/sh\n# nohup shim: ignore SIGHUP, then run the command.\ntrap "" HUP\nexec "$@"\n' >"$r/usr/bin/nohup"
		chmod 0755 "$r/usr/bin/nohup"
	fi
	install -D -m 0755 "$script_bin" "$r/usr/bin/script"
	for lib in "${script_libs[@]}"; do install -D -m 0755 "$(readlink -f "$lib")" "$r$lib"; done
	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'user:x:1000:1000:user:/home/user:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$r/etc/passwd"
	printf '%s\n' 'root:x:0:' 'user:x:1000:' 'nogroup:x:65534:' >"$r/etc/group"
	chown 1000:1000 "$r/home/user"
	chmod 0777 "$r/workspace"
	docker_archive "$r" corral-test:k8s "$images/test.tar" '["/bin/sh"]'
	echo "$recipe" >"$images/.recipe"
	log "built images pause.tar and test.tar (recipe $recipe)"
}

if [[ "$(cat "$bin/.kubernetes-complete" 2>/dev/null)" != "$version" ]]; then
	build_kubernetes
fi
image_inputs
if [[ "$(cat "$images/.recipe" 2>/dev/null)" != "$recipe" || ! -x $bin/pause ]]; then
	build_pause
	build_images
fi
echo "$cache"
