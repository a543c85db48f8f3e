// Command corral-backend-k8s is corral's Kubernetes backend, a plugin that
// corral starts when a target is k8s://NAMESPACE/POD[/CONTAINER] (a pod
// that runs) or k8s-pod://IMAGE[?options] (a sandbox pod corral creates
// and deletes). It is a plugin, and not built into corral, so that only a
// process that opens a Kubernetes target pays for client-go: client-go
// registers every API type as a process starts, and corral's own commands
// start on every call an agent makes.
//
// corral finds it beside its own executable (make build and go install put
// them together) or in the plugin directories (corral backends lists them).
// The plugin reads the cluster's configuration as kubectl does: KUBECONFIG
// or ~/.kube/config, the target's context=, and in-cluster configuration.
//
// Run as `corral-backend-k8s check [--context NAME] [--namespace NS]`, it
// checks the cluster instead of serving (corral doctor and corral backends
// run it): it prints a JSON object (k8s.Report: context, server, version,
// namespace, the permissions k8s:// and k8s-pod:// lack, or the error) and
// exits 0 when the cluster answers and both are allowed, else 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/corralhq/corral/env/k8s"
	"github.com/corralhq/corral/env/nohup"
	"github.com/corralhq/corral/plugins/sdk"
)

// version is set with -ldflags "-X main.version=…".
var version = "dev"

// checkTimeout bounds `check`: under the 15 s corral doctor gives it, so
// that a slow cluster is reported by the check rather than by a kill.
const checkTimeout = 12 * time.Second

func main() {
	// client-go logs, through klog, what it also returns (and the closed
	// connection of every stream that ends, which is how streams end
	// here): the engine reports errors itself, and the host would show
	// klog's lines as the plugin's errors.
	klog.SetLogger(logr.Discard())
	if len(os.Args) > 1 && os.Args[1] == "check" {
		os.Exit(check(os.Args[2:]))
	}
	caps := sdk.EngineCapabilities()
	caps.Notes = append(caps.Notes,
		"processes run in the pod through the API server's exec (WebSocket, SPDY as the fallback); the tree is killed inside the pod",
		"k8s-pod:// pods share one process namespace, whose pause process reaps orphans; closing the backend deletes the pod")
	sdk.ServeTransport(sdk.Plugin{
		Name:         "k8s",
		Version:      version,
		Description:  "Kubernetes pods: k8s://NAMESPACE/POD[/CONTAINER] and sandbox pods k8s-pod://IMAGE",
		Capabilities: &caps,
	}, func(ctx context.Context, target string) (nohup.Transport, nohup.Options, error) {
		return k8s.Open(ctx, target, k8s.Options{Owner: sdk.Owner(), Logger: slog.Default()})
	})
}

// check runs `corral-backend-k8s check` and returns its exit code.
func check(args []string) int {
	fs := flag.NewFlagSet("corral-backend-k8s check", flag.ContinueOnError)
	kubeContext := fs.String("context", "", "the kubeconfig context (default: the current one)")
	namespace := fs.String("namespace", "", "the namespace to check the permissions in (default: the context's)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "corral-backend-k8s check: no arguments besides --context and --namespace")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	r := k8s.Check(ctx, "", *kubeContext, *namespace)
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	if !r.OK() {
		return 1
	}
	return 0
}
