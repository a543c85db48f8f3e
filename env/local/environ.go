package local

import "github.com/corralhq/corral/env/local/secrets"

// DefaultPath is the PATH of AccountEnviron (see secrets.DefaultPath).
const DefaultPath = secrets.DefaultPath

// CommandEnviron is secrets.CommandEnviron: what of environ a command of
// the local backend may see.
func CommandEnviron(environ, allow []string) []string { return secrets.CommandEnviron(environ, allow) }

// AccountEnviron is secrets.AccountEnviron: the base environment of a
// supervisor that serves other callers.
func AccountEnviron() []string { return secrets.AccountEnviron() }
