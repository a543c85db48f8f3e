package registry

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// check verifies a read from offset since against the full stream.
func checkChunk(t *testing.T, b *buffer, stream []byte, since int64, size, headSize int, text bool) {
	t.Helper()
	c := b.ReadSince(since)
	if c.Next != int64(len(stream)) {
		t.Fatalf("Next = %d, want %d", c.Next, len(stream))
	}
	if since >= int64(len(stream)) {
		if len(c.Data) != 0 || c.Omitted != 0 {
			t.Fatalf("read past end returned %d bytes, %d omitted", len(c.Data), c.Omitted)
		}
		return
	}
	// Reconstruct the offsets: Data[:OmittedAt] is stream[since:since+OmittedAt],
	// then Omitted bytes are skipped, then the rest runs to the end.
	if c.Omitted == 0 {
		if !bytes.Equal(c.Data, stream[since:]) {
			t.Fatalf("since %d: contiguous data differs (got %d bytes, want %d)", since, len(c.Data), len(stream)-int(since))
		}
	} else {
		first := c.Data[:c.OmittedAt]
		rest := c.Data[c.OmittedAt:]
		if !bytes.Equal(first, stream[since:since+int64(len(first))]) {
			t.Fatalf("since %d: part before the gap differs", since)
		}
		restStart := since + int64(len(first)) + c.Omitted
		if int(restStart)+len(rest) != len(stream) || !bytes.Equal(rest, stream[restStart:]) {
			t.Fatalf("since %d: part after the gap differs (omitted %d at %d, data %d, stream %d)",
				since, c.Omitted, c.OmittedAt, len(c.Data), len(stream))
		}
		if text && (since == 0 && !utf8.Valid(first) || !utf8.Valid(rest)) {
			t.Fatalf("since %d: a cut split a UTF-8 sequence: first %q rest %q (size %d head %d)", since, first, rest[:min(len(rest), 12)], size, headSize)
		}
		// The omission never exceeds what bounding requires plus a cut of
		// at most 3 bytes at each boundary.
		if int64(len(stream))-since-int64(len(c.Data)) != c.Omitted {
			t.Fatalf("omitted count %d is not exact", c.Omitted)
		}
	}
	if len(c.Data) > size {
		t.Fatalf("read returned %d bytes, more than the buffer size %d", len(c.Data), size)
	}
	if since == 0 && len(stream) > size && len(c.Data) < size-2*(utf8.UTFMax-1) {
		t.Fatalf("buffer holds only %d of %d bytes", len(c.Data), size)
	}
}

