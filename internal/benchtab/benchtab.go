// Package benchtab turns `go test -bench` text output into one comparison
// table: every Benchmark<Name>/corral is paired with its
// Benchmark<Name>/baseline, their figures are set side by side with the
// ratio corral/baseline, and the targets the project set for itself are
// checked (PASS or MISS).
//
// It is developer tooling behind `make bench`, not part of corral's API.
//
// Decisions:
//   - A benchmark that ran several times (-count N) is reduced to the mean
//     of each metric, so one noisy run does not decide a target alone.
//   - The GOMAXPROCS suffix ("-2") is dropped from names: the table is about
//     what was measured, and pairs must match across it.
//   - Benchmarks without a partner are still listed, with their metrics, so
//     nothing that ran disappears from the report.
package benchtab

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Metric is one figure a benchmark reported, such as 1234 ns/op.
type Metric struct {
	Value float64
	Unit  string
}

// Result is one benchmark's figures, averaged over its runs.
type Result struct {
	// Name is the benchmark's name without the "Benchmark" prefix and
	// without the GOMAXPROCS suffix, e.g. "StartFirstByte/corral".
	Name string
	// Pkg is the package the benchmark ran in, from the "pkg:" line.
	Pkg string
	// Runs counts how many result lines were averaged.
	Runs int
	// Iterations is the mean b.N of those runs.
	Iterations float64
	// Metrics in the order the benchmark first reported them.
	Metrics []Metric
}

// Metric returns the value reported in unit and whether there was one.
func (r Result) Metric(unit string) (float64, bool) {
	for _, m := range r.Metrics {
		if m.Unit == unit {
			return m.Value, true
		}
	}
	return 0, false
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads `go test -bench` output and returns one Result per distinct
// (package, benchmark), in the order they first appeared. Lines that are not
// benchmark results (test logs, "ok", "PASS") are skipped. A result line
// whose figures cannot be read is an error naming the line, since a silently
// dropped figure would make the table lie.
func Parse(r io.Reader) ([]Result, error) {
	type acc struct {
		res   Result
		sums  map[string]float64
		count map[string]int
	}
	var (
		order []string
		byKey = map[string]*acc{}
		pkg   string
		// pending is the benchmark whose figures have not been read yet.
		pending string
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if p, ok := strings.CutPrefix(line, "pkg:"); ok {
			pkg = strings.TrimSpace(p)
			pending = ""
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		// A result line is: name, iterations, then value/unit pairs. When
		// the benchmark logs while it runs, go test prints the name, then
		// the log lines, then the figures on a line of their own: remember
		// the name until its figures arrive.
		named := strings.HasPrefix(fields[0], "Benchmark")
		if named {
			pending = fields[0]
			if len(fields) < 2 {
				continue
			}
			fields = fields[1:]
		} else if pending == "" {
			continue
		}
		if len(fields) < 3 || len(fields)%2 != 1 {
			continue
		}
		iters, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue // log output, not figures
		}
		values := make([]float64, 0, len(fields)/2)
		var bad string
		for i := 1; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				bad = fields[i]
				break
			}
			values = append(values, v)
		}
		if bad != "" {
			if !named {
				continue // a log line that happens to start with a number
			}
			return nil, fmt.Errorf("benchtab: line %d: figure %q is not a number: %q", lineNo, bad, line)
		}
		name := procsSuffix.ReplaceAllString(strings.TrimPrefix(pending, "Benchmark"), "")
		pending = ""
		key := pkg + "\x00" + name
		a := byKey[key]
		if a == nil {
			a = &acc{res: Result{Name: name, Pkg: pkg}, sums: map[string]float64{}, count: map[string]int{}}
			byKey[key] = a
			order = append(order, key)
		}
		a.res.Runs++
		a.res.Iterations += float64(iters)
		for j, v := range values {
			unit := fields[2*j+2]
			if _, seen := a.sums[unit]; !seen {
				a.res.Metrics = append(a.res.Metrics, Metric{Unit: unit})
			}
			a.sums[unit] += v
			a.count[unit]++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("benchtab: read: %w", err)
	}
	out := make([]Result, 0, len(order))
	for _, key := range order {
		a := byKey[key]
		a.res.Iterations /= float64(a.res.Runs)
		for i := range a.res.Metrics {
			u := a.res.Metrics[i].Unit
			a.res.Metrics[i].Value = a.sums[u] / float64(a.count[u])
		}
		out = append(out, a.res)
	}
	return out, nil
}

