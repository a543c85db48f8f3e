package winsh

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	got, err := Parse(`echo hello; exit 3` + "\n" + `spawn 'pid C:\t\x; sleep 1'  ;; echo "a  b" '' x`)
	require.NoError(t, err)
	require.Equal(t, [][]string{
		{"echo", "hello"}, {"exit", "3"},
		{"spawn", `pid C:\t\x; sleep 1`},
		{"echo", "a  b", "", "x"},
	}, got)
	_, err = Parse(`echo 'open`)
	require.ErrorContains(t, err, "unterminated ' quote")
}

func TestRun(t *testing.T) {
	cases := []struct {
		line, stdin, out, errOut string
		status                   int
	}{
		{"echo hello; exit 3", "", "hello\n", "", 3},
		{"exit 300", "", "", "", 300 & 0xff},
		{"nosuch; exit", "", "", "sh: nosuch: not found\n", 127},
		{"cat; echo done", "in\n", "in\ndone\n", "", 0},
		{"sleep 0.01; echo 'a;b'", "", "a;b\n", "", 0},
		{"echo 'x", "", "", "sh: unterminated ' quote\n", 2},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		status := Run(c.line, strings.NewReader(c.stdin), &out, &errOut)
		require.Equal(t, c.status, status, c.line)
		require.Equal(t, c.out, out.String(), c.line)
		require.Equal(t, c.errOut, errOut.String(), c.line)
	}
}

func TestStartedAsShell(t *testing.T) {
	for arg0, want := range map[string]bool{
		`C:\tmp\x\sh.exe`: true, `C:\tmp\x\SH.EXE`: true, "/usr/bin/sh": true, "sh": true,
		`C:\tmp\x\corral.test.exe`: false, "bash": false,
	} {
		require.Equal(t, want, startedAsShell([]string{arg0}), arg0)
	}
	require.False(t, startedAsShell(nil))
}

func TestRemoveTree(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "t")
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "a", "b", "f"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "g"), []byte("x"), 0o644))
	require.NoError(t, RemoveTree(tree))
	require.NoDirExists(t, tree)
	require.NoError(t, RemoveTree(tree), "a tree already gone is no error")
}
