//go:build !linux

package local

import "os"

// inputTarget: input waits are read from /proc, which only Linux has;
// elsewhere Env does not implement env.InputWatcher.
type inputTarget struct{}

// inputCache keeps the last look, which only Linux takes.
type inputCache struct{}

func (*inputCache) close() {}

func ptyTarget(*os.File) inputTarget  { return inputTarget{} }
func pipeTarget(*os.File) inputTarget { return inputTarget{} }
