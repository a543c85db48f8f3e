package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/registry"
)

// TestRunFrames: a run asked for with Accept: FramesType comes back as
// frames, the output as its very bytes (every byte value, newlines
// included) at their offsets, between started and end; asked for without
// it, as SSE, as before.
func TestRunFrames(t *testing.T) {
	_, paths := startDaemon(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", paths.Socket)
	}}}
	defer hc.CloseIdleConnections()
	ask := func(accept string) *http.Response {
		body := `{"command":"printf '\\000\\001\\n\\377 x'; exit 5"}`
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://corral"+APIVersion+"/run", strings.NewReader(body))
		require.NoError(t, err)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp
	}

	resp := ask(FramesType)
	require.Equal(t, FramesType, resp.Header.Get("Content-Type"))
	var (
		events []string
		out    bytes.Buffer
		end    RunEnd
	)
	require.NoError(t, readFrames(resp.Body, func(event string, data []byte) (bool, error) {
		events = append(events, event)
		switch event {
		case "output.raw":
			assert.Equal(t, uint64(out.Len()), binary.BigEndian.Uint64(data), "the offset of the chunk")
			out.Write(data[8:])
		case "end":
			return false, json.Unmarshal(data, &end)
		}
		return true, nil
	}))
	assert.Equal(t, "started", events[0])
	assert.Equal(t, "end", events[len(events)-1])
	assert.Equal(t, "\x00\x01\n\xff x", out.String())
	require.NotNil(t, end.Status)
	assert.Equal(t, 5, end.Status.Code)
	assert.Equal(t, registry.StateExited, end.State)

	resp = ask("")
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(b), "event: end\n")
}

// TestReadFrames: a kind this client does not know is skipped; a frame
// longer than any the daemon writes, an output frame without its offset
// and a stream cut inside a frame are errors, never a hang or a huge
// allocation.
func TestReadFrames(t *testing.T) {
	frame := func(kind byte, payload string) string {
		var h [5]byte
		h[0] = kind
		binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
		return string(h[:]) + payload
	}
	var got []string
	on := func(event string, data []byte) (bool, error) {
		got = append(got, event+"="+string(data))
		return true, nil
	}
	off := string(make([]byte, 8))
	require.NoError(t, readFrames(strings.NewReader(frame('s', "{}")+frame('z', "later")+frame('o', off+"hi")+frame('e', "{}")), on))
	assert.Equal(t, []string{"started={}", "output.raw=" + off + "hi", "end={}"}, got)

	assert.ErrorIs(t, readFrames(strings.NewReader("o\xff\xff\xff\xff"), on), errBadFrame)
	assert.ErrorIs(t, readFrames(strings.NewReader(frame('o', "short")), on), errBadFrame)
	assert.ErrorIs(t, readFrames(strings.NewReader(frame('e', "{}")[:6]), on), io.ErrUnexpectedEOF)
}
