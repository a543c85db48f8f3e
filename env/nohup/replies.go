package nohup

import (
	"fmt"
	"strings"

	"github.com/corralhq/corral/env"
)

// The scripts (sh/*.sh) answer with words. A word a script prints that Go
// does not know turns into an error nobody can act on, so every refusal
// word is declared here, once, with what it means; TestReplyWordsDeclared
// scans the scripts for words starting with "no" (the scripts' convention
// for a refusal) and fails on one that is not.

// wordNone is a probe's answer when the sandbox has no tool for the job:
// corral_ptyprobe (sh/pty.sh, "none WHY") and corral_checkurl (sh/ports.sh).
const wordNone = "none"

// launchRefusal is a word corral_launch (sh/launch.sh) prints instead of
// its "ok" line when it did not start the command.
type launchRefusal struct {
	// spareKept: the launcher refused before it touched the process
	// directory, so an armed spare stays armed for the next start.
	spareKept bool
	// err says what went wrong and what to do; detail is the rest of the
	// launcher's line.
	err func(e *Env, spec env.Spec, detail string) error
}

// launchRefusals are every word corral_launch refuses a start with.
var launchRefusals = map[string]launchRefusal{
	"nodir": {spareKept: true, err: func(e *Env, spec env.Spec, _ string) error {
		return &env.SpecError{Field: "Dir", Value: spec.Dir, Reason: "no such directory in the sandbox; create it first", Err: env.ErrDirNotFound}
	}},
	"nosetsid": {spareKept: true, err: func(e *Env, _ env.Spec, _ string) error {
		return fmt.Errorf("nohup %s: start: the sandbox has no setsid; install util-linux or busybox in it: %w", e.opts.Name, env.ErrUnsupported)
	}},
	"noshell": {spareKept: true, err: func(e *Env, _ env.Spec, _ string) error {
		return fmt.Errorf("nohup %s: start: shell %s not found in the sandbox; install it there: %w", e.opts.Name, e.opts.Shell, env.ErrUnsupported)
	}},
	"nostate": {err: func(e *Env, _ env.Spec, _ string) error {
		return fmt.Errorf("nohup %s: start: cannot create or write a process directory under %s in the sandbox: make it writable with free space, or choose another base directory", e.opts.Name, e.opts.BaseDir)
	}},
	"nofifo": {err: func(e *Env, _ env.Spec, _ string) error {
		return fmt.Errorf("nohup %s: start: cannot make the stdin FIFO under %s in the sandbox (mkfifo failed): choose a base directory on a filesystem with FIFOs, or start without stdin", e.opts.Name, e.opts.BaseDir)
	}},
	"nolimits": {err: func(e *Env, spec env.Spec, detail string) error {
		var names []string
		if spec.Limits != nil {
			names = spec.Limits.Names()
		}
		return &env.LimitError{Backend: e.opts.Name, Limits: names, Reason: "the limit cgroup could not be made in the sandbox (" + clipDetail(detail) + "); start without the limit, or fix the cgroup's permissions"}
	}},
	"nostart": {err: func(e *Env, _ env.Spec, detail string) error {
		if why, ok := wrapperRefusals[detail]; ok {
			return fmt.Errorf("nohup %s: start: %s", e.opts.Name, why)
		}
		return fmt.Errorf("nohup %s: start: the wrapper did not start (it said %q); its errors are in wrapper.err of the process directory under %s in the sandbox", e.opts.Name, detail, e.opts.BaseDir)
	}},
}

// wrapperRefusals are the words the wrapper (sh/parent.sh) reports on the
// launcher's pipe instead of its "ok" line; corral_launch passes them on
// after "nostart".
var wrapperRefusals = map[string]string{
	"nocommand": "the command's shell never reported that it runs (its parent died, or it did not start within seconds): the sandbox may be out of processes or memory; free some and start again",
}

// launchRefused returns the refusal a launcher's reply line holds, if it
// is one.
func launchRefused(line string) (r launchRefusal, detail string, ok bool) {
	word, detail, _ := strings.Cut(line, " ")
	r, ok = launchRefusals[word]
	return r, detail, ok
}
