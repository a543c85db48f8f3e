// Package acpterm serves the terminal methods of the Agent Client Protocol
// (ACP) from corral's process service, on any backend.
//
// ACP lets an editor host a coding agent; the agent asks the editor (the
// ACP "client") to run commands through terminal/create, terminal/output,
// terminal/wait_for_exit, terminal/kill and terminal/release. Editors that
// implement those methods run the command on their own machine, signal only
// the direct child and lose whatever it left running. [Terminals] answers
// them with corral processes instead: on local, docker, ssh or a plugin
// backend, killed as a whole tree (TERM, grace, KILL, verified), listed by
// corral ps and labelled with the ACP session.
//
// Two ways in:
//   - A Go ACP client embeds *[Terminals] in the type it hands to
//     acp.NewClientSideConnection: the five terminal methods of the SDK's
//     acp.Client interface are then corral's, and the client writes only
//     the rest (files, permissions, session updates).
//   - [Proxy] sits between an editor and any ACP agent (corral acp): it
//     relays every message unchanged, except that it advertises the
//     terminal capability in initialize and answers the agent's terminal/*
//     requests itself.
//
// How the terminal methods map onto corral:
//   - command and args: with args, the command is run as that program with
//     exactly those arguments (each quoted for the sandbox's shell, so no
//     argument is re-parsed); without args, command is a shell command line,
//     as editors that wrap terminals in a shell (and agents that send a
//     whole command line) expect.
//   - outputByteLimit: terminal/output returns the end of the output, at
//     most that many bytes, cut only at a UTF-8 character boundary, with
//     truncated set when anything before it was left out. The registry
//     keeps each process's output as a head and a rolling tail; the
//     terminal reads only the tail, so what it returns is always a
//     contiguous end of the output. A limit larger than the registry's tail
//     (1 MiB − 64 KiB by default) returns at most that tail, truncated.
//     Without a limit, the whole tail is returned, truncated when the
//     registry dropped the middle of a long output.
//   - exitStatus and wait_for_exit: exitCode, or signal as its name
//     ("SIGKILL"), the other left out. A process whose sandbox vanished
//     (lost) reports an exit status with neither.
//   - kill ends the whole tree and verifies it; the terminal stays readable.
//   - release kills the tree if anything of it still runs, removes the
//     process from the registry and forgets the terminal ID: later calls
//     with it fail with "unknown terminal".
//
// Every terminal of a Terminals lives under one session lease
// (registry.Service.OpenSession), opened by the first terminal/create and
// ended by Close. Through the daemon the lease is a long-lived request on
// the socket: a proxy that dies without Close (killed with SIGKILL) has its
// terminals killed by the daemon when the lease drops.
package acpterm
