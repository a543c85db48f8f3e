package registry

import (
	"sync"
	"unicode/utf8"
)

// Buffer is a bounded output buffer: it keeps the first HeadSize bytes a
// process wrote and a rolling tail of the last Size-HeadSize bytes, with an
// exact count of everything written and of the bytes dropped between head
// and tail. Memory never exceeds Size plus a few bytes however much is
// written; both parts grow lazily, so an idle process costs almost nothing.
//
// Neither cut splits a UTF-8 sequence: the head ends before an incomplete
// sequence, and the tail starts after the rest of a sequence whose start
// was dropped. Bytes that are not UTF-8 are kept byte-exact; the few bytes a
// cut may skip are counted as omitted, so offsets stay exact.
//
// Safe for concurrent use.
type Buffer struct {
	mu         sync.Mutex
	headCap    int
	tailCap    int
	ringCap    int // tailCap plus room to look behind the tail's first byte
	head       []byte
	headClosed bool
	ring       []byte
	w          int // oldest byte (and next write) once the ring is full
	total      int64
}

// Chunk is a read from a Buffer.
type Chunk struct {
	// Data holds the bytes from the requested offset on that the buffer
	// still has. When Omitted > 0, that many bytes are missing at
	// Data[OmittedAt] (0 when the offset itself fell out of the buffer,
	// or the end of the head part).
	Data      []byte
	Omitted   int64
	OmittedAt int
	// Next is the total number of bytes written: the offset to read from
	// next time.
	Next int64
}

// NewBuffer returns a buffer of at most size bytes keeping the first
// headSize of them. headSize must be smaller than size.
func NewBuffer(size, headSize int) *Buffer {
	if headSize >= size {
		headSize = size / 2
	}
	if headSize < 0 {
		headSize = 0
	}
	tail := size - headSize
	return &Buffer{headCap: headSize, tailCap: tail, ringCap: tail + utf8.UTFMax - 1}
}

// Write appends p. It never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	n := len(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.headClosed {
		room := b.headCap - len(b.head)
		if len(p) < room {
			b.head = append(b.head, p...)
			b.total += int64(n)
			return n, nil
		}
		b.head = append(b.head, p[:room]...)
		back := incompleteSuffix(b.head)
		if back > room {
			// The incomplete sequence started in an earlier write; it
			// stays in the head rather than being split.
			back = 0
		}
		b.head = b.head[:len(b.head)-back]
		b.headClosed = true
		kept := room - back
		b.total += int64(kept)
		p = p[kept:]
	}
	b.total += int64(len(p))
	b.ringWrite(p)
	return n, nil
}

// incompleteSuffix returns the length of an incomplete UTF-8 sequence at
// the end of p (a lead byte followed by fewer continuation bytes than it
// announces), or 0.
func incompleteSuffix(p []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(p); k++ {
		c := p[len(p)-k]
		if c&0xc0 == 0x80 {
			continue
		}
		if need := seqLen(c); need > k {
			return k
		}
		return 0
	}
	return 0
}

// seqLen returns the length a UTF-8 sequence starting with lead byte c
// announces, or 0 if c cannot start a multi-byte sequence.
func seqLen(c byte) int {
	switch {
	case c >= 0xc2 && c <= 0xdf:
		return 2
	case c >= 0xe0 && c <= 0xef:
		return 3
	case c >= 0xf0 && c <= 0xf4:
		return 4
	}
	return 0
}

func (b *Buffer) ringWrite(p []byte) {
	if len(p) == 0 {
		return
	}
	if len(p) >= b.ringCap {
		if len(b.ring) < b.ringCap {
			b.ring = make([]byte, b.ringCap)
		}
		copy(b.ring, p[len(p)-b.ringCap:])
		b.w = 0
		return
	}
	if len(b.ring) < b.ringCap {
		space := b.ringCap - len(b.ring)
		take := min(space, len(p))
		if cap(b.ring)-len(b.ring) < take {
			// Grow geometrically but never past ringCap.
			nc := min(max(2*cap(b.ring), len(b.ring)+take, 4096), b.ringCap)
			nr := make([]byte, len(b.ring), nc)
			copy(nr, b.ring)
			b.ring = nr
		}
		b.ring = append(b.ring, p[:take]...)
		p = p[take:]
		b.w = 0
		if len(p) == 0 {
			return
		}
	}
	k := copy(b.ring[b.w:], p)
	if k < len(p) {
		b.w = copy(b.ring, p[k:])
	} else {
		b.w += k
		if b.w == b.ringCap {
			b.w = 0
		}
	}
}

