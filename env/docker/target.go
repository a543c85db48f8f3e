package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	units "github.com/docker/go-units"
)

// Target schemes accepted by Open and ParseTarget.
const (
	SchemeContainer = "docker://"
	SchemeImage     = "docker-image://"
)

// Defaults of a sandbox created from an image (see the package doc).
const (
	DefaultMemory    = 2 << 30 // bytes
	DefaultCPUs      = 2.0
	DefaultPidsLimit = 512
	DefaultTmpfsSize = "512m"
)

// Target is a parsed backend target: either an existing container
// (docker://NAME) or a sandbox to create from an image
// (docker-image://IMAGE?options). Exactly one of Container and Image is set.
type Target struct {
	// Container is the name or ID of an existing container.
	Container string
	// Image is the image reference a sandbox container is created from.
	Image string
	// Sandbox holds the sandbox options; meaningful only with Image.
	Sandbox SandboxOptions
}

// SandboxOptions are the query options of a docker-image:// target. The zero
// value of each field means "the hardened default".
type SandboxOptions struct {
	// Network is "" (the engine's default bridge), "bridge" or "none".
	Network string
	// ReadOnly mounts the image's root filesystem read-only (/tmp stays a
	// writable tmpfs).
	ReadOnly bool
	// Workspace is an absolute host path bind-mounted at /workspace, which
	// then is the default working directory.
	Workspace string
	// User is UID or UID:GID to run the container's processes as.
	User string
	// Memory is the memory limit in bytes (swap included); 0 means
	// DefaultMemory.
	Memory int64
	// CPUs is the CPU limit; 0 means DefaultCPUs, capped at the engine's
	// CPU count.
	CPUs float64
	// Pids is the pids limit; 0 means DefaultPidsLimit.
	Pids int64
	// Persist keeps the container when the Environment is closed.
	Persist bool
	// Shared makes the sandbox this user's rather than the supervisor's:
	// its owner is DefaultOwner() (uid@hostname) whatever Options.Owner
	// says, so every supervisor of the user that opens the target with
	// shared=true uses the one container, and Close leaves it running
	// (another may still use it); stopping it deletes it unless Persist.
	Shared bool
	// Name is the container's name; empty means a name derived from the
	// owner and the target, so the same supervisor finds its sandbox again.
	Name string
}

