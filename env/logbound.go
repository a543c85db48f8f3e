package env

import (
	"fmt"
	"os"
	"strings"
)

// The output log a backend keeps on disk for a detached process (env/local's
// shim, env/nohup's sandboxes) is bounded: once it grows past LogMax bytes,
// its middle is dropped and only its first quarter (the head) and its last
// three quarters (the tail) stay on disk. The log's size and every byte
// offset stay what they were: the middle becomes a hole (fallocate
// FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE), so a reader by offset keeps
// working, and reads zeros where bytes were dropped. The backend records
// the dropped range beside the log (the file "omitted": "START END", bytes
// [START, END) of the log), and drops only bytes its own output stream
// already delivered, so the stream a supervisor follows never reads the
// hole. A reader that re-reads the log from its start later (a supervisor
// restarted) reads zeros in that range; the registry keeps a head and a
// tail smaller than the log's (64 KiB and 1 MiB by default), so those
// zeros fall in the part of the output it omits anyway.
//
// A filesystem or a sandbox that cannot punch holes (a sandbox without
// util-linux fallocate, such as a busybox or alpine image) keeps the whole
// log; the backend's doc says so.

// DefaultLogMax is the most of a process's output kept on disk by default.
const DefaultLogMax = 32 << 20

// MinLogMax is the smallest bound: its head and tail still hold more than
// the registry's own output buffer keeps.
const MinLogMax = 4 << 20

// LogKeep returns the head and the tail kept of a log bounded to max
// bytes (see DefaultLogMax); 0, 0 for max < 0 (no bound). A max under
// MinLogMax counts as MinLogMax, 0 as DefaultLogMax.
func LogKeep(max int64) (head, tail int64) {
	switch {
	case max < 0:
		return 0, 0
	case max == 0:
		max = DefaultLogMax
	case max < MinLogMax:
		max = MinLogMax
	}
	head = max / 4
	return head, max - head
}

// ParseLogMax reads a log bound as people write it: bytes ("33554432"),
// or with a binary unit ("32MiB", "32M", "1GiB", "512KiB"), "0" for the
// default, "none" or "-1" for no bound.
func ParseLogMax(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	if t == "none" || t == "-1" {
		return -1, nil
	}
	n, err := parseBytes(t)
	if err != nil || n < 0 || n > 1<<50 { // negative: a size past int64
		return 0, fmt.Errorf("log bound %q: give a size such as 32MiB or 1GiB, 0 for the default (%d MiB) or none", s, DefaultLogMax>>20)
	}
	return n, nil
}

// LogMaxFromEnv is $CORRAL_LOG_MAX (see ParseLogMax), 0 when unset; an
// error for a value that does not parse.
func LogMaxFromEnv() (int64, error) {
	v := os.Getenv("CORRAL_LOG_MAX")
	if v == "" {
		return 0, nil
	}
	n, err := ParseLogMax(v)
	if err != nil {
		return 0, fmt.Errorf("CORRAL_LOG_MAX: %w", err)
	}
	return n, nil
}
