package registry

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heredoc is a command of about size bytes that writes a file with a
// heredoc, as agents do, and prints the file's size.
func heredoc(size int, word string) string {
	line := strings.Repeat(word, 99/len(word)+1)[:99] + "\n"
	return "cat > f.txt <<'EOF'\n" + strings.Repeat(line, size/100) + "EOF\nwc -c < f.txt | tr -d ' '"
}

// TestLongCommandRecordedShort: a long command runs whole, but the
// registry records its head, length and digest (Info, events, the state
// file); a start that fails keeps neither the command nor an error that
// repeats it; a named start of the same long command is told from another
// with the same head, also after a restart.
func TestLongCommandRecordedShort(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	r := newLocal(t, func(c *Config) { c.StateFile = state })
	_, err := r.Recover(ctxT(t))
	require.NoError(t, err)
	dir := t.TempDir()
	command := heredoc(2<<20, "heredoc ")

	res, err := r.Run(ctxT(t), RunOptions{StartOptions: StartOptions{Command: command, Dir: dir}})
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(2<<20/100*100)+"\n", string(res.Output))
	assert.LessOrEqual(t, len(res.Command), MaxRecordedCommand)
	assert.True(t, strings.HasPrefix(res.Command, "cat > f.txt <<'EOF'\nheredoc "), "%.80q", res.Command)
	assert.Contains(t, res.Command, "["+strconv.Itoa(len(command))+" bytes, sha256 ")

	// A start the backend refuses (no such directory).
	in, err := r.Start(ctxT(t), StartOptions{Command: command, Dir: filepath.Join(dir, "missing")})
	require.Error(t, err)
	assert.Equal(t, StateFailed, in.State)
	for what, s := range map[string]string{"error": err.Error(), "reason": in.Reason, "command": in.Command} {
		assert.LessOrEqual(t, len(s), MaxRecordedCommand, what)
		assert.NotContains(t, s, strings.Repeat("heredoc ", 100), "%s repeats the command", what)
	}
	assert.LessOrEqual(t, len(err.Error()), 400, "%q", err)

	// Names: the same long command is the same process; another with the
	// same first 4 KiB is not.
	sleeper := "sleep " + marker() + "\n#" + command
	first, err := r.Start(ctxT(t), StartOptions{Command: sleeper, Name: "web"})
	require.NoError(t, err)
	again, err := r.Start(ctxT(t), StartOptions{Command: sleeper, Name: "web"})
	require.NoError(t, err)
	assert.True(t, again.Reused)
	assert.Equal(t, first.ID, again.ID)
	_, err = r.Start(ctxT(t), StartOptions{Command: sleeper + " ", Name: "web"})
	assert.True(t, errors.Is(err, ErrNameInUse), "%v", err)

	// The state file holds no long command.
	r.checkpointSync()
	b, err := os.ReadFile(state)
	require.NoError(t, err)
	assert.Less(t, len(b), 64<<10, "the state file is %d bytes", len(b))
	var f checkpointFile
	require.NoError(t, json.Unmarshal(b, &f))
	assert.Len(t, f.Processes, 3)

	// A registry restored from that file still tells the same command.
	rec, err := New(Config{Open: r.cfg.Open, StateFile: filepath.Join(t.TempDir(), "s.json"), Logger: r.log})
	require.NoError(t, err)
	defer rec.Close()
	var web *checkpointRecord
	for i := range f.Processes {
		if f.Processes[i].ID == first.ID {
			web = &f.Processes[i]
		}
	}
	require.NotNil(t, web, "%s is not in the state file", first.ID)
	p := rec.restoredProc(*web)
	assert.True(t, p.sameCommand(StartOptions{Backend: "local", Command: recordedCommand(sleeper)}))
	assert.False(t, p.sameCommand(StartOptions{Backend: "local", Command: recordedCommand(sleeper + " ")}))
}

func TestRecordedCommand(t *testing.T) {
	short := strings.Repeat("é", MaxRecordedCommand/2)
	assert.Equal(t, short, recordedCommand(short))
	long := strings.Repeat("é", MaxRecordedCommand)
	got := recordedCommand(long)
	assert.LessOrEqual(t, len(got), MaxRecordedCommand)
	assert.True(t, json.Valid([]byte(strconvQuote(got))))
	assert.NotEqual(t, got, recordedCommand(long+"x"))
	assert.Equal(t, got, recordedCommand(long))

	err := shortError(errors.New(strings.Repeat("x", 10<<20)))
	assert.LessOrEqual(t, len(err.Error()), maxErrorBytes+len("…"))
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
