// Package shellquote turns arbitrary strings into POSIX shell words that a
// shell gives back byte for byte: the one quoting corral uses wherever a
// value travels inside a shell command line (the CLI's `--` words, the
// env/nohup scripts, the SSH exec request, the conformance suite's
// helpers).
//
//   - [Quote] makes one word of one string.
//   - [Join] makes a command line of several, one word each.
//   - [Readable] and [Display] write a command line for people to read,
//     quoting only the words that need it (display.go).
//
// Decisions (for Quote and Join):
//   - Every string is single-quoted, even one that would be safe bare.
//     Quoting only "when needed" would leave words such as FOO=bar (an
//     assignment), if (a keyword) or ~ (a tilde expansion) to the shell's
//     interpretation; always quoting leaves nothing to judge.
//   - Inside single quotes no byte is special except the quote itself, so
//     the result holds for every POSIX shell — sh, dash, bash, busybox
//     ash, and the login shell of a remote user that parses an SSH command
//     string before /bin/sh sees it — and for any byte string: newlines,
//     non-UTF-8 bytes, leading dashes. Only NUL cannot be carried (no argv
//     entry can hold it); callers reject it before quoting.
package shellquote

import "strings"

// Quote returns s as one single-quoted shell word. A quote inside s
// becomes quote, backslash, quote, quote: close the quoted string, an
// escaped quote, reopen. There is no other way to put a quote inside a
// single-quoted string.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Join returns words as one command line, each quoted by [Quote] and
// separated by a space: the shell parses it back into exactly these words.
func Join(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = Quote(w)
	}
	return strings.Join(quoted, " ")
}
