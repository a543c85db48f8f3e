#!/usr/bin/env bash
# await.sh STATUS_FILE: tells a cluster bring-up running in the
# background to start the cluster now, waits for it, and fails when it
# failed. CI's (.ci/run) builds the Kubernetes binaries at low priority
# while make test runs the other suites, then waits for the file
# STATUS_FILE's .go sibling, which this creates, before make k8s-up: the
# cluster runs only for the Kubernetes tests, never beside the others. The
# bring-up writes its exit status to STATUS_FILE when it ends, and its log
# to STATUS_FILE's .log sibling. make k8s-test runs this first when
# CORRAL_K8S_AWAIT names the file.
#
# Waits at most CORRAL_K8S_AWAIT_TIMEOUT seconds (default 1200: a cold
# build takes about 6 min alone on 2 cores, longer beside the tests).
set -euo pipefail

status_file="${1:?usage: await.sh STATUS_FILE}"
timeout="${CORRAL_K8S_AWAIT_TIMEOUT:-1200}"
log="${status_file%.rc}.log"
started=$SECONDS
: >"${status_file%.rc}.go"

until [[ -s $status_file ]]; do
	if ((SECONDS - started >= timeout)); then
		echo "k8s await: the background cluster bring-up did not end within $timeout s (log: $log)" >&2
		tail -n 20 "$log" >&2 2>/dev/null || true
		exit 1
	fi
	sleep 1
done
rc="$(<"$status_file")"
if [[ $rc != 0 ]]; then
	echo "k8s await: the background cluster bring-up failed with status $rc (log: $log):" >&2
	tail -n 40 "$log" >&2 2>/dev/null || true
	exit 1
fi
echo "k8s await: the cluster is up (waited $((SECONDS - started)) s for the background bring-up): $(tail -n 1 "$log" 2>/dev/null)"
