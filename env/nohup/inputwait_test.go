package nohup

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

// TestParseInputReport: every tree gets its line once, with a known kind;
// anything else is an error naming the line, never a guess.
func TestParseInputReport(t *testing.T) {
	got, err := parseInputReport([]byte("1 password\n0 -\n2 pipe\n"), 3)
	require.NoError(t, err)
	assert.Equal(t, []*env.InputWait{nil, {Kind: env.InputPassword}, {Kind: env.InputPipe}}, got)
	for _, bad := range []string{
		"",
		"0 -\n",
		"0 - x\n1 -\n",
		"0 -\n0 -\n",
		"0 -\n2 line\n",
		"0 -\n1 typing\n",
		"x -\n1 -\n",
	} {
		_, err := parseInputReport([]byte(bad), 2)
		assert.Error(t, err, "%q", bad)
	}
}
