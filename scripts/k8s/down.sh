#!/usr/bin/env bash
# down.sh tears down what up.sh started and leaves the machine as it was:
# pods' containers, mounts and network namespaces, the cgroups under the
# kubelet's cgroup root, the bridge, the iptables rules and chains the
# kubelet added, the sysctls it rewrote, the paths outside the state dir
# that did not exist before, every process, and the state dir itself. Then
# it checks that each is gone and fails, naming what is left, if not.
# Docker's containerd, containers and rules are never touched: only what
# carries the state dir's path, the cgroup root, the bridge or the
# kubelet's and CNI's chain names is.
#
# The binaries' cache (build.sh) is kept. CORRAL_K8S_KEEP_LOGS=DIR copies
# the components' logs to DIR before the state dir goes.
#
# Usage: scripts/k8s/down.sh
set -euo pipefail
script_name=down
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/k8s/lib.sh
source "$here/lib.sh"
started=$SECONDS

[[ $(id -u) -eq 0 ]] || {
	log "must run as root"
	exit 1
}
# up.sh calls down.sh while it holds the lock.
if [[ ${CORRAL_K8S_DOWN_LOCKED:-} != 1 ]]; then
	mkdir -p "${dir%/*}"
	exec 9>"$dir.lock"
	flock 9
fi

