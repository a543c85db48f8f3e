package wire

import (
	"time"

	"github.com/corralhq/corral/env"
	pb "github.com/corralhq/corral/plugins/proto"
)

// maxMissing and maxMissingLen bound what a plugin's Missing list may
// carry into the host: it names fields ("io"), and a plugin that sends
// more is not trusted to fill logs and listings with it.
const (
	maxMissing    = 8
	maxMissingLen = 32
)

// TreeStatsToProto converts a TreeStatter's answer; a nil entry travels as
// present=false.
func TreeStatsToProto(ts []*env.TreeStats) *pb.TreeStatsResponse {
	out := make([]*pb.TreeStats, len(ts))
	for i, s := range ts {
		if s == nil {
			out[i] = &pb.TreeStats{}
			continue
		}
		out[i] = &pb.TreeStats{Present: true, CpuNanos: int64(s.CPU), RssBytes: s.RSS, Pids: int64(s.Pids),
			ReadBytes: s.ReadBytes, WriteBytes: s.WriteBytes, Missing: s.Missing}
	}
	return &pb.TreeStatsResponse{Trees: out}
}

// TreeStatFromProto converts one entry back: nil when it is not present.
// A negative figure, which no tree has, is taken for a field the plugin
// could not read rather than passed on as a measurement.
func TreeStatFromProto(s *pb.TreeStats) *env.TreeStats {
	if !s.GetPresent() {
		return nil
	}
	out := &env.TreeStats{CPU: time.Duration(s.GetCpuNanos()), RSS: s.GetRssBytes(), Pids: int(s.GetPids()),
		ReadBytes: s.GetReadBytes(), WriteBytes: s.GetWriteBytes()}
	for _, m := range s.GetMissing() {
		if len(out.Missing) == maxMissing {
			break
		}
		if len(m) > maxMissingLen {
			m = m[:maxMissingLen]
		}
		out.Missing = append(out.Missing, m)
	}
	negative := func(field string, v *int64) {
		if *v < 0 {
			*v = 0
			out.Missing = appendOnce(out.Missing, field)
		}
	}
	cpu := int64(out.CPU)
	negative("cpu", &cpu)
	out.CPU = time.Duration(cpu)
	negative("rss", &out.RSS)
	pids := int64(out.Pids)
	negative("pids", &pids)
	out.Pids = int(pids)
	if out.ReadBytes < 0 || out.WriteBytes < 0 {
		out.ReadBytes, out.WriteBytes = 0, 0
		out.Missing = appendOnce(out.Missing, "io")
	}
	return out
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// InputWaitsToProto converts an InputWatcher's answer; a nil entry travels
// as "".
func InputWaitsToProto(ws []*env.InputWait) *pb.InputWaitsResponse {
	out := make([]string, len(ws))
	for i, w := range ws {
		if w != nil {
			out[i] = w.Kind
		}
	}
	return &pb.InputWaitsResponse{Kinds: out}
}

// InputWaitFromProto converts one kind back: nil for "" and for a kind
// corral does not know, which a faulty plugin may send and which no front
// end could say how to answer.
func InputWaitFromProto(kind string) *env.InputWait {
	switch kind {
	case env.InputLine, env.InputRaw, env.InputPassword, env.InputPipe:
		return &env.InputWait{Kind: kind}
	}
	return nil
}
