//go:build !linux

package plugins

// Without pidfds, conn.exited falls back to /proc (where present) and
// go-plugin's own detection.
func openPidfd(int) int    { return -1 }
func pidfdExited(int) bool { return false }
func closePidfd(int)       {}