// Check is a target for one metric of a benchmark.
type Check struct {
	// Bench is the pair name ("Ingest") or unpaired benchmark name
	// ("List"); it also matches sub-benchmarks ("List/1000").
	Bench string
	// Unit is the metric checked, e.g. "ns/op", "MB/s", "heap-MiB".
	Unit string
	// Kind says how the figure is judged.
	Kind CheckKind
	// Limit is the bound: a ratio for RatioAtMost/RatioAtLeast, a value in
	// Unit for AtMost/Below.
	Limit float64
}

// CheckKind says how a Check judges its figure.
type CheckKind int

const (
	// RatioAtMost: corral/baseline ≤ Limit (lower is better, e.g. ns/op).
	RatioAtMost CheckKind = iota
	// RatioAtLeast: corral/baseline ≥ Limit (higher is better, e.g. MB/s).
	RatioAtLeast
	// Below: the corral figure (or the unpaired figure) < Limit.
	Below
	// AtLeast: the corral figure (or the unpaired figure) ≥ Limit.
	AtLeast
	// AtMost: the corral figure (or the unpaired figure) ≤ Limit, for a
	// target stated inclusively (a share of a core, an age).
	AtMost
)

// String renders the target as it appears in the table.
func (c Check) String() string {
	switch c.Kind {
	case RatioAtMost:
		return fmt.Sprintf("ratio ≤ %g", c.Limit)
	case RatioAtLeast:
		return fmt.Sprintf("ratio ≥ %g", c.Limit)
	case AtLeast:
		return "≥ " + formatValue(c.Limit, c.Unit)
	case AtMost:
		return "≤ " + formatValue(c.Limit, c.Unit)
	default:
		return "< " + formatValue(c.Limit, c.Unit)
	}
}

