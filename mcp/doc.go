// Package mcp serves a corral registry to MCP clients (coding agents) as
// two tools built on the official MCP Go SDK:
//
//   - terminal runs a shell command, in the foreground (the result carries
//     its output and exit status) or in the background (the result carries
//     its process ID);
//   - process lists, polls, reads, waits for (their end, or with ready=true
//     their readiness), kills and feeds stdin to the processes the registry
//     tracks, and drains their events.
//
// # Output
//
// Output handed to the model is stripped of ANSI/OSC escape sequences
// (package registry/ansi) and capped at Config.MaxOutput bytes (default
// 50,000): the head and the tail are kept, cuts land on line boundaries
// where one is near, and one "[... N bytes omitted ...]" line stands for
// what was left out. The registry keeps the full output (within its own
// buffer bound): process poll with an offset and process log with a line
// offset fetch the rest. Each session remembers, per process, how far poll
// and wait have read, so a poll without offset returns what is new.
//
// # Sessions
//
// Each client session opens a session lease on the registry
// (registry.Service.OpenSession) when it is initialized; its ID is the
// session's mcp-session label. Background processes and yielded runs are
// started in it, except those started with persist, which carry the
// label mcp-persist instead and outlive the session. When the client
// session ends, the server ends the lease and the registry kills what
// the session left running. Through the daemon the lease is a long-lived
// request on the socket: should this process die without ending it, the
// daemon kills the session's processes when the lease drops. The policy is
// the registry's; this server only opens and ends the lease.
//
// # Events
//
// Each client session gets two registry subscriptions from the moment it
// is initialized. One feeds MCP logging notifications
// ("notifications/message", logger "corral", data = the registry Event as
// JSON): watch matches, watch_disabled and rate-limit summaries always,
// exits only of processes started with notify_on_complete, a dev
// server's ready, crashed and ttl_expired events always (each comes at most
// once per process, and is what its readiness conditions or ttl asked for),
// and oom_killed always (level "error": the kernel's OOM killer ended a
// process, which its exit code alone does not say); runaway (level
// "warning": a process passed the runaway_* thresholds terminal gave it,
// or the server's). MCP sends log
// notifications only once the client has chosen a level with
// logging/setLevel; "info" receives all of corral's. The other
// subscription is drained by process action "events", which returns every
// pending event; the registry's rules apply to both: its global rate limit
// (from which notified exits are exempt: every one is pushed, with its
// status and output tail), its per-process watch limit, and an exit already
// reported to a caller through wait, poll or a foreground run is not
// repeated — the subscriptions check it when they hand the event over.
//
// # Protocol versions
//
// The server offers the session-based protocol versions only (up to
// 2025-11-25). corral's tools are stateful — background processes, poll
// cursors, pushed notifications — which the stateless 2026-07-28 protocol
// has no session for; clients that try it first fall back to initialize.
//
// # Errors
//
// A bad argument, an unknown or ambiguous ID, a process in the wrong state
// are tool results with IsError set and a message saying what was wrong
// and what is allowed; the server never fails the JSON-RPC call for them.
package mcp
