// Package docs_test checks that the Go example in README.md compiles, runs
// and prints what the README says.
package docs_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
	"github.com/corralhq/corral/registry"
)

func TestMain(m *testing.M) {
	// On Windows the example's command needs a POSIX sh in PATH; where
	// there is none (under Wine) the test binary stands in for it.
	cleanup, err := provideShell()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// With a Cleanup, goleak leaves the exit (with its verdict) to it.
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		cleanup()
		os.Exit(code)
	}))
}

// The body of Example, between the markers, is copied verbatim into
// README.md; TestReadmeExampleInSync keeps the two equal.
func Example() {
	// readme:begin
	reg, err := registry.New(registry.Config{
		// Open resolves a backend target to an Environment; here only the
		// local machine.
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			if target != "local" {
				return nil, fmt.Errorf("backend %q not configured", target)
			}
			return local.New(local.Options{})
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close() // kills whatever is still running

	// Run in the foreground: on timeout the whole tree is killed.
	res, err := reg.Run(context.Background(), registry.RunOptions{
		StartOptions: registry.StartOptions{Command: "echo hello; exit 3"},
		Timeout:      time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s%s, state %s\n", res.Output, res.Status, res.State)
	// readme:end

	// The blank line above matters: go test reads only the last comment
	// group, and runs the example only if that group begins with Output.

	// Output:
	// hello
	// exit status 3, state exited
}

func TestReadmeExampleInSync(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "\t// readme:begin\n")
	if !ok {
		t.Fatal("readme:begin marker missing")
	}
	body, _, ok = strings.Cut(body, "\t// readme:end\n")
	if !ok {
		t.Fatal("readme:end marker missing")
	}
	// The README shows the same lines inside func main, indented the same.
	if !strings.Contains(string(readme), body) {
		t.Fatalf("README.md does not contain the example body verbatim; expected:\n%s", body)
	}
}
