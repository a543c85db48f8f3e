//go:build linux || darwin

package cli

import (
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/env"
)

// terminalSize returns the window size of w when it is a terminal, so a
// --pty command formats its output for the terminal it is shown on.
func terminalSize(w io.Writer) (env.WindowSize, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return env.WindowSize{}, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return env.WindowSize{}, false
	}
	return env.WindowSize{Rows: ws.Row, Cols: ws.Col}, true
}

// isTerminal reports whether r is a terminal someone can type on.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}

// makeRaw puts the terminal r (when it is one) into raw mode, so keys such
// as Ctrl-C reach a --pty command's own terminal instead of being turned
// into signals for corral, and returns the function that restores it. ok
// is false when r is not a terminal.
func makeRaw(r io.Reader) (restore func(), ok bool) {
	return setTermios(r, func(raw *unix.Termios) {
		// The settings of cfmakeraw(3).
		raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		raw.Oflag &^= unix.OPOST
		raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		raw.Cflag &^= unix.CSIZE | unix.PARENB
		raw.Cflag |= unix.CS8
	})
}

// setTermios changes the terminal r (when it is one) as change says, with
// reads returning each byte as it comes (VMIN 1, VTIME 0), and returns the
// function that restores it. ok is false when r is not a terminal.
func setTermios(r io.Reader, change func(*unix.Termios)) (restore func(), ok bool) {
	f, isFile := r.(*os.File)
	if !isFile {
		return nil, false
	}
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, false
	}
	t := *old
	change(&t)
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &t); err != nil {
		return nil, false
	}
	return func() { _ = unix.IoctlSetTermios(fd, ioctlSetTermios, old) }, true
}

// notifyResize relays SIGWINCH, the terminal's "my size changed", to c.
func notifyResize(c chan<- os.Signal) { signal.Notify(c, syscall.SIGWINCH) }

// makeCbreak turns off line buffering and echo on the terminal r (when it
// is one) so that single keys reach corral top at once, while Ctrl-C stays
// a signal and output keeps its newline translation; it returns the
// function that restores the terminal. ok is false when r is not a terminal.
func makeCbreak(r io.Reader) (restore func(), ok bool) {
	return setTermios(r, func(t *unix.Termios) { t.Lflag &^= unix.ECHO | unix.ICANON })
}
