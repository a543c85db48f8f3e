package local

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/env"
)

// commandFD is the descriptor on which a command longer than
// env.InlineCommandMax reaches the shell of a non-detached process.
const commandFD = 3

// memCommand returns a memory file holding command for a command longer
// than env.InlineCommandMax (nil for a shorter one): the shell runs it as
// `. /dev/fd/3`, with the file on descriptor 3 (Cmd.ExtraFiles[0]).
// Opening /dev/fd/3 opens the memory file anew, so the file's first line
// can close descriptor 3 before the command runs: the command and its
// children never inherit it. The file lives as long as a descriptor on it.
func memCommand(command string) (*os.File, error) {
	if len(command) <= env.InlineCommandMax {
		return nil, nil
	}
	fd, err := unix.MemfdCreate("corral-command", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memory file for a %d-byte command: %w", len(command), err)
	}
	f := os.NewFile(uintptr(fd), "corral-command")
	_, err = fmt.Fprintf(f, "exec %d<&-\n", commandFD)
	if err == nil {
		_, err = f.WriteString(command)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("memory file for a %d-byte command: %w", len(command), err)
	}
	return f, nil
}

// memCommandArg is the -c argument that runs a command from memCommand.
var memCommandArg = fmt.Sprintf(". /dev/fd/%d", commandFD)
