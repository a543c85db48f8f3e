//go:build !linux

package daemon

import (
	"io/fs"
	"net"
)

// peerUID is not implemented outside Linux. The fallback protection is
// the file system: the socket's directory is mode 0700 and the socket
// 0600, so only its owner (and root) can connect.
func peerUID(net.Conn) (int, error) { return -1, nil }

// peerCredSupported reports whether peerUID works on this OS.
const peerCredSupported = false

func checkOwner(string, fs.FileInfo) error { return nil }
