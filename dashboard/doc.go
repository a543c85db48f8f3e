// Package dashboard is the web page the daemon serves for people who
// supervise agents: every process live, its output as it is written, and
// kill, force kill, stdin and remove, over one WebSocket.
//
// # Access
//
// The page is served on a loopback address only, behind a per-daemon token
// handed over as Jupyter does: the URL corral dashboard prints carries it
// once (?token=…); the server answers with an HttpOnly, SameSite=Strict
// cookie and a redirect to the bare URL. A request with neither a valid
// cookie nor a valid token (query or "Authorization: Bearer") gets 401 and
// a one-line text body, never page content. The WebSocket also checks the
// Origin of browsers (same host only), so another site open in the same
// browser cannot drive it with the cookie.
//
// # Protocol
//
// One WebSocket at /ws carries JSON text messages, each with a "type";
// docs/api.md lists them all. On connect the server sends "sessions" (every
// tracked process), then "session_updated" and "session_removed" as the
// registry changes (it waits on Live.Changed, so a change reaches every
// browser within milliseconds, with no polling by the page). Each session
// carries its row: the texts of corral ps's columns (registry.ListColumns,
// named in "sessions"), which the page lays out without computing any;
// while browsers watch, the hub also looks every second for the texts that
// count with the clock (AGE, LEFT) and every two for the ports the trees
// listen on, a look that never holds a change back. The browser
// sends "subscribe_output" for the process it shows, "stats_history" for
// the samples behind the CPU and MEM sparklines of the running rows on
// screen (every few seconds at most; see stats.go), and actions
// ("kill", "force_kill", "send_stdin", "remove"), each answered by one
// "<action>_result". A message that is not JSON, has an unknown type or
// lacks its sessionId is answered with "error" and the connection stays
// open; one over MaxMessage bytes closes it (1009, message too big).
//
// The page itself (static/) is plain HTML, CSS and JavaScript embedded in
// the binary. Until a process is chosen its right pane says what to do
// (how to start one, when there is none). Terminal output (PTY processes)
// is rendered by its own small ANSI interpreter, since no maintained
// xterm.js is packaged here.
package dashboard
