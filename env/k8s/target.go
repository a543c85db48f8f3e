package k8s

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Target schemes.
const (
	SchemePod     = "k8s://"     // an existing pod
	SchemeSandbox = "k8s-pod://" // a sandbox pod corral creates
)

// DefaultStartTimeout bounds how long a sandbox pod may take to run (image
// pull, scheduling, container start) before Open reports why it does not.
const DefaultStartTimeout = 2 * time.Minute

// Target is a parsed k8s:// or k8s-pod:// target. Pod is set for an
// existing pod; Image for a sandbox pod.
type Target struct {
	// Context is the kubeconfig context; "" means the current one.
	Context string
	// Namespace is the pod's namespace; "" (k8s-pod:// only) means the
	// context's.
	Namespace string
	// Pod and Container name an existing pod (k8s://); Container "" means
	// the pod's only container, or its default one.
	Pod, Container string

	// Image and the fields below describe a sandbox pod (k8s-pod://).
	Image          string
	CPU, Memory    string            // requests and limits, Kubernetes quantities
	ServiceAccount string            // "" means none is mounted
	NodeSelector   map[string]string // scheduling constraints
	Pull           string            // Always, IfNotPresent or Never; "" means IfNotPresent
	StartTimeout   time.Duration
	// Persist keeps the pod when the backend is closed (the next Open of
	// the same owner finds it again), as docker-image://…?persist=true.
	Persist bool
}

// ParseTarget parses k8s://NAMESPACE/POD[/CONTAINER][?context=NAME] and
// k8s-pod://IMAGE[?namespace=&cpu=&memory=&service-account=&node-selector=K=V,…&pull=&start-timeout=&persist=&context=].
func ParseTarget(target string) (Target, error) {
	switch {
	case strings.HasPrefix(target, SchemePod):
		return parsePod(target)
	case strings.HasPrefix(target, SchemeSandbox):
		return parseSandbox(target)
	}
	return Target{}, fmt.Errorf("k8s: target %q: use %sNAMESPACE/POD[/CONTAINER] or %sIMAGE[?options]", short(target), SchemePod, SchemeSandbox)
}

