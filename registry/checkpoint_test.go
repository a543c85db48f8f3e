package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
)

// localWithState returns a registry on the real local environment whose
// environment state lives in envDir and whose checkpoint is stateFile. No
// cleanup kill: the tests close and reopen registries on purpose.
func localWithState(t *testing.T, envDir, stateFile string) *Registry {
	t.Helper()
	r, err := New(Config{
		Open: func(ctx context.Context, target string) (env.Environment, error) {
			if target != "local" {
				return nil, fmt.Errorf("test: unknown target %q", target)
			}
			return local.New(local.Options{StateDir: envDir, Logger: slog.New(slog.DiscardHandler)})
		},
		DefaultGrace: 2 * time.Second,
		Logger:       slog.New(slog.DiscardHandler),
		StateFile:    stateFile,
	})
	require.NoError(t, err)
	return r
}

func readCheckpoint(t *testing.T, path string) checkpointFile {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var f checkpointFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("state file is not valid JSON: %v\n%s", err, data)
	}
	return f
}

// TestCheckpointRecoverLocal closes a registry with processes in every
// situation and checks what a new registry recovers: a running process
// continues with its complete output, one that ended while no registry ran
// shows its real status, finished ones keep state, status and output, one
// whose sandbox state vanished is lost.
func TestCheckpointRecoverLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	envDir, stateFile := t.TempDir(), filepath.Join(t.TempDir(), "state.json")
	flag := filepath.Join(t.TempDir(), "go")
	m := marker()

	r1 := localWithState(t, envDir, stateFile)
	if _, err := r1.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	start := func(cmd string, labels map[string]string) string {
		t.Helper()
		in, err := r1.Start(ctx, StartOptions{Command: cmd, Labels: labels})
		if err != nil {
			t.Fatalf("start %q: %v", cmd, err)
		}
		return in.ID
	}
	running := start("seq 1 2000; sleep "+m, map[string]string{"role": "runner"})
	laterExit := start(fmt.Sprintf("echo b1; while [ ! -e %s ]; do sleep 0.02; done; echo b2; exit 7", flag), nil)
	killed := start("sleep "+m, nil)
	exited := start("echo done-d; exit 3", nil)
	vanish := start("sleep "+m, nil)
	if _, err := r1.Wait(ctx, exited, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r1.Kill(ctx, killed, KillOptions{Grace: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// Output of the running one complete before the restart, so the
	// comparison after it is about the recovered buffer.
	require.Eventually(t, func() bool {
		in, _ := r1.Get(t.Context(), running)
		return in.OutputBytes >= int64(len(seqOutput(2000)))
	},
		generous, poll, "waiting for all the runner's output before the restart")
	var vanishInfo Info
	for _, in := range listed(t, r1, ListOptions{All: true, WithRef: true}) {
		if in.ID == vanish {
			vanishInfo = in
		}
	}
	if err := r1.Close(); err != nil {
		t.Logf("close: %v", err)
	}

	f := readCheckpoint(t, stateFile)
	if len(f.Processes) != 5 {
		t.Fatalf("checkpoint holds %d processes, want 5", len(f.Processes))
	}
	// While no registry runs: one process ends on its own, another's
	// sandbox state disappears (its tree is killed first, by marker).
	require.NoError(t, os.WriteFile(flag, nil, 0o644))
	var refData struct {
		Dir string `json:"dir"`
	}
	if vanishInfo.Ref == nil {
		t.Fatal("process has no Ref")
	}
	_ = json.Unmarshal(vanishInfo.Ref.Data, &refData)
	if refData.Dir == "" {
		t.Fatalf("cannot find the state directory in Ref %s", vanishInfo.Ref.Data)
	}
	syscall.Kill(-vanishInfo.PID, syscall.SIGKILL)
	// The local shim server records the exit as the second line of
	// state.json.
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(refData.Dir, "state.json"))
		return err == nil && bytes.Count(b, []byte("\n")) >= 2
	}, generous, poll, "waiting for the shim server to record the exit of the vanishing process")
	require.NoError(t, os.RemoveAll(refData.Dir))

	r2 := localWithState(t, envDir, stateFile)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		r2.KillAll(ctx, KillAllOptions{Grace: 100 * time.Millisecond})
		r2.Close()
	})
	rep, err := r2.Recover(ctx)
	require.NoError(t, err)
	if rep.Notice != "" || rep.Skipped != 0 {
		t.Fatalf("report %+v", rep)
	}

	in, err := r2.Get(t.Context(), running)
	if err != nil || in.State != StateRunning || in.Labels["role"] != "runner" {
		t.Fatalf("running process after recovery: %+v, %v", in, err)
	}
	require.Eventually(t, func() bool {
		in, _ := r2.Get(t.Context(), running)
		return in.OutputBytes >= int64(len(seqOutput(2000)))
	},
		generous, poll, "waiting for all the runner's output after the recovery")
	pr, _ := r2.Poll(ctx, running, 0)
	if string(pr.Output) != seqOutput(2000) {
		t.Fatalf("recovered output differs: %d bytes, want %d (gap or duplicate)", len(pr.Output), len(seqOutput(2000)))
	}

	in, err = r2.Wait(ctx, laterExit, 0)
	if err != nil || in.State != StateExited || in.Status == nil || in.Status.Code != 7 {
		t.Fatalf("process that ended while down: %+v, %v", in, err)
	}
	if pr, _ := r2.Poll(ctx, laterExit, 0); string(pr.Output) != "b1\nb2\n" {
		t.Fatalf("output %q", pr.Output)
	}
	in, _ = r2.Get(t.Context(), killed)
	if in.State != StateKilled || in.Status == nil || in.Status.Signal != env.SIGTERM {
		t.Fatalf("killed process: %+v", in)
	}
	in, _ = r2.Get(t.Context(), exited)
	if in.State != StateExited || in.Status == nil || in.Status.Code != 3 {
		t.Fatalf("exited process: %+v", in)
	}
	if pr, _ := r2.Poll(ctx, exited, 0); string(pr.Output) != "done-d\n" {
		t.Fatalf("finished output not refilled: %q", pr.Output)
	}
	in, _ = r2.Get(t.Context(), vanish)
	if in.State != StateLost || !strings.Contains(in.Reason, "re-attach") {
		t.Fatalf("vanished process: %+v", in)
	}

	// The recovered runner can still be killed, and that is checkpointed.
	if _, err := r2.Kill(ctx, running, KillOptions{Grace: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, r2.Checkpoint())
	for _, rec := range readCheckpoint(t, stateFile).Processes {
		if rec.ID == running && rec.State != StateKilled {
			t.Fatalf("checkpoint after kill: %s", rec.State)
		}
	}
}

func seqOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

// TestCheckpointEveryChangeWritten checks that the last of a burst of
// changes always reaches the file (coalescing never loses it).
func TestCheckpointEveryChangeWritten(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "state.json")
	r := newFixture(t, func(c *Config) { c.StateFile = stateFile }).r
	ctx := context.Background()
	if _, err := r.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 30 {
		in, err := r.Start(ctx, StartOptions{Command: fmt.Sprintf("cmd %d", i)})
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}
	// No Checkpoint call: the writer goroutine must get there by itself.
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(stateFile)
		if err != nil {
			return false
		}
		var cf checkpointFile
		return json.Unmarshal(data, &cf) == nil && len(cf.Processes) == 30 && allRunning(cf)
	}, generous, poll, "waiting for the checkpoint to hold the 30 running processes")
	if n, err := r.CheckpointStats(); n == 0 || err != nil {
		t.Fatalf("stats %d %v", n, err)
	}
	if err := r.Remove(ctx, ids[0]); err == nil {
		t.Fatal("Remove of a running process succeeded")
	}
}

func allRunning(cf checkpointFile) bool {
	for _, p := range cf.Processes {
		if p.State != StateRunning {
			return false
		}
	}
	return true
}

// TestRecoverCorruptStateFile: a corrupt file is set aside with a notice
// and the registry starts empty and keeps checkpointing.
func TestRecoverCorruptStateFile(t *testing.T) {
	for name, content := range map[string]string{
		"torn":    `{"version":1,"processes":[{"id":"proc_0123`,
		"garbage": "\x00\x01not json",
		"version": `{"version":99,"processes":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			stateFile := filepath.Join(dir, "state.json")
			require.NoError(t, os.WriteFile(stateFile, []byte(content), 0o600))
			r := newFixture(t, func(c *Config) { c.StateFile = stateFile }).r
			rep, err := r.Recover(context.Background())
			require.NoError(t, err)
			if rep.SetAside == "" || !strings.Contains(rep.Notice, "corrupt") {
				t.Fatalf("report %+v", rep)
			}
			aside, err := os.ReadFile(rep.SetAside)
			if err != nil || string(aside) != content {
				t.Fatalf("set-aside file: %q %v", aside, err)
			}
			if len(listed(t, r, ListOptions{All: true})) != 0 {
				t.Fatal("processes from a corrupt file")
			}
			require.NoError(t, r.Checkpoint())
			if f := readCheckpoint(t, stateFile); f.Version != checkpointVersion {
				t.Fatalf("new state file version %d", f.Version)
			}
		})
	}
}

// TestRecoverMalformedRecordsSkipped: a well-formed file with bad records
// keeps the good ones.
func TestRecoverMalformedRecordsSkipped(t *testing.T) {
	stateFile := filepath.Join(t.TempDir(), "state.json")
	now := time.Now().UTC()
	cf := checkpointFile{Version: checkpointVersion, Processes: []checkpointRecord{
		{ID: "proc_zzzz", Backend: "local", State: StateRunning},
		{ID: "proc_0123456789ab", Backend: "local", State: StateExited, Status: &env.ExitStatus{Code: 4}, CreatedAt: now, EndedAt: now},
		{ID: "proc_0123456789ac", Backend: "local", State: StateRunning, CreatedAt: now}, // no Ref
	}}
	data, _ := json.Marshal(cf)
	os.WriteFile(stateFile, data, 0o600)
	r := newFixture(t, func(c *Config) { c.StateFile = stateFile }).r
	rep, err := r.Recover(context.Background())
	require.NoError(t, err)
	if rep.Skipped != 1 || rep.Restored[StateExited] != 1 || rep.Restored[StateLost] != 1 {
		t.Fatalf("report %+v", rep)
	}
	in, err := r.Get(t.Context(), "proc_0123456789ab")
	if err != nil || in.Status == nil || in.Status.Code != 4 {
		t.Fatalf("%+v %v", in, err)
	}
	in, _ = r.Get(t.Context(), "proc_0123456789ac")
	if in.State != StateLost || !strings.Contains(in.Reason, "not started detached") {
		t.Fatalf("%+v", in)
	}
}

// crashWriterEnv makes the test binary a checkpoint writer that a parent
// kills with SIGKILL at random moments.
const crashWriterEnv = "CORRAL_TEST_CHECKPOINT_WRITER"

// TestCheckpointWriterHelper is the child of TestCheckpointNeverTorn: it
// rewrites the state file with versions of varying size, forever.
func TestCheckpointWriterHelper(t *testing.T) {
	path := os.Getenv(crashWriterEnv)
	if path == "" {
		t.Skip("helper process for TestCheckpointNeverTorn")
	}
	for v := 0; ; v++ {
		writeFileAtomic(path, versionFile(v))
		if v == 0 {
			os.WriteFile(path+".ready", nil, 0o600)
		}
	}
}

// versionFile is version v of the state: a JSON document whose length
// varies with v and which says v twice (start and end), so that a torn
// mixture of two versions is detected even if it parses.
func versionFile(v int) []byte {
	var procs []checkpointRecord
	for i := range v%50 + 1 {
		procs = append(procs, checkpointRecord{ID: fmt.Sprintf("proc_%012x", i), Backend: "local", State: StateRunning, Command: strings.Repeat("x", v%97)})
	}
	b, _ := json.Marshal(struct {
		Head      int                `json:"head"`
		Processes []checkpointRecord `json:"processes"`
		Tail      int                `json:"tail"`
	}{v, procs, v})
	return b
}

// TestCheckpointNeverTorn kills a writer with SIGKILL at random moments
// (over a thousand writes in all) and checks after each kill that the
// state file is one complete version.
func TestCheckpointNeverTorn(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocesses")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	total := 0
	for round := 0; round < 15 || total < 1000; round++ {
		os.Remove(path + ".ready")
		cmd := exec.Command(os.Args[0], "-test.run=^TestCheckpointWriterHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashWriterEnv+"="+path)
		require.NoError(t, cmd.Start())
		require.Eventually(t, func() bool { _, err := os.Stat(path + ".ready"); return err == nil },
			generous, poll, "waiting for the checkpoint writer (round %d) to be ready", round)
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond) // a random moment, not a wait for a condition
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		data, err := os.ReadFile(path)
		require.NoError(t, err)
		var got struct {
			Head, Tail int
			Processes  []json.RawMessage
		}
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("round %d: torn state file: %v\n%.200s", round, err, data)
		}
		if got.Head != got.Tail || !bytes.Equal(data, versionFile(got.Head)) {
			t.Fatalf("round %d: state file mixes versions %d and %d", round, got.Head, got.Tail)
		}
		total += got.Head + 1
		if round >= 400 {
			// A loaded machine fsyncs slowly and each round sees fewer
			// writes; the property holds or fails per round, so give up
			// on the full count, but never on a test that barely wrote.
			if total < 200 {
				t.Fatalf("only %d writes in %d rounds: the writer hardly ran", total, round)
			}
			break
		}
	}
	t.Logf("%d checkpoint writes interrupted by SIGKILL, file never torn", total)
	// Temp files of interrupted writes stay behind; they never replace
	// the state file. Count them for the log.
	left, _ := filepath.Glob(filepath.Join(dir, ".state.json.tmp-*"))
	t.Logf("%d temporary files left by killed writers", len(left))
}
