package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPSShowsCommandsAsTyped: the words after `--` are stored quoted one
// by one; ps shows them as a shell user types them, and a script given
// as one string exactly as it was given.
func TestPSShowsCommandsAsTyped(t *testing.T) {
	startTestDaemon(t)
	words := strings.TrimSpace(mustCorral(t, "start", "--", "sh", "-c", "sleep 60; echo x", "it's"))
	script := strings.TrimSpace(mustCorral(t, "start", "--", `sleep 60 && echo "done"`))
	defer mustCorral(t, "kill", "--force", words, script)
	out := mustCorral(t, "ps")
	assert.Contains(t, psRow(out, words), `sh -c 'sleep 60; echo x' "it's"`, out)
	assert.Contains(t, psRow(out, script), `sleep 60 && echo "done"`, out)
}

// psRow returns ps's line of id.
func psRow(out, id string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, id) {
			return line
		}
	}
	return ""
}
