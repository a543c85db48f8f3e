package cli

import "github.com/corralhq/corral/internal/shellquote"

// commandLine turns the words after `--` into the shell command line the
// backend runs with /bin/sh -c.
//
// One word is taken as a complete command line, so pipes, redirections and
// `;` in it work: corral run -- 'make test 2>&1 | tail'. Several words are
// joined as a shell would have received them, each single-quoted, so
// `corral run -- sh -c 'echo hi; exit 3'` runs exactly what typing
// `sh -c 'echo hi; exit 3'` runs: nothing in a word is ever interpreted by
// the shell a second time. Quoting every word (not only those that need it)
// also keeps the first word a command name: a bare "FOO=bar" would become a
// variable assignment and a bare "if" a keyword.
func commandLine(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return shellquote.Join(words)
}
