package wire

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/corralhq/corral/plugins/proto"
)

// split cuts b into buffers of at most n bytes, as HTTP/2 frames cut a
// message.
func split(b []byte, n int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, mem.Copy(b[:k], Pool))
		b = b[k:]
	}
	return out
}

func readChunk(t *testing.T, data mem.BufferSlice) []byte {
	t.Helper()
	var c Chunk
	require.NoError(t, (Codec{}).Unmarshal(data, &c), "Unmarshal")
	data.Free() // what gRPC does once Unmarshal returned
	got, err := io.ReadAll(&c)
	require.NoError(t, err)
	if c.Len() != 0 {
		assert.Fail(t, fmt.Sprintf("Len after reading all = %d", c.Len()))
	}
	return got
}

func TestChunkRoundTrip(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640000 B, a 3-byte length
	for _, size := range []int{0, 1, 127, 128, 16384, len(payload)} {
		data := payload[:size]
		enc, err := (Codec{}).Marshal(&pb.OutputChunk{Data: data})
		require.NoError(t, err)
		wire := enc.Materialize()
		enc.Free()
		for _, frame := range []int{1, 3, 16384, 1 << 20} {
			got := readChunk(t, split(wire, frame))
			require.Truef(t, bytes.Equal(got, data), "size %d, frames of %d: got %d bytes, want %d", size, frame, len(got), len(data))
		}
	}
}

// TestChunkOtherEncodings: what is not the one-field encoding is decoded
// by the protobuf library: unknown fields, the field repeated (the last
// one wins), and garbage is an error.
func TestChunkOtherEncodings(t *testing.T) {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("first"))
	b = protowire.AppendTag(b, 9, protowire.VarintType)
	b = protowire.AppendVarint(b, 42)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("last"))
	got := readChunk(t, split(b, 2))
	assert.Truef(t, string(got) == "last", "got %q, want %q", got, "last")

	var c Chunk
	err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer{0x0a, 0x05, 'a'}}, &c)
	assert.Error(t, err, "a truncated chunk was accepted")
}

// TestChunkClose: closing a half-read chunk gives its buffers back.
func TestChunkClose(t *testing.T) {
	enc, _ := (Codec{}).Marshal(&pb.OutputChunk{Data: bytes.Repeat([]byte{7}, 100000)})
	var c Chunk
	require.NoError(t, (Codec{}).Unmarshal(enc, &c))
	enc.Free()
	if _, err := c.Read(make([]byte, 10)); err != nil {
		require.FailNow(t, fmt.Sprint(err))
	}
	c.Close()
	n, err := c.Read(make([]byte, 10))
	assert.Truef(t, n == 0 && err == io.EOF, "Read after Close = %d, %v", n, err)
}

func TestCodecOtherMessages(t *testing.T) {
	in := &pb.WriteRequest{ProcessId: 7, Data: bytes.Repeat([]byte("x"), 300000)}
	enc, err := (Codec{}).Marshal(in)
	require.NoError(t, err)
	var out pb.WriteRequest
	require.NoError(t, (Codec{}).Unmarshal(split(enc.Materialize(), 16384), &out))
	enc.Free()
	assert.True(t, proto.Equal(in, &out), "WriteRequest changed on the way")
	if _, err := (Codec{}).Marshal("text"); err == nil {
		assert.Fail(t, "Marshal of a string succeeded")
	}
}

func TestPool(t *testing.T) {
	for _, size := range []int{0, 1, 256, 257, 16384, 16389, 1 << 20, 8 << 20, 8<<20 + 1} {
		b := Pool.Get(size)
		if len(*b) != size {
			require.FailNow(t, fmt.Sprintf("Get(%d) has length %d", size, len(*b)))
		}
		c := cap(*b)
		assert.Truef(t, size > 8<<20 || c >= size && c <= 2*max(size, 128), "Get(%d) has capacity %d", size, c)
		Pool.Put(b)
	}
}
