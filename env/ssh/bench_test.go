package ssh

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/ssh/sshtest"
)

// Benchmarks against a real sshd on 127.0.0.1:
//
//	BenchmarkSSHTrue/corral          `true` run in the foreground through the
//	                                 Environment (Start, read output, Wait) over
//	                                 the persistent connection
//	BenchmarkSSHTrue/baseline        `ssh -S SOCK host true` through a warm
//	                                 OpenSSH ControlMaster
//	BenchmarkSSHTrueNewConn/corral   the same corral run
//	BenchmarkSSHTrueNewConn/baseline `ssh -o ControlMaster=no host true`, a new
//	                                 connection each time
//	BenchmarkSSHTransportExec        one Transport.Exec of `true`: the cost of
//	                                 one session on the shared connection
//	BenchmarkSSHLogRead/corral       a finished process's 100 MB log read
//	                                 through the Environment (one follow)
//	BenchmarkSSHLogRead/baseline     `ssh -S SOCK host cat LOG` of the same
//	                                 file through a warm ControlMaster
//	BenchmarkSSHExitDetection        `date +%s%N` run like the corral runs
//	                                 above; exit-detect-ms is the median time
//	                                 from the command's last action (printing
//	                                 the clock) to Wait returning, on the one
//	                                 clock of this machine
//
// The corral and baseline runs of BenchmarkSSHTrue* run the same command,
// `true`: the clock-printing run is timed apart, since `date` is one more
// fork and exec that the baselines would not pay.

func benchServer(b *testing.B) (*sshtest.Server, Options) {
	srv := sshtest.Start(b)
	return srv, Options{
		ConfigFile:      "none",
		Home:            b.TempDir(),
		KnownHostsFiles: []string{srv.KnownHosts},
		IdentityFiles:   []string{srv.ClientKey},
		AgentSocket:     "none",
		BaseDir:         b.TempDir() + "/state",
		Logger:          discardLogger(),
	}
}

func BenchmarkSSHTrue(b *testing.B) {
	srv, opts := benchServer(b)
	b.Run("corral", func(b *testing.B) { benchCorralRun(b, srv, opts, "true") })
	b.Run("baseline", func(b *testing.B) {
		sock := srv.StartControlMaster(b)
		benchCommand(b, "ssh", "-F", srv.SSHConfig, "-S", sock, srv.Alias, "true")
	})
}

func BenchmarkSSHTrueNewConn(b *testing.B) {
	srv, opts := benchServer(b)
	b.Run("corral", func(b *testing.B) { benchCorralRun(b, srv, opts, "true") })
	b.Run("baseline", func(b *testing.B) {
		benchCommand(b, "ssh", "-F", srv.SSHConfig, "-o", "ControlMaster=no", "-o", "ControlPath=none", srv.Alias, "true")
	})
}

func BenchmarkSSHTransportExec(b *testing.B) {
	srv, opts := benchServer(b)
	ctx := context.Background()
	tr, err := Dial(ctx, srv.Target(), opts)
	require.NoError(b, err)
	defer tr.Close()
	b.ResetTimer()
	for b.Loop() {
		if code, err := tr.Exec(ctx, "true", nil, io.Discard, nil); err != nil || code != 0 {
			require.FailNow(b, fmt.Sprintf("Exec: %d %v", code, err))
		}
	}
}

func BenchmarkSSHLogRead(b *testing.B) {
	srv, opts := benchServer(b)
	ctx := context.Background()
	e, err := Open(ctx, srv.Target(), opts)
	require.NoError(b, err)
	defer e.Close()
	const logSize = 100 << 20
	p, err := e.Start(ctx, env.Spec{Command: fmt.Sprintf("head -c %d /dev/zero", logSize), Detach: true})
	require.NoError(b, err)
	if _, err := p.Wait(ctx); err != nil {
		require.FailNow(b, fmt.Sprint(err))
	}
	defer func() { _ = p.Remove(ctx) }()
	b.Run("corral", func(b *testing.B) {
		b.SetBytes(logSize)
		for b.Loop() {
			r, err := p.Output(ctx, 0)
			require.NoError(b, err)
			n, err := io.Copy(io.Discard, r)
			r.Close()
			if err != nil || n != logSize {
				require.FailNow(b, fmt.Sprintf("read %d bytes, %v; want %d", n, err, logSize))
			}
		}
	})
	b.Run("baseline", func(b *testing.B) {
		ref, err := p.Ref()
		require.NoError(b, err)
		var state struct {
			Dir string `json:"dir"`
		}
		if err := json.Unmarshal(ref.Data, &state); err != nil || state.Dir == "" {
			require.FailNow(b, fmt.Sprintf("ref %s: no state dir (%v)", ref.Data, err))
		}
		sock := srv.StartControlMaster(b)
		b.SetBytes(logSize)
		benchCommand(b, "ssh", "-F", srv.SSHConfig, "-S", sock, srv.Alias, "cat", state.Dir+"/log")
	})
}

func BenchmarkSSHExitDetection(b *testing.B) {
	srv, opts := benchServer(b)
	benchCorralRun(b, srv, opts, "date +%s%N")
}

// benchCorralRun runs command in the foreground per iteration: Start, Wait,
// and the output read in full. When the output is a clock reading in ns
// (date +%s%N), it also reports exit-detect-ms.
func benchCorralRun(b *testing.B, srv *sshtest.Server, opts Options, command string) {
	ctx := context.Background()
	e, err := Open(ctx, srv.Target(), opts)
	require.NoError(b, err)
	defer e.Close()
	spec := env.Spec{Command: command}
	var detect, started, removed []float64
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		p, err := e.Start(ctx, spec)
		require.NoError(b, err)
		started = append(started, float64(time.Since(t0))/1e6)
		st, err := p.Wait(ctx)
		waited := time.Now()
		if err != nil || !st.Success() {
			require.FailNow(b, fmt.Sprintf("Wait: %v %v", st, err))
		}
		rc, err := p.Output(ctx, 0)
		require.NoError(b, err)
		out, err := io.ReadAll(rc)
		rc.Close()
		require.NoError(b, err)
		if ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && len(out) > 0 {
			detect = append(detect, float64(waited.Sub(time.Unix(0, ns)))/1e6)
		}
		// Remove is cleanup the foreground path (registry, CLI) does not
		// do per run (the registry prunes later), and the baselines leave
		// nothing to clean: timed apart, reported as remove-ms.
		b.StopTimer()
		t1 := time.Now()
		require.NoError(b, p.Remove(ctx))
		removed = append(removed, float64(time.Since(t1))/1e6)
		b.StartTimer()
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	if len(detect) > 0 {
		b.ReportMetric(median(detect), "exit-detect-ms")
	}
	b.ReportMetric(median(started), "start-ms")
	b.ReportMetric(median(removed), "remove-ms")
}

// benchCommand runs an OpenSSH client command per iteration.
func benchCommand(b *testing.B, name string, args ...string) {
	if _, err := exec.LookPath(name); err != nil {
		b.Skipf("%s not installed: %v", name, err)
	}
	for b.Loop() {
		var stderr strings.Builder
		cmd := exec.Command(name, args...)
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Run(); err != nil {
			require.FailNow(b, fmt.Sprintf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String()))
		}
	}
}
