//go:build !linux

package procnet

import (
	"errors"
	"fmt"
)

var errNoProc = fmt.Errorf("procnet: socket tables are read from Linux's /proc: %w", errors.ErrUnsupported)

// Listening needs Linux.
func Listening(int) ([]Socket, error) { return nil, errNoProc }

// NetNS needs Linux.
func NetNS(int) (string, error) { return "", errNoProc }

// SocketInodes finds no holder without Linux.
func SocketInodes([]int, map[uint64]bool) map[uint64]int { return map[uint64]int{} }

// AllSocketInodes needs Linux.
func AllSocketInodes(map[uint64]bool) (map[uint64]int, error) { return nil, errNoProc }

// Command cannot read a command line without Linux.
func Command(int) string { return "" }
