package benchtab

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/corralhq/corral/bench
cpu: Some CPU @ 2.00GHz
BenchmarkStartFirstByte
BenchmarkStartFirstByte/corral
BenchmarkStartFirstByte/corral-2         	     100	   2600000 ns/op	   12000 B/op	     150 allocs/op
BenchmarkStartFirstByte/corral-2         	2026/11/22 07:34:06 WARN something logged 1 2
2026/11/22 07:34:06 WARN more log
     100	   2400000 ns/op	   12000 B/op	     150 allocs/op
BenchmarkStartFirstByte/baseline-2       	     200	   2000000 ns/op	    9000 B/op	      90 allocs/op
PASS
ok  	github.com/corralhq/corral/bench	3.012s
pkg: github.com/corralhq/corral/registry
BenchmarkIngest/corral-2    	       1	1500000000 ns/op	 500.00 MB/s	        80.0 heap-MiB
BenchmarkIngest/baseline-2  	       1	1000000000 ns/op	1000.00 MB/s	         1.5 heap-MiB
BenchmarkList-2             	    1000	   1200000 ns/op	    2048 bytes/proc
BenchmarkPoll/1000-2        	   50000	   12000000 ns/op
BenchmarkLonely/corral-2    	      10	       500 ns/op
    bench_test.go:42: some log line that starts with spaces
