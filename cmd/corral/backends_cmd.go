package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/plugins"
)

// backendEntry is one line of `corral backends`.
type backendEntry struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"` // "builtin" or "plugin"
	Version     string `json:"version,omitempty"`
	Path        string `json:"path,omitempty"`
	Description string `json:"description,omitempty"`
	// Health is "ok", or why the backend cannot be used.
	Health string `json:"health"`
}

// builtinBackends are compiled into corral; a plugin of the same name is
// shadowed by them.
var builtinBackends = []backendEntry{
	{Name: "local", Description: "this machine"},
	{Name: "docker", Description: "an existing container: docker://CONTAINER"},
	{Name: "docker-image", Description: "a sandbox container from an image: docker-image://IMAGE"},
	{Name: "ssh", Description: "a remote host: ssh://[user@]host[:port]"},
}

func isBuiltinBackend(name string) bool {
	for _, b := range builtinBackends {
		if b.Name == name {
			return true
		}
	}
	return false
}

func newBackendsCommand(stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "backends",
		Short: "List the built-in backends and the installed backend plugins",
		Long: `List the built-in backends and the backend plugins found on $CORRAL_PLUGIN_PATH
and in ~/.local/share/corral/plugins (executables named corral-backend-NAME).
Each plugin is started, asked for its version and stopped: HEALTH says whether
it works, or why not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			entries, err := listBackends(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(entries)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKIND\tVERSION\tHEALTH\tPATH")
			for _, e := range entries {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.Kind, e.Version, e.Health, e.Path)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func listBackends(ctx context.Context) ([]backendEntry, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var out []backendEntry
	for _, b := range builtinBackends {
		b.Kind, b.Version, b.Health = "builtin", readBuildInfo().Version, "ok"
		out = append(out, b)
	}
	opts := plugins.Options{Logger: slog.Default()}
	found, err := plugins.Discover(opts)
	if err != nil {
		return nil, err
	}
	for _, f := range found {
		e := backendEntry{Name: f.Name, Kind: "plugin", Path: f.Path}
		if isBuiltinBackend(f.Name) {
			e.Health = "shadowed by the built-in backend of the same name"
			out = append(out, e)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		info, err := plugins.Probe(pctx, f, opts)
		cancel()
		e.Version, e.Description, e.Health = info.Version, info.Description, "ok"
		if err != nil {
			e.Health = err.Error()
		}
		out = append(out, e)
	}
	return out, nil
}
