//go:build !unix

package daemon

// lockStateDir is a no-op where flock does not exist: the socket's
// existence is then the only guard against two daemons.
func lockStateDir(string) (func(), error) { return func() {}, nil }