var (
	// containerNamePattern is Docker's own rule for container names; IDs
	// (hex) match it too.
	containerNamePattern = regexp.MustCompile(`^/?[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)
	userPattern          = regexp.MustCompile(`^[0-9]{1,10}(:[0-9]{1,10})?$`)
)

// ParseTarget parses and validates a docker:// or docker-image:// target.
// Errors say which part is wrong and what is accepted.
func ParseTarget(target string) (Target, error) {
	switch {
	case strings.HasPrefix(target, SchemeContainer):
		name := strings.TrimPrefix(target, SchemeContainer)
		if err := validContainerName(name); err != nil {
			return Target{}, fmt.Errorf("docker: target %q: %w", target, err)
		}
		return Target{Container: strings.TrimPrefix(name, "/")}, nil
	case strings.HasPrefix(target, SchemeImage):
		rest := strings.TrimPrefix(target, SchemeImage)
		image, query, _ := strings.Cut(rest, "?")
		if image == "" {
			return Target{}, fmt.Errorf("docker: target %q: no image; write docker-image://IMAGE[?options], e.g. docker-image://corral-test-busybox:latest", target)
		}
		if _, err := reference.ParseAnyReference(image); err != nil || strings.ContainsAny(image, " \t\n") {
			return Target{}, fmt.Errorf("docker: target %q: invalid image reference %q", target, image)
		}
		opts, err := parseSandboxOptions(query)
		if err != nil {
			return Target{}, fmt.Errorf("docker: target %q: %w", target, err)
		}
		return Target{Image: image, Sandbox: opts}, nil
	default:
		return Target{}, fmt.Errorf("docker: target %q: unknown scheme; use %sNAME (an existing container) or %sIMAGE?options (a sandbox)", target, SchemeContainer, SchemeImage)
	}
}

func validContainerName(name string) error {
	if name == "" {
		return fmt.Errorf("empty container name")
	}
	if !containerNamePattern.MatchString(name) {
		return fmt.Errorf("invalid container name %q: must match [a-zA-Z0-9][a-zA-Z0-9_.-]*", name)
	}
	return nil
}

// knownOptions lists the query options of docker-image:// targets, in the
// order String writes them.
var knownOptions = []string{"network", "readonly", "workspace", "user", "memory", "cpus", "pids", "persist", "shared", "name"}

func parseSandboxOptions(query string) (SandboxOptions, error) {
	var o SandboxOptions
	if query == "" {
		return o, nil
	}
	values, err := url.ParseQuery(query)
	if err != nil {
		return o, fmt.Errorf("options %q: %w", query, err)
	}
	for key, vals := range values {
		if !slices.Contains(knownOptions, key) {
			return o, fmt.Errorf("unknown option %q; known options: %s", key, strings.Join(knownOptions, ", "))
		}
		if len(vals) != 1 {
			return o, fmt.Errorf("option %q given %d times", key, len(vals))
		}
		v := vals[0]
		switch key {
		case "network":
			if v != "none" && v != "bridge" {
				return o, fmt.Errorf("option network=%q: use none (no network) or bridge", v)
			}
			o.Network = v
		case "readonly":
			o.ReadOnly, err = parseBool(key, v)
		case "persist":
			o.Persist, err = parseBool(key, v)
		case "shared":
			o.Shared, err = parseBool(key, v)
		case "workspace":
			if !path.IsAbs(v) || path.Clean(v) != v || strings.ContainsAny(v, "\x00,") {
				return o, fmt.Errorf("option workspace=%q: must be a clean absolute host path without commas", v)
			}
			o.Workspace = v
		case "user":
			if !userPattern.MatchString(v) {
				return o, fmt.Errorf("option user=%q: must be UID or UID:GID (numbers)", v)
			}
			o.User = v
		case "memory":
			n, perr := units.RAMInBytes(v)
			if perr != nil || n < 6<<20 {
				return o, fmt.Errorf("option memory=%q: must be a size of at least 6m, e.g. 512m or 2g", v)
			}
			o.Memory = n
		case "cpus":
			f, perr := strconv.ParseFloat(v, 64)
			if perr != nil || f < 0.01 || f > 1024 {
				return o, fmt.Errorf("option cpus=%q: must be a number between 0.01 and 1024, e.g. 1.5", v)
			}
			o.CPUs = f
		case "pids":
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n < 8 || n > 1<<22 {
				return o, fmt.Errorf("option pids=%q: must be a whole number of at least 8", v)
			}
			o.Pids = n
		case "name":
			if err := validContainerName(v); err != nil || strings.HasPrefix(v, "/") {
				return o, fmt.Errorf("option name=%q: must match [a-zA-Z0-9][a-zA-Z0-9_.-]*", v)
			}
			o.Name = v
		}
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

func parseBool(key, v string) (bool, error) {
	switch v {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("option %s=%q: use true or false", key, v)
}

// String returns the canonical form of the target: options in a fixed
// order, defaults left out. ParseTarget(t.String()) yields t.
func (t Target) String() string {
	if t.Container != "" {
		return SchemeContainer + t.Container
	}
	q := t.Sandbox.query(true)
	if q == "" {
		return SchemeImage + t.Image
	}
	return SchemeImage + t.Image + "?" + q
}

// query encodes the options in knownOptions order. withIdentity includes
// name, persist and shared, which do not change what the sandbox is.
func (o SandboxOptions) query(withIdentity bool) string {
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+url.QueryEscape(v)) }
	if o.Network != "" {
		add("network", o.Network)
	}
	if o.ReadOnly {
		add("readonly", "true")
	}
	if o.Workspace != "" {
		add("workspace", o.Workspace)
	}
	if o.User != "" {
		add("user", o.User)
	}
	if o.Memory != 0 {
		add("memory", strconv.FormatInt(o.Memory, 10))
	}
	if o.CPUs != 0 {
		add("cpus", strconv.FormatFloat(o.CPUs, 'f', -1, 64))
	}
	if o.Pids != 0 {
		add("pids", strconv.FormatInt(o.Pids, 10))
	}
	if withIdentity && o.Persist {
		add("persist", "true")
	}
	if withIdentity && o.Shared {
		add("shared", "true")
	}
	if withIdentity && o.Name != "" {
		add("name", o.Name)
	}
	return strings.Join(parts, "&")
}

// configHash identifies what a sandbox is (image and every option that
// shapes the container), so a container found by name is re-used only when
// it was created for the same target.
func (t Target) configHash() string {
	sum := sha256.Sum256([]byte(t.Image + "\x00" + t.Sandbox.query(false)))
	return hex.EncodeToString(sum[:8])
}

// containerName is the sandbox container's name: the name= option, or one
// derived from the owner and the target so that a restarted supervisor with
// the same owner finds the sandbox it created, and a supervisor with
// another owner (another daemon) gets a sandbox of its own.
func (t Target) containerName(owner string) string {
	if t.Sandbox.Name != "" {
		return t.Sandbox.Name
	}
	sum := sha256.Sum256([]byte(owner + "\x00" + t.Image + "\x00" + t.Sandbox.query(false)))
	return "corral-" + hex.EncodeToString(sum[:6])
}
