package wire

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/corralhq/corral/plugins/proto"
)

// The output stream is the one call that moves bulk data, and with grpc-go's
// defaults every byte of it was copied four times and cleared five times on
// its way through the host: read into a frame buffer (a cleared 16 KiB pool
// buffer), joined into one message buffer (a cleared 1 MiB pool buffer, for
// a 256 KiB chunk), copied again by proto.Unmarshal into a new slice, then
// copied to the reader. The plugin side cleared a 1 MiB buffer per chunk
// to marshal it. Codec, Chunk and Pool take that down to the copies the
// transport itself makes: frames are read into buffers that are not
// cleared, and an OutputChunk is received as a Chunk whose data stays in
// those frame buffers until the reader copies it out.

// Codec is the gRPC codec of both sides: protobuf, with buffers from Pool,
// and Chunk, an OutputChunk received without copying its data. It speaks
// the same wire format as grpc-go's own proto codec (and has its name), so
// a host or plugin built without it talks to one built with it.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name is the content-subtype: the same as grpc-go's proto codec's.
func (Codec) Name() string { return "proto" }

// Marshal encodes a protobuf message into a buffer from Pool.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("wire: marshal %T: not a protobuf message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := Pool.Get(size)
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		Pool.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, Pool)}, nil
}

// Unmarshal decodes data into v: a *Chunk keeps a reference to the buffers
// of data that hold the output, any protobuf message is decoded as usual.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if c, ok := v.(*Chunk); ok {
		return c.unmarshal(data)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("wire: unmarshal into %T: not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(Pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// Chunk is an OutputChunk as the host receives it (Output stream's
// RecvMsg, with Codec): its data is read straight out of the transport's
// buffers, which it holds until it has been read to the end or closed.
// The zero value is an empty chunk.
type Chunk struct {
	r *mem.Reader
}

// Len returns how many bytes of the chunk are still unread.
func (c *Chunk) Len() int {
	if c.r == nil {
		return 0
	}
	return c.r.Remaining()
}

// Read copies the chunk's next bytes into b; io.EOF once it is empty.
// Buffers are given back as soon as they have been read.
func (c *Chunk) Read(b []byte) (int, error) {
	if c.r == nil {
		return 0, io.EOF
	}
	return c.r.Read(b)
}

// Close gives back the buffers of the unread rest.
func (c *Chunk) Close() {
	if c.r != nil {
		c.r.Close()
		c.r = nil
	}
}

// unmarshal takes data's OutputChunk. The encoding a protobuf library
// writes (field 1 once, length-delimited, nothing else: what every
// OutputChunk on the wire is) is taken without a copy; anything else that
// is a valid OutputChunk is decoded by the protobuf library and copied.
func (c *Chunk) unmarshal(data mem.BufferSlice) error {
	c.Close()
	r := data.Reader()
	if r.Remaining() == 0 {
		r.Close()
		return nil
	}
	tag, err := readVarint(r)
	if err == nil && tag == uint64(protowire.EncodeTag(1, protowire.BytesType)) {
		var n uint64
		if n, err = readVarint(r); err == nil && n == uint64(r.Remaining()) {
			c.r = r
			return nil
		}
	}
	r.Close()
	var m pb.OutputChunk
	buf := data.MaterializeToBuffer(Pool)
	defer buf.Free()
	if err := proto.Unmarshal(buf.ReadOnlyData(), &m); err != nil {
		return err
	}
	c.r = mem.BufferSlice{mem.SliceBuffer(m.GetData())}.Reader()
	return nil
}

var errVarint = errors.New("wire: malformed varint")

func readVarint(r io.ByteReader) (uint64, error) {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		b, err := r.ReadByte()
		if err != nil {
			return 0, errVarint
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, errVarint
}

// Pool is the buffer pool of both sides' gRPC connections and of Codec: a
// pool by powers of two, from 256 B to 8 MiB, whose buffers are not
// cleared between uses. Every user of a pool buffer (frame reads, message
// encoding, Codec) writes what it reads, and the data never leaves this
// process, so clearing (grpc-go's default pool clears a whole buffer,
// 1 MiB for a 256 KiB message, on every Get) buys nothing.
var Pool mem.BufferPool = newPool()

const (
	poolMinShift = 8
	poolMaxShift = 23
)

type pool struct {
	tiers [poolMaxShift - poolMinShift + 1]sync.Pool
}

func newPool() *pool { return &pool{} }

// tier returns the index of the smallest tier holding size bytes, or -1.
func tier(size int) int {
	if size <= 1<<poolMinShift {
		return 0
	}
	shift := bits.Len(uint(size - 1))
	if shift > poolMaxShift {
		return -1
	}
	return shift - poolMinShift
}

func (p *pool) Get(size int) *[]byte {
	t := tier(size)
	if t < 0 {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<(t+poolMinShift))
	return &b
}

func (p *pool) Put(b *[]byte) {
	c := cap(*b)
	t := tier(c)
	if t < 0 || c != 1<<(t+poolMinShift) {
		// Not one of ours (a buffer of the fallback size): let it go.
		return
	}
	p.tiers[t].Put(b)
}

// DialOptions are the host's gRPC options for a plugin connection: message
// limits, flow-control windows, Pool and Codec.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize),
			grpc.ForceCodecV2(Codec{})),
		grpc.WithInitialWindowSize(StreamWindowSize), grpc.WithInitialConnWindowSize(ConnWindowSize),
		grpc.WithReadBufferSize(ReadBufferSize), grpc.WithWriteBufferSize(WriteBufferSize),
		experimental.WithBufferPool(Pool),
	}
}

// ServerOptions are the plugin's gRPC server options, the counterpart of
// DialOptions.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize),
		grpc.ForceServerCodecV2(Codec{}),
		grpc.InitialWindowSize(StreamWindowSize), grpc.InitialConnWindowSize(ConnWindowSize),
		grpc.ReadBufferSize(ReadBufferSize), grpc.WriteBufferSize(WriteBufferSize),
		experimental.BufferPool(Pool),
	}
}
