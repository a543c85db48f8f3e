package procnet

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Rows as a little-endian (x86-64) kernel prints them: 127.0.0.1:8080 and
// 0.0.0.0:22 listening, one established connection, and a LISTEN row of
// tcp6 for [::1]:3000 and [::]:5432.
const (
	fixtureTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 123456 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F90 0100007F:D3A4 01 00000000:00000000 00:00000000 00000000  1000        0 999 1 0000000000000000 20 4 30 10 -1
`
	fixtureTCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:0BB8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 777 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:1538 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   105        0 888 1 0000000000000000 100 0 0 10 0
`
)

func littleEndian() bool {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], 1)
	return b[0] == 1
}

func TestParseListeningFixture(t *testing.T) {
	if !littleEndian() {
		t.Skip("the fixture is a little-endian kernel's text")
	}
	got, err := ParseListening(strings.NewReader(fixtureTCP))
	require.NoError(t, err)
	assert.Equal(t, []Socket{
		{Port: 8080, Addr: netip.MustParseAddr("127.0.0.1"), Inode: 123456},
		{Port: 22, Addr: netip.MustParseAddr("0.0.0.0"), Inode: 2222},
	}, got)

	got, err = ParseListening(strings.NewReader(fixtureTCP6))
	require.NoError(t, err)
	assert.Equal(t, []Socket{
		{Port: 3000, Addr: netip.MustParseAddr("::1"), Inode: 777},
		{Port: 5432, Addr: netip.MustParseAddr("::"), Inode: 888},
	}, got)
}

func TestParseListeningEmptyAndMalformed(t *testing.T) {
	got, err := ParseListening(strings.NewReader("  sl  local_address rem_address   st\n"))
	require.NoError(t, err)
	assert.Empty(t, got)

	for name, row := range map[string]string{
		"short":     "   0: 0100007F:1F90 00000000:0000 0A\n",
		"no port":   "   0: 0100007F 00000000:0000 0A 0:0 0:0 0 0 0 1 1 0\n",
		"bad addr":  "   0: 0100ZZ7F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 1 1 0\n",
		"addr size": "   0: 01007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 1 1 0\n",
		"bad port":  "   0: 0100007F:1F9000 00000000:0000 0A 0:0 0:0 0 0 0 1 1 0\n",
		"bad inode": "   0: 0100007F:1F90 00000000:0000 0A 0:0 0:0 0 0 0 x 1 0\n",
	} {
		_, err := ParseListening(strings.NewReader("header\n" + row))
		assert.ErrorContains(t, err, "line 2", name)
	}
	// A malformed row of another state is skipped, not decoded.
	got, err = ParseListening(strings.NewReader("header\n   0: zz:zz 00000000:0000 01 0:0 0:0 0 0 0 x 1 0\n"))
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestParseSocketLink(t *testing.T) {
	for link, want := range map[string]uint64{"socket:[12345]": 12345, "socket:[0]": 0} {
		got, ok := parseSocketLink(link)
		assert.True(t, ok, link)
		assert.Equal(t, want, got, link)
	}
	for _, link := range []string{"", "socket:[]", "socket:[12", "pipe:[12]", "/tmp/socket:[1]", "socket:[-1]", "anon_inode:[eventpoll]"} {
		_, ok := parseSocketLink(link)
		assert.False(t, ok, link)
	}
}
