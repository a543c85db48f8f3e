package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// TestRunawayFlags: --runaway-cpu, --runaway-memory and --runaway-for
// become RunawayOptions (percent, bytes, window); none given is nil; a bad
// value is a usage error naming its flag.
func TestRunawayFlags(t *testing.T) {
	parse := func(args ...string) (*registry.RunawayOptions, error) {
		var rf runawayFlags
		cmd := &cobra.Command{Use: "x"}
		rf.addFlags(cmd, "")
		require.NoError(t, cmd.Flags().Parse(args))
		return rf.parse("start", cmd)
	}
	for _, tc := range []struct {
		args []string
		want *registry.RunawayOptions
	}{
		{nil, nil},
		{[]string{"--runaway-cpu", "90"}, &registry.RunawayOptions{CPUPercent: 90}},
		{[]string{"--runaway-cpu", "150%", "--runaway-for", "30s"}, &registry.RunawayOptions{CPUPercent: 150, For: registry.Duration(30 * time.Second)}},
		{[]string{"--runaway-memory", "4G", "--runaway-for", "5m"}, &registry.RunawayOptions{Memory: 4 << 30, For: registry.Duration(5 * time.Minute)}},
	} {
		got, err := parse(tc.args...)
		require.NoError(t, err, "%q", tc.args)
		assert.Equal(t, tc.want, got, "%q", tc.args)
	}
	for _, bad := range [][]string{
		{"--runaway-cpu", "0"}, {"--runaway-cpu", "-5"}, {"--runaway-cpu", "NaN"}, {"--runaway-cpu", "lots"},
		{"--runaway-memory", "2X"}, {"--runaway-memory", "0"},
		{"--runaway-for", "2m"}, {"--runaway-for", "10ms", "--runaway-cpu", "90"},
	} {
		_, err := parse(bad...)
		var ee *exitError
		if assert.ErrorAs(t, err, &ee, "%q", bad) {
			assert.Equal(t, exitUsage, ee.code, "%q", bad)
			assert.Contains(t, ee.msg, "start: "+bad[0], "%q: the error names the flag", bad)
		}
	}
	_, err := parse("--runaway-memory", strings.Repeat("x", 5000))
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 200, "a huge value is not echoed whole")
}
