package daemon

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerUID returns the uid of the process at the other end of a unix
// socket connection, from the kernel (SO_PEERCRED): it cannot be forged.
func peerUID(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, fmt.Errorf("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if serr != nil {
		return -1, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return int(cred.Uid), nil
}

// peerCredSupported reports whether peerUID works on this OS.
const peerCredSupported = true

func checkOwner(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("daemon: %s belongs to uid %d, not to us (uid %d): refusing to use it", path, st.Uid, os.Getuid())
	}
	return nil
}
