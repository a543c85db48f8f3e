package procnet

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// listen opens a real listener, or skips when the address family is
// unavailable (a machine without IPv6).
func listen(t *testing.T, addr string) (netip.AddrPort, bool) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return netip.AddrPort{}, false
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).AddrPort(), true
}

func TestListeningSeesRealListeners(t *testing.T) {
	v4, ok := listen(t, "127.0.0.1:0")
	require.True(t, ok, "listen on 127.0.0.1")
	want := []netip.AddrPort{v4}
	if v6, ok := listen(t, "[::1]:0"); ok {
		want = append(want, v6)
	} else {
		t.Log("no IPv6 loopback: checking IPv4 only")
	}

	// Every way to read the tables finds the same sockets, with the same
	// inodes.
	readers := map[string]func() ([]Socket, error){
		"Listening(0)":        func() ([]Socket, error) { return Listening(0) },
		"Listening(self)":     func() ([]Socket, error) { return Listening(os.Getpid()) },
		"procListening(0)":    func() ([]Socket, error) { return procListening(0) },
		"procListening(self)": func() ([]Socket, error) { return procListening(os.Getpid()) },
		"diagListening":       diagListening,
	}
	var inodes []uint64
	for name, read := range readers {
		socks, err := read()
		require.NoError(t, err, name)
		wanted := map[uint64]bool{}
		var got []uint64
		for _, w := range want {
			s := find(socks, w)
			require.NotNil(t, s, "%s: %v not among %v", name, w, socks)
			assert.NotZero(t, s.Inode)
			wanted[s.Inode] = true
			got = append(got, s.Inode)
		}
		if inodes == nil {
			inodes = got
		}
		assert.Equal(t, inodes, got, name)

		holders := SocketInodes([]int{os.Getpid(), os.Getpid()}, wanted)
		assert.Len(t, holders, len(wanted), name)
		for ino := range wanted {
			assert.Equal(t, os.Getpid(), holders[ino], "%s: holder of inode %d", name, ino)
		}
		all, err := AllSocketInodes(wanted)
		require.NoError(t, err)
		assert.Equal(t, holders, all, name)
	}
}

func find(socks []Socket, ap netip.AddrPort) *Socket {
	for i, s := range socks {
		if s.Port == int(ap.Port()) && s.Addr == ap.Addr() {
			return &socks[i]
		}
	}
	return nil
}

func TestSocketInodesSkipsWhatItCannotRead(t *testing.T) {
	// A PID that cannot exist (above pid_max's ceiling) and no wanted inodes.
	assert.Empty(t, SocketInodes([]int{1 << 23}, map[uint64]bool{1: true}))
	assert.Empty(t, SocketInodes([]int{os.Getpid()}, nil))
}

func TestNetNS(t *testing.T) {
	ns, err := NetNS(os.Getpid())
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(ns, "net:["), ns)
	_, err = NetNS(1 << 23)
	assert.Error(t, err)
}

func TestCommand(t *testing.T) {
	cmd := Command(os.Getpid())
	assert.True(t, strings.HasPrefix(cmd, os.Args[0]), "Command = %q, want it to start with %q", cmd, os.Args[0])
	assert.Equal(t, "", Command(1<<23))
}
