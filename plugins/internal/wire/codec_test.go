package wire

import (
	"bytes"
	"io"
	"testing"

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
	if err := (Codec{}).Unmarshal(data, &c); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	data.Free() // what gRPC does once Unmarshal returned
	got, err := io.ReadAll(&c)
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 0 {
		t.Errorf("Len after reading all = %d", c.Len())
	}
	return got
}

func TestChunkRoundTrip(t *testing.T) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 40000) // 640000 B, a 3-byte length
	for _, size := range []int{0, 1, 127, 128, 16384, len(payload)} {
		data := payload[:size]
		enc, err := (Codec{}).Marshal(&pb.OutputChunk{Data: data})
		if err != nil {
			t.Fatal(err)
		}
		wire := enc.Materialize()
		enc.Free()
		for _, frame := range []int{1, 3, 16384, 1 << 20} {
			if got := readChunk(t, split(wire, frame)); !bytes.Equal(got, data) {
				t.Fatalf("size %d, frames of %d: got %d bytes, want %d", size, frame, len(got), len(data))
			}
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
	if got := readChunk(t, split(b, 2)); string(got) != "last" {
		t.Errorf("got %q, want %q", got, "last")
	}

	var c Chunk
	if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer{0x0a, 0x05, 'a'}}, &c); err == nil {
		t.Error("a truncated chunk was accepted")
	}
}

// TestChunkClose: closing a half-read chunk gives its buffers back.
func TestChunkClose(t *testing.T) {
	enc, _ := (Codec{}).Marshal(&pb.OutputChunk{Data: bytes.Repeat([]byte{7}, 100000)})
	var c Chunk
	if err := (Codec{}).Unmarshal(enc, &c); err != nil {
		t.Fatal(err)
	}
	enc.Free()
	if _, err := c.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Errorf("Read after Close = %d, %v", n, err)
	}
}

func TestCodecOtherMessages(t *testing.T) {
	in := &pb.WriteRequest{ProcessId: 7, Data: bytes.Repeat([]byte("x"), 300000)}
	enc, err := (Codec{}).Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out pb.WriteRequest
	if err := (Codec{}).Unmarshal(split(enc.Materialize(), 16384), &out); err != nil {
		t.Fatal(err)
	}
	enc.Free()
	if !proto.Equal(in, &out) {
		t.Error("WriteRequest changed on the way")
	}
	if _, err := (Codec{}).Marshal("text"); err == nil {
		t.Error("Marshal of a string succeeded")
	}
}

func TestPool(t *testing.T) {
	for _, size := range []int{0, 1, 256, 257, 16384, 16389, 1 << 20, 8 << 20, 8<<20 + 1} {
		b := Pool.Get(size)
		if len(*b) != size {
			t.Fatalf("Get(%d) has length %d", size, len(*b))
		}
		if c := cap(*b); size <= 8<<20 && (c < size || c > 2*max(size, 128)) {
			t.Errorf("Get(%d) has capacity %d", size, c)
		}
		Pool.Put(b)
	}
}
