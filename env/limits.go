package env

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	units "github.com/docker/go-units"
)

// Limits are hard ceilings on one process tree: memory over Memory ends
// the tree by the kernel's OOM killer (never throttling alone), CPU time
// is held to CPUs cores, and no more than Pids tasks (processes and
// threads) exist in it at once. A zero field sets no limit.
//
// A backend enforces the limits its Capabilities.Limits names and refuses
// a Spec asking for another one (ErrUnsupported, through a *LimitError):
// a limit accepted and not enforced would be worse than none.
type Limits struct {
	// Memory is in bytes, swap included.
	Memory int64 `json:"memory,omitempty"`
	// CPUs is a number of cores, possibly fractional (1.5).
	CPUs float64 `json:"cpus,omitempty"`
	// Pids counts tasks: a process with 8 threads counts 8.
	Pids int64 `json:"pids,omitempty"`
}

// The names of the limits, as Capabilities.Limits, the CLI's flags
// (--memory, --cpus, --pids), the API and MCP say them.
const (
	LimitMemory = "memory"
	LimitCPUs   = "cpus"
	LimitPids   = "pids"
)

// Smallest limits a backend is asked to enforce. Below them nothing runs
// at all (a shell needs a few MiB; a Go or Node program starts several
// threads before its first line), so such a limit is a typo, refused.
const (
	MinMemoryLimit = 6 << 20
	MinCPUsLimit   = 0.01
	MaxCPUsLimit   = 1024
	MinPidsLimit   = 10
)

// CPUPeriod is the period, in microseconds, a CPU quota is given per: the
// kernel's default CFS period (cpu.cfs_period_us, cpu.max).
const CPUPeriod = 100000

// CPUQuota is CPUs as microseconds of CPU per CPUPeriod, at least the
// kernel's minimum of 1 ms; 0 without a CPU limit.
func (l Limits) CPUQuota() int64 {
	if l.CPUs == 0 {
		return 0
	}
	return max(int64(l.CPUs*CPUPeriod+0.5), 1000)
}

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool { return l == Limits{} }

// Names lists the limits set, in the order memory, cpus, pids.
func (l Limits) Names() []string {
	var names []string
	if l.Memory != 0 {
		names = append(names, LimitMemory)
	}
	if l.CPUs != 0 {
		names = append(names, LimitCPUs)
	}
	if l.Pids != 0 {
		names = append(names, LimitPids)
	}
	return names
}

// Validate checks each limit that is set against its bounds.
func (l Limits) Validate() error {
	switch {
	case l.Memory != 0 && l.Memory < MinMemoryLimit:
		return &SpecError{Field: "Limits.Memory", Value: strconv.FormatInt(l.Memory, 10), Reason: "must be at least 6M (give a size such as 512M or 2G)"}
	case l.CPUs != 0 && (math.IsNaN(l.CPUs) || l.CPUs < MinCPUsLimit || l.CPUs > MaxCPUsLimit):
		return &SpecError{Field: "Limits.CPUs", Value: strconv.FormatFloat(l.CPUs, 'g', -1, 64), Reason: "must be between 0.01 and 1024 cores"}
	case l.Pids != 0 && l.Pids < MinPidsLimit:
		return &SpecError{Field: "Limits.Pids", Value: strconv.FormatInt(l.Pids, 10), Reason: "must be at least 10 (a program's own threads count)"}
	}
	return nil
}

// String says the limits set as the flags would: "memory 2G, cpus 1.5,
// pids 512"; "" for none.
func (l Limits) String() string {
	var parts []string
	if l.Memory != 0 {
		parts = append(parts, "memory "+FormatSize(l.Memory))
	}
	if l.CPUs != 0 {
		parts = append(parts, "cpus "+strconv.FormatFloat(l.CPUs, 'f', -1, 64))
	}
	if l.Pids != 0 {
		parts = append(parts, "pids "+strconv.FormatInt(l.Pids, 10))
	}
	return strings.Join(parts, ", ")
}

// ParseSize reads a memory size: a number of bytes or one with a binary
// suffix (512M, 2G, 1.5g, 100MiB); the suffixes are powers of 1024, as
// docker's --memory reads them.
func ParseSize(s string) (int64, error) {
	n, err := parseBytes(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: give a number of bytes or one with a suffix, such as 512M or 2G", clipValue(s))
	}
	return n, nil
}

// parseBytes reads a number of bytes, bare or with a binary suffix (K, M,
// G, T, P, with or without "iB"/"B"), as docker's --memory does; never
// negative.
func parseBytes(s string) (int64, error) {
	return units.RAMInBytes(strings.TrimSpace(s))
}

// FormatSize writes n bytes in the largest unit that divides it (2G, 100M,
// 64K), else with one decimal in the largest unit it reaches (1.5G).
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.size {
			if n%u.size == 0 {
				return strconv.FormatInt(n/u.size, 10) + u.suffix
			}
			return strconv.FormatFloat(float64(n)/float64(u.size), 'f', 1, 64) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseCPUs reads a number of cores (1.5).
func ParseCPUs(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("cpus %q: give a number of cores, such as 1.5", clipValue(s))
	}
	return f, nil
}

// LimitError is the refusal of a limit a backend cannot enforce. It
// matches ErrUnsupported.
type LimitError struct {
	Backend string // the backend's name
	Limits  []string
	Reason  string // why, and what to do instead
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s cannot enforce --%s: %s", e.Backend, strings.Join(e.Limits, ", --"), e.Reason)
}

func (e *LimitError) Unwrap() error { return ErrUnsupported }

// CheckLimits refuses the limits of l that caps does not name, with
// reason (the backend's own words, from its Capabilities.LimitsNote).
func CheckLimits(backend string, caps Capabilities, l Limits) error {
	var missing []string
	for _, name := range l.Names() {
		if !slices.Contains(caps.Limits, name) {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	reason := caps.LimitsNote
	if reason == "" {
		reason = "this backend enforces no per-process limit"
	}
	return &LimitError{Backend: backend, Limits: missing, Reason: reason}
}

func clipValue(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
