// Package envtest is the conformance suite every env.Environment runs:
// the built-in backends (local, docker, ssh) and third-party plugins alike.
//
// A backend's test calls [Run] with a [Config] whose New returns a fresh
// Environment:
//
//	func TestConformance(t *testing.T) {
//		envtest.Run(t, envtest.Config{
//			New: func(t *testing.T) env.Environment {
//				e, err := local.New(local.Options{})
//				if err != nil {
//					t.Fatal(err)
//				}
//				return e
//			},
//			PTY: true,
//		})
//	}
//
// # What the suite relies on
//
// Only the env.Environment / env.Process contract and the sandbox's own
// /bin/sh with the POSIX utilities busybox provides (sleep, setsid, nohup,
// yes, head, wc, cat, stty, grep, tr, mktemp, kill, ps), and for the Ports
// cases a busybox binary (they serve with busybox httpd, and skip, saying
// so, without one). The suite never
// looks at the supervisor's machine: everything it verifies inside the
// sandbox — above all that a killed process tree is really gone — it
// verifies by starting another process through the same Environment, so
// it works unchanged on the local machine, in a container and on a remote
// host.
//
// # Process markers
//
// Processes the suite wants to find in the process table carry a unique
// marker: a random 8-digit number used as a sleep duration ("sleep
// 48213377") or an argument. [ScanProcs] finds them by scanning
// /proc/*/cmdline (or `ps` where there is no /proc) and matches the marker
// as a whole word, so concurrent test runs never confuse each other, and
// cleanup kills only processes that carry one of the test's own markers.
//
// # Environments, parallelism, skips
//
// New is called at least once per subtest (twice for the re-attach cases,
// which close the first Environment and attach from a second); Run closes
// every Environment it gets with t.Cleanup, so New must not. A backend
// whose Environments each own a sandbox (created on Open, destroyed on
// Close: an ephemeral container, a namespace) sets Config.OwnSandbox, and
// the re-attach cases attach from the Environment that started the
// process; run the re-attach cases against a persistent target as well
// if the backend has one. Subtests run
// in parallel unless Config.Serial is set. A subtest is skipped, with the
// reason, only when the Environment's Capabilities say the feature is
// absent (or Config.PTY is false for the PTY variants); nothing is skipped
// silently.
//
// # A fake for the other side
//
// [Fake] is the opposite of the suite: a scripted Environment that runs
// nothing, for unit tests of code that drives an Environment (the
// registry, the plugin SDK's server, a plugin's glue) where the test must
// decide what a process writes and how it ends.
package envtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/env"
)

// Config selects the Environment under test and how the suite runs.
// Zero values of the optional fields mean "the full suite, in parallel,
// with default deadlines".
type Config struct {
	// New returns a fresh Environment. It is called once per subtest, and
	// again for the re-attach cases, which attach from the second
	// Environment to what the first one started: every Environment New
	// returns must see the same sandbox (for env/local: the same
	// StateDir), unless OwnSandbox is set. Run closes what it returns.
	New func(t *testing.T) env.Environment

	// PTY additionally runs the PTY variants (window size, resize, exit
	// code, tree kill, isatty) where Capabilities.PTY is true.
	PTY bool

	// Serial runs the subtests one after another instead of in parallel,
	// for backends whose sandbox cannot take concurrent load.
	Serial bool

	// Timeout bounds every single wait of the suite (a process to exit,
	// output to arrive, a killed tree to vanish). Zero means 90 seconds,
	// generous enough for a loaded 2-core machine under the race detector.
	// Waits end as soon as their event happens; the bound only turns a hang
	// into a failure.
	Timeout time.Duration

	// SignalBaseline returns the ignored and blocked signals of a plain
	// `sh -c` started by the test itself, the most a command may inherit
	// (see LocalSignalBaseline). Nil means none: a command must start with
	// every disposition at its default and nothing blocked.
	SignalBaseline func(t *testing.T) SignalMasks

	// OwnSandbox says that each Environment New returns has a sandbox of
	// its own, created by New (or the Environment's Open) and destroyed by
	// its Close: a plugin whose target makes an ephemeral sandbox. The
	// re-attach cases then attach from the same Environment after
	// releasing the handle (a Ref that crosses a JSON round trip, with
	// nobody attached meanwhile), instead of closing it and attaching from
	// a second one, which could not see the first's sandbox.
	OwnSandbox bool

	// Only, when not empty, runs only these groups ("Reattach") or cases
	// ("Output/Large50MB"); the others are skipped, with that reason.
	Only []string

	// Skip names cases ("Output/Large50MB") to skip, each with the reason
	// the skip message gives. It is for a backend run more than once in
	// one package (once per shell): the load cases need to run only once
	// per code path, and the skip list keeps what was left out visible.
	Skip map[string]string
}

