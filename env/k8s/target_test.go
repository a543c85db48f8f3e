package k8s

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTarget(t *testing.T) {
	got, err := ParseTarget("k8s://ci/web-0/app?context=prod")
	require.NoError(t, err)
	assert.Equal(t, Target{Context: "prod", Namespace: "ci", Pod: "web-0", Container: "app"}, got)

	got, err = ParseTarget("k8s://ci/web-0")
	require.NoError(t, err)
	assert.Equal(t, Target{Namespace: "ci", Pod: "web-0"}, got)

	got, err = ParseTarget("k8s-pod://registry.example:5000/team/img:1.2?namespace=ci&cpu=500m&memory=1Gi&service-account=builder&node-selector=pool=agents,zone=a&pull=never&start-timeout=90s")
	require.NoError(t, err)
	assert.Equal(t, Target{
		Namespace: "ci", Image: "registry.example:5000/team/img:1.2", CPU: "500m", Memory: "1Gi", ServiceAccount: "builder",
		NodeSelector: map[string]string{"pool": "agents", "zone": "a"}, Pull: "Never", StartTimeout: 90 * time.Second,
	}, got)

	got, err = ParseTarget("k8s-pod://busybox")
	require.NoError(t, err)
	assert.Equal(t, DefaultStartTimeout, got.StartTimeout)
	assert.Empty(t, got.Namespace, "the context's namespace")

	for _, bad := range []string{
		"k8s://", "k8s://ci", "k8s://ci/a/b/c", "k8s://CI/pod", "k8s://ci/po_d", "k8s://ci/pod?bogus=1",
		"k8s-pod://", "k8s-pod://img?cpu=lots", "k8s-pod://img?memory=1Q", "k8s-pod://img?node-selector=novalue",
		"k8s-pod://img?pull=sometimes", "k8s-pod://img?start-timeout=-1s", "k8s-pod://img?cpu=1&cpu=2",
		"k8s-pod://img with space", "docker://x",
	} {
		_, err := ParseTarget(bad)
		assert.Error(t, err, bad)
	}
	_, err = ParseTarget("k8s-pod://img?namespace=" + strings.Repeat("x", 5000))
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 400, "an error never echoes a large input")
}

// TestPodName: one name per owner and configuration, valid in Kubernetes,
// and another owner never gets the same.
func TestPodName(t *testing.T) {
	a, _ := ParseTarget("k8s-pod://busybox?cpu=1")
	b, _ := ParseTarget("k8s-pod://busybox?cpu=2")
	assert.Equal(t, podName("me", a), podName("me", a))
	assert.NotEqual(t, podName("me", a), podName("me", b))
	assert.NotEqual(t, podName("me", a), podName("you", a))
	assert.Regexp(t, `^corral-[0-9a-f]{10}-[0-9a-f]{8}$`, podName("me", a))
}

// TestSandboxLimitOptions: cpus (corral's word, cores) sets what cpu sets;
// both at once, and a pids limit no pod can take, are refused saying why.
func TestSandboxLimitOptions(t *testing.T) {
	a, err := ParseTarget("k8s-pod://busybox?cpus=1.5&memory=2Gi")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseTarget("k8s-pod://busybox?cpu=1.5&memory=2Gi")
	if err != nil {
		t.Fatal(err)
	}
	if a.CPU != "1.5" || a.CPU != b.CPU || a.Memory != "2Gi" {
		t.Errorf("cpus=1.5 gives CPU %q (cpu=1.5 gives %q), memory %q", a.CPU, b.CPU, a.Memory)
	}
	for target, want := range map[string]string{
		"k8s-pod://busybox?cpu=1&cpus=1": "give one",
		"k8s-pod://busybox?pids=512":     "podPidsLimit",
		"k8s-pod://busybox?cpus=lots":    "not a Kubernetes quantity",
	} {
		if _, err := ParseTarget(target); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTarget(%q) = %v, want an error saying %q", target, err, want)
		}
	}
}
