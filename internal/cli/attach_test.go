package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDetachKeys(t *testing.T) {
	for in, want := range map[string][]byte{
		"ctrl-]":        {0x1d},
		"ctrl-p,ctrl-q": {0x10, 0x11},
		"ctrl-A, x":     {0x01, 'x'},
		"ctrl-@":        {0x00},
	} {
		got, err := parseDetachKeys(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "ctrl-", "ctrl-1", "alt-x", "xy", ","} {
		_, err := parseDetachKeys(bad)
		assert.Error(t, err, "%q", bad)
	}
	assert.Equal(t, "ctrl-p,ctrl-q", keyNames([]byte{0x10, 0x11}))
}

// TestDetachMatcher: the sequence is found across reads; a sequence that
// breaks off is sent as typed, and nothing after the sequence is sent.
func TestDetachMatcher(t *testing.T) {
	m := detachMatcher{keys: []byte{0x10, 0x11}}
	send, done := m.feed([]byte("ab\x10"))
	assert.Equal(t, "ab", string(send))
	assert.False(t, done)
	send, done = m.feed([]byte("c\x10\x10"))
	assert.Equal(t, "\x10c\x10", string(send), "a broken-off start is sent; a new start is held")
	assert.False(t, done)
	send, done = m.feed([]byte("\x11after"))
	assert.Empty(t, send)
	assert.True(t, done)

	one := detachMatcher{keys: []byte{0x1d}}
	send, done = one.feed([]byte("xy\x1dz"))
	assert.Equal(t, "xy", string(send))
	assert.True(t, done)
}
