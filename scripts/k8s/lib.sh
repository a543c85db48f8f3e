# shellcheck shell=bash disable=SC2034,SC2154
# (SC2034, SC2154: the variables are the sourcing scripts', both ways.)
# lib.sh: what up.sh and down.sh share: the state dir's layout, the ports,
# and how a component's process is found and ended. Sourced, not run.

version="${CORRAL_K8S_VERSION:-v1.34.4}"
# Not under /tmp: tests and CI clean /tmp, and a cluster outlives a test run.
dir="${CORRAL_K8S_DIR:-/var/tmp/corral-k8s}"
cache="${CORRAL_K8S_CACHE:-$HOME/.cache/corral/k8s}/$version"
bin="$cache/bin"
images="$cache/images"

# 127.0.0.1 only, on ports away from the defaults (2379, 6443, 10250…) so a
# real cluster or a developer's etcd on this machine never collides.
etcd_port=12379
etcd_peer_port=12380
apiserver_port=16443
kubelet_port=11250
kubelet_healthz_port=11248
scheduler_port=11259

# The pods' network: a bridge of our own, never Docker's.
bridge=corral-k8s0
pod_cidr=10.244.0.0/24
service_cidr=10.245.0.0/24
cni_network=corral-k8s
cgroup_root=corral-k8s

sock="$dir/containerd/containerd.sock"
test_image=docker.io/library/corral-test:k8s
pause_image=docker.io/corral-k8s/pause:1

# Sysctls the kubelet (and the bridge plugin's gateway) rewrite: saved at
# the first up, restored by down.
saved_sysctls=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
	net.ipv4.conf.all.route_localnet)

# Paths outside the state dir that the kubelet, libcni and containerd
# create whatever their configuration says: those that did not exist before
# the first up are removed by down.
outside_paths=(/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni
	/var/run/kubernetes /run/containerd /etc/cni /opt/cni /var/run/netns /etc/kubernetes)

components=(etcd containerd kube-apiserver kube-scheduler kubelet)

log() { printf 'k8s %s: %s\n' "$script_name" "$*" >&2; }

# component_pid NAME prints the recorded PID of NAME when that process is
# still the one up.sh started: its command line names the state dir, so a
# PID reused by another process is never taken for it.
component_pid() {
	local pid
	pid="$(cat "$dir/run/$1.pid" 2>/dev/null)" || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	{ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "$dir/" || return 1
	echo "$pid"
}

# kube ARGS: kubectl as the cluster's admin, with its discovery cache in
# the state dir (not ~/.kube).
kube() { "$bin/kubectl" --kubeconfig "$dir/kubeconfig" --cache-dir "$dir/kubectl-cache" --request-timeout=10s "$@"; }
