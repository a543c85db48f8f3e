// Command corral-backend-localplugin re-hosts the local backend (env/local)
// as a plugin: the reference plugin, used to run the conformance suite
// through the plugin boundary and to measure its cost.
//
// Target: localplugin:// or localplugin://?state=DIR, where DIR is the
// state directory of detached processes (default: env/local's). Every
// Environment opened on one DIR sees the same detached processes, which is
// what re-attach after a plugin restart needs.
package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/plugins/sdk"
)

// version is set with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	sdk.Serve(sdk.Plugin{
		Name:        "localplugin",
		Version:     version,
		Description: "the local machine (env/local) served through the plugin boundary",
		Open:        open,
	})
}

func open(_ context.Context, target string) (env.Environment, error) {
	rest, ok := strings.CutPrefix(target, "localplugin://")
	if !ok {
		return nil, fmt.Errorf("localplugin: target %q: want localplugin://[?state=DIR]", target)
	}
	q, err := url.ParseQuery(strings.TrimPrefix(rest, "?"))
	if err != nil {
		return nil, fmt.Errorf("localplugin: target %q: %w", target, err)
	}
	return local.New(local.Options{StateDir: q.Get("state")})
}