// DefaultTimeout is the bound of every wait when Config.Timeout is zero.
const DefaultTimeout = 90 * time.Second

// Run runs the conformance suite against cfg.New's Environment as
// subtests of t.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.New == nil {
		t.Fatal("envtest: Config.New is nil")
	}
	for name := range cfg.Skip {
		if !knownCase(name) {
			t.Fatalf("envtest: Config.Skip names %q, which is no case of the suite (want Group/Case)", name)
		}
	}
	for _, name := range cfg.Only {
		if !knownCase(name) && !knownGroup(name) {
			t.Fatalf("envtest: Config.Only names %q, which is no group or case of the suite", name)
		}
	}
	s := &suite{cfg: cfg, timeout: cfg.Timeout}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			s.parallel(t)
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					if why, ok := cfg.Skip[g.name+"/"+c.name]; ok {
						t.Skip("envtest.Config.Skip: " + why)
					}
					if !cfg.runs(g.name, c.name) {
						t.Skip("envtest.Config.Only leaves it out")
					}
					s.parallel(t)
					c.run(t, s)
				})
			}
		})
	}
}

// Cases returns the name of every case of the suite, as Config.Skip
// takes it ("Output/Large50MB"), in the order the suite runs them.
func Cases() []string {
	var names []string
	for _, g := range groups {
		for _, c := range g.cases {
			names = append(names, g.name+"/"+c.name)
		}
	}
	return names
}

// TransportSkip is Config.Skip for a second run of a nohup-based backend
// with another transport path (resident shells off: every call an exec).
// It keeps the groups every call goes through (exit, output, stdin, spec,
// lifecycle) and leaves out the load cases and the groups whose outcome is
// the engine's and the sandbox's, not the transport's (tree kills,
// signals, leftovers, re-attach, PTY): env/nohup runs the whole suite on
// the resident path and this subset on the exec path, against three shells
// each. Running everything twice per backend cost CI minutes for nothing
// more.
func TransportSkip() map[string]string {
	keep := map[string]bool{"Exit": true, "Output": true, "Stdin": true, "Spec": true, "Lifecycle": true}
	skip := map[string]string{}
	for _, name := range Cases() {
		group, _, _ := strings.Cut(name, "/")
		switch {
		case IsLoadCase(name):
			skip[name] = "a load case: run on the main path"
		case !keep[group]:
			skip[name] = "the engine's, not the transport's: run on the main path, and on both in env/nohup"
		}
	}
	return skip
}

// IsLoadCase reports whether the case ("GROUP/CASE") is one of the suite's
// load tests: a hundred processes or 50 MB of output at once. A backend
// whose sandboxes have a pids limit gives each its own sandbox; one with
// several transport paths runs them on the main one only.
func IsLoadCase(name string) bool {
	switch name {
	case "Output/Large50MB", "Exit/KillRacesExit100", "Exit/ConcurrentStarts100":
		return true
	}
	return false
}

// runs reports whether Only lets the case run.
func (c Config) runs(group, name string) bool {
	if len(c.Only) == 0 {
		return true
	}
	for _, o := range c.Only {
		if o == group || o == group+"/"+name {
			return true
		}
	}
	return false
}

func knownGroup(name string) bool {
	for _, g := range groups {
		if g.name == name {
			return true
		}
	}
	return false
}

func knownCase(name string) bool {
	for _, g := range groups {
		for _, c := range g.cases {
			if g.name+"/"+c.name == name {
				return true
			}
		}
	}
	return false
}

type testCase struct {
	name string
	run  func(t *testing.T, s *suite)
}

type group struct {
	name  string
	cases []testCase
}

// groups lists every case of the suite; each file adds its own group.
var groups = []group{
	{"Exit", exitCases},
	{"Output", outputCases},
	{"Stdin", stdinCases},
	{"Spec", specCases},
	{"Tree", treeCases},
	{"Signals", signalCases},
	{"Leftovers", leftoverCases},
	{"Lifecycle", lifecycleCases},
	{"Reattach", reattachCases},
	{"PTY", ptyCases},
	{"Ports", portCases},
	{"Stats", statsCases},
	{"Limits", limitCases},
	{"InputWait", inputWaitCases},
}

type suite struct {
	cfg     Config
	timeout time.Duration
}

func (s *suite) parallel(t *testing.T) {
	if !s.cfg.Serial {
		t.Parallel()
	}
}

// ctx returns a context bounded by the suite's timeout. It is not
// t.Context(): cleanups need a live context too, and t.Context() is
// cancelled before they run.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	t.Cleanup(cancel)
	return ctx
}

