//go:build linux

// Command corral-backend-bwrap is a backend plugin that isolates commands
// with bubblewrap (bwrap): each sandbox is a set of Linux namespaces (mount,
// PID, network, IPC, UTS) whose root is the host's root bound read-only,
// with a private tmpfs on /tmp, a minimal /dev, its own /proc and no
// network but loopback.
//
// # Targets
//
//	bwrap://          an ephemeral sandbox: created by Open, removed by
//	                  Close, and ended with the plugin (bwrap
//	                  --die-with-parent)
//	bwrap://NAME      a named, persistent sandbox: created by the first Open,
//	                  found again by later ones (after a plugin crash, a
//	                  corral restart), kept by Close. NAME is
//	                  [A-Za-z0-9_.-]{1,64}.
//
// Add ?state=DIR to keep the sandbox records in DIR instead of
// $XDG_RUNTIME_DIR/corral-bwrap (or /tmp/corral-bwrap-UID).
//
// # How processes run
//
// The sandbox's first process is bwrap's own init (PID 1 inside, reaping
// orphans) running `sleep infinity`. Every engine script enters the
// sandbox's namespaces and root with nsenter(1) and runs there: the plugin
// is a nohup.Transport, and env/nohup provides processes, output by
// offset, stdin FIFOs, whole-tree signals, exit status and re-attach. A
// named sandbox is not tied to the plugin's life (no --die-with-parent):
// that is what lets processes survive a plugin crash and be re-attached.
// Remove one with `kill -KILL PID` of its record's pid, which ends every
// process inside (the PID namespace dies with its init).
//
// The plugin needs bwrap and nsenter, and the privileges to use them: root,
// or unprivileged user namespaces (then bwrap maps the user).
package main

import (
	"github.com/corralhq/corral/plugins/sdk"
)

// version is set with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	sdk.ServeTransport(sdk.Plugin{
		Name:        "bwrap",
		Version:     version,
		Description: "bubblewrap namespaces: read-only root, private /tmp, no network, own PID space",
	}, open)
}
