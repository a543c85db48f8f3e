// Package k8s is corral's Kubernetes backend: a nohup.Transport that runs
// the engine's scripts in a pod through the API server's exec subresource
// (client-go's remotecommand, WebSocket first and SPDY as the fallback),
// and the sandbox pods corral creates itself.
//
// Only the corral-backend-k8s plugin binary imports this package: client-go
// registers every API type when a process starts, and the corral command
// must not pay for that on every run.
package k8s

import (
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/remotecommand"
)
