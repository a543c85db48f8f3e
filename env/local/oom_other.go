//go:build !linux

package local

import "github.com/corralhq/corral/env"

// oomCounter: outside Linux there is no cgroup record of OOM kills, so no
// status is marked OOMKilled.
type oomCounter struct{}

// oomFinder finds nothing.
type oomFinder struct{}

func (*oomFinder) counter(string) oomCounter { return oomCounter{} }

func (oomCounter) mark(st env.ExitStatus) env.ExitStatus { return st }

func treeCgroupDir(tree) string { return "" }
