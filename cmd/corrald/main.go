// Command corrald is the half of corral that serves the backends: the
// daemon (corral serve), runs with --no-daemon, and the front ends that
// host a registry in process (mcp, acp), with doctor and backends. It
// takes the same command line as corral, which hands these commands over
// to it; install both together (go install github.com/corralhq/corral/cmd/...).
package main

import (
	"os"

	"github.com/corralhq/corral/internal/cli"
	"github.com/corralhq/corral/internal/engine"
)

func main() {
	cli.SetEngine(engine.New())
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
