// Package nohup wraps each sandbox command with pid, exit and log files and follows them (no nohup(1)).
//
// It is the wrapped-process engine shared by every sandbox backend: given a
// Transport that runs short sh scripts inside the sandbox, it implements
// env.Environment by running each command as the leader of a new session
// (setsid) with pid, log and exit files in a private directory, following
// them by byte offset (a long-lived call per reader that sends the log as
// it grows and the exit as soon as it is seen; polling where no such call
// fits), and signalling the process tree inside the sandbox. It
// does not use nohup(1); see "Why no nohup(1)" below.
//
// # Inside the sandbox
//
// Each process gets BaseDir/<32 hex digits> (mode 0700, BaseDir defaults to
// /tmp/.corral-$UID) holding:
//
//	log       merged stdout and stderr, appended by the whole tree
//	pid       "PID START" of the command (START: /proc/PID/stat field 22)
//	wrapper   "PID START" of the wrapper that writes exit
//	exit      "code N" or "signal N", with " oom" after it when the OOM
//	          killer ended the command, written in one write (see state in
//	          sh/state.sh)
//	oom       "COUNT FILE": the count of OOM kills in the command's memory
//	          cgroup when it started, and the file it was read from (see
//	          Out of memory)
//	cg        the process's limit cgroups, one a line, while they exist
//	          (Spec.Limits; see Per-process limits)
//	in        stdin FIFO (Spec.Stdin), kept open by a holder process
//	holder    "PID START" of that holder; stdin-closed marks CloseStdin
//	parent    "PID START" of the stopped parent (see below)
//	spec      the command line, directory and environment, as quoted sh
//	          assignments sourced by the command's shell, so that they never
//	          show in the argv of the long-lived wrapper and parent; its first
//	          line starts with stag='Spec.Tag', which Tagged (env.TagFinder,
//	          sh/tagged.sh) matches to find a process without its Ref
//	armed, go, run, armfail
//	          an armed spare's report and FIFOs (see Armed spares)
//	tty       the path of the process's terminal (Spec.PTY; see Terminals)
//	command   a command longer than env.InlineCommandMax (see Long commands)
//	omitted   "START END": the range of log dropped to bound it (see Log bound)
//	nopunch   the sandbox cannot punch holes: the whole log is kept
//
// The command runs as Shell -c Command (Shell defaults to /bin/sh) as the
// leader of a new session, with CORRAL_TREE=<random hex> added to its
// environment; descendants inherit it, which is how escapees are found. Its
// umask is the sandbox shell's: the directory's mode protects the files.
//
// Three processes cooperate (see sh/parent.sh for the details):
//
//   - the parent, a shell started as a new session leader, forks the other
//     two, waits for the command, and is stopped with SIGSTOP meanwhile,
//     so it cannot reap it;
//   - the wrapper (a subshell of the parent) stops the parent, reports the
//     command's identity, watches the command and writes exit;
//   - the command (a subshell of the parent) first waits (the "gate") until
//     the parent is stopped and then execs setsid and Shell -c Command.
//
// Exit status. A shell reports both "exit 143" and "killed by SIGTERM" as
// $? = 143, so no shell-level wrapper can tell them apart. The kernel does:
// a zombie's /proc/PID/stat field 52 holds its wait status. Because the
// command's parent is stopped, the command stays a zombie after it ends;
// the wrapper reads field 52 (Linux 3.5+), writes exit, and resumes the
// parent, which reaps it. Every poll (Start's wait, Wait, Output, Remove)
// does the same the moment it finds the zombie, so exit detection does not
// wait for the wrapper, which looks with only builtins between sleeps of
// 5ms growing to 100ms (it only matters when nobody polls).
//
// Why no nohup(1). nohup sets SIGHUP to ignored, and a POSIX shell cannot
// reset a signal ignored on entry, so the command could never be killed by
// Signal(HUP). The new session already has no controlling terminal, so no
// terminal hangup reaches it. Likewise nothing is started with `&` on the
// way to the command (an asynchronous list inherits SIGINT and SIGQUIT
// ignored): `setsid -f X` (util-linux) or `setsid setsid X` (busybox)
// starts the parent in the background with default signal dispositions.
// setsid is required; a sandbox without it gets an error matching
// env.ErrUnsupported.
//
// # Out of memory
//
// The OOM killer's SIGKILL looks like any other, but the kernel counts its
// kills per memory cgroup: oom_kill in memory.events (cgroup v2; the
// nearest cgroup with the memory controller, from the sandbox shell's
// upwards) or in memory.oom_control (the v1 memory hierarchy). The start
// records that count in the file oom just before the command runs (the
// file is looked up once per shell, in sh/oom.sh: in a container, whose
// /proc/self/cgroup names host paths, a path that is not under the mount
// means the mount's root is the container's own cgroup), and whoever
// writes exit for a command that ended by SIGKILL, or with the 137 its
// shell reports for a child's SIGKILL, reads the count again: when it
// rose, the line ends in " oom" and Wait's status has OOMKilled set. An
// OOM kill before the start is never blamed on the command. The cgroup is
// the sandbox's (a container's, an ssh session's), shared by its
// processes: a SIGKILL from outside corral, at a time another process of
// the same cgroup was OOM-killed, reads the same. Where no count is
// readable (no cgroup file system mounted at /sys/fs/cgroup, a v1 kernel
// older than 4.13 without oom_kill, no memory controller) nothing is
// recorded and OOMKilled is never set.
//
// # Per-process limits
//
// Spec.Limits is enforced where ProbeLimits (called by env/ssh as it
// opens) found a cgroup the sandbox's user may write with the memory, cpu
// and pids controllers (sh/cgroup.sh): in cgroup v1, corral-sh/ID under
// the shell's own cgroup of each of the three hierarchies; in cgroup v2,
// corral-sh/ID under the nearest cgroup above the shell's own that hands
// the three down and that the user may write (a delegated subtree, or
// root's). The launch makes the cgroups and writes the limits (memory,
// with swap where the kernel accounts it, so that going over is an OOM
// kill, never swapping or throttling alone; the CPU quota per 100 ms;
// pids.max) and lists them in cg; the command's own shell joins them just
// before it execs (sh/cgjoin.sh), so the command and all it forks are in
// them, and the file oom counts the limit's OOM kills. The tree's
// cgroup is also part of the tree (see tree in sh/state.sh): a process
// that left the session and cleared its environment is still signalled
// and listed by Survivors. The cgroups are removed by the wrapper once the
// command was reaped, else, when something of the tree outlived it, by the
// first look at Survivors that finds nothing left, or by the removal of the
// process. Without a probe, or where it found none (a container's
// read-only cgroup mount, a user without a delegated cgroup), a Spec with
// limits is refused with env.ErrUnsupported and the probe's reason
// (Capabilities.LimitsNote).
//
// # Calls, resident shells and armed spares
//
// Every script but Write's is a call of a function of one library (lib in
// scripts.go, assembled from the files in sh/, whose comments are stripped
// before it is sent; make shell-check lints them). When the Transport is
// also a ShellTransport (env/ssh: a session; env/docker: an exec with stdin
// attached; nohuptest.Local with Resident; any plugin transport that can
// open one), the engine keeps up to Options.Residents resident shells that
// loaded the library once (resident.go: the framing, the nonce, the pool,
// the fallback), so a call is one request on a stream that is already open;
// otherwise, and when no shell can be opened, it runs the library and the
// call as one script through Exec. A call that finds every resident busy
// waits up to a second for one to come free before it falls back to Exec:
// a burst of calls (a restarted supervisor attaching a hundred processes)
// is served sooner queued on the residents than by as many Execs.
//
// Forks and execs are what a start costs inside the sandbox (about a
// millisecond each on a small VM), so with resident shells a start leaves
// the next ones ready: once a start's reply is out, the shell arms spares
// (corral_arm in sh/spares.sh; two are kept, so that back-to-back starts
// find one ready): it starts a later process's parent, wrapper and command,
// which wait, asleep, on FIFOs; the next start then only writes spec and
// one word, and its command execs Shell -c Command straight away. Arming
// starts with an engine's second start (a one-shot engine, such as one
// `corral run`, would pay for a spare it never uses). Without resident
// shells there are no spares: a call must not leave a process behind that
// could outlive Close. An armed spare is three processes asleep on FIFOs
// until a start uses it, and it never outlives what armed it:
//
//   - the engine's Close removes its spares, and those of starts that
//     failed without saying whether they used theirs (the next start that
//     arms removes those too); a start the launcher refused before it
//     touched its spare (no such directory, no setsid) gives the spare to
//     the next start;
//   - a spare is tied to the resident shell that armed it (the file armer
//     holds that shell's PID and start time). A resident shell that reads
//     end of file (its engine closed it, or the session, exec or
//     connection carrying it went away: an ssh outage, a supervisor
//     killed) or is hung up removes the spares it armed before it exits
//     (see resident.go);
//   - a shell killed outright removes nothing: the first start of every
//     engine, then one an hour, sweeps the spares whose armer is gone,
//     whoever armed them, and leaves those of live shells (another
//     engine's, on the same sandbox) alone. Spares without armer (armed by
//     an older engine) are swept once older than Options.Retention.
//
// # Long commands
//
// A command longer than env.InlineCommandMax would fail in argv (E2BIG)
// and cost a resident shell a system call per byte. Start brings it in
// first, on the stdin of one Exec of sh/put.sh, into a new process
// directory (never an armed spare's), then runs the spec's command as
// `. DIR/command`: the same $0, no arguments, the same stdin. A start that
// fails afterwards removes that directory.
//
// # Log bound
//
// Options.LogMax bounds each log (env.LogKeep). A reader that has every
// byte before an offset says so: a follow once it sent a frame, a poll by
// the offset it asks for. Then logtrim (sh/state.sh) punches out the log
// from the head's end to the tail before that offset, a MiB or more at a
// time, with `fallocate -p` (util-linux), after recording the range in
// omitted. busybox's fallocate cannot punch: such a sandbox keeps whole
// logs (nopunch), as does a filesystem without holes.
//
// # Signals and survivors
//
// Signal first checks the command's identity (PID and start time), then
// sends `kill -SIG -PGID` while the command still runs, then signals every
// live process whose /proc/PID/environ holds the tree's CORRAL_TREE value
// (setsid children, double-forked daemons). After the command exited the
// group is no longer signalled (its number could be reused), only tagged
// processes, and Signal returns env.ErrExited. Survivors lists the group
// members (while the command runs) and the tagged processes, zombies
// excluded. A process that clears its environment (env -i) and leaves the
// group escapes: TreeKill is "pgroup+scan".
//
// # Output and polling
//
// One poll is one round trip: it reports the state (looked at before the
// log size, so a reader that reached that size after seeing the end is
// done), the log size, and at most Options.ChunkSize new bytes from the
// reader's offset (readlog in sh/state.sh), so only new bytes cross the
// transport. The stream ends at the size seen after exit appeared: there
// is no grace for escaped descendants, whose later output a new Output
// from that offset still returns. Output may be opened any number of times
// from any offset.
//
// Round trips are what a run costs (a docker exec is tens of ms, a new ssh
// session a few ms, a resident shell's request well under one), so:
//
//   - Start waits up to Options.StartWait (50ms) inside the sandbox for the
//     command to end and brings back its state and first chunk of output
//     with its identity. A short command costs one round trip: Wait and
//     the first Output use that report. Later Outputs poll, so a replay
//     sees what escapees wrote since.
//   - Output and Wait follow a running process (see follow.go and
//     corral_follow in sh/poll.sh): one call that stays open and sends
//     frames, the log bytes as the log grows (one dd, 64 KiB writes: a log
//     streams at cat's speed) and the exit as soon as it is seen. Between
//     looks the script sleeps 5ms growing to 20ms, then 50ms after 1s of
//     quiet, 200ms after 5s and 500ms after 30s (sleep(1) with fractions:
//     dash, bash and busybox have them), at two forks (sleep, wc) per
//     look: an exit of a young process is seen within ~20ms, an idle
//     server costs two looks a second, and nothing crosses the transport
//     while nothing happens. After Options.FollowIdle (30s) without output
//     a follow ends and the reader opens the next, told how long the
//     process has been quiet, so an idle one gives its session back now
//     and then without starting its pace over.
//     A follow whose call was cut before it ended is killed inside the
//     sandbox (corral_unfollow): docker keeps an exec running after its
//     client left.
//   - Follows hold a transport session each, so at most
//     Options.MaxLongPolls (4; docker sets 64) run at once per Env. The
//     other readers, and a reader whose follow broke (for a second, while
//     it resyncs from its offset), poll: a long poll that waits inside
//     the sandbox in sleeps of 5ms growing to 50ms until the command
//     ended, the log grew past the reader's offset, or Options.LongPoll
//     (1s) passed, or, with no slot free, one look paced by Poll (Min,
//     growing by Factor to Max; new output and Signal reset it), as are
//     all polls when LongPoll < 0.
//
// # Stats
//
// Env.TreeStats (stats.go, sh/stats.sh) implements env.TreeStatter: one
// call (corral_treestats) finds every tree as TreeListeners does and sums
// each member's /proc/PID/stat CPU times, VmRSS and io bytes with shell
// builtins, one line per tree; Go decodes it. An unreadable io file (another
// user's process) marks the tree's io Missing.
//
// # Ports
//
// Process.Listeners, Env.Listeners, Env.TreeListeners, Process.WaitListening
// and Env.CheckURL (ports.go, sh/ports.sh) implement env.PortLister,
// env.TreePortLister, env.PortWaiter and env.URLChecker. TreeListeners
// answers for many trees in one call (corral_treelisteners): one pass over
// /proc for the groups, one grep for the tags, one grep per network
// namespace for the rows and one stat for the descriptors, whatever the
// number of trees, and no command lines. The shell only gathers: the LISTEN rows of
// /proc/PID/net/tcp and tcp6 in the tree's network namespace, raw, and
// which socket inodes the tree's processes hold (stat -L on
// /proc/PID/fd/*, whose names come from the glob, so no file name can pass
// for a socket); Go decodes addresses and ports. The tree is Signal's
// (group and tag). A port wait is one call held like a follow (a long-poll
// slot, ended by corral_unfollow when cut) that greps for a LISTEN row of
// a wanted port every 10ms (20ms after 5s, 50ms after 30s, 200ms after
// 2min) and asks who holds it only once the row is there; it ends after
// FollowIdle and the next one opens. Without a slot, WaitListening polls
// Listeners paced by Poll. CheckURL runs the first of curl, GNU wget,
// busybox wget and python3 in the sandbox; with none it fails with
// ErrUnsupported and Capabilities.CheckURL turns false.
//
// # Health
//
// Env.Health implements env.HealthChecker: the transport's own check when
// it implements env.HealthChecker (docker asks the engine about the
// container, ssh sends a keepalive), else one trivial call into the
// sandbox within the caller's deadline.
//
// # Errors
//
// Transport errors matching env.ErrUnavailable are retried with backoff
// inside Wait, Output, Survivors and Attach; other calls (Start, Write,
// Signal, CloseStdin, Remove) are not idempotent and return them. Errors
// matching env.ErrSandboxGone are returned as they are. A wrapper that is
// gone without an exit file (the sandbox restarted, someone killed it) makes
// Wait return a "lost" error matching env.ErrNotFound; a missing state
// directory is env.ErrNotFound too. Noticing a lost process also resumes
// its stopped parent, so the command is reaped when it ends.
//
// # Terminals
//
// With Spec.PTY the command is run by util-linux script, or else python3
// running sh/pty.py, found once per Env (see pty.go and sh/pty.sh): script
// (python3) is the recorded command, and runs
// Shell -c Command on a pseudo-terminal of its own, with the FIFO as its
// input (also without Spec.Stdin: nobody writes to it then) and the log as
// its output. Resize sets the window size on the terminal's path; the
// kernel sends SIGWINCH to the terminal's foreground group. Exit codes are
// the command's; with script, a command killed by a signal other than one
// that ends script itself (KILL, HUP) shows as exit code 128+N (pty.py
// reports the signal). A sandbox with neither (busybox's script applet has
// no -e) makes Start with a PTY fail with an error matching
// env.ErrUnsupported, and Capabilities turn PTY off.
//
// # Re-attach, removal, retention
//
// Attach reads the process's state (one round trip), and concurrent
// Attach calls share theirs: the first reads its own, the ones that queued
// meanwhile are read together in one corral_states call (attach.go), so
// a supervisor re-attaching a hundred processes after a restart pays a
// few round trips, not a hundred.
//
// Every process is detached inside the sandbox, so Ref always works; Close
// kills (SIGKILL, whole tree) only processes started without Spec.Detach
// whose handles were not released. Ref.Data is JSON {v, dir, pid, start,
// wpid, wstart, tag, stdin, pty}; Attach rejects unknown fields, a dir that is
// not BaseDir/<32 hex digits>, a tag that is not 32 hex digits and missing
// PIDs before anything runs. Remove deletes the directory and refuses while
// the wrapper still runs. Start also sweeps, at most once an hour per Env,
// the directories whose exit file is older than Options.Retention (default
// 24h); directories of lost processes (no exit file) are left for a person
// to inspect. Whoever records an exit (or finds a process lost) also ends
// its stdin holder, as the wrapper does, so a wrapper killed on the way
// leaves no holder asleep.
//
// # Quoting
//
// Every script is a constant; values reach it only as positional
// parameters set by a leading `set --` line of single-quoted words (see
// internal/shellquote), and from there travel as argv entries, never
// re-parsed. BaseDir and Shell additionally match a strict path pattern,
// IDs and tags are hex, PIDs are numbers and signal names pass
// env.Signal.Valid. FuzzScript checks this by running hostile values
// through the real scripts.
//
// # Limits
//
// Linux sandboxes only (/proc). The Transport type's doc states what a
// sandbox must provide (one long-lived sandbox, leftovers that outlive
// their script, a reaping PID 1). A sandbox whose PID 1 never reaps collects
// the exited wrappers and parents as zombies (docker's --init or the docker
// backend's keep-alive loop reap them). If the wrapper is killed, the
// stopped parent and the command's zombie stay until the sandbox ends.
package nohup
