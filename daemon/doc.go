// Package daemon is `corral serve`: the hub every front end hangs from.
// One daemon per user holds the one registry.Registry of that user's
// processes, behind an HTTP/JSON API on a unix socket; the CLI (run, start,
// ps, logs, wait, kill, …), the MCP server, the ACP proxy and any Go
// program reach it through Client, which is a registry.Service, so a front
// end is the same code whether it drives the daemon or a private registry.
// The CLI starts a daemon when none answers.
//
// The pieces:
//
//   - Run (run.go): the daemon's life. It takes the state directory's
//     lock, opens the registry on the state file, serves the socket as
//     soon as that file is read (the processes it lists are re-attached
//     in the background and listed recovering until then), and stops
//     gracefully on ctx or POST /v1/shutdown.
//   - Server (server.go) and the wire types (api.go, chunk.go): the
//     routes under APIVersion. Output crosses as "output" events of a
//     stream, written and read by hand because it is most of the
//     traffic.
//   - Client (client.go): the API as a registry.Service. Errors come back
//     as *APIError, which matches the registry's and env's sentinels with
//     errors.Is; ErrNoDaemon and ErrDaemonLost tell "nobody listens" from
//     "the daemon went away under the request".
//   - Leases (session.go, and POST /v1/run in server.go): a request that
//     stays open for as long as someone cares about processes. A session
//     (MCP, ACP) is the stream of POST /v1/sessions; a foreground `corral
//     run` is its POST /v1/run. When the connection drops, the registry
//     applies the session's policy (registry/session.go) or kills the
//     foreground tree.
//   - The dashboard host (dashboard.go): the web page's listener, on
//     loopback only, started on the first POST /v1/dashboard and guarded
//     by a token that lives as long as the daemon.
//   - Paths and the lock (paths.go, lock_*.go, peer_*.go): where the
//     socket, state file, lock and log live, and who may connect.
//
// The invariants:
//
//   - One daemon per state directory: it holds an flock on daemon.lock
//     for its whole life, and the kernel releases it when the daemon dies,
//     so a crashed daemon never blocks the next.
//   - Only its user talks to it: the socket's directory is 0700, the
//     socket 0600, and where the kernel tells the peer's uid
//     (SO_PEERCRED) a connection of another uid is refused.
//   - A graceful stop keeps the processes: detached ones run on in their
//     sandboxes and the next daemon re-attaches them from the state file.
//     Only a shutdown with kill-all ends them (and processes their backend
//     could not detach end with the daemon).
//   - Errors are translated once, by class (internal/errclass): the
//     server maps each class to an HTTP status and code, and the client
//     maps them back, so a front end branches on the same sentinels
//     whether or not a daemon is in between. Every class is listed, and a
//     test fails on a class that is not.
//   - Policy lives in the registry: the daemon decodes, calls the registry
//     and encodes; it decides nothing about processes a private registry
//     would decide differently.
package daemon