func parsePod(target string) (Target, error) {
	rest, query, _ := strings.Cut(strings.TrimPrefix(target, SchemePod), "?")
	var t Target
	if err := parseQuery(query, []string{"context"}, func(k, v string) error {
		t.Context = v
		return nil
	}); err != nil {
		return Target{}, fmt.Errorf("k8s: target %q: %w", short(target), err)
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return Target{}, fmt.Errorf("k8s: target %q: write %sNAMESPACE/POD[/CONTAINER]", short(target), SchemePod)
	}
	t.Namespace, t.Pod = parts[0], parts[1]
	if len(parts) == 3 {
		t.Container = parts[2]
	}
	if errs := validation.IsDNS1123Label(t.Namespace); len(errs) > 0 {
		return Target{}, fmt.Errorf("k8s: target %q: namespace %q: %s", short(target), short(t.Namespace), errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(t.Pod); len(errs) > 0 {
		return Target{}, fmt.Errorf("k8s: target %q: pod %q: %s", short(target), short(t.Pod), errs[0])
	}
	if t.Container != "" {
		if errs := validation.IsDNS1123Label(t.Container); len(errs) > 0 {
			return Target{}, fmt.Errorf("k8s: target %q: container %q: %s", short(target), short(t.Container), errs[0])
		}
	}
	return t, nil
}

var sandboxOptions = []string{"namespace", "cpu", "cpus", "pids", "memory", "service-account", "node-selector", "pull", "start-timeout", "persist", "context"}

func parseSandbox(target string) (Target, error) {
	image, query, _ := strings.Cut(strings.TrimPrefix(target, SchemeSandbox), "?")
	t := Target{Image: image, StartTimeout: DefaultStartTimeout}
	if image == "" || strings.ContainsAny(image, " \t\n\"'\\") {
		return Target{}, fmt.Errorf("k8s: target %q: write %sIMAGE[?options], e.g. %sbusybox:1.36?cpu=1&memory=1Gi", short(target), SchemeSandbox, SchemeSandbox)
	}
	err := parseQuery(query, sandboxOptions, func(k, v string) error {
		switch k {
		case "context":
			t.Context = v
		case "namespace":
			if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
				return fmt.Errorf("namespace %q: %s", short(v), errs[0])
			}
			t.Namespace = v
		case "pids":
			return fmt.Errorf("pids: a pod takes no pids limit of its own (the kubelet's podPidsLimit sets one for every pod); leave it out")
		case "cpu", "cpus", "memory":
			// cpus is corral's word (--cpus, docker-image://?cpus=): a
			// number of cores, which a Kubernetes quantity reads as such.
			if _, err := resource.ParseQuantity(v); err != nil {
				return fmt.Errorf("%s %q is not a Kubernetes quantity (e.g. cpus=1.5, cpu=500m, memory=1Gi)", k, short(v))
			}
			if k != "memory" {
				if t.CPU != "" {
					return fmt.Errorf("cpu and cpus say the same: give one")
				}
				t.CPU = v
			} else {
				t.Memory = v
			}
		case "service-account":
			if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
				return fmt.Errorf("service-account %q: %s", short(v), errs[0])
			}
			t.ServiceAccount = v
		case "node-selector":
			t.NodeSelector = map[string]string{}
			for kv := range strings.SplitSeq(v, ",") {
				key, val, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("node-selector %q: write KEY=VALUE[,KEY=VALUE…]", short(v))
				}
				if errs := validation.IsQualifiedName(key); len(errs) > 0 {
					return fmt.Errorf("node-selector key %q: %s", short(key), errs[0])
				}
				if errs := validation.IsValidLabelValue(val); len(errs) > 0 {
					return fmt.Errorf("node-selector value %q: %s", short(val), errs[0])
				}
				t.NodeSelector[key] = val
			}
		case "pull":
			switch strings.ToLower(v) {
			case "always":
				t.Pull = "Always"
			case "never":
				t.Pull = "Never"
			case "if-not-present", "ifnotpresent":
				t.Pull = "IfNotPresent"
			default:
				return fmt.Errorf("pull %q: use always, if-not-present or never", short(v))
			}
		case "persist":
			switch v {
			case "true", "1":
				t.Persist = true
			case "false", "0":
			default:
				return fmt.Errorf("persist %q: use true or false", short(v))
			}
		case "start-timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("start-timeout %q: write a duration such as 90s or 5m", short(v))
			}
			t.StartTimeout = d
		}
		return nil
	})
	if err != nil {
		return Target{}, fmt.Errorf("k8s: target %q: %w", short(target), err)
	}
	return t, nil
}

// parseQuery calls set for each option of query, refusing unknown and
// repeated ones.
func parseQuery(query string, known []string, set func(k, v string) error) error {
	if query == "" {
		return nil
	}
	values, err := url.ParseQuery(query)
	if err != nil {
		return fmt.Errorf("options %q: %w", short(query), err)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return fmt.Errorf("unknown option %q; known options: %s", short(k), strings.Join(known, ", "))
		}
		if len(values[k]) != 1 {
			return fmt.Errorf("option %q given %d times", k, len(values[k]))
		}
		if err := set(k, values[k][0]); err != nil {
			return err
		}
	}
	return nil
}

// configHash identifies a sandbox pod's configuration: a pod found under a
// sandbox's name is re-used only when it was made from the same options.
func (t Target) configHash() string {
	var b strings.Builder
	fmt.Fprintf(&b, "image=%s\ncpu=%s\nmemory=%s\nsa=%s\npull=%s\n", t.Image, t.CPU, t.Memory, t.ServiceAccount, t.Pull)
	keys := make([]string, 0, len(t.NodeSelector))
	for k := range t.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "node=%s=%s\n", k, t.NodeSelector[k])
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:6])
}

// short keeps an echoed input to one short line.
func short(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