func randomText(r *rand.Rand, n int) []byte {
	alphabet := []string{"a", "b", "\n", "é", "✓", "世", "😀", "z", " "}
	var sb strings.Builder
	for sb.Len() < n {
		sb.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return []byte(sb.String())
}

func TestBufferRandomWrites(t *testing.T) {
	for _, text := range []bool{true, false} {
		for seed := range uint64(60) {
			r := rand.New(rand.NewPCG(seed, 7))
			size := 8 + r.IntN(200)
			headSize := r.IntN(size)
			b := newBuffer(size, headSize)
			var stream []byte
			for range 1 + r.IntN(40) {
				var p []byte
				n := r.IntN(3 * size)
				if text {
					p = randomText(r, n)
				} else {
					p = make([]byte, n)
					for i := range p {
						p[i] = byte(r.Uint32())
					}
				}
				if _, err := b.Write(p); err != nil {
					t.Fatal(err)
				}
				stream = append(stream, p...)
				for _, since := range []int64{0, 1, int64(headSize), int64(len(stream) / 2), int64(len(stream) - 1), int64(len(stream)), int64(r.IntN(len(stream) + 1))} {
					checkChunk(t, b, stream, since, size, headSize, text)
				}
			}
			if b.Total() != int64(len(stream)) {
				t.Fatalf("Total = %d, want %d", b.Total(), len(stream))
			}
		}
	}
}

func TestBufferHeadAndTail(t *testing.T) {
	b := newBuffer(10, 4)
	b.Write([]byte("0123456789abcdefghij")) // 20 bytes: head 0123, tail abcdefghij? no: tail is 6 bytes
	c := b.ReadSince(0)
	if string(c.Data) != "0123efghij" || c.Omitted != 10 || c.OmittedAt != 4 || c.Next != 20 {
		t.Fatalf("got %q omitted %d at %d next %d", c.Data, c.Omitted, c.OmittedAt, c.Next)
	}
	c = b.ReadSince(8) // fell out of the buffer
	if string(c.Data) != "efghij" || c.Omitted != 6 || c.OmittedAt != 0 {
		t.Fatalf("since 8: got %q omitted %d at %d", c.Data, c.Omitted, c.OmittedAt)
	}
	c = b.ReadSince(18)
	if string(c.Data) != "ij" || c.Omitted != 0 {
		t.Fatalf("since 18: got %q omitted %d", c.Data, c.Omitted)
	}
}

// The head never ends inside a multi-byte character, even when the
// character arrives split across writes.
func TestBufferHeadUTF8Boundary(t *testing.T) {
	b := newBuffer(16, 4)
	b.Write([]byte("abc"))
	b.Write([]byte("\xe2")) // first byte of ✓ (e2 9c 93) fills the head
	b.Write([]byte("\x9c\x93"))
	b.Write([]byte("xyz"))
	c := b.ReadSince(0)
	if string(c.Data) != "abc✓xyz" || c.Omitted != 0 {
		t.Fatalf("got %q omitted %d", c.Data, c.Omitted)
	}
	b.Write(bytes.Repeat([]byte("✓"), 10))
	c = b.ReadSince(0)
	if !utf8.Valid(c.Data[:c.OmittedAt]) || !utf8.Valid(c.Data[c.OmittedAt:]) {
		t.Fatalf("split UTF-8: %q", c.Data)
	}
	if string(c.Data[:c.OmittedAt]) != "abc" {
		t.Fatalf("head = %q, want %q", c.Data[:c.OmittedAt], "abc")
	}
}

// Binary data is returned byte-exact even where it looks like a broken
// UTF-8 sequence.
func TestBufferBinaryTailStaysExact(t *testing.T) {
	b := newBuffer(8, 2)
	stream := []byte{0, 1, 2, 3, 4, 5, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85}
	b.Write(stream)
	c := b.ReadSince(0)
	want := append([]byte{0, 1}, stream[len(stream)-6:]...)
	if !bytes.Equal(c.Data, want) || c.Omitted != 4 {
		t.Fatalf("got %x omitted %d, want %x omitted 4", c.Data, c.Omitted, want)
	}
}

// Memory stays bounded however much is written.
func TestBufferBounded(t *testing.T) {
	b := newBuffer(1<<10, 1<<8)
	chunk := bytes.Repeat([]byte("x"), 333)
	for range 10000 {
		b.Write(chunk)
	}
	if cap(b.head) > 1<<8+64 || cap(b.ring) > 1<<10 {
		t.Fatalf("head cap %d, ring cap %d exceed the bound", cap(b.head), cap(b.ring))
	}
	if b.Total() != 3330000 {
		t.Fatalf("Total = %d", b.Total())
	}
}

func TestBufferIdleIsSmall(t *testing.T) {
	b := newBuffer(DefaultBufferSize, DefaultHeadSize)
	if cap(b.head) != 0 || cap(b.ring) != 0 {
		t.Fatal("an empty buffer allocated its storage up front")
	}
}

// A write wakes whoever took changed before it, once; a channel taken
// after it waits for the next write.
func TestBufferChangedAtWrite(t *testing.T) {
	b := newBuffer(16, 4)
	ch := b.changed()
	if isClosed(ch) {
		t.Fatal("changed is closed before any write")
	}
	b.Write([]byte("x"))
	if !isClosed(ch) {
		t.Fatal("a write did not close the channel taken before it")
	}
	next := b.changed()
	if isClosed(next) {
		t.Fatal("a channel taken after the write is closed before the next one")
	}
	b.Write([]byte("y"))
	if !isClosed(next) {
		t.Fatal("the second write did not close the channel taken before it")
	}
}

// The head is cut before the start of a character whose rest did not fit,
// not before bytes that can begin no character (e0 80): those stay where
// they are, byte-exact.
func TestBufferHeadKeepsBytesThatAreNoCharacter(t *testing.T) {
	b := newBuffer(16, 4)
	b.Write([]byte("ab\xe0\x80cdefghijklmnopqrstuvwxyz"))
	c := b.ReadSince(0)
	if string(c.Data[:c.OmittedAt]) != "ab\xe0\x80" {
		t.Fatalf("head = %q, want %q", c.Data[:c.OmittedAt], "ab\xe0\x80")
	}
	b = newBuffer(16, 4)
	b.Write([]byte("ab" + "€" + "cdefghijklmnopqrstuvwxyz"))
	c = b.ReadSince(0)
	if string(c.Data[:c.OmittedAt]) != "ab" {
		t.Fatalf("head = %q, want %q", c.Data[:c.OmittedAt], "ab")
	}
}
