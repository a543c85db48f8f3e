package cli

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/registry"
)

// limitFlags are the --memory, --cpus and --pids flags of run and start.
// They are read as strings so that a bad value gets corral's own one-line
// error naming the flag, as the other flags' values do.
type limitFlags struct {
	memory, cpus, pids string
	// prefix is "" for run's and start's, "max-" for serve's ceiling
	// (--max-memory, --max-cpus, --max-pids).
	prefix string
}

// addCeilingFlags adds serve's --max-memory, --max-cpus and --max-pids.
func (l *limitFlags) addCeilingFlags(cmd *cobra.Command) {
	l.prefix = "max-"
	f := cmd.Flags()
	f.StringVar(&l.memory, "max-memory", "", "ceiling on the memory of all local processes together, a `SIZE` such as 8G: past it the OOM killer ends one of them")
	f.StringVar(&l.cpus, "max-cpus", "", "ceiling on the CPU of all local processes together, `N` cores such as 3")
	f.StringVar(&l.pids, "max-pids", "", "ceiling on the tasks of all local processes together, `N` such as 4096: a fork over it fails")
}

func (l *limitFlags) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&l.memory, env.LimitMemory, "", "hard memory limit of the whole tree, a `SIZE` such as 512M or 2G: going over it is an OOM kill of the tree (exit 137)")
	f.StringVar(&l.cpus, env.LimitCPUs, "", "hard CPU limit of the whole tree, `N` cores such as 1.5: it is throttled to that")
	f.StringVar(&l.pids, env.LimitPids, "", "hard limit on the tasks (processes and threads) of the tree at once, `N` such as 512: a fork over it fails")
}

// parse returns the limits given (nil when none) or a usage error naming
// the flag; a backend that cannot enforce one refuses the start later.
func (l *limitFlags) parse(op string, cmd *cobra.Command) (*env.Limits, error) {
	changed := func(name string) bool { return cmd.Flags().Changed(l.prefix + name) }
	var lim env.Limits
	if changed(env.LimitMemory) {
		n, err := env.ParseSize(l.memory)
		if err != nil {
			return nil, usageErrorf("%s: --%smemory %q: give a size in bytes or with a suffix, such as 512M or 2G", op, l.prefix, clipCommand(l.memory, 40))
		}
		lim.Memory = n
	}
	if changed(env.LimitCPUs) {
		f, err := env.ParseCPUs(l.cpus)
		if err != nil || f <= 0 {
			return nil, usageErrorf("%s: --%scpus %q: give a number of cores above 0, such as 1.5", op, l.prefix, clipCommand(l.cpus, 40))
		}
		lim.CPUs = f
	}
	if changed(env.LimitPids) {
		n, err := strconv.ParseInt(strings.TrimSpace(l.pids), 10, 64)
		if err != nil || n <= 0 {
			return nil, usageErrorf("%s: --%spids %q: give a whole number of tasks, such as 512", op, l.prefix, clipCommand(l.pids, 40))
		}
		lim.Pids = n
	}
	// Each limit is checked alone, so the error names its flag.
	for _, c := range []struct {
		flag string
		l    env.Limits
	}{{env.LimitMemory, env.Limits{Memory: lim.Memory}}, {env.LimitCPUs, env.Limits{CPUs: lim.CPUs}}, {env.LimitPids, env.Limits{Pids: lim.Pids}}} {
		if err := c.l.Validate(); err != nil {
			return nil, usageErrorf("%s: --%s%s %s: %s", op, l.prefix, c.flag, clipCommand(cmd.Flags().Lookup(l.prefix+c.flag).Value.String(), 40), specReason(err))
		}
	}
	if lim.IsZero() {
		return nil, nil
	}
	return &lim, nil
}

// limitsHelp is the paragraph of run's and start's help on the limits.
const limitsHelp = `Limits: --memory SIZE, --cpus N and --pids N are hard ceilings on the whole
process tree. Memory over --memory is an OOM kill of the tree (exit 137, and
corral says "out of memory (limit SIZE)"); CPU time is held to --cpus cores;
a fork beyond --pids tasks (processes and threads) fails. A backend that
cannot enforce a limit refuses the command rather than run it unlimited
(corral backends shows which limits each enforces).`

// runawayFlags are the --runaway-cpu, --runaway-memory and --runaway-for
// flags of run, start and serve (serve's are the daemon's default).
type runawayFlags struct {
	cpu, memory string
	window      time.Duration
}

func (r *runawayFlags) addFlags(cmd *cobra.Command, whose string) {
	f := cmd.Flags()
	f.StringVar(&r.cpu, "runaway-cpu", "", whose+"a runaway event when the tree uses at least `PERCENT` of a core (100 is one core) for --runaway-for with no output")
	f.StringVar(&r.memory, "runaway-memory", "", whose+"a runaway event when the tree's memory grows by at least `SIZE` (such as 512M or 4G) within --runaway-for")
	f.DurationVar(&r.window, "runaway-for", 0, "the window of --runaway-cpu and --runaway-memory (default 2m)")
}

// parse returns the runaway thresholds given (nil when none) or a usage
// error naming the flag.
func (r *runawayFlags) parse(op string, cmd *cobra.Command) (*registry.RunawayOptions, error) {
	changed := func(name string) bool { return cmd.Flags().Changed(name) }
	var o registry.RunawayOptions
	if changed("runaway-cpu") {
		f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(r.cpu), "%"), 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return nil, usageErrorf("%s: --runaway-cpu %q: give a share of a core above 0, such as 90 (200 is two cores)", op, clipCommand(r.cpu, 40))
		}
		o.CPUPercent = f
	}
	if changed("runaway-memory") {
		n, err := env.ParseSize(r.memory)
		if err != nil {
			return nil, usageErrorf("%s: --runaway-memory %q: give a size in bytes or with a suffix, such as 512M or 4G", op, clipCommand(r.memory, 40))
		}
		o.Memory = n
	}
	if changed("runaway-for") {
		if o.IsZero() {
			return nil, usageErrorf("%s: --runaway-for is the window of --runaway-cpu or --runaway-memory: give one of them too", op)
		}
		o.For = registry.Duration(r.window)
	}
	if o.IsZero() {
		return nil, nil
	}
	if err := o.Validate(); err != nil {
		return nil, usageErrorf("%s: --runaway-for %s: give at least 1s", op, r.window)
	}
	return &o, nil
}

// runawayHelp is the paragraph of run's and start's help on runaways.
const runawayHelp = `Runaways: --runaway-cpu PERCENT (with no output) and --runaway-memory SIZE
(growth) within --runaway-for (default 2m) publish one runaway event per
episode and mark the process on the dashboard; nothing is killed. Without
them the daemon's defaults (corral serve --runaway-*) apply.`
