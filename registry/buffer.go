package registry

import (
	"sync"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/utf8cut"
)

// buffer is a bounded output buffer: it keeps the first HeadSize bytes a
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
type buffer struct {
	mu         sync.Mutex
	headCap    int
	tailCap    int
	ringCap    int // tailCap plus room to look behind the tail's first byte
	head       []byte
	headClosed bool
	ring       []byte
	w          int // oldest byte (and next write) once the ring is full
	total      int64
	// grown is notified after every write, for followers (Follow).
	grown changeSignal
}

// chunk is a read from a buffer.
type chunk struct {
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

// newBuffer returns a buffer of at most size bytes keeping the first
// headSize of them. headSize must be smaller than size.
func newBuffer(size, headSize int) *buffer {
	if headSize >= size {
		headSize = size / 2
	}
	if headSize < 0 {
		headSize = 0
	}
	tail := size - headSize
	return &buffer{headCap: headSize, tailCap: tail, ringCap: tail + utf8.UTFMax - 1}
}

// Write appends p and wakes the followers. It never fails.
func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.append(p)
	b.mu.Unlock()
	b.grown.notify()
	return len(p), nil
}

// changed returns a channel closed at the next Write. Take it before
// reading (ReadSince), then wait on it: no write is missed.
func (b *buffer) changed() <-chan struct{} { return b.grown.next() }

// append is Write's work, under b.mu.
func (b *buffer) append(p []byte) {
	if !b.headClosed {
		room := b.headCap - len(b.head)
		if len(p) < room {
			b.head = append(b.head, p...)
			b.total += int64(len(p))
			return
		}
		b.head = append(b.head, p[:room]...)
		back := utf8cut.IncompleteSuffix(b.head)
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
}

func (b *buffer) ringWrite(p []byte) {
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
func (b *buffer) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// ringStart is the stream offset of the oldest byte in the ring.
func (b *buffer) ringStart() int64 { return b.total - int64(len(b.ring)) }

// byteAt returns the byte at stream offset off, which must be held.
func (b *buffer) byteAt(off int64) byte {
	if off < int64(len(b.head)) {
		return b.head[off]
	}
	i := int(off - b.ringStart())
	if len(b.ring) == b.ringCap {
		i = (b.w + i) % b.ringCap
	}
	return b.ring[i]
}

// appendRing appends the held bytes [from, to) of the ring to dst.
func (b *buffer) appendRing(dst []byte, from, to int64) []byte {
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
func (b *buffer) tailStart() int64 {
	headLen := int64(len(b.head))
	start := max(headLen, b.total-int64(b.tailCap))
	if start == headLen || start >= b.total {
		return start
	}
	// The bytes around the cut that the ring holds: ringCap leaves room
	// for the look behind it.
	from := max(headLen, b.ringStart(), start-(utf8.UTFMax-1))
	to := min(b.total, start+utf8.UTFMax-1)
	var around [2*utf8.UTFMax - 2]byte
	n := 0
	for off := from; off < to; off++ {
		around[n] = b.byteAt(off)
		n++
	}
	return from + int64(utf8cut.Start(around[:n], int(start-from)))
}

// ReadSince returns what the buffer holds from stream offset off on.
// Offsets before 0 read from 0; offsets past the end return no data.
func (b *buffer) ReadSince(off int64) chunk {
	b.mu.Lock()
	defer b.mu.Unlock()
	off = max(off, 0)
	c := chunk{Next: b.total}
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
