package envtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/corralhq/corral/env"
)

var outputCases = []testCase{
	{"StdoutStderrInterleaved", testInterleaved},
	{"BinaryBytes", testBinary},
	{"Large50MB", testLarge},
	{"ResumeAfterExit", testResumeAfterExit},
	{"ResumeLive", func(t *testing.T, s *suite) { testResumeLive(t, s, false) }},
	{"ResumeLiveDetached", func(t *testing.T, s *suite) { testResumeLive(t, s, true) }},
	{"GrandchildHoldsOutput", testGrandchildHoldsOutput},
}

func testInterleaved(t *testing.T, s *suite) {
	e := s.newEnv(t)
	out, st := s.run(t, e, env.Spec{Command: `i=0
while [ $i -lt 50 ]; do
  printf 'o%s.' $i
  printf 'e%s.' $i >&2
  i=$((i+1))
done
echo end >&2`})
	var want strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&want, "o%d.e%d.", i, i)
	}
	want.WriteString("end\n")
	if !st.Success() {
		t.Errorf("status = %v, want exit status 0", st)
	}
	if string(out) != want.String() {
		t.Errorf("merged output = %q,\nwant %q", clip(out), clip([]byte(want.String())))
	}
}

// binaryPayload is every byte value followed by invalid UTF-8 (a lone
// continuation byte, a truncated sequence, an overlong encoding, a UTF-16
// surrogate) — what a lossy string conversion or a terminal translation
// would damage.
func binaryPayload() []byte {
	b := make([]byte, 0, 256+16)
	for i := 0; i < 256; i++ {
		b = append(b, byte(i))
	}
	return append(b, 0xff, 0xfe, 0x80, 0xc3, 0x28, 0xe2, 0x82, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0x00, '\n')
}

// printfOctal returns a printf command writing b exactly: every byte as an
// octal escape, so no shell or printf quirk touches it.
func printfOctal(b []byte) string {
	var sb strings.Builder
	sb.WriteString("printf '")
	for _, c := range b {
		fmt.Fprintf(&sb, `\%03o`, c)
	}
	sb.WriteString("'")
	return sb.String()
}

func testBinary(t *testing.T, s *suite) {
	e := s.newEnv(t)
	want := binaryPayload()
	// Both streams: stderr must be as binary-safe as stdout.
	out, st := s.run(t, e, env.Spec{Command: printfOctal(want) + "; " + printfOctal(want) + " >&2"})
	if !st.Success() {
		t.Errorf("status = %v, want exit status 0", st)
	}
	want = append(want, want...)
	if !bytes.Equal(out, want) {
		t.Errorf("output differs from the bytes written:\n got %d bytes %x\nwant %d bytes %x", len(out), out, len(want), want)
	}
}

const largeSize = 50 << 20

const largeLine = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// largeExpected is the output of `yes largeLine | head -c size`.
func largeExpected(size int) []byte {
	line := largeLine + "\n"
	b := bytes.Repeat([]byte(line), size/len(line)+1)
	return b[:size]
}

func testLarge(t *testing.T, s *suite) {
	e := s.newEnv(t)
	p := s.start(t, e, env.Spec{Command: fmt.Sprintf("yes %s | head -c %d", largeLine, largeSize)})
	want := largeExpected(largeSize)
	wantSum := sha256.Sum256(want)
	rc, err := p.Output(s.ctx(t), 0)
	if err != nil {
		t.Fatalf("Output(0): %v", err)
	}
	h := sha256.New()
	var n int64
	var head []byte
	err = copyCtx(s.ctx(t), writerFunc(func(b []byte) (int, error) {
		if len(head) < 256 {
			head = append(head, b[:min(len(b), 256-len(head))]...)
		}
		n += int64(len(b))
		return h.Write(b)
	}), rc)
	if err != nil {
		t.Fatalf("reading 50 MB of output: %v after %d bytes", err, n)
	}
	if st := s.wait(t, p); !st.Success() {
		t.Errorf("status = %v, want exit status 0", st)
	}
	if n != largeSize {
		t.Errorf("read %d bytes, want %d; first bytes %q", n, largeSize, head)
	}
	if got := h.Sum(nil); !bytes.Equal(got, wantSum[:]) {
		t.Errorf("sha256 = %s, want %s; first bytes %q", hex.EncodeToString(got), hex.EncodeToString(wantSum[:]), head)
	}
	if !e.Capabilities().ReplayOutput {
		return
	}
	// The tail again, from an offset near the end: what a reader that
	// reconnects after the process ended gets.
	const tail = 100_000 + 7
	got, err := ReadFrom(s.ctx(t), p, largeSize-tail)
	if err != nil {
		t.Fatalf("re-reading the tail: %v", err)
	}
	if !bytes.Equal(got, want[largeSize-tail:]) {
		t.Errorf("tail from offset %d: got %d bytes, want %d (first bytes %q, want %q)", largeSize-tail, len(got), tail, clip(got[:min(len(got), 64)]), want[largeSize-tail:largeSize-tail+64])
	}
}

// numberedLines is the output of numberedLinesCommand: non-periodic, so an
// offset that is off by any amount shows.
func numberedLines(from, to int) []byte {
	var b bytes.Buffer
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.Bytes()
}

func numberedLinesCommand(from, to int) string {
	return fmt.Sprintf(`i=%d; while [ $i -lt %d ]; do echo "line $i"; i=$((i+1)); done`, from, to)
}

