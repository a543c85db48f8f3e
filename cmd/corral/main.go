// Command corral starts, watches, feeds and kills whole process trees for
// coding agents: on the local machine, in Docker containers, on hosts over
// SSH, and on any backend a plugin brings.
//
// corral is the thin command line: it talks to the daemon and links none
// of the backends, so that a call costs little more than a process start.
// The daemon (serve), runs with --no-daemon, mcp, acp, doctor and backends
// run in corrald (cmd/corrald), installed beside it, to which corral
// hands them over.
//
// Exit status of `corral run`: the command's own exit code; 128+N when
// signal N ended it; 124 when --timeout or --idle-timeout fired (the whole
// process tree was killed); 130, 143 or 129 when corral itself got SIGINT,
// SIGTERM or SIGHUP (the tree was killed first); 141 when corral's stdout
// was closed (the tree was killed, as SIGPIPE would have); 125 when corral
// could not run the command at all (backend or start failure); 2 for a
// usage error (bad flag, bad duration, missing command).
package main

import (
	"os"

	"github.com/corralhq/corral/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
