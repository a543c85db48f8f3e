package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at link time by the Makefile:
//
//	go build -ldflags "-X github.com/corralhq/corral/internal/cli.version=v1.2.3 -X github.com/corralhq/corral/internal/cli.commit=abc1234"
var (
	version = "dev"
	commit  = ""
)

// buildInfo describes this binary for `corral version`.
type buildInfo struct {
	Version  string
	Commit   string
	Modified bool
	Time     string
	Go       string
	Platform string
}

// readBuildInfo combines the link-time values with what the Go toolchain
// recorded: the module version when installed with `go install ...@vX`, and
// the VCS revision when built from a checkout with VCS stamping on.
func readBuildInfo() buildInfo {
	bi := buildInfo{
		Version:  version,
		Commit:   commit,
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return bi
	}
	if bi.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		bi.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if bi.Commit == "" {
				bi.Commit = s.Value
			}
		case "vcs.time":
			bi.Time = s.Value
		case "vcs.modified":
			bi.Modified = s.Value == "true"
		}
	}
	return bi
}

func (b buildInfo) write(w io.Writer) error {
	c := b.Commit
	if c == "" {
		c = "unknown"
	}
	if b.Modified {
		c += " (modified)"
	}
	if b.Time != "" {
		c += " " + b.Time
	}
	_, err := fmt.Fprintf(w, "corral %s\ncommit: %s\ngo: %s %s\n", b.Version, c, b.Go, b.Platform)
	return err
}

func newVersionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print corral's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return readBuildInfo().write(stdout)
		},
	}
}
