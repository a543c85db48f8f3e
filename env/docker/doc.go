// Package docker is corral's Docker backend: an env.Environment inside one
// container, reached through the Docker Engine API.
//
// Processes are run by the wrapped-process engine of env/nohup (setsid,
// pid/log/exit files followed by byte offset, tree kill by process group
// plus scan); this package brings its [Transport] — each short engine
// script is one exec (/bin/sh -c script) — and the container's lifecycle.
// Wrapping is not optional here: the Engine API has no endpoint that kills
// an exec'd process, so a process is signalled from a second exec.
//
// # Targets
//
// [Open] takes one of two targets:
//
//	docker://NAME                an existing, running container (name or ID)
//	docker-image://IMAGE?options a sandbox container created from IMAGE
//
// docker://NAME uses the container as it is; a stopped one is an error
// naming the fix (docker start NAME), and Close leaves the container
// alone.
//
// docker-image://IMAGE creates a sandbox with hardened defaults:
//
//   - an init process as PID 1 (HostConfig.Init), which reaps orphans and
//     forwards SIGTERM;
//   - every capability dropped except CHOWN, DAC_OVERRIDE, FOWNER, SETUID,
//     SETGID and KILL ([Capabilities]);
//   - no-new-privileges, so setuid binaries cannot raise privileges;
//   - pids limit 512 (a fork bomb stays inside), memory 2 GiB without
//     extra swap, 2 CPUs (at most the engine's CPU count);
//   - a 512 MiB tmpfs on /tmp (nosuid, nodev; exec is allowed because
//     builds run binaries from /tmp), which also holds corral's process
//     state (/tmp/.corral);
//   - labels dev.corral.managed=true, dev.corral.owner=OWNER,
//     dev.corral.config=HASH (image and options), dev.corral.persist and
//     dev.corral.target;
//   - unless persist=true, HostConfig.AutoRemove: the engine deletes the
//     container the moment it stops, as `docker run --rm` does, so a
//     sandbox is never left behind by a supervisor that exits.
//
// The container's main command idles in a loop any POSIX sh runs
// (busybox has no `sleep infinity`) and exits at once on SIGTERM.
//
// Options (query parameters; each at most once):
//
//	network=none|bridge   no network at all, or the default bridge (default)
//	readonly=true         read-only root filesystem (/tmp stays writable)
//	workspace=/host/path  bind mount at /workspace, the default working dir
//	user=UID[:GID]        run as this user instead of the image's
//	memory=2g cpus=2 pids=512  resource limits
//	persist=true          keep the container when the Environment is closed
//	shared=true           the user's sandbox, not the supervisor's (below)
//	name=NAME             container name (default: corral-<hash of owner,
//	                      image and options>)
//
// # Finding a sandbox again
//
// The default container name is derived from the owner and the target, so a
// supervisor that crashed and restarts with the same owner and target finds
// its sandbox (by name, then checking the managed, owner and config labels)
// and re-uses it: detached processes are re-attached with
// env.Environment.Attach. A stopped persist=true sandbox is started again
// (its processes are gone); any other one is deleted by the engine when it
// stops, and a new one is created. A container of that name that is not a
// sandbox of this owner and configuration is an error naming the fix.
//
// # Owners
//
// Every supervisor owns its sandboxes: Options.Owner is in the owner label
// and in the default name, so supervisors with different owners never
// find, use or remove each other's sandbox. The corral daemon's owner is
// derived from its state directory ([OwnerFor]): two daemons with
// different HOMEs (a CI job, a test harness beside a developer's daemon)
// each create their own sandbox for the same target, and one's shutdown
// --kill-all leaves the other's processes running; a registry that lives
// as long as one command (--no-daemon) has an owner of its own. Two
// supervisors with the same owner that open the same target share one
// sandbox, and the first to Close removes it.
//
// Sharing is explicit: with shared=true the owner is [DefaultOwner]
// (uid@hostname) whatever Options.Owner says, so every supervisor of the
// user that opens the target with shared=true uses one container, and
// Close leaves it running, since another may be using it (stopping it
// deletes it unless persist=true; docker rm -f NAME, or [Reap] with that
// owner, removes it). A shared sandbox's processes are each supervisor's
// own, but the container is everyone's: whoever removes it ends them all.
//
// [Reap] removes sandboxes left behind by crashed supervisors (an explicit
// command calls it; nothing reaps implicitly).
//
// # Close
//
// Close kills the processes started without Spec.Detach (the nohup
// engine's rule), then, for a docker-image target without persist=true,
// ends the container with everything in it, detached processes included:
// it renames the container out of the way (corral-closed-ID, so the
// target's name is free at once) and stops it with SIGTERM, which its
// main command obeys at once, taking every process of the container with
// it. Close returns once the rename is done and the signal's request has
// been sent (the engine carries it out even if the supervisor exits
// then), while the engine deletes the container (AutoRemove) — the work
// `docker run --rm` waits for — and a goroutine checks the signal's
// answer and that the container goes, removing it by force when it does
// not within 10 s. [WaitRemoved] waits for those checks and reports
// failures: a supervisor calls it before it exits, or before it verifies
// that nothing is left. A container that refused the signal by then is
// force-removed, and one whose name could not be freed is waited for
// until it is gone, before Close returns. docker:// containers and persistent sandboxes are left running.
// Close always releases the engine connection.
//
// # Out of memory
//
// A process the kernel's OOM killer ends inside the container (its memory=
// limit, or the limit of a docker:// container) is reported by the nohup
// engine: the wrapper compares the count of OOM kills in the container's
// memory cgroup (memory.oom_control on cgroup v1, memory.events on v2),
// taken when the process started, with the count at its exit, and Wait's
// status has OOMKilled set (see env/nohup, "Out of memory"). The cgroup is
// the whole container's: a kill -9 from outside corral at a time another
// process of the container was OOM-killed reads the same. When the OOM
// killer ends the container's main process, the container stops and
// docker records OOMKilled: the processes corral ran there are lost with
// an error that says the main process ran out of memory, and so is an
// Open of that docker:// container. docker-image:// sandboxes are deleted
// as they stop, so there is nothing left to ask.
//
// # Name, errors, health
//
// Name is "docker://" + the container's name for both kinds of target, so
// a Ref stays valid however the sandbox is opened again. A container that
// was removed or stopped makes every call fail with an error matching
// env.ErrSandboxGone and naming the container, for good: the Environment
// is bound to that container's ID, and a supervisor opens the target
// again to go on (the registry does so on the next call: a docker-image
// target then gets a fresh sandbox, a docker://NAME target the container
// that now has the name). Open of docker://NAME with no container of that
// name fails with one sentence saying so (env.ErrSandboxGone). An engine
// that cannot be reached gives env.ErrUnavailable, and so does a paused
// container, which refuses new execs (and freezes the resident shells and
// follows already in it until it is unpaused). The Environment's health
// check (env.HealthChecker, [Transport.Health]) is one inspect: paused
// (with `docker unpause NAME`), gone (removed, stopped) or unreachable (the
// engine does not answer in time), nothing run inside the container. An
// exec the engine starts just as the container is paused can be caught
// half-way (runc's init frozen in the container's cgroup); the engine then
// hangs on that container, inspect included, until it is thawed: the
// check reports it unreachable within its deadline. A missing image is one error naming
// the fix (build it with scripts/build-test-image.sh, or docker
// pull/import it).
//
// # Costs
//
// An exec costs three API round trips plus the runtime's work to enter the
// container (tens of milliseconds, more than the round trips), so the
// engine's calls run on resident shells (Options.Residents, default 4):
// execs with stdin attached that stay open, each a shell with the engine's
// library loaded, so a call is one request and one reply on the hijacked
// connection. A call that finds no free resident (or none can be started)
// runs as an exec of its own, as Write does. A running process's output and
// exit reach the engine on a follow: one exec per reader that streams the
// log as it grows, in 64 KiB writes of one dd, and reports the exit when it
// happens (within a step of 5 to 20 ms inside the container while the
// process is young). Each byte of a log crosses the engine once, at about
// the speed of `docker exec C cat` (BenchmarkLogRead). Up to 64 follows
// run per container; beyond them, readers poll by byte offset in chunks
// of up to 4 MiB per call.
//
// A one-shot docker-image:// sandbox (Open, one command, Close) is
// measured against `docker run --rm IMAGE true` (BenchmarkImageSandbox).
// Creating it is one create call (a missing image is known from the
// engine's answer; the engine's CPU count is asked once per engine and
// process, while the name is looked up), and its start, the engine's work
// and most of the time, is docker run's. The command then costs one exec
// more than docker run (the runtime entering the container, tens of
// milliseconds, more on a loaded machine), while Close is a rename and a
// signal, leaving the deletion that docker run --rm waits for to the
// engine.
//
// # Engine
//
// The engine is found as the docker CLI finds it: Options.Host, else
// DOCKER_HOST (with DOCKER_TLS_VERIFY / DOCKER_CERT_PATH), else the context
// named by DOCKER_CONTEXT or by currentContext in ~/.docker/config.json
// (DOCKER_CONFIG moves that directory), including a context's TLS files;
// a context's SkipTLSVerify is not honoured. The engine must speak Engine
// API 1.40 or newer (Docker 19.03+; Debian 12's docker.io 20.10 speaks
// 1.41): Open negotiates the version at once and names both versions when
// the engine is too old.
package docker
