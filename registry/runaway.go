package registry

import (
	"fmt"
	"math"
	"time"

	"github.com/corralhq/corral/env"
)

// Runaway: a process that burns CPU while saying nothing, or whose memory
// keeps growing, is named by a runaway event before it costs more. It is
// judged from the samples the stats sampler takes anyway (stats.go): no
// backend is asked anything more, and a backend that cannot measure its
// trees has no runaways.

// DefaultRunawayFor is RunawayOptions.For when it is zero.
const DefaultRunawayFor = 2 * time.Minute

// RunawayOptions are the thresholds past which a running process counts as
// runaway. Each is opt-in: zero leaves it unwatched. Per process
// (StartOptions.Runaway) or for every process that gives none
// (Config.Runaway).
type RunawayOptions struct {
	// CPUPercent: the tree's cpu_percent (100 is one core) at or above
	// this in every sample for For, with no output meanwhile.
	CPUPercent float64 `json:"cpu_percent,omitempty"`
	// Memory: the tree's rss_bytes grown by at least this many bytes
	// within the last For (at most the ten minutes of stats history).
	Memory int64 `json:"memory,omitempty"`
	// For is the window of both; DefaultRunawayFor when zero.
	For Duration `json:"for,omitempty"`
}

// IsZero reports whether o watches nothing.
func (o *RunawayOptions) IsZero() bool { return o == nil || o.CPUPercent == 0 && o.Memory == 0 }

// Validate reports an option out of bounds, in one sentence naming it.
func (o *RunawayOptions) Validate() error {
	if o == nil {
		return nil
	}
	switch {
	case o.CPUPercent < 0 || math.IsNaN(o.CPUPercent) || math.IsInf(o.CPUPercent, 0):
		return fmt.Errorf("%w: runaway cpu_percent %v must be a positive share of a core (100 is one core)", ErrInvalidOptions, o.CPUPercent)
	case o.Memory < 0:
		return fmt.Errorf("%w: runaway memory %d must be a positive size", ErrInvalidOptions, o.Memory)
	case o.For < 0:
		return fmt.Errorf("%w: runaway for %s must be a positive duration", ErrInvalidOptions, time.Duration(o.For))
	case o.For != 0 && time.Duration(o.For) < statsTick:
		return fmt.Errorf("%w: runaway for %s is shorter than the sampler's pace; give at least %s", ErrInvalidOptions, time.Duration(o.For), statsTick)
	}
	return nil
}

// String says the thresholds as the CLI takes them: "cpu 90% for 2m0s,
// memory +4G in 2m0s".
func (o *RunawayOptions) String() string {
	if o.IsZero() {
		return ""
	}
	s := ""
	if o.CPUPercent > 0 {
		s = fmt.Sprintf("cpu %g%% for %s", o.CPUPercent, o.window())
	}
	if o.Memory > 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("memory +%s in %s", env.FormatSize(o.Memory), o.window())
	}
	return s
}

func (o *RunawayOptions) window() time.Duration {
	if o.For <= 0 {
		return DefaultRunawayFor
	}
	return time.Duration(o.For)
}

func copyRunaway(o *RunawayOptions) *RunawayOptions {
	if o.IsZero() {
		return nil
	}
	c := *o
	return &c
}

// runawayState is procStats's memory of the current episodes; guarded by
// procStats.mu.
type runawayState struct {
	// highSince is the start of the interval of the first sample of the
	// current run of samples at or above CPUPercent; zero outside one.
	highSince time.Time
	cpu, mem  bool // an episode is on: its event was published
}

// runaway judges the sample just recorded against o, given when the
// process last wrote output. It returns what was seen when an episode
// starts ("used 98% of a core for 2m0s with no output"), "" otherwise;
// an episode ends, and can start again, once its condition clears.
func (s *procStats) runaway(o *RunawayOptions, lastOutput time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.last
	if cur == nil || o.IsZero() {
		s.rw = runawayState{}
		return ""
	}
	now, window := cur.SampledAt, o.window()
	var seen string
	if o.CPUPercent > 0 {
		if cur.CPUPercent < o.CPUPercent {
			s.rw.highSince = time.Time{}
		} else if s.rw.highSince.IsZero() {
			s.rw.highSince = s.prevAt
		}
		from := s.rw.highSince
		if lastOutput.After(from) {
			from = lastOutput
		}
		on := !s.rw.highSince.IsZero() && now.Sub(from) >= window
		if on && !s.rw.cpu {
			seen = fmt.Sprintf("used %g%% of a core for %s with no output", math.Round(cur.CPUPercent), now.Sub(from).Round(time.Second))
		}
		s.rw.cpu = on
	}
	if o.Memory > 0 {
		low, lowAt := cur.RSSBytes, now
		for i := range s.history {
			sm := s.history[(s.head+i)%len(s.history)]
			if !sm.At.Before(now.Add(-window)) && sm.RSSBytes < low {
				low, lowAt = sm.RSSBytes, sm.At
			}
		}
		on := cur.RSSBytes-low >= o.Memory
		if on && !s.rw.mem {
			if seen != "" {
				seen += ", and "
			}
			seen += fmt.Sprintf("grew from %s to %s of memory in %s", env.FormatSize(low), env.FormatSize(cur.RSSBytes), now.Sub(lowAt).Round(time.Second))
		}
		s.rw.mem = on
	}
	return seen
}

// isRunaway reports whether an episode is on.
func (s *procStats) isRunaway() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rw.cpu || s.rw.mem
}

// runawayOptions are the thresholds p is judged by: its own, else the
// registry's default.
func (p *proc) runawayOptions() *RunawayOptions {
	if p.opts.Runaway != nil {
		return p.opts.Runaway
	}
	return p.r.cfg.Runaway
}

// checkRunaway publishes a runaway event when the sample just recorded
// starts an episode.
func (p *proc) checkRunaway() {
	seen := p.stats.runaway(p.runawayOptions(), time.Unix(0, p.lastOutput.Load()))
	if seen == "" {
		return
	}
	p.r.log.Info("runaway", "id", p.id, "seen", seen)
	p.r.ev.publish(Event{Type: EventRunaway, ID: p.id, Command: p.opts.Command, State: StateRunning,
		Summary: fmt.Sprintf("%s %s: %s", p.label(), seen, clip(p.opts.Command, 200))})
}
