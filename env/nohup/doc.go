// Package nohup is the wrapped-process engine shared by every sandbox
// backend: given a Transport that runs short sh scripts inside the sandbox,
// it implements env.Environment by running each command under setsid and
// nohup with pid, log and exit files in a private directory, polling them by
// byte offset, and signalling the process tree inside the sandbox.
package nohup
