// Package ansi removes terminal escape sequences and control characters
// from process output, so that a model or a log search sees the text a
// terminal would show.
//
// It removes CSI sequences (ESC [ … final byte, colours, cursor moves),
// OSC sequences (ESC ] …) terminated by BEL or ST (ESC \), the string
// sequences DCS, SOS, PM and APC (ESC P, X, ^, _ … ST), and every other
// ESC sequence (ESC plus intermediates plus a final byte, such as ESC ( B
// or ESC =). Of the C0 control characters only newline and tab are kept;
// carriage return, backspace, BEL and DEL are dropped. Bytes of 0x80 and
// above are kept unchanged, so UTF-8 text and binary data pass through.
//
// A Stripper keeps its state between calls, so sequences split across
// writes are removed as a whole. An unterminated string sequence (an OSC
// missing its terminator) is abandoned after MaxStringLen bytes so it
// cannot swallow the rest of the output.
package ansi

// MaxStringLen bounds the body of an OSC/DCS/SOS/PM/APC sequence; longer
// bodies are treated as garbage and the stripper returns to plain text.
const MaxStringLen = 64 << 10

type state uint8

const (
	ground    state = iota
	escape          // after ESC
	escInter        // ESC followed by intermediates 0x20-0x2F
	csi             // ESC [
	str             // OSC, DCS, SOS, PM, APC body
	strEscape       // ESC inside a string body (maybe ST)
)

// Stripper is a streaming escape-sequence remover. The zero value is ready
// to use. It is not safe for concurrent use.
type Stripper struct {
	st     state
	osc    bool // the string is an OSC, which BEL also terminates
	strLen int
}

// Append appends p without escape sequences and control characters to dst
// and returns the extended slice.
func (s *Stripper) Append(dst, p []byte) []byte {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch s.st {
		case ground:
			// Fast path: copy the run of printable bytes at once.
			j := i
			for j < len(p) && keep(p[j]) {
				j++
			}
			if j > i {
				dst = append(dst, p[i:j]...)
				i = j - 1
				continue
			}
			if c == 0x1b {
				s.st = escape
			}
		case escape:
			switch {
			case c == '[':
				s.st = csi
			case c == ']':
				s.st, s.osc, s.strLen = str, true, 0
			case c == 'P' || c == 'X' || c == '^' || c == '_':
				s.st, s.osc, s.strLen = str, false, 0
			case c >= 0x20 && c <= 0x2f:
				s.st = escInter
			case c == 0x1b:
				// ESC ESC: the first one was a lone escape.
			case c >= 0x30 && c <= 0x7e:
				s.st = ground
			default:
				// A control character aborts the sequence and counts as
				// itself.
				s.st = ground
				if keep(c) {
					dst = append(dst, c)
				}
			}
		case escInter:
			switch {
			case c >= 0x20 && c <= 0x2f:
			case c >= 0x30 && c <= 0x7e:
				s.st = ground
			case c == 0x1b:
				s.st = escape
			default:
				s.st = ground
				if keep(c) {
					dst = append(dst, c)
				}
			}
		case csi:
			switch {
			case c >= 0x20 && c <= 0x3f:
				// parameter and intermediate bytes
			case c >= 0x40 && c <= 0x7e:
				s.st = ground
			case c == 0x1b:
				s.st = escape
			default:
				s.st = ground
				if keep(c) {
					dst = append(dst, c)
				}
			}
		case str:
			switch {
			case c == 0x07 && s.osc:
				s.st = ground
			case c == 0x1b:
				s.st = strEscape
			default:
				s.strLen++
				if s.strLen > MaxStringLen {
					s.st = ground
				}
			}
		case strEscape:
			switch c {
			case '\\':
				s.st = ground
			case 0x1b:
			default:
				// Not ST: the body continues (ESC inside a string is
				// otherwise meaningless).
				s.st = str
			}
		}
	}
	return dst
}

// Reset returns the stripper to plain-text state.
func (s *Stripper) Reset() { *s = Stripper{} }

// keep reports whether c survives stripping in plain text.
func keep(c byte) bool {
	return c >= 0x20 && c != 0x7f || c == '\n' || c == '\t'
}

// Strip returns p without escape sequences and control characters, as a
// fresh Stripper would.
func Strip(p []byte) []byte {
	var s Stripper
	return s.Append(make([]byte, 0, len(p)), p)
}

// String is Strip for strings.
func String(s string) string {
	var st Stripper
	return string(st.Append(make([]byte, 0, len(s)), []byte(s)))
}
