// Package targets names the backend targets corral accepts. Both halves
// of the command line use it: the thin corral, for its flags' help and
// its check of a target's syntax, and internal/backends, which resolves
// targets in corrald.
package targets

// Default is the target used when --backend is not given.
const Default = "local"

// Help lists the targets this build accepts, for flag help and error
// messages.
const Help = `"local", "docker://CONTAINER", "docker-image://IMAGE[?options]", "ssh://[user@]host[:port]", "k8s://NAMESPACE/POD[/CONTAINER]" or "k8s-pod://IMAGE[?options]"`