// newEnv returns a fresh Environment that is closed when the test ends.
func (s *suite) newEnv(t *testing.T) env.Environment {
	t.Helper()
	e := s.cfg.New(t)
	if e == nil {
		t.Fatal("envtest: Config.New returned nil")
	}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			if err := e.Close(); err != nil {
				t.Errorf("Environment.Close: %v", err)
			}
		})
	})
	return e
}

// reopen is how a re-attach case gets the Environment to attach from,
// once it released its handle on e: e is closed and a new one returned,
// or, with Config.OwnSandbox (Close would destroy the sandbox), e itself.
func (s *suite) reopen(t *testing.T, e env.Environment) env.Environment {
	t.Helper()
	if s.cfg.OwnSandbox {
		return e
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close of the first Environment: %v", err)
	}
	return s.newEnv(t)
}

// start starts spec and fails the test if that fails. When the test ends
// a process that still runs is killed (whole tree) and waited for, and the
// handle is released.
func (s *suite) start(t *testing.T, e env.Environment, spec env.Spec) env.Process {
	t.Helper()
	p, err := e.Start(s.ctx(t), spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", clip([]byte(spec.Command)), err)
	}
	if p == nil {
		t.Fatalf("Start(%q) returned a nil Process and no error", clip([]byte(spec.Command)))
	}
	t.Cleanup(func() { s.reap(t, p) })
	return p
}

// reap ends p if it still runs, then releases it. Errors saying the
// handle or process is already gone are expected here.
func (s *suite) reap(t *testing.T, p env.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := p.Signal(ctx, env.SIGKILL); err == nil {
		if _, err := p.Wait(ctx); err != nil && !errors.Is(err, env.ErrReleased) {
			t.Errorf("cleanup: Wait after kill: %v", err)
		}
	}
	if err := p.Release(); err != nil {
		t.Errorf("cleanup: Release: %v", err)
	}
}

// wait waits for p to exit within the suite's timeout.
func (s *suite) wait(t *testing.T, p env.Process) env.ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v (bound %v)", err, s.timeout)
	}
	return st
}

// run starts spec, reads all its output and waits for it.
func (s *suite) run(t *testing.T, e env.Environment, spec env.Spec) ([]byte, env.ExitStatus) {
	t.Helper()
	p := s.start(t, e, spec)
	out, err := ReadAll(s.ctx(t), p)
	if err != nil {
		t.Fatalf("reading the output of %q: %v (got %d bytes: %q)", clip([]byte(spec.Command)), err, len(out), clip(out))
	}
	return out, s.wait(t, p)
}

// sh runs command in e and returns its output; it must exit 0.
func (s *suite) sh(t *testing.T, e env.Environment, command string) string {
	t.Helper()
	out, st := s.run(t, e, env.Spec{Command: command})
	if !st.Success() {
		t.Fatalf("helper command %q: %v, output %q", command, st, clip(out))
	}
	return string(out)
}

// ReadAll reads p's output from offset 0 until the stream ends (io.EOF).
// If ctx ends first the stream is closed and ctx's error returned together
// with what was read.
func ReadAll(ctx context.Context, p env.Process) ([]byte, error) {
	return ReadFrom(ctx, p, 0)
}

// ReadFrom is ReadAll from byte offset on.
func ReadFrom(ctx context.Context, p env.Process, offset int64) ([]byte, error) {
	rc, err := p.Output(ctx, offset)
	if err != nil {
		return nil, fmt.Errorf("Output(%d): %w", offset, err)
	}
	var b []byte
	err = copyCtx(ctx, writerFunc(func(p []byte) (int, error) {
		b = append(b, p...)
		return len(p), nil
	}), rc)
	return b, err
}

// copyCtx copies rc to w until EOF, closing rc at the end or when ctx ends
// (so a reader blocked on a stream that never ends is released).
func copyCtx(ctx context.Context, w io.Writer, rc io.ReadCloser) error {
	var closeOnce sync.Once
	closeRC := func() { closeOnce.Do(func() { rc.Close() }) }
	stop := context.AfterFunc(ctx, closeRC)
	_, err := io.Copy(w, rc)
	if !stop() && ctx.Err() != nil {
		closeRC()
		return fmt.Errorf("output stream did not end: %w", ctx.Err())
	}
	closeRC()
	if err != nil {
		return fmt.Errorf("reading output: %w", err)
	}
	return nil
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// clip shortens b for messages.
func clip(b []byte) string {
	const max = 400
	if len(b) <= max {
		return string(b)
	}
	return fmt.Sprintf("%s…(%d bytes more)…%s", b[:max/2], len(b)-max, b[len(b)-max/2:])
}
