package ansi

import (
	"bytes"
	"strings"
	"testing"
)

func TestStrip(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "hello world\n", "hello world\n"},
		{"tab and newline kept", "a\tb\nc", "a\tb\nc"},
		{"sgr colour", "\x1b[31mred\x1b[0m plain", "red plain"},
		{"csi with private params", "\x1b[?25lhidden\x1b[?25h", "hidden"},
		{"cursor move", "a\x1b[2;5Hb", "ab"},
		{"osc title BEL", "\x1b]0;my title\x07text", "text"},
		{"osc hyperlink ST", "\x1b]8;;https://x.y/\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"dcs", "\x1bPq#0;2;0;0;0\x1b\\after", "after"},
		{"apc", "\x1b_Gf=100;AAAA\x1b\\x", "x"},
		{"charset designation", "\x1b(Babc", "abc"},
		{"keypad mode", "\x1b=\x1b>ok", "ok"},
		{"carriage return and bell dropped", "50%\r100%\x07\r\n", "50%100%\n"},
		{"backspace and del dropped", "ab\bc\x7f", "abc"},
		{"utf8 kept", "héllo ✓ 世界", "héllo ✓ 世界"},
		{"csi aborted by newline", "\x1b[12\nnext", "\nnext"},
		{"esc esc", "\x1b\x1b[1mbold", "bold"},
		{"osc with ESC not ST", "\x1b]0;a\x1bxb\x07c", "c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := String(tc.in); got != tc.want {
				t.Fatalf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// Every split of the input into two writes gives the same result as one
// write: sequences split across writes are removed whole.
func TestStripSplitAcrossWrites(t *testing.T) {
	in := "x\x1b[38;5;208morange\x1b[0m \x1b]0;title\x07y \x1b]8;;http://a\x1b\\z\x1bPdcs\x1b\\ end\x1b(B!"
	want := String(in)
	if want != "xorange y z end!" {
		t.Fatalf("whole = %q", want)
	}
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			var s Stripper
			var out []byte
			out = s.Append(out, []byte(in[:i]))
			out = s.Append(out, []byte(in[i:j]))
			out = s.Append(out, []byte(in[j:]))
			if string(out) != want {
				t.Fatalf("split at %d,%d: got %q want %q", i, j, out, want)
			}
		}
	}
}

func TestUnterminatedOSCIsAbandoned(t *testing.T) {
	var s Stripper
	out := s.Append(nil, []byte("\x1b]"))
	out = s.Append(out, bytes.Repeat([]byte("a"), MaxStringLen+1))
	out = s.Append(out, []byte("visible"))
	if string(out) != "visible" {
		t.Fatalf("got %q (len %d), want %q", out[:min(len(out), 40)], len(out), "visible")
	}
}

func TestBinaryHighBytesKept(t *testing.T) {
	in := []byte{0x80, 0xff, 'a', 0xc3}
	if got := Strip(in); !bytes.Equal(got, in) {
		t.Fatalf("got %x want %x", got, in)
	}
}

func BenchmarkStrip(b *testing.B) {
	line := strings.Repeat("plain text with \x1b[1;32mcolour\x1b[0m and more\n", 1000)
	var s Stripper
	buf := make([]byte, 0, len(line))
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		buf = s.Append(buf[:0], []byte(line))
	}
}
