package docker

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/corralhq/corral/env"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in   string
		want Target
	}{
		{"docker://web-1", Target{Container: "web-1"}},
		{"docker://c0ffee1234ab", Target{Container: "c0ffee1234ab"}},
		{"docker-image://corral-test-busybox:latest", Target{Image: "corral-test-busybox:latest"}},
		{"docker-image://registry.example:5000/team/img@sha256:" + strings.Repeat("a", 64), Target{Image: "registry.example:5000/team/img@sha256:" + strings.Repeat("a", 64)}},
		{"docker-image://alpine?network=none&readonly=true&workspace=/home/me/src&user=1000:1000&memory=512m&cpus=1.5&pids=100&persist=true&name=box_1",
			Target{Image: "alpine", Sandbox: SandboxOptions{
				Network: "none", ReadOnly: true, Workspace: "/home/me/src", User: "1000:1000",
				Memory: 512 << 20, CPUs: 1.5, Pids: 100, Persist: true, Name: "box_1",
			}}},
		{"docker-image://alpine?readonly=false&user=0", Target{Image: "alpine", Sandbox: SandboxOptions{User: "0"}}},
	}
	for _, tt := range tests {
		got, err := ParseTarget(tt.in)
		if err != nil {
			assert.Fail(t, fmt.Sprintf("ParseTarget(%q): %v", tt.in, err))
			continue
		}
		assert.Truef(t, got == tt.want, "ParseTarget(%q) = %+v, want %+v", tt.in, got, tt.want)
		// The canonical form parses back to the same target.
		again, err := ParseTarget(got.String())
		if err != nil || again != got {
			assert.Fail(t, fmt.Sprintf("ParseTarget(%q.String() = %q) = %+v, %v; want %+v", tt.in, got.String(), again, err, got))
		}
	}
}

func TestParseTargetRejects(t *testing.T) {
	tests := []struct {
		in       string
		mentions string // what the error must name so the user can fix it
	}{
		{"web-1", "unknown scheme"},
		{"ssh://host", "unknown scheme"},
		{"docker://", "empty container name"},
		{"docker://-bad", "invalid container name"},
		{"docker://a;rm -rf /", "invalid container name"},
		{"docker://a b", "invalid container name"},
		{"docker-image://", "no image"},
		{"docker-image://UPPER:case", "invalid image reference"},
		{"docker-image://img with space", "invalid image reference"},
		{"docker-image://alpine?bogus=1", `unknown option "bogus"`},
		{"docker-image://alpine?network=host", "network"},
		{"docker-image://alpine?readonly=maybe", "readonly"},
		{"docker-image://alpine?workspace=relative/path", "workspace"},
		{"docker-image://alpine?workspace=/a/../b", "workspace"},
		{"docker-image://alpine?user=root", "user"},
		{"docker-image://alpine?user=1000:", "user"},
		{"docker-image://alpine?memory=lots", "memory"},
		{"docker-image://alpine?memory=1k", "memory"},
		{"docker-image://alpine?cpus=0", "cpus"},
		{"docker-image://alpine?cpus=abc", "cpus"},
		{"docker-image://alpine?pids=-1", "pids"},
		{"docker-image://alpine?pids=2", "pids"},
		{"docker-image://alpine?name=$(id)", "name"},
		{"docker-image://alpine?persist=true&persist=false", "2 times"},
		{"docker-image://alpine?%zz", "options"},
	}
	for _, tt := range tests {
		_, err := ParseTarget(tt.in)
		if err == nil {
			assert.Fail(t, fmt.Sprintf("ParseTarget(%q) succeeded, want an error", tt.in))
			continue
		}
		assert.Truef(t, strings.Contains(err.Error(), tt.mentions), "ParseTarget(%q) error %q does not mention %q", tt.in, err, tt.mentions)
	}
}

func TestTargetCanonicalForm(t *testing.T) {
	a, _ := ParseTarget("docker-image://alpine?pids=64&network=none")
	b, _ := ParseTarget("docker-image://alpine?network=none&pids=64")
	assert.Truef(t, a.String() == b.String() && a.String() == "docker-image://alpine?network=none&pids=64", "canonical forms %q and %q differ or are not ordered", a, b)
	assert.True(t, a.configHash() == b.configHash(), "the same options in another order give another config hash")
	// name and persist do not change what the sandbox is.
	c, _ := ParseTarget("docker-image://alpine?network=none&pids=64&persist=true&name=x")
	assert.True(t, c.configHash() == a.configHash(), "name/persist changed the config hash")
	d, _ := ParseTarget("docker-image://alpine?network=none&pids=65")
	assert.True(t, d.configHash() != a.configHash(), "a different pids limit gives the same config hash")
}

