package daemon

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hand-written chunk codec writes what json.Marshal writes and reads
// it back; other JSON forms of a chunk still decode.
func TestChunkCodec(t *testing.T) {
	bin := make([]byte, 300)
	for i := range bin {
		bin[i] = byte(i)
	}
	chunks := []OutputChunk{
		{},
		{Offset: 0, Data: []byte("hello\n")},
		{Offset: 1 << 40, Data: bin},
		{Offset: 7, Data: []byte("x"), Omitted: 12345},
		{Offset: 3, Data: []byte(`"quoted" \ and <html> & "`)},
	}
	var ch OutputChunk
	for _, want := range chunks {
		std, err := json.Marshal(want)
		require.NoError(t, err)
		assert.Equal(t, string(std), string(appendChunkJSON(nil, want)), "encoding of %+v", want)
		if want.Data != nil {
			require.True(t, fastDecodeChunk(std, &ch), "fast path refused %s", std)
		} else {
			require.NoError(t, decodeChunk(std, &ch))
		}
		assert.Equal(t, want.Offset, ch.Offset)
		assert.Equal(t, string(want.Data), string(ch.Data))
		assert.Equal(t, want.Omitted, ch.Omitted)
	}
	others := map[string]OutputChunk{
		`{"data":"aGk=","offset":5}`:                  {Offset: 5, Data: []byte("hi")},
		`{ "offset": 5, "data": "aGk=" }`:             {Offset: 5, Data: []byte("hi")},
		`{"offset":5,"data":"aGk=","omitted":2}`:      {Offset: 5, Data: []byte("hi"), Omitted: 2},
		`{"offset":5,"data":"aGk=","extra":true}`:     {Offset: 5, Data: []byte("hi")},
		`{"offset":5,"data":"aGk\u003d","omitted":0}`: {Offset: 5, Data: []byte("hi")},
	}
	for in, want := range others {
		require.NoError(t, decodeChunk([]byte(in), &ch), in)
		assert.Equal(t, want.Offset, ch.Offset, in)
		assert.Equal(t, string(want.Data), string(ch.Data), in)
		assert.Equal(t, want.Omitted, ch.Omitted, in)
	}
	for _, bad := range []string{`{"offset":5,"data":"!!"}`, `{"offset":"x","data":""}`, `[1]`} {
		assert.Error(t, decodeChunk([]byte(bad), &ch), bad)
	}
}

func BenchmarkChunkDecode(b *testing.B) {
	data := make([]byte, 32<<10)
	enc := appendChunkJSON(nil, OutputChunk{Offset: 1 << 30, Data: data})
	b.Run("corral", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		var ch OutputChunk
		for b.Loop() {
			if err := decodeChunk(enc, &ch); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var ch OutputChunk
			if err := json.Unmarshal(enc, &ch); err != nil {
				b.Fatal(err)
			}
		}
	})
}
