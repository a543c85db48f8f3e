package acpterm

import (
	"unicode/utf8"

	"github.com/corralhq/corral/registry"
)

// tailOutput is what terminal/output returns of a Poll from byte since:
// the end of the output, at most limit bytes (limit < 0: no limit),
// starting on a UTF-8 character boundary, and whether anything before it
// was left out.
//
// The registry's buffer is a head and a rolling tail with a gap between
// them once the output outgrows it; only what follows the gap is a
// contiguous end of the output, so that is all that can be returned. While
// the command runs, an incomplete character at the very end is held back:
// its remaining bytes have not arrived yet, and the next call returns it
// whole.
func tailOutput(res registry.PollResult, since int64, limit int, final bool) ([]byte, bool) {
	out := res.Output
	truncated := since > 0
	if res.OmittedBytes > 0 {
		out = out[res.OmittedAt:]
		truncated = true
	}
	if !final {
		out = out[:len(out)-incompleteSuffix(out)]
	}
	if limit >= 0 && len(out) > limit {
		out = out[len(out)-limit:]
		truncated = true
	}
	if truncated {
		out = out[leadingContinuation(out):]
	}
	return out, truncated
}

// leadingContinuation counts the bytes at the start of b that continue a
// character whose first byte was cut off (at most utf8.UTFMax-1 of them).
func leadingContinuation(b []byte) int {
	n := 0
	for n < len(b) && n < utf8.UTFMax-1 && !utf8.RuneStart(b[n]) {
		n++
	}
	return n
}

// incompleteSuffix counts the bytes at the end of b that begin a
// character whose remaining bytes are missing.
func incompleteSuffix(b []byte) int {
	for n := 1; n <= utf8.UTFMax-1 && n <= len(b); n++ {
		c := b[len(b)-n]
		if !utf8.RuneStart(c) {
			continue
		}
		if c < utf8.RuneSelf {
			return 0 // ASCII: complete
		}
		if utf8.FullRune(b[len(b)-n:]) {
			return 0
		}
		return n
	}
	return 0
}
