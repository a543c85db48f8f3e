package mcp

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/corralhq/corral/registry/ansi"
)

// DefaultMaxOutput is how many bytes of process output one tool result
// carries unless Config.MaxOutput says otherwise.
const DefaultMaxOutput = 50_000

// lineSnap is how far a cut may move to land on a line boundary: a model
// reads whole lines more reliably than a line sliced in the middle.
const lineSnap = 512

// rendered is output prepared for a model.
type rendered struct {
	// Text is the ANSI/OSC-stripped output, valid UTF-8, with one
	// "[... N bytes omitted ...]" line where bytes were left out.
	Text string
	// Omitted counts the bytes left out: those the registry's buffer no
	// longer held (raw bytes) plus those cut here to respect the cap
	// (stripped bytes).
	Omitted int64
}

// render strips escape sequences from a buffer snapshot and caps it to
// limit bytes, keeping its head and its tail. data holds the snapshot;
// when registryOmitted > 0 the registry had already dropped that many
// bytes at data offset omittedAt. The marker's own bytes are not counted
// against limit.
func render(data []byte, omittedAt int, registryOmitted int64, limit int) rendered {
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	var head, tail []byte
	if registryOmitted > 0 && omittedAt >= 0 && omittedAt <= len(data) {
		head, tail = ansi.Strip(data[:omittedAt]), ansi.Strip(data[omittedAt:])
	} else {
		head = ansi.Strip(data)
		registryOmitted = 0
	}
	omitted := registryOmitted
	if len(head)+len(tail) > limit {
		if registryOmitted == 0 {
			// One piece: split it into the part we keep first and the rest.
			keepHead := limit / 2
			cut := headCut(head, keepHead)
			rest := head[cut:]
			head = head[:cut]
			start := tailCut(rest, len(rest)-(limit-cut))
			omitted += int64(start)
			tail = rest[start:]
		} else {
			keepHead := min(len(head), limit/2)
			cut := headCut(head, keepHead)
			omitted += int64(len(head) - cut)
			head = head[:cut]
			keepTail := min(len(tail), limit-cut)
			start := tailCut(tail, len(tail)-keepTail)
			omitted += int64(start)
			tail = tail[start:]
		}
	}
	if omitted == 0 {
		return rendered{Text: strings.ToValidUTF8(string(head)+string(tail), "\uFFFD")}
	}
	var b strings.Builder
	b.Grow(len(head) + len(tail) + 40)
	b.WriteString(strings.ToValidUTF8(string(head), "\uFFFD"))
	if len(head) > 0 && head[len(head)-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[... %d bytes omitted ...]\n", omitted)
	b.WriteString(strings.ToValidUTF8(string(tail), "\uFFFD"))
	return rendered{Text: b.String(), Omitted: omitted}
}

// headCut returns where to end a kept head of at most n bytes of b: after
// a newline in its last lineSnap bytes if there is one, else at n moved
// back to a UTF-8 sequence boundary.
func headCut(b []byte, n int) int {
	n = min(max(n, 0), len(b))
	if n == len(b) {
		return n
	}
	if i := bytes.LastIndexByte(b[max(n-lineSnap, 0):n], '\n'); i >= 0 {
		return max(n-lineSnap, 0) + i + 1
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return n
}

// tailCut returns where to start a kept tail of b that begins at or after
// byte n: after the first newline within lineSnap bytes of n if there is
// one, else at n moved forward to a UTF-8 sequence boundary.
func tailCut(b []byte, n int) int {
	n = min(max(n, 0), len(b))
	if n == 0 || n == len(b) {
		return n
	}
	if b[n-1] == '\n' {
		return n
	}
	if i := bytes.IndexByte(b[n:min(n+lineSnap, len(b))], '\n'); i >= 0 && n+i+1 < len(b) {
		return n + i + 1
	}
	for n < len(b) && !utf8.RuneStart(b[n]) {
		n++
	}
	return n
}
