package plugins

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/corralhq/corral/env"
	"github.com/corralhq/corral/plugins/internal/wire"
	pb "github.com/corralhq/corral/plugins/proto"
)

// BinaryPrefix starts the file name of every backend plugin.
const BinaryPrefix = "corral-backend-"

// PathEnv lists plugin directories, colon-separated, searched before
// DefaultDir.
const PathEnv = "CORRAL_PLUGIN_PATH"

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidName reports whether name can name a plugin: [a-z0-9][a-z0-9_-]{0,63}.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// ErrNoPlugin is returned (wrapped) when no plugin of a name is installed.
var ErrNoPlugin = errors.New("plugins: no such plugin")

// Found is a discovered plugin binary.
type Found struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// DefaultDir is ~/.local/share/corral/plugins ("" without a home).
func DefaultDir() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".local", "share", "corral", "plugins")
}

// dirs returns the directories searched, in order: Dirs when set, else
// $CORRAL_PLUGIN_PATH's, DefaultDir() and the running executable's.
func (o Options) dirs() []string {
	if o.Dirs != nil {
		return o.Dirs
	}
	var out []string
	for _, d := range strings.Split(os.Getenv(PathEnv), ":") {
		if d != "" {
			out = append(out, d)
		}
	}
	if d := DefaultDir(); d != "" {
		out = append(out, d)
	}
	// Last, corral's own directory: plugins that ship with corral
	// (corral-backend-k8s) are installed beside it by make build and go
	// install.
	if exe, err := os.Executable(); err == nil {
		if d := filepath.Dir(exe); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// Discover lists the plugins in the plugin directories: executables named
// corral-backend-NAME. When two directories hold the same NAME, the
// earlier directory wins. Missing directories are skipped.
func Discover(opts Options) ([]Found, error) {
	seen := map[string]bool{}
	var out []Found
	for _, dir := range opts.dirs() {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("plugins: read plugin directory %q: %w", dir, err)
		}
		for _, de := range entries {
			name, ok := strings.CutPrefix(de.Name(), BinaryPrefix)
			if !ok || !ValidName(name) || seen[name] {
				continue
			}
			path := filepath.Join(dir, de.Name())
			if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
				continue
			}
			seen[name] = true
			out = append(out, Found{Name: name, Path: path})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Find returns the plugin called name, or an error matching ErrNoPlugin
// that lists where it was looked for.
func Find(name string, opts Options) (Found, error) {
	if !ValidName(name) {
		return Found{}, fmt.Errorf("plugins: invalid plugin name %q: must match [a-z0-9][a-z0-9_-]{0,63}", name)
	}
	dirs := opts.dirs()
	for _, dir := range dirs {
		path := filepath.Join(dir, BinaryPrefix+name)
		fi, err := os.Stat(path)
		if err != nil {
			continue
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return Found{}, fmt.Errorf("plugins: %s is not an executable file", path)
		}
		return Found{Name: name, Path: path}, nil
	}
	return Found{}, fmt.Errorf("%w: no %s%s in %s (set %s or install it in %s)",
		ErrNoPlugin, BinaryPrefix, name, strings.Join(dirs, ":"), PathEnv, DefaultDir())
}

// ErrRefused is returned (wrapped) for a plugin binary corral will not run:
// one that someone else could have replaced, or whose checksum does not
// match its pin.
var ErrRefused = errors.New("plugins: refusing plugin")

// lsMode formats m as ls -l does: "drwxrwxr-x" for a directory.
func lsMode(m fs.FileMode) string {
	return (m & (fs.ModeType | fs.ModePerm)).String()
}

// Runnable returns an error matching ErrRefused when corral would refuse
// to start f (a binary someone else could have replaced), for a caller that
// runs a plugin binary outside the plugin protocol (corral doctor runs
// corral-backend-k8s check).
func Runnable(f Found) error { return checkOwnership(f.Path) }

// checkOwnership refuses a plugin binary that someone other than root or
// the current user could have replaced: the file (after symlinks) and its
// directory must be owned by root or us and not writable by group or
// others. Running such a binary would hand that someone our privileges.
func checkOwnership(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("plugins: resolve %s: %w", path, err)
	}
	uid := uint32(os.Getuid())
	for _, p := range []string{real, filepath.Dir(real)} {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("plugins: check %s: %w", p, err)
		}
		if owner, ok := fileOwner(fi); ok && owner != 0 && owner != uid {
			return fmt.Errorf("%w %s: %s is owned by uid %d, not by root or the current user (uid %d)", ErrRefused, path, p, owner, uid)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%w %s: %s is writable by group or others (mode %s); run chmod go-w %s", ErrRefused, path, p, lsMode(fi.Mode()), p)
		}
	}
	return nil
}

// Info is what a plugin says about itself, with where it was found.
type Info struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	Version     string `json:"version,omitempty"`
	Description string `json:"description,omitempty"`
	Protocols   []int  `json:"protocols,omitempty"`
	// Capabilities are what the plugin states about its Environments
	// (sdk.Plugin.Capabilities); nil when it states none.
	Capabilities *env.Capabilities `json:"capabilities,omitempty"`
}

// Probe starts the plugin f, asks for its Info and stops it: the health
// check of `corral backends`. An error says why the plugin is unusable
// (refused binary, failed handshake, crash).
func Probe(ctx context.Context, f Found, opts Options) (Info, error) {
	opts = opts.withDefaults()
	info := Info{Name: f.Name, Path: f.Path}
	c, err := startPlugin(ctx, f, opts, 0)
	if err != nil {
		return info, err
	}
	defer c.kill()
	resp, err := c.rpc.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return info, wire.FromStatus("plugin "+f.Name+": info", err)
	}
	info.Version, info.Description = resp.GetVersion(), resp.GetDescription()
	if c := resp.GetCapabilities(); c != nil {
		caps := wire.CapsFromProto(c)
		info.Capabilities = &caps
	}
	for _, v := range resp.GetProtocolVersions() {
		info.Protocols = append(info.Protocols, int(v))
	}
	if resp.GetName() != f.Name {
		return info, fmt.Errorf("plugin %s: calls itself %q: rename the binary %s%s or fix the plugin", f.Path, resp.GetName(), BinaryPrefix, resp.GetName())
	}
	return info, nil
}
