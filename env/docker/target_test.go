package docker

import (
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
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
			t.Errorf("ParseTarget(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseTarget(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		// The canonical form parses back to the same target.
		again, err := ParseTarget(got.String())
		if err != nil || again != got {
			t.Errorf("ParseTarget(%q.String() = %q) = %+v, %v; want %+v", tt.in, got.String(), again, err, got)
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
			t.Errorf("ParseTarget(%q) succeeded, want an error", tt.in)
			continue
		}
		if !strings.Contains(err.Error(), tt.mentions) {
			t.Errorf("ParseTarget(%q) error %q does not mention %q", tt.in, err, tt.mentions)
		}
	}
}

func TestTargetCanonicalForm(t *testing.T) {
	a, _ := ParseTarget("docker-image://alpine?pids=64&network=none")
	b, _ := ParseTarget("docker-image://alpine?network=none&pids=64")
	if a.String() != b.String() || a.String() != "docker-image://alpine?network=none&pids=64" {
		t.Errorf("canonical forms %q and %q differ or are not ordered", a, b)
	}
	if a.configHash() != b.configHash() {
		t.Error("the same options in another order give another config hash")
	}
	// name and persist do not change what the sandbox is.
	c, _ := ParseTarget("docker-image://alpine?network=none&pids=64&persist=true&name=x")
	if c.configHash() != a.configHash() {
		t.Error("name/persist changed the config hash")
	}
	d, _ := ParseTarget("docker-image://alpine?network=none&pids=65")
	if d.configHash() == a.configHash() {
		t.Error("a different pids limit gives the same config hash")
	}
}

func TestContainerName(t *testing.T) {
	a, _ := ParseTarget("docker-image://alpine")
	b, _ := ParseTarget("docker-image://alpine")
	if a.containerName("0@h") != b.containerName("0@h") {
		t.Error("the derived name is not stable")
	}
	if a.containerName("0@h") == a.containerName("1000@h") {
		t.Error("two owners get the same sandbox name")
	}
	if !containerNamePattern.MatchString(a.containerName("0@h")) {
		t.Errorf("derived name %q is not a valid container name", a.containerName("0@h"))
	}
	named, _ := ParseTarget("docker-image://alpine?name=mybox")
	if named.containerName("0@h") != "mybox" {
		t.Errorf("name= ignored: %q", named.containerName("0@h"))
	}
}

func TestSandboxConfigHardening(t *testing.T) {
	tg, err := ParseTarget("docker-image://alpine")
	if err != nil {
		t.Fatal(err)
	}
	cfg, host := sandboxConfig(tg, "corral-x", "0@h", 2)
	if host.Init == nil || !*host.Init {
		t.Error("no init process as PID 1")
	}
	if !slices.Equal(host.CapDrop, []string{"ALL"}) {
		t.Errorf("CapDrop = %v, want [ALL]", host.CapDrop)
	}
	if !slices.Equal(host.CapAdd, []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"}) {
		t.Errorf("CapAdd = %v", host.CapAdd)
	}
	if !slices.Contains(host.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("SecurityOpt = %v, want no-new-privileges", host.SecurityOpt)
	}
	if host.PidsLimit == nil || *host.PidsLimit != DefaultPidsLimit {
		t.Errorf("PidsLimit = %v, want %d", host.PidsLimit, DefaultPidsLimit)
	}
	if host.Memory != DefaultMemory || host.MemorySwap != DefaultMemory {
		t.Errorf("Memory/MemorySwap = %d/%d, want %d both", host.Memory, host.MemorySwap, DefaultMemory)
	}
	if host.NanoCPUs != 2e9 {
		t.Errorf("NanoCPUs = %d, want 2e9", host.NanoCPUs)
	}
	if _, ok := host.Tmpfs["/tmp"]; !ok {
		t.Error("no tmpfs on /tmp")
	}
	if host.ReadonlyRootfs || host.NetworkMode != "" || len(host.Mounts) != 0 {
		t.Errorf("defaults changed: readonly=%v network=%q mounts=%v", host.ReadonlyRootfs, host.NetworkMode, host.Mounts)
	}
	if cfg.Labels[LabelManaged] != "true" || cfg.Labels[LabelOwner] != "0@h" || cfg.Labels[LabelConfig] != tg.configHash() || cfg.Labels[LabelPersist] != "false" {
		t.Errorf("labels = %v", cfg.Labels)
	}

	tg, _ = ParseTarget("docker-image://alpine?network=none&readonly=true&workspace=/src&user=1000&memory=1g&cpus=0.5&pids=64&persist=true")
	cfg, host = sandboxConfig(tg, "corral-x", "0@h", 0.5)
	if host.NetworkMode != container.NetworkMode("none") || !host.ReadonlyRootfs || cfg.User != "1000" ||
		host.Memory != 1<<30 || host.NanoCPUs != 5e8 || *host.PidsLimit != 64 || cfg.Labels[LabelPersist] != "true" {
		t.Errorf("options not applied: config %+v host %+v", cfg, host)
	}
	if len(host.Mounts) != 1 || host.Mounts[0].Source != "/src" || host.Mounts[0].Target != "/workspace" || cfg.WorkingDir != "/workspace" {
		t.Errorf("workspace mount = %+v, workdir %q", host.Mounts, cfg.WorkingDir)
	}
}
