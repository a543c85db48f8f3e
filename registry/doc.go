// Package registry is corral's backend-neutral process registry: the single
// source of truth for the processes corral runs. Front ends (the CLI, the
// socket server, the MCP server) call it; it drives env.Environment values
// and never the other way round.
//
// A Registry is a value built with New from a Config whose Open function
// maps a backend target ("local", "docker://web", "ssh://host", a plugin's
// "NAME://…") to an Environment. Each target is opened lazily, once; a
// failed Open is not cached, and an environment whose sandbox is reported
// gone (env.ErrSandboxGone: a container removed) is dropped, so that the
// next call opens the target again (envs.go). Close stops the registry's goroutines and
// closes the environments, which kills the processes that were not started
// detached; detached ones keep running in their sandbox, and with
// Config.StateFile a later registry re-attaches them (Recover).
//
// # Where things are
//
//	registry.go    Registry, New, Close, the janitor
//	envs.go        one Environment per backend target, opened once (again when its sandbox is gone)
//	store.go       the process map: lookup by ID or prefix, limits, pruning, List, Remove
//	proc.go        one process: its state in five parts; output copy, finish
//	start.go       Start, and the start Run shares: recorded before it runs
//	lifecycle.go   the state machine: the allowed transitions, and the methods that make them
//	tree.go        following what the leader left running
//	wait.go        Poll, Wait, WaitTree
//	kill.go        the kill protocol (Kill, KillAll, Run's timeouts)
//	stdin.go       Write, Submit, CloseStdin, Resize
//	run.go         Run: foreground with timeouts and yield
//	events.go      the eventBus and Subscription
//	watch.go       output patterns and their rate limit; the line splitter
//	names.go       process names: ValidateName, reuse, lookup by name
//	ready.go       readiness (port, pattern, URL), WaitReady
//	deadlines.go   a background process's TTL and idle timeout
//	session.go     sessions: a front end's lease on the processes it starts
//	health.go      each backend's condition (ok, paused, unreachable, gone)
//	ports.go       Ports, and ListOptions.Ports (one look per backend)
//	stats.go       what each tree costs: one batched sample per backend and round, Stats
//	buffer.go      the bounded head+tail output buffer
//	checkpoint.go  the state file: its record type and the coalescing writer
//	recover.go     Recover, StartRecover: re-attach or settle what the state
//	               file lists
//	lazyoutput.go  the lazy read-back of the output of a process restored finished
//	sweep.go       recovery's end of the starts a dead registry never confirmed
//	types.go       the public value types (Info, options, results)
//	errors.go      the sentinel errors callers branch on
//	id.go          process IDs
//
// # IDs
//
// A process ID is "proc_" followed by 12 lowercase hex digits from
// crypto/rand. Every method taking an ID validates it (ErrInvalidID, with
// the expected form in the message) and also accepts a unique prefix of at
// least 4 hex digits, with or without "proc_"; an ambiguous prefix is an
// *AmbiguousError (ErrAmbiguous) listing the candidates, an unknown one
// ErrNotFound.
//
// A process started with StartOptions.Name can be named wherever an ID is
// taken: the name names the process whose tree runs under it, else the
// newest tracked process that had it (a name nobody has is ErrInvalidID).
// Names are unique among processes whose tree runs; see StartOptions.Name
// for reuse, ErrNameInUse and Replace.
//
// # Dev servers
//
// StartOptions.Ready makes the registry watch for readiness (ready.go):
// every condition given must hold, then Info.ReadyAt is set and a ready
// event published. A port is waited for through the process's
// env.PortWaiter, or polled through its env.PortLister (one look per poll,
// at a fiftieth of the process's age clamped to [20 ms, 1 s]); a pattern
// is matched on output lines, with no polling; a URL is polled, only once
// the port holds. A condition the backend cannot check is refused at
// Start. Nothing is polled once the process is ready or its tree ended.
// A ready process whose tree ends on its own — no kill, TTL or idle
// timeout of ours signalled it — publishes a crashed event (exempt from
// the global rate limit, with Status and Tail). StartOptions.TTL and
// IdleTimeout kill the tree (timed_out, TimedOut "ttl" or "idle_timeout";
// a ttl_expired event first for the TTL). All of it is checkpointed:
// after a restart a ready process stays ready, one not ready yet is
// watched again, and the deadlines still count from StartedAt and the
// last output.
//
// # States
//
//	starting → running → exited | killed | timed_out | lost
//	starting → failed
//	recovering → running | exited | killed | timed_out | lost | failed   (after a restart)
//
// lifecycle.go holds this table and the only methods that move a process
// along it; a move it does not allow is a bug, logged and refused.
// CreatedAt, StartedAt and EndedAt timestamp the transitions. A process
// that a Kill, a KillAll, a Run timeout or the cancellation of Run's
// context signalled is reported killed (or timed_out) whatever status it
// then exits with — a process that traps SIGTERM and exits 0 is still
// "killed" — and the status is recorded. A signal counts once the
// environment accepted it; if the process had already exited (the
// environment answers env.ErrExited) the real exit stands. lost means the
// environment reported the sandbox or the process gone (env.ErrSandboxGone,
// env.ErrNotFound) while it ran; failed means the environment could not
// start it (the failed process is registered, so its Reason stays
// visible). Invalid options and a full registry register nothing.
//
// Start starts processes detached (Spec.Detach) when the environment's
// Capabilities.Reattach is true and no PTY is asked for; Run does so only
// when it may yield (RunOptions.YieldAfter), since a foreground process
// should die with its supervisor.
//
// # Output
//
// One goroutine per process copies the environment's output stream into
// the process's buffer, Run's live writer and the watcher; the final state
// is recorded only after the stream ended, so a finished process's output
// is complete. A buffer holds at most Config.BufferSize bytes: the first
// HeadSize bytes and a rolling tail, with a monotonic total and an exact
// count of the bytes omitted between them. No cut splits a UTF-8 sequence
// (binary data stays byte-exact; the at most 3 bytes a cut may skip are
// counted as omitted). Poll reads "since byte N" and says how many bytes
// fell out of the buffer; Log splits the held output into lines, with a
// "[… N bytes omitted …]" line at the gap and, with Strip, the ANSI/OSC
// stripping of package registry/ansi.
//
// # Restarts
//
// With Config.StateFile every state change is checkpointed, and Recover
// makes a new registry track the processes of the file again. A start is
// in the file, as starting and tagged with its ID (env.Spec.Tag), before
// the environment is asked to run anything, and is recorded running only
// once Start is about to confirm it to its caller: a registry that dies
// during a Start leaves a record from which the next one ends whatever
// that start left running (through its Ref, or by tag where the
// environment is an env.TagFinder) and restores it failed, so a caller
// told that its start failed finds nothing of it running. A caller that
// could not tell (its connection broke) repeats the Start with the same
// StartOptions.Key and gets the process that started, or a new one. A
// start whose record cannot be written (a full disk) is refused, with
// nothing left running.
//
// StartRecover returns as soon as the file is read: the registry serves at
// once, while the processes that need their sandbox are in state
// recovering; they are re-attached in parallel (Recover waits for that).
// A process still running is re-attached and its output read again from
// byte 0 (a restart costs about one Attach per running process: env/nohup
// reads the state of concurrent attaches in one round trip). A process
// that had finished is restored
// from its record alone, whatever its backend — state, status,
// timestamps, Info.OutputBytes — with no call to its sandbox, so List,
// Get and Wait never read its output. The output stays in the sandbox
// until a Poll from an offset before its end or a Log needs it: that call
// attaches the process and reads the output into its buffer, once (other
// callers wait for that read). If the output can no longer be had — its
// state in the sandbox was removed, the sandbox is gone, or the process
// was not detached — Poll and Log return an error that says so (matching
// env.ErrNotFound, env.ErrSandboxGone or env.ErrUnsupported), and keep
// returning it without asking again. Remove attaches on demand to delete
// the sandbox state; pruning does so in the background, so that List
// never waits for a backend that may be slow or gone.
//
// Locking is per process. The registry-wide lock guards only the process
// and environment maps; no lock is held while copying output or calling an
// environment, so a process flooding output never delays operations on
// another.
//
// # Kill
//
// Kill sends the signal (default TERM; KILL with Force), waits up to the
// grace period (default Config.DefaultGrace, 5 s) for the whole tree to
// go — the leader and every descendant that got the signal — sends
// SIGKILL to whatever is left, and then verifies with Process.Survivors
// that nothing of the tree is left, polling for up to 5 s and sending one
// more SIGKILL to what remains; survivors are reported (and make Kill
// return an error). KillResult.Escalated means SIGKILL reached some
// process of the tree, also when the leader itself died of the first
// signal; Ended counts the processes the kill ended (the tree is counted
// through Survivors before the signal). With Escalate false no SIGKILL is
// sent: the result says whether the tree ended within the grace. Kills of
// one process are serialised: the first does the work, later ones report
// AlreadyExited with the state and status it left — so two concurrent
// kills never escalate twice.
//
// Every backend call of a kill has a deadline (5 s), and the whole kill
// one more (the grace plus 15 s). A kill whose backend does not answer — a
// health check found it paused or unreachable, or one of its calls ran out
// of time or failed with env.ErrUnavailable — returns at once with
// KillResult.Unreachable (never killed) and an error matching
// ErrUnreachable, and stays pending (Info.KillPending, kept in the state
// file): it runs again when the backend's health check finds it ok (as
// SIGKILL at once when its first signal had got through and it escalates),
// and a kill_finished event carries its outcome. A process whose tree ends
// meanwhile settles its pending kill with that event too.
//
// # Sick backends
//
// A backend that does not answer slows only its own processes (health.go).
// The registry keeps each opened environment's condition (env.Condition:
// ok, paused, unreachable, gone) from a background health check
// (env.HealthChecker, bounded by env.HealthTimeout; every 5 s while ok,
// every second while not; two checks in a row that run out of time before
// an ok backend is called unreachable) and from what its own calls see
// (one that overran its deadline marks the backend unreachable for
// display and asks for a check at once). List never calls a backend but
// for ports: each process shows its backend's condition
// (Info.BackendCondition; StateText "running (docker://web paused)"), and
// with ListOptions.Ports each backend is asked once for all its listed
// trees (env.TreePortLister: one round trip on a sandbox backend), never
// when a check found it not answering, for at most 600 ms: a look that
// takes longer goes on in the background and fills a one-second cache;
// what is not known in time is Info.PortsUnknown. Pruning's removal of a
// sandbox's state runs in the background, so that no lookup or listing
// waits for it. Backends reports each condition (BackendInfo.Health), and
// a change of one wakes Changed.
//
// # Trees that outlive their leader
//
// `cmd &`, a dev server that daemonises, `compose up -d`: the leader exits
// while its descendants run on. The process's state and status are the
// leader's, and Wait returns at the leader's exit, but the process is not
// done: after the exit its monitor polls Survivors (10 ms doubling to 1 s,
// at once after a signal of ours), counts what is left in Info.Leftover,
// keeps Info.TreeRunning set, and, where output can be re-opened from an
// offset (detached processes, backends with ReplayOutput), copies what the
// leftovers write into the buffer. Until the tree is seen empty the
// process is listed by default, never pruned or evicted, Kill and KillAll
// end the leftovers (AlreadyExited, Ended), Remove refuses it and
// RemoveForce kills first; WaitTree waits for the whole tree. A restart
// keeps following a tree the checkpoint recorded as running.
//
// # Limits
//
// At most Config.MaxProcesses (256) processes are tracked. Starting one
// more prunes the finished process that ended first; if every tracked
// process is still running, Start and Run fail with ErrLimit. Finished
// processes are dropped after Config.FinishedTTL (30 min), lazily when
// looked up or listed and by a janitor goroutine; dropping a process
// removes its state in the sandbox too (Process.Remove).
//
// # Sessions
//
// A front end that starts processes for someone who may vanish (an MCP
// session, an ACP proxy) opens a session (OpenSession) and starts them
// with StartOptions.Session naming it. The session is a lease: End (a
// clean end), Drop (the front end vanished; in the daemon, its lease
// request's connection closed) and, after a restart, a reclaim that no
// front end made within Config.SessionReclaim all kill the trees of the
// session's processes still running, as Kill does; a dropped or unclaimed
// session's processes say why in Reason. A start naming a session that is
// not open is refused, under the lock the end collects the members with,
// so no process joins a session after its end. The session is recorded
// with each process in the state file; the caller's environment
// (StartOptions.Environ) goes to the backend and is kept nowhere.
//
// # Events
//
// Subscribe returns a pull-based Subscription (Next, Close). Event types
// are started, exited (every final state but failed), oom_killed,
// watch_match, watch_disabled, suppressed, kill_finished (a pending kill
// ran; exempt from the rate limit, as the answer to a kill), and for dev
// servers ready, crashed and ttl_expired; runaway for a process past its
// runaway thresholds.
//
// Runaway (runaway.go): a process whose tree uses at least
// RunawayOptions.CPUPercent of a core in every sample for For with no
// output, or whose RSS grew by Memory within For, gets one runaway event
// whose Summary says what was seen ("a1b2 used 98% of a core for 2m0s
// with no output"), and Info.Runaway until the condition clears, which
// re-arms the event. The thresholds are StartOptions.Runaway, else
// Config.Runaway; they are judged from the stats sampler's samples, so a
// backend that cannot measure its trees has no runaways, and nothing is
// killed. The event is rate-limited like a watch match.
//
// A process whose backend reports it OOM-killed (env.ExitStatus.OOMKilled:
// the kernel's OOM killer ended it, see the backends' docs for where they
// can tell) is exited with Info.Reason "out of memory" (ReasonOutOfMemory),
// and an oom_killed event, with Status and Tail, comes just before its
// exited event; like crashed, it is exempt from the global rate limit.
// When a kill of ours had signalled the process, it is killed, and its
// status does not claim an OOM kill: the backend can only tell that one
// happened in the cgroup.
//
// Watch patterns (StartOptions.Watch substrings, WatchRegex Go regular
// expressions) are matched against complete output lines after ANSI
// stripping, with lines and escape sequences split across reads
// reassembled; a final unterminated line is matched at exit. Per process,
// at most one watch_match is published per 10 s window: the first match
// opens the window, later matches in it are held back. When matches were
// held back in 3 consecutive windows (a window opening within 10 s of the
// end of the previous one continues the run), watching stops with one
// watch_disabled event, and the process's exited event is marked Notify
// even if StartOptions.Notify was false.
//
// Across all processes at most 15 events are published per sliding 10 s
// window; the 16th starts a 30 s cooldown during which every event is held
// back and counted, and which ends with one suppressed event carrying the
// counts by type. This breaker is for floods (watch matches, starts and exits nobody asked
// about): an exited event with Notify is exempt — never held back, never
// counted — since there is at most one per process and it is the one event
// its caller needs. It carries Event.Tail, the last lines of the output
// (ANSI-stripped, at most MaxEventTail bytes, cut at a line start, or at a
// character boundary when the last line alone is longer).
//
// An exited event is published for every exit, with Notify saying whether
// the caller asked to be told. A completion is not repeated to whoever has
// it: an exited event is not delivered once a caller received that
// process's final result through Wait, Poll or Run (Event.Consumed). The
// check is made at delivery, not at publication, because finish publishes
// the event right after the end while a caller may consume the result a
// moment later: Subscription.Next makes it, and front ends that keep events
// to serve later (the daemon's history) make it again when they serve them.
// A Wait or Run blocked on the process when it ends counts as having
// received the result before the event is published, so it is never
// delivered beside their answer; a Wait or Poll that arrives after a
// subscriber already took the event cannot undo that delivery.
// Subscriptions are bounded (Config.SubscriptionBuffer, 1024): a slow
// subscriber loses the oldest events, counted in Event.Dropped and
// Subscription.Dropped, and never blocks the registry.
package registry
