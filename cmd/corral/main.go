// Command corral starts, watches, feeds and kills whole process trees for
// coding agents: on the local machine, in Docker containers, on hosts over
// SSH, and on any backend a plugin brings.
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
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
