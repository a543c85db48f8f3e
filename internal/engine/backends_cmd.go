package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/internal/backends"
	"github.com/corralhq/corral/internal/cli"
	"github.com/corralhq/corral/plugins"
)

// backendEntry is one line of `corral backends`.
type backendEntry struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"` // "builtin" or "plugin"
	Version     string `json:"version,omitempty"`
	Path        string `json:"path,omitempty"`
	Description string `json:"description,omitempty"`
	// Health is one word: "ok", "shadowed" (a built-in backend has the
	// name), "refused" (a binary corral will not run: see Error) or
	// "failed" (it did not start or answer: see Error).
	Health string `json:"health"`
	// Error says why Health is not "ok".
	Error string `json:"error,omitempty"`
	// Capabilities are what a plugin states about its Environments (nil
	// when it states none: it reports them once a target is opened).
	Capabilities *env.Capabilities `json:"capabilities,omitempty"`
	// Limits says which per-process limits the backend enforces
	// ("memory, cpus, pids") or "none: why" (limitsSummary), or that
	// only an opened target knows.
	Limits string `json:"limits"`
	// Cluster is the Kubernetes plugin's check of the cluster, the line
	// corral doctor shows as "kubernetes" (the k8s plugin only).
	Cluster *probe `json:"cluster,omitempty"`
}

// Backend health words.
const (
	healthOK       = "ok"
	healthShadowed = "shadowed"
	healthRefused  = "refused"
	healthFailed   = "failed"
)

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
		Short: cli.EngineShort("backends"),
		Long: `List the built-in backends and the backend plugins found on $CORRAL_PLUGIN_PATH
and in ~/.local/share/corral/plugins (executables named corral-backend-NAME).
Each plugin is started, asked for its version and capabilities, and stopped:
HEALTH is ok, shadowed (a built-in backend has the name), refused (a binary
corral will not run) or failed; the lines under a plugin give the reason, the
capabilities it states and its notes. Under the Kubernetes plugin (k8s), the
cluster line is its check of the cluster, as corral doctor shows it.`,
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
			return printBackends(stdout, entries)
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
		b.Kind, b.Version, b.Health = "builtin", cli.Version(), "ok"
		b.Limits = builtinLimits(b.Name)
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
			e.Health, e.Error = healthShadowed, "shadowed by the built-in backend of the same name"
			out = append(out, e)
			continue
		}
		e = probePlugin(ctx, f, opts)
		// The check runs even when the probe failed: it is another way in
		// (no plugin protocol) and says what is wrong with the cluster.
		if f.Name == backends.K8sPlugin && e.Health != healthRefused {
			c := checkKubernetes(ctx, f)
			e.Cluster = &c
		}
		out = append(out, e)
	}
	return out, nil
}

// probePlugin starts the plugin f, asks for its Info and stops it.
func probePlugin(ctx context.Context, f plugins.Found, opts plugins.Options) backendEntry {
	e := backendEntry{Name: f.Name, Kind: "plugin", Path: f.Path}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	info, err := plugins.Probe(pctx, f, opts)
	cancel()
	e.Version, e.Description, e.Capabilities, e.Health = info.Version, info.Description, info.Capabilities, healthOK
	e.Limits = limitsUnknown
	if info.Capabilities != nil {
		e.Limits = limitsSummary(*info.Capabilities)
	}
	switch {
	case errors.Is(err, plugins.ErrRefused):
		e.Health, e.Error = healthRefused, err.Error()
	case err != nil:
		e.Health, e.Error = healthFailed, err.Error()
	}
	return e
}

// printBackends prints the table of `corral backends`: one row per
// backend, and under a plugin's row, indented, what it states about its
// capabilities, its notes, and why it is not ok.
func printBackends(w io.Writer, entries []backendEntry) error {
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tVERSION\tHEALTH\tPATH")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.Kind, e.Version, e.Health, e.Path)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The details go between the rows afterwards: a line without tabs
	// would end tabwriter's columns.
	rows := strings.SplitAfter(table.String(), "\n")
	var out strings.Builder
	out.WriteString(rows[0])
	for i, e := range entries {
		out.WriteString(strings.TrimRight(rows[i+1], " \n") + "\n")
		for _, line := range backendDetails(e) {
			out.WriteString("    " + line + "\n")
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// backendDetails are the indented lines under a backend's row.
func backendDetails(e backendEntry) []string {
	var lines []string
	if e.Error != "" {
		lines = append(lines, "error: "+cli.OneLine(e.Error))
	}
	if c := e.Capabilities; c != nil {
		lines = append(lines, "capabilities: "+capsSummary(*c))
		for _, n := range c.Notes {
			lines = append(lines, "note: "+cli.OneLine(n))
		}
	}
	if e.Limits != "" {
		lines = append(lines, "limits: "+cli.OneLine(e.Limits))
	}
	if c := e.Cluster; c != nil {
		lines = append(lines, "cluster "+probeMark(*c)+": "+cli.OneLine(c.Detail))
	}
	return lines
}

// capsSummary says in one line what c supports.
func capsSummary(c env.Capabilities) string {
	var have []string
	for _, f := range []struct {
		ok   bool
		name string
	}{
		{c.PTY, "pty"}, {c.Resize, "resize"}, {c.Stdin, "stdin"}, {c.Reattach, "reattach"},
		{c.ReattachPTY, "reattach-pty"}, {c.ReplayOutput, "replay-output"}, {c.Ports, "ports"}, {c.CheckURL, "check-url"},
	} {
		if f.ok {
			have = append(have, f.name)
		}
	}
	if len(have) == 0 {
		have = append(have, "none of pty, stdin, reattach")
	}
	s := strings.Join(have, ", ")
	if c.TreeKill != "" {
		s += "; tree kill: " + c.TreeKill
	}
	return s
}

// limitsUnknown is the limits line of a backend whose capabilities only
// an opened target reports (a docker container, an ssh host).
const limitsUnknown = "known per target: corral doctor shows those of the targets the daemon holds open"

// builtinLimits is the limits line of a built-in backend: the local one
// is asked (a throwaway environment, as doctor's probes use); the others
// know only once a target is opened.
func builtinLimits(name string) string {
	if name != "local" {
		return limitsUnknown
	}
	e, done, err := probeLocal()
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer done()
	return limitsSummary(e.Capabilities())
}

// limitsSummary says which limits c enforces: "memory, cpus, pids", those
// it enforces and why not the others, or "none: why".
func limitsSummary(c env.Capabilities) string {
	return limitsWords(c.Limits, c.LimitsNote)
}

func limitsWords(have []string, note string) string {
	var missing []string
	for _, name := range []string{env.LimitMemory, env.LimitCPUs, env.LimitPids} {
		if !slices.Contains(have, name) {
			missing = append(missing, name)
		}
	}
	how := note
	if note == "" {
		note = "this backend enforces no per-process limit"
	}
	switch {
	case len(missing) == 0 && how != "":
		// With all enforced, a backend's note says how (an ssh host's
		// cgroup), which doctor shows.
		return strings.Join(have, ", ") + " (" + how + ")"
	case len(missing) == 0:
		return strings.Join(have, ", ")
	case len(missing) == 3:
		return "none: " + note
	}
	return strings.Join(have, ", ") + "; not " + strings.Join(missing, ", ") + ": " + note
}
