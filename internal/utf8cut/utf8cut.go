// Package utf8cut finds where a part of a byte stream may begin or end
// without splitting a UTF-8 character: corral's one implementation, for
// the registry's bounded output buffer (its head and tail) and the ACP
// terminal output (the end of the output within a byte limit).
//
// Decisions:
//   - What a character is, is the standard library's definition
//     (utf8.FullRune, utf8.DecodeRune), not a table of its own.
//   - Bytes that are not UTF-8 are never held back or skipped for their
//     sake: a command's binary output stays byte-exact. Only the start or
//     the rest of a character that could be (or is) valid moves a cut.
//   - Continuation bytes at a cut whose lead byte is out of reach (it was
//     cut off before the caller's bytes) are skipped: they cannot begin a
//     character, and no more of them than a character has.
package utf8cut

import "unicode/utf8"

// IncompleteSuffix returns how many bytes at the end of b begin a
// character whose remaining bytes are missing: b[:len(b)-n] ends on a
// character boundary, and the n bytes are whole once more arrive. Bytes
// that no continuation could make valid count as complete (0).
func IncompleteSuffix(b []byte) int {
	for n := 1; n <= utf8.UTFMax-1 && n <= len(b); n++ {
		if !utf8.RuneStart(b[len(b)-n]) {
			continue
		}
		if utf8.FullRune(b[len(b)-n:]) {
			return 0
		}
		return n
	}
	return 0
}

// Start returns where a reader of b from index i on begins without
// starting inside a character: i, or past the rest of a valid character
// that begins before i. b[:i] is what precedes the cut, as far as the
// caller still has it; without the character's lead byte there, the
// continuation bytes at i are skipped. i must be within [0, len(b)].
func Start(b []byte, i int) int {
	if i >= len(b) || utf8.RuneStart(b[i]) {
		return i
	}
	for k := 1; k < utf8.UTFMax; k++ {
		if i-k < 0 {
			// The lead byte was cut off: a character has at most
			// UTFMax-1 continuation bytes, k-1 of them before i.
			return i + continuation(b[i:], utf8.UTFMax-k)
		}
		if !utf8.RuneStart(b[i-k]) {
			continue
		}
		r, size := utf8.DecodeRune(b[i-k:])
		if r == utf8.RuneError && size <= 1 || size <= k {
			// Not UTF-8, not whole in b, or a character that ends
			// before i: stay byte-exact.
			return i
		}
		return i - k + size
	}
	return i // more continuation bytes than a character has: not UTF-8
}

// continuation counts the continuation bytes at the start of b, at most
// limit.
func continuation(b []byte, limit int) int {
	n := 0
	for n < len(b) && n < limit && !utf8.RuneStart(b[n]) {
		n++
	}
	return n
}
