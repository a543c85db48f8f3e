package sdk_test

import (
	"context"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/plugins/sdk"
)

// A complete plugin: the main function of corral-backend-mylocal, serving
// the local machine. Build it, put it on CORRAL_PLUGIN_PATH, and run
// `corral run --backend mylocal:// -- make test`.
func Example() {
	sdk.Serve(sdk.Plugin{
		Name:        "mylocal",
		Version:     "1.0.0",
		Description: "the local machine, as a plugin",
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			return local.New(local.Options{})
		},
	})
}
