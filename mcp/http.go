package mcp

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPPath is where HTTPHandler serves the streamable HTTP transport.
const HTTPPath = "/mcp"

// minTokenLen rejects token files holding a guessable secret.
const minTokenLen = 16

// HTTPHandler returns the streamable HTTP transport for s, served at
// HTTPPath and guarded by token: a request without "Authorization: Bearer
// <token>", or with another token, gets 401. Serve it on a loopback
// address only (see CheckLoopback): the token is not a substitute for
// TLS.
func (s *Server) HTTPHandler(token string) (http.Handler, error) {
	if len(token) < minTokenLen {
		return nil, fmt.Errorf("mcp: bearer token too short: use at least %d characters", minTokenLen)
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp },
		&sdk.StreamableHTTPOptions{Logger: s.log})
	mux := http.NewServeMux()
	mux.Handle(HTTPPath, requireBearer(token, h))
	return mux, nil
}

// requireBearer lets through only requests carrying the token. Hashing
// both sides first makes the comparison constant-time whatever the length
// of the presented token.
func requireBearer(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		gotSum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !ok || subtle.ConstantTimeCompare(gotSum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <token> (the token corral mcp printed, or the content of --token-file)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// CheckLoopback accepts a listen address HOST:PORT whose host is a
// loopback IP or "localhost", and rejects anything else: the HTTP mode
// runs commands for whoever holds the token, so it must not be reachable
// from other machines.
func CheckLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: want HOST:PORT on loopback, e.g. 127.0.0.1:8765: %w", addr, err)
	}
	if port == "" {
		return fmt.Errorf("--http %q: missing port, e.g. 127.0.0.1:8765", addr)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--http %q: only loopback addresses are allowed (127.0.0.1, ::1 or localhost): the server runs commands for anyone holding the token", addr)
	}
	return nil
}

// NewToken returns a random bearer token (32 bytes, hex).
func NewToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("mcp: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// ReadTokenFile returns the token stored in path, surrounding whitespace
// removed.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < minTokenLen {
		return "", fmt.Errorf("--token-file %s: the token must be at least %d characters", path, minTokenLen)
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("--token-file %s: the token must be one word without whitespace", path)
	}
	return tok, nil
}
