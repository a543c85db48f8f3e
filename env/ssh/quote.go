package ssh

import "strings"

// shellQuote returns s as one single-quoted POSIX shell word. Inside single
// quotes every byte is literal except the quote itself, which is written as
// '\” (close the quote, an escaped quote, reopen). The result is safe for
// every POSIX shell, including the remote login shell that parses the SSH
// command string before /bin/sh sees the script.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// remoteCommand is the command string sent in the SSH "exec" request. The
// server hands it to the user's login shell (which may be bash, zsh, fish-
// compatible or anything else), so the script travels as one quoted word and
// the login shell only ever sees `/bin/sh -c '<quoted>'`.
func remoteCommand(script string) string {
	return "/bin/sh -c " + shellQuote(script)
}
