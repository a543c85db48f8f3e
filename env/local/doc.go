// Package local is the Environment for the supervisor's own machine.
//
// Every command runs as /bin/sh -c COMMAND, leader of a new session and
// process group, with stdout and stderr merged into one pipe (the same file
// descriptor, so their interleaving is exact) or a pseudo-terminal.
//
// # Ending a process tree
//
// On Linux, where a writable cgroup v2 hierarchy offering cgroup.kill is
// found (via /proc/self/mountinfo and /proc/self/cgroup), every process is
// started directly in a cgroup of its own, created under
// <supervisor's cgroup>/corral/. SIGKILL is one write to cgroup.kill, which
// ends everything in the cgroup atomically — setsid escapees and
// double-forked daemons included; other signals go to every PID in
// cgroup.procs. Capabilities.TreeKill is then "cgroup".
//
// Without usable cgroups (or with Options.DisableCgroup) the mechanism is
// "pgroup+scan": kill(-pgid) plus a scan of /proc for processes whose
// environment carries the tree's unique tag variable CORRAL_TREE_<id>,
// which descendants inherit whatever session or group they move to. A
// process that both leaves the group and wipes its environment escapes this
// mechanism; that is the documented limit.
//
// A PID is never signalled on trust. The supervisor holds the leader's
// exit unreaped (waitid WNOWAIT) while it decides to signal, so the leader's
// PID and process group cannot be reused under it; every other PID is
// opened as a pidfd, re-checked (cgroup membership or tag) through /proc,
// and signalled through the pidfd. A re-attached process is identified by
// the start time (field 22 of /proc/PID/stat) recorded when it started;
// for it, kill(-pgid) in pgroup+scan mode follows that check, and the
// microseconds between the two are the one window left (a whole group
// dying and its number being reused for a new group in that instant).
//
// Signal after the leader exited returns env.ErrExited, and still delivers
// the signal to what is left of the tree (descendants that outlived the
// leader), so a caller cleaning up can reach them.
//
// # Output
//
// A process started without Detach has a live output stream
// (Capabilities.ReplayOutput is false): Output may be opened once, offset
// bytes are skipped. Output is buffered up to 256 KiB ahead of the reader;
// beyond that the process blocks on write, as it would on a pipe. When the
// process exits, output still arriving from descendants holding the pipe or
// terminal is collected for OutputGrace (1 s, at most 8 MiB) and the
// stream then ends, so a background grandchild never makes a reader hang.
// What the process itself wrote is never cut off by the grace: whatever
// the pipe or terminal holds when the grace ends is still delivered.
//
// Env.Close kills every non-detached process — also those whose handle
// was released, which nothing else could stop — and returns once their
// trees are gone (bounded at 10 s).
//
// # Detached processes
//
// Spec.Detach (Linux) runs the command under the shim server of the state
// directory (Options.StateDir): one long-lived process per directory, not
// one per command, because each Go exec costs milliseconds and a detached
// start must cost about what a plain one does. The server is the
// supervisor's own executable, re-executed with CORRAL_LOCAL_SHIM set,
// which the init function of this package recognises before main runs —
// so any binary importing env/local (the corral CLI, a test binary) can
// act as the server. An Env starts it on the first detached start that
// finds none answering: it double-starts so it is re-parented away from
// the supervisor, runs in a session of its own and makes itself a child
// subreaper. Supervisors start servers one at a time (flock on
// shim-v1.start) and the server holds shim-v1.lock for its whole life, so
// two Envs never start two servers and a stale socket (of a server that
// died) is replaced only by the lock's holder.
//
// The server listens on shim-v1.sock in the state directory, or, where
// that path does not fit sockaddr_un (108 bytes), on an abstract socket
// named after the uid and a hash of the directory; both ends check the
// other's uid with SO_PEERCRED. The protocol version is part of these
// names and of the greeting: a server of another version is left alone
// to finish its own processes (their files work for Attach whatever the
// version) and new starts go to a server of ours. Messages are JSON
// lines; an Env keeps its connections open (which keeps the server) and
// Close lets go. A start is one request: the server forks /bin/sh -c in
// a new session, in the process's cgroup (CLONE_INTO_CGROUP) or with its
// tree tag, writes state.json and answers. Every command starts with
// default signal dispositions and the signal mask the server was started
// with: the server catches HUP, INT and PIPE (a caught signal is reset on
// exec) and never ignores one a command would inherit.
//
// One reaper (woken by SIGCHLD) reaps leaders and every orphan re-parented
// to the server. Starters hold a read lock from the fork until state.json
// is written, the reaper the write lock, so a command that exits at once
// is known, its start time readable, and its state recorded before its
// exit. The exit is appended to state.json as its second line, the same
// JSON as the exit file of earlier versions, from the raw wait status, so
// an exit code and a signal are never confused: an append allocates no
// inode, and creating a file on a busy ext4 directory can cost a
// millisecond. The server leaves once it has no child and no client.
//
// Exit detection and output stay file based, so any supervisor can Attach
// with the Ref, read the output from any offset and get the real status:
// Wait and log readers wake on inotify events of the process directory
// (one inotify instance per Env; falling back to adaptive polling) — the
// path from the exit to Wait returning has no sleep — and at least every
// 500 ms, which is how a server that died without recording the exit is
// noticed: Wait then fails with an error naming the shim instead of
// hanging, and the next start starts a new server. A detached stream ends
// once the exit is recorded and the log read to its end; output
// descendants append later is in the log for the next Output.
//
// The server is not in any command's cgroup or process group, so a tree
// kill never ends it; it stays in the cgroup of the supervisor that
// started it (a service manager that kills that cgroup ends detached
// processes too). A Ref is validated strictly on Attach: its directory
// must be exactly <StateDir>/<id>, and the recorded PID and start time
// must match.
//
// Env.Tagged (env.TagFinder) finds a detached process by the Spec.Tag
// its state.json records, for a supervisor that died during Start; a
// directory that has no state.json yet and is younger than 2 s is a start
// the server may still be making, and is waited for that long.
//
// The process directory holds: state.json (PIDs, start times, cgroup,
// tag; then the exit status), log, stdin (FIFO), stdin.closed (the marker
// that asks the server to let go of its end of the FIFO), shim.log (the
// server's diagnostics about the process), command (a command longer than
// env.InlineCommandMax, which the shell sources: `sh -c '. DIR/command'`)
// and omitted (see below).
//
// # Long commands and the log's bound
//
// A command longer than env.InlineCommandMax never goes through argv:
// detached, it is written to the process's directory first; otherwise it
// reaches the shell on a memory file (memfd) on descriptor 3, run as
// `. /dev/fd/3`, whose first line closes descriptor 3 again.
//
// A detached process's log is bounded by Options.LogMax (env.LogKeep): the
// output stream that reads it punches a hole (FALLOC_FL_PUNCH_HOLE) over
// what it has read, from the end of the head to logTail bytes before its
// position, a MiB or more at a time, after writing the range to omitted.
// The file's size and offsets stay; another reader of the same log reads
// zeros in the range. A filesystem that cannot punch keeps the whole log. The state directory also
// holds shim-v1.sock, shim-v1.lock, shim-v1.start and shim-v1.log (the
// server's own log). Directories are kept until Process.Remove; a caller
// that never removes them owns their cleanup.
//
// Detached PTY processes (Capabilities.ReattachPTY): the server allocates
// the terminal and holds its master, copies its output into the log
// (before recording the exit it reads the master until it is empty, so
// what the leader wrote is in the log), forwards what arrives in the
// stdin FIFO into it (CloseStdin types ^D once every writer let go) and
// resizes it on request from any supervisor. Resize returns env.ErrExited
// once the exit is recorded, and errLost (naming the shim) when the server
// is gone, since the terminal went with it.
//
// # Environment
//
// A command's environment is the caller's when the Spec carries one
// (Spec.Environ, as given), else the Env's base (Options.Environ, default
// os.Environ(), minus variables that look like credentials unless
// Options.AllowEnv names them); then Spec.Env on top, one entry per name,
// the last value winning (the shim starts commands with ForkExec, which
// would pass duplicates on). The shim's variable is never passed on. A
// supervisor that serves other callers (the daemon) sets Options.Environ to
// secrets.AccountEnviron, so that a caller that sends no environment gets the
// account's minimal one, never the supervisor's own.
//
// # Stdin on a terminal
//
// A terminal has no half-close: CloseStdin on a PTY writes the terminal's
// EOF character (^D), which a reader in canonical mode sees as end of
// input at the start of a line; a program that put the terminal in raw
// mode just reads the byte. Without Spec.Stdin the terminal is still the
// command's stdin (so isatty and stty work), but Write refuses.
//
// # Ports
//
// On Linux, Processes and the Env implement env.PortLister and the Env
// env.URLChecker (ports*.go). A process's listeners are the LISTEN
// sockets held by the members of its tree as survivors finds them (cgroup
// members, or process group plus tagged processes), matched through their
// /proc/PID/fd socket inodes against their network namespace's LISTEN
// sockets (internal/procnet: sock_diag netlink for the supervisor's own
// namespace, /proc/PID/net/tcp{,6} otherwise). The Env's are every LISTEN
// socket of the supervisor's namespace, with a holder where readable. There
// is no env.PortWaiter: a look is cheap enough for the registry to poll
// (BenchmarkListeners). CheckURL is a plain net/http GET from this process:
// no proxy, no redirects, no certificate check, at most 5 s.
//
// # Out of memory
//
// On Linux, Wait's status has OOMKilled set when the kernel's OOM killer
// ended the process (oom_linux.go): the count of OOM kills of the memory
// cgroup the process is charged to is taken just before the fork (by the
// supervisor, or by the shim server for a detached process) and read again
// at the exit; a process that ended by SIGKILL, or with the 137 that
// /bin/sh reports for its child's SIGKILL, while the count rose was
// OOM-killed. The record is memory.events of the nearest cgroup v2 with
// the memory controller, from the process's own cgroup upwards, else
// memory.oom_control of the supervisor's cgroup in the v1 memory
// hierarchy, both found through /proc/self/cgroup and mountinfo. corral's
// per-process cgroups get no memory controller (a cgroup that holds the
// supervisor cannot hand it down), so the record is in practice that of
// the supervisor's cgroup (a service's MemoryMax, a container's limit),
// shared by its processes: a SIGKILL from elsewhere at the time another
// of them was OOM-killed reads the same. Elsewhere OOMKilled is never set.
//
// # Input waits
//
// On Linux Env implements env.InputWatcher (Capabilities.InputWait): a
// process waits for input when a member of its tree sleeps in a read,
// poll, select or epoll wait on its terminal (in the terminal's foreground
// group) or on its stdin pipe, as /proc/PID/syscall, the polled sets in
// /proc/PID/mem and epoll's fdinfo show; the terminal's ICANON and ECHO
// give the kind. A tree in its own cgroup that has not run since the last
// look (cpu.stat's usage_usec, kept open) keeps that look's answer, for at
// most 5 s; without cgroups a look walks the leader's descendants (not the
// tag scan, which reads the whole machine). inputwait_linux.go says what
// is read and why. Limits: only each member's main thread is looked at; a
// setuid or otherwise non-dumpable program (sudo's password prompt) hides
// its system call from a supervisor without CAP_SYS_PTRACE and is not
// flagged; without cgroups, a descendant that double-forked away is not
// looked at.
//
// # Other systems
//
// darwin: process groups only (TreeKill "pgroup"), no Detach. windows: a Job
// Object per process (TreeKill "job-object"), no PTY, no Detach; the command
// runs under the sh found in PATH.
package local
