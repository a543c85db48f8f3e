package env

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"unicode"
)

// Listener is a TCP socket in the LISTEN state inside a sandbox.
type Listener struct {
	// Port is the local port.
	Port int `json:"port"`
	// Addr is the local address as text: "0.0.0.0", "127.0.0.1", "::", …
	Addr string `json:"addr"`
	// PID is a process (inside the sandbox) that holds the socket, 0 when
	// the backend cannot see who does. A socket inherited by several
	// processes is reported once, with one of them.
	PID int `json:"pid,omitempty"`
	// Command is that process's command line (or its name when the command
	// line is unreadable), for display.
	Command string `json:"command,omitempty"`
}

// PortLister is implemented by a Process, and by an Environment, whose
// backend can see sockets.
//
// On a Process, Listeners returns the TCP sockets in the LISTEN state held
// by a process of its tree: the process, its descendants, and escapees as
// far as Capabilities.TreeKill reaches. A socket held only by a process
// outside the tree is never reported, even on the same port: that is what
// lets a supervisor tell "my server is up" from "another program has the
// port".
//
// On an Environment, Listeners returns every TCP socket in the LISTEN state
// that the sandbox's network namespace holds, with its holder where the
// backend can see it.
//
// The result is sorted by port, then address, and holds each (port,
// address) once. Capabilities.Ports reports support in advance.
type PortLister interface {
	Listeners(ctx context.Context) ([]Listener, error)
}

// TreePortLister is implemented by an Environment that can find the
// listening sockets of many of its processes' trees in one look, which on
// a sandbox backend is one round trip instead of one per process: what a
// listing of every process with its ports needs.
//
// TreeListeners returns, for each of procs in order, what that process's
// own Listeners would return (PortLister's meaning of "of the tree"),
// except that Listener.Command may be left empty. A process that is not
// one of this Environment's (another backend's handle, one released) gets
// nil and no error; so does one whose tree is gone. An error means no
// result for any of them.
type TreePortLister interface {
	TreeListeners(ctx context.Context, procs []Process) ([][]Listener, error)
}

// PortWaiter is implemented by a Process that can wait for its tree to
// listen on a port more cheaply, or sooner, than repeated Listeners calls
// can tell (a backend that would pay a round trip into its sandbox per
// look waits inside the sandbox instead).
type PortWaiter interface {
	// WaitListening blocks until a process of the tree listens on one of
	// ports (with PortLister's meaning of "of the tree") and returns the
	// tree's listeners at that moment, which include it. It returns
	// ctx.Err() when ctx is done first. It does not return when the process
	// exits: the caller, who waits for the exit anyway, cancels ctx.
	WaitListening(ctx context.Context, ports []int) ([]Listener, error)
}

// URLChecker is implemented by an Environment that can make an HTTP request
// from inside its sandbox, where a server that listens on 127.0.0.1 is
// reachable. Capabilities.CheckURL reports support in advance.
type URLChecker interface {
	// CheckURL makes one GET request to rawURL (checked with
	// ValidateCheckURL first) without following redirects, and returns the
	// response's status code. An error means no answer: the connection was
	// refused or timed out, or the sandbox has no HTTP client (then the
	// error matches ErrUnsupported and says what to install).
	CheckURL(ctx context.Context, rawURL string) (status int, err error)
}

// URLReady reports whether an HTTP status code means a server is ready:
// 2xx or 3xx.
func URLReady(status int) bool { return status >= 200 && status < 400 }

// MaxCheckURL is the longest URL ValidateCheckURL accepts.
const MaxCheckURL = 2048

// ValidateCheckURL checks a readiness URL before any backend sees it: an
// absolute http or https URL with a host, at most MaxCheckURL bytes, with
// no whitespace, control characters or user information. Backends may
// rely on this (after it, the URL is passed to a command inside the
// sandbox single-quoted, never interpolated unchecked).
func ValidateCheckURL(rawURL string) error {
	bad := func(reason string) error {
		return &SpecError{Field: "ReadyURL", Value: rawURL, Reason: reason}
	}
	if rawURL == "" {
		return bad("is empty; give an absolute URL such as http://127.0.0.1:3000/health")
	}
	if len(rawURL) > MaxCheckURL {
		return bad(fmt.Sprintf("is %d bytes long; at most %d are allowed", len(rawURL), MaxCheckURL))
	}
	for _, r := range rawURL {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r > unicode.MaxASCII {
			return bad(fmt.Sprintf("contains %q; percent-encode it (for example %%20 for a space)", r))
		}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return bad(fmt.Sprintf("does not parse (%v); give an absolute URL such as http://127.0.0.1:3000/health", err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad(fmt.Sprintf("has scheme %q; only http and https are checked", u.Scheme))
	}
	if u.Host == "" || u.Hostname() == "" {
		return bad("has no host; give one such as http://127.0.0.1:3000/health")
	}
	if u.User != nil {
		return bad("carries user information; a readiness check sends no credentials")
	}
	if strings.HasPrefix(u.Hostname(), "-") {
		return bad("has a host that starts with '-'")
	}
	return nil
}

// ValidatePort checks a TCP port number given for readiness or a kill by
// port.
func ValidatePort(port int) error {
	if port < 1 || port > 65535 {
		return &SpecError{Field: "Port", Value: fmt.Sprint(port), Reason: "is not a TCP port; give a number from 1 to 65535"}
	}
	return nil
}
