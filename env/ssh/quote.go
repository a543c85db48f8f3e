package ssh

import "github.com/corralhq/corral/internal/shellquote"

// remoteCommand is the command string sent in the SSH "exec" request. The
// server hands it to the user's login shell (which may be bash, zsh, fish-
// compatible or anything else), so the script travels as one quoted word and
// the login shell only ever sees `/bin/sh -c '<quoted>'`.
func remoteCommand(script string) string {
	return "/bin/sh -c " + shellquote.Quote(script)
}
