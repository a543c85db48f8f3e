package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Names: StartOptions.Name gives a process a name that is unique among the
// processes whose tree still runs. Every method taking an ID takes a name
// too (lookup): a name never looks like an ID or an ID prefix, so the two
// cannot be confused.

// MaxNameLength is the longest name ValidateName accepts.
const MaxNameLength = 64

// ValidateName checks a process name: 1 to 64 characters of [a-zA-Z0-9._-],
// starting with a letter, and nothing an ID argument could be (not
// "proc_…", not 4 or more hex digits), so that a name and an ID never
// name different processes. The error matches ErrInvalidOptions.
func ValidateName(name string) error {
	bad := func(reason string) error {
		return fmt.Errorf("%w: name %q %s", ErrInvalidOptions, truncate(name, 40), reason)
	}
	if name == "" {
		return bad("is empty: give 1 to 64 letters, digits, '.', '_' or '-', starting with a letter")
	}
	if len(name) > MaxNameLength {
		return bad(fmt.Sprintf("is %d characters long: at most %d are allowed", len(name), MaxNameLength))
	}
	if c := name[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return bad("does not start with a letter")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return bad(fmt.Sprintf("contains %q: use letters, digits, '.', '_' and '-' only", c))
		}
	}
	if strings.HasPrefix(name, idPrefix) {
		return bad(`starts with "proc_", which process IDs do`)
	}
	if _, _, err := parseIDArg(name); err == nil {
		return bad("could be read as a process ID prefix (4 or more hex digits): add a letter from g to z")
	}
	return nil
}

// isNameArg reports whether arg has the form of a name (and so is not an
// ID argument).
func isNameArg(arg string) bool { return ValidateName(arg) == nil }

// envDigest is what Start compares the environment of a named process by:
// a digest rather than the variables, because the state file must not
// keep them (they may hold secrets) and a restarted registry still has to
// tell "the same dev server" from another.
func envDigest(vars []string) string {
	if len(vars) == 0 {
		return ""
	}
	h := sha256.New()
	for _, v := range vars {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sameCommand reports whether p runs what opts asks for: the same backend,
// command, directory and environment. A named Start of the same command
// returns the process already running instead of starting another. Both
// commands are as recorded (recordedCommand), whose digest tells long
// ones apart.
func (p *proc) sameCommand(opts StartOptions) bool {
	return p.backend == opts.Backend && p.opts.Command == opts.Command && p.opts.Dir == opts.Dir &&
		p.envDigest == envDigest(opts.Env)
}

// mayRun reports, without looking, whether p's tree may still run: its
// leader runs, or what it left running was not seen gone yet.
func (p *proc) mayRun() bool { return p.endedAt.Load() == 0 || p.treeLive.Load() }

// keyHolderLocked returns the tracked process with StartOptions.Key key
// that did not fail, nil when none does or key is empty. The caller holds
// r.mu.
func (r *Registry) keyHolderLocked(key string) *proc {
	if key == "" {
		return nil
	}
	for _, q := range r.procs {
		if q.opts.Key == key && !q.failed.Load() {
			return q
		}
	}
	return nil
}

// nameHolderLocked returns the process whose tree may still run and that
// holds name, nil when none does. The caller holds r.mu.
func (r *Registry) nameHolderLocked(name string) *proc {
	for _, q := range r.procs {
		if q.opts.Name == name && q.mayRun() {
			return q
		}
	}
	return nil
}

// byNameLocked returns the process name names: the one whose tree runs, or
// else the newest tracked process that had that name. The caller holds
// r.mu.
func (r *Registry) byNameLocked(name string) *proc {
	if p := r.nameHolderLocked(name); p != nil {
		return p
	}
	var newest *proc
	for _, q := range r.procs {
		if q.opts.Name == name && (newest == nil || q.admitted > newest.admitted) {
			newest = q
		}
	}
	return newest
}

// nameInUse is the error for a name held by another command.
func nameInUse(name string, holder Info) error {
	return fmt.Errorf("%w: name %s is held by %s (%s, %s): kill it first, or replace it",
		ErrNameInUse, name, holder.ID, clip(holder.Command, 200), runningWords(holder))
}