// DefaultChecks are corral's performance targets.
var DefaultChecks = []Check{
	// Starting a process through corral costs at most 30 % more than
	// os/exec until the first output byte arrives.
	{Bench: "StartFirstByte", Unit: "ns/op", Kind: RatioAtMost, Limit: 1.3},
	// Ingesting a flood of output keeps at least 70 % of a bare pipe's
	// throughput, with bounded memory.
	{Bench: "Ingest", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.7},
	{Bench: "Ingest", Unit: "heap-MiB", Kind: Below, Limit: 64},
	// Listing and polling with 1000 tracked processes stays interactive.
	{Bench: "List", Unit: "ns/op", Kind: Below, Limit: 10e6},
	{Bench: "Poll", Unit: "ns/op", Kind: Below, Limit: 10e6},
	// Sandboxes at native speed: a foreground `true` in a container costs
	// at most a fifth of the docker CLI's exec (a call on a resident shell);
	// an exit is noticed within 20 ms; a log reads at half of `cat` or
	// better, moving each byte across the transport once.
	{Bench: "ExecTrue", Unit: "ns/op", Kind: RatioAtMost, Limit: 0.2},
	// A one-shot sandbox from an image (create, `true`, remove) costs no
	// more than `docker run --rm IMAGE true`.
	{Bench: "ImageSandbox", Unit: "ns/op", Kind: RatioAtMost, Limit: 1.0},
	{Bench: "ExitDetection", Unit: "exit-detect-ms", Kind: Below, Limit: 20},
	{Bench: "LogRead", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.5},
	{Bench: "LogRead", Unit: "bytes-moved/log-size", Kind: Below, Limit: 1.05},
	// Over SSH: at most half of OpenSSH through a warm ControlMaster, ten
	// times faster than a new OpenSSH connection per command; logs at half
	// of `ssh host cat` or better.
	{Bench: "SSHTrue", Unit: "ns/op", Kind: RatioAtMost, Limit: 0.5},
	{Bench: "SSHTrueNewConn", Unit: "ns/op", Kind: RatioAtMost, Limit: 0.1},
	{Bench: "SSHExitDetection", Unit: "exit-detect-ms", Kind: Below, Limit: 20},
	{Bench: "SSHLogRead", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.5},
	// Through a plugin: start+wait at most 1.5x in-process, output at
	// half the in-process stream or better, and 200 MB/s at least.
	{Bench: "PluginStartWait", Unit: "ns/op", Kind: RatioAtMost, Limit: 1.5},
	{Bench: "PluginOutput", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.5},
	{Bench: "PluginOutput", Unit: "MB/s", Kind: AtLeast, Limit: 200},
	// A detached local process (corral start, the daemon) is as fast as a
	// foreground one: start+wait at most 3x the pipes variant, its exit
	// seen within 2 ms, a flood of output ingested by an in-process
	// registry at 70 % or more of the raw pipeline into /dev/null.
	{Bench: "DetachedStartWait", Unit: "ns/op", Kind: RatioAtMost, Limit: 3},
	{Bench: "DetachedExitDetection", Unit: "exit-detect-ms", Kind: Below, Limit: 2},
	{Bench: "DetachedIngest", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.7},
	// Bounding a detached log on disk (punching its middle out behind
	// the reader) costs at most 10 % of the output's throughput.
	{Bench: "DetachedLogBound", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.9},
	// Whole CLI processes against a warm daemon (#34): a run over SSH at
	// most half of OpenSSH through a warm ControlMaster; a local run at
	// most 3x `sh -c true`; `corral version` at most 1.5x a minimal Go
	// program; a docker run at most half of `docker exec`; 100 MB of
	// output at 90 % of the native tool's throughput or more; 200
	// concurrent runs with a p99 at most 10x a single run's median.
	{Bench: "CLIRunSSH", Unit: "ns/op", Kind: RatioAtMost, Limit: 0.5},
	{Bench: "CLIRunDocker", Unit: "ns/op", Kind: RatioAtMost, Limit: 0.5},
	{Bench: "CLIOutputDocker", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.9},
	{Bench: "CLIOutputDockerTmpfs", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.9},
	{Bench: "CLIOutputSSH", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.9},
	{Bench: "CLIRunLocal", Unit: "ns/op", Kind: RatioAtMost, Limit: 3},
	{Bench: "CLIVersion", Unit: "ns/op", Kind: RatioAtMost, Limit: 1.5},
	{Bench: "CLIRunConcurrent", Unit: "p99/single", Kind: AtMost, Limit: 10},
	// `corral ps` with the ports of twenty processes in one container
	// within 100 ms: one look per backend, not one exec per process.
	{Bench: "CLIPSPortsDocker", Unit: "ns/op", Kind: Below, Limit: 100e6},
	// The look behind it: the ports of twenty trees in one round trip at
	// most a fifth of one look per tree.
	{Bench: "TreeListeners", Unit: "ns/op", Kind: RatioAtMost, Limit: 0.2},
	// A follower (logs -f, the dashboard) gets a byte within 2 ms (median)
	// of the command writing it: output is pushed, not polled.
	{Bench: "FollowLatency", Unit: "latency-ms", Kind: Below, Limit: 2},
	// Every browser of the dashboard sees a change within 100 ms.
	{Bench: "UpdateLatency", Unit: "update-ms", Kind: Below, Limit: 100},
	// corral acp adds no measurable latency to a message it only relays:
	// a round trip through it within 10 % of the direct connection (the
	// copyrelay row is the floor of any process in between).
	{Bench: "ACPRelay", Unit: "ns/op", Kind: RatioAtMost, Limit: 1.1},
	// A dev server is seen ready within 50 ms (median) of its socket
	// listening, locally and in a container.
	{Bench: "ReadyLatency", Unit: "ready-ms-median", Kind: Below, Limit: 50},
	// A restarted daemon re-attaches 100 processes of one container
	// within 2 s (the registry serves meanwhile, listing them recovering).
	{Bench: "RecoverDocker", Unit: "ns/op", Kind: Below, Limit: 2e9},
	// Kubernetes (#31): a foreground `true` in a pod at most half of one
	// client-go exec in process, an exit noticed within 20 ms, a log read
	// at half of an exec of cat or better, and `corral run` through the
	// daemon at most half of `kubectl exec`.
	{Bench: "K8sExecTrue", Unit: "ns/op", Kind: RatioAtMost, Limit: 0.5},
	{Bench: "K8sExitDetection", Unit: "exit-detect-ms", Kind: Below, Limit: 20},
	{Bench: "K8sLogRead", Unit: "MB/s", Kind: RatioAtLeast, Limit: 0.5},
	{Bench: "CLIRunK8s", Unit: "ns/op", Kind: RatioAtMost, Limit: 0.5},
	// Stats (#32): sampling 100 running processes costs at most 1 % of a
	// core locally and 3 % on docker more than the same registry with the
	// sampler off, in the same run; a busy process's figures are never
	// older than 2 s; a busy loop is seen using 90 % of a core or more (on
	// an idle machine).
	{Bench: "StatsSampling100/local", Unit: "sampling-cpu-%", Kind: AtMost, Limit: 1},
	{Bench: "StatsSampling100/docker", Unit: "sampling-cpu-%", Kind: AtMost, Limit: 3},
	{Bench: "StatsFreshness", Unit: "age-ms-max", Kind: AtMost, Limit: 2000},
	{Bench: "StatsBusyLoopShare", Unit: "cpu-share", Kind: AtLeast, Limit: 0.9},
}

