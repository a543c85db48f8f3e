package daemon

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// Output is most of what crosses the daemon's socket: a command that
// prints 100 MB is 100 MB of "output" events. encoding/json spends more
// CPU on an OutputChunk (a scan of the whole base64 string, an allocation
// per chunk) than everything else between the command and the terminal,
// so chunks are written and read by hand, in exactly the JSON that
// json.Marshal writes. A chunk in another form (a client of the API that
// writes its own) is decoded with encoding/json.

// appendChunkJSON appends ch as json.Marshal would write it.
func appendChunkJSON(b []byte, ch OutputChunk) []byte {
	b = append(b, `{"offset":`...)
	b = strconv.AppendInt(b, ch.Offset, 10)
	if ch.Data == nil {
		b = append(b, `,"data":null`...)
	} else {
		b = append(b, `,"data":"`...)
		b = base64.StdEncoding.AppendEncode(b, ch.Data)
		b = append(b, '"')
	}
	if ch.Omitted != 0 {
		b = append(b, `,"omitted":`...)
		b = strconv.AppendInt(b, ch.Omitted, 10)
	}
	return append(b, '}')
}

// decodeChunk decodes an "output" event's data into ch, reusing ch.Data's
// storage.
func decodeChunk(data []byte, ch *OutputChunk) error {
	if fastDecodeChunk(data, ch) {
		return nil
	}
	*ch = OutputChunk{}
	return json.Unmarshal(data, ch)
}

// fastDecodeChunk decodes what appendChunkJSON writes for a chunk with
// data; false for anything else.
func fastDecodeChunk(data []byte, ch *OutputChunk) bool {
	rest, ok := bytes.CutPrefix(data, []byte(`{"offset":`))
	if !ok {
		return false
	}
	num, rest, ok := bytes.Cut(rest, []byte(`,"data":"`))
	if !ok {
		return false
	}
	offset, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil {
		return false
	}
	enc, rest, ok := bytes.Cut(rest, []byte(`"`))
	if !ok {
		return false
	}
	var omitted int64
	if tail, ok := bytes.CutPrefix(rest, []byte(`,"omitted":`)); ok {
		num, ok := bytes.CutSuffix(tail, []byte("}"))
		if !ok {
			return false
		}
		if omitted, err = strconv.ParseInt(string(num), 10, 64); err != nil {
			return false
		}
	} else if string(rest) != "}" {
		return false
	}
	out := ch.Data[:0]
	if need := base64.StdEncoding.DecodedLen(len(enc)); cap(out) < need {
		out = make([]byte, 0, need)
	}
	n, err := base64.StdEncoding.Decode(out[:cap(out)], enc)
	if err != nil {
		return false
	}
	ch.Offset, ch.Data, ch.Omitted = offset, out[:n], omitted
	return true
}