// checkOffsets re-opens p's output at several offsets and compares each
// stream with want[offset:].
func (s *suite) checkOffsets(t *testing.T, p env.Process, want []byte) {
	t.Helper()
	n := int64(len(want))
	for _, off := range []int64{0, 1, 7, 4095, 4096, 4097, n / 2, n - 1, n} {
		if off < 0 || off > n {
			continue
		}
		got, err := ReadFrom(s.ctx(t), p, off)
		if err != nil {
			t.Errorf("offset %d: %v", off, err)
			continue
		}
		if !bytes.Equal(got, want[off:]) {
			t.Errorf("offset %d: got %d bytes starting %q, want %d bytes starting %q", off, len(got), clip(got[:min(len(got), 40)]), n-off, want[off:min(n, off+40)])
		}
	}
}

// testResumeAfterExit re-opens the output of an ended process at several
// offsets: any process where ReplayOutput, else a detached one (detached
// output is always replayable).
func testResumeAfterExit(t *testing.T, s *suite) {
	e := s.newEnv(t)
	caps := e.Capabilities()
	if !caps.ReplayOutput && !caps.Reattach {
		t.Skip("Capabilities.ReplayOutput and Reattach are false: output can be read only once (live, covered by ResumeLive)")
	}
	want := numberedLines(0, 6000)
	p := s.start(t, e, env.Spec{Command: numberedLinesCommand(0, 6000), Detach: !caps.ReplayOutput})
	if st := s.wait(t, p); !st.Success() {
		t.Fatalf("status = %v, want exit status 0", st)
	}
	s.checkOffsets(t, p, want)
}

// testResumeLive: streams opened at an offset while the process still
// writes deliver exactly the bytes from that offset, the part written
// before the open and the part written after it, with no gap and no
// duplicate. Where output is not replayable, the one live stream skips
// offset bytes.
func testResumeLive(t *testing.T, s *suite, detach bool) {
	e := s.newEnv(t)
	caps := e.Capabilities()
	if !caps.Stdin {
		t.Skip("Capabilities.Stdin is false: the live case gates the output on stdin")
	}
	if detach && !caps.Reattach {
		t.Skip("Capabilities.Reattach is false")
	}
	replay := caps.ReplayOutput || detach
	part1, part2 := numberedLines(0, 3000), numberedLines(3000, 6000)
	want := append(bytes.Clone(part1), part2...)
	p := s.start(t, e, env.Spec{
		Command: numberedLinesCommand(0, 3000) + "; read go; " + numberedLinesCommand(3000, 6000),
		Stdin:   true,
		Detach:  detach,
	})
	if !replay {
		// A live stream may be opened once; offset bytes are skipped.
		const off = 12345
		w := s.watch(t, p, off)
		if _, err := p.Write(s.ctx(t), []byte("go\n")); err != nil {
			t.Fatalf("Write: %v", err)
		}
		got := s.waitEOF(t, w)
		if !bytes.Equal(got, want[off:]) {
			t.Errorf("live stream from %d: got %d bytes starting %q, want %d starting %q", off, len(got), clip(got[:min(len(got), 40)]), len(want)-off, want[off:off+40])
		}
		s.wait(t, p)
		return
	}
	first := s.watch(t, p, 0)
	if _, err := first.WaitLen(s.ctx(t), len(part1)); err != nil {
		t.Fatalf("first part: %v", err)
	}
	offsets := []int64{0, 1, int64(len(part1)) - 3, int64(len(part1))}
	ws := make([]*Watcher, len(offsets))
	for i, off := range offsets {
		ws[i] = s.watch(t, p, off)
	}
	if got := first.Bytes(); !bytes.Equal(got, part1) {
		t.Fatalf("before stdin: got %d bytes, want exactly the first part (%d bytes)", len(got), len(part1))
	}
	if _, err := p.Write(s.ctx(t), []byte("go\n")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if got := s.waitEOF(t, first); !bytes.Equal(got, want) {
		t.Errorf("stream from 0 opened before the second part: got %d bytes, want %d", len(got), len(want))
	}
	for i, off := range offsets {
		if got := s.waitEOF(t, ws[i]); !bytes.Equal(got, want[off:]) {
			t.Errorf("stream opened live at offset %d: got %d bytes starting %q, want %d starting %q", off, len(got), clip(got[:min(len(got), 40)]), int64(len(want))-off, want[off:off+40])
		}
	}
	if st := s.wait(t, p); !st.Success() {
		t.Errorf("status = %v, want exit status 0", st)
	}
	s.checkOffsets(t, p, want)
}

// testGrandchildHoldsOutput: a background grandchild inherits stdout and
// lives on; the process itself exits. Wait must not hang on the open pipe,
// and the stream must end after the backend's grace.
func testGrandchildHoldsOutput(t *testing.T, s *suite) {
	e := s.newEnv(t)
	m := NewMarker()
	s.killMarkedAtCleanup(t, e, m)
	p := s.start(t, e, env.Spec{Command: fmt.Sprintf("sleep %s & echo parent-done", m)})
	w := s.watch(t, p, 0)
	if st := s.wait(t, p); !st.Success() {
		t.Errorf("status = %v, want exit status 0", st)
	}
	out := s.waitEOF(t, w)
	if string(out) != "parent-done\n" {
		t.Errorf("output = %q, want %q", out, "parent-done\n")
	}
	// The grandchild really held the output: it is still running.
	found, err := ScanProcs(s.ctx(t), e, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(found[m]) == 0 {
		t.Logf("note: the grandchild (sleep %s) no longer runs; the backend ended it", m)
	}
}