func TestContainerName(t *testing.T) {
	a, _ := ParseTarget("docker-image://alpine")
	b, _ := ParseTarget("docker-image://alpine")
	assert.True(t, a.containerName("0@h") == b.containerName("0@h"), "the derived name is not stable")
	assert.True(t, a.containerName("0@h") != a.containerName("1000@h"), "two owners get the same sandbox name")
	if !containerNamePattern.MatchString(a.containerName("0@h")) {
		assert.Fail(t, fmt.Sprintf("derived name %q is not a valid container name", a.containerName("0@h")))
	}
	named, _ := ParseTarget("docker-image://alpine?name=mybox")
	if named.containerName("0@h") != "mybox" {
		assert.Fail(t, fmt.Sprintf("name= ignored: %q", named.containerName("0@h")))
	}
}

func TestSandboxConfigHardening(t *testing.T) {
	tg, err := ParseTarget("docker-image://alpine")
	require.NoError(t, err)
	cfg, host := sandboxConfig(tg, "corral-x", "0@h", 2)
	assert.True(t, host.Init != nil && *host.Init, "no init process as PID 1")
	assert.Truef(t, slices.Equal(host.CapDrop, []string{"ALL"}), "CapDrop = %v, want [ALL]", host.CapDrop)
	assert.Truef(t, slices.Equal(host.CapAdd, []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"}), "CapAdd = %v", host.CapAdd)
	assert.Truef(t, slices.Contains(host.SecurityOpt, "no-new-privileges:true"), "SecurityOpt = %v, want no-new-privileges", host.SecurityOpt)
	assert.Truef(t, host.PidsLimit != nil && *host.PidsLimit == DefaultPidsLimit, "PidsLimit = %v, want %d", host.PidsLimit, DefaultPidsLimit)
	assert.Truef(t, host.Memory == DefaultMemory && host.MemorySwap == DefaultMemory, "Memory/MemorySwap = %d/%d, want %d both", host.Memory, host.MemorySwap, DefaultMemory)
	assert.Truef(t, host.NanoCPUs == 2e9, "NanoCPUs = %d, want 2e9", host.NanoCPUs)
	_, ok := host.Tmpfs["/tmp"]
	assert.True(t, ok, "no tmpfs on /tmp")
	assert.Truef(t, !host.ReadonlyRootfs && host.NetworkMode == "" && len(host.Mounts) == 0, "defaults changed: readonly=%v network=%q mounts=%v", host.ReadonlyRootfs, host.NetworkMode, host.Mounts)
	assert.Truef(t, cfg.Labels[LabelManaged] == "true" && cfg.Labels[LabelOwner] == "0@h" && cfg.Labels[LabelConfig] == tg.configHash() && cfg.Labels[LabelPersist] == "false", "labels = %v", cfg.Labels)

	tg, _ = ParseTarget("docker-image://alpine?network=none&readonly=true&workspace=/src&user=1000&memory=1g&cpus=0.5&pids=64&persist=true")
	cfg, host = sandboxConfig(tg, "corral-x", "0@h", 0.5)
	assert.Truef(t, host.NetworkMode == container.NetworkMode("none") && host.ReadonlyRootfs && cfg.User == "1000" && host.Memory == 1<<30 && host.NanoCPUs == 5e8 && *host.PidsLimit == 64 && cfg.Labels[LabelPersist] == "true", "options not applied: config %+v host %+v", cfg, host)
	assert.Truef(t, len(host.Mounts) == 1 && host.Mounts[0].Source == "/src" && host.Mounts[0].Target == "/workspace" && cfg.WorkingDir == "/workspace", "workspace mount = %+v, workdir %q", host.Mounts, cfg.WorkingDir)
}

// TestSandboxLimits: a docker-image:// sandbox states the limits it runs
// under, defaults included, so an OOM kill in it names its memory limit.
func TestSandboxLimits(t *testing.T) {
	tg, err := ParseTarget("docker-image://busybox?memory=256m&cpus=1.5")
	if err != nil {
		t.Fatal(err)
	}
	if got := *tg.sandboxLimits(); got != (env.Limits{Memory: 256 << 20, CPUs: 1.5, Pids: DefaultPidsLimit}) {
		t.Errorf("sandboxLimits = %+v", got)
	}
	tg, err = ParseTarget("docker-image://busybox")
	if err != nil {
		t.Fatal(err)
	}
	if got := tg.sandboxLimits(); got.Memory != DefaultMemory || got.CPUs != 0 {
		t.Errorf("default sandboxLimits = %+v, want memory %d and no CPUs (the engine's count decides)", *got, DefaultMemory)
	}
}
