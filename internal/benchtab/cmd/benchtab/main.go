// Command benchtab reads `go test -bench` output on stdin and prints corral's
// benchmark table: each corral figure beside its baseline, the ratio, the
// target and PASS or MISS. `make bench` pipes into it; see package benchtab.
//
// Exit status: 0 when the table was printed (targets missed or not, since
// benchmarks on a shared machine are noisy), 1 with -strict when a target
// was missed, 2 when the input could not be read or held no benchmark.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/corralhq/corral/internal/benchtab"
)

func main() {
	strict := flag.Bool("strict", false, "exit 1 when a target is missed")
	flag.Parse()

	results, err := benchtab.Parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if len(results) == 0 {
		fmt.Fprintln(os.Stderr, "benchtab: no benchmark results on stdin (expected `go test -bench` output)")
		os.Exit(2)
	}
	rows := benchtab.Build(results, benchtab.DefaultChecks)
	if err := benchtab.Write(os.Stdout, rows); err != nil {
		fmt.Fprintln(os.Stderr, "benchtab: write:", err)
		os.Exit(2)
	}
	misses := benchtab.Misses(rows)
	fmt.Printf("\n%d target(s) missed\n", misses)
	if *strict && misses > 0 {
		os.Exit(1)
	}
}
