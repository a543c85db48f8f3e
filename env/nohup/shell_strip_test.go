package nohup

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shFiles are the embedded scripts by file name.
func shFiles() map[string]string {
	return map[string]string{
		"proc.sh": procSh, "state.sh": stateSh, "launch.sh": launchSh, "spares.sh": sparesSh,
		"poll.sh": pollSh, "parent.sh": parentSh, "command.sh": commandSh, "write.sh": writeSh,
		"pty.sh": ptySh, "ptycmd.sh": ptyCmdSh, "ptyterm.sh": ptyTermSh, "tagged.sh": taggedSh, "stats.sh": statsSh,
	}
}

func TestStripComments(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"a\n", "a\n"},
		{"# c\na\n", "a\n"},
		{"#!/bin/sh\n# shellcheck shell=sh\na\n", "a\n"},
		{"\t# indented\n\ta\n", "\ta\n"},
		{"a\n\n \t\nb\n", "a\nb\n"},
		{"a # kept: after code\n", "a # kept: after code\n"},
		{"echo '#'\n${#x}\n", "echo '#'\n${#x}\n"},
		{"a\n# no newline", "a\n"},
		{"a", "a"},
	} {
		assert.Equal(t, tc.want, stripComments(tc.in), "stripComments(%q)", tc.in)
	}
}

// TestStripKeepsEveryCommand checks that stripping removes only comments:
// bash parses each file, stripped and not, as the body of a function and
// prints it back (declare -f prints no comments), and the two must be the
// same. A multi-line quoted string with a line starting with # would differ.
func TestStripKeepsEveryCommand(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skipf("bash not available on this machine: %v", err)
	}
	for name, text := range shFiles() {
		t.Run(name, func(t *testing.T) {
			norm := func(s string) string {
				out, err := exec.Command(bash, "-c", `eval "corral_file() {
$1
}" && declare -f corral_file`, "bash", s).CombinedOutput()
				require.NoError(t, err, "%s", out)
				return string(out)
			}
			stripped := stripComments(text)
			assert.Less(t, len(stripped), len(text), "%s has no comments", name)
			assert.Equal(t, norm(text), norm(stripped))
		})
	}
}

// TestLibDefinesEveryFunction loads the stripped lib under each shell and
// checks that every function of the files is defined and that the parent's
// script and the armed command parse.
func TestLibDefinesEveryFunction(t *testing.T) {
	full := assembleLib(func(s string) string { return s })
	t.Logf("lib: %d bytes with comments, %d sent", len(full), len(lib))
	require.Less(t, len(lib), len(full))

	def := regexp.MustCompile(`(?m)^([a-z_]+)\(\) \{`)
	var fns []string
	for _, text := range []string{procSh, stateSh, launchSh, sparesSh, pollSh, statsSh} {
		for _, m := range def.FindAllStringSubmatch(text, -1) {
			fns = append(fns, m[1])
		}
	}
	require.Contains(t, fns, "corral_launch")
	require.Contains(t, fns, "corral_arm")
	require.Contains(t, fns, "corral_treestats")
	forTestShells(t, func(t *testing.T, sh testShell) {
		out := sh.run(t, lib+`
for f in `+strings.Join(fns, " ")+`; do
	type "$f" | grep -q function || { echo "$f: not a function"; exit 1; }
done
( eval "corral_p() {
$corral_parent
}" ) || exit 2
echo ok
`)
		assert.Equal(t, "ok\n", out)
		// C is a multi-line quoted word: look at it through the parent.
		out = sh.run(t, parentBody[:strings.Index(parentBody, "\nd=$1 sh=$2 ss=$3 ")]+`
( eval "corral_c() {
$C
}" ) || exit 3
type pstat wstatus >/dev/null || exit 4
echo ok
`)
		assert.Equal(t, "ok\n", out)
	})
}