// Total returns the number of bytes written so far.
func (b *Buffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// ringStart is the stream offset of the oldest byte in the ring.
func (b *Buffer) ringStart() int64 { return b.total - int64(len(b.ring)) }

// byteAt returns the byte at stream offset off, which must be held.
func (b *Buffer) byteAt(off int64) byte {
	if off < int64(len(b.head)) {
		return b.head[off]
	}
	i := int(off - b.ringStart())
	if len(b.ring) == b.ringCap {
		i = (b.w + i) % b.ringCap
	}
	return b.ring[i]
}

// appendRange appends the held bytes [from, to) of the ring to dst.
func (b *Buffer) appendRing(dst []byte, from, to int64) []byte {
	if from >= to {
		return dst
	}
	i := int(from - b.ringStart())
	j := int(to - b.ringStart())
	if len(b.ring) < b.ringCap {
		return append(dst, b.ring[i:j]...)
	}
	i = (b.w + i) % b.ringCap
	j = (b.w + j) % b.ringCap
	if i < j {
		return append(dst, b.ring[i:j]...)
	}
	dst = append(dst, b.ring[i:]...)
	return append(dst, b.ring[:j]...)
}

// tailStart returns the stream offset of the first tail byte a reader is
// given: the last tailCap bytes, moved past the remainder of a UTF-8
// sequence whose start was dropped.
func (b *Buffer) tailStart() int64 {
	headLen := int64(len(b.head))
	start := max(headLen, b.total-int64(b.tailCap))
	if start == headLen || start >= b.total || b.byteAt(start)&0xc0 != 0x80 {
		return start
	}
	lowest := max(headLen, b.ringStart())
	for k := int64(1); k < utf8.UTFMax && start-k >= lowest; k++ {
		c := b.byteAt(start - k)
		if c&0xc0 == 0x80 {
			continue
		}
		need := int64(seqLen(c))
		if need <= k || start-k+need > b.total {
			return start
		}
		var seq [utf8.UTFMax]byte
		for i := int64(0); i < need; i++ {
			seq[i] = b.byteAt(start - k + i)
		}
		if r, size := utf8.DecodeRune(seq[:need]); r == utf8.RuneError && size <= 1 {
			return start // not UTF-8: stay byte-exact
		}
		return start - k + need
	}
	return start
}

// ReadSince returns what the buffer holds from stream offset off on.
// Offsets before 0 read from 0; offsets past the end return no data.
func (b *Buffer) ReadSince(off int64) Chunk {
	b.mu.Lock()
	defer b.mu.Unlock()
	off = max(off, 0)
	c := Chunk{Next: b.total}
	if off >= b.total {
		return c
	}
	headLen := int64(len(b.head))
	if !b.headClosed {
		c.Data = append([]byte(nil), b.head[off:]...)
		return c
	}
	ts := b.tailStart()
	switch {
	case off < headLen:
		c.Data = make([]byte, 0, headLen-off+b.total-ts)
		c.Data = append(c.Data, b.head[off:]...)
		if ts > headLen {
			c.Omitted = ts - headLen
			c.OmittedAt = len(c.Data)
		}
		c.Data = b.appendRing(c.Data, ts, b.total)
	case off < ts:
		c.Omitted = ts - off
		c.Data = b.appendRing(make([]byte, 0, b.total-ts), ts, b.total)
	default:
		c.Data = b.appendRing(make([]byte, 0, b.total-off), off, b.total)
	}
	return c
}