# stop NAME...: TERM to each at once, then KILL after 10 s to whichever is
# still there; returns when all are gone.
stop() {
	local name pid i k alive
	local -a pids=() names=()
	for name in "$@"; do
		pid="$(component_pid "$name")" || continue
		kill -TERM "$pid" 2>/dev/null || true
		pids+=("$pid")
		names+=("$name")
	done
	((${#pids[@]} > 0)) || return 0
	for ((i = 0; i < 150; i++)); do
		if ((i == 100)); then
			for k in "${!pids[@]}"; do
				[[ -d /proc/${pids[k]} ]] || continue
				log "${names[k]} (pid ${pids[k]}) did not end on TERM within 10 s; killing it"
				kill -KILL "${pids[k]}" 2>/dev/null || true
			done
		fi
		alive=0
		for pid in "${pids[@]}"; do [[ -d /proc/$pid ]] && alive=1; done
		((alive)) || return 0
		sleep 0.1
	done
}

# ours: the PIDs of the cluster's programs whose command line names the
# state dir (the components, and the shims of the second containerd, whose
# -address is in it; Docker's never are), and of every process in a cgroup
# under the cgroup root (the pods').
ours() {
	local p argv
	local -a a
	for p in /proc/[0-9]*; do
		mapfile -d '' -t a 2>/dev/null <"$p/cmdline" || continue
		((${#a[@]} > 0)) || continue
		case ${a[0]##*/} in
		etcd | containerd | containerd-shim* | kube-apiserver | kube-scheduler | kubelet) ;;
		*) continue ;;
		esac
		argv=" ${a[*]} "
		[[ $argv == *" $dir/"* || $argv == *"=$dir/"* ]] && echo "${p#/proc/}"
	done
	find /sys/fs/cgroup/*/"$cgroup_root" -name cgroup.procs -exec cat {} + 2>/dev/null || true
}

# our_mounts: mount points under the state dir, deepest first.
our_mounts() {
	awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | uniq
}

our_cgroups() {
	local m
	for m in /sys/fs/cgroup/*/"$cgroup_root"; do [[ -d $m ]] && echo "$m"; done
}

ctr_() { timeout 5 ctr --address "$sock" --namespace k8s.io "$@"; }

if [[ -d $dir ]]; then
	if [[ -n ${CORRAL_K8S_KEEP_LOGS:-} && -d $dir/logs ]]; then
		mkdir -p "$CORRAL_K8S_KEEP_LOGS"
		cp -r "$dir/logs/." "$CORRAL_K8S_KEEP_LOGS/"
	fi

	# Pods first, through the kubelet, so that the CNI plugins release
	# their addresses and the sandboxes' namespaces go the normal way.
	if component_pid kubelet >/dev/null && component_pid kube-apiserver >/dev/null &&
		kube delete pods --all --all-namespaces --grace-period=0 --force --wait=false >/dev/null 2>&1; then
		for ((i = 0; i < 100; i++)); do
			[[ -z "$(ctr_ tasks ls -q 2>/dev/null)" ]] && break
			sleep 0.2
		done
	fi
	stop kube-scheduler kubelet kube-apiserver
	# Whatever the kubelet did not end: killed and deleted through
	# containerd, which unmounts their root filesystems.
	if component_pid containerd >/dev/null; then
		for id in $(ctr_ tasks ls -q 2>/dev/null); do
			ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		for id in $(ctr_ tasks ls -q 2>/dev/null); do
			ctr_ tasks delete --force "$id" >/dev/null 2>&1 || true
		done
		for id in $(ctr_ containers ls -q 2>/dev/null); do
			ctr_ containers delete "$id" >/dev/null 2>&1 || true
		done
	fi
	stop containerd etcd

	# Anything left (a shim, a pod's process): killed, and waited for.
	for ((i = 0; i < 50; i++)); do
		mapfile -t left < <(ours | sort -u)
		((${#left[@]} == 0)) && break
		kill -KILL "${left[@]}" 2>/dev/null || true
		sleep 0.1
	done

	while read -r m; do
		[[ -n $m ]] || continue
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
	done < <(our_mounts)
fi

# cgroups, deepest first; a cgroup empties a moment after its last process.
for ((i = 0; i < 50; i++)); do
	mapfile -t cgs < <(our_cgroups)
	((${#cgs[@]} == 0)) && break
	for cg in "${cgs[@]}"; do
		find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	sleep 0.1
done

if ip link show "$bridge" >/dev/null 2>&1; then
	ip link delete "$bridge" || log "cannot delete the bridge $bridge"
fi

# iptables: rules added since up that name the kubelet's or CNI's chains
# or the bridge, then those chains; Docker's are never named so.
# undo_iptables CMD SAVED
undo_iptables() {
	local cmd=$1 saved=$2 table="" line rule
	command -v "$cmd-save" >/dev/null || return 0
	local -a chains=()
	while IFS= read -r line; do
		case $line in
		\**) table=${line#\*} ;;
		:KUBE-* | :CNI-*)
			grep -qxF -- "${line%% *}" <(cut -d' ' -f1 "$saved" 2>/dev/null) || chains+=("$table ${line%% *}")
			;;
		-A\ *KUBE-* | -A\ *CNI-* | -A\ *"$bridge"*)
			grep -qxF -- "$line" "$saved" 2>/dev/null && continue
			rule=${line#-A }
			eval "$cmd -w 5 -t \"\$table\" -D $rule" 2>/dev/null || log "cannot delete $cmd -t $table rule: $line"
			;;
		esac
	done < <("$cmd-save" 2>/dev/null)
	local c
	for c in "${chains[@]}"; do
		"$cmd" -w 5 -t "${c%% *}" -F "${c#*:}" 2>/dev/null || true
		"$cmd" -w 5 -t "${c%% *}" -X "${c#*:}" 2>/dev/null || log "cannot delete $cmd -t ${c%% *} chain ${c#*:}"
	done
	# A table the kubelet's chains brought into being (mangle, and every
	# ip6 table on a machine without IPv6 rules) stays behind with its
	# built-in chains: with the nf_tables backend it is removed, when it
	# was not there before and is empty now.
	command -v nft >/dev/null && "$cmd" --version 2>/dev/null | grep -q nf_tables || return 0
	local family=ip t
	[[ $cmd == ip6tables ]] && family=ip6
	for t in $("$cmd-save" 2>/dev/null | sed -n 's/^\*//p'); do
		grep -qx "\*$t" "$saved" 2>/dev/null && continue
		"$cmd-save" -t "$t" 2>/dev/null | grep -qE '^(-A |:[^ ]+ - )' && continue
		nft delete table "$family" "$t" 2>/dev/null || log "cannot delete the empty $family table $t"
	done
}
if [[ -f $dir/before/iptables ]]; then
	undo_iptables iptables "$dir/before/iptables"
	undo_iptables ip6tables "$dir/before/ip6tables"
fi

if [[ -f $dir/before/sysctl ]]; then
	while IFS='=' read -r name value; do
		[[ "$(sysctl -n "$name" 2>/dev/null)" == "$value" ]] || sysctl -qw "$name=$value" || log "cannot restore $name=$value"
	done <"$dir/before/sysctl"
fi

if [[ -f $dir/before/absent ]]; then
	while read -r p; do
		[[ -n $p && $p == /* ]] && rm -rf -- "$p"
	done <"$dir/before/absent"
fi
# libcni's cache where /var/lib/cni was there before: only our network's.
rm -f /var/lib/cni/results/"$cni_network"-* 2>/dev/null || true

# Check: nothing of the cluster is left.
problems=()
mapfile -t left < <(ours | sort -u)
((${#left[@]} == 0)) || problems+=("processes ${left[*]}")
mapfile -t left < <(our_mounts)
((${#left[@]} == 0)) || problems+=("mounts ${left[*]}")
mapfile -t left < <(our_cgroups)
((${#left[@]} == 0)) || problems+=("cgroups ${left[*]}")
ip link show "$bridge" >/dev/null 2>&1 && problems+=("bridge $bridge")
if ((${#problems[@]} > 0)); then
	log "left behind: ${problems[*]}; state dir $dir kept for inspection"
	exit 1
fi
rm -rf -- "$dir"
[[ ${CORRAL_K8S_DOWN_LOCKED:-} == 1 ]] || rm -f -- "$dir.lock"
log "down in $((SECONDS - started)) s; nothing left"