// Row is one line of the table.
type Row struct {
	Pkg      string
	Bench    string // pair name, or full name when unpaired
	Unit     string
	Corral   float64
	Baseline float64
	HasBase  bool
	Target   string // "" when no target applies
	Verdict  string // "PASS", "MISS" or ""
}

// Ratio returns corral/baseline, or 0 when there is no baseline figure.
func (r Row) Ratio() float64 {
	if !r.HasBase || r.Baseline == 0 {
		return 0
	}
	return r.Corral / r.Baseline
}

// Build pairs results and applies checks. Pairs come first, in the order
// their corral half appeared; unpaired benchmarks follow.
func Build(results []Result, checks []Check) []Row {
	type pairKey struct{ pkg, name string }
	baselines := map[pairKey]Result{}
	corrals := map[pairKey]bool{}
	for _, r := range results {
		if base, ok := strings.CutSuffix(r.Name, "/baseline"); ok {
			baselines[pairKey{r.Pkg, base}] = r
		}
		if base, ok := strings.CutSuffix(r.Name, "/corral"); ok {
			corrals[pairKey{r.Pkg, base}] = true
		}
	}
	var paired, single []Row
	for _, r := range results {
		if base, ok := strings.CutSuffix(r.Name, "/corral"); ok {
			if b, ok := baselines[pairKey{r.Pkg, base}]; ok {
				paired = append(paired, pairRows(r.Pkg, base, r, b, checks)...)
				continue
			}
		}
		if base, ok := strings.CutSuffix(r.Name, "/baseline"); ok && corrals[pairKey{r.Pkg, base}] {
			continue // shown with its corral half
		}
		single = append(single, singleRows(r, checks)...)
	}
	return append(paired, single...)
}

