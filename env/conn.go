package env

import "time"

// ConnReporter is implemented by environments that hold a connection open
// (an SSH connection to a host), so that a long-lived supervisor can show
// what it keeps open and since when (corral doctor).
type ConnReporter interface {
	ConnStatus() ConnStatus
}

// ConnState is the state of an environment's connection.
type ConnState string

// Connection states.
const (
	// ConnConnected: open and usable.
	ConnConnected ConnState = "connected"
	// ConnIdle: closed after a time without use; the next call opens it
	// again.
	ConnIdle ConnState = "idle"
	// ConnReconnecting: dropped; being re-established in the background.
	ConnReconnecting ConnState = "reconnecting"
	// ConnClosed: the environment was closed.
	ConnClosed ConnState = "closed"
)

// ConnStatus describes an environment's connection.
type ConnStatus struct {
	State ConnState `json:"state"`
	// Since is when State was entered.
	Since time.Time `json:"since,omitzero"`
	// InUse counts the calls under way on the connection.
	InUse int `json:"in_use,omitempty"`
	// IdleCloseAt is when an unused connection will be closed; zero when
	// it is in use or is never closed for idleness.
	IdleCloseAt time.Time `json:"idle_close_at,omitzero"`
	// Detail says more: why it is reconnecting, a failed dial.
	Detail string `json:"detail,omitempty"`
}
