package nohup

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/corralhq/corral/env"
)

// cgroupState is what ProbeLimits found: where per-process limit cgroups
// go in the sandbox (see sh/cgroup.sh), or why none can.
type cgroupState struct {
	version string // "v1" or "v2"; "" when the sandbox has none to use
	where   string // the base directories, for the note doctor shows
	why     string // when version is "": why, from the probe
}

// ProbeLimits asks the sandbox whether its user may write a cgroup with the
// memory, cpu and pids controllers, and from then on Capabilities.Limits
// says so: Start then enforces env.Limits in a cgroup per process tree (a
// hard memory limit, an OOM kill over it). Without a probe, or when the
// probe found no such cgroup, limits are refused (with the probe's reason).
// A transport calls it once, as it opens; a failed call leaves limits
// refused and says why.
func (e *Env) ProbeLimits(ctx context.Context) error {
	out, err := e.call(ctx, "probe limits", call("corral_cgprobe"), true)
	if err != nil {
		e.mu.Lock()
		e.cgroups = &cgroupState{why: "the sandbox did not answer whether it has one (" + clipDetail(err.Error()) + ")"}
		e.mu.Unlock()
		return err
	}
	st, err := parseCgroupProbe(strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("nohup %s: probe limits: %w", e.opts.Name, err)
	}
	e.mu.Lock()
	e.cgroups = st
	e.mu.Unlock()
	return nil
}

// parseCgroupProbe reads corral_cgprobe's line: "v1 MEM CPU PIDS",
// "v2 DIR" or "none WHY".
func parseCgroupProbe(line string) (*cgroupState, error) {
	word, rest, _ := strings.Cut(line, " ")
	switch word {
	case "v1", "v2":
		if rest == "" {
			break
		}
		return &cgroupState{version: word, where: rest}, nil
	case "none":
		return &cgroupState{why: clipDetail(rest)}, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", clipDetail(line))
}

// limitCaps returns Capabilities.Limits and LimitsNote: all three limits
// and how, once a probe found a cgroup to use; else none and why.
func (e *Env) limitCaps() ([]string, string) {
	e.mu.Lock()
	cg := e.cgroups
	e.mu.Unlock()
	switch {
	case cg != nil && cg.version != "":
		return []string{env.LimitMemory, env.LimitCPUs, env.LimitPids},
			"a cgroup " + cg.version + " per process tree, under " + cg.where
	case cg != nil:
		return nil, "per-process limits need a cgroup this user may write in the sandbox, and " + cg.why +
			"; limit the sandbox itself, or give the user a delegated cgroup"
	case e.opts.LimitsNote != "":
		return nil, e.opts.LimitsNote
	}
	return nil, "per-process limits inside this sandbox are not enforced (no writable cgroup is used there); limit the sandbox itself"
}

// limitArg is corral_launch's LIM: "-" for none, else "MEM QUOTA PIDS",
// 0 standing for a limit not set (see cgmake).
func limitArg(l *env.Limits) string {
	if l == nil || l.IsZero() {
		return "-"
	}
	return strconv.FormatInt(l.Memory, 10) + " " + strconv.FormatInt(l.CPUQuota(), 10) + " " + strconv.FormatInt(l.Pids, 10)
}
