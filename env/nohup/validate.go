package nohup

import (
	"regexp"
	"strings"
)

var (
	// idPattern is the name of a per-process state directory: 32 lower-case
	// hex digits from crypto/rand.
	idPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)
	// safePathPattern is what BaseDir and Shell may contain: an absolute path
	// of portable characters, so that they are harmless even unquoted.
	safePathPattern = regexp.MustCompile(`^/[A-Za-z0-9._/-]*$`)
)

// validSafePath reports whether p is an absolute path of portable
// characters without "." or ".." elements.
func validSafePath(p string) bool {
	if !safePathPattern.MatchString(p) {
		return false
	}
	for _, el := range strings.Split(p, "/") {
		if el == "." || el == ".." {
			return false
		}
	}
	return true
}
