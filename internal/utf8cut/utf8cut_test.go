package utf8cut_test

import (
	"testing"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/utf8cut"
)

const euro = "€" // e2 82 ac

func TestIncompleteSuffix(t *testing.T) {
	cases := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 0},
		{"ok" + euro, 0},
		{"ok" + euro[:1], 1},
		{"ok" + euro[:2], 2},
		{"😀"[:3], 3},
		{euro[:2], 2},
		{"a\xff", 0},         // never UTF-8: nothing to wait for
		{"a\xe0\x80", 0},     // e0 80 can be no character's start
		{"a\xf0\x80\x80", 0}, // nor can f0 80
		{"\x82\xac", 0},      // the rest of a character, its start cut off
		{"\xc2", 1},
	}
	for _, c := range cases {
		if got := utf8cut.IncompleteSuffix([]byte(c.in)); got != c.want {
			t.Errorf("IncompleteSuffix(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestStart(t *testing.T) {
	cases := []struct {
		in   string
		i    int
		want int
	}{
		{"", 0, 0},
		{"abc", 0, 0},
		{"abc", 1, 1},
		{"abc", 3, 3},
		{"a" + euro + "b", 1, 1},
		{"a" + euro + "b", 2, 4}, // inside €: past its rest
		{"a" + euro + "b", 3, 4},
		{"a😀b", 2, 5},
		{"a😀b", 4, 5},
		{euro[1:] + "ok", 0, 2},          // the lead byte was cut off
		{euro[2:] + "ok", 0, 1},          //
		{"\x80\x80\x80\x80ok", 0, 3},     // no character has more than 3
		{euro[1:] + "ok", 1, 2},          // one continuation before i: one more at most
		{"\x80\x80\x80\x80ok", 3, 3},     // more continuation bytes than a character has
		{"a" + euro[:2] + "\x80z", 2, 4}, // e2 82 80 is not €, but a character: U+2080
		{"\xff\x80\x80", 1, 1},           // not UTF-8: byte-exact
		{"\xe2\x28\xa1", 2, 2},           // a broken sequence: byte-exact
		{"é\x80", 2, 2},                  // a stray continuation after a whole character
		{"a" + euro[:2], 2, 2},           // the rest of € not in b yet: byte-exact
	}
	for _, c := range cases {
		if got := utf8cut.Start([]byte(c.in), c.i); got != c.want {
			t.Errorf("Start(%q, %d) = %d, want %d", c.in, c.i, got, c.want)
		}
	}
}

// Whatever the cut, a valid text read from Start on is valid and loses
// only the rest of the character the cut fell in.
func TestStartKeepsTextValid(t *testing.T) {
	text := []byte("aé€😀z" + euro + "😀😀b")
	for i := range len(text) + 1 {
		j := utf8cut.Start(text, i)
		if j < i || j-i >= utf8.UTFMax || !utf8.Valid(text[j:]) || !utf8.Valid(text[:j]) {
			t.Errorf("Start(%d) = %d: %q | %q", i, j, text[:j], text[j:])
		}
		if k := utf8cut.IncompleteSuffix(text[:i]); !utf8.Valid(text[:i-k]) {
			t.Errorf("IncompleteSuffix(text[:%d]) = %d leaves %q", i, k, text[:i-k])
		}
	}
}
