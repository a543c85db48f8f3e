package daemon

import (
	"fmt"
	"os"
	"path/filepath"
)

// Paths are the files of one corral daemon.
type Paths struct {
	// Socket is the unix socket the API is served on. Its directory is
	// created with mode 0700 and the socket itself is chmod 0600.
	Socket string
	// StateDir holds the state file, the lock and the daemon's log.
	StateDir string
}

// StateFile is where the registry checkpoints its processes.
func (p Paths) StateFile() string { return filepath.Join(p.StateDir, "state.json") }

// LockFile is held (flock) by the running daemon, so that two daemons
// never share one state file.
func (p Paths) LockFile() string { return filepath.Join(p.StateDir, "daemon.lock") }

// LogFile receives the output of a daemon the CLI started in the
// background.
func (p Paths) LogFile() string { return filepath.Join(p.StateDir, "daemon.log") }

// DefaultPaths returns the paths for the current user: the socket in
// $XDG_RUNTIME_DIR/corral/ (a per-user tmpfs that the login manager
// cleans), else in the state directory; the state directory is
// $XDG_STATE_HOME/corral, else ~/.local/state/corral. CORRAL_SOCKET
// overrides the socket path.
func DefaultPaths() (Paths, error) {
	var p Paths
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		p.StateDir = filepath.Join(x, "corral")
	} else {
		home, err := os.UserHomeDir()
		if err != nil {
			return Paths{}, fmt.Errorf("daemon: no state directory: set HOME or XDG_STATE_HOME: %w", err)
		}
		p.StateDir = filepath.Join(home, ".local", "state", "corral")
	}
	switch x := os.Getenv("XDG_RUNTIME_DIR"); {
	case os.Getenv("CORRAL_SOCKET") != "":
		p.Socket = os.Getenv("CORRAL_SOCKET")
	case x != "" && filepath.IsAbs(x):
		p.Socket = filepath.Join(x, "corral", "corral.sock")
	default:
		p.Socket = filepath.Join(p.StateDir, "corral.sock")
	}
	return p, nil
}

// ensurePrivateDir creates dir with mode 0700 (and its parents with 0700)
// and makes sure an existing one is a directory owned by us and not open to
// others: a socket in a directory others can write to could be replaced.
func ensurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("daemon: create %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("daemon: %s is not a directory", dir)
	}
	if err := checkOwner(dir, fi); err != nil {
		return err
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("daemon: make %s private (0700): %w", dir, err)
		}
	}
	return nil
}
