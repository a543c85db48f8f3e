package envtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/env/local"
)

func TestContainsWord(t *testing.T) {
	for _, c := range []struct {
		s, w string
		want bool
	}{
		{"sleep 12345678", "12345678", true},
		{"12345678", "12345678", true},
		{"sh -c sleep 12345678 & wait ", "12345678", true},
		{"sleep 112345678", "12345678", false},
		{"sleep 123456789", "12345678", false},
		{"sleep 112345678 12345678", "12345678", true},
		{"sleep 1234''5678", "12345678", false},
		{"grep -e [1]2345678", "12345678", false},
	} {
		got := containsWord(c.s, c.w)
		assert.Truef(t, got == c.want, "containsWord(%q, %q) = %v, want %v", c.s, c.w, got, c.want)
	}
}

func TestMarkersStayOutOfTheScript(t *testing.T) {
	ms := newMarkers(3)
	line := exportMarkers(ms)
	script := scanScript(ms)
	for _, m := range ms {
		assert.Truef(t, !strings.Contains(line, m) && !strings.Contains(script, m), "marker %q appears literally in %q or the scan script", m, line)
	}
	seen := map[string]bool{}
	for range 1000 {
		m := NewMarker()
		require.Falsef(t, seen[m] || !markerPattern.MatchString(m) || len(m) != 8, "NewMarker returned %q (repeated or malformed)", m)
		seen[m] = true
	}
}

// TestScanProcsFindsExactlyTheMarked: the scanner finds a marked process
// by its marker and never itself or an unused marker.
func TestScanProcsFindsExactlyTheMarked(t *testing.T) {
	e, err := local.New(local.Options{StateDir: t.TempDir()})
	require.NoError(t, err)
	defer e.Close()
	s := &suite{timeout: DefaultTimeout}
	used, unused := NewMarker(), NewMarker()
	s.killMarkedAtCleanup(t, e, used)
	s.start(t, e, envSpec(exportMarkers([]string{used})+"sleep $M0"))
	s.waitProcs(t, e, true, used)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	found, err := ScanProcs(ctx, e, used, unused)
	require.NoError(t, err)
	// Only the sleep carries the marker, not the shell that started it.
	if len(found[used]) != 1 {
		assert.Fail(t, fmt.Sprintf("found %v for the marked process, want exactly one PID", found[used]))
	}
	if len(found[unused]) != 0 {
		assert.Fail(t, fmt.Sprintf("found %v for a marker no process carries (the scanner found itself?)", found[unused]))
	}
	require.NoError(t, KillMarked(ctx, e, used))
	s.waitProcs(t, e, false, used)
}

func envSpec(cmd string) env.Spec { return env.Spec{Command: cmd} }
