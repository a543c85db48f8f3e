#!/usr/bin/env bash
# up.sh brings up corral's single-node Kubernetes test cluster, as root:
# Debian's etcd, a second containerd (own config, root, state and socket;
# Docker's containerd is never touched), kube-apiserver, kube-scheduler and
# a kubelet built by build.sh, and the CNI bridge plugin on a bridge of its
# own. Everything listens on 127.0.0.1. The facts behind each setting are in
# the project's notes on a single-node cluster on these machines.
#
# Idempotent: a cluster that is up and Ready is left as it is; a partial one
# is torn down (down.sh) and started again. Installs nothing: a missing
# package is named on one line. Writes into the state dir
# ${CORRAL_K8S_DIR:-/var/tmp/corral-k8s}:
#   kubeconfig          the admin (system:masters), context corral-test
#   kubeconfig-limited  user corral-limited, with no RBAC bindings at all
#   env                 KUBECONFIG=, CORRAL_K8S_KUBECONFIG=, CORRAL_K8S_IMAGE=…
#   logs/NAME.log       each component's log
# down.sh undoes all of it.
#
# Usage: scripts/k8s/up.sh
set -euo pipefail
script_name=up
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/k8s/lib.sh
source "$here/lib.sh"
started=$SECONDS

[[ $(id -u) -eq 0 ]] || {
	log "must run as root (it starts containerd and a kubelet)"
	exit 1
}

missing=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$1 ($2)"); }
need_cmd etcd etcd-server
need_cmd containerd containerd
need_cmd ctr containerd
need_cmd runc runc
need_cmd iptables iptables
need_cmd openssl openssl
need_cmd ip iproute2
need_cmd curl curl
need_cmd flock util-linux
for p in bridge host-local loopback; do
	[[ -x /usr/lib/cni/$p ]] || missing+=("/usr/lib/cni/$p (containernetworking-plugins)")