ok  	github.com/corralhq/corral/registry	9.1s
`

func find(t *testing.T, rows []Row, bench, unit string) Row {
	t.Helper()
	for _, r := range rows {
		if r.Bench == bench && r.Unit == unit {
			return r
		}
	}
	require.FailNow(t, fmt.Sprintf("no row %s %s in %+v", bench, unit, rows))
	return Row{}
}

func TestParse(t *testing.T) {
	results, err := Parse(strings.NewReader(sample))
	require.NoError(t, err)
	var names []string
	for _, r := range results {
		names = append(names, r.Name)
	}
	want := "StartFirstByte/corral StartFirstByte/baseline Ingest/corral Ingest/baseline List Poll/1000 Lonely/corral"
	got := strings.Join(names, " ")
	require.Truef(t, got == want, "names = %q, want %q", got, want)
	sfb := results[0]
	assert.Truef(t, sfb.Runs == 2 && sfb.Pkg == "github.com/corralhq/corral/bench", "runs=%d pkg=%q, want 2 and the bench package", sfb.Runs, sfb.Pkg)
	if v, _ := sfb.Metric("ns/op"); v != 2500000 {
		assert.Fail(t, fmt.Sprintf("mean ns/op = %v, want 2500000", v))
	}
	v, ok := results[2].Metric("heap-MiB")
	assert.Truef(t, ok && v == 80, "custom metric heap-MiB = %v, %v", v, ok)
	if results[2].Pkg != "github.com/corralhq/corral/registry" {
		assert.Fail(t, fmt.Sprintf("pkg not switched: %q", results[2].Pkg))
	}
}

func TestParseIgnoresNumbersWithoutABenchmark(t *testing.T) {
	results, err := Parse(strings.NewReader("PASS\n   10   20 ns/op\nok  x  1s\nBenchmarkA-2  log line\n  5 apples 3\n"))
	require.Truef(t, err == nil && len(results) == 0, "results %+v, err %v; want none", results, err)
}

func TestParseRejectsGarbledFigure(t *testing.T) {
	_, err := Parse(strings.NewReader("BenchmarkX-2  10  abc ns/op\n"))
	require.Truef(t, err != nil && strings.Contains(err.Error(), "line 1"), "err = %v, want an error naming line 1", err)
}

func TestBuildPairsAndChecks(t *testing.T) {
	results, err := Parse(strings.NewReader(sample))
	require.NoError(t, err)
	rows := Build(results, DefaultChecks)

	sfb := find(t, rows, "StartFirstByte", "ns/op")
	if !sfb.HasBase || sfb.Ratio() != 1.25 || sfb.Verdict != "PASS" {
		assert.Fail(t, fmt.Sprintf("StartFirstByte row = %+v ratio %v, want ratio 1.25 PASS", sfb, sfb.Ratio()))
	}
	if r := find(t, rows, "StartFirstByte", "allocs/op"); r.Verdict != "" || r.Baseline != 90 {
		assert.Fail(t, fmt.Sprintf("allocs row = %+v, want baseline 90 and no target", r))
	}
	if r := find(t, rows, "Ingest", "MB/s"); r.Verdict != "MISS" || r.Ratio() != 0.5 {
		assert.Fail(t, fmt.Sprintf("Ingest MB/s = %+v, want ratio 0.5 MISS", r))
	}
	if r := find(t, rows, "Ingest", "heap-MiB"); r.Verdict != "MISS" {
		assert.Fail(t, fmt.Sprintf("Ingest heap = %+v, want MISS (80 ≥ 64)", r))
	}
	if r := find(t, rows, "List", "ns/op"); r.Verdict != "PASS" || r.HasBase {
		assert.Fail(t, fmt.Sprintf("List = %+v, want unpaired PASS", r))
	}
	if r := find(t, rows, "Poll/1000", "ns/op"); r.Verdict != "MISS" {
		assert.Fail(t, fmt.Sprintf("Poll/1000 = %+v, want MISS (12 ms ≥ 10 ms)", r))
	}
	if r := find(t, rows, "Lonely/corral", "ns/op"); r.HasBase || r.Verdict != "" {
		assert.Fail(t, fmt.Sprintf("unpaired corral half = %+v, want listed alone without target", r))
	}
	for _, r := range rows {
		assert.Falsef(t, strings.HasSuffix(r.Bench, "/baseline"), "paired baseline listed on its own: %+v", r)
	}
	got := Misses(rows)
	assert.Truef(t, got == 3, "Misses = %d, want 3", got)
}

func TestBuildRatioMissesWithoutBaselineFigure(t *testing.T) {
	results := []Result{
		{Name: "StartFirstByte/corral", Metrics: []Metric{{Value: 10, Unit: "ns/op"}}},
		{Name: "StartFirstByte/baseline", Metrics: []Metric{{Value: 5, Unit: "B/op"}}},
	}
	rows := Build(results, DefaultChecks)
	require.Truef(t, len(rows) == 1 && rows[0].Verdict == "MISS" && !rows[0].HasBase, "rows = %+v, want one MISS row without baseline", rows)
}

func TestWrite(t *testing.T) {
	results, err := Parse(strings.NewReader(sample))
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, Build(results, DefaultChecks)))
	out := buf.String()
	for _, want := range []string{
		"PACKAGE", "bench  ", "StartFirstByte", "2.50ms", "2.00ms", "1.25", "ratio ≤ 1.3", "PASS",
		"< 10.00ms", "ratio ≥ 0.7", "< 64", "MISS",
	} {
		assert.Truef(t, strings.Contains(out, want), "table lacks %q:\n%s", want, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	lastCol := func(l string) int { // rune column where the last cell starts
		r := []rune(l)
		i := len(r)
		for i > 0 && r[i-1] != ' ' {
			i--
		}
		return i
	}
	want := lastCol(lines[0])
	for _, l := range lines[1:] {
		got := lastCol(l)
		assert.Truef(t, got == want, "RESULT column at %d, header at %d: %q", got, want, l)
	}
}

func TestBuildAtLeast(t *testing.T) {
	results := []Result{
		{Name: "PluginOutput/corral", Metrics: []Metric{{Value: 450, Unit: "MB/s"}}},
		{Name: "PluginOutput/baseline", Metrics: []Metric{{Value: 3500, Unit: "MB/s"}}},
		{Name: "Slow", Metrics: []Metric{{Value: 150, Unit: "MB/s"}}},
	}
	checks := []Check{
		{Bench: "PluginOutput", Unit: "MB/s", Kind: AtLeast, Limit: 200},
		{Bench: "Slow", Unit: "MB/s", Kind: AtLeast, Limit: 200},
	}
	rows := Build(results, checks)
	if r := find(t, rows, "PluginOutput", "MB/s"); r.Verdict != "PASS" || r.Target != "≥ 200" {
		assert.Fail(t, fmt.Sprintf("PluginOutput = %+v, want PASS against ≥ 200 (an absolute floor, whatever the ratio)", r))
	}
	r := find(t, rows, "Slow", "MB/s")
	assert.Truef(t, r.Verdict == "MISS", "Slow = %+v, want MISS (150 < 200)", r)
}

func TestBuildAtMost(t *testing.T) {
	results := []Result{
		{Name: "StatsSampling100/local/corral", Metrics: []Metric{{Value: 1.4, Unit: "cpu-%"}, {Value: 1, Unit: "sampling-cpu-%"}}},
		{Name: "StatsSampling100/local/baseline", Metrics: []Metric{{Value: 0.4, Unit: "cpu-%"}}},
		{Name: "StatsFreshness/docker", Metrics: []Metric{{Value: 2100, Unit: "age-ms-max"}}},
	}
	rows := Build(results, DefaultChecks)
	r := find(t, rows, "StatsSampling100/local", "sampling-cpu-%")
	assert.Truef(t, r.Verdict == "PASS" && r.Target == "≤ 1", "sampling = %+v, want PASS against ≤ 1 (the bound itself meets it)", r)
	r = find(t, rows, "StatsFreshness/docker", "age-ms-max")
	assert.Truef(t, r.Verdict == "MISS" && r.Target == "≤ 2000", "freshness = %+v, want MISS (2100 > 2000)", r)
}
