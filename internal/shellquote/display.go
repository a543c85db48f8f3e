package shellquote

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Display and Readable are the other direction: a command line for people
// to read (corral ps, the dashboard, MCP lists), written as a shell user
// would type it. [Join] quotes every word, so `corral start -- python3 -m
// http.server 8000` is stored as 'python3' '-m' 'http.server' '8000';
// shown back it should read python3 -m http.server 8000.
//
// Decisions:
//   - What is shown still means exactly what runs: a word is left bare
//     only when no POSIX shell would read anything into it, so the text
//     can be copied back into a shell. That is why a first word that
//     would be an assignment (FOO=bar) or a reserved word (if, time)
//     stays quoted, and why a word with a newline keeps it inside
//     quotes (no $'\n': dash does not read it).
//   - A command line that is not a plain list of literal words (a
//     script typed as one string: `sh -c` runs it, pipes, variables,
//     globs, double quotes) is shown exactly as typed: rewriting it would
//     be guessing.

// reserved are the words a shell reads as syntax in command position
// (POSIX, plus bash's and ksh's own).
var reserved = map[string]bool{
	"!": true, "{": true, "}": true, "case": true, "do": true, "done": true, "elif": true, "else": true,
	"esac": true, "fi": true, "for": true, "if": true, "in": true, "then": true, "until": true, "while": true,
	"[[": true, "]]": true, "function": true, "select": true, "time": true, "coproc": true,
}

// Display returns the command line line as a person would have typed it.
// When line is a plain list of literal words (each bare and harmless, or
// single-quoted as [Join] and [Quote] write them) the words are written
// again by [Readable]; any other line is returned unchanged.
func Display(line string) string {
	words, ok := literalWords(line)
	if !ok {
		return line
	}
	return Readable(words)
}

// Readable returns words as one command line that a shell splits back
// into exactly these words, quoting only the words that need it: single
// quotes, or double quotes for a word with a single quote in it that
// means itself there (it's reads "it's"). The first word is a command name:
// an assignment or a reserved word there is quoted too.
func Readable(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = readableWord(w, i == 0)
	}
	return strings.Join(out, " ")
}

func readableWord(w string, first bool) string {
	bare := w != ""
	for _, r := range w {
		if !bareRune(r) {
			bare = false
			break
		}
	}
	if bare && !(first && (reserved[w] || assignment(w))) {
		return w
	}
	if strings.ContainsRune(w, '\'') && doubleQuotable(w) {
		return `"` + w + `"`
	}
	return Quote(w)
}

// doubleQuotable reports whether w means itself inside double quotes:
// no $, ` or " (and no !, which an interactive bash expands there), and
// no backslash that escapes: one before $ ` " \ or a newline, or at the
// end (it would escape the closing quote). A script for sh -c with
// single quotes inside reads as typed then: "printf '%s\n' x".
func doubleQuotable(w string) bool {
	if strings.ContainsAny(w, "\"$`!") {
		return false
	}
	for i := 0; i < len(w); i++ {
		if w[i] == '\\' && (i+1 == len(w) || strings.IndexByte("\\\n", w[i+1]) >= 0) {
			return false
		}
	}
	return true
}

// bareRune reports whether r means itself to every POSIX shell wherever
// it stands in a word (for '=', see assignment). Printable non-ASCII
// runes count as letters; an invalid byte does not.
func bareRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	case strings.ContainsRune("_-./:,+@%=", r):
		return true
	case r >= utf8.RuneSelf && r != utf8.RuneError:
		return unicode.IsPrint(r) && !unicode.IsSpace(r)
	}
	return false
}

// assignment reports whether w, in command position, would be a variable
// assignment instead of a command name: NAME=… with NAME a shell name.
func assignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for _, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// literalWords splits line into its words when it holds nothing but
// literal words: bare runs of bareRune characters, single-quoted strings,
// and the \' that [Quote] puts between two of them, separated by spaces
// or tabs. ok is false for anything a shell would interpret (and for a
// first word that a shell could read as an assignment or a reserved
// word, which Readable would quote and so change).
func literalWords(line string) (words []string, ok bool) {
	var (
		w       strings.Builder
		inWord  bool
		bareAt0 bool // the word being read starts with a bare character
	)
	end := func() bool {
		if !inWord {
			return true
		}
		if len(words) == 0 && bareAt0 && (reserved[w.String()] || assignment(w.String())) {
			return false
		}
		words = append(words, w.String())
		w.Reset()
		inWord = false
		return true
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if !end() {
				return nil, false
			}
			i++
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			if !inWord {
				inWord, bareAt0 = true, false
			}
			w.WriteString(line[i+1 : i+1+j])
			i += j + 2
		case c == '\\' && i+1 < len(line) && line[i+1] == '\'':
			if !inWord {
				inWord, bareAt0 = true, false
			}
			w.WriteByte('\'')
			i += 2
		default:
			r, size := utf8.DecodeRuneInString(line[i:])
			if !bareRune(r) {
				return nil, false
			}
			if !inWord {
				inWord, bareAt0 = true, true
			}
			w.WriteString(line[i : i+size])
			i += size
		}
	}
	if !end() {
		return nil, false
	}
	return words, true
}