done
if ((${#missing[@]} > 0)); then
	log "missing: ${missing[*]}; Debian: apt-get install etcd-server containerd runc containernetworking-plugins iptables openssl"
	exit 1
fi

# One up or down at a time (CI's step and a developer's make k8s-up).
mkdir -p "${dir%/*}"
exec 9>"$dir.lock"
flock 9

cache="$(bash "$here/build.sh" "$version")"

write_env() {
	cat >"$dir/env" <<ENV
# corral's Kubernetes test cluster (scripts/k8s/up.sh); source this file.
KUBECONFIG=$dir/kubeconfig
CORRAL_K8S_KUBECONFIG=$dir/kubeconfig
CORRAL_K8S_LIMITED_KUBECONFIG=$dir/kubeconfig-limited
CORRAL_K8S_IMAGE=$test_image
CORRAL_K8S_DIR=$dir
export KUBECONFIG CORRAL_K8S_KUBECONFIG CORRAL_K8S_LIMITED_KUBECONFIG CORRAL_K8S_IMAGE CORRAL_K8S_DIR
ENV
}

node_ready() {
	[[ "$(kube get node localhost -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

all_running() {
	local c
	for c in "${components[@]}"; do component_pid "$c" >/dev/null || return 1; done
}

if [[ -d $dir/run ]]; then
	if all_running && node_ready; then
		write_env
		log "already up (node Ready); $dir/env"
		exit 0
	fi
	log "a partial cluster is there; tearing it down first"
	CORRAL_K8S_DOWN_LOCKED=1 bash "$here/down.sh"
fi

mkdir -p "$dir"/{run,logs,before,pki,etcd,containerd,kubelet/pki,kubelet/pod-logs,cni/net.d,cni/networks}
chmod 0700 "$dir" "$dir/pki"

# What the machine looked like, for down.sh to restore.
for s in "${saved_sysctls[@]}"; do
	v="$(sysctl -n "$s" 2>/dev/null)" && printf '%s=%s\n' "$s" "$v"
done >"$dir/before/sysctl"
for p in "${outside_paths[@]}"; do [[ -e $p || -L $p ]] || echo "$p"; done >"$dir/before/absent"
iptables-save >"$dir/before/iptables" 2>/dev/null || true
ip6tables-save >"$dir/before/ip6tables" 2>/dev/null || true

# --- certificates and credentials -----------------------------------------
pki="$dir/pki"
openssl_quiet() { openssl "$@" 2>>"$dir/logs/openssl.log"; }
openssl_quiet req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=corral-test-ca \
	-keyout "$pki/ca.key" -out "$pki/ca.crt"
openssl_quiet req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
	-keyout "$pki/apiserver.key" -out "$pki/apiserver.csr"
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,IP:%s,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' \
	"${service_cidr%.0/*}.1" >"$pki/apiserver.ext"
openssl_quiet x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
	-days 3650 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt"
openssl_quiet genrsa -out "$pki/sa.key" 2048
openssl_quiet rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"

token() { openssl rand -hex 24; }
admin_token="$(token)"
kubelet_token="$(token)"
scheduler_token="$(token)"
limited_token="$(token)"
# The kubelet and the scheduler are masters too: with no controller-manager
# nobody would bind their bootstrap roles. corral-limited has no group but
# the implicit system:authenticated, so a test grants it exactly a Role.
cat >"$pki/tokens.csv" <<TOKENS
$admin_token,corral-admin,corral-admin,"system:masters"
$kubelet_token,system:node:localhost,kubelet,"system:masters,system:nodes"
$scheduler_token,system:kube-scheduler,kube-scheduler,"system:masters"
$limited_token,corral-limited,corral-limited
TOKENS
chmod 0600 "$pki/tokens.csv"

ca_data="$(base64 -w0 <"$pki/ca.crt")"
# kubeconfig FILE USER TOKEN
kubeconfig() {
	cat >"$1" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: corral-test
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority-data: $ca_data
users:
- name: $2
  user:
    token: $3
contexts:
- name: corral-test
  context:
    cluster: corral-test
    user: $2
    namespace: default
current-context: corral-test
KUBECONFIG
	chmod 0600 "$1"
}
kubeconfig "$dir/kubeconfig" corral-admin "$admin_token"
kubeconfig "$dir/kubeconfig-limited" corral-limited "$limited_token"
kubeconfig "$dir/kubelet/kubeconfig" system:node:localhost "$kubelet_token"
kubeconfig "$dir/scheduler.kubeconfig" system:kube-scheduler "$scheduler_token"

# --- cgroups ----------------------------------------------------------------
# The kubelet's cgroupRoot must exist in every v1 controller before it
# starts, and a new cpuset has no CPUs or memory nodes until given its
# parent's.
while read -r mnt; do
	mkdir -p "$mnt/$cgroup_root"
	if [[ -f $mnt/cpuset.cpus ]]; then
		cat "$mnt/cpuset.cpus" >"$mnt/$cgroup_root/cpuset.cpus"
		cat "$mnt/cpuset.mems" >"$mnt/$cgroup_root/cpuset.mems"
	fi
done < <(awk '$9 == "cgroup" { print $5 }' /proc/self/mountinfo)

# --- processes --------------------------------------------------------------
# start NAME CMD...: in its own session, detached from this shell, every
# stream redirected, its PID recorded; without the lock's descriptor, or
# the component would hold the lock for as long as it runs.
start() {
	local name=$1
	shift
	setsid "$@" </dev/null >>"$dir/logs/$name.log" 2>&1 9>&- &
	echo $! >"$dir/run/$name.pid"
}

# wait_for WHAT SECONDS CMD...: CMD succeeds within SECONDS, or the logs'
# tails are shown and up fails.
wait_for() {
	local what=$1 limit=$2
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			log "$what: not within ${limit} s; the components' logs end with:"
			local f
			for f in "$dir"/logs/*.log; do
				printf '\n--- %s\n' "$f" >&2
				tail -n 25 "$f" >&2
			done
			exit 1
		fi
		sleep 0.2
	done
}

start etcd etcd --name corral-k8s --data-dir "$dir/etcd" \
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
	--initial-cluster "corral-k8s=http://127.0.0.1:$etcd_peer_port" --initial-cluster-state new

cat >"$dir/cni/net.d/10-$cni_network.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "$cni_network",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/networks",
        "ranges": [[{ "subnet": "$pod_cidr" }]],
        "routes": [{ "dst": "$pod_cidr" }]
      }
    }
  ]
}
CNI

# A second containerd: every path its own. restrict_oom_score_adj because
# no process here has CAP_SYS_RESOURCE (runc fails every sandbox without
# it); netns under the state dir so that none lands in /var/run/netns;
# AppArmor off so no profile is loaded into the kernel; the opt plugin off
# (it would write /opt/containerd).
cat >"$dir/containerd/config.toml" <<TOML
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]
oom_score = 0

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        Root = "$dir/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
TOML
start containerd containerd --config "$dir/containerd/config.toml"
ctr_() { ctr --address "$sock" --namespace k8s.io "$@"; }
wait_for "containerd answering on $sock" 30 ctr_ version
for img in pause test; do
	ctr_ images import "$images/$img.tar" >>"$dir/logs/ctr.log" 2>&1 || {
		log "ctr images import $images/$img.tar failed:"
		tail -n 5 "$dir/logs/ctr.log" >&2
		exit 1
	}
done

wait_for "etcd healthy on 127.0.0.1:$etcd_port" 30 curl -fsS "http://127.0.0.1:$etcd_port/health"

# ServiceAccount admission off: pods need no token, and no controller
# mints one. TaintNodesByCondition off: only a controller-manager would lift
# the not-ready taint it puts on a new node. Endpoint reconciler none:
# 127.0.0.1 is no valid endpoint for the kubernetes Service. The kubelet is
# reached as "localhost", never on the machine's other addresses.
start kube-apiserver "$bin/kube-apiserver" \
	--etcd-servers "http://127.0.0.1:$etcd_port" \
	--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$apiserver_port" \
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
	--client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" \
	--authorization-mode RBAC \
	--service-account-issuer https://kubernetes.default.svc \
	--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
	--service-cluster-ip-range "$service_cidr" \
	--disable-admission-plugins ServiceAccount,TaintNodesByCondition \
	--endpoint-reconciler-type none \
	--kubelet-preferred-address-types Hostname,InternalIP \
	--cert-dir "$dir/pki/apiserver-certs" \
	--profiling=false
wait_for "kube-apiserver ready on 127.0.0.1:$apiserver_port" 60 kube get --raw /readyz

start kube-scheduler "$bin/kube-scheduler" \
	--kubeconfig "$dir/scheduler.kubeconfig" \
	--authentication-kubeconfig "$dir/scheduler.kubeconfig" --authorization-kubeconfig "$dir/scheduler.kubeconfig" \
	--authentication-skip-lookup --leader-elect=false \
	--bind-address 127.0.0.1 --secure-port "$scheduler_port" \
	--cert-dir "$dir/scheduler-certs" \
	--profiling=false

# oomScoreAdj 0: the default -999 needs CAP_SYS_RESOURCE. Image GC and
# eviction thresholds out of reach: the images cannot be pulled again, and
# a full disk on a shared machine must not taint the node. podLogsDir and
# the cert dir keep the kubelet's files in the state dir where it lets us.
cat >"$dir/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz_port
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_root
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podLogsDir: $dir/kubelet/pod-logs
hairpinMode: none
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
protectKernelDefaults: false
serializeImagePulls: false
YAML
start kubelet "$bin/kubelet" \
	--config "$dir/kubelet/config.yaml" --kubeconfig "$dir/kubelet/kubeconfig" \
	--root-dir "$dir/kubelet/root" --cert-dir "$dir/kubelet/pki" \
	--hostname-override localhost

wait_for "node localhost Ready" 90 node_ready
# A node registered by an earlier kubelet may still carry the taint only a
# controller-manager would lift.
kube taint node localhost node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true

write_env
log "up in $((SECONDS - started)) s: node localhost Ready; source $dir/env"
