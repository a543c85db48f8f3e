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
// Spec.Detach (Linux, pipes only) runs the command under a small shim: the
// supervisor's own executable, re-executed with CORRAL_LOCAL_SHIM set, which
// the init function of this package recognises before main runs — so any
// binary importing env/local (the corral CLI, a test binary) can act as the
// shim. The shim double-starts itself so it is re-parented away from the
// supervisor, makes itself a child subreaper, and runs the command in its
// own session and cgroup, with output appended to a log file and stdin read
// from a FIFO in a private directory (mode 0700) under Options.StateDir.
// It reaps the command and every orphaned descendant and writes the exit
// status atomically as JSON. Any supervisor can then Attach with the Ref,
// read the output from any offset, and get the real status — an exit code
// and a signal are never confused, since the shim reads the raw wait status.
// Readers of the log and Wait wake on inotify events of the directory
// (falling back to adaptive polling), and at least every 500 ms, which is
// how a shim that died without recording the exit is noticed: Wait then
// fails with an error naming the shim instead of hanging. A detached
// stream ends once the exit is recorded and the log read to its end;
// output descendants append later is in the log for the next Output.
//
// The shim is not in the command's cgroup or process group, so a tree kill
// never ends it; it stays in the supervisor's cgroup (a service manager
// that kills the supervisor's whole cgroup ends detached processes too).
// A Ref is validated strictly on Attach: its directory must be exactly
// <StateDir>/<id>, and the recorded PID and start time must match.
//
// The process directory holds: shim.json (what to run), state.json (PIDs,
// start times, cgroup, tag), log, exit, stdin (FIFO), stdin.closed (the
// marker that asks the shim to close its end of the FIFO) and shim.log (the
// shim's own diagnostics). Directories are kept until Process.Remove; a
// caller that never removes them owns their cleanup.
//
// PTY with Detach is unsupported (Capabilities.ReattachPTY is false).
//
// # Stdin on a terminal
//
// A terminal has no half-close: CloseStdin on a PTY writes the terminal's
// EOF character (^D), which a reader in canonical mode sees as end of
// input at the start of a line; a program that put the terminal in raw
// mode just reads the byte. Without Spec.Stdin the terminal is still the
// command's stdin (so isatty and stty work), but Write refuses.
//
// # Other systems
//
// darwin: process groups only (TreeKill "pgroup"), no Detach. windows: a Job
// Object per process (TreeKill "job-object"), no PTY, no Detach; the command
// runs under the sh found in PATH.
package local
