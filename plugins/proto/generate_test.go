package proto

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGeneratedCodeIsFresh regenerates backend.proto into a temporary
// directory and fails when the committed code differs: run
// `go generate ./plugins/proto` after editing the .proto. It needs protoc
// (Debian: protobuf-compiler); without it the test skips, except in CI.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		require.True(t, os.Getenv("CI") == "", "protoc not found: apt-get install -y protobuf-compiler")
		t.Skip("protoc not found (apt-get install -y protobuf-compiler)")
	}
	tool := func(name string) string {
		out, err := exec.Command("go", "tool", "-n", name).Output()
		require.NoErrorf(t, err, "go tool -n %s", name)
		return string(bytes.TrimSpace(out))
	}
	dir := t.TempDir()
	cmd := exec.Command("protoc",
		"--plugin=protoc-gen-go="+tool("protoc-gen-go"),
		"--plugin=protoc-gen-go-grpc="+tool("protoc-gen-go-grpc"),
		"--go_out="+dir, "--go_opt=paths=source_relative",
		"--go-grpc_out="+dir, "--go-grpc_opt=paths=source_relative",
		"backend.proto")
	if out, err := cmd.CombinedOutput(); err != nil {
		require.FailNow(t, fmt.Sprintf("protoc: %v\n%s", err, out))
	}
	for _, name := range []string{"backend.pb.go", "backend_grpc.pb.go"} {
		fresh, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		committed, err := os.ReadFile(name)
		require.NoError(t, err)
		assert.Truef(t, bytes.Equal(fresh, committed), "%s is stale: run go generate ./plugins/proto and commit the result", name)
	}
}