func matches(c Check, bench string) bool {
	return bench == c.Bench || strings.HasPrefix(bench, c.Bench+"/")
}

func pairRows(pkg, name string, corral, base Result, checks []Check) []Row {
	var rows []Row
	for _, m := range corral.Metrics {
		row := Row{Pkg: pkg, Bench: name, Unit: m.Unit, Corral: m.Value}
		row.Baseline, row.HasBase = base.Metric(m.Unit)
		for _, c := range checks {
			if c.Unit != m.Unit || !matches(c, name) {
				continue
			}
			row.Target = c.String()
			row.Verdict = verdict(c, row)
		}
		rows = append(rows, row)
	}
	return rows
}

func singleRows(r Result, checks []Check) []Row {
	var rows []Row
	for _, m := range r.Metrics {
		row := Row{Pkg: r.Pkg, Bench: r.Name, Unit: m.Unit, Corral: m.Value}
		for _, c := range checks {
			if c.Unit != m.Unit || !matches(c, r.Name) || (c.Kind != Below && c.Kind != AtLeast && c.Kind != AtMost) {
				continue
			}
			row.Target = c.String()
			row.Verdict = verdict(c, row)
		}
		rows = append(rows, row)
	}
	return rows
}

func verdict(c Check, row Row) string {
	ok := false
	switch c.Kind {
	case RatioAtMost:
		ok = row.HasBase && row.Baseline > 0 && row.Ratio() <= c.Limit
	case RatioAtLeast:
		ok = row.HasBase && row.Baseline > 0 && row.Ratio() >= c.Limit
	case Below:
		ok = row.Corral < c.Limit
	case AtLeast:
		ok = row.Corral >= c.Limit
	case AtMost:
		ok = row.Corral <= c.Limit
	}
	if ok {
		return "PASS"
	}
	return "MISS"
}

// Misses counts rows whose target was missed.
func Misses(rows []Row) int {
	n := 0
	for _, r := range rows {
		if r.Verdict == "MISS" {
			n++
		}
	}
	return n
}

// Write prints rows as one aligned text table.
func Write(w io.Writer, rows []Row) error {
	header := []string{"PACKAGE", "BENCHMARK", "METRIC", "CORRAL", "BASELINE", "RATIO", "TARGET", "RESULT"}
	table := [][]string{header}
	for _, r := range rows {
		base, ratio := "-", "-"
		if r.HasBase {
			base = formatValue(r.Baseline, r.Unit)
			if r.Baseline != 0 {
				ratio = strconv.FormatFloat(r.Ratio(), 'f', 2, 64)
			}
		}
		table = append(table, []string{
			shortPkg(r.Pkg), r.Bench, r.Unit, formatValue(r.Corral, r.Unit), base, ratio,
			dash(r.Target), dash(r.Verdict),
		})
	}
	widths := make([]int, len(header))
	for _, line := range table {
		for i, cell := range line {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	var b strings.Builder
	for _, line := range table {
		for i, cell := range line {
			b.WriteString(cell)
			if i < len(line)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-len([]rune(cell))+2))
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortPkg drops the module path so the table stays narrow.
func shortPkg(pkg string) string {
	if rest, ok := strings.CutPrefix(pkg, "github.com/corralhq/corral/"); ok {
		return rest
	}
	return pkg
}

// formatValue renders durations (ns/op) in human units, the rest with
// three significant digits.
func formatValue(v float64, unit string) string {
	if unit == "ns/op" {
		switch {
		case v >= 1e9:
			return strconv.FormatFloat(v/1e9, 'f', 2, 64) + "s"
		case v >= 1e6:
			return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "ms"
		case v >= 1e3:
			return strconv.FormatFloat(v/1e3, 'f', 2, 64) + "µs"
		default:
			return strconv.FormatFloat(v, 'f', 0, 64) + "ns"
		}
	}
	if v != 0 && (v >= 1e9 || (v < 0.01 && v > -0.01)) {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
