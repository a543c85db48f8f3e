package daemon

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// A run's stream (POST /v1/run) is Server-Sent Events by default, whose
// "output" events carry the bytes in base64 inside JSON: a third more
// bytes, an encode in the daemon and a decode in the client, for output
// that is most of what crosses the socket (a command printing 100 MB). A
// client that sends Accept: FramesType gets the same events as frames
// instead, the output as the bytes themselves:
//
//	kind (1 byte)  length (4 bytes, big-endian)  payload (length bytes)
//
// kind 'o' is output, its payload the offset of its first byte (8 bytes,
// big-endian) then the bytes; 's' (started), 'w' (waiting_input) and 'e'
// (end) carry the JSON their SSE events carry. The corral CLI asks for
// frames; a daemon that does not know them answers SSE, which the client
// still reads.

// FramesType is the media type of a framed run stream.
const FramesType = "application/vnd.corral.frames"

// frameKinds maps an SSE event name to its frame kind.
var frameKinds = map[string]byte{"started": 's', "waiting_input": 'w', "end": 'e'}

// maxFrame bounds a frame's payload as the client reads it: a chunk of
// output is at most what one write of the command gave (the registry's
// reads are 64 KiB), an Info a few KiB.
const maxFrame = 64 << 20

// runStream is a run's answer, as SSE or as frames.
type runStream interface {
	send(event string, v any) bool
	sendChunk(ch OutputChunk) bool
}

// frameWriter writes frames, flushing each as SSE does each event.
type frameWriter struct {
	w   http.ResponseWriter
	f   http.Flusher
	buf []byte
}

func newFrames(w http.ResponseWriter) (*frameWriter, bool) {
	f, ok := startStream(w, FramesType)
	if !ok {
		return nil, false
	}
	return &frameWriter{w: w, f: f}, true
}

func (fw *frameWriter) send(event string, v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	return fw.frame(frameKinds[event], nil, b)
}

func (fw *frameWriter) sendChunk(ch OutputChunk) bool {
	var off [8]byte
	binary.BigEndian.PutUint64(off[:], uint64(ch.Offset))
	return fw.frame('o', off[:], ch.Data)
}

// frame writes one frame of kind whose payload is head then body, with
// one write (the header and a small payload together) or two (a large
// chunk of output is not copied).
func (fw *frameWriter) frame(kind byte, head, body []byte) bool {
	n := len(head) + len(body)
	fw.buf = append(fw.buf[:0], kind, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	fw.buf = append(fw.buf, head...)
	var err error
	if len(body) <= 4<<10 {
		_, err = fw.w.Write(append(fw.buf, body...))
	} else if _, err = fw.w.Write(fw.buf); err == nil {
		_, err = fw.w.Write(body)
	}
	if err != nil {
		return false
	}
	fw.f.Flush()
	return true
}

// errBadFrame: the stream is not frames as this client reads them.
var errBadFrame = errors.New("daemon: run stream: bad frame")

// readFrames reads a framed run stream, handing each frame to on as the
// event its SSE form would be; output comes as "output.raw", its payload
// the 8-byte offset then the bytes (valid until on returns).
func readFrames(body io.Reader, on func(event string, data []byte) (bool, error)) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var hdr [5]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		if n > maxFrame {
			return fmt.Errorf("%w: %d bytes", errBadFrame, n)
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		data := buf[:n]
		if _, err := io.ReadFull(br, data); err != nil {
			return err
		}
		var event string
		switch hdr[0] {
		case 'o':
			if n < 8 {
				return fmt.Errorf("%w: output without its offset", errBadFrame)
			}
			event = "output.raw"
		case 's':
			event = "started"
		case 'w':
			event = "waiting_input"
		case 'e':
			event = "end"
		default:
			continue // a kind of a later daemon: skipped, as SSE skips an unknown event
		}
		if more, err := on(event, data); err != nil || !more {
			return err
		}
	}
}
