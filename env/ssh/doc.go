// Package ssh is corral's SSH backend: an env.Environment for one remote
// host, built from the env/nohup engine and a transport over a single
// persistent golang.org/x/crypto/ssh connection.
//
// # Targets
//
// A target is ssh://[user@]host[:port]. host is a DNS name, an IP address
// (IPv6 in brackets) or a Host alias of ssh_config. Passwords, paths,
// queries and fragments are rejected, as are user and host names outside
// [A-Za-z0-9_.-] (so nothing that looks like an ssh option ever reaches a
// config lookup or a message). [Open] returns the Environment; [Dial]
// returns just the [Transport], which other engines may reuse.
//
// # Configuration
//
// ~/.ssh/config then /etc/ssh/ssh_config are read (Options.ConfigFile
// replaces both, as ssh -F does; "none" reads nothing), first value wins,
// through github.com/kevinburke/ssh_config. Honoured keys: HostName (with
// %h), User, Port, IdentityFile (with ~, %d, %u, %r, %h, %n, %p),
// IdentitiesOnly, IdentityAgent, UserKnownHostsFile, GlobalKnownHostsFile
// and ProxyJump (a comma-separated chain of [user@]host[:port] hops, each
// resolved through the same config; a hop's own ProxyJump is not
// followed). The user and port in the target win over the config; the
// default user is the local one. StrictHostKeyChecking in the config is
// deliberately ignored: the policy is chosen in Options only. Match blocks
// are approximated by the parser (host and all criteria; exec conditions
// are never run); Include paths resolve against the real home directory,
// not Options.Home. ProxyCommand, ControlMaster and certificates are not
// supported.
//
// # Authentication
//
// Public keys only, in OpenSSH's order: the keys of ssh-agent
// (Options.AgentSocket, else IdentityAgent, else $SSH_AUTH_SOCK), then the
// identity files (Options.IdentityFiles, then the config's IdentityFile
// entries; ~/.ssh/id_ed25519, id_ecdsa and id_rsa only when neither names
// one). With IdentitiesOnly, agent keys are offered only when they match
// an identity file. The agent is contacted anew for every connection, so a
// key added with ssh-add is used from the next reconnect on.
//
// corral never asks for, accepts or passes passphrases. An encrypted
// identity file whose key the agent holds is simply covered by the agent;
// otherwise it is skipped, and if nothing else works the error matches
// [ErrKeyEncrypted] and says which file to load with ssh-add. Other
// failures match [ErrAuthFailed] and list the keys offered.
//
// # Host keys
//
// Server keys are checked against the known_hosts files (Options, else
// UserKnownHostsFile and GlobalKnownHostsFile, else ~/.ssh/known_hosts),
// re-read for every connection, under the name host:port that OpenSSH
// uses ("[host]:port" in the file for ports other than 22). The handshake
// offers only the algorithms of the keys known for the host, so a host
// known by, say, its ECDSA key is not refused because it prefers to show
// ed25519.
//
//   - unknown host: refused with [ErrHostKeyUnknown] (a *[HostKeyError]
//     carrying the SHA256 fingerprint and the ssh-keyscan line that trusts
//     it), unless Options.HostKeyPolicy is [HostKeyAcceptNew], which
//     appends the key to the first known_hosts file and logs it.
//   - changed or @revoked key: always refused with [ErrHostKeyChanged], logged
//     at error level, with the known entries' file:line.
//
// # The connection
//
// Every process of an Environment shares one connection. The engine's
// operations (start, poll, signal) run on resident shells: long-lived
// sessions, each a /bin/sh that loaded the engine's library once and runs
// one call after another (the engine's protocol, over the session this
// package opens for it as a nohup.ShellTransport: one request and one
// reply on an open channel, no session to open, no shell to start, no
// library to parse). Up to half of Options.MaxSessions are residents
// (Options.Residents: another number, or none); when all are busy, and for
// Write (which sends stdin), an operation opens a session of its own. A
// running process's output and exit arrive on a follow, a session that
// streams them as they happen (see env/nohup); up to four run at once, so
// residents, follows and one-off sessions stay within MaxSessions. Sessions are limited to Options.MaxSessions at a time (default
// 10, OpenSSH's MaxSessions); more wait for a free slot. A resident's reply
// ends with an in-band trailer carrying the exit code, so unlike a session
// it needs no keepalive round trip to be trusted; a resident whose call is
// cancelled, or whose stream fails, is closed and the call reported as
// env.ErrUnavailable; the residents are dropped when the connection is. ClientConfig.Timeout
// bounds only the TCP connect, so the handshake has its own deadline
// (Options.HandshakeTimeout).
//
// A keepalive@openssh.com request is sent every Options.KeepAliveInterval;
// no answer within Options.KeepAliveTimeout closes the connection. When the
// connection drops (keepalive, reset, server restart) it is re-established
// in the background with jittered exponential backoff between
// Options.ReconnectMin and ReconnectMax, for as long as the Environment is
// open. Meanwhile [Transport.Exec] waits up to Options.ReconnectWait (only
// while nothing has been sent, so no script runs twice) and then fails with
// env.ErrUnavailable, which the engine retries for its idempotent
// operations; the remote processes are unaffected (they run under
// setsid and nohup with their output in files) and polling resumes from the
// last offset, so output arrives complete and exit codes are right. A
// reconnect refused for its host key or keys is not "unavailable": Exec
// reports that error so it cannot go unnoticed.
//
// With Options.IdleClose set (the daemon sets it), a connection without a
// call for that long — a running process's output poll is a call — is
// closed with its resident shells, and nothing reconnects it in the
// background: the next call dials, within the connect and handshake
// timeouts rather than ReconnectWait, and a failed dial is that call's
// error. [Transport.ConnStatus] says which state the connection is in.
// [Transport.Health] (env.HealthChecker) turns it into a condition for a
// supervisor's background check: unreachable while the connection is down
// or its last dial failed, and when a keepalive sent for the check gets no
// answer within the check's deadline (a host gone silent is seen in
// seconds, where the connection's own keepalive takes up to
// KeepAliveInterval plus KeepAliveTimeout). One check's keepalive is in
// flight at a time; one without a reply after KeepAliveTimeout closes the
// connection, as the supervisor's does.
//
// # Running a script
//
// Exec sends `/bin/sh -c '<script>'` with the script single-quoted, since
// the server hands the command string to the user's login shell (whatever
// it is) before /bin/sh sees it. Environment variables travel inside the
// script, never through Setenv (which needs AcceptEnv on the server). The
// exit code comes from the exit-status (128+N for a signal); a session
// that ends without one, or a connection lost mid-session, gives
// env.ErrUnavailable. Because OpenSSH may send exit-status before the last
// output, the end of a session is confirmed with a keepalive round trip
// before its result is trusted. Cancelling Exec's context sends a KILL
// signal request and closes the session; its slot is freed when the server
// has closed it.
//
// # Out of memory
//
// A process the host's OOM killer ends is reported with OOMKilled by the
// nohup engine (see env/nohup, "Out of memory"), from the count of OOM
// kills of the memory cgroup the ssh session's shells run in: with
// systemd-logind, the session's scope or its nearest ancestor with the
// memory controller (cgroup v2), or its cgroup in the v1 memory
// hierarchy. That cgroup is shared by what the session runs. A host with
// no cgroup file system at /sys/fs/cgroup, or no memory controller, has
// no record to read, and an OOM kill there is a plain SIGKILL.
package ssh
