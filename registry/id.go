package registry

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
)

const (
	idPrefix    = "proc_"
	idHexLen    = 12
	minPrefix   = 4
	idFormMsg   = `expected "proc_" followed by 12 lowercase hex digits (e.g. proc_0123456789ab), or a unique prefix of at least 4 of those digits`
	idMaxLength = len(idPrefix) + idHexLen
)

// newID returns a fresh random process ID.
func newID() string {
	var b [idHexLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms.
		panic(fmt.Sprintf("registry: crypto/rand: %v", err))
	}
	return idPrefix + hex.EncodeToString(b[:])
}

// ValidID reports whether id is a full process ID.
func ValidID(id string) bool {
	h, ok := strings.CutPrefix(id, idPrefix)
	return ok && len(h) == idHexLen && isLowerHex(h)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// parseIDArg validates a full ID or a prefix and returns its hex digits and
// whether they form a full ID.
func parseIDArg(arg string) (hexDigits string, full bool, err error) {
	h := strings.TrimPrefix(arg, idPrefix)
	if len(h) < minPrefix || len(h) > idHexLen || !isLowerHex(h) {
		return "", false, fmt.Errorf("%w %q: %s", ErrInvalidID, truncate(arg, 40), idFormMsg)
	}
	return h, len(h) == idHexLen, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
